"""The notifyd wire protocol, version 1 (``protocol/PROTOCOL.md`` § 2-7): frames, messages, a stream decoder.

Every message is a frozen dataclass whose fields are the wire fields in order; one table of layouts drives both
encoding and decoding, so the two cannot disagree. Decoding enforces every receiver rule of § 2-4: length 0 or
above the limit (``frame-too-large``), a type of the wrong direction or undefined (``unknown-message-type``), a
field that runs past the frame, bytes left over, invalid UTF-8 (``malformed-frame``).
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any, ClassVar, Dict, List, Optional, Tuple, Type, Union

from .errors import ErrorCode, ProtocolError

PROTOCOL_VERSION = 1
#: Every daemon accepts frames up to this ``length`` before ``WELCOME`` (§ 2).
MINIMUM_MAX_FRAME_LENGTH = 66_560
#: The daemon's default ``max_frame_length``.
DEFAULT_MAX_FRAME_LENGTH = 131_072
MAX_CLIENT_NAME_LENGTH = 255

# Field kinds of the layout tables.
U8, U16, U32, U64, B16, STR, PAYLOAD = "u8", "u16", "u32", "u64", "b16", "str", "payload"
_INTS = {U8: struct.Struct(">B"), U16: struct.Struct(">H"), U32: struct.Struct(">I"), U64: struct.Struct(">Q")}
_LENGTH = struct.Struct(">I")


class Message:
    """Base of every wire message; ``TYPE`` is its type byte, ``LAYOUT`` its fields' kinds in order."""

    TYPE: ClassVar[int]
    LAYOUT: ClassVar[Tuple[str, ...]]

    def encode(self) -> bytes:
        """The whole frame: length prefix, type byte, fields."""
        body = bytearray((self.TYPE,))
        for field, kind in zip(dataclasses.fields(self), self.LAYOUT):  # type: ignore[arg-type]
            _encode_field(body, kind, getattr(self, field.name), field.name)
        return _LENGTH.pack(len(body)) + bytes(body)


def _encode_field(out: bytearray, kind: str, value: Any, name: str) -> None:
    if kind in _INTS:
        try:
            out += _INTS[kind].pack(value)
        except struct.error:
            raise ValueError(f"{name} = {value!r} does not fit a {kind}") from None
    elif kind == B16:
        if len(value) != 16:
            raise ValueError(f"{name} must be 16 bytes")
        out += value
    elif kind == STR:
        data = value.encode("utf-8")
        if len(data) > 0xFFFF:
            raise ValueError(f"{name} is longer than 65,535 bytes")
        out += _INTS[U16].pack(len(data)) + data
    else:  # PAYLOAD
        data = bytes(value)
        if len(data) > 0xFFFFFFFF:
            raise ValueError(f"{name} is longer than 4 GiB")
        out += _LENGTH.pack(len(data)) + data


# ---- client -> daemon (§ 6) -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Hello(Message):
    """``HELLO`` (0x01), § 6.1."""

    TYPE = 0x01
    LAYOUT = (U16, U32, STR)
    version: int
    flags: int
    client_name: str


@dataclasses.dataclass(frozen=True)
class Subscribe(Message):
    """``SUBSCRIBE`` (0x02), § 6.2. ``flags`` bit 0: send-retained; ``policy`` 0 coalesce, 1 queue, 2 disconnect."""

    TYPE = 0x02
    LAYOUT = (U32, U32, U8, U8, U32, STR)
    request_id: int
    subscription_id: int
    flags: int
    policy: int
    queue_limit: int
    pattern: str


@dataclasses.dataclass(frozen=True)
class Unsubscribe(Message):
    """``UNSUBSCRIBE`` (0x03), § 6.3."""

    TYPE = 0x03
    LAYOUT = (U32, U32)
    request_id: int
    subscription_id: int


@dataclasses.dataclass(frozen=True)
class Post(Message):
    """``POST`` (0x04), § 6.4. ``flags`` bit 0: ack wanted, bit 1: retain."""

    TYPE = 0x04
    LAYOUT = (U32, U8, STR, PAYLOAD)
    request_id: int
    flags: int
    name: str
    payload: bytes


