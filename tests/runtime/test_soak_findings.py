"""What the soak found, each pinned by a test that failed before the fix.

* A flood of events (5,000 reasoning chunks) from one agent, with fifty executions sharing the
  event loop, took longer than the soak's 30 s bound: the event queue yielded to every other
  task before each event. It now yields once per batch.
* The reply text of a turn that a successor superseded, read late, went into the successor's
  reply (cross-talk).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from acpfsm.adapters.events import AgentEvent, MessageChunk, Plan, PlanEntry, Reasoning, ToolCall
from acpfsm.adapters.memory import MemoryTransport
from acpfsm.adapters.sync import EventQueue
from acpfsm.runtime import Runtime

from .memory_runtime import make_runtime, memory_agent, session_of, spec, wait_until

pytestmark = pytest.mark.both_backends


async def test_a_burst_of_events_is_consumed_in_a_few_scheduling_rounds() -> None:
    queue: EventQueue[int] = EventQueue(batch=64)
    for i in range(1000):
        queue.put(i)
    queue.close()
    rounds = 0
    draining = True

    async def another_task() -> None:
        nonlocal rounds
        while draining:
            rounds += 1
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(another_task)
        await anyio.lowlevel.checkpoint()
        got = [item async for item in queue]
        draining = False
    assert got == list(range(1000))
    assert rounds <= 1000 // 64 + 3  # was about one round per item


async def test_a_cancelled_consumer_stops_at_once() -> None:
    queue: EventQueue[int] = EventQueue(batch=64)
    for i in range(100):
        queue.put(i)
    seen: list[int] = []
    with anyio.CancelScope() as scope:
        async for item in queue:
            seen.append(item)
            if item == 10:
                scope.cancel()
    assert seen == list(range(11))
    assert len(queue) == 89


async def turn_two_with(
    rt: Runtime,
    execution_id: str,
    start: Callable[[], Coroutine[Any, Any, object]],
    burst: list[AgentEvent],
    kinds: Any,
) -> tuple[list[AgentEvent], int]:
    """Turn 2 (``start``) runs while the agent sends ``burst``, then ends: the events of
    ``kinds`` a subscriber got meanwhile, and the activity the runtime counted."""
    session = session_of(rt, execution_id)
    transport = session.ctx.transport
    assert isinstance(transport, MemoryTransport)
    async with rt.subscribe_events(execution_id, replay=False) as sub:
        async with anyio.create_task_group() as tg:
            tg.start_soon(start)
            await wait_until(lambda: 2 in transport.running)
            epoch = session.ctx.activity.epoch
            for event in burst:
                transport.emit(event)
            transport.complete(2)
        sub.close()
        seen = [e async for e in sub if isinstance(e, kinds)]
    return seen, session.ctx.activity.epoch - epoch


async def test_late_text_of_a_superseded_turn_is_not_the_next_reply(time_scale: float) -> None:
    """Also inside a burst of 300 events (several of the queue's batches; the pump takes a
    run of queued chunks without a coroutine or a checkpoint per chunk and publishes it at
    once) mixing the current turn's chunks with the superseded one's, the user's, thoughts
    and other events: a subscriber gets the burst whole and in order, every chunk counts as
    activity, and the reply keeps only the current turn's agent text."""
    ex = memory_agent()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref = await rt.launch(spec())
        await rt.wait_ready(ref.id)
        transport = ex.last
        results = []

        async def prompt(text: str) -> None:
            results.append(await rt.prompt(ref.id, text))

        async with anyio.create_task_group() as tg:
            tg.start_soon(prompt, "one")
            await wait_until(lambda: 1 in transport.running)
            transport.emit(MessageChunk(prompt_generation=1, text="reply one"))
            transport.complete(1)
        burst: list[AgentEvent] = []
        for i in range(60):
            burst += [
                MessageChunk(prompt_generation=1, text=" LATE"),  # read late (behind a flood)
                MessageChunk(prompt_generation=2, text=f"{i},"),
                MessageChunk(prompt_generation=2, text="echo", role="user"),
                Reasoning(prompt_generation=2, reasoning_text="hm"),
            ]
            if i % 7 == 0:
                burst.append(ToolCall(prompt_generation=2, tool_call_id=f"t{i}"))
        seen, activity = await turn_two_with(
            rt, ref.id, lambda: prompt("two"), burst, MessageChunk | Reasoning | ToolCall
        )
        assert seen == burst
        assert activity == len(burst)
        reply_two = "".join(f"{i}," for i in range(60))
        assert [r.agent_message for r in results] == ["reply one", reply_two]
        await rt.stop(ref.id, "done")


