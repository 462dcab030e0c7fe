"""Walks of PromptGeneration (its races, its cancel), Execution (kandev's status table),
FirstActivity and AgentStream: each fired event's returned Step (the transition taken, the
states entered, the effects the runtime must perform), on both engines."""

from __future__ import annotations

from typing import Any

import pytest

from acpfsm.statecharts import (
    AgentStream,
    ChartMachine,
    EngineName,
    Execution,
    FirstActivity,
    IllegalTransition,
    PromptGeneration,
    Step,
)
from acpfsm.statecharts.coordination import fire

from .recipes import EXECUTION_RECIPES, PROMPT_RECIPES, Recipe, walk


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


def generation(engine: EngineName, recipe: str = "admitted", **constants: Any) -> ChartMachine:
    """A generation (number 1 unless given) brought to ``recipe``'s state."""
    constants.setdefault("generation", 1)
    if recipe == "unawaited":
        constants.setdefault("dispatch_only", True)
    return walk(PromptGeneration.start(engine=engine, **constants), PROMPT_RECIPES[recipe])


#: entering escalating or releasing: the waiter learns the escalation, then is awaited
ESCALATING = ["record_escalation", "release_waiter", "await_waiter"]
#: a generation's end answers a cancel waiting for it
DONE = "end_cancel"


# --- PromptGeneration: the ordinary life -----------------------------------------------------


def test_ordinary_generation_admitted_sending_dispatched_completed(engine: EngineName) -> None:
    gen = PromptGeneration.start(engine=engine, generation=3)
    assert gen.configuration == ("admitted", "live") and gen.initial_effects() == ()
    step = gen.fire("dispatch_started")  # the prompt request is in flight
    assert moved(step) == ("admitted", "sending", False, ("sending",)) and names(step) == []
    step = gen.fire("dispatch_accepted")
    assert moved(step) == ("sending", "awaited", False, ("dispatched", "awaited"))
    assert names(step) == ["arm_activity"]
    assert names(gen.fire("steer_requested")) == ["dispatch_steer"]  # steerable
    assert ignored(gen.fire("steered"), "dispatched")
    step = gen.fire("completion_received", stop_reason="end_turn")
    assert moved(step) == ("dispatched", "completed", False, ("ended", "completed"))
    # the waiter learns the outcome before anything is published (R11)
    assert names(step) == [
        "claim_outcome",
        "release_waiter",
        "publish_terminal_event",
        "publish_prompt_completed",
        DONE,
    ]
    assert effect(step, "release_waiter") == {"result": "completed"}
    assert effect(step, "publish_prompt_completed") == {"generation": 3, "stop_reason": "end_turn"}
    assert effect(step, DONE) == {"result": "ended"}
    assert gen.configuration == ("completed", "ended")
    assert names(gen.fire("steer_requested")) == ["steer_refused"]
    with pytest.raises(IllegalTransition):
        gen.fire("steered")


def test_a_completion_while_admitted_is_not_this_prompts(engine: EngineName) -> None:
    """Before the prompt is sent, an end of turn is not this prompt's: it stays unclaimed
    (the runtime treats it as a wakeup turn's end) and the prompt is still sent."""
    gen = generation(engine)
    step = gen.fire("completion_received", stop_reason="end_turn")
    assert ignored(step, "live") and names(step) == ["unclaimed"]
    assert gen.state == "admitted"
    reconnecting = generation(engine, "reconnecting")
    step = reconnecting.fire("completion_received", is_error=True, error="x")
    assert ignored(step, "live") and names(step) == ["unclaimed"]
    assert gen.fire("dispatch_started").state == "sending"


@pytest.mark.parametrize(
    ("data", "outcome", "first"),
    [
        ({"stop_reason": "end_turn"}, "completed", "claim_outcome"),
        ({"is_error": True, "error": "boom"}, "failed", "release_waiter"),
    ],
)
def test_completion_while_sending_then_the_late_ack_is_ignored(
    engine: EngineName, data: dict[str, Any], outcome: str, first: str
) -> None:
    """R23: the agent answers before MarkPromptDispatched; the completion is claimed from
    ``sending`` and the late ``dispatch_accepted`` is ignored, so the generation never
    becomes steerable."""
    gen = generation(engine, "sending")
    step = gen.fire("completion_received", **data)
    assert moved(step) == ("sending", outcome, False, ("ended", outcome))
    assert names(step)[0] == first and "arm_activity" not in names(step)
    if outcome == "failed":
        assert effect(step, "release_waiter") == {"error": "boom", "result": "agent_error"}
    step = gen.fire("dispatch_accepted")
    assert ignored(step, "ended") and names(step) == [] and gen.state == outcome
    assert names(gen.fire("steer_requested")) == ["steer_refused"]


# --- PromptGeneration: the barrier and supersession ------------------------------------------


def test_dispatch_only_generation_holds_the_barrier_until_it_leaves_dispatched(
    engine: EngineName,
) -> None:
    gen = generation(engine, "sending", generation=4, dispatch_only=True)
    assert gen.fire("dispatch_accepted").entered == ("dispatched", "unawaited")
    step = gen.fire("successor_admitting")
    assert ignored(step, "unawaited") and names(step) == ["hold_barrier"]
    # seed D8: the successor gave up waiting; the barrier stays set
    step = gen.fire("barrier_timed_out")
    assert ignored(step, "unawaited") and names(step) == ["barrier_failed"]
    assert names(gen.fire("successor_admitting")) == ["hold_barrier"]
    assert names(gen.fire("steer_requested")) == ["dispatch_steer"]
    step = gen.fire("stall_detected")  # nobody waits: no stall report
    assert ignored(step, "live") and names(step) == []
    step = gen.fire("waiter_abandoned")  # nobody waits on it: nothing to abandon
    assert ignored(step, "live") and names(step) == []
    # a cancel escalates a dispatch-only turn at once, even when acknowledged
    step = gen.fire("cancel_answered", acknowledged=True)
    assert moved(step) == ("unawaited", "escalating", False, ("escalating",))
    assert names(step) == ESCALATING
    assert effect(step, "release_waiter") == {"result": "cancel_escalated"}
    step = gen.fire("successor_admitting")  # the barrier is down
    assert ignored(step, "live") and names(step) == []
    step = gen.fire("waiter_returned")
    assert moved(step) == ("escalating", "cancel_escalated", False, ("ended", "cancel_escalated"))
    assert names(step) == ["report_escalation", DONE]
    # the agent may still owe the turn: its late end is ignored by generation
    step = gen.fire("completion_received", stop_reason="cancelled", error="")
    assert ignored(step, "ended") and names(step) == ["unclaimed"]
    step = gen.fire("successor_admitting")
    assert ignored(step, "ended") and names(step) == []


