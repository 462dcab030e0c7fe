"""``make bench`` sections 4-7: heap per prompt, import time, chart transitions, lifecycle CPU
per prompt, anyio's primitives, memory per idle execution."""

from __future__ import annotations

import gc
import os
import re
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
from statemachine import State, StateChart

from acpfsm.adapters.acp.stdio import open_stdio_transport
from acpfsm.adapters.memory import MemoryTransport
from acpfsm.runtime.events import EventsTruncated
from acpfsm.runtime.runtime import Runtime, reference_profile
from acpfsm.runtime.trace import Trace
from acpfsm.runtime.types import LaunchSpec, Retention
from acpfsm.statecharts import EngineName, PromptGeneration, TransitionObserver
from acpfsm.statecharts import Execution as ExecutionChart
from acpfsm.testing.memory import MemoryExecutor

from .peer import MemoryAgentExecutor
from .proc import MEMORY_AGENT, _agent_argv, _CpuMeter, _memory_kib, _prompt_text, _spec, child_pids
from .rows import (
    AGENT_ARGS,
    GOAL_CYCLE,
    GOAL_TRANSITION,
    LIFECYCLE_ROW,
    QUICK_RETENTION,
    SETUP_TIMEOUT,
    BenchOptions,
    HeapRow,
    ImportRow,
    LatencyRow,
    MemoryRow,
    PrimitiveRow,
    RateRow,
)

# --------------------------------------------------------------- 4. heap per prompt --


async def bench_heap(opts: BenchOptions, root: Path) -> HeapRow:
    """tracemalloc growth per prompt once the Runtime's bounded stores are full. Tracing
    starts before the first prompt, so what the stores drop (allocated while traced) counts
    against what they take."""
    retention = QUICK_RETENTION if opts.quick else Retention()
    executor = MemoryAgentExecutor(2)
    rt = Runtime(profiles=[MEMORY_AGENT], executors={"memory-acp": executor}, retention=retention)
    tracemalloc.start()
    try:
        async with rt:
            ref = await rt.launch(_spec("memory-acp", root, MEMORY_AGENT.id))
            await rt.wait_ready(ref.id)
            prompts = 0

            async def full() -> bool:
                if rt.trace.dropped == 0:
                    return False
                async with rt.subscribe_events(ref.id) as late:
                    return isinstance(await late.__anext__(), EventsTruncated)

            while not await full():
                for _ in range(100):
                    prompts += 1
                    await rt.prompt(ref.id, _prompt_text(prompts))
            filled_after = prompts
            for _ in range(filled_after):  # as many again: every stored item made while traced
                prompts += 1
                await rt.prompt(ref.id, _prompt_text(prompts))
            gc.collect()
            base = tracemalloc.get_traced_memory()[0]
            for _ in range(opts.heap_prompts):
                prompts += 1
                await rt.prompt(ref.id, _prompt_text(prompts))
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - base
            await rt.stop(ref.id, "bench done")
    finally:
        tracemalloc.stop()
    note = "quick: smaller bounds" if opts.quick else ""
    return HeapRow(opts.heap_prompts, filled_after, grown, len(rt.trace.records), note)


# -------------------------------------------------------------------- 5. import time --

_IMPORT_CODE = (
    "import sys, time\n"
    "{pre}"
    "t, c = time.perf_counter(), time.process_time()\n"
    "import {modules}\n"
    "print(time.perf_counter() - t, time.process_time() - c, int('httpx' in sys.modules),\n"
    "      ','.join(m for m in {watched!r} if m in sys.modules) or '-')\n"
)
#: Modules ``import acpfsm.runtime`` should not load (issue 35): python-statemachine (the
#: charts run from their generated declarations), asyncio (a trio program has no use for it).
WATCHED = ("statemachine", "asyncio", "httpx")
_IMPORTTIME = re.compile(r"import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)")


def _package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "acpfsm" else parts[0]


