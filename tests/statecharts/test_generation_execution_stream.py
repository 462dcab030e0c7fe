"""Walks of PromptGeneration (its races), Execution (kandev's status table) and AgentStream:
each fired event's returned Step (the transition taken, the states entered, the effects the
runtime must perform), on both engines."""

from __future__ import annotations

from typing import Any

import pytest

from acpfsm.statecharts import (
    AgentStream,
    EngineName,
    Execution,
    IllegalTransition,
    PromptGeneration,
    Step,
)

from .recipes import PROMPT_RECIPES, walk


def names(step: Step) -> list[str]:
    return [e.name for e in step.effects]


def effect(step: Step, name: str) -> dict[str, Any]:
    """The fields of the one effect ``name`` of ``step``."""
    (found,) = [dict(e.args) for e in step.effects if e.name == name]
    return found


def moved(step: Step) -> tuple[str, str, bool, tuple[str, ...]]:
    return (step.source, step.target, step.targetless, step.entered)


def ignored(step: Step, source: str) -> bool:
    """``step`` is a targetless transition declared on ``source``: nothing entered or left."""
    return moved(step) == (source, source, True, ())


# --- PromptGeneration ----------------------------------------------------------------------


def test_ordinary_generation_admitted_dispatched_completed(engine: EngineName) -> None:
    gen = PromptGeneration.start(engine=engine, generation=3)
    assert gen.configuration == ("admitted", "live") and gen.initial_effects() == ()
    step = gen.fire("dispatch_accepted")
    assert moved(step) == ("admitted", "awaited", False, ("dispatched", "awaited"))
    assert names(step) == ["arm_activity"]
    assert names(gen.fire("steer_requested")) == ["dispatch_steer"]  # steerable
    step = gen.fire("completion_received", stop_reason="end_turn")
    assert moved(step) == ("dispatched", "completed", False, ("ended", "completed"))
    # the waiter learns the outcome before anything is published (R11)
    assert names(step) == [
        "claim_outcome",
        "release_waiter",
        "publish_terminal_event",
        "publish_prompt_completed",
        "end_cancel",
    ]
    assert effect(step, "release_waiter") == {"result": "completed"}
    assert effect(step, "publish_prompt_completed") == {"generation": 3, "stop_reason": "end_turn"}
    assert gen.configuration == ("completed", "ended")
    assert names(gen.fire("steer_requested")) == ["steer_refused"]


def test_dispatch_only_generation_holds_the_barrier_until_it_leaves_dispatched(
    engine: EngineName,
) -> None:
    gen = PromptGeneration.start(engine=engine, generation=4, dispatch_only=True)
    assert gen.fire("dispatch_accepted").entered == ("dispatched", "unawaited")
    step = gen.fire("successor_admitting")
    assert ignored(step, "unawaited") and names(step) == ["hold_barrier"]
    # seed D8: the successor gave up waiting; the barrier stays set
    step = gen.fire("barrier_timed_out")
    assert ignored(step, "unawaited") and names(step) == ["barrier_failed"]
    assert names(gen.fire("successor_admitting")) == ["hold_barrier"]
    assert names(gen.fire("steer_requested")) == ["dispatch_steer"]
    assert ignored(gen.fire("stall_detected"), "unawaited")  # nobody waits: no stall report
    # a cancel escalates a dispatch-only turn at once, even when acknowledged
    step = gen.fire("cancel_answered", acknowledged=True)
    assert moved(step) == ("unawaited", "escalating", False, ("escalating",))
    assert names(step) == ["record_escalation", "release_waiter", "await_waiter"]
    assert ignored(gen.fire("successor_admitting"), "live") and gen.state == "escalating"
    step = gen.fire("waiter_returned")
    assert moved(step) == ("escalating", "cancel_escalated", False, ("ended", "cancel_escalated"))
    assert names(step) == ["end_cancel"] and effect(step, "end_cancel") == {"result": "escalated"}
    step = gen.fire("successor_admitting")
    assert ignored(step, "ended") and names(step) == []  # released


