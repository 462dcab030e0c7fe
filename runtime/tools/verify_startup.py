"""``acpfsm verify``'s model of startup recovery: one stored execution over several
attempts, each with its own startup generation, and the signals of older attempts arriving
late.

Theory of operation
-------------------
The runtime's startup recovery (runtime/recovery.py ``StartupRecovery.attempt``) starts one
:class:`~acpfsm.statecharts.StartupRecovery` machine per attempt, with the stored startup
generation plus one, and feeds back every fact its work produces stamped with the
generation of the attempt that produced it; the newest attempt's machine takes them all. A
fact of an older attempt is stale: the chart must ignore it (kandev's
``acceptsStartupAttempt``, R9).

A state here is the current attempt's number and leaf, and the work under way of every
attempt (its generation and the effect that started it: ``probe_agent``,
``end_orphan``, ``reattach_agent``, ``relaunch_agent``). The actions: a new attempt (the
app starts again at any point: ``recovery_started`` with the row's facts, the agent ended
before, a turn in flight, neither; or, from ``lost``, ``relaunch_requested``), up to
:attr:`~.verify.Bounds.startup_attempts`; and any work under way answering (each of its
facts), stamped with its own attempt's generation, whether that attempt is still the
current one or not. Older attempts' work stays under way when a new one starts (the app
died with it in flight), so its facts may come late.

:func:`explore` explores every state breadth first within the depth bound and checks that
a fact stamped with an older generation changes nothing (no transition, no effect): the
property ``an_older_startup_signal_changes_nothing``. Its counterexample is a shortest one,
replayed into trace records (each attempt an instance of its own, as the runtime traces
it).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from acpfsm.runtime.trace import TraceRecord
from acpfsm.statecharts import ChartError, Machine
from acpfsm.statecharts.names import StartupRecoveryEvent as Ev

from .verify_world import EXECUTION_ID, model_machine

__all__ = ["PROPERTY", "StartupResult", "explore"]

PROPERTY = "an_older_startup_signal_changes_nothing"

#: the facts each piece of work can produce
_WORK: dict[str, tuple[str, ...]] = {
    "probe_agent": (Ev.agent_alive, Ev.agent_gone, Ev.orphan_found),
    "end_orphan": (Ev.orphan_ended,),
    "reattach_agent": (Ev.reattached, Ev.reattach_failed),
    "relaunch_agent": (Ev.relaunched, Ev.relaunch_failed),
}
#: the row's facts a start-up reads: (agent_ended, turn_in_flight)
_ROWS = ((True, False), (False, True), (False, False))

State = tuple[int, str, tuple[tuple[int, str], ...]]
Label = tuple[Any, ...]


@dataclass(slots=True)
class StartupResult:
    states: int = 0
    covered: set[tuple[str, str, str, str]] = field(default_factory=set)
    violations: int = 0
    message: str = ""
    steps: list[str] = field(default_factory=list)
    trace: list[TraceRecord] = field(default_factory=list)
    truncated: bool = False


class _Model:
    def __init__(self, chart: Any) -> None:
        self.chart = chart
        self._machines: dict[int, Machine] = {}

    def machine(self, generation: int) -> Machine:
        m = self._machines.get(generation)
        if m is None:
            m = model_machine(self.chart, startup_generation=generation)
            self._machines[generation] = m
        return m

    def actions(self, state: State, attempts: int) -> Iterator[Label]:
        current, leaf, work = state
        if current < attempts:
            for agent_ended, in_flight in _ROWS:
                yield ("start", agent_ended, in_flight)
            if leaf == "lost":
                yield ("relaunch",)
        for generation, name in work:
            for fact in _WORK[name]:
                yield ("fact", generation, name, fact)

    def apply(self, state: State, label: Label) -> tuple[State, Any, int, str]:
        """``(state after, the step, the machine's generation, what is wrong or "")``."""
        current, leaf, work = state
        pending = list(work)
        if label[0] in ("start", "relaunch"):
            current += 1
            m = self.machine(current)
            m.restore(m.compiled.initial)
            if label[0] == "start":
                step = m.fire(
                    Ev.recovery_started,
                    startup_generation=current,
                    agent_ended=label[1],
                    turn_in_flight=label[2],
                    generation=1,
                )
            else:
                step = m.fire(Ev.relaunch_requested, startup_generation=current)
            wrong = ""
        else:
            _, generation, name, fact = label
            pending.remove((generation, name))
            m = self.machine(current)
            m.restore(leaf)
            step = m.fire(fact, startup_generation=generation)
            wrong = ""
            if generation != current and (step.source != step.target or step.effects):
                wrong = (
                    f"{fact} of attempt {generation} (generation {generation}) moved attempt "
                    f"{current}: {step.source} --{step.event}--> {step.target}"
                    + (f" ({', '.join(e.name for e in step.effects)})" if step.effects else "")
                )
        pending += [(current, e.name) for e in step.effects if e.name in _WORK]
        return (current, m.snapshot(), tuple(sorted(pending))), step, current, wrong


def explore(chart: Any, attempts: int, depth: int | None) -> StartupResult:
    """Every state of the stored execution's recovery within ``attempts`` and ``depth``."""
    model = _Model(chart)
    result = StartupResult()
    start: State = (0, "", ())
    parent: dict[State, tuple[State, Label] | None] = {start: None}
    depths = {start: 0}
    queue: deque[State] = deque([start])
    found: tuple[State, Label] | None = None
    while queue:
        state = queue.popleft()
        if depth is not None and depths[state] >= depth:
            result.truncated = True
            continue
        for label in model.actions(state, attempts):
            try:
                after, step, _, wrong = model.apply(state, label)
            except ChartError:  # a fact its own attempt no longer expects (a broken copy):
                continue  # the runtime raises it at once; this property is about stale ones
            result.covered.add((step.chart, step.source, step.event, step.target))
            if wrong:
                result.violations += 1
                if found is None:
                    found, result.message = (state, label), wrong
            if after not in parent:
                parent[after] = (state, label)
                depths[after] = depths[state] + 1
                queue.append(after)
    result.states = len(parent)
    if found is not None:
        path = [found[1]]
        state = found[0]
        while (back := parent[state]) is not None:
            state, label = back
            path.append(label)
        path.reverse()
        result.steps, result.trace = _replay(model, path)
    return result


def _replay(model: _Model, path: list[Label]) -> tuple[list[str], list[TraceRecord]]:
    steps = ["start (a stored execution, at the app's start)"]
    records: list[TraceRecord] = []
    state: State = (0, "", ())
    for number, label in enumerate(path, 1):
        state, step, instance, wrong = model.apply(state, label)
        records.append(
            TraceRecord(
                seq=len(records) + 1,
                time=float(number),
                execution_id=EXECUTION_ID,
                chart=step.chart,
                generation=0,
                instance=instance,
                event=step.event,
                source=step.source,
                target=step.target,
            )
        )
        if label[0] == "start":
            text = (
                f"attempt {state[0]}: recovery_started (agent ended {label[1]}, "
                f"turn in flight {label[2]})"
            )
        elif label[0] == "relaunch":
            text = f"attempt {state[0]}: relaunch_requested"
        else:
            text = f"{label[2]} of attempt {label[1]} answers {label[3]}"
        steps.append(text + (f"  <- {wrong}" if wrong else ""))
    return steps, records
