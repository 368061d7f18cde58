"""The synchronous Center against a real notifyd: round trips, interop with notifyctl, patterns, policies, state,
retained values, suspension, cancellation and errors."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List

import pytest

import notifyd
from conftest import TIMEOUT, Collector, Daemon, Events, notifyctl_binary

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_post_and_observe_in_one_center(daemon: Daemon) -> None:
    with daemon.center() as center:
        got = Collector()
        with center.observe("org.example.hello", got):
            receipt = center.post("org.example.hello", "hi")
            (n,) = got.wait_for(1)
        assert receipt.delivered_count == 1 and receipt.sequence == n.sequence == 1
        assert (n.name, n.payload, n.text) == ("org.example.hello", b"hi", "hi")
        assert n.sender == notifyd.Sender(os.getpid(), os.getuid(), os.getgid())
        assert (n.merged_count, n.dropped_before, n.retained) == (0, 0, False)


def test_notifyctl_post_reaches_python_observer(daemon: Daemon) -> None:
    with daemon.center() as center:
        got = Collector()
        center.observe("org.example.cli", got)
        poster = subprocess.Popen([notifyctl_binary(), "--socket", daemon.socket, "post", "org.example.cli",
                                   "from notifyctl"])
        assert poster.wait(TIMEOUT) == 0
        (n,) = got.wait_for(1)
        assert n.text == "from notifyctl"
        assert n.sender.pid == poster.pid and n.sender.uid == os.getuid()


def test_python_post_reaches_notifyctl_listen(daemon: Daemon) -> None:
    listener = subprocess.Popen([notifyctl_binary(), "--socket", daemon.socket, "listen", "--json", "--count", "1",
                                 "--timeout", str(TIMEOUT), "org.example.>"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert listener.stderr is not None
        line = listener.stderr.readline()  # "listening for ..." once the daemon has the subscription
        assert "listening" in line, line
        with daemon.center() as center:
            center.post("org.example.py", b"\x00\xffbinary")
            center.post("org.example.py", json.dumps({"level": 17}))
        out, err = listener.communicate(timeout=TIMEOUT)
    finally:
        listener.kill()
    assert listener.returncode == 0, err
    record = json.loads(out.splitlines()[0])
    assert record["name"] == "org.example.py" and record["payload_hex"] == "00ff62696e617279"
    assert record["pid"] == os.getpid()


def test_two_python_processes(daemon: Daemon) -> None:
    script = (
        "import sys, notifyd\n"
        "c = notifyd.Center(sys.argv[1])\n"
        "r = c.post('org.example.proc', 'from child', retain=True)\n"
        "c.set_state('org.example.proc', 77)\n"
        "print(r.delivered_count)\n"
        "c.close()\n"
    )
    with daemon.center() as center:
        got = Collector()
        center.observe("org.example.proc", got)
        env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
        child = subprocess.run([sys.executable, "-c", script, daemon.socket], capture_output=True, text=True,
                               timeout=TIMEOUT, env=env)
        assert child.returncode == 0, child.stderr
        assert child.stdout.strip() == "1"
        (n,) = got.wait_for(1)
        assert n.text == "from child" and n.sender.pid != os.getpid()
        assert center.get_state("org.example.proc") == 77


def _in_forked_child(center: notifyd.Center, inherited: notifyd.Observation) -> Dict[str, Any]:
    """What a forked child sees of the center it inherited (runs in the child)."""
    report: Dict[str, Any] = {"pid": os.getpid()}
    try:
        report["inherited_observation_cancelled"] = inherited.cancelled
        report["state"] = center.get_state("fork.parent", timeout=TIMEOUT)  # the parent's reads this reply if shared
        own = threading.Event()
        center.observe("fork.child.own", lambda n: own.set())
        center.post("fork.child.own", "to itself")
        report["own_observation_called"] = own.wait(TIMEOUT)
        center.set_state("fork.child", 8)
        report["client_pids"] = [c["pid"] for c in center.clients()]
        center.post("fork.from_child", "hi")
        center.close()
    except BaseException as error:  # reported to the parent
        report["error"] = repr(error)
    return report


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_connects_on_its_own(daemon: Daemon) -> None:
    # As multiprocessing's fork start method does: the child uses the center it inherited, which must not
    # touch the parent's connection (replies read by the wrong process, request ids mixed up).
    with daemon.center() as center:
        events = Events()
        center.add_event_listener(events)
        got = Collector()
        inherited = center.observe("fork.>", got)
        center.set_state("fork.parent", 7)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            try:
                os.close(read_end)
                os.write(write_end, json.dumps(_in_forked_child(center, inherited)).encode())
            finally:
                os._exit(0)
        os.close(write_end)
        data = b""
        with os.fdopen(read_end, "rb") as reader:
            while True:
                if not select.select([reader], [], [], 3 * TIMEOUT)[0]:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    pytest.fail(f"the forked child did not report within {3 * TIMEOUT} s")
                chunk = reader.read1(65536)
                if not chunk:
                    break
                data += chunk
        assert os.waitpid(pid, 0)[1] == 0
        report = json.loads(data)
        assert "error" not in report, report
        assert report["inherited_observation_cancelled"] and report["own_observation_called"], report
        assert report["state"] == 7 and report["pid"] in report["client_pids"], report
        # The parent's center goes on as before, on its own connection.
        got.wait_for_name("fork.from_child")
        assert center.get_state("fork.child") == 8 and center.get_state("fork.parent") == 7
        assert center.post("fork.parent.after").delivered_count == 1
        assert not inherited.cancelled and center.connected
        # (The first connection's CONNECTED may still reach a listener added right after Center() returned.)
        assert [e for e in events.items if e.kind != notifyd.EventKind.CONNECTED] == []


def _read_child_report(pid: int, read_end: int) -> Dict[str, Any]:
    """The JSON a forked child wrote to the pipe; kills it and fails the test if it does not finish writing it."""
    data = b""
    with os.fdopen(read_end, "rb") as reader:
        while True:
            if not select.select([reader], [], [], 3 * TIMEOUT)[0]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pytest.fail(f"the forked child did not report within {3 * TIMEOUT} s")
            chunk = reader.read1(65536)
            if not chunk:
                break
            data += chunk
    assert os.waitpid(pid, 0)[1] == 0
    report: Dict[str, Any] = json.loads(data)
    return report


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_fork_in_a_reader_thread_callback_leaves_one_io_loop_in_the_child(daemon: Daemon) -> None:
    # The thread that forks is the I/O thread itself. In the child, once the callback returns, the loop it
    # returns into belongs to the parent's connection: it must end, not poll reused descriptors, reconnect, and
    # run beside the I/O thread the child's center starts for itself.
    with daemon.center() as center:
        center.set_state("forkcb.parent", 5)
        got = Collector()
        center.observe("forkcb.from_child", got)
        read_end, write_end = os.pipe()
        forked: List[int] = []
        forked_once = threading.Event()

        def in_child(inherited: threading.Thread) -> None:
            report: Dict[str, Any] = {"pid": os.getpid()}
            try:
                inherited.join(TIMEOUT)  # the loop the callback returned into
                report["inherited_loop_ended"] = not inherited.is_alive()
                if report["inherited_loop_ended"]:
                    report["state"] = center.get_state("forkcb.parent", timeout=TIMEOUT)
                    center.post("forkcb.from_child", "hi")
                    report["io_threads"] = sum(1 for t in threading.enumerate() if t.name == "notifyd-io")
                    report["connections"] = sum(1 for c in center.clients() if c["pid"] == os.getpid())
                center.close()
            except BaseException as error:  # reported to the parent
                report["error"] = repr(error)
            try:
                os.write(write_end, json.dumps(report).encode())
            finally:
                os._exit(0)

        def fork_here(n: notifyd.Notification) -> None:
            if forked_once.is_set():
                return
            pid = os.fork()
            if pid == 0:
                os.close(read_end)
                threading.Thread(target=in_child, args=(threading.current_thread(),), name="child work").start()
                return  # into the inherited I/O loop
            forked.append(pid)
            forked_once.set()

        center.observe("forkcb.go", fork_here, executor=notifyd.READER_THREAD)
        center.post("forkcb.go")
        assert forked_once.wait(TIMEOUT), "the callback did not fork"
        os.close(write_end)
        report = _read_child_report(forked[0], read_end)
        assert "error" not in report and report["inherited_loop_ended"], report
        assert report["state"] == 5 and report["io_threads"] == 1 and report["connections"] == 1, report
        got.wait_for_name("forkcb.from_child")
        assert center.get_state("forkcb.parent") == 5 and center.connected


def test_patterns_route_each_notification_to_matching_observers(daemon: Daemon) -> None:
    with daemon.center() as observer_center, daemon.center() as poster:
        star, tail, exact, everything = Collector(), Collector(), Collector(), Collector()
        observer_center.observe("org.*.x", star)
        observer_center.observe("org.>", tail)
        observer_center.observe("org.a.x", exact)
        with daemon.center() as other:  # a second connection with one pattern: filtered by the daemon
            other.observe(">", everything)
            for name in ["org.a.x", "org.b.x", "org.x", "org.a.b.x", "net.a.x", "orgx.a", "org.a.x.y"]:
                poster.post(name)
            poster.post("org.end.x")
            for c in (star, tail, everything):
                c.wait_for_name("org.end.x")
            assert everything.names == ["org.a.x", "org.b.x", "org.x", "org.a.b.x", "net.a.x", "orgx.a", "org.a.x.y",
                                        "org.end.x"]
        assert star.names == ["org.a.x", "org.b.x", "org.end.x"]
        assert tail.names == ["org.a.x", "org.b.x", "org.x", "org.a.b.x", "org.a.x.y", "org.end.x"]
        assert exact.names == ["org.a.x"]
        # The daemon sent each post once to the connection however many observations matched.
        assert len({n.sequence for n in tail.items}) == len(tail.items)


def test_coalesce_merges_while_suspended(daemon: Daemon) -> None:
    with daemon.center() as center, daemon.center() as poster:
        got = Collector()
        center.observe("p.coalesce", got, policy=notifyd.Policy.coalesce())
        center.observe("p.end", got)
        with center.suspended():
            for i in range(5):
                assert poster.post("p.coalesce", str(i)).delivered_count == 1  # held for the suspended center
        poster.post("p.end")
        got.wait_for_name("p.end")
        (merged, end) = got.items
        assert (merged.name, merged.text, merged.merged_count) == ("p.coalesce", "4", 4)
        assert end.merged_count == 0


def test_queue_keeps_the_newest_and_reports_drops(daemon: Daemon) -> None:
    with daemon.center() as center, daemon.center() as poster:
        got, events = Collector(), Events()
        center.add_event_listener(events)
        center.observe("p.queue", got, policy=notifyd.Policy.queue(2))
        center.suspend()
        for i in range(5):
            poster.post("p.queue", str(i))
        center.resume()
        first, second = got.wait_for(2)
        assert [first.text, second.text] == ["3", "4"]
        assert (first.dropped_before, second.dropped_before) == (3, 0)
        dropped = events.wait_for(notifyd.EventKind.NOTIFICATIONS_DROPPED)
        assert (dropped.count, dropped.pattern) == (3, "p.queue")


def test_disconnect_policy_held_like_queue_while_suspended(daemon: Daemon) -> None:
    # § 6.8: a suspended connection is not slow; its disconnect subscriptions are held like queue(1000).
    with daemon.center() as center, daemon.center() as poster:
        got = Collector()
        center.observe("p.disc", got, policy=notifyd.Policy.disconnect())
        with center.suspended():
            for i in range(3):
                poster.post("p.disc", str(i))
        assert [n.text for n in got.wait_for(3)] == ["0", "1", "2"]
        assert center.connected


def test_disconnect_policy_drops_a_slow_consumer_which_reconnects(tmp_path) -> None:  # type: ignore[no-untyped-def]
    daemon = Daemon(tmp_path, extra=["--outbound-limit", "65536"]).start()
    try:
        with daemon.center() as center, daemon.center() as poster:
            events = Events()
            center.add_event_listener(events)
            release = threading.Event()
            received: List[notifyd.Notification] = []

            def stall(n: notifyd.Notification) -> None:  # blocks the reader: the daemon's queue fills up
                received.append(n)
                release.wait(TIMEOUT)

            observation = center.observe("p.slow", stall, policy=notifyd.Policy.disconnect(),
                                         executor=notifyd.READER_THREAD)
            payload = b"x" * 60_000
            for _ in range(1000):
                if poster.post("p.slow", payload).delivered_count == 0:
                    break  # this post made the daemon close the slow connection
            else:
                pytest.fail("the daemon never disconnected the slow consumer")
            release.set()
            lost = events.wait_for(notifyd.EventKind.DISCONNECTED)
            assert "slow" in lost.reason, lost.reason
            again = events.wait_for(notifyd.EventKind.CONNECTED)
            assert not again.daemon_restarted
            observation.cancel()
            got = Collector()
            center.observe("p.slow", got)
            poster.post("p.slow", "after")
            assert got.wait_for(1)[0].text == "after"
    finally:
        daemon.stop()


def test_state_across_processes_and_default(daemon: Daemon) -> None:
    with daemon.center() as center:
        assert center.get_state("s.never") == 0
        assert center.get_state("s.never", None) is None
        center.set_state("s.value", 2**64 - 1)
        assert daemon.notifyctl("state", "get", "s.value").stdout.strip() == str(2**64 - 1)
        daemon.notifyctl("state", "set", "s.other", "42")
        assert center.get_state("s.other") == 42
        center.set_state("s.zero", 0)
        assert center.get_state("s.zero", None) == 0
        with pytest.raises(ValueError):
            center.set_state("s.value", -1)
        assert notifyd.get_state is not None


def test_retained_value_for_new_observers(daemon: Daemon) -> None:
    with daemon.center() as center, daemon.center() as poster:
        poster.post("r.temp", "old", retain=True)
        poster.post("r.temp", "21", retain=True)
        poster.post("r.temp", "not kept")  # without retain: the retained value stays
        daemon.notifyctl("post", "--retain", "r.other", "cli")
        got = Collector()
        center.observe("r.>", got, current_value=True)
        first = got.wait_for(2)
        assert sorted((n.name, n.text, n.retained) for n in first) == [("r.other", "cli", True),
                                                                       ("r.temp", "21", True)]
        poster.post("r.temp", "live")
        assert got.wait_for(3)[2].retained is False
        plain = Collector()
        center.observe("r.temp", plain)  # without current_value: nothing until the next post
        poster.post("r.temp", "next")
        assert [n.text for n in plain.wait_for(1)] == ["next"]


def test_suspend_holds_until_resume(daemon: Daemon) -> None:
    with daemon.center() as center, daemon.center() as poster:
        got = Collector()
        center.observe("h.x", got, executor=notifyd.READER_THREAD, policy=notifyd.Policy.queue(10))
        center.suspend()
        center.suspend()  # nested
        poster.post("h.x", "1")
        poster.post("h.x", "2")
        center.synchronize()  # PONG: a notification not held would have been handed over before it
        assert got.items == []
        center.resume()
        center.synchronize()
        assert got.items == []  # still suspended once
        center.resume()
        assert [n.text for n in got.wait_for(2)] == ["1", "2"]
        with pytest.raises(notifyd.InvalidRequest):
            center.resume()


def test_cancel_stops_delivery_and_unsubscribes(daemon: Daemon) -> None:
    with daemon.center() as center:
        got, other = Collector(), Collector()
        observation = center.observe("c.x", got, executor=notifyd.READER_THREAD)
        center.observe("c.>", other, executor=notifyd.READER_THREAD)
        center.post("c.x", "1")
        got.wait_for(1)
        observation.cancel()
        observation.cancel()  # idempotent
        center.post("c.x", "2")
        center.synchronize()
        assert [n.text for n in other.items] == ["1", "2"]
        assert [n.text for n in got.items] == ["1"]
        assert center.status()["subscriptions"] == 1  # the daemon dropped the cancelled subscription
        with center.observe("c.y", got):
            pass
        center.synchronize()
        assert center.status()["subscriptions"] == 1


def test_cancel_inside_callback(daemon: Daemon) -> None:
    with daemon.center() as center:
        got: List[str] = []
        done = threading.Event()

        def once(n: notifyd.Notification) -> None:
            got.append(n.text)
            holder[0].cancel()
            done.set()

        holder = [center.observe("c.once", once)]
        center.post("c.once", "1")
        center.post("c.once", "2")
        assert done.wait(TIMEOUT)
        center.synchronize()
        assert got == ["1"]


def test_callbacks_on_an_executor_in_order_and_may_call_the_center(daemon: Daemon) -> None:
    with ThreadPoolExecutor(max_workers=4) as pool, daemon.center(executor=pool) as center:
        got = Collector()
        thread_names: List[str] = []

        def record(n: notifyd.Notification) -> None:
            thread_names.append(threading.current_thread().name)
            got(n)
            if n.text == "9":
                center.post("e.echo", "from callback")  # a blocking call inside a callback is fine

        center.observe("e.x", record)
        echo = Collector()
        center.observe("e.echo", echo)
        for i in range(10):
            center.post_nowait("e.x", str(i))
        assert [n.text for n in got.wait_for(10)] == [str(i) for i in range(10)]
        echo.wait_for(1)
        assert all(name != "notifyd-io" for name in thread_names)


def test_reader_thread_callbacks_cannot_wait_for_the_daemon(daemon: Daemon) -> None:
    with daemon.center() as center:
        errors: List[BaseException] = []
        done = threading.Event()

        def bad(n: notifyd.Notification) -> None:
            try:
                center.post("rt.y")
            except notifyd.NotifydError as error:
                errors.append(error)
            center.post_nowait("rt.z")  # fine
            done.set()

        center.observe("rt.x", bad, executor=notifyd.READER_THREAD)
        center.post("rt.x")
        assert done.wait(TIMEOUT)
        assert errors and "I/O thread" in str(errors[0])


def test_process_local_names_stay_in_process(daemon: Daemon) -> None:
    with daemon.center() as center:
        got = Collector()
        center.observe("self.>", got)
        receipt = center.post("self.cache.flush", "now")
        assert receipt == notifyd.PostReceipt(0, 1)
        (n,) = got.wait_for(1)
        assert n.text == "now" and n.sequence == 0
        assert center.status()["posts"] == 0
        with pytest.raises(notifyd.InvalidName):
            center.get_state("self.x")


def test_invalid_names_raise_specific_errors(daemon: Daemon) -> None:
    with daemon.center() as center:
        for bad in ["a..b", "", "org.*", "org/x", "a" * 256]:
            with pytest.raises(notifyd.InvalidName):
                center.post(bad)
        with pytest.raises(notifyd.InvalidName):
            center.observe("org.>.x", print)
        with pytest.raises(notifyd.InvalidName):
            center.set_state("x y", 1)
        with pytest.raises(notifyd.PayloadTooLarge):
            center.post("big", b"x" * 65_537)
        with pytest.raises(TypeError):
            center.post("x", 5)  # type: ignore[arg-type]
        assert center.post("x", b"x" * 65_536).delivered_count == 0
        assert center.connected


def test_daemon_side_errors_map_to_exceptions(daemon: Daemon) -> None:
    # The daemon rejects what the local checks let through: a payload above a daemon's lower limit, and
    # a post_nowait refusal arrives as an event.
    with daemon.center() as center:
        events = Events()
        center.add_event_listener(events)
        center._daemon = notifyd.DaemonInfo(0, b"\0" * 16, 255, 1 << 20, 131072, 65536, "fake")  # lie about limits
        with pytest.raises(notifyd.PayloadTooLarge) as caught:
            center.post("big", b"x" * 65_537)
        assert caught.value.code == notifyd.ErrorCode.PAYLOAD_TOO_LARGE and "65536" in str(caught.value)
        center.post_nowait("big", b"x" * 65_537)
        rejected = events.wait_for(notifyd.EventKind.REQUEST_REJECTED)
        assert isinstance(rejected.error, notifyd.PayloadTooLarge)
        assert center.post("ok").sequence >= 1


def test_permission_denied_for_another_users_names(shared_dir) -> None:  # type: ignore[no-untyped-def]
    if os.getuid() != 0:
        pytest.skip("needs root to run a client as another user")
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable]
    probe = subprocess.run([*as_nobody, "-c", "import notifyd"], capture_output=True, text=True, timeout=TIMEOUT,
                           env=dict(os.environ, PYTHONPATH=PYTHON_DIR), cwd="/")
    if probe.returncode != 0:
        pytest.skip(f"this interpreter cannot run as uid 65534: {probe.stderr.strip()[-200:]}")
    (shared_dir / "notifyd.conf").write_text("quota state-names-per-uid 1\n")
    daemon = Daemon(shared_dir, extra=["--socket-mode", "666"]).start()
    script = (
        "import sys, notifyd\n"
        "c = notifyd.Center(sys.argv[1])\n"
        "try:\n"
        "    c.post('user.1000.inbox', 'x')\n"
        "except notifyd.PermissionDenied as e:\n"
        "    print('denied', e.code.wire_name)\n"
        "try:\n"
        "    c.observe('user.1000.>', print)\n"
        "except notifyd.PermissionDenied as e:\n"
        "    print('observe-denied')\n"
        "print(c.post('user.65534.inbox', 'mine').delivered_count)\n"
        "c.set_state('q.one', 1)\n"
        "try:\n"
        "    c.set_state('q.two', 2)\n"
        "except notifyd.QuotaExceeded as e:\n"
        "    print('quota', e.code.wire_name)\n"
        "c.set_state('q.one', 3)\n"
        "print(c.get_state('q.one'), c.get_state('q.two', None))\n"
    )
    try:
        child = subprocess.run([*as_nobody, "-c", script, daemon.socket], capture_output=True, text=True, timeout=TIMEOUT,
                               env=dict(os.environ, PYTHONPATH=PYTHON_DIR), cwd="/")
        assert child.returncode == 0, child.stderr
        assert child.stdout.split() == ["denied", "permission-denied", "observe-denied", "0", "quota", "quota-exceeded",
                                        "3", "None"]
    finally:
        daemon.stop()


def test_queries(daemon: Daemon) -> None:
    with daemon.center(client_name="query-test") as center:
        center.observe("q.a", print)
        center.set_state("q.b", 3)
        names = {entry["name"]: entry for entry in center.names("q.>")}
        assert names["q.a"]["subscribers"] == 1 and names["q.b"]["state"] == 3
        assert any(c["client_name"] == "query-test" for c in center.clients())
        assert center.status()["connections"] >= 1
        # An answer longer than one frame comes in parts (QUERY_RESULT_PART), joined in order.
        long_names = [f"q.long.{i:04d}." + "x" * 200 for i in range(800)]
        for name in long_names:
            center.set_state(name, 1)
        listed = [entry["name"] for entry in center.names("q.long.>")]
        assert listed == long_names


def test_module_level_api(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFYD_SOCKET", daemon.socket)
    try:
        got = Collector()
        notifyd.observe("m.x", got)
        assert notifyd.post("m.x", "module").delivered_count == 1
        assert got.wait_for(1)[0].text == "module"
        notifyd.set_state("m.s", 9)
        assert notifyd.get_state("m.s") == 9 and notifyd.get_state("m.none", None) is None
        assert notifyd.default_center().socket_path == daemon.socket
    finally:
        notifyd.default_center().close()


def test_many_threads_post_and_observe_concurrently(daemon: Daemon) -> None:
    with daemon.center() as center, daemon.center() as observer_center:
        got = Collector()
        observer_center.observe("mt.>", got, policy=notifyd.Policy.queue(100_000))
        threads, per_thread = 4, 250

        def poster(index: int) -> None:
            for i in range(per_thread):
                if i % 2:
                    center.post(f"mt.t{index}", str(i))
                else:
                    center.post_nowait(f"mt.t{index}", str(i))

        workers = [threading.Thread(target=poster, args=(t,)) for t in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(TIMEOUT)
        items = got.wait_for(threads * per_thread)
        assert len(items) == threads * per_thread
        sequences = [n.sequence for n in items]
        assert sequences == sorted(sequences) and len(set(sequences)) == len(sequences)
        for t in range(threads):  # each poster's notifications arrive in its posting order
            assert [n.text for n in items if n.name == f"mt.t{t}"] == [str(i) for i in range(per_thread)]
