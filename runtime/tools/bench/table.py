"""``make bench``: the summary of goals and each section's table."""

from __future__ import annotations

import math
import os
import platform
import statistics
from collections.abc import Sequence
from typing import ClassVar

from . import durable as bench_durable
from . import nats as bench_nats
from . import scale as bench_scale
from . import soak as bench_soak
from .conform import CONFORM_FIGURE, CONFORM_GOAL
from .engine import (
    DEPENDENCIES,
    GOAL_IMPORT_MS,
    GOAL_IMPORT_OWN_MS,
    IMPORT_NOTE,
    PRIMITIVE_DEPTH,
    WATCHED,
)
from .paths import LAUNCH_BARE, LAUNCH_RUNTIME, STREAM_BARE, STREAM_RUNTIME
from .rows import (
    AGENT_ARGS,
    AGENT_MODULE,
    BARE_ROW,
    COMPILED,
    GOAL_CPU,
    GOAL_LIFECYCLE,
    GOAL_MEDIAN,
    GOAL_SDK,
    GOAL_STREAM,
    GOAL_TAIL,
    RUNTIME_ROW,
    SDK_ROW,
    BenchReport,
    Goal,
    ShareRow,
)

# ---------------------------------------------------------------- the table --


def _num(value: float | None, fmt: str = "{:.3f}") -> str:
    return "n/a" if value is None or math.isnan(value) else fmt.format(value)


def _div(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base <= 0 or math.isnan(value) or math.isnan(base):
        return None
    return value / base


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _ratio(value: float | None, base: float | None) -> str:
    ratio = _div(value, base)
    if ratio is None:
        return "n/a"
    return f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.3f}x"


def _extras(rows: Sequence[ShareRow], backend: str, least: float, fmt: str = "{:.0f}") -> str:
    """The profile's largest extras of ``backend`` (what stands in the way of a CPU goal)."""
    shares = sorted(
        (r for r in rows if r.backend == backend and r.extra_us >= least), key=lambda r: -r.extra_us
    )[:4]
    if not shares:
        return ""
    parts = ", ".join(f"{r.name.split(' (')[0]} {fmt.format(r.extra_us)} us" for r in shares)
    return "; extra by the profile: " + parts


