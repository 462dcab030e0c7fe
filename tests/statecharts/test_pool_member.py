"""The charts of ``acpfsm serve --pool``: PoolMember (join, renew, fence, when to look for
expired leases and adopt them) and NamespaceAdoption (one expired namespace: opened, claimed,
hosted; or lost to another adopter, unadoptable, released). Walked on both engines."""

from __future__ import annotations

import pytest

from acpfsm.statecharts import (
    ChartMachine,
    EngineName,
    IllegalTransition,
    NamespaceAdoption,
    PoolMember,
    Step,
)
from acpfsm.statecharts.pool_member import FENCE, RENEWALS, SCANS

from .recipes import ADOPTION_RECIPES, POOL_RECIPES, Recipe, walk

_ARMED = [f"arm_fence_deadline(share={FENCE})", f"schedule_renewal(per_lease={RENEWALS})"]
_NEXT_SCAN = f"schedule_scan(per_lease={SCANS})"

_LATE = [
    ("renew_due", {}),
    ("renewed", {"taken": []}),
    ("renewed", {"taken": ["ns-a"]}),
    ("renewal_failed", {"reason": "x"}),
    ("fence_deadline_passed", {"silent": 9.0}),
    ("scan_due", {}),
    ("expired_listed", {"namespaces": ["ns-b"]}),
    ("scan_failed", {"reason": "x"}),
]


def _names(step: Step) -> list[str]:
    return [str(e) for e in step.effects]


def _member(engine: EngineName, state: str = "outside") -> ChartMachine:
    return walk(PoolMember.start(engine=engine), POOL_RECIPES[state])


# --- PoolMember: joining -------------------------------------------------------------------------


def test_a_member_claims_its_rows_then_holds_renews_and_scans(engine: EngineName) -> None:
    m = _member(engine)
    step = m.fire("join_requested")
    assert (step.target, _names(step)) == ("joining", ["claim_leases"])
    step = m.fire("claimed")
    # the first scan, then holding's own: the fence deadline armed, the next renewal due
    assert (step.target, _names(step)) == ("holding", [_NEXT_SCAN, *_ARMED])
    assert m.configuration == ("holding", "member")


def test_a_member_that_cannot_claim_its_rows_is_refused(engine: EngineName) -> None:
    m = _member(engine, "joining")
    step = m.fire("claim_failed", reason="connection refused")
    assert (step.target, _names(step)) == ("refused", ["refuse_join(reason='connection refused')"])
    assert m.ended
    with pytest.raises(IllegalTransition):
        m.fire("claimed")


def test_nothing_is_renewed_scanned_or_fenced_before_the_member_joined(
    engine: EngineName,
) -> None:
    for state in ("outside", "joining"):
        for event, data in _LATE:
            m = _member(engine, state)
            with pytest.raises(IllegalTransition):
                m.fire(event, **data)
            assert m.state == state
    with pytest.raises(IllegalTransition):
        _member(engine, "holding").fire("claimed")  # joined once


# --- PoolMember: renewing ------------------------------------------------------------------------


def test_each_renewal_rearms_the_fence_deadline_and_schedules_the_next(
    engine: EngineName,
) -> None:
    m = _member(engine, "holding")
    for _ in range(3):
        step = m.fire("renew_due")
        assert (step.target, _names(step)) == ("renewing", ["renew_leases"])
        step = m.fire("renewed", taken=[])
        assert (step.target, _names(step)) == ("holding", _ARMED)


def test_a_row_found_taken_by_another_member_fences(engine: EngineName) -> None:
    m = _member(engine, "renewing")
    step = m.fire("renewed", taken=["ns-a", "ns-c"])
    assert (step.target, _names(step)) == ("fenced", ["fence_taken_over(taken=['ns-a', 'ns-c'])"])
    assert not m.ended  # fenced listens on: late facts are ignored, never illegal


def test_a_failed_renewal_is_retried_without_rearming_the_deadline(engine: EngineName) -> None:
    m = _member(engine, "renewing")
    step = m.fire("renewal_failed", reason="timeout")
    assert (step.target, _names(step)) == ("unrenewed", [f"schedule_renewal(per_lease={RENEWALS})"])
    step = m.fire("renew_due")
    assert (step.target, _names(step)) == ("renewing", ["renew_leases"])
    step = m.fire("renewal_failed", reason="timeout")
    assert step.target == "unrenewed" and "arm_fence_deadline" not in str(_names(step))
    step = m.fire("renew_due")
    step = m.fire("renewed", taken=[])  # back: the deadline armed again
    assert (step.target, _names(step)) == ("holding", _ARMED)


def test_a_renewal_is_not_due_while_one_is_in_flight(engine: EngineName) -> None:
    m = _member(engine, "renewing")
    with pytest.raises(IllegalTransition):
        m.fire("renew_due")
    assert m.state == "renewing"
    for event, data in [("renewed", {"taken": []}), ("renewal_failed", {"reason": "x"})]:
        with pytest.raises(IllegalTransition):
            _member(engine, "holding").fire(event, **data)  # no renewal asked