@pytest.mark.parametrize(
    ("event", "effects"),
    [
        ("completion_received", ["unclaimed"]),
        ("dispatch_accepted", []),
        ("handoff_received", []),
        ("stream_lost", []),
        ("execution_stopped", []),
        ("cancel_answered", []),
        ("cancel_wait_timed_out", []),
        ("steer_requested", ["steer_refused"]),
    ],
)
def test_superseded_generation_events_are_ignored(
    engine: EngineName, event: str, effects: list[str]
) -> None:
    """R6, R21, R22, R23: nothing changes for a superseded generation."""
    gen = walk(PromptGeneration.start(engine=engine, generation=1), PROMPT_RECIPES["awaited"])
    step = gen.fire("superseded_by_successor")
    assert moved(step) == ("live", "superseded", False, ("superseded",))
    assert names(step) == ["end_cancel"]  # a cancel waiting on it is answered
    step = gen.fire(event, error="late", stop_reason="end_turn")
    assert ignored(step, "superseded") and names(step) == effects
    assert gen.state == "superseded"


@pytest.mark.parametrize("event", ["steered", "stall_detected", "superseded_by_successor"])
def test_superseded_generation_cannot_be_steered_stalled_or_superseded_again(
    engine: EngineName, event: str
) -> None:
    gen = walk(PromptGeneration.start(engine=engine, generation=1), PROMPT_RECIPES["superseded"])
    with pytest.raises(IllegalTransition, match=f"'{event}' is not allowed in state superseded"):
        gen.fire(event)


def test_completion_before_dispatch_then_late_dispatch_is_ignored(engine: EngineName) -> None:
    """ADMITTED → completion claimed before MarkPromptDispatched; MarkPromptDispatched is
    then ignored, so the generation never becomes steerable (R23)."""
    gen = PromptGeneration.start(engine=engine, generation=2)
    step = gen.fire("completion_received", stop_reason="end_turn")
    assert moved(step) == ("admitted", "completed", False, ("ended", "completed"))
    assert "claim_outcome" in names(step) and "arm_activity" not in names(step)
    step = gen.fire("dispatch_accepted")
    assert ignored(step, "ended") and names(step) == [] and gen.state == "completed"
    assert names(gen.fire("steer_requested")) == ["steer_refused"]


@pytest.mark.parametrize("start", [[], [("dispatch_unreachable", {"reconnectable": True})]])
def test_escalated_before_dispatch_then_late_ack_is_ignored(
    engine: EngineName, start: list[tuple[str, dict[str, Any]]]
) -> None:
    """A cancel escalates a generation whose trigger still waits for its ack (or retries
    after a reconnect); the late ack is then ignored: the turn stays released and never
    becomes steerable."""
    gen = walk(PromptGeneration.start(engine=engine, generation=1), start)
    before = gen.state
    step = gen.fire("cancel_wait_timed_out")
    assert moved(step) == (before, "escalating", False, ("escalating",))
    assert effect(step, "release_waiter") == {"result": "cancel_escalated"}
    assert ignored(gen.fire("dispatch_accepted"), "escalating")
    assert names(gen.fire("steer_requested")) == ["steer_refused"]
    step = gen.fire("escalation_wait_timed_out")
    assert moved(step) == ("escalating", "cancel_escalated", False, ("ended", "cancel_escalated"))
    assert ignored(gen.fire("dispatch_accepted"), "ended") and gen.state == "cancel_escalated"


@pytest.mark.parametrize("outcome", ["failed", "completed"])
@pytest.mark.parametrize("second_is_error", [False, True])
def test_duplicate_terminal_events_are_ignored(
    engine: EngineName, outcome: str, second_is_error: bool
) -> None:
    """R7: a second terminal event cannot replace the first outcome."""
    gen = walk(PromptGeneration.start(engine=engine, generation=5), PROMPT_RECIPES[outcome])
    step = gen.fire("completion_received", is_error=second_is_error, error="again")
    assert ignored(step, "ended") and names(step) == ["unclaimed"]
    assert gen.state == outcome


def test_startup_generation_mismatch_keeps_waiting(engine: EngineName) -> None:
    """R9: a signal from an earlier startup attempt is dropped; the waiter keeps waiting."""
    gen = PromptGeneration.start(engine=engine, generation=1, startup_generation=2)
    gen.fire("dispatch_accepted")
    step = gen.fire("completion_received", startup_generation=1, is_error=True, error="old")
    assert ignored(step, "dispatched") and names(step) == ["unclaimed"]
    assert gen.configuration == ("awaited", "dispatched", "live")
    step = gen.fire("completion_received", startup_generation=2, stop_reason="end_turn")
    assert step.state == "completed"


