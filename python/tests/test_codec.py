"""The wire codec against the golden vectors of protocol/vectors (both directions), and its stream rules."""

from __future__ import annotations

import pathlib
import re
from typing import Dict, List, Tuple

import pytest

from notifyd import _wire as w
from notifyd.errors import ErrorCode, ProtocolError

VECTORS = pathlib.Path(__file__).resolve().parents[2] / "protocol" / "vectors"

LEVEL = b'{"level":17}'
LOW = "org.example.battery.low"

# Every valid vector with the message its header comments list (written from those comments, not from decoding).
EXPECTED: Dict[str, w.Message] = {
    "hello.hex": w.Hello(1, 0, "notifyctl"),
    "subscribe.hex": w.Subscribe(1, 7, 0, 0, 0, LOW),
    "subscribe-unicode-name.hex": w.Subscribe(2, 8, 0, 0, 0, "de.beispiel.größe"),
    "subscribe-pattern-queue.hex": w.Subscribe(4, 9, 1, 1, 100, "org.example.>"),
    "subscribe-states.hex": w.Subscribe(5, 10, 3, 0, 0, "org.example.battery.*"),
    "subscribe-marks-retained.hex": w.Subscribe(6, 11, 4, 0, 0, "org.example.>"),
    "unsubscribe.hex": w.Unsubscribe(3, 8),
    "post.hex": w.Post(5, 0, "org.example.session.locked", b""),
    "post-ack.hex": w.Post(2, 1, LOW, LEVEL),
    "post-retain.hex": w.Post(10, 2, LOW, LEVEL),
    "ping.hex": w.Ping(9),
    "set-state.hex": w.SetState(11, 4294967338, "org.example.battery.level"),
    "get-state.hex": w.GetState(12, "org.example.battery.level"),
    "suspend.hex": w.Suspend(14),
    "resume.hex": w.Resume(15),
    "query.hex": w.Query(16, 2, "org.example.>"),
    "welcome.hex": w.Welcome(1, 4242, bytes.fromhex("00112233445566778899aabbccddeeff"), 255, 65536, 131072, 65536,
                             "notifyd 0.1.0"),
    "ok.hex": w.Ok(1),
    "posted.hex": w.Posted(2, 42, 1),
    "pong.hex": w.Pong(9),
    "notification.hex": w.NotificationFrame(42, 1234, 1000, 100, LOW, LEVEL),
    "overflow.hex": w.Overflow(9, 300),
    "overflow-connection.hex": w.Overflow(0, 2),
    "state.hex": w.State(12, 1, 4294967338),
    "state-unset.hex": w.State(13, 0, 0),
    "notification-merged.hex": w.NotificationMerged(5, 47, 1234, 1000, 100, LOW, LEVEL),
    "retained.hex": w.Retained(4, 42, 1234, 1000, 100, LOW, LEVEL),
    "retained-marked.hex": w.Retained(0, 43, 1234, 1000, 100, LOW, LEVEL),
    "query-result.hex": w.QueryResult(16, b'[{"has_retained":true,"name":"org.example.battery.low","subscribers":1}]'),
    "query-result-part.hex": w.QueryResultPart(16, b'[{"has_retained":false,"name":"a.b","subscribers":2}]'),
    "state-changed.hex": w.StateChanged(0, 0, 4294967338, 1234, 1000, 100, "org.example.battery.level"),
    "state-changed-current.hex": w.StateChanged(5, 1, 17, 0, 0, 0, "org.example.battery.level"),
    "goodbye.hex": w.Goodbye(1000, "notifyd is shutting down"),
    "error.hex": w.ErrorFrame(6, 7, 0, "invalid name 'a..b'"),
    "error-fatal.hex": w.ErrorFrame(0, 4, 1, "first frame must be HELLO"),
    "error-unknown-code.hex": w.ErrorFrame(11, 200, 0, ""),
    "error-permission-denied.hex": w.ErrorFrame(
        17, 14, 0, "permission denied: only uid 1000 and root may post names under 'user.1000.' (built-in rule); "
                   "you are uid 1001"),
}


