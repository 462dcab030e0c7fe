"""``rt.turn``: one turn's updates as they arrive, then its result, over the in-memory agent.

The agent here is scripted, so every interleaving that could mix two turns is forced: a turn
subscribed while another one still streams, a wakeup turn's content (generation 0), late
content of a turn that already ended, and leaving the block at each point of the turn's life.
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.abc
import pytest

from acpfsm.adapters.memory import MemoryTransport
from acpfsm.runtime import (
    AgentReportedError,
    CancelEscalated,
    ExecutionNotFound,
    PromptResult,
    PromptTimeout,
    Runtime,
    Turn,
)
from acpfsm.runtime.events import (
    AvailableCommands,
    MessageChunk,
    PermissionOption,
    PermissionRequest,
    Plan,
    PlanEntry,
    Reasoning,
    SessionInfo,
    ToolCall,
    ToolUpdate,
    TurnUpdate,
)

from .memory_runtime import MemoryExecutor, make_runtime, session_of, spec, wait_until
from .prompt_helpers import live, sent, start, steps

pytestmark = pytest.mark.both_backends


def content(g: int, tag: str) -> list[TurnUpdate]:
    """One of each kind of turn content, stamped with generation ``g``."""
    return [
        Reasoning(prompt_generation=g, reasoning_text=f"{tag} thinks"),
        Plan(prompt_generation=g, plan_entries=[PlanEntry(description=f"{tag} plan")]),
        ToolCall(prompt_generation=g, tool_call_id=f"{tag}-t", tool_title="Read"),
        PermissionRequest(
            prompt_generation=g,
            request_id=f"{tag}-p",
            tool_call_id=f"{tag}-t",
            options=[PermissionOption(option_id="ok", name="Allow", kind="allow_once")],
        ),
        ToolUpdate(prompt_generation=g, tool_call_id=f"{tag}-t", tool_status="completed"),
        MessageChunk(prompt_generation=g, text=f"{tag} says"),
        MessageChunk(prompt_generation=g, text=" hi"),
    ]


async def ready(rt: Runtime) -> tuple[str, MemoryTransport]:
    ex = rt.executors["memory"]
    assert isinstance(ex, MemoryExecutor)
    ref = await rt.launch(spec())
    await rt.wait_ready(ref.id)
    return ref.id, ex.last


async def drain(turn: Turn) -> list[TurnUpdate]:
    return [update async for update in turn]


def when_live(tg: anyio.abc.TaskGroup, rt: Runtime, eid: str, *events: Any) -> None:
    """Once generation 1 of ``eid`` is live, its agent sends ``events``."""
    s = session_of(rt, eid)
    agent = rt.executors["memory"]
    assert isinstance(agent, MemoryExecutor)

    async def play() -> None:
        await wait_until(lambda: live(s, 1))
        for event in events:
            agent.last.emit(event)

    tg.start_soon(play)


async def test_a_turn_yields_its_updates_typed_in_order_then_its_result(time_scale: float) -> None:
    async with make_runtime(MemoryExecutor(), time_scale=time_scale) as rt:
        eid, agent = await ready(rt)
        s = session_of(rt, eid)
        seen: list[TurnUpdate] = []
        async with rt.turn(eid, "hello") as turn:
            assert isinstance(turn, Turn)

            async def play() -> None:
                await wait_until(lambda: live(s, 1))
                assert turn.generation == 1
                agent.emit(MessageChunk(text="wakeup chatter"))  # generation 0: not this turn
                agent.emit(SessionInfo(prompt_generation=1, session_title="t"))  # not content
                agent.emit(AvailableCommands(prompt_generation=1))
                agent.emit(Plan(prompt_generation=1, replayed=True))  # history, not activity
                for event in content(1, "one"):
                    agent.emit(event)
                agent.complete(1)

            async with anyio.create_task_group() as tg:
                tg.start_soon(play)
                async for update in turn:
                    seen.append(update)
        assert seen == content(1, "one")
        assert [type(u).__name__ for u in seen] == [
            "Reasoning",
            "Plan",
            "ToolCall",
            "PermissionRequest",
            "ToolUpdate",
            "MessageChunk",
            "MessageChunk",
        ]
        assert turn.done
        result = turn.result
        assert result.stop_reason == "end_turn" and result.generation == 1
        assert result.agent_message.endswith("one says hi")
        assert sent(agent, "prompt") == [("hello", (), 1)]


async def test_two_turns_never_mix_even_when_the_second_subscribes_early(
    time_scale: float,
) -> None:
    """Turn B is opened while turn A still streams (B queues behind A's prompt lock, its
    subscription already live): B yields none of A's content, nor A's late content after A
    ended, nor a wakeup's; A yields none of B's."""
    async with make_runtime(MemoryExecutor(), time_scale=time_scale) as rt:
        eid, agent = await ready(rt)
        s = session_of(rt, eid)
        a_seen: list[TurnUpdate] = []
        b_seen: list[TurnUpdate] = []
        b_entered = anyio.Event()

        async def turn_b() -> None:
            async with rt.turn(eid, "second") as b:
                b_entered.set()
                b_seen.extend(await drain(b))
            assert b.result.generation == 2

        async with rt.turn(eid, "first") as a, anyio.create_task_group() as tg:

            async def play() -> None:
                await wait_until(lambda: live(s, 1))
                agent.emit(content(1, "a")[0])
                tg.start_soon(turn_b)
                await b_entered.wait()
                for event in content(1, "a")[1:]:
                    agent.emit(event)
                agent.complete(1)
                await wait_until(lambda: live(s, 2))
                agent.emit(MessageChunk(prompt_generation=1, text="late a"))  # A is over
                agent.emit(MessageChunk(text="wakeup"))
                for event in content(2, "b"):
                    agent.emit(event)
                agent.complete(2)

            tg.start_soon(play)
            a_seen.extend(await drain(a))
        assert a_seen == content(1, "a")
        assert b_seen == content(2, "b")
        assert a.result.generation == 1


async def test_leaving_the_block_early_cancels_the_turn_at_the_agent(time_scale: float) -> None:
    async with make_runtime(MemoryExecutor(), time_scale=time_scale) as rt:
        eid, agent = await ready(rt)
        s = session_of(rt, eid)
        async with rt.turn(eid, "long job") as turn, anyio.create_task_group() as tg:
            when_live(tg, rt, eid, MessageChunk(prompt_generation=1, text="working"))
            async for update in turn:
                assert isinstance(update, MessageChunk)
                break  # the caller has seen enough
        # the abandoned turn is cancelled at the agent in the background, and ends cancelled
        await wait_until(lambda: ("cancel", ()) in agent.calls)
        await wait_until(lambda: s.generations[1].turn_over.is_set())
        assert ("waiter_abandoned", "awaited", "abandoned") in steps(s, 1)
        # the next turn is not held up and sees only its own reply
        agent.auto_complete = True
        async with rt.turn(eid, "next") as nxt:
            updates = await drain(nxt)
        assert [u.text for u in updates if isinstance(u, MessageChunk)] == ["Hello", " world"]
        assert nxt.result.generation == 2


async def test_leaving_before_the_prompt_was_admitted_sends_nothing(time_scale: float) -> None:
    async with make_runtime(MemoryExecutor(), time_scale=time_scale) as rt:
        eid, agent = await ready(rt)
        s = session_of(rt, eid)
        async with anyio.create_task_group() as tg:
            first = start(tg, rt.prompt, eid, "first")  # holds the prompt lock
            await wait_until(lambda: live(s, 1))
            async with rt.turn(eid, "never sent") as turn:
                with anyio.move_on_after(0.05 * time_scale):
                    await drain(turn)
                assert turn.generation == 0  # still queued behind the first prompt
            agent.complete(1)
            await first.wait()
        assert [text for text, _, _ in sent(agent, "prompt")] == ["first"]
        assert list(s.generations) == [1]


async def test_cancel_keeps_the_stream_and_ends_cancelled(time_scale: float) -> None:
    async with make_runtime(MemoryExecutor(), time_scale=time_scale) as rt:
        eid, agent = await ready(rt)
        seen: list[Any] = []
        async with rt.turn(eid, "job") as turn, anyio.create_task_group() as tg:
            when_live(tg, rt, eid, MessageChunk(prompt_generation=1, text="before cancel"))
            async for update in turn:
                seen.append(update)
                await turn.cancel()  # the memory agent ends its turn "cancelled"
        assert [u.text for u in seen] == ["before cancel"]
        assert turn.result.stop_reason == "cancelled"
        assert ("cancel", ()) in agent.calls


async def test_cancel_before_admission_withdraws_it(time_scale: float) -> None:
    async with make_runtime(MemoryExecutor(), time_scale=time_scale) as rt:
        eid, agent = await ready(rt)
        s = session_of(rt, eid)
        async with anyio.create_task_group() as tg:
            first = start(tg, rt.prompt, eid, "first")
            await wait_until(lambda: live(s, 1))
            async with rt.turn(eid, "queued") as turn:
                await turn.cancel()
                assert await drain(turn) == []
            assert turn.result == PromptResult(stop_reason="cancelled")
            agent.complete(1)
            await first.wait()
        assert first.prompt_result.stop_reason == "end_turn"  # the other turn was untouched
        assert [text for text, _, _ in sent(agent, "prompt")] == ["first"]


async def test_cancel_escalation_is_raised_as_by_rt_cancel(time_scale: float) -> None:
    async with make_runtime(MemoryExecutor(), time_scale=time_scale) as rt:
        eid, agent = await ready(rt)
        s = session_of(rt, eid)
        agent.cancel_completes = False  # the agent ignores the cancel
        async with rt.turn(eid, "stuck") as turn:
            await wait_until(lambda: live(s, 1))
            with pytest.raises(CancelEscalated):
                await turn.cancel()
            with pytest.raises(CancelEscalated):
                await drain(turn)  # the turn's own error, as rt.prompt raises it


async def test_the_turns_error_is_raised_by_the_iteration_and_the_result(
    time_scale: float,
) -> None:
    async with make_runtime(MemoryExecutor(), time_scale=time_scale) as rt:
        eid, agent = await ready(rt)
        s = session_of(rt, eid)
        seen: list[TurnUpdate] = []

        async def play() -> None:
            await wait_until(lambda: live(s, 1))
            agent.emit(MessageChunk(prompt_generation=1, text="partial"))
            agent.fail(1, "model overloaded")

        async with anyio.create_task_group() as tg:
            tg.start_soon(play)
            turn = rt.turn(eid, "job")

            async def consume() -> None:
                async with turn:
                    async for update in turn:
                        seen.append(update)

            with pytest.raises(AgentReportedError, match="model overloaded"):
                await consume()
        assert [u.text for u in seen if isinstance(u, MessageChunk)] == ["partial"]
        with pytest.raises(AgentReportedError):
            _ = turn.result


async def test_timeout_ends_the_turn_with_prompt_timeout(time_scale: float) -> None:
    async with make_runtime(MemoryExecutor(), time_scale=time_scale) as rt:
        eid, agent = await ready(rt)
        with pytest.raises(PromptTimeout):
            async with rt.turn(eid, "slow", timeout=5 * time_scale) as turn:
                await drain(turn)
        await wait_until(lambda: ("cancel", ()) in agent.calls)


async def test_misuse_is_a_typed_error(time_scale: float) -> None:
    async with make_runtime(MemoryExecutor(), time_scale=time_scale) as rt:
        with pytest.raises(ExecutionNotFound):
            rt.turn("no-such-execution", "hi")
        eid, agent = await ready(rt)
        agent.auto_complete = True
        turn = rt.turn(eid, "hi")
        with pytest.raises(Exception, match="inside `async with"):
            await turn.__anext__()
        async with turn:
            with pytest.raises(Exception, match="not ended yet"):
                _ = turn.result
            await drain(turn)
        assert turn.result.stop_reason == "end_turn"
        assert await drain(turn) == []  # iterating again: nothing more
