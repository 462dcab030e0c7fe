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

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import msgspec

from ._mutant import MUTANT_ENV, MUTATIONS, Mutant, _mutate, mutant_from_env
from .errors import ChartDefinitionError
from .names import EffectName

if TYPE_CHECKING:
    from ._base import Chart
    from ._declare import Declaration

__all__ = [
    "MUTANT_ENV",
    "MUTATIONS",
    "Candidate",
    "CompiledChart",
    "Effect",
    "EffectSpec",
    "Effects",
    "Mutant",
    "Step",
    "compile_chart",
    "compile_declaration",
    "effect",
    "mutant_from_env",
]

# --------------------------------------------------------------------------- effects
# The effects and the candidates are frozen msgspec Structs, not dataclasses: the same plain
# data, built in C (a frozen dataclass costs ~1 ms to define at import and ~0.5 us per
# instance, an Effect being made at each fire whose effects carry data; a Struct ~0.1 us).


class EffectSpec(msgspec.Struct, frozen=True):
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


class Effect(msgspec.Struct, frozen=True):
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


class Candidate(msgspec.Struct, frozen=True):
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
    declaration: Declaration
    """What the tables were compiled from (generated ahead of time, or read from the class)."""
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
    lazy: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The declaration class and :attr:`index`, once asked for (python-statemachine's)."""

    @property
    def cls(self) -> type[Chart]:
        """The chart's declaration class (imported on first use: it imports
        python-statemachine)."""
        cls = self.lazy.get("cls")
        if cls is None:
            cls = importlib.import_module(self.declaration.module)
            for part in self.declaration.qualname.split("."):
                cls = getattr(cls, part)
            self.lazy["cls"] = cls
        return cast("type[Chart]", cls)

    @property
    def index(self) -> dict[tuple[int, str], int]:
        """``(id(python-statemachine's transition object), event)`` → the declared
        transition's index (what the reference engine took, in these tables). Raises
        ChartDefinitionError when the class no longer matches the tables' declaration."""
        index = self.lazy.get("index")
        if index is None:
            from ._declare import check_current, declaration_of

            declaration, index = declaration_of(self.cls)
            check_current(declaration, self.declaration)
            self.lazy["index"] = index
        return cast("dict[tuple[int, str], int]", index)

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


# --------------------------------------------------------------------------- the compiler


def _refuse(chart: type[Chart] | str, what: str) -> ChartDefinitionError:
    name = chart if isinstance(chart, str) else chart.__name__
    return ChartDefinitionError(f"{name}: {what} is not supported by acpfsm's engine")


def _chain(state: str, parent: Mapping[str, str | None]) -> list[str]:
    out: list[str] = []
    s: str | None = state
    while s is not None:
        out.append(s)
        s = parent[s]
    return out


def _parse_key(chart: str, key: str) -> tuple[str, str, str | None, frozenset[str] | None]:
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
            f"{chart}: effect key {key!r} is not 'event: source -> target'"
        ) from None
    if "->" in rest:
        source, target = (part.strip() for part in rest.split("->", 1))
        return event, source, target, guards
    return event, rest, None, guards


def compile_chart(chart: type[Chart], mutant: Mutant | None = None) -> CompiledChart:
    """Compile the class ``chart`` (see the module docstring); raises ChartDefinitionError.
    ``mutant`` (chart mutation testing only) is applied when it names this chart."""
    from ._declare import declaration_of

    declaration, index = declaration_of(chart)
    compiled = compile_declaration(declaration, mutant)
    compiled.lazy.update(cls=chart, index=index)
    return compiled


def compile_declaration(decl: Declaration, mutant: Mutant | None = None) -> CompiledChart:
    """Compile a :class:`Declaration` (see the module docstring); raises
    ChartDefinitionError. ``mutant`` (chart mutation testing only) is applied when it names
    this chart. Imports nothing: the runtime compiles the generated declarations this way."""
    chart = decl.qualname.rpartition(".")[2]
    states = {s.id: s for s in decl.states}
    parent: dict[str, str | None] = {s.id: s.parent for s in decl.states}
    children: dict[str, list[str]] = {s.id: [] for s in decl.states}
    for s in decl.states:
        if s.parent is not None:
            children[s.parent].append(s.id)

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
    params = dict(decl.guards)
    declared: list[tuple[str, str, str | None, tuple[Guard, ...]]] = []
    per_state: dict[str, list[int]] = {sid: [] for sid in states}
    for t in decl.transitions:
        per_state[t.source].append(len(declared))
        guards = tuple((decl.functions[g], params[g], expected) for g, expected in t.guards)
        declared.append((t.event, t.source, t.target, guards))
    events = {t.event for t in decl.transitions}

    # effects
    transition_effects: dict[int, tuple[EffectSpec, ...]] = {}
    for key, specs in decl.transition_effects:
        event, source, target, wanted = _parse_key(chart, key)
        matches = [
            i
            for i, t in enumerate(decl.transitions)
            if (t.event, t.source, t.target) == (event, source, target)
            and (wanted is None or frozenset(g for g, _ in t.guards) == wanted)
        ]
        if not matches:
            raise ChartDefinitionError(
                f"{chart}: effects for {key!r}, which the chart does not declare"
            )
        for i in matches:
            transition_effects[i] = specs
    entry_effects: dict[str, tuple[EffectSpec, ...]] = {}
    for sid, specs in decl.entry_effects:
        if sid not in states:
            raise ChartDefinitionError(f"{chart}: entry effects for unknown {sid!r}")
        entry_effects[sid] = specs
    constants = dict(decl.constants)
    removed: set[int] = set()
    if mutant is not None and mutant.chart == decl.name:
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
                            decl.name,
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
        name=decl.name,
        declaration=decl,
        states=frozenset(states),
        events=frozenset(events),
        initial=default_leaf[top_initial],
        final=frozenset(sid for sid, st in states.items() if st.final),
        parent=parent,
        display={s.id: s.name for s in decl.states},
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
    )