@dataclasses.dataclass(frozen=True)
class Ping(Message):
    """``PING`` (0x05), § 6.5: the ordering barrier."""

    TYPE = 0x05
    LAYOUT = (U32,)
    request_id: int


@dataclasses.dataclass(frozen=True)
class SetState(Message):
    """``SET_STATE`` (0x06), § 6.6."""

    TYPE = 0x06
    LAYOUT = (U32, U64, STR)
    request_id: int
    value: int
    name: str


@dataclasses.dataclass(frozen=True)
class GetState(Message):
    """``GET_STATE`` (0x07), § 6.7."""

    TYPE = 0x07
    LAYOUT = (U32, STR)
    request_id: int
    name: str


@dataclasses.dataclass(frozen=True)
class Suspend(Message):
    """``SUSPEND`` (0x08), § 6.8."""

    TYPE = 0x08
    LAYOUT = (U32,)
    request_id: int


@dataclasses.dataclass(frozen=True)
class Resume(Message):
    """``RESUME`` (0x09), § 6.9."""

    TYPE = 0x09
    LAYOUT = (U32,)
    request_id: int


@dataclasses.dataclass(frozen=True)
class Query(Message):
    """``QUERY`` (0x0A), § 6.10: ``kind`` 1 status, 2 names, 3 clients, ``| 0x80`` for an answer in parts."""

    TYPE = 0x0A
    LAYOUT = (U32, U8, STR)
    request_id: int
    kind: int
    argument: str


# ---- daemon -> client (§ 7) -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Welcome(Message):
    """``WELCOME`` (0x81), § 7.1."""

    TYPE = 0x81
    LAYOUT = (U16, U32, B16, U16, U32, U32, U32, STR)
    version: int
    daemon_pid: int
    instance_id: bytes
    max_name_length: int
    max_payload_length: int
    max_frame_length: int
    max_subscriptions: int
    server_name: str


@dataclasses.dataclass(frozen=True)
class Ok(Message):
    """``OK`` (0x82), § 7.2."""

    TYPE = 0x82
    LAYOUT = (U32,)
    request_id: int


@dataclasses.dataclass(frozen=True)
class Posted(Message):
    """``POSTED`` (0x83), § 7.3."""

    TYPE = 0x83
    LAYOUT = (U32, U64, U32)
    request_id: int
    sequence: int
    delivered_count: int


@dataclasses.dataclass(frozen=True)
class Pong(Message):
    """``PONG`` (0x84), § 7.4."""

    TYPE = 0x84
    LAYOUT = (U32,)
    request_id: int


@dataclasses.dataclass(frozen=True)
class NotificationFrame(Message):
    """``NOTIFICATION`` (0x85), § 7.5."""

    TYPE = 0x85
    LAYOUT = (U64, U32, U32, U32, STR, PAYLOAD)
    sequence: int
    sender_pid: int
    sender_uid: int
    sender_gid: int
    name: str
    payload: bytes


@dataclasses.dataclass(frozen=True)
class Overflow(Message):
    """``OVERFLOW`` (0x86), § 7.6: ``subscription_id`` 0 is the whole connection."""

    TYPE = 0x86
    LAYOUT = (U32, U64)
    subscription_id: int
    dropped_count: int


@dataclasses.dataclass(frozen=True)
class State(Message):
    """``STATE`` (0x87), § 7.9. ``flags`` bit 0: has_value."""

    TYPE = 0x87
    LAYOUT = (U32, U8, U64)
    request_id: int
    flags: int
    value: int

    @property
    def has_value(self) -> bool:
        """Whether the name has a state value (``flags`` bit 0)."""
        return bool(self.flags & 0x01)


@dataclasses.dataclass(frozen=True)
class Goodbye(Message):
    """``GOODBYE`` (0x88), § 7.8: the daemon is shutting down; the last frame."""

    TYPE = 0x88
    LAYOUT = (U32, STR)
    reconnect_after_ms: int
    reason: str


