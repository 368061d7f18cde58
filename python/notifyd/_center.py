"""The synchronous client: :class:`Center`, its :class:`Observation` handles, and its I/O thread."""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import json
import logging
import math
import os
import select
import socket
import sys
import threading
import time
import weakref
from typing import (
    Any, Callable, Deque, Dict, List, Optional, Tuple, Type, TypeVar, Union, overload,
)

from . import _wire as wire
from ._model import (
    ConnectionEvent, DaemonInfo, EventKind, Notification, Policy, PolicyKind, PostReceipt, Sender,
)
from ._paths import DaemonUser, default_socket_path, is_root_only_directory, peer_credentials
from .errors import (
    CenterClosed, ConnectionClosedByDaemon, ConnectionLost, DaemonNotFound, ErrorCode, InvalidName,
    InvalidRequest, NotConnected, NotifydError, NotifydTimeout, PayloadTooLarge, ProtocolError, UntrustedDaemon,
    error_for_code,
)
from .names import (
    MAX_NAME_LENGTH, is_process_local, matches_labels, validate_name, validate_pattern,
)

logger = logging.getLogger("notifyd")

T = TypeVar("T")
Callback = Callable[[Notification], Any]
Payload = Union[bytes, bytearray, memoryview, str]

DEFAULT_MAX_PAYLOAD_LENGTH = 65_536

# Writes never raise SIGPIPE (a program may have restored its default action); a dead peer is EPIPE.
_SEND_FLAGS = getattr(socket, "MSG_NOSIGNAL", 0)
# How many queued frames one sendmsg() hands to the kernel.
_MAX_IOV = 64
# A caller whose deadline passed also counts a stall that ends within this much of now (clock rounding).
_SLACK = 0.001


class _ReaderThread:
    """Sentinel type of :data:`READER_THREAD`."""

    def __repr__(self) -> str:
        return "notifyd.READER_THREAD"


#: Pass as ``executor=`` to run a callback on the center's I/O thread itself: the lowest latency, but the
#: callback must not block, and must not wait for the daemon (``post``, ``get_state``… raise
#: :class:`NotifydError` there, since the answer could never be read); ``post_nowait`` is fine.
READER_THREAD = _ReaderThread()

Executor = Union[concurrent.futures.Executor, _ReaderThread, None]


def _payload_bytes(payload: Payload) -> bytes:
    if isinstance(payload, str):
        return payload.encode("utf-8")
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return bytes(payload)
    raise TypeError(f"a payload is bytes or str, not {type(payload).__name__}")


