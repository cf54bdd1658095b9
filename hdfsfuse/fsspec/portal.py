"""One trio event loop in a background thread, holding an `HdfsClient` across calls, for callers
that are not trio: plain threads (the sync face) and asyncio (the async face).

The loop is started on first use and belongs to the process that started it. A process forked
from it (dask, multiprocessing and PyTorch workers) finds the portal stale and starts its own
loop, connections and logins: it never touches the parent's sockets. Stopped by the
filesystem's `close()`, else at interpreter exit.
"""

from __future__ import annotations

import atexit
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


class Portal:
    """A background trio loop with one connected client. `call` runs a coroutine function on it
    from any other thread and returns its result; `submit` returns a future instead."""

    def __init__(self, target: NameNodeTarget | ViewTarget, options: ClientOptions) -> None:
        self.pid = os.getpid()
        self._target = target
        self._options = options
        self._token: trio.lowlevel.TrioToken | None = None
        self._client: HdfsClient | None = None
        self._nursery: trio.Nursery | None = None
        self._stop: trio.Event | None = None
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
            self._started.set()

    async def _serve(self) -> None:
        async with HdfsClient.open_target(self._target, options=self._options) as client:
            async with trio.open_nursery() as nursery:
                self._client, self._nursery = client, nursery
                self._stop = trio.Event()
                self._token = trio.lowlevel.current_trio_token()
                self._started.set()
                await self._stop.wait()
                nursery.cancel_scope.cancel()

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run `fn(*args)` on the loop and wait for its result (or exception)."""
        return trio.from_thread.run(fn, *args, trio_token=self._token)

    def submit(self, fn: Callable[..., Awaitable[T]], *args: Any) -> concurrent.futures.Future[T]:
        """Start `fn(*args)` on the loop; its future completes with its result or exception."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        async def run() -> None:
            try:
                result = await fn(*args)
            except BaseException as e:  # handed to the waiting caller, whatever it is
                if not future.cancelled():
                    future.set_exception(e)
                if not isinstance(e, Exception):
                    raise
            else:
                if not future.cancelled():
                    future.set_result(result)

        def start() -> None:
            assert self._nursery is not None
            self._nursery.start_soon(run)

        trio.from_thread.run_sync(start, trio_token=self._token)
        return future

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
