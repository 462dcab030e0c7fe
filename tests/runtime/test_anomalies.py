"""kandev's known anomalies (H1-H12, defined in KANDEV.md), one test each, through the runtime.

Each docstring names the anomaly and says how the charts make it impossible or handle it;
the test shows the safe behaviour over the in-memory agent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import msgspec
import pytest

from acpfsm.adapters.errors import AgentRequestError, LocalProtocolError, StreamNotConnected
from acpfsm.adapters.events import (
    Complete,
    ErrorEvent,
    ForegroundIdle,
    MessageChunk,
    Reasoning,
    StreamDisconnected,
)
from acpfsm.adapters.memory import MemoryTransport
from acpfsm.adapters.transport import Attachment
from acpfsm.runtime import (
    AgentReportedError,
    AttachmentError,
    CancelEscalated,
    CancelEscalatedAgentError,
    ExecutionNotFound,
    NotReadyForPrompts,
    PromptDispatchError,
    Runtime,
    SteerAttachmentMaterializationError,
    SteerNotDispatched,
)
from acpfsm.runtime import events as le

from .memory_runtime import (
    MemoryExecutor,
    launch_session,
    make_runtime,
    memory_agent,
    raiser,
    settle,
    spec,
    wait_until,
)
from .prompt_helpers import live, names, of_type, prompting, sent, start, steps

pytestmark = pytest.mark.both_backends

AMBIGUOUS = "agent stream not connected while waiting for response"


async def test_h1_ambiguous_steer_is_not_dispatched_and_never_resent(time_scale: float) -> None:
    """H1: kandev re-sent a steer whose RPC failed with "agent stream not connected while
    waiting for response" as an ordinary prompt, although the request had been written
    (double delivery). Here (seed D6) the steer is ``SteerNotDispatched``: the steer request
    went out once, no ordinary prompt follows, no generation is begun, and the live turn
    keeps its waiter. Whether to re-admit the message is the caller's decision."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        agent = ex.last

        def dropped_after_write(text: str, attachments: Any, generation: int) -> None:
            raise StreamNotConnected(AMBIGUOUS, while_waiting=True)

        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "long task")
            agent.handlers["steer"] = dropped_after_write
            with pytest.raises(SteerNotDispatched, match="steer was not dispatched"):
                await rt.steer(ref.id, "also this")
            await settle()
            assert sent(agent, "steer") == [("also this", (), 1)]
            assert [args[0] for args in sent(agent, "prompt")] == ["long task"]
            assert s.turns._next == 1 and live(s, 1) and not p.done.is_set()
            agent.complete(1)
            await p.wait()
        assert p.prompt_result.generation == 1
        await rt.stop(ref.id, "done")