def test_cancel_release_completion_is_escalation_not_failure(engine: EngineName) -> None:
    gen = walk(PromptGeneration.start(engine=engine, generation=1), PROMPT_RECIPES["awaited"])
    step = gen.fire("completion_received", is_error=True, cancel_release=True, error="released")
    assert moved(step) == ("dispatched", "cancel_escalated", False, ("ended", "cancel_escalated"))
    assert effect(step, "release_waiter") == {"result": "agent_cancel_escalated"}
    assert "publish_prompt_failed" not in names(step)


@pytest.mark.parametrize(
    ("event", "result"),
    [("dispatch_failed", "dispatch_failed"), ("materialization_failed", "attachment_failed")],
)
def test_trigger_failure_is_undelivered_not_left_running(
    engine: EngineName, event: str, result: str
) -> None:
    """kandev H7 made explicit: the admitted generation ends as undelivered and says so."""
    gen = PromptGeneration.start(engine=engine, generation=1)
    step = gen.fire(event, error="no route")
    assert moved(step) == ("admitted", "undelivered", False, ("ended", "undelivered"))
    assert names(step) == ["publish_prompt_failed", "release_waiter", "end_cancel"]
    assert effect(step, "publish_prompt_failed") == {
        "generation": 1,
        "error": "no route",
        "outcome": "undelivered",
    }
    assert effect(step, "release_waiter") == {"error": "no route", "result": result}


@pytest.mark.parametrize(
    ("recipe", "answer", "state", "effects"),
    [
        ("awaited", {"acknowledged": True}, "awaited", ["arm_cancel_wait"]),  # wait for the end
        ("awaited", {"acknowledged": False}, "escalating", None),
        ("stall_reported", {"stream_disconnected": True}, "escalating", None),
        ("unawaited", {"acknowledged": True}, "escalating", None),  # nobody waits on it
        ("handed_off", {"acknowledged": True}, "handed_off", ["arm_cancel_wait"]),
        ("admitted", {"stream_disconnected": True}, "escalating", None),
        ("reconnecting", {"acknowledged": True}, "reconnecting", ["arm_cancel_wait"]),
        ("completed", {"acknowledged": False}, "completed", ["escalate_idle"]),  # no turn
        ("escalating", {"acknowledged": False}, "escalating", []),
    ],
)
def test_the_answer_to_a_cancel_decides_escalation(
    engine: EngineName,
    recipe: str,
    answer: dict[str, bool],
    state: str,
    effects: list[str] | None,
) -> None:
    """Escalate at once when the cancel was not acknowledged, the stream is gone, or the
    turn is dispatch-only; otherwise the runtime waits for the turn to end
    (``arm_cancel_wait``, then ``cancel_wait_timed_out``)."""
    gen = walk(
        PromptGeneration.start(engine=engine, generation=1, dispatch_only=recipe == "unawaited"),
        PROMPT_RECIPES[recipe],
    )
    step = gen.fire("cancel_answered", **answer)
    assert gen.state == state
    if effects is None:
        assert step.entered == ("escalating",)
        assert names(step) == ["record_escalation", "release_waiter", "await_waiter"]
    else:
        assert step.targetless and names(step) == effects


@pytest.mark.xfail(
    reason="chart bug: PromptGeneration's effect key 'cancel_answered: ended' names both "
    "targetless ended transitions, so an acknowledged cancel after the turn ended also "
    "emits escalate_idle (the declaration comments it on the cancel_unacknowledged one)",
    strict=True,
)
def test_an_acknowledged_cancel_after_the_turn_ended_escalates_nothing(
    engine: EngineName,
) -> None:
    gen = walk(PromptGeneration.start(engine=engine, generation=1), PROMPT_RECIPES["completed"])
    step = gen.fire("cancel_answered", acknowledged=True)
    assert ignored(step, "ended") and names(step) == []


def test_an_unreachable_carrier_that_cannot_redial_is_not_waited_for(
    engine: EngineName,
) -> None:
    """stdio pipes cannot redial, so "stream not connected" ends the generation."""
    gen = PromptGeneration.start(engine=engine, generation=1)
    step = gen.fire("dispatch_unreachable", reconnectable=False, error="not connected")
    assert step.state == "undelivered"
    assert effect(step, "release_waiter") == {"error": "not connected", "result": "dispatch_failed"}


