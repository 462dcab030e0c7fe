"""Scenarios S4 (tests/runtime/README.md): execution store and generations (kandev
lifecycle/execution_store.go), sendPrompt, the dispatch-only barrier and serialization
(lifecycle/session.go ``sendPrompt``, ``waitForPromptDone``), completion, handoff and disconnect
(lifecycle/manager_events.go), driven through the real Runtime over the in-memory agent.

kandev's store keeps three counters per execution (P admitted, D dispatched, C claimed); here
each generation is a PromptGeneration chart, so "generation g is owned / steerable / claimed"
is read from ``session.generations[g]`` and ``session.current``; kandev's ``promptDoneCh`` is
the chart state plus the waiter's outcome, so "a signal is received" is "the waiter returns".
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from acpfsm.adapters.errors import LocalProtocolError, StreamNotConnected
from acpfsm.adapters.events import (
    AgentEvent,
    AvailableCommands,
    Complete,
    ErrorEvent,
    ForegroundIdle,
    MessageChunk,
    ToolCall,
    ToolUpdate,
)
from acpfsm.adapters.memory import MemoryTransport
from acpfsm.adapters.transport import Attachment, SessionResult
from acpfsm.runtime import (
    AgentProfile,
    AgentReportedError,
    AttachmentError,
    CancelEscalated,
    CancelEscalatedAgentError,
    ExecutionAlreadyExists,
    ExecutionNotFound,
    PendingDispatchedPromptTimeout,
    PromptDispatchError,
    SteerNotDispatched,
)
from acpfsm.runtime import events as le
from acpfsm.runtime.history import HistoryStore

from .memory_runtime import (
    MemoryExecutor,
    launch_session,
    make_runtime,
    memory_agent,
    session_of,
    settle,
    spec,
    wait_until,
)
from .prompt_helpers import (
    HISTORY_PROFILE,
    execution_steps,
    history,
    history_root,
    history_runtime,
    live,
    of_type,
    prompting,
    published,
    sent,
    start,
    steps,
    tool_results,
)

pytestmark = pytest.mark.both_backends


def _held_prompts(transport: MemoryTransport, gates: dict[int, anyio.Event]) -> None:
    """Pin each generation between BeginPrompt and its dispatch ack until its gate opens."""

    async def prompt(text: str, attachments: Any, generation: int) -> None:
        gate = gates.get(generation)
        if gate is not None:
            await gate.wait()
        transport.running.append(generation)

    transport.handlers["prompt"] = prompt


# ------------------------------------------------------- execution store and generations --


async def test_s64_add_edge_cases(time_scale: float) -> None:
    """s64. kandev's store Add: a second execution for one task session is rejected and not
    stored (R31), an add after a remove succeeds and the session maps to the new execution,
    executions without a session id always succeed, and Remove clears the runtime state.
    Here Add/Remove are ``launch``/``stop``; adding the very same execution twice cannot be
    expressed (every launch creates a new execution), the closest is the rejected duplicate,
    which leaves the first execution untouched and starts no second agent."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        first = await rt.launch(spec(metadata={"session_id": "sess-1"}))
        with pytest.raises(ExecutionAlreadyExists):
            await rt.launch(spec(metadata={"session_id": "sess-1"}))
        assert [e.id for e in rt.list_executions()] == [first.id]
        assert len(ex.transports) == 1  # the rejected execution started nothing
        await wait_until(lambda: rt.get_execution(first.id).status == "READY")

        await rt.stop(first.id, "done")  # Remove
        assert rt.list_executions() == []
        assert ("aclose", ()) in ex.transports[0].calls
        with pytest.raises(ExecutionNotFound):
            rt.get_execution(first.id)

        second = await rt.launch(spec(metadata={"session_id": "sess-1"}))  # add after remove
        assert second.id != first.id
        assert second.session_id == "sess-1"
        assert [e.id for e in rt.list_executions() if e.session_id == "sess-1"] == [second.id]

        a = await rt.launch(spec())  # no task session id: each add succeeds on its own
        b = await rt.launch(spec())
        assert a.session_id == a.id and b.session_id == b.id
        assert {e.id for e in rt.list_executions()} == {second.id, a.id, b.id}


async def test_s65_steerable_predicate_walkthrough(time_scale: float) -> None:
    """s65. ActivePromptGeneration (the steerable predicate) through a generation's life:
    0 on a fresh execution, 0 after BeginPrompt (admitted), g once dispatched, 0 after the
    completion of g; after a new BeginPrompt a late MarkPromptDispatched(old g) is ignored
    (R23: a self-transition of the superseded chart) and MarkPromptDispatched(new g) makes
    the new g steerable. "Steerable" is observed as the chart predicate and through
    ``steer``, which is dispatched only into a steerable generation."""
    ex = MemoryExecutor()
    gates = {1: anyio.Event(), 2: anyio.Event()}
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt, ready=True)
        agent = ex.last
        _held_prompts(agent, gates)
        assert s.current is None
        with pytest.raises(SteerNotDispatched):
            await rt.steer(ref.id, "fresh")

        async with anyio.create_task_group() as tg:
            p1 = start(tg, rt.prompt, ref.id, "one")
            await wait_until(lambda: len(sent(agent, "prompt")) == 1)
            assert s.current is not None and s.current.leaf == "sending"  # not acknowledged yet
            assert not s.current.machine.is_in("dispatched")
            with pytest.raises(SteerNotDispatched):
                await rt.steer(ref.id, "too early")  # R2: never into an undispatched turn
            gates[1].set()
            await wait_until(lambda: live(s, 1))
            assert rt.get_execution(ref.id).charts["prompt_generation"] == "awaited"
            assert (await rt.steer(ref.id, "into one")).generation == 1
            agent.complete(1)
            await p1.wait()
        old = s.generations[1]
        assert old.leaf == "completed" and not old.machine.is_in("dispatched")

        async with anyio.create_task_group() as tg:
            p2 = start(tg, rt.prompt, ref.id, "two")
            await wait_until(lambda: len(sent(agent, "prompt")) == 2)
            assert old.leaf == "superseded"
            await s.ctx.step(old.machine, "dispatch_accepted")  # a late MarkPromptDispatched(1)
            assert old.leaf == "superseded"
            assert steps(s, 1)[-1] == ("dispatch_accepted", "superseded", "superseded")
            assert s.current is not None and s.current.generation == 2
            assert s.current.leaf == "sending"
            with pytest.raises(SteerNotDispatched):
                await rt.steer(ref.id, "still nothing")
            gates[2].set()
            await wait_until(lambda: live(s, 2))
            agent.complete(2)
            await p2.wait()
        assert p2.prompt_result.generation == 2
        assert [args[2] for args in sent(agent, "steer")] == [1]
        await rt.stop(ref.id, "done")