def read_vector(path: pathlib.Path) -> Tuple[bytes, Dict[str, str]]:
    """The bytes and metadata of a vector file (protocol/vectors/README.md, File format)."""
    hexdigits: List[str] = []
    meta: Dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        data, _, comment = line.partition("#")
        hexdigits.append(re.sub(r"\s+", "", data))
        found = re.match(r"\s*(direction|expect-error|max-frame-length)\s*:\s*(\S+)", comment)
        if found:
            meta[found.group(1)] = found.group(2)
    return bytes.fromhex("".join(hexdigits)), meta


ALL = sorted(p.name for p in VECTORS.glob("*.hex"))
VALID = [name for name in ALL if not name.startswith("invalid-")]
INVALID = [name for name in ALL if name.startswith("invalid-")]


def test_every_vector_is_covered() -> None:
    assert len(ALL) >= 40, f"the vectors directory looks wrong: {VECTORS}"
    assert sorted(VALID) == sorted(EXPECTED), "a valid vector has no expected message here (or vice versa)"


@pytest.mark.parametrize("name", VALID)
def test_valid_vector_decodes_and_encodes(name: str) -> None:
    data, meta = read_vector(VECTORS / name)
    from_daemon = meta["direction"] == "daemon-to-client"
    decoder = w.FrameDecoder(from_daemon=from_daemon, max_frame_length=int(meta.get("max-frame-length", 131072)))
    messages = decoder.feed(data)
    decoder.end_of_stream()
    assert messages == [EXPECTED[name]]
    assert EXPECTED[name].encode() == data
    # Fed one byte at a time, the result is the same.
    byte_decoder = w.FrameDecoder(from_daemon=from_daemon, max_frame_length=131072)
    decoded = [m for i in range(len(data)) for m in byte_decoder.feed(data[i:i + 1])]
    assert decoded == [EXPECTED[name]]


@pytest.mark.parametrize("name", INVALID)
def test_invalid_vector_is_rejected_with_its_code(name: str) -> None:
    data, meta = read_vector(VECTORS / name)
    expected = ErrorCode.from_wire_name(meta["expect-error"])
    for chunk in (len(data), 1):
        decoder = w.FrameDecoder(from_daemon=meta["direction"] == "daemon-to-client",
                                 max_frame_length=int(meta.get("max-frame-length", 131072)))
        with pytest.raises(ProtocolError) as caught:
            for i in range(0, len(data), chunk):
                decoder.feed(data[i:i + chunk])
            decoder.end_of_stream()
        assert caught.value.code == expected, caught.value


def test_oversized_length_is_rejected_on_the_prefix_alone() -> None:
    decoder = w.FrameDecoder(from_daemon=True, max_frame_length=100)
    with pytest.raises(ProtocolError) as caught:
        decoder.feed((101).to_bytes(4, "big"))
    assert caught.value.code == ErrorCode.FRAME_TOO_LARGE
    # Exactly the limit is allowed (the body is simply awaited).
    assert w.FrameDecoder(from_daemon=True, max_frame_length=100).feed((100).to_bytes(4, "big")) == []


def test_decoder_refuses_input_after_an_error() -> None:
    decoder = w.FrameDecoder(from_daemon=True)
    with pytest.raises(ProtocolError):
        decoder.feed(b"\x00\x00\x00\x00")
    with pytest.raises(ProtocolError):
        decoder.feed(w.Ok(1).encode())


def test_several_frames_in_one_read_and_split_across_reads() -> None:
    stream = w.Ok(1).encode() + w.NotificationFrame(5, 1, 2, 3, "a.b", b"x" * 300).encode() + w.Pong(2).encode()
    decoder = w.FrameDecoder(from_daemon=True)
    first = decoder.feed(stream[:20])
    rest = decoder.feed(stream[20:])
    assert first + rest == [w.Ok(1), w.NotificationFrame(5, 1, 2, 3, "a.b", b"x" * 300), w.Pong(2)]


def test_encoding_refuses_values_that_do_not_fit() -> None:
    with pytest.raises(ValueError):
        w.SetState(1, 1 << 64, "a").encode()
    with pytest.raises(ValueError):
        w.Ping(-1).encode()
