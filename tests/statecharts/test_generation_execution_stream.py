"""PromptGeneration races (lifecycle.md §5.2, §8), Execution statuses (§5.11), AgentStream."""

from __future__ import annotations

import pytest

from acpfsm.statecharts import AgentStream, Execution, IllegalTransition, PromptGeneration

from .recipes import PROMPT_RECIPES, walk

# --- PromptGeneration ----------------------------------------------------------------------


def test_ordinary_generation_admitted_dispatched_completed() -> None:
    gen = PromptGeneration(3)
    assert gen.leaf == "admitted" and not gen.is_steerable
    gen.fire("dispatch_accepted")
    assert gen.state_ids == ("dispatched", "awaited")
    assert gen.is_steerable and not gen.holds_barrier
    gen.fire("completion_received")
    assert gen.leaf == "completed" and gen.is_terminal and not gen.is_steerable


def test_dispatch_only_generation_holds_the_barrier_until_its_completion() -> None:
    gen = PromptGeneration(4, dispatch_only=True)
    gen.fire("dispatch_accepted")
    assert gen.holds_barrier and gen.is_steerable
    gen.fire("barrier_timed_out")  # seed D8: the successor gave up, the gate stays set
    assert gen.holds_barrier
    gen.fire("escalated")  # only cancel escalation releases it
    assert not gen.holds_barrier and gen.leaf == "cancel_escalated"


@pytest.mark.parametrize(
    "event",
    [
        "completion_received",
        "dispatch_accepted",
        "handoff_received",
        "stream_lost",
    ],
)
def test_superseded_generation_events_are_ignored(event: str) -> None:
    """R6, R21, R22, R23: nothing changes for a superseded generation."""
    gen = walk(PromptGeneration(1), PROMPT_RECIPES["awaited"])
    gen.fire("superseded_by_successor")
    gen.fire(event)
    assert gen.leaf == "superseded"
    assert gen.history[-1].source == gen.history[-1].target == "superseded"


def test_superseded_generation_cannot_be_steered_or_stalled() -> None:
    gen = walk(PromptGeneration(1), PROMPT_RECIPES["superseded"])
    for event in ("steered", "stall_detected"):
        with pytest.raises(IllegalTransition):
            gen.fire(event)


def test_completion_before_dispatch_then_late_dispatch_is_ignored() -> None:
    """ADMITTED → completion claimed before MarkPromptDispatched; MarkPromptDispatched is
    then ignored, so the generation never becomes steerable (§5.2)."""
    gen = PromptGeneration(2)
    gen.fire("completion_received")
    assert gen.leaf == "completed"
    gen.fire("dispatch_accepted")
    assert gen.leaf == "completed" and not gen.is_steerable


@pytest.mark.parametrize("start", [[], [("dispatch_unreachable", {"reconnectable": True})]])
def test_escalated_before_dispatch_then_late_ack_is_ignored(
    start: list[tuple[str, dict[str, object]]],
) -> None:
    """§5.10: a cancel escalates a generation whose trigger is still waiting for its ack (or
    retrying after a reconnect); the late ack is then ignored: the turn stays released and
    never becomes steerable."""
    gen = walk(PromptGeneration(1), start)
    gen.fire("escalated")
    assert gen.leaf == "cancel_escalated"
    gen.fire("dispatch_accepted")
    assert gen.leaf == "cancel_escalated" and not gen.is_steerable


@pytest.mark.parametrize("second_is_error", [False, True])
def test_duplicate_terminal_events_are_ignored(second_is_error: bool) -> None:
    """R7: a second terminal event cannot replace the first outcome."""
    gen = walk(PromptGeneration(5), PROMPT_RECIPES["failed"])
    gen.fire("completion_received", is_error=second_is_error)
    assert gen.leaf == "failed"
    ok = walk(PromptGeneration(5), PROMPT_RECIPES["completed"])
    ok.fire("completion_received", is_error=second_is_error)
    assert ok.leaf == "completed"


