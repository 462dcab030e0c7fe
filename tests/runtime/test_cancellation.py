"""Cancellation and waits: a cancel never overtakes the prompt it cancels, a caller that leaves
cancels its turn, ``timeout=`` bounds a prompt, the snapshot never says READY over a live turn,
and ``wait_ready`` waits for READY or says why not. Each test fails on the first runtime."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from acpfsm.adapters.errors import AgentRequestError, StreamNotConnected
from acpfsm.adapters.events import MessageChunk
from acpfsm.adapters.memory import MemoryTransport
from acpfsm.adapters.transport import Attachment, CancelResult, SessionResult
from acpfsm.runtime import (
    CancelEscalated,
    NotReadyForPrompts,
    PromptTimeout,
    Runtime,
    SessionInitError,
)
from acpfsm.runtime import events as le
from acpfsm.runtime.session import ExecutionSession
from acpfsm.statecharts.flows import CANCEL, Do

from .memory_runtime import (
    MemoryExecutor,
    launch_session,
    make_runtime,
    memory_agent,
    raiser,
    session_of,
    settle,
    spec,
    wait_until,
)
from .prompt_helpers import leaving, live, of_type, prompting, sent, start, steps

pytestmark = pytest.mark.both_backends


def _gated(transport: MemoryTransport, gate: anyio.Event) -> list[str]:
    """The agent answers ``session/prompt`` only once ``gate`` is set; the order in which the
    prompt and the cancel reached the agent is recorded."""
    order: list[str] = []

    async def prompt(text: str, atts: tuple[Attachment, ...], g: int) -> None:
        order.append(f"prompt {g}")
        await gate.wait()
        transport.running.append(g)

    def cancel() -> CancelResult:
        order.append("cancel")
        for g in list(transport.running):
            transport.complete(g, "cancelled")
        return CancelResult(acknowledged=True)

    transport.handlers["prompt"] = prompt
    transport.handlers["cancel"] = cancel
    return order


async def leave_prompt(rt: Runtime, s: ExecutionSession, text: str) -> None:
    """A caller prompts, waits until its turn (generation 1) is live, and leaves (its cancel
    scope is cancelled): the prompt is abandoned."""
    async with anyio.create_task_group() as tg:
        scope = anyio.CancelScope()

        async def leaving() -> None:
            with scope:
                await rt.prompt(s.ctx.id, text)

        tg.start_soon(leaving)
        await wait_until(lambda: live(s, 1))
        scope.cancel()


@pytest.mark.parametrize("then_fails", [False, True], ids=["delivered", "then_fails"])
async def test_a_cancel_before_the_prompt_is_sent_withdraws_it(
    time_scale: float, then_fails: bool
) -> None:
    """A cancel while the prompt is admitted but not yet sent (here: its attachment is being
    materialized) withdraws it: nothing reaches the agent, no session/cancel either, and the
    caller gets a ``cancelled`` result; the execution is READY again. When the attachment
    then fails, the withdrawal is still the result, not the attachment error."""
    gate = anyio.Event()
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt, ready=True)

        async def slow_materialize(att: Attachment) -> Attachment:
            await gate.wait()
            if then_fails:
                raise StreamNotConnected()
            return att

        ex.last.handlers["materialize"] = slow_materialize
        att = Attachment(name="a.txt", data=b"x", attachment_id="a1")
        async with anyio.create_task_group() as tg:
            p = start(tg, rt.prompt, ref.id, "work", attachments=(att,))
            await wait_until(lambda: s.current is not None and s.current.leaf == "admitted")
            await rt.cancel(ref.id)
            gate.set()
            await p.wait()
        assert p.error is None and p.prompt_result.stop_reason == "cancelled"
        assert sent(ex.last, "prompt") == [] and sent(ex.last, "cancel") == []
        assert s.generations[1].leaf == "withdrawn"
        assert rt.get_execution(ref.id).status == "READY"
        await rt.stop(ref.id, "done")


async def test_a_cancel_while_the_prompt_is_in_flight_goes_out_after_it(
    time_scale: float,
) -> None:
    """A cancel right after the prompt request was written, before the agent answered it,
    waits for that answer: session/cancel never overtakes the session/prompt it cancels, so
    an agent that honours cancel ends the turn ``cancelled`` (no escalation)."""
    gate = anyio.Event()
    ex = MemoryExecutor()
    # the cancel's wait for the prompt's answer is bounded (10 s), but not this test's subject:
    # scaled, it was 20 ms of real time under asyncio, which a slow scheduler spent before the
    # check below, and the cancel went out
    whole = {"cancel_wait": 10.0}
    async with make_runtime(ex, time_scale=time_scale, timeouts=whole) as rt:
        ref, _ = await launch_session(rt, ready=True)
        order = _gated(ex.last, gate)
        async with anyio.create_task_group() as tg:
            p = start(tg, rt.prompt, ref.id, "work")
            await wait_until(lambda: order == ["prompt 1"])
            c = start(tg, rt.cancel, ref.id)
            await settle()
            assert order == ["prompt 1"]  # the cancel waits for the prompt's answer
            gate.set()
            await c.wait()
            await p.wait()
        assert order == ["prompt 1", "cancel"]
        assert c.error is None
        assert p.error is None and p.prompt_result.stop_reason == "cancelled"
        assert rt.get_execution(ref.id).status == "READY"
        await rt.stop(ref.id, "done")


async def test_a_caller_that_leaves_cancels_its_turn_and_the_next_prompt_is_clean(
    time_scale: float,
) -> None:
    """A cancel scope around ``prompt`` abandons the wait *and* the turn: session/cancel goes
    out, the turn's own late output is claimed by it, and the next prompt's result holds only
    its own reply."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        agent = ex.last
        async with anyio.create_task_group() as tg:
            scope = leaving(tg, rt.prompt, ref.id, "first")
            await wait_until(lambda: live(s, 1))
            agent.emit(MessageChunk(text="first's words", prompt_generation=1))
            await settle()
            scope.cancel()
        await wait_until(lambda: s.generations[1].leaf == "completed")  # cancelled at the agent
        assert sent(agent, "cancel") == [()]
        agent.auto_complete = True
        agent.reply = ("second's words",)
        result = await rt.prompt(ref.id, "second")
        assert result.agent_message == "second's words"
        assert rt.get_execution(ref.id).status == "READY"
        await rt.stop(ref.id, "done")