def test_reconnect_retry_redispatches_or_times_out(engine: EngineName) -> None:
    gen = PromptGeneration.start(engine=engine, generation=1)
    step = gen.fire("dispatch_unreachable", reconnectable=True)
    assert moved(step) == ("admitted", "reconnecting", False, ("reconnecting",))
    assert names(step) == ["wait_for_carrier"]
    assert ignored(gen.fire("dispatch_unreachable", reconnectable=True), "reconnecting")
    assert ignored(gen.fire("stream_lost", error="again"), "live")  # the retry owns the wait
    step = gen.fire("dispatch_accepted")
    assert moved(step) == ("reconnecting", "awaited", False, ("dispatched", "awaited"))
    late = PromptGeneration.start(engine=engine, generation=2)
    late.fire("dispatch_unreachable", reconnectable=True)
    step = late.fire("reconnect_timed_out", error="gave up")
    assert moved(step) == ("reconnecting", "undelivered", False, ("ended", "undelivered"))
    assert effect(step, "publish_prompt_failed")["outcome"] == "undelivered"


def test_handoff_releases_the_waiter_but_stays_claimable_and_unsteerable(
    engine: EngineName,
) -> None:
    """kandev handlePromptHandoffEvent; kandev H6 (still steerable after handoff) made
    impossible."""
    gen = walk(PromptGeneration.start(engine=engine, generation=1), PROMPT_RECIPES["awaited"])
    step = gen.fire("handoff_received")
    assert moved(step) == ("dispatched", "handed_off", False, ("handed_off",))
    assert names(step) == ["claim_handoff", "release_waiter", "end_cancel"]
    assert effect(step, "release_waiter") == {"result": "handed_off"}
    with pytest.raises(IllegalTransition):
        gen.fire("steered")
    assert names(gen.fire("steer_requested")) == ["steer_refused"]
    step = gen.fire("completion_received", stop_reason="end_turn")
    assert step.state == "completed"
    assert names(step)[:3] == ["claim_outcome", "release_waiter", "publish_terminal_event"]


def test_stall_is_reported_once_per_wait(engine: EngineName) -> None:
    gen = walk(PromptGeneration.start(engine=engine, generation=1), PROMPT_RECIPES["awaited"])
    step = gen.fire("stall_detected", stalled_for=30.0)
    assert moved(step) == ("awaited", "stall_reported", False, ("stall_reported",))
    assert effect(step, "report_stall") == {"generation": 1, "stalled_for": 30.0}
    again = gen.fire("stall_detected", stalled_for=60.0)
    assert ignored(again, "stall_reported") and names(again) == []
    assert ignored(gen.fire("steered"), "dispatched")
    assert gen.configuration == ("stall_reported", "dispatched", "live")


def test_owning_disconnect_then_late_completion_is_still_claimed(engine: EngineName) -> None:
    gen = walk(PromptGeneration.start(engine=engine, generation=1), PROMPT_RECIPES["awaited"])
    step = gen.fire("stream_lost", error="gone")
    assert moved(step) == ("dispatched", "disconnected", False, ("ended", "disconnected"))
    assert names(step) == [
        "claim_disconnect",
        "release_waiter",
        "publish_stream_error",
        "end_cancel",
    ]
    step = gen.fire("completion_received", is_error=True, error="late")
    assert moved(step) == ("disconnected", "failed", False, ("failed",))  # still in ended
    assert "release_waiter" not in names(step)  # released already
    assert names(step) == [
        "claim_outcome",
        "publish_terminal_event",
        "publish_prompt_failed",
        "end_cancel",
    ]


def test_a_stopped_execution_ends_the_live_turn_without_a_stream_error(
    engine: EngineName,
) -> None:
    """StopAgentWithReason: like a lost stream, but nothing is published as a stream error."""
    gen = walk(PromptGeneration.start(engine=engine, generation=1), PROMPT_RECIPES["awaited"])
    step = gen.fire("execution_stopped", error="stopped")
    assert step.state == "disconnected"
    assert names(step) == ["claim_disconnect", "release_waiter", "end_cancel"]
    assert ignored(gen.fire("execution_stopped", error="stopped"), "ended")


# --- Execution -----------------------------------------------------------------------------