def test_an_abandoned_turn_holds_back_its_successor_until_it_ends(engine: EngineName) -> None:
    """The waiter left: the turn is cancelled at the agent (``send_cancel``) and a successor
    waits (bounded) for it to end, so the two replies never mix; past the bound the
    successor goes ahead (no ``barrier_failed``)."""
    gen = generation(engine, "awaited")
    step = gen.fire("waiter_abandoned")
    assert moved(step) == ("awaited", "abandoned", False, ("abandoned",))
    assert names(step) == ["send_cancel"]
    step = gen.fire("successor_admitting")
    assert ignored(step, "abandoned") and names(step) == ["hold_barrier"]
    step = gen.fire("barrier_timed_out")
    assert ignored(step, "live") and names(step) == []
    assert names(gen.fire("steer_requested")) == ["steer_refused"]
    step = gen.fire("completion_received", stop_reason="cancelled")
    assert moved(step) == ("abandoned", "completed", False, ("ended", "completed"))
    assert names(gen.fire("successor_admitting")) == []
    step = gen.fire("barrier_timed_out")  # a bound that ran out after the end: nothing
    assert ignored(step, "ended") and names(step) == [] and gen.state == "completed"


@pytest.mark.parametrize(
    ("event", "effects"),
    [
        ("completion_received", ["unclaimed"]),
        ("dispatch_accepted", []),
        ("handoff_received", []),
        ("stream_lost", []),
        ("execution_stopped", []),
        ("cancel_requested", []),
        ("send_wait_timed_out", []),
        ("cancel_answered", []),
        ("cancel_wait_timed_out", []),
        ("waiter_returned", []),
        ("escalation_wait_timed_out", []),
        ("waiter_abandoned", []),
        ("steer_requested", ["steer_refused"]),
    ],
)
def test_superseded_generation_events_are_ignored(
    engine: EngineName, event: str, effects: list[str]
) -> None:
    """R6, R21, R22, R23: nothing changes for a superseded generation."""
    gen = generation(engine, "awaited")
    step = gen.fire("superseded_by_successor")
    assert moved(step) == ("live", "superseded", False, ("superseded",))
    assert names(step) == [DONE]  # a cancel waiting on it is answered
    step = gen.fire(event, error="late", stop_reason="end_turn")
    assert ignored(step, "superseded") and names(step) == effects
    assert gen.state == "superseded"


@pytest.mark.parametrize(
    "event",
    [
        "steered",
        "stall_detected",
        "superseded_by_successor",
        "successor_admitting",
        "dispatch_started",
    ],
)
def test_superseded_generation_cannot_be_steered_stalled_superseded_or_sent(
    engine: EngineName, event: str
) -> None:
    """A generation is superseded only once its prompt call is over (kandev's promptMu): its
    own flow sends it nothing more."""
    gen = generation(engine, "superseded")
    with pytest.raises(IllegalTransition, match=f"'{event}' is not allowed in state superseded"):
        gen.fire(event)


def test_an_ended_generation_is_superseded_too(engine: EngineName) -> None:
    gen = generation(engine, "completed")
    step = gen.fire("superseded_by_successor")
    assert moved(step) == ("ended", "superseded", False, ("superseded",))


# --- PromptGeneration: terminal outcomes -----------------------------------------------------


@pytest.mark.parametrize(
    "outcome", ["failed", "completed", "undelivered", "cancel_escalated", "withdrawn"]
)
@pytest.mark.parametrize("second_is_error", [False, True])
def test_duplicate_terminal_events_are_ignored(
    engine: EngineName, outcome: str, second_is_error: bool
) -> None:
    """R7: a second terminal event cannot replace the first outcome."""
    gen = generation(engine, outcome, generation=5)
    step = gen.fire("completion_received", is_error=second_is_error, error="again")
    assert ignored(step, "ended") and names(step) == ["unclaimed"]
    assert ignored(gen.fire("handoff_received"), "ended")
    assert ignored(gen.fire("stream_lost", error="late"), "ended")
    assert gen.state == outcome


def test_startup_generation_mismatch_keeps_waiting(engine: EngineName) -> None:
    """R9: a signal from an earlier startup attempt is dropped; the waiter keeps waiting."""
    gen = generation(engine, "awaited", startup_generation=2)
    step = gen.fire("completion_received", startup_generation=1, is_error=True, error="old")
    assert ignored(step, "dispatched") and names(step) == ["unclaimed"]
    assert gen.configuration == ("awaited", "dispatched", "live")
    # the stale signal is dropped before its outcome is read, a cancel release included
    step = gen.fire("completion_received", startup_generation=1, is_error=True, cancel_release=True)
    assert ignored(step, "dispatched") and names(step) == ["unclaimed"]
    step = gen.fire("completion_received", startup_generation=2, stop_reason="end_turn")
    assert step.state == "completed"


@pytest.mark.parametrize(("recipe", "source"), [("awaited", "dispatched"), ("sending", "sending")])
def test_an_error_completion_fails_the_turn_and_names_a_cancel_release(
    engine: EngineName, recipe: str, source: str
) -> None:
    """kandev handleCompleteEventMarkState: an error completion fails the execution either
    way; when it carries the cancel-release text the waiter learns a cancel escalation (also
    when the agent answered before the dispatch was acknowledged, R23)."""
    for data, result in [
        ({"cancel_release": True}, "agent_cancel_escalated"),
        ({}, "agent_error"),
    ]:
        gen = generation(engine, recipe)
        step = gen.fire("completion_received", is_error=True, error="released", **data)
        assert moved(step) == (source, "failed", False, ("ended", "failed"))
        assert names(step) == [
            "release_waiter",
            "claim_outcome",
            "publish_terminal_event",
            "publish_prompt_failed",
            DONE,
        ]
        assert effect(step, "release_waiter") == {"error": "released", "result": result}
        assert effect(step, "publish_prompt_failed") == {
            "generation": 1,
            "error": "released",
            "outcome": "failed",
        }


@pytest.mark.parametrize(
    ("recipe", "leaf", "event", "data"),
    [
        # the waiter left while the request was out; its failure comes after: the cancel
        # that leaving sent decides, the late failure changes nothing
        ("abandoned", "abandoned", "dispatch_failed", {"error": "no route"}),
        # a redial wait that was overtaken by the dispatch (or anything later) is stale
        ("awaited", "awaited", "reconnect_timed_out", {"error": "late"}),
        ("handed_off", "handed_off", "reconnect_timed_out", {"error": "late"}),
    ],
)
def test_late_dispatch_facts_leave_a_live_turn_alone(
    engine: EngineName, recipe: str, leaf: str, event: str, data: dict[str, Any]
) -> None:
    gen = generation(engine, recipe)
    step = gen.fire(event, **data)
    assert ignored(step, "live") and names(step) == []
    assert gen.state == leaf


LATE_FACTS = (
    "successor_admitting",
    "barrier_timed_out",
    "dispatch_accepted",
    "dispatch_unreachable",
    "dispatch_failed",
    "materialization_failed",
    "reconnect_timed_out",
    "handoff_received",
    "stream_lost",
    "execution_stopped",
    "send_wait_timed_out",
    "cancel_wait_timed_out",
    "waiter_returned",
    "escalation_wait_timed_out",
    "waiter_abandoned",
    "stall_detected",
)


@pytest.mark.parametrize("recipe", ["completed", "failed", "cancel_escalated", "undelivered"])
def test_late_facts_leave_an_ended_generation_alone(engine: EngineName, recipe: str) -> None:
    """R7: once a generation has its outcome, a timer, signal or answer that comes late
    moves nothing and asks for nothing."""
    for event in LATE_FACTS:
        gen = generation(engine, recipe)
        step = gen.fire(event, error="late")
        assert ignored(step, "ended") and names(step) == [], event
        assert gen.state == recipe, event


