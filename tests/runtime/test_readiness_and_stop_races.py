"""Issue 31's lifecycle fidelity items, through the whole runtime over the memory transport:

* readiness as a question (``Execution.accepts_prompts``): the Execution chart's own answer
  to ``prompt_requested``, asked without sending a prompt, per status, and the same answer
  the prompt path then gives;
* a cancel after dispatch-only prompts alone (kandev ``CancelAgent``: the ``promptFinished``
  barrier is armed only by a prompt that waits): an unacknowledged cancel is complete;
* a cancel and a prompt racing the app's own ``stop``: each says the app stopped the
  execution (:class:`ExecutionStopped`), never ``CancelEscalated`` nor an agent error;
* a prompt that passed its status check before the execution crashed is not admitted after
  it (what ``acpfsm verify --crashes`` found: ``nothing_dispatched_after_a_crash``).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from acpfsm.adapters import events as ev
from acpfsm.adapters.memory import MemoryTransport
from acpfsm.adapters.transport import Attachment, CancelResult
from acpfsm.runtime import (
    AgentReportedError,
    CancelEscalated,
    ExecutionCrashed,
    ExecutionStopped,
    NotReadyForPrompts,
    PromptError,
)
from acpfsm.runtime import events as le
from acpfsm.statecharts import Execution, peek

from .memory_runtime import (
    launch_ready,
    launch_session,
    make_runtime,
    memory_agent,
    settle,
    wait_until,
)
from .test_containment import illegal_models_update
from .test_scenarios_s4_steer_cancel import live, methods, published, start_prompt

pytestmark = pytest.mark.both_backends


# --- readiness as a question ---------------------------------------------------------------


def test_peek_answers_as_the_chart_would_and_changes_nothing() -> None:
    """The question is the chart's decision without its step: same effects, same target,
    the machine where it was; an event illegal here answers None; an ended chart None."""
    for name in ("compiled", "reference"):
        exe = Execution.start(engine=name)
        step = peek(exe, "prompt_requested")
        assert step is not None and [e.name for e in step.effects] == []  # RUNNING: taken
        exe.fire("start_requested")
        before = exe.state
        step = peek(exe, "prompt_requested")
        assert step is not None and [e.name for e in step.effects] == ["refuse_prompt"]
        assert exe.state == before
        assert peek(exe, "no_such_event") is None
        assert exe.fire("prompt_requested").effects == step.effects  # what firing does
        exe.fire("stop_requested", reason="done", error="")
        assert exe.ended and peek(exe, "prompt_requested") is None


async def test_accepts_prompts_per_status(time_scale: float) -> None:
    """STARTING no (a prompt would wait for the init), READY yes, RUNNING yes (the prompt
    takes the next turn), FAILED and COMPLETED no, STOPPED no; and each time the prompt path
    decides the same."""
    released = anyio.Event()

    def setup(t: MemoryTransport) -> None:
        async def initialize(*args: Any) -> Any:
            await released.wait()
            return t._caps

        t.handlers["initialize"] = initialize

    ex = memory_agent(setup)
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        await settle()
        snap = rt.get_execution(ref.id)
        assert (snap.status, snap.accepts_prompts) == ("STARTING", False)
        released.set()
        await wait_until(lambda: rt.get_execution(ref.id).status == "READY")
        assert rt.get_execution(ref.id).accepts_prompts
        async with anyio.create_task_group() as tg:
            run = start_prompt(tg, rt, ref.id, "long")
            await wait_until(live(s))
            snap = rt.get_execution(ref.id)
            assert (snap.status, snap.accepts_prompts) == ("RUNNING", True)
            ex.last.complete(1)
        assert run.result is not None
        # the agent process exits: 1 → FAILED, and a prompt is refused as the snapshot said
        ex.last.disconnect("agent exited", exit_code=1)
        await wait_until(lambda: rt.get_execution(ref.id).status == "FAILED")
        assert not rt.get_execution(ref.id).accepts_prompts
        with pytest.raises(NotReadyForPrompts):
            await rt.prompt(ref.id, "again")
        final = await rt.stop(ref.id, "done")
        assert (final.status, final.accepts_prompts) == ("STOPPED", False)

    async with make_runtime(memory_agent(), time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, rt.executors["memory"])  # type: ignore[arg-type]
        tr.disconnect("agent exited", exit_code=0)
        await wait_until(lambda: rt.get_execution(eid).status == "COMPLETED")
        assert not rt.get_execution(eid).accepts_prompts
        with pytest.raises(NotReadyForPrompts):
            await rt.prompt(eid, "again")


# --- cancel after dispatch-only prompts alone ----------------------------------------------


@pytest.mark.parametrize("waited_first", [False, True])
async def test_an_unanswered_cancel_after_dispatch_only_prompts_alone_is_complete(
    time_scale: float, waited_first: bool
) -> None:
    """kandev CancelAgent: with dispatch-only prompts alone behind it (their turns over), the
    ``promptFinished`` barrier was never armed and an unacknowledged cancel returns nil: the
    execution stays READY, nothing escalates. After a prompt that waited, the same cancel
    escalates (``CancelEscalated``)."""
    ex = memory_agent(auto_complete=True)
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        if waited_first:
            await rt.prompt(eid, "waits")
        result = await rt.prompt(eid, "background", dispatch_only=True)
        assert result.stop_reason == "dispatched"
        await wait_until(lambda: s.generations[result.generation].leaf == "completed")
        tr.handlers["cancel"] = lambda: CancelResult(acknowledged=False)
        if waited_first:
            with pytest.raises(CancelEscalated):
                await rt.cancel(eid)
        else:
            await rt.cancel(eid)
        assert methods(tr, "cancel") == [("cancel", ())]
        assert rt.get_execution(eid).status == "READY"


# --- cancel and prompt racing the app's own stop --------------------------------------------


async def test_a_prompt_ended_by_the_apps_stop_says_so(time_scale: float) -> None:
    """The app stops the execution while a turn runs: the prompt's caller gets
    ExecutionStopped naming the reason (not an AgentReportedError: the agent did nothing);
    a cancel waiting for that turn says the same."""
    ex = memory_agent(cancel_completes=False)
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        cancelled: list[BaseException | None] = []
        async with anyio.create_task_group() as tg:
            run = start_prompt(tg, rt, eid, "long")
            await wait_until(live(s))

            async def cancel() -> None:
                try:
                    await rt.cancel(eid)
                    cancelled.append(None)
                except PromptError as exc:
                    cancelled.append(exc)

            tg.start_soon(cancel)
            await wait_until(lambda: bool(methods(tr, "cancel")))  # it waits for the turn
            final = await rt.stop(eid, "user closed the tab")
        assert final.status == "STOPPED"
        assert isinstance(run.error, ExecutionStopped)
        assert not isinstance(run.error, AgentReportedError)
        assert run.error.reason == "user closed the tab"
        assert str(run.error) == (
            "the execution was stopped by the app (user closed the tab): the turn was ended"
        )
        assert s.generations[1].leaf == "stopped"
        (error,) = cancelled
        assert isinstance(error, ExecutionStopped) and not isinstance(error, CancelEscalated)
        assert "nothing left to cancel" in str(error)


async def test_a_cancel_during_the_apps_stop_says_so(time_scale: float) -> None:
    """A cancel that arrives while the app's stop runs (its graceful agent stop pending):
    ExecutionStopped at once, nothing sent to the agent (before: CancelEscalated after 0 s,
    "agent did not acknowledge within timeout")."""
    stopping = anyio.Event()
    go_on = anyio.Event()

    def setup(t: MemoryTransport) -> None:
        async def stop_agent(*args: Any) -> None:
            stopping.set()
            await go_on.wait()

        t.handlers["stop_agent"] = stop_agent

    ex = memory_agent(setup)
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.stop, eid, "shutting down")
            await stopping.wait()
            with pytest.raises(ExecutionStopped) as info:
                await rt.cancel(eid)
            go_on.set()
        assert info.value.reason == "shutting down"
        assert methods(tr, "cancel") == []
        assert published(s, le.AgentReady) == []  # nothing escalated


# --- a prompt checked before a crash ----------------------------------------------------------


async def test_a_prompt_checked_before_a_crash_is_not_admitted_after_it(time_scale: float) -> None:
    """A prompt passes its status check while the execution is READY and waits for the
    lifecycle lock to be admitted; meanwhile the execution crashes (FAILED). Its admission
    asks the Crash chart: the prompt is refused with the crash (ExecutionCrashed), no
    generation begins, the execution stays FAILED and nothing is sent on the carrier being
    closed (before: ``prompt_began`` took the crashed execution to RUNNING and the request
    went out)."""
    async with make_runtime(memory_agent(), time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, rt.executors["memory"])  # type: ignore[arg-type]
        s.config.models_updated = illegal_models_update  # type: ignore[method-assign]
        errors: list[BaseException] = []

        async def prompt() -> None:
            try:
                await rt.prompt(eid, "checked while READY")
            except ExecutionCrashed as exc:
                errors.append(exc)

        def checked() -> bool:
            return any(r.event == "prompt_requested" for r in rt.trace.for_execution(eid))

        with anyio.fail_after(30):
            # the prompt's admission waits for the lifecycle lock the test holds
            async with anyio.create_task_group() as tg, s.ctx.lifecycle_lock:
                tg.start_soon(prompt)
                await wait_until(checked)
                await settle()
                tr.emit(ev.SessionModels(current_model_id="fast"))  # the pump crashes
                await wait_until(lambda: rt.get_execution(eid).status == "FAILED")
            (error,) = errors
            assert "execution crashed" in str(error)
            assert s.generations == {} and s.current is None
            assert methods(tr, "prompt") == []
            assert rt.get_execution(eid).status == "FAILED"
            assert not rt.get_execution(eid).accepts_prompts
            await rt.stop(eid, "done")


async def test_a_turn_admitted_before_a_crash_is_undelivered_and_never_sent(
    time_scale: float,
) -> None:
    """The prompt was admitted (RUNNING) and materializes its attachment when the execution
    crashes: the crash's loss ends the turn ``undelivered`` (it never reached the agent and
    never will), its dispatch is skipped, nothing is sent on the carrier being closed, and
    the caller gets the crash (before: the request went out after the crash)."""
    materializing = anyio.Event()
    go_on = anyio.Event()

    def setup(t: MemoryTransport) -> None:
        async def materialize(attachment: Attachment) -> Attachment:
            materializing.set()
            await go_on.wait()
            return attachment

        t.handlers["materialize"] = materialize

    ex = memory_agent(setup)
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        s.config.models_updated = illegal_models_update  # type: ignore[method-assign]
        errors: list[BaseException] = []

        async def prompt() -> None:
            try:
                await rt.prompt(eid, "look", attachments=(Attachment(name="a.txt", data=b"a"),))
            except ExecutionCrashed as exc:
                errors.append(exc)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(prompt)
                await materializing.wait()
                assert s.generations[1].leaf == "admitted"
                tr.emit(ev.SessionModels(current_model_id="fast"))  # the pump crashes
                await wait_until(lambda: ("aclose", ()) in tr.calls)
                go_on.set()
            (error,) = errors
            assert "execution crashed" in str(error)
            assert s.generations[1].leaf == "undelivered"
            assert methods(tr, "prompt") == []
            assert rt.get_execution(eid).status == "FAILED"
            await rt.stop(eid, "done")
