"""How the charts of one execution move each other: one declared table, one function.

Theory of operation
-------------------
An execution runs several charts: its :class:`~.execution.Execution` status, its
:class:`~.agent_stream.AgentStream`, the :class:`~.prompt_generation.PromptGeneration` of its
current prompt, its :class:`~.session_init.SessionInit`. Where one chart's move is a fact for
another (a generation ends → the execution's status follows; the execution is stopped → the
live generation and the stream follow), that is declared here as a :class:`Rule`: *when chart
A enters state S, chart B receives event E* (with data fields forwarded from A's event data
and constants). :data:`COORDINATION` is the lifecycle's table; :func:`coordinate` applies it.

:func:`coordinate` takes a fired :class:`~._compile.Step` and returns every step that followed,
depth first in a fixed order: the step itself, then for each rule in table order whose chart
and entered state match, the target chart's step and, recursively, what *it* coordinates,
then the next rule. The runtime performs the effects of the returned steps in that order.
Bounds and loudness:

* a coordinated event the target chart does not accept raises
  :class:`~acpfsm.statecharts.errors.IllegalTransition` (a chart must declare what it ignores,
  as a targetless transition);
* a target chart that has ended (a top-level final state: the execution was stopped) is no
  longer part of the execution and receives nothing;
* a chain longer than ``limit`` raises :class:`~acpfsm.statecharts.errors.CoordinationError`.

This is the model of h11's ``STATE_TRIGGERED_TRANSITIONS``: a table of state-triggered moves
between the parts of one connection, applied after every event.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from ._compile import Step
from ._machine import ChartMachine
from .errors import CoordinationError

__all__ = ["COORDINATION", "Fired", "Rule", "coordinate", "fire", "rules_from"]


class Rule(msgspec.Struct, frozen=True):
    """When ``chart`` enters ``enters``, ``target`` receives ``event`` with the ``forward``
    fields (taken from the entering step's event data, else the entering chart's constants;
    absent fields are not forwarded)."""

    chart: str
    enters: str
    target: str
    event: str
    forward: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.chart} enters {self.enters} → {self.target}.{self.event}"


#: The lifecycle's coordination table, in the order it is applied.
COORDINATION: tuple[Rule, ...] = (
    # the session's init decides the execution's boot (kandev InitializeAndPrompt,
    # MarkBootReady, UpdateError)
    Rule("session_init", "booted", "execution", "booted", ("resume_context_pending",)),
    Rule("session_init", "failed", "execution", "init_failed", ("error",)),
    # a prompt generation's outcome moves the execution's status (kandev manager_events.go
    # handleCompleteEventMarkState, handleStreamDisconnect; manager_interaction.go
    # escalateStuckCancel)
    Rule(
        "prompt_generation",
        "completed",
        "execution",
        "turn_completed",
        ("generation", "stop_reason"),
    ),
    Rule(
        "prompt_generation",
        "failed",
        "execution",
        "turn_failed",
        ("generation", "error", "shutting_down"),
    ),
    Rule("prompt_generation", "cancel_escalated", "execution", "cancel_escalated", ("generation",)),
    # a turn that went to the agent keeps the execution RUNNING: dispatched, or abandoned or
    # escalated while its request was in flight (READY may have been entered meanwhile)
    Rule("prompt_generation", "dispatched", "execution", "turn_dispatched"),
    Rule("prompt_generation", "abandoned", "execution", "turn_dispatched"),
    Rule("prompt_generation", "escalating", "execution", "turn_dispatched"),
    Rule("prompt_generation", "undelivered", "execution", "turn_undelivered", ("generation",)),
    Rule("prompt_generation", "withdrawn", "execution", "turn_undelivered", ("generation",)),
    Rule("prompt_generation", "disconnected", "execution", "stream_lost", ("generation", "error")),
    # a stop closes the stream and ends the live turn (kandev StopAgentWithReason)
    Rule("execution", "stopped", "prompt_generation", "execution_stopped", ("error",)),
    Rule("execution", "stopped", "agent_stream", "close_requested"),
    # … and the session init is abandoned (its admission opens: nobody waits for it forever)
    Rule("execution", "stopped", "session_init", "init_abandoned"),
    # what recovery needs changed: the stored row follows (kandev lifecycle/persistence.go
    # persistExecutorRunning, deleteExecutorRunning); only with a store (durable_record.py)
    Rule("execution", "starting", "durable_record", "launch_accepted"),
    Rule("session_init", "handshaking", "durable_record", "agent_reachable"),
    Rule("session_init", "booted", "durable_record", "session_established"),
    Rule("session_init", "prompting", "durable_record", "session_established"),
    Rule("execution", "ready", "durable_record", "status_changed"),
    Rule("execution", "running", "durable_record", "status_changed"),
    Rule("execution", "failed", "durable_record", "status_changed"),
    Rule("execution", "completed", "durable_record", "status_changed"),
    Rule("execution", "stopped", "durable_record", "execution_stopped"),
    Rule("prompt_generation", "sending", "durable_record", "turn_sending", ("generation",)),
)

Machines = Mapping[str, ChartMachine] | Callable[[str], ChartMachine | None]


@functools.lru_cache(maxsize=16)
def rules_from(table: tuple[Rule, ...]) -> dict[tuple[str, str], tuple[Rule, ...]]:
    """``(chart, state) → rules``, keeping table order (cached: a table is plain frozen data,
    and a model checker passes the same modified table for every step)."""
    out: dict[tuple[str, str], list[Rule]] = {}
    for rule in table:
        out.setdefault((rule.chart, rule.enters), []).append(rule)
    return {k: tuple(v) for k, v in out.items()}


_DEFAULT = rules_from(COORDINATION)
_RULED: dict[str, frozenset[str]] = {
    chart: frozenset(state for c, state in _DEFAULT if c == chart) for chart, _ in _DEFAULT
}
"""The states of each chart the default table has rules for (a step entering none of them
coordinates nothing: most do)."""
_NONE: frozenset[str] = frozenset()


Fired = tuple[ChartMachine, Step]
"""A step and the machine that took it."""


def fire(
    machines: Machines,
    machine: ChartMachine,
    event: str,
    data: Mapping[str, Any],
    *,
    table: tuple[Rule, ...] | None = None,
    limit: int = 8,
) -> list[Fired]:
    """Fire ``event`` with ``data`` on ``machine``, then :func:`coordinate` what follows."""
    step = machine.fire(event, **data)
    if table is None and _RULED.get(step.chart, _NONE).isdisjoint(step.entered):
        return [(machine, step)]  # what coordinate() gives for it, with no lookup made
    return coordinate(machines, machine, step, data, table=table, limit=limit)


def coordinate(
    machines: Machines,
    source: ChartMachine,
    step: Step,
    data: Mapping[str, Any],
    *,
    table: tuple[Rule, ...] | None = None,
    limit: int = 8,
) -> list[Fired]:
    """``step`` (which ``source`` took when fired with ``data``) and every step it
    coordinates, in order, each with its machine (see the module docstring). ``machines``
    gives the execution's current machine of each chart, by chart name."""
    rules = _DEFAULT if table is None else rules_from(table)
    lookup: Callable[[str], ChartMachine | None] = (
        machines.get if type(machines) is dict or isinstance(machines, Mapping) else machines
    )
    out: list[Fired] = []
    _apply(lookup, rules, step, data, source, out, 0, limit)
    return out


def _apply(
    lookup: Callable[[str], ChartMachine | None],
    rules: dict[tuple[str, str], tuple[Rule, ...]],
    step: Step,
    data: Mapping[str, Any],
    source: ChartMachine,
    out: list[Fired],
    depth: int,
    limit: int,
) -> None:
    out.append((source, step))
    if not step.entered:
        return
    for state in step.entered:
        for rule in rules.get((step.chart, state), ()):
            if depth >= limit:
                raise CoordinationError(
                    f"coordination deeper than {limit} steps at {rule} (a cycle in the table?)"
                )
            target = lookup(rule.target)
            if target is None or target.ended:
                continue
            forwarded: dict[str, Any] = {}
            for name in rule.forward:
                if name in data:
                    forwarded[name] = data[name]
                elif name in source.compiled.constants:
                    forwarded[name] = source.constant(name)
            followed = target.fire(rule.event, **forwarded)
            _apply(lookup, rules, followed, forwarded, target, out, depth + 1, limit)
