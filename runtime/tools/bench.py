"""``make bench``: what the statecharts cost, measured side by side in one run.

``python -m acpfsm.runtime.tools.bench [--prompts N] [--warmup W] [--cycles C] [--idle K]
[--idle-stdio K] [--backend trio|asyncio] [--no-sdk]`` prints one table in three sections:

1. **Prompt round trip** against the reference agent (``python -m
   acpfsm.adapters.reference_agent --delay 0``, a fresh process per path): N timed prompts
   after W warm-up prompts, each sent and awaited until its turn ends, three ways:

   * the bare :class:`~acpfsm.adapters.acp.stdio.StdioTransport` (``prompt(text, [], g)``,
     then the ``Complete`` of generation ``g`` read from ``events()``): the baseline;
   * :meth:`acpfsm.runtime.Runtime.prompt` (the same transport under the charts, the event
     pump, the hub and the trace; the execution is launched without an initial prompt);
   * the official ACP Python SDK client (``agent-client-protocol``, ``ClientSideConnection``
     from ``acp.spawn_agent_process``). The SDK is asyncio-only, so it runs with its own
     ``asyncio.run`` loop in a worker thread (``anyio.to_thread``) while the bench's event loop
     waits; nothing else runs meanwhile, so the process CPU clock still measures that client
     alone.

   Columns: median and p95 wall latency (ms); client CPU per prompt (``time.process_time``
   delta of this process over the timed prompts / N); agent CPU per prompt (utime + stime of
   the agent process from ``/proc/<pid>/stat``, clock-tick resolution, ``n/a`` off Linux);
   ratios to the bare transport.

2. **Chart transitions per second**, in a tight loop on the event loop thread (N cycles per
   row), each lifecycle row twice, on the reference engine (python-statemachine running the
   declared chart) and on the compiled one, beside a raw python-statemachine ("psm")
   ``StateChart`` of the same shape: the Execution chart's prompt cycle (``prompt_began`` /
   ``turn_completed``) against a bare two-state chart; the construction of a
   :class:`~acpfsm.statecharts.PromptGeneration` (the runtime builds one per prompt) against a
   five-state chart's; and the whole per-prompt cycle the runtime fires (a new
   PromptGeneration, ``dispatch_started``, ``dispatch_accepted``, ``completion_received``,
   ``superseded_by_successor`` and the two Execution transitions, with the runtime's
   :class:`~acpfsm.runtime.Trace` observer attached, records not kept) against a raw chart
   doing the same six transitions. ``x cost`` is the cost per item relative to the row
   named after it: the compiled Execution cycle to the reference engine's, every other row to
   raw psm.

3. **Lifecycle CPU per prompt**: :meth:`~acpfsm.runtime.Runtime.prompt` over the in-memory
   transport (:class:`~acpfsm.testing.memory.MemoryExecutor`, every prompt answered at once),
   N prompts after W warm-up, ``Runtime(engine="reference")`` then
   ``Runtime(engine="compiled")``: with no agent and no pipe, the process CPU per prompt is the
   runtime's lifecycle (charts, event pump, hub, trace).

   The compiled rows carry the goals of the compiled engine beside their ratio (``goal``):
   one transition at most 0.05x the reference engine's cost, the prompt cycle at most 0.2x
   raw psm's, the lifecycle CPU at most 0.25x the reference engine's.

4. **Memory per idle execution**: ``tracemalloc`` growth of this process per execution
   brought to READY and left idle (K over the in-memory transport; K' over stdio against
   real reference agents, and the same number of bare initialized StdioTransports as the
   baseline); the agent processes are not in that figure, so their RSS and private memory
   (``/proc/<pid>/status``, ``smaps_rollup``) are reported per process on their own rows.

Nothing here is asserted anywhere: the numbers are for reading, ratios more than absolutes.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import anyio
import anyio.lowlevel
import anyio.to_thread
from statemachine import State, StateChart

from acpfsm.adapters.acp.stdio import StdioTransport, open_stdio_transport
from acpfsm.adapters.events import Complete, ErrorEvent
from acpfsm.adapters.memory import MemoryTransport
from acpfsm.runtime.runtime import Runtime, reference_profile
from acpfsm.runtime.trace import Trace
from acpfsm.runtime.types import AgentProfile, LaunchSpec, WorkspaceRef
from acpfsm.statecharts import EngineName, PromptGeneration, TransitionObserver
from acpfsm.statecharts import Execution as ExecutionChart
from acpfsm.testing.memory import MemoryExecutor

__all__ = [
    "AGENT_ARGS",
    "BenchOptions",
    "BenchReport",
    "LatencyRow",
    "MemoryRow",
    "RateRow",
    "child_pids",
    "format_report",
    "main",
    "rss_kib",
    "run_bench",
    "zombie_pids",
]

#: The goals of the compiled engine (issue 10), printed beside their rows, never asserted:
#: one transition at least 20x cheaper than on the reference engine; a new PromptGeneration
#: and its cycle at least 5x cheaper than raw python-statemachine doing the same
#: transitions; the lifecycle CPU of a prompt at most a quarter of the reference engine's.
GOAL_TRANSITION = "<=0.05x"
GOAL_CYCLE = "<=0.20x"
GOAL_LIFECYCLE = "<=0.25x"

#: The reference agent's flags for every path: no pacing, quiet stderr.
AGENT_ARGS: tuple[str, ...] = ("--delay", "0", "--log-level", "error")
AGENT_MODULE = "acpfsm.adapters.reference_agent"
PROMPT_TIMEOUT = 30.0  # one prompt round trip (a healthy one takes milliseconds)
SETUP_TIMEOUT = 60.0  # spawning agents, initialize, session/new, READY


# ------------------------------------------------------------------------ results --


@dataclass(frozen=True)
class LatencyRow:
    name: str
    samples_ms: tuple[float, ...] = ()
    client_cpu_ms: float | None = None
    agent_cpu_ms: float | None = None
    note: str = ""

    @property
    def median_ms(self) -> float | None:
        return statistics.median(self.samples_ms) if self.samples_ms else None

    @property
    def p95_ms(self) -> float | None:
        return percentile(self.samples_ms, 95.0) if self.samples_ms else None


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
class BenchOptions:
    prompts: int = 200
    warmup: int = 20
    cycles: int = 500
    idle: int = 20
    idle_stdio: int = 5
    backend: str = "trio"
    sdk: bool = True


@dataclass
class BenchReport:
    options: BenchOptions
    latency: list[LatencyRow] = field(default_factory=list)
    rates: list[RateRow] = field(default_factory=list)
    lifecycle: list[LatencyRow] = field(default_factory=list)
    memory: list[MemoryRow] = field(default_factory=list)
    seconds: float = 0.0
    section_seconds: dict[str, float] = field(default_factory=dict)


def percentile(samples: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (``pct`` in 0..100) of a non-empty sample."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[rank - 1]


# ---------------------------------------------------------------- /proc helpers --

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name may contain spaces and parentheses: fields start after the last ')'
    return raw[raw.rfind(")") + 2 :].split()


def child_pids(parent: int | None = None) -> set[int]:
    """The live child processes of ``parent`` (default: this process), from ``/proc``;
    empty where ``/proc`` is unavailable."""
    parent = os.getpid() if parent is None else parent
    out: set[int] = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit():
            continue
        fields = _proc_stat_fields(int(entry))
        # fields[0] is the state, fields[1] the ppid; a zombie is not live
        if fields is not None and len(fields) > 1 and fields[0] != "Z" and int(fields[1]) == parent:
            out.add(int(entry))
    return out


def zombie_pids(parent: int | None = None) -> set[int]:
    """The children of ``parent`` (default: this process) that exited and were never
    reaped, from ``/proc``."""
    parent = os.getpid() if parent is None else parent
    out: set[int] = set()
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                fields = _proc_stat_fields(int(entry))
                if fields and len(fields) > 1 and fields[0] == "Z" and int(fields[1]) == parent:
                    out.add(int(entry))
    return out


def rss_kib(pid: int | None = None) -> int | None:
    """The resident set of ``pid`` (default: this process) in KiB, from ``/proc``."""
    return _memory_kib(os.getpid() if pid is None else pid)[0]


def _cpu_seconds(pids: set[int]) -> float | None:
    """utime + stime of ``pids`` (seconds), or ``None`` if any cannot be read."""
    total = 0.0
    for pid in pids:
        fields = _proc_stat_fields(pid)
        if fields is None or len(fields) < 13:
            return None
        total += (int(fields[11]) + int(fields[12])) / _CLK_TCK
    return total if pids else None


def _memory_kib(pid: int) -> tuple[int | None, int | None]:
    """(RSS, private = Private_Clean + Private_Dirty) of ``pid`` in KiB."""
    rss: int | None = None
    private: int | None = None
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    with contextlib.suppress(OSError, ValueError):
        parts = [
            int(line.split()[1])
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
            if line.startswith(("Private_Clean:", "Private_Dirty:"))
        ]
        private = sum(parts) if parts else None
    return rss, private


class _CpuMeter:
    """Client (this process) and agent (``pids``) CPU over a timed loop."""

    def __init__(self, agent_pids: set[int]) -> None:
        self.agent_pids = agent_pids
        self.client0 = time.process_time()
        self.agent0 = _cpu_seconds(agent_pids)

    def per_op_ms(self, ops: int) -> tuple[float, float | None]:
        client = (time.process_time() - self.client0) * 1000.0 / ops
        agent1 = _cpu_seconds(self.agent_pids)
        if self.agent0 is None or agent1 is None:
            return client, None
        return client, (agent1 - self.agent0) * 1000.0 / ops


def _agent_argv(sessions_dir: Path) -> list[str]:
    return [sys.executable, "-m", AGENT_MODULE, *AGENT_ARGS, "--sessions-dir", str(sessions_dir)]


def _prompt_text(i: int) -> str:
    return f"bench prompt number {i}: say something short."


# ------------------------------------------------------------ 1. round trips --


async def _complete_of(transport: StdioTransport, generation: int) -> None:
    """Consume events until the turn of ``generation`` ends (an error ends the bench)."""
    async for event in transport.events():
        if isinstance(event, Complete) and event.prompt_generation == generation:
            return
        if isinstance(event, ErrorEvent) and event.prompt_generation == generation:
            raise RuntimeError(f"prompt {generation} failed: {event.error}")
    raise RuntimeError("the agent's event stream ended before the turn did")


async def bench_bare_transport(opts: BenchOptions, root: Path) -> LatencyRow:
    ws = root / "bare"
    ws.mkdir()
    before = child_pids()
    with anyio.fail_after(SETUP_TIMEOUT):
        async with open_stdio_transport(_agent_argv(ws / "sessions"), cwd=ws) as transport:
            await transport.initialize()
            await transport.new_session(str(ws))

            async def one(g: int) -> None:
                await transport.prompt(_prompt_text(g), [], g)
                await _complete_of(transport, g)

            samples, meter = await _round_trips(one, opts, child_pids() - before)
            client, agent_cpu = meter.per_op_ms(opts.prompts)
    return LatencyRow("bare StdioTransport", tuple(samples), client, agent_cpu)


async def bench_runtime_prompt(opts: BenchOptions, root: Path) -> LatencyRow:
    ws = root / "runtime"
    ws.mkdir()
    profile = reference_profile(*AGENT_ARGS, "--sessions-dir", str(ws / "sessions"))
    before = child_pids()
    with anyio.fail_after(SETUP_TIMEOUT):
        async with Runtime(profiles=[profile]) as rt:
            ref = await rt.launch(
                LaunchSpec(
                    agent_profile_id=profile.id,
                    executor_id="stdio",
                    workspace=WorkspaceRef(path=str(ws)),
                )
            )
            samples, meter = await _prompts(rt, ref.id, opts, child_pids() - before)
            client, agent_cpu = meter.per_op_ms(opts.prompts)
            await rt.stop(ref.id, "bench done")
    return LatencyRow("Runtime.prompt", tuple(samples), client, agent_cpu)


async def _round_trips(
    one: Callable[[int], Awaitable[None]], opts: BenchOptions, agent: set[int]
) -> tuple[list[float], _CpuMeter]:
    """W warm-up then N timed round trips ``one(i)`` (i = 1, 2 …): the latencies (ms) and the
    CPU meter of the timed ones (this process and the ``agent`` processes)."""
    samples: list[float] = []
    meter = _CpuMeter(agent)
    for i in range(1, opts.warmup + opts.prompts + 1):
        if i == opts.warmup + 1:
            meter = _CpuMeter(agent)
        with anyio.fail_after(PROMPT_TIMEOUT):
            t0 = time.perf_counter()
            await one(i)
            elapsed = time.perf_counter() - t0
        if i > opts.warmup:
            samples.append(elapsed * 1000.0)
    return samples, meter


async def _prompts(
    rt: Runtime, execution_id: str, opts: BenchOptions, agent: set[int]
) -> tuple[list[float], _CpuMeter]:
    """:func:`_round_trips` of ``Runtime.prompt``, each required to end its turn."""

    async def one(i: int) -> None:
        result = await rt.prompt(execution_id, _prompt_text(i))
        if result.stop_reason != "end_turn":
            raise RuntimeError(f"prompt {i} ended {result.stop_reason!r}")

    return await _round_trips(one, opts, agent)


SDK_ROW = "ACP SDK client (asyncio thread)"


class _SdkClient:
    """The client side the SDK calls back: it only counts the streamed updates. (No
    ``request_permission`` and no fs methods: the bench's prompts ask for none, and the SDK
    answers ``-32601`` for anything a plain object does not implement.)"""

    def __init__(self) -> None:
        self.updates = 0

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates += 1


def _sdk_bench_thread(opts: BenchOptions, ws: Path) -> LatencyRow:
    """Runs in a worker thread with its own asyncio loop (the SDK is asyncio-only)."""
    import asyncio

    try:
        import acp
    except ImportError:
        return LatencyRow(SDK_ROW, note="agent-client-protocol is not installed")

    async def run() -> LatencyRow:
        client = _SdkClient()
        argv = _agent_argv(ws / "sessions")
        before = child_pids()
        async with asyncio.timeout(SETUP_TIMEOUT):
            spawned = acp.spawn_agent_process(
                client,  # type: ignore[arg-type]  # a partial Client, on purpose (see _SdkClient)
                argv[0],
                *argv[1:],
                cwd=ws,
                transport_kwargs={"stderr": subprocess.DEVNULL},
            )
            async with spawned as (conn, _process):
                await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
                session = await conn.new_session(cwd=str(ws))
                agent = child_pids() - before
                samples: list[float] = []
                meter = _CpuMeter(agent)
                for i in range(1, opts.warmup + opts.prompts + 1):
                    if i == opts.warmup + 1:
                        meter = _CpuMeter(agent)
                    async with asyncio.timeout(PROMPT_TIMEOUT):
                        t0 = time.perf_counter()
                        response = await conn.prompt(
                            session_id=session.session_id,
                            prompt=[acp.text_block(_prompt_text(i))],
                        )
                        elapsed = time.perf_counter() - t0
                    if response.stop_reason != "end_turn":
                        raise RuntimeError(f"prompt {i} ended {response.stop_reason!r}")
                    if i > opts.warmup:
                        samples.append(elapsed * 1000.0)
                client_cpu, agent_cpu = meter.per_op_ms(opts.prompts)
        if client.updates == 0:
            raise RuntimeError("the SDK client saw no session/update")
        return LatencyRow(SDK_ROW, tuple(samples), client_cpu, agent_cpu)

    return asyncio.run(run())


async def bench_sdk_client(opts: BenchOptions, root: Path) -> LatencyRow:
    ws = root / "sdk"
    ws.mkdir()
    return await anyio.to_thread.run_sync(_sdk_bench_thread, opts, ws)


# ------------------------------------------------------------ 2. transitions --


class _RawCycle(StateChart[Any]):
    """Raw python-statemachine: the Execution chart's prompt cycle, nothing else."""

    ready = State("READY", initial=True)
    running = State("RUNNING")
    prompt_began = ready.to(running)
    turn_completed = running.to(ready)


