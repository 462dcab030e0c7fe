"""What the drivers do next: the flow effects, the facts each one makes possible, and the
decisions the drivers take between two chart steps. Plain data and small pure functions,
declared once.

Theory of operation
-------------------
A chart's step returns effects. Most are performed by a handler (publish an event, release a
waiter); a *flow effect* instead tells the caller's flow what to do next: wait for something,
with a bound (``hold_barrier``, ``await_dispatch``, ``arm_cancel_wait``, ``await_waiter``,
``wait_for_carrier``, ``arm_reconnect_budget``), send a request whose answer is the next fact
(``send_cancel``, ``dispatch_steer``, ``redial``), or stop (``skip_dispatch``,
``barrier_failed``, ``steer_refused``, ``report_escalation`` …). :data:`FLOW` declares each
one: the chart that returns it, what the flow waits for, the fact fired when that happens
(``then``) and the fact fired when the bound expires (``expired``).

Everything a driver decides between two steps is a function here, and the drivers
(:mod:`.prompting`, :mod:`.steering`, :mod:`.cancelling`, :mod:`.stream`, :mod:`.turns`,
:mod:`.pump`) call it: which flow effect a cancel acts on next (:func:`cancel_next`), what a
prompt request's answer is for the chart (:func:`trigger_fact`) and what the prompt does after
an unreachable agent (:func:`after_unreachable`), whether the execution admits a prompt
(:func:`accepts_prompts`, :func:`admits`), whether a stream recovery revives the execution
(:func:`recovery`), which generation a completion goes to
(:func:`completion_route`) and when a generation-0 end is a wakeup turn's instead
(:func:`ends_wakeup`, :func:`wakeup_fact`), what a lost stream tells the charts
(:func:`loss_data`, :func:`loss_followup`). ``acpfsm verify``
(:mod:`acpfsm.tools.verify`) calls the same functions and reads the same table, with
every wait, request and timer replaced by the environment's possible answers: so the model it
explores and the runtime take the same decisions.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from acpfsm.statecharts import Effect
from acpfsm.statecharts.coordination import Fired

__all__ = [
    "ADMISSION",
    "CANCEL_ANSWERS",
    "FLOW",
    "TRIGGER_ANSWERS",
    "Flow",
    "accepts_prompts",
    "admits",
    "after_unreachable",
    "cancel_answer",
    "cancel_next",
    "completion_route",
    "ends_wakeup",
    "flow_effects",
    "loss_data",
    "loss_followup",
    "recovery",
    "trigger_fact",
    "wakeup_fact",
    "wants",
]


@dataclass(frozen=True, slots=True)
class Flow:
    """A flow effect of ``chart`` and what the flow that got it does next.

    ``waits_for`` names what the flow waits for (a generation's ``done``, ``sent``,
    ``returned`` or ``turn_over`` event, the carrier being up, a request's answer; empty when
    the flow does not wait); ``then`` is the fact fired when it happens (empty: nothing is
    fired, the flow goes on), ``expired`` the fact fired when ``bound`` (a
    :class:`~acpfsm.runtime.types.Timeouts` field, or the transport's redial budget) runs
    out. An effect that ends the flow waits for nothing and fires nothing."""

    chart: str
    waits_for: str = ""
    then: str = ""
    expired: str = ""
    bound: str = ""
    meaning: str = ""

    def after(self, happened: bool) -> str:
        """The fact to fire once the wait is over: ``then`` when what it waited for happened,
        else ``expired``."""
        return self.then if happened else self.expired


_PG = "prompt_generation"

#: Every flow effect, by name (see the module docstring).
FLOW: Mapping[str, Flow] = {
    # --- a successor's admission (sendPrompt step 3, seed D8) -----------------------------
    "hold_barrier": Flow(
        _PG,
        "done",
        expired="barrier_timed_out",
        bound="pending_dispatched_prompt",
        meaning="the successor waits until the predecessor's waiter is released",
    ),
    "barrier_failed": Flow(_PG, meaning="the successor raises PendingDispatchedPromptTimeout"),
    # --- dispatch ------------------------------------------------------------------------
    "skip_dispatch": Flow(_PG, meaning="the prompt is not sent (withdrawn meanwhile)"),
    "wait_for_carrier": Flow(
        _PG,
        "carrier",
        then="dispatch_started",
        expired="reconnect_timed_out",
        bound="reconnect_retry",
        meaning="the same generation is sent again once the carrier is redialled",
    ),
    # --- cancel --------------------------------------------------------------------------
    "send_cancel": Flow(
        _PG, "answer", then="cancel_answered", meaning="session/cancel; its answer decides"
    ),
    "await_dispatch": Flow(
        _PG,
        "sent",
        then="cancel_requested",
        expired="send_wait_timed_out",
        bound="cancel_wait",
        meaning="the cancel waits until the prompt request it cancels is answered",
    ),
    "arm_cancel_wait": Flow(
        _PG,
        "turn_over",
        expired="cancel_wait_timed_out",
        bound="cancel_wait",
        meaning="the acknowledged cancel waits for the turn to end",
    ),
    "escalate_idle": Flow(
        _PG,
        then="cancel_escalated",
        meaning="no turn in flight: the execution is escalated back to READY",
    ),
    "await_waiter": Flow(
        _PG,
        "returned",
        then="waiter_returned",
        expired="escalation_wait_timed_out",
        bound="cancel_escalation",
        meaning="the escalation waits for the released prompt call to return, then the "
        "canceller raises CancelEscalated",
    ),
    "report_escalation": Flow(_PG, meaning="the canceller raises CancelEscalated"),
    # --- steer ---------------------------------------------------------------------------
    "dispatch_steer": Flow(
        _PG, "answer", then="steered", meaning="the steer request goes to the generation"
    ),
    "steer_refused": Flow(_PG, meaning="the steer raises SteerNotDispatched"),
    # --- completion ----------------------------------------------------------------------
    "unclaimed": Flow(
        _PG, meaning="no generation claimed it: a generation-0 end ends a wakeup turn"
    ),
    # --- the execution's status -------------------------------------------------------------
    "refuse_prompt": Flow("execution", meaning="the prompt raises NotReadyForPrompts"),
    # --- the stream --------------------------------------------------------------------
    "announce_loss": Flow(
        "agent_stream",
        meaning="the loss is announced: the current generation and the execution hear of it",
    ),
    "redial": Flow(
        "agent_stream",
        "answer",
        meaning="one dial after the backoff: redial_succeeded (the transport's "
        "StreamReconnected) or redial_failed",
    ),
    "arm_reconnect_budget": Flow(
        "agent_stream",
        expired="reconnect_timed_out",
        bound="redial_policy.budget",
        meaning="the redials are bounded",
    ),
}


def flow_effects(chart: str) -> tuple[str, ...]:
    """The flow effects ``chart`` returns (their handlers do nothing: the flow acts)."""
    return tuple(name for name, flow in FLOW.items() if flow.chart == chart)


def wants(fired: Sequence[Fired], name: str) -> Effect | None:
    """The first effect named ``name`` among the steps ``fired``, if any."""
    for _, step in fired:
        for effect in step.effects:
            if effect.name == name:
                return effect
    return None


# --- admission ------------------------------------------------------------------------------


def accepts_prompts(fired: Sequence[Fired]) -> bool:
    """The Execution chart's answer to ``prompt_requested`` (validateStatus): ``fired`` is
    empty when the chart has ended (STOPPED: the execution is removed), which refuses too."""
    return bool(fired) and wants(fired, "refuse_prompt") is None


def admits(execution_ended: bool) -> bool:
    """BeginPrompt re-checks, under the lifecycle lock, that the execution is still there: a
    stop that came between the status check and the admission refuses the prompt (R24)."""
    return not execution_ended


#: BeginPrompt: the current generation receives the first, the execution the second.
ADMISSION: tuple[str, str] = ("superseded_by_successor", "prompt_began")

# --- answers to the runtime's requests ---------------------------------------------------

#: session/cancel's answers: ``(acknowledged, stream_disconnected)``.
CANCEL_ANSWERS: Mapping[str, tuple[bool, bool]] = {
    "acknowledged": (True, False),
    "unacknowledged": (False, False),  # the carrier gave the turn up
    "disconnected": (True, True),  # the stream is gone: the request never got an answer
}


def cancel_answer(acknowledged: bool, stream_disconnected: bool) -> dict[str, Any]:
    """``cancel_answered``'s data (``error``: what an abandoned turn ends with when the
    stream is gone)."""
    return {
        "acknowledged": acknowledged,
        "stream_disconnected": stream_disconnected,
        "error": "agent stream disconnected: the cancel got no answer",
    }


# the flow effects a cancel acts on, after each of its steps (CancelAgent, escalateStuckCancel)
_CANCEL_FOLLOW = ("escalate_idle", "report_escalation", "await_waiter", "arm_cancel_wait")
_CANCEL_NEXT: Mapping[str | None, tuple[str, ...]] = {
    None: ("await_dispatch", "send_cancel"),  # after cancel_requested
    "await_dispatch": ("send_cancel",),  # after its wait's fact: send now, or nothing
    "send_cancel": _CANCEL_FOLLOW,  # after cancel_answered
    "arm_cancel_wait": _CANCEL_FOLLOW,  # after cancel_wait_timed_out
    "await_waiter": (),  # after the escalation's wait the canceller raises CancelEscalated
}


def cancel_next(fired: Sequence[Fired], previous: str | None) -> str | None:
    """The flow effect a cancel acts on next, given the steps its last fact ``fired`` and
    the flow effect it acted on before (None: its first step, ``cancel_requested``); None
    when the cancel is over."""
    for name in _CANCEL_NEXT[previous]:
        if wants(fired, name):
            return name
    return None


#: A prompt request's answers (triggerPrompt): accepted; the stream was not connected (the
#: request was not written); the request was written and the stream dropped before its
#: answer (the agent may have it); any other error (``cancel_release`` when the carrier
#: released it on a cancel).
TRIGGER_ANSWERS: tuple[str, ...] = ("accepted", "not_connected", "lost_while_waiting", "failed")


def trigger_fact(answer: str, *, retrying: bool) -> str:
    """The PromptGeneration fact a prompt request's answer is. The first attempt never sends
    a request the agent may already have again (kandev H2); the retry after a reconnect
    treats every "not connected" alike."""
    if answer == "accepted":
        return "dispatch_accepted"
    if answer == "not_connected" or (answer == "lost_while_waiting" and retrying):
        return "dispatch_unreachable"
    return "dispatch_failed"


def after_unreachable(
    fired: Sequence[Fired], result: str
) -> Literal["wait_for_carrier", "undelivered", "released"]:
    """What the prompt does after ``dispatch_unreachable`` (retryPromptAfterReconnect): wait
    for the carrier and send again; or raise the dispatch error (the chart gave the prompt up,
    its waiter's ``result`` says ``undelivered``); or, when someone else released the waiter
    meanwhile (a cancel escalation), wait for that release and raise what it said."""
    if wants(fired, "wait_for_carrier"):
        return "wait_for_carrier"
    return "undelivered" if result == "undelivered" else "released"


# --- the facade's stream recovery ---------------------------------------------------------


def recovery(
    *, established: bool, failed: bool, carrier_up: bool
) -> Literal["ignored", "refused", "recovered"]:
    """RecoverAgentPromptStream: a no-op before the session is established (the startup owns
    its stream, R34) and unless FAILED; refused when the carrier is not up; else the
    Execution chart's ``recovered``."""
    if not established or not failed:
        return "ignored"
    return "recovered" if carrier_up else "refused"


# --- the agent's facts ---------------------------------------------------------------------


def completion_route(g: int, current: int | None, kept: Container[int]) -> int | None:
    """The generation a terminal event stamped ``g`` is offered to (handleCompleteEvent): its
    own generation while it is kept (R6, R7), the current one for generation 0 (the
    unstamped path); None when there is none."""
    if g == 0:
        return current
    return g if g in kept else None


def ends_wakeup(g: int, claimed: bool) -> bool:
    """A generation-0 terminal event that no generation claimed ends a wakeup turn (R27)."""
    return g == 0 and not claimed


def wakeup_fact(
    *, is_error: bool, error: str, stop_reason: str, shutting_down: bool
) -> tuple[str, dict[str, Any]]:
    """The Execution chart's fact for the end of a wakeup turn (its generation-0 end)."""
    if is_error:
        return "wakeup_turn_failed", {"error": error, "shutting_down": shutting_down}
    return "wakeup_turn_completed", {"stop_reason": stop_reason}


def loss_data(
    *, reconnecting: bool, exit_code: int | None, clean: bool, error: str
) -> dict[str, Any]:
    """``connection_lost``'s data for the transport's StreamDisconnected: only a carrier that
    redials, and whose process did not exit, is redialable."""
    return {"redialable": reconnecting and exit_code is None, "clean": clean, "error": error}


def loss_followup(
    *, exit_code: int | None, claimed: bool, error: str, shutting_down: bool
) -> tuple[str, dict[str, Any]] | None:
    """What the Execution chart hears after an announced loss (handleStreamDisconnect): the
    agent process exited; or, when no generation claimed the loss, the stream was lost
    (generation 0); nothing when the current generation claimed it (the coordination moves
    the execution)."""
    if exit_code is not None:
        return "process_exited", {
            "exit_code": exit_code,
            "shutting_down": shutting_down,
            "error": f"agent process exited with code {exit_code}",
        }
    if not claimed:
        return "stream_lost", {"error": error, "generation": 0}
    return None
