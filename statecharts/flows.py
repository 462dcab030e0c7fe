"""The drivers' flows as declared data: what each step of a prompt, a steer, a cancel, a
redial, the session init, a stop and the agent's facts sends, waits for, fires and where
each answer leads. Plain data next to the charts it drives; no I/O, no clock.

Theory of operation
-------------------
A chart decides what one fact means. A *flow* is the order around those decisions: the
steps one caller (or one of the execution's own tasks) takes, one after another, between
the charts' steps. Each flow is a table of labelled steps (:class:`Flow`); a step is one
of:

* :class:`Fire` - fire an event at a chart of the execution (the flow's own generation, the
  predecessor it waits behind, the current generation, the execution, the stream, the
  session init) and go where the first of the named effects the step returned says
  (``branch``), else to ``then``; ``absent`` when that chart has ended or there is none.
* :class:`Do` - an operation on the world (a request to the agent, a dial, a local chore such
  as the history): its *answer* picks the next step (:class:`Go`); ``bound`` (a field of
  the runtime's ``Timeouts``) makes expiry the answer ``expired``.
* :class:`Wait` - wait for a signal (a generation's ``done``, ``sent``, ``returned`` or
  ``turn_over``, the admission, the carrier, a timer) with a bound.
* :class:`Check` - the same signal, read without waiting.
* :class:`Choose` - a flow value (a caller's option, or what an answer carried) picks the
  way: ``validate_status``, ``dispatch_only``, ``initial`` …
* :class:`Admit` - BeginPrompt: the current generation superseded, a new one admitted.
* :class:`Take` / :class:`Give` - the prompt lock or the lifecycle lock, held across steps.
* :class:`Signal` - set one of the generation's signals.
* :class:`Spawn` - start another flow in the background.
* :class:`End` - the flow is over, with an :class:`Outcome` its caller turns into a result
  or a typed error.

:data:`FLOWS` names every flow, and :data:`EFFECT_FLOWS` the charts' effects that start or
end one (a redial, the reconnect budget). Two interpreters run these tables and nothing
else: the runtime's (:mod:`acpfsm.runtime.session.interpreter`), which performs each
``Do`` with the transports and waits on anyio; and ``acpfsm verify``'s, which answers every
``Do``, ``Wait`` and timer with each of the environment's possible answers in turn. A flow
step that changes here changes for both.

Every event a ``Fire`` names is checked against its chart, every effect a ``branch`` names
against the chart's declared effects, and every label against the flow's steps, when the
tables are validated (:func:`validate`, run by the test suite and by both interpreters).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .flows_task import (
    COMPLETION,
    EFFECT_FLOWS,
    HANDOFF,
    INIT_DOMAINS,
    LOSS,
    RECONNECT_BUDGET,
    REDIAL,
    REDIALLED,
    SESSION_INIT,
)
from .flowsteps import (
    NEXT,
    RETURNED_RESULTS,
    Admit,
    Check,
    Choose,
    Cond,
    Do,
    End,
    Fire,
    Flow,
    Give,
    Go,
    Lock,
    On,
    Op,
    Outcome,
    Released,
    Signal,
    Spawn,
    Step,
    Take,
    Wait,
    chart_of,
    data_key,
    flow,
    go,
    targets,
)
from .names import AgentStreamEvent as StreamEv
from .names import EffectName
from .names import ExecutionEffect as ExeFx
from .names import ExecutionEvent as ExeEv
from .names import PromptGenerationEffect as GenFx
from .names import PromptGenerationEvent as GenEv
from .names import SessionInitEffect as InitFx
from .names import SessionInitEvent as InitEv

__all__ = [
    "CANCEL",
    "COMPLETION",
    "EFFECT_FLOWS",
    "FLOWS",
    "HANDOFF",
    "INIT_DOMAINS",
    "LOSS",
    "NEXT",
    "PROMPT",
    "RECONNECT_BUDGET",
    "REDIAL",
    "REDIALLED",
    "RETURNED_RESULTS",
    "SESSION_INIT",
    "STEER",
    "STOP",
    "Admit",
    "Check",
    "Choose",
    "Cond",
    "Do",
    "End",
    "Fire",
    "Flow",
    "Give",
    "Go",
    "Lock",
    "On",
    "Op",
    "Outcome",
    "Released",
    "Signal",
    "Spawn",
    "Step",
    "Take",
    "Wait",
    "chart_of",
    "data_key",
    "flow",
    "flow_effects",
    "go",
    "validate",
]

# --- the flows ---------------------------------------------------------------------------

_PG = On.GENERATION

# the flow effects a cancel acts on after session/cancel's answer or its wait's expiry
# (CancelAgent, escalateStuckCancel), in the order they are looked for
_CANCEL_FOLLOW = (
    (GenFx.escalate_idle, "escalate_idle"),
    (GenFx.report_escalation, "escalated"),
    (GenFx.await_waiter, "await_waiter"),
    (GenFx.arm_cancel_wait, "arm_cancel_wait"),
)
_CANCEL_ERROR = "agent stream disconnected: the cancel got no answer"


def _cancel_answers(**extra: Go) -> dict[str, Go]:
    """session/cancel's answers: acknowledged; not acknowledged (the carrier gave the turn
    up); the stream is gone (the request never got an answer); anything else fails."""
    return {
        "acknowledged": go("answered", acknowledged=True, stream_disconnected=False),
        "unacknowledged": go("answered", acknowledged=False, stream_disconnected=False),
        "disconnected": go(
            "answered", acknowledged=True, stream_disconnected=True, error=_CANCEL_ERROR
        ),
        "failed": go("failed"),
        **extra,
    }


CANCEL = flow(
    "cancel",
    # a cancel of an execution the app stopped (or is stopping) says so
    ("status", Fire(On.EXECUTION, ExeEv.cancel_requested, then=NEXT, absent="stopped")),
    # CancelAgent: the current generation's chart decides (a prompt not yet sent is
    # withdrawn there and then; one in flight is cancelled once its request is answered)
    (
        "request",
        Fire(
            On.CURRENT,
            GenEv.cancel_requested,
            locked=True,
            bind=True,
            branch=(
                (GenFx.await_dispatch, "await_dispatch"),
                (GenFx.send_cancel, "send"),
                (GenFx.cancel_stopped, "stopped"),
            ),
            then="done",
            absent="send_idle",
        ),
    ),
    # no prompt ever ran: the cancel goes out, nothing waits
    (
        "send_idle",
        Do(Op.SEND_CANCEL, {**{a: Go("done") for a in _cancel_answers()}, "failed": go("failed")}),
    ),
    ("await_dispatch", Wait(Cond.SENT, "cancel_wait", happened=NEXT, expired="send_wait_over")),
    (
        "requested_again",
        Fire(
            _PG,
            GenEv.cancel_requested,
            locked=True,
            branch=((GenFx.send_cancel, "send"),),
            then="done",
        ),
    ),
    (
        "send_wait_over",
        Fire(
            _PG,
            GenEv.send_wait_timed_out,
            locked=True,
            branch=((GenFx.send_cancel, "send"),),
            then="done",
        ),
    ),
    ("send", Do(Op.SEND_CANCEL, _cancel_answers())),
    (
        "answered",
        Fire(
            _PG,
            GenEv.cancel_answered,
            data=("acknowledged", "stream_disconnected", "error"),
            locked=True,
            branch=_CANCEL_FOLLOW,
            then="done",
        ),
    ),
    (
        "escalate_idle",
        Fire(
            On.EXECUTION,
            ExeEv.cancel_escalated,
            data=("generation",),
            then="escalated",
            absent="stopped",
        ),
    ),
    (
        "arm_cancel_wait",
        Wait(Cond.TURN_OVER, "cancel_wait", happened="done", expired="cancel_wait_over"),
    ),
    (
        "cancel_wait_over",
        Fire(_PG, GenEv.cancel_wait_timed_out, locked=True, branch=_CANCEL_FOLLOW, then="done"),
    ),
    # escalateStuckCancel: the released waiter is given ≤ 2 s to return; the cleanup runs even
    # when the caller leaves meanwhile (R17)
    (
        "await_waiter",
        Wait(
            Cond.RETURNED,
            "cancel_escalation",
            happened="waiter_returned",
            expired="escalation_over",
            cancelled="after_waiter",
        ),
    ),
    ("after_waiter", Check(Cond.RETURNED, yes="waiter_returned", no="escalation_over")),
    ("waiter_returned", Fire(_PG, GenEv.waiter_returned, locked=True, then="escalated")),
    ("escalation_over", Fire(_PG, GenEv.escalation_wait_timed_out, locked=True, then="escalated")),
    # the end: unless the app's stop came meanwhile (then that is what happened)
    (
        "escalated",
        Fire(On.EXECUTION, ExeEv.cancel_requested, then="escalated_end", absent="stopped"),
    ),
    ("escalated_end", End(Outcome.CANCEL_ESCALATED)),
    ("done", Fire(On.EXECUTION, ExeEv.cancel_requested, then="done_end", absent="stopped")),
    ("done_end", End(Outcome.DONE)),
    ("failed", Fire(On.EXECUTION, ExeEv.cancel_requested, then="failed_end", absent="stopped")),
    ("failed_end", End(Outcome.CANCEL_FAILED)),
    ("stopped", End(Outcome.STOPPED)),
    # the background cancel of a turn whose waiter left: the request bounded, nobody told
    (
        "send_abandoned",
        Do(Op.SEND_CANCEL, _cancel_answers(expired=go("failed")), bound="cancel_wait"),
    ),
    entries={"abandoned": "send_abandoned"},
    meaning="CancelAgent and escalateStuckCancel (kandev manager_interaction.go)",
)

STEER = flow(
    "steer",
    ("admission", Wait(Cond.ADMISSION)),
    ("status", Choose("validate_status", yes=NEXT, no="precheck")),
    (
        "check",
        Fire(
            On.EXECUTION,
            ExeEv.prompt_requested,
            branch=((ExeFx.refuse_prompt, "not_ready"),),
            absent="not_ready",
        ),
    ),
    # before the attachments are uploaded: nothing to steer into is cheap to find out (the
    # selection under the lifecycle lock decides, R1)
    (
        "precheck",
        Fire(
            On.CURRENT,
            GenEv.steer_requested,
            branch=((GenFx.dispatch_steer, "materialize"), (GenFx.steer_refused, "not_dispatched")),
            then="not_dispatched",
            absent="not_dispatched",
        ),
    ),
    ("materialize", Do(Op.MATERIALIZE, {"ok": go(), "failed": go("attachment_failed")})),
    ("lock", Take(Lock.LIFECYCLE)),
    (
        "select",
        Fire(
            On.CURRENT,
            GenEv.steer_requested,
            bind=True,
            branch=((GenFx.dispatch_steer, "compose"), (GenFx.steer_refused, "not_dispatched")),
            then="not_dispatched",
            absent="not_dispatched",
        ),
    ),
    (
        "compose",
        Fire(
            On.INIT,
            InitEv.prompt_composed,
            branch=((InitFx.inject_resume_context, "inject"),),
            then="send",
            absent="send",
        ),
    ),
    ("inject", Do(Op.INJECT_RESUME_CONTEXT)),
    (
        "send",
        Do(
            Op.SEND_STEER,
            {
                "ok": go(),
                "not_dispatched": go("not_dispatched"),
                "expired": go("timed_out"),
                "failed": go("steer_failed"),
            },
            bound="steer_dispatch",
        ),
    ),
    ("steered", Fire(_PG, GenEv.steered)),
    ("unlock", Give(Lock.LIFECYCLE)),
    ("history", Do(Op.APPEND_USER)),
    ("on_dispatched", Do(Op.DISPATCHED)),
    ("dispatched", End(Outcome.DISPATCHED)),
    ("not_ready", End(Outcome.NOT_READY)),
    ("not_dispatched", End(Outcome.STEER_NOT_DISPATCHED)),
    ("attachment_failed", End(Outcome.STEER_ATTACHMENT_FAILED)),
    ("timed_out", End(Outcome.STEER_TIMED_OUT)),
    ("steer_failed", End(Outcome.STEER_FAILED)),
    meaning="SendPromptSteerWithDispatchCallback (kandev lifecycle/session.go, seed D6-D7)",
)

# the prompt request's answers (triggerPrompt): accepted; the stream was not connected (the
# request was not written); written, and the stream dropped before its answer (the agent
# may have it: never sent again, kandev H2); any other error (``cancel_release`` when the
# carrier released it on a cancel)
_SEND = {
    "accepted": go("accepted"),
    "not_connected": go("unreachable"),
    "lost_while_waiting": go("send_failed"),
    "failed": go("send_failed"),
    "cancel_release": go("send_failed_release"),
}
# the resend after a reconnect waits again for the carrier when the request was not written
# (retryPromptAfterReconnect); one written and lost is not sent again either (kandev's loop
# re-sent it, H2: the agent may have it; found by acpfsm verify's dispatched_at_most_once)
_RESEND = {**_SEND, "not_connected": go("still_unreachable")}

PROMPT = flow(
    "prompt",
    ("start", Choose("initial", yes="inline_context", no="admission")),
    # InitializeAndPrompt: the initial prompt carries the resume context inline
    ("inline_context", Do(Op.INJECT_RESUME_CONTEXT, {"ok": go("lock")})),
    ("admission", Wait(Cond.ADMISSION)),
    ("lock", Take(Lock.PROMPT)),
    # sendPrompt's barrier (seed D8): a dispatch-only predecessor is waited for ≤ 10 s
    (
        "barrier",
        Fire(
            On.PREDECESSOR,
            GenEv.successor_admitting,
            branch=((GenFx.hold_barrier, "barrier_wait"),),
            then="status",
            absent="status",
        ),
    ),
    (
        "barrier_wait",
        Wait(Cond.PREDECESSOR_DONE, "pending_dispatched_prompt", happened="status", expired=NEXT),
    ),
    (
        "barrier_over",
        Fire(
            On.PREDECESSOR,
            GenEv.barrier_timed_out,
            branch=((GenFx.barrier_failed, "barrier_failed"),),
            then="status",
        ),
    ),
    ("status", Choose("validate_status", yes=NEXT, no="admit")),
    (
        "check",
        Fire(
            On.EXECUTION,
            ExeEv.prompt_requested,
            branch=((ExeFx.refuse_prompt, "not_ready"),),
            absent="not_ready",
        ),
    ),
    ("admit", Admit(refused="not_ready", cancelled="abandon")),
    ("initial", Choose("initial", yes=NEXT, no="history")),
    ("admitted", Fire(On.INIT, InitEv.initial_prompt_admitted, absent="history")),
    ("history", Do(Op.APPEND_USER)),
    # buildEffectivePrompt: the session init's chart says whether the deferred resume
    # context goes into this prompt
    (
        "compose",
        Fire(
            On.INIT,
            InitEv.prompt_composed,
            branch=((InitFx.inject_resume_context, "inject"),),
            then="materialize",
            absent="materialize",
        ),
    ),
    ("inject", Do(Op.INJECT_RESUME_CONTEXT)),
    ("materialize", Do(Op.MATERIALIZE, {"ok": go("dispatch"), "failed": go(NEXT)})),
    (
        "materialization_failed",
        Fire(
            _PG,
            GenEv.materialization_failed,
            data=("error",),
            branch=((GenFx.release_waiter, "attachment_failed"),),
            then="result",  # cancelled meanwhile: that is the result
        ),
    ),
    # triggerPrompt → dispatchPrompt
    ("dispatch", Fire(_PG, GenEv.dispatch_started, branch=((GenFx.skip_dispatch, "result"),))),
    ("send", Do(Op.SEND_PROMPT, _SEND, signal=Cond.SENT)),
    ("accepted", Fire(_PG, GenEv.dispatch_accepted)),
    ("on_dispatched", Do(Op.DISPATCHED)),
    ("dispatch_only", Choose("dispatch_only", yes="dispatched", no=NEXT)),
    # waitForPromptDone, the stall watchdog ticking meanwhile
    ("wait", Wait(Cond.DONE, happened="result", ticks=GenEv.stall_detected)),
    ("result", End(Outcome.RESULT)),
    ("dispatched", End(Outcome.DISPATCHED)),
    (
        "send_failed",
        Fire(
            _PG,
            GenEv.dispatch_failed,
            data=("error",),
            fixed=(("cancel_release", False),),
            then="dispatch_failed",
        ),
    ),
    (
        "send_failed_release",
        Fire(
            _PG,
            GenEv.dispatch_failed,
            data=("error",),
            fixed=(("cancel_release", True),),
            then="dispatch_cancel_escalated",
        ),
    ),
    # retryPromptAfterReconnect: the chart decides whether to wait for the carrier at all
    (
        "unreachable",
        Fire(
            _PG,
            GenEv.dispatch_unreachable,
            data=("reconnectable", "error"),
            branch=((GenFx.wait_for_carrier, "carrier"), (GenFx.release_waiter, "dispatch_failed")),
            then="released",
        ),
    ),
    # someone else released the waiter meanwhile (the turn ended before the request's
    # answer, R23; a cancel escalation): a returned result counts as dispatched
    ("released", Wait(Cond.DONE)),
    ("released_result", Released(returned="on_dispatched", raised="result")),
    ("carrier", Signal(Cond.SENT)),  # not at the agent: a cancel now withdraws it
    (
        "carrier_wait",
        Wait(Cond.CARRIER, "reconnect_retry", happened=NEXT, expired="retry_over"),
    ),
    ("redispatch", Fire(_PG, GenEv.dispatch_started, branch=((GenFx.skip_dispatch, "result"),))),
    ("resend", Do(Op.SEND_PROMPT, _RESEND, signal=Cond.SENT)),
    (
        "still_unreachable",
        Fire(
            _PG,
            GenEv.dispatch_unreachable,
            data=("error",),
            fixed=(("reconnectable", True),),
            then="carrier_wait",
        ),
    ),
    (
        "retry_over",
        Fire(
            _PG,
            GenEv.reconnect_timed_out,
            data=("error",),
            branch=((GenFx.release_waiter, "dispatch_failed"),),
            then="result",  # withdrawn meanwhile: that is the result
        ),
    ),
    ("not_ready", End(Outcome.NOT_READY)),
    ("barrier_failed", End(Outcome.BARRIER_FAILED)),
    ("attachment_failed", End(Outcome.ATTACHMENT_FAILED)),
    ("dispatch_failed", End(Outcome.DISPATCH_FAILED)),
    ("dispatch_cancel_escalated", End(Outcome.DISPATCH_CANCEL_ESCALATED)),
    # the caller left (its cancel scope, or ``timeout=``): the chart withdraws the prompt or
    # has its turn cancelled at the agent in the background
    (
        "abandon",
        Fire(
            _PG,
            GenEv.waiter_abandoned,
            locked=True,
            branch=((GenFx.send_cancel, "cancel_abandoned"),),
            then="left",
        ),
    ),
    ("cancel_abandoned", Spawn("cancel", "abandoned")),
    ("left", End(Outcome.LEFT)),
    on_exit=(Cond.SENT, Cond.RETURNED),
    meaning="sendPrompt (kandev lifecycle/session.go)",
)

# --- the stop ------------------------------------------------------------------------------

STOP = flow(
    "stop",
    ("permissions", Do(Op.CLOSE_PERMISSIONS)),
    (
        "status",
        Fire(
            On.EXECUTION,
            ExeEv.stop_requested,
            data=("reason", "error"),
            locked=True,
            then="graceful",
            absent="close_stream",
        ),
    ),
    # already STOPPED (R32): close the stream too
    ("close_stream", Fire(On.STREAM, StreamEv.close_requested)),
    ("graceful", Choose("graceful", yes=NEXT, no="end")),
    # a graceful agent stop first (agentctl's /api/v1/stop); its failure is only logged
    (
        "stop_agent",
        Do(Op.STOP_AGENT, {"ok": go(), "failed": go(), "expired": go()}, bound="cancel_wait"),
    ),
    ("end", Do(Op.END_TASKS)),
    ("finished", Wait(Cond.FINISHED)),
    ("stopped", End(Outcome.STOPPED)),
    # the caller left during the graceful stop: the execution's tasks still end
    ("end_left", Do(Op.END_TASKS)),
    ("left", End(Outcome.LEFT)),
    cancelled="end_left",
    meaning="StopAgentWithReason (kandev manager_lifecycle.go)",
)

FLOWS: Mapping[str, Flow] = {
    f.name: f
    for f in (
        PROMPT,
        STEER,
        CANCEL,
        REDIAL,
        RECONNECT_BUDGET,
        SESSION_INIT,
        STOP,
        COMPLETION,
        HANDOFF,
        LOSS,
        REDIALLED,
    )
}


# --- validation --------------------------------------------------------------------------


def validate(charts: Mapping[str, Any]) -> list[str]:
    """Every problem of the tables against the compiled ``charts`` (chart name → compiled
    chart): an unknown label, event or effect, a step nothing reaches, a flow a spawn or an
    effect names that does not exist. Empty when all is well."""
    problems: list[str] = []
    for f in FLOWS.values():
        reached: set[str] = set(f.entries.values())
        if f.cancelled:
            reached.add(f.cancelled)
        for label, step in f.steps.items():
            for to in targets(step, label, f):
                if to not in f.steps:
                    problems.append(f"{f.name}.{label}: goes to unknown step {to!r}")
                reached.add(to)
            if isinstance(step, Fire):
                chart = chart_of(step.on)
                compiled = charts[chart]
                if step.event not in compiled.events:
                    problems.append(f"{f.name}.{label}: {chart} has no event {step.event!r}")
                effects = compiled.effect_names
                for effect, _ in step.branch:
                    if effect not in effects:
                        problems.append(f"{f.name}.{label}: {chart} has no effect {effect!r}")
            elif isinstance(step, Spawn):
                if step.flow not in FLOWS or step.entry not in FLOWS[step.flow].entries:
                    problems.append(f"{f.name}.{label}: spawns unknown {step.flow}:{step.entry}")
            elif isinstance(step, Do) and step.bound and "expired" not in step.answers:
                problems.append(f"{f.name}.{label}: a bounded op needs an 'expired' answer")
        for label in f.steps:
            if label not in reached:
                problems.append(f"{f.name}.{label}: no step goes here")
    for effect, (name, _) in EFFECT_FLOWS.items():
        if name not in FLOWS:
            problems.append(f"effect {effect} names unknown flow {name}")
    return problems


def flow_effects(chart: str) -> frozenset[EffectName]:
    """The effects of ``chart`` that a flow acts on (a ``branch`` names them), and those
    that start or end a flow (:data:`EFFECT_FLOWS`): what the flows perform, not a
    handler."""
    names = {
        effect
        for f in FLOWS.values()
        for step in f.steps.values()
        if isinstance(step, Fire) and chart_of(step.on) == chart
        for effect, _ in step.branch
    }
    if chart == "agent_stream":
        names |= set(EFFECT_FLOWS)
    return frozenset(names)