def test_execution_happy_life(engine: EngineName) -> None:
    ex = Execution.start(engine=engine)
    assert ex.state == "running" and ex.compiled.display[ex.state] == "RUNNING"
    for event, data, state, effects in [
        ("start_requested", {}, "starting", []),
        ("prompt_began", {}, "running", []),
        (
            "turn_completed",
            {"generation": 1, "stop_reason": "end_turn"},
            "ready",
            ["publish_agent_ready", "watch_for_wakeup"],
        ),
        ("wakeup_content_arrived", {}, "running", ["publish_agent_running"]),
        (
            "wakeup_turn_completed",
            {"stop_reason": "end_turn"},
            "ready",
            ["end_wakeup_turn", "publish_agent_ready", "watch_for_wakeup"],
        ),
        (
            "stop_requested",
            {"reason": "done"},
            "stopped",
            ["record_finish", "publish_agent_stopped"],
        ),
    ]:
        step = ex.fire(event, **data)
        assert (step.state, names(step)) == (state, effects), event
    assert ex.ended and ex.compiled.display[ex.state] == "STOPPED"


def test_an_empty_wakeup_turn_re_enters_ready(engine: EngineName) -> None:
    """``ready.to.itself()`` exits and re-enters READY: its entry effect runs again."""
    ex = walk(Execution.start(engine=engine), [("start_requested", {}), ("booted", {})])
    step = ex.fire("wakeup_turn_completed", stop_reason="")
    assert moved(step) == ("ready", "ready", False, ("ready",))
    assert names(step) == [
        "end_wakeup_turn",
        "publish_agent_running",
        "publish_agent_ready",
        "watch_for_wakeup",
    ]
    assert effect(step, "publish_agent_ready") == {"stop_reason": "", "generation": 0}


def test_failed_is_never_downgraded_to_stopped(engine: EngineName) -> None:
    ex = walk(Execution.start(engine=engine), [("start_requested", {}), ("booted", {})])
    step = ex.fire("turn_failed", generation=1, error="boom")
    assert moved(step) == ("active", "failed", False, ("failed",))
    assert effect(step, "publish_agent_failed") == {
        "error": "boom",
        "generation": 1,
        "phase": "prompt_send",
    }
    step = ex.fire("process_exited", exit_code=0, shutting_down=True)
    assert ignored(step, "failed") and names(step) == ["record_exit", "close_subscriptions"]
    step = ex.fire("turn_failed", shutting_down=True, generation=2, error="late")
    assert ignored(step, "failed") and names(step) == []  # publishes nothing
    assert ex.state == "failed"


@pytest.mark.parametrize(
    ("data", "state", "first"),
    [
        ({"exit_code": 0}, "completed", "record_exit"),
        ({"exit_code": 3, "error": "exit status 3"}, "failed", "record_exit"),
        ({"exit_code": 0, "shutting_down": True}, "completed", "record_exit"),  # s95
        ({"exit_code": 1, "shutting_down": True}, "stopped", "record_exit"),  # R32
    ],
)
def test_process_exit(engine: EngineName, data: dict[str, Any], state: str, first: str) -> None:
    ex = walk(Execution.start(engine=engine), [("start_requested", {}), ("booted", {})])
    step = ex.fire("process_exited", **data)
    assert (step.source, step.state) == ("active", state)
    assert names(step)[0] == first and names(step)[-1] == "close_subscriptions"
    assert ex.ended is (state == "stopped")


def test_before_the_session_is_initialized_the_startup_owns_failures(
    engine: EngineName,
) -> None:
    """R10: while STARTING, a lost stream, a process exit and a wakeup end are the startup's
    to report (its requests fail); the status does not move."""
    ex = walk(Execution.start(engine=engine), [("start_requested", {})])
    for event, data in [
        ("stream_lost", {"error": "x"}),
        ("process_exited", {"exit_code": 3}),
        ("wakeup_turn_completed", {}),
        ("wakeup_turn_failed", {"error": "x"}),
    ]:
        assert ignored(ex.fire(event, **data), "starting"), event
    assert names(ex.fire("prompt_requested")) == ["refuse_prompt"]


def test_shutdown_time_error_completion_is_stopped(engine: EngineName) -> None:
    """R32."""
    ex = walk(Execution.start(engine=engine), [("prompt_began", {})])
    step = ex.fire("turn_failed", shutting_down=True, generation=1, error="x")
    assert step.state == "stopped" and ex.ended
    assert names(step) == ["record_finish", "publish_agent_stopped"]
    assert effect(step, "publish_agent_stopped") == {"reason": "shutdown"}


