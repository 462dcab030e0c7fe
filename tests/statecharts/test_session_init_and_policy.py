"""SessionInit (kandev InitializeAndPromptWithLayers, seed D1-D5), StartModelPolicy (kandev
start_model.go, rows 1-11) and ConfigSettlement walks, on both engines: each fired event's
Step, the entry effect that names what the runtime must do next, the decision."""

from __future__ import annotations

from typing import Any

import pytest

from acpfsm.statecharts import (
    ChartMachine,
    ConfigSettlement,
    EngineName,
    ErrorClass,
    IllegalTransition,
    SessionInit,
    StartModelPolicy,
    Step,
    model_decision,
)

from .recipes import SESSION_INIT_RECIPES, walk

HANDSHAKE = [("init_started", {}), ("stream_ready", {})]


def names(step: Step) -> list[str]:
    return [e.name for e in step.effects]


def _init(engine: EngineName, towards: str) -> ChartMachine:
    return walk(SessionInit.start(engine=engine), SESSION_INIT_RECIPES[towards])


def test_each_working_state_names_the_next_thing_to_do(engine: EngineName) -> None:
    """Every step of a full init enters one working state whose entry effect is the one
    call the runtime makes next; the init's start (``init_started``, when its task runs)
    enters the first; the machine itself is pending and names nothing."""
    init = SessionInit.start(engine=engine)
    assert [e.name for e in init.initial_effects()] == []
    assert init.configuration == ("pending",)
    done = [
        (step.state, names(step))
        for step in (init.fire(e, **d) for e, d in SESSION_INIT_RECIPES["announcing"])
    ]
    assert done == [
        ("connecting_stream", ["await_stream"]),
        ("handshaking", ["initialize"]),
        ("creating", ["new_session"]),
        ("awaiting_catalog", ["check_catalog"]),
        ("applying_start_model", ["apply_start_model"]),
        ("applying_profile_layer", ["apply_profile_layer"]),
        ("original_snapshot", ["publish_original_snapshot"]),
        ("applying_runtime_mode", ["apply_runtime_mode"]),
        ("applying_runtime_options", ["apply_runtime_options"]),
        ("settling", ["settle"]),
        ("announcing", ["announce"]),
    ]


@pytest.mark.parametrize(
    ("native", "prior", "expected", "effect"),
    [
        (True, "acp-1", "loading", "load_session"),
        (True, "", "creating", "new_session"),
        (True, "   ", "creating", "new_session"),
        (False, "acp-1", "creating", "new_session"),  # the existing id is ignored
        (False, "", "creating", "new_session"),
    ],
)
def test_load_or_new_decision_table(
    engine: EngineName, native: bool, prior: str, expected: str, effect: str
) -> None:
    init = walk(SessionInit.start(engine=engine), HANDSHAKE)
    step = init.fire("initialize_succeeded", native_session_resume=native, prior_session_id=prior)
    assert init.configuration == (expected, "initializing")
    assert names(step) == [effect]


@pytest.mark.parametrize(
    ("error_class", "expected"),
    [
        (ErrorClass.TRANSPORT_DEAD, "failed"),
        (ErrorClass.METHOD_NOT_FOUND, "creating"),
        (ErrorClass.SESSION_UNKNOWN, "creating"),
        (ErrorClass.LOAD_UNSUPPORTED, "creating"),
        (ErrorClass.PROVIDER_ROLLOUT_MISSING, "creating"),
        (ErrorClass.INCONCLUSIVE, "failed"),
        (ErrorClass.AUTH_REQUIRED, "failed"),
        (ErrorClass.STREAM_NOT_CONNECTED, "failed"),
        (ErrorClass.CANCEL_RELEASED, "failed"),
    ],
)
def test_session_load_outcomes_follow_the_seed(
    engine: EngineName, error_class: ErrorClass, expected: str
) -> None:
    """seed D1: transport-dead fails without fallback; fallback-authorizing goes to
    session/new; anything else is inconclusive and fails."""
    init = _init(engine, "loading")
    step = init.fire("load_failed", error_class=error_class)
    assert init.state == expected
    failing = ["fail_init", "open_admission"]
    if error_class is ErrorClass.AUTH_REQUIRED:  # the failure says what the agent wants
        failing = ["require_authentication", *failing]
    assert names(step) == (["new_session"] if expected == "creating" else failing)
    assert init.ended is (expected == "failed")


