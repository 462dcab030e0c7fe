"""The charts as the runtime runs them: from their declarations generated ahead of time.

``import acpfsm.runtime`` must not pay for python-statemachine (and the asyncio it imports)
nor for walking nine declaration classes: the runtime names each chart by a :class:`ChartRef`
here, whose tables are compiled on first use from the chart's declaration as plain data,
generated into ``_generated.py`` by ``acpfsm chart-tables`` (``make diagrams``). A ChartRef
offers what the runtime asks of a chart class (``chart_name``, ``compiled()``, ``start()``);
``start(engine="reference")`` imports the declaration class and runs python-statemachine's
engine on it, as ``Chart.start`` does. A chart class and its ChartRef share one compiled
table, and using the class checks that the generated declaration is still its own
(:func:`~._compile.check_current`: stale tables are loud, never silently run).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._compile import CompiledChart, compile_declaration, mutant_from_env
from ._generated import DECLARATIONS
from ._machine import (
    ChartMachine,
    EngineName,
    Machine,
    ReferenceMachine,
    TransitionObserver,
    default_engine,
    machine_class,
)

if TYPE_CHECKING:
    from ._base import Chart

__all__ = [
    "AGENT_STREAM",
    "ALL_CHARTS",
    "CONFIG_SETTLEMENT",
    "CRASH",
    "DURABLE_RECORD",
    "EXECUTION",
    "FIRST_ACTIVITY",
    "NAMESPACE_ADOPTION",
    "POOL_MEMBER",
    "PROMPT_GENERATION",
    "SESSION_CHARTS",
    "SESSION_INIT",
    "STARTUP_RECOVERY",
    "START_MODEL_POLICY",
    "ChartRef",
    "declared_transitions",
    "registered",
    "start_machine",
]

_entries: dict[str, tuple[CompiledChart, type[Machine]]] = {}


def start_machine(
    entry: tuple[CompiledChart, type[Machine]],
    *,
    engine: EngineName | None = None,
    tags: dict[str, Any] | None = None,
    observers: tuple[TransitionObserver, ...] = (),
    observed: bool = True,
    **constants: Any,
) -> ChartMachine:
    """A new machine of the compiled chart ``entry`` on ``engine`` (see ``Chart.start``)."""
    compiled, machine = entry
    if (engine or default_engine()) == "reference":
        return ReferenceMachine(
            compiled, tags=tags, observers=observers, observed=observed, **constants
        )
    return machine(tags=tags, observers=observers, observed=observed, **constants)


class ChartRef:
    """One chart by name, run from its generated declaration (see the module docstring)."""

    __slots__ = ("chart_name",)

    def __init__(self, chart_name: str) -> None:
        self.chart_name = chart_name

    def entry(self) -> tuple[CompiledChart, type[Machine]]:
        """The compiled tables and the compiled engine's machine class (built once)."""
        entry = _entries.get(self.chart_name)
        if entry is None:
            compiled = compile_declaration(DECLARATIONS[self.chart_name], mutant_from_env())
            entry = _entries[self.chart_name] = (compiled, machine_class(compiled))
        return entry

    def compiled(self) -> CompiledChart:
        """The chart's compiled tables (built once; raises ChartDefinitionError)."""
        return self.entry()[0]

    @property
    def cls(self) -> type[Chart]:
        """The declaration class (imports python-statemachine)."""
        return self.compiled().cls

    def start(
        self,
        *,
        engine: EngineName | None = None,
        tags: dict[str, Any] | None = None,
        observers: tuple[TransitionObserver, ...] = (),
        observed: bool = True,
        **constants: Any,
    ) -> ChartMachine:
        """A new running instance of this chart, in its initial state (``Chart.start``)."""
        return start_machine(
            self.entry(),
            engine=engine,
            tags=tags,
            observers=observers,
            observed=observed,
            **constants,
        )

    def __repr__(self) -> str:
        return f"ChartRef({self.chart_name!r})"


def registered(chart: type[Chart]) -> ChartRef | None:
    """The ChartRef of the class ``chart`` when its declaration was generated (not for a
    chart a test or an application declares)."""
    decl = DECLARATIONS.get(chart.chart_name)
    if decl is None or (decl.module, decl.qualname) != (chart.__module__, chart.__qualname__):
        return None
    return _BY_NAME.get(chart.chart_name)


def declared_transitions(chart: type[Chart] | ChartRef) -> frozenset[tuple[str, str, str]]:
    """Every declared ``(source, event, target)`` of ``chart`` (targetless → source)."""
    return chart.compiled().declared


SESSION_INIT = ChartRef("session_init")
START_MODEL_POLICY = ChartRef("start_model_policy")
CONFIG_SETTLEMENT = ChartRef("config_settlement")
PROMPT_GENERATION = ChartRef("prompt_generation")
EXECUTION = ChartRef("execution")
FIRST_ACTIVITY = ChartRef("first_activity")
AGENT_STREAM = ChartRef("agent_stream")
CRASH = ChartRef("crash")
DURABLE_RECORD = ChartRef("durable_record")
STARTUP_RECOVERY = ChartRef("startup_recovery")
POOL_MEMBER = ChartRef("pool_member")
NAMESPACE_ADOPTION = ChartRef("namespace_adoption")

#: The charts an execution's session runs (a store adds DurableRecord; StartupRecovery runs
#: once per stored execution at a Runtime's start), as :class:`ChartRef`.
SESSION_CHARTS: tuple[ChartRef, ...] = (
    SESSION_INIT,
    START_MODEL_POLICY,
    CONFIG_SETTLEMENT,
    PROMPT_GENERATION,
    EXECUTION,
    FIRST_ACTIVITY,
    AGENT_STREAM,
    CRASH,
)
#: Every chart, in the order diagrams and coverage list them, as :class:`ChartRef` (the last
#: two: a serve process's membership of a pool, and its take-over of one namespace).
ALL_CHARTS: tuple[ChartRef, ...] = (
    *SESSION_CHARTS,
    DURABLE_RECORD,
    STARTUP_RECOVERY,
    POOL_MEMBER,
    NAMESPACE_ADOPTION,
)
_BY_NAME = {ref.chart_name: ref for ref in ALL_CHARTS}
