"""The chart compiler: a python-statemachine declaration → flat lookup tables.

Theory of operation
-------------------
The charts are *declared* with python-statemachine (states, compound states, transitions,
``cond=``/``unless=`` guards naming methods, final states): that is the declaration language,
validated by python-statemachine when the class is defined, and the source of the diagrams.
They are *executed* by acpfsm's compiled engine (:mod:`._machine`), which runs on the tables
built here, once per chart class, on its first use (``Chart.start`` or ``Chart.compiled``).

A chart has no parallel regions, so its configuration is its innermost active state (the
*leaf*) and that state's ancestors. For every leaf and every event the compiler lists the
*candidates*: the transitions python-statemachine 3.2 would consider, in the order it
considers them: those declared on the leaf, then on its parent, and so on outwards, each
state's in declaration order. Firing an event takes the first candidate whose guards all
hold (every ``cond`` true, every ``unless`` false); when none does, the event is illegal.
Each candidate carries everything the transition does, computed here once:

* the leaf afterwards: the target entered through its initial children; for a targetless
  transition (``state.to(None)``) the leaf is unchanged;
* the states *entered*, outermost first (SCXML's transition domain, which python-statemachine
  follows): an external transition from S to T exits every active state below the least
  common compound ancestor of S and T and enters T's chain from there down to a leaf.
  ``S.to.itself()`` therefore exits S and re-enters it (on a compound S its child is reset to
  the initial one); a targetless transition enters and exits nothing;
* the effects it declares (:class:`Effects`): the transition's own, then each entered state's
  entry effects, outermost first.

What python-statemachine does beyond that is refused at compile time with
:class:`~acpfsm.statecharts.errors.ChartDefinitionError`, so nothing can run silently on one
engine only: parallel and history states, a final state inside a compound state (it queues
``done.state.*``), eventless or internal transitions, transitions with several targets,
validators, ``before``/``on``/``after`` actions, state ``enter``/``exit``/``invoke`` callbacks,
callbacks found by naming convention (``on_<event>``, ``on_enter_<state>``,
``before_transition`` …), guards that are not the name of a plain method (boolean expressions,
callables, properties), guard parameters without a default or named like the values
python-statemachine injects (``event``, ``machine`` …), and event names that are not
identifiers.
"""

from __future__ import annotations

import inspect
import keyword
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from .errors import ChartDefinitionError
from .names import EffectName

if TYPE_CHECKING:
    from ._base import Chart

__all__ = [
    "Candidate",
    "CompiledChart",
    "Effect",
    "EffectSpec",
    "Effects",
    "Mutant",
    "Step",
    "compile_chart",
    "effect",
]

# python-statemachine injects these into callbacks; a guard parameter so named would be fed
# by the reference engine and not by ours.
_INJECTED = frozenset(
    {"event", "event_data", "machine", "model", "source", "state", "target", "transition"}
)
_CONVENTION_PREFIXES = ("on_enter_", "on_exit_", "on_invoke_")
_CONVENTION_GENERIC = frozenset(
    {
        "before_transition",
        "on_transition",
        "after_transition",
        "on_enter_state",
        "on_exit_state",
        "on_invoke_state",
        "prepare_event",
    }
)


# --------------------------------------------------------------------------- effects


@dataclass(frozen=True, slots=True)
class EffectSpec:
    """A declared effect: ``name`` and the fields it carries, each taken (in this order) from
    the event data, the chart instance's constant data, or ``defaults``."""

    name: str
    fields: tuple[str, ...] = ()
    defaults: tuple[tuple[str, Any], ...] = ()

    def __str__(self) -> str:
        return f"{self.name}({', '.join(self.fields)})" if self.fields else self.name


def effect(name: str, *fields: str, **defaults: Any) -> EffectSpec:
    """Declare an effect named ``name`` carrying ``fields`` (and fields with ``defaults``; a
    field may be named in both)."""
    extra = tuple(k for k in defaults if k not in fields)
    return EffectSpec(name, tuple(fields) + extra, tuple(defaults.items()))