def test_fallback_then_new_session_failure_fails(engine: EngineName) -> None:
    init = _init(engine, "loading")
    steps = [
        init.fire("load_failed", error_class=ErrorClass.SESSION_UNKNOWN),
        init.fire("new_session_failed"),
    ]
    assert [(s.source, s.event, s.target) for s in steps] == [
        ("loading", "load_failed", "creating"),
        ("creating", "new_session_failed", "failed"),
    ]
    assert init.ended
    with pytest.raises(IllegalTransition, match="ended"):
        init.fire("new_session_succeeded")


def test_stream_connect_timeout_and_initialize_failure_fail(engine: EngineName) -> None:
    a = walk(SessionInit.start(engine=engine), [("init_started", {})])
    assert a.fire("stream_connect_timed_out").state == "failed"
    b = walk(SessionInit.start(engine=engine), HANDSHAKE)
    assert names(b.fire("initialize_failed")) == ["fail_init", "open_admission"]
    assert b.ended


@pytest.mark.parametrize(
    ("snapshot", "model_requested", "expected"),
    [
        (True, True, "applying_start_model"),
        (True, False, "applying_start_model"),
        (False, False, "applying_start_model"),
        (False, True, "waiting_for_catalog"),
    ],
)
def test_catalog_wait_only_without_snapshot_and_with_a_model(
    engine: EngineName, snapshot: bool, model_requested: bool, expected: str
) -> None:
    init = _init(engine, "awaiting_catalog")
    init.fire("catalog_checked", snapshot_available=snapshot, model_requested=model_requested)
    assert init.state == expected


@pytest.mark.parametrize("event", ["catalog_arrived", "catalog_wait_timed_out"])
def test_catalog_wait_expiry_is_not_a_failure(engine: EngineName, event: str) -> None:
    init = _init(engine, "waiting_for_catalog")
    step = init.fire(event)
    assert step.state == "applying_start_model" and names(step) == ["apply_start_model"]


def test_runtime_options_are_withheld_when_the_catalog_is_unknown(engine: EngineName) -> None:
    """The catalog-known fail-safe: the runtime mode is always applied, the runtime config
    options only with a known catalog."""
    known = _init(engine, "applying_runtime_mode")
    assert known.fire("runtime_mode_applied", catalog_known=True).state == (
        "applying_runtime_options"
    )
    unknown = _init(engine, "applying_runtime_mode")
    step = unknown.fire("runtime_mode_applied", catalog_known=False)
    assert step.state == "settling" and names(step) == ["settle"]


@pytest.mark.parametrize(
    ("data", "expected", "configuration"),
    [
        (
            {"has_initial_prompt": True, "resume_context_pending": True},
            ["send_initial_prompt"],
            ("sending", "prompting"),
        ),
        (
            {"has_initial_prompt": False, "resume_context_pending": True},
            ["open_admission"],
            ("resume_context_pending", "booted"),
        ),
        ({}, ["open_admission"], ("ready", "booted")),
    ],
)
def test_dispatch_after_announcement(
    engine: EngineName, data: dict[str, Any], expected: list[str], configuration: tuple[str, ...]
) -> None:
    init = _init(engine, "announcing")
    step = init.fire("session_announced", **data)
    assert names(step) == expected
    assert init.configuration == configuration
    assert not init.ended  # at rest: it still takes prompt_composed


def test_the_resume_context_goes_into_the_first_prompt_once(engine: EngineName) -> None:
    init = _init(engine, "resume_context_pending")
    first = init.fire("prompt_composed")
    assert (first.source, first.target, names(first)) == (
        "resume_context_pending",
        "ready",
        ["inject_resume_context"],
    )
    second = init.fire("prompt_composed")
    assert second.targetless and names(second) == []
    prompting = _init(engine, "prompting")
    assert prompting.fire("prompt_composed").targetless


def test_start_model_failure_fails_init_and_abandon_leaves_any_working_state(
    engine: EngineName,
) -> None:
    init = _init(engine, "applying_start_model")
    assert init.fire("start_model_failed").state == "failed"
    for towards in ("connecting_stream", "handshaking", "settling"):
        other = _init(engine, towards)
        step = other.fire("init_abandoned")
        assert (step.source, step.state, names(step)) == (
            "initializing",
            "abandoned",
            ["open_admission"],
        )
        assert other.ended
    for towards in ("admitted", "ready"):  # a session at rest is not abandoned
        at_rest = _init(engine, towards)
        assert at_rest.fire("init_abandoned").targetless and not at_rest.ended
    # an initial prompt never admitted (the execution stopped first) opens the admission
    sending = _init(engine, "sending")
    step = sending.fire("init_abandoned")
    assert (step.state, names(step)) == ("admitted", ["open_admission"])
    assert not sending.ended


