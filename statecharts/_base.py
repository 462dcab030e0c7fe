"""The common base of every acpfsm chart.

Theory of operation
-------------------
Every chart is a python-statemachine ``StateChart`` that runs on the **sync engine** only
(acp-and-agents.md §1.6): no ``async def`` callback, guard or listener, no delayed events and
no invoked services. The runtime owns I/O and time and feeds results in as events.

Two engine defaults are flipped on purpose (acp-and-agents.md §1.1):

* ``allow_event_without_transition = False``: an event the current state does not accept raises
  :class:`IllegalTransition` naming the chart, its states and the event. Events that the
  lifecycle *ignores* on purpose (a late completion for a superseded generation, a duplicate
  terminal event) are declared as explicit self-transitions, so the ignoring is visible in the
  diagrams and in the trace.
* ``catch_errors_as_events = False``: an exception in a callback propagates instead of becoming a
  silent ``error.execution`` event.

Observation: every instance reports each fired transition to its own ``observers`` (the runtime's
trace of one execution) and to the process-wide observers registered with
:func:`add_transition_observer` (the test suite's transition-coverage recorder). Observers are
plain callables; they must not block.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

from statemachine import State, StateChart
from statemachine.exceptions import TransitionNotAllowed

__all__ = [
    "Chart",
    "IllegalTransition",
    "TransitionObserver",
    "TransitionRecord",
    "add_transition_observer",
    "declared_transitions",
    "remove_transition_observer",
]


class TransitionRecord(NamedTuple):
    """One fired transition. ``tags`` is the chart instance's identifying data (execution id,
    generation …) as given to its constructor."""

    chart: str
    source: str
    event: str
    target: str
    tags: dict[str, Any]


TransitionObserver = Callable[[TransitionRecord], None]
_observers: list[TransitionObserver] = []


def add_transition_observer(observer: TransitionObserver) -> None:
    _observers.append(observer)


def remove_transition_observer(observer: TransitionObserver) -> None:
    if observer in _observers:
        _observers.remove(observer)


class IllegalTransition(TransitionNotAllowed):
    """An event the chart does not accept in its current state."""

    chart: str
    states: tuple[str, ...]
    event_name: str

    def __init__(self, chart: str, states: tuple[str, ...], event_name: str) -> None:
        Exception.__init__(
            self,
            f"{chart}: event {event_name!r} is not allowed in state {', '.join(states)}",
        )
        self.chart = chart
        self.states = states
        self.event_name = event_name
        self.event = None
        self.configuration = set()


class Chart(StateChart[Any]):
    """Base of the five lifecycle charts (sync engine, loud on illegal events)."""

    allow_event_without_transition = False
    catch_errors_as_events = False

    chart_name: ClassVar[str] = "chart"

    def __init__(
        self,
        *,
        tags: dict[str, Any] | None = None,
        observers: tuple[TransitionObserver, ...] = (),
        **kwargs: Any,
    ) -> None:
        self.tags: dict[str, Any] = dict(tags or {})
        self.observers = observers
        self.history: list[TransitionRecord] = []
        super().__init__(**kwargs)
        self._observe_microsteps()

    def _observe_microsteps(self) -> None:
        """Report each fired transition once its microstep is done.

        A listener's ``after_transition`` would do the same, but python-statemachine then
        resolves that callback for every declared transition of every new instance, which
        doubles the cost of creating a chart (one PromptGeneration per prompt). Wrapping the
        sync engine's ``microstep`` (python-statemachine 3.2, pinned) costs nothing at
        creation; the exhaustive transition tests pin the records it produces."""
        engine = self._engine
        step = engine.microstep

        def microstep(transitions: list[Any], trigger_data: Any) -> Any:
            result = step(transitions, trigger_data)
            event = trigger_data.event
            name = str(event.id if event is not None else "")
            for transition in transitions:
                self._report(name, transition.source, transition.target)
            return result

        engine.microstep = microstep

    def _report(self, event: str, source: State, target: State | None) -> None:
        record = TransitionRecord(
            chart=self.chart_name,
            source=source.id,
            event=event,
            target=target.id if target is not None else source.id,
            tags=self.tags,
        )
        self.history.append(record)
        for observer in self.observers:
            observer(record)
        for observer in tuple(_observers):
            observer(record)

    # --- sending -------------------------------------------------------------------------

    def fire(self, event: str, **data: Any) -> None:
        """Send ``event`` with keyword data; raise :class:`IllegalTransition` if not allowed."""
        try:
            self.send(event, **data)
        except IllegalTransition:
            raise
        except TransitionNotAllowed as exc:
            raise IllegalTransition(self.chart_name, self.state_ids, event) from exc

    def accepts(self, event: str) -> bool:
        """Whether ``event`` is declared from the current configuration (guards not evaluated)."""
        return any(e.id == event for e in self.allowed_events)

    # --- inspection ----------------------------------------------------------------------

    @property
    def state_ids(self) -> tuple[str, ...]:
        return tuple(str(v) for v in self.configuration_values)

    @property
    def leaf(self) -> str:
        """The innermost active state id (what a one-word status shows)."""
        values = [str(v) for v in self.configuration_values]
        return values[-1] if values else ""

    def is_in(self, *state_ids: str) -> bool:
        active = set(self.state_ids)
        return any(s in active for s in state_ids)


def declared_transitions(chart: type[Chart]) -> set[tuple[str, str, str]]:
    """Every declared ``(source, event, target)`` of ``chart`` (targetless → source)."""
    out: set[tuple[str, str, str]] = set()
    for state in chart.states_map.values():
        for transition in state.transitions:
            target = transition.target.id if transition.target is not None else state.id
            for event in transition.events:
                out.add((state.id, str(event), target))
    return out
