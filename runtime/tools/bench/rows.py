"""Rows, goals and options of ``make bench`` (:mod:`acpfsm.tools.bench`)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from acpfsm.runtime.types import Retention

from . import durable as bench_durable
from . import nats as bench_nats
from . import scale as bench_scale
from . import soak as bench_soak
from .conform import ConformRow

#: The goals of the compiled engine (issue 10), printed beside their rows, never asserted.
GOAL_TRANSITION = "<=0.05x"
GOAL_CYCLE = "<=0.20x"
GOAL_LIFECYCLE = "<=0.25x"
#: The goals of issue 35 for the prompt round trip and the stream (ratios to the bare
#: transport, to the official SDK's client, p99 to the median).
GOAL_MEDIAN = 1.15
GOAL_SDK = 0.85
GOAL_CPU = 1.25
GOAL_TAIL = 2.0
GOAL_STREAM = 1.1

#: The reference agent's flags for every path: no pacing, quiet stderr.
AGENT_ARGS: tuple[str, ...] = ("--delay", "0", "--log-level", "error")
AGENT_MODULE = "acpfsm.adapters.reference_agent"
PROMPT_TIMEOUT = 30.0  # one prompt round trip (a healthy one takes milliseconds)
SETUP_TIMEOUT = 60.0  # spawning agents, initialize, session/new, READY

BARE_ROW = "bare StdioTransport"
RUNTIME_ROW = "Runtime.prompt"
SDK_ROW = "ACP SDK client"
LIFECYCLE_ROW = "Runtime.prompt over MemoryTransport"
COMPILED = "compiled"


# ------------------------------------------------------------------------ results --


@dataclass
class LatencyRow:
    """One path of a round-trip section (or a lifecycle row)."""

    name: str
    backend: str = ""
    samples_ms: list[float] = field(default_factory=list)
    client_cpu_ms: float | None = None
    agent_cpu_ms: float | None = None
    gc_max_ms: float = 0.0
    gc_max_cpu_ms: float = 0.0
    """The thread CPU of the longest pause: below its wall time when the core was taken."""
    gc_max_generation: int = 0
    gc_count: int = 0
    gc_by_generation: list[int] = field(default_factory=lambda: [0, 0, 0])
    cpu_samples_ms: list[float] = field(default_factory=list)
    """This thread's CPU in each timed round trip (``time.thread_time``): where the wall
    time's tail is not in it, the tail is waiting (the agent, the scheduler), not work."""
    note: str = ""

    @property
    def gc_detail(self) -> str:
        """The collections by generation and what the longest one was."""
        gens = ", ".join(f"gen{g} {n}" for g, n in enumerate(self.gc_by_generation) if n)
        if not self.gc_count:
            return "0 collections"
        return (
            f"{self.gc_count} collections ({gens}); the longest a gen{self.gc_max_generation},"
            f" {self.gc_max_cpu_ms:.1f} ms of it CPU"
        )

    @property
    def median_ms(self) -> float | None:
        return statistics.median(self.samples_ms) if self.samples_ms else None

    @property
    def p95_ms(self) -> float | None:
        return percentile(self.samples_ms, 95.0) if self.samples_ms else None

    @property
    def p99_ms(self) -> float | None:
        return percentile(self.samples_ms, 99.0) if self.samples_ms else None

    @property
    def cpu_tail(self) -> float | None:
        """p99 over the median of the per-prompt CPU (:attr:`cpu_samples_ms`)."""
        if not self.cpu_samples_ms:
            return None
        median = statistics.median(self.cpu_samples_ms)
        return percentile(self.cpu_samples_ms, 99.0) / median if median > 0 else None


@dataclass(frozen=True)
class RateRow:
    name: str
    transitions: int
    seconds: float
    baseline: str = ""  # the name of the row this one is compared with
    unit: str = "transitions"  # what ``transitions`` counts (``charts`` for constructions)
    goal: str = ""  # the ratio to the baseline this row aims at (printed, never asserted)

    @property
    def per_second(self) -> float:
        return self.transitions / self.seconds if self.seconds > 0 else math.inf

    @property
    def micros(self) -> float:
        return 1e6 * self.seconds / self.transitions if self.transitions else 0.0


@dataclass(frozen=True)
class MemoryRow:
    name: str
    bytes_per_execution: float | None
    count: int
    note: str = ""


@dataclass(frozen=True)
class CostRow:
    """A per-item cost of one path (``per_item_ms``), with the wall time of each item."""

    name: str
    backend: str
    items: int
    per_item_ms: float
    wall_ms: float | None = None


@dataclass(frozen=True)
class PrimitiveRow:
    """CPU per call of one anyio primitive under one backend."""

    name: str
    backend: str
    calls: int
    micros: float


@dataclass(frozen=True)
class ShareRow:
    """One component's own CPU per prompt under the profile, on the bare and runtime paths."""

    name: str
    backend: str
    bare_us: float
    runtime_us: float

    @property
    def extra_us(self) -> float:
        return self.runtime_us - self.bare_us


@dataclass(frozen=True)
class HeapRow:
    prompts: int
    filled_after: int
    grown_bytes: int
    trace_records: int
    note: str = ""

    @property
    def per_prompt(self) -> float:
        return self.grown_bytes / self.prompts if self.prompts else 0.0