def test_the_initial_prompt_admitted_opens_the_admission(engine: EngineName) -> None:
    """Callers' prompts queue behind the initial prompt once its generation is admitted:
    the chart opens the admission then, once."""
    init = _init(engine, "sending")
    step = init.fire("initial_prompt_admitted")
    assert (step.state, names(step)) == ("admitted", ["open_admission"])
    with pytest.raises(IllegalTransition):
        init.fire("initial_prompt_admitted")


# --- StartModelPolicy: kandev start_model.go's decision table, one case per row -----------

ROWS: list[
    tuple[int, dict[str, Any], list[str], list[tuple[str, dict[str, Any]]], dict[str, Any]]
] = [
    # row, policy, advertised, SetModel results, expected decision fields
    (1, {"model": ""}, ["a"], [], {"outcome": "", "warning": False, "set_model_called": False}),
    (
        2,
        {"model": "m"},
        [],
        [],
        {"outcome": "provider_default", "reason": "catalog_empty", "warning": True},
    ),
    (
        3,
        {"model": "m", "fallback_model": "fb"},
        ["fb"],
        [("set_model_succeeded", {})],
        {"outcome": "explicit_fallback", "effective_model": "fb", "warning": True},
    ),
    (
        4,
        {"model": "m", "fallback_model": "fb"},
        ["fb"],
        [("set_model_failed", {"method_not_found": True})],
        {
            "outcome": "provider_default",
            "reason": "selection_unsupported",
            "effective_model": "cur",
        },
    ),
    (
        5,
        {"model": "m", "fallback_model": "fb", "auto_fallback": True},
        ["fb"],
        [("set_model_failed", {"error": "boom"})],
        {"outcome": "", "error": 'failed to set fallback model "fb": boom', "warning": False},
    ),
    (
        6,
        {"model": "m"},
        ["x"],
        [],
        {"outcome": "provider_default", "reason": "requested_not_advertised", "warning": True},
    ),
    (
        7,
        {"model": "m", "fallback_model": "fb"},
        ["x"],
        [],
        {
            "outcome": "provider_default",
            "reason": "fallback_not_advertised",
            "effective_model": "cur",
        },
    ),
    (
        8,
        {"model": "m"},
        ["m"],
        [("set_model_succeeded", {})],
        {"outcome": "applied", "effective_model": "m", "warning": False, "set_model_called": True},
    ),
    (
        9,
        {"model": "m"},
        ["m"],
        [("set_model_failed", {"method_not_found": True})],
        {"outcome": "provider_default", "reason": "selection_unsupported", "warning": True},
    ),
    (
        10,
        {"model": "m", "auto_fallback": True},
        ["m"],
        [("set_model_failed", {"error": "nope"})],
        {"outcome": "provider_default", "reason": "selection_failed_auto_fallback"},
    ),
    (
        11,
        {"model": "m", "fallback_model": "fb"},
        ["m", "fb"],  # the fallback is advertised but NOT tried
        [("set_model_failed", {"error": "nope"})],
        {"outcome": "", "error": 'failed to set start model "m": nope', "set_model_called": True},
    ),
]


ROW_STATES = {
    1: "none",
    2: "catalog_empty",
    3: "explicit_fallback",
    4: "selection_unsupported",
    5: "failed",
    6: "requested_not_advertised",
    7: "fallback_not_advertised",
    8: "applied",
    9: "selection_unsupported",
    10: "selection_failed_auto_fallback",
    11: "failed",
}