async def test_s67_session_generation_lookup(time_scale: float) -> None:
    """s67. After BeginPrompt the execution reports the new generation and owns g but not
    g+1; an unknown execution is ExecutionNotFound (``execution "missing"``), also for a
    prompt (kandev's BeginPrompt("missing"))."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "hi")
            snap = rt.get_execution(ref.id)
            assert snap.prompt_generation == 1
            assert snap.session_id == ref.session_id
            assert s.generations[1] is s.current
            assert 2 not in s.generations
            ex.last.complete(1)
            await p.wait()
        with pytest.raises(ExecutionNotFound) as info:
            rt.get_execution("missing")
        assert info.value.execution_id == "missing"
        with pytest.raises(ExecutionNotFound, match='execution "missing"'):
            await rt.prompt("missing", "x")
        await rt.stop(ref.id, "done")


async def test_s68_activity_epoch_ownership(time_scale: float, autojump_clock: object) -> None:
    """s68. The activity epoch is armed at dispatch; a stall report names it, and the report
    stays "owned" (its epoch is the current one) until one genuine agent event (turn content)
    bumps the epoch. Metadata events do not bump it."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "hi")
            armed = s.ctx.activity.epoch
            await anyio.sleep(361 * time_scale)  # past the 5 min threshold, on a 1 min tick
            await wait_until(lambda: bool(of_type(s, le.AgentStalled)))  # (asyncio: real time)
            (stalled,) = of_type(s, le.AgentStalled)
            assert stalled.prompt_generation == 1
            assert stalled.activity_epoch == armed == s.ctx.activity.epoch  # owned
            ex.last.emit(AvailableCommands(prompt_generation=1))
            await settle()
            assert s.ctx.activity.epoch == stalled.activity_epoch  # metadata: still owned
            ex.last.emit(MessageChunk(text="working", prompt_generation=1))
            await settle()
            assert s.ctx.activity.epoch != stalled.activity_epoch  # a genuine event: not owned
            ex.last.complete(1)
            await p.wait()
        await rt.stop(ref.id, "done")


async def test_no_stall_while_the_agent_keeps_streaming(
    time_scale: float, autojump_clock: object
) -> None:
    """waitForPromptDone's watchdog measures the quiet since the agent's last activity: a
    turn that streams a chunk every minute for seven minutes is never reported stalled; once
    the agent falls silent, the stall comes after the 5 minute threshold, counted from its
    last chunk. (The no-stall part is asserted on trio's virtual clock only: asyncio's real
    one may be late by any amount on a loaded machine.)"""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "long")
            for _ in range(7):
                await anyio.sleep(60 * time_scale)
                ex.last.emit(MessageChunk(text=".", prompt_generation=1))
            await settle()
            if time_scale == 1.0:
                assert of_type(s, le.AgentStalled) == []
            await anyio.sleep(361 * time_scale)
            await wait_until(lambda: bool(of_type(s, le.AgentStalled)))
            stalled = of_type(s, le.AgentStalled)[-1]
            assert stalled.stalled_for >= 300 * time_scale
            ex.last.complete(1)
            await p.wait()
        await rt.stop(ref.id, "done")