@dataclasses.dataclass(frozen=True)
class NotificationMerged(Message):
    """``NOTIFICATION_MERGED`` (0x89), § 7.10."""

    TYPE = 0x89
    LAYOUT = (U64, U64, U32, U32, U32, STR, PAYLOAD)
    merged_count: int
    sequence: int
    sender_pid: int
    sender_uid: int
    sender_gid: int
    name: str
    payload: bytes


@dataclasses.dataclass(frozen=True)
class Retained(Message):
    """``RETAINED`` (0x8A), § 7.11: part of the answer to the ``SUBSCRIBE`` with ``request_id``."""

    TYPE = 0x8A
    LAYOUT = (U32, U64, U32, U32, U32, STR, PAYLOAD)
    request_id: int
    sequence: int
    sender_pid: int
    sender_uid: int
    sender_gid: int
    name: str
    payload: bytes


@dataclasses.dataclass(frozen=True)
class QueryResult(Message):
    """``QUERY_RESULT`` (0x8B), § 7.12."""

    TYPE = 0x8B
    LAYOUT = (U32, PAYLOAD)
    request_id: int
    json: bytes


@dataclasses.dataclass(frozen=True)
class QueryResultPart(Message):
    """``QUERY_RESULT_PART`` (0x8C), § 7.13."""

    TYPE = 0x8C
    LAYOUT = (U32, PAYLOAD)
    request_id: int
    json: bytes


@dataclasses.dataclass(frozen=True)
class StateChanged(Message):
    """``STATE_CHANGED`` (0x8D), § 7.14: a watched state value; only a ``SUBSCRIBE`` with the states flag brings it.

    ``flags`` bit 0: a current value sent before that ``SUBSCRIBE``'s ``OK`` (``request_id`` is its id), not a
    change (``request_id`` 0). The sender fields are the setter's, all 0 for a current value.
    """

    TYPE = 0x8D
    LAYOUT = (U32, U8, U64, U32, U32, U32, STR)
    request_id: int
    flags: int
    value: int
    sender_pid: int
    sender_uid: int
    sender_gid: int
    name: str

    @property
    def is_current(self) -> bool:
        """Whether this is a current value rather than a change (``flags`` bit 0)."""
        return bool(self.flags & 0x01)


@dataclasses.dataclass(frozen=True)
class ErrorFrame(Message):
    """``ERROR`` (0x8F), § 7.7. ``flags`` bit 0: the daemon closes the connection after it."""

    TYPE = 0x8F
    LAYOUT = (U32, U16, U8, STR)
    request_id: int
    code: int
    flags: int
    message: str

    @property
    def closes_connection(self) -> bool:
        """Whether the closing flag is set (decided from the flag, never from the code, § 7.7)."""
        return bool(self.flags & 0x01)


ClientMessage = Union[Hello, Subscribe, Unsubscribe, Post, Ping, SetState, GetState, Suspend, Resume, Query]
ServerMessage = Union[
    Welcome, Ok, Posted, Pong, NotificationFrame, Overflow, State, Goodbye, NotificationMerged, Retained,
    QueryResult, QueryResultPart, StateChanged, ErrorFrame,
]

CLIENT_TYPES: Dict[int, Type[Message]] = {
    m.TYPE: m for m in (Hello, Subscribe, Unsubscribe, Post, Ping, SetState, GetState, Suspend, Resume, Query)
}
SERVER_TYPES: Dict[int, Type[Message]] = {
    m.TYPE: m
    for m in (Welcome, Ok, Posted, Pong, NotificationFrame, Overflow, State, Goodbye, NotificationMerged, Retained,
              QueryResult, QueryResultPart, StateChanged, ErrorFrame)
}