async def test_h2_ambiguous_prompt_dispatch_is_never_resent(time_scale: float) -> None:
    """H2: kandev's reconnect retry re-sent a prompt after an ambiguous post-write
    disconnect (same generation: possibly twice at the agent). Here the trigger reports it
    as not delivered and sends nothing more, even on a carrier that can redial: the
    generation ends ``undelivered`` (a late completion for it is ignored), the caller gets
    PromptDispatchError and the execution is READY for its decision. Only a failure *before*
    the write ("agent stream not connected") is retried after a reconnect, with the same
    generation (kandev lifecycle/session.go retryPromptAfterReconnect); a resend written and
    lost is not sent again either (kandev's loop re-sent it; acpfsm verify's
    dispatched_at_most_once)."""
    ex = memory_agent(reconnectable=True)
    # the retries below must all fit the 5 s reconnect window, which is not this test's
    # subject: scaled, it was 10 ms of real time under asyncio, too short on a loaded machine
    whole = {"reconnect_retry": 5.0}
    async with make_runtime(ex, time_scale=time_scale, timeouts=whole) as rt:
        ref, s = await launch_session(rt, ready=True)
        agent = ex.last
        failures = [StreamNotConnected(AMBIGUOUS, while_waiting=True)]

        def prompt(text: str, attachments: Any, generation: int) -> None:
            if failures:
                raise failures.pop(0)
            agent.running.append(generation)

        agent.handlers["prompt"] = prompt
        with pytest.raises(PromptDispatchError, match="while waiting for response"):
            await rt.prompt(ref.id, "once only")
        assert [args[2] for args in sent(agent, "prompt")] == [1]
        assert s.generations[1].leaf == "undelivered"
        assert rt.get_execution(ref.id).status == "READY"
        agent.complete(1)  # had the agent received it after all: nobody is released
        await settle()
        assert s.generations[1].leaf == "undelivered"
        assert rt.get_execution(ref.id).status == "READY"

        failures.append(StreamNotConnected())  # not written: safe to retry
        result = await rt.prompt(ref.id, "retried", dispatch_only=True)
        assert result.generation == 2
        assert [args[2] for args in sent(agent, "prompt")] == [1, 2, 2]
        # the retry (within its 5 s) keeps waiting for the carrier while its resend finds the
        # stream down again before the write
        agent.complete(2)
        await wait_until(lambda: s.generations[2].leaf == "completed")
        failures.extend([StreamNotConnected(), StreamNotConnected()])
        result = await rt.prompt(ref.id, "third time", dispatch_only=True)
        assert result.generation == 3
        assert [args[2] for args in sent(agent, "prompt")] == [1, 2, 2, 3, 3, 3]
        agent.complete(3)
        await wait_until(lambda: s.generations[3].leaf == "completed")
        # … but a resend written and lost is the first send's ambiguity again: never re-sent
        failures.extend([StreamNotConnected(), StreamNotConnected(AMBIGUOUS, while_waiting=True)])
        with pytest.raises(PromptDispatchError, match="while waiting for response"):
            await rt.prompt(ref.id, "fourth time")
        assert [args[2] for args in sent(agent, "prompt")] == [1, 2, 2, 3, 3, 3, 4, 4]
        assert s.generations[4].leaf == "undelivered"
        assert rt.get_execution(ref.id).status == "READY"
        await rt.stop(ref.id, "done")


async def test_a_prompt_request_in_flight_when_the_agent_is_gone_for_good_ends_disconnected(
    time_scale: float,
) -> None:
    """The prompt request is written, and the agent goes away for good (no redial) before
    it answers: no answer and no end can come any more, so the turn ends ``disconnected`` at
    the loss (kandev handleStreamDisconnect), and the request's late failure changes
    nothing."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt, ready=True)
        agent = ex.last
        gone = anyio.Event()

        async def written_then_lost(text: str, attachments: Any, generation: int) -> None:
            await gone.wait()
            raise StreamNotConnected(AMBIGUOUS, while_waiting=True)

        agent.handlers["prompt"] = written_then_lost
        async with anyio.create_task_group() as tg:
            p = start(tg, rt.prompt, ref.id, "hello")
            await wait_until(lambda: s.current is not None and s.current.leaf == "sending")
            agent.disconnect("peer gone")
            await wait_until(lambda: s.generations[1].leaf != "sending")
            assert s.generations[1].leaf == "disconnected"
            gone.set()
            await p.wait()
        assert s.generations[1].leaf == "disconnected"
        assert isinstance(p.error, PromptDispatchError)


async def test_h3_no_completion_is_dropped(time_scale: float) -> None:
    """H3: kandev's ``promptDoneCh`` has capacity 1 and drops the newest signal when full,
    so a stale buffered signal can make a real completion get lost. Here there is no
    channel: each terminal event is a transition of its own generation's chart. A
    completion nobody waits for is still claimed (recorded, published), and two completions
    in a row for different generations (a stale one for 1, the real one for 2, queued back
    to back) are both handled: the stale one explicitly ignored, the real one delivered."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        agent = ex.last
        await rt.prompt(ref.id, "background", dispatch_only=True)
        agent.complete(1)  # nobody waits for it
        await wait_until(lambda: s.generations[1].leaf == "completed")
        assert [e.prompt_generation for e in of_type(s, le.PromptCompleted)] == [1]

        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "next", generation=2)
            agent.complete(1)  # stale: already claimed and now superseded
            agent.complete(2)  # queued right behind it
            await p.wait()
        assert p.prompt_result.generation == 2
        assert p.prompt_result.stop_reason == "end_turn"
        assert steps(s, 1)[-1] == ("completion_received", "superseded", "superseded")
        assert steps(s, 2)[-1] == ("completion_received", "dispatched", "completed")
        assert [e.prompt_generation for e in of_type(s, le.PromptCompleted)] == [1, 2]
        await rt.stop(ref.id, "done")


