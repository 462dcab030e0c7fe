"""Running a chart: the compiled engine, and python-statemachine's own as the reference.

``Chart.start(engine=..., tags=..., observers=..., **constants)`` returns a *machine*: one
running instance of the chart. Both engines give the same interface (:class:`ChartMachine`):

* ``fire(event, **data)`` takes the transition the chart selects and returns a
  :class:`~._compile.Step`: the transition (source, target, targetless or not), the leaf
  afterwards, the states entered and the declared effects, their fields filled from ``data``
  and the instance's constants. An event the current state does not accept (every guard
  false, or not declared, or the chart has ended) raises
  :class:`~acpfsm.statecharts.errors.IllegalTransition` and changes nothing.
* ``state`` is the active leaf, ``configuration`` the leaf and its ancestors (innermost first),
  ``ended`` whether a top-level final state was entered; the constants are attributes.

:class:`Machine` (the default, ``engine="compiled"``) is a few slots: a fire is a dict lookup
and the candidates' guards. :class:`ReferenceMachine` (``engine="reference"``) runs the same
declaration on python-statemachine's sync engine and looks up the effects of the transition
it selects in the compiled tables (before it exits anything, so a step that cannot be built
raises with nothing changed, as on the compiled engine): the two must agree (the property test in
tests/statecharts/test_engines.py). The environment variable ``ACPFSM_ENGINE`` sets the
default engine for a whole process (``compiled`` or ``reference``).

Observation: each fired transition is reported as a :class:`TransitionRecord` to the
machine's ``observers`` (the runtime's trace) and to the process-wide observers registered
with :func:`add_transition_observer` (the test suite's transition-coverage recorder), unless
the machine was started with ``observed=False`` (a model checker's machines, which fire every
transition of a chart on purpose). Observers are plain callables; they must not block.

Snapshot (compiled engine only): a machine's whole mutable state is its leaf, so
:meth:`Machine.snapshot` returns it (a ``str``: hashable, cheap to keep as part of a larger
state) and :meth:`Machine.restore` puts the machine back into it; the constants are the
instance's and do not change. ``acpfsm verify`` explores the lifecycle this way, one machine
per chart instance restored to each state it visits.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NamedTuple, Protocol, cast

from ._compile import (
    FROM_CONSTANT,
    FROM_DEFAULT,
    Candidate,
    CompiledChart,
    Effect,
    EffectPlan,
    Step,
)
from .errors import ChartDefinitionError, ChartError, IllegalTransition

if TYPE_CHECKING:
    from ._base import Chart

__all__ = [
    "ENGINE_ENV",
    "ChartMachine",
    "EngineName",
    "Machine",
    "ReferenceMachine",
    "TransitionObserver",
    "TransitionRecord",
    "add_transition_observer",
    "answer",
    "default_engine",
    "peek",
    "remove_transition_observer",
    "says",
]

EngineName = Literal["compiled", "reference"]
ENGINE_ENV = "ACPFSM_ENGINE"


def default_engine() -> EngineName:
    """The engine a machine runs on when none is named: ``$ACPFSM_ENGINE`` or compiled."""
    value = os.environ.get(ENGINE_ENV, "") or "compiled"
    if value not in ("compiled", "reference"):
        raise ChartDefinitionError(f"{ENGINE_ENV}={value!r}: use 'compiled' or 'reference'")
    return cast(EngineName, value)


class TransitionRecord(NamedTuple):
    """One fired transition. ``tags`` is the machine's identifying data (execution id,
    generation …) as given when it was started."""

    chart: str
    source: str
    event: str
    target: str
    tags: Mapping[str, Any]


TransitionObserver = Callable[[TransitionRecord], None]
_observers: list[TransitionObserver] = []


def add_transition_observer(observer: TransitionObserver) -> None:
    _observers.append(observer)


def remove_transition_observer(observer: TransitionObserver) -> None:
    if observer in _observers:
        _observers.remove(observer)


class ChartMachine(Protocol):
    """What both engines offer (see the module docstring)."""

    tags: Mapping[str, Any]
    observers: tuple[TransitionObserver, ...]

    @property
    def compiled(self) -> CompiledChart: ...

    @property
    def chart_name(self) -> str: ...

    @property
    def state(self) -> str: ...

    @property
    def configuration(self) -> tuple[str, ...]: ...

    @property
    def ended(self) -> bool: ...

    def is_in(self, *state_ids: str) -> bool: ...

    def fire(self, event: str, **data: Any) -> Step: ...

    def constant(self, name: str) -> Any: ...

    def initial_effects(self) -> tuple[Effect, ...]: ...


def _fill(
    plans: tuple[EffectPlan, ...], data: Mapping[str, Any], machine: ChartMachine
) -> tuple[Effect, ...]:
    """The effects of ``plans``, each field from ``data``, else the constant, else the
    declared default (the plan says which the chart has); raises ChartDefinitionError for
    a field none of them holds."""
    effects: list[Effect] = []
    for name, fields, fixed in plans:
        args: list[tuple[str, Any]] = []
        given = False
        for field, source, default in fields:
            if field in data:
                args.append((field, data[field]))
                given = True
            elif source == FROM_DEFAULT:
                args.append((field, default))
            elif source == FROM_CONSTANT:
                args.append((field, machine.constant(field)))
            else:
                raise ChartDefinitionError(
                    f"{machine.chart_name}: effect {name} needs {field!r}, which neither "
                    f"the event data nor the chart's constants hold"
                )
        effects.append(fixed if fixed is not None and not given else Effect(name, tuple(args)))
    return tuple(effects)


def _step(cand: Candidate, machine: ChartMachine, event: str, data: Mapping[str, Any]) -> Step:
    """The step ``cand`` takes with ``data`` (prebuilt when no effect has a field)."""
    if cand.step is not None:
        return cand.step
    # built as the tuple it is (a NamedTuple's own constructor is a Python call)
    return tuple.__new__(
        Step,
        (
            machine.chart_name,
            event,
            cand.source,
            cand.target if cand.target is not None else cand.source,
            cand.target is None,
            cand.state,
            cand.entered,
            _fill(cand.plans, data, machine),
        ),
    )


def peek(machine: ChartMachine, event: str, **data: Any) -> Step | None:
    """The step ``event`` with ``data`` would take now, without taking it (``None``: it is
    illegal here). A question a chart answers as it would decide, on either engine: the
    guards are the chart's own, read from its compiled table."""
    if machine.ended:
        return None
    for cand in machine.compiled.table[machine.state].get(event, ()):
        for fn, params, expected in cand.guards:
            kw = {p: data[p] for p in params if p in data}
            if bool(fn(machine, **kw)) is not expected:
                break
        else:
            return _step(cand, machine, event, data)
    return None