def decode_body(frame_type: int, body: bytes, from_daemon: bool = True) -> Message:
    """Decodes the fields after the type byte of one whole frame of the given direction.

    Raises :class:`ProtocolError` (``unknown-message-type`` or ``malformed-frame``) as § 10.2 orders the checks.
    """
    table = SERVER_TYPES if from_daemon else CLIENT_TYPES
    cls = table.get(frame_type)
    if cls is None:
        raise ProtocolError(f"message type 0x{frame_type:02x} is not a "
                            f"{'daemon-to-client' if from_daemon else 'client-to-daemon'} type of protocol v1",
                            ErrorCode.UNKNOWN_MESSAGE_TYPE)
    values: List[Any] = []
    offset = 0
    end = len(body)
    for kind in cls.LAYOUT:
        if kind in _INTS:
            size = _INTS[kind].size
            if offset + size > end:
                raise _malformed(cls, "an integer field runs past the end of the frame")
            values.append(_INTS[kind].unpack_from(body, offset)[0])
            offset += size
        elif kind == B16:
            if offset + 16 > end:
                raise _malformed(cls, "a 16-byte field runs past the end of the frame")
            values.append(bytes(body[offset:offset + 16]))
            offset += 16
        else:
            prefix = _INTS[U16] if kind == STR else _LENGTH
            if offset + prefix.size > end:
                raise _malformed(cls, "a length prefix runs past the end of the frame")
            n = prefix.unpack_from(body, offset)[0]
            offset += prefix.size
            if offset + n > end:
                raise _malformed(cls, f"a field of {n} bytes runs past the end of the frame")
            raw = bytes(body[offset:offset + n])
            offset += n
            if kind == STR:
                try:
                    values.append(raw.decode("utf-8"))  # strict: overlong, surrogates, > U+10FFFF all fail
                except UnicodeDecodeError:
                    raise _malformed(cls, "a string is not valid UTF-8") from None
            else:
                values.append(raw)
    if offset != end:
        raise _malformed(cls, f"{end - offset} bytes left over after the last field")
    return cls(*values)


def _malformed(cls: Type[Message], why: str) -> ProtocolError:
    return ProtocolError(f"malformed {cls.__name__} frame: {why}", ErrorCode.MALFORMED_FRAME)


class FrameDecoder:
    """Splits a byte stream into messages (§ 2 and § 14 step 3).

    ``feed`` returns every whole message the bytes complete; ``end_of_stream`` reports a stream that stopped inside
    a frame. The first error is final: the decoder refuses further input, as a receiver must not resynchronise.
    """

    def __init__(self, from_daemon: bool = True, max_frame_length: int = MINIMUM_MAX_FRAME_LENGTH) -> None:
        """``from_daemon`` picks the direction of the types accepted; ``max_frame_length`` the largest length."""
        self.from_daemon = from_daemon
        self.max_frame_length = max_frame_length
        self._buffer = bytearray()
        self._failed: Optional[ProtocolError] = None

    def feed(self, data: bytes) -> List[Message]:
        """Appends ``data`` and decodes every whole frame now buffered."""
        if self._failed is not None:
            raise self._failed
        self._buffer += data
        messages: List[Message] = []
        buffer = self._buffer
        offset = 0
        try:
            while len(buffer) - offset >= 4:
                length = _LENGTH.unpack_from(buffer, offset)[0]
                if length == 0 or length > self.max_frame_length:
                    raise ProtocolError(f"frame length {length} is outside 1...{self.max_frame_length}",
                                        ErrorCode.FRAME_TOO_LARGE)
                if len(buffer) - offset - 4 < length:
                    break
                start = offset + 4
                messages.append(decode_body(buffer[start], bytes(buffer[start + 1:start + length]), self.from_daemon))
                offset = start + length
        except ProtocolError as error:
            self._failed = error
            raise
        finally:
            del buffer[:offset]
        return messages

    def end_of_stream(self) -> None:
        """Raises ``malformed-frame`` if the stream stopped inside a frame (in its length prefix or body)."""
        if self._failed is not None:
            raise self._failed
        if self._buffer:
            self._failed = ProtocolError(f"the stream ended inside a frame ({len(self._buffer)} bytes of it)",
                                         ErrorCode.MALFORMED_FRAME)
            raise self._failed