async def test_a_failed_cancel_of_an_abandoned_turn_leaves_the_execution_usable(
    time_scale: float,
) -> None:
    """The cancel of an abandoned turn fails at the agent (its session/cancel answers an
    error): nobody is waiting to be told, so it is logged, and the execution is not harmed:
    not crashed, and the next prompt runs."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        agent = ex.last

        def refuse(*args: object) -> None:
            raise AgentRequestError(-32603, "cancel failed", method="session/cancel")

        agent.handlers["cancel"] = refuse
        await leave_prompt(rt, s, "first")
        await wait_until(lambda: sent(agent, "cancel") == [()])
        await settle()
        assert s.ctx.crash is None
        agent.complete(1)
        agent.auto_complete = True
        result = await rt.prompt(ref.id, "second")
        assert result.generation == 2
        assert rt.get_execution(ref.id).status == "READY"
        await rt.stop(ref.id, "done")


async def test_a_caller_cancelled_before_it_prompts_admits_no_turn(time_scale: float) -> None:
    """A caller whose scope is already cancelled when it prompts a READY execution (the
    admission gate open, the prompt lock free: the path takes neither with a scheduler pass)
    is still refused at once: no generation admitted, nothing sent, and the next prompt is
    generation 1."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt, ready=True)
        agent = ex.last
        with anyio.CancelScope() as scope:
            scope.cancel()
            await s.prompts.prompt("never", validate_status=True)
        assert scope.cancelled_caught
        assert s.current is None and sent(agent, "prompt") == []
        agent.auto_complete = True
        assert (await rt.prompt(ref.id, "next")).generation == 1
        await rt.stop(ref.id, "done")


