"""The few protocol frames the Python benchmark tools send (protocol/PROTOCOL.md): one place for their layout."""
import struct


def frame(kind, body):
    """A whole frame: the u32 length of the type byte and body, the type byte, the body."""
    return struct.pack(">IB", len(body) + 1, kind) + body


def s16(data):
    """A u16-length-prefixed field (names, client names)."""
    return struct.pack(">H", len(data)) + data


def hello(name):
    """HELLO, protocol version 1, no flags."""
    return frame(0x01, struct.pack(">HI", 1, 0) + s16(name))
