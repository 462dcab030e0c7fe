"""How to bring each chart into each of its states, and the event data that selects each
guarded branch. Shared by the exhaustive transition sweep, the scenario walks and the
engine-agreement property test."""

from __future__ import annotations

from typing import Any

from acpfsm.statecharts import (
    AgentStream,
    Chart,
    ChartMachine,
    ConfigSettlement,
    Crash,
    DurableRecord,
    ErrorClass,
    Execution,
    FirstActivity,
    NamespaceAdoption,
    PoolMember,
    PromptGeneration,
    SessionInit,
    StartModelPolicy,
    StartupRecovery,
    Step,
)

Recipe = list[tuple[str, dict[str, Any]]]

# --- SessionInit ------------------------------------------------------------------------

_TO_CONNECTING: Recipe = [("init_started", {})]
_TO_HANDSHAKE: Recipe = [*_TO_CONNECTING, ("stream_ready", {})]
_TO_CREATING: Recipe = [*_TO_HANDSHAKE, ("initialize_succeeded", {})]
_TO_LOADING: Recipe = [
    *_TO_HANDSHAKE,
    ("initialize_succeeded", {"native_session_resume": True, "prior_session_id": "s-1"}),
]
_TO_AUTHENTICATING: Recipe = [*_TO_HANDSHAKE, ("initialize_succeeded", {"auth_method": "m"})]
_TO_AWAITING: Recipe = [*_TO_CREATING, ("new_session_succeeded", {})]
_TO_WAITING: Recipe = [
    *_TO_AWAITING,
    ("catalog_checked", {"snapshot_available": False, "model_requested": True}),
]
_TO_POLICY: Recipe = [*_TO_AWAITING, ("catalog_checked", {})]
_TO_PROFILE: Recipe = [*_TO_POLICY, ("start_model_settled", {})]
_TO_ORIGINAL: Recipe = [*_TO_PROFILE, ("profile_layer_applied", {})]
_TO_MODE: Recipe = [*_TO_ORIGINAL, ("original_snapshot_published", {})]
_TO_OPTIONS: Recipe = [*_TO_MODE, ("runtime_mode_applied", {"catalog_known": True})]
_TO_SETTLING: Recipe = [*_TO_OPTIONS, ("runtime_options_applied", {})]
_TO_ANNOUNCING: Recipe = [*_TO_SETTLING, ("settlement_requested", {})]

SESSION_INIT_RECIPES: dict[str, Recipe] = {
    "pending": [],
    "initializing": _TO_CONNECTING,
    "connecting_stream": _TO_CONNECTING,
    "handshaking": _TO_HANDSHAKE,
    "authenticating": _TO_AUTHENTICATING,
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
    "prompting": [*_TO_ANNOUNCING, ("session_announced", {"has_initial_prompt": True})],
    "sending": [*_TO_ANNOUNCING, ("session_announced", {"has_initial_prompt": True})],
    "admitted": [
        *_TO_ANNOUNCING,
        ("session_announced", {"has_initial_prompt": True}),
        ("initial_prompt_admitted", {}),
    ],
    "booted": [*_TO_ANNOUNCING, ("session_announced", {})],
    "ready": [*_TO_ANNOUNCING, ("session_announced", {})],
    "resume_context_pending": [
        *_TO_ANNOUNCING,
        ("session_announced", {"resume_context_pending": True}),
    ],
}

# --- StartModelPolicy (constants: requested "m", fallback "fb") ----------------------------

START_MODEL_RECIPES: dict[str, Recipe] = {
    "evaluating": [],
    "setting_requested": [("policy_evaluated", {"advertised": ["m"]})],
    "setting_fallback": [("policy_evaluated", {"advertised": ["fb"]})],
}

# --- ConfigSettlement -----------------------------------------------------------------------

