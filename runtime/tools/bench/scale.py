"""``make bench``, scale: many executions in one Runtime (issue 35).

* **Concurrent prompts**: ``--scale-executions`` executions (1,000) in one Runtime over the
  in-memory agent (:class:`~acpfsm.testing.memory.MemoryExecutor`, every prompt answered at
  once), READY, then every execution prompts ``--scale-prompts`` times, all of them at once:
  this process's CPU per prompt against one execution prompting alone in the same Runtime
  (goal ≤ 1.2×: the runtime's cost per prompt must not grow with the executions it holds),
  and the latency's median and p99 (each prompt waits for the others: reported, no goal).
* **Idle executions**: ``--scale-idle`` executions (10,000) launched over the in-memory agent
  and brought to READY: the launch rate (executions READY per second of wall time) and the
  memory each one holds, the growth of this process's Python heap (``sys.getallocatedblocks``
  is no figure in bytes, so ``tracemalloc`` on a tenth of them) and of its RSS (what the
  allocator took from the system; goal ≤ 64 KiB each).
* **Stdio at scale**: ``--scale-stdio`` executions (100) over real reference agents (``python
  -m acpfsm.adapters.reference_agent --delay 0``), each prompting ``--scale-stdio-prompts``
  times, all at once: the Runtime's process CPU as a share of the whole (its own plus every
  agent's, ``/proc``), launch included and not.

Nothing here is asserted anywhere.
"""

from __future__ import annotations

import gc
import statistics
import time
import tracemalloc
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import anyio

from acpfsm.adapters.memory import MemoryTransport
from acpfsm.runtime.runtime import Runtime, reference_profile
from acpfsm.runtime.types import AgentProfile, LaunchSpec, WorkspaceRef
from acpfsm.testing.memory import MemoryExecutor

__all__ = ["ScaleReport", "format_into", "goals", "run"]

MEMORY = AgentProfile(id="scale-memory", command=("unused",))
AGENT = ("--delay", "0", "--log-level", "error")
TIMEOUT = 600.0
GOAL_CPU = 1.2  # concurrent CPU per prompt vs one execution's
GOAL_KIB = 64.0  # per idle execution


@dataclass
class ScaleReport:
    executions: int = 0
    prompts_each: int = 0
    single_cpu_us: float | None = None
    concurrent_cpu_us: float | None = None
    concurrent_ms: list[float] = field(default_factory=list)
    single_gc: tuple[float, int, int] = (0.0, 0, 0)
    concurrent_gc: tuple[float, int, int] = (0.0, 0, 0)
    """The cyclic garbage collector meanwhile: (CPU seconds, collections, full ones)."""
    idle: int = 0
    idle_seconds: float | None = None
    idle_cpu_ms: float | None = None
    """Client CPU per execution launched to READY."""
    idle_rss_kib: float | None = None
    idle_heap_kib: float | None = None
    idle_traced: int = 0
    stdio: int = 0
    stdio_prompts: int = 0
    runtime_cpu_s: float | None = None
    agents_cpu_s: float | None = None
    launch_runtime_cpu_s: float | None = None
    launch_agents_cpu_s: float | None = None
    note: str = ""


def _spec(executor: str, root: Path, profile: str, i: int = 0) -> LaunchSpec:
    ws = root / f"ws-{i % 16}"
    ws.mkdir(parents=True, exist_ok=True)
    return LaunchSpec(
        agent_profile_id=profile, executor_id=executor, workspace=WorkspaceRef(path=str(ws))
    )