async def test_h4_barrier_is_released_only_by_its_own_generation(time_scale: float) -> None:
    """H4: kandev's dispatch-only barrier is released by *any* completion signal (no
    generation filter). Here the barrier is the dispatch-only generation's own chart state
    (``dispatched.unawaited``), so only that generation's completion releases it: terminal
    events for an older generation, an unknown one, or an error for another generation
    leave the successor waiting (and send nothing); ``complete(2)`` lets it through."""
    ex = MemoryExecutor()
    # the barrier's own 10 s bound is not this test's: scaled, a slow scheduler let it run out
    # while the successor was held (under asyncio, in real time)
    whole = {"pending_dispatched_prompt": 10.0}
    async with make_runtime(ex, time_scale=time_scale, timeouts=whole) as rt:
        ref, s = await launch_session(rt)
        agent = ex.last
        agent.auto_complete = True
        await rt.prompt(ref.id, "first")
        agent.auto_complete = False
        await rt.prompt(ref.id, "background", dispatch_only=True)
        async with anyio.create_task_group() as tg:
            p = start(tg, rt.prompt, ref.id, "successor")
            await settle()
            agent.emit(Complete(prompt_generation=1))
            agent.emit(Complete(prompt_generation=9))
            agent.emit(ErrorEvent(prompt_generation=7, error="someone else's"))
            await settle()
            assert s.current is s.generations[2] and s.current.state == "unawaited"
            assert 3 not in s.generations and not p.done.is_set()
            assert len(sent(agent, "prompt")) == 2
            assert rt.get_execution(ref.id).status == "RUNNING"
            agent.complete(2)
            await wait_until(lambda: live(s, 3))
            agent.complete(3)
            await p.wait()
        assert p.prompt_result.generation == 3
        await rt.stop(ref.id, "done")


async def test_h5_escalation_cannot_swallow_a_successor_completion(
    time_scale: float, autojump_clock: object
) -> None:
    """H5: kandev's ``escalateStuckCancel`` ends with a drain of ``promptDoneCh`` that can
    swallow the completion of a successor that started during the escalation window. Here
    escalation releases the stuck generation through its own chart (``escalating``, then
    ``cancel_escalated`` once its waiter returned) and drains nothing: a successor queued
    behind it begins generation 2 during the window and receives its own completion; the
    cancel still reports CancelEscalated. (Whether the escalation ends before or after the
    successor supersedes the stuck generation is a race both sides of which are declared.)"""
    ex = memory_agent(cancel_completes=False)
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        agent = ex.last
        async with anyio.create_task_group() as tg:
            p1 = await prompting(tg, rt, ref.id, "stuck")
            p2 = start(tg, rt.prompt, ref.id, "successor")
            cancel = start(tg, rt.cancel, ref.id)
            await p1.wait()  # released by the escalation after the 10 s cancel wait
            assert isinstance(p1.error, CancelEscalatedAgentError)
            await wait_until(lambda: live(s, 2))
            agent.complete(2)
            await p2.wait()
            await cancel.wait()
        assert p2.error is None and p2.prompt_result.generation == 2
        assert p2.prompt_result.stop_reason == "end_turn"
        assert isinstance(cancel.error, CancelEscalated)
        assert s.generations[1].leaf == "superseded"
        assert ("cancel_wait_timed_out", "dispatched", "escalating") in steps(s, 1)
        assert rt.get_execution(ref.id).status == "READY"
        await rt.stop(ref.id, "done")


