"""The charts of durable executions: DurableRecord (when the stored row is written, through the
coordination table), StartupRecovery (one stored execution at start-up, with its startup
generation), and the session init's reattach path."""

from __future__ import annotations

from typing import Any

import pytest

from acpfsm.statecharts import (
    DurableRecord,
    EngineName,
    Execution,
    IllegalTransition,
    PromptGeneration,
    SessionInit,
    StartupRecovery,
    Step,
)
from acpfsm.statecharts.coordination import fire

from .recipes import walk

_BOOT_READY = "publish_agent_boot_ready(resume_context_pending=False)"


def _names(step: Step) -> list[str]:
    return [str(e) for e in step.effects]


def _execution_family(engine: EngineName) -> dict[str, Any]:
    return {
        "execution": Execution.start(engine=engine),
        "session_init": SessionInit.start(engine=engine),
        "durable_record": DurableRecord.start(engine=engine),
    }


# --- DurableRecord, through the coordination table ---------------------------------------------


def test_launch_stream_and_session_are_flushed_statuses_queued(engine: EngineName) -> None:
    m = _execution_family(engine)
    fired = fire(m, m["execution"], "start_requested", {})
    assert [(s.chart, s.event) for _, s in fired] == [
        ("execution", "start_requested"),
        ("durable_record", "launch_accepted"),
    ]
    assert _names(fired[1][1]) == ["persist_execution(flush=True)"]
    fire(m, m["session_init"], "init_started", {})
    fired = fire(m, m["session_init"], "stream_ready", {"error": ""})
    assert [(s.event, _names(s)) for _, s in fired[1:]] == [
        ("agent_reachable", ["persist_execution(flush=True)"])
    ]
    init = m["session_init"]
    for event, data in [
        ("initialize_succeeded", {}),
        ("new_session_succeeded", {}),
        ("catalog_checked", {}),
        ("start_model_settled", {}),
        ("profile_layer_applied", {}),
        ("original_snapshot_published", {}),
        ("runtime_mode_applied", {}),
        ("settlement_requested", {}),
    ]:
        assert len(fire(m, init, event, {"error": "", **data})) == 1  # nothing written
    fired = fire(m, init, "session_announced", {"error": ""})  # booted: READY
    assert [(s.chart, s.event, _names(s)) for _, s in fired[1:]] == [
        ("execution", "booted", [_BOOT_READY, "watch_for_wakeup"]),
        ("durable_record", "status_changed", ["persist_execution(flush=False)"]),
        ("durable_record", "session_established", ["persist_execution(flush=True)"]),
    ]


def test_a_generation_about_to_be_sent_is_reserved_and_a_stop_deletes(
    engine: EngineName,
) -> None:
    m = _execution_family(engine)
    gen = m["prompt_generation"] = PromptGeneration.start(engine=engine, generation=7)
    fired = fire(m, gen, "dispatch_started", {})
    assert [(s.chart, _names(s)) for _, s in fired[1:]] == [
        ("durable_record", ["reserve_generation(generation=7)"])
    ]
    fired = fire(m, m["execution"], "stop_requested", {"reason": "done", "error": "x"})
    record = [s for _, s in fired if s.chart == "durable_record"]
    assert [(s.target, _names(s)) for s in record] == [("removed", ["delete_execution"])]
    assert m["durable_record"].ended


def test_a_detached_record_writes_nothing_more(engine: EngineName) -> None:
    record = walk(DurableRecord.start(engine=engine), [("runtime_detached", {})])
    for event, data in [
        ("status_changed", {}),
        ("launch_accepted", {}),
        ("agent_reachable", {}),
        ("session_established", {}),
        ("overrides_changed", {}),
        ("turn_sending", {"generation": 3}),
        ("execution_stopped", {}),
        ("runtime_detached", {}),
    ]:
        step = record.fire(event, **data)
        assert step.targetless and step.effects == (), event
    assert record.state == "detached" and not record.ended


def test_an_override_is_queued_and_a_removed_record_takes_nothing(engine: EngineName) -> None:
    record = DurableRecord.start(engine=engine)
    assert _names(record.fire("overrides_changed")) == ["persist_execution(flush=False)"]
    record.fire("execution_stopped")
    with pytest.raises(IllegalTransition):
        record.fire("status_changed")


# --- the session init's reattach path -----------------------------------------------------------


def test_a_reattach_boots_the_session_recovered_first(engine: EngineName) -> None:
    m = _execution_family(engine)
    fire(m, m["execution"], "start_requested", {})
    fire(m, m["session_init"], "init_started", {})
    fired = fire(m, m["session_init"], "stream_ready", {"reattach": True, "error": ""})
    assert [(s.chart, s.event, _names(s)) for _, s in fired] == [
        ("session_init", "stream_ready", ["publish_agent_recovered", "open_admission"]),
        ("execution", "booted", [_BOOT_READY, "watch_for_wakeup"]),
        ("durable_record", "status_changed", ["persist_execution(flush=False)"]),
        ("durable_record", "session_established", ["persist_execution(flush=True)"]),
    ]
    assert m["execution"].state == "ready" and m["session_init"].state == "ready"


