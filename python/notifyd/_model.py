"""The values the API hands out: notifications, receipts, policies, connection events."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any, Optional, Type, TypeVar

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Sender:
    """Who posted a notification, as the daemon's kernel reported it for the poster's socket (``SO_PEERCRED``).

    The poster cannot forge these; the pid may belong to a process that has exited since it connected.
    For a process-local (``self.``) notification they are this process's own ids.
    """

    pid: int
    uid: int
    gid: int


@dataclasses.dataclass(frozen=True)
class Notification:
    """One notification delivered to an observation.

    ``sequence`` is the daemon-wide post number (0 for process-local names); gaps are normal. ``merged_count``
    says how many earlier notifications on this name the daemon merged into this one under the ``coalesce``
    policy; ``dropped_before`` how many the ``queue`` policy dropped just before it for this observation (from
    ``OVERFLOW``); ``retained`` marks a name's retained value sent because the observation asked for the current
    value (its sequence is the old one of that post).
    """

    name: str
    payload: bytes
    sequence: int
    sender: Sender
    merged_count: int = 0
    dropped_before: int = 0
    retained: bool = False

    @property
    def text(self) -> str:
        """The payload decoded as UTF-8 (``UnicodeDecodeError`` if it is not UTF-8)."""
        return self.payload.decode("utf-8")

    def json(self) -> Any:
        """The payload parsed as one JSON text (PROTOCOL § 12 typed payloads); ``ValueError`` if it is not JSON."""
        return json.loads(self.payload.decode("utf-8"))

    def decode(self, cls: Type[T]) -> T:
        """The payload as the dataclass ``cls`` (§ 12 typed payload, :func:`notifyd.typed.decode`).

        Raises :class:`notifyd.typed.TypedPayloadError` when it does not decode.
        """
        from .typed import decode
        return decode(cls, self.payload)


@dataclasses.dataclass(frozen=True)
class PostReceipt:
    """The daemon's acknowledgement of a post: its sequence number and how many connections it was queued to."""

    sequence: int
    delivered_count: int


@dataclasses.dataclass(frozen=True)
class DaemonInfo:
    """What the daemon announced in ``WELCOME`` for the current connection (§ 7.1)."""

    pid: int
    instance_id: bytes
    max_name_length: int
    max_payload_length: int
    max_frame_length: int
    max_subscriptions: int
    server_name: str

    @property
    def instance_id_hex(self) -> str:
        """The instance id as 32 lowercase hex digits in wire order (changes when the daemon restarts)."""
        return self.instance_id.hex()


class PolicyKind(enum.IntEnum):
    """The wire values of the delivery policies of ``SUBSCRIBE`` (§ 6.2, § 9.4)."""

    COALESCE = 0
    QUEUE = 1
    DISCONNECT = 2


@dataclasses.dataclass(frozen=True)
class Policy:
    """What the daemon does with an observation's notifications while this process cannot take them in time
    (it reads too slowly, or the center is suspended), § 9.4.

    - ``Policy.coalesce()`` (the default): keep the latest per name; ``Notification.merged_count`` says how many
      were merged into it.
    - ``Policy.queue(n)``: keep up to ``n`` in order, drop the oldest beyond; ``Notification.dropped_before`` and a
      ``notifications_dropped`` connection event report the loss.
    - ``Policy.disconnect()``: the daemon closes the connection (``slow-consumer``); the center reconnects and
      resubscribes. While suspended, the daemon holds these like ``queue(1000)``.
    """

    kind: PolicyKind = PolicyKind.COALESCE
    limit: int = 0

    def __post_init__(self) -> None:
        if self.kind == PolicyKind.QUEUE:
            if not isinstance(self.limit, int) or not 1 <= self.limit <= 0xFFFFFFFF:
                raise ValueError(f"a queue policy needs a limit from 1 to 4294967295, not {self.limit!r}")
        elif self.limit != 0:
            raise ValueError(f"the {self.kind.name.lower()} policy takes no limit")

    @classmethod
    def coalesce(cls) -> "Policy":
        """Latest per name, with a merge count (the default)."""
        return cls(PolicyKind.COALESCE)

    @classmethod
    def queue(cls, limit: int) -> "Policy":
        """Up to ``limit`` (≥ 1) held in order; the oldest dropped and counted beyond."""
        return cls(PolicyKind.QUEUE, limit)

    @classmethod
    def disconnect(cls) -> "Policy":
        """Rather be disconnected (and resubscribe) than lose anything."""
        return cls(PolicyKind.DISCONNECT)

    @classmethod
    def parse(cls, text: str) -> "Policy":
        """``coalesce``, ``queue:N`` or ``disconnect``, as ``notifyctl listen --policy`` spells them."""
        if text == "coalesce":
            return cls.coalesce()
        if text == "disconnect":
            return cls.disconnect()
        if text.startswith("queue:") and text[6:].isdigit():
            return cls.queue(int(text[6:]))
        raise ValueError(f"unknown policy {text!r}: coalesce, queue:N or disconnect")

    def __str__(self) -> str:
        return f"queue:{self.limit}" if self.kind == PolicyKind.QUEUE else self.kind.name.lower()


class EventKind(enum.Enum):
    """The kinds of :class:`ConnectionEvent`."""

    CONNECTED = "connected"
    DISCONNECTED = "disconnected"
    NOTIFICATIONS_DROPPED = "notifications_dropped"
    REQUEST_REJECTED = "request_rejected"


@dataclasses.dataclass(frozen=True)
class ConnectionEvent:
    """Something that happened to a center's connection, handed to the listeners of ``add_event_listener``.

    - ``CONNECTED``: a handshake completed; ``daemon_restarted`` is true when the daemon's instance id differs from
      the previous connection's (state values, retained notifications and sequence numbers started afresh).
    - ``DISCONNECTED``: the connection ended; ``reason`` says why (``graceful`` when the daemon said GOODBYE).
    - ``NOTIFICATIONS_DROPPED``: the daemon dropped ``count`` notifications (``OVERFLOW``); ``pattern`` is the
      observation's pattern, ``None`` for the whole connection.
    - ``REQUEST_REJECTED``: a request nobody waited for failed (a fire-and-forget post, a resubscription after
      reconnecting); ``error`` is the exception.
    """

    kind: EventKind
    reason: str = ""
    daemon_restarted: bool = False
    graceful: bool = False
    count: int = 0
    pattern: Optional[str] = None
    error: Optional[Exception] = None
    daemon: Optional[DaemonInfo] = None