def answer(machine: ChartMachine, event: str, **data: Any) -> frozenset[str] | None:
    """The names of the effects of the chart's answer to the question ``event`` (asked
    without firing, :func:`peek`); ``None`` when the question is illegal here (the chart
    has ended, or no row takes it)."""
    step = peek(machine, event, **data)
    return None if step is None else frozenset(e.name for e in step.effects)


def says(machine: ChartMachine, event: str, effect: str, **data: Any) -> bool:
    """Whether the chart's answer to the question ``event`` includes ``effect``."""
    names = answer(machine, event, **data)
    return names is not None and effect in names


def _initial(machine: ChartMachine) -> tuple[Effect, ...]:
    return _fill(machine.compiled.initial_plans, {}, machine)


def _report(machine: ChartMachine, step: Step, observed: bool) -> None:
    everyone = _observers if observed else ()
    if machine.observers or everyone:
        # built as the tuple it is (no keyword handling: one is made per fired transition)
        record = tuple.__new__(
            TransitionRecord, (step.chart, step.source, step.event, step.target, machine.tags)
        )
        for observer in machine.observers:
            observer(record)
        for observer in tuple(everyone):
            observer(record)


class Machine:
    """A chart running on the compiled engine (a per-chart subclass adds the constants as
    slots; see :meth:`Chart.start`)."""

    __slots__ = ("_leaf", "_observed", "_table", "observers", "tags")

    compiled: ClassVar[CompiledChart]
    _tables: ClassVar[dict[str, dict[str, tuple[Candidate, ...]]]]
    """``compiled.table``, one attribute lookup closer (read on every fire)."""
    _final: ClassVar[frozenset[str]]
    _constant_names: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        *,
        tags: Mapping[str, Any] | None = None,
        observers: tuple[TransitionObserver, ...] = (),
        observed: bool = True,
        **constants: Any,
    ) -> None:
        compiled = self.compiled
        for name, default in compiled.constants.items():
            setattr(self, name, constants.pop(name, default))
        if constants:
            raise TypeError(f"{compiled.name}: unknown constants {sorted(constants)}")
        self._leaf = compiled.initial
        self._table = compiled.table[compiled.initial]
        self.tags: Mapping[str, Any] = tags if tags is not None else {}
        self.observers = observers
        self._observed = observed

    @property
    def chart_name(self) -> str:
        return self.compiled.name

    @property
    def state(self) -> str:
        return self._leaf

    def snapshot(self) -> str:
        """The machine's whole mutable state: its leaf (see the module docstring)."""
        return self._leaf

    def restore(self, snapshot: str) -> None:
        """Put the machine back into ``snapshot`` (a leaf of its chart, as
        :meth:`snapshot` returned it); raises ChartError for anything else."""
        table = self.compiled.table.get(snapshot)
        if table is None:
            raise ChartError(f"{self.compiled.name}: {snapshot!r} is not a leaf of the chart")
        self._leaf = snapshot
        self._table = table

    @property
    def configuration(self) -> tuple[str, ...]:
        return self.compiled.ancestors[self._leaf]

    @property
    def ended(self) -> bool:
        return self._leaf in self._final

    def is_in(self, *state_ids: str) -> bool:
        active = self.compiled.ancestors[self._leaf]
        return any(s in active for s in state_ids)

    def constant(self, name: str) -> Any:
        return getattr(self, name)

    def initial_effects(self) -> tuple[Effect, ...]:
        """The entry effects of the initial configuration (a start emits no step)."""
        return _initial(self)

    def fire(self, event: str, **data: Any) -> Step:
        candidates = self._table.get(event)
        if candidates is not None:
            for cand in candidates:
                for fn, params, expected in cand.guards:
                    if params:
                        kw: dict[str, Any] = {}  # the data it names (no comprehension frame)
                        for p in params:
                            if p in data:
                                kw[p] = data[p]
                        if bool(fn(self, **kw)) is not expected:
                            break
                    elif bool(fn(self)) is not expected:
                        break
                else:
                    step = cand.step
                    if step is None:
                        step = _step(cand, self, event, data)
                    self._leaf = cand.state
                    self._table = self._tables[cand.state]
                    if self.observers or (_observers and self._observed):
                        _report(self, step, self._observed)
                    return step
        raise IllegalTransition(
            self.compiled.name,
            () if self.ended else tuple(reversed(self.configuration)),
            event,
            execution_id=self.tags.get("execution_id"),
        )

    def __repr__(self) -> str:
        return f"<{self.compiled.name} {self.compiled.path(self._leaf)}>"