async def test_a_caller_cancelled_before_it_cancels_or_stops_changes_nothing(
    time_scale: float,
) -> None:
    """A caller whose scope is already cancelled when it calls ``cancel`` or ``stop`` (the
    lifecycle lock free: taking it checks no cancellation) is refused at once: the turn goes
    on (no ``session/cancel`` sent, its chart unmoved) and the execution is not stopped."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt, ready=True)
        agent = ex.last
        async with anyio.create_task_group() as tg:
            p = start(tg, rt.prompt, ref.id, "work")
            await wait_until(lambda: live(s, 1))
            for call in (lambda: rt.cancel(ref.id), lambda: rt.stop(ref.id, "never")):
                with anyio.CancelScope() as scope:
                    scope.cancel()
                    await call()
                assert scope.cancelled_caught
            await settle()
            assert sent(agent, "cancel") == []
            assert s.current is not None and s.current.machine.is_in("awaited")
            assert rt.get_execution(ref.id).status == "RUNNING"
            agent.complete(1)
            await p.wait()
        assert p.error is None and p.prompt_result.generation == 1
        await rt.stop(ref.id, "done")


async def test_a_stop_whose_caller_leaves_during_the_graceful_stop_still_ends_it(
    time_scale: float,
) -> None:
    """The caller of ``stop`` is cancelled while the agent's graceful stop is under way: the
    execution, STOPPED already, still ends its tasks and is removed (nothing is left running
    that nobody can reach)."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt, ready=True)
        asked = anyio.Event()

        async def stop_agent() -> None:
            asked.set()
            await anyio.sleep_forever()

        ex.last.handlers["stop_agent"] = stop_agent
        async with anyio.create_task_group() as tg:
            scope = leaving(tg, rt.stop, ref.id, "bye")
            await asked.wait()
            scope.cancel()
        assert scope.cancelled_caught
        with anyio.fail_after(5):
            await s.wait_finished()
        assert s.snapshot().status == "STOPPED"
        assert rt.list_executions() == []


async def test_a_caller_that_leaves_while_the_lifecycle_lock_is_held_still_abandons_its_turn(
    time_scale: float,
) -> None:
    """The caller leaves while another holds the lifecycle lock (a completion being claimed,
    say): its abandonment waits for the lock, shielded from the caller's own cancellation,
    and then goes through: the chart hears ``waiter_abandoned`` and the turn is cancelled at
    the agent."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt, ready=True)
        agent = ex.last
        async with anyio.create_task_group() as tg:
            scope = leaving(tg, rt.prompt, ref.id, "work")
            await wait_until(lambda: live(s, 1))
            async with s.ctx.lifecycle_lock:
                scope.cancel()
                await settle()  # the caller's abandonment now waits for the lock
                assert "waiter_abandoned" not in [e for e, _, _ in steps(s, 1)]
        await wait_until(lambda: sent(agent, "cancel") != [])
        assert "waiter_abandoned" in [e for e, _, _ in steps(s, 1)]
        assert scope.cancelled_caught
        await rt.stop(ref.id, "done")


async def test_a_caller_that_leaves_an_unanswered_turn_does_not_block_the_next(
    time_scale: float, autojump_clock: object
) -> None:
    """The agent ignores the cancel of an abandoned turn: the next prompt waits for that turn
    to end at most its bound (10 s), then goes ahead; it is never blocked for good."""
    ex = memory_agent(cancel_completes=False)
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        await leave_prompt(rt, s, "stuck")
        async with anyio.create_task_group() as tg:
            p = start(tg, rt.prompt, ref.id, "next")
            await wait_until(lambda: live(s, 2), limit=60)
            ex.last.complete(2)
            await p.wait()
        assert p.error is None and p.prompt_result.generation == 2
        await rt.stop(ref.id, "done")


_CANCEL_SEND = CANCEL["send"]
assert isinstance(_CANCEL_SEND, Do)


@pytest.mark.parametrize("answer", sorted(set(_CANCEL_SEND.answers) - {"failed"}))
async def test_each_cancel_answer_reaches_the_chart_as_the_model_verifier_explores_it(
    answer: str, time_scale: float
) -> None:
    """The flow table says what each of session/cancel's answers is for the chart (kandev
    manager_interaction.go ``CancelAgent``: acknowledged, not acknowledged, or no answer
    because the stream is gone), and ``acpfsm verify`` explores exactly that; each row must
    be what the runtime fires when the agent answers that way (a lost stream taken for an
    acknowledged cancel never escalates)."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt, ready=True)
        agent = ex.last

        def cancel() -> CancelResult:
            if answer == "disconnected":
                raise StreamNotConnected()
            if answer == "acknowledged":
                agent.complete(1, "cancelled")
            return CancelResult(acknowledged=answer == "acknowledged")

        agent.handlers["cancel"] = cancel
        fed: list[dict[str, object]] = []
        fire = s.ctx.fire

        def recording(machine: Any, event: str, **data: Any) -> Any:
            if event == "cancel_answered":
                fed.append(data)
            return fire(machine, event, **data)

        s.ctx.fire = recording  # type: ignore[method-assign]
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "work")
            c = start(tg, rt.cancel, ref.id)
            await c.wait()
            await p.wait()
        assert fed == [dict(_CANCEL_SEND.answers[answer].values)]
        assert (c.error is None) is (answer == "acknowledged")
        await rt.stop(ref.id, "done")


