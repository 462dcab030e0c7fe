"""PoolMember and NamespaceAdoption: one ``acpfsm serve --pool`` process's membership of the
pool, and its take-over of one namespace whose lease ran out.

Theory of operation
-------------------
kandev runs one backend per host and has no pool: its lifecycle ``Manager.Start``
(apps/backend/internal/agent/lifecycle/manager_lifecycle.go) recovers the executions its own
executor backends report. ``acpfsm serve --pool`` goes past one process (the pool section
of docs/guides/across-processes.md): each member keeps its executions in a PostgreSQL
namespace of its own and renews a lease row on it; a member whose lease runs out is taken
over by another one, which opens the namespace (the store's advisory lock makes it its only
holder) and runs that same startup recovery on it. The decisions are declared here; the
runtime (``acpfsm.runtime.service.pool``) performs the effects, measures time and feeds
the results back as past-tense facts. Time enters as facts: the runtime's timers fire
``renew_due`` and ``scan_due`` after the part of the lease the effect that armed them names,
and ``fence_deadline_passed`` when the fence deadline armed by ``arm_fence_deadline`` runs
out.

PoolMember (one per serve process):

1. ``join_requested`` → ``joining``: the member's lease rows are claimed (``claim_leases``).
   ``claimed`` → ``holding`` (and the first scan for expired leases is scheduled);
   ``claim_failed`` → ``refused``: the process cannot join (``refuse_join``).
2. ``holding``: the lease was just renewed: the fence deadline is (re-)armed at
   :data:`FENCE` of the lease, the next renewal is due after a :data:`RENEWALS`-th of it.
   ``renew_due`` → ``renewing`` (``renew_leases``: only the rows that still name this
   member). ``renewed`` → ``holding``, unless a row was found taken by another member
   (``taken_over``): → ``fenced``. ``renewal_failed`` (PostgreSQL out of reach, a query that
   hung) → ``unrenewed``: retried at the next ``renew_due``.
3. ``fence_deadline_passed`` in any state of ``member`` (no renewal succeeded for
   :data:`FENCE` of the lease) → ``fenced``: the member stops driving its executions before
   any other member may adopt them (at the whole lease), so two processes never drive one
   execution. ``fenced`` ignores every later fact (a renewal's late answer, a timer).
4. :data:`SCANS` times per lease, ``scan_due``: a member that holds its lease looks
   for namespaces whose lease ran out (``scan_expired``) and ``expired_listed`` adopts each
   (``adopt_namespaces``: one NamespaceAdoption each, in turn); a member whose renewal fails
   (``unrenewed``: it is likely cut off itself) adopts nothing and waits for the next scan.

NamespaceAdoption (one per expired namespace found): ``adoption_started`` → ``opening``
(``open_namespace``: a Runtime on it, whose store takes the advisory lock, then runs the
startup recovery). ``namespace_locked`` → ``lost_race``: another member holds it, nothing
to do. ``open_failed`` → ``unadoptable`` (``report_unadoptable``). ``namespace_opened`` →
``claiming`` (``claim_lease``: the lease row now names this member); ``lease_claimed`` →
``hosting`` (``host_namespace``: the member answers for its executions and renews its
lease), or ``lease_claim_failed`` → ``released`` (``release_namespace``: the Runtime leaves,
detaching its executions, so another member can try: hosting a namespace whose row names
someone else would fence this member at its next renewal).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from statemachine import State

from ._base import Chart
from ._compile import Effects, effect

__all__ = ["FENCE", "RENEWALS", "SCANS", "NamespaceAdoption", "PoolMember"]

FENCE = 0.7
"""A member that could not renew its lease for this share of it stops (before any other
member may adopt its namespaces, at the whole lease)."""
RENEWALS = 6
"""Renewals per lease: the next one is due a sixth of the lease after the last."""
SCANS = 3
"""Looks for expired leases per lease."""

_SCHEDULE_SCAN = effect("schedule_scan", per_lease=SCANS)
_SCHEDULE_RENEWAL = effect("schedule_renewal", per_lease=RENEWALS)


class PoolMember(Chart):
    """outside → joining → holding ⇄ renewing (⇄ unrenewed) → fenced, or refused."""

    chart_name: ClassVar[str] = "pool_member"
    validate_final_reachability: ClassVar[bool] = False

    outside = State("outside", initial=True)
    joining = State("joining")

    class member(State.Compound):
        holding = State("holding", initial=True)
        renewing = State("renewing")
        unrenewed = State("unrenewed")

    fenced = State("fenced")
    refused = State("refused", final=True)

    # 1. joining
    join_requested = outside.to(joining)
    claimed = joining.to(member.holding)
    claim_failed = joining.to(refused)
    # 2. renewing the lease (late facts after the fence: ignored)
    renew_due = (
        member.holding.to(member.renewing) | member.unrenewed.to(member.renewing) | fenced.to(None)
    )
    renewed = (
        member.renewing.to(fenced, cond="taken_over")
        | member.renewing.to(member.holding)
        | fenced.to(None)
    )
    renewal_failed = member.renewing.to(member.unrenewed) | fenced.to(None)
    # 3. the fence
    fence_deadline_passed = member.to(fenced) | fenced.to(None)
    # 4. adopting expired namespaces
    scan_due = member.unrenewed.to(None) | member.to(None) | fenced.to(None)
    expired_listed = member.unrenewed.to(None) | member.to(None) | fenced.to(None)
    scan_failed = member.to(None) | fenced.to(None)

    effects: ClassVar[Effects] = Effects(
        transitions={
            "join_requested: outside -> joining": ["claim_leases"],
            "claimed: joining -> holding": [_SCHEDULE_SCAN],
            "claim_failed: joining -> refused": [effect("refuse_join", "reason")],
            "renewed: renewing -> fenced": [effect("fence_taken_over", "taken")],
            "fence_deadline_passed: member -> fenced": [effect("fence_unrenewed", "silent")],
            "scan_due: unrenewed": [_SCHEDULE_SCAN],
            "scan_due: member": ["scan_expired"],
            "expired_listed: unrenewed": [_SCHEDULE_SCAN],
            "expired_listed: member": [effect("adopt_namespaces", "namespaces"), _SCHEDULE_SCAN],
            "scan_failed: member": [_SCHEDULE_SCAN],
        },
        on_enter={
            "holding": [
                effect("arm_fence_deadline", share=FENCE),
                _SCHEDULE_RENEWAL,
            ],
            "renewing": ["renew_leases"],
            "unrenewed": [_SCHEDULE_RENEWAL],
        },
    )

    # --- guards: pure functions of the event's data -------------------------------------------

    def taken_over(self, taken: Sequence[str] = ()) -> bool:
        return len(taken) > 0


class NamespaceAdoption(Chart):
    """expired → opening → claiming → hosting, or lost_race / unadoptable / released."""

    chart_name: ClassVar[str] = "namespace_adoption"
    validate_final_reachability: ClassVar[bool] = False

    expired = State("expired", initial=True)
    opening = State("opening")
    claiming = State("claiming")
    hosting = State("hosting", final=True)
    lost_race = State("lost_race", final=True)
    unadoptable = State("unadoptable", final=True)
    released = State("released", final=True)

    adoption_started = expired.to(opening)
    namespace_locked = opening.to(lost_race)
    open_failed = opening.to(unadoptable)
    namespace_opened = opening.to(claiming)
    lease_claimed = claiming.to(hosting)
    lease_claim_failed = claiming.to(released)

    effects: ClassVar[Effects] = Effects(
        on_enter={
            "opening": ["open_namespace"],
            "unadoptable": [effect("report_unadoptable", "reason")],
            "claiming": ["claim_lease"],
            "hosting": ["host_namespace"],
            "released": [effect("release_namespace", "reason")],
        },
    )
