"""The few protocol frames the Python benchmark tools send (protocol/PROTOCOL.md): one place for their layout."""
import struct


def frame(kind, body):
    """A whole frame: the u32 length of the type byte and body, the type byte, the body."""
    return struct.pack(">IB", len(body) + 1, kind) + body


def s16(data):
    """A u16-length-prefixed field (names, client names)."""
    return struct.pack(">H", len(data)) + data


def hello(name, flags=0):
    """HELLO, protocol version 1; flags 1 asks for the origin of relayed posts (PROTOCOL.md § 16)."""
    return frame(0x01, struct.pack(">HI", 1, flags) + s16(name))


# Added for restart_gap.py; the layouts are those of protocol/PROTOCOL.md § 6 and § 7.

def subscribe(request_id, subscription_id, pattern, policy=0, limit=0, flags=0):
    """SUBSCRIBE: policy 0 coalesce (limit 0), 1 queue (limit >= 1), 2 disconnect (limit 0); flags 1 send-retained."""
    return frame(0x02, struct.pack(">IIBBI", request_id, subscription_id, flags, policy, limit) + s16(pattern))


def unsubscribe(request_id, subscription_id):
    return frame(0x03, struct.pack(">II", request_id, subscription_id))


def post(request_id, name, payload, flags=0):
    """POST: flags 1 ack wanted, 2 retain."""
    return frame(0x04, struct.pack(">IB", request_id, flags) + s16(name) + struct.pack(">I", len(payload)) + payload)


def bare(kind, request_id):
    """A request made of its id alone: PING (0x05), SUSPEND (0x08), RESUME (0x09)."""
    return frame(kind, struct.pack(">I", request_id))


def set_state(request_id, name, value):
    return frame(0x06, struct.pack(">IQ", request_id, value) + s16(name))


def query(request_id, kind, argument=b""):
    """QUERY: kind 1 status, 2 names, 3 clients; | 0x80 to take a long answer in parts."""
    return frame(0x0A, struct.pack(">IB", request_id, kind) + s16(argument))


def notification(sequence, pid, uid, gid, name, payload):
    """The NOTIFICATION the daemon sends for a post: the same bytes for every recipient."""
    return frame(0x85, struct.pack(">QIII", sequence, pid, uid, gid) + s16(name) + struct.pack(">I", len(payload))
                 + payload)


def next_frame(buffer, offset=0):
    """(type, body after the type byte, offset after the frame) of the whole frame at offset, or None if incomplete."""
    if len(buffer) - offset < 4:
        return None
    length = struct.unpack_from(">I", buffer, offset)[0]
    if length == 0:
        raise ValueError("a frame of length 0")
    end = offset + 4 + length
    if len(buffer) < end:
        return None
    return buffer[offset + 4], bytes(buffer[offset + 5:end]), end