async def test_an_unstamped_chunk_in_a_burst_is_the_current_reply(time_scale: float) -> None:
    """A chunk of no turn (generation 0: an agent that does not stamp them) taken in the
    pump's run of chunks is the current turn's reply text, in its place; a superseded
    turn's is not. Nor is a generation that no admission made superseded (a number ahead of
    the current one, or below zero: an agent's own stamp) ruled out."""
    ex = memory_agent()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref = await rt.launch(spec())
        await rt.wait_ready(ref.id)
        transport = ex.last
        async with anyio.create_task_group() as tg:  # the first activity is announced
            tg.start_soon(rt.prompt, ref.id, "one")
            await wait_until(lambda: 1 in transport.running)
            transport.emit(MessageChunk(prompt_generation=1, text="first"))
            transport.complete(1)
        results = []

        async def two() -> None:
            results.append(await rt.prompt(ref.id, "two"))

        burst: list[AgentEvent] = [
            MessageChunk(prompt_generation=2, text="a"),
            MessageChunk(text="b"),
            MessageChunk(prompt_generation=1, text="late"),
            MessageChunk(prompt_generation=2, text=""),
            MessageChunk(prompt_generation=2, text="c"),
            MessageChunk(prompt_generation=3, text="d"),
            MessageChunk(prompt_generation=-1, text="e"),
        ]
        seen, _ = await turn_two_with(rt, ref.id, two, burst, MessageChunk)
        assert seen == burst
        assert [r.agent_message for r in results] == ["abcde"]
        await rt.stop(ref.id, "done")


async def test_plans_are_taken_with_the_chunks(time_scale: float) -> None:
    """A plan is plain turn content, as a chunk is (activity, then published): the pump
    takes it in the same run as the chunks, without the checked way (:meth:`handle`, a
    coroutine each). A replayed plan is history, not activity: it goes the checked way. A
    subscriber gets everything in order."""
    ex = memory_agent()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref = await rt.launch(spec())
        await rt.wait_ready(ref.id)
        transport = ex.last
        session = session_of(rt, ref.id)
        async with anyio.create_task_group() as tg:  # the first activity is announced
            tg.start_soon(rt.prompt, ref.id, "zero")
            await wait_until(lambda: 1 in transport.running)
            transport.emit(MessageChunk(prompt_generation=1, text="first"))
            transport.complete(1)
        checked: list[str] = []
        handle = session.pump.handle

        async def counted(event: AgentEvent) -> None:
            checked.append(type(event).__name__)
            await handle(event)

        session.pump.handle = counted  # type: ignore[method-assign]
        steps = [PlanEntry(description="look", status="in_progress")]
        burst: list[AgentEvent] = [
            MessageChunk(prompt_generation=2, text="a"),
            Plan(prompt_generation=2, plan_entries=steps),
            Reasoning(prompt_generation=2, reasoning_text="hm"),
            Plan(prompt_generation=2, plan_entries=steps, replayed=True),
            Plan(prompt_generation=2),
            MessageChunk(prompt_generation=2, text="b"),
        ]
        seen, activity = await turn_two_with(
            rt, ref.id, lambda: rt.prompt(ref.id, "two"), burst, MessageChunk | Reasoning | Plan
        )
        assert seen == burst
        assert checked == ["Plan", "Complete"]  # the replayed plan, the turn's end
        assert activity == len(burst) - 1
        await rt.stop(ref.id, "done")