def test_cancel_escalation_and_recovery_make_ready(engine: EngineName) -> None:
    ex = walk(Execution.start(engine=engine), [("prompt_began", {})])
    assert ignored(ex.fire("prompt_began"), "running")
    step = ex.fire("cancel_escalated", generation=1)
    assert step.state == "ready"
    assert effect(step, "publish_agent_ready") == {"generation": 1, "stop_reason": ""}
    step = ex.fire("stream_lost", error="gone")  # no turn owned it: agentctl.error
    assert step.state == "failed"
    assert names(step) == ["record_failure", "publish_stream_error"]
    assert names(ex.fire("prompt_requested")) == ["refuse_prompt"]
    step = ex.fire("recovered")
    assert moved(step) == ("failed", "ready", False, ("active", "ready"))
    assert names(step) == ["publish_agent_boot_ready", "watch_for_wakeup"]
    assert names(ex.fire("prompt_requested")) == []  # prompts are accepted again


def test_a_lost_stream_a_turn_owned_publishes_no_second_error(engine: EngineName) -> None:
    ex = walk(Execution.start(engine=engine), [("prompt_began", {})])
    step = ex.fire("stream_lost", generation=2, error="gone")
    assert step.state == "failed" and names(step) == ["record_failure"]


def test_undelivered_turn_makes_ready_again(engine: EngineName) -> None:
    """kandev H7: nobody waits for a turn that never reached the agent."""
    ex = walk(Execution.start(engine=engine), [("prompt_began", {})])
    step = ex.fire("turn_undelivered", generation=1)
    assert step.state == "ready"
    assert effect(step, "publish_agent_ready") == {"generation": 1, "stop_reason": ""}
    assert ignored(ex.fire("turn_undelivered", generation=1), "active")


def test_stopped_is_final_and_loud(engine: EngineName) -> None:
    ex = walk(Execution.start(engine=engine), [("stop_requested", {"reason": "bye"})])
    assert ex.ended
    with pytest.raises(
        IllegalTransition, match=r"'prompt_began' is not allowed in state \(ended\)"
    ):
        ex.fire("prompt_began")
    with pytest.raises(IllegalTransition):
        ex.fire("stop_requested", reason="again")


# --- AgentStream ---------------------------------------------------------------------------


def test_websocket_drop_reconnects(engine: EngineName) -> None:
    s = walk(AgentStream.start(engine=engine), [("connect_started", {}), ("connect_succeeded", {})])
    assert s.state == "connected"
    assert s.fire("connection_lost", reconnectable=True).state == "reconnecting"
    # another drop while redialling: keep redialling
    assert ignored(s.fire("connection_lost", reconnectable=True), "reconnecting")
    with pytest.raises(IllegalTransition):
        s.fire("connect_failed")  # a dial is not running while reconnecting
    assert s.fire("connect_succeeded").state == "connected"


def test_the_carrier_gives_up_redialling(engine: EngineName) -> None:
    s = walk(AgentStream.start(engine=engine), [("connect_started", {}), ("connect_succeeded", {})])
    s.fire("connection_lost", reconnectable=True)
    assert s.fire("connection_lost", reconnectable=False).state == "disconnected"
    assert ignored(s.fire("connection_lost"), "disconnected")
    assert s.fire("reconnect_requested", reconnectable=True).state == "reconnecting"
    assert s.fire("connect_timed_out").state == "disconnected"


def test_stdio_eof_is_not_redialled(engine: EngineName) -> None:
    s = walk(AgentStream.start(engine=engine), [("connect_started", {}), ("connect_succeeded", {})])
    assert s.fire("connection_lost", reconnectable=False).state == "disconnected"
    with pytest.raises(IllegalTransition):
        s.fire("reconnect_requested", reconnectable=False)
    step = s.fire("close_requested")
    assert moved(step) == ("disconnected", "closed", False, ("closed",)) and s.ended


def test_connect_timeout_and_refusal(engine: EngineName) -> None:
    s = walk(AgentStream.start(engine=engine), [("connect_started", {})])
    assert s.fire("connect_timed_out").state == "disconnected"
    s.fire("connect_started")
    assert s.fire("connect_failed").state == "disconnected"
