"""PromptGeneration: the life of one prompt generation *g*.

Theory of operation
-------------------
kandev derives a generation's state from three counters (P newest admitted, D dispatched,
C completion claimed; kandev lifecycle/execution_store.go ``BeginPrompt``,
``MarkPromptDispatched``, ``ClaimPromptCompletion``). Here each admitted prompt gets its own
chart instance, and the states *are* the predicates:

===================  ==========================  ===========================================
state                kandev predicate             entered by
===================  ==========================  ===========================================
live.admitted        P==g, D!=g, C!=g             BeginPrompt
live.reconnecting    admitted, stream down        retryPromptAfterReconnect (5 s, 100 ms polls)
live.dispatched.*    P==g, D==g, C!=g (steerable) MarkPromptDispatched after an accepted trigger
live.handed_off      foreground_idle handoff      handlePromptHandoffEvent (waiter released;
                                                  the turn may still complete)
live.escalating      cancel escalated, waiter     escalateStuckCancel: the waiter is released,
                     being released               its return awaited (≤ 2 s); then READY
ended.completed      C==g, success                a claimed completion
ended.failed         C==g, error                  a claimed error completion
ended.disconnected   owning stream lost           handleStreamDisconnect (a later completion
                                                  may still be claimed)
ended.cancel_escalated                            escalateStuckCancel done (READY and
                                                  agent.ready, though a hung agent may still
                                                  owe the turn: its late end is ignored), or a
                                                  cancel-release error (``prompt abandoned
                                                  after cancel``)
ended.stopped        the app's stop ended it       StopAgentWithReason (its waiter and a cancel
                                                  waiting for it learn that the app stopped the
                                                  execution, not an agent error)
ended.undelivered    trigger never reached agent  a failed trigger, materialization or
                                                  reconnect (kandev H7 left RUNNING), or the
                                                  execution crashed before it was sent
superseded           P>g                          the next BeginPrompt
===================  ==========================  ===========================================

``dispatched`` has three children: ``awaited`` (an ordinary prompt's waiter owns completion),
``stall_reported`` (the same after the one ``agent.stalled`` of this wait) and ``unawaited``
(a dispatch-only prompt: this generation *is* the dispatch-only barrier of ``sendPrompt``; a
successor waits until it leaves ``dispatched``, bounded by 10 s, seed D8).

Ignoring is declared, as targetless transitions, once per compound where it applies:

* R6/R21/R22/R23 - every event for a superseded generation changes nothing.
* R7 - a duplicate terminal event for an ended generation changes nothing (``ended`` ignores
  completions; only ``disconnected`` still claims one).
* completion before dispatch - ``admitted --completion_received--> completed``; the late
  ``dispatch_accepted`` is then ignored by ``ended`` (R23).
* R9 - a completion stamped with another startup generation is ignored (guard
  ``is_stale_startup``) and the generation keeps waiting.

kandev anomalies made explicit: H6 (a handed-off, escalated or disconnected generation stays
steerable) cannot happen since only ``dispatched`` accepts a steer; H7 (a failed trigger leaves
RUNNING with nobody waiting) becomes ``undelivered``, which the execution follows back to
READY (``turn_undelivered``); H4 (the barrier takes any generation's signal) cannot happen
because the barrier is this chart's own ``unawaited`` state.

Effects (the runtime performs them, in order): ``arm_activity`` (stall accounting restarts),
``claim_outcome`` (the buffered reply becomes this generation's, the agent's terminal event
is published), ``release_waiter`` (the prompt caller's result: ``result`` names it),
``publish_prompt_completed``/``publish_prompt_failed``/``publish_stream_error``/
``report_stall``, ``wait_for_carrier`` (retry the dispatch while the carrier redials),
``steer_refused``, ``await_waiter`` (escalation waits for the released waiter), ``end_cancel``
(a cancel waiting for this turn is answered: ``result`` says escalated or not),
``escalate_idle`` (a cancel nobody acknowledged while no turn is live, once a prompt that
waited armed kandev's barrier: ``waited_before`` or this one), ``cancel_stopped`` (a cancel
of a turn the app's stop ended), ``hold_barrier``
(a successor must wait for this dispatch-only turn), ``barrier_failed``,
``arm_cancel_wait`` (the cancel is acknowledged: wait ≤ 10 s for the turn to end),
``turn_over`` (the answer to ``permission_requested``, asked in place: the turn is over, so
the agent's permission request is settled at once).
"""

