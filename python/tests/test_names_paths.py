"""Names and patterns (PROTOCOL § 8, § 8.1), socket path resolution and the daemon-trust rule, errors by code."""

from __future__ import annotations

import os
import pathlib

import pytest

import notifyd
from notifyd import errors
from notifyd._paths import DaemonUser, default_socket_path, is_root_only_directory
from notifyd.names import is_pattern, matches, validate_name, validate_pattern

VALID_NAMES = ["org.example.battery.low", "a", "128", "user.uid.1000.inbox", "user.1000.inbox", "app:ui@main+v2=1",
               "my-app_2.state", "de.beispiel.größe", "日本.東京", "status.😀", "a" * 255, "self.cache.flush"]
INVALID_NAMES = ["", ".org.example", "org.example.", "org..example", "org.example.battery low", "org/example",
                 "org.example.*", "org.>", "tab\tname", "del\x7f", "c1\x85", "a\u00a0b", "a\u200bb", "a\u202eb",
                 "a\ufeffb", "a" * 256, "é" * 128, "a\U0001fffe", "a\U000e0001", "x!", "x~", "a\ud800b"]
VALID_PATTERNS = ["org.example.>", "org.*.>", "a.*.c", "*", ">", "日本.*", "org.example.battery.low", "*.*"]
INVALID_PATTERNS = ["org.>.x", ">.a", ">.>", "org.ex*", "org.**", "org.>>", "org.a>", "org..*", ".>", "org.*.", ""]

MATCHING = [
    ("org.example.battery.low", ["org.example.battery.low"], ["org.example.battery", "org.example.battery.low.x"]),
    ("org.*.x", ["org.a.x", "org.b.x"], ["org.x", "org.a.b.x", "org.a.x.y", "net.a.x"]),
    ("org.*", ["org.a"], ["org", "org.a.b"]),
    ("org.>", ["org.a", "org.a.b", "org.a.b.c"], ["org", "orgx.a", "x.org.a"]),
    ("*", ["a", "org"], ["a.b"]),
    ("*.*", ["a.b"], ["a", "a.b.c"]),
    (">", ["a", "a.b.c"], []),
    ("*.>", ["a.b", "a.b.c"], ["a"]),
    ("a.*.c.>", ["a.b.c.d", "a.x.c.d.e"], ["a.b.c", "a.b.x.d"]),
]


@pytest.mark.parametrize("name", VALID_NAMES)
def test_valid_names(name: str) -> None:
    validate_name(name)
    validate_pattern(name)


@pytest.mark.parametrize("name", INVALID_NAMES)
def test_invalid_names(name: str) -> None:
    with pytest.raises(notifyd.InvalidName):
        validate_name(name)


def test_process_local_names_refused_when_asked() -> None:
    with pytest.raises(notifyd.InvalidName, match="process-local"):
        validate_name("self.x", allow_local=False)
    validate_name("myself.x", allow_local=False)
    validate_name("Self.x", allow_local=False)


@pytest.mark.parametrize("pattern", VALID_PATTERNS)
def test_valid_patterns(pattern: str) -> None:
    validate_pattern(pattern)


@pytest.mark.parametrize("pattern", INVALID_PATTERNS)
def test_invalid_patterns(pattern: str) -> None:
    with pytest.raises(notifyd.InvalidName):
        validate_pattern(pattern)


@pytest.mark.parametrize("pattern,yes,no", MATCHING)
def test_matching(pattern: str, yes: list, no: list) -> None:
    for name in yes:
        assert matches(pattern, name), (pattern, name)
    for name in no:
        assert not matches(pattern, name), (pattern, name)
    assert is_pattern(pattern) == ("*" in pattern.split(".") or ">" in pattern.split("."))


def test_name_length_limit_counts_bytes() -> None:
    validate_name("é" * 127 + "a")  # 255 bytes
    with pytest.raises(notifyd.InvalidName):
        validate_name("a" * 11, max_length=10)