def test_cancel_release_without_an_error_is_an_ordinary_completion(engine: EngineName) -> None:
    gen = generation(engine, "awaited")
    step = gen.fire("completion_received", cancel_release=True, stop_reason="cancelled")
    assert step.state == "completed"


@pytest.mark.parametrize(
    ("recipe", "event", "source"),
    [
        ("sending", "dispatch_failed", "sending"),
        ("admitted", "materialization_failed", "admitted"),
        ("reconnecting", "reconnect_timed_out", "reconnecting"),
        ("sending", "dispatch_unreachable", "sending"),  # stdio: cannot redial
    ],
)
def test_trigger_failure_is_undelivered_not_left_running(
    engine: EngineName, recipe: str, event: str, source: str
) -> None:
    """kandev H7 made explicit: the generation ends as undelivered and says so."""
    gen = generation(engine, recipe)
    step = gen.fire(event, error="no route", reconnectable=False)
    assert moved(step) == (source, "undelivered", False, ("ended", "undelivered"))
    assert names(step) == ["publish_prompt_failed", "release_waiter", DONE]
    assert effect(step, "publish_prompt_failed") == {
        "generation": 1,
        "error": "no route",
        "outcome": "undelivered",
    }
    assert effect(step, "release_waiter") == {"error": "no route", "result": "undelivered"}
    assert ignored(gen.fire(event, error="again"), "ended")


def test_a_trigger_the_carrier_released_on_cancel_is_a_cancel_escalation(
    engine: EngineName,
) -> None:
    gen = generation(engine, "sending")
    step = gen.fire("dispatch_failed", cancel_release=True, error="prompt abandoned after cancel")
    assert moved(step) == ("sending", "cancel_escalated", False, ("ended", "cancel_escalated"))
    assert names(step) == ["publish_prompt_failed", "release_waiter", DONE]
    assert effect(step, "publish_prompt_failed")["outcome"] == "cancel_escalated"
    assert effect(step, "release_waiter") == {
        "error": "prompt abandoned after cancel",
        "result": "dispatch_cancel_escalated",
    }


def test_reconnect_retry_redispatches_or_times_out(engine: EngineName) -> None:
    gen = generation(engine, "sending")
    step = gen.fire("dispatch_unreachable", reconnectable=True, error="not connected")
    assert moved(step) == ("sending", "reconnecting", False, ("reconnecting",))
    assert names(step) == ["wait_for_carrier"]
    assert ignored(gen.fire("dispatch_unreachable", reconnectable=True, error="x"), "live")
    assert ignored(gen.fire("stream_lost", error="again"), "live")  # the retry owns the wait
    step = gen.fire("dispatch_started")  # the carrier is back: the same generation again
    assert moved(step) == ("reconnecting", "sending", False, ("sending",))
    step = gen.fire("dispatch_accepted")
    assert moved(step) == ("sending", "awaited", False, ("dispatched", "awaited"))
    # still unreachable after the redial: wait again
    again = generation(engine, "reconnecting")
    again.fire("dispatch_started")
    assert again.fire("dispatch_unreachable", reconnectable=True, error="x").state == (
        "reconnecting"
    )


def test_handoff_releases_the_waiter_but_stays_claimable_and_unsteerable(
    engine: EngineName,
) -> None:
    """kandev handlePromptHandoffEvent; kandev H6 (still steerable after handoff) made
    impossible."""
    gen = generation(engine, "awaited")
    step = gen.fire("handoff_received")
    assert moved(step) == ("dispatched", "handed_off", False, ("handed_off",))
    assert names(step) == ["claim_handoff", "release_waiter", DONE]
    assert effect(step, "release_waiter") == {"result": "handed_off"}
    with pytest.raises(IllegalTransition):
        gen.fire("steered")
    assert names(gen.fire("steer_requested")) == ["steer_refused"]
    assert ignored(gen.fire("handoff_received"), "live")
    assert ignored(gen.fire("waiter_abandoned"), "live")  # released already
    step = gen.fire("completion_received", stop_reason="end_turn")
    assert step.state == "completed"
    assert names(step)[:3] == ["claim_outcome", "release_waiter", "publish_terminal_event"]
    failing = generation(engine, "handed_off")
    step = failing.fire("completion_received", is_error=True, error="late")
    assert moved(step) == ("handed_off", "failed", False, ("ended", "failed"))
    assert effect(step, "release_waiter") == {"error": "late", "result": "agent_error"}


def test_stall_is_reported_once_per_wait(engine: EngineName) -> None:
    gen = generation(engine, "awaited")
    step = gen.fire("stall_detected", stalled_for=30.0)
    assert moved(step) == ("awaited", "stall_reported", False, ("stall_reported",))
    assert effect(step, "report_stall") == {"generation": 1, "stalled_for": 30.0}
    again = gen.fire("stall_detected", stalled_for=60.0)
    assert ignored(again, "live") and names(again) == []
    assert ignored(gen.fire("steered"), "dispatched")
    assert gen.configuration == ("stall_reported", "dispatched", "live")
    step = gen.fire("waiter_abandoned")  # a stalled wait can be left too
    assert moved(step) == ("stall_reported", "abandoned", False, ("abandoned",))


@pytest.mark.parametrize("recipe", ["awaited", "handed_off", "abandoned", "escalating"])
def test_owning_disconnect_then_late_completion_is_still_claimed(
    engine: EngineName, recipe: str
) -> None:
    gen = generation(engine, recipe)
    step = gen.fire("stream_lost", error="gone")
    source = "dispatched" if recipe == "awaited" else recipe
    assert moved(step) == (source, "disconnected", False, ("ended", "disconnected"))
    assert names(step) == ["publish_stream_error", "claim_disconnect", "release_waiter", DONE]
    assert effect(step, "publish_stream_error") == {"generation": 1, "error": "gone"}
    assert effect(step, "release_waiter") == {"result": "disconnected"}
    step = gen.fire("completion_received", is_error=True, error="late")
    assert moved(step) == ("disconnected", "failed", False, ("failed",))  # still in ended
    assert "release_waiter" not in names(step)  # released already
    assert names(step) == ["claim_outcome", "publish_terminal_event", "publish_prompt_failed", DONE]
    other = generation(engine, recipe)
    other.fire("stream_lost", error="gone")
    step = other.fire("completion_received", stop_reason="end_turn")
    assert moved(step) == ("disconnected", "completed", False, ("completed",))


@pytest.mark.parametrize(
    "recipe", ["sending", "awaited", "handed_off", "abandoned", "releasing", "escalating"]
)
def test_a_stopped_execution_ends_the_live_turn_without_a_stream_error(
    engine: EngineName, recipe: str
) -> None:
    """StopAgentWithReason: the turn ends ``stopped`` (its partial reply kept, as for a lost
    stream, but nothing published as a stream error): its waiter and a cancel waiting for it
    learn that the app stopped the execution; a later end is not claimed, a cancel says so."""
    gen = generation(engine, recipe)
    step = gen.fire("execution_stopped", error="stopped")
    assert step.state == "stopped"
    assert names(step) == ["claim_disconnect", "release_waiter", "end_cancel"]
    assert effect(step, "release_waiter") == {"error": "stopped", "result": "stopped"}
    assert effect(step, "end_cancel") == {"result": "stopped"}
    assert ignored(gen.fire("execution_stopped", error="stopped"), "ended")
    assert names(gen.fire("completion_received", stop_reason="end_turn")) == ["unclaimed"]
    step = gen.fire("cancel_requested")
    assert ignored(step, "stopped") and names(step) == ["cancel_stopped"]