@dataclass(frozen=True, slots=True)
class Effect:
    """An effect a fired transition asks the runtime to perform: frozen, plain data."""

    name: EffectName
    args: tuple[tuple[str, Any], ...] = ()

    def __getitem__(self, key: str) -> Any:
        for k, v in self.args:
            if k == key:
                return v
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        for k, v in self.args:
            if k == key:
                return v
        return default

    def __str__(self) -> str:
        if not self.args:
            return self.name
        return f"{self.name}({', '.join(f'{k}={v!r}' for k, v in self.args)})"


EffectDecl = EffectSpec | str


@dataclass(frozen=True)
class Effects:
    """The effects a chart declares, as a class attribute ``effects = Effects(...)``.

    ``transitions`` maps a transition key to its effects. A key is ``"event: source -> target"``
    (state ids), or ``"event: source"`` for a targetless transition; it names every declared
    transition that matches. Where several match and differ by guard, ``"… [guard]"`` names
    the one guarded by exactly ``guard`` and ``"… []"`` the unguarded one. ``on_enter`` maps a state id to the
    effects of entering it (also when a transition re-enters it). An effect is an
    :func:`effect` or a bare name (an effect without fields)."""

    transitions: Mapping[str, Sequence[EffectDecl]] = field(default_factory=dict)
    on_enter: Mapping[str, Sequence[EffectDecl]] = field(default_factory=dict)


def _spec(decl: EffectDecl) -> EffectSpec:
    return EffectSpec(decl) if isinstance(decl, str) else decl


# --------------------------------------------------------------------------- compiled form


class Step(NamedTuple):
    """What a fired event did: the transition taken and the effects it declares."""

    chart: str
    event: str
    source: str
    """The state that declares the transition (the leaf or one of its ancestors)."""
    target: str
    """The declared target; the source itself for a targetless transition."""
    targetless: bool
    state: str
    """The leaf afterwards."""
    entered: tuple[str, ...]
    """The states entered, outermost first (empty for a targetless transition)."""
    effects: tuple[Effect, ...]


Guard = tuple[Callable[..., Any], tuple[str, ...], bool]
"""``(function, parameter names, expected value)``: ``cond`` expects True, ``unless`` False."""

FROM_CONSTANT, FROM_DEFAULT, FROM_NOWHERE = 0, 1, 2
"""Where an effect's field comes from when the event data does not hold it."""


class EffectPlan(NamedTuple):
    """How to fill one declared effect, decided at compile time: each field's fallback when
    the event data does not hold it (``(name, FROM_*, default)``: the chart's constant, else
    the declared default, else nothing), and the effect itself when every field has a default
    and none is a constant (it is the same whenever the data holds none of them)."""

    name: EffectName
    fields: tuple[tuple[str, int, Any], ...]
    fixed: Effect | None


