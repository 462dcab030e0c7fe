"""The common base of every acpfsm chart declaration.

Theory of operation
-------------------
A chart is a python-statemachine ``StateChart`` subclass: states, compound states,
transitions, ``cond=``/``unless=`` guards naming methods, final states. python-statemachine
validates the declaration when the class is defined, and it is the source of the diagrams and
tables. The declaration class is not what runs: :meth:`Chart.start` returns a *machine*
(:mod:`._machine`) on acpfsm's compiled engine, or on python-statemachine's own engine when
``engine="reference"`` (the reference, which must agree with the compiled one).

Rules every chart follows:

* Pure and synchronous: no I/O, no clock, no coroutine callbacks, no delayed or invoked
  states (a test enforces it); the runtime feeds every result in as an event, a past-tense fact.
* Loud: an event the current state does not accept raises
  :class:`~acpfsm.statecharts.errors.IllegalTransition` (python-statemachine's
  ``allow_event_without_transition`` and ``catch_errors_as_events`` are off for the reference
  engine). An event the lifecycle *ignores* on purpose in some state is declared there as a
  targetless transition (``state.to(None)``), so the ignoring is visible in the diagrams and
  the trace; declared on a compound parent it covers all its children at once.
* ``to.itself()`` exits and re-enters (a compound's child is reset to its initial one): use it
  only for that; a targetless transition changes nothing.
* Guards are pure functions of the event's keyword data (by parameter name, with defaults)
  and of the machine's *constants* (``constants = {"name": default}``: data fixed when the
  machine starts, read as ``self.name``).
* What a transition asks the runtime to do is declared as data, ``effects = Effects(...)``
  (:class:`~._compile.Effects`), and returned by ``fire`` in the
  :class:`~._compile.Step`; the runtime performs it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from statemachine import StateChart

from ._compile import CompiledChart, Effects, compile_chart, mutant_from_env
from ._declare import check_current, declaration_of
from ._machine import ChartMachine, EngineName, Machine, TransitionObserver
from ._machine import machine_class as _machine_class
from .charts import declared_transitions, registered, start_machine

__all__ = ["Chart", "declared_transitions"]

_compiled: dict[type[Chart], tuple[CompiledChart, type[Machine]]] = {}


class Chart(StateChart[Any]):
    """Base of the lifecycle chart declarations (see the module docstring)."""

    allow_event_without_transition = False
    catch_errors_as_events = False

    chart_name: ClassVar[str] = "chart"
    constants: ClassVar[dict[str, Any]] = {}
    effects: ClassVar[Effects] = Effects()

    def __init__(
        self, *, constants: dict[str, Any] | None = None, listeners: list[object] | None = None
    ) -> None:
        """The reference engine's instance (use :meth:`start`): ``constants`` become
        attributes before python-statemachine resolves the guards."""
        for name, value in {**type(self).constants, **(constants or {})}.items():
            setattr(self, name, value)
        super().__init__(listeners=listeners)

    @classmethod
    def compiled(cls) -> CompiledChart:
        """The chart's compiled tables (built once; raises ChartDefinitionError)."""
        return cls._compiled_entry()[0]

    @classmethod
    def _compiled_entry(cls) -> tuple[CompiledChart, type[Machine]]:
        entry = _compiled.get(cls)
        if entry is None:
            ref = registered(cls)
            if ref is None:  # a chart a test or an application declares
                compiled = compile_chart(cls, mutant_from_env())
                entry = (compiled, _machine_class(compiled))
            else:  # one table with the runtime's ChartRef, if still the class's own
                declaration, index = declaration_of(cls)
                entry = ref.entry()
                check_current(declaration, entry[0].declaration)
                entry[0].lazy.update(cls=cls, index=index)
            _compiled[cls] = entry
        return entry

    @classmethod
    def start(
        cls,
        *,
        engine: EngineName | None = None,
        tags: dict[str, Any] | None = None,
        observers: tuple[TransitionObserver, ...] = (),
        observed: bool = True,
        **constants: Any,
    ) -> ChartMachine:
        """A new running instance of this chart, in its initial state; ``observed=False``
        keeps its transitions from the process-wide observers (see :mod:`._machine`)."""
        return start_machine(
            cls._compiled_entry(),
            engine=engine,
            tags=tags,
            observers=observers,
            observed=observed,
            **constants,
        )