async def test_h6_a_dead_generation_is_never_steerable(
    time_scale: float, autojump_clock: object
) -> None:
    """H6: after a handoff, a cancel escalation or a disconnect kandev never sets C, so the
    dead turn stays "steerable" until the next BeginPrompt and a steer binds to it. Here
    ``steered`` is declared only under ``dispatched``: a handed-off, escalated or
    disconnected generation refuses it, so every such steer is SteerNotDispatched (after a
    disconnect the FAILED status refuses it first) and no steer request is ever sent."""
    ex = memory_agent(cancel_completes=False)
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        agent = ex.last
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "one")
            agent.emit(ForegroundIdle(prompt_generation=1, prompt_handoff=True))
            await p.wait()
        assert s.generations[1].leaf == "handed_off"
        with pytest.raises(SteerNotDispatched):
            await rt.steer(ref.id, "into a handed-off turn")

        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "two", generation=2)
            with pytest.raises(CancelEscalated):
                await rt.cancel(ref.id)
            await p.wait()
        assert s.generations[2].leaf == "cancel_escalated"  # the agent may still owe it
        with pytest.raises(SteerNotDispatched):
            await rt.steer(ref.id, "into an escalated turn")

        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "three", generation=3)
            agent.disconnect("peer disconnected")
            await p.wait()
        assert s.generations[3].leaf == "disconnected"
        assert not s.generations[3].machine.is_in("dispatched")
        with pytest.raises(NotReadyForPrompts):
            await rt.steer(ref.id, "into a disconnected turn")
        with pytest.raises(SteerNotDispatched):
            await s.steer("even without the status check", validate_status=False)
        assert sent(agent, "steer") == []
        await rt.stop(ref.id, "done")


