"""Both engines drive the same run: a fixed script over the in-memory transport gives the
same trace with ``Runtime(engine="compiled")`` and ``Runtime(engine="reference")``, record
for record, apart from ``time`` (execution ids are random: compared by order of appearance)."""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import pytest

from acpfsm.adapters.events import Complete, MessageChunk
from acpfsm.adapters.memory import MemoryTransport
from acpfsm.runtime import AcpfsmError, Runtime
from acpfsm.statecharts import EngineName
from acpfsm.statecharts._machine import Machine, ReferenceMachine
from acpfsm.tools.check_trace import check_records

from .memory_runtime import MemoryExecutor, make_runtime, session_of, spec, wait_until

Row = tuple[int, int, str, int, int, str, str, str]


def _live(rt: Runtime, execution_id: str) -> Any:
    s = session_of(rt, execution_id)
    return lambda: s.current is not None and s.current.machine.is_in("dispatched")


async def _quietly(coro: Any) -> None:
    with contextlib.suppress(AcpfsmError):  # an error turn, a cancel, a stop
        await coro


async def _script(rt: Runtime, ex: MemoryExecutor) -> None:
    """Prompts, a wakeup turn, a steer, a cancel, an error turn, a start model, a process
    exit and a stop in the middle of a turn, in a fixed order."""
    first = await rt.launch(spec("initial prompt"))  # transport 0 answers every prompt
    s1 = session_of(rt, first.id)
    await wait_until(lambda: s1.execution.status == "READY", limit=5)
    assert (await rt.resume(first.id, "again")).stop_reason == "end_turn"
    ex.transports[0].emit(MessageChunk(text="unasked", prompt_generation=0))  # a wakeup turn
    await wait_until(lambda: s1.execution.status == "RUNNING", limit=5)
    ex.transports[0].emit(Complete(prompt_generation=0))
    await wait_until(lambda: s1.execution.status == "READY", limit=5)

    second = await rt.launch(spec(metadata={"runtime_model": "smart"}))
    s2 = session_of(rt, second.id)
    await wait_until(lambda: s2.execution.status == "READY", limit=5)
    agent = ex.transports[1]
    async with anyio.create_task_group() as tg:
        tg.start_soon(_quietly, rt.prompt(second.id, "long task"))
        await wait_until(_live(rt, second.id), limit=5)
        await rt.steer(second.id, "also this")
        agent.emit(MessageChunk(text="done", prompt_generation=1))
        agent.complete(1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_quietly, rt.prompt(second.id, "to be cancelled"))
        await wait_until(_live(rt, second.id), limit=5)
        await rt.cancel(second.id)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_quietly, rt.prompt(second.id, "fails"))
        await wait_until(_live(rt, second.id), limit=5)
        agent.fail(3, "boom")
    await wait_until(lambda: s2.execution.status == "FAILED", limit=5)
    agent.disconnect("exited", exit_code=0)  # the agent process exits
    await wait_until(lambda: s2.ctx.exit_code == 0, limit=5)

    third = await rt.launch(spec())
    s3 = session_of(rt, third.id)
    await wait_until(lambda: s3.execution.status == "READY", limit=5)
    async with anyio.create_task_group() as tg:  # stopped while a turn runs
        tg.start_soon(_quietly, rt.prompt(third.id, "interrupted"))
        await wait_until(_live(rt, third.id), limit=5)
        await rt.stop(third.id, "enough")


async def _run(engine: EngineName, time_scale: float) -> list[Row]:
    ex = MemoryExecutor()
    ex.make = lambda: MemoryTransport(auto_complete=not ex.transports)
    async with make_runtime(ex, time_scale=time_scale, engine=engine) as rt:
        await _script(rt, ex)
        machines = [m for s in rt._sessions.values() for m in s.ctx.machines.values()]
        kind = Machine if engine == "compiled" else ReferenceMachine
        assert machines and all(isinstance(m, kind) for m in machines)
    assert check_records(rt.trace.records).ok
    ids: dict[str, int] = {}
    return [
        (
            r.seq,
            ids.setdefault(r.execution_id, len(ids)),
            r.chart,
            r.generation,
            r.instance,
            r.event,
            r.source,
            r.target,
        )
        for r in rt.trace.records
    ]


@pytest.mark.both_backends
async def test_a_fixed_script_gives_the_same_trace_on_both_engines(time_scale: float) -> None:
    compiled = await _run("compiled", time_scale)
    reference = await _run("reference", time_scale)
    assert compiled == reference
    assert len({r[1] for r in compiled}) == 3
    charts = {r[2] for r in compiled}
    assert charts == {
        "execution",
        "first_activity",
        "agent_stream",
        "session_init",
        "config_settlement",
        "start_model_policy",
        "prompt_generation",
    }
    fired = {(r[2], r[5]) for r in compiled}
    assert {
        ("execution", "wakeup_content_arrived"),
        ("execution", "wakeup_turn_completed"),
        ("prompt_generation", "steered"),
        ("prompt_generation", "cancel_answered"),
        ("execution", "turn_failed"),
        ("execution", "process_exited"),
        ("prompt_generation", "execution_stopped"),
        ("start_model_policy", "policy_evaluated"),
        ("prompt_generation", "dispatch_started"),
        ("execution", "activity_recorded"),
        ("first_activity", "activity_seen"),
    } <= fired