#: What ``import acpfsm.runtime`` loads whatever acpfsm does: anyio and msgspec.
#: python-statemachine (and the asyncio it imports) is no longer among them: the runtime runs
#: the charts from their declarations generated ahead of time (acpfsm.statecharts.charts).
DEPENDENCIES = "anyio, msgspec"
#: The goals of issue 35 for ``import acpfsm.runtime``: CPU, and acpfsm's own part of it.
GOAL_IMPORT_MS = 60.0
GOAL_IMPORT_OWN_MS = 30.0
#: What stands in the way of the own part's goal (profiled for issue 35: ``-X importtime``
#: and cProfile while ``import acpfsm.runtime`` runs, the dependencies imported first).
IMPORT_NOTE = (
    "cProfile of one import after anyio and msgspec: 81 acpfsm modules and 41 others (anyio's "
    "lazy parts, logging, pathlib, ctypes, json...) load; unmarshalling their bytecode "
    "~11 ms, running their bodies ~14 ms, building their ~380 classes ~25 ms (185 msgspec "
    "Structs; 16 dataclasses, ~0.6 ms each, where a Struct costs ~0.03 ms), finding them "
    "~8 ms; the cyclic GC runs ~37 times meanwhile"
)


def bench_import(count: int) -> ImportRow:
    """``import acpfsm.runtime`` in ``count`` fresh processes, the dependencies alone
    (:data:`DEPENDENCIES`: the floor no change of acpfsm's can go below); where one run's
    time goes."""
    samples: list[float] = []
    cpu: list[float] = []
    after_asyncio: list[float] = []
    floor: list[float] = []
    httpx = False
    loaded: set[str] = set()
    # as installed: byte-compiled (the first, untimed run writes what is missing)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

    def timed(pre: str, modules: str = "acpfsm.runtime") -> list[str]:
        return subprocess.run(
            [sys.executable, "-c", _IMPORT_CODE.format(pre=pre, modules=modules, watched=WATCHED)],
            capture_output=True,
            text=True,
            check=True,
            env=env,
            timeout=SETUP_TIMEOUT,
        ).stdout.split()

    timed("")
    for _ in range(count):
        out = timed("")
        samples.append(float(out[0]) * 1000.0)
        cpu.append(float(out[1]) * 1000.0)
        httpx = httpx or out[2] == "1"
        loaded.update(m for m in out[3].split(",") if m != "-")
        # an asyncio app: asyncio (which python-statemachine imports) is there already
        after_asyncio.append(float(timed("import asyncio\n")[1]) * 1000.0)
        floor.append(float(timed("", DEPENDENCIES)[1]) * 1000.0)

    def self_times(code: str) -> dict[str, int]:
        err = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env=env,
            timeout=SETUP_TIMEOUT,
        ).stderr
        return {m[4]: int(m[1]) for m in _IMPORTTIME.finditer(err)}

    startup = self_times("pass")
    by_package: dict[str, float] = {}
    for module, micros in self_times("import acpfsm.runtime").items():
        if module not in startup:
            key = _package(module)
            by_package[key] = by_package.get(key, 0.0) + micros / 1000.0
    top = tuple(sorted(by_package.items(), key=lambda kv: -kv[1])[:8])
    return ImportRow(
        tuple(samples),
        tuple(cpu),
        httpx,
        top,
        tuple(after_asyncio),
        tuple(floor),
        tuple(m for m in WATCHED if m in loaded),
    )


# ------------------------------------------------------------ 6. transitions --


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

    observer = Trace(keep=0).observer("bench")
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


# ------------------------------------------------- 7. lifecycle CPU per prompt --


async def bench_lifecycle(opts: BenchOptions, root: Path) -> list[LatencyRow]:
    """The whole prompt path with no agent and no pipe behind it (the in-memory transport
    answers every prompt at once): what is left is the runtime's lifecycle, on each engine."""
    return [await _lifecycle(engine, opts, root) for engine in ("reference", "compiled")]


