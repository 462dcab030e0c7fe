"""The root of acpfsm's error tree, at the bottom layer so that every layer can raise into it.

::

    AcpfsmError                      (acpfsm.statecharts.errors)
    ├── ChartError                   a chart was used or declared wrongly
    │   ├── IllegalTransition        an event the chart does not accept in its state
    │   ├── ChartDefinitionError     a declaration the compiled engine does not support
    │   └── CoordinationError        the coordination between charts went wrong
    ├── (adapters: TransportError, ProtocolError, AgentRequestError … acpfsm.adapters.errors)
    ├── (runtime: ExecutionNotFound, PromptError … acpfsm.runtime.errors; HistoryError,
    │    SubscriberOverflow in acpfsm.runtime.history and .hub)
    └── (tools: DiagramError, TraceFormatError, ConformUsageError, AgentGone in
         acpfsm.tools)

The adapters and the runtime re-export :class:`AcpfsmError`; ``except AcpfsmError`` catches
everything acpfsm raises on purpose (tests/test_errors.py lists the few exception classes
that are not errors of ours: control flow inside a module, the reference agent's own).
"""

from __future__ import annotations

__all__ = [
    "AcpfsmError",
    "ChartDefinitionError",
    "ChartError",
    "CoordinationError",
    "IllegalTransition",
]


class AcpfsmError(Exception):
    """Root of every error acpfsm raises."""

    execution_id: str | None

    def __init__(self, message: str, *, execution_id: str | None = None) -> None:
        super().__init__(message)
        self.execution_id = execution_id

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class ChartError(AcpfsmError):
    """A chart was declared or driven wrongly: a bug, never a fact of the agent's."""


class IllegalTransition(ChartError):
    """An event the chart does not accept in its current state (or after it ended)."""

    chart: str
    states: tuple[str, ...]
    event_name: str

    def __init__(
        self,
        chart: str,
        states: tuple[str, ...],
        event_name: str,
        *,
        execution_id: str | None = None,
    ) -> None:
        where = ", ".join(states) if states else "(ended)"
        super().__init__(
            f"{chart}: event {event_name!r} is not allowed in state {where}",
            execution_id=execution_id,
        )
        self.chart = chart
        self.states = states
        self.event_name = event_name


class ChartDefinitionError(ChartError):
    """A chart declaration uses something the compiled engine does not support, or an effect
    declaration names a transition or state the chart does not have. Raised when the chart is
    compiled, on its first ``start`` or ``compiled()``."""


class CoordinationError(ChartError):
    """The coordination table sent an event a chart does not accept, or recursed too deep."""