async def test_a_prompt_timeout_is_typed_and_cancels_the_turn(
    time_scale: float, autojump_clock: object
) -> None:
    """``prompt(..., timeout=)`` against a hung agent: PromptTimeout (a PromptError naming the
    generation) within the bound, and the turn is cancelled at the agent."""
    ex = memory_agent(cancel_completes=False)
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, _ = await launch_session(rt, ready=True)
        with pytest.raises(PromptTimeout) as info:  # the agent never answers: only the bound
            await rt.prompt(ref.id, "hang", timeout=3 * time_scale)
        assert info.value.generation == 1
        await wait_until(lambda: sent(ex.last, "cancel") == [()])
        await rt.stop(ref.id, "done")


async def test_an_escalated_turn_leaves_the_execution_ready_for_the_next_prompt(
    time_scale: float, autojump_clock: object
) -> None:
    """The agent acknowledges the cancel and keeps running the turn: the cancel escalates and
    the execution is READY at once (kandev escalateStuckCancel), so the app can prompt again;
    the turn's late end changes nothing."""
    ex = memory_agent(cancel_completes=False)
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        async with anyio.create_task_group() as tg:
            start(tg, rt.prompt, ref.id, "long")
            await wait_until(lambda: live(s, 1))
            with pytest.raises(CancelEscalated):
                await rt.cancel(ref.id)
        assert rt.get_execution(ref.id).status == "READY"
        ex.last.complete(1, "cancelled")
        await settle()
        assert rt.get_execution(ref.id).status == "READY"
        await rt.stop(ref.id, "done")


async def test_wait_ready_returns_the_snapshot_once_ready(time_scale: float) -> None:
    """``wait_ready`` waits through the init and the initial turn and returns the READY
    snapshot."""
    ex = memory_agent(auto_complete=True)
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref = await rt.launch(spec(prompt="hello"))
        snapshot = await rt.wait_ready(ref.id)
        assert snapshot.status == "READY" and snapshot.prompt_generation == 1
        assert of_type(session_of(rt, ref.id), le.AgentReady)
        await rt.stop(ref.id, "done")


async def test_wait_ready_raises_the_init_failure_with_its_cause(time_scale: float) -> None:
    """An init that fails: ``wait_ready`` raises SessionInitError whose ``__cause__`` is the
    agent's refusal."""

    refusal = AgentRequestError(-32603, "Internal error: no sessions today")
    ex = memory_agent(lambda t: t.handlers.update({"session/new": raiser(refusal)}))
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref = await rt.launch(spec())
        with pytest.raises(SessionInitError) as info:
            await rt.wait_ready(ref.id)
        assert "no sessions today" in str(info.value)
        assert isinstance(info.value.__cause__, AgentRequestError)
        with pytest.raises(NotReadyForPrompts):
            await rt.prompt(ref.id, "hi")
        await rt.stop(ref.id, "done")


async def test_cancelling_wait_ready_is_bounded(time_scale: float) -> None:
    """A caller that stops waiting for READY leaves nothing behind: the execution keeps going
    and stops cleanly."""
    gate = anyio.Event()

    async def slow(cwd: str) -> SessionResult:
        await gate.wait()
        return SessionResult(session_id="s")

    ex = memory_agent(lambda t: t.handlers.update({"session/new": slow}))
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref = await rt.launch(spec())
        with anyio.move_on_after(0.05) as scope:
            await rt.wait_ready(ref.id)
        assert scope.cancelled_caught
        snapshot = await rt.stop(ref.id, "done")
        assert snapshot.status == "STOPPED"
        assert ("aclose", ()) in ex.last.calls
