"""``acpfsm verify``: every interleaving of one execution's life, explored; kandev's races
checked as properties.

Theory of operation
-------------------
The lifecycle of one execution is a finite system once its decisions are declared: the
charts (:mod:`acpfsm.statecharts`), the coordination table that moves one chart when another
enters a state, and the drivers' flow table and decision functions
(:mod:`acpfsm.statecharts.flows`). :mod:`.verify_model` runs exactly those, on the
compiled engine, with every piece of I/O replaced by the environment's possible answers; this
module explores every state the execution can reach from its start, breadth first and
deduplicated, and checks :data:`PROPERTIES` on the way.

*Bounds* (:class:`Bounds`). ``crashes`` adds the execution's own code crashing at any
point (off by default, see :class:`Bounds`). ``generations`` (default 3: supersession and the barrier
interact) bounds how many prompts are admitted; ``depth`` bounds the breadth-first depth
(default :data:`DEFAULT_DEPTH`, deep enough to take every declared transition the model can
reach; ``None`` explores exhaustively). Both carriers (agentctl's redialable WebSocket, a
local process's stdio) are explored. The report lists the state count, the time, and, per
chart, the declared transitions taken and those never reached.

*Properties*, each named after what it protects and citing the race and anomaly ids of the
catalogue in ``diagrams/README.md`` (:mod:`.races`): the safety ones are checked on every
step and every state; the liveness ones ("no caller waits forever", "every generation reaches
an outcome") ask, for every reachable state, whether some path of environment actions
(the agent, the carrier, the answers, the timers and the flows' own steps; no caller acting)
reaches a state where the caller is released. A state the depth bound left unexpanded counts
as releasing (no false alarm from the bound).

*Counterexamples.* The first violation of each property found breadth first is a shortest
one; it is replayed from the initial state into trace records (``execution_id``
``verify``), the JSONL format ``acpfsm check-trace --unfinished`` replays (a counterexample
stops where the property failed, before the execution is stopped) and ``acpfsm diagrams
--trace`` and ``acpfsm report`` draw. The explanation names the actions taken, one per line.
"""

from __future__ import annotations

import time
from array import array
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from acpfsm.runtime.trace import TraceRecord
from acpfsm.statecharts import (
    AgentStream,
    Chart,
    ConfigSettlement,
    Execution,
    FirstActivity,
    PromptGeneration,
    SessionInit,
    StartModelPolicy,
    StartupRecovery,
)
from acpfsm.statecharts.coordination import COORDINATION, Rule
from acpfsm.statecharts.flows import Flow

from . import verify_startup
from .verify_model import (
    CALLER,
    CALLER_ACTIONS,
    EXECUTION_ID,
    LEAF,
    OWED_LEAVES,
    R_NAME,
    R_OWNER,
    S_CRASHED,
    S_EXE,
    S_FLOWS,
    S_GENS,
    Explorer,
    Label,
    Violated,
    World,
)
from .verify_properties import PROPERTIES, Property
from .verify_seeds import seeded_copy, seeded_flows
from .verify_unreached import UNREACHED, reason

__all__ = [
    "DEFAULT_CHARTS",
    "DEFAULT_DEPTH",
    "DEFAULT_GENERATIONS",
    "DESCRIPTION",
    "PROPERTIES",
    "Bounds",
    "Coverage",
    "Property",
    "PropertyResult",
    "VerifyResult",
    "add_arguments",
    "main",
    "render_json",
    "render_text",
    "run",
    "seeded_copy",
    "seeded_flows",
    "verify",
    "write_counterexamples",
]

#: The charts of one execution the model runs, by chart name.
DEFAULT_CHARTS: Mapping[str, type[Chart]] = MappingProxyType(
    {
        c.chart_name: c
        for c in (
            Execution,
            FirstActivity,
            AgentStream,
            SessionInit,
            PromptGeneration,
            StartModelPolicy,
            ConfigSettlement,
            StartupRecovery,
        )
    }
)

#: The default breadth-first depth: every declared transition the model reaches at all is
#: taken within it (at 3 generations, depth 11, 2 generations at depth 12 and 14 take no
#: other; re-measure with ``--depth`` when the charts or the model grow).
DEFAULT_DEPTH = 11

