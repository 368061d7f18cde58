"""Connecting: no daemon, a daemon that never answers, an untrusted daemon, reconnecting after the daemon dies or
stops, and the asyncio API."""

from __future__ import annotations

import asyncio
import os
import pathlib
import socket
import threading
from typing import Any, Callable, List

import pytest

import notifyd
from conftest import TIMEOUT, Collector, Daemon, Events, FakeDaemon, call_bounded
from notifyd import _wire as wire


def test_no_daemon_raises_daemon_not_found(tmp_path: pathlib.Path) -> None:
    with pytest.raises(notifyd.DaemonNotFound) as caught:
        notifyd.Center(str(tmp_path / "nothing.sock"), timeout=TIMEOUT)
    assert "nothing.sock" in str(caught.value)
    # A stale socket file with nobody listening: refused at once as well.
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(tmp_path / "stale.sock"))
    stale.close()
    with pytest.raises(notifyd.DaemonNotFound):
        notifyd.Center(str(tmp_path / "stale.sock"), timeout=TIMEOUT)


def test_no_daemon_in_asyncio(tmp_path: pathlib.Path) -> None:
    async def main() -> None:
        with pytest.raises(notifyd.DaemonNotFound):
            await notifyd.AsyncCenter.connect(str(tmp_path / "nothing.sock"), timeout=TIMEOUT)
    asyncio.run(main())


def test_a_listener_that_never_answers_times_out(tmp_path: pathlib.Path) -> None:
    mute = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    mute.bind(str(tmp_path / "mute.sock"))
    mute.listen(1)
    try:
        with pytest.raises(notifyd.NotifydTimeout):
            notifyd.Center(str(tmp_path / "mute.sock"), timeout=0.5)
    finally:
        mute.close()


def test_a_listener_speaking_garbage_is_a_protocol_failure(tmp_path: pathlib.Path) -> None:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(tmp_path / "bad.sock"))
    server.listen(1)

    def answer() -> None:
        conn, _ = server.accept()
        conn.recv(100)
        conn.sendall(b"\x00\x00\x00\x05\x05\x00\x00\x00\x01")  # PING: a client-to-daemon type
        conn.recv(100)  # the client closes
        conn.close()

    thread = threading.Thread(target=answer)
    thread.start()
    try:
        with pytest.raises(notifyd.ProtocolError, match="not a daemon-to-client"):
            notifyd.Center(str(tmp_path / "bad.sock"), timeout=TIMEOUT, reconnect=False)
    finally:
        thread.join(TIMEOUT)
        server.close()


# A frame no Unix socket buffer holds (they are about 200 KiB by default, 4 MiB at most here), so writing it
# blocks until the daemon reads. The fake daemons below announce limits that allow it.
BIG = 16 << 20


def test_sends_to_a_daemon_that_stops_reading_time_out_and_drop_the_connection(tmp_path: pathlib.Path) -> None:
    fake = FakeDaemon(tmp_path / "stalled.sock", reads=False, max_payload_length=BIG, max_frame_length=BIG + 1024)
    center = notifyd.Center(fake.path, timeout=1.0, max_delay=0.1)  # the default of post_nowait: 1 s
    try:
        events = Events()
        center.add_event_listener(events)
        big = b"x" * BIG
        # post(): bounded by its own timeout, though the frame can never be written.
        outcome = call_bounded(lambda: center.post("stall.big", big, timeout=0.5), "post(timeout=0.5)")
        assert isinstance(outcome, notifyd.NotifydTimeout), outcome
        lost = events.wait_for(notifyd.EventKind.DISCONNECTED)
        assert "did not read" in lost.reason and not lost.graceful
        fake.wait_for_connections(2)  # dropped as dead, and reconnected
        center.wait_until_connected(TIMEOUT)
        # post_nowait(): bounded by the center's timeout; then the same.
        after = len(events.items)
        outcome = call_bounded(lambda: center.post_nowait("stall.big", big), "post_nowait()")
        assert isinstance(outcome, notifyd.NotifydTimeout), outcome
        events.wait_for(notifyd.EventKind.DISCONNECTED, after=after)
        fake.wait_for_connections(3)
        assert center.wait_until_connected(TIMEOUT).server_name == "fake notifyd"
    finally:
        center.close()
        fake.close()


