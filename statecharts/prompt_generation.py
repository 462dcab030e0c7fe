"""PromptGeneration: the life of one prompt generation *g*.

Theory of operation
-------------------
kandev derives a generation's state from three counters (P newest admitted, D dispatched,
C completion claimed; lifecycle.md §5.1–§5.2). Here each admitted prompt gets its own chart
instance, and the states *are* the predicates:

===================  ==========================  ===========================================
state                kandev predicate             entered by (lifecycle.md)
===================  ==========================  ===========================================
admitted             P==g, D!=g, C!=g             BeginPrompt (§5.1)
reconnecting         admitted, stream down        retry after reconnect, 5 s / 100 ms (§5.7)
dispatched.*         P==g, D==g, C!=g (steerable) MarkPromptDispatched after an accepted trigger
completed / failed   C==g                         a claimed terminal event (§5.5)
handed_off           foreground_idle handoff      §5.6 (the waiter is released; still claimable)
disconnected         owning stream disconnect     §5.6
cancel_escalated     cancel escalation            §5.10
undelivered          trigger/materialization      §5.3 steps 7–8 (kandev: H7, left RUNNING)
                     /reconnect failure
superseded           P>g                          the next BeginPrompt
===================  ==========================  ===========================================

``dispatched`` has three children: ``awaited`` (an ordinary prompt's waiter owns completion),
``stall_reported`` (the same after the one ``agent.stalled`` of this wait, §5.9) and
``unawaited`` (a dispatch-only prompt: this generation *is* the dispatch-only barrier of §5.3
step 3; a successor waits until it leaves ``dispatched``, bounded by 10 s, seed D8).

A steer (§5.8, seed D6) never creates a generation: it folds into the dispatched one as the
``steered`` self-transition, declared on each ``dispatched`` child only. The runtime asks the
chart whether ``steered`` is accepted; if not, the steer is not dispatched.

Races (lifecycle.md §8) are declared, not coded around:

* R6/R21/R22/R23 - every event for a superseded generation is an explicit self-transition of
  ``superseded`` (``*_ignored`` in the trace); nothing else changes.
* R7 - a duplicate terminal event for a completed/failed generation is a self-transition.
* completion before dispatch - ``admitted --completion_received--> completed``; the late
  ``dispatch_accepted`` is then ignored (R23).
* R9 - a completion stamped with another startup generation is ignored (guard
  ``is_stale_startup``) and the generation keeps waiting.

kandev anomalies made explicit: H6 (a handed-off, escalated or disconnected generation stays
steerable) cannot happen since ``steered`` is declared only under ``dispatched``; H7 (a failed
trigger leaves RUNNING with nobody waiting) becomes the ``undelivered`` state that the runtime
reports; H4 (the barrier takes any generation's signal) cannot happen because the barrier is
this chart's own ``unawaited`` state.
"""

from __future__ import annotations

from typing import Any, ClassVar

from statemachine import State

from ._base import Chart, TransitionObserver

__all__ = ["TERMINAL_STATES", "PromptGeneration"]

#: States after which no waiter is owed anything.
TERMINAL_STATES = frozenset(
    {"completed", "failed", "undelivered", "cancel_escalated", "disconnected", "superseded"}
)