async def _lifecycle(engine: EngineName, opts: BenchOptions, root: Path) -> LatencyRow:
    executor = MemoryExecutor(lambda: MemoryTransport(auto_complete=True))
    prompts = max(1, opts.lifecycle_prompts)
    rt = Runtime(profiles=[MEMORY_AGENT], executors={"memory": executor}, engine=engine)
    async with rt:
        ref = await rt.launch(_spec("memory", root, MEMORY_AGENT.id))
        await rt.wait_ready(ref.id)
        samples: list[float] = []
        meter = _CpuMeter(set())
        for i in range(1, opts.warmup + prompts + 1):
            if i == opts.warmup + 1:
                meter = _CpuMeter(set())
            t0 = time.perf_counter()
            await rt.prompt(ref.id, _prompt_text(i))
            if i > opts.warmup:
                samples.append((time.perf_counter() - t0) * 1000.0)
            if i % 100 == 0:
                executor.last.calls.clear()  # the test double records every call
        cpu_ms, _ = meter.per_op_ms(prompts)
        await rt.stop(ref.id, "bench done")
    return LatencyRow(f"{LIFECYCLE_ROW}, {engine} engine", "trio", samples, cpu_ms)


# ------------------------------------------------- 9. anyio's primitives: the floor --

#: The cancel scopes around the runtime's prompt and pump tasks (the runtime's, the
#: execution's and the transport's task groups, the caller's own scopes): anyio's asyncio
#: backend checks cancellation by walking every enclosing scope, trio in one step.
PRIMITIVE_DEPTH = 8
PRIMITIVES = (
    "cancellation check (checkpoint_if_cancelled)",
    "cancel scope entered and left (move_on_after)",
    "uncontended Lock(fast_acquire=True), acquired and released",
    "Event made, set, then waited",
    "scheduler pass (checkpoint)",
)


async def bench_primitives(count: int, backend: str) -> list[PrimitiveRow]:
    """CPU per call of each of :data:`PRIMITIVES` on the running backend, inside
    :data:`PRIMITIVE_DEPTH` cancel scopes."""
    lock = anyio.Lock(fast_acquire=True)

    async def check() -> None:
        await anyio.lowlevel.checkpoint_if_cancelled()

    async def scope() -> None:
        with anyio.move_on_after(3600.0):  # noqa: ASYNC100 - the scope alone is measured
            pass

    async def locked() -> None:
        async with lock:
            pass

    async def event() -> None:
        flag = anyio.Event()
        flag.set()
        await flag.wait()

    bodies = (check, scope, locked, event, anyio.lowlevel.checkpoint)

    async def timed(depth: int) -> list[PrimitiveRow]:
        if depth > 0:
            with anyio.CancelScope():
                return await timed(depth - 1)
        rows = []
        for name, body in zip(PRIMITIVES, bodies, strict=True):
            for _ in range(max(1, count // 10)):  # warm-up
                await body()
            cpu0 = time.process_time()
            for _ in range(count):
                await body()
            rows.append(
                PrimitiveRow(name, backend, count, (time.process_time() - cpu0) * 1e6 / count)
            )
        return rows

    return await timed(PRIMITIVE_DEPTH)


# ---------------------------------------------------------------- 8. memory --


async def _settle() -> None:
    """Let every ready task run (each pump reaches its idle wait)."""
    for _ in range(20):
        await anyio.lowlevel.checkpoint()


def _traced_bytes() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def _until_ready(rt: Runtime, ids: Sequence[str]) -> None:
    with anyio.fail_after(SETUP_TIMEOUT):
        for execution_id in ids:
            await rt.wait_ready(execution_id)
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
            spec = _spec("memory", root, MEMORY_AGENT.id)
            rt = Runtime(profiles=[MEMORY_AGENT], executors={"memory": MemoryExecutor()})
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
    before = child_pids()
    async with Runtime(profiles=[profile]) as rt:
        per, _ids = await _idle_runtime(rt, _spec("stdio", ws, profile.id), count)
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