@pytest.mark.parametrize("recipe", ["admitted", "sending", "reconnecting"])
def test_a_loss_before_the_turn_is_at_the_agent_is_not_a_disconnect(
    engine: EngineName, recipe: str
) -> None:
    """Not yet at the agent: the dispatch reports its own failure."""
    gen = generation(engine, recipe)
    before = gen.state
    step = gen.fire("stream_lost", error="gone")
    assert ignored(step, "live") and names(step) == [] and gen.state == before


@pytest.mark.parametrize(
    ("recipe", "outcome", "result"),
    [
        ("admitted", "withdrawn", "withdrawn"),
        ("reconnecting", "withdrawn", "withdrawn"),
        ("sending", "stopped", "stopped"),
    ],
)
def test_a_stop_before_the_turn_is_at_the_agent_ends_it(
    engine: EngineName, recipe: str, outcome: str, result: str
) -> None:
    """StopAgentWithReason, found by ``acpfsm verify`` (nothing_dispatched_after_stop, R24):
    a prompt not yet sent is withdrawn, so its flow skips the send after the stop; one being
    sent ends with the stop, so its late answer is ignored (R23) and never makes it
    dispatched under a STOPPED execution."""
    gen = generation(engine, recipe)
    step = gen.fire("execution_stopped", error="agent stream disconnected: execution stopped")
    assert step.state == outcome
    assert effect(step, "release_waiter")["result"] == result
    assert ignored(gen.fire("dispatch_accepted"), "ended")
    if outcome == "withdrawn":
        assert names(gen.fire("dispatch_started")) == ["skip_dispatch"]


@pytest.mark.parametrize("recipe", ["releasing", "escalating"])
@pytest.mark.parametrize("event", ["stream_lost"])
def test_a_loss_while_escalating_ends_the_turn_disconnected(
    engine: EngineName, recipe: str, event: str
) -> None:
    """The escalation's waiter is already released; a loss meanwhile ends the turn with the
    stream, so nothing waits for an end that cannot come and the execution follows to FAILED
    (a stop: ``stopped``, above)."""
    gen = generation(engine, recipe)
    step = gen.fire(event, error="gone")
    assert moved(step)[1] == "disconnected" and gen.state == "disconnected"
    expected = ["claim_disconnect", "release_waiter", DONE]
    if event == "stream_lost":
        expected.append("publish_stream_error")
    assert sorted(names(step)) == sorted(expected)


# --- PromptGeneration: cancel ----------------------------------------------------------------


@pytest.mark.parametrize(("recipe", "event"), [
    ("admitted", "cancel_requested"),
    ("reconnecting", "cancel_requested"),
    ("admitted", "waiter_abandoned"),
    ("reconnecting", "waiter_abandoned"),
    # a cancel that waited for the request's answer, or sent while it was in flight, finds
    # it not connected (waiting for the carrier): withdrawn as a cancel_requested finds it
    # (acpfsm verify's a_cancel_is_done_only_once_its_turn_is_over: the cancel was done and
    # the prompt sent after it)
    ("reconnecting", "send_wait_timed_out"),
    ("reconnecting", "cancel_answered"),
    ("reconnecting", "cancel_wait_timed_out"),
])  # fmt: skip
def test_a_prompt_not_yet_sent_is_withdrawn(engine: EngineName, recipe: str, event: str) -> None:
    """Cancelled (or its caller gone) before it was sent: nothing reaches the agent; the
    caller gets a cancelled result; a flow about to send it skips it."""
    gen = generation(engine, recipe, generation=2)
    step = gen.fire(event)
    assert moved(step) == (recipe, "withdrawn", False, ("ended", "withdrawn"))
    assert names(step) == ["release_waiter", "publish_prompt_completed", DONE]
    assert effect(step, "release_waiter") == {"result": "withdrawn"}
    assert effect(step, "publish_prompt_completed") == {"generation": 2, "stop_reason": "cancelled"}
    step = gen.fire("dispatch_started")
    assert ignored(step, "withdrawn") and names(step) == ["skip_dispatch"]
    assert ignored(gen.fire("reconnect_timed_out", error="x"), "ended")
    assert ignored(gen.fire("materialization_failed", error="x"), "ended")
    assert gen.state == "withdrawn"


def test_a_cancel_never_overtakes_the_prompt_request_it_cancels(engine: EngineName) -> None:
    """While the request is in flight the cancel waits for its answer (``await_dispatch``),
    then is sent to the turn at the agent; past the bound it goes out anyway."""
    gen = generation(engine, "sending")
    step = gen.fire("cancel_requested")
    assert ignored(step, "sending") and names(step) == ["await_dispatch"]
    gen.fire("dispatch_accepted")
    step = gen.fire("cancel_requested")
    assert ignored(step, "live") and names(step) == ["send_cancel"]
    late = generation(engine, "sending")
    late.fire("cancel_requested")
    step = late.fire("send_wait_timed_out")
    assert ignored(step, "sending") and names(step) == ["send_cancel"]
    assert late.state == "sending"
    # answered between the bound and its fact: the turn at the agent gets the cancel (acpfsm
    # verify's a_cancel_is_done_only_once_its_turn_is_over: the cancel was done, the turn
    # ran on); an ended turn has nothing to send
    for recipe in ("awaited", "stall_reported", "unawaited"):
        step = generation(engine, recipe).fire("send_wait_timed_out")
        assert ignored(step, "live") and names(step) == ["send_cancel"], recipe
    assert names(generation(engine, "completed").fire("send_wait_timed_out")) == []


@pytest.mark.parametrize("recipe", ["completed", "failed", "cancel_escalated", "handed_off"])
def test_a_cancel_after_the_turn_still_goes_to_the_agent(engine: EngineName, recipe: str) -> None:
    """The agent may run a turn of its own (a wakeup): the cancel is sent anyway."""
    step = generation(engine, recipe).fire("cancel_requested")
    assert step.targetless and names(step) == ["send_cancel"]


