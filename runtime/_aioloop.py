"""Running an asyncio-only library from any anyio backend: one asyncio event loop in a thread.

Some well-kept clients are asyncio-only (psycopg's async API, nats-py). Under trio they cannot
run on the caller's loop, so :class:`AsyncioLoopThread` keeps one asyncio event loop in a
dedicated thread (anyio's blocking portal, ``start_blocking_portal(backend="asyncio")``) and
:meth:`AsyncioLoopThread.run` awaits a coroutine function there from trio or asyncio alike:
the call is scheduled on the loop thread, and its completion wakes the caller's loop
(:func:`await_future`), so neither the caller's event loop nor a worker thread is blocked. Cancelling the caller cancels the task on the loop
thread too. Every object the library creates (connections, pools) must then be created and
used through :meth:`~AsyncioLoopThread.run`, on that one loop.

:func:`asyncio_runner` picks what the running backend needs: under asyncio the coroutine runs
on the caller's own loop (no thread, no hop), under trio on a new :class:`AsyncioLoopThread`.
Both are :class:`AsyncioRunner`\\ s, so a store or a client is written once::

    async with asyncio_runner() as runner:
        pool = await runner.run(open_pool, dsn)
        await runner.run(write, pool, rows)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Protocol, Self, TypeVar

import anyio
import anyio.from_thread
import sniffio

__all__ = [
    "AsyncioLoopThread",
    "AsyncioRunner",
    "DirectRunner",
    "asyncio_runner",
    "await_future",
]

T = TypeVar("T")


class AsyncioRunner(Protocol):
    """Runs asyncio coroutine functions for a caller on any backend (see the module)."""

    async def run(self, fn: Callable[..., Awaitable[T]], *args: object) -> T: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class DirectRunner:
    """Under asyncio: the coroutine runs on the caller's own loop."""

    async def run(self, fn: Callable[..., Awaitable[T]], *args: object) -> T:
        return await fn(*args)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


class AsyncioLoopThread:
    """One asyncio event loop in a thread of its own (see the module docstring).

    Use as ``async with AsyncioLoopThread() as loop: await loop.run(fn, *args)``; leaving the
    block stops the loop (its pending tasks are cancelled) and joins the thread. ``run``
    before the block or after it raises :class:`RuntimeError`."""

    def __init__(self, name: str = "acpfsm-asyncio") -> None:
        self.name = name
        self._stack: contextlib.ExitStack | None = None
        self._portal: anyio.from_thread.BlockingPortal | None = None

    @property
    def running(self) -> bool:
        return self._portal is not None

    def _start(self) -> None:
        stack = contextlib.ExitStack()
        self._portal = stack.enter_context(
            anyio.from_thread.start_blocking_portal(backend="asyncio", name=self.name)
        )
        self._stack = stack

    def _stop(self) -> None:
        stack, self._stack, self._portal = self._stack, None, None
        if stack is not None:
            stack.close()

    async def __aenter__(self) -> Self:
        if self._portal is None:
            await anyio.to_thread.run_sync(self._start)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._stop)

    async def run(self, fn: Callable[..., Awaitable[T]], *args: object) -> T:
        """``await fn(*args)`` on the loop thread; its result or its exception. A caller
        cancelled meanwhile cancels the task there (and is cancelled itself)."""
        portal = self._portal
        if portal is None:
            raise RuntimeError(f"{self.name}: the asyncio loop thread is not running")

        async def call() -> T:  # the portal takes a coroutine function of no keyword
            return await fn(*args)

        return await await_future(portal.start_task_soon(call))


def _call_soon() -> Callable[[Callable[[], object]], object]:
    """A thread-safe, non-blocking way to run a callback on the running event loop."""
    if sniffio.current_async_library() == "trio":
        import trio

        return trio.lowlevel.current_trio_token().run_sync_soon
    return asyncio.get_running_loop().call_soon_threadsafe


async def await_future(future: concurrent.futures.Future[T]) -> T:
    """Wait, without blocking the event loop or a worker thread, for ``future`` (completed by
    another thread) and return its result or raise its exception. A caller cancelled
    meanwhile cancels the future (a portal's task is then cancelled on its loop)."""
    done = anyio.Event()
    call_soon = _call_soon()

    def wake(_: concurrent.futures.Future[T]) -> None:
        with contextlib.suppress(Exception):  # the event loop has ended: nobody waits
            call_soon(done.set)

    future.add_done_callback(wake)
    try:
        await done.wait()
    except anyio.get_cancelled_exc_class():
        future.cancel()
        raise
    try:
        return future.result()
    except concurrent.futures.CancelledError:
        raise RuntimeError("the call on the other thread was cancelled") from None


def asyncio_runner(name: str = "acpfsm-asyncio") -> AsyncioLoopThread | DirectRunner:
    """A runner for the backend running now: the caller's loop under asyncio, a new
    :class:`AsyncioLoopThread` under trio (or any other backend)."""
    try:
        library = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        library = ""
    if library == "asyncio":
        return DirectRunner()
    return AsyncioLoopThread(name)
