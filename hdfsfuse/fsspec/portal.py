"""One trio event loop in a background thread, holding an `HdfsClient` across calls, for callers
that are not trio: plain threads (the sync face) and asyncio (the async face).

The loop is started on first use and belongs to the process that started it. A process forked
from it (dask, multiprocessing and PyTorch workers) finds the portal stale and starts its own
loop, connections and logins: it never touches the parent's sockets. Stopped by the
filesystem's `close()`, else at interpreter exit.
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import os
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from hdfsfuse.client import HdfsClient
from hdfsfuse.client.options import ClientOptions
from hdfsfuse.conf.hadoop import NameNodeTarget, ViewTarget

T = TypeVar("T")

START_TIMEOUT = 120.0  # a login and the first NameNode connection, with every retry


class _Call:
    """A coroutine function another thread asked the loop to run, and its outcome: the caller
    blocks on a lock the loop releases (`wait`), or is told through a future (`future`)."""

    __slots__ = ("_done", "_error", "_value", "args", "fn", "future")

    def __init__(self, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...],
                 future: concurrent.futures.Future[Any] | None = None) -> None:
        self.fn, self.args, self.future = fn, args, future
        self._value: Any = None
        self._error: BaseException | None = None
        self._done: threading.Lock | None = None
        if future is None:
            self._done = threading.Lock()
            self._done.acquire()

    def settle(self, value: Any, error: BaseException | None) -> None:
        if self.future is not None:
            if not self.future.cancelled():
                if error is None:
                    self.future.set_result(value)
                else:
                    self.future.set_exception(error)
            return
        assert self._done is not None
        self._value, self._error = value, error
        self._done.release()

    def wait(self) -> Any:
        assert self._done is not None
        self._done.acquire()
        if self._error is not None:
            raise self._error
        return self._value


class CallQueue:
    """Calls from other threads into one trio loop, served by `serve` (a task on that loop).

    A call is handed over through a queue and an eventfd the loop waits on, and its caller
    waits on a plain lock: a call costs the two thread wake-ups, not the machinery of
    `trio.from_thread` (a system task and a result queue per call). A call that arrives alone
    runs in `serve`'s own task, with no task started for it; a call that arrives while
    another runs there is started as a task of its own through the loop's token
    (`run_sync_soon`), so calls from several threads still overlap. Once the loop stops
    (`refuse`), calls are refused, and calls it never started fail."""

    def __init__(self) -> None:
        self._calls: collections.deque[_Call] = collections.deque()
        self._wakeup = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._accepting = True
        self._inline = False  # `serve` is running a call in its own task
        self._spawner: tuple[trio.lowlevel.TrioToken, trio.Nursery] | None = None
        self._lock = threading.Lock()  # guards the fields above, the hand-over and the eventfd

    async def serve(self, nursery: trio.Nursery) -> None:
        """Run on the loop until cancelled: a lone call here, several each in `nursery`."""
        self._spawner = (trio.lowlevel.current_trio_token(), nursery)
        while True:
            await trio.lowlevel.wait_readable(self._wakeup)
            try:
                os.eventfd_read(self._wakeup)
            except BlockingIOError:
                pass
            with self._lock:
                lone = self._calls.popleft() if len(self._calls) == 1 else None
                self._inline = lone is not None
                calls = list(self._calls)
                self._calls.clear()
            for call in calls:
                nursery.start_soon(self._run_call, call)
            if lone is not None:
                try:
                    await self._run_call(lone)
                finally:
                    with self._lock:
                        self._inline = False

    def _start(self, call: _Call) -> None:
        """On the loop (through its token): `call` as a task of its own."""
        assert self._spawner is not None
        try:
            self._spawner[1].start_soon(self._run_call, call)
        except RuntimeError:  # the nursery has closed: the loop is stopping
            call.settle(None, trio.RunFinishedError("the filesystem was closed before the call ran"))

    @staticmethod
    async def _run_call(call: _Call) -> None:
        try:
            value = await call.fn(*call.args)
        except Exception as e:
            call.settle(None, e)
        except BaseException:  # the loop is stopping: the caller is told so, not left waiting
            call.settle(None, trio.RunFinishedError("the filesystem was closed during the call"))
            raise
        else:
            call.settle(value, None)

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run `fn(*args)` on the loop and wait for its result (or exception)."""
        call = _Call(fn, args)
        self._hand_over(call)
        return call.wait()  # type: ignore[no-any-return]

    def submit(self, fn: Callable[..., Awaitable[T]], *args: Any) -> concurrent.futures.Future[T]:
        """Start `fn(*args)` on the loop; its future completes with its result or exception."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._hand_over(_Call(fn, args, future))
        return future

    def _hand_over(self, call: _Call) -> None:
        with self._lock:
            if not self._accepting:
                raise trio.RunFinishedError("the filesystem is closed")
            if self._inline:  # `serve` is busy with a call: this one must not wait for it
                assert self._spawner is not None
                try:
                    self._spawner[0].run_sync_soon(self._start, call)
                except trio.RunFinishedError:
                    raise trio.RunFinishedError("the filesystem is closed") from None
                return
            self._calls.append(call)
            os.eventfd_write(self._wakeup, 1)

    def refuse(self) -> None:
        """The loop has stopped: refuse new calls and fail those it never started."""
        with self._lock:
            if not self._accepting:
                return
            self._accepting = False
            left = list(self._calls)
            self._calls.clear()
            os.close(self._wakeup)
        for call in left:
            call.settle(None, trio.RunFinishedError("the filesystem was closed before the call ran"))


class Portal:
    """A background trio loop with one connected client. `call` runs a coroutine function on it
    from any other thread and returns its result; `submit` returns a future instead."""

    def __init__(self, target: NameNodeTarget | ViewTarget, options: ClientOptions) -> None:
        self.pid = os.getpid()
        self._target = target
        self._options = options
        self._token: trio.lowlevel.TrioToken | None = None
        self._client: HdfsClient | None = None
        self._stop: trio.Event | None = None
        self._calls = CallQueue()
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="hdfsfuse-fsspec", daemon=True)
        self._thread.start()
        if not self._started.wait(START_TIMEOUT):
            raise TimeoutError(f"{target.label}: the client did not start within {START_TIMEOUT:g}s")
        if self._failure is not None:
            raise self._failure
        _live.add(self)

    @property
    def client(self) -> HdfsClient:
        assert self._client is not None
        return self._client

    def _run(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as e:  # a login or connection that failed: raised in the caller
            if not self._started.is_set():
                self._failure = e
        finally:
            self._calls.refuse()
            self._started.set()

    async def _serve(self) -> None:
        async with HdfsClient.open_target(self._target, options=self._options) as client:
            async with trio.open_nursery() as nursery:
                self._client = client
                self._stop = trio.Event()
                self._token = trio.lowlevel.current_trio_token()
                nursery.start_soon(self._calls.serve, nursery)
                self._started.set()
                await self._stop.wait()
                nursery.cancel_scope.cancel()

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run `fn(*args)` on the loop and wait for its result (or exception)."""
        return self._calls.call(fn, *args)

    def submit(self, fn: Callable[..., Awaitable[T]], *args: Any) -> concurrent.futures.Future[T]:
        """Start `fn(*args)` on the loop; its future completes with its result or exception."""
        return self._calls.submit(fn, *args)

    def close(self) -> None:
        """Stop the loop and close the client's connections (in the process that owns them)."""
        _live.discard(self)
        if os.getpid() != self.pid or self._token is None or not self._thread.is_alive():
            return
        stop = self._stop
        if stop is not None:
            try:
                trio.from_thread.run_sync(stop.set, trio_token=self._token)
            except trio.RunFinishedError:
                return
        if threading.current_thread() is not self._thread:
            self._thread.join(10)


_live: weakref.WeakSet[Portal] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for portal in list(_live):
        portal.close()