CONFIG_SETTLEMENT_RECIPES: dict[str, Recipe] = {
    "unsettled": [],
    "deferred": [("settle_requested", {})],
    "published": [("settle_requested", {"catalog_cached": True, "response_applied": True})],
}

# --- PromptGeneration -----------------------------------------------------------------------

_SENDING: Recipe = [("dispatch_started", {})]
_DISPATCHED: Recipe = [*_SENDING, ("dispatch_accepted", {})]
_RELEASING: Recipe = [*_DISPATCHED, ("cancel_answered", {"acknowledged": False})]
_ESCALATING: Recipe = [*_DISPATCHED, ("cancel_answered", {"stream_disconnected": True})]
PROMPT_RECIPES: dict[str, Recipe] = {
    "live": [],
    "admitted": [],
    "sending": _SENDING,
    "reconnecting": [*_SENDING, ("dispatch_unreachable", {"reconnectable": True})],
    "dispatched": _DISPATCHED,
    "awaited": _DISPATCHED,
    "stall_reported": [*_DISPATCHED, ("stall_detected", {"stalled_for": 30.0})],
    "unawaited": _DISPATCHED,  # with the constant dispatch_only
    "handed_off": [*_DISPATCHED, ("handoff_received", {})],
    "abandoned": [*_DISPATCHED, ("waiter_abandoned", {})],
    "releasing": _RELEASING,
    "escalating": _ESCALATING,
    "ended": [*_DISPATCHED, ("completion_received", {"stop_reason": "end_turn"})],
    "completed": [*_DISPATCHED, ("completion_received", {"stop_reason": "end_turn"})],
    "failed": [*_DISPATCHED, ("completion_received", {"is_error": True, "error": "boom"})],
    "undelivered": [*_SENDING, ("dispatch_failed", {"error": "no route"})],
    "cancel_escalated": [*_RELEASING, ("waiter_returned", {})],
    "disconnected": [*_DISPATCHED, ("stream_lost", {"error": "gone"})],
    "withdrawn": [("cancel_requested", {})],
    "stopped": [*_DISPATCHED, ("execution_stopped", {"error": "stopped"})],
    "superseded": [("superseded_by_successor", {})],
}

# --- Execution ----------------------------------------------------------------------------

EXECUTION_RECIPES: dict[str, Recipe] = {
    "active": [],
    "running": [],
    "starting": [("start_requested", {})],
    "ready": [("start_requested", {}), ("booted", {})],
    "completed": [("process_exited", {"exit_code": 0})],
    "failed": [("process_exited", {"exit_code": 1, "error": "exit status 1"})],
}

# --- FirstActivity ------------------------------------------------------------------------

FIRST_ACTIVITY_RECIPES: dict[str, Recipe] = {"quiet": [], "announced": [("activity_seen", {})]}

# --- AgentStream ----------------------------------------------------------------------------

_UP: Recipe = [("connect_started", {}), ("connect_succeeded", {})]
_ANNOUNCED: Recipe = [*_UP, ("connection_lost", {"redialable": True})]
STREAM_RECIPES: dict[str, Recipe] = {
    "disconnected": [],
    "connecting": [("connect_started", {})],
    "connected": _UP,
    "reconnecting": _ANNOUNCED,
    "announced": _ANNOUNCED,
    "silent": [*_UP, ("connection_lost", {"redialable": True, "clean": True})],
    "giving_up": [*_ANNOUNCED, ("reconnect_timed_out", {})],
}

# --- Crash ------------------------------------------------------------------------------------

CRASH_RECIPES: dict[str, Recipe] = {"intact": [], "crashed": [("crash_reported", {"error": "x"})]}

# --- DurableRecord and StartupRecovery --------------------------------------------------------

DURABLE_RECIPES: dict[str, Recipe] = {
    "kept": [],
    "detached": [("runtime_detached", {})],
    "removed": [("execution_stopped", {})],
}