async def test_h7_failed_trigger_does_not_leave_running(time_scale: float) -> None:
    """H7: a failed trigger or attachment materialization left kandev's execution RUNNING
    with an admitted generation and nobody waiting. Here the generation ends
    ``undelivered``, the execution is READY again, subscribers see ``prompt.failed``
    (outcome ``undelivered``) then ``agent.ready``, and the next prompt runs at once."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt, ready=True)
        agent = ex.last

        def refuse(text: str, attachments: Any, generation: int) -> None:
            raise AgentRequestError(-32603, "Internal error", method="session/prompt")

        agent.handlers["prompt"] = refuse
        with pytest.raises(PromptDispatchError, match="failed to trigger prompt"):
            await rt.prompt(ref.id, "x")
        assert s.generations[1].leaf == "undelivered"
        assert rt.get_execution(ref.id).status == "READY"
        failed, ready = of_type(s, le.PromptFailed)[-1], of_type(s, le.AgentReady)[-1]
        assert (failed.prompt_generation, failed.outcome) == (1, "undelivered")
        assert failed.error.startswith("failed to trigger prompt: ")
        assert ready.prompt_generation == 1
        assert names(s)[-2:] == ["PromptFailed", "AgentReady"]

        def no_storage(att: Attachment) -> Attachment:
            raise LocalProtocolError("attachment storage is unavailable")

        agent.handlers["materialize"] = no_storage
        with pytest.raises(AttachmentError):
            await rt.prompt(ref.id, "y", attachments=(Attachment(name="a", data=b"1"),))
        assert s.generations[2].leaf == "undelivered"
        assert rt.get_execution(ref.id).status == "READY"

        del agent.handlers["prompt"]
        agent.auto_complete = True
        with anyio.fail_after(5):  # nobody holds the prompt lock
            assert (await rt.prompt(ref.id, "z")).generation == 3
        await rt.stop(ref.id, "done")


async def test_h8_steer_attachments_are_materialized(time_scale: float) -> None:
    """H8: kandev passed steer attachments to the agent unmaterialized. Here (seed D7) they
    are materialized before the lifecycle lock and the steer carries the materialized
    descriptors; a failure is SteerAttachmentMaterializationError (also an AttachmentError)
    and no steer request is sent."""
    ex = MemoryExecutor()
    att = Attachment(name="a.png", data=b"\x89PNG", attachment_id="att-1")
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, _ = await launch_session(rt)
        agent = ex.last
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "long task")
            agent.handlers["materialize"] = lambda a: msgspec.structs.replace(
                a, name="stored.png", data=b""
            )
            await rt.steer(ref.id, "look", attachments=(att,))
            methods = [m for m, _ in agent.calls]
            assert methods.index("materialize") < methods.index("steer")
            ((text, attachments, generation),) = sent(agent, "steer")
            assert (text, generation) == ("look", 1)
            assert [(a.name, a.data) for a in attachments] == [("stored.png", b"")]

            def no_storage(a: Attachment) -> Attachment:
                raise LocalProtocolError("attachment storage is unavailable")

            agent.handlers["materialize"] = no_storage
            with pytest.raises(SteerAttachmentMaterializationError) as info:
                await rt.steer(ref.id, "again", attachments=(att,))
            assert isinstance(info.value, AttachmentError)
            assert str(info.value).startswith("steer attachment materialization failed: ")
            assert len(sent(agent, "steer")) == 1
            agent.complete(1)
            await p.wait()
        await rt.stop(ref.id, "done")


async def test_h9_clean_stream_close_releases_the_waiter(time_scale: float) -> None:
    """H9: a normal WebSocket close left kandev's disconnect error nil, so no waiter was
    released (it hung until its context, a cancel or a stall notice). Here a clean close is
    the same ``connection_lost`` fact as any loss (``StreamDisconnected`` with an empty
    error, the last event of a connection): the owning generation goes ``disconnected``
    and its waiter is released with "agent stream disconnected: connection closed"."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "hi")
            ex.last.disconnect(error="")  # clean close
            await p.wait(limit=5)
        assert isinstance(p.error, AgentReportedError)
        assert str(p.error) == "agent error: agent stream disconnected: connection closed"
        assert s.generations[1].leaf == "disconnected"
        assert s.stream.machine.state == "disconnected"
        assert [e.error for e in of_type(s, le.AgentctlError)] == [
            "agent stream disconnected: connection closed"
        ]
        await rt.stop(ref.id, "done")


async def test_h10_initial_prompt_failure_is_reported(time_scale: float) -> None:
    """H10: kandev's initial-prompt failure hook was not wired in production, so a failed
    initial prompt went unreported. Here (seed D9) it is always reported: subscribers get
    ``prompt.initial_failed`` with the session id, the generation and the error, and (H7)
    the execution is READY rather than RUNNING with nobody waiting."""

    refusal = AgentRequestError(-32603, "Internal error", method="session/prompt")
    ex = memory_agent(lambda t: t.handlers.update(prompt=raiser(refusal)))
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt, "do the thing")
        await wait_until(lambda: bool(of_type(s, le.InitialPromptFailed)))
        (failure,) = of_type(s, le.InitialPromptFailed)
        assert failure.session_id == ref.session_id
        assert failure.prompt_generation == 1
        assert failure.error.startswith("failed to trigger prompt: ")
        assert s.generations[1].leaf == "undelivered"
        assert rt.get_execution(ref.id).status == "READY"
        await rt.stop(ref.id, "done")