class Observation:
    """A live observation made by :meth:`Center.observe`; :meth:`cancel` (or leaving a ``with`` block) ends it.

    Each observation has its own daemon subscription, so the daemon's ``OVERFLOW`` reports reach exactly the
    observation whose ``queue`` policy dropped notifications. Its callbacks run one at a time, in the order the
    daemon delivered the notifications, on its executor.
    """

    def __init__(self, center: "Center", subscription_id: int, pattern: str, policy: Policy, current_value: bool,
                 callback: Callback, executor: Executor, on_end: Optional[Callable[[], None]] = None) -> None:
        """Made by the center; not meant to be called directly."""
        self._center = center
        #: The daemon subscription id of this observation (unique in its center, ≥ 1).
        self.subscription_id = subscription_id
        #: The name or pattern observed.
        self.pattern = pattern
        #: The delivery policy asked for.
        self.policy = policy
        #: Whether the observation asked for the retained (current) value.
        self.current_value = current_value
        self._labels = pattern.split(".")
        self._callback = callback
        self._executor = executor
        self._on_end = on_end
        self._cancelled = False
        self._ended = False
        self._call_lock = threading.RLock()
        self._queue: Deque[Notification] = collections.deque()
        self._queue_lock = threading.Lock()
        self._draining = False
        self._pending_drops = 0
        #: Whether the daemon has confirmed the subscription at least once (process-local ones at once).
        self.active = False

    @property
    def local(self) -> bool:
        """Whether this observes process-local (``self.``) names, delivered without the daemon."""
        return is_process_local(self.pattern)

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` was called (or the center closed)."""
        return self._cancelled

    def matches(self, name: str) -> bool:
        """Whether a notification named ``name`` reaches this observation."""
        return matches_labels(self._labels, name)

    def cancel(self) -> None:
        """Ends the observation: idempotent, safe inside its own callback.

        Once it returns no new callback starts, and a callback running on another thread has finished (a
        callback that cancels its own observation is not waited for). The daemon subscription is removed in the
        background.
        """
        if self._cancelled:
            return
        self._cancelled = True
        self._center._remove_observation(self)
        with self._call_lock:  # waits for a callback running on another thread
            pass
        self._end()

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        self._cancelled = True
        if self._on_end is not None:
            try:
                self._on_end()
            except Exception:  # pragma: no cover - defensive
                logger.exception("notifyd: an observation's end hook failed")

    def __enter__(self) -> "Observation":
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()

    def __repr__(self) -> str:
        return f"<Observation {self.subscription_id} {self.pattern!r} {self.policy}{' cancelled' if self._cancelled else ''}>"

    # ---- delivery (called on the I/O thread) ----

    def _take_drops(self) -> int:
        drops, self._pending_drops = self._pending_drops, 0
        return drops

    def _deliver(self, notification: Notification) -> None:
        if self._cancelled:
            return
        if isinstance(self._executor, _ReaderThread):
            self._call(notification)
            return
        with self._queue_lock:
            self._queue.append(notification)
            if self._draining:
                return
            self._draining = True
        executor = self._executor if self._executor is not None else self._center._callback_executor()
        try:
            executor.submit(self._drain)
        except RuntimeError:  # the executor was shut down
            self._drop_queue()
        except Exception:  # a broken executor must not end the I/O thread
            logger.exception("notifyd: the executor of %r refused a callback", self)
            self._drop_queue()

    def _drop_queue(self) -> None:
        with self._queue_lock:
            self._queue.clear()
            self._draining = False

    def _drain(self) -> None:
        while True:
            with self._queue_lock:
                if not self._queue:
                    self._draining = False
                    return
                notification = self._queue.popleft()
            self._call(notification)

    def _call(self, notification: Notification) -> None:
        with self._call_lock:
            if self._cancelled:
                return
            try:
                self._callback(notification)
            except Exception:
                logger.exception("notifyd: the callback of %r raised", self)


@dataclasses.dataclass
class _Pending:
    """A request waiting for its reply."""

    kind: str  # "reply", "subscribe", "resubscribe", "query", "background"
    future: Optional["concurrent.futures.Future[Any]"] = None
    observation: Optional[Observation] = None
    parts: List[bytes] = dataclasses.field(default_factory=list)
    what: str = ""
    #: The reply types that answer this request (an ``ERROR`` always may); anything else is a protocol error.
    reply: Tuple[Type[wire.Message], ...] = (wire.Ok,)
    #: For a query: the JSON type its answer must have (``list`` for answers in parts).
    json_type: Optional[type] = None
    #: The request's frame, while its caller may take it back (see :meth:`Center._timed_out`).
    outbound: Optional["_Outbound"] = None


class _Deadline:
    """When a call gives up: ``limit`` seconds after it started."""

    __slots__ = ("limit", "at")

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.at = time.monotonic() + max(limit, 0.0)

    def remaining(self) -> float:
        return max(0.0, self.at - time.monotonic())


_QUEUED, _WRITTEN, _FAILED = 0, 1, 2


class _Outbound:
    """A frame on its way to the daemon: written at once if the socket takes it, else queued for the I/O thread.

    A frame has no deadline of its own. The connection is dropped only when the daemon takes no byte of the queue
    for the center's timeout (:meth:`Center._check_stall_locked`); a caller whose own deadline passes first takes
    its frame back if none of it was written (:meth:`Center._take_back_locked`).
    """

    __slots__ = ("data", "offset", "what", "request_id", "state", "error", "revocable")

    def __init__(self, data: bytes, what: str, request_id: Optional[int], revocable: bool) -> None:
        self.data = data
        self.offset = 0  # bytes already written
        self.what = what
        self.request_id = request_id
        self.state = _QUEUED
        self.error: Optional[NotifydError] = None
        #: Whether its caller may take it back while none of it is written (not a SUSPEND or RESUME, whose depth
        #: is already counted, nor a frame nobody waits for).
        self.revocable = revocable


def _fail(future: "Optional[concurrent.futures.Future[Any]]", error: BaseException) -> None:
    if future is None:
        return
    try:
        future.set_exception(error)
    except concurrent.futures.InvalidStateError:  # already completed by another thread
        pass


def _wake_pair() -> Tuple[socket.socket, socket.socket]:
    """The pipe that wakes the I/O thread when frames are queued for it (both ends non-blocking)."""
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    return reader, writer


#: Every center not yet garbage-collected, for the fork handler.
_live_centers: "weakref.WeakSet[Center]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for center in list(_live_centers):
        try:
            center._reset_after_fork()
        except Exception:  # pragma: no cover - defensive: never break fork()
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Center:
    """A connection to the notifyd daemon: post, observe, state values, suspension.

    ``Center()`` connects at once to the default socket (``$NOTIFYD_SOCKET``, else ``/run/notifyd/notifyd.sock``
    for root, else ``$XDG_RUNTIME_DIR/notifyd/notifyd.sock``, else ``/tmp/notifyd-UID/notifyd.sock``), checks
    that the daemon runs as a trusted user, and completes the handshake; it raises :class:`DaemonNotFound` or
    :class:`UntrustedDaemon` promptly if it cannot. With ``require_daemon=False`` it returns at once and keeps
    trying in the background instead.

    After the connection is lost (the daemon restarted, crashed, or disconnected a slow consumer) the center
    reconnects with back-off (``initial_delay`` doubling up to ``max_delay`` seconds; a ``GOODBYE``'s delay
    first), resubscribes every live observation and re-suspends if suspended. While disconnected, requests raise
    :class:`NotConnected` at once; observations made then become active on reconnect.

    Callbacks run on ``executor`` (per observation or for the center): by default one background thread of the
    center, ``notifyd-callbacks``, so callbacks may call the center's blocking methods.

    Every call is bounded by its ``timeout`` (default: the center's), writing included. A call whose timeout
    passes before any of its request was written (the daemon reads more slowly than this process writes) takes
    it back, raises :class:`NotifydTimeout`, and the connection stays. A daemon that reads nothing of what is
    queued for the center's ``timeout`` (stopped, hung, or not a daemon at all) is taken for dead: the connection
    is dropped and reconnected, the calls whose requests were still queued raise :class:`NotifydTimeout`, and
    the others waiting on it :class:`ConnectionLost`.

    After ``os.fork()`` (e.g. ``multiprocessing``'s fork start method) the child's copy of a center never touches
    the parent's connection: it starts with no observations, not suspended, and connects on its first use with a
    connection of its own (as ``require_daemon=False`` would: a request raises :class:`NotConnected` if no daemon
    can be reached then). The parent's center goes on unaffected.

    A center is thread-safe. Close it with :meth:`close` or a ``with`` block.
    """

    def __init__(
        self,
        socket_path: Optional[str] = None,
        *,
        client_name: Optional[str] = None,
        timeout: float = 10.0,
        daemon_user: Optional[DaemonUser] = None,
        executor: Optional[concurrent.futures.Executor] = None,
        reconnect: bool = True,
        require_daemon: bool = True,
        initial_delay: float = 0.05,
        max_delay: float = 2.0,
    ) -> None:
        """Connects (see the class documentation). ``timeout`` bounds every wait for the daemon, in seconds."""
        self.socket_path = socket_path if socket_path else default_socket_path()
        name = client_name if client_name is not None else os.path.basename(sys.argv[0] if sys.argv else "") or "python"
        self.client_name = name.encode("utf-8")[:wire.MAX_CLIENT_NAME_LENGTH].decode("utf-8", "ignore")
        self.timeout = timeout
        self.daemon_user = daemon_user if daemon_user is not None else DaemonUser.from_environment()
        self._reconnect = reconnect
        self._initial_delay = initial_delay
        self._max_delay = max(initial_delay, max_delay)
        self._user_executor = executor
        self._own_executor: Optional[concurrent.futures.ThreadPoolExecutor] = None

        self._lock = threading.RLock()
        self._state_changed = threading.Condition(self._lock)
        self._start_lock = threading.Lock()
        self._needs_start = False  # set in a forked child: connect on first use
        self._sock: Optional[socket.socket] = None
        # Frames of the current connection not yet (completely) written, in order; written under _lock only.
        self._out: Deque[_Outbound] = collections.deque()
        # The stall clock: when the queue last made progress (a byte written) or became non-empty. It does not
        # run while the I/O thread is away from poll() (since _io_busy_since), e.g. in a READER_THREAD callback:
        # the daemon may rightly stop reading a client that does not read its answers.
        self._out_since = 0.0
        self._io_busy_since: Optional[float] = None
        # Incremented in a forked child: an I/O loop of an older generation is the parent's and ends.
        self._generation = 0
        self._drop_reason: Optional[str] = None
        self._wake_r, self._wake_w = _wake_pair()
        self._thread: Optional[threading.Thread] = None
        self._connected = False
        self._daemon: Optional[DaemonInfo] = None
        self._last_instance: Optional[bytes] = None
        self._handshake_error: Optional[NotifydError] = None
        self._closing_error: Optional[NotifydError] = None
        self._goodbye_ms: Optional[int] = None
        self._pending: Dict[int, _Pending] = {}
        self._next_request_id = 1
        self._next_subscription_id = 1
        self._observations: Dict[int, Observation] = {}
        self._routing: Tuple[Observation, ...] = ()
        self._suspend_depth = 0
        self._closed = False
        self._wake = threading.Event()
        self._listeners: List[Callable[[ConnectionEvent], Any]] = []
        self._own_credentials = Sender(os.getpid(), os.getuid(), os.getgid())

        first_error: Optional[NotifydError] = None
        sock: Optional[socket.socket] = None
        try:
            sock = self._open_socket()
            self._attach(sock)
        except NotifydError as error:
            if require_daemon:
                self._close_wake_pair()
                raise
            first_error = error
            sock = None
        _live_centers.add(self)
        self._thread = threading.Thread(target=self._run, args=(sock, self._generation), name="notifyd-io",
                                        daemon=True)
        self._thread.start()
        if first_error is None and require_daemon:
            try:
                self._wait_connected(timeout, fail_fast=True)
            except BaseException:
                self.close()
                raise

    # ---- public API ----------------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """Whether the handshake with the daemon is complete on the current connection."""
        return self._connected

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    @property
    def daemon(self) -> Optional[DaemonInfo]:
        """What the daemon announced on the current (or last) connection; ``None`` before the first."""
        return self._daemon

    @property
    def suspend_depth(self) -> int:
        """How many :meth:`suspend` calls are not yet balanced by :meth:`resume`."""
        return self._suspend_depth

    def wait_until_connected(self, timeout: Optional[float] = None) -> DaemonInfo:
        """Waits for a completed handshake; returns the daemon's ``WELCOME`` data.

        Raises :class:`NotifydTimeout` after ``timeout`` seconds (default: the center's), the handshake's error
        if the daemon refused this client, or :class:`CenterClosed`.
        """
        return self._wait_connected(timeout, fail_fast=False)

    def _wait_connected(self, timeout: Optional[float], fail_fast: bool) -> DaemonInfo:
        self._ensure_started()
        limit = self.timeout if timeout is None else timeout
        with self._lock:
            self._state_changed.wait_for(
                lambda: self._connected or self._closed or (fail_fast and self._handshake_error is not None), limit)
            if self._closed:
                raise CenterClosed("the notification center was closed")
            if self._connected and self._daemon is not None:
                return self._daemon
            if fail_fast and self._handshake_error is not None:
                raise self._handshake_error
            last = f" (last attempt: {self._handshake_error.message})" if self._handshake_error is not None else ""
            raise NotifydTimeout(f"no connection to notifyd at {self.socket_path} within {limit} seconds{last}")

    def post(self, name: str, payload: Payload = b"", *, retain: bool = False,
             timeout: Optional[float] = None) -> PostReceipt:
        """Posts ``payload`` (bytes, or str sent as UTF-8) under ``name`` and waits for the daemon's receipt.

        ``retain`` keeps it as the name's retained value (see ``observe(current_value=True)``). Raises
        :class:`InvalidName` or :class:`PayloadTooLarge` before sending anything, and the daemon's refusals
        (:class:`PermissionDenied`, :class:`QuotaExceeded`…) as they come. A ``self.`` name is delivered to this
        process's observations only (the receipt's sequence is 0, its count the number of observations).
        """
        deadline = self._deadline(timeout)
        receipt: PostReceipt = self._wait(self._post_future(name, payload, retain, True, deadline), deadline,
                                          f"posting {name!r}")
        return receipt

    def post_nowait(self, name: str, payload: Payload = b"", *, retain: bool = False,
                    timeout: Optional[float] = None) -> None:
        """Posts without waiting for the daemon (fire and forget, like Darwin's ``notify_post``).

        Local checks still raise at once; a refusal by the daemon arrives later as a ``REQUEST_REJECTED``
        connection event (and in the log). :meth:`synchronize` waits until the daemon has fanned it out.
        It returns once the frame is written to the socket; while the daemon does not read, that waits, at
        most ``timeout`` seconds (default: the center's), then raises :class:`NotifydTimeout`: the post was not
        sent if none of it was written (the connection stays), else the rest is written as the daemon reads.
        On the I/O thread (``READER_THREAD`` callbacks) it never waits: the frame is queued.
        """
        self._post_future(name, payload, retain, False, self._deadline(timeout), wait_written=True)

    def synchronize(self, timeout: Optional[float] = None) -> None:
        """Returns once the daemon has processed everything sent before (``PING``/``PONG``, § 6.5).

        Earlier observations are active and earlier posts queued to every subscriber.
        """
        deadline = self._deadline(timeout)
        self._wait(self._request(lambda rid: wire.Ping(rid), "synchronize", deadline, reply=(wire.Pong,)),
                   deadline, "synchronize")

    @overload
    def get_state(self, name: str, *, timeout: Optional[float] = None) -> int: ...

    @overload
    def get_state(self, name: str, default: T, *, timeout: Optional[float] = None) -> Union[int, T]: ...

    def get_state(self, name: str, default: Any = 0, *, timeout: Optional[float] = None) -> Any:
        """The state value of ``name`` (a 64-bit unsigned int), or ``default`` (0) if it was never set.

        Pass ``default=None`` to tell "never set" from a real 0.
        """
        self._check_name(name, "get the state of")
        deadline = self._deadline(timeout)
        value = self._wait(self._request(lambda rid: wire.GetState(rid, name), "get_state", deadline,
                                         reply=(wire.State,)),
                           deadline, f"reading the state of {name!r}")
        return default if value is None else value

    def set_state(self, name: str, value: int, *, timeout: Optional[float] = None) -> None:
        """Sets the state value of ``name`` to ``value`` (0 ... 2⁶⁴−1). Setting a state does not post."""
        self._check_name(name, "set the state of")
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 0xFFFF_FFFF_FFFF_FFFF:
            raise ValueError(f"a state value is an int from 0 to 2**64-1, not {value!r}")
        deadline = self._deadline(timeout)
        self._wait(self._request(lambda rid: wire.SetState(rid, value, name), "set_state", deadline), deadline,
                   f"setting the state of {name!r}")

    def observe(self, pattern: str, callback: Callback, *, policy: Policy = Policy(),
                current_value: bool = False, executor: Executor = None,
                timeout: Optional[float] = None) -> Observation:
        """Calls ``callback(notification)`` for every notification whose name matches ``pattern``.

        ``pattern`` is a name or a pattern (``*`` one label, a final ``>`` one or more). ``policy`` says what the
        daemon does while this process falls behind or is suspended (:class:`Policy`). ``current_value`` first
        delivers the retained notification of every matching name (``Notification.retained`` set).
        ``executor`` is where the callback runs (default: the center's; :data:`READER_THREAD` for the I/O
        thread). Returns once the daemon confirmed the subscription (at once while disconnected: it becomes
        active on reconnect). Raises :class:`InvalidName` for a bad pattern, and the daemon's refusals.
        """
        deadline = self._deadline(timeout)
        observation, future = self._start_observation(pattern, callback, policy, current_value, executor)
        if future is not None:
            try:
                self._wait(future, deadline, f"observing {pattern!r}")
            except NotifydTimeout:
                observation.cancel()
                raise
        return observation

    def suspend(self, timeout: Optional[float] = None) -> None:
        """Asks the daemon to hold this center's notifications under their policies until :meth:`resume`.

        Suspensions nest; the depth is replayed after a reconnection. Replies still arrive while suspended.
        """
        self._change_suspension(+1, timeout)

    def resume(self, timeout: Optional[float] = None) -> None:
        """Undoes one :meth:`suspend`; at depth 0 the daemon releases what it held, in order, after the reply.

        Raises :class:`InvalidRequest` without an outstanding :meth:`suspend`.
        """
        self._change_suspension(-1, timeout)

    def _change_suspension(self, step: int, timeout: Optional[float]) -> None:
        # The depth and the decision to send change together under the lock, so that a reconnection (which
        # replays the depth under the same lock) never counts a SUSPEND twice or misses one.
        self._ensure_started()
        deadline = self._deadline(timeout)
        future: "concurrent.futures.Future[Any]" = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise CenterClosed("the notification center was closed")
            if step < 0 and self._suspend_depth == 0:
                raise InvalidRequest("resume() without a matching suspend()", ErrorCode.INVALID_REQUEST)
            self._suspend_depth += step
            sock = self._sock
            if sock is None:
                return  # replayed on reconnect
            request_id = self._take_request_id()
            what = "suspend" if step > 0 else "resume"
            self._pending[request_id] = _Pending("reply", future, what=what)
            data = (wire.Suspend(request_id) if step > 0 else wire.Resume(request_id)).encode()
            self._enqueue(sock, data, what, request_id)  # never taken back: the depth is already counted
        try:
            self._wait(future, deadline, what)
        except (ConnectionLost, ConnectionClosedByDaemon):
            pass  # the new connection replays the depth

    def suspended(self) -> "_Suspension":
        """A context manager: :meth:`suspend` on entry, :meth:`resume` on exit."""
        return _Suspension(self)

    def status(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        """The daemon's figures (``QUERY`` status, § 11.3) as a dict."""
        deadline = self._deadline(timeout)
        result: Dict[str, Any] = self._wait(self._query_future(1, "", deadline), deadline, "status")
        return result

    def names(self, pattern: str = "", timeout: Optional[float] = None) -> List[Dict[str, Any]]:
        """Names with subscribers, a state value or a retained notification, optionally matching ``pattern``."""
        if pattern:
            validate_pattern(pattern)
        deadline = self._deadline(timeout)
        result: List[Dict[str, Any]] = self._wait(self._query_future(2, pattern, deadline), deadline, "names")
        return result

    def clients(self, timeout: Optional[float] = None) -> List[Dict[str, Any]]:
        """The daemon's connections this user may see (all of them for root)."""
        deadline = self._deadline(timeout)
        result: List[Dict[str, Any]] = self._wait(self._query_future(3, "", deadline), deadline, "clients")
        return result

    def add_event_listener(self, listener: Callable[[ConnectionEvent], Any]) -> Callable[[], None]:
        """Calls ``listener(event)`` for every :class:`ConnectionEvent` from now on, on the center's executor.

        Returns a function that removes the listener.
        """
        with self._lock:
            self._listeners.append(listener)

        def remove() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove

    def close(self) -> None:
        """Closes the connection and ends every observation (async iterators finish). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._needs_start = False
            sock = self._sock
            pending = list(self._pending.values())
            self._pending.clear()
            observations = list(self._observations.values())
            self._observations.clear()
            self._routing = ()
            self._fail_out(CenterClosed("the notification center was closed"))
            self._state_changed.notify_all()
            thread = self._thread
        self._wake.set()
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for entry in pending:
            _fail(entry.future, CenterClosed("the notification center was closed"))
        for observation in observations:
            observation._end()
        if thread is None:
            self._close_wake_pair()  # no I/O thread to do it (a forked child's center never used)
        elif thread is not threading.current_thread():
            thread.join(self.timeout)
        if self._own_executor is not None:
            self._own_executor.shutdown(wait=False)
        _live_centers.discard(self)

    def __enter__(self) -> "Center":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "connected" if self._connected else "disconnected"
        return f"<notifyd.Center {self.socket_path!r} {state}>"

    # ---- requests ------------------------------------------------------------------------------------------

    def _check_name(self, name: str, what: str) -> None:
        limit = self._daemon.max_name_length if self._daemon is not None else MAX_NAME_LENGTH
        validate_name(name, limit, allow_local=True)
        if is_process_local(name):
            raise InvalidName(f"cannot {what} {name!r}: 'self.' names are process-local and have no state",
                              ErrorCode.INVALID_NAME)

    def _deadline(self, timeout: Optional[float]) -> _Deadline:
        return _Deadline(self.timeout if timeout is None else timeout)

    def _post_future(self, name: str, payload: Payload, retain: bool, ack: bool, deadline: _Deadline, *,
                     wait_written: bool = False) -> "concurrent.futures.Future[Any]":
        limit = self._daemon.max_name_length if self._daemon is not None else MAX_NAME_LENGTH
        validate_name(name, limit, allow_local=True)
        data = _payload_bytes(payload)
        if is_process_local(name):
            count = self._deliver_locally(name, data)
            future: "concurrent.futures.Future[Any]" = concurrent.futures.Future()
            future.set_result(PostReceipt(0, count))
            return future
        max_payload = self._daemon.max_payload_length if self._daemon is not None else DEFAULT_MAX_PAYLOAD_LENGTH
        if len(data) > max_payload:
            raise PayloadTooLarge(f"payload of {len(data)} bytes exceeds the daemon's limit of {max_payload} bytes",
                                  ErrorCode.PAYLOAD_TOO_LARGE)
        flags = (0x01 if ack else 0) | (0x02 if retain else 0)
        return self._request(lambda rid: wire.Post(rid, flags, name, data), f"post {name!r}", deadline,
                             expect_reply=ack, reply=(wire.Posted,), wait_written=wait_written)

    def _query_future(self, kind: int, argument: str, deadline: _Deadline) -> "concurrent.futures.Future[Any]":
        # Status is one JSON object; names and clients are arrays, asked for in parts (§ 6.10).
        what = {1: "the status query", 2: "the names query", 3: "the clients query"}[kind]
        return self._request(lambda rid: wire.Query(rid, kind | 0x80, argument), what, deadline, kind="query",
                             reply=(wire.QueryResult,), json_type=dict if kind == 1 else list)

    def _request(self, make: Callable[[int], wire.Message], what: str, deadline: _Deadline, *,
                 kind: str = "reply", expect_reply: bool = True, reply: Tuple[Type[wire.Message], ...] = (wire.Ok,),
                 json_type: Optional[type] = None, wait_written: bool = False) -> "concurrent.futures.Future[Any]":
        """Sends a request; its future completes with the reply. Never blocks unless ``wait_written`` (a
        request without reply whose caller waits until it is written, at most until ``deadline``). A caller that
        waits may take the request back when its deadline passes (:meth:`_timed_out`, :meth:`_wait_written`)."""
        self._ensure_started()
        future: "concurrent.futures.Future[Any]" = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise CenterClosed("the notification center was closed")
            sock = self._sock
            if sock is None:
                last = (f"; last attempt: {self._handshake_error.message}" if self._handshake_error is not None
                        else "")
                raise NotConnected(f"not connected to notifyd at {self.socket_path} (reconnecting in the "
                                   f"background{last})")
            request_id = self._take_request_id()
            data = make(request_id).encode()
            item = self._enqueue(sock, data, what, request_id if expect_reply else None,
                                 revocable=expect_reply or wait_written)
            if expect_reply:
                self._pending[request_id] = _Pending(kind, future, what=what, reply=reply, json_type=json_type,
                                                     outbound=item if item.state == _QUEUED else None)
        if not expect_reply:
            if wait_written:
                self._wait_written(item, deadline)
            if item.state == _FAILED and item.error is not None:
                raise item.error
            future.set_result(None)
        return future

    def _take_request_id(self) -> int:
        request_id = self._next_request_id
        self._next_request_id = request_id + 1 if request_id < 0xFFFFFFFF else 1
        return request_id

    # ---- writing ---------------------------------------------------------------------------------------------
    #
    # The socket is non-blocking. A frame is written at once by the calling thread when nothing is queued before
    # it and the socket takes it; the rest waits in _out, in order, for the I/O thread, which writes it when the
    # socket is writable. No thread ever blocks in a write.
    #
    # A daemon that is stopped or hung is told by lack of progress, as libnotifyd does: the queue is not empty and
    # the daemon has taken no byte of it for the center's timeout (time the I/O thread spends away from poll(),
    # in a READER_THREAD callback say, does not count). Then the connection is dropped (_drop_locked). A call
    # whose own deadline passes first gives up alone: it takes its frame back if none of it was written yet (and
    # raises NotifydTimeout), and the connection stays. A frame written in part stays: the stream must stay whole.

    def _enqueue(self, sock: socket.socket, data: bytes, what: str, request_id: Optional[int], *,
                 revocable: bool = False) -> _Outbound:
        """Writes or queues ``data`` on ``sock`` (the current connection); the caller holds ``_lock``."""
        item = _Outbound(data, what, request_id, revocable)
        if not self._out:
            try:
                sent = sock.send(data, _SEND_FLAGS)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as error:
                reason = f"writing to the daemon failed: {error.strerror or error}"
                self._drop_locked(sock, reason)
                item.state = _FAILED
                item.error = ConnectionLost(f"the connection to notifyd was lost: {reason}")
                return item
            if sent == len(data):
                item.state = _WRITTEN
                return item
            item.offset = sent
            self._out_since = time.monotonic()  # from now on the daemon has to read
            self._out.append(item)
            try:
                self._wake_w.send(b"\0")  # the I/O thread now waits for the socket to be writable
            except OSError:  # full (a wake-up is pending anyway) or closed
                pass
            return item
        self._out.append(item)
        return item

    def _flush(self, sock: socket.socket) -> None:
        """Writes queued frames while the socket takes them (I/O thread, when ``sock`` is writable)."""
        with self._lock:
            if self._sock is not sock or not self._out:
                return
            written = progress = False
            while self._out:
                buffers: List[Union[bytes, memoryview]] = []
                for item in self._out:
                    buffers.append(memoryview(item.data)[item.offset:] if item.offset else item.data)
                    if len(buffers) == _MAX_IOV:
                        break
                try:
                    sent = sock.sendmsg(buffers, [], _SEND_FLAGS)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError as error:
                    self._drop_locked(sock, f"writing to the daemon failed: {error.strerror or error}")
                    return
                progress = progress or sent > 0
                while sent and self._out:
                    item = self._out[0]
                    take = min(sent, len(item.data) - item.offset)
                    item.offset += take
                    sent -= take
                    if item.offset < len(item.data):
                        break
                    item.state = _WRITTEN
                    item.data = b""  # its request may wait for an answer a while: no need to keep the bytes
                    self._out.popleft()
                    written = True
                if len(buffers) < _MAX_IOV and self._out:
                    break  # the socket took only part of what was offered: it is full
            if progress:
                self._out_since = time.monotonic()
            if written:
                self._state_changed.notify_all()

    def _stall_clock_locked(self, now: float) -> float:
        """How long the daemon has taken nothing of the queue, as of ``now``, not counting the time the I/O thread
        has been away from poll() (caller holds ``_lock``; the queue is not empty)."""
        busy = self._io_busy_since
        return (now if busy is None else min(now, busy)) - self._out_since

    def _check_stall_locked(self, slack: float = 0.0) -> None:
        """Drops the connection if the daemon has read nothing of the queue for the center's timeout: it is
        stopped, hung, or no daemon at all (caller holds ``_lock``)."""
        sock = self._sock
        if sock is None or not self._out:
            return
        if self._stall_clock_locked(time.monotonic() + slack) < self.timeout:
            return
        self._drop_locked(sock, f"the daemon did not read anything from this process for {self.timeout} seconds "
                                f"(it is stopped, hung or overloaded)", stalled=True)

    def _drop_locked(self, sock: socket.socket, reason: str, *, stalled: bool = False) -> None:
        """Treats ``sock`` as dead (caller holds ``_lock``): no more requests go to it, its queued frames fail
        (after a stall, and their requests, with :class:`NotifydTimeout`), and the I/O thread sees the end of the
        connection, then reconnects as after any lost connection."""
        if self._sock is not sock:
            return
        self._sock = None
        self._drop_reason = reason
        if stalled:
            for item in self._out:
                item.error = NotifydTimeout(f"{item.what} was not written: {reason}, so the connection was dropped")
                entry = self._pending.get(item.request_id) if item.request_id is not None else None
                if entry is not None:
                    _fail(entry.future, item.error)
        self._fail_out(ConnectionLost(f"the connection to notifyd was lost: {reason}"))
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _fail_out(self, error: NotifydError) -> None:
        """Fails every queued frame (caller holds ``_lock``); frames that have an error keep it."""
        for item in self._out:
            item.state = _FAILED
            if item.error is None:
                item.error = error
        self._out.clear()
        self._state_changed.notify_all()

    def _take_back_locked(self, item: _Outbound, what: str, limit: float) -> Optional[NotifydTimeout]:
        """For a caller whose deadline passed (caller holds ``_lock``): removes its frame ``item`` from the queue
        if none of it was written, with its request and an unconfirmed observation, and returns the error to
        raise; ``None`` if the frame is not in the queue or is written in part (it stays)."""
        if item.state != _QUEUED or item.offset or not item.revocable:
            return None
        try:
            self._out.remove(item)
        except ValueError:  # pragma: no cover - a queued frame is in the queue
            return None
        item.state = _FAILED
        item.error = NotifydTimeout(f"{what} did not complete within {limit} seconds, and was not sent: the daemon "
                                    f"had not yet read what this process sent before it (the connection stays)")
        entry = self._pending.pop(item.request_id, None) if item.request_id is not None else None
        observation = entry.observation if entry is not None else None
        if observation is not None and not observation.active:
            # Never subscribed: nothing to unsubscribe when its caller cancels it.
            if self._observations.get(observation.subscription_id) is observation:
                del self._observations[observation.subscription_id]
            self._routing = tuple(o for o in self._routing if o is not observation)
        return item.error

    def _wait_written(self, item: _Outbound, deadline: _Deadline) -> None:
        """Waits until ``item`` is written, at most until ``deadline``; raises if it was not.

        On the I/O thread it does not wait: the thread writes the frame once the callback returns."""
        if item.state == _QUEUED and threading.current_thread() is not self._thread:
            with self._lock:
                self._state_changed.wait_for(lambda: item.state != _QUEUED, deadline.remaining())
                if item.state == _QUEUED:
                    self._check_stall_locked(_SLACK)
                if item.state == _QUEUED:
                    error = self._take_back_locked(item, item.what, deadline.limit)
                    if error is not None:
                        raise error
                    raise NotifydTimeout(f"{item.what} did not complete within {deadline.limit} seconds: the daemon "
                                         f"has read only part of it so far; the rest is written as it reads")
        if item.state == _FAILED and item.error is not None:
            raise item.error

    def _timed_out(self, future: "concurrent.futures.Future[Any]", what: str, limit: float) -> Optional[NotifydError]:
        """The error of a call whose deadline passed before ``future`` completed; ``None`` if it has completed
        after all (its outcome stands).

        A stalled daemon drops the connection (the call raises what the drop set). A request none of whose bytes
        were written is taken back: never sent, and the connection stays. One written in part stays queued, and
        one written waits for its answer in vain: the connection stays too.
        """
        with self._lock:
            self._check_stall_locked(_SLACK)
            if future.done() and not future.cancelled():  # a cancelled one is asyncio's wait_for giving up
                return None
            item = next((entry.outbound for entry in self._pending.values() if entry.future is future), None)
            if item is not None and item.state == _FAILED and item.error is not None:
                return item.error  # e.g. the stall just detected (a cancelled future could not take it)
            if item is not None and item.state == _QUEUED:
                error = self._take_back_locked(item, what, limit)
                if error is not None:
                    return error
                return NotifydTimeout(f"{what} did not complete within {limit} seconds: the daemon has read only "
                                      f"part of the request so far; the rest is written as it reads")
        return NotifydTimeout(f"{what} did not complete within {limit} seconds")

    def _wait(self, future: "concurrent.futures.Future[T]", deadline: _Deadline, what: str) -> T:
        if threading.current_thread() is self._thread and not future.done():
            raise NotifydError(f"{what}: cannot wait for the daemon on the center's I/O thread (a callback run with "
                               f"executor=READER_THREAD); use post_nowait() or another executor")
        try:
            return future.result(deadline.remaining())
        except concurrent.futures.TimeoutError as error:
            if isinstance(error, NotifydError):  # set by _drop_locked (TimeoutError is one class since 3.11)
                raise
            failure = self._timed_out(future, what, deadline.limit)
        if failure is None:
            return future.result(0)
        raise failure

    # ---- observations ----------------------------------------------------------------------------------------

    def _start_observation(self, pattern: str, callback: Callback, policy: Policy, current_value: bool,
                           executor: Executor, on_end: Optional[Callable[[], None]] = None
                           ) -> Tuple[Observation, Optional["concurrent.futures.Future[Any]"]]:
        """Registers an observation and sends its ``SUBSCRIBE`` (never blocks); the future is the daemon's
        answer (``None`` for a process-local pattern, or while disconnected)."""
        if not isinstance(policy, Policy):
            raise TypeError(f"policy must be a notifyd.Policy, not {type(policy).__name__}")
        if not callable(callback):
            raise TypeError("callback must be callable")
        limit = self._daemon.max_name_length if self._daemon is not None else MAX_NAME_LENGTH
        validate_pattern(pattern, limit, allow_local=True)
        local = is_process_local(pattern)
        future: Optional["concurrent.futures.Future[Any]"] = None
        if not local:
            self._ensure_started()
        with self._lock:
            if self._closed:
                raise CenterClosed("the notification center was closed")
            subscription_id = self._next_subscription_id
            self._next_subscription_id = subscription_id + 1 if subscription_id < 0xFFFFFFFF else 1
            observation = Observation(self, subscription_id, pattern, policy, current_value, callback, executor,
                                      on_end)
            self._observations[subscription_id] = observation
            sock = self._sock
            if local:
                observation.active = True
                self._routing = self._routing + (observation,)
            elif sock is not None:
                future = concurrent.futures.Future()
                request_id = self._take_request_id()
                entry = _Pending("subscribe", future, observation, what=f"observe {pattern!r}")
                self._pending[request_id] = entry
                item = self._enqueue(sock, self._subscribe_frame(request_id, observation), f"observing {pattern!r}",
                                     request_id, revocable=True)
                entry.outbound = item if item.state == _QUEUED else None
            else:
                self._routing = self._routing + (observation,)  # subscribed on reconnect
        return observation, future

    @staticmethod
    def _subscribe_frame(request_id: int, observation: Observation) -> bytes:
        policy = observation.policy
        return wire.Subscribe(request_id, observation.subscription_id, 0x01 if observation.current_value else 0,
                              int(policy.kind), policy.limit if policy.kind == PolicyKind.QUEUE else 0,
                              observation.pattern).encode()

    def _remove_observation(self, observation: Observation) -> None:
        with self._lock:
            if self._observations.get(observation.subscription_id) is not observation:
                return
            del self._observations[observation.subscription_id]
            self._routing = tuple(o for o in self._routing if o is not observation)
            sock = self._sock
            if observation.local or sock is None:
                return
            request_id = self._take_request_id()
            what = f"unsubscribe {observation.pattern!r}"
            self._pending[request_id] = _Pending("background", what=what)
            self._enqueue(sock, wire.Unsubscribe(request_id, observation.subscription_id).encode(), what, request_id)

    def _deliver_locally(self, name: str, payload: bytes) -> int:
        notification = Notification(name, payload, 0, self._own_credentials)
        targets = [o for o in self._routing if o.matches(name)]
        for observation in targets:
            observation._deliver(notification)
        return len(targets)

    # ---- connection ----------------------------------------------------------------------------------------

    def _open_socket(self) -> socket.socket:
        path = self.socket_path
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError as error:  # out of descriptors, say: the I/O thread retries later
            raise DaemonNotFound(path, f"cannot make a socket: {error.strerror or error}") from None
        try:
            sock.settimeout(self.timeout)
            try:
                sock.connect(path)
            except socket.timeout:
                raise DaemonNotFound(path, f"connecting took longer than {self.timeout} seconds") from None
            except OSError as error:
                raise DaemonNotFound(path, error.strerror or str(error)) from None
            try:
                _, daemon_uid, _ = peer_credentials(sock)
            except OSError as error:
                raise DaemonNotFound(path, f"cannot read the daemon's credentials: {error.strerror or error}") from None
            own_uid = os.getuid()
            if not self.daemon_user.allows(daemon_uid, own_uid) and not is_root_only_directory(path):
                raise UntrustedDaemon(path, daemon_uid, own_uid)
            sock.setblocking(False)  # see "writing": nothing ever blocks on this socket
            return sock
        except BaseException:
            sock.close()
            raise

    def _attach(self, sock: socket.socket) -> None:
        """Makes ``sock`` the current connection: HELLO, then every live subscription and the suspension."""
        with self._lock:
            if self._closed:
                sock.close()
                raise CenterClosed("the notification center was closed")
            self._sock = sock
            self._connected = False
            self._handshake_error = None
            self._closing_error = None
            self._drop_reason = None
            self._goodbye_ms = None
            frames = [wire.Hello(wire.PROTOCOL_VERSION, 0, self.client_name).encode()]
            routing: List[Observation] = []
            for observation in self._observations.values():
                if observation.local:
                    routing.append(observation)
                    continue
                request_id = self._take_request_id()
                self._pending[request_id] = _Pending("resubscribe", None, observation,
                                                     what=f"observe {observation.pattern!r} (after reconnecting)")
                frames.append(self._subscribe_frame(request_id, observation))
                routing.append(observation)
            self._routing = tuple(routing)
            for _ in range(self._suspend_depth):
                request_id = self._take_request_id()
                self._pending[request_id] = _Pending("background", what="suspend (after reconnecting)")
                frames.append(wire.Suspend(request_id).encode())
            # A failed write drops the connection; the reader then sees its end.
            self._enqueue(sock, b"".join(frames), "the handshake", None)

    def _ensure_started(self) -> None:
        """In a forked child, on first use: connects with a connection of its own and starts the I/O thread."""
        if not self._needs_start:
            return
        with self._start_lock:
            if not self._needs_start or self._closed:
                return
            sock: Optional[socket.socket] = None
            try:
                sock = self._open_socket()
                self._attach(sock)
            except CenterClosed:
                return
            except NotifydError as error:
                sock = None
                logger.debug("notifyd: connection attempt after fork failed: %s", error)
                with self._lock:
                    self._handshake_error = error
            with self._lock:
                thread = threading.Thread(target=self._run, args=(sock, self._generation), name="notifyd-io",
                                          daemon=True)
                self._thread = thread
                self._needs_start = False
            thread.start()

    def _reset_after_fork(self) -> None:
        """Runs in the child after ``fork()`` (only the forking thread exists there).

        The connection, the pending requests, the observations, the suspension and the threads are the parent's:
        the child forgets them without touching the connection (it only closes its copy of the descriptors),
        and connects on first use (:meth:`_ensure_started`). Locks may have been held by threads that do not
        exist here, so they are new. The generation changes: if the forking thread is the I/O thread (a
        ``READER_THREAD`` callback forked), the loop it returns into is the parent's, and it ends (:meth:`_run`).
        """
        self._generation += 1
        self._lock = threading.RLock()
        self._state_changed = threading.Condition(self._lock)
        self._start_lock = threading.Lock()
        self._wake = threading.Event()
        for inherited in (self._sock, self._wake_r, self._wake_w):
            if inherited is not None:
                try:
                    inherited.close()  # this process's descriptor only; never shutdown(): that would end the parent's
                except OSError:
                    pass
        if not self._closed:
            self._wake_r, self._wake_w = _wake_pair()
        self._sock = None
        self._out = collections.deque()
        self._out_since = 0.0
        self._io_busy_since = None
        self._drop_reason = None
        self._pending = {}
        self._connected = False
        self._handshake_error = None
        self._closing_error = None
        self._goodbye_ms = None
        for observation in self._observations.values():
            # Ended silently: its end hook and callbacks belong to the parent (e.g. its event loop).
            observation._cancelled = True
            observation._ended = True
        self._observations = {}
        self._routing = ()
        self._suspend_depth = 0
        self._own_executor = None  # its thread is the parent's
        self._own_credentials = Sender(os.getpid(), os.getuid(), os.getgid())
        self._thread = None
        self._needs_start = not self._closed

    def _close_wake_pair(self) -> None:
        with self._lock:
            self._wake_r.close()
            self._wake_w.close()

    def _run(self, sock: Optional[socket.socket], generation: int) -> None:
        """The I/O thread. In a forked child, the loop of the thread that forked (a ``READER_THREAD`` callback
        returning) sees a new generation and ends at once, touching nothing: the connection, the descriptors and
        the wake-up pipe it knew are the parent's, and the child's center has its own I/O thread."""
        try:
            self._reconnect_loop(sock, generation)
        finally:
            if self._generation == generation:
                self._close_wake_pair()

    def _reconnect_loop(self, sock: Optional[socket.socket], generation: int) -> None:
        delay = self._initial_delay
        while not self._closed and self._generation == generation:
            if sock is None:
                try:
                    sock = self._open_socket()
                    self._attach(sock)
                except CenterClosed:
                    return
                except NotifydError as error:
                    sock = None
                    (logger.warning if isinstance(error, UntrustedDaemon) else logger.debug)(
                        "notifyd: connection attempt failed: %s", error)
                    with self._lock:
                        self._handshake_error = error
                        self._state_changed.notify_all()
                    self._wake.wait(delay)
                    delay = min(delay * 2, self._max_delay)
                    continue
            welcomed, reason = self._read(sock, generation)
            if self._generation != generation:
                return  # forked: this loop is the parent's
            self._connection_ended(sock, reason)
            sock = None
            if welcomed:
                delay = self._initial_delay
            if not self._reconnect or self._closed:
                return
            wait = delay
            if self._goodbye_ms is not None:
                wait = min(self._goodbye_ms / 1000.0, self._max_delay)
            self._wake.wait(wait)
            if not welcomed:
                delay = min(delay * 2, self._max_delay)

    def _read(self, sock: socket.socket, generation: int) -> Tuple[bool, str]:
        """Reads and handles frames, and writes the queued ones, until the connection ends (or a callback on this
        thread forked, and this is the child); returns whether it was welcomed, and why it ended."""
        decoder = wire.FrameDecoder(from_daemon=True, max_frame_length=wire.MINIMUM_MAX_FRAME_LENGTH)
        welcomed = False
        fd = sock.fileno()
        wake = self._wake_r
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.register(wake.fileno(), select.POLLIN)
        writing = False
        while True:
            with self._lock:
                if self._generation != generation:
                    return welcomed, "forked"
                busy = self._io_busy_since
                if busy is not None:
                    # Back to poll(): the stall clock runs again, without the time spent away from it.
                    self._io_busy_since = None
                    if self._out:
                        self._out_since = time.monotonic() - max(0.0, busy - self._out_since)
                want_write = bool(self._out) and self._sock is sock
                due = self._out_since + self.timeout if want_write else math.inf
            if want_write != writing:
                poller.modify(fd, (select.POLLIN | select.POLLOUT) if want_write else select.POLLIN)
                writing = want_write
            wait_ms = None if due == math.inf else max(0, math.ceil((due - time.monotonic()) * 1000))
            readable = False
            ready = poller.poll(wait_ms)
            with self._lock:
                self._io_busy_since = time.monotonic()  # until the next poll(): see _stall_clock_locked
            for ready_fd, mask in ready:
                if ready_fd != fd:
                    try:
                        while wake.recv(4096):
                            pass
                    except OSError:
                        pass
                    continue
                if mask & select.POLLOUT:
                    self._flush(sock)
                if mask & (select.POLLIN | select.POLLHUP | select.POLLERR | select.POLLNVAL):
                    readable = True
            if writing:
                with self._lock:
                    self._check_stall_locked()
            if not readable:
                continue
            try:
                data = sock.recv(1 << 18)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError as error:
                return welcomed, f"reading from the daemon failed: {error.strerror or error}"
            try:
                if not data:
                    # Ended here (closed, or dropped): a frame cut short is no protocol error of the daemon.
                    if self._closed:
                        return welcomed, "the center was closed"
                    if self._drop_reason is not None:
                        return welcomed, self._drop_reason
                    decoder.end_of_stream()
                    if self._goodbye_ms is not None:
                        return welcomed, "the daemon is shutting down"
                    if self._closing_error is not None:
                        return welcomed, f"the daemon closed the connection: {self._closing_error.message}"
                    return welcomed, "the daemon closed the connection"
                for message in decoder.feed(data):
                    if isinstance(message, wire.Welcome):
                        welcomed = True
                        decoder.max_frame_length = max(message.max_frame_length, wire.MINIMUM_MAX_FRAME_LENGTH)
                    self._handle(message)
                    if self._generation != generation:
                        return welcomed, "forked"  # by a READER_THREAD callback, and this is the child
            except Exception as caught:
                if self._generation != generation:
                    return welcomed, "forked"
                # Whatever the daemon sent, the I/O thread goes on: the connection is closed and reconnected.
                if isinstance(caught, ProtocolError):
                    protocol_error = caught
                else:
                    logger.debug("notifyd: handling a frame from the daemon failed", exc_info=True)
                    protocol_error = ProtocolError(f"unusable frame from the daemon: {type(caught).__name__}: "
                                                   f"{caught}", ErrorCode.MALFORMED_FRAME)
                logger.warning("notifyd: protocol error from the daemon: %s", protocol_error)
                with self._lock:
                    self._closing_error = protocol_error
                    self._drop_locked(sock, f"protocol error: {protocol_error.message}")
                return welcomed, f"protocol error: {protocol_error.message}"

    def _connection_ended(self, sock: socket.socket, reason: str) -> None:
        with self._lock:
            if self._sock is sock:
                self._sock = None
                self._fail_out(CenterClosed("the notification center was closed") if self._closed
                               else ConnectionLost(f"the connection to notifyd was lost: {reason}"))
            was_connected = self._connected
            self._connected = False
            pending = list(self._pending.values())
            self._pending.clear()
            error: NotifydError = (self._closing_error if self._closing_error is not None
                                   else ConnectionLost(f"the connection to notifyd was lost: {reason}"))
            if not was_connected and not self._closed:
                self._handshake_error = error if self._closing_error is not None else DaemonNotFound(
                    self.socket_path, f"the connection ended before the handshake completed: {reason}")
            for entry in pending:
                if entry.kind == "subscribe" and entry.observation is not None and not entry.observation.active:
                    # Never confirmed: the caller of observe() gets the error, nothing is left behind.
                    self._observations.pop(entry.observation.subscription_id, None)
                    self._routing = tuple(o for o in self._routing if o is not entry.observation)
            self._state_changed.notify_all()
            graceful = self._goodbye_ms is not None
        try:
            sock.close()
        except OSError:
            pass
        for entry in pending:
            _fail(entry.future, error)
        if was_connected and not self._closed:
            logger.info("notifyd: disconnected: %s", reason)
            self._emit(ConnectionEvent(EventKind.DISCONNECTED, reason=reason, graceful=graceful))

    # ---- inbound (I/O thread) ------------------------------------------------------------------------------

    def _handle(self, message: wire.Message) -> None:
        if isinstance(message, (wire.NotificationFrame, wire.NotificationMerged)):
            merged = message.merged_count if isinstance(message, wire.NotificationMerged) else 0
            notification = Notification(message.name, message.payload, message.sequence,
                                        Sender(message.sender_pid, message.sender_uid, message.sender_gid), merged)
            for observation in self._routing:
                if observation.matches(message.name) and not observation.local:
                    drops = observation._take_drops()
                    observation._deliver(dataclasses.replace(notification, dropped_before=drops) if drops
                                         else notification)
            return
        if isinstance(message, wire.Welcome):
            info = DaemonInfo(message.daemon_pid, message.instance_id, message.max_name_length,
                              message.max_payload_length, message.max_frame_length, message.max_subscriptions,
                              message.server_name)
            with self._lock:
                restarted = self._last_instance is not None and self._last_instance != message.instance_id
                self._last_instance = message.instance_id
                self._daemon = info
                self._connected = True
                self._handshake_error = None
                self._state_changed.notify_all()
            logger.debug("notifyd: connected to %s (pid %d)", message.server_name, message.daemon_pid)
            self._emit(ConnectionEvent(EventKind.CONNECTED, daemon_restarted=restarted, daemon=info))
            return
        if isinstance(message, wire.Retained):
            with self._lock:
                entry = self._pending.get(message.request_id)
            if entry is not None and entry.kind not in ("subscribe", "resubscribe"):
                raise self._wrong_answer(message, entry)
            if entry is not None and entry.observation is not None and not entry.observation.cancelled:
                entry.observation._deliver(Notification(
                    message.name, message.payload, message.sequence,
                    Sender(message.sender_pid, message.sender_uid, message.sender_gid), retained=True))
            return
        if isinstance(message, wire.Overflow):
            with self._lock:
                dropping = self._observations.get(message.subscription_id) if message.subscription_id else None
                if dropping is not None:
                    dropping._pending_drops += message.dropped_count
            logger.warning("notifyd: the daemon dropped %d notification(s) for %s", message.dropped_count,
                           repr(dropping.pattern) if dropping is not None else "this connection")
            self._emit(ConnectionEvent(EventKind.NOTIFICATIONS_DROPPED, count=message.dropped_count,
                                       pattern=dropping.pattern if dropping is not None else None))
            return
        if isinstance(message, wire.Goodbye):
            self._goodbye_ms = message.reconnect_after_ms
            logger.info("notifyd: %s", message.reason or "the daemon is shutting down")
            return
        if isinstance(message, wire.ErrorFrame):
            self._handle_error(message)
            return
        if isinstance(message, wire.StateChanged):
            # Only a SUBSCRIBE with the states flag brings it, and this client makes none: nothing to route.
            logger.debug("notifyd: ignoring STATE_CHANGED for %r (no state subscription asked for it)", message.name)
            return
        if isinstance(message, wire.QueryResultPart):
            with self._lock:
                entry = self._pending.get(message.request_id)
                if entry is not None and entry.kind == "query" and entry.json_type is list:
                    entry.parts.append(message.json)
                    return
            if entry is not None:
                raise self._wrong_answer(message, entry)
            return
        if not isinstance(message, (wire.Ok, wire.Posted, wire.Pong, wire.State, wire.QueryResult)):
            raise ProtocolError(f"unexpected {type(message).__name__} frame from the daemon", ErrorCode.MALFORMED_FRAME)
        # A reply. It is checked before its request is taken off _pending, so that a bad one fails that request
        # too (with the protocol error, when the connection ends), and an unconfirmed observation is undone.
        request_id = message.request_id
        with self._lock:
            entry = self._pending.get(request_id)
        if entry is None:
            return  # a request given up on (close()), or an id we never sent: nothing waits for it
        if not isinstance(message, entry.reply):
            raise self._wrong_answer(message, entry)
        result = self._reply_value(message, entry)
        with self._lock:
            if self._pending.get(request_id) is not entry:
                return
            del self._pending[request_id]
            if entry.observation is not None:
                observation = entry.observation
                if not observation.active:
                    observation.active = True
                    if (not observation.cancelled and observation not in self._routing
                            and self._observations.get(observation.subscription_id) is observation):
                        self._routing = self._routing + (observation,)
        if entry.future is not None:
            try:
                entry.future.set_result(result)
            except concurrent.futures.InvalidStateError:  # pragma: no cover - completed by close()
                pass

    @staticmethod
    def _wrong_answer(message: wire.Message, entry: _Pending) -> ProtocolError:
        return ProtocolError(f"the daemon answered {entry.what} with {type(message).__name__}",
                             ErrorCode.MALFORMED_FRAME)

    @staticmethod
    def _reply_value(message: wire.Message, entry: _Pending) -> Any:
        """The result of the request ``entry`` answered by ``message``; :class:`ProtocolError` if it is unusable."""
        if isinstance(message, wire.Posted):
            return PostReceipt(message.sequence, message.delivered_count)
        if isinstance(message, wire.State):
            return message.value if message.has_value else None
        if not isinstance(message, wire.QueryResult):
            return None
        expected = entry.json_type
        documents: List[Any] = []
        for part in entry.parts + [message.json]:
            try:
                document = json.loads(part)
            except (ValueError, RecursionError) as error:  # not UTF-8 or not JSON; nested beyond reason
                raise ProtocolError(f"the daemon's answer to {entry.what} is not JSON: {error}",
                                    ErrorCode.MALFORMED_FRAME) from None
            if expected is not None and not isinstance(document, expected):
                raise ProtocolError(f"the daemon's answer to {entry.what} is a JSON {type(document).__name__}, not "
                                    f"{'an object' if expected is dict else 'an array'}", ErrorCode.MALFORMED_FRAME)
            documents.append(document)
        if len(documents) == 1:
            return documents[0]
        items: List[Any] = []
        for document in documents:
            items.extend(document)
        return items

    def _handle_error(self, message: wire.ErrorFrame) -> None:
        error = error_for_code(message.code, message.message, message.closes_connection)
        if message.closes_connection:
            with self._lock:
                self._closing_error = error
                if not self._connected:
                    self._handshake_error = error
            if message.code == ErrorCode.SHUTTING_DOWN:
                self._goodbye_ms = 0
            logger.warning("notifyd: the daemon is closing the connection: %s", error.message)
            return
        with self._lock:
            entry = self._pending.pop(message.request_id, None)
            if entry is not None and entry.observation is not None:
                # A refused subscription (first time or after reconnecting) ends its observation.
                observation = entry.observation
                if self._observations.get(observation.subscription_id) is observation:
                    del self._observations[observation.subscription_id]
                self._routing = tuple(o for o in self._routing if o is not observation)
        if entry is not None and entry.future is not None:
            _fail(entry.future, error)  # (asyncio's wait_for may have cancelled it)
            return
        what = entry.what if entry is not None else "a request without acknowledgement (post_nowait)"
        logger.warning("notifyd: %s: %s", what, error.message)
        if entry is not None and entry.observation is not None:
            entry.observation._end()
        self._emit(ConnectionEvent(EventKind.REQUEST_REJECTED, reason=what, error=error))

    # ---- events --------------------------------------------------------------------------------------------

    def _callback_executor(self) -> concurrent.futures.Executor:
        if self._user_executor is not None:
            return self._user_executor
        with self._lock:
            if self._own_executor is None:
                self._own_executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="notifyd-callbacks")
            return self._own_executor

    def _emit(self, event: ConnectionEvent) -> None:
        with self._lock:
            listeners = list(self._listeners)
        if not listeners:
            return
        try:
            executor = self._callback_executor()
            for listener in listeners:
                executor.submit(_call_listener, listener, event)
        except RuntimeError:  # shut down
            pass


def _call_listener(listener: Callable[[ConnectionEvent], Any], event: ConnectionEvent) -> None:
    try:
        listener(event)
    except Exception:
        logger.exception("notifyd: an event listener raised")


class _Suspension:
    """The context manager of :meth:`Center.suspended`."""

    def __init__(self, center: Center) -> None:
        self._center = center

    def __enter__(self) -> Center:
        self._center.suspend()
        return self._center

    def __exit__(self, *exc: object) -> None:
        self._center.resume()

