"""Recorded traces for the tests of the trace tools (diagrams of a run, the run report)."""

from __future__ import annotations

from pathlib import Path

import anyio

from .memory_runtime import make_runtime, memory_agent, session_of, spec, wait_until


def record_two_executions(path: Path) -> Path:
    """A trace at ``path`` of two executions on the in-memory transport: one with an initial
    prompt and a follow-up, one that only boots."""

    async def produce() -> None:
        ex = memory_agent(auto_complete=True)
        async with make_runtime(ex, trace_path=path) as rt:
            ref = await rt.launch(spec("first"))
            await rt.resume(ref.id, "second")
            other = await rt.launch(spec())
            so = session_of(rt, other.id)
            await wait_until(lambda: so.execution.status == "READY", limit=5)

    anyio.run(produce, backend="trio")
    return path