@pytest.mark.parametrize(
    ("recipe", "answer", "state", "effects"),
    [
        # a turn at the agent acknowledged the cancel: wait (≤ 10 s) for it to end
        ("awaited", {"acknowledged": True}, "awaited", ["arm_cancel_wait"]),
        ("stall_reported", {"acknowledged": True}, "stall_reported", ["arm_cancel_wait"]),
        ("handed_off", {"acknowledged": True}, "handed_off", ["arm_cancel_wait"]),
        ("abandoned", {"acknowledged": True}, "abandoned", ["arm_cancel_wait"]),
        ("sending", {"acknowledged": True}, "sending", ["arm_cancel_wait"]),
        # the carrier gave the turn up: no end will come, release it
        ("awaited", {"acknowledged": False}, "releasing", None),
        ("stall_reported", {"acknowledged": False}, "releasing", None),
        ("handed_off", {"acknowledged": False}, "releasing", None),
        ("abandoned", {"acknowledged": False}, "releasing", None),
        # the stream is gone: an end may still come after a redial, escalate
        ("awaited", {"stream_disconnected": True}, "escalating", None),
        ("stall_reported", {"stream_disconnected": True}, "escalating", None),
        ("handed_off", {"stream_disconnected": True}, "escalating", None),
        # … but nobody waits on an abandoned turn: it ends as if lost with the stream (found
        # by acpfsm verify: on a carrier already gone for good it stayed escalated forever)
        ("abandoned", {"stream_disconnected": True}, "disconnected", []),
        # nobody waits on a dispatch-only turn: escalate at once
        ("unawaited", {"acknowledged": True}, "escalating", None),
        ("unawaited", {"stream_disconnected": True}, "escalating", None),
        # no turn in flight: the idle escalation (after a waiting prompt, kandev's barrier)
        ("cancel_escalated", {"acknowledged": False}, "cancel_escalated", ["escalate_idle"]),
        ("cancel_escalated", {"acknowledged": True}, "cancel_escalated", []),
        ("escalating", {"acknowledged": False}, "escalating", ["arm_cancel_wait"]),
        ("releasing", {"acknowledged": False}, "releasing", ["arm_cancel_wait"]),
        ("completed", {"acknowledged": False}, "completed", ["escalate_idle"]),
        ("completed", {"stream_disconnected": True}, "completed", ["escalate_idle"]),
        ("completed", {"acknowledged": True}, "completed", []),
        ("withdrawn", {"acknowledged": True}, "withdrawn", []),
        ("superseded", {"acknowledged": False}, "superseded", []),
    ],
)
def test_the_answer_to_a_cancel_decides_escalation(
    engine: EngineName,
    recipe: str,
    answer: dict[str, bool],
    state: str,
    effects: list[str] | None,
) -> None:
    """Release the turn when the carrier gave it up, escalate when the stream is gone or the
    turn is dispatch-only; otherwise the runtime waits for the turn to end
    (``arm_cancel_wait``, then ``cancel_wait_timed_out``)."""
    gen = generation(engine, recipe)
    step = gen.fire("cancel_answered", error="no answer", **answer)
    assert gen.state == state
    if state == "disconnected":
        assert names(step) == ["claim_disconnect", "release_waiter", DONE]
        assert effect(step, "claim_disconnect") == {"error": "no answer"}
    elif effects is None:
        assert step.entered == (state,) and not step.targetless
        assert names(step) == ESCALATING
        assert effect(step, "release_waiter") == {"result": "cancel_escalated"}
    else:
        assert step.targetless and names(step) == effects


@pytest.mark.parametrize(
    ("recipe", "source"),
    [
        ("awaited", "dispatched"),
        ("stall_reported", "dispatched"),
        ("unawaited", "dispatched"),
        ("sending", "sending"),
        ("handed_off", "handed_off"),
        ("abandoned", "abandoned"),
    ],
)
def test_a_turn_that_outlives_the_cancel_wait_escalates(
    engine: EngineName, recipe: str, source: str
) -> None:
    gen = generation(engine, recipe)
    step = gen.fire("cancel_wait_timed_out")
    assert moved(step) == (source, "escalating", False, ("escalating",))
    assert names(step) == ESCALATING


@pytest.mark.parametrize(
    ("recipe", "effects"),
    [
        ("admitted", []),
        ("escalating", []),
        ("releasing", []),
        ("completed", []),
        ("superseded", []),
    ],
)
def test_the_cancel_wait_elsewhere_escalates_nothing_new(
    engine: EngineName, recipe: str, effects: list[str]
) -> None:
    gen = generation(engine, recipe)
    before = gen.state
    step = gen.fire("cancel_wait_timed_out")
    assert step.targetless and names(step) == effects and gen.state == before


@pytest.mark.parametrize("event", ["waiter_returned", "escalation_wait_timed_out"])
def test_a_turn_the_carrier_gave_up_ends_once_the_waiter_returned(
    engine: EngineName, event: str
) -> None:
    """escalateStuckCancel's post-wait: the turn is over (the execution goes READY)."""
    gen = generation(engine, "awaited")
    step = gen.fire("cancel_answered", acknowledged=False)
    assert moved(step) == ("dispatched", "releasing", False, ("releasing",))
    assert names(gen.fire("steer_requested")) == ["steer_refused"]
    step = gen.fire(event)
    assert moved(step) == ("releasing", "cancel_escalated", False, ("ended", "cancel_escalated"))
    assert names(step) == ["report_escalation", DONE]
    # the carrier's late end changes nothing
    step = gen.fire("completion_received", stop_reason="cancelled")
    assert ignored(step, "ended") and names(step) == ["unclaimed"]


def test_a_released_turn_that_ends_before_the_waiter_returned_is_escalated(
    engine: EngineName,
) -> None:
    gen = generation(engine, "releasing")
    step = gen.fire("completion_received", is_error=True, error="cancelled", stop_reason="")
    assert moved(step) == ("releasing", "cancel_escalated", False, ("ended", "cancel_escalated"))
    assert names(step) == ["claim_outcome", "publish_terminal_event", DONE]
    assert effect(step, "claim_outcome") == {"stop_reason": "", "error": "cancelled"}
    assert ignored(gen.fire("waiter_returned"), "ended")


@pytest.mark.parametrize("event", ["waiter_returned", "escalation_wait_timed_out"])
def test_an_escalated_turn_the_agent_may_still_owe_is_over_for_the_execution(
    engine: EngineName, event: str
) -> None:
    """kandev escalateStuckCancel: the waiter is released and, once it returned (or 2 s
    passed), the turn is over for the execution (READY, ``agent.ready``) even though a hung
    agent may still owe it; its late end is ignored by generation, and the next cancel with
    nothing in flight escalates idle (a waiting prompt armed kandev's barrier)."""
    gen = generation(engine, "escalating")
    assert ignored(gen.fire("dispatch_accepted"), "escalating")
    assert names(gen.fire("steer_requested")) == ["steer_refused"]
    step = gen.fire(event)
    assert moved(step) == ("escalating", "cancel_escalated", False, ("ended", "cancel_escalated"))
    assert names(step) == ["report_escalation", DONE]
    assert ignored(gen.fire("dispatch_accepted"), "ended")
    assert ignored(gen.fire("cancel_wait_timed_out"), "ended")
    step = gen.fire("completion_received", stop_reason="end_turn", error="")
    assert ignored(step, "ended") and names(step) == ["unclaimed"]
    step = gen.fire("cancel_answered", acknowledged=False)
    assert ignored(step, "ended") and names(step) == ["escalate_idle"]


@pytest.mark.parametrize(("waited_before", "effects"), [(False, []), (True, ["escalate_idle"])])
def test_an_unanswered_cancel_after_dispatch_only_prompts_alone_is_complete(
    engine: EngineName, waited_before: bool, effects: list[str]
) -> None:
    """kandev CancelAgent: the ``promptFinished`` barrier is armed only by a prompt that
    waits; with dispatch-only prompts alone behind the cancel (their turns over) an
    unacknowledged cancel returns nil, while after any waiting prompt it escalates."""
    gen = generation(engine, "sending", dispatch_only=True, waited_before=waited_before)
    gen.fire("dispatch_accepted")
    gen.fire("completion_received", stop_reason="end_turn")
    for answer in ({"acknowledged": False}, {"stream_disconnected": True}):
        step = gen.fire("cancel_answered", **answer)
        assert ignored(step, "ended") and names(step) == effects
    # a waiting prompt arms it by itself
    waiting = generation(engine, "completed")
    assert names(waiting.fire("cancel_answered", acknowledged=False)) == ["escalate_idle"]


