"""Seed behaviours the first runtime missed (mapped branch by branch from kandev's
lifecycle/session.go and manager_*.go): each test fails on the old runtime."""

from __future__ import annotations

import anyio
import pytest

from acpfsm.adapters.events import AgentEvent, Complete, MessageChunk, Plan, ToolCall
from acpfsm.adapters.transport import CancelResult
from acpfsm.runtime import AgentReportedError, CancelEscalated
from acpfsm.runtime import events as le

from .memory_runtime import MemoryExecutor, launch_session, make_runtime, wait_until
from .prompt_helpers import of_type, prompting, published

pytestmark = pytest.mark.both_backends


@pytest.mark.parametrize(
    ("text", "reported"), [("quota exceeded", "quota exceeded"), ("", "agent error completion")]
)
async def test_an_error_completion_reports_its_own_text(
    time_scale: float, text: str, reported: str
) -> None:
    """An error ``complete`` carrying its text fails the turn with that text (kandev
    extractErrorMessage), and only one with no text says "agent error completion"."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "go")
            ex.last.emit(Complete(prompt_generation=1, data={"is_error": True}, error=text))
            await p.wait()
        assert isinstance(p.error, AgentReportedError)
        assert str(p.error) == f"agent error: {reported}"
        (failed,) = of_type(s, le.AgentFailed)
        assert failed.error == reported
        await rt.stop(ref.id, "done")


async def test_agent_running_comes_once_before_the_ready_that_ends_a_turn(
    time_scale: float,
) -> None:
    """``agent.running`` is published once per execution, on the first activity while not
    READY (kandev ``firstActivityOnce``), and a claimed generation-bearing success that finds
    it not yet published publishes it before its ``agent.ready``; later turns publish none."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt, ready=True)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "one")
            ex.last.complete(1)  # no activity at all before the end of the turn
            await p.wait()
        kinds = [type(e).__name__ for e in published(s)]
        assert kinds.count("AgentRunning") == 1
        assert kinds.index("AgentRunning") < kinds.index("AgentReady", kinds.index("AgentRunning"))
        (ready_of_turn,) = [e for e in of_type(s, le.AgentReady) if e.prompt_generation == 1]
        running = of_type(s, le.AgentRunning)[0]
        assert published(s).index(running) < published(s).index(ready_of_turn)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "two", generation=2)
            ex.last.emit(MessageChunk(text="hi", prompt_generation=2))
            ex.last.complete(2)
            await p.wait()
        assert len(of_type(s, le.AgentRunning)) == 1  # once per execution
        await rt.stop(ref.id, "done")