async def test_h10_an_initial_prompt_whose_turn_fails_is_reported(time_scale: float) -> None:
    """The same when the initial prompt was sent and its turn then ended in an agent error:
    the launch waits for the turn (it is not a dispatch-only prompt) and reports its error."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt, "do the thing")
        await wait_until(lambda: live(s, 1))
        assert of_type(s, le.InitialPromptFailed) == []
        ex.last.fail(1, "the model is overloaded")
        await wait_until(lambda: bool(of_type(s, le.InitialPromptFailed)))
        (failure,) = of_type(s, le.InitialPromptFailed)
        assert failure.prompt_generation == 1
        assert failure.error == "agent error: the model is overloaded"
        await rt.stop(ref.id, "done")


async def test_wait_ready_on_an_execution_that_failed_after_its_init_raises(
    time_scale: float,
) -> None:
    """``wait_ready`` returns the snapshot of a READY execution; once the execution failed
    after a successful init (here a wakeup turn's error), it raises NotReadyForPrompts naming
    the status rather than returning."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        assert (await rt.wait_ready(ref.id)).status == "READY"
        ex.last.emit(ErrorEvent(error="wakeup failed"))
        await wait_until(lambda: s.execution.status == "FAILED")
        with pytest.raises(NotReadyForPrompts, match="FAILED"):
            await rt.wait_ready(ref.id)
        await rt.stop(ref.id, "done")


async def test_a_lost_stream_names_the_last_500_characters_of_the_agents_stderr(
    time_scale: float,
) -> None:
    """The agent process died and left a long stderr: the turn's error names the end of it
    (where the reason usually is), at most 500 characters, never the whole of it."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, _ = await launch_session(rt)
        tail = "noise " * 200 + "FATAL: out of credits"
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "hi")
            ex.last.emit(StreamDisconnected(error="agent exited", exit_code=1, stderr_tail=tail))
            await p.wait()
        assert isinstance(p.error, AgentReportedError)
        message = str(p.error)
        assert message.endswith(f"(stderr: {tail[-500:]})")
        assert tail[:-500] not in message
        await rt.stop(ref.id, "done")


async def test_a_completion_stamped_with_a_generation_that_never_was_completes_nothing(
    time_scale: float,
) -> None:
    """An agent's terminal event names a generation that never existed (negative): it is
    nobody's; the live turn goes on and ends only with its own completion (only generation 0
    is the unstamped path, kandev ``handleCompleteEvent``)."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "hi")
            ex.last.emit(Complete(prompt_generation=-1))
            await settle()
            assert live(s, 1) and not p.done.is_set()
            ex.last.complete(1)
            await p.wait()
        assert p.error is None and p.prompt_result.generation == 1
        await rt.stop(ref.id, "done")


def _refusing_session_new(**kw: Any) -> MemoryExecutor:
    """A memory agent whose ``session/new`` fails (an internal error): the init fails."""
    refusal = AgentRequestError(-32603, "Internal error", method="session/new")
    return memory_agent(lambda t: t.handlers.update({"session/new": raiser(refusal)}), **kw)


async def test_recover_stream_leaves_an_execution_whose_init_failed_alone(
    time_scale: float,
) -> None:
    """RecoverAgentPromptStream revives only an execution whose session was established: one
    whose ``session/new`` failed is FAILED with its stream still up, and recovering it does
    nothing (the init's failure stands; no ``recovered`` fact, no new status)."""

    ex = _refusing_session_new(reconnectable=True)
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        await wait_until(lambda: s.execution.status == "FAILED")
        assert ex.last.is_connected()
        count = rt.trace.count
        await rt.recover_stream(ref.id)
        await settle()
        assert s.execution.status == "FAILED"
        assert rt.trace.count == count  # no chart moved
        await rt.stop(ref.id, "done")


class _AgentctlLike(MemoryTransport):
    """A carrier with MCP tools of its own that follow the MCP mode (as agentctl's)."""

    def __init__(self) -> None:
        super().__init__()
        self.mcp_modes: list[str] = []

    async def set_mcp_mode(self, mode: str) -> None:
        self.mcp_modes.append(mode)