def test_asyncio_sends_never_block_the_loop(tmp_path: pathlib.Path) -> None:
    fake = FakeDaemon(tmp_path / "stalled.sock", reads=False, max_payload_length=BIG, max_frame_length=BIG + 1024)
    events = Events()

    async def main() -> None:
        center = await notifyd.AsyncCenter.connect(fake.path, timeout=1.0, max_delay=0.1)
        center.add_event_listener(events)
        try:
            center.post_nowait("stall.big", b"x" * BIG)  # queued for the I/O thread: returns at once
            with pytest.raises(notifyd.NotifydTimeout):
                await center.post("stall.small", "queued behind it", timeout=0.5)
            loop = asyncio.get_running_loop()
            lost = await loop.run_in_executor(None, events.wait_for, notifyd.EventKind.DISCONNECTED)
            assert "did not read" in lost.reason
            await loop.run_in_executor(None, fake.wait_for_connections, 2)  # reconnected
        finally:
            await center.close()

    try:
        outcome = call_bounded(lambda: asyncio.run(main()), "the event loop")
        assert outcome is None, outcome
    finally:
        fake.close()


def _answers(request: Any) -> List[Any]:
    """A daemon's answers to what the tests below send (and an OK plus one notification for a SUBSCRIBE)."""
    if isinstance(request, wire.Post):
        return [wire.Posted(request.request_id, 1, 0)] if request.flags & 0x01 else []
    if isinstance(request, wire.Subscribe):
        return [wire.Ok(request.request_id),
                wire.NotificationFrame(1, os.getpid(), os.getuid(), os.getgid(), request.pattern, b"")]
    if isinstance(request, wire.GetState):
        return [wire.State(request.request_id, 0, 0)]
    if isinstance(request, (wire.SetState, wire.Unsubscribe)):
        return [wire.Ok(request.request_id)]
    return FakeDaemon.pong(request)


def _sent(fake: FakeDaemon) -> List[Any]:
    """What the fake daemon has read after the HELLO: (frame type, name or pattern)."""
    return [(type(r).__name__, getattr(r, "name", getattr(r, "pattern", None))) for r in fake.requests[1:]]


def test_a_late_request_is_taken_back_and_the_connection_stays(tmp_path: pathlib.Path) -> None:
    # The daemon reads, but not yet (the gate is closed): calls whose own deadline passes while their frames wait
    # behind others give up, without treating the daemon as dead. The center's timeout (10 s) never runs out here.
    gate = threading.Event()
    fake = FakeDaemon(tmp_path / "slow.sock", gate=gate, answer=_answers, max_payload_length=BIG,
                      max_frame_length=BIG + 1024)
    center = notifyd.Center(fake.path, timeout=TIMEOUT, max_delay=0.1)
    try:
        events = Events()
        center.add_event_listener(events)
        # Only part of this frame fits in the socket: the call times out, and the rest stays queued, since the
        # stream must stay whole.
        outcome = call_bounded(lambda: center.post("slow.big", b"x" * BIG, timeout=0.2), "post(timeout=0.2)")
        assert isinstance(outcome, notifyd.NotifydTimeout), outcome
        # Nobody waits for an asyncio post_nowait: it has no deadline of its own and waits its turn.
        notifyd.AsyncCenter(center).post_nowait("slow.tail", timeout=0)
        # None of these was written by its deadline: each is taken back (never sent) and raises NotifydTimeout.
        calls: List[Any] = [
            ("post_nowait(timeout=0)", lambda: center.post_nowait("slow.never", timeout=0)),
            ("post(timeout=0.2)", lambda: center.post("slow.never", timeout=0.2)),
            ("get_state(timeout=0.2)", lambda: center.get_state("slow.never", timeout=0.2)),
            ("observe(timeout=0.2)", lambda: center.observe("slow.never", lambda n: None, timeout=0.2)),
        ]
        for what, call in calls:
            outcome = call_bounded(call, what)
            assert isinstance(outcome, notifyd.NotifydTimeout) and "not sent" in str(outcome), (what, outcome)
        assert center.connected
        gate.set()  # the daemon reads again: everything queued is written, in order, on the same connection
        center.synchronize()
        assert _sent(fake) == [("Post", "slow.big"), ("Post", "slow.tail"), ("Ping", None)]
        assert len(fake.requests[1].payload) == BIG
        assert len(fake.connections) == 1 and center.connected
        assert [e for e in events.items if e.kind == notifyd.EventKind.DISCONNECTED] == []
    finally:
        gate.set()
        center.close()
        fake.close()


