"""SessionInit (lifecycle.md §2.1, §7.1) and StartModelPolicy (§3.2 rows 1-11) walks."""

from __future__ import annotations

from typing import Any

import pytest

from acpfsm.statecharts import ErrorClass, SessionInit, StartModelPolicy

from .recipes import walk

HANDSHAKE = [("stream_ready", {})]


def _init_to_loading() -> SessionInit:
    return walk(
        SessionInit(),
        [
            *HANDSHAKE,
            ("initialize_succeeded", {"native_session_resume": True, "prior_session_id": "acp-1"}),
        ],
    )


@pytest.mark.parametrize(
    ("native", "prior", "expected"),
    [
        (True, "acp-1", "loading"),
        (True, "", "creating"),
        (True, "   ", "creating"),
        (False, "acp-1", "creating"),  # the existing id is ignored
        (False, "", "creating"),
    ],
)
def test_load_or_new_decision_table(native: bool, prior: str, expected: str) -> None:
    init = walk(SessionInit(), HANDSHAKE)
    init.fire("initialize_succeeded", native_session_resume=native, prior_session_id=prior)
    assert init.state_ids == ("initializing", expected)


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
def test_session_load_outcomes_follow_the_seed(error_class: ErrorClass, expected: str) -> None:
    """seed D1: transport-dead fails without fallback; fallback-authorizing goes to
    session/new; anything else is inconclusive and fails."""
    init = _init_to_loading()
    init.fire("load_failed", error_class=error_class)
    assert init.leaf == expected


def test_fallback_then_new_session_failure_fails() -> None:
    init = _init_to_loading()
    init.fire("load_failed", error_class=ErrorClass.SESSION_UNKNOWN)
    init.fire("new_session_failed")
    assert init.leaf == "failed"
    assert [r.event for r in init.history] == [
        "stream_ready",
        "initialize_succeeded",
        "load_failed",
        "new_session_failed",
    ]


def test_stream_connect_timeout_and_initialize_failure_fail() -> None:
    a = SessionInit()
    a.fire("stream_connect_timed_out")
    assert a.leaf == "failed"
    b = walk(SessionInit(), HANDSHAKE)
    b.fire("initialize_failed")
    assert b.leaf == "failed"


def _to_catalog() -> SessionInit:
    init = _init_to_loading()
    init.fire("load_succeeded")
    return init


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
    snapshot: bool, model_requested: bool, expected: str
) -> None:
    init = _to_catalog()
    init.fire("catalog_checked", snapshot_available=snapshot, model_requested=model_requested)
    assert init.leaf == expected


@pytest.mark.parametrize("event", ["catalog_arrived", "catalog_wait_timed_out"])
def test_catalog_wait_expiry_is_not_a_failure(event: str) -> None:
    init = _to_catalog()
    init.fire("catalog_checked", snapshot_available=False, model_requested=True)
    init.fire(event)
    assert init.leaf == "applying_start_model"


def _to_original_snapshot() -> SessionInit:
    init = _to_catalog()
    init.fire("catalog_checked")
    init.fire("start_model_settled")
    init.fire("profile_layer_applied")
    return init


def test_runtime_options_are_withheld_when_the_catalog_is_unknown() -> None:
    """The catalog-known fail-safe (§4.3): the runtime mode is always applied, the runtime
    config options only with a known catalog."""
    known = _to_original_snapshot()
    known.fire("original_snapshot_published")
    assert known.leaf == "applying_runtime_mode"
    known.fire("runtime_mode_applied", catalog_known=True)
    assert known.leaf == "applying_runtime_options"
    unknown = _to_original_snapshot()
    unknown.fire("original_snapshot_published")
    unknown.fire("runtime_mode_applied", catalog_known=False)
    assert unknown.leaf == "settling"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"has_initial_prompt": True, "resume_context": True}, "prompting"),
        ({"has_initial_prompt": False, "resume_context": True}, "ready_resume_context_pending"),
        ({}, "ready"),
    ],
)
def test_dispatch_after_announcement(data: dict[str, Any], expected: str) -> None:
    init = _to_original_snapshot()
    init.fire("original_snapshot_published")
    init.fire("runtime_mode_applied", catalog_known=True)
    init.fire("runtime_options_applied")
    init.fire("settlement_deferred")
    init.fire("session_announced", **data)
    assert init.leaf == expected
    assert init.succeeded
    assert init.is_terminated


def test_start_model_failure_fails_init_and_abandon_leaves_any_working_state() -> None:
    init = _to_catalog()
    init.fire("catalog_checked")
    init.fire("start_model_failed")
    assert init.leaf == "failed"
    assert not init.succeeded
    for steps in ([], HANDSHAKE):
        other = walk(SessionInit(), list(steps))
        other.fire("init_abandoned")
        assert other.leaf == "abandoned"


# --- StartModelPolicy: lifecycle.md §3.2, one case per row ---------------------------------

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


@pytest.mark.parametrize(
    ("row", "policy", "advertised", "results", "expected"), ROWS, ids=[f"row{r[0]}" for r in ROWS]
)
def test_start_model_policy_rows(
    row: int,
    policy: dict[str, Any],
    advertised: list[str],
    results: list[tuple[str, dict[str, Any]]],
    expected: dict[str, Any],
) -> None:
    chart = StartModelPolicy(**policy)
    chart.fire("policy_evaluated", advertised=advertised, current_model="cur")
    calls = []
    for event, data in results:
        calls.append(chart.model_to_set)
        chart.fire(event, **data)
    assert chart.is_terminated
    decision = chart.decision()
    for key, value in expected.items():
        assert getattr(decision, key) == value, (row, key)
    if row in (3, 4, 5):
        assert calls == ["fb"]
    elif row in (8, 9, 10, 11):
        assert calls == ["m"]
    else:
        assert calls == []


def test_policy_decision_before_the_end_is_an_error() -> None:
    chart = StartModelPolicy(model="m")
    chart.fire("policy_evaluated", advertised=["m"])
    with pytest.raises(ValueError, match="not finished"):
        chart.decision()
