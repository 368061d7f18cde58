"""Fixtures: a private notifyd per test, notifyctl, and helpers that wait on events with loud timeouts.

The daemon binary is ``$NOTIFYD`` (default ``<repo>/.build/debug/notifyd``), notifyctl ``$NOTIFYCTL`` (default
beside the daemon). Each test gets its own daemon on a socket in a fresh directory and stops it afterwards.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from typing import Any, Callable, Iterator, List, Optional

import pytest

import notifyd

REPO = pathlib.Path(__file__).resolve().parents[2]
TIMEOUT = 10.0  # every wait in the tests fails loudly after this many seconds


def daemon_binary() -> str:
    return os.environ.get("NOTIFYD") or str(REPO / ".build" / "debug" / "notifyd")


def notifyctl_binary() -> str:
    return os.environ.get("NOTIFYCTL") or str(pathlib.Path(daemon_binary()).with_name("notifyctl"))


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    """Polls ``predicate`` until it holds; fails the test naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


class Collector:
    """A callback that records notifications and lets a test wait for a count of them."""

    def __init__(self) -> None:
        self.items: List[notifyd.Notification] = []
        self._cond = threading.Condition()

    def __call__(self, notification: notifyd.Notification) -> None:
        with self._cond:
            self.items.append(notification)
            self._cond.notify_all()

    def wait_for(self, count: int, timeout: float = TIMEOUT) -> List[notifyd.Notification]:
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.items) >= count, timeout):
                pytest.fail(f"timed out after {timeout} s: {len(self.items)} of {count} notifications arrived "
                            f"({[n.name for n in self.items]})")
            return list(self.items)

    def wait_for_name(self, name: str, timeout: float = TIMEOUT) -> List[notifyd.Notification]:
        with self._cond:
            if not self._cond.wait_for(lambda: any(n.name == name for n in self.items), timeout):
                pytest.fail(f"timed out after {timeout} s waiting for {name!r} ({[n.name for n in self.items]})")
            return list(self.items)

    @property
    def names(self) -> List[str]:
        return [n.name for n in self.items]


class Events:
    """A connection-event listener that lets a test wait for an event kind."""

    def __init__(self) -> None:
        self.items: List[notifyd.ConnectionEvent] = []
        self._cond = threading.Condition()

    def __call__(self, event: notifyd.ConnectionEvent) -> None:
        with self._cond:
            self.items.append(event)
            self._cond.notify_all()

    def wait_for(self, kind: notifyd.EventKind, after: int = 0, timeout: float = TIMEOUT) -> notifyd.ConnectionEvent:
        """The first event of ``kind`` at index ``after`` or later."""
        def find() -> Optional[notifyd.ConnectionEvent]:
            return next((e for e in self.items[after:] if e.kind == kind), None)
        with self._cond:
            if not self._cond.wait_for(lambda: find() is not None, timeout):
                pytest.fail(f"timed out after {timeout} s waiting for a {kind.value} event ({self.items})")
            found = find()
            assert found is not None
            return found