def test_a_busy_io_thread_does_not_make_the_daemon_look_stalled(tmp_path: pathlib.Path) -> None:
    # The daemon stops reading a client that does not read its answers: here the I/O thread is busy in a
    # READER_THREAD callback, and the gate is closed meanwhile. That time does not count as the daemon not
    # reading, though it lasts longer than the center's timeout (0.5 s; the late call below waits 1 s).
    gate = threading.Event()
    gate.set()
    in_callback, release = threading.Event(), threading.Event()
    fake = FakeDaemon(tmp_path / "busy.sock", gate=gate, answer=_answers, max_payload_length=BIG,
                      max_frame_length=BIG + 1024)
    center = notifyd.Center(fake.path, timeout=0.5, max_delay=0.1)
    try:
        events = Events()
        center.add_event_listener(events)

        def busy(n: notifyd.Notification) -> None:
            in_callback.set()
            release.wait(3 * TIMEOUT)

        center.observe("busy.go", busy, executor=notifyd.READER_THREAD, timeout=TIMEOUT)
        assert in_callback.wait(TIMEOUT), "the callback did not run"
        gate.clear()
        notifyd.AsyncCenter(center).post_nowait("busy.big", b"x" * BIG)  # more than the socket takes
        outcome = call_bounded(lambda: center.post("busy.late", timeout=1.0), "post(timeout=1.0)")
        assert isinstance(outcome, notifyd.NotifydTimeout) and "not sent" in str(outcome), outcome
        assert center.connected
        gate.set()
        release.set()
        center.synchronize(timeout=TIMEOUT)
        assert _sent(fake) == [("Subscribe", "busy.go"), ("Post", "busy.big"), ("Ping", None)]
        assert len(fake.connections) == 1 and center.connected
        assert [e for e in events.items if e.kind == notifyd.EventKind.DISCONNECTED] == []
    finally:
        gate.set()
        release.set()
        center.close()
        fake.close()


def _malformed_answers(case: str) -> Callable[[Any], List[Any]]:
    def answer(request: Any) -> List[Any]:
        if isinstance(request, wire.Query) and case == "a part that is not an array":
            return [wire.QueryResultPart(request.request_id, b"7"), wire.QueryResult(request.request_id, b"[]")]
        if isinstance(request, wire.Query) and case == "an answer that is not JSON":
            return [wire.QueryResult(request.request_id, b"[{")]
        if isinstance(request, wire.Query) and case == "a names answer that is an object":
            return [wire.QueryResult(request.request_id, b"{}")]
        if isinstance(request, wire.GetState) and case == "a reply of the wrong type":
            return [wire.Posted(request.request_id, 1, 1)]
        return FakeDaemon.pong(request)
    return answer


@pytest.mark.parametrize("case", ["a part that is not an array", "an answer that is not JSON",
                                  "a names answer that is an object", "a reply of the wrong type"])