def test_default_socket_path_rules() -> None:
    assert default_socket_path(1000, {"NOTIFYD_SOCKET": "/x/s", "XDG_RUNTIME_DIR": "/run/user/1000"}) == "/x/s"
    assert default_socket_path(0, {"NOTIFYD_SOCKET": "/x/s"}) == "/x/s"
    assert default_socket_path(0, {"NOTIFYD_SOCKET": "", "XDG_RUNTIME_DIR": "/r"}) == "/run/notifyd/notifyd.sock"
    assert default_socket_path(1000, {"XDG_RUNTIME_DIR": "/run/user/1000"}) == "/run/user/1000/notifyd/notifyd.sock"
    assert default_socket_path(1000, {"XDG_RUNTIME_DIR": ""}) == "/tmp/notifyd-1000/notifyd.sock"
    assert default_socket_path(1000, {}) == "/tmp/notifyd-1000/notifyd.sock"


def test_daemon_user_from_environment() -> None:
    assert DaemonUser.from_environment({}) == DaemonUser.same_user_or_root()
    assert DaemonUser.from_environment({"NOTIFYD_DAEMON_UID": "any"}) == DaemonUser.any_user()
    assert DaemonUser.from_environment({"NOTIFYD_DAEMON_UID": "65534"}) == DaemonUser.uid(65534)
    assert DaemonUser.from_environment({"NOTIFYD_DAEMON_UID": "nobody"}) == DaemonUser.same_user_or_root()
    assert DaemonUser.from_environment({"NOTIFYD_DAEMON_UID": "-1"}) == DaemonUser.same_user_or_root()
    strict = DaemonUser.same_user_or_root()
    assert strict.allows(1000, 1000) and strict.allows(0, 1000) and not strict.allows(1001, 1000)
    assert DaemonUser.uid(1001).allows(1001, 1000) and not DaemonUser.uid(1001).allows(1002, 1000)
    assert DaemonUser.any_user().allows(1234, 1000)


def test_root_only_directory(tmp_path: pathlib.Path) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to make a root-owned directory")
    tmp_path.chmod(0o755)
    assert is_root_only_directory(str(tmp_path / "notifyd.sock"))
    tmp_path.chmod(0o775)
    assert not is_root_only_directory(str(tmp_path / "notifyd.sock"))
    os.chown(tmp_path, 65534, -1)
    tmp_path.chmod(0o755)
    assert not is_root_only_directory(str(tmp_path / "notifyd.sock"))
    assert not is_root_only_directory(str(tmp_path / "missing" / "notifyd.sock"))


@pytest.mark.parametrize("code,cls", [
    (7, notifyd.InvalidName), (8, notifyd.PayloadTooLarge), (9, notifyd.UnknownSubscription),
    (10, notifyd.DuplicateSubscription), (11, notifyd.TooManySubscriptions), (12, notifyd.UnsupportedFlags),
    (14, notifyd.PermissionDenied), (15, notifyd.QuotaExceeded), (18, notifyd.InvalidRequest),
    (200, notifyd.RequestRejected),
])
def test_error_codes_map_to_exceptions(code: int, cls: type) -> None:
    error = errors.error_for_code(code, "why")
    assert type(error) is cls
    assert error.code == code and "why" in str(error)


def test_closing_errors_are_connection_errors() -> None:
    assert type(errors.error_for_code(13, "slow", closing=True)) is notifyd.SlowConsumer
    assert type(errors.error_for_code(15, "quota", closing=True)) is notifyd.ConnectionClosedByDaemon
    assert type(errors.error_for_code(99, "?", closing=True)) is notifyd.ConnectionClosedByDaemon
    assert isinstance(errors.error_for_code(1, "bad", closing=True), ConnectionError)


def test_policy_values() -> None:
    assert str(notifyd.Policy()) == "coalesce"
    assert notifyd.Policy.parse("queue:5") == notifyd.Policy.queue(5)
    assert notifyd.Policy.parse("disconnect").kind == notifyd.PolicyKind.DISCONNECT
    with pytest.raises(ValueError):
        notifyd.Policy.queue(0)
    with pytest.raises(ValueError):
        notifyd.Policy.parse("drop")
