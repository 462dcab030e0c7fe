"""The execution's own flows in the drivers' flow table (:mod:`acpfsm.statecharts.flows`):
the carrier's redials and their budget, the session init, and the agent's facts as the event
pump hands them in (a terminal event, a handoff, a loss, a redial)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .flowsteps import (
    NEXT,
    Choose,
    Cond,
    Do,
    End,
    Fire,
    Flow,
    Lock,
    On,
    Op,
    Outcome,
    Step,
    Take,
    Wait,
    flow,
    go,
)
from .names import AgentStreamEffect as StreamFx
from .names import AgentStreamEvent as StreamEv
from .names import EffectName, EventName
from .names import ExecutionEvent as ExeEv
from .names import PromptGenerationEffect as GenFx
from .names import PromptGenerationEvent as GenEv
from .names import SessionInitEffect as InitFx
from .names import SessionInitEvent as InitEv
from .vocab import ErrorClass

__all__ = [
    "COMPLETION",
    "EFFECT_FLOWS",
    "HANDOFF",
    "INIT_DOMAINS",
    "LOSS",
    "RECONNECT_BUDGET",
    "REDIAL",
    "REDIALLED",
    "SESSION_INIT",
]

# --- the carrier ---------------------------------------------------------------------------

REDIAL = flow(
    "redial",
    # one dial after the backoff the transport's RedialPolicy gives for the failures so far;
    # success is the transport's StreamReconnected (the agent's facts, below)
    ("backoff", Wait(Cond.TIMER, "redial_backoff", happened=NEXT, expired=NEXT)),
    (
        "dial",
        Do(
            Op.DIAL,
            {"ok": go("done"), "failed": go(NEXT, fatal=False), "refused": go(NEXT, fatal=True)},
        ),
    ),
    (
        "failed",
        Fire(On.STREAM, StreamEv.redial_failed, data=("fatal", "error", "failures"), then="done"),
    ),
    ("done", End(Outcome.DONE)),
    meaning="the AgentStream chart's redial effect",
)

RECONNECT_BUDGET = flow(
    "reconnect_budget",
    ("wait", Wait(Cond.TIMER, "redial_budget", happened=NEXT, expired=NEXT)),
    ("expired", Fire(On.STREAM, StreamEv.reconnect_timed_out, data=("error",))),
    ("done", End(Outcome.DONE)),
    meaning="the AgentStream chart's arm_reconnect_budget effect: the redials are bounded",
)

#: The charts' effects that start a flow in the background (replacing the one running) or
#: end it: ``effect → (flow, start)``; ``start`` False ends it.
EFFECT_FLOWS: Mapping[EffectName, tuple[str, bool]] = {
    StreamFx.redial: ("redial", True),
    StreamFx.stop_redialling: ("redial", False),
    StreamFx.arm_reconnect_budget: ("reconnect_budget", True),
    StreamFx.disarm_reconnect_budget: ("reconnect_budget", False),
}

# --- the session init ---------------------------------------------------------------------

#: The SessionInit chart's working steps: its entry effect → the op and each answer's fact.
#: (The chart names the next step by its entry effect; the init flow goes there.)
_INIT_STEPS: tuple[tuple[EffectName, Op, Mapping[str, tuple[EventName, tuple[str, ...]]]], ...] = (
    (
        InitFx.await_stream,
        Op.AWAIT_STREAM,
        {
            "ok": (InitEv.stream_ready, ("reattach",)),
            "expired": (InitEv.stream_connect_timed_out, ()),
        },
    ),
    (
        InitFx.initialize,
        Op.INITIALIZE,
        {
            "ok": (
                InitEv.initialize_succeeded,
                ("auth_method", "native_session_resume", "prior_session_id"),
            ),
            "failed": (InitEv.initialize_failed, ()),
        },
    ),
    (
        InitFx.authenticate,
        Op.AUTHENTICATE,
        {
            "ok": (InitEv.authenticated, ("native_session_resume", "prior_session_id")),
            "failed": (InitEv.authentication_failed, ()),
        },
    ),
    (
        InitFx.load_session,
        Op.LOAD_SESSION,
        {
            "ok": (InitEv.load_succeeded, ()),
            "failed": (InitEv.load_failed, ("error_class",)),
        },
    ),
    (
        InitFx.new_session,
        Op.NEW_SESSION,
        {
            "ok": (InitEv.new_session_succeeded, ()),
            "failed": (InitEv.new_session_failed, ("error_class",)),
        },
    ),
    (
        InitFx.check_catalog,
        Op.CHECK_CATALOG,
        {
            "ok": (InitEv.catalog_checked, ("snapshot_available", "model_requested")),
        },
    ),
    (
        InitFx.wait_for_catalog,
        Op.WAIT_FOR_CATALOG,
        {
            "ok": (InitEv.catalog_arrived, ()),
            "expired": (InitEv.catalog_wait_timed_out, ()),
        },
    ),
    (
        InitFx.apply_start_model,
        Op.APPLY_START_MODEL,
        {
            "ok": (InitEv.start_model_settled, ()),
            "failed": (InitEv.start_model_failed, ()),
        },
    ),
    (
        InitFx.apply_profile_layer,
        Op.APPLY_PROFILE_LAYER,
        {"ok": (InitEv.profile_layer_applied, ())},
    ),
    (
        InitFx.publish_original_snapshot,
        Op.PUBLISH_ORIGINAL_SNAPSHOT,
        {
            "ok": (InitEv.original_snapshot_published, ()),
        },
    ),
    (
        InitFx.apply_runtime_mode,
        Op.APPLY_RUNTIME_MODE,
        {
            "ok": (InitEv.runtime_mode_applied, ("catalog_known",)),
        },
    ),
    (
        InitFx.apply_runtime_options,
        Op.APPLY_RUNTIME_OPTIONS,
        {
            "ok": (InitEv.runtime_options_applied, ()),
        },
    ),
    (InitFx.settle, Op.SETTLE, {"ok": (InitEv.settlement_requested, ())}),
    (
        InitFx.announce,
        Op.ANNOUNCE,
        {
            "ok": (InitEv.session_announced, ("has_initial_prompt", "resume_context_pending")),
        },
    ),
)
#: The stream wait's answers are the AgentStream chart's facts first (its connection is up,
#: or the wait gave up on it), then the session init's.
_STREAM_FACTS: Mapping[str, EventName] = {
    "await_stream.ok": StreamEv.connect_succeeded,
    "await_stream.expired": StreamEv.connect_timed_out,
}

#: The values each init answer may carry, as ``acpfsm verify`` explores them.
INIT_DOMAINS: Mapping[str, tuple[Any, ...]] = {
    "reattach": (False, True),  # a recovered execution: its agent and session survived
    "auth_method": ("", "m"),
    "native_session_resume": (False, True),
    "prior_session_id": ("", "s"),
    "snapshot_available": (False, True),
    "model_requested": (False, True),
    "catalog_known": (False, True),
    "has_initial_prompt": (False, True),
    "resume_context_pending": (False, True),
}


def _init_flow() -> Flow:
    """One step per working state: the op, then for each answer the chart's fact, whose
    entry effect names the next step (``error_class`` is explored over every class)."""
    branch = tuple((effect, effect) for effect, _, _ in _INIT_STEPS)
    steps: list[tuple[str, Step]] = [
        ("start", Fire(On.INIT, InitEv.init_started, branch=branch, then="done", absent="done")),
    ]
    for effect, op, answers in _INIT_STEPS:
        gos = {answer: go(f"{effect}.{answer}") for answer in answers}
        names = {n for _, fields in answers.values() for n in fields}
        domains = tuple((n, INIT_DOMAINS[n]) for n in sorted(names) if n in INIT_DOMAINS)
        if "error_class" in names:
            domains += (("error_class", tuple(ErrorClass)),)
        bound = (
            "stream_connect"
            if op is Op.AWAIT_STREAM
            else ("catalog_wait" if op is Op.WAIT_FOR_CATALOG else "")
        )
        steps.append((effect, Do(op, gos, bound=bound, domains=domains)))
        for answer, (fact, fields) in answers.items():
            label = f"{effect}.{answer}"
            if label in _STREAM_FACTS:
                steps.append((label, Fire(On.STREAM, _STREAM_FACTS[label])))
                label = f"{label}.init"
            steps.append(
                (
                    label,
                    Fire(On.INIT, fact, data=("error", *fields), branch=branch, then="done"),
                )
            )
    steps += [
        ("done", End(Outcome.DONE)),
        ("abandon", Fire(On.INIT, InitEv.init_abandoned, then="left", absent="left")),
        ("left", End(Outcome.LEFT)),
    ]
    return flow(
        "session_init",
        *steps,
        cancelled="abandon",
        meaning="InitializeAndPromptWithLayers (kandev lifecycle/session.go)",
    )


SESSION_INIT = _init_flow()

# --- the agent's facts (the event pump) ---------------------------------------------------

COMPLETION = flow(
    "completion",
    # handleCompleteEvent: claim once per generation, or end a wakeup turn
    ("lock", Take(Lock.LIFECYCLE)),
    (
        "claim",
        Fire(
            On.STAMPED,
            GenEv.completion_received,
            data=("is_error", "cancel_release", "error", "stop_reason", "shutting_down"),
            bind=True,
            branch=((GenFx.unclaimed, "unclaimed"),),
            then="done",
            absent="unclaimed",
        ),
    ),
    # a generation-0 end that no generation claimed ends a wakeup turn (R27)
    ("unclaimed", Choose("unstamped", yes=NEXT, no="done")),
    ("wakeup", Choose("is_error", yes="wakeup_failed", no=NEXT)),
    (
        "wakeup_completed",
        Fire(On.EXECUTION, ExeEv.wakeup_turn_completed, data=("stop_reason",), then="done"),
    ),
    (
        "wakeup_failed",
        Fire(On.EXECUTION, ExeEv.wakeup_turn_failed, data=("error", "shutting_down"), then="done"),
    ),
    ("done", End(Outcome.DONE)),
    meaning="handleCompleteEvent (kandev manager_events.go)",
)

HANDOFF = flow(
    "handoff",
    # handlePromptHandoffEvent: only the owning generation's waiter is released (R22)
    ("unstamped", Choose("unstamped", yes="done", no=NEXT)),
    ("handoff", Fire(On.STAMPED, GenEv.handoff_received, locked=True, then="done", absent="done")),
    ("done", End(Outcome.DONE)),
    meaning="handlePromptHandoffEvent (kandev manager_events.go)",
)

LOSS = flow(
    "loss",
    # handleStreamDisconnect: the AgentStream chart says whether the loss is announced (a
    # clean close is redialled silently, kandev H9) and whether it is final
    (
        "stream",
        Fire(
            On.STREAM,
            StreamEv.connection_lost,
            data=("redialable", "clean", "error:raw_error"),
            branch=((StreamFx.announce_loss, "announce"),),
            then="done",
            absent="done",
        ),
    ),
    ("announce", Do(Op.FLUSH_PARTIAL)),
    ("lock", Take(Lock.LIFECYCLE)),
    (
        "generation",
        Fire(
            On.CURRENT,
            GenEv.stream_lost,
            data=("error", "final"),
            bind=True,
            branch=((GenFx.claim_disconnect, "claimed"),),
            then="unclaimed",
            absent="unclaimed",
        ),
    ),
    ("claimed", Choose("exited", yes="exited", no="done")),
    ("unclaimed", Choose("exited", yes="exited", no="lost")),
    (
        "exited",
        Fire(
            On.EXECUTION,
            ExeEv.process_exited,
            data=("exit_code", "shutting_down", "error:exit_error"),
            then="done",
        ),
    ),
    (
        "lost",
        Fire(
            On.EXECUTION,
            ExeEv.stream_lost,
            data=("error",),
            fixed=(("generation", 0),),
            then="done",
        ),
    ),
    ("done", End(Outcome.DONE)),
    meaning="handleStreamDisconnect (kandev manager_events.go)",
)

REDIALLED = flow(
    "redialled",
    (
        "stream",
        Fire(On.STREAM, StreamEv.redial_succeeded, data=("session_id", "attempts"), absent="done"),
    ),
    ("done", End(Outcome.DONE)),
    meaning="the transport's StreamReconnected",
)

#: Every flow, by name.