async def test_only_kandevs_mcp_modes_reach_a_carrier_with_its_own_mcp_tools(
    time_scale: float,
) -> None:
    """``set_mcp_mode`` forwards kandev's modes (task, config, office) to a carrier that
    serves MCP tools of its own (agentctl's embedded server); a mode only the app's tool sets
    know is not sent to it."""
    ex = MemoryExecutor(_AgentctlLike)
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        await s.set_mcp_mode("review")  # an app tool set's mode (validated by the facade)
        await s.set_mcp_mode("task")
        agent = ex.last
        assert isinstance(agent, _AgentctlLike)
        assert agent.mcp_modes == ["task"]
        assert rt.get_execution(ref.id).metadata["mcp_mode"] == "task"
        await rt.stop(ref.id, "done")


async def test_a_prompt_past_the_status_check_after_a_failed_init_is_sent_as_written(
    time_scale: float,
) -> None:
    """``validate_status=False`` (kandev's internal prompts skip the check) on an execution
    whose init failed: the init is over, so no resume context is composed into the prompt;
    it is sent as written and its turn runs, rather than asking the ended init chart."""

    ex = _refusing_session_new(auto_complete=True)
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        await wait_until(lambda: s.execution.status == "FAILED")
        result = await s.prompt("as written", validate_status=False)
        assert result.stop_reason == "end_turn"
        assert [args[0] for args in sent(ex.last, "prompt")] == ["as written"]
        await rt.stop(ref.id, "done")


