"""``make soak``: many executions, many prompts, random faults, and everything counted.

``python -m acpfsm.tools.soak [--executions 200] [--prompts 20] [--concurrency 50]
[--seed 1] [--backend trio|asyncio] [--fault-rate 0.35] [--bound 30] [--deadline 540]
[--trace FILE]`` runs one :class:`~acpfsm.runtime.Runtime` over stdio against the embedded
reference agent and prints one table. ``make soak`` runs it on trio at 200 × 20 (50 at a
time), then on asyncio at 50 × 10.

Each execution (a *slot*) sends its prompts one after the other. Every prompt carries a token
of its own (``tok…``), which the reference agent echoes in its reply, and, at
``--fault-rate``, one fault of the reference agent's vocabulary chosen at random (seeded):

==============  ==================================================  ==========================
fault           what the agent does (``[[fault:…]]``)                 expected
==============  ==================================================  ==========================
flood           5,000 reasoning chunks back to back                 end_turn, its token
garbage         a line that is not JSON                             end_turn, its token
oversized       one line over the client's 256 KiB line bound       end_turn, its token
non_utf8        a line with bytes that are not UTF-8                end_turn, its token
stall_cancel    the turn stalls; the soak cancels it                cancelled (or a typed
                                                                    error)
early_cancel    a paced turn the soak cancels as soon as it is      cancelled, or end_turn
                dispatched                                          with its token
crash           the agent exits mid-turn                            a typed error; the slot
                                                                    goes on in a new execution
fs_traversal,   hostile ``fs/*`` requests (paths outside, a link    end_turn, its token,
fs_fifo,        swapped mid-request, a FIFO, a huge sparse file,    ``0 escaped``
fs_bad_paths,   NUL/relative/long paths)
fs_huge_read,
fs_symlink_race
==============  ==================================================  ==========================

Counted: results (by stop reason), typed errors (by class), untyped errors, **lost** (no
answer within ``--bound``; those of a prompt the soak cancelled are on their own line: they
come from cancellation defects), **duplicated** (its token twice in its reply, or two
replies with one generation), **cross-talk** (another prompt's token in a reply), replies
missing their token, fs escapes, executions launched and the launches that failed (with how
the agent process ended; the slot tries another execution), **leftover** processes and zombies
(children of this process once the Runtime closed), open fds and RSS at the start, after a
warm-up and at the end, and the check-trace violations of the whole trace
(:mod:`~acpfsm.tools.check_trace`). A lost prompt is listed with its fault, its
execution and the state of each chart at the bound. The exit status is 0 when nothing was
lost (cancel-related losses apart), duplicated, crossed, left over or illegal.

``tests/runtime/test_soak.py`` runs a small soak (20 × 5, fixed seed) inside ``make test`` and
asserts the counts, never the timings.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import os
import random
import re
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import anyio

from acpfsm.adapters.acp.executor import StdioExecutor
from acpfsm.adapters.acp.process import ShutdownPolicy
from acpfsm.adapters.acp.stdio import StdioConfig
from acpfsm.adapters.errors import AcpfsmError
from acpfsm.adapters.executor import AgentLaunch
from acpfsm.adapters.transport import AgentTransport
from acpfsm.runtime.runtime import Runtime, reference_profile
from acpfsm.runtime.types import ExecutionRef, LaunchSpec, PromptResult, Timeouts, WorkspaceRef

from .bench.proc import child_pids, rss_kib, zombie_pids
from .check_trace import Violation, check_file

__all__ = [
    "FAULTS",
    "Lost",
    "SoakOptions",
    "SoakReport",
    "format_report",
    "main",
    "run_soak",
]

Backend = Literal["trio", "asyncio"]

FAULTS: dict[str, str] = {
    "flood": "[[fault:flood=5000]]",
    "garbage": "[[fault:garbage]]",
    "oversized": "[[fault:oversized=300000]]",
    "non_utf8": "[[fault:non_utf8]]",
    "stall_cancel": "[[fault:stall]]",
    "early_cancel": "[[delay:0.02]]",
    "crash": "[[fault:crash]]",
    "fs_traversal": "[[fault:fs_traversal]]",
    "fs_fifo": "[[fault:fs_fifo]]",
    "fs_bad_paths": "[[fault:fs_bad_paths]]",
    "fs_huge_read": "[[fault:fs_huge_read=1]]",
    "fs_symlink_race": "[[fault:fs_symlink_race=0.2]]",
}
"""Each fault the soak injects, as the prompt directive that asks the reference agent for it
(``early_cancel`` only paces the turn: the soak's own cancel is the fault)."""

CANCELLED_BY_SOAK = frozenset({"stall_cancel", "early_cancel"})
MAX_LINE_BYTES = 256 * 1024  # the oversized fault's line is over it
AGENT_ARGS = ("--delay", "0.001", "--log-level", "error")
TOKEN = re.compile(r"tok\d{3}[a-z]\d{3}x[0-9a-f]{6}")
ESCAPED = re.compile(r"(\d+) escaped")
WARMUP = (4, 3)  # executions × prompts before the warm measurements
LAUNCH_ATTEMPTS = 3  # a slot whose launches fail this often gives its prompts up


@dataclass(frozen=True)
class SoakOptions:
    executions: int = 200
    prompts: int = 20
    concurrency: int = 50
    seed: int = 1
    backend: Backend = "trio"
    fault_rate: float = 0.35
    bound: float = 30.0
    """How long one prompt may take before it is counted lost."""
    deadline: float = 540.0
    """The whole run's bound; what is still running then is counted unfinished."""
    trace: str = ""
    """Where the trace goes ("": a temporary file, removed after the check)."""
    warmup: bool = True


@dataclass(frozen=True)
class Lost:
    """A prompt with no answer within the bound, and where its execution's charts were."""

    slot: int
    prompt: int
    fault: str
    execution_id: str
    generation: int
    status: str
    charts: dict[str, str]

    def __str__(self) -> str:
        charts = ", ".join(f"{k}={v}" for k, v in self.charts.items() if v)
        return (
            f"slot {self.slot} prompt {self.prompt} ({self.fault or 'plain'}): execution "
            f"{self.execution_id} generation {self.generation} {self.status} [{charts}]"
        )


@dataclass
class SoakReport:
    options: SoakOptions
    prompts_sent: int = 0
    results: collections.Counter[str] = field(default_factory=collections.Counter)
    typed_errors: collections.Counter[str] = field(default_factory=collections.Counter)
    untyped_errors: collections.Counter[str] = field(default_factory=collections.Counter)
    cancel_errors: collections.Counter[str] = field(default_factory=collections.Counter)
    lost: list[Lost] = field(default_factory=list)
    lost_after_cancel: list[Lost] = field(default_factory=list)
    unfinished: int = 0
    duplicated: list[str] = field(default_factory=list)
    cross_talk: list[str] = field(default_factory=list)
    missing_token: list[str] = field(default_factory=list)
    fs_escapes: int = 0
    by_fault: dict[str, collections.Counter[str]] = field(
        default_factory=lambda: collections.defaultdict(collections.Counter)
    )
    executions_launched: int = 0
    launch_errors: collections.Counter[str] = field(default_factory=collections.Counter)
    launch_failures: list[str] = field(default_factory=list)
    error_samples: dict[str, str] = field(default_factory=dict)
    """The first message of each typed error class."""
    leftover: list[int] = field(default_factory=list)
    zombies: list[int] = field(default_factory=list)
    fds: list[int] = field(default_factory=list)
    """Open fds at the start, after the warm-up, at the end."""
    rss_kib: list[int] = field(default_factory=list)
    """RSS (KiB) at the start, after the warm-up, at the end."""
    blocks: list[int] = field(default_factory=list)
    """Python's allocated blocks (``sys.getallocatedblocks``, after a full collection) at the
    start, after the warm-up, at the end: what the runtime keeps, where RSS is also what the
    allocator kept of what was freed."""
    trimmed_rss_kib: int = -1
    """RSS (KiB) at the end once glibc's ``malloc_trim(0)`` returned the free memory it kept
    (-1: not glibc)."""
    trace_records: int = 0
    violations: list[Violation] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        """Nothing lost (cancel-related losses apart), duplicated, crossed, left over,
        escaped or illegal, and every failure typed."""
        return not (
            self.lost
            or self.unfinished
            or self.duplicated
            or self.cross_talk
            or self.missing_token
            or self.fs_escapes
            or self.untyped_errors
            or self.leftover
            or self.zombies
            or self.violations
        )


# ---------------------------------------------------------------- measurements --


def _open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return -1


def _rss_kib() -> int:
    rss = rss_kib()
    return rss if rss is not None else -1


def _blocks() -> int:
    gc.collect()
    return sys.getallocatedblocks()


def _trimmed_rss_kib() -> int:
    """RSS after glibc hands back what it keeps free (-1 where there is no malloc_trim)."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        trim = None
    if trim is None:
        return -1
    gc.collect()
    trim(0)
    return _rss_kib()


# ------------------------------------------------------------------------ the run --


class _Soak:
    def __init__(
        self,
        options: SoakOptions,
        rt: Runtime,
        executor: _SoakExecutor,
        workspace: Path,
        report: SoakReport,
    ) -> None:
        self.options = options
        self.rt = rt
        self.executor = executor
        self.workspace = workspace
        self.report = report
        self.seen_generations: dict[str, set[int]] = collections.defaultdict(set)

    def spec(self, slot: int) -> LaunchSpec:
        path = self.workspace / f"slot-{slot:03d}"
        path.mkdir(parents=True, exist_ok=True)
        return LaunchSpec(agent_profile_id="reference", workspace=WorkspaceRef(path=str(path)))

    async def launch(self, slot: int) -> ExecutionRef | None:
        report = self.report
        ref: ExecutionRef | None = None
        with anyio.move_on_after(self.options.bound):
            try:
                ref = await self.rt.launch(self.spec(slot))
                report.executions_launched += 1
                await self.rt.wait_ready(ref.id)
                return ref
            except AcpfsmError as exc:
                report.launch_errors[type(exc).__name__] += 1
                report.launch_failures.append(
                    f"slot {slot}: {type(exc).__name__}: {exc}{self.agent_exit(ref)}"
                )
                return None
        report.launch_errors["not ready within the bound"] += 1
        report.launch_failures.append(f"slot {slot}: not ready within {self.options.bound:g}s")
        return None

    def agent_exit(self, ref: ExecutionRef | None) -> str:
        """How the execution's agent process ended, and its last stderr (diagnostics)."""
        if ref is None:
            return ""
        with contextlib.suppress(AcpfsmError):
            self.rt.get_execution(ref.id)  # still there
            transport = self.executor.transports.get(ref.id)
            process = getattr(transport, "process", None)
            if process is not None:
                tail = process.stderr.tail(5).strip().replace("\n", " | ")
                return f" ({process.describe_exit()}; stderr: {tail or '-'})"
        return ""

    async def run_slot(self, slot: int, limiter: anyio.CapacityLimiter, tag: str) -> None:
        rng = random.Random(f"{self.options.seed}-{tag}-{slot}")
        async with limiter:
            remaining = list(range(self.options.prompts))
            failed_launches = 0
            while remaining:
                ref = await self.launch(slot)
                if ref is None:
                    failed_launches += 1
                    if failed_launches < LAUNCH_ATTEMPTS:
                        continue  # counted; the slot goes on in another execution
                    self.report.unfinished += len(remaining)
                    return
                try:
                    while remaining:
                        number = remaining.pop(0)
                        fault = ""
                        if rng.random() < self.options.fault_rate:
                            fault = rng.choice(sorted(FAULTS))
                        token = f"tok{slot:03d}{tag}{number:03d}x{rng.getrandbits(24):06x}"
                        await self.one_prompt(ref, slot, number, fault, token, rng)
                        if self.rt.get_execution(ref.id).status == "FAILED":
                            break  # the slot goes on in a new execution
                finally:
                    with (
                        anyio.CancelScope(shield=True),
                        anyio.move_on_after(self.options.bound),
                        contextlib.suppress(AcpfsmError),
                    ):
                        await self.rt.stop(ref.id, "soak slot done")

    async def one_prompt(
        self,
        ref: ExecutionRef,
        slot: int,
        number: int,
        fault: str,
        token: str,
        rng: random.Random,
    ) -> None:
        report = self.report
        rt = self.rt
        report.prompts_sent += 1
        counts = report.by_fault[fault or "plain"]
        counts["sent"] += 1
        text = f"soak {token} {FAULTS.get(fault, '')}".strip()
        dispatched = anyio.Event()
        result: PromptResult | None = None

        async def cancel_it() -> None:
            await dispatched.wait()
            if fault == "stall_cancel":
                await anyio.sleep(rng.uniform(0.05, 0.3))
            try:
                await rt.cancel(ref.id)
            except AcpfsmError as exc:
                report.cancel_errors[type(exc).__name__] += 1

        finished = anyio.Event()

        async def send() -> None:
            nonlocal result
            try:
                result = await rt.prompt(ref.id, text, on_dispatched=dispatched.set)
            except AcpfsmError as exc:
                report.typed_errors[type(exc).__name__] += 1
                report.error_samples.setdefault(type(exc).__name__, f"{fault or 'plain'}: {exc}")
                counts[f"error {type(exc).__name__}"] += 1
            except Exception as exc:  # noqa: BLE001 - what the soak is here to count
                report.untyped_errors[f"{type(exc).__name__}: {exc}"[:200]] += 1
                counts["untyped error"] += 1
            finally:
                dispatched.set()  # a canceller waiting for a dispatch that never came
                finished.set()

        async with anyio.create_task_group() as tg:
            if fault in CANCELLED_BY_SOAK:
                tg.start_soon(cancel_it)
            tg.start_soon(send)
            with anyio.move_on_after(self.options.bound):
                await finished.wait()
            if not finished.is_set():  # where its charts are at the bound, then abandon it
                self.record_lost(ref, slot, number, fault)
                counts["lost"] += 1
                tg.cancel_scope.cancel()
                return
        if result is None:
            return
        report.results[result.stop_reason] += 1
        counts[result.stop_reason] += 1
        self.check_reply(ref, fault, token, result)

    def record_lost(self, ref: ExecutionRef, slot: int, number: int, fault: str) -> None:
        status: str
        try:
            snap = self.rt.get_execution(ref.id)
            status, charts, generation = snap.status, dict(snap.charts), snap.prompt_generation
        except AcpfsmError as exc:
            status, charts, generation = f"({exc})", {}, 0
        lost = Lost(slot, number, fault, ref.id, generation, status, charts)
        if fault in CANCELLED_BY_SOAK:
            self.report.lost_after_cancel.append(lost)
        else:
            self.report.lost.append(lost)

    def check_reply(self, ref: ExecutionRef, fault: str, token: str, result: PromptResult) -> None:
        report = self.report
        found = TOKEN.findall(result.agent_message)
        where = f"{ref.id} generation {result.generation} ({fault or 'plain'})"
        others = sorted({t for t in found if t != token})
        if others:
            report.cross_talk.append(f"{where}: {token} got {', '.join(others)}")
        if found.count(token) > 1:
            report.duplicated.append(f"{where}: {token} {found.count(token)} times")
        generations = self.seen_generations[ref.id]
        if result.generation in generations:
            report.duplicated.append(f"{where}: a second reply for generation {result.generation}")
        generations.add(result.generation)
        if result.stop_reason == "end_turn" and token not in found:
            report.missing_token.append(f"{where}: {result.agent_message[:120]!r}")
        if fault.startswith("fs_"):
            report.fs_escapes += sum(int(n) for n in ESCAPED.findall(result.agent_message))


class _SoakExecutor(StdioExecutor):
    """The stdio executor, keeping each open execution's transport: how its agent process
    ended and its stderr tail, for the report (:meth:`_Soak.agent_exit`)."""

    def __init__(self) -> None:
        super().__init__(
            config=StdioConfig(max_line_bytes=MAX_LINE_BYTES, cancel_timeout=3.0),
            shutdown=ShutdownPolicy(stdin_close_wait=2.0, term_wait=2.0, kill_wait=2.0),
        )
        self.transports: dict[str, AgentTransport] = {}

    def open(self, launch: AgentLaunch) -> AbstractAsyncContextManager[AgentTransport]:
        return self._kept(launch, super().open(launch))

    @contextlib.asynccontextmanager
    async def _kept(
        self, launch: AgentLaunch, opening: AbstractAsyncContextManager[AgentTransport]
    ) -> AsyncIterator[AgentTransport]:
        async with opening as transport:
            self.transports[launch.execution_id] = transport
            try:
                yield transport
            finally:
                self.transports.pop(launch.execution_id, None)


def _runtime(trace: str, executor: _SoakExecutor) -> Runtime:
    return Runtime(
        profiles=[reference_profile(*AGENT_ARGS)],
        executors={"stdio": executor},
        timeouts=Timeouts(),
        trace_path=trace or None,
    )


async def _phase(
    options: SoakOptions, report: SoakReport, workspace: Path, trace: str, tag: str
) -> None:
    executor = _SoakExecutor()
    async with _runtime(trace, executor) as rt:
        soak = _Soak(options, rt, executor, workspace, report)
        limiter = anyio.CapacityLimiter(options.concurrency)
        with anyio.move_on_after(options.deadline) as deadline:
            async with anyio.create_task_group() as tg:
                for slot in range(options.executions):
                    tg.start_soon(soak.run_slot, slot, limiter, tag)
        if deadline.cancelled_caught:
            sent = report.prompts_sent
            report.unfinished += options.executions * options.prompts - sent


async def run_soak(options: SoakOptions) -> SoakReport:
    """Run the soak on the current event loop (see the module docstring)."""
    report = SoakReport(options)
    started = time.monotonic()
    report.fds.append(_open_fds())
    report.rss_kib.append(_rss_kib())
    report.blocks.append(_blocks())
    with tempfile.TemporaryDirectory(prefix="acpfsm-soak-") as tmp:
        root = Path(tmp)
        if options.warmup:
            warm = SoakOptions(
                executions=WARMUP[0],
                prompts=WARMUP[1],
                concurrency=WARMUP[0],
                seed=options.seed,
                fault_rate=0.0,
                bound=options.bound,
                deadline=options.deadline,
            )
            await _phase(warm, SoakReport(warm), root / "warmup", "", "w")
        report.fds.append(_open_fds())
        report.rss_kib.append(_rss_kib())
        report.blocks.append(_blocks())
        trace = options.trace or str(root / "trace.jsonl")
        (root / "ws").mkdir()
        await _phase(options, report, root / "ws", trace, "s")
        await anyio.sleep(0.2)  # let the last reaped children leave /proc
        report.leftover = sorted(child_pids())
        report.zombies = sorted(zombie_pids())
        report.fds.append(_open_fds())
        report.rss_kib.append(_rss_kib())
        report.blocks.append(_blocks())
        report.trimmed_rss_kib = _trimmed_rss_kib()
        checked = await anyio.to_thread.run_sync(check_file, trace)
        report.trace_records = checked.records
        report.violations = list(checked.violations)
    report.seconds = time.monotonic() - started
    return report


# ------------------------------------------------------------------------ output --


def _counter(counter: collections.Counter[str]) -> str:
    return ", ".join(f"{name} {n}" for name, n in counter.most_common()) or "-"


def format_report(report: SoakReport) -> str:
    o = report.options
    typed = sum(report.typed_errors.values())
    mib = ["?" if k < 0 else f"{k / 1024:.0f}" for k in report.rss_kib]
    rows: list[tuple[str, str, str]] = [
        ("prompts sent", str(report.prompts_sent), ""),
        ("  results", str(sum(report.results.values())), _counter(report.results)),
        ("  typed errors", str(typed), _counter(report.typed_errors)),
        (
            "  untyped errors",
            str(sum(report.untyped_errors.values())),
            _counter(report.untyped_errors),
        ),
        ("  lost (no answer within the bound)", str(len(report.lost)), f"bound {o.bound:g} s"),
        (
            "  lost after the soak's cancel",
            str(len(report.lost_after_cancel)),
            "cancellation defects",
        ),
        ("  unfinished at the deadline", str(report.unfinished), f"deadline {o.deadline:g} s"),
        ("  duplicated", str(len(report.duplicated)), ""),
        ("  cross-talk", str(len(report.cross_talk)), ""),
        ("  reply without its token", str(len(report.missing_token)), ""),
        ("  fs escapes", str(report.fs_escapes), ""),
        (
            "cancel calls that raised",
            str(sum(report.cancel_errors.values())),
            _counter(report.cancel_errors),
        ),
        ("executions launched", str(report.executions_launched), _counter(report.launch_errors)),
        ("leftover processes", str(len(report.leftover)), " ".join(map(str, report.leftover))),
        ("zombies", str(len(report.zombies)), " ".join(map(str, report.zombies))),
        ("open fds (start / warm / end)", " / ".join(map(str, report.fds)), ""),
        ("RSS MiB (start / warm / end)", " / ".join(mib), ""),
        (
            "  RSS MiB at the end after malloc_trim",
            "?" if report.trimmed_rss_kib < 0 else f"{report.trimmed_rss_kib / 1024:.0f}",
            "the rest of the end's RSS is what the allocator kept, free",
        ),
        (
            "Python blocks in use (start / warm / end)",
            " / ".join(f"{b:,}" for b in report.blocks),
            "what the runtime keeps",
        ),
        ("trace records", str(report.trace_records), ""),
        ("check-trace violations", str(len(report.violations)), ""),
        ("wall time", f"{report.seconds:.0f} s", ""),
    ]
    width = max(len(r[0]) for r in rows)
    title = (
        f"acpfsm soak: {o.backend}, {o.executions} executions x {o.prompts} prompts, "
        f"{o.concurrency} at a time, seed {o.seed}, fault rate {o.fault_rate:g}"
    )
    lines = [
        title,
        "",
        *(f"{name:<{width}}  {value:>9}  {note}".rstrip() for name, value, note in rows),
        "",
        "by fault:",
    ]
    for fault in sorted(report.by_fault):
        counts = dict(report.by_fault[fault])
        sent = counts.pop("sent", 0)
        detail = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        lines.append(f"  {fault:<16} {sent:>5}  {detail}")
    problems = [
        ("lost", [str(x) for x in report.lost]),
        ("lost after the soak's cancel", [str(x) for x in report.lost_after_cancel]),
        (
            "typed errors (the first of each class)",
            [f"{k}: {v}" for k, v in report.error_samples.items()],
        ),
        ("launch failures", report.launch_failures),
        ("duplicated", report.duplicated),
        ("cross-talk", report.cross_talk),
        ("reply without its token", report.missing_token),
        ("violations", [f"line {v.line}: {v.kind}: {v.message}" for v in report.violations]),
    ]
    for title, items in problems:
        if items:
            lines += ["", f"{title} (first 10 of {len(items)}):", *(f"  {x}" for x in items[:10])]
    lines += ["", "clean" if report.clean else "NOT CLEAN"]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    defaults = SoakOptions()
    parser = argparse.ArgumentParser(
        prog="python -m acpfsm.tools.soak",
        description="Many executions, many prompts, random faults; prints what was counted.",
    )
    parser.add_argument("--executions", type=int, default=defaults.executions, metavar="N")
    parser.add_argument("--prompts", type=int, default=defaults.prompts, metavar="N")
    parser.add_argument("--concurrency", type=int, default=defaults.concurrency, metavar="N")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--backend", choices=("trio", "asyncio"), default=defaults.backend)
    parser.add_argument("--fault-rate", type=float, default=defaults.fault_rate, metavar="P")
    parser.add_argument("--bound", type=float, default=defaults.bound, metavar="SECONDS")
    parser.add_argument("--deadline", type=float, default=defaults.deadline, metavar="SECONDS")
    parser.add_argument("--trace", default="", metavar="FILE", help="keep the trace there")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    options = SoakOptions(
        executions=args.executions,
        prompts=args.prompts,
        concurrency=args.concurrency,
        seed=args.seed,
        backend=args.backend,
        fault_rate=args.fault_rate,
        bound=args.bound,
        deadline=args.deadline,
        trace=args.trace,
    )
    report = anyio.run(run_soak, options, backend=options.backend)
    print(format_report(report), flush=True)
    return 0 if report.clean else 1


if __name__ == "__main__":
    sys.exit(main())
