"""The event loop's clock as the runtime reads it (trace records, stall accounting)."""

from __future__ import annotations

import asyncio
import time

import anyio
import pytest

from acpfsm.runtime.clock import loop_clock


@pytest.mark.both_backends
async def test_the_clock_is_the_running_loops(backend: str) -> None:
    clock = loop_clock()
    assert abs(clock() - anyio.current_time()) < 0.5
    await anyio.sleep(0.01)
    assert clock() >= anyio.current_time() - 0.01


def test_an_asyncio_loop_that_keeps_its_own_time_is_asked_for_it() -> None:
    """A loop whose ``time()`` is its own (a subclass's, or one patched on the loop: not the
    monotonic clock plain asyncio reads) is the clock; a plain loop's values are the
    monotonic clock's, read directly."""

    class OwnTime(asyncio.SelectorEventLoop):
        def time(self) -> float:
            return 1234.5

    async def read() -> float:
        return loop_clock()()

    own = OwnTime()
    try:
        assert own.run_until_complete(read()) == 1234.5
    finally:
        own.close()
    patched = asyncio.new_event_loop()
    patched.time = lambda: 42.0  # type: ignore[method-assign]  # as fake-time tools do
    try:
        assert patched.run_until_complete(read()) == 42.0
    finally:
        patched.close()
    before = time.monotonic()
    assert before <= asyncio.run(read()) <= time.monotonic()


def test_outside_a_loop_it_is_the_monotonic_clock() -> None:
    before = time.monotonic()
    assert before <= loop_clock()() <= time.monotonic()
