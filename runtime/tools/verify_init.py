"""``acpfsm verify``'s model of two charts the session init runs inside its steps: the
start-model policy (``APPLY_START_MODEL``, :class:`~acpfsm.statecharts.StartModelPolicy`)
and the config settlement (``SETTLE``, :class:`~acpfsm.statecharts.ConfigSettlement`).

Theory of operation
-------------------
*The policy* runs to its end inside one init step, as the runtime's
``ConfigDriver.start_model`` runs it (runtime/session/config.py): ``policy_evaluated`` with
the advertised catalog, then one SetModel call per ``set_model`` effect, each answered
(succeeded, failed with method-not-found, failed otherwise), until no call is named; the
``decided`` effect then says whether the init fails. :class:`Policy` runs the chart over
every input the runtime gives it (a requested model, with or without a fallback and the
auto-fallback, each kind of advertised catalog) and every answer of every call, once per
exploration (the chart is deterministic in them), and gives the init step its answers: the
ones some run decides (``ok``, ``failed``). It checks that every run comes to rest
(:data:`POLICY_CALLS` calls at most) in a final state with exactly one ``decided``, whose
``set_called`` says whether a call was made. A run without a requested model never starts
the chart (the runtime skips it).

*The settlement* starts at the init's ``SETTLE`` step (``ConfigDriver.settle``) with its
``config_id`` (none, or the last layer call's), whether a catalog is cached and whether the
answer to ``config_id`` was seen before; then each of the agent's ``session_models`` updates
is a fact for it (``ConfigDriver.models_updated``): a provider update, the answer to its
config id, an answer to another one. Nothing else in the model reads the settlement or is
read by it (its one effect publishes), so the order of the updates among the other actions
changes nothing: :class:`Settlement` runs every input and every sequence of updates
(:data:`SETTLE_UPDATES` long) once, and the model's state keeps only that the settlement
was requested. It checks that the snapshot is published once, on the answer it waits for:
never twice, never on an update that is not its answer, and never is its answer applied
without publishing it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from acpfsm.statecharts import Machine
from acpfsm.statecharts.names import (
    ConfigSettlementEffect,
    ConfigSettlementEvent,
    StartModelPolicyEffect,
    StartModelPolicyEvent,
)

from .verify_world import model_machine

if TYPE_CHECKING:
    from .verify_model import World

__all__ = [
    "POLICY_CALLS",
    "SETTLE_INPUTS",
    "SETTLE_UPDATES",
    "UPDATES",
    "Policy",
    "Settlement",
    "policy_answers",
    "settlement_requested",
]

#: the most SetModel calls one run of the policy may make before it counts as not at rest
POLICY_CALLS = 3
#: the policy's inputs the runtime gives it: (fallback model, auto-fallback, advertised)
_POLICY_INPUTS = tuple(
    (fallback, auto, advertised)
    for fallback in ("", "f")
    for auto in (False, True)
    for advertised in ((), ("r",), ("f",), ("r", "f"), ("x",))
)
#: SetModel's answers: succeeded, failed (-32601 method not found), failed otherwise
_SET_ANSWERS = ("ok", "method_not_found", "error")

#: the settlement's inputs at SETTLE: (config_id, a catalog cached, its answer seen before)
SETTLE_INPUTS = tuple(
    (config_id, cached, applied)
    for config_id in ("", "c")
    for cached in (False, True)
    for applied in (False, True)
    if not (config_id == "" and applied)
)
#: the longest sequence of updates explored after the settlement started
SETTLE_UPDATES = 3
#: the agent's session_models updates: (provider_response, the config id it answers)
UPDATES: Mapping[str, tuple[bool, str]] = {
    "provider_update": (False, ""),
    "response": (True, "c"),
    "other_response": (True, "o"),
}


@dataclass(slots=True)
class Policy:
    """Every run of the start-model policy, once (see the module docstring)."""

    chart: Any
    answers: tuple[str, ...] = ()
    covered: set[tuple[str, str, str, str]] = field(default_factory=set)
    violations: list[str] = field(default_factory=list)
    _done: bool = False

    def explore(self) -> None:
        if self._done:
            return
        self._done = True
        outcomes: set[str] = set()
        for fallback, auto, advertised in _POLICY_INPUTS:
            machine = model_machine(
                self.chart, requested_model="r", fallback_model=fallback, auto_fallback=auto
            )
            start = machine.snapshot()
            first = self._fire(machine, StartModelPolicyEvent.policy_evaluated, advertised)
            self._runs(machine, first, (), outcomes, f"{fallback or '-'}/{auto}/{advertised}")
            machine.restore(start)
        self.answers = tuple(a for a in ("ok", "failed") if a in outcomes)

    def _fire(self, machine: Machine, event: str, advertised: tuple[str, ...] = ()) -> Any:
        if event == StartModelPolicyEvent.policy_evaluated:
            step = machine.fire(event, advertised=list(advertised))
        elif event == "method_not_found":
            step = machine.fire(StartModelPolicyEvent.set_model_failed, method_not_found=True)
        elif event == "error":
            step = machine.fire(StartModelPolicyEvent.set_model_failed, method_not_found=False)
        else:
            step = machine.fire(StartModelPolicyEvent.set_model_succeeded)
        self.covered.add((step.chart, step.source, step.event, step.target))
        return step

    def _runs(
        self,
        machine: Machine,
        step: Any,
        calls: tuple[str, ...],
        outcomes: set[str],
        inputs: str,
        decided: tuple[Any, ...] = (),
    ) -> None:
        """Follow every answer of every SetModel call ``step`` names."""
        decided = decided + tuple(
            e for e in step.effects if e.name == StartModelPolicyEffect.decided
        )
        if any(e.name == StartModelPolicyEffect.set_model for e in step.effects):
            if len(calls) >= POLICY_CALLS:
                self.violations.append(
                    f"the start-model policy ({inputs}) asks for a SetModel call after "
                    f"{len(calls)} ({', '.join(calls)})"
                )
                return
            here = machine.snapshot()
            for answer in _SET_ANSWERS:
                machine.restore(here)
                after = self._fire(machine, answer)
                self._runs(machine, after, (*calls, answer), outcomes, inputs, decided)
            return
        where = f"the start-model policy ({inputs}; calls: {', '.join(calls) or 'none'})"
        if not machine.ended:
            self.violations.append(f"{where} rests in {machine.snapshot()}, not a decision")
        elif len(decided) != 1:
            self.violations.append(f"{where} decided {len(decided)} times")
        elif bool(decided[0]["set_called"]) != bool(calls):
            self.violations.append(f"{where} says set_called={decided[0]['set_called']}")
        else:
            outcomes.add("failed" if decided[0]["failed"] else "ok")


@dataclass(slots=True)
class Settlement:
    """Every run of the config settlement, once (see the module docstring)."""

    chart: Any
    covered: set[tuple[str, str, str, str]] = field(default_factory=set)
    violations: list[str] = field(default_factory=list)
    _done: bool = False

    def explore(self) -> None:
        if self._done:
            return
        self._done = True
        for config_id, cached, applied in SETTLE_INPUTS:
            m = model_machine(self.chart, config_id=config_id)
            step = m.fire(
                ConfigSettlementEvent.settle_requested,
                catalog_cached=cached,
                response_applied=applied,
            )
            inputs = f"config id {config_id!r}, catalog cached {cached}, answer seen {applied}"
            waited = cached if config_id == "" else applied
            published = self._check(step, False, waited, f"settle_requested ({inputs})")
            self._updates(m, config_id, published, (), inputs)

    def _updates(
        self, m: Machine, config_id: str, published: bool, seen: tuple[str, ...], inputs: str
    ) -> None:
        """Every sequence of :data:`UPDATES` kinds (up to :data:`SETTLE_UPDATES` long)."""
        if len(seen) >= SETTLE_UPDATES:
            return
        here = m.snapshot()
        for kind in UPDATES:
            m.restore(here)
            provider_response, answers = UPDATES[kind]
            step = m.fire(
                ConfigSettlementEvent.models_updated,
                provider_response=provider_response,
                response_config_id=answers,
            )
            waited = not published and (config_id == "" or answers == config_id)
            what = f"a {kind} update after {', '.join(seen) or 'none'} ({inputs})"
            now = self._check(step, published, waited, what)
            self._updates(m, config_id, published or now, (*seen, kind), inputs)

    def _check(self, step: Any, before: bool, waited_for: bool, what: str) -> bool:
        """Whether ``step`` published; what is wrong with it noted (``before``: published
        already; ``waited_for``: its fact is the answer the settlement waits for)."""
        self.covered.add((step.chart, step.source, step.event, step.target))
        published = any(e.name == ConfigSettlementEffect.publish_settled for e in step.effects)
        if published and before:
            self.violations.append(f"the settled snapshot is published a second time: {what}")
        elif published and not waited_for:
            self.violations.append(f"the settled snapshot is published on {what}")
        elif waited_for and not published:
            self.violations.append(
                f"the settlement's answer came and nothing was published: {what}"
            )
        return published


def policy_answers(w: World, policy: Policy) -> list[tuple[str, dict[str, Any]]]:
    """APPLY_START_MODEL's answers: the policy's runs (once), its problems flagged in ``w``."""
    policy.explore()
    w.x.covered |= policy.covered
    for message in policy.violations:
        w.flag("the_start_model_policy_comes_to_rest", message)
    return [(answer, {}) for answer in policy.answers]


def settlement_requested(w: World, settling: Settlement) -> None:
    """SETTLE answered: the settlement's runs (once), its problems flagged in ``w``."""
    w.settlement = True
    settling.explore()
    w.x.covered |= settling.covered
    for message in settling.violations:
        w.flag("the_config_settles_once_on_its_answer", message)