# --- PoolMember: the fence -----------------------------------------------------------------------


@pytest.mark.parametrize("state", ["holding", "renewing", "unrenewed"])
def test_the_fence_deadline_fences_in_every_state_of_a_member(
    engine: EngineName, state: str
) -> None:
    m = _member(engine, state)
    step = m.fire("fence_deadline_passed", silent=2.1)
    assert (step.source, step.target) == ("member", "fenced")
    assert _names(step) == ["fence_unrenewed(silent=2.1)"]


@pytest.mark.parametrize(
    "recipe",
    [
        POOL_RECIPES["fenced"],
        [*POOL_RECIPES["renewing"], ("renewed", {"taken": ["ns-a"]})],
    ],
    ids=["by-deadline", "taken-over"],
)
def test_a_fenced_member_ignores_every_late_fact(engine: EngineName, recipe: Recipe) -> None:
    m = walk(PoolMember.start(engine=engine), recipe)
    for event, data in _LATE:
        step = m.fire(event, **data)
        assert step.targetless and step.effects == (), event
    assert m.state == "fenced" and not m.ended


# --- PoolMember: looking for expired leases ------------------------------------------------------


@pytest.mark.parametrize("state", ["holding", "renewing"])
def test_a_member_holding_its_lease_scans_and_adopts(engine: EngineName, state: str) -> None:
    m = _member(engine, state)
    step = m.fire("scan_due")
    assert (step.targetless, _names(step)) == (True, ["scan_expired"])
    step = m.fire("expired_listed", namespaces=["ns-b", "ns-c"])
    assert _names(step) == ["adopt_namespaces(namespaces=['ns-b', 'ns-c'])", _NEXT_SCAN]
    step = m.fire("scan_failed", reason="timeout")
    assert (step.targetless, _names(step)) == (True, [_NEXT_SCAN])
    assert m.state == state


def test_a_member_that_cannot_renew_adopts_nothing(engine: EngineName) -> None:
    """Cut off from PostgreSQL itself, it is likely the one about to be taken over."""
    m = _member(engine, "unrenewed")
    step = m.fire("scan_due")
    assert (step.targetless, _names(step)) == (True, [_NEXT_SCAN])
    step = m.fire("expired_listed", namespaces=["ns-b"])  # a scan sent before the failure
    assert (step.targetless, _names(step)) == (True, [_NEXT_SCAN])
    step = m.fire("scan_failed", reason="timeout")
    assert (step.targetless, _names(step)) == (True, [_NEXT_SCAN])
    assert m.state == "unrenewed"


# --- NamespaceAdoption ---------------------------------------------------------------------------


def _adoption(engine: EngineName, state: str = "expired") -> ChartMachine:
    return walk(NamespaceAdoption.start(engine=engine), ADOPTION_RECIPES[state])


def test_an_adopted_namespace_is_opened_claimed_then_hosted(engine: EngineName) -> None:
    a = _adoption(engine)
    steps = [
        a.fire("adoption_started"),
        a.fire("namespace_opened"),
        a.fire("lease_claimed"),
    ]
    assert [(s.target, _names(s)) for s in steps] == [
        ("opening", ["open_namespace"]),
        ("claiming", ["claim_lease"]),
        ("hosting", ["host_namespace"]),
    ]
    assert a.ended


def test_an_adopter_that_lost_the_race_leaves_it(engine: EngineName) -> None:
    a = _adoption(engine, "opening")
    step = a.fire("namespace_locked")
    assert (step.target, _names(step), a.ended) == ("lost_race", [], True)


def test_a_namespace_that_cannot_be_opened_is_reported(engine: EngineName) -> None:
    a = _adoption(engine, "opening")
    step = a.fire("open_failed", reason="disk full")
    assert (step.target, _names(step)) == (
        "unadoptable",
        ["report_unadoptable(reason='disk full')"],
    )


def test_an_opened_namespace_whose_row_cannot_be_claimed_is_released(
    engine: EngineName,
) -> None:
    """Hosting it with the row naming someone else would fence this member at its next
    renewal: let it go, another member (or this one, at its next scan) tries again."""
    a = _adoption(engine, "claiming")
    step = a.fire("lease_claim_failed", reason="timeout")
    assert (step.target, _names(step)) == ("released", ["release_namespace(reason='timeout')"])


@pytest.mark.parametrize("state", ["hosting", "lost_race", "unadoptable", "released"])
def test_an_adoption_that_rests_takes_no_more_facts(engine: EngineName, state: str) -> None:
    a = _adoption(engine, state)
    assert a.ended
    with pytest.raises(IllegalTransition):
        a.fire("namespace_opened")


def test_an_adoption_takes_its_facts_in_order_only(engine: EngineName) -> None:
    for state, event in [
        ("expired", "namespace_opened"),
        ("expired", "lease_claimed"),
        ("opening", "lease_claimed"),
        ("claiming", "namespace_locked"),
        ("claiming", "adoption_started"),
    ]:
        a = _adoption(engine, state)
        with pytest.raises(IllegalTransition):
            a.fire(event, reason="x")
        assert a.state == state