def effect_plan(spec: EffectSpec, constants: Mapping[str, Any]) -> EffectPlan:
    """The :class:`EffectPlan` of ``spec`` for a chart with ``constants``."""
    defaults: dict[str, Any] = {}
    for name, value in spec.defaults:
        defaults.setdefault(name, value)  # a repeated name: its first default
    fields: list[tuple[str, int, Any]] = []
    for name in spec.fields:
        if name in constants:
            fields.append((name, FROM_CONSTANT, None))
        elif name in defaults:
            fields.append((name, FROM_DEFAULT, defaults[name]))
        else:
            fields.append((name, FROM_NOWHERE, None))
    fixed = None
    if all(source == FROM_DEFAULT for _, source, _ in fields):
        fixed = Effect(EffectName(spec.name), tuple((name, value) for name, _, value in fields))
    return EffectPlan(EffectName(spec.name), tuple(fields), fixed)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One transition as seen from one leaf (see the module docstring)."""

    index: int
    """The declared transition's number (declaration order over the chart's states)."""
    event: str
    source: str
    target: str | None
    guards: tuple[Guard, ...]
    state: str
    entered: tuple[str, ...]
    effects: tuple[EffectSpec, ...]
    plans: tuple[EffectPlan, ...]
    """``effects`` as :func:`effect_plan` fills them (the engine's fast path)."""
    step: Step | None
    """The step, prebuilt when no effect carries data (the common case: nothing to build)."""
    ends: bool
    """The transition enters a top-level final state: the chart ends."""


@dataclass(frozen=True, slots=True)
class CompiledChart:
    """One chart class as plain tables (see the module docstring)."""

    name: str
    cls: type[Chart]
    states: frozenset[str]
    events: frozenset[str]
    initial: str
    """The initial leaf."""
    final: frozenset[str]
    parent: dict[str, str | None]
    display: dict[str, str]
    """Each state's display name (``READY`` for the state ``ready``)."""
    constants: dict[str, Any]
    """The instance constant data the guards and effects read, with defaults."""
    declared: frozenset[tuple[str, str, str]]
    """Every declared ``(source, event, target)`` (a targetless transition's target is its
    source)."""
    transitions: tuple[tuple[str, str, str | None], ...]
    """Every declared transition ``(event, source, target or None)``, by index."""
    table: dict[str, dict[str, tuple[Candidate, ...]]]
    """leaf → event → candidates, in selection order."""
    step: dict[tuple[str, str, str, str], str]
    """``(leaf, event, source, target)`` → the leaf afterwards, for every transition that
    can be selected from that leaf (trace replay)."""
    default_leaf: dict[str, str]
    """The leaf a transition into a state lands on (through initial children)."""
    ancestors: dict[str, tuple[str, ...]]
    """Each state and its ancestors, innermost first (a leaf's configuration)."""
    transition_effects: dict[int, tuple[EffectSpec, ...]]
    entry_effects: dict[str, tuple[EffectSpec, ...]]
    initial_effects: tuple[EffectSpec, ...]
    """The entry effects of the initial configuration, outermost first (a new machine's
    ``initial_effects()``)."""
    initial_plans: tuple[EffectPlan, ...]
    """``initial_effects`` as :func:`effect_plan` fills them."""
    index: dict[tuple[int, str], int]
    """``(id(python-statemachine's transition object), event)`` → the declared transition's
    index (what the reference engine took, in these tables)."""

    @property
    def effect_names(self) -> frozenset[str]:
        """The name of every effect the chart declares (on transitions, entries, its start)."""
        names = {s.name for specs in self.transition_effects.values() for s in specs}
        names |= {s.name for specs in self.entry_effects.values() for s in specs}
        return frozenset(names | {s.name for s in self.initial_effects})

    def configuration(self, leaf: str) -> tuple[str, ...]:
        """``leaf`` and its ancestors, innermost first."""
        return self.ancestors[leaf]

    def path(self, leaf: str) -> str:
        """``dispatched.awaited`` for the leaf ``awaited``."""
        return ".".join(reversed(self.configuration(leaf)))

    def is_final(self, leaf: str) -> bool:
        return leaf in self.final

    def effects_of(self, index: int) -> tuple[EffectSpec, ...]:
        """The effects declared on transition ``index`` itself (not entry effects)."""
        return self.transition_effects.get(index, ())

    def absorbing_states(self, exit_state: str) -> frozenset[str]:
        """Leaves that take at least one event and that every transition they can take
        leaves where it is (targetless, or re-entering the leaf) or moves to the leaf
        ``exit_state`` lands on: a prompt generation's terminal outcomes."""
        exit_leaf = self.default_leaf.get(exit_state, exit_state)
        out: set[str] = set()
        for leaf, by_event in self.table.items():
            if leaf == exit_leaf:
                continue
            after = {cand.state for cands in by_event.values() for cand in cands}
            if after and after <= {leaf, exit_leaf}:
                out.add(leaf)
        return frozenset(out)


# --------------------------------------------------------------------------- mutants

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
    chart: type[Chart],
    mutant: Mutant,
    declared: list[tuple[str, str, str | None, tuple[Guard, ...]]],
    per_state: dict[str, list[int]],
    states: Mapping[str, Any],
) -> None:
    """Apply ``mutant`` to the declared transitions in place (effects stay with the index)."""
    if not 0 <= mutant.index < len(declared):
        raise ChartDefinitionError(f"{chart.__name__}: no transition {mutant.index} to mutate")
    event, source, target, guards = declared[mutant.index]
    order = per_state[source]
    if mutant.mutation == "delete":
        order.remove(mutant.index)
    elif mutant.mutation == "retarget":
        if mutant.target not in states:
            raise ChartDefinitionError(f"{chart.__name__}: no state {mutant.target!r}")
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
            raise ChartDefinitionError(f"{chart.__name__}: transition {mutant.index} has no next")
        order[at], order[later[0]] = order[later[0]], order[at]


