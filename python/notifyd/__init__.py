"""notifyd: a pure-Python client for the notifyd cross-process notification daemon.

Synchronous::

    import notifyd
    with notifyd.Center() as center:
        with center.observe("org.example.>", lambda n: print(n.name, n.text)):
            center.post("org.example.hello", "hi")

asyncio::

    async with await notifyd.AsyncCenter.connect() as center:
        async with center.notifications("org.example.>") as stream:
            async for n in stream:
                print(n.name, n.payload)

The module-level functions (:func:`post`, :func:`get_state`, :func:`set_state`, :func:`observe`) use one
process-wide :class:`Center` on the default socket, made on first use (:func:`default_center`).
"""

from __future__ import annotations

import os
import threading
from typing import Any, Optional, TypeVar, Union, overload

from ._aio import AsyncCenter, NotificationStream
from ._center import READER_THREAD, Callback, Center, Executor, Observation, Payload
from ._model import (
    ConnectionEvent, DaemonInfo, EventKind, Notification, Policy, PolicyKind, PostReceipt, Sender,
)
from ._paths import DaemonUser, default_socket_path
from .errors import (
    CenterClosed, ConnectionClosedByDaemon, ConnectionLost, DaemonNotFound, DuplicateSubscription, ErrorCode,
    InvalidName, InvalidRequest, NotConnected, NotifydError, NotifydTimeout, PayloadTooLarge, PermissionDenied,
    ProtocolError, QuotaExceeded, RequestRejected, SlowConsumer, TooManySubscriptions, UnknownSubscription,
    UnsupportedFlags, UntrustedDaemon,
)
from . import typed
from .names import is_valid_name, is_valid_pattern, matches, validate_name, validate_pattern

__version__ = "0.1.0"

__all__ = [
    "AsyncCenter", "Callback", "Center", "CenterClosed", "ConnectionClosedByDaemon", "ConnectionEvent",
    "ConnectionLost", "DaemonInfo", "DaemonNotFound", "DaemonUser", "DuplicateSubscription", "ErrorCode",
    "EventKind", "Executor", "InvalidName", "InvalidRequest", "NotConnected", "Notification", "NotificationStream",
    "NotifydError", "NotifydTimeout", "Observation", "Payload", "PayloadTooLarge", "PermissionDenied", "Policy",
    "PolicyKind", "PostReceipt", "ProtocolError", "QuotaExceeded", "READER_THREAD", "RequestRejected", "Sender",
    "SlowConsumer", "TooManySubscriptions", "UnknownSubscription", "UnsupportedFlags", "UntrustedDaemon",
    "default_center", "default_socket_path", "get_state", "typed", "is_valid_name", "is_valid_pattern", "matches",
    "observe", "post", "set_state", "validate_name", "validate_pattern",
]

T = TypeVar("T")

_default: Optional[Center] = None
_default_lock = threading.Lock()


def _reset_default_lock_after_fork() -> None:
    # A thread of the parent may have held it; the center itself is reset by its own fork handler.
    global _default_lock
    _default_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_default_lock_after_fork)


def default_center() -> Center:
    """The process-wide :class:`Center` on the default socket, connected on first use (and again after
    :meth:`Center.close`). Raises :class:`DaemonNotFound` / :class:`UntrustedDaemon` like ``Center()``."""
    global _default
    with _default_lock:
        if _default is None or _default.closed:
            _default = Center()
        return _default


def post(name: str, payload: Payload = b"", *, retain: bool = False) -> PostReceipt:
    """Posts on the default center and waits for the receipt (see :meth:`Center.post`)."""
    return default_center().post(name, payload, retain=retain)


@overload
def get_state(name: str) -> int: ...


@overload
def get_state(name: str, default: T) -> Union[int, T]: ...


def get_state(name: str, default: Any = 0) -> Any:
    """The state value of ``name`` on the default center, ``default`` (0) if never set."""
    return default_center().get_state(name, default)


def set_state(name: str, value: int) -> None:
    """Sets the state value of ``name`` on the default center."""
    default_center().set_state(name, value)


def observe(pattern: str, callback: Callback, *, policy: Policy = Policy(), current_value: bool = False,
            executor: Executor = None) -> Observation:
    """Observes ``pattern`` on the default center (see :meth:`Center.observe`)."""
    return default_center().observe(pattern, callback, policy=policy, current_value=current_value,
                                    executor=executor)
