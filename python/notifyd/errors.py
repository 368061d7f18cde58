"""Exceptions of the notifyd client: one base class, :class:`NotifydError`, and a subclass per failure.

The daemon's error codes (``protocol/PROTOCOL.md`` § 10.1) map to :class:`RequestRejected` subclasses through
:func:`error_for_code`; codes this version does not know still raise :class:`RequestRejected` (with ``code`` the raw
number), as § 7.7 requires. Failures that are about arguments also derive from the matching built-in exception
(``ValueError``, ``PermissionError``, ``TimeoutError``, ``ConnectionError``), so generic handlers work too.
"""

from __future__ import annotations

import enum
from typing import Dict, Optional, Type, Union


class ErrorCode(enum.IntEnum):
    """The error codes of protocol v1 (§ 10.1); the value is the wire code."""

    MALFORMED_FRAME = 1
    FRAME_TOO_LARGE = 2
    UNKNOWN_MESSAGE_TYPE = 3
    HANDSHAKE_REQUIRED = 4
    UNSUPPORTED_VERSION = 5
    UNEXPECTED_HELLO = 6
    INVALID_NAME = 7
    PAYLOAD_TOO_LARGE = 8
    UNKNOWN_SUBSCRIPTION = 9
    DUPLICATE_SUBSCRIPTION = 10
    TOO_MANY_SUBSCRIPTIONS = 11
    UNSUPPORTED_FLAGS = 12
    SLOW_CONSUMER = 13
    PERMISSION_DENIED = 14
    QUOTA_EXCEEDED = 15
    SHUTTING_DOWN = 16
    INTERNAL_ERROR = 17
    INVALID_REQUEST = 18
    UNAVAILABLE = 19

    @property
    def wire_name(self) -> str:
        """The code's name in the protocol, e.g. ``invalid-name``."""
        return self.name.lower().replace("_", "-")

    @classmethod
    def from_wire_name(cls, name: str) -> "ErrorCode":
        """The code whose wire name is ``name`` (``KeyError`` if none)."""
        return cls[name.upper().replace("-", "_")]


class NotifydError(Exception):
    """Base class of every error this package raises."""

    def __init__(self, message: str, code: Union[ErrorCode, int, None] = None) -> None:
        """``message`` is for people; ``code`` is the daemon's error code when the daemon reported the failure."""
        super().__init__(message)
        self.message = message
        #: The protocol error code (an :class:`ErrorCode`, or a plain int for a code this version does not know).
        self.code: Union[ErrorCode, int, None] = code


# ---- connecting -------------------------------------------------------------------------------------------------


class DaemonNotFound(NotifydError, ConnectionError):
    """No daemon accepts connections at the socket path (nothing there, or nothing listening)."""

    def __init__(self, path: str, reason: str) -> None:
        """``path`` is the socket tried, ``reason`` why connecting failed."""
        super().__init__(f"cannot connect to notifyd at {path}: {reason} (is the daemon running? start it with "
                         f"'notifyd', or set NOTIFYD_SOCKET)")
        self.path = path
        self.reason = reason


class UntrustedDaemon(NotifydError, PermissionError):
    """The daemon runs as a user this process does not trust (``SO_PEERCRED``); nothing was sent to it."""

    def __init__(self, path: str, uid: int, own_uid: int) -> None:
        """``uid`` is the daemon's user, ``own_uid`` this process's."""
        super().__init__(f"refusing the daemon at {path}: it runs as uid {uid}, not as you (uid {own_uid}) or root, "
                         f"so another user may be posing as your daemon to read what you post. Remove that socket "
                         f"and its directory, or set NOTIFYD_DAEMON_UID={uid} if you trust that user")
        self.path = path
        self.uid = uid


class NotConnected(NotifydError, ConnectionError):
    """The center is between connections (it keeps reconnecting in the background)."""


class ConnectionLost(NotifydError, ConnectionError):
    """The connection ended before the daemon answered the request."""


class CenterClosed(NotifydError):
    """The center was closed."""


class NotifydTimeout(NotifydError, TimeoutError):
    """The daemon did not answer within the timeout."""


class ProtocolError(NotifydError):
    """The daemon sent bytes that break the protocol (or, decoding a client stream, the client did).

    ``code`` is the framing error of § 10.1 (``malformed-frame``, ``frame-too-large``, ``unknown-message-type``).
    """


# ---- the daemon rejected a request ------------------------------------------------------------------------------


class RequestRejected(NotifydError):
    """The daemon answered a request with ``ERROR``; ``code`` says why, ``message`` is the daemon's text."""


class InvalidName(RequestRejected, ValueError):
    """A name or pattern breaks the grammar (§ 8, § 8.1), is too long, or is process-local where not allowed."""


class PayloadTooLarge(RequestRejected, ValueError):
    """The payload is longer than the daemon's ``max_payload_length``."""


class UnknownSubscription(RequestRejected):
    """``UNSUBSCRIBE`` of a subscription id the connection does not hold."""


class DuplicateSubscription(RequestRejected):
    """``SUBSCRIBE`` with a subscription id already in use on the connection."""


class TooManySubscriptions(RequestRejected):
    """The connection already holds ``max_subscriptions`` subscriptions."""


class UnsupportedFlags(RequestRejected, ValueError):
    """A request had a reserved flag bit set."""


class PermissionDenied(RequestRejected, PermissionError):
    """The daemon's access control refused the request (§ 8.2)."""


class QuotaExceeded(RequestRejected):
    """A per-user quota of the daemon was reached (§ 11.2)."""


class InvalidRequest(RequestRejected, ValueError):
    """Well-formed but meaningless: a bad policy, ``RESUME`` without ``SUSPEND``, an unknown query kind."""


class ConnectionClosedByDaemon(RequestRejected, ConnectionError):
    """The daemon closed the connection with a fatal ``ERROR`` (slow consumer, shutting down, a protocol error…)."""


class SlowConsumer(ConnectionClosedByDaemon):
    """The daemon disconnected this client for reading too slowly under the ``disconnect`` policy (§ 9.4)."""


_BY_CODE: Dict[int, Type[RequestRejected]] = {
    ErrorCode.INVALID_NAME: InvalidName,
    ErrorCode.PAYLOAD_TOO_LARGE: PayloadTooLarge,
    ErrorCode.UNKNOWN_SUBSCRIPTION: UnknownSubscription,
    ErrorCode.DUPLICATE_SUBSCRIPTION: DuplicateSubscription,
    ErrorCode.TOO_MANY_SUBSCRIPTIONS: TooManySubscriptions,
    ErrorCode.UNSUPPORTED_FLAGS: UnsupportedFlags,
    ErrorCode.PERMISSION_DENIED: PermissionDenied,
    ErrorCode.QUOTA_EXCEEDED: QuotaExceeded,
    ErrorCode.INVALID_REQUEST: InvalidRequest,
    ErrorCode.SLOW_CONSUMER: SlowConsumer,
}


def error_for_code(code: int, message: str, closing: bool = False) -> RequestRejected:
    """The exception for a daemon ``ERROR`` with ``code`` and ``message`` (``closing``: its closing flag)."""
    known: Optional[ErrorCode]
    try:
        known = ErrorCode(code)
    except ValueError:
        known = None
    label = known.wire_name if known is not None else f"unknown error code {code}"
    cls = _BY_CODE.get(code)
    if cls is None or (closing and not issubclass(cls, ConnectionClosedByDaemon)):
        cls = ConnectionClosedByDaemon if closing else RequestRejected
    verb = "closed the connection" if closing else "rejected the request"
    return cls(f"notifyd {verb} ({label}): {message}", known if known is not None else code)