# --------------------------------------------------------------------------- the compiler


def _refuse(chart: type[Chart], what: str) -> ChartDefinitionError:
    return ChartDefinitionError(f"{chart.__name__}: {what} is not supported by acpfsm's engine")


def _check_callbacks(chart: type[Chart], states: Mapping[str, Any], events: Iterable[str]) -> None:
    names = {n for cls in chart.__mro__ if cls.__module__ != "statemachine" for n in vars(cls)}
    conventions = set(_CONVENTION_GENERIC)
    for event in events:
        conventions.update((f"before_{event}", f"on_{event}", f"after_{event}"))
    for sid in states:
        conventions.update(p + sid for p in _CONVENTION_PREFIXES)
    for name in sorted(names & conventions):
        raise _refuse(chart, f"the naming-convention callback {name!r}")
    for sid, state in states.items():
        for spec in state._specs:
            if not spec.is_convention:
                raise _refuse(chart, f"the {spec.group.name.lower()} callback of state {sid!r}")


def _guard(chart: type[Chart], spec: Any, where: str) -> Guard:
    name = spec.func
    if not isinstance(name, str):
        given = getattr(name, "__qualname__", None) or repr(name)
        raise _refuse(chart, f"the guard given as the callable {given} on {where} (name a method)")
    if not name.isidentifier() or keyword.iskeyword(name):
        raise _refuse(
            chart, f"the guard expression {name!r} on {where} (name one method that combines them)"
        )
    fn = inspect.getattr_static(chart, name, None)
    if not inspect.isfunction(fn):
        raise _refuse(chart, f"the guard {name!r} on {where} (not a plain method)")
    params = list(inspect.signature(fn).parameters.values())[1:]
    for p in params:
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            raise _refuse(chart, f"the guard {name}'s parameter {p.name!r} (*args/**kwargs)")
        if p.default is p.empty:
            raise _refuse(chart, f"the guard {name}'s parameter {p.name!r} without a default")
        if p.name in _INJECTED:
            raise _refuse(chart, f"the guard {name}'s parameter {p.name!r} (an injected name)")
    return (fn, tuple(p.name for p in params), spec.expected_value is not False)


def _chain(state: str, parent: Mapping[str, str | None]) -> list[str]:
    out: list[str] = []
    s: str | None = state
    while s is not None:
        out.append(s)
        s = parent[s]
    return out


def _parse_key(chart: type[Chart], key: str) -> tuple[str, str, str | None, frozenset[str] | None]:
    """``event: source -> target [guard, …]`` → its parts (guards None when not given)."""
    guards: frozenset[str] | None = None
    body = key.strip()
    if body.endswith("]") and "[" in body:
        body, _, inside = body[:-1].rpartition("[")
        guards = frozenset(g.strip() for g in inside.split(",") if g.strip())
        body = body.strip()
    try:
        event, rest = (part.strip() for part in body.split(":", 1))
    except ValueError:
        raise ChartDefinitionError(
            f"{chart.__name__}: effect key {key!r} is not 'event: source -> target'"
        ) from None
    if "->" in rest:
        source, target = (part.strip() for part in rest.split("->", 1))
        return event, source, target, guards
    return event, rest, None, guards


