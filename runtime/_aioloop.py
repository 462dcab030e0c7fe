"""Running an asyncio-only library from any anyio backend: one asyncio event loop in a thread.

Some well-kept clients are asyncio-only (psycopg's async API, nats-py). Under trio they cannot
run on the caller's loop, so :class:`AsyncioLoopThread` keeps one asyncio event loop in a
dedicated thread (anyio's blocking portal, ``start_blocking_portal(backend="asyncio")``) and
:meth:`AsyncioLoopThread.run` awaits a coroutine function there from trio or asyncio alike:
the call is scheduled on the loop thread (``asyncio.run_coroutine_threadsafe``: the caller's
thread does not wait for the loop to take it), and its completion wakes the caller's loop
(:func:`await_future`), so neither the caller's event loop nor a worker thread is blocked. Cancelling the caller cancels the task on the loop
thread too. Every object the library creates (connections, pools) must then be created and
used through :meth:`~AsyncioLoopThread.run`, on that one loop.

:func:`asyncio_runner` picks what the running backend needs: under asyncio the coroutine runs
on the caller's own loop (no thread, no hop), under trio on a new :class:`AsyncioLoopThread`.
Both are :class:`AsyncioRunner`\\ s, so a store or a client is written once::

    async with asyncio_runner() as runner:
        pool = await runner.run(open_pool, dsn)
        await runner.run(write, pool, rows)

Two cheaper ways across, for a hot path that need not wait: :meth:`~AsyncioRunner.post` starts
a coroutine on the loop and returns at once (nothing waits for its end: one hop instead of a
round trip), and :func:`caller_soon` gives code on the asyncio loop (a library's callback) a
way to run a plain function on the caller's loop (trio's token, or asyncio's own loop).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
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
    "caller_soon",
]

T = TypeVar("T")
log = logging.getLogger("acpfsm.runtime")
_posted: set[asyncio.Task[object]] = set()
"""The tasks :meth:`AsyncioRunner.post` started and nobody awaits (kept from the collector)."""


def _spawn(fn: Callable[..., Awaitable[object]], args: tuple[object, ...]) -> None:
    """On the asyncio loop: start ``fn(*args)``; an exception it lets out is logged."""

    async def call() -> object:
        return await fn(*args)

    task = asyncio.get_running_loop().create_task(call())
    _posted.add(task)
    task.add_done_callback(_posted_done)


def _posted_done(task: asyncio.Task[object]) -> None:
    _posted.discard(task)
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.warning("a posted call failed: %r", exc)


class AsyncioRunner(Protocol):
    """Runs asyncio coroutine functions for a caller on any backend (see the module)."""

    async def run(self, fn: Callable[..., Awaitable[T]], *args: object) -> T: ...

    def post(self, fn: Callable[..., Awaitable[object]], *args: object) -> None:
        """Start ``fn(*args)`` on the loop and return at once: its result is dropped, an
        exception it raises is logged (``fn`` handles the ones it expects)."""

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

    def post(self, fn: Callable[..., Awaitable[object]], *args: object) -> None:
        _spawn(fn, args)

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
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def running(self) -> bool:
        return self._portal is not None

    def _start(self) -> None:
        stack = contextlib.ExitStack()
        self._portal = portal = stack.enter_context(
            anyio.from_thread.start_blocking_portal(backend="asyncio", name=self.name)
        )
        self._loop = portal.call(asyncio.get_running_loop)
        self._stack = stack

    def _stop(self) -> None:
        stack, self._stack, self._portal, self._loop = self._stack, None, None, None
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
        cancelled meanwhile cancels the task there (and is cancelled itself). The task is
        started on the loop thread without waiting for that thread to take it (the caller's
        thread never blocks)."""
        loop = self._loop
        if loop is None:
            raise RuntimeError(f"{self.name}: the asyncio loop thread is not running")

        async def call() -> T:
            sniffio.current_async_library_cvar.set("asyncio")  # not the caller's library
            return await fn(*args)

        coro = call()
        try:
            future = asyncio.run_coroutine_threadsafe(coro, loop)
        except RuntimeError:  # the loop has closed meanwhile
            coro.close()
            raise RuntimeError(f"{self.name}: the asyncio loop thread is not running") from None
        return await await_future(future)

    def post(self, fn: Callable[..., Awaitable[object]], *args: object) -> None:
        """Start ``fn(*args)`` on the loop thread and return at once (see
        :meth:`AsyncioRunner.post`)."""
        loop = self._loop
        if loop is None:
            raise RuntimeError(f"{self.name}: the asyncio loop thread is not running")
        loop.call_soon_threadsafe(_spawn, fn, args)


def _call_soon() -> Callable[..., object]:
    """A thread-safe, non-blocking way to run a callback on the running event loop."""
    if sniffio.current_async_library() == "trio":
        import trio

        return trio.lowlevel.current_trio_token().run_sync_soon
    return asyncio.get_running_loop().call_soon_threadsafe


def caller_soon(runner: AsyncioRunner) -> Callable[..., object]:
    """Called on the caller's loop: ``soon(fn, *args)``, which code running on ``runner``'s
    asyncio loop calls to have ``fn(*args)`` run on the caller's loop (not awaited, in
    order; ``fn`` must not raise)."""
    if isinstance(runner, DirectRunner):  # one loop: no thread to cross
        return asyncio.get_running_loop().call_soon
    return _call_soon()


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