_NOW = {"startup_generation": 1}  # the attempt's own generation (CHARTS' constants)
_PROBING: Recipe = [("recovery_started", {})]
RECOVERY_RECIPES: dict[str, Recipe] = {
    "attempt": [],
    "stored": [],
    "probing": _PROBING,
    "ending_orphan": [*_PROBING, ("orphan_found", _NOW)],
    "reattaching": [*_PROBING, ("agent_alive", _NOW)],
    "relaunching": [("relaunch_requested", {})],
    "recovered": [*_PROBING, ("agent_alive", _NOW), ("reattached", _NOW)],
    "lost": [*_PROBING, ("agent_gone", {**_NOW, "reason": "gone"})],
    "finished": [("recovery_started", {"agent_ended": True})],
}
_ATTEMPTS = [_NOW, {"startup_generation": 0}]  # this attempt's fact, another attempt's

# --- PoolMember and NamespaceAdoption -----------------------------------------------------------

_HOLDING: Recipe = [("join_requested", {}), ("claimed", {})]
_RENEWING: Recipe = [*_HOLDING, ("renew_due", {})]
POOL_RECIPES: dict[str, Recipe] = {
    "outside": [],
    "joining": [("join_requested", {})],
    "member": _HOLDING,
    "holding": _HOLDING,
    "renewing": _RENEWING,
    "unrenewed": [*_RENEWING, ("renewal_failed", {"reason": "gone"})],
    "fenced": [*_HOLDING, ("fence_deadline_passed", {"silent": 7.0})],
    "refused": [("join_requested", {}), ("claim_failed", {"reason": "gone"})],
}
_OPENED: Recipe = [("adoption_started", {}), ("namespace_opened", {})]
ADOPTION_RECIPES: dict[str, Recipe] = {
    "expired": [],
    "opening": [("adoption_started", {})],
    "claiming": _OPENED,
    "hosting": [*_OPENED, ("lease_claimed", {})],
    "lost_race": [("adoption_started", {}), ("namespace_locked", {})],
    "unadoptable": [("adoption_started", {}), ("open_failed", {"reason": "disk"})],
    "released": [*_OPENED, ("lease_claim_failed", {"reason": "gone"})],
}

#: Event data tried, in order, to select each guarded branch of an event.
GUARD_DATA: dict[str, list[dict[str, Any]]] = {
    # SessionInit
    "stream_ready": [{"reattach": True}, {}],
    "initialize_succeeded": [
        {},
        {"native_session_resume": True, "prior_session_id": "s-1"},
        {"auth_method": "m"},
    ],
    "authenticated": [{}, {"native_session_resume": True, "prior_session_id": "s-1"}],
    "load_failed": [
        {"error_class": ErrorClass.TRANSPORT_DEAD},
        {"error_class": ErrorClass.SESSION_UNKNOWN},
        {"error_class": ErrorClass.INCONCLUSIVE},
        {"error_class": ErrorClass.AUTH_REQUIRED},
    ],
    "new_session_failed": [{}, {"error_class": ErrorClass.AUTH_REQUIRED}],
    "catalog_checked": [{}, {"snapshot_available": False, "model_requested": True}],
    "runtime_mode_applied": [{"catalog_known": True}, {"catalog_known": False}],
    "session_announced": [
        {"has_initial_prompt": True},
        {"resume_context_pending": True},
        {},
    ],
    # StartModelPolicy (constants: requested "m", fallback "fb", or as CHARTS lists)
    "policy_evaluated": [
        {"advertised": []},
        {"advertised": ["m"]},
        {"advertised": ["fb"]},
        {"advertised": ["other"]},
    ],
    "set_model_failed": [{"method_not_found": True}, {}],
    # ConfigSettlement
    "settle_requested": [{"catalog_cached": True}, {"response_applied": True}, {}],
    "models_updated": [
        {"provider_response": True, "response_config_id": "c-1"},
        {},
    ],
    # PromptGeneration
    "dispatch_failed": [{"cancel_release": True}, {}],
    "dispatch_unreachable": [{"reconnectable": True}, {}],
    "cancel_answered": [{"acknowledged": False}, {"stream_disconnected": True}, {}],
    "completion_received": [
        {"startup_generation": 99},
        {"is_error": True, "cancel_release": True},
        {"is_error": True},
        {},
    ],
    # Execution
    "turn_failed": [{"shutting_down": True}, {}],
    "wakeup_turn_failed": [{"shutting_down": True}, {}],
    "process_exited": [
        {"exit_code": 1, "shutting_down": True},
        {"exit_code": 0},
        {"exit_code": 1},
    ],
    "stream_lost": [{"generation": 2}, {"final": True}, {"final": True, "crashed": True}, {}],
    # StartupRecovery
    "recovery_started": [{"agent_ended": True}, {"turn_in_flight": True}, {}],
    **dict.fromkeys(
        (
            "agent_alive",
            "agent_gone",
            "orphan_found",
            "orphan_ended",
            "reattached",
            "reattach_failed",
            "relaunched",
            "relaunch_failed",
        ),
        _ATTEMPTS,
    ),
    # PoolMember
    "renewed": [{"taken": ["ns-a"]}, {}],
    # AgentStream
    "connection_lost": [{"redialable": True, "clean": True}, {"redialable": True}, {}],
    "redial_failed": [{"fatal": True}, {}],
}