def test_startup_generation_mismatch_keeps_waiting() -> None:
    """R9: a signal from an earlier startup attempt is dropped; the waiter keeps waiting."""
    gen = PromptGeneration(1, startup_generation=2)
    gen.fire("dispatch_accepted")
    gen.fire("completion_received", startup_generation=1, is_error=True)
    assert gen.state_ids == ("dispatched", "awaited")
    gen.fire("completion_received", startup_generation=2)
    assert gen.leaf == "completed"


def test_cancel_release_completion_is_escalation_not_failure() -> None:
    gen = walk(PromptGeneration(1), PROMPT_RECIPES["awaited"])
    gen.fire("completion_received", is_error=True, cancel_release=True)
    assert gen.leaf == "cancel_escalated"


def test_trigger_failure_is_undelivered_not_left_running() -> None:
    """kandev H7 made explicit: the admitted generation ends as undelivered."""
    for event, data in (
        ("dispatch_failed", {}),
        ("materialization_failed", {}),
    ):
        gen = PromptGeneration(1)
        gen.fire(event, **data)
        assert gen.leaf == "undelivered" and gen.is_terminal


@pytest.mark.parametrize(
    ("recipe", "answer", "expected"),
    [
        ("awaited", {"acknowledged": True}, "awaited"),  # wait for the turn to end
        ("awaited", {"acknowledged": False}, "cancel_escalated"),
        ("stall_reported", {"stream_disconnected": True}, "cancel_escalated"),
        ("unawaited", {"acknowledged": True}, "cancel_escalated"),  # nobody waits on it
        ("handed_off", {"acknowledged": True}, "handed_off"),
        ("admitted", {"stream_disconnected": True}, "cancel_escalated"),
        ("completed", {"acknowledged": False}, "completed"),  # nothing to cancel
    ],
)
def test_the_answer_to_a_cancel_decides_escalation(
    recipe: str, answer: dict[str, bool], expected: str
) -> None:
    """§5.10: escalate at once when the cancel was not acknowledged, the stream is gone, or
    the turn is dispatch-only; otherwise the runtime keeps waiting (then ``escalated``)."""
    gen = walk(PromptGeneration(1, dispatch_only=recipe == "unawaited"), PROMPT_RECIPES[recipe])
    gen.fire("cancel_answered", **answer)
    assert gen.leaf == expected


def test_an_unreachable_carrier_that_cannot_redial_is_not_waited_for() -> None:
    """§5.7: stdio pipes cannot redial, so "stream not connected" ends the generation."""
    gen = PromptGeneration(1)
    gen.fire("dispatch_unreachable", reconnectable=False)
    assert gen.leaf == "undelivered"


def test_reconnect_retry_redispatches_or_times_out() -> None:
    gen = PromptGeneration(1)
    gen.fire("dispatch_unreachable", reconnectable=True)
    gen.fire("dispatch_unreachable", reconnectable=True)  # another 100 ms poll
    assert gen.leaf == "reconnecting"
    gen.fire("dispatch_accepted")
    assert gen.state_ids == ("dispatched", "awaited")
    late = PromptGeneration(2)
    late.fire("dispatch_unreachable", reconnectable=True)
    late.fire("reconnect_timed_out")
    assert late.leaf == "undelivered"


def test_handoff_releases_the_waiter_but_stays_claimable_and_unsteerable() -> None:
    """§5.6 handoff; kandev H6 (still steerable after handoff) made impossible."""
    gen = walk(PromptGeneration(1), PROMPT_RECIPES["awaited"])
    gen.fire("handoff_received")
    assert gen.leaf == "handed_off" and not gen.is_steerable
    with pytest.raises(IllegalTransition):
        gen.fire("steered")
    gen.fire("completion_received")
    assert gen.leaf == "completed"


def test_stall_is_reported_once_per_wait() -> None:
    gen = walk(PromptGeneration(1), PROMPT_RECIPES["awaited"])
    gen.fire("stall_detected")
    gen.fire("stall_detected")
    entered = [r for r in gen.history if r.target == "stall_reported" and r.source == "awaited"]
    assert len(entered) == 1
    gen.fire("steered")
    assert gen.state_ids == ("dispatched", "stall_reported")


