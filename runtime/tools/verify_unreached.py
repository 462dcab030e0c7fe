"""What ``acpfsm verify`` does not reach, and why: every declared transition the exploration
at the default bounds never takes, with the reason (a part of the life the model leaves
out, a row nothing in the runtime fires, a reduction of the model).

The coverage report prints the reason beside each unreached transition; at the default
bounds ``acpfsm verify`` fails when one has none (a new row nothing reaches) or when a
listed one is reached (the reason is stale).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["UNREACHED", "reason"]

_CRASH = (
    "explored with --crashes (verify_actions._crash, runtime/session/crash.py), off at the "
    "default bounds for time: every property holds with it there, in about 30 % more CPU"
)
_COMPLETED = (
    "COMPLETED is the process's clean exit, its carrier's last fact: the model's agent and "
    "carrier say nothing after it (their event stream ended) and a request sent then fails"
)
_STARTING = (
    "while STARTING no prompt is admitted (callers wait for the admission the init opens; "
    "the initial prompt's admission makes the execution RUNNING): no turn ends or "
    "escalates, no prompt asks"
)
_BOOTED = (
    "booted ends an init without an initial prompt while the execution is STARTING: no "
    "prompt is admitted before it, and nothing else makes the execution READY or RUNNING"
)
_SUPERSEDED_WAIT = (
    "a reduction: the model runs a superseded turn's cancel to its end at once (each wait "
    "over, verify_flows.settle_superseded), so its bounds do not expire there; the chart "
    "ignores them as declared"
)
_CURRENT_ONLY = (
    "only the current generation receives it: a successor is admitted once its "
    "predecessor's prompt flow is past its send (the prompt lock), and the stop, the "
    "steer's target and a loss go to the current generation"
)
_SEND_ANSWER = (
    "a send's answer finds its turn sending, or escalating when a cancel overtook it; the "
    "other live states follow an accepted send, and an abandoned turn's flow is gone"
)
_ESCALATION_WAIT = (
    "the escalation's wait follows releasing or escalating, which are left only to an end "
    "or to superseded"
)

_QUESTION = (
    "a question, never fired: the runtime asks it with statecharts.peek (wait_ready, a "
    "stream recovery, a permission request's turn, a wait for the carrier, an event stream "
    "that ended silently) and acts on the effects it would return; the chart walks in "
    "tests/statecharts take each row"
)

_T = tuple[str, str, str, str]

#: ``(chart, source, event, target) → reason`` (targetless: target == source).
UNREACHED: Mapping[_T, str] = MappingProxyType(
    {
        **{
            ("execution", state, event, state): _QUESTION
            for state in ("active", "completed", "failed", "ready")
            for event in ("ready_awaited", "stream_recovery_requested")
            if (state, event) != ("ready", "stream_recovery_requested")
        },
        **{
            ("prompt_generation", state, "permission_requested", state): _QUESTION
            for state in ("ended", "live", "superseded")
        },
        **{
            ("agent_stream", state, event, state): _QUESTION
            for state in ("connected", "connecting", "disconnected", "giving_up", "reconnecting")
            for event in ("carrier_awaited", "event_stream_ended")
        },
        **{
            ("session_init", state, "stream_recovery_requested", state): _QUESTION
            for state in ("booted", "initializing", "pending", "prompting")
        },
        ("execution", "active", "execution_crashed", "failed"): _CRASH,
        ("execution", "completed", "execution_crashed", "completed"): _CRASH,
        ("execution", "failed", "execution_crashed", "failed"): _CRASH,
        ("prompt_generation", "admitted", "stream_lost", "undelivered"): _CRASH,
        ("prompt_generation", "reconnecting", "stream_lost", "undelivered"): _CRASH,
        ("prompt_generation", "undelivered", "dispatch_started", "undelivered"): _CRASH,
        **{
            ("execution", "completed", event, "completed"): _COMPLETED
            for event in (
                "activity_recorded",
                "process_exited",
                "stream_lost",
                "turn_dispatched",
                "turn_failed",
                "wakeup_content_arrived",
                "wakeup_turn_completed",
                "wakeup_turn_failed",
            )
        },
        ("execution", "failed", "init_failed", "failed"): (
            "the init fails only while the execution is STARTING: nothing makes it FAILED "
            "before the init rests (a loss or an exit then is the startup's, R10)"
        ),
        ("execution", "ready", "booted", "ready"): _BOOTED,
        ("execution", "running", "booted", "ready"): _BOOTED,
        ("execution", "starting", "cancel_escalated", "ready"): _STARTING,
        ("execution", "starting", "prompt_requested", "starting"): _STARTING,
        ("execution", "starting", "turn_completed", "ready"): _STARTING,
        ("start_model_policy", "evaluating", "policy_evaluated", "none"): (
            "the runtime starts the policy only when a model is requested "
            "(ConfigDriver.start_model returns at once without one); the chart walks take it"
        ),
        ("agent_stream", "disconnected", "connection_lost", "disconnected"): (
            "the carrier's final loss ends its event stream: it reports no loss after it"
        ),
        ("agent_stream", "disconnected", "redial_succeeded", "disconnected"): (
            "not modelled: a dial that succeeds after the carrier's own final loss (the "
            "model's ended carrier accepts no dial)"
        ),
        ("agent_stream", "giving_up", "reconnect_timed_out", "giving_up"): (
            "entering giving_up disarms the reconnect budget: its timer is gone before it "
            "could run out there"
        ),
        ("prompt_generation", "dispatched", "completion_received", "dispatched"): (
            "not modelled: R9's completion stamped with a stale startup generation (the "
            "model has no startup generations)"
        ),
        ("prompt_generation", "ended", "stall_detected", "ended"): (
            "the stall watchdog ticks only while the prompt waits on an unreleased waiter; "
            "every ended state released it"
        ),
        ("prompt_generation", "live", "dispatch_failed", "live"): _SEND_ANSWER,
        ("prompt_generation", "live", "dispatch_unreachable", "live"): _SEND_ANSWER,
        ("prompt_generation", "live", "escalation_wait_timed_out", "live"): _ESCALATION_WAIT,
        ("prompt_generation", "live", "waiter_returned", "live"): _ESCALATION_WAIT,
        ("prompt_generation", "live", "reconnect_timed_out", "live"): (
            "the retry's bound runs out while its turn waits for the carrier (reconnecting) "
            "or after it ended"
        ),
        ("prompt_generation", "sending", "dispatch_unreachable", "undelivered"): (
            "a carrier that cannot redial never answers 'not connected': the model's stdio "
            "request is written or fails"
        ),
        **{
            ("prompt_generation", "superseded", event, "superseded"): _SUPERSEDED_WAIT
            for event in (
                "cancel_wait_timed_out",
                "escalation_wait_timed_out",
                "send_wait_timed_out",
            )
        },
        **{
            ("prompt_generation", "superseded", event, "superseded"): _CURRENT_ONLY
            for event in (
                "dispatch_accepted",
                "execution_stopped",
                "steer_requested",
                "stream_lost",
                "waiter_abandoned",
            )
        },
    }
)


def reason(chart: str, transition: tuple[str, str, str]) -> str:
    """Why ``transition`` of ``chart`` is not reached ("" when no reason is listed)."""
    return UNREACHED.get((chart, *transition), "")
