"""The bug classes ``acpfsm verify`` did not catch (issue 36), one seeded bug each: a wrong
step of the flow table or a wrong chart row of the kind a real change introduces, and the
property that now finds it with a shortest counterexample that replays in ``acpfsm
check-trace`` (``test_verify._caught``).

Every class lives in the flow table or a chart, which the runtime runs and ``acpfsm verify``
explores (the drivers only perform the ``Do`` ops): a class that was driver code before
(an idle escalation, the steer's second selection, the wakeup end, the caller leaving, the
carrier's final loss) is a step of the table today, so the seed is a changed step.

The bounds are the smallest that find each (two generations, the carrier that can show it,
the depth of the counterexample); the state counts and times, there and at the default
bounds, are reported in docs/guides/verify.md (never asserted: the guide's table is checked
to name each class's property).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from acpfsm.statecharts import Execution, PromptGeneration
from acpfsm.statecharts import flows as F
from acpfsm.tools.verify import Bounds, seeded_copy, seeded_flows

PG = PromptGeneration
_PG = F.On.GENERATION
_SEND = F.PROMPT["send"]
assert isinstance(_SEND, F.Do)


def _stdio(depth: int) -> Bounds:
    return Bounds(generations=2, depth=depth, carriers=("stdio",))


def _agentctl(depth: int) -> Bounds:
    return Bounds(generations=2, depth=depth, carriers=("agentctl",))


#: class → (the property that catches it, the seed, the bounds that find it)
BUG_CLASSES: dict[str, tuple[str, dict[str, Any], Bounds]] = {
    # (a) an idle escalation (the turn had ended, the cancel was not answered) that does not
    # make the execution READY: the cancel's escalate_idle step fires nothing
    "idle_escalation_not_ready": (
        "an_escalation_ends_the_turn",
        {
            "flows": seeded_flows(
                "cancel",
                escalate_idle=F.Fire(
                    F.On.EXECUTION, "cancel_requested", then="escalated", absent="stopped"
                ),
            )
        },
        _stdio(8),
    ),
    # (b) the steer target chosen before the attachments' upload is not asked again under
    # the lifecycle lock (R1)
    "steer_target_not_rechecked": (
        "steer_only_into_a_live_dispatched_turn",
        {
            "flows": seeded_flows(
                "steer",
                precheck=F.Fire(
                    F.On.CURRENT,
                    "steer_requested",
                    bind=True,
                    branch=(("dispatch_steer", "materialize"), ("steer_refused", "not_dispatched")),
                    then="not_dispatched",
                    absent="not_dispatched",
                ),
                select=F.Choose("validate_status", yes="compose", no="compose"),
            )
        },
        _stdio(8),
    ),
    # (c) a generation-0 end that a generation claimed also ends a wakeup turn
    "generation_0_end_also_ends_a_wakeup": (
        "completion_claimed_at_most_once",
        {
            "flows": seeded_flows(
                "completion",
                claim=F.Fire(
                    F.On.STAMPED,
                    "completion_received",
                    data=("is_error", "cancel_release", "error", "stop_reason", "shutting_down"),
                    bind=True,
                    branch=(("unclaimed", "unclaimed"),),
                    then="unclaimed",
                    absent="unclaimed",
                ),
            )
        },
        _stdio(8),
    ),
    # (d) a caller that leaves its prompt while the agent has the turn: no cancel is sent
    # (the abandon step no longer spawns the background cancel)
    "caller_leaves_without_a_cancel": (
        "a_left_turn_is_cancelled",
        {
            "flows": seeded_flows(
                "prompt", abandon=F.Fire(_PG, "waiter_abandoned", locked=True, then="left")
            )
        },
        _stdio(8),
    ),
    # (e) a carrier lost for good is told to the turn as a loss it may come back from (the
    # loss flow drops the chart's ``final``): a request in flight stays sending
    "lost_carrier_never_lost_for_good": (
        "lost_for_good_ends_the_turn",
        {
            "flows": seeded_flows(
                "loss",
                generation=F.Fire(
                    F.On.CURRENT,
                    "stream_lost",
                    data=("error",),
                    bind=True,
                    branch=(("claim_disconnect", "claimed"),),
                    then="unclaimed",
                    absent="unclaimed",
                ),
            )
        },
        _agentctl(8),
    ),
    # (f) at-most-once dispatch broken after a redial: a first send written and lost waits
    # for the carrier and is sent again (kandev H2)
    "resent_after_a_redial": (
        "dispatched_at_most_once",
        {
            "flows": seeded_flows(
                "prompt",
                send=F.Do(
                    F.Op.SEND_PROMPT,
                    {**_SEND.answers, "lost_while_waiting": F.go("unreachable")},
                    signal=F.Cond.SENT,
                ),
            )
        },
        _agentctl(8),
    ),
    # (g) the cancel-escalation path from one sending state is gone: a cancel whose wait for
    # the turn's end ran out while the request is still in flight escalates nothing
    "no_escalation_from_sending": (
        "a_cancel_is_done_only_once_its_turn_is_over",
        {
            "charts": {
                PG.chart_name: seeded_copy(
                    PG,
                    (
                        (
                            "        | live.sending.to(live.escalating)\n"
                            "        | live.handed_off.to(live.escalating)\n"
                        ),
                        "        | live.handed_off.to(live.escalating)\n",
                    ),
                )
            }
        },
        _agentctl(8),
    ),
    # (h) an escalation that leaves a FAILED execution FAILED
    "escalation_leaves_failed": (
        "an_escalation_ends_the_turn",
        {
            "charts": {
                Execution.chart_name: seeded_copy(
                    Execution,
                    (
                        (
                            "        | failed.to(active.ready)\n"
                            "        | active.ready.to(None)\n"
                            "        | completed.to(None)  # the agent exited cleanly"
                        ),
                        (
                            "        | failed.to(None)\n"
                            "        | active.ready.to(None)\n"
                            "        | completed.to(None)  # the agent exited cleanly"
                        ),
                    ),
                    (
                        '            "cancel_escalated: failed -> ready": [',
                        '            "cancel_escalated: failed": [',
                    ),
                )
            }
        },
        _stdio(8),
    ),
}


@pytest.mark.parametrize("name", list(BUG_CLASSES))
def test_verify_finds_each_bug_class(name: str) -> None:
    from . import test_verify  # its seeds include these: imported once both are loaded

    prop, seed, bounds = BUG_CLASSES[name]
    test_verify._caught(prop, seed, bounds)


def test_the_guide_reports_each_bug_class() -> None:
    """docs/guides/verify.md's table has a row per class, naming the property that finds it
    (the counts and times beside it are a report, not checked)."""
    guide = Path(__file__).resolve().parents[2] / "docs" / "guides" / "verify.md"
    text = guide.read_text(encoding="utf-8")
    table = text[text.index("| bug class | property |") :].split("\n\n")[0]
    rows = table.splitlines()[2:]
    named = [row.split("|")[2].strip().strip("`") for row in rows]
    assert len(rows) == len(BUG_CLASSES)
    assert sorted(named) == sorted(prop for prop, _, _ in BUG_CLASSES.values())