from __future__ import annotations

from typing import ClassVar, Final

from statemachine import State

from ._base import Chart
from ._compile import Effects, effect

__all__ = ["PromptGeneration"]

_DONE = effect("end_cancel", result="ended")


#: What each state entered and each transition taken asks the runtime to do (see the module
#: docstring for the effects).
_EFFECTS: Final = Effects(
    on_enter={
        "dispatched": ["arm_activity"],
        "reconnecting": ["wait_for_carrier"],
        "abandoned": ["send_cancel"],
        "releasing": [
            "record_escalation",
            effect("release_waiter", result="cancel_escalated"),
            "await_waiter",
        ],
        "escalating": [
            "record_escalation",
            effect("release_waiter", result="cancel_escalated"),
            "await_waiter",
        ],
        "completed": [
            effect("claim_outcome", "stop_reason"),
            effect("release_waiter", result="completed"),
            effect("publish_terminal_event", "generation"),
            effect("publish_prompt_completed", "generation", "stop_reason"),
            _DONE,
        ],
        "failed": [
            effect("claim_outcome", "error"),
            effect("publish_terminal_event", "generation"),
            effect("publish_prompt_failed", "generation", "error", outcome="failed"),
            _DONE,
        ],
        "disconnected": [
            effect("claim_disconnect", "error"),
            effect("release_waiter", result="disconnected"),
            _DONE,
        ],
        "undelivered": [
            effect("publish_prompt_failed", "generation", "error", outcome="undelivered"),
            effect("release_waiter", "error", result="undelivered"),
            _DONE,
        ],
        "withdrawn": [
            effect("release_waiter", result="withdrawn"),
            effect("publish_prompt_completed", "generation", stop_reason="cancelled"),
            _DONE,
        ],
        "stopped": [
            effect("claim_disconnect", "error"),
            effect("release_waiter", "error", result="stopped"),
            effect("end_cancel", result="stopped"),
        ],
        "handed_off": [
            "claim_handoff",
            effect("release_waiter", result="handed_off"),
            _DONE,
        ],
        "superseded": [_DONE],
    },
    transitions={
        "successor_admitting: unawaited": ["hold_barrier"],
        "successor_admitting: abandoned": ["hold_barrier"],
        "barrier_timed_out: unawaited": ["barrier_failed"],
        "dispatch_started: withdrawn": ["skip_dispatch"],
        "dispatch_started: undelivered": ["skip_dispatch"],
        "dispatch_failed: escalating -> cancel_escalated": [_DONE],
        "dispatch_unreachable: escalating -> cancel_escalated": [_DONE],
        "dispatch_failed: sending -> cancel_escalated": [
            effect("publish_prompt_failed", "generation", "error", outcome="cancel_escalated"),
            effect("release_waiter", "error", result="dispatch_cancel_escalated"),
            _DONE,
        ],
        # an error completion: the execution fails either way (handleCompleteEventMarkState);
        # the waiter learns a cancel escalation when the error is a cancel release
        "completion_received: dispatched -> failed [is_cancel_release]": [
            effect("release_waiter", "error", result="agent_cancel_escalated")
        ],
        "completion_received: dispatched -> failed [is_error]": [
            effect("release_waiter", "error", result="agent_error")
        ],
        "completion_received: sending -> failed [is_cancel_release]": [
            effect("release_waiter", "error", result="agent_cancel_escalated")
        ],
        "completion_received: sending -> failed [is_error]": [
            effect("release_waiter", "error", result="agent_error")
        ],
        "completion_received: handed_off -> failed": [
            effect("release_waiter", "error", result="agent_error")
        ],
        "completion_received: abandoned -> failed": [
            effect("release_waiter", "error", result="agent_error")
        ],
        "completion_received: releasing -> cancel_escalated": [
            effect("claim_outcome", "stop_reason", "error"),
            effect("publish_terminal_event", "generation"),
            _DONE,
        ],
        "completion_received: escalating -> cancel_escalated": [
            effect("claim_outcome", "stop_reason", "error"),
            effect("publish_terminal_event", "generation"),
            _DONE,
        ],
        "completion_received: dispatched": ["unclaimed"],
        "completion_received: live": ["unclaimed"],
        "completion_received: ended": ["unclaimed"],
        "completion_received: superseded": ["unclaimed"],
        "stream_lost: dispatched -> disconnected": [
            effect("publish_stream_error", "generation", "error")
        ],
        "stream_lost: sending -> disconnected": [
            effect("publish_stream_error", "generation", "error")
        ],
        "stream_lost: handed_off -> disconnected": [
            effect("publish_stream_error", "generation", "error")
        ],
        "stream_lost: abandoned -> disconnected": [
            effect("publish_stream_error", "generation", "error")
        ],
        "stream_lost: releasing -> disconnected": [
            effect("publish_stream_error", "generation", "error")
        ],
        "stream_lost: escalating -> disconnected": [
            effect("publish_stream_error", "generation", "error")
        ],
        "cancel_requested: sending": ["await_dispatch"],
        "send_wait_timed_out: sending": ["send_cancel"],
        "send_wait_timed_out: live": ["send_cancel"],
        "cancel_requested: live": ["send_cancel"],
        "cancel_requested: ended": ["send_cancel"],
        "cancel_answered: live": ["arm_cancel_wait"],
        "cancel_answered: ended [escalates_idle]": ["escalate_idle"],
        "cancel_requested: stopped": ["cancel_stopped"],
        "waiter_returned: escalating -> cancel_escalated": ["report_escalation", _DONE],
        "escalation_wait_timed_out: escalating -> cancel_escalated": [
            "report_escalation",
            _DONE,
        ],
        "waiter_returned: releasing -> cancel_escalated": ["report_escalation", _DONE],
        "escalation_wait_timed_out: releasing -> cancel_escalated": [
            "report_escalation",
            _DONE,
        ],
        "steer_requested: dispatched": ["dispatch_steer"],
        "steer_requested: live": ["steer_refused"],
        "steer_requested: ended": ["steer_refused"],
        "steer_requested: superseded": ["steer_refused"],
        "permission_requested: ended": ["turn_over"],
        "permission_requested: superseded": ["turn_over"],
        "stall_detected: awaited -> stall_reported": [
            effect("report_stall", "generation", "stalled_for")
        ],
    },
)


