"""``acpfsm verify``'s actions: what each one does to the model (:mod:`.verify_model`
lists when each is enabled). A caller's action starts its flow; the agent's and the
carrier's run the event pump's fact flows; a flow's action answers its request or ends its
wait. Whatever needs no answer follows in :meth:`~.verify_flows.FlowSteps.settle`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from acpfsm.statecharts import flows as F
from acpfsm.statecharts.names import (
    AgentStreamEvent,
    ExecutionEffect,
    ExecutionEvent,
    PromptGenerationEvent,
    SessionInitEvent,
)

from .verify_world import CALLER, DONE, OVER, SENT, TASK, Label

if TYPE_CHECKING:
    from .verify_model import Explorer, World

__all__ = ["HANDLERS"]


Handler = Callable[["Explorer", "World", Label], None]
HANDLERS: dict[str, Handler] = {}


def _action(name: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        HANDLERS[name] = fn
        return fn

    return register


@_action("run")
def _run(x: Explorer, w: World, label: Label) -> None:
    """ExecutionSession.run: the agent process starts, the init's flow begins."""
    w.started = True
    w.status_fire(ExecutionEvent.start_requested)
    w.fire(x.stream, AgentStreamEvent.connect_started)
    w.start(TASK, "session_init")


@_action("start_failed")
def _start_failed(x: Explorer, w: World, label: Label) -> None:
    w.started = True
    w.status_fire(ExecutionEvent.start_requested)
    w.fire(x.stream, AgentStreamEvent.connect_started)
    w.fire(x.stream, AgentStreamEvent.connect_failed)
    w.status_fire(ExecutionEvent.agent_start_failed)
    w.status_fire(ExecutionEvent.stop_requested, reason="agent not started", error="")
    w.closed = True
    w.pump = 2


@_action("activity")
def _activity(x: Explorer, w: World, label: Label) -> None:
    if not x.fa.ended:
        w.status_fire(ExecutionEvent.activity_recorded)


@_action("content")
def _content(x: Explorer, w: World, label: Label) -> None:
    _activity(x, w, label)
    if w.watch:  # the chart's unwatch_wakeup ends the watch
        w.status_fire(ExecutionEvent.wakeup_content_arrived)


@_action("complete")
def _complete(x: Explorer, w: World, label: Label) -> None:
    w.completion(label[1], label[2], label[3])


@_action("give_up_error")
def _give_up_error(x: Explorer, w: World, label: Label) -> None:
    w.completion(label[1], "error", w.shutting, error="peer disconnected before response")


@_action("give_up_loss")
def _give_up_loss(x: Explorer, w: World, label: Label) -> None:
    w.loss("final", w.shutting)


@_action("handoff")
def _handoff(x: Explorer, w: World, label: Label) -> None:
    w.run_fact("handoff", stamped=label[1], unstamped=False)


@_action("loss")
def _loss(x: Explorer, w: World, label: Label) -> None:
    w.loss(label[1], label[2])


@_action("prompt")
def _prompt(x: Explorer, w: World, label: Label) -> None:
    """A prompt with attachments: their upload, between its admission and its dispatch, is
    a wait of its own (a stop, a cancel, the agent may come in between)."""
    w.start(
        CALLER,
        "prompt",
        dispatch_only=label[1] == "dispatch_only",
        validate_status=True,
        initial=False,
        attachments=True,
    )


@_action("steer")
def _steer(x: Explorer, w: World, label: Label) -> None:
    """A steer with attachments: their upload is a wait of its own before the lock."""
    w.start(CALLER, "steer", validate_status=True, attachments=True)


@_action("cancel")
def _cancel(x: Explorer, w: World, label: Label) -> None:
    w.start(CALLER, "cancel")


@_action("stop")
def _stop(x: Explorer, w: World, label: Label) -> None:
    w.start(CALLER, "stop", reason="verify", error="stopped", graceful=True)


@_action("recover")
def _recover(x: Explorer, w: World, label: Label) -> None:
    """RecoverAgentPromptStream with the agent running: FAILED → READY, announced."""
    fired = w.status_fire(ExecutionEvent.recovered)
    announced = any(
        e.name == ExecutionEffect.publish_agent_boot_ready for _, s in fired for e in s.effects
    )
    if not x.exe.is_in("ready") or not announced:
        w.flag(
            "a_recovered_execution_is_ready",
            f"the stream recovery left the execution {x.exe.snapshot().upper()}"
            + ("" if announced else " and announced nothing"),
        )


@_action("leave")
def _leave(x: Explorer, w: World, label: Label) -> None:
    w.leave(w.runs[label[1]])


@_action("answer")
def _answer(x: Explorer, w: World, label: Label) -> None:
    run = w.runs[label[1]]
    step = x.flows.table[run.name][run.label]
    assert isinstance(step, F.Do)
    answer, values = w.answers(run, step, at_once=False)[label[3]]
    w.answer(run, step, answer, values)


@_action("drop")
def _drop(x: Explorer, w: World, label: Label) -> None:
    w.end(w.runs[label[1]])


@_action("wait")
def _wait(x: Explorer, w: World, label: Label) -> None:
    run = w.runs[label[1]]
    step = x.flows.table[run.name][run.label]
    assert isinstance(step, F.Wait)
    if step.until in (F.Cond.SENT, F.Cond.PREDECESSOR_DONE) and not label[2]:
        run.values["_overdue"] = True  # what it waited for did not come within the bound
    w.goto(run, step.happened if label[2] else step.expired)


@_action("tick")
def _tick(x: Explorer, w: World, label: Label) -> None:
    run = w.runs[label[1]]
    w.fire(w.machines[run.gen - 1], PromptGenerationEvent.stall_detected, stalled_for=1.0)


@_action("admit")
def _admit(x: Explorer, w: World, label: Label) -> None:
    w.admit(w.runs[label[1]])


@_action("go")
def _go(x: Explorer, w: World, label: Label) -> None:
    """A step that waited for a lock takes it (settle goes on from there)."""


@_action("crash")
def _crash(x: Explorer, w: World, label: Label) -> None:
    """The execution's own code fails (``CrashGuard.crashed``, runtime/session/crash.py):
    ``execution_crashed``; then, under the lifecycle lock, the live turn lost for good, the
    stream closed and an init under way abandoned (``_fail``); the admission opened and
    every generation's signals set (``_release``); then the execution's tasks end. The
    action is enabled while no flow holds the lifecycle lock: a crash meanwhile waits for
    it (its holder's wait, the steer's request, is bounded by ``steer_dispatch``, 5 s, below
    the release's own bound of 10 s), and nothing the holder reads changes before."""
    w.crashed = True
    w.status_fire(ExecutionEvent.execution_crashed, error="execution crashed")
    if w.machines:
        w.fire(
            w.machines[-1],
            PromptGenerationEvent.stream_lost,
            error="crashed",
            final=True,
            crashed=True,
        )
    if not x.stream.ended:
        w.fire(x.stream, AgentStreamEvent.close_requested)
    if not x.init.ended:
        w.fire(x.init, SessionInitEvent.init_abandoned)
    w.admission = True
    for record in w.gens:
        record[SENT] = record[DONE] = record[OVER] = True
    w.close()