# --- StartupRecovery ---------------------------------------------------------------------------

NOW = {"startup_generation": 4}
OLD = {"startup_generation": 3}


def _attempt(engine: EngineName) -> Any:
    return StartupRecovery.start(engine=engine, startup_generation=4)


def test_a_turn_in_flight_is_closed_as_interrupted_then_the_agent_probed(
    engine: EngineName,
) -> None:
    r = _attempt(engine)
    step = r.fire("recovery_started", turn_in_flight=True, generation=9)
    assert (step.target, _names(step)) == (
        "probing",
        [
            "claim_attempt",
            "publish_turn_interrupted(generation=9)",
            "cancel_interrupted_turn",
            "probe_agent",
        ],
    )


def test_an_alive_agent_is_reattached_and_recovered(engine: EngineName) -> None:
    r = walk(_attempt(engine), [("recovery_started", {})])
    assert _names(r.fire("agent_alive", **NOW)) == ["reattach_agent"]
    step = r.fire("reattached", **NOW)
    # what the runtime learns (no state name read): the attempt recovered
    assert (step.target, _names(step)) == ("recovered", ["mark_recovered"])


@pytest.mark.parametrize(
    ("recipe", "event", "reason"),
    [
        ([], "agent_gone", "the agent instance ended while the app was down"),
        ([("agent_alive", NOW)], "reattach_failed", "agent stream dial failed"),
        ([("orphan_found", NOW)], "orphan_ended", "ended its orphaned process group"),
    ],
    ids=["gone", "reattach-failed", "orphan"],
)
def test_what_cannot_be_reattached_is_lost_with_its_reason(
    engine: EngineName, recipe: list, event: str, reason: str
) -> None:
    r = walk(_attempt(engine), [("recovery_started", {}), *recipe])
    step = r.fire(event, reason=reason, **NOW)
    assert (step.target, _names(step)) == (
        "lost",
        [f"mark_lost(reason={reason!r})", "persist_recovery"],
    )


def test_an_orphan_is_ended_before_it_is_lost(engine: EngineName) -> None:
    r = walk(_attempt(engine), [("recovery_started", {})])
    assert _names(r.fire("orphan_found", **NOW)) == ["end_orphan"]
    assert r.state == "ending_orphan"


def test_an_agent_that_had_ended_rests_finished(engine: EngineName) -> None:
    step = _attempt(engine).fire("recovery_started", agent_ended=True, turn_in_flight=True)
    assert (step.target, _names(step)) == (
        "finished",
        ["claim_attempt", "mark_finished", "persist_recovery"],
    )


def test_a_relaunch_is_an_attempt_of_its_own(engine: EngineName) -> None:
    r = _attempt(engine)
    assert _names(r.fire("relaunch_requested")) == ["claim_attempt", "relaunch_agent"]
    step = r.fire("relaunched", **NOW)
    assert (step.target, _names(step)) == ("recovered", ["mark_recovered"])
    r = walk(_attempt(engine), [("relaunch_requested", {})])
    step = r.fire("relaunch_failed", reason="session/load failed", **NOW)
    assert _names(step) == ["mark_lost(reason='session/load failed')", "persist_recovery"]


@pytest.mark.parametrize(
    "event",
    [
        "agent_alive",
        "agent_gone",
        "orphan_found",
        "orphan_ended",
        "reattached",
        "reattach_failed",
        "relaunched",
        "relaunch_failed",
    ],
)
@pytest.mark.parametrize("where", ["probing", "reattaching", "lost", "recovered"])
def test_another_attempts_signal_is_ignored_everywhere(
    engine: EngineName, event: str, where: str
) -> None:
    recipes = {
        "probing": [("recovery_started", {})],
        "reattaching": [("recovery_started", {}), ("agent_alive", NOW)],
        "lost": [("recovery_started", {}), ("agent_gone", NOW)],
        "recovered": [("recovery_started", {}), ("agent_alive", NOW), ("reattached", NOW)],
    }
    r = walk(_attempt(engine), recipes[where])
    step = r.fire(event, **OLD)
    assert step.targetless and step.effects == ()
    assert r.state == where


def test_this_attempts_unexpected_signal_is_loud(engine: EngineName) -> None:
    r = walk(_attempt(engine), [("recovery_started", {}), ("agent_gone", NOW)])
    with pytest.raises(IllegalTransition):
        r.fire("agent_alive", **NOW)
    with pytest.raises(IllegalTransition):
        _attempt(engine).fire("reattached", **NOW)  # nothing was probed
