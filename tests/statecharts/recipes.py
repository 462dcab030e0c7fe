"""How to bring each chart into each of its states, and the event data that selects each
guarded branch. Shared by the exhaustive transition sweep and the scenario walks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from acpfsm.statecharts import (
    AgentStream,
    Chart,
    ErrorClass,
    Execution,
    PromptGeneration,
    SessionInit,
    StartModelPolicy,
)

Step = tuple[str, dict[str, Any]]

# --- SessionInit ------------------------------------------------------------------------

_TO_HANDSHAKE: list[Step] = [("stream_ready", {})]
_TO_CREATING: list[Step] = [*_TO_HANDSHAKE, ("initialize_succeeded", {})]
_TO_LOADING: list[Step] = [
    *_TO_HANDSHAKE,
    ("initialize_succeeded", {"native_session_resume": True, "prior_session_id": "s-1"}),
]
_TO_AWAITING: list[Step] = [*_TO_CREATING, ("new_session_succeeded", {})]
_TO_WAITING: list[Step] = [
    *_TO_AWAITING,
    ("catalog_checked", {"snapshot_available": False, "model_requested": True}),
]
_TO_POLICY: list[Step] = [*_TO_AWAITING, ("catalog_checked", {})]
_TO_PROFILE: list[Step] = [*_TO_POLICY, ("start_model_settled", {})]
_TO_ORIGINAL: list[Step] = [*_TO_PROFILE, ("profile_layer_applied", {})]
_TO_MODE: list[Step] = [*_TO_ORIGINAL, ("original_snapshot_published", {})]
_TO_OPTIONS: list[Step] = [*_TO_MODE, ("runtime_mode_applied", {"catalog_known": True})]
_TO_SETTLING: list[Step] = [*_TO_OPTIONS, ("runtime_options_applied", {})]
_TO_ANNOUNCING: list[Step] = [*_TO_SETTLING, ("settlement_published", {})]

SESSION_INIT_RECIPES: dict[str, list[Step]] = {
    "connecting_stream": [],
    "initializing": [],
    "handshaking": _TO_HANDSHAKE,
    "loading": _TO_LOADING,
    "creating": _TO_CREATING,
    "awaiting_catalog": _TO_AWAITING,
    "waiting_for_catalog": _TO_WAITING,
    "applying_start_model": _TO_POLICY,
    "applying_profile_layer": _TO_PROFILE,
    "original_snapshot": _TO_ORIGINAL,
    "applying_runtime_mode": _TO_MODE,
    "applying_runtime_options": _TO_OPTIONS,
    "settling": _TO_SETTLING,
    "announcing": _TO_ANNOUNCING,
}

# --- StartModelPolicy -------------------------------------------------------------------

START_MODEL_RECIPES: dict[str, list[Step]] = {
    "evaluating": [],
    "setting_requested": [("policy_evaluated", {"advertised": ["m"]})],
    "setting_fallback": [("policy_evaluated", {"advertised": ["fb"]})],
}

# --- PromptGeneration ---------------------------------------------------------------------

PROMPT_RECIPES: dict[str, list[Step]] = {
    "admitted": [],
    "reconnecting": [("dispatch_unreachable", {"reconnectable": True})],
    "dispatched": [("dispatch_accepted", {})],
    "awaited": [("dispatch_accepted", {})],
    "stall_reported": [("dispatch_accepted", {}), ("stall_detected", {})],
    "unawaited": [("dispatch_accepted", {})],
    "handed_off": [("dispatch_accepted", {}), ("handoff_received", {})],
    "completed": [("dispatch_accepted", {}), ("completion_received", {})],
    "failed": [("dispatch_accepted", {}), ("completion_received", {"is_error": True})],
    "undelivered": [("dispatch_failed", {})],
    "cancel_escalated": [("dispatch_accepted", {}), ("escalated", {})],
    "disconnected": [("dispatch_accepted", {}), ("stream_lost", {})],
    "superseded": [("superseded_by_successor", {})],
}

# --- Execution ----------------------------------------------------------------------------

EXECUTION_RECIPES: dict[str, list[Step]] = {
    "running": [],
    "starting": [("start_requested", {})],
    "ready": [("start_requested", {}), ("booted", {})],
    "completed": [("process_exited", {"exit_code": 0})],
    "failed": [("process_exited", {"exit_code": 1})],
}

# --- AgentStream ----------------------------------------------------------------------------

STREAM_RECIPES: dict[str, list[Step]] = {
    "disconnected": [],
    "connecting": [("connect_started", {})],
    "connected": [("connect_started", {}), ("connect_succeeded", {})],
    "reconnecting": [
        ("connect_started", {}),
        ("connect_succeeded", {}),
        ("connection_lost", {"reconnectable": True}),
    ],
}

#: Event data tried, in order, to select each guarded branch of an event.
GUARD_DATA: dict[str, list[dict[str, Any]]] = {
    # SessionInit
    "initialize_succeeded": [{}, {"native_session_resume": True, "prior_session_id": "s-1"}],
    "load_failed": [
        {"error_class": ErrorClass.TRANSPORT_DEAD},
        {"error_class": ErrorClass.SESSION_UNKNOWN},
        {"error_class": ErrorClass.INCONCLUSIVE},
    ],
    "catalog_checked": [{}, {"snapshot_available": False, "model_requested": True}],
    "runtime_mode_applied": [{"catalog_known": True}, {"catalog_known": False}],
    "session_announced": [{"has_initial_prompt": True}, {"resume_context": True}, {}],
    # StartModelPolicy (fresh instances use model "m", fallback "fb")
    "policy_evaluated": [
        {"advertised": []},
        {"advertised": ["m"]},
        {"advertised": ["fb"]},
        {"advertised": ["other"]},
    ],
    "set_model_failed": [{"method_not_found": True}, {}],
    # PromptGeneration
    "dispatch_failed": [{"cancel_release": True}, {}],
    "dispatch_unreachable": [{"reconnectable": True}, {}],
    "cancel_answered": [{"acknowledged": False}, {"stream_disconnected": True}, {}],
    "completion_received": [
        {"startup_generation": 99},
        {"cancel_release": True},
        {"is_error": True},
        {},
    ],
    # Execution
    "turn_failed": [{"shutting_down": True}, {}],
    "process_exited": [{"shutting_down": True}, {"exit_code": 0}, {"exit_code": 1}],
    # AgentStream
    "connection_lost": [{"reconnectable": True}, {}],
    "connect_failed": [{"reconnectable": True}, {}],
    "reconnect_requested": [{"reconnectable": True}],
}

Factory = Callable[[], Chart]


def _start_model_factory(**kw: Any) -> Factory:
    return lambda: StartModelPolicy(model="m", fallback_model="fb", **kw)


#: chart class → (factories to try, recipes)
CHARTS: dict[type[Chart], tuple[list[Factory], dict[str, list[Step]]]] = {
    SessionInit: ([SessionInit], SESSION_INIT_RECIPES),
    StartModelPolicy: (
        [
            _start_model_factory(),
            _start_model_factory(auto_fallback=True),
            lambda: StartModelPolicy(model=""),
            lambda: StartModelPolicy(model="m"),
        ],
        START_MODEL_RECIPES,
    ),
    PromptGeneration: (
        [lambda: PromptGeneration(1), lambda: PromptGeneration(1, dispatch_only=True)],
        PROMPT_RECIPES,
    ),
    Execution: ([Execution], EXECUTION_RECIPES),
    AgentStream: ([AgentStream], STREAM_RECIPES),
}


def walk(chart: Chart, steps: list[Step]) -> Chart:
    for event, data in steps:
        chart.fire(event, **data)
    return chart