async def test_only_the_first_content_after_ready_is_a_wakeup_fact(time_scale: float) -> None:
    """The content that follows the one that started a wakeup turn is that turn's: the
    Execution chart hears one wakeup fact per READY, not one per chunk (the trace shows
    each fact a chart heard, a no-op one too)."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt, ready=True)
        for i in range(3):
            ex.last.emit(MessageChunk(text=f"woke up {i}"))
        await wait_until(lambda: s.ctx.message == ["woke up 0", "woke up 1", "woke up 2"])
        assert s.execution.status == "RUNNING"
        events = [r.event for r in rt.trace.records if r.execution_id == ref.id]
        assert events.count("wakeup_content_arrived") == 1
        await rt.stop(ref.id, "done")


async def test_content_before_ready_is_not_a_wakeup_fact(time_scale: float) -> None:
    """Turn content while the execution is still starting (here during ``initialize``; a
    ``session/load`` replays history the same way) belongs to the startup: only content after
    the execution became READY is a wakeup fact for the Execution chart (R26), so the trace
    of the startup holds none."""
    released = anyio.Event()

    def setup(t: MemoryTransport) -> None:
        async def initialize(*args: Any) -> Any:
            t.emit(MessageChunk(text="replayed"))
            await released.wait()
            return t._caps

        t.handlers["initialize"] = initialize

    ex = memory_agent(setup)
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        await settle()
        assert s.execution.status == "STARTING"
        released.set()
        await wait_until(lambda: s.execution.status == "READY")
        events = [r.event for r in rt.trace.records if r.execution_id == ref.id]
        assert "wakeup_content_arrived" not in events
        await rt.stop(ref.id, "done")


async def test_closing_the_runtime_stops_each_agent_gracefully_first(time_scale: float) -> None:
    """``async with Runtime()`` closing with an execution still live stops it the way a
    plain ``stop`` does: the agent is asked to stop gracefully (agentctl's /api/v1/stop)
    before its transport is closed, not killed outright."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref = await rt.launch(spec())
        await rt.wait_ready(ref.id)
        agent = ex.last
    methods = [m for m, _ in agent.calls]
    assert "stop_agent" in methods
    assert methods.index("stop_agent") < methods.index("aclose")


async def test_h11_not_found_is_mapped_on_every_facade_method(time_scale: float) -> None:
    """H11: kandev's facade mapped an unknown execution to ErrNotFound only on some methods
    (not Resume or SetMcpMode), and its shallow copy of the launch request mutated the
    caller's metadata. Here every facade and session-manager method raises
    ExecutionNotFound (carrying the id) for an unknown or stopped execution, and the caller's
    metadata is never touched."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        metadata: dict[str, Any] = {"task_id": "t-1"}
        ref = await rt.launch(spec(metadata=metadata))
        await rt.set_mcp_mode(ref.id, "config")
        assert metadata == {"task_id": "t-1"}
        assert rt.get_execution(ref.id).metadata["mcp_mode"] == "config"
        await rt.stop(ref.id, "done")

        for missing in ("nope", ref.id):
            for call in _facade_calls(rt, missing):
                with pytest.raises(ExecutionNotFound) as info:
                    await call()
                assert info.value.execution_id == missing
            with pytest.raises(ExecutionNotFound):
                rt.get_execution(missing)
            with pytest.raises(ExecutionNotFound):
                rt.subscribe_events(missing)


def _facade_calls(rt: Runtime, missing: str) -> list[Callable[[], Awaitable[Any]]]:
    return [
        lambda: rt.resume(missing, "x"),
        lambda: rt.prompt(missing, "x"),
        lambda: rt.prompt(missing, "x", dispatch_only=True),
        lambda: rt.steer(missing, "x"),
        lambda: rt.cancel(missing),
        lambda: rt.stop(missing, "x"),
        lambda: rt.stop(missing, "x", force=True),
        lambda: rt.set_mcp_mode(missing, "task"),
        lambda: rt.set_model(missing, "m"),
        lambda: rt.set_mode(missing, "m"),
        lambda: rt.set_config_option(missing, "k", "v"),
    ]


async def test_h12_prompt_result_carries_the_streamed_text(time_scale: float) -> None:
    """H12: kandev's ``PromptResult.AgentMessage`` was effectively always empty (the buffer
    was flushed before the completion signal). Here the text streamed during the turn is
    detached into the generation's outcome when its completion is claimed, so the result
    carries it (assistant chunks only: no user echo, no reasoning); a handoff result too."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, _ = await launch_session(rt)
        agent = ex.last
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "hi")
            agent.emit(MessageChunk(text="hi", role="user", prompt_generation=1))
            agent.emit(Reasoning(reasoning_text="thinking", prompt_generation=1))
            agent.emit(MessageChunk(text="Hello", prompt_generation=1))
            agent.emit(MessageChunk(text=" world", prompt_generation=1))
            agent.complete(1)
            await p.wait()
        assert p.prompt_result.agent_message == "Hello world"

        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "again", generation=2)
            agent.emit(MessageChunk(text="handing off", prompt_generation=2))
            agent.emit(ForegroundIdle(prompt_generation=2, prompt_handoff=True))
            await p.wait()
        assert p.prompt_result.stop_reason == "foreground_idle"
        assert p.prompt_result.agent_message == "handing off"

        agent.auto_complete = True
        assert (await rt.resume(ref.id, "third")).agent_message == "Hello world"
        await rt.stop(ref.id, "done")


async def test_h9_event_stream_ending_silently_releases_the_waiter(time_scale: float) -> None:
    """H9 variant: a transport whose event stream simply ends (no StreamDisconnected) is a loss
    like any other: the waiting prompt is released with an error instead of hanging."""
    from acpfsm.runtime import AgentReportedError

    from .memory_runtime import MemoryExecutor, make_runtime

    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "x")
            ex.last._events.close()  # the stream ends with no disconnect event
        assert isinstance(p.error, AgentReportedError)
        assert "agent event stream ended" in str(p.error)
        assert s.stream.machine.state == "disconnected"
        await rt.stop(ref.id, "done")