async def stall_after(time_scale: float, *events: AgentEvent) -> le.AgentStalled:
    """The stall report of a turn whose agent sent ``events`` and then fell silent past the
    5 minute threshold (on a 1 minute tick)."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "use a tool")
            for event in events:
                ex.last.emit(event)
            await settle()
            await anyio.sleep(361 * time_scale)
            await wait_until(lambda: bool(of_type(s, le.AgentStalled)))
            stalled = of_type(s, le.AgentStalled)[-1]
            ex.last.complete(1)
            await p.wait()
        await rt.stop(ref.id, "done")
    return stalled


async def test_a_stall_names_the_tool_still_running_not_one_that_finished(
    time_scale: float, autojump_clock: object
) -> None:
    """The stall report names the tool call in flight (kandev's ``activeToolCall``): a tool
    whose terminal update arrived is no longer in flight (its id matched by value: the
    update's id is a string of its own, as decoded from the wire), so the stall of a turn
    whose only tool finished names none."""
    # each id decoded on its own, as from two wire messages: equal, not the same object
    first, second = b"call-1".decode(), b"call-1".decode()
    assert first == second and first is not second
    stalled = await stall_after(
        time_scale,
        ToolCall(tool_call_id=first, tool_name="grep", prompt_generation=1),
        ToolUpdate(tool_call_id=second, tool_status="completed", prompt_generation=1),
    )
    assert (stalled.active_tool_id, stalled.active_tool_title) == ("", "")


async def test_a_stall_names_a_tool_whose_update_was_not_its_end(
    time_scale: float, autojump_clock: object
) -> None:
    """A tool call's progress update (``in_progress``) does not end it, nor does the end of
    another tool call: the stall of its turn still names it as the tool in flight."""
    stalled = await stall_after(
        time_scale,
        ToolCall(tool_call_id="call-1", tool_name="grep", prompt_generation=1),
        ToolUpdate(tool_call_id="call-1", tool_status="in_progress", prompt_generation=1),
        # another tool's end does not end it either (ids match exactly)
        ToolUpdate(tool_call_id="call-2", tool_status="completed", prompt_generation=1),
    )
    assert (stalled.active_tool_id, stalled.active_tool_title) == ("call-1", "grep")


async def test_s70_every_dispatch_advances_the_generation(time_scale: float) -> None:
    """s70. A dispatch-only prompt owns generation 1; after its completion a follow-up
    prompt (status validated) owns generation 2."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        first = await rt.prompt(ref.id, "initial", dispatch_only=True)
        assert first.generation == 1 and s.current is s.generations[1]
        ex.last.complete(1)
        await wait_until(lambda: s.generations[1].leaf == "completed")
        ex.last.auto_complete = True
        second = await rt.prompt(ref.id, "follow-up")
        assert second.generation == 2 and second.stop_reason == "end_turn"
        assert [args[2] for args in sent(ex.last, "prompt")] == [1, 2]
        await rt.stop(ref.id, "done")


async def test_a_long_session_keeps_the_newest_turns_and_goes_on(time_scale: float) -> None:
    """The execution keeps the records of its last 64 turns only (a long session's memory
    stays bounded): the oldest are dropped, never the turn just admitted, and prompts keep
    working past the bound, their generations still counting up."""
    ex = memory_agent(auto_complete=True)
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        for g in range(1, 67):
            with anyio.fail_after(30):  # a turn whose record was dropped is never released
                result = await rt.prompt(ref.id, f"turn {g}")
            assert result.generation == g and result.stop_reason == "end_turn"
        assert list(s.generations) == list(range(3, 67))
        assert s.current is s.generations[66]
        assert rt.get_execution(ref.id).status == "READY"
        await rt.stop(ref.id, "done")


# ---------------------------------------------- sendPrompt, barrier, serialization --


async def test_s71_dispatch_only_does_not_wait(time_scale: float) -> None:
    """s71. With no completion ever arriving, a dispatch-only prompt returns within 2 s with
    stop reason "dispatched"; its generation then holds the dispatch-only barrier."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        with anyio.fail_after(2):
            result = await rt.prompt(ref.id, "background", dispatch_only=True)
        assert result.stop_reason == "dispatched" and result.generation == 1
        assert s.current is not None and s.current.state == "unawaited"
        assert rt.get_execution(ref.id).status == "RUNNING"
        await rt.stop(ref.id, "done")


async def test_s73_barrier_times_out_after_10s(time_scale: float, autojump_clock: object) -> None:
    """s73 (seed D8). A successor of a dispatch-only prompt whose completion never comes
    fails after 10 s with PendingDispatchedPromptTimeout (unwrapped, kandev's message); the
    gate stays set (the predecessor still holds the barrier), no generation is begun and no
    request is sent."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        await rt.prompt(ref.id, "background", dispatch_only=True)
        calls = list(ex.last.calls)
        began = anyio.current_time()
        with pytest.raises(PendingDispatchedPromptTimeout) as info:
            await rt.prompt(ref.id, "next")
        assert anyio.current_time() - began >= 10 * time_scale
        err = info.value
        assert type(err) is PendingDispatchedPromptTimeout and err.__cause__ is None
        assert err.timeout == 10 * time_scale
        assert str(err) == (
            f'pending dispatched prompt completion timed out for execution "{ref.id}" '
            f"after {10 * time_scale:g}s"
        )
        assert s.current is s.generations[1] and s.current.state == "unawaited"
        assert ("barrier_timed_out", "unawaited", "unawaited") in steps(s, 1)
        assert 2 not in s.generations
        assert ex.last.calls == calls
        await rt.stop(ref.id, "done")


async def test_s73_shorter_caller_deadline_wins(time_scale: float, autojump_clock: object) -> None:
    """s73. A caller whose own deadline is shorter than the 10 s bound gets its own
    deadline error (TimeoutError, kandev's ctx error); nothing else changes."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        await rt.prompt(ref.id, "background", dispatch_only=True)
        with pytest.raises(TimeoutError):
            with anyio.fail_after(3 * time_scale):
                await rt.prompt(ref.id, "next")
        assert s.current is s.generations[1] and s.current.state == "unawaited"
        assert all(event != "barrier_timed_out" for event, _, _ in steps(s, 1))
        assert 2 not in s.generations
        await rt.stop(ref.id, "done")


async def test_s73_completion_at_the_boundary_wins(
    time_scale: float, backend: str, autojump_clock: object
) -> None:
    """s73. A completion the runtime has taken by the time the 10 s bound fires wins: the
    gate clears and the prompt proceeds (kandev re-checks its channel once after the timer;
    here the barrier re-reads the predecessor's chart after the bound). Under trio's virtual
    clock the completion is handled 1 ms before the bound; the asyncio run (real time, a 0.5 s
    bound) at a quarter of it."""
    ex = MemoryExecutor()
    scale = time_scale if backend == "trio" else 0.05  # asyncio: a 0.5 s bound, load-proof
    bound = 10 * scale
    async with make_runtime(ex, time_scale=scale) as rt:
        ref, s = await launch_session(rt)
        await rt.prompt(ref.id, "background", dispatch_only=True)
        agent = ex.last

        async def complete_late() -> None:
            await anyio.sleep(bound - 0.001 if backend == "trio" else bound / 4)
            agent.complete(1)

        async with anyio.create_task_group() as tg:
            tg.start_soon(complete_late)
            p = await prompting(tg, rt, ref.id, "next", generation=2)
            agent.complete(2)
            await p.wait()
        assert p.error is None
        assert p.prompt_result.generation == 2
        assert all(event != "barrier_timed_out" for event, _, _ in steps(s, 1))
        await rt.stop(ref.id, "done")


async def test_s74_stale_signal_is_not_a_completion(
    time_scale: float, autojump_clock: object
) -> None:
    """s74. A stale completion (a duplicate for the previous generation, one for a
    generation that does not exist) sitting in the queue when the next waiting prompt runs
    does not release it: with a 500 ms caller deadline it fails with that deadline. kandev
    drains one stale signal from its channel; here a stale event is a self-transition of the
    old generation's chart (or matches no chart) and never touches the new waiter."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        agent = ex.last
        agent.auto_complete = True
        await rt.prompt(ref.id, "first")
        agent.auto_complete = False
        agent.emit(Complete(prompt_generation=1, stop_reason="stale"))
        agent.emit(Complete(prompt_generation=7, stop_reason="stale"))
        with pytest.raises(TimeoutError):
            # 500 ms: virtual under trio; real under asyncio, where a scaled deadline could
            # expire before a loaded machine admits the prompt
            with anyio.fail_after(0.5):
                await rt.prompt(ref.id, "second")
        # the caller left: its turn was cancelled at the agent (which ends it, cancelled)
        assert s.current is s.generations[2]
        await wait_until(lambda: s.generations[2].leaf == "completed")
        path = [t for _, _, t in steps(s, 2)]
        assert "abandoned" in path and path[-1] == "completed"
        assert [m for m, _ in agent.calls].count("cancel") == 1
        assert steps(s, 1)[-1][0] in ("completion_received", "superseded_by_successor")
        assert not [e for e in of_type(s, Complete) if e.stop_reason == "stale"]
        await rt.stop(ref.id, "done")


async def test_s76_dispatch_callback_before_completion(time_scale: float) -> None:
    """s76. ``on_dispatched`` fires once the agent acknowledged the prompt, while the
    waiting prompt is still blocked; the call returns after the completion."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        seen: list[tuple[str, bool]] = []

        async with anyio.create_task_group() as tg:
            p = start(
                tg,
                rt.prompt,
                ref.id,
                "hi",
                on_dispatched=lambda: seen.append((s.charts["prompt_generation"], p.done.is_set())),
            )
            await wait_until(lambda: bool(seen))
            assert seen == [("awaited", False)]
            await settle()
            assert not p.done.is_set()
            ex.last.complete(1)
            await p.wait()
        assert p.error is None and p.prompt_result.stop_reason == "end_turn"
        assert len(seen) == 1
        await rt.stop(ref.id, "done")


@pytest.mark.parametrize("dispatch_only", [False, True])
async def test_a_turn_ended_before_its_request_failed_is_still_dispatched(
    time_scale: float, dispatch_only: bool
) -> None:
    """R23 (the agent's end claimed before MarkPromptDispatched) when the request's answer is
    then "not connected": the turn reached the agent after all, so the prompt counts as
    dispatched, not as withdrawn: ``on_dispatched`` is called once and the caller gets the
    turn's result (a dispatch-only prompt: ``dispatched``)."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        agent = ex.last

        async def ended_then_dropped(text: str, atts: tuple[Attachment, ...], g: int) -> None:
            agent.emit(MessageChunk(text="done already", prompt_generation=g))
            agent.complete(g)
            await wait_until(lambda: s.generations[g].leaf == "completed")
            raise StreamNotConnected()

        agent.handlers["prompt"] = ended_then_dropped
        dispatched: list[int] = []
        result = await rt.prompt(
            ref.id, "hi", dispatch_only=dispatch_only, on_dispatched=lambda: dispatched.append(1)
        )
        assert dispatched == [1]
        if dispatch_only:
            assert (result.stop_reason, result.generation) == ("dispatched", 1)
        else:
            assert (result.stop_reason, result.agent_message) == ("end_turn", "done already")
        assert rt.get_execution(ref.id).status == "READY"
        await rt.stop(ref.id, "done")


async def test_s77_partial_history_persisted_before_reset(tmp_path: Path) -> None:
    """s77. Unclaimed assistant text ("partial prior response", here a wakeup turn's) is
    persisted as an agent_message when the next prompt resets the buffer, before that
    prompt's user_message; the buffer is then empty (the new turn's text is its own)."""
    ex = MemoryExecutor()
    async with history_runtime(ex, tmp_path) as rt:
        ref, s = await launch_session(rt, ready=True)
        ex.last.emit(MessageChunk(text="partial prior response"))
        await wait_until(lambda: s.ctx.message == ["partial prior response"])
        await rt.prompt(ref.id, "next prompt", dispatch_only=True)
        assert history(rt, s) == [
            ("agent_message", "partial prior response"),
            ("user_message", "next prompt"),
        ]
        assert s.ctx.message == []
        ex.last.emit(MessageChunk(text="fresh", prompt_generation=1))
        ex.last.complete(1)
        await wait_until(lambda: len(history(rt, s)) == 3)
        assert history(rt, s)[-1] == ("agent_message", "fresh")
        await rt.stop(ref.id, "done")


async def test_s79_attachment_materialization(time_scale: float) -> None:
    """s79. Attachments are materialized through the carrier once the ACP session exists
    and before the prompt request; the request carries the materialized descriptors (the
    name the carrier chose, no inline data, delivery mode ``prompt``, an explicit ``path``
    mode kept), never the originals."""

    def materialize(att: Attachment) -> Attachment:
        return msgspec.structs.replace(att, name=f"stored-{att.attachment_id}", data=b"")

    ex = memory_agent(lambda t: t.handlers.update(materialize=materialize))
    image = Attachment(name="a.png", mime_type="image/png", data=b"\x89PNG", attachment_id="att-1")
    doc = Attachment(name="doc.txt", path="/w/doc.txt", attachment_id="att-2", delivery_mode="path")
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        result = await rt.prompt(ref.id, "look", attachments=(image, doc), dispatch_only=True)
        assert result.stop_reason == "dispatched"
        methods = [m for m, _ in ex.last.calls]
        assert methods.index("session/new") < methods.index("materialize")
        assert methods.index("materialize") < methods.index("prompt")
        assert [a.attachment_id for (a,) in sent(ex.last, "materialize")] == ["att-1", "att-2"]
        ((text, attachments, generation),) = sent(ex.last, "prompt")
        assert (text, generation) == ("look", 1)
        assert [(a.name, a.data, a.delivery_mode) for a in attachments] == [
            ("stored-att-1", b"", "prompt"),
            ("stored-att-2", b"", "path"),
        ]
        assert s.acp_session_id
        await rt.stop(ref.id, "done")


async def test_s80_materialization_errors(time_scale: float) -> None:
    """s80. An attachment that cannot be materialized (storage unavailable) or an ACP
    session that is not ready fails the prompt with AttachmentError naming the attachment
    id, and no prompt request is sent. The generation ends ``undelivered`` and the execution
    is READY again (kandev left it RUNNING, H7)."""

    def no_storage(att: Attachment) -> Attachment:
        raise LocalProtocolError("attachment storage is unavailable")

    att = Attachment(name="a.png", data=b"x", attachment_id="att-1")
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt, ready=True)
        ex.last.handlers["materialize"] = no_storage
        with pytest.raises(AttachmentError) as info:
            await rt.prompt(ref.id, "look", attachments=(att,))
        assert str(info.value) == (
            'materialize attachment "att-1": attachment storage is unavailable'
        )
        assert info.value.generation == 1
        assert sent(ex.last, "prompt") == []
        assert s.generations[1].leaf == "undelivered"
        assert rt.get_execution(ref.id).status == "READY"
        (failed,) = of_type(s, le.PromptFailed)
        assert failed.outcome == "undelivered" and "att-1" in failed.error
        await rt.stop(ref.id, "done")

    no_session = {"session/new": lambda cwd: SessionResult(session_id="")}
    ex = memory_agent(lambda t: t.handlers.update(no_session))
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref = await rt.launch(spec())
        with pytest.raises(AttachmentError) as info:
            await rt.prompt(ref.id, "look", attachments=(att,))
        assert str(info.value) == (
            'attachment "att-1" cannot be delivered: ACP session is not ready'
        )
        assert sent(ex.last, "prompt") == [] and sent(ex.last, "materialize") == []
        await rt.stop(ref.id, "done")


# ------------------------------------------------------ completion, handoff, disconnect --


async def test_s82_stale_startup_error_is_rejected(time_scale: float) -> None:
    """s82. kandev drops a completion stamped with a stale startup generation and a
    wildcard (generation 0) waiter then takes the real ``end_turn``. Mapping: our executions
    have one carrier per session start, so "the stale startup" is the startup itself: a
    generation-0 error that arrives before ACP initialization finished belongs to no prompt
    (R10) and is dropped; the execution becomes READY, and a later generation-0 ``complete``
    is taken by the waiting prompt as ``end_turn``."""
    gate = anyio.Event()

    async def new_session(cwd: str) -> SessionResult:
        await gate.wait()
        return SessionResult(session_id="mem-session-1")

    ex = memory_agent(lambda t: t.handlers.update({"session/new": new_session}))
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        await wait_until(lambda: sent(ex.last, "session/new") != [])
        ex.last.emit(ErrorEvent(error="stale startup failure"))
        await settle()
        assert s.execution.status == "STARTING"
        gate.set()
        await wait_until(lambda: s.execution.status == "READY")
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "hi")
            ex.last.emit(Complete(stop_reason="end_turn"))  # generation 0: the wildcard
            await p.wait()
        assert p.error is None
        assert p.prompt_result.stop_reason == "end_turn"
        assert rt.get_execution(ref.id).status == "READY"
        assert not of_type(s, le.AgentFailed) and not of_type(s, ErrorEvent)
        await rt.stop(ref.id, "done")


async def test_s83_disconnect_carries_the_owning_generation(time_scale: float) -> None:
    """s83. kandev stamps a stream disconnect with the startup generation of the stream it
    came from. Mapping: the disconnect is claimed, under the lifecycle lock, by the generation
    that owns the stream at that moment, and everything it produces names that generation:
    the waiter's error, ``agentctl.error`` and the trace record."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "hi")
            ex.last.disconnect("boom")
            await p.wait()
        assert isinstance(p.error, AgentReportedError)
        assert p.error.generation == 1
        assert str(p.error) == "agent error: agent stream disconnected: boom"
        (err,) = of_type(s, le.AgentctlError)
        assert err.prompt_generation == 1
        assert ("stream_lost", "dispatched", "disconnected") in steps(s, 1)
        assert [
            (r.generation, r.target)
            for r in rt.trace.for_execution(ref.id)
            if r.chart == "prompt_generation" and r.event == "stream_lost"
        ] == [(1, "disconnected")]
        await rt.stop(ref.id, "done")


async def test_s85_error_completion_result(time_scale: float) -> None:
    """s85. An error completion "prompt abandoned after cancel" is both AgentReportedError
    and CancelEscalated for its waiter, and, like every error completion, it fails the
    execution with ``agent.failed`` (kandev handleCompleteEventMarkState); a plain error
    completion is only AgentReportedError, ``agent error: <msg>``."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "one")
            ex.last.fail(1, "prompt abandoned after cancel")
            await p.wait()
        assert isinstance(p.error, CancelEscalatedAgentError)
        assert isinstance(p.error, AgentReportedError) and isinstance(p.error, CancelEscalated)
        assert str(p.error) == (
            "agent error: prompt abandoned after cancel: "
            "cancel escalated: agent did not acknowledge within timeout"
        )
        assert s.generations[1].leaf == "failed"
        assert rt.get_execution(ref.id).status == "FAILED"
        (failed,) = of_type(s, le.AgentFailed)
        assert failed.error == "prompt abandoned after cancel" and failed.prompt_generation == 1
        assert not of_type(s, le.AgentReady)[1:]  # only the boot's, none for this turn
        await rt.stop(ref.id, "done")

        ref, s = await launch_session(rt)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "two")
            ex.last.fail(1, "plain failure")
            await p.wait()
        assert isinstance(p.error, AgentReportedError)
        assert not isinstance(p.error, CancelEscalated)
        assert str(p.error) == "agent error: plain failure"
        assert rt.get_execution(ref.id).status == "FAILED"
        await rt.stop(ref.id, "done")


async def test_s86_plain_complete(time_scale: float) -> None:
    """s86. A generation-0 ``complete`` with no data ends the waiting turn with
    ``end_turn`` (no error); an empty stop reason also reads ``end_turn``."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        for g, event in ((1, Complete()), (2, Complete(stop_reason=""))):
            async with anyio.create_task_group() as tg:
                p = start(tg, rt.prompt, ref.id, "hi")
                await wait_until(lambda g=g: live(s, g))  # type: ignore[misc]
                ex.last.emit(event)
                await p.wait()
            assert p.error is None
            assert p.prompt_result.stop_reason == "end_turn"
            assert p.prompt_result.generation == g
            assert of_type(s, le.AgentReady)[-1].stop_reason == "end_turn"
        await rt.stop(ref.id, "done")


async def test_s86_plain_complete_ends_a_wakeup_turn(time_scale: float) -> None:
    """s86 (kandev ``handleCompleteEvent``'s generation-0 path, R26/R27). With no prompt
    waiting, a generation-0 ``complete`` ends the wakeup turn: content while READY made it
    RUNNING, the complete makes it READY with ``agent.ready``; an empty wakeup turn first shows
    ``agent.running``, then ``agent.ready``; a generation-0 error with no live generation fails
    the execution."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt, ready=True)
        ex.last.emit(MessageChunk(text="woke up"))
        await wait_until(lambda: s.execution.status == "RUNNING")
        count = len(published(s))
        ex.last.emit(Complete())
        await wait_until(lambda: s.execution.status == "READY")
        assert [type(e).__name__ for e in published(s)[count:]] == ["Complete", "AgentReady"]
        assert of_type(s, le.AgentReady)[-1].stop_reason == "end_turn"

        count = len(published(s))
        ex.last.emit(Complete())  # an empty wakeup turn (R27)
        await wait_until(lambda: len(published(s)) == count + 3)
        assert [type(e).__name__ for e in published(s)[count:]] == [
            "Complete",
            "AgentRunning",
            "AgentReady",
        ]
        assert s.execution.status == "READY"

        ex.last.emit(ErrorEvent(error="wakeup failed"))
        await wait_until(lambda: s.execution.status == "FAILED")
        assert of_type(s, le.AgentFailed)[-1].error == "wakeup failed"
        await rt.stop(ref.id, "done")


async def test_s88_duplicate_error_completion(time_scale: float) -> None:
    """s88. A second error completion for an already-failed generation cannot replace the
    first provider error: the execution keeps error A and nothing more is published."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "hi")
            ex.last.fail(1, "provider error A")
            await p.wait()
        assert str(p.error) == "agent error: provider error A"
        count = len(published(s))
        ex.last.fail(1, "provider error B")
        await settle()
        assert rt.get_execution(ref.id).error_message == "provider error A"
        assert len(published(s)) == count
        assert steps(s, 1)[-1] == ("completion_received", "ended", "ended")
        assert [e.error for e in of_type(s, le.PromptFailed)] == ["provider error A"]
        assert len(of_type(s, le.AgentFailed)) == 1
        await rt.stop(ref.id, "done")


async def test_s89_delayed_complete_after_a_replacement(
    time_scale: float, autojump_clock: object
) -> None:
    """s89. Generations 1 and 2 have begun (1's caller gave up, 2 is running and has
    streamed "replacement output"); a delayed ``complete(1)`` changes nothing: the status
    stays RUNNING, the second waiter is not released, its buffer is untouched and no
    ``agent.ready`` is published. (Giving up cancels turn 1 at the agent; this agent ignores
    the cancel, so generation 2 waits its bounded 10 s for turn 1 to end, then begins.)"""
    ex = memory_agent(cancel_completes=False)
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        async with anyio.create_task_group() as tg:
            caller = anyio.CancelScope()

            async def abandoned() -> None:
                with caller:
                    await rt.prompt(ref.id, "one")

            tg.start_soon(abandoned)
            await wait_until(lambda: live(s, 1))
            caller.cancel()  # the caller gives up: turn 1 is cancelled at the agent
        await wait_until(lambda: s.generations[1].leaf in ("abandoned", "escalating"))
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "two", generation=2)
            ex.last.emit(MessageChunk(text="replacement output", prompt_generation=2))
            await settle()
            ready_before = len(of_type(s, le.AgentReady))
            ex.last.complete(1)
            await settle()
            assert rt.get_execution(ref.id).status == "RUNNING"
            assert not p.done.is_set() and live(s, 2)
            assert s.ctx.message == ["replacement output"]
            assert len(of_type(s, le.AgentReady)) == ready_before
            assert steps(s, 1)[-1] == ("completion_received", "superseded", "superseded")
            ex.last.complete(2)
            await p.wait()
        assert p.prompt_result.agent_message == "replacement output"
        await rt.stop(ref.id, "done")


async def test_s91_complete_names_the_turn_it_ended(time_scale: float) -> None:
    """s91. kandev copies the prompt's turn id onto a ``complete`` that carries none.
    Mapping: the turn's identity here is its generation; a generation-0 ``complete`` that the
    owning generation claims is published stamped with that generation, as are
    ``prompt.completed`` and ``agent.ready``."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "hi")
            ex.last.emit(Complete())
            await p.wait()
        (complete,) = of_type(s, Complete)
        assert complete.prompt_generation == 1
        assert of_type(s, le.PromptCompleted)[-1].prompt_generation == 1
        assert of_type(s, le.AgentReady)[-1].prompt_generation == 1
        await rt.stop(ref.id, "done")


async def test_s92_completions_never_block_the_event_pump(time_scale: float) -> None:
    """s92. kandev's capacity-1 channel makes a completion handler drop the signal rather
    than block when it is full. Mapping: there is no channel; a completion is a chart
    transition plus a wakeup that never blocks, so a flood of terminal events with nobody
    waiting is handled at once: the first claims the generation, the others are explicit
    self-transitions, and the events behind them flow."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        await rt.prompt(ref.id, "background", dispatch_only=True)
        for _ in range(200):
            ex.last.complete(1)
            ex.last.fail(1, "late")
        ex.last.emit(AvailableCommands())
        with anyio.fail_after(5):
            await wait_until(lambda: bool(of_type(s, AvailableCommands)))
        assert s.generations[1].leaf == "completed"
        # sending, dispatched; claimed once, then 399 ignored
        assert len(steps(s, 1)) == 2 + 400
        assert steps(s, 1)[2] == ("completion_received", "dispatched", "completed")
        assert len(of_type(s, le.PromptCompleted)) == 1
        assert rt.get_execution(ref.id).status == "READY"
        ex.last.auto_complete = True
        assert (await rt.prompt(ref.id, "next")).generation == 2  # no barrier left behind
        await rt.stop(ref.id, "done")


async def test_s94_error_during_shutdown(time_scale: float) -> None:
    """s94. An error completion handled while the runtime shuts down marks the execution
    STOPPED with ``agent.stopped`` (not FAILED / ``agent.failed``, R32), and the waiter
    still receives the error. Execution A is stopped first; while its stop runs, B's agent
    reports the error."""
    exs = MemoryExecutor()
    async with anyio.create_task_group() as tg:
        async with make_runtime(exs, time_scale=time_scale) as rt:
            await rt.launch(spec())  # A
            b = await rt.launch(spec())
            sb = session_of(rt, b.id)
            p = start(tg, rt.prompt, b.id, "hi")
            await wait_until(lambda: live(sb, 1))
            exs.transports[1].fail(1, "boom")
            # leaving the block shuts the runtime down: A's stop runs first
        await p.wait()
    assert isinstance(p.error, AgentReportedError)
    assert str(p.error) == "agent error: boom"
    assert sb.execution.status == "STOPPED"
    assert ("turn_failed", "active", "stopped") in execution_steps(sb)
    assert [e.reason for e in of_type(sb, le.AgentStopped)] == ["shutdown"]
    assert not of_type(sb, le.AgentFailed)


async def test_s95_process_exit_marks_completion(time_scale: float) -> None:
    """s95. kandev's MarkCompleted is the agent process's exit here: exit 0 of a RUNNING
    execution gives COMPLETED (finished_at, exit code 0, ``agent.completed``); exit 1 gives
    FAILED with the message; an already-FAILED execution keeps its first message; an
    execution that is gone is ExecutionNotFound."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt, ready=True)
        ex.last.emit(MessageChunk(text="wakeup"))  # a wakeup turn: RUNNING
        await wait_until(lambda: s.execution.status == "RUNNING")
        ex.last.disconnect("process exited", exit_code=0)
        await wait_until(lambda: s.execution.status == "COMPLETED")
        snap = rt.get_execution(ref.id)
        assert snap.exit_code == 0 and snap.finished_at is not None
        assert [e.exit_code for e in of_type(s, le.AgentCompleted)] == [0]
        await rt.stop(ref.id, "done")
        with pytest.raises(ExecutionNotFound):
            rt.get_execution(ref.id)

        ref, s = await launch_session(rt, ready=True)
        ex.last.disconnect("process exited", exit_code=1)
        await wait_until(lambda: s.execution.status == "FAILED")
        snap = rt.get_execution(ref.id)
        assert snap.exit_code == 1
        assert snap.error_message == "agent process exited with code 1"
        assert [e.phase for e in of_type(s, le.AgentFailed)] == ["process"]
        await rt.stop(ref.id, "done")

        ref, s = await launch_session(rt)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "hi")
            ex.last.fail(1, "first failure")
            await p.wait()
        ex.last.disconnect("process exited", exit_code=1)
        await wait_until(lambda: rt.get_execution(ref.id).exit_code == 1)
        snap = rt.get_execution(ref.id)
        assert snap.status == "FAILED" and snap.error_message == "first failure"
        assert len(of_type(s, le.AgentFailed)) == 1
        await rt.stop(ref.id, "done")


async def test_s95_process_exit_during_shutdown(time_scale: float) -> None:
    """s95. During shutdown a failed exit gives STOPPED with ``agent.stopped`` while a clean
    exit still gives COMPLETED. Execution A is stopped first; while its stop runs, B's agent
    exits 1 and C's exits 0."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        await rt.launch(spec())
        b = session_of(rt, (await rt.launch(spec())).id)
        c = session_of(rt, (await rt.launch(spec())).id)
        await wait_until(lambda: b.execution.status == c.execution.status == "READY")
        ex.transports[1].disconnect("process exited", exit_code=1)
        ex.transports[2].disconnect("process exited", exit_code=0)
    assert ("process_exited", "active", "stopped") in execution_steps(b)
    assert [e.reason for e in of_type(b, le.AgentStopped)] == ["shutdown"]
    assert not of_type(b, le.AgentFailed)
    assert ("process_exited", "active", "completed") in execution_steps(c)
    assert [e.exit_code for e in of_type(c, le.AgentCompleted)] == [0]


async def test_s97_handoff_releases_the_first_waiter_only(time_scale: float) -> None:
    """s97. With prompt 1 in flight and prompt 2 queued behind it: a ``foreground_idle``
    handoff for generation 1 releases prompt 1 (no error) and prompt 2 reaches the agent; a
    late ``complete(1)`` does not release prompt 2, which keeps generation 2; ``complete(2)``
    does. The text streamed across the boundary is exactly "parent answer"."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        agent = ex.last
        async with anyio.create_task_group() as tg:
            p1 = await prompting(tg, rt, ref.id, "parent")
            p2 = start(tg, rt.prompt, ref.id, "queued")
            await settle()
            assert len(sent(agent, "prompt")) == 1  # prompt 2 waits for prompt 1
            agent.emit(MessageChunk(text="parent ", prompt_generation=1))
            agent.emit(MessageChunk(text="answer", prompt_generation=1))
            agent.emit(ForegroundIdle(prompt_generation=1, prompt_handoff=True))
            await p1.wait()
            assert p1.error is None
            assert p1.prompt_result.stop_reason == "foreground_idle"
            assert p1.prompt_result.agent_message == "parent answer"
            await wait_until(lambda: live(s, 2))
            assert [args[2] for args in sent(agent, "prompt")] == [1, 2]
            agent.complete(1)
            await settle()
            assert not p2.done.is_set() and live(s, 2)
            agent.complete(2)
            await p2.wait()
        assert p2.prompt_result.stop_reason == "end_turn"
        assert p2.prompt_result.agent_message == ""
        assert "".join(e.text for e in of_type(s, MessageChunk)) == "parent answer"
        await rt.stop(ref.id, "done")


async def test_s98_unmarked_foreground_idle(time_scale: float) -> None:
    """s98. A ``foreground_idle`` without the ``prompt_handoff`` marker is only forwarded
    (keeping its generation, 42 here) and releases no waiter."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "hi")
            ex.last.emit(ForegroundIdle(prompt_generation=42))
            ex.last.emit(ForegroundIdle(prompt_generation=1))
            await wait_until(lambda: len(of_type(s, ForegroundIdle)) == 2)
            assert [e.prompt_generation for e in of_type(s, ForegroundIdle)] == [42, 1]
            assert not p.done.is_set() and live(s, 1)
            ex.last.complete(1)
            await p.wait()
        assert p.prompt_result.stop_reason == "end_turn"
        await rt.stop(ref.id, "done")


async def test_s100_disconnect_is_not_claimed_by_another_generation(time_scale: float) -> None:
    """s100. kandev ignores a disconnect snapshot for a generation it does not own (the
    replacement is not failed). Mapping: a stream loss is claimed under the lifecycle lock by
    the generation current at that moment, so it can never reach another one: the
    superseded generation 1 ignores it (no transition), and a disconnect of another
    execution's stream does not fail this one or release its waiter."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref = await rt.launch(spec())
        other = await rt.launch(spec())
        s = session_of(rt, ref.id)
        agent = ex.transports[0]
        async with anyio.create_task_group() as tg:
            p1 = await prompting(tg, rt, ref.id, "one")
            agent.emit(ForegroundIdle(prompt_generation=1, prompt_handoff=True))
            await p1.wait()
            p2 = await prompting(tg, rt, ref.id, "two", generation=2)
            ex.transports[1].disconnect("other stream gone")
            await wait_until(lambda: rt.get_execution(other.id).status == "FAILED")
            await settle()
            assert rt.get_execution(ref.id).status == "RUNNING"
            assert not p2.done.is_set() and live(s, 2)
            agent.disconnect("peer disconnected")
            await p2.wait()
        assert all(event != "stream_lost" for event, _, _ in steps(s, 1))
        assert steps(s, 1)[-1] == ("superseded_by_successor", "live", "superseded")
        assert isinstance(p2.error, AgentReportedError) and p2.error.generation == 2
        assert [e.prompt_generation for e in of_type(s, le.AgentctlError)] == [2]
        await rt.stop(ref.id, "done")


async def test_s101_disconnect_for_the_owned_generation(time_scale: float) -> None:
    """s101. A disconnect of the owning generation's stream marks the execution FAILED and
    publishes ``agentctl.error`` "agent stream disconnected: …" (no ``agent.failed``); the
    waiter is released with that error."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "hi")
            ex.last.disconnect("peer disconnected")
            await p.wait()
        assert str(p.error) == "agent error: agent stream disconnected: peer disconnected"
        snap = rt.get_execution(ref.id)
        assert snap.status == "FAILED"
        assert snap.error_message == "agent stream disconnected: peer disconnected"
        assert [e.error for e in of_type(s, le.AgentctlError)] == [
            "agent stream disconnected: peer disconnected"
        ]
        assert not of_type(s, le.AgentFailed)
        await rt.stop(ref.id, "done")


async def test_s103_disconnect_flushes_partial_text_once(tmp_path: Path) -> None:
    """s103. Partial text ("partial response") is persisted once when the stream
    disconnects; a later reset (the next prompt's) and the stop find nothing more, so the
    history holds exactly one agent_message and one message was shown."""
    ex = MemoryExecutor()
    async with history_runtime(ex, tmp_path) as rt:
        ref, s = await launch_session(rt)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "hi")
            ex.last.emit(MessageChunk(text="partial response", prompt_generation=1))
            ex.last.disconnect("peer disconnected")
            await p.wait()
        assert isinstance(p.error, AgentReportedError)
        assert history(rt, s) == [("user_message", "hi"), ("agent_message", "partial response")]
        with pytest.raises(PromptDispatchError):  # the next reset: the agent is gone
            await s.prompt("again", validate_status=False)
        await rt.stop(ref.id, "done")
        entries = history(rt, s)
        assert [text for kind, text in entries if kind == "agent_message"] == ["partial response"]
        assert [e.text for e in of_type(s, MessageChunk)] == ["partial response"]


async def test_history_is_written_only_with_both_a_store_and_the_profiles_consent(
    tmp_path: Path,
) -> None:
    """The session history is written when the Runtime keeps one (``history_root``) and the
    profile asks for history context; a profile that asks with no store, or a store with a
    profile that does not ask, writes nothing and prompts as usual."""
    plain = AgentProfile(id="mem", command=("unused",))
    for profile, root in ((HISTORY_PROFILE, None), (plain, history_root(tmp_path))):
        ex = memory_agent(auto_complete=True)
        async with make_runtime(ex, profiles=(profile,), history_root=root) as rt:
            ref = await rt.launch(spec())
            result = await rt.prompt(ref.id, "hello")
            assert result.stop_reason == "end_turn"
            if rt.history is not None:
                assert history(rt, session_of(rt, ref.id)) == []
            await rt.stop(ref.id, "done")


async def test_steer_text_is_written_to_the_history(tmp_path: Path) -> None:
    """A steer is the user's message too: it is appended to the session history after the
    prompt it folds into, so a resumed session's context holds it."""
    ex = MemoryExecutor()
    async with history_runtime(ex, tmp_path) as rt:
        ref, s = await launch_session(rt)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "long task")
            await rt.steer(ref.id, "also this")
            ex.last.emit(MessageChunk(text="both done", prompt_generation=1))
            ex.last.complete(1)
            await p.wait()
        assert history(rt, s)[:2] == [("user_message", "long task"), ("user_message", "also this")]
        await rt.stop(ref.id, "done")


async def test_a_history_that_cannot_be_written_never_fails_a_turn(tmp_path: Path) -> None:
    """kandev ``preparePrompt``: a failed history append is only logged. A history root that
    cannot be created (a file stands in its way) loses the entries, never the turn: the
    prompt, its reply, a steer and the next prompt all go through."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    ex = MemoryExecutor()
    async with make_runtime(ex, profiles=(HISTORY_PROFILE,), history_root=blocker / "h") as rt:
        ref, _ = await launch_session(rt)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "first")
            steered = await rt.steer(ref.id, "and more")
            assert steered.stop_reason == "dispatched"
            ex.last.emit(MessageChunk(text="done", prompt_generation=1))
            ex.last.complete(1)
            await p.wait()
        assert p.error is None and p.prompt_result.agent_message == "done"
        ex.last.auto_complete = True
        assert (await rt.prompt(ref.id, "second")).generation == 2
        assert not (blocker / "h").exists()
        assert rt.get_execution(ref.id).status == "READY"
        await rt.stop(ref.id, "done")


async def test_a_tool_result_is_named_after_one_of_the_latest_1024_tool_calls(
    tmp_path: Path,
) -> None:
    """The history names a tool result after its call (kandev's entries carry ``tool_name``);
    the names of the latest 1024 calls are kept (a flood of calls that never end stays
    bounded): the oldest of those 1024 still names its result, and once one more call came
    it is forgotten (its result is written unnamed)."""
    ex = MemoryExecutor()
    async with history_runtime(ex, tmp_path) as rt:
        ref, s = await launch_session(rt, ready=True)

        def results() -> list[tuple[str, str]]:
            return [(e.tool_call_id, e.name) for e in tool_results(rt, s)]

        for i in range(1024):
            ex.last.emit(ToolCall(tool_call_id=f"t{i}", tool_name=f"tool {i}"))
        ex.last.emit(ToolUpdate(tool_call_id="t0", tool_status="completed"))
        await wait_until(lambda: len(results()) == 1, limit=60)
        ex.last.emit(ToolCall(tool_call_id="t1024", tool_name="tool 1024"))
        ex.last.emit(ToolUpdate(tool_call_id="t0", tool_status="completed"))
        ex.last.emit(ToolUpdate(tool_call_id="t1", tool_status="completed"))
        await wait_until(lambda: len(results()) == 3, limit=60)
        assert results() == [("t0", "tool 0"), ("t0", ""), ("t1", "tool 1")]
        await rt.stop(ref.id, "done")


async def test_only_a_tools_end_is_written_with_its_output(tmp_path: Path) -> None:
    """A tool's progress updates write nothing; its terminal update writes one tool result,
    whose output is the raw output when the agent gave one, else the text of its content
    blocks, else its status (kandev ``handleToolUpdateEvent``)."""
    ex = MemoryExecutor()
    async with history_runtime(ex, tmp_path) as rt:
        ref, s = await launch_session(rt, ready=True)

        def results() -> list[tuple[str, str]]:
            return [(e.tool_call_id, e.output) for e in tool_results(rt, s)]

        texts = [{"type": "text", "text": "line 1\n"}, {"type": "text", "text": "line 2"}]
        for tool in ("raw", "texts", "bare"):
            ex.last.emit(ToolCall(tool_call_id=tool, tool_name="bash"))
            ex.last.emit(
                ToolUpdate(tool_call_id=tool, tool_status="in_progress", tool_call_contents=texts)
            )
        ex.last.emit(ToolUpdate(tool_call_id="raw", tool_status="completed", raw_output="ok"))
        ex.last.emit(
            ToolUpdate(tool_call_id="texts", tool_status="completed", tool_call_contents=texts)
        )
        ex.last.emit(ToolUpdate(tool_call_id="bare", tool_status="failed"))
        await wait_until(lambda: len(results()) == 3, limit=60)
        assert results() == [("raw", "ok"), ("texts", "line 1\nline 2"), ("bare", "failed")]
        await rt.stop(ref.id, "done")


async def test_a_wakeup_turn_after_a_prompt_keeps_its_text(tmp_path: Path) -> None:
    """Text of no turn (generation 0: a wakeup turn the agent starts while READY) is never a
    replaced turn's late text, even once prompts have run: it is the wakeup's reply, kept and
    written to the history when the wakeup ends (kandev ``handleCompleteEvent``, R26). A
    prompt leaving READY ends the watch for a wakeup (the Execution chart's
    ``unwatch_wakeup``): its turn's content fires no ``wakeup_content_arrived``; READY again
    re-arms it."""
    ex = MemoryExecutor()
    async with history_runtime(ex, tmp_path) as rt:
        ref, s = await launch_session(rt)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "first")
            ex.last.emit(MessageChunk(text="answer", prompt_generation=1))
            ex.last.complete(1)
            await p.wait()
        assert s.execution.status == "READY"
        assert "wakeup_content_arrived" not in [e for e, _, _ in execution_steps(s)]
        ex.last.emit(MessageChunk(text="woke up"))
        await wait_until(lambda: s.execution.status == "RUNNING")
        assert ("wakeup_content_arrived", "ready", "running") in execution_steps(s)
        assert s.ctx.message == ["woke up"]
        ex.last.emit(Complete())
        await wait_until(lambda: s.execution.status == "READY")
        # written off the event loop: it lands soon after
        await wait_until(lambda: history(rt, s)[-1] == ("agent_message", "woke up"))
        assert history(rt, s) == [
            ("user_message", "first"),
            ("agent_message", "answer"),
            ("agent_message", "woke up"),
        ]
        await rt.stop(ref.id, "done")


async def test_s104_reset_wins_the_disconnect_race(tmp_path: Path) -> None:
    """s104. When the next prompt's reset drains the partial text before the disconnect is
    handled, the text is still persisted exactly once."""
    ex = MemoryExecutor()
    async with history_runtime(ex, tmp_path) as rt:
        ref, s = await launch_session(rt, ready=True)
        ex.last.emit(MessageChunk(text="partial"))
        await wait_until(lambda: s.ctx.message == ["partial"])
        await rt.prompt(ref.id, "next", dispatch_only=True)
        ex.last.disconnect("peer disconnected")
        await wait_until(lambda: s.execution.status == "FAILED")
        await rt.stop(ref.id, "done")
        assert history(rt, s) == [("agent_message", "partial"), ("user_message", "next")]


class _BlockingHistory(HistoryStore):
    """Holds the first assistant append until released (persistence blocked mid-reset)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.entered = threading.Event()
        self.release = threading.Event()

    def append_assistant(self, session_id: str, text: str) -> Any:
        if not self.entered.is_set():
            self.entered.set()
            self.release.wait(timeout=10)
        return super().append_assistant(session_id, text)


async def test_s104_chunk_during_blocked_persistence_stays_with_the_new_turn(
    tmp_path: Path,
) -> None:
    """s104. While the reset's persistence of the old partial is blocked, a chunk that
    arrives after the detach stays in the new turn's buffer: the history persists only the
    old partial, and the chunk is the new turn's text."""
    ex = MemoryExecutor()
    async with history_runtime(ex, tmp_path) as rt:
        store = _BlockingHistory(history_root(tmp_path))
        rt.history = store
        ref, s = await launch_session(rt, ready=True)
        ex.last.emit(MessageChunk(text="old partial"))
        await wait_until(lambda: s.ctx.message == ["old partial"])
        async with anyio.create_task_group() as tg:
            p = start(tg, rt.prompt, ref.id, "next")
            try:
                await wait_until(store.entered.is_set)
                ex.last.emit(MessageChunk(text="new chunk", prompt_generation=1))
                await wait_until(lambda: s.ctx.message == ["new chunk"])
                assert history(rt, s) == []  # still blocked
            finally:
                store.release.set()
            await wait_until(lambda: live(s, 1))
            ex.last.complete(1)
            await p.wait()
        assert p.prompt_result.agent_message == "new chunk"
        await wait_until(lambda: len(history(rt, s)) == 3)
        assert history(rt, s) == [
            ("agent_message", "old partial"),
            ("user_message", "next"),
            ("agent_message", "new chunk"),
        ]
        await rt.stop(ref.id, "done")


async def test_text_stamped_with_no_superseded_turn_is_kept(time_scale: float) -> None:
    """Only the late text of a turn a successor superseded is left out of the reply: text a
    confused carrier stamps with a generation no prompt reached yet, or a negative one, is
    kept (nothing the agent says is dropped on a guess)."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt, ready=True)
        ex.last.emit(MessageChunk(text="ahead", prompt_generation=7))
        ex.last.emit(MessageChunk(text=" below", prompt_generation=-1))
        await wait_until(lambda: s.ctx.message == ["ahead", " below"])
        await rt.stop(ref.id, "done")


async def test_a_turn_stamp_decoded_from_the_wire_is_compared_by_value() -> None:
    """A carrier that decodes each event's generation stamp from the wire (agentctl's) gives
    a number equal to the turn's but not the same object; past 256 prompts Python no longer
    shares small ints, and the current turn's text must still be its reply."""
    ex = MemoryExecutor()
    async with make_runtime(ex) as rt:
        ref = await rt.launch(spec())
        await rt.wait_ready(ref.id)
        agent = ex.last

        def decoding_agent(text: str, atts: tuple[Attachment, ...], g: int) -> None:
            stamp = msgspec.json.decode(msgspec.json.encode(g))  # a new int, as decoded
            agent.emit(MessageChunk(text=f"reply {g}", prompt_generation=stamp))
            agent.complete(stamp)

        agent.handlers["prompt"] = decoding_agent
        for g in range(1, 301):
            result = await rt.prompt(ref.id, "next")
            assert (result.generation, result.agent_message) == (g, f"reply {g}")
        await rt.stop(ref.id, "done")