#: chart class → (constants to try, in order; recipes). The first constants are the
#: chart's ordinary ones.
CHARTS: dict[type[Chart], tuple[list[dict[str, Any]], dict[str, Recipe]]] = {
    SessionInit: ([{}], SESSION_INIT_RECIPES),
    StartModelPolicy: (
        [
            {"requested_model": "m", "fallback_model": "fb"},
            {"requested_model": "m", "fallback_model": "fb", "auto_fallback": True},
            {"requested_model": ""},
            {"requested_model": "m"},
        ],
        START_MODEL_RECIPES,
    ),
    ConfigSettlement: ([{}, {"config_id": "c-1"}], CONFIG_SETTLEMENT_RECIPES),
    PromptGeneration: (
        [{"generation": 1}, {"generation": 1, "dispatch_only": True}],
        PROMPT_RECIPES,
    ),
    Execution: ([{}], EXECUTION_RECIPES),
    FirstActivity: ([{}], FIRST_ACTIVITY_RECIPES),
    AgentStream: ([{}], STREAM_RECIPES),
    Crash: ([{}], CRASH_RECIPES),
    DurableRecord: ([{}], DURABLE_RECIPES),
    StartupRecovery: ([{"startup_generation": 1}], RECOVERY_RECIPES),
    PoolMember: ([{}], POOL_RECIPES),
    NamespaceAdoption: ([{}], ADOPTION_RECIPES),
}


def effect_fields(machine: ChartMachine, event: str) -> dict[str, Any]:
    """Placeholder values for the effect fields ``event`` may need that neither a default
    nor a constant provides, leaving out every guard parameter (those select the branch)."""
    compiled = machine.compiled
    fields: set[str] = set()
    guarded: set[str] = set()
    for by_event in compiled.table.values():
        for cand in by_event.get(event, ()):
            guarded.update(p for _, params, _ in cand.guards for p in params)
            for spec in cand.effects:
                fields.update(f for f in spec.fields if f not in dict(spec.defaults))
    return {f: f"<{f}>" for f in sorted(fields - guarded - set(compiled.constants))}


def fire(machine: ChartMachine, event: str, **data: Any) -> Step:
    """``machine.fire(event, **data)`` with placeholders for the effect fields not given."""
    return machine.fire(event, **{**effect_fields(machine, event), **data})


def walk(machine: ChartMachine, recipe: Recipe) -> ChartMachine:
    for event, data in recipe:
        fire(machine, event, **data)
    return machine
