"""The both_backends machinery of tests/conftest.py does what it says."""

import time

import anyio
import pytest
import sniffio

pytestmark = pytest.mark.both_backends


async def test_runs_on_declared_backend(backend: str, time_scale: float) -> None:
    assert sniffio.current_async_library() == backend
    await anyio.sleep(0.01 * time_scale)


async def test_virtual_clock_on_trio(backend: str, autojump_clock: object) -> None:
    start = time.monotonic()
    await anyio.sleep(100 if backend == "trio" else 0.001)
    assert time.monotonic() - start < 5
