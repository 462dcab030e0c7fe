"""``make bench``: the run over every section, and its command line."""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import anyio
import anyio.lowlevel

from . import durable as bench_durable
from . import nats as bench_nats
from . import scale as bench_scale
from . import soak as bench_soak
from .conform import bench_conform
from .engine import (
    bench_heap,
    bench_import,
    bench_lifecycle,
    bench_memory,
    bench_primitives,
    bench_transitions,
)
from .paths import bench_breakdown, bench_launch, bench_round_trips, bench_streaming
from .proc import _GcWatch
from .rows import QUICK, BenchOptions, BenchReport
from .table import format_report

# ---------------------------------------------------------------- the run --


async def _per_backend(opts: BenchOptions, root: Path, backend: str, report: BenchReport) -> None:
    """The sections that run under each backend."""
    with _GcWatch() as gcw:
        mark = time.perf_counter()
        if opts.prompts > 0:
            report.latency += await bench_round_trips(opts, root, backend, gcw)
        report.section_seconds[f"round trips {backend}"] = time.perf_counter() - mark
    mark = time.perf_counter()
    if opts.stream_turns > 0:
        sampled = report.stream_breakdown if opts.profile_prompts > 0 else None
        report.streaming += await bench_streaming(opts, root, backend, sampled)
    if opts.launches > 0:
        report.launch += await bench_launch(opts, root, backend)
    if opts.primitives > 0:
        report.primitives += await bench_primitives(opts.primitives, backend)
    report.section_seconds[f"stream+launch {backend}"] = time.perf_counter() - mark
    mark = time.perf_counter()
    if opts.profile_prompts > 0:
        report.breakdown += await bench_breakdown(opts, root, backend)
    report.section_seconds[f"profile {backend}"] = time.perf_counter() - mark


async def _common(opts: BenchOptions, root: Path, report: BenchReport) -> None:
    """The sections that run once (under trio)."""
    mark = time.perf_counter()
    if opts.heap_prompts > 0:
        report.heap = await bench_heap(opts, root)
    report.section_seconds["heap"] = time.perf_counter() - mark
    mark = time.perf_counter()
    report.rates = bench_transitions(opts)
    report.section_seconds["transitions"] = time.perf_counter() - mark
    mark = time.perf_counter()
    if opts.lifecycle_prompts > 0:
        report.lifecycle = await bench_lifecycle(opts, root)
    report.section_seconds["lifecycle"] = time.perf_counter() - mark
    mark = time.perf_counter()
    report.memory = await bench_memory(opts, root)
    report.section_seconds["idle memory"] = time.perf_counter() - mark


def run_bench(opts: BenchOptions) -> BenchReport:
    """Run every section, each backend in its own event loop; returns the numbers (nothing
    is printed)."""
    started = time.perf_counter()
    report = BenchReport(opts)
    with tempfile.TemporaryDirectory(prefix="acpfsm-bench-") as tmp:
        root = Path(tmp)
        for backend in opts.backends:
            anyio.run(_per_backend, opts, root, backend, report, backend=backend)
        anyio.run(_common, opts, root, report, backend="trio")
        mark = time.perf_counter()
        if opts.durable_prompts or opts.recover_executions:
            report.durable = bench_durable.run(
                root,
                backends=opts.backends,
                prompts=opts.durable_prompts,
                executions=opts.recover_executions,
            )
        report.section_seconds["durable"] = time.perf_counter() - mark
        mark = time.perf_counter()
        if opts.nats_prompts or opts.nats_events or opts.nats_takeover:
            report.nats = bench_nats.run(
                root,
                prompts=opts.nats_prompts,
                events=opts.nats_events,
                takeover=opts.nats_takeover,
                lease=max(opts.nats_lease, 1),
            )
        report.section_seconds["nats"] = time.perf_counter() - mark
        mark = time.perf_counter()
        if opts.scale_executions or opts.scale_idle or opts.scale_stdio:
            report.scale = bench_scale.run(
                root,
                executions=opts.scale_executions,
                prompts=max(1, opts.scale_prompts),
                idle=opts.scale_idle,
                stdio=opts.scale_stdio,
                stdio_prompts=max(1, opts.scale_stdio_prompts),
            )
        report.section_seconds["scale"] = time.perf_counter() - mark
    mark = time.perf_counter()
    if opts.soak_executions and opts.soak_prompts:
        report.soak = bench_soak.run(opts.soak_executions, opts.soak_prompts, opts.soak_concurrency)
    report.section_seconds["soak"] = time.perf_counter() - mark
    mark = time.perf_counter()
    if opts.imports > 0:
        report.imports = bench_import(opts.imports)
    report.section_seconds["imports"] = time.perf_counter() - mark
    mark = time.perf_counter()
    if opts.conform_runs > 0:
        report.conform = bench_conform(opts.conform_runs)
    report.section_seconds["conform"] = time.perf_counter() - mark
    report.seconds = time.perf_counter() - started
    return report


