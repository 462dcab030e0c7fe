"""Chart mutants: one deliberate defect in one declared transition, applied by the compiler
(:func:`~._compile.compile_declaration`) for chart mutation testing (``acpfsm.tools.mutate_charts``)
only."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import ChartDefinitionError

if TYPE_CHECKING:
    from ._compile import Guard

__all__ = ["MUTANT_ENV", "MUTATIONS", "Mutant", "mutant_from_env"]

MUTANT_ENV = "ACPFSM_CHART_MUTANT"
"""Names one :class:`Mutant` (its ``str``) for the whole process: chart mutation testing
(``acpfsm.tools.mutate_charts``) only; never set otherwise."""

MUTATIONS = ("delete", "retarget", "drop_guard", "negate_guard", "swap")


@dataclass(frozen=True, slots=True)
class Mutant:
    """One deliberate defect in one declared transition (``index``, declaration order) of the
    chart named ``chart``: ``delete`` it, ``retarget`` it to ``target`` (a state id),
    ``drop_guard`` (unguarded), ``negate_guard`` (every guard expects the opposite), or
    ``swap`` it with the next transition of the same state and event (selection order)."""

    chart: str
    index: int
    mutation: str
    target: str = ""

    def __str__(self) -> str:
        tail = f":{self.target}" if self.target else ""
        return f"{self.chart}:{self.index}:{self.mutation}{tail}"

    @classmethod
    def parse(cls, text: str) -> Mutant:
        """The mutant ``str(mutant)`` names; raises ChartDefinitionError."""
        parts = text.strip().split(":")
        if len(parts) in (3, 4) and parts[1].isdigit() and parts[2] in MUTATIONS:
            return cls(parts[0], int(parts[1]), parts[2], parts[3] if len(parts) == 4 else "")
        raise ChartDefinitionError(f"{MUTANT_ENV}={text!r}: expected chart:index:mutation[:state]")


def mutant_from_env() -> Mutant | None:
    """The mutant ``$ACPFSM_CHART_MUTANT`` names, if any."""
    value = os.environ.get(MUTANT_ENV, "")
    return Mutant.parse(value) if value else None


def _mutate(
    chart: str,
    mutant: Mutant,
    declared: list[tuple[str, str, str | None, tuple[Guard, ...]]],
    per_state: dict[str, list[int]],
    states: Mapping[str, Any],
) -> None:
    """Apply ``mutant`` to the declared transitions in place (effects stay with the index)."""
    if not 0 <= mutant.index < len(declared):
        raise ChartDefinitionError(f"{chart}: no transition {mutant.index} to mutate")
    event, source, target, guards = declared[mutant.index]
    order = per_state[source]
    if mutant.mutation == "delete":
        order.remove(mutant.index)
    elif mutant.mutation == "retarget":
        if mutant.target not in states:
            raise ChartDefinitionError(f"{chart}: no state {mutant.target!r}")
        declared[mutant.index] = (event, source, mutant.target, guards)
    elif mutant.mutation == "drop_guard":
        declared[mutant.index] = (event, source, target, ())
    elif mutant.mutation == "negate_guard":
        flipped = tuple((fn, params, not expected) for fn, params, expected in guards)
        declared[mutant.index] = (event, source, target, flipped)
    else:  # swap
        at = order.index(mutant.index)
        later = [k for k in range(at + 1, len(order)) if declared[order[k]][0] == event]
        if not later:
            raise ChartDefinitionError(f"{chart}: transition {mutant.index} has no next")
        order[at], order[later[0]] = order[later[0]], order[at]