class _RawGeneration(StateChart[Any]):
    """Raw python-statemachine: a generation's happy path as five flat states."""

    admitted = State("admitted", initial=True)
    sending = State("sending")
    dispatched = State("dispatched")
    completed = State("completed")
    superseded = State("superseded", final=True)
    dispatch_started = admitted.to(sending)
    dispatch_accepted = sending.to(dispatched)
    completion_received = dispatched.to(completed)
    superseded_by_successor = completed.to(superseded)


def _timed(loop: Callable[[int], int], cycles: int) -> tuple[int, float]:
    loop(max(1, cycles // 20))  # warm-up (caches, lazy imports)
    gc.collect()
    t0 = time.perf_counter()
    transitions = loop(cycles)
    return transitions, time.perf_counter() - t0


def _execution_cycle(engine: EngineName) -> Callable[[int], int]:
    chart = ExecutionChart.start(engine=engine, tags={"execution_id": "bench"})
    chart.fire("start_requested")
    chart.fire("booted")

    def cycle(n: int) -> int:
        for g in range(n):
            chart.fire("prompt_began")
            chart.fire("turn_completed", generation=g, stop_reason="end_turn")
        return 2 * n

    return cycle


def _prompt_cycle(engine: EngineName, observer: TransitionObserver) -> Callable[[int], int]:
    """What the runtime fires per prompt: BeginPrompt (the predecessor superseded, a new
    PromptGeneration admitted, the execution RUNNING), then send, dispatch, claim, READY."""
    tags = {"execution_id": "bench"}
    execution = ExecutionChart.start(engine=engine, tags=tags, observers=(observer,))
    execution.fire("start_requested")
    execution.fire("booted")

    def cycle(n: int) -> int:
        previous = PromptGeneration.start(
            engine=engine, generation=0, tags=tags, observers=(observer,)
        )
        previous.fire("dispatch_started")
        previous.fire("dispatch_accepted")
        previous.fire("completion_received", stop_reason="end_turn")
        for g in range(1, n + 1):
            previous.fire("superseded_by_successor")
            current = PromptGeneration.start(
                engine=engine, generation=g, tags=tags, observers=(observer,)
            )
            execution.fire("prompt_began")
            current.fire("dispatch_started")
            current.fire("dispatch_accepted")
            current.fire("completion_received", stop_reason="end_turn")
            execution.fire("turn_completed", generation=g, stop_reason="end_turn")
            previous = current
        return 6 * n

    return cycle


def _generation_new(engine: EngineName, observer: TransitionObserver) -> Callable[[int], int]:
    def new(n: int) -> int:
        for g in range(n):
            PromptGeneration.start(
                engine=engine, generation=g, tags={"execution_id": "bench"}, observers=(observer,)
            )
        return n

    return new


def bench_transitions(opts: BenchOptions) -> list[RateRow]:
    """Each lifecycle row on the reference engine (python-statemachine running the declared
    charts) and on the compiled one, against raw python-statemachine charts of the same
    shape; the compiled rows carry the goals of issue 10."""
    cycles = max(1, opts.cycles)

    raw = _RawCycle()

    def raw_cycle(n: int) -> int:
        for _ in range(n):
            raw.send("prompt_began")
            raw.send("turn_completed")
        return 2 * n

    raw_exec = _RawCycle()

    def raw_prompt_cycle(n: int) -> int:
        previous = _RawGeneration()
        previous.send("dispatch_started")
        previous.send("dispatch_accepted")
        previous.send("completion_received")
        for _ in range(n):
            previous.send("superseded_by_successor")
            current = _RawGeneration()
            raw_exec.send("prompt_began")
            current.send("dispatch_started")
            current.send("dispatch_accepted")
            current.send("completion_received")
            raw_exec.send("turn_completed")
            previous = current
        return 6 * n

    def raw_new(n: int) -> int:
        for _ in range(n):
            _RawGeneration()
        return n

    observer = Trace(keep=False).observer("bench")
    raw_name = "raw psm: 2-state cycle"
    ref_cycle = "Execution, reference engine: prompt_began/turn_completed"
    raw_new_name = "raw psm: new 5-state chart"
    raw_full = "raw psm: new chart + 6 transitions"
    return [
        RateRow(raw_name, *_timed(raw_cycle, cycles)),
        RateRow(ref_cycle, *_timed(_execution_cycle("reference"), cycles), baseline=raw_name),
        RateRow(
            "Execution chart: prompt_began/turn_completed",
            *_timed(_execution_cycle("compiled"), cycles),
            baseline=ref_cycle,
            goal=GOAL_TRANSITION,
        ),
        RateRow(raw_new_name, *_timed(raw_new, cycles), unit="charts"),
        RateRow(
            "new PromptGeneration, reference engine (traced)",
            *_timed(_generation_new("reference", observer), cycles),
            baseline=raw_new_name,
            unit="charts",
        ),
        RateRow(
            "new PromptGeneration chart (traced)",
            *_timed(_generation_new("compiled", observer), cycles),
            baseline=raw_new_name,
            unit="charts",
        ),
        RateRow(raw_full, *_timed(raw_prompt_cycle, cycles)),
        RateRow(
            "prompt cycle, reference engine: new + 6, traced",
            *_timed(_prompt_cycle("reference", observer), cycles),
            baseline=raw_full,
        ),
        RateRow(
            "prompt cycle: new PromptGeneration + 6, traced",
            *_timed(_prompt_cycle("compiled", observer), cycles),
            baseline=raw_full,
            goal=GOAL_CYCLE,
        ),
    ]


# ------------------------------------------------- 3. lifecycle CPU per prompt --

LIFECYCLE_ROW = "Runtime.prompt over MemoryTransport"


async def bench_lifecycle(opts: BenchOptions, root: Path) -> list[LatencyRow]:
    """The whole prompt path with no agent and no pipe behind it (the in-memory transport
    answers every prompt at once): what is left is the runtime's lifecycle, on each engine."""
    return [await _lifecycle(engine, opts, root) for engine in ("reference", "compiled")]


async def _lifecycle(engine: EngineName, opts: BenchOptions, root: Path) -> LatencyRow:
    profile = AgentProfile(id="memory-agent", command=("unused",))
    spec = LaunchSpec(
        agent_profile_id=profile.id, executor_id="memory", workspace=WorkspaceRef(path=str(root))
    )
    executor = MemoryExecutor(lambda: MemoryTransport(auto_complete=True))
    async with Runtime(profiles=[profile], executors={"memory": executor}, engine=engine) as rt:
        ref = await rt.launch(spec)
        await _until_ready(rt, [ref.id])
        samples, meter = await _prompts(rt, ref.id, opts, set())
        cpu_ms, _ = meter.per_op_ms(max(1, opts.prompts))
        await rt.stop(ref.id, "bench done")
    return LatencyRow(f"{LIFECYCLE_ROW}, {engine} engine", tuple(samples), cpu_ms)


# ---------------------------------------------------------------- 4. memory --


async def _settle() -> None:
    """Let every ready task run (each pump reaches its idle wait)."""
    for _ in range(20):
        await anyio.lowlevel.checkpoint()


def _traced_bytes() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def _until_ready(rt: Runtime, ids: Sequence[str]) -> None:
    with anyio.fail_after(SETUP_TIMEOUT):
        while True:  # a poll: the bench keeps no per-execution subscription alive
            if all(rt.get_execution(i).status == "READY" for i in ids):
                break
            await anyio.sleep(0.005)
    await _settle()


async def _idle_runtime(rt: Runtime, spec: LaunchSpec, count: int) -> tuple[float, list[str]]:
    """tracemalloc growth per READY idle execution of ``rt``; returns the ids launched."""
    base = _traced_bytes()
    ids = [(await rt.launch(spec)).id for _ in range(count)]
    await _until_ready(rt, ids)
    return (_traced_bytes() - base) / count, ids


async def bench_memory(opts: BenchOptions, root: Path) -> list[MemoryRow]:
    rows: list[MemoryRow] = []
    tracemalloc.start()
    try:
        if opts.idle_stdio > 0:
            rows.extend(await _memory_stdio(opts.idle_stdio, root))
        if opts.idle > 0:
            mem_profile = AgentProfile(id="memory-agent", command=("unused",))
            spec = LaunchSpec(
                agent_profile_id=mem_profile.id,
                executor_id="memory",
                workspace=WorkspaceRef(path=str(root)),
            )
            rt = Runtime(profiles=[mem_profile], executors={"memory": MemoryExecutor()})
            async with rt:
                per, _ids = await _idle_runtime(rt, spec, opts.idle)
            rows.append(MemoryRow("Runtime over MemoryTransport (tracemalloc)", per, opts.idle))
    finally:
        tracemalloc.stop()
    return rows


async def _memory_stdio(count: int, root: Path) -> list[MemoryRow]:
    ws = root / "idle"
    ws.mkdir()
    rows: list[MemoryRow] = []

    # bare transports: each initialized with a session, then idle until released
    release = anyio.Event()
    ready = 0
    all_ready = anyio.Event()

    async def hold(index: int) -> None:
        nonlocal ready
        argv = _agent_argv(ws / f"bare-{index}")
        async with open_stdio_transport(argv, cwd=ws) as transport:
            await transport.initialize()
            await transport.new_session(str(ws))
            ready += 1
            if ready == count:
                all_ready.set()
            await release.wait()

    base = _traced_bytes()
    with anyio.fail_after(SETUP_TIMEOUT):
        async with anyio.create_task_group() as tg:
            for index in range(count):
                tg.start_soon(hold, index)
            await all_ready.wait()
            await _settle()
            rows.append(
                MemoryRow(
                    "bare StdioTransport, session open (tracemalloc)",
                    (_traced_bytes() - base) / count,
                    count,
                )
            )
            release.set()

    # the runtime over stdio: READY executions, plus the agents' own memory
    profile = reference_profile(*AGENT_ARGS, "--sessions-dir", str(ws / "runtime"))
    spec = LaunchSpec(
        agent_profile_id=profile.id, executor_id="stdio", workspace=WorkspaceRef(path=str(ws))
    )
    before = child_pids()
    async with Runtime(profiles=[profile]) as rt:
        per, _ids = await _idle_runtime(rt, spec, count)
        rows.append(MemoryRow("Runtime over stdio, READY (tracemalloc)", per, count))
        agents = child_pids() - before
        sizes = [_memory_kib(pid) for pid in agents]
        rss = [r for r, _ in sizes if r is not None]
        private = [p for _, p in sizes if p is not None]
        note = "" if agents else "no /proc"
        rows.append(
            MemoryRow(
                "reference agent process: RSS",
                1024.0 * statistics.mean(rss) if rss else None,
                len(rss),
                note,
            )
        )
        rows.append(
            MemoryRow(
                "reference agent process: private (USS)",
                1024.0 * statistics.mean(private) if private else None,
                len(private),
                note,
            )
        )
    return rows


# ---------------------------------------------------------------- the run --


async def run_bench(opts: BenchOptions) -> BenchReport:
    """Run every section in order and return the numbers (nothing is printed)."""
    started = time.perf_counter()
    report = BenchReport(opts)
    with tempfile.TemporaryDirectory(prefix="acpfsm-bench-") as tmp:
        root = Path(tmp)
        mark = time.perf_counter()
        if opts.prompts > 0:
            report.latency.append(await bench_bare_transport(opts, root))
            report.latency.append(await bench_runtime_prompt(opts, root))
            if opts.sdk:
                report.latency.append(await bench_sdk_client(opts, root))
            else:
                report.latency.append(LatencyRow(SDK_ROW, note="skipped (--no-sdk)"))
        report.section_seconds["round trips"] = time.perf_counter() - mark
        mark = time.perf_counter()
        report.rates = bench_transitions(opts)
        report.section_seconds["transitions"] = time.perf_counter() - mark
        mark = time.perf_counter()
        if opts.prompts > 0:
            report.lifecycle = await bench_lifecycle(opts, root)
        report.section_seconds["lifecycle"] = time.perf_counter() - mark
        mark = time.perf_counter()
        report.memory = await bench_memory(opts, root)
        report.section_seconds["memory"] = time.perf_counter() - mark
    report.seconds = time.perf_counter() - started
    return report


# ---------------------------------------------------------------- the table --


def _num(value: float | None, fmt: str = "{:.3f}") -> str:
    return "n/a" if value is None else fmt.format(value)


def _ratio(value: float | None, base: float | None) -> str:
    if value is None or base is None or base <= 0:
        return "n/a"
    ratio = value / base
    return f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.3f}x"


class _Table:
    WIDTH: ClassVar[int] = 72

    def __init__(self) -> None:
        self.lines: list[str] = []

    def section(self, title: str, columns: Sequence[str]) -> None:
        self.lines.append("")
        self.lines.append(f"{title:<{self.WIDTH}}" + "".join(f"{c:>14}" for c in columns))
        self.lines.append("-" * (self.WIDTH + 14 * len(columns)))

    def row(self, name: str, cells: Sequence[str], note: str = "") -> None:
        label = f"  {name}"
        tail = f"  ({note})" if note else ""
        self.lines.append(f"{label:<{self.WIDTH}}" + "".join(f"{c:>14}" for c in cells) + tail)


def format_report(report: BenchReport) -> str:
    opts = report.options
    table = _Table()
    table.lines.append(
        f"acpfsm bench: backend {opts.backend}, Python {platform.python_version()}, "
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs"
    )
    table.lines.append(
        f"reference agent: python -m {AGENT_MODULE} {' '.join(AGENT_ARGS)}; "
        f"{opts.prompts} prompts after {opts.warmup} warm-up; ratios are to the first row "
        "of a section (or the row named)"
    )

    if report.latency:
        table.section(
            "prompt round trip (reference agent)",
            ["median ms", "p95 ms", "client CPU ms", "agent CPU ms", "x median", "x client CPU"],
        )
        base = report.latency[0]
        for row in report.latency:
            table.row(
                row.name,
                [
                    _num(row.median_ms),
                    _num(row.p95_ms),
                    _num(row.client_cpu_ms),
                    _num(row.agent_cpu_ms),
                    _ratio(row.median_ms, base.median_ms),
                    _ratio(row.client_cpu_ms, base.client_cpu_ms),
                ],
                row.note,
            )

    if report.rates:
        table.section(
            f"chart transitions ({opts.cycles} cycles)",
            ["per second", "us each", "x cost", "goal"],
        )
        by_name = {r.name: r for r in report.rates}
        for rate in report.rates:
            baseline = by_name.get(rate.baseline)
            table.row(
                f"{rate.name} [{rate.unit}]",
                [
                    f"{rate.per_second:,.0f}",
                    f"{rate.micros:.2f}",
                    _ratio(rate.micros, baseline.micros) if baseline else "1.00x",
                    rate.goal or "-",
                ],
                f"vs {rate.baseline.split(':')[0]}" if baseline else "",
            )

    if report.lifecycle:
        table.section(
            f"lifecycle CPU per prompt, in-memory transport ({opts.prompts} prompts)",
            ["median ms", "CPU ms", "x CPU", "goal"],
        )
        base = report.lifecycle[0]
        for row in report.lifecycle:
            table.row(
                row.name,
                [
                    _num(row.median_ms),
                    _num(row.client_cpu_ms),
                    _ratio(row.client_cpu_ms, base.client_cpu_ms),
                    GOAL_LIFECYCLE if row is not base else "-",
                ],
                "vs the reference engine" if row is not base else "",
            )

    if report.memory:
        table.section("memory per idle execution", ["KiB each", "count", "x bare"])
        base_mem = report.memory[0].bytes_per_execution
        for mem in report.memory:
            kib = None if mem.bytes_per_execution is None else mem.bytes_per_execution / 1024
            table.row(
                mem.name,
                [_num(kib, "{:,.1f}"), str(mem.count), _ratio(mem.bytes_per_execution, base_mem)],
                mem.note,
            )

    table.lines.append("")
    parts = ", ".join(f"{k} {v:.1f} s" for k, v in report.section_seconds.items())
    table.lines.append(f"total {report.seconds:.1f} s ({parts})")
    return "\n".join(table.lines)


def _positive(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m acpfsm.runtime.tools.bench",
        description="Prompt latency and CPU (bare stdio transport, Runtime.prompt, ACP SDK "
        "client), chart transitions per second, memory per idle execution.",
    )
    defaults = BenchOptions()
    parser.add_argument("--prompts", type=_positive, default=defaults.prompts, metavar="N")
    parser.add_argument("--warmup", type=_positive, default=defaults.warmup, metavar="N")
    parser.add_argument(
        "--cycles",
        type=_positive,
        default=defaults.cycles,
        metavar="N",
        help="prompt cycles per chart-transition row",
    )
    parser.add_argument(
        "--idle",
        type=_positive,
        default=defaults.idle,
        metavar="K",
        help="idle executions over the in-memory transport",
    )
    parser.add_argument(
        "--idle-stdio",
        type=_positive,
        default=defaults.idle_stdio,
        metavar="K",
        help="idle executions (and bare transports) against real reference agents; 0 skips",
    )
    parser.add_argument("--backend", choices=("trio", "asyncio"), default=defaults.backend)
    parser.add_argument("--no-sdk", action="store_true", help="skip the ACP SDK client row")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    opts = BenchOptions(
        prompts=args.prompts,
        warmup=args.warmup,
        cycles=args.cycles,
        idle=args.idle,
        idle_stdio=args.idle_stdio,
        backend=args.backend,
        sdk=not args.no_sdk,
    )
    try:
        report = anyio.run(run_bench, opts, backend=opts.backend)
    except KeyboardInterrupt:
        return 130
    print(format_report(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