def _positive(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


_COUNTS: dict[str, str] = {
    "prompts": "timed prompts per round-trip path (p99 needs at least 2,000)",
    "rounds": "interleaved rounds the round-trip prompts are split into",
    "warmup": "untimed prompts per path first",
    "chunks": "notifications per streamed turn",
    "stream_turns": "streamed turns per path",
    "launches": "launches to READY per path",
    "heap_prompts": "prompts measured for the heap growth, once the bounded stores are full",
    "imports": "fresh processes timing the import",
    "lifecycle_prompts": "prompts per engine over the in-memory transport",
    "primitives": "calls per anyio primitive per backend (the floor)",
    "cycles": "cycles per chart-transition row",
    "idle": "idle executions over the in-memory transport",
    "idle_stdio": "idle executions (and bare transports) against real reference agents",
    "profile_prompts": "prompts per path under the CPU profile of the runtime's extra",
    "conform_runs": "conform runs on the reference agent with and without the schema check",
    "durable_prompts": "prompts per path without a store, with SQLite, with PostgreSQL",
    "recover_executions": "stored executions recovered at start-up, per store",
    "nats_prompts": "prompts per path in process and through acpfsm serve over NATS",
    "nats_events": "events of one execution read back from the NATS bus, per subscriber count",
    "nats_takeover": "executions taken over from a killed acpfsm serve --pool member",
    "nats_lease": "the pool's lease in seconds in that take-over (acpfsm serve --lease)",
    "scale_executions": "executions in one Runtime prompting at once (in-memory agent)",
    "scale_prompts": "prompts each of them sends",
    "scale_idle": "idle executions launched to READY in one Runtime (in-memory agent)",
    "scale_stdio": "executions over real reference agents in one Runtime",
    "scale_stdio_prompts": "prompts each of those sends",
    "soak_executions": "executions of the trio soak whose memory is measured (make soak's)",
    "soak_prompts": "prompts each soak execution sends",
    "soak_concurrency": "soak executions at a time",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m acpfsm.tools.bench",
        description="The runtime's cost beside the bare stdio transport and the ACP SDK "
        "client, each figure with its goal: prompt latency (p99, GC pauses) and CPU, CPU per "
        "streamed notification, launch to READY, heap growth per prompt, import time, chart "
        "transitions, lifecycle CPU on both engines, memory per idle execution.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="small counts (a smoke run for CI, a minute)"
    )
    for name, text in _COUNTS.items():
        parser.add_argument(
            f"--{name.replace('_', '-')}", type=_positive, default=None, metavar="N", help=text
        )
    parser.add_argument("--backend", choices=("both", "trio", "asyncio"), default="both")
    parser.add_argument("--no-sdk", action="store_true", help="skip the ACP SDK client row")
    return parser


def options_from(args: argparse.Namespace) -> BenchOptions:
    opts = QUICK if args.quick else BenchOptions()
    counts = {name: getattr(args, name) for name in _COUNTS if getattr(args, name) is not None}
    backends = ("trio", "asyncio") if args.backend == "both" else (args.backend,)
    return replace(opts, backends=backends, sdk=not args.no_sdk, **counts)


def main(argv: Sequence[str] | None = None) -> int:
    opts = options_from(build_parser().parse_args(argv))
    try:
        report = run_bench(opts)
    except KeyboardInterrupt:
        return 130
    print(format_report(report), flush=True)
    return 0