@pytest.mark.parametrize(
    ("row", "policy", "advertised", "results", "expected"), ROWS, ids=[f"row{r[0]}" for r in ROWS]
)
def test_start_model_policy_rows(
    engine: EngineName,
    row: int,
    policy: dict[str, Any],
    advertised: list[str],
    results: list[tuple[str, dict[str, Any]]],
    expected: dict[str, Any],
) -> None:
    constants = {
        "requested_model": policy.get("model", ""),
        "fallback_model": policy.get("fallback_model", ""),
        "auto_fallback": policy.get("auto_fallback", False),
    }
    chart = StartModelPolicy.start(engine=engine, **constants)
    step = chart.fire("policy_evaluated", advertised=advertised)
    calls: list[str] = []
    for event, data in results:
        (set_model,) = [e for e in step.effects if e.name == "set_model"]
        calls.append(chart.constant(set_model["model_field"]))
        step = chart.fire(event, **data)
    assert chart.ended
    assert chart.state == ROW_STATES[row]  # the final state names the row (trace, diagrams)
    (decided,) = [e for e in step.effects if e.name == "decided"]
    error = next((d.get("error", "") for _, d in results if d.get("error")), "")
    decision = model_decision(
        decided,
        requested=constants["requested_model"],
        fallback=constants["fallback_model"],
        current="cur",
        error=error,
    )
    for key, value in expected.items():
        assert getattr(decision, key) == value, (row, key)
    if row in (3, 4, 5):
        assert calls == ["fb"]
    elif row in (8, 9, 10, 11):
        assert calls == ["m"]
    else:
        assert calls == []


@pytest.mark.parametrize("fallback", ["", "fb"])
def test_method_not_found_outranks_auto_fallback(engine: EngineName, fallback: str) -> None:
    """Row 9 is tested before row 10: a −32601 from SetModel is ``selection_unsupported``
    even with AutoFallback on (and a fallback declared, which is never tried)."""
    chart = StartModelPolicy.start(
        engine=engine, requested_model="m", fallback_model=fallback, auto_fallback=True
    )
    chart.fire("policy_evaluated", advertised=["m", "fb"])
    step = chart.fire("set_model_failed", method_not_found=True, error="Method not found")
    assert step.state == "selection_unsupported" and chart.ended
    (decided,) = [e for e in step.effects if e.name == "decided"]
    assert (decided["outcome"], decided["reason"]) == ("provider_default", "selection_unsupported")


def test_the_policy_decides_only_in_a_final_state(engine: EngineName) -> None:
    chart = StartModelPolicy.start(engine=engine, requested_model="m")
    step = chart.fire("policy_evaluated", advertised=["m"])
    assert names(step) == ["set_model"] and not chart.ended
    assert step.effects[0]["model_field"] == "requested_model"
    with pytest.raises(IllegalTransition):
        chart.fire("policy_evaluated", advertised=["m"])  # evaluated once
    step = chart.fire("set_model_succeeded")
    assert names(step) == ["decided"] and chart.ended
    with pytest.raises(IllegalTransition):
        chart.fire("set_model_failed")


# --- ConfigSettlement ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config_id", "data", "state"),
    [
        ("", {"catalog_cached": True}, "published"),  # nothing to wait for
        ("", {}, "deferred"),  # no catalog yet: the first update settles it
        ("c-1", {"response_applied": True}, "published"),  # the answer arrived first
        ("c-1", {"catalog_cached": True}, "deferred"),  # waits for the answer to c-1
    ],
)
def test_settlement_is_published_at_once_or_deferred(
    engine: EngineName, config_id: str, data: dict[str, Any], state: str
) -> None:
    chart = ConfigSettlement.start(engine=engine, config_id=config_id)
    assert names(chart.fire("models_updated")) == [] and chart.state == "unsettled"
    step = chart.fire("settle_requested", **data)
    assert step.state == state
    assert names(step) == (["publish_settled"] if state == "published" else [])


def test_a_deferred_settlement_waits_for_the_answer_to_its_config_call(
    engine: EngineName,
) -> None:
    chart = ConfigSettlement.start(engine=engine, config_id="c-1")
    chart.fire("settle_requested")
    for data in (
        {},  # an update that is not an answer
        {"provider_response": True, "response_config_id": "c-0"},  # an answer to another call
        {"provider_response": False, "response_config_id": "c-1"},
    ):
        step = chart.fire("models_updated", **data)
        assert step.targetless and chart.state == "deferred", data
    step = chart.fire("models_updated", provider_response=True, response_config_id="c-1")
    assert (step.source, step.state, names(step)) == ("deferred", "published", ["publish_settled"])
    again = chart.fire("models_updated", provider_response=True, response_config_id="c-1")
    assert again.targetless and names(again) == []  # published once
    with pytest.raises(IllegalTransition):
        chart.fire("settle_requested")


def test_without_a_config_call_any_update_settles(engine: EngineName) -> None:
    chart = ConfigSettlement.start(engine=engine)
    chart.fire("settle_requested")
    assert chart.fire("models_updated").state == "published"