def goals(report: BenchReport) -> list[Goal]:
    """The summary: each figure of the issue's table with its goal."""
    out: list[Goal] = []

    def ratio(figure: str, backend: str, value: float | None, base: float | None, limit: float,
              detail: str) -> None:  # fmt: skip
        out.append(Goal(figure, backend, COMPILED, _div(value, base), limit, "x", detail=detail))

    for backend in report.options.backends:
        bare = report.row(report.latency, BARE_ROW, backend)
        rt = report.row(report.latency, RUNTIME_ROW, backend)
        if bare is None or rt is None:
            continue
        # the runtime's extra CPU is on the round trip's path: the median carries it
        extra = (rt.client_cpu_ms or 0.0) - (bare.client_cpu_ms or 0.0)
        on_path = f"; the runtime's extra CPU per prompt {extra:.3f} ms is on the path"
        versus = f"{_num(rt.median_ms)} vs {_num(bare.median_ms)} ms" + on_path
        ratio(f"{RUNTIME_ROW} median vs bare StdioTransport", backend, rt.median_ms,
              bare.median_ms, GOAL_MEDIAN, versus)  # fmt: skip
        sdk = report.row(report.latency, SDK_ROW, backend)
        if sdk is not None and sdk.samples_ms:
            versus = (
                f"{_num(rt.median_ms)} vs {_num(sdk.median_ms)} ms; the goal needs "
                f"{_num((sdk.median_ms or 0.0) * GOAL_SDK)} ms: the bare transport's "
                f"{_num(bare.median_ms)} ms plus at most "
                f"{_num((sdk.median_ms or 0.0) * GOAL_SDK - (bare.median_ms or 0.0))} ms" + on_path
            )
            ratio(f"{RUNTIME_ROW} median vs official ACP SDK client", backend, rt.median_ms,
                  sdk.median_ms, GOAL_SDK, versus)  # fmt: skip
        versus = f"{_num(rt.client_cpu_ms)} vs {_num(bare.client_cpu_ms)} ms"
        others = [b for b in report.options.backends if b != backend]
        for other in others:  # the same code on the other backend: what the backend adds
            o_bare = report.row(report.latency, BARE_ROW, other)
            o_rt = report.row(report.latency, RUNTIME_ROW, other)
            if o_bare is not None and o_rt is not None:
                versus += f"; on {other} {_ratio(o_rt.client_cpu_ms, o_bare.client_cpu_ms)}"
        versus += _extras(report.breakdown, backend, 5.0)  # what stands in the way
        ratio("client CPU per prompt vs bare", backend, rt.client_cpu_ms, bare.client_cpu_ms,
              GOAL_CPU, versus)  # fmt: skip
        p99 = (
            f"p99 {_num(rt.p99_ms)} ms over {len(rt.samples_ms)} prompts; the bare "
            f"transport's own {_ratio(bare.p99_ms, bare.median_ms)}; this thread's CPU per "
            f"prompt p99/median {_num(rt.cpu_tail, '{:.2f}x')} (bare "
            f"{_num(bare.cpu_tail, '{:.2f}x')}): the rest of the tail is waiting"
        )
        ratio(f"{RUNTIME_ROW} p99 vs median", backend, rt.p99_ms, rt.median_ms, GOAL_TAIL, p99)
        gc_max = rt.gc_max_ms if rt.samples_ms else None
        out.append(Goal(f"longest GC pause during {RUNTIME_ROW}", backend, COMPILED, gc_max,
                        10.0, "ms", detail=rt.gc_detail))  # fmt: skip
    pairs = (
        ("CPU per streamed notification vs bare (in-memory)", report.streaming, STREAM_BARE,
         STREAM_RUNTIME, GOAL_STREAM, 1000.0, "us"),
        ("launch -> READY client CPU vs initialize + session/new by hand", report.launch,
         LAUNCH_BARE, LAUNCH_RUNTIME, 2.0, 1.0, "ms"),
    )  # fmt: skip
    for figure, rows, base_name, name, limit, scale, unit in pairs:
        for backend in report.options.backends:
            base, row = report.row(rows, base_name, backend), report.row(rows, name, backend)
            if base is not None and row is not None:
                versus = f"{row.per_item_ms * scale:.2f} vs {base.per_item_ms * scale:.2f} {unit}"
                if rows is report.streaming:
                    versus += _extras(report.stream_breakdown, backend, 0.05, "{:.2f}")
                ratio(figure, backend, row.per_item_ms, base.per_item_ms, limit, versus)
    if report.heap is not None:
        heap = report.heap
        detail = f"{heap.prompts} prompts after {heap.filled_after} filled them"
        out.append(Goal("heap growth per prompt, bounded stores full", "trio", COMPILED,
                        heap.per_prompt, 512.0, "B", strict=True, detail=detail))  # fmt: skip
    if report.imports is not None:
        imp = report.imports
        detail = (
            f"wall {imp.median_ms:.1f} ms; {len(imp.samples_ms)} fresh processes; loaded of "
            f"{', '.join(WATCHED)}: {', '.join(imp.loaded) or 'none'}"
            f"; the dependencies alone ({DEPENDENCIES}) {imp.floor_median_ms:.1f} ms"
        )
        out.append(Goal("import acpfsm.runtime (stdio-only), CPU median", "-", COMPILED,
                        imp.cpu_median_ms, GOAL_IMPORT_MS, "ms", strict=False,
                        detail=detail))  # fmt: skip
        out.append(Goal("import acpfsm.runtime: acpfsm's own part (beyond the floor)", "-",
                        COMPILED, imp.own_median_ms, GOAL_IMPORT_OWN_MS, "ms", strict=False,
                        detail=IMPORT_NOTE))  # fmt: skip
    if report.conform is not None:
        row = report.conform
        detail = (
            f"median {_num(_median(row.with_ms), '{:.0f}')} vs "
            f"{_num(_median(row.without_ms), '{:.0f}')} ms over {row.runs} runs each; client "
            f"CPU {_ratio(_median(row.with_cpu_ms), _median(row.without_cpu_ms))}; "
            f"{row.messages}"
        )
        out.append(Goal(CONFORM_FIGURE, "trio", COMPILED, row.ratio, CONFORM_GOAL, "x",
                        strict=True, detail=detail))  # fmt: skip
    if len(report.lifecycle) == 2:
        ref, comp = report.lifecycle
        detail = f"{_num(comp.client_cpu_ms)} vs {_num(ref.client_cpu_ms)} ms"
        out.append(Goal("lifecycle CPU per prompt, compiled vs reference engine", "trio", "both",
                        _div(comp.client_cpu_ms, ref.client_cpu_ms), 0.25, "x",
                        detail=detail))  # fmt: skip
    out.extend(bench_durable.goals(report.durable, Goal))
    out.extend(bench_nats.goals(report.nats, Goal))
    out.extend(bench_scale.goals(report.scale, Goal))
    out.extend(bench_soak.goals(report.soak, Goal))
    return out