def _percentile(samples: Sequence[float], pct: float) -> float:
    ordered = sorted(samples)
    k = max(0, min(len(ordered) - 1, round(pct / 100.0 * (len(ordered) - 1))))
    return ordered[k]


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class _GcMeter:
    """CPU the cyclic garbage collector takes while it is on (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.count = 0
        self.full = 0
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.process_time()
            return
        self.cpu += time.process_time() - self._start
        self.count += 1
        self.full += info.get("generation") == 2

    def __enter__(self) -> Self:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)

    def figures(self) -> tuple[float, int, int]:
        return (self.cpu, self.count, self.full)


def _memory_runtime() -> tuple[Runtime, MemoryExecutor]:
    executor = MemoryExecutor(lambda: MemoryTransport(auto_complete=True))
    return Runtime(profiles=[MEMORY], executors={"memory": executor}), executor


async def _launch_ready(
    rt: Runtime, root: Path, count: int, executor: str, profile: str
) -> list[str]:
    ids = [(await rt.launch(_spec(executor, root, profile, i))).id for i in range(count)]
    with anyio.fail_after(TIMEOUT):
        for execution_id in ids:
            await rt.wait_ready(execution_id)
    return ids


async def _concurrent(report: ScaleReport, root: Path, executions: int, prompts: int) -> None:
    rt, executor = _memory_runtime()
    async with rt:
        ids = await _launch_ready(rt, root, executions, "memory", MEMORY.id)
        # one execution alone (the others idle in the same Runtime)
        alone = max(50, prompts * 20)
        for i in range(10):
            await rt.prompt(ids[0], f"warm {i}")
        cpu0 = time.process_time()
        with _GcMeter() as meter:
            for i in range(alone):
                await rt.prompt(ids[0], f"alone {i}")
        report.single_cpu_us = (time.process_time() - cpu0) * 1e6 / alone
        report.single_gc = meter.figures()
        samples: list[float] = []

        async def one(execution_id: str) -> None:
            for i in range(prompts):
                t0 = time.perf_counter()
                await rt.prompt(execution_id, f"p {i}")
                samples.append((time.perf_counter() - t0) * 1000.0)

        for transport in executor.transports:
            transport.calls.clear()  # the test double records every call
        cpu0 = time.process_time()
        with _GcMeter() as meter, anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                for execution_id in ids:
                    tg.start_soon(one, execution_id)
        report.concurrent_gc = meter.figures()
        report.concurrent_cpu_us = (time.process_time() - cpu0) * 1e6 / (executions * prompts)
        report.concurrent_ms = samples
        report.executions, report.prompts_each = executions, prompts


async def _idle(report: ScaleReport, root: Path, count: int) -> None:
    rt, _ = _memory_runtime()
    async with rt:
        await _launch_ready(rt, root, 8, "memory", MEMORY.id)  # warm: caches, compiled charts
        gc.collect()
        rss0 = _rss_kib()
        wall0, cpu0 = time.perf_counter(), time.process_time()
        await _launch_ready(rt, root, count, "memory", MEMORY.id)
        report.idle_seconds = time.perf_counter() - wall0
        report.idle_cpu_ms = (time.process_time() - cpu0) * 1000.0 / count
        gc.collect()
        report.idle_rss_kib = (_rss_kib() - rss0) / count
        traced = max(1, count // 10)
        tracemalloc.start()
        try:
            gc.collect()
            base = tracemalloc.get_traced_memory()[0]
            await _launch_ready(rt, root, traced, "memory", MEMORY.id)
            gc.collect()
            report.idle_heap_kib = (tracemalloc.get_traced_memory()[0] - base) / 1024.0 / traced
        finally:
            tracemalloc.stop()
        report.idle, report.idle_traced = count, traced


async def _stdio(report: ScaleReport, root: Path, count: int, prompts: int) -> None:
    from .proc import _cpu_seconds, child_pids

    profile = reference_profile(*AGENT, "--sessions-dir", str(root / "sessions"))
    before = child_pids()
    async with Runtime(profiles=[profile]) as rt:
        cpu0 = time.process_time()
        ids = await _launch_ready(rt, root, count, "stdio", profile.id)
        agents = child_pids() - before
        report.launch_runtime_cpu_s = time.process_time() - cpu0
        report.launch_agents_cpu_s = _cpu_seconds(agents)
        agents0 = _cpu_seconds(agents)
        cpu0 = time.process_time()

        async def one(execution_id: str) -> None:
            for i in range(prompts):
                await rt.prompt(execution_id, f"p {i}")

        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                for execution_id in ids:
                    tg.start_soon(one, execution_id)
        report.runtime_cpu_s = time.process_time() - cpu0
        agents1 = _cpu_seconds(agents)
        if agents0 is not None and agents1 is not None:
            report.agents_cpu_s = agents1 - agents0
        report.stdio, report.stdio_prompts = count, prompts
        for execution_id in ids:
            await rt.stop(execution_id, "bench done")


def run(root: Path, *, executions: int, prompts: int, idle: int, stdio: int,
        stdio_prompts: int) -> ScaleReport:  # fmt: skip
    """Every scale row under trio (see the module docstring); nothing is printed."""
    report = ScaleReport()
    if executions > 0:
        anyio.run(_concurrent, report, root / "concurrent", executions, prompts, backend="trio")
    if idle > 0:
        anyio.run(_idle, report, root / "idle", idle, backend="trio")
    if stdio > 0:
        anyio.run(_stdio, report, root / "stdio", stdio, stdio_prompts, backend="trio")
    return report


def _share(runtime: float | None, agents: float | None) -> float | None:
    if runtime is None or agents is None or runtime + agents <= 0:
        return None
    return runtime / (runtime + agents)


def goals(report: ScaleReport | None, goal: type[Any]) -> list[Any]:
    """The summary lines (``goal``: bench's ``Goal``)."""
    if report is None:
        return []
    out = []
    if report.concurrent_cpu_us is not None and report.single_cpu_us:
        ms = report.concurrent_ms
        prompts = report.executions * report.prompts_each
        gc_at_once = report.concurrent_gc[0] * 1e6 / prompts
        alone = max(50, report.prompts_each * 20)
        gc_alone = report.single_gc[0] * 1e6 / alone
        detail = (
            f"{report.concurrent_cpu_us:.0f} vs {report.single_cpu_us:.0f} us; latency median "
            f"{statistics.median(ms):.1f} ms, p99 {_percentile(ms, 99):.1f} ms; the cyclic GC "
            f"{gc_at_once:.0f} vs {gc_alone:.0f} us of it ({report.concurrent_gc[1]} "
            f"collections, {report.concurrent_gc[2]} full, vs {report.single_gc[1]})"
        )
        out.append(
            goal(
                f"CPU per prompt, {report.executions:,} executions at once vs one alone",
                "trio",
                "compiled",
                report.concurrent_cpu_us / report.single_cpu_us,
                GOAL_CPU,
                "x",
                detail=detail,
            )
        )
        out.append(
            goal(
                f"latency p99, {report.executions:,} executions prompting at once",
                "trio",
                "compiled",
                _percentile(ms, 99),
                None,
                "ms",
                detail=f"median {statistics.median(ms):.1f} ms: each prompt waits for the others",
            )
        )
    if report.idle_rss_kib is not None and report.idle_seconds:
        rate = report.idle / report.idle_seconds
        detail = (
            f"Python heap {report.idle_heap_kib or 0:.1f} KiB each (tracemalloc, "
            f"{report.idle_traced:,}); launched at {rate:,.0f} per second, "
            f"{report.idle_cpu_ms or 0:.2f} ms CPU each"
        )
        out.append(
            goal(
                f"RSS per idle execution, {report.idle:,} READY (in-memory agent)",
                "trio",
                "compiled",
                report.idle_rss_kib,
                GOAL_KIB,
                "KiB",
                detail=detail,
            )
        )
        out.append(
            goal(
                f"launch rate, {report.idle:,} executions to READY (in-memory agent)",
                "trio",
                "compiled",
                rate,
                None,
                "/s",
                detail=f"{report.idle_cpu_ms or 0:.2f} ms CPU each",
            )
        )
    share = _share(report.runtime_cpu_s, report.agents_cpu_s)
    if report.stdio and share is not None:
        detail = (
            f"Runtime {report.runtime_cpu_s or 0:.2f} s, agents {report.agents_cpu_s or 0:.2f} "
            f"s; launching them: {_share(report.launch_runtime_cpu_s, report.launch_agents_cpu_s) or 0:.0%}"
        )
        out.append(
            goal(
                f"Runtime's CPU share, {report.stdio} reference agents x {report.stdio_prompts} prompts",
                "trio",
                "compiled",
                share,
                None,
                "%",
                detail=detail,
            )
        )
    return out


def format_into(table: Any, report: ScaleReport | None) -> None:
    """The section's detail lines (``table``: bench's table)."""
    if report is None:
        return
    table.section("scale: many executions in one Runtime (trio)", ["figure", "x", "goal"], 14)
    if report.concurrent_cpu_us is not None and report.single_cpu_us:
        ms = report.concurrent_ms
        n = f"{report.executions:,} executions x {report.prompts_each} prompts"
        ratio = report.concurrent_cpu_us / report.single_cpu_us
        table.row(
            "CPU per prompt, one execution alone", [f"{report.single_cpu_us:.0f} us", "1.00x", "-"]
        )
        table.row(
            f"CPU per prompt, {n} at once",
            [f"{report.concurrent_cpu_us:.0f} us", f"{ratio:.2f}x", f"<= {GOAL_CPU:.2f}x"],
        )
        table.row("  latency median, at once", [f"{statistics.median(ms):.1f} ms", "", "-"])
        table.row("  latency p99, at once", [f"{_percentile(ms, 99):.1f} ms", "", "-"])
    if report.idle_seconds:
        rate = report.idle / report.idle_seconds
        table.row(
            f"launch rate, {report.idle:,} executions to READY",
            [f"{rate:,.0f}/s", "", "-"],
            f"{report.idle_cpu_ms or 0:.2f} ms CPU each",
        )
        table.row(
            "RSS per idle execution",
            [f"{report.idle_rss_kib or 0:.1f} KiB", "", f"<= {GOAL_KIB:.0f} KiB"],
        )
        table.row(
            "Python heap per idle execution",
            [f"{report.idle_heap_kib or 0:.1f} KiB", "", "-"],
            f"tracemalloc, {report.idle_traced:,} executions",
        )
    if report.stdio:
        share = _share(report.runtime_cpu_s, report.agents_cpu_s)
        launch = _share(report.launch_runtime_cpu_s, report.launch_agents_cpu_s)
        n = f"{report.stdio} reference agents x {report.stdio_prompts} prompts"
        table.row(
            f"Runtime's CPU share, {n}",
            [f"{share:.0%}" if share is not None else "n/a", "", "-"],
            f"Runtime {report.runtime_cpu_s or 0:.2f} s, agents {report.agents_cpu_s or 0:.2f} s",
        )
        table.row(
            f"Runtime's CPU share, launching {report.stdio} to READY",
            [f"{launch:.0%}" if launch is not None else "n/a", "", "-"],
            f"Runtime {report.launch_runtime_cpu_s or 0:.2f} s, agents {report.launch_agents_cpu_s or 0:.2f} s",
        )
    if report.note:
        table.lines.append(f"  {report.note}")