def test_malformed_answers_are_protocol_errors_that_reconnect(tmp_path: pathlib.Path, case: str) -> None:
    fake = FakeDaemon(tmp_path / "impostor.sock", answer=_malformed_answers(case))
    center = notifyd.Center(fake.path, timeout=TIMEOUT, max_delay=0.1)
    try:
        events = Events()
        center.add_event_listener(events)
        request = center.get_state if case == "a reply of the wrong type" else center.names
        outcome = call_bounded(lambda: request("some.name"), f"the request answered with {case}")
        assert isinstance(outcome, notifyd.ProtocolError), outcome
        lost = events.wait_for(notifyd.EventKind.DISCONNECTED)
        assert "protocol error" in lost.reason
        # The I/O thread lives on: it reconnects, and the new connection works.
        fake.wait_for_connections(2)
        center.wait_until_connected(TIMEOUT)
        center.synchronize()
        assert center.connected
    finally:
        center.close()
        fake.close()


def test_untrusted_daemon_is_refused(shared_dir: pathlib.Path) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to start a daemon as another user")
    directory = shared_dir / "other"
    directory.mkdir(mode=0o700)
    os.chown(directory, 65534, 65534)
    daemon = Daemon(directory, as_user=65534).start()
    try:
        with pytest.raises(notifyd.UntrustedDaemon) as caught:
            notifyd.Center(daemon.socket, timeout=TIMEOUT, daemon_user=notifyd.DaemonUser.same_user_or_root())
        assert caught.value.uid == 65534 and "NOTIFYD_DAEMON_UID=65534" in str(caught.value)
        # Trusting that user explicitly (as NOTIFYD_DAEMON_UID=65534 does) connects.
        with notifyd.Center(daemon.socket, timeout=TIMEOUT, daemon_user=notifyd.DaemonUser.uid(65534)) as center:
            assert center.post("t.x").sequence == 1
        os.environ["NOTIFYD_DAEMON_UID"] = "65534"
        try:
            with notifyd.Center(daemon.socket, timeout=TIMEOUT) as center:
                assert center.connected
        finally:
            del os.environ["NOTIFYD_DAEMON_UID"]
    finally:
        daemon.stop()


def test_reconnect_after_kill_9_resubscribes(daemon: Daemon) -> None:
    with daemon.center() as center:
        events = Events()
        center.add_event_listener(events)
        got, retained = Collector(), Collector()
        center.observe("rc.x", got, policy=notifyd.Policy.queue(5))
        center.observe("rc.>", retained, current_value=True)
        center.suspend()
        center.resume()
        first_instance = center.daemon.instance_id if center.daemon else b""
        daemon.kill()
        lost = events.wait_for(notifyd.EventKind.DISCONNECTED)
        assert not lost.graceful
        with pytest.raises(notifyd.NotConnected):
            center.post("rc.x")
        daemon.start()
        connected = events.wait_for(notifyd.EventKind.CONNECTED)
        assert connected.daemon_restarted
        assert center.daemon is not None and center.daemon.instance_id != first_instance
        center.synchronize()  # the resubscriptions were sent before this, so they are active now
        with daemon.center() as poster:
            poster.post("rc.x", "after restart", retain=True)
        assert got.wait_for(1)[0].text == "after restart"
        assert retained.wait_for(1)[0].text == "after restart"


def test_reconnect_resuspends(daemon: Daemon) -> None:
    with daemon.center() as center:
        events = Events()
        center.add_event_listener(events)
        got = Collector()
        center.observe("rs.x", got, executor=notifyd.READER_THREAD)
        center.suspend()
        daemon.kill()
        events.wait_for(notifyd.EventKind.DISCONNECTED)
        daemon.start()
        events.wait_for(notifyd.EventKind.CONNECTED)
        with daemon.center() as poster:
            poster.post("rs.x", "held")
        center.synchronize()
        assert got.items == []  # the suspension was replayed on the new connection
        center.resume()
        assert got.wait_for(1)[0].text == "held"


def test_graceful_stop_says_goodbye_then_reconnects(daemon: Daemon) -> None:
    with daemon.center(max_delay=0.2) as center:
        events = Events()
        center.add_event_listener(events)
        got = Collector()
        center.observe("g.x", got)
        daemon.stop()
        lost = events.wait_for(notifyd.EventKind.DISCONNECTED)
        assert lost.graceful and "shutting down" in lost.reason
        daemon.start()
        events.wait_for(notifyd.EventKind.CONNECTED)
        center.synchronize()
        with daemon.center() as poster:
            poster.post("g.x")
        got.wait_for(1)


