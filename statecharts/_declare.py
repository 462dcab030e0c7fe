"""A chart declaration class read as plain data (:class:`Declaration`), what the compiler
(:func:`~._compile.compile_declaration`) compiles.

:func:`declaration_of` walks a python-statemachine class (and refuses what the compiled
engine cannot reproduce exactly: see :mod:`._compile`); ``acpfsm chart-tables`` writes the
declarations of the package's charts into ``_generated.py``, from which the runtime compiles
them without importing python-statemachine (:mod:`.charts`).
"""

from __future__ import annotations

import keyword
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from ._compile import Effects, EffectSpec, _refuse, _spec
from .errors import ChartDefinitionError

if TYPE_CHECKING:
    from ._base import Chart

__all__ = ["Declaration", "StateDecl", "TransitionDecl", "check_current", "declaration_of"]

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


# --------------------------------------------------------------------------- declarations


class StateDecl(NamedTuple):
    """One declared state, in python-statemachine's order (``states_map``)."""

    id: str
    name: str
    parent: str | None
    initial: bool
    final: bool


class TransitionDecl(NamedTuple):
    """One declared transition for one event, in declaration order: ``guards`` are the
    ``(guard name, expected value)`` of its ``cond``/``unless`` (``cond`` expects True)."""

    event: str
    source: str
    target: str | None
    guards: tuple[tuple[str, bool], ...]


@dataclass(frozen=True)
class Declaration:
    """A chart declaration as plain data: everything the compiler reads of the class, and
    its guards as plain functions. Built from the class (:func:`declaration_of`, which
    imports python-statemachine) or generated ahead of time into ``_generated.py`` (which
    does not; ``acpfsm diagrams`` writes it, ``--check`` and the tests find it stale)."""

    name: str
    """The chart's ``chart_name``."""
    module: str
    qualname: str
    """Where the declaration class is (imported only for the reference engine)."""
    states: tuple[StateDecl, ...]
    transitions: tuple[TransitionDecl, ...]
    guards: tuple[tuple[str, tuple[str, ...]], ...]
    """Each guard's name and parameter names (after ``self``), by name."""
    transition_effects: tuple[tuple[str, tuple[EffectSpec, ...]], ...]
    """``Effects.transitions``: key → effects, in declaration order."""
    entry_effects: tuple[tuple[str, tuple[EffectSpec, ...]], ...]
    """``Effects.on_enter``: state id → effects."""
    constants: tuple[tuple[str, Any], ...]
    functions: Mapping[str, Callable[..., Any]] = field(compare=False, repr=False)
    """Guard name → the function (the class's method, or its generated copy)."""


def check_current(found: Declaration, tables: Declaration) -> None:
    """Raise ChartDefinitionError unless the class's declaration (``found``) is the one the
    tables were compiled from: generated tables that a chart edit left behind are loud."""
    if found != tables:
        raise ChartDefinitionError(
            f"{found.qualname}: the generated chart tables (acpfsm/statecharts/_generated.py) "
            "do not match the declaration; regenerate them with `make diagrams`"
        )


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


def _guard(
    chart: type[Chart], spec: Any, where: str
) -> tuple[str, Callable[..., Any], tuple[str, ...], bool]:
    import inspect

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
    return (name, fn, tuple(p.name for p in params), spec.expected_value is not False)


def declaration_of(chart: type[Chart]) -> tuple[Declaration, dict[tuple[int, str], int]]:
    """The declaration of the class ``chart`` as plain data, and the index of each of
    python-statemachine's transition objects in it (the reference engine's); raises
    ChartDefinitionError for what the compiled engine cannot reproduce exactly."""
    states: dict[str, Any] = {str(sid): s for sid, s in chart.states_map.items()}
    state_decls: list[StateDecl] = []
    for sid, state in states.items():
        if state.parallel:
            raise _refuse(chart, f"the parallel state {sid!r}")
        if state.history:
            raise _refuse(chart, f"the history state in {sid!r}")
        if state.final and state.parent is not None:
            raise _refuse(chart, f"the final state {sid!r} inside a compound state")
        parent = str(state.parent.id) if state.parent is not None else None
        state_decls.append(
            StateDecl(sid, str(state.name), parent, bool(state.initial), bool(state.final))
        )
    transitions: list[TransitionDecl] = []
    functions: dict[str, Callable[..., Any]] = {}
    params_of: dict[str, tuple[str, ...]] = {}
    index: dict[tuple[int, str], int] = {}
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
            guards: list[tuple[str, bool]] = []
            for spec in transition._specs:
                if spec.is_convention:
                    continue
                if spec.group.name != "COND":
                    raise _refuse(chart, f"the {spec.group.name.lower()} callback on {where}")
                name, fn, params, expected = _guard(chart, spec, where)
                functions[name], params_of[name] = fn, params
                guards.append((name, expected))
            target = str(transition.target.id) if transition.target is not None else None
            for name in names:
                if not name.isidentifier():
                    raise _refuse(chart, f"the event name {name!r}")
                index[(id(transition), name)] = len(transitions)
                transitions.append(TransitionDecl(name, sid, target, tuple(guards)))
                events.add(name)
    _check_callbacks(chart, states, events)
    decl: Effects = getattr(chart, "effects", None) or Effects()
    declaration = Declaration(
        name=chart.chart_name,
        module=chart.__module__,
        qualname=chart.__qualname__,
        states=tuple(state_decls),
        transitions=tuple(transitions),
        guards=tuple(sorted(params_of.items())),
        transition_effects=tuple(
            (key, tuple(_spec(d) for d in specs)) for key, specs in decl.transitions.items()
        ),
        entry_effects=tuple(
            (sid, tuple(_spec(d) for d in specs)) for sid, specs in decl.on_enter.items()
        ),
        constants=tuple((getattr(chart, "constants", {}) or {}).items()),
        functions=functions,
    )
    return declaration, index