@pytest.mark.parametrize(
    "first",
    [ToolCall(tool_call_id="t1", prompt_generation=1), Plan(prompt_generation=1)],
    ids=["tool_call", "plan"],
)
async def test_the_first_activity_may_be_any_turn_content(
    time_scale: float, first: AgentEvent
) -> None:
    """Not only a chunk: a tool call or a plan as the execution's first activity has
    ``agent.running`` published at once, right before it."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt, ready=True)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "one")
            ex.last.emit(first)
            await wait_until(lambda: first in published(s))
            kinds = [type(e).__name__ for e in published(s)]
            assert kinds[-2:] == ["AgentRunning", type(first).__name__]
            ex.last.complete(1)
            await p.wait()
        assert len(of_type(s, le.AgentRunning)) == 1
        await rt.stop(ref.id, "done")


async def test_a_wakeup_turns_next_content_is_the_first_activity(time_scale: float) -> None:
    """Content while READY starts a wakeup turn, published as ``agent.running`` (kandev
    ``recordActivity``'s wakeup path); it was seen while READY, so it is not the first
    activity: the wakeup turn's next content is, and announces ``agent.running`` once more
    (``firstActivityOnce``), and nothing after it does."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt, ready=True)
        ex.last.emit(MessageChunk(text="woke up"))
        await wait_until(lambda: s.execution.status == "RUNNING")
        assert len(of_type(s, le.AgentRunning)) == 1
        ex.last.emit(MessageChunk(text=" and"))
        await wait_until(lambda: len(of_type(s, le.AgentRunning)) == 2)
        ex.last.emit(MessageChunk(text=" more"))
        ex.last.emit(Complete())
        await wait_until(lambda: s.execution.status == "READY")
        kinds = [type(e).__name__ for e in published(s)]
        assert kinds[kinds.index("AgentRunning") :] == [
            "AgentRunning",
            "MessageChunk",
            "AgentRunning",
            "MessageChunk",
            "MessageChunk",
            "Complete",
            "AgentReady",
        ]
        assert s.ctx.message == [] and of_type(s, le.AgentReady)[-1].stop_reason == "end_turn"
        await rt.stop(ref.id, "done")


@pytest.mark.parametrize(
    "content", [ToolCall(tool_call_id="t1"), Plan()], ids=["tool_call", "plan"]
)
async def test_any_turn_content_while_ready_starts_a_wakeup_turn(
    time_scale: float, content: AgentEvent
) -> None:
    """Not only a chunk: a tool call or a plan while READY is a wakeup turn's content
    (RUNNING, ``agent.running``), and its end makes the execution READY again."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt, ready=True)
        ex.last.emit(content)
        await wait_until(lambda: s.execution.status == "RUNNING")
        assert len(of_type(s, le.AgentRunning)) == 1
        ex.last.emit(Complete())
        await wait_until(lambda: s.execution.status == "READY")
        await rt.stop(ref.id, "done")


async def test_agent_running_is_announced_at_the_first_activity_not_at_the_turn_end(
    time_scale: float,
) -> None:
    """The first activity of a running turn (its first chunk) announces ``agent.running``
    right away (kandev ``recordActivity``'s ``firstActivityOnce``), while the turn still
    runs, not only when the turn's success is claimed."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt, ready=True)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "one")
            assert of_type(s, le.AgentRunning) == []
            ex.last.emit(MessageChunk(text="working", prompt_generation=1))
            await wait_until(lambda: len(of_type(s, le.AgentRunning)) == 1)
            assert not p.done.is_set()
            ex.last.complete(1)
            await p.wait()
        assert len(of_type(s, le.AgentRunning)) == 1
        await rt.stop(ref.id, "done")


async def test_a_cancel_with_no_turn_in_flight_unacknowledged_escalates_to_ready(
    time_scale: float,
) -> None:
    """A cancel with no turn in flight that the agent does not acknowledge escalates
    (CancelEscalated) and the execution is READY again, also from FAILED (kandev CancelAgent
    with a closed ``promptFinished``)."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "one")
            ex.last.fail(1, "provider error")
            await p.wait()
        assert rt.get_execution(ref.id).status == "FAILED"
        ex.last.handlers["cancel"] = lambda: CancelResult(acknowledged=False)
        readies = len(of_type(s, le.AgentReady))
        with pytest.raises(CancelEscalated):
            await rt.cancel(ref.id)
        assert rt.get_execution(ref.id).status == "READY"
        assert len(of_type(s, le.AgentReady)) == readies + 1
        # acknowledged, with no turn in flight: nothing to escalate
        ex.last.handlers["cancel"] = lambda: CancelResult(acknowledged=True)
        await rt.cancel(ref.id)
        assert rt.get_execution(ref.id).status == "READY"
        await rt.stop(ref.id, "done")


async def test_acp_session_created_carries_the_resume_attempt(time_scale: float) -> None:
    """seed D12: ``agent.acp_session_created`` carries the launch's resume attempt id."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt, metadata={"resume_attempt_id": "attempt-7"})
        await wait_until(lambda: bool(of_type(s, le.AcpSessionCreated)))
        (created,) = of_type(s, le.AcpSessionCreated)
        assert created.resume_attempt_id == "attempt-7"
        await rt.stop(ref.id, "done")