def test_require_daemon_false_connects_when_it_appears(tmp_path: pathlib.Path) -> None:
    daemon = Daemon(tmp_path)
    center = notifyd.Center(daemon.socket, timeout=TIMEOUT, require_daemon=False, max_delay=0.1)
    try:
        got = Collector()
        center.observe("late.x", got)  # registered now, subscribed once connected
        with pytest.raises(notifyd.NotConnected):
            center.post("late.x")
        daemon.start()
        center.wait_until_connected(TIMEOUT)
        center.synchronize()
        center.post("late.x", "here")
        assert got.wait_for(1)[0].text == "here"
    finally:
        center.close()
        daemon.stop()


def test_close_fails_waiters_and_ends_observations(daemon: Daemon) -> None:
    center = daemon.center()
    ended = threading.Event()
    observation = center._start_observation("cl.x", print, notifyd.Policy(), False, None, on_end=ended.set)[0]
    center.close()
    assert ended.is_set() and observation.cancelled
    with pytest.raises(notifyd.CenterClosed):
        center.post("cl.x")
    center.close()  # idempotent


# ---- asyncio -------------------------------------------------------------------------------------------------


def test_async_round_trip_and_state(daemon: Daemon) -> None:
    async def main() -> None:
        async with await notifyd.AsyncCenter.connect(daemon.socket, timeout=TIMEOUT) as center:
            async with center.notifications("a.>") as stream:
                receipt = await center.post("a.one", "1")
                await center.post("a.two", b"2")
                center.post_nowait("a.three", "3")
                got = []
                async for n in stream:
                    got.append(n)
                    if len(got) == 3:
                        break
            assert [n.name for n in got] == ["a.one", "a.two", "a.three"]
            assert got[0].sequence == receipt.sequence
            await center.set_state("a.s", 5)
            assert await center.get_state("a.s") == 5
            assert await center.get_state("a.none", None) is None
            await center.synchronize()
            assert (await center.status())["posts"] == 3
            assert [e["name"] for e in await center.names("a.>")] == ["a.s"]
            assert len(await center.clients()) >= 1
            await center.suspend()
            await center.resume()
    asyncio.run(asyncio.wait_for(main(), TIMEOUT * 2))


def test_async_iterator_ends_when_center_closes(daemon: Daemon) -> None:
    async def main() -> None:
        center = await notifyd.AsyncCenter.connect(daemon.socket, timeout=TIMEOUT)
        stream = center.notifications("end.x")
        await stream.ready()
        await center.post("end.x", "before close")
        got = []

        async def consume() -> None:
            async for n in stream:
                got.append(n.text)
                if len(got) == 1:
                    asyncio.get_running_loop().create_task(center.close())

        await asyncio.wait_for(consume(), TIMEOUT)
        assert got == ["before close"]
    asyncio.run(main())


def test_async_invalid_pattern_and_refusal(daemon: Daemon) -> None:
    async def main() -> None:
        async with await notifyd.AsyncCenter.connect(daemon.socket, timeout=TIMEOUT) as center:
            with pytest.raises(notifyd.InvalidName):
                center.notifications("a..b")
            with pytest.raises(notifyd.InvalidName):
                await center.post("a b")
    asyncio.run(main())


def test_async_buffer_limit_drops_oldest(daemon: Daemon) -> None:
    async def main() -> None:
        async with await notifyd.AsyncCenter.connect(daemon.socket, timeout=TIMEOUT) as center:
            async with center.notifications("b.x", buffer_limit=2, policy=notifyd.Policy.queue(100)) as stream:
                for i in range(5):
                    await center.post("b.x", str(i))
                await center.synchronize()
                # Everything reached the loop once a task after the reader's hand-offs has run.
                while stream.dropped_count < 3:
                    await asyncio.sleep(0.01)
                texts = [(await stream.__anext__()).text for _ in range(2)]
                assert texts == ["3", "4"] and stream.dropped_count == 3
    asyncio.run(asyncio.wait_for(main(), TIMEOUT))