def test_owning_disconnect_then_late_completion_is_still_claimed() -> None:
    gen = walk(PromptGeneration(1), PROMPT_RECIPES["awaited"])
    gen.fire("stream_lost")
    assert gen.leaf == "disconnected" and not gen.is_steerable
    gen.fire("completion_received", is_error=True)
    assert gen.leaf == "failed"


# --- Execution -----------------------------------------------------------------------------


def test_execution_happy_life() -> None:
    ex = Execution()
    assert ex.status == "RUNNING"
    for event, status in [
        ("start_requested", "STARTING"),
        ("prompt_began", "RUNNING"),
        ("turn_completed", "READY"),
        ("wakeup_content_arrived", "RUNNING"),
        ("turn_completed", "READY"),
        ("stop_requested", "STOPPED"),
    ]:
        ex.fire(event)
        assert ex.status == status
    assert ex.is_terminated and ex.is_terminal


def test_failed_is_never_downgraded_to_stopped() -> None:
    ex = walk(Execution(), [("start_requested", {}), ("booted", {}), ("turn_failed", {})])
    assert ex.status == "FAILED"
    ex.fire("process_exited", exit_code=0, shutting_down=True)
    ex.fire("turn_failed", shutting_down=True)
    assert ex.status == "FAILED"
    assert [r.target for r in ex.history[-2:]] == ["failed", "failed"]


@pytest.mark.parametrize(
    ("data", "status"),
    [
        ({"exit_code": 0}, "COMPLETED"),
        ({"exit_code": 3}, "FAILED"),
        ({"exit_code": 0, "shutting_down": True}, "COMPLETED"),  # s95: success unaffected
        ({"exit_code": 1, "shutting_down": True}, "STOPPED"),  # R32
    ],
)
def test_process_exit(data: dict[str, object], status: str) -> None:
    ex = walk(Execution(), [("start_requested", {}), ("booted", {})])
    ex.fire("process_exited", **data)
    assert ex.status == status


def test_shutdown_time_error_completion_is_stopped() -> None:
    """R32."""
    ex = walk(Execution(), [("prompt_began", {})])
    ex.fire("turn_failed", shutting_down=True)
    assert ex.status == "STOPPED"


def test_cancel_escalation_and_recovery_make_ready() -> None:
    ex = walk(Execution(), [("prompt_began", {})])
    ex.fire("cancel_escalated")
    assert ex.status == "READY"
    ex.fire("stream_lost")
    assert ex.status == "FAILED"
    ex.fire("recovered")
    assert ex.status == "READY"
    assert ex.accepts_prompts


def test_stopped_is_final_and_loud() -> None:
    ex = walk(Execution(), [("stop_requested", {})])
    with pytest.raises(IllegalTransition):
        ex.fire("prompt_began")


# --- AgentStream ---------------------------------------------------------------------------


def test_websocket_drop_reconnects() -> None:
    s = walk(AgentStream(), [("connect_started", {}), ("connect_succeeded", {})])
    assert s.is_connected
    s.fire("connection_lost", reconnectable=True)
    assert s.leaf == "reconnecting"
    s.fire("connect_failed", reconnectable=True)
    assert s.leaf == "reconnecting"
    s.fire("connect_succeeded")
    assert s.is_connected


def test_stdio_eof_is_not_redialled() -> None:
    s = walk(AgentStream(), [("connect_started", {}), ("connect_succeeded", {})])
    s.fire("connection_lost", reconnectable=False)
    assert s.leaf == "disconnected"
    with pytest.raises(IllegalTransition):
        s.fire("reconnect_requested", reconnectable=False)
    s.fire("close_requested")
    assert s.is_terminated


def test_connect_timeout() -> None:
    s = walk(AgentStream(), [("connect_started", {})])
    s.fire("connect_timed_out")
    assert s.leaf == "disconnected"
