"""``acpfsm verify``'s properties: what each one protects, and the race and anomaly ids of
the catalogue (:mod:`.races`) it cites. Where each is checked: the explorer
(:mod:`.verify`: the liveness ones and the state checks) and the model (:mod:`.verify_model`,
:mod:`.verify_flows`, :mod:`.verify_actions`, :mod:`.verify_init`: the safety ones, on
every step; :mod:`.verify_startup`: startup recovery's)."""

from __future__ import annotations

from dataclasses import dataclass

from .races import race

__all__ = ["PROPERTIES", "Property"]


@dataclass(frozen=True, slots=True)
class Property:
    """A property the explorer checks, named after what it protects."""

    name: str
    summary: str
    ids: tuple[str, ...]
    """The race and anomaly ids it protects against (the catalogue, :mod:`.races`)."""


PROPERTIES: tuple[Property, ...] = (
    Property(
        "one_outcome_per_generation",
        "every admitted generation reaches exactly one terminal outcome (superseded ends one "
        "that had none): never a second, and from every state some path of the "
        "environment ends a live one",
        ("R7", "R8", "H7"),
    ),
    Property(
        "no_caller_waits_forever",
        "from every reachable state with a waiting caller (prompt, initial prompt, steer, "
        "cancel, stop), some path of the environment (timeouts included) releases it (after "
        "a crash: a_crash_releases_every_caller)",
        ("R4", "R15", "R17", "R36", "H3", "H9"),
    ),
    Property(
        "steer_only_into_a_live_dispatched_turn",
        "a steer request is sent, and ``steered`` fires, only for the current generation "
        "while it is dispatched",
        ("R1", "R2", "R3", "H6"),
    ),
    Property(
        "never_ready_under_a_live_turn",
        "the execution is never READY while a generation the agent accepted is still "
        "unclaimed (dispatched, handed off, abandoned or in a cancel escalation)",
        ("R16", "R26", "R27"),
    ),
    Property(
        "superseded_stays_superseded",
        "a superseded generation never changes state (its late events are only ignored)",
        ("R6", "R21", "R22", "R23"),
    ),
    Property(
        "completion_claimed_at_most_once",
        "a completion is claimed at most once: one claim per generation, one claimant per "
        "terminal event",
        ("R7", "R12", "H3", "H5"),
    ),
    Property(
        "dispatch_only_barrier_holds",
        "a prompt following a dispatch-only one passes its barrier only once the "
        "predecessor left ``dispatched``, or after the bound fired",
        ("R14", "R19", "R36", "H4"),
    ),
    Property(
        "nothing_dispatched_after_stop",
        "once the execution is stopped no prompt request is sent and no generation becomes "
        "dispatched",
        ("R24",),
    ),
    Property(
        "stopped_leaves_no_live_generation",
        "every final execution state (STOPPED, nothing left to happen) has no live generation",
        ("H7", "H9"),
    ),
    Property(
        "cancel_waits_for_its_prompt",
        "session/cancel is sent for a generation only once its prompt request was answered: "
        "the cancel never overtakes the prompt it cancels",
        (),
    ),
    Property(
        "an_escalation_ends_the_turn",
        "a cancel escalation ends the turn for the execution: once a generation is "
        "cancel_escalated, or a cancel is over as escalated, the execution is READY (it "
        "accepts prompts) unless the agent is gone (COMPLETED, STOPPED), the turn ended "
        "otherwise meanwhile (its stream lost, the app's stop) or a later prompt began",
        ("R16",),
    ),
    Property(
        "a_cancel_is_done_only_once_its_turn_is_over",
        "a cancel is told done only once the generation it cancelled is no longer live "
        "(ended, superseded), handed off by the agent, or while another cancel escalates it",
        (),
    ),
    Property(
        "a_left_turn_is_cancelled",
        "a prompt's caller that leaves before its turn ended, while the agent has the turn, "
        "leaves a cancel on its way for that turn (kandev's background cancel)",
        ("R17",),
    ),
    Property(
        "lost_for_good_ends_the_turn",
        "once the carrier is gone for good (its final loss, the process's exit), no turn the "
        "agent was given stays live: nothing can answer or end it any more",
        (),
    ),
    Property(
        "dispatched_at_most_once",
        "a generation's prompt request is sent again only when no earlier send of it can "
        "have reached the agent (never after one written and lost, a redial or not)",
        ("H2",),
    ),
    Property(
        "the_init_comes_to_rest",
        "from every reachable state where the session init runs, some path of the "
        "environment brings it to rest (prompting, booted, failed or abandoned)",
        (),
    ),
    Property(
        "nothing_dispatched_after_a_crash",
        "once the execution crashed (its own code failed: runtime/session/crash.py) no prompt "
        "request is sent and no generation becomes dispatched",
        (),
    ),
    Property(
        "a_crash_releases_every_caller",
        "from every state after a crash with a waiting caller (prompt, initial prompt, steer, "
        "cancel, stop), some path of the environment releases it: the crash's own release, "
        "its bound, the flows' ends",
        (),
    ),
    Property(
        "an_older_startup_signal_changes_nothing",
        "in startup recovery a fact stamped with an older attempt's startup generation "
        "(its work was under way when a new attempt began) changes nothing: no transition, "
        "no effect",
        ("R9",),
    ),
    Property(
        "a_recovered_execution_is_ready",
        "a stream recovery of a FAILED execution whose agent runs makes it READY and "
        "announces it (agent.boot_ready)",
        (),
    ),
    Property(
        "the_start_model_policy_comes_to_rest",
        "every run of the start-model policy inside the session init (every input the "
        "runtime gives it, every answer of each SetModel call) ends in a decision, once, "
        "within a bounded number of calls, and says whether it called SetModel",
        ("R28",),
    ),
    Property(
        "the_config_settles_once_on_its_answer",
        "the settled config snapshot is published once, on the answer it waits for (at "
        "once when there is nothing to wait for): never twice, never on another update, "
        "and never does its answer arrive without publishing it",
        ("R29",),
    ),
    Property(
        "the_settlement_is_requested_before_any_prompt",
        "no prompt request is sent before the session init requested the config settlement "
        "(a reattached session's was before the restart)",
        ("R29",),
    ),
    Property(
        "no_illegal_event",
        "the drivers never fire an event a chart refuses (an IllegalTransition is a crash)",
        (),
    ),
)
for _p in PROPERTIES:  # every cited id is in the catalogue
    for _id in _p.ids:
        race(_id)