class Daemon:
    """One notifyd process on a private socket."""

    def __init__(self, directory: pathlib.Path, as_user: Optional[int] = None, extra: Optional[List[str]] = None):
        self.directory = directory
        self.socket = str(directory / "notifyd.sock")
        self.config = directory / "notifyd.conf"
        if not self.config.exists():
            self.config.write_text("")
        self.as_user = as_user
        self.extra = extra or []
        self.process: Optional[subprocess.Popen[bytes]] = None
        self.log = directory / "notifyd.log"

    def start(self) -> "Daemon":
        binary = daemon_binary()
        if not os.access(binary, os.X_OK):
            pytest.fail(f"no notifyd binary at {binary}: build it (swift build) or set NOTIFYD=/path/to/notifyd")
        command = [binary, "--socket", self.socket, "--config", str(self.config), "--log", "stderr",
                   "--log-level", "warning", *self.extra]
        if self.as_user is not None:
            command = ["setpriv", f"--reuid={self.as_user}", f"--regid={self.as_user}", "--clear-groups", *command]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        self._wait_listening()
        return self

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + TIMEOUT
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                pytest.fail(f"notifyd exited with {self.process.returncode}: {self.log.read_text()}")
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(self.socket)
                return
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"notifyd did not listen on {self.socket} within {TIMEOUT} s: {self.log.read_text()}")
                time.sleep(0.01)
            finally:
                probe.close()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def notifyctl(self, *args: str, check: bool = True, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
        return subprocess.run([notifyctl_binary(), "--socket", self.socket, *args], capture_output=True, text=True,
                              timeout=timeout, check=check)

    def center(self, **kwargs: Any) -> notifyd.Center:
        kwargs.setdefault("timeout", TIMEOUT)
        return notifyd.Center(self.socket, **kwargs)


def call_bounded(call: Callable[[], Any], what: str, timeout: float = TIMEOUT) -> Any:
    """Runs ``call`` on a thread and returns what it returned or raised (an exception is returned, not raised);
    fails the test naming ``what`` if it is still running after ``timeout`` seconds (it blocks for good)."""
    outcome: List[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as error:  # handed to the test
            outcome.append(error)

    thread = threading.Thread(target=run, name=f"bounded {what}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        pytest.fail(f"{what} still blocked after {timeout} s")
    return outcome[0]


class FakeDaemon:
    """A listener that speaks just enough of the protocol to play a broken daemon.

    It sends ``WELCOME`` on every connection it accepts (with the limits given), then either never reads
    (``reads=False``: a stopped or hung daemon, or an impostor), or decodes each request and sends back the frames
    ``answer(request)`` returns (by default a ``PONG`` for a ``PING``, nothing for anything else). With a ``gate``
    it reads only while the event is set (a daemon that has stopped reading this client for a while); every
    request it decoded is in ``requests``, in order, recorded before it is answered.
    """

    def __init__(self, path: pathlib.Path, *, reads: bool = True,
                 answer: Optional[Callable[[Any], List[Any]]] = None,
                 max_payload_length: int = 65_536, max_frame_length: int = 66_560,
                 gate: Optional[threading.Event] = None) -> None:
        from notifyd import _wire as wire
        self.path = str(path)
        self.reads = reads
        self.gate = gate
        self.requests: List[Any] = []
        self.answer = answer if answer is not None else self.pong
        self.welcome = wire.Welcome(wire.PROTOCOL_VERSION, os.getpid(), os.urandom(16), 255, max_payload_length,
                                    max_frame_length, 1000, "fake notifyd").encode()
        self.max_frame_length = max_frame_length
        self.connections: List[socket.socket] = []
        self._cond = threading.Condition()
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(8)
        threading.Thread(target=self._accept, name="fake notifyd", daemon=True).start()

    @staticmethod
    def pong(request: Any) -> List[Any]:
        from notifyd import _wire as wire
        return [wire.Pong(request.request_id)] if isinstance(request, wire.Ping) else []

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return  # closed
            try:
                conn.sendall(self.welcome)
            except OSError:
                conn.close()
                continue
            with self._cond:
                self.connections.append(conn)
                self._cond.notify_all()
            if self.reads:
                threading.Thread(target=self._serve, args=(conn,), name="fake notifyd connection",
                                 daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        from notifyd import _wire as wire
        decoder = wire.FrameDecoder(from_daemon=False, max_frame_length=self.max_frame_length)
        try:
            while True:
                if self.gate is not None and not self.gate.wait(3 * TIMEOUT):
                    return  # the test is over
                data = conn.recv(1 << 16)
                if not data:
                    return
                for request in decoder.feed(data):
                    with self._cond:
                        self.requests.append(request)
                        self._cond.notify_all()
                    for reply in self.answer(request):
                        conn.sendall(reply.encode())
        except (OSError, notifyd.ProtocolError):
            return

    def wait_for_connections(self, count: int, timeout: float = TIMEOUT) -> None:
        """Waits until ``count`` connections in all were accepted (a reconnection makes one more)."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.connections) >= count, timeout):
                pytest.fail(f"timed out after {timeout} s: {len(self.connections)} of {count} connections to the "
                            f"fake daemon")

    def close(self) -> None:
        try:
            self.server.shutdown(socket.SHUT_RDWR)  # wakes accept()
        except OSError:
            pass
        self.server.close()
        with self._cond:
            connections = list(self.connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()


@pytest.fixture
def daemon(tmp_path: pathlib.Path) -> Iterator[Daemon]:
    d = Daemon(tmp_path).start()
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture
def shared_dir() -> Iterator[pathlib.Path]:
    """A directory other users can traverse (for daemons and clients running as uid 65534)."""
    path = pathlib.Path(tempfile.mkdtemp(prefix="notifyd-py-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def centers() -> Iterator[List[notifyd.Center]]:
    """Centers a test makes; all closed at the end."""
    made: List[notifyd.Center] = []
    yield made
    for center in made:
        center.close()
