"""Typed payloads (PROTOCOL § 12): the documented example byte for byte, dates, Base64, errors, and interop with
notifyctl listen --json."""

from __future__ import annotations

import dataclasses
import datetime
import json
import subprocess
from typing import List, Optional

import pytest

import notifyd
from conftest import TIMEOUT, Collector, Daemon, notifyctl_binary
from notifyd import typed

UTC = datetime.timezone.utc


@dataclasses.dataclass
class BatteryLevel:
    percent: int
    charging: bool
    at: datetime.datetime


@dataclasses.dataclass
class Blob:
    data: bytes
    tags: List[str]
    note: Optional[str] = None
    inner: Optional[BatteryLevel] = None


def test_protocol_example_byte_for_byte() -> None:
    payload = typed.encode(BatteryLevel(42, True, datetime.datetime(2027, 1, 15, 8, 0, tzinfo=UTC)))
    assert payload == b'{"at":"2027-01-15T08:00:00Z","charging":true,"percent":42}'
    assert len(payload) == 58
    assert typed.decode(BatteryLevel, payload) == BatteryLevel(42, True, datetime.datetime(2027, 1, 15, 8, tzinfo=UTC))


def test_dates() -> None:
    assert typed.format_date(datetime.datetime(2027, 1, 15, 8, 0, 0, 250000, tzinfo=UTC)) == "2027-01-15T08:00:00.25Z"
    plus2 = datetime.timezone(datetime.timedelta(hours=2))
    assert typed.format_date(datetime.datetime(2027, 1, 15, 10, 0, tzinfo=plus2)) == "2027-01-15T08:00:00Z"
    assert typed.parse_date("2027-01-15T10:00:00.5+02:00") == datetime.datetime(2027, 1, 15, 8, 0, 0, 500000, UTC)
    assert typed.parse_date("2027-01-15T08:00:00.123456789Z").microsecond == 123456
    assert typed.format_date(datetime.datetime(1, 1, 1, tzinfo=UTC)) == "0001-01-01T00:00:00Z"
    with pytest.raises(typed.TypedPayloadError):
        typed.format_date(datetime.datetime(2027, 1, 1))  # naive
    for bad in ["2027-01-15", "2027-01-15T08:00:00", "2027-13-01T00:00:00Z", "10000-01-01T00:00:00Z"]:
        with pytest.raises(typed.TypedPayloadError):
            typed.parse_date(bad)


def test_bytes_lists_optionals_nested() -> None:
    value = Blob(b"\x00\xff", ["a", "ü"], inner=BatteryLevel(1, False, datetime.datetime(2027, 1, 1, tzinfo=UTC)))
    payload = typed.encode(value)
    assert json.loads(payload)["data"] == "AP8=" and "note" not in json.loads(payload)
    assert "ü".encode() in payload  # UTF-8, not \\u escapes
    assert typed.decode(Blob, payload) == value


@pytest.mark.parametrize("payload", [b"not json", b"[1]", b'{"percent":"42","charging":true,"at":"2027-01-15T08:00:00Z"}',
                                     b'{"percent":42,"charging":true}', b'{"percent":42,"charging":1,"at":"x"}',
                                     b"\xff"])
def test_payloads_that_do_not_decode(payload: bytes) -> None:
    with pytest.raises(typed.TypedPayloadError):
        typed.decode(BatteryLevel, payload)


def test_encode_refuses_what_json_cannot_carry() -> None:
    with pytest.raises(typed.TypedPayloadError):
        typed.encode([1, 2])
    with pytest.raises(typed.TypedPayloadError):
        typed.encode({"x": object()})


def test_typed_payload_round_trip_and_notifyctl_sees_the_message(daemon: Daemon) -> None:
    listener = subprocess.Popen([notifyctl_binary(), "--socket", daemon.socket, "listen", "--json", "--count", "1",
                                 "--timeout", str(TIMEOUT), "org.example.power.battery"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert listener.stderr is not None and "listening" in listener.stderr.readline()
        with daemon.center() as center:
            got = Collector()
            center.observe("org.example.power.battery", got)
            level = BatteryLevel(42, False, datetime.datetime(2027, 1, 15, 8, 0, 0, 500000, tzinfo=UTC))
            center.post("org.example.power.battery", typed.encode(level))
            assert got.wait_for(1)[0].decode(BatteryLevel) == level
        out, _ = listener.communicate(timeout=TIMEOUT)
    finally:
        listener.kill()
    message = json.loads(out.splitlines()[0])["message"]
    assert message == {"at": "2027-01-15T08:00:00.5Z", "charging": False, "percent": 42}
    assert isinstance(notifyd.Notification, type)