@dataclass(frozen=True)
class ImportRow:
    samples_ms: tuple[float, ...]  # wall
    cpu_ms: tuple[float, ...]
    httpx_loaded: bool
    top: tuple[tuple[str, float], ...] = ()  # (package, self ms) of one -X importtime run
    after_asyncio_cpu_ms: tuple[float, ...] = ()  # asyncio imported first (an asyncio app)
    floor_cpu_ms: tuple[float, ...] = ()  # only the dependencies (see DEPENDENCIES)
    loaded: tuple[str, ...] = ()  # of WATCHED, what ``import acpfsm.runtime`` loaded

    @property
    def floor_median_ms(self) -> float:
        return statistics.median(self.floor_cpu_ms) if self.floor_cpu_ms else math.nan

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms) if self.samples_ms else math.nan

    @property
    def cpu_median_ms(self) -> float:
        return statistics.median(self.cpu_ms) if self.cpu_ms else math.nan

    @property
    def own_median_ms(self) -> float:
        """acpfsm's own part: the median beyond the dependencies' floor."""
        return self.cpu_median_ms - self.floor_median_ms


@dataclass(frozen=True)
class Goal:
    """One line of the summary: ``value`` against ``goal`` (``<=`` or ``<`` a limit)."""

    figure: str
    backend: str
    engine: str
    value: float | None
    limit: float | None
    """None: a figure the issue asks to report, with no goal (``-``, met ``reported``)."""
    unit: str  # "x" (a ratio), "ms", "B", "KiB", "%", "/s"
    strict: bool = False  # ``<`` rather than ``<=``
    detail: str = ""

    @property
    def goal(self) -> str:
        if self.limit is None:
            return "-"
        op = "<" if self.strict else "<="
        return f"{op} {_fmt(self.limit, self.unit)}"

    @property
    def measured(self) -> str:
        return "n/a" if self.value is None else _fmt(self.value, self.unit)

    @property
    def met(self) -> str:
        if self.value is None:
            return "n/a"
        if self.limit is None:
            return "reported"
        ok = self.value < self.limit if self.strict else self.value <= self.limit
        return "yes" if ok else "no"


def _fmt(value: float, unit: str) -> str:
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "%":
        return f"{value:.0%}"
    if unit == "/s":
        return f"{value:,.0f}/s"
    if unit == "KiB":
        return f"{value:.0f} KiB"  # the summary's columns are 12 wide
    if unit == "B":
        return f"{round(value):,} B"  # a whole number: no "-0 B" for a slight shrink
    return f"{value:.1f} {unit}"


@dataclass(frozen=True)
class BenchOptions:
    prompts: int = 2000
    rounds: int = 10
    warmup: int = 50
    chunks: int = 1000
    stream_turns: int = 20
    launches: int = 8
    heap_prompts: int = 5000
    imports: int = 20
    lifecycle_prompts: int = 300
    primitives: int = 20_000
    cycles: int = 200
    idle: int = 20
    idle_stdio: int = 3
    profile_prompts: int = 3000
    conform_runs: int = 5
    durable_prompts: int = 1000
    scale_executions: int = 1000
    scale_prompts: int = 5
    scale_idle: int = 10_000
    scale_stdio: int = 100
    scale_stdio_prompts: int = 20
    soak_executions: int = 200
    soak_prompts: int = 20
    soak_concurrency: int = 50
    recover_executions: int = 1000
    nats_prompts: int = 500
    nats_events: int = 20_000
    nats_takeover: int = 100
    nats_lease: int = 10
    backends: tuple[str, ...] = ("trio", "asyncio")
    sdk: bool = True
    quick: bool = False


QUICK = BenchOptions(
    prompts=300,
    rounds=3,
    warmup=10,
    chunks=500,
    stream_turns=4,
    launches=2,
    heap_prompts=500,
    imports=5,
    lifecycle_prompts=50,
    primitives=2000,
    cycles=20,
    idle=4,
    idle_stdio=1,
    profile_prompts=300,
    conform_runs=2,
    durable_prompts=100,
    scale_executions=100,
    scale_prompts=3,
    scale_idle=500,
    scale_stdio=10,
    scale_stdio_prompts=5,
    soak_executions=20,
    soak_prompts=5,
    soak_concurrency=10,
    recover_executions=200,
    nats_prompts=50,
    nats_events=2000,
    nats_takeover=20,
    quick=True,
)
#: The bounds the heap row runs with under ``--quick`` (filled sooner than the defaults).
QUICK_RETENTION = Retention(trace_records=1000, backlog_events=1000, backlog_bytes=256 * 1024)


@dataclass
class BenchReport:
    options: BenchOptions
    latency: list[LatencyRow] = field(default_factory=list)
    streaming: list[CostRow] = field(default_factory=list)
    launch: list[CostRow] = field(default_factory=list)
    heap: HeapRow | None = None
    imports: ImportRow | None = None
    rates: list[RateRow] = field(default_factory=list)
    lifecycle: list[LatencyRow] = field(default_factory=list)
    primitives: list[PrimitiveRow] = field(default_factory=list)
    memory: list[MemoryRow] = field(default_factory=list)
    breakdown: list[ShareRow] = field(default_factory=list)
    stream_breakdown: list[ShareRow] = field(default_factory=list)
    """Per streamed notification (microseconds), as :attr:`breakdown` is per prompt."""
    conform: ConformRow | None = None
    durable: bench_durable.DurableReport | None = None
    nats: bench_nats.NatsReport | None = None
    scale: bench_scale.ScaleReport | None = None
    soak: bench_soak.SoakMemory | None = None
    seconds: float = 0.0
    section_seconds: dict[str, float] = field(default_factory=dict)

    def row(self, rows: Sequence[Any], name: str, backend: str) -> Any:
        return next((r for r in rows if r.name == name and r.backend == backend), None)


def percentile(samples: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (``pct`` in 0..100) of a non-empty sample."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[rank - 1]