def test_a_turn_escalated_while_waiting_for_the_waiter_may_end_meanwhile(
    engine: EngineName,
) -> None:
    gen = generation(engine, "escalating")
    step = gen.fire("completion_received", stop_reason="end_turn", error="")
    assert moved(step) == ("escalating", "cancel_escalated", False, ("ended", "cancel_escalated"))
    assert names(step) == ["claim_outcome", "publish_terminal_event", DONE]
    assert ignored(gen.fire("waiter_returned"), "ended")


def test_a_request_in_flight_when_the_caller_left(engine: EngineName) -> None:
    """The caller left while its prompt request was in flight: the turn is abandoned and
    cancelled, the turn's end is claimed. The request's ack has no one to hear it (the prompt
    flow left with its caller), so the chart declares none there: one would be loud."""
    gen = generation(engine, "sending")
    step = gen.fire("waiter_abandoned")
    assert moved(step) == ("sending", "abandoned", False, ("abandoned",))
    assert names(step) == ["send_cancel"]
    with pytest.raises(IllegalTransition):
        gen.fire("dispatch_accepted")
    assert gen.state == "abandoned"
    step = gen.fire("completion_received", is_error=True, error="cancelled")
    assert moved(step) == ("abandoned", "failed", False, ("ended", "failed"))
    assert effect(step, "release_waiter") == {"error": "cancelled", "result": "agent_error"}


def test_no_ack_is_declared_after_the_carrier_gave_the_abandoned_turn_up(
    engine: EngineName,
) -> None:
    """releasing follows a turn whose prompt flow is gone (abandoned) or past its send: no
    ack can come there, and one would be loud."""
    gen = generation(engine, "sending")
    gen.fire("waiter_abandoned")
    assert gen.fire("cancel_answered", acknowledged=False).state == "releasing"
    with pytest.raises(IllegalTransition):
        gen.fire("dispatch_accepted")
    assert gen.state == "releasing"


def test_a_dispatch_only_turn_the_carrier_gave_up_is_released(engine: EngineName) -> None:
    gen = generation(engine, "unawaited")
    step = gen.fire("cancel_answered", acknowledged=False)
    assert step.state == "releasing"


# --- Execution -----------------------------------------------------------------------------


def execution(engine: EngineName, recipe: str = "running") -> ChartMachine:
    return walk(Execution.start(engine=engine), EXECUTION_RECIPES[recipe])