def compile_chart(chart: type[Chart], mutant: Mutant | None = None) -> CompiledChart:
    """Compile ``chart`` (see the module docstring); raises ChartDefinitionError. ``mutant``
    (chart mutation testing only) is applied when it names this chart."""
    states: dict[str, Any] = {str(sid): s for sid, s in chart.states_map.items()}
    parent: dict[str, str | None] = {}
    children: dict[str, list[str]] = {}
    for sid, state in states.items():
        if state.parallel:
            raise _refuse(chart, f"the parallel state {sid!r}")
        if state.history:
            raise _refuse(chart, f"the history state in {sid!r}")
        parent[sid] = str(state.parent.id) if state.parent is not None else None
        children[sid] = [str(c.id) for c in state.states]
        if state.final and state.parent is not None:
            raise _refuse(chart, f"the final state {sid!r} inside a compound state")

    def initial_child(sid: str) -> str:
        kids = children[sid]
        return next((k for k in kids if states[k].initial), kids[0])

    default_leaf: dict[str, str] = {}
    for sid in states:
        leaf = sid
        while children[leaf]:
            leaf = initial_child(leaf)
        default_leaf[sid] = leaf
    tops = [sid for sid in states if parent[sid] is None]
    top_initial = next((sid for sid in tops if states[sid].initial), tops[0])
    ancestors = {sid: tuple(_chain(sid, parent)) for sid in states}

    # every evented transition, in declaration order: (event, source, target, guards)
    declared: list[tuple[str, str, str | None, tuple[Guard, ...]]] = []
    by_object: dict[tuple[int, str], int] = {}
    per_state: dict[str, list[int]] = {sid: [] for sid in states}
    events: set[str] = set()
    for sid, state in states.items():
        for transition in state.transitions:
            if transition.initial:
                continue
            where = f"a transition from {sid!r}"
            names = [str(e) for e in transition.events]
            if not names:
                raise _refuse(chart, f"the eventless transition from {sid!r}")
            if transition.internal:
                raise _refuse(chart, f"the internal transition {names[0]!r} from {sid!r}")
            if len(transition.targets) > 1:
                raise _refuse(chart, f"the multi-target transition {names[0]!r} from {sid!r}")
            guard_list: list[Guard] = []
            for spec in transition._specs:
                if spec.is_convention:
                    continue
                if spec.group.name != "COND":
                    raise _refuse(chart, f"the {spec.group.name.lower()} callback on {where}")
                guard_list.append(_guard(chart, spec, where))
            target = str(transition.target.id) if transition.target is not None else None
            for name in names:
                if not name.isidentifier():
                    raise _refuse(chart, f"the event name {name!r}")
                per_state[sid].append(len(declared))
                by_object[(id(transition), name)] = len(declared)
                declared.append((name, sid, target, tuple(guard_list)))
                events.add(name)
    _check_callbacks(chart, states, events)

    # effects
    decl: Effects = getattr(chart, "effects", None) or Effects()
    transition_effects: dict[int, tuple[EffectSpec, ...]] = {}
    for key, specs in decl.transitions.items():
        event, source, target, wanted = _parse_key(chart, key)
        matches = [
            i
            for i, (e, s, t, g) in enumerate(declared)
            if (e, s, t) == (event, source, target)
            and (wanted is None or frozenset(fn.__name__ for fn, _, _ in g) == wanted)
        ]
        if not matches:
            raise ChartDefinitionError(
                f"{chart.__name__}: effects for {key!r}, which the chart does not declare"
            )
        for i in matches:
            transition_effects[i] = tuple(_spec(d) for d in specs)
    entry_effects: dict[str, tuple[EffectSpec, ...]] = {}
    for sid, specs in decl.on_enter.items():
        if sid not in states:
            raise ChartDefinitionError(f"{chart.__name__}: entry effects for unknown {sid!r}")
        entry_effects[sid] = tuple(_spec(d) for d in specs)
    constants = dict(getattr(chart, "constants", {}) or {})
    removed: set[int] = set()
    if mutant is not None and mutant.chart == chart.chart_name:
        _mutate(chart, mutant, declared, per_state, states)
        removed = set(range(len(declared))) - {i for ids in per_state.values() for i in ids}

    def lcca(source: str, target: str) -> str | None:
        """The least compound proper ancestor of ``source`` containing ``target``."""
        for anc in ancestors[source][1:]:
            if anc in ancestors[target][1:]:
                return anc
        return None

    table: dict[str, dict[str, tuple[Candidate, ...]]] = {}
    step: dict[tuple[str, str, str, str], str] = {}
    leaves = [sid for sid in states if not children[sid]]
    for leaf in leaves:
        by_event: dict[str, list[Candidate]] = {}
        if not (states[leaf].final and parent[leaf] is None):  # an ended chart takes nothing
            for source in ancestors[leaf]:
                for index in per_state[source]:
                    event, _, target, guards = declared[index]
                    entered: tuple[str, ...] = ()
                    if target is None:
                        after = leaf
                    else:
                        domain = lcca(source, target)
                        down = _chain(default_leaf[target], parent)
                        cut = down.index(domain) if domain is not None else len(down)
                        entered = tuple(reversed(down[:cut]))
                        after = default_leaf[target]
                    specs = transition_effects.get(index, ()) + tuple(
                        e for st in entered for e in entry_effects.get(st, ())
                    )
                    static = all(not s.fields for s in specs)
                    built = (
                        Step(
                            chart.chart_name,
                            event,
                            source,
                            target if target is not None else source,
                            target is None,
                            after,
                            entered,
                            tuple(Effect(EffectName(s.name)) for s in specs),
                        )
                        if static
                        else None
                    )
                    by_event.setdefault(event, []).append(
                        Candidate(
                            index=index,
                            event=event,
                            source=source,
                            target=target,
                            guards=guards,
                            state=after,
                            entered=entered,
                            effects=specs,
                            plans=tuple(effect_plan(s, constants) for s in specs),
                            step=built,
                            ends=states[after].final and parent[after] is None,
                        )
                    )
        # drop candidates that can never be selected: after an unguarded one
        trimmed: dict[str, tuple[Candidate, ...]] = {}
        for event, cands in by_event.items():
            kept: list[Candidate] = []
            for cand in cands:
                kept.append(cand)
                if not cand.guards:
                    break
            trimmed[event] = tuple(kept)
            for cand in kept:
                step.setdefault((leaf, event, cand.source, cand.target or cand.source), cand.state)
        table[leaf] = trimmed

    initial = tuple(
        e for s in reversed(ancestors[default_leaf[top_initial]]) for e in entry_effects.get(s, ())
    )
    return CompiledChart(
        name=chart.chart_name,
        cls=chart,
        states=frozenset(states),
        events=frozenset(events),
        initial=default_leaf[top_initial],
        final=frozenset(sid for sid, st in states.items() if st.final),
        parent=parent,
        display={sid: str(st.name) for sid, st in states.items()},
        constants=constants,
        declared=frozenset(
            (s, e, t or s) for i, (e, s, t, _) in enumerate(declared) if i not in removed
        ),
        transitions=tuple((e, s, t) for (e, s, t, _) in declared),
        table=table,
        step=step,
        default_leaf=default_leaf,
        ancestors=ancestors,
        transition_effects=transition_effects,
        entry_effects=entry_effects,
        initial_effects=initial,
        initial_plans=tuple(effect_plan(e, constants) for e in initial),
        index=by_object,
    )