def machine_class(compiled: CompiledChart) -> type[Machine]:
    """The compiled engine's class for one chart: :class:`Machine` with the constants as
    slots (guards read them as ``self.<name>``)."""
    names = tuple(compiled.constants)
    return cast(
        "type[Machine]",
        type(
            f"{compiled.declaration.qualname.rpartition('.')[2]}Machine",
            (Machine,),
            {
                "__slots__": names,
                "compiled": compiled,
                "_tables": compiled.table,
                "_final": compiled.final,
                "_constant_names": names,
            },
        ),
    )


class _Taken:
    """python-statemachine listener: builds the step of the transition its engine selected,
    before the engine exits or enters anything (so an effect that cannot be built raises
    with the configuration unchanged, as on the compiled engine)."""

    __slots__ = ("build", "step")

    def __init__(self, build: Callable[[Any], Step]) -> None:
        self.build = build
        self.step: Step | None = None

    def before_transition(self, transition: Any) -> None:
        self.step = self.build(transition)

    def pop(self) -> Step | None:
        """The step built since the last pop, if any."""
        step, self.step = self.step, None
        return step


class ReferenceMachine:
    """A chart running on python-statemachine's sync engine (the reference): the declaration
    class itself is instantiated, with the constants as attributes."""

    def __init__(
        self,
        compiled: CompiledChart,
        *,
        tags: Mapping[str, Any] | None = None,
        observers: tuple[TransitionObserver, ...] = (),
        observed: bool = True,
        **constants: Any,
    ) -> None:
        self.compiled = compiled
        self.tags: Mapping[str, Any] = tags if tags is not None else {}
        self.observers = observers
        self._observed = observed
        values = dict(compiled.constants)
        unknown = set(constants) - set(values)
        if unknown:
            raise TypeError(f"{compiled.name}: unknown constants {sorted(unknown)}")
        values.update(constants)
        self._constants = values
        self._taken = _Taken(self._build)
        self._pending: tuple[str, str, Mapping[str, Any]] = ("", "", {})
        self.sm: Chart = compiled.cls(constants=values, listeners=[self._taken])

    @property
    def chart_name(self) -> str:
        return self.compiled.name

    @property
    def state(self) -> str:
        values = [str(v) for v in self.sm.configuration_values]
        leaves = [v for v in values if v in self.compiled.table]
        return leaves[-1] if leaves else self.compiled.initial

    @property
    def configuration(self) -> tuple[str, ...]:
        return self.compiled.ancestors[self.state]

    @property
    def ended(self) -> bool:
        return bool(self.sm.is_terminated)

    def is_in(self, *state_ids: str) -> bool:
        active = self.configuration
        return any(s in active for s in state_ids)

    def constant(self, name: str) -> Any:
        return self._constants[name]

    def initial_effects(self) -> tuple[Effect, ...]:
        return _initial(self)

    def __getattr__(self, name: str) -> Any:
        constants = self.__dict__.get("_constants", {})
        if name in constants:
            return constants[name]
        raise AttributeError(name)

    def _build(self, transition: Any) -> Step:
        leaf, event, data = self._pending
        index = self.compiled.index[(id(transition), event)]
        cand = next(c for c in self.compiled.table[leaf][event] if c.index == index)
        return _step(cand, self, event, data)

    def fire(self, event: str, **data: Any) -> Step:
        from statemachine.exceptions import TransitionNotAllowed

        leaf = self.state
        ended = self.ended
        self._taken.pop()
        self._pending = (leaf, event, data)
        try:
            self.sm.send(event, **data)
        except TransitionNotAllowed:
            raise IllegalTransition(
                self.compiled.name,
                () if ended else tuple(reversed(self.compiled.ancestors[leaf])),
                event,
                execution_id=self.tags.get("execution_id"),
            ) from None
        finally:
            self._pending = ("", "", {})
        step = self._taken.pop()
        if step is None:  # pragma: no cover - python-statemachine took nothing, silently
            raise IllegalTransition(self.compiled.name, (leaf,), event)
        _report(self, step, self._observed)
        return step

    def __repr__(self) -> str:
        return f"<{self.compiled.name} {self.compiled.path(self.state)} (reference)>"
