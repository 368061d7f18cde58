"""The synchronous client: :class:`Center`, its :class:`Observation` handles, and its I/O thread."""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import json
import logging
import os
import socket
import sys
import threading
from typing import (
    Any, Callable, Deque, Dict, List, Optional, Tuple, TypeVar, Union, overload,
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
        self._write_lock = threading.Lock()
        self._state_changed = threading.Condition(self._lock)
        self._sock: Optional[socket.socket] = None
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
        try:
            self._attach(self._open_socket())
        except NotifydError as error:
            if require_daemon:
                raise
            first_error = error
        self._thread = threading.Thread(target=self._run, name="notifyd-io", daemon=True)
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
        receipt: PostReceipt = self._wait(self._post_future(name, payload, retain, True), timeout,
                                          f"posting {name!r}")
        return receipt

    def post_nowait(self, name: str, payload: Payload = b"", *, retain: bool = False) -> None:
        """Posts without waiting for the daemon (fire and forget, like Darwin's ``notify_post``).

        Local checks still raise at once; a refusal by the daemon arrives later as a ``REQUEST_REJECTED``
        connection event (and in the log). :meth:`synchronize` waits until the daemon has fanned it out.
        """
        self._post_future(name, payload, retain, False)

    def synchronize(self, timeout: Optional[float] = None) -> None:
        """Returns once the daemon has processed everything sent before (``PING``/``PONG``, § 6.5).

        Earlier observations are active and earlier posts queued to every subscriber.
        """
        self._wait(self._request(lambda rid: wire.Ping(rid), "synchronize"), timeout, "synchronize")

    @overload
    def get_state(self, name: str, *, timeout: Optional[float] = None) -> int: ...

    @overload
    def get_state(self, name: str, default: T, *, timeout: Optional[float] = None) -> Union[int, T]: ...

    def get_state(self, name: str, default: Any = 0, *, timeout: Optional[float] = None) -> Any:
        """The state value of ``name`` (a 64-bit unsigned int), or ``default`` (0) if it was never set.

        Pass ``default=None`` to tell "never set" from a real 0.
        """
        self._check_name(name, "get the state of")
        value = self._wait(self._request(lambda rid: wire.GetState(rid, name), "get_state"), timeout,
                           f"reading the state of {name!r}")
        return default if value is None else value

    def set_state(self, name: str, value: int, *, timeout: Optional[float] = None) -> None:
        """Sets the state value of ``name`` to ``value`` (0 ... 2⁶⁴−1). Setting a state does not post."""
        self._check_name(name, "set the state of")
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 0xFFFF_FFFF_FFFF_FFFF:
            raise ValueError(f"a state value is an int from 0 to 2**64-1, not {value!r}")
        self._wait(self._request(lambda rid: wire.SetState(rid, value, name), "set_state"), timeout,
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
        observation, future = self._start_observation(pattern, callback, policy, current_value, executor)
        if future is not None:
            try:
                self._wait(future, timeout, f"observing {pattern!r}")
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
        self._send(sock, data, request_id)
        try:
            self._wait(future, timeout, what)
        except (ConnectionLost, ConnectionClosedByDaemon):
            pass  # the new connection replays the depth

    def suspended(self) -> "_Suspension":
        """A context manager: :meth:`suspend` on entry, :meth:`resume` on exit."""
        return _Suspension(self)

    def status(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        """The daemon's figures (``QUERY`` status, § 11.3) as a dict."""
        result: Dict[str, Any] = self._wait(self._query_future(1, ""), timeout, "status")
        return result

    def names(self, pattern: str = "", timeout: Optional[float] = None) -> List[Dict[str, Any]]:
        """Names with subscribers, a state value or a retained notification, optionally matching ``pattern``."""
        if pattern:
            validate_pattern(pattern)
        result: List[Dict[str, Any]] = self._wait(self._query_future(2, pattern), timeout, "names")
        return result

    def clients(self, timeout: Optional[float] = None) -> List[Dict[str, Any]]:
        """The daemon's connections this user may see (all of them for root)."""
        result: List[Dict[str, Any]] = self._wait(self._query_future(3, ""), timeout, "clients")
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
            sock = self._sock
            pending = list(self._pending.values())
            self._pending.clear()
            observations = list(self._observations.values())
            self._observations.clear()
            self._routing = ()
            self._state_changed.notify_all()
        self._wake.set()
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for entry in pending:
            if entry.future is not None and not entry.future.done():
                entry.future.set_exception(CenterClosed("the notification center was closed"))
        for observation in observations:
            observation._end()
        thread = getattr(self, "_thread", None)
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.timeout)
        if self._own_executor is not None:
            self._own_executor.shutdown(wait=False)

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

    def _post_future(self, name: str, payload: Payload, retain: bool,
                     ack: bool) -> "concurrent.futures.Future[Any]":
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
        return self._request(lambda rid: wire.Post(rid, flags, name, data), f"post {name!r}", expect_reply=ack)

    def _query_future(self, kind: int, argument: str) -> "concurrent.futures.Future[Any]":
        return self._request(lambda rid: wire.Query(rid, kind | 0x80, argument), "query", kind="query")

    def _request(self, make: Callable[[int], wire.Message], what: str, *, kind: str = "reply",
                 expect_reply: bool = True) -> "concurrent.futures.Future[Any]":
        future: "concurrent.futures.Future[Any]" = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise CenterClosed("the notification center was closed")
            sock = self._sock
            if sock is None:
                raise NotConnected(f"not connected to notifyd at {self.socket_path} (reconnecting in the background)")
            request_id = self._take_request_id()
            data = make(request_id).encode()
            if expect_reply:
                self._pending[request_id] = _Pending(kind, future, what=what)
            else:
                future.set_result(None)
        self._send(sock, data, request_id if expect_reply else None)
        return future

    def _take_request_id(self) -> int:
        request_id = self._next_request_id
        self._next_request_id = request_id + 1 if request_id < 0xFFFFFFFF else 1
        return request_id

    def _send(self, sock: socket.socket, data: bytes, request_id: Optional[int]) -> None:
        try:
            with self._write_lock:
                sock.sendall(data)
        except OSError as error:
            with self._lock:
                entry = self._pending.pop(request_id, None) if request_id is not None else None
            reason = f"writing to the daemon failed: {error.strerror or error}"
            if entry is not None and entry.future is not None and not entry.future.done():
                entry.future.set_exception(ConnectionLost(f"the connection to notifyd was lost: {reason}"))
            elif request_id is None:
                raise ConnectionLost(f"the connection to notifyd was lost: {reason}") from None

    def _wait(self, future: "concurrent.futures.Future[T]", timeout: Optional[float], what: str) -> T:
        if threading.current_thread() is self._thread and not future.done():
            raise NotifydError(f"{what}: cannot wait for the daemon on the center's I/O thread (a callback run with "
                               f"executor=READER_THREAD); use post_nowait() or another executor")
        limit = self.timeout if timeout is None else timeout
        try:
            return future.result(limit)
        except concurrent.futures.TimeoutError:
            raise NotifydTimeout(f"{what} did not complete within {limit} seconds") from None

    # ---- observations ----------------------------------------------------------------------------------------

    def _start_observation(self, pattern: str, callback: Callback, policy: Policy, current_value: bool,
                           executor: Executor, on_end: Optional[Callable[[], None]] = None
                           ) -> Tuple[Observation, Optional["concurrent.futures.Future[Any]"]]:
        if not isinstance(policy, Policy):
            raise TypeError(f"policy must be a notifyd.Policy, not {type(policy).__name__}")
        if not callable(callback):
            raise TypeError("callback must be callable")
        limit = self._daemon.max_name_length if self._daemon is not None else MAX_NAME_LENGTH
        validate_pattern(pattern, limit, allow_local=True)
        local = is_process_local(pattern)
        future: Optional["concurrent.futures.Future[Any]"] = None
        data = b""
        request_id: Optional[int] = None
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
                self._pending[request_id] = _Pending("subscribe", future, observation, what=f"observe {pattern!r}")
                data = self._subscribe_frame(request_id, observation)
            else:
                self._routing = self._routing + (observation,)  # subscribed on reconnect
        if request_id is not None and sock is not None:
            self._send(sock, data, request_id)
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
            self._pending[request_id] = _Pending("background", what=f"unsubscribe {observation.pattern!r}")
            data = wire.Unsubscribe(request_id, observation.subscription_id).encode()
        self._send(sock, data, request_id)

    def _deliver_locally(self, name: str, payload: bytes) -> int:
        notification = Notification(name, payload, 0, self._own_credentials)
        targets = [o for o in self._routing if o.matches(name)]
        for observation in targets:
            observation._deliver(notification)
        return len(targets)

    # ---- connection ----------------------------------------------------------------------------------------

    def _open_socket(self) -> socket.socket:
        path = self.socket_path
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            try:
                sock.connect(path)
            except socket.timeout:
                raise DaemonNotFound(path, f"connecting took longer than {self.timeout} seconds") from None
            except OSError as error:
                raise DaemonNotFound(path, error.strerror or str(error)) from None
            _, daemon_uid, _ = peer_credentials(sock)
            own_uid = os.getuid()
            if not self.daemon_user.allows(daemon_uid, own_uid) and not is_root_only_directory(path):
                raise UntrustedDaemon(path, daemon_uid, own_uid)
            sock.settimeout(None)
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
            try:
                with self._write_lock:
                    sock.sendall(b"".join(frames))
            except OSError:
                pass  # the reader sees the end of the connection

    def _run(self) -> None:
        delay = self._initial_delay
        sock = self._sock
        while not self._closed:
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
            welcomed, reason = self._read(sock)
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

    def _read(self, sock: socket.socket) -> Tuple[bool, str]:
        decoder = wire.FrameDecoder(from_daemon=True, max_frame_length=wire.MINIMUM_MAX_FRAME_LENGTH)
        welcomed = False
        while True:
            try:
                data = sock.recv(1 << 18)
            except OSError as error:
                return welcomed, f"reading from the daemon failed: {error.strerror or error}"
            try:
                if not data:
                    decoder.end_of_stream()
                    if self._closed:
                        return welcomed, "the center was closed"
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
            except ProtocolError as error:
                logger.warning("notifyd: protocol error from the daemon: %s", error)
                self._closing_error = error
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return welcomed, f"protocol error: {error.message}"

    def _connection_ended(self, sock: socket.socket, reason: str) -> None:
        with self._lock:
            if self._sock is sock:
                self._sock = None
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
            if entry.future is not None and not entry.future.done():
                entry.future.set_exception(error)
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
                if entry is not None:
                    entry.parts.append(message.json)
            return
        request_id: int = getattr(message, "request_id")
        with self._lock:
            entry = self._pending.pop(request_id, None)
            if entry is not None and entry.observation is not None and isinstance(message, wire.Ok):
                observation = entry.observation
                if not observation.active:
                    observation.active = True
                    if (not observation.cancelled and observation not in self._routing
                            and self._observations.get(observation.subscription_id) is observation):
                        self._routing = self._routing + (observation,)
        if entry is None or entry.future is None:
            return
        result: Any = None
        try:
            if isinstance(message, wire.Posted):
                result = PostReceipt(message.sequence, message.delivered_count)
            elif isinstance(message, wire.State):
                result = message.value if message.has_value else None
            elif isinstance(message, wire.QueryResult):
                if entry.parts:
                    items: List[Any] = []
                    for part in entry.parts + [message.json]:
                        items.extend(json.loads(part))
                    result = items
                else:
                    result = json.loads(message.json)
        except ValueError as error:
            entry.future.set_exception(NotifydError(f"the daemon's query answer is not JSON: {error}"))
            return
        entry.future.set_result(result)

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
            entry.future.set_exception(error)
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