class PromptGeneration(Chart):
    """One prompt generation, from admission to its single terminal outcome."""

    chart_name: ClassVar[str] = "prompt_generation"

    admitted = State("admitted", initial=True)
    reconnecting = State("reconnecting")

    class dispatched(State.Compound):
        awaited = State("awaited", initial=True)
        stall_reported = State("stall_reported")
        unawaited = State("unawaited")

    handed_off = State("handed_off")
    completed = State("completed")
    failed = State("failed")
    undelivered = State("undelivered")
    cancel_escalated = State("cancel_escalated")
    disconnected = State("disconnected")
    superseded = State("superseded")

    # --- dispatch (§5.3 steps 7-10, §5.7) ------------------------------------------------
    dispatch_accepted = (
        admitted.to(dispatched.unawaited, cond="dispatch_only")
        | admitted.to(dispatched.awaited)
        | reconnecting.to(dispatched.unawaited, cond="dispatch_only")
        | reconnecting.to(dispatched.awaited)
        | completed.to.itself()  # R23: completion claimed before MarkPromptDispatched
        | failed.to.itself()
        | cancel_escalated.to.itself()  # a late ack after a cancel released the trigger
        | superseded.to.itself()  # R23
    )
    # §5.7: the stream was not connected; only a carrier that can redial is waited for (5 s)
    dispatch_unreachable = (
        admitted.to(reconnecting, cond="carrier_reconnectable")
        | admitted.to(undelivered)
        | reconnecting.to.itself()
    )
    dispatch_failed = (
        admitted.to(cancel_escalated, cond="cancel_release")
        | admitted.to(undelivered)
        | reconnecting.to(cancel_escalated, cond="cancel_release")
        | reconnecting.to(undelivered)
    )
    materialization_failed = admitted.to(undelivered)
    reconnect_timed_out = reconnecting.to(undelivered)

    # --- completion (§5.4-§5.5) --------------------------------------------------------
    completion_received = (
        dispatched.awaited.to.itself(cond="is_stale_startup")
        | dispatched.stall_reported.to.itself(cond="is_stale_startup")
        | dispatched.unawaited.to.itself(cond="is_stale_startup")
        | dispatched.to(cancel_escalated, cond="cancel_release")
        | dispatched.to(failed, cond="is_error")
        | dispatched.to(completed)
        | admitted.to(failed, cond="is_error")
        | admitted.to(completed)
        | handed_off.to(failed, cond="is_error")
        | handed_off.to(completed)
        | disconnected.to(failed, cond="is_error")
        | disconnected.to(completed)
        | completed.to.itself()  # R7 duplicate terminal event
        | failed.to.itself()  # R7: a second error cannot replace the first
        | cancel_escalated.to.itself()
        | undelivered.to.itself()
        | superseded.to.itself()  # R6
    )

    # --- other completion-like signals (§5.6, §5.10) -----------------------------------
    handoff_received = dispatched.to(handed_off) | superseded.to.itself()  # R22
    stream_lost = (
        dispatched.to(disconnected)
        | handed_off.to(disconnected)
        | admitted.to.itself()  # nothing in flight yet; the dispatch reports its own failure
        | reconnecting.to.itself()  # the retry loop owns this wait
        | completed.to.itself()
        | failed.to.itself()
        | cancel_escalated.to.itself()
        | undelivered.to.itself()
        | disconnected.to.itself()
        | superseded.to.itself()  # R21
    )
    escalated = (
        dispatched.to(cancel_escalated)
        | admitted.to(cancel_escalated)
        | reconnecting.to(cancel_escalated)
        | handed_off.to(cancel_escalated)
        | completed.to.itself()
        | failed.to.itself()
        | cancel_escalated.to.itself()
        | undelivered.to.itself()
        | disconnected.to.itself()
    )

    # --- cancel (§5.10): the agent's answer to session/cancel decides what happens ----------
    # Escalate at once when the cancel was not acknowledged or the stream is gone, and for a
    # dispatch-only turn (nobody waits on it); otherwise keep waiting for the turn to end (the
    # runtime's 10 s bound then sends ``escalated``). Finished generations ignore it.
    cancel_answered = (
        dispatched.unawaited.to(cancel_escalated)
        | dispatched.awaited.to(cancel_escalated, cond="cancel_unacknowledged")
        | dispatched.awaited.to.itself()
        | dispatched.stall_reported.to(cancel_escalated, cond="cancel_unacknowledged")
        | dispatched.stall_reported.to.itself()
        | admitted.to(cancel_escalated, cond="cancel_unacknowledged")
        | admitted.to.itself()
        | reconnecting.to(cancel_escalated, cond="cancel_unacknowledged")
        | reconnecting.to.itself()
        | handed_off.to(cancel_escalated, cond="cancel_unacknowledged")
        | handed_off.to.itself()
        | completed.to.itself()
        | failed.to.itself()
        | undelivered.to.itself()
        | cancel_escalated.to.itself()
        | disconnected.to.itself()
        | superseded.to.itself()
    )

    # --- steer folds into the dispatched generation (§5.8) ------------------------------
    steered = (
        dispatched.awaited.to.itself()
        | dispatched.stall_reported.to.itself()
        | dispatched.unawaited.to.itself()
    )

    # --- watchdogs (§5.3 step 3, §5.9) ---------------------------------------------------
    stall_detected = dispatched.awaited.to(dispatched.stall_reported) | (
        dispatched.stall_reported.to.itself()  # once per wait
    )
    barrier_timed_out = dispatched.unawaited.to.itself()  # seed D8: the gate stays set

    # --- supersession (P>g) --------------------------------------------------------------
    superseded_by_successor = (
        admitted.to(superseded)
        | reconnecting.to(superseded)
        | dispatched.to(superseded)
        | handed_off.to(superseded)
        | completed.to(superseded)
        | failed.to(superseded)
        | undelivered.to(superseded)
        | cancel_escalated.to(superseded)
        | disconnected.to(superseded)
    )

    def __init__(
        self,
        generation: int,
        *,
        startup_generation: int = 0,
        dispatch_only: bool = False,
        tags: dict[str, Any] | None = None,
        observers: tuple[TransitionObserver, ...] = (),
    ) -> None:
        self.generation = generation
        self.startup_generation = startup_generation
        self.is_dispatch_only = dispatch_only
        merged = {"generation": generation, **(tags or {})}
        super().__init__(tags=merged, observers=observers)

    # --- guards: pure functions of event data and the chart's constant data -------------

    def dispatch_only(self) -> bool:
        return self.is_dispatch_only

    def cancel_release(self, cancel_release: bool = False) -> bool:
        return cancel_release

    def cancel_unacknowledged(
        self, acknowledged: bool = True, stream_disconnected: bool = False
    ) -> bool:
        return stream_disconnected or not acknowledged

    def carrier_reconnectable(self, reconnectable: bool = False) -> bool:
        return reconnectable

    def is_error(self, is_error: bool = False) -> bool:
        return is_error

    def is_stale_startup(self, startup_generation: int | None = None) -> bool:
        return startup_generation is not None and startup_generation != self.startup_generation

    # --- derived views (no extra state) -------------------------------------------------

    @property
    def is_terminal(self) -> bool:
        return self.leaf in TERMINAL_STATES

    @property
    def is_steerable(self) -> bool:
        return self.is_in("dispatched")

    @property
    def awaits_turn_end(self) -> bool:
        """The agent still owes this generation the end of its turn (a cancel waits for it)."""
        return not self.is_terminal and self.leaf != "handed_off"

    @property
    def holds_barrier(self) -> bool:
        """True while this dispatch-only generation gates its successor (§5.3 step 3)."""
        return self.is_in("unawaited")