class PromptGeneration(Chart):
    """One prompt generation, from admission to its single terminal outcome."""

    chart_name: ClassVar[str] = "prompt_generation"
    constants: ClassVar[dict[str, object]] = {
        "generation": 0,
        "startup_generation": 0,
        "dispatch_only": False,
        "waited_before": False,
    }
    generation: int
    startup_generation: int
    dispatch_only: bool
    waited_before: bool
    """An earlier prompt of this execution waited for its turn: with this one, when it waits,
    that says whether kandev's ``promptFinished`` barrier is armed (``beginPromptBarrier``)."""

    class live(State.Compound):
        admitted = State("admitted", initial=True)
        sending = State("sending")
        reconnecting = State("reconnecting")

        class dispatched(State.Compound):
            awaited = State("awaited", initial=True)
            stall_reported = State("stall_reported")
            unawaited = State("unawaited")

        handed_off = State("handed_off")
        abandoned = State("abandoned")
        releasing = State("releasing")
        escalating = State("escalating")

    class ended(State.Compound):
        completed = State("completed", initial=True)
        failed = State("failed")
        disconnected = State("disconnected")
        cancel_escalated = State("cancel_escalated")
        undelivered = State("undelivered")
        withdrawn = State("withdrawn")
        stopped = State("stopped")

    superseded = State("superseded")

    # --- a successor's admission: the barriers (waitForPendingDispatchedPrompt, seed D8) ---
    successor_admitting = (
        live.dispatched.unawaited.to(None)  # the dispatch-only barrier: hold_barrier
        | live.abandoned.to(None)  # an abandoned turn is let end first: hold_barrier
        | live.to(None)
        | ended.to(None)
    )
    barrier_timed_out = (
        live.dispatched.unawaited.to(None)  # barrier_failed: the gate stays set (seed D8)
        | live.to(None)  # an abandoned turn: the successor goes ahead
        | ended.to(None)
    )

    # --- dispatch (sendPrompt: triggerPrompt, markPromptDispatched, retryPromptAfterReconnect)
    dispatch_started = (
        live.admitted.to(live.sending)
        | live.reconnecting.to(live.sending)
        | ended.withdrawn.to(None)  # cancelled before it was sent: skip_dispatch
        | ended.undelivered.to(None)  # the execution crashed before it was sent: skip_dispatch
    )
    dispatch_accepted = (
        live.sending.to(live.dispatched.unawaited, cond="is_dispatch_only")
        | live.sending.to(live.dispatched.awaited)
        | live.escalating.to(None)  # a late ack after the cancel released the trigger
        | ended.to(None)  # R23: completion claimed before MarkPromptDispatched
        | superseded.to(None)
    )
    # the stream was not connected; only a carrier that can redial is waited for (5 s)
    dispatch_unreachable = (
        live.sending.to(live.reconnecting, cond="carrier_reconnectable")
        | live.sending.to(ended.undelivered)
        # a cancel escalated the turn while its request was in flight, and the request never
        # reached the agent: no end will come, the escalation is over
        | live.escalating.to(ended.cancel_escalated)
        | live.to(None)
        | ended.to(None)
    )
    dispatch_failed = (
        live.sending.to(ended.cancel_escalated, cond="cancel_release")
        | live.sending.to(ended.undelivered)
        | live.escalating.to(ended.cancel_escalated)
        | live.to(None)
        | ended.to(None)
    )
    materialization_failed = live.admitted.to(ended.undelivered) | ended.to(None)
    reconnect_timed_out = live.reconnecting.to(ended.undelivered) | live.to(None) | (ended.to(None))

    # --- completion (handleCompleteEvent, ClaimPromptCompletion) ---------------------------
    completion_received = (
        live.dispatched.to(None, cond="is_stale_startup")  # R9
        | live.dispatched.to(ended.failed, cond="is_cancel_release")
        | live.dispatched.to(ended.failed, cond="is_error")
        | live.dispatched.to(ended.completed)
        | live.sending.to(ended.failed, cond="is_cancel_release")  # R23: before the ack
        | live.sending.to(ended.failed, cond="is_error")
        | live.sending.to(ended.completed)
        | live.handed_off.to(ended.failed, cond="is_error")
        | live.handed_off.to(ended.completed)
        | live.abandoned.to(ended.failed, cond="is_error")
        | live.abandoned.to(ended.completed)
        | live.releasing.to(ended.cancel_escalated)
        | live.escalating.to(ended.cancel_escalated)  # the turn ended after all
        | live.to(None)  # admitted, reconnecting: not this prompt's turn (a wakeup's end)
        | ended.disconnected.to(ended.failed, cond="is_error")
        | ended.disconnected.to(ended.completed)
        | ended.to(None)  # R7: a duplicate terminal event
        | superseded.to(None)  # R6
    )

    # --- other completion-like signals (handlePromptHandoffEvent, handleStreamDisconnect) ---
    handoff_received = (
        live.dispatched.to(live.handed_off)
        | live.to(None)
        | ended.to(None)
        | (
            superseded.to(None)  # R22
        )
    )
    stream_lost = (
        live.dispatched.to(ended.disconnected)
        # a request in flight when the carrier is gone for good: no answer and no end can
        # come any more (found by acpfsm verify: the turn could otherwise be escalated later
        # and stay live forever)
        | live.sending.to(ended.disconnected, cond="lost_for_good")
        | live.handed_off.to(ended.disconnected)
        | live.abandoned.to(ended.disconnected)
        | live.releasing.to(ended.disconnected)  # the escalation ends with the stream
        | live.escalating.to(ended.disconnected)
        # the execution crashed (its own code failed, its carrier is being closed): a turn
        # not yet at the agent never will be, so it is undelivered and its request never
        # goes out (found by acpfsm verify --crashes: nothing_dispatched_after_a_crash)
        | live.admitted.to(ended.undelivered, cond="crashed")
        | live.reconnecting.to(ended.undelivered, cond="crashed")
        | live.to(None)  # not yet at the agent: the dispatch reports its own failure
        | ended.to(None)
        | superseded.to(None)  # R21
    )
    # StopAgentWithReason: the live turn ends as if its stream were lost; a prompt not yet
    # sent is withdrawn (nothing reaches the agent after the stop, R24), and one being sent
    # ends at once (its late answer is then ignored, R23)
    execution_stopped = (
        live.admitted.to(ended.withdrawn)
        | live.reconnecting.to(ended.withdrawn)
        | live.to(ended.stopped)
        | ended.to(None)
        | superseded.to(None)
    )

    # --- cancel (CancelAgent, escalateStuckCancel) ---------------------------------------
    # A prompt not yet sent is withdrawn (never sent); one being sent is cancelled once its
    # request is answered (the cancel must not overtake it); a turn at the agent gets the
    # session/cancel.
    cancel_requested = (
        ended.stopped.to(None)  # cancel_stopped: the app's stop ended the turn
        | live.admitted.to(ended.withdrawn)
        | live.reconnecting.to(ended.withdrawn)
        | live.sending.to(None)  # await_dispatch
        | live.to(None)  # send_cancel
        | ended.to(None)  # send_cancel: the agent may run a turn of its own
        | superseded.to(None)
    )
    # the request stayed unanswered past the bound: the cancel goes out anyway. Answered
    # between the bound and this fact, the cancel finds what a cancel_requested would: a
    # request found not connected (waiting for the carrier) is withdrawn, a turn at the
    # agent gets the cancel (found by acpfsm verify: the cancel was done, and the turn ran
    # on or the prompt was sent later)
    send_wait_timed_out = (
        live.sending.to(None)
        | live.reconnecting.to(ended.withdrawn)
        | live.to(None)
        | ended.to(None)
        | (superseded.to(None))
    )
    # The agent's answer decides: escalate at once when the cancel was not acknowledged (the
    # carrier gave the turn up: no end will come, so the turn is over) or the stream is gone
    # (an end may still come after a redial), and for a dispatch-only turn (nobody waits on
    # it); otherwise wait (≤ 10 s) for the turn to end.
    cancel_answered = (
        live.dispatched.unawaited.to(live.releasing, cond="turn_given_up")
        | live.dispatched.to(live.releasing, cond="turn_given_up")
        | live.handed_off.to(live.releasing, cond="turn_given_up")
        | live.abandoned.to(live.releasing, cond="turn_given_up")
        | live.dispatched.unawaited.to(live.escalating)
        | live.dispatched.to(live.escalating, cond="cancel_unacknowledged")
        | live.handed_off.to(live.escalating, cond="cancel_unacknowledged")
        # nobody waits for an abandoned turn: the stream gone, it ends as if lost with it
        # (a later end is still claimed)
        | live.abandoned.to(ended.disconnected, cond="cancel_unacknowledged")
        # the request was found not connected meanwhile (waiting for the carrier): withdrawn,
        # as a cancel finds it (found by acpfsm verify: else it was sent after the cancel)
        | live.reconnecting.to(ended.withdrawn)
        | live.to(None)  # arm_cancel_wait where a turn is at the agent
        # escalate_idle: no turn in flight, and a waiting prompt has run (kandev's
        # promptFinished barrier is armed only by one; after dispatch-only prompts alone an
        # unanswered cancel is complete)
        | ended.to(None, cond="escalates_idle")
        | ended.to(None)
        | superseded.to(None)
    )
    cancel_wait_timed_out = (
        live.dispatched.to(live.escalating)
        | live.sending.to(live.escalating)
        | live.handed_off.to(live.escalating)
        | live.abandoned.to(live.escalating)
        | live.reconnecting.to(ended.withdrawn)  # not at the agent after all: withdrawn
        | live.to(None)
        | ended.to(None)
        | superseded.to(None)
    )
    # escalateStuckCancel's post-wait: the released waiter returned, or 2 s passed. The turn
    # is over for the execution either way: READY and agent.ready (markReadyEventWithContext),
    # even when a hung agent still owes the turn; its late end is then ignored by generation
    waiter_returned = (
        live.releasing.to(ended.cancel_escalated)
        | live.escalating.to(ended.cancel_escalated)
        | live.to(None)
        | ended.to(None)
        | superseded.to(None)
    )
    escalation_wait_timed_out = (
        live.releasing.to(ended.cancel_escalated)
        | live.escalating.to(ended.cancel_escalated)
        | live.to(None)
        | ended.to(None)
        | superseded.to(None)
    )
    # the prompt's caller stopped waiting (its cancel scope or timeout): the turn is
    # withdrawn if it was not sent, else cancelled at the agent
    waiter_abandoned = (
        live.admitted.to(ended.withdrawn)
        | live.reconnecting.to(ended.withdrawn)
        | live.sending.to(live.abandoned)
        | live.dispatched.awaited.to(live.abandoned)
        | live.dispatched.stall_reported.to(live.abandoned)
        | live.to(None)
        | ended.to(None)
        | superseded.to(None)
    )

    # --- steer folds into the dispatched generation (SendPromptSteerWithDispatchCallback) ---
    steer_requested = (
        live.dispatched.to(None) | live.to(None) | ended.to(None) | (superseded.to(None))
    )
    steered = live.dispatched.to(None)

    # --- the agent asks for a permission within this turn (kandev permission broker) -------
    # asked in place by the broker: a turn that is over (ended, superseded) gets no waiting
    # request (``turn_over``); a live one does
    permission_requested = live.to(None) | ended.to(None) | superseded.to(None)

    # --- the stall watchdog (waitForPromptDone) -----------------------------------------
    stall_detected = (
        live.dispatched.awaited.to(live.dispatched.stall_reported)
        | live.to(None)  # once per wait; nothing to watch elsewhere
        | ended.to(None)
    )

    # --- supersession (P>g) --------------------------------------------------------------
    superseded_by_successor = live.to(superseded) | ended.to(superseded)

    effects: ClassVar[Effects] = _EFFECTS

    # --- guards: pure functions of event data and the chart's constants -----------------

    def is_dispatch_only(self) -> bool:
        return bool(self.dispatch_only)

    def cancel_release(self, cancel_release: bool = False) -> bool:
        return cancel_release

    def is_cancel_release(self, is_error: bool = False, cancel_release: bool = False) -> bool:
        return is_error and cancel_release

    def cancel_unacknowledged(
        self, acknowledged: bool = True, stream_disconnected: bool = False
    ) -> bool:
        return stream_disconnected or not acknowledged

    def escalates_idle(self, acknowledged: bool = True, stream_disconnected: bool = False) -> bool:
        armed = not self.dispatch_only or bool(self.waited_before)
        return (stream_disconnected or not acknowledged) and armed

    def turn_given_up(self, acknowledged: bool = True, stream_disconnected: bool = False) -> bool:
        return not acknowledged and not stream_disconnected

    def lost_for_good(self, final: bool = False) -> bool:
        return final

    def crashed(self, crashed: bool = False) -> bool:
        return crashed

    def carrier_reconnectable(self, reconnectable: bool = False) -> bool:
        return reconnectable

    def is_error(self, is_error: bool = False) -> bool:
        return is_error

    def is_stale_startup(self, startup_generation: int | None = None) -> bool:
        return startup_generation is not None and startup_generation != self.startup_generation