#: The default bound on admitted prompt generations.
DEFAULT_GENERATIONS = 3


@dataclass(frozen=True, slots=True)
class Bounds:
    """How much of the life is explored."""

    generations: int = DEFAULT_GENERATIONS
    depth: int | None = DEFAULT_DEPTH
    carriers: tuple[str, ...] = ("agentctl", "stdio")
    startup_attempts: int = 3
    """How many startup-recovery attempts of one stored execution are explored
    (:mod:`.verify_startup`)."""
    crashes: bool = False
    """Explore the execution's own code crashing at any point (runtime/session/crash.py).
    Every property holds with it at the default bounds (about 150,500 states, about 30 %
    more CPU than without); off by default for that time."""


@dataclass(frozen=True, slots=True)
class Coverage:
    """One chart's declared transitions and those the exploration took."""

    chart: str
    declared: int
    covered: int
    unreached: tuple[tuple[str, str, str], ...]
    """``(source, event, target)`` never taken (targetless: target == source)."""
    reasons: tuple[str, ...] = ()
    """Why each of ``unreached`` is not reached (:mod:`.verify_unreached`; "" when none is
    listed)."""


@dataclass(frozen=True, slots=True)
class PropertyResult:
    name: str
    summary: str
    ids: tuple[str, ...]
    holds: bool
    violations: int = 0
    message: str = ""
    steps: tuple[str, ...] = ()
    """The actions of the counterexample, one per step (the last one violates)."""
    trace: tuple[TraceRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class VerifyResult:
    bounds: Bounds
    states: int
    transitions: int
    depth: int
    seconds: float
    coverage: tuple[Coverage, ...]
    properties: tuple[PropertyResult, ...]
    truncated: bool
    """The depth bound left states unexpanded."""

    @property
    def ok(self) -> bool:
        return all(p.holds for p in self.properties)

    def property(self, name: str) -> PropertyResult:
        return next(p for p in self.properties if p.name == name)

    def unexplained(self) -> list[str]:
        """The unreached transitions no reason is listed for, and the listed reasons whose
        transition was reached (stale): what ``acpfsm verify`` at the default bounds
        refuses (:mod:`.verify_unreached`)."""
        out: list[str] = []
        unreached: set[tuple[str, str, str, str]] = set()
        for c in self.coverage:
            for (source, event, target), why in zip(c.unreached, c.reasons, strict=True):
                unreached.add((c.chart, source, event, target))
                if not why:
                    out.append(f"no reason listed: {c.chart} {source} --{event}--> {target}")
        charts = {c.chart for c in self.coverage}
        for key in UNREACHED:
            if key[0] in charts and key not in unreached:
                out.append("listed as unreached, but reached (or not declared): " + " ".join(key))
        return out


# --------------------------------------------------------------------------- exploration


@dataclass(slots=True)
class _Found:
    count: int = 0
    state: int = -1
    label: Label = ()
    message: str = ""


@dataclass(slots=True)
class _Graph:
    states: list[tuple[Any, ...]] = field(default_factory=list)
    parent: array[int] = field(default_factory=lambda: array("q"))
    via: list[Label] = field(default_factory=list)
    depth: array[int] = field(default_factory=lambda: array("l"))
    waiting: bytearray = field(default_factory=bytearray)
    live: bytearray = field(default_factory=bytearray)
    src: array[int] = field(default_factory=lambda: array("l"))
    dst: array[int] = field(default_factory=lambda: array("l"))
    moves: bytearray = field(default_factory=bytearray)
    expanded: bytearray = field(default_factory=bytearray)


# who waits: a caller of each kind (bit) in a state
_WAITERS = ("prompt", "initial prompt", "steer", "cancel", "stop", "session init")


_WAITER_BITS = {
    (CALLER, "prompt"): 1,
    ("task", "prompt"): 2,
    (CALLER, "steer"): 4,
    (CALLER, "cancel"): 8,
    (CALLER, "stop"): 16,
    ("task", "session_init"): 32,
}


def _waiting(state: tuple[Any, ...]) -> int:
    if len(state) == 1:  # the crash
        return 0
    bits = 0
    for flow in state[S_FLOWS]:
        bits |= _WAITER_BITS.get((flow[R_OWNER], flow[R_NAME]), 0)
    return bits


def verify(
    bounds: Bounds = Bounds(),
    *,
    charts: Mapping[str, type[Chart]] | None = None,
    table: tuple[Rule, ...] | None = None,
    flows: Mapping[str, Flow] | None = None,
) -> VerifyResult:
    """Explore the life of one execution within ``bounds`` and check :data:`PROPERTIES`.
    ``charts`` replaces some of :data:`DEFAULT_CHARTS` (by chart name), ``table`` the
    coordination table, ``flows`` the flow table (modified copies: a seeded bug)."""
    chosen = {**DEFAULT_CHARTS, **(charts or {})}
    coordination = table if table is not None and table != COORDINATION else None
    x = Explorer(chosen, coordination, bounds.generations, flows, crashes=bounds.crashes)
    started = time.perf_counter()
    graph = _Graph()
    index: dict[tuple[Any, ...], int] = {}
    found: dict[str, _Found] = {p.name: _Found() for p in PROPERTIES}
    w = World(x)
    queue: deque[int] = deque()

    def add(state: tuple[Any, ...], parent: int, label: Label, depth: int) -> int:
        n = len(graph.states)
        index[state] = n
        graph.states.append(state)
        graph.parent.append(parent)
        graph.via.append(label)
        graph.depth.append(depth)
        graph.waiting.append(_waiting(state))
        live = 0
        for i, g in enumerate(state[S_GENS] if len(state) > 1 else ()):
            if g[LEAF] in x.live:
                live |= 1 << i
        graph.live.append(live)
        graph.moves.append(0)
        graph.expanded.append(0)
        queue.append(n)
        return n

    crash = add(("crash",), -1, ("crash",), 0)  # where a crashing step leads
    queue.clear()
    graph.expanded[crash] = 1
    for carrier in bounds.carriers:
        state = x.initial(carrier)
        if state not in index:
            add(state, -1, ("start", carrier), 0)

    def _add_successor(n: int, label: Label, after: tuple[Any, ...]) -> int:
        m = index.get(after)
        if m is None:
            m = add(after, n, label, graph.depth[n] + 1)
            _state_checks(x, found, m, after)
        return m

    max_depth = 0
    truncated = False
    while queue:
        n = queue.popleft()
        state = graph.states[n]
        depth = graph.depth[n]
        max_depth = max(max_depth, depth)
        if bounds.depth is not None and depth >= bounds.depth:
            truncated = True
            continue
        graph.expanded[n] = 1
        w.thaw(state)
        labels = x.enabled(w)
        env_moves = False
        for action in labels:
            for label, after, violations, crashed in x.successors(w, state, action):
                for prop, message in violations:
                    _note(found[prop], n, label, message)
                if after is None:
                    # the step raises: reported; whoever waited on it got the exception
                    _note(found["no_illegal_event"], n, label, crashed)
                    graph.src.append(n)
                    graph.dst.append(crash)
                    env_moves = True
                    continue
                m = _add_successor(n, label, after)
                if m != n and label[0] not in CALLER_ACTIONS:
                    graph.src.append(n)
                    graph.dst.append(m)
                    env_moves = True
        graph.moves[n] = 1 if env_moves else 0
    _liveness(x, graph, found)
    startup = None
    if "startup_recovery" in chosen:
        startup = verify_startup.explore(
            chosen["startup_recovery"], bounds.startup_attempts, bounds.depth
        )
        x.covered |= startup.covered
    seconds = time.perf_counter() - started
    results = tuple(
        _startup_result(p, startup)
        if p.name == verify_startup.PROPERTY
        else _result(x, graph, p, found[p.name])
        for p in PROPERTIES
    )
    return VerifyResult(
        bounds=bounds,
        states=len(graph.states) - 1,
        transitions=len(graph.src),
        depth=max_depth,
        seconds=seconds,
        coverage=_coverage(x),
        properties=results,
        truncated=truncated,
    )


def _note(found: _Found, state: int, label: Label, message: str) -> None:
    found.count += 1
    if found.state < 0:
        found.state, found.label, found.message = state, label, message


def _state_checks(x: Explorer, found: dict[str, _Found], n: int, state: tuple[Any, ...]) -> None:
    if state[S_EXE] == "ready":
        for g, record in enumerate(state[S_GENS], 1):
            if record[LEAF] in OWED_LEAVES:
                _note(
                    found["never_ready_under_a_live_turn"],
                    n,
                    (),
                    f"the execution is READY while generation {g} is {x.pg.path(record[LEAF])}",
                )
                return


def _liveness(x: Explorer, graph: _Graph, found: dict[str, _Found]) -> None:
    """The existential liveness checks (see the module docstring), over the environment's
    moves only."""
    count = len(graph.states)
    order = sorted(range(len(graph.dst)), key=graph.dst.__getitem__)
    starts = array("l", [0]) * (count + 1)
    for i in order:
        starts[graph.dst[i] + 1] += 1
    for i in range(count):
        starts[i + 1] += starts[i]
    preds = array("l", (graph.src[i] for i in order))

    def stuck(values: bytearray, mask: int) -> list[int]:
        """The states with ``mask`` set in ``values`` from which no environment path reaches
        one without it (a state the depth bound left unexpanded counts as reaching it)."""
        if not any(v & mask for v in values):
            return []
        seen = bytearray(count)
        todo = [n for n in range(count) if not values[n] & mask or not graph.expanded[n]]
        for n in todo:
            seen[n] = 1
        while todo:
            n = todo.pop()
            for i in range(starts[n], starts[n + 1]):
                p = preds[i]
                if not seen[p]:
                    seen[p] = 1
                    todo.append(p)
        return [n for n in range(count) if values[n] & mask and not seen[n]]

    def report(name: str, states: list[int], message: Callable[[tuple[Any, ...]], str]) -> None:
        """Count ``states`` against property ``name``; the shallowest is its example,
        ``message`` says what is wrong in it."""
        n = min(states, key=graph.depth.__getitem__)
        f = found[name]
        f.count += len(states)
        if f.state < 0 or graph.depth[n] < graph.depth[f.state]:
            text = f"{message(graph.states[n])} ({len(states)} such states)"
            f.state, f.label, f.message = n, (), text

    for bit, who in enumerate(_WAITERS):
        waits = stuck(graph.waiting, 1 << bit)
        if waits and who == "session init":
            report("the_init_comes_to_rest", waits, lambda _: "the session init never rests")
            continue
        crashed = [n for n in waits if graph.states[n][S_CRASHED]]
        if crashed:
            report("a_crash_releases_every_caller", crashed, _waits_forever(who, " after a crash"))
        alive = [n for n in waits if not graph.states[n][S_CRASHED]]
        if alive:
            report("no_caller_waits_forever", alive, _waits_forever(who))
    for g in range(x.generations):
        lives = stuck(graph.live, 1 << g)
        if lives:
            report("one_outcome_per_generation", lives, _never_ends(x, g))
    # final execution states: STOPPED and nothing left to happen
    final = [
        n
        for n in range(count)
        if graph.expanded[n]
        and not graph.moves[n]
        and len(graph.states[n]) > 1
        and graph.states[n][S_EXE] in x.exe.compiled.final
        and graph.live[n]
    ]
    if final:
        report("stopped_leaves_no_live_generation", final, _stopped_live(x))


def _waits_forever(who: str, after: str = "") -> Callable[[tuple[Any, ...]], str]:
    return lambda state: f"the {who} caller waits forever{after}: no environment path releases it"


def _never_ends(x: Explorer, g: int) -> Callable[[tuple[Any, ...]], str]:
    def message(state: tuple[Any, ...]) -> str:
        leaf = x.pg.path(state[S_GENS][g][LEAF])
        return f"generation {g + 1} stays {leaf} forever: no environment path ends it"

    return message


def _stopped_live(x: Explorer) -> Callable[[tuple[Any, ...]], str]:
    def message(state: tuple[Any, ...]) -> str:
        live = ", ".join(
            f"generation {i} {x.pg.path(r[LEAF])}"
            for i, r in enumerate(state[S_GENS], 1)
            if r[LEAF] in x.live
        )
        return f"the execution is STOPPED, nothing is left to happen, and {live} is live"

    return message


def _coverage(x: Explorer) -> tuple[Coverage, ...]:
    out: list[Coverage] = []
    for name, chart in x.charts.items():
        compiled = chart.compiled()
        taken = {(s, e, t) for c, s, e, t in x.covered if c == name}
        declared = compiled.declared
        unreached = tuple(sorted(declared - taken))
        reasons = tuple(reason(name, t) for t in unreached)
        out.append(Coverage(name, len(declared), len(declared & taken), unreached, reasons))
    return tuple(out)


def _startup_result(prop: Property, startup: verify_startup.StartupResult | None) -> PropertyResult:
    if startup is None or not startup.violations:
        return PropertyResult(prop.name, prop.summary, prop.ids, True)
    return PropertyResult(
        prop.name,
        prop.summary,
        prop.ids,
        False,
        violations=startup.violations,
        message=startup.message,
        steps=tuple(startup.steps),
        trace=tuple(startup.trace),
    )


def _path(graph: _Graph, n: int) -> list[tuple[int, Label]]:
    """The actions from an initial state to state ``n``: ``(state before, label)``."""
    out: list[tuple[int, Label]] = []
    while graph.parent[n] >= 0:
        out.append((graph.parent[n], graph.via[n]))
        n = graph.parent[n]
    out.append((-1, graph.via[n]))  # the initial state's label: ("start", carrier)
    out.reverse()
    return out


def _result(x: Explorer, graph: _Graph, prop: Property, found: _Found) -> PropertyResult:
    if found.state < 0:
        return PropertyResult(prop.name, prop.summary, prop.ids, True)
    path = _path(graph, found.state)
    if found.label:
        path.append((found.state, found.label))
    steps, trace = _replay(x, path)
    return PropertyResult(
        prop.name,
        prop.summary,
        prop.ids,
        False,
        violations=found.count,
        message=found.message,
        steps=tuple(steps),
        trace=tuple(trace),
    )


def _replay(x: Explorer, path: Sequence[tuple[int, Label]]) -> tuple[list[str], list[TraceRecord]]:
    """Re-run a path from its initial state, recording every fired transition."""
    w = World(x, replaying=True)
    carrier = path[0][1][1]
    state = x.initial(carrier)
    steps = [f"start ({carrier} carrier)"]
    records: list[TraceRecord] = []
    for number, (_, label) in enumerate(path[1:], 1):
        w.thaw(state)
        crashed = ""
        try:
            x.apply(w, label)
        except Violated as exc:
            crashed = f"  <- {exc.message}"
        for machine, step in w.fired:
            records.append(
                TraceRecord(
                    seq=len(records) + 1,
                    time=float(number),
                    execution_id=EXECUTION_ID,
                    chart=step.chart,
                    generation=int(machine.tags.get("generation", 0)),
                    instance=0,
                    event=step.event,
                    source=step.source,
                    target=step.target,
                )
            )
        steps.append(_describe(label, state) + crashed)
        if crashed:
            break
        state = w.freeze()
    return steps, records


def _describe(label: Label, state: tuple[Any, ...]) -> str:
    """``complete 2 error (runtime closing)`` for ``("complete", 2, "error", True)``; a flow
    step names the flow and the step it was at (``cancel.await_dispatch: timed out``)."""
    choices: tuple[Any, ...] = ()
    if "+" in label:
        at = label.index("+")
        label, choices = label[:at], label[at + 1 :]
    if label[0] in _FLOW_ACTIONS:
        run = state[S_FLOWS][label[1]]
        where = f"{run[R_NAME]}.{run[2]}"
        if label[0] == "wait":
            text = f"{where}: {'happened' if label[2] else 'timed out'}"
        elif label[0] == "answer":
            text = f"{where}: answered {label[2]}"
        else:
            text = f"{where}: {label[0]}"
    else:
        parts = [str(p) for p in label if not isinstance(p, bool)]
        if label[0] in ("complete", "loss") and label[-1] is True:
            parts.append("(runtime closing)")
        text = " ".join(parts)
    if choices:
        text += f" (answers at once: {', '.join(map(str, choices))})"
    return text


_FLOW_ACTIONS = frozenset({"answer", "wait", "tick", "admit", "go", "leave", "drop"})


# the output and the command line (their own module; the names stay this module's)
from .verify_output import (
    DESCRIPTION,
    add_arguments,
    main,
    render_json,
    render_text,
    run,
    write_counterexamples,
)
