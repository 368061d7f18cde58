"""The asyncio client: :class:`AsyncCenter` and its :class:`NotificationStream`.

It shares the synchronous center's connection machinery (one I/O thread per center that reads the socket,
reconnects and resubscribes); replies reach the event loop as futures (``asyncio.wrap_future``) and notifications
through ``loop.call_soon_threadsafe``, so no coroutine ever blocks the loop. Requests are written without blocking
either: what the socket does not take at once is queued, in order, and written by the I/O thread. A request whose
timeout passes before any of it is written is taken back (``NotifydTimeout``; the connection stays); a daemon that
reads nothing for the center's timeout is taken for dead, and the connection is dropped and reconnected.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
from typing import Any, Callable, Deque, Dict, List, Optional, TypeVar, Union, overload

from ._center import READER_THREAD, Center, Observation, Payload, _Deadline
from ._model import ConnectionEvent, DaemonInfo, Notification, Policy, PostReceipt
from ._paths import DaemonUser
from .errors import NotifydTimeout
from .names import validate_pattern

T = TypeVar("T")

_END = object()


class NotificationStream:
    """An async iterator of the notifications matching a name or pattern (from :meth:`AsyncCenter.notifications`).

    The subscription is sent when the stream is made; ``async with`` (or the first ``__anext__``) waits for the
    daemon to confirm it and raises the daemon's refusal. Iteration ends after what is buffered when the stream is
    cancelled (:meth:`cancel`, :meth:`aclose`, leaving ``async with``) or its center is closed. The buffer keeps
    ``buffer_limit`` notifications; when the consumer falls behind, the oldest are dropped and counted in
    :attr:`dropped_count`.
    """

    def __init__(self, center: Center, pattern: str, policy: Policy, current_value: bool, buffer_limit: int,
                 loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        """Made by :meth:`AsyncCenter.notifications`."""
        if buffer_limit < 1:
            raise ValueError("buffer_limit must be at least 1")
        self._loop = loop
        self._buffer: Deque[Any] = collections.deque()
        self._limit = buffer_limit
        self._waiter: Optional["asyncio.Future[None]"] = None
        self._ended = False
        self._timeout = timeout
        self._center = center
        #: Notifications dropped because the buffer was full.
        self.dropped_count = 0
        self._observation: Observation
        self._observation, future = center._start_observation(
            pattern, self._from_thread, policy, current_value, READER_THREAD, on_end=self._end_from_thread)
        self._subscribed = future
        self._ready: Optional["asyncio.Future[Any]"] = (
            asyncio.wrap_future(future, loop=loop) if future is not None else None)

    @property
    def pattern(self) -> str:
        """The name or pattern observed."""
        return self._observation.pattern

    async def ready(self) -> None:
        """Waits until the daemon has the subscription; raises its refusal (e.g. :class:`PermissionDenied`)."""
        if self._ready is not None:
            ready, self._ready = self._ready, None
            try:
                await asyncio.wait_for(ready, self._timeout)
            except asyncio.TimeoutError as error:
                if isinstance(error, NotifydTimeout):  # the daemon stalled: the connection was dropped
                    self._ended = True
                    raise
                subscribed = self._subscribed
                assert subscribed is not None
                failure = self._center._timed_out(subscribed, f"observing {self.pattern!r}", self._timeout)
                if failure is None:  # answered just as wait_for gave up: that answer stands
                    try:
                        subscribed.result(0)
                    except BaseException:
                        self._ended = True
                        raise
                    return
                self.cancel()  # (a SUBSCRIBE taken back, never sent, is not unsubscribed)
                raise failure from None
            except BaseException:
                self._ended = True
                raise

    def cancel(self) -> None:
        """Ends the stream: the subscription is removed; iteration stops after what is buffered."""
        self._observation.cancel()
        self._push(_END)

    async def aclose(self) -> None:
        """Same as :meth:`cancel`."""
        self.cancel()

    def __aiter__(self) -> "NotificationStream":
        return self

    async def __anext__(self) -> Notification:
        await self.ready()
        while not self._buffer:
            if self._ended:
                raise StopAsyncIteration
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        item = self._buffer.popleft()
        if item is _END:
            self._ended = True
            self._buffer.clear()
            raise StopAsyncIteration
        assert isinstance(item, Notification)
        return item

    async def __aenter__(self) -> "NotificationStream":
        await self.ready()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cancel()

    # Called on the center's I/O thread.
    def _from_thread(self, notification: Notification) -> None:
        self._call_soon(self._push, notification)

    def _end_from_thread(self) -> None:
        self._call_soon(self._push, _END)

    def _call_soon(self, fn: Callable[[Any], None], item: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(fn, item)
        except RuntimeError:  # the loop is closed
            pass

    def _push(self, item: Any) -> None:
        if self._ended or (self._buffer and self._buffer[-1] is _END):
            return
        if item is not _END and len(self._buffer) >= self._limit:
            self._buffer.popleft()
            self.dropped_count += 1
        self._buffer.append(item)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class AsyncCenter:
    """The asyncio face of a notifyd connection: ``await center.post(...)``, ``async for n in
    center.notifications("name")``.

    Make one with ``await AsyncCenter.connect(...)`` (same arguments as :class:`~notifyd.Center`) and close it with
    ``await center.close()`` or ``async with``. It reconnects and resubscribes by itself like :class:`Center`.
    """

    def __init__(self, center: Center) -> None:
        """Wraps an existing :class:`Center`; prefer :meth:`connect`."""
        #: The synchronous center underneath (for callback observations, events).
        self.center = center

    @classmethod
    async def connect(cls, socket_path: Optional[str] = None, *, client_name: Optional[str] = None,
                      timeout: float = 10.0, daemon_user: Optional[DaemonUser] = None, reconnect: bool = True,
                      require_daemon: bool = True, initial_delay: float = 0.05,
                      max_delay: float = 2.0) -> "AsyncCenter":
        """Connects without blocking the event loop; raises like :class:`Center` (``DaemonNotFound``…)."""
        loop = asyncio.get_running_loop()
        make = functools.partial(Center, socket_path, client_name=client_name, timeout=timeout,
                                 daemon_user=daemon_user, reconnect=reconnect, require_daemon=require_daemon,
                                 initial_delay=initial_delay, max_delay=max_delay)
        return cls(await loop.run_in_executor(None, make))

    @property
    def daemon(self) -> Optional[DaemonInfo]:
        """What the daemon announced on the current (or last) connection."""
        return self.center.daemon

    @property
    def connected(self) -> bool:
        """Whether the handshake is complete on the current connection."""
        return self.center.connected

    async def _await(self, future: "concurrent.futures.Future[T]", deadline: _Deadline, what: str) -> T:
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), deadline.remaining())
        except asyncio.TimeoutError as error:
            if isinstance(error, NotifydTimeout):  # the daemon stalled (asyncio.TimeoutError is TimeoutError)
                raise
            # Taken back if none of it was written (the connection stays); or a stalled daemon is dropped now.
            failure = self.center._timed_out(future, what, deadline.limit)
        if failure is None:  # answered just as wait_for gave up: that answer stands
            return future.result(0)
        raise failure

    async def post(self, name: str, payload: Payload = b"", *, retain: bool = False,
                   timeout: Optional[float] = None) -> PostReceipt:
        """Posts and waits for the daemon's receipt (see :meth:`Center.post`)."""
        deadline = self.center._deadline(timeout)
        future = self.center._post_future(name, payload, retain, True, deadline)
        result: PostReceipt = await self._await(future, deadline, f"posting {name!r}")
        return result

    def post_nowait(self, name: str, payload: Payload = b"", *, retain: bool = False,
                    timeout: Optional[float] = None) -> None:
        """Posts without waiting (see :meth:`Center.post_nowait`), and without ever blocking the loop.

        What the socket does not take at once is queued and written by the I/O thread, in order, as the daemon
        reads. Nothing waits for it, so it has no deadline of its own: ``timeout`` is accepted for symmetry with
        :meth:`Center.post_nowait` and has no effect. Only a daemon that reads nothing for the center's timeout
        (stopped or hung) loses it: the connection is dropped and reconnected (a ``DISCONNECTED`` event), and the
        post is lost, as fire and forget allows.
        """
        self.center._post_future(name, payload, retain, False, self.center._deadline(timeout))

    async def synchronize(self, timeout: Optional[float] = None) -> None:
        """Returns once the daemon has processed everything sent before."""
        from . import _wire as wire
        deadline = self.center._deadline(timeout)
        await self._await(self.center._request(lambda rid: wire.Ping(rid), "synchronize", deadline,
                                               reply=(wire.Pong,)), deadline, "synchronize")

    @overload
    async def get_state(self, name: str) -> int: ...

    @overload
    async def get_state(self, name: str, default: T, *, timeout: Optional[float] = None) -> Union[int, T]: ...

    async def get_state(self, name: str, default: Any = 0, *, timeout: Optional[float] = None) -> Any:
        """The state value of ``name``, or ``default`` (0) if never set (see :meth:`Center.get_state`)."""
        from . import _wire as wire
        self.center._check_name(name, "get the state of")
        deadline = self.center._deadline(timeout)
        value = await self._await(self.center._request(lambda rid: wire.GetState(rid, name), "get_state", deadline,
                                                       reply=(wire.State,)),
                                  deadline, f"reading the state of {name!r}")
        return default if value is None else value

    async def set_state(self, name: str, value: int, *, timeout: Optional[float] = None) -> None:
        """Sets the state value of ``name`` (see :meth:`Center.set_state`)."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, functools.partial(self.center.set_state, name, value, timeout=timeout))

    async def suspend(self) -> None:
        """See :meth:`Center.suspend`."""
        await asyncio.get_running_loop().run_in_executor(None, self.center.suspend)

    async def resume(self) -> None:
        """See :meth:`Center.resume`."""
        await asyncio.get_running_loop().run_in_executor(None, self.center.resume)

    async def status(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        """The daemon's figures (see :meth:`Center.status`)."""
        deadline = self.center._deadline(timeout)
        result: Dict[str, Any] = await self._await(self.center._query_future(1, "", deadline), deadline, "status")
        return result

    async def names(self, pattern: str = "", timeout: Optional[float] = None) -> List[Dict[str, Any]]:
        """Names known to the daemon, optionally matching ``pattern`` (see :meth:`Center.names`)."""
        if pattern:
            validate_pattern(pattern)
        deadline = self.center._deadline(timeout)
        result: List[Dict[str, Any]] = await self._await(self.center._query_future(2, pattern, deadline), deadline,
                                                         "names")
        return result

    async def clients(self, timeout: Optional[float] = None) -> List[Dict[str, Any]]:
        """The daemon's connections this user may see (see :meth:`Center.clients`)."""
        deadline = self.center._deadline(timeout)
        result: List[Dict[str, Any]] = await self._await(self.center._query_future(3, "", deadline), deadline,
                                                         "clients")
        return result

    def notifications(self, pattern: str, *, policy: Policy = Policy(), current_value: bool = False,
                      buffer_limit: int = 1024) -> NotificationStream:
        """An async iterator of the notifications matching ``pattern``; see :class:`NotificationStream`.

        Must be called with the event loop running. ``policy`` and ``current_value`` as in :meth:`Center.observe`.
        """
        return NotificationStream(self.center, pattern, policy, current_value, buffer_limit,
                                  asyncio.get_running_loop(), self.center.timeout)

    def add_event_listener(self, listener: Callable[[ConnectionEvent], Any]) -> Callable[[], None]:
        """See :meth:`Center.add_event_listener` (the listener runs on the center's callback thread)."""
        return self.center.add_event_listener(listener)

    async def close(self) -> None:
        """Closes the connection; every :class:`NotificationStream` of this center ends."""
        await asyncio.get_running_loop().run_in_executor(None, self.center.close)

    async def __aenter__(self) -> "AsyncCenter":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
