"""The event loop's clock as a plain function.

:func:`anyio.current_time` finds the running backend on every call; the runtime reads the
clock for every trace record and every agent event, so it looks the clock up once
(:func:`loop_clock`) and calls it directly. The values are the same: the trio run's clock
(virtual under ``autojump_clock``) or the asyncio loop's ``time()``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import sniffio

__all__ = ["loop_clock"]


def loop_clock() -> Callable[[], float]:
    """The running event loop's clock; :func:`time.monotonic` outside one."""
    try:
        library = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return time.monotonic
    if library == "trio":
        import trio

        # the run's clock itself: trio.current_time finds the run and asks it on every call
        return trio.lowlevel.current_clock().current_time
    if library == "asyncio":
        import asyncio

        return asyncio.get_running_loop().time
    import anyio  # pragma: no cover - a backend anyio may add

    return anyio.current_time  # pragma: no cover