def test_execution_happy_life(engine: EngineName) -> None:
    ex = Execution.start(engine=engine)
    assert ex.state == "running" and ex.compiled.display[ex.state] == "RUNNING"
    for event, data, state, effects in [
        ("start_requested", {}, "starting", []),
        ("activity_recorded", {}, "starting", ["announce_first_activity"]),
        ("prompt_requested", {}, "starting", ["refuse_prompt"]),
        ("prompt_began", {}, "running", []),
        ("prompt_requested", {}, "running", []),
        (
            "turn_completed",
            {"generation": 1, "stop_reason": "end_turn"},
            "ready",
            ["announce_first_activity", "publish_agent_ready", "watch_for_wakeup"],
        ),
        ("activity_recorded", {}, "ready", []),  # R26: READY takes it silently
        ("prompt_requested", {}, "ready", []),
        ("wakeup_content_arrived", {}, "running", ["unwatch_wakeup", "publish_agent_running"]),
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


def test_a_prompt_from_ready_ends_the_wakeup_watch(engine: EngineName) -> None:
    """READY watches for a wakeup turn (``watch_for_wakeup``); a prompt leaving READY ends
    the watch (``unwatch_wakeup``): the content that follows is its turn's, no wakeup."""
    ex = walk(Execution.start(engine=engine), [("booted", {})])
    assert ex.state == "ready"
    step = ex.fire("prompt_began")
    assert (step.state, names(step)) == ("running", ["unwatch_wakeup"])


@pytest.mark.parametrize(
    ("recipe", "announces"),
    [
        ("running", True),
        ("starting", True),
        ("ready", False),
        ("failed", True),
        ("completed", True),
    ],
)
def test_activity_announces_the_first_activity_unless_ready(
    engine: EngineName, recipe: str, announces: bool
) -> None:
    """kandev recordActivity: activity while not READY may be the one first activity (the
    FirstActivity chart keeps it to one); READY takes it silently (R26)."""
    ex = execution(engine, recipe)
    step = ex.fire("activity_recorded")
    assert step.targetless and ex.state == recipe
    assert names(step) == (["announce_first_activity"] if announces else [])


@pytest.mark.parametrize(
    ("recipe", "refused"),
    [
        ("running", False),
        ("ready", False),
        ("starting", True),
        ("failed", True),
        ("completed", True),
    ],
)
def test_prompts_are_accepted_only_running_or_ready(
    engine: EngineName, recipe: str, refused: bool
) -> None:
    """validateStatus."""
    step = execution(engine, recipe).fire("prompt_requested")
    assert step.targetless and names(step) == (["refuse_prompt"] if refused else [])


def test_an_empty_wakeup_turn_re_enters_ready(engine: EngineName) -> None:
    """``ready.to.itself()`` exits and re-enters READY: its entry effect runs again."""
    ex = execution(engine, "ready")
    step = ex.fire("wakeup_turn_completed", stop_reason="")
    assert moved(step) == ("ready", "ready", False, ("ready",))
    assert names(step) == [
        "end_wakeup_turn",
        "publish_agent_running",
        "publish_agent_ready",
        "watch_for_wakeup",
    ]
    assert effect(step, "publish_agent_ready") == {"stop_reason": "", "generation": 0}


def test_a_wakeup_turn_after_a_failure_or_an_exit(engine: EngineName) -> None:
    """A wakeup end revives a FAILED execution (the agent is evidently there); after a clean
    exit its reply is still recorded, the status stays COMPLETED."""
    ex = execution(engine, "failed")
    step = ex.fire("wakeup_turn_completed", stop_reason="end_turn")
    assert moved(step) == ("failed", "ready", False, ("active", "ready"))
    assert names(step) == ["end_wakeup_turn", "publish_agent_ready", "watch_for_wakeup"]
    done = execution(engine, "completed")
    step = done.fire("wakeup_turn_completed", stop_reason="end_turn")
    assert ignored(step, "completed") and names(step) == ["end_wakeup_turn"]
    for recipe in ("failed", "completed"):
        step = execution(engine, recipe).fire("wakeup_turn_failed", error="x")
        assert ignored(step, recipe) and names(step) == ["end_wakeup_turn"]


@pytest.mark.parametrize("recipe", ["running", "ready"])
def test_a_failed_wakeup_turn_fails_the_execution(engine: EngineName, recipe: str) -> None:
    ex = execution(engine, recipe)
    step = ex.fire("wakeup_turn_failed", error="boom")
    assert moved(step) == ("active", "failed", False, ("failed",))
    assert names(step) == ["end_wakeup_turn", "record_failure", "publish_agent_failed"]
    assert effect(step, "publish_agent_failed") == {
        "error": "boom",
        "generation": 0,
        "phase": "prompt_send",
    }
    stopping = execution(engine, recipe)
    step = stopping.fire("wakeup_turn_failed", error="boom", shutting_down=True)  # R32
    assert moved(step) == ("active", "stopped", False, ("stopped",)) and stopping.ended
    assert names(step) == ["end_wakeup_turn", "record_finish", "publish_agent_stopped"]
    assert effect(step, "publish_agent_stopped") == {"reason": "shutdown"}


def test_failed_is_never_downgraded_to_stopped(engine: EngineName) -> None:
    ex = execution(engine, "ready")
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
    assert ignored(ex.fire("init_failed", error="late"), "failed")
    assert ignored(ex.fire("stream_lost", error="late"), "failed")
    assert ex.state == "failed"


def test_completed_absorbs_late_terminal_facts(engine: EngineName) -> None:
    ex = execution(engine, "completed")
    for event, data, effects in [
        ("turn_failed", {"error": "x", "generation": 1}, []),
        ("stream_lost", {"error": "x"}, []),
        ("process_exited", {"exit_code": 1}, ["record_exit", "close_subscriptions"]),
        ("turn_undelivered", {"generation": 1}, []),
        ("cancel_escalated", {"generation": 1}, []),  # nothing to make READY
        ("wakeup_content_arrived", {}, ["unwatch_wakeup"]),  # the watch ends, nothing else
    ]:
        step = ex.fire(event, **data)
        assert ignored(step, "completed") and names(step) == effects, event
    step = ex.fire("prompt_began")  # kandev does not guard BeginPrompt
    assert moved(step) == ("completed", "running", False, ("active", "running"))


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
    ex = execution(engine, "ready")
    step = ex.fire("process_exited", **data)
    assert (step.source, step.state) == ("active", state)
    assert names(step)[0] == first and names(step)[-1] == "close_subscriptions"
    assert ex.ended is (state == "stopped")


def test_before_the_session_is_initialized_the_startup_owns_failures(
    engine: EngineName,
) -> None:
    """R10: while STARTING, a lost stream, a process exit and a wakeup end are the startup's
    to report (its requests fail); the status does not move."""
    ex = execution(engine, "starting")
    for event, data in [
        ("stream_lost", {"error": "x"}),
        ("process_exited", {"exit_code": 3}),
        ("wakeup_turn_completed", {}),
        ("wakeup_turn_failed", {"error": "x"}),
        ("wakeup_content_arrived", {}),
    ]:
        step = ex.fire(event, **data)
        assert step.targetless and ex.state == "starting", event
        # a wakeup fact only ends the watch (the chart's, not the runtime's)
        assert names(step) == (["unwatch_wakeup"] if event == "wakeup_content_arrived" else []), (
            event
        )
    step = ex.fire("agent_start_failed")
    assert moved(step) == ("starting", "failed", False, ("failed",))


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
    step = ex.fire("cancel_escalated", generation=0)  # an idle escalation while READY
    assert ignored(step, "ready") and names(step) == ["publish_agent_ready"]
    step = ex.fire("stream_lost", error="gone")  # no turn owned it: agentctl.error
    assert step.state == "failed"
    assert names(step) == ["record_failure", "publish_stream_error"]
    assert names(ex.fire("prompt_requested")) == ["refuse_prompt"]
    step = ex.fire("recovered")
    assert moved(step) == ("failed", "ready", False, ("active", "ready"))
    assert names(step) == ["publish_agent_boot_ready", "watch_for_wakeup"]
    assert names(ex.fire("prompt_requested")) == []  # prompts are accepted again
    failed = execution(engine, "failed")
    step = failed.fire("cancel_escalated", generation=0)  # an idle escalation while FAILED
    assert moved(step) == ("failed", "ready", False, ("active", "ready"))


@pytest.mark.parametrize(
    ("recipe", "event", "data", "effects"),
    [
        # a claimed success revives a FAILED execution (the agent is evidently there)
        (
            "failed",
            "turn_completed",
            {"generation": 2, "stop_reason": "end_turn"},
            ["announce_first_activity", "publish_agent_ready", "watch_for_wakeup"],
        ),
        # an initial prompt's turn ends before MarkBootReady: READY, announced
        (
            "starting",
            "turn_completed",
            {"generation": 1, "stop_reason": "end_turn"},
            ["announce_first_activity", "publish_agent_ready", "watch_for_wakeup"],
        ),
        (
            "starting",
            "cancel_escalated",
            {"generation": 1},
            ["publish_agent_ready", "watch_for_wakeup"],
        ),
        # MarkBootReady while RUNNING (a prompt began before the boot was marked)
        ("running", "booted", {}, ["publish_agent_boot_ready", "watch_for_wakeup"]),
    ],
)
def test_facts_that_make_an_execution_ready(
    engine: EngineName, recipe: str, event: str, data: dict[str, Any], effects: list[str]
) -> None:
    ex = execution(engine, recipe)
    step = ex.fire(event, **data)
    entered = ("active", "ready") if recipe == "failed" else ("ready",)
    assert moved(step) == (recipe, "ready", False, entered)
    assert names(step) == effects
    assert ex.state == "ready"


def test_a_failed_execution_runs_a_new_prompt_but_ignores_stray_content(
    engine: EngineName,
) -> None:
    """BeginPrompt is not guarded by kandev: a prompt makes a FAILED execution RUNNING; turn
    content that no prompt owns does not (only READY takes a wakeup)."""
    ex = execution(engine, "failed")
    step = ex.fire("wakeup_content_arrived")
    assert ignored(step, "failed") and names(step) == ["unwatch_wakeup"] and ex.state == "failed"
    step = ex.fire("prompt_began")
    assert moved(step) == ("failed", "running", False, ("active", "running"))
    assert names(step) == [] and ex.state == "running"


def test_a_lost_stream_a_turn_owned_publishes_no_second_error(engine: EngineName) -> None:
    ex = walk(Execution.start(engine=engine), [("prompt_began", {})])
    step = ex.fire("stream_lost", generation=2, error="gone")
    assert step.state == "failed" and names(step) == ["record_failure"]


def test_undelivered_turn_makes_ready_again(engine: EngineName) -> None:
    """kandev H7: nobody waits for a turn that never reached the agent."""
    ex = walk(Execution.start(engine=engine), [("prompt_began", {})])
    step = ex.fire("turn_undelivered", generation=1)
    assert moved(step) == ("running", "ready", False, ("ready",))
    assert names(step) == ["publish_agent_ready", "watch_for_wakeup"]
    assert effect(step, "publish_agent_ready") == {"generation": 1, "stop_reason": ""}
    step = ex.fire("turn_undelivered", generation=1)
    assert ignored(step, "active") and names(step) == []
    step = execution(engine, "failed").fire("turn_undelivered", generation=1)
    assert ignored(step, "failed")  # a FAILED execution is not made READY by it


def test_booted_and_turn_completed_while_ready_publish_again(engine: EngineName) -> None:
    """R33: READY stays READY, the event is still published."""
    ex = execution(engine, "ready")
    step = ex.fire("booted")
    assert ignored(step, "ready") and names(step) == ["publish_agent_boot_ready"]
    step = ex.fire("turn_completed", generation=2, stop_reason="end_turn")
    assert ignored(step, "ready") and names(step) == ["publish_agent_ready"]
    assert effect(step, "publish_agent_ready") == {"generation": 2, "stop_reason": "end_turn"}


def test_stopped_is_final_and_loud(engine: EngineName) -> None:
    ex = walk(Execution.start(engine=engine), [("stop_requested", {"reason": "bye"})])
    assert ex.ended
    with pytest.raises(
        IllegalTransition, match=r"'prompt_began' is not allowed in state \(ended\)"
    ):
        ex.fire("prompt_began")
    with pytest.raises(IllegalTransition):
        ex.fire("stop_requested", reason="again")


# --- FirstActivity ---------------------------------------------------------------------------


def test_the_first_activity_is_announced_once(engine: EngineName) -> None:
    """kandev firstActivityOnce: one agent.running per execution, then the chart has ended
    (the runtime asks it no more)."""
    first = FirstActivity.start(engine=engine)
    assert first.state == "quiet" and first.initial_effects() == ()
    step = first.fire("activity_seen")
    assert moved(step) == ("quiet", "announced", False, ("announced",))
    assert names(step) == ["publish_agent_running"]
    assert first.ended
    with pytest.raises(IllegalTransition, match=r"\(ended\)"):
        first.fire("activity_seen")


# --- AgentStream (every transition: tests/statecharts/test_agent_stream.py) -----------------


UP: Recipe = [("connect_started", {}), ("connect_succeeded", {})]


def test_websocket_drop_reconnects(engine: EngineName) -> None:
    s = walk(AgentStream.start(engine=engine), UP)
    assert s.fire("connection_lost", redialable=True, error="1006").state == "announced"
    # another drop while redialling: keep redialling
    assert ignored(s.fire("connection_lost", redialable=True, error="again"), "reconnecting")
    with pytest.raises(IllegalTransition):
        s.fire("connect_failed")  # the first connection's facts do not apply any more
    step = s.fire("redial_succeeded", session_id="s-1", attempts=1)
    assert moved(step) == ("announced", "connected", False, ("connected",))


def test_the_carrier_gives_up_redialling(engine: EngineName) -> None:
    s = walk(AgentStream.start(engine=engine), UP)
    s.fire("connection_lost", redialable=True, error="1006")
    step = s.fire("redial_failed", fatal=True, failures=1, error="401")
    assert step.state == "giving_up" and "give_up" in names(step)
    assert ignored(s.fire("redial_succeeded", session_id="s", attempts=2), "giving_up")
    step = s.fire("connection_lost", error="given up")  # the transport's final loss
    assert step.state == "disconnected" and names(step) == ["announce_loss"]
    assert ignored(s.fire("connection_lost"), "disconnected")


def test_stdio_eof_is_not_redialled(engine: EngineName) -> None:
    s = walk(AgentStream.start(engine=engine), UP)
    assert s.fire("connection_lost", redialable=False, error="EOF").state == "disconnected"
    late = s.fire("redial_failed", failures=1, error="x")  # nothing redials a pipe
    assert late.targetless and late.effects == ()
    step = s.fire("close_requested")
    assert moved(step) == ("disconnected", "closed", False, ("closed",)) and s.ended


def test_connect_timeout_and_refusal(engine: EngineName) -> None:
    s = walk(AgentStream.start(engine=engine), [("connect_started", {})])
    assert s.fire("connect_timed_out").state == "disconnected"
    s.fire("connect_started")
    assert s.fire("connect_failed").state == "disconnected"


def test_a_dial_result_that_raced_the_carriers_end_is_ignored(engine: EngineName) -> None:
    s = walk(AgentStream.start(engine=engine), UP)
    s.fire("connection_lost", redialable=True, error="1006")
    s.fire("connection_lost", error="carrier ended")
    assert s.state == "disconnected"
    assert ignored(s.fire("redial_failed", failures=1, error="x"), "disconnected")


@pytest.mark.parametrize(
    ("recipe", "move", "effects"),
    [
        ("ready", ("ready", "running", False, ("running",)), ["publish_agent_running"]),
        ("failed", ("failed", "running", False, ("active", "running")), []),
        ("running", "active", []),
        ("starting", "active", []),
        ("completed", "completed", []),
    ],
)
def test_a_dispatched_turn_keeps_the_execution_running(
    engine: EngineName, recipe: str, move: Any, effects: list[str]
) -> None:
    """Found by ``acpfsm verify`` (not_ready_while_turn_owed): READY or FAILED entered between
    a prompt's admission and its dispatch (an unclaimed wakeup end, a recovered stream) is
    left once the turn reaches the agent, so the status never reads READY under a live turn."""
    ex = execution(engine, recipe)
    step = ex.fire("turn_dispatched")
    assert names(step) == effects
    if isinstance(move, tuple):
        assert moved(step) == move
    else:
        assert ignored(step, move) and ex.state == recipe


def test_the_dispatch_of_a_turn_moves_a_ready_execution_to_running(engine: EngineName) -> None:
    """The coordination: a generation entering ``dispatched`` is ``turn_dispatched``."""
    ex = execution(engine, "ready")
    gen = generation(engine, "sending")
    machines = {"execution": ex, "prompt_generation": gen}
    fired = fire(machines, gen, "dispatch_accepted", {})
    assert [(m.chart_name, s.event, s.state) for m, s in fired] == [
        ("prompt_generation", "dispatch_accepted", "awaited"),
        ("execution", "turn_dispatched", "running"),
    ]


@pytest.mark.parametrize("recipe", ["escalating"])
@pytest.mark.parametrize(
    ("event", "data"),
    [
        ("dispatch_failed", {"error": "closed"}),
        ("dispatch_unreachable", {"reconnectable": True, "error": "not connected"}),
    ],
)
def test_an_escalated_request_that_never_reached_the_agent_ends_the_escalation(
    engine: EngineName, recipe: str, event: str, data: dict[str, Any]
) -> None:
    """Found by ``acpfsm verify`` (one_outcome_per_generation): a cancel escalated the turn
    while its request was in flight (its bounds expired first); the request then failed, so
    no end will come: the turn is over (before, it stayed escalated, the execution RUNNING)."""
    gen = generation(engine, recipe)
    step = gen.fire(event, **data)
    assert moved(step)[1:] == ("cancel_escalated", False, ("ended", "cancel_escalated"))
    assert names(step) == [DONE]


def test_a_request_in_flight_when_the_carrier_is_gone_for_good_ends_the_turn(
    engine: EngineName,
) -> None:
    """Found by ``acpfsm verify`` (one_outcome_per_generation): a final loss while the
    request is in flight ends the turn (no answer and no end can come any more); a loss the
    carrier redials leaves it to the request's own answer."""
    gen = generation(engine, "sending")
    assert ignored(gen.fire("stream_lost", error="dropped", final=False), "live")
    step = gen.fire("stream_lost", error="gone", final=True)
    assert moved(step) == ("sending", "disconnected", False, ("ended", "disconnected"))
    assert names(step) == ["publish_stream_error", "claim_disconnect", "release_waiter", DONE]
    assert ignored(gen.fire("dispatch_accepted"), "ended")


def test_a_dispatch_failure_while_escalating_ends_the_escalation(engine: EngineName) -> None:
    """The request of a turn whose cancel escalated never reached the agent: no end will come,
    so the escalation is over (the turn does not stay live on a carrier that is gone)."""
    gen = generation(engine, "escalating")
    step = gen.fire("dispatch_failed", error="no route")
    assert step.target == "cancel_escalated"
    assert [e.name for e in step.effects] == ["end_cancel"]