class _Table:
    WIDTH: ClassVar[int] = 64

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.width = 12

    def section(self, title: str, columns: Sequence[str], width: int = 12) -> None:
        self.width = width
        self.lines.append("")
        self.lines.append(f"{title:<{self.WIDTH}}" + "".join(f"{c:>{width}}" for c in columns))
        self.lines.append("-" * (self.WIDTH + width * len(columns)))

    def row(self, name: str, cells: Sequence[str], note: str = "") -> None:
        label = f"  {name}"
        tail = f"  ({note})" if note else ""
        self.lines.append(
            f"{label:<{self.WIDTH}}" + "".join(f"{c:>{self.width}}" for c in cells) + tail
        )


def format_report(report: BenchReport) -> str:
    opts = report.options
    table = _Table()
    mode = " (--quick)" if opts.quick else ""
    table.lines.append(
        f"acpfsm bench{mode}: Python {platform.python_version()}, "
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"backends {', '.join(opts.backends)}"
    )
    table.lines.append(
        f"reference agent: python -m {AGENT_MODULE} {' '.join(AGENT_ARGS)}; "
        f"{opts.prompts} prompts per path in {opts.rounds} interleaved rounds after "
        f"{opts.warmup} warm-up"
    )

    summary = goals(report)
    if summary:
        table.section("goals", ["backend", "engine", "measured", "goal", "met"])
        for g in summary:
            table.row(g.figure, [g.backend, g.engine, g.measured, g.goal, g.met], g.detail)

    if report.latency:
        table.section(
            "prompt round trip (reference agent over stdio)",
            [
                "backend",
                "median ms",
                "p95 ms",
                "p99 ms",
                "client CPU",
                "agent CPU",
                "GC max ms",
                "x median",
                "x CPU",
            ],
        )
        for row in report.latency:
            base = report.row(report.latency, BARE_ROW, row.backend)
            table.row(
                row.name,
                [
                    row.backend,
                    _num(row.median_ms),
                    _num(row.p95_ms),
                    _num(row.p99_ms),
                    _num(row.client_cpu_ms),
                    _num(row.agent_cpu_ms),
                    _num(row.gc_max_ms if row.samples_ms else None, "{:.1f}"),
                    _ratio(row.median_ms, base.median_ms if base else None),
                    _ratio(row.client_cpu_ms, base.client_cpu_ms if base else None),
                ],
                row.note or (f"{row.gc_count} GCs" if row.samples_ms else ""),
            )

    for rows, base_name, title, unit, scale, wall in (
        (report.streaming, STREAM_BARE,
         f"CPU per streamed notification, in-memory ({opts.chunks} per turn)", "us each", 1000.0,
         False),
        (report.launch, LAUNCH_BARE, "launch -> READY (reference agent over stdio)", "CPU ms",
         1.0, True),
    ):  # fmt: skip
        if not rows:
            continue
        table.section(title, ["backend", "count", unit, *(["wall ms"] if wall else []), "x bare"])
        for cost in rows:
            base_c = report.row(rows, base_name, cost.backend)
            cells = [cost.backend, str(cost.items), _num(cost.per_item_ms * scale, "{:.2f}")]
            if wall:
                cells.append(_num(cost.wall_ms, "{:.1f}"))
            table.row(
                cost.name,
                [*cells, _ratio(cost.per_item_ms, base_c.per_item_ms if base_c else None)],
            )

    if report.primitives:
        table.section(
            f"anyio's primitives, CPU per call inside {PRIMITIVE_DEPTH} cancel scopes (the floor)",
            ["backend", "calls", "us each", "x trio"],
        )
        for prim in report.primitives:
            trio_row = report.row(report.primitives, prim.name, "trio")
            table.row(
                prim.name,
                [
                    prim.backend,
                    str(prim.calls),
                    _num(prim.micros, "{:.2f}"),
                    _ratio(prim.micros, trio_row.micros if trio_row else None),
                ],
            )

    if report.heap is not None:
        heap = report.heap
        table.section("heap growth per prompt (tracemalloc)", ["prompts", "grown KiB", "B each"])
        table.row(
            "Runtime over the in-memory agent, after the bounded stores filled",
            [str(heap.prompts), f"{heap.grown_bytes / 1024:,.1f}", f"{round(heap.per_prompt):,}"],
            heap.note
            or f"filled after {heap.filled_after} prompts; {heap.trace_records} trace records",
        )

    if report.imports is not None:
        imp = report.imports
        table.section(
            "import acpfsm.runtime (fresh processes)", ["count", "median ms", "min ms", "CPU ms"]
        )
        table.row(
            "import time",
            [
                str(len(imp.samples_ms)),
                f"{imp.median_ms:.1f}",
                f"{min(imp.samples_ms):.1f}",
                f"{imp.cpu_median_ms:.1f}",
            ],
            "httpx loaded" if imp.httpx_loaded else "httpx not loaded",
        )
        if imp.floor_cpu_ms:
            table.row(
                f"the dependencies alone ({DEPENDENCIES}): the floor",
                [str(len(imp.floor_cpu_ms)), "", "", f"{imp.floor_median_ms:.1f}"],
                f"acpfsm's own: {imp.cpu_median_ms - imp.floor_median_ms:.1f} ms",
            )
        if imp.after_asyncio_cpu_ms:
            table.row(
                "import time in an asyncio app (asyncio imported first)",
                [
                    str(len(imp.after_asyncio_cpu_ms)),
                    "",
                    "",
                    f"{statistics.median(imp.after_asyncio_cpu_ms):.1f}",
                ],
            )
        for package, ms in imp.top:
            table.row(f"  {package}", ["", f"{ms:.1f}", "", ""], "self time, one -X importtime")

    if report.rates:
        table.section(
            f"chart transitions ({opts.cycles} cycles)",
            ["per second", "us each", "x cost", "goal"],
            width=14,
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
            f"lifecycle CPU per prompt, in-memory transport ({opts.lifecycle_prompts} prompts)",
            ["median ms", "CPU ms", "x CPU", "goal"],
            width=14,
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
        table.section("memory per idle execution", ["KiB each", "count", "x bare"], width=14)
        base_mem = report.memory[0].bytes_per_execution
        for mem in report.memory:
            kib = None if mem.bytes_per_execution is None else mem.bytes_per_execution / 1024
            table.row(
                mem.name,
                [_num(kib, "{:,.1f}"), str(mem.count), _ratio(mem.bytes_per_execution, base_mem)],
                mem.note,
            )

    if report.breakdown:
        table.section(
            f"the runtime's extra CPU per prompt by component (CPU profile, "
            f"{opts.profile_prompts} prompts per path)",
            ["backend", "bare us", "runtime us", "extra us", "of extra"],
        )
        for backend in opts.backends:
            shares = [r for r in report.breakdown if r.backend == backend]
            extra = sum(r.extra_us for r in shares)
            for share in sorted(shares, key=lambda r: -r.extra_us):
                table.row(
                    share.name,
                    [
                        backend,
                        _num(share.bare_us, "{:.0f}"),
                        _num(share.runtime_us, "{:.0f}"),
                        _num(share.extra_us, "{:.0f}"),
                        f"{share.extra_us / extra:.0%}" if extra > 0 else "n/a",
                    ],
                )

    bench_durable.format_into(table, report.durable)
    bench_nats.format_into(table, report.nats)
    bench_scale.format_into(table, report.scale)
    bench_soak.format_into(table, report.soak)

    table.lines.append("")
    parts = ", ".join(f"{k} {v:.1f} s" for k, v in report.section_seconds.items())
    table.lines.append(f"total {report.seconds:.1f} s ({parts})")
    return "\n".join(table.lines)
