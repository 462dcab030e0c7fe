"""``make bench`` sections 1-3 and 8: prompt round trips (bare, Runtime, the ACP SDK), where the
runtime's extra CPU goes, CPU per streamed notification, launch to READY."""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import math
import os
import signal
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Self

import anyio
import anyio.lowlevel

from acpfsm.adapters.acp.stdio import StdioTransport, connect_stdio_transport, open_stdio_transport
from acpfsm.adapters.events import Complete, ErrorEvent, MessageChunk
from acpfsm.runtime.runtime import Runtime, reference_profile

from .peer import MemoryAgentExecutor, memory_agent
from .proc import MEMORY_AGENT, _agent_argv, _cpu_seconds, _GcWatch, _prompt_text, _spec, child_pids
from .rows import (
    AGENT_ARGS,
    BARE_ROW,
    PROMPT_TIMEOUT,
    RUNTIME_ROW,
    SDK_ROW,
    SETUP_TIMEOUT,
    BenchOptions,
    CostRow,
    LatencyRow,
    ShareRow,
)

# ------------------------------------------------------------ 1. round trips --


async def _complete_of(transport: StdioTransport, generation: int) -> int:
    """Consume events until the turn of ``generation`` ends (an error ends the bench);
    returns the message chunks seen."""
    chunks = 0
    async for event in transport.events():
        if isinstance(event, MessageChunk):
            chunks += 1
        elif isinstance(event, Complete) and event.prompt_generation == generation:
            return chunks
        elif isinstance(event, ErrorEvent) and event.prompt_generation == generation:
            raise RuntimeError(f"prompt {generation} failed: {event.error}")
    raise RuntimeError("the agent's event stream ended before the turn did")


class _Path:
    """One path of the interleaved rounds: how to make a round trip, and what it cost."""

    def __init__(self, row: LatencyRow, one: Callable[[int], Awaitable[None]], agent: set[int]):
        self.row = row
        self.one = one
        self.agent = agent
        self.client_s = 0.0
        self.agent_s: float | None = 0.0
        self.count = 0

    async def run(self, first: int, count: int, gcw: _GcWatch, *, timed: bool) -> None:
        agent0 = _cpu_seconds(self.agent)
        cpu0 = time.process_time()
        gcw.row = self.row if timed else None
        try:
            for i in range(first, first + count):
                with anyio.fail_after(PROMPT_TIMEOUT):
                    t0, c0 = time.perf_counter(), time.thread_time()
                    await self.one(i)
                    elapsed, cpu = time.perf_counter() - t0, time.thread_time() - c0
                if timed:
                    self.row.samples_ms.append(elapsed * 1000.0)
                    self.row.cpu_samples_ms.append(cpu * 1000.0)
        finally:
            gcw.row = None
        if not timed:
            return
        self.client_s += time.process_time() - cpu0
        agent1 = _cpu_seconds(self.agent)
        if agent0 is None or agent1 is None or self.agent_s is None:
            self.agent_s = None
        else:
            self.agent_s += agent1 - agent0
        self.count += count

    def finish(self) -> LatencyRow:
        if self.count:
            self.row.client_cpu_ms = self.client_s * 1000.0 / self.count
            if self.agent_s is not None:
                self.row.agent_cpu_ms = self.agent_s * 1000.0 / self.count
        return self.row


class _SdkClient:
    """The client side the SDK calls back: it only counts the streamed updates. (No
    ``request_permission`` and no fs methods: the bench's prompts ask for none, and the SDK
    answers ``-32601`` for anything a plain object does not implement.)"""

    def __init__(self) -> None:
        self.updates = 0

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates += 1


async def _bare_path(
    stack: contextlib.AsyncExitStack, ws: Path, backend: str, before: set[int]
) -> _Path:
    transport = await stack.enter_async_context(
        open_stdio_transport(_agent_argv(ws / "sessions"), cwd=ws)
    )
    with anyio.fail_after(SETUP_TIMEOUT):
        await transport.initialize()
        await transport.new_session(str(ws))

    async def one(g: int) -> None:
        await transport.prompt(_prompt_text(g), [], g)
        await _complete_of(transport, g)

    return _Path(LatencyRow(BARE_ROW, backend), one, child_pids() - before)


async def _runtime_path(
    stack: contextlib.AsyncExitStack, ws: Path, backend: str, before: set[int]
) -> _Path:
    profile = reference_profile(*AGENT_ARGS, "--sessions-dir", str(ws / "sessions"))
    rt = await stack.enter_async_context(Runtime(profiles=[profile]))
    with anyio.fail_after(SETUP_TIMEOUT):
        ref = await rt.launch(_spec("stdio", ws, profile.id))
        await rt.wait_ready(ref.id)

    async def one(i: int) -> None:
        result = await rt.prompt(ref.id, _prompt_text(i))
        if result.stop_reason != "end_turn":
            raise RuntimeError(f"prompt {i} ended {result.stop_reason!r}")

    return _Path(LatencyRow(RUNTIME_ROW, backend), one, child_pids() - before)


async def _sdk_path(
    stack: contextlib.AsyncExitStack, ws: Path, backend: str, before: set[int]
) -> _Path | LatencyRow:
    try:
        import acp
    except ImportError:
        return LatencyRow(SDK_ROW, backend, note="agent-client-protocol is not installed")
    client = _SdkClient()
    argv = _agent_argv(ws / "sessions")
    spawned = acp.spawn_agent_process(
        client,  # type: ignore[arg-type]  # a partial Client, on purpose (see _SdkClient)
        argv[0],
        *argv[1:],
        cwd=ws,
        transport_kwargs={"stderr": subprocess.DEVNULL},
    )
    conn, _process = await stack.enter_async_context(spawned)
    with anyio.fail_after(SETUP_TIMEOUT):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        session = await conn.new_session(cwd=str(ws))

    async def one(i: int) -> None:
        response = await conn.prompt(
            session_id=session.session_id, prompt=[acp.text_block(_prompt_text(i))]
        )
        if response.stop_reason != "end_turn":
            raise RuntimeError(f"prompt {i} ended {response.stop_reason!r}")
        if client.updates == 0:
            raise RuntimeError("the SDK client saw no session/update")

    return _Path(LatencyRow(SDK_ROW, backend), one, child_pids() - before)


async def bench_round_trips(
    opts: BenchOptions, root: Path, backend: str, gcw: _GcWatch
) -> list[LatencyRow]:
    """The paths side by side against the reference agent, in interleaved rounds."""
    rows: list[LatencyRow] = []
    paths: list[_Path] = []
    async with contextlib.AsyncExitStack() as stack:
        makers: list[tuple[str, Any]] = [("bare", _bare_path), ("runtime", _runtime_path)]
        if backend == "asyncio" and opts.sdk:
            makers.append(("sdk", _sdk_path))
        for name, make in makers:
            ws = root / f"{backend}-{name}"
            ws.mkdir()
            made = await make(stack, ws, backend, child_pids())  # each step bounded inside
            if isinstance(made, LatencyRow):
                rows.append(made)
            else:
                paths.append(made)
        rounds = max(1, min(opts.rounds, opts.prompts))
        per_round = [opts.prompts // rounds + (r < opts.prompts % rounds) for r in range(rounds)]
        for path in paths:
            await path.run(1, opts.warmup, gcw, timed=False)
        gc.collect()
        next_i = opts.warmup + 1
        for r, count in enumerate(per_round):
            for path in paths if r % 2 == 0 else reversed(paths):
                await path.run(next_i, count, gcw, timed=True)
            next_i += count
    out = [p.finish() for p in paths] + rows
    if backend == "asyncio" and not opts.sdk:
        out.append(LatencyRow(SDK_ROW, backend, note="skipped (--no-sdk)"))
    if backend == "trio":
        out.append(LatencyRow(SDK_ROW, backend, note="asyncio only"))
    return out


#: The components of section 8, in the order a sampled frame's file is matched: the module
#: (a package is every module under it) or a part of the file's path.
COMPONENTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("the bench's own loop", ("acpfsm.tools",)),
    ("chart engine (fire, coordination)", ("acpfsm.statecharts",)),
    ("session drivers (pump, turns, prompt, status, context)", ("acpfsm.runtime.session",)),
    ("hub, trace, lifecycle events", ("acpfsm.runtime.hub", "acpfsm.runtime.trace",
                                      "acpfsm.runtime.events", "acpfsm.runtime.clock")),
    ("Runtime facade", ("acpfsm.runtime",)),
    ("ACP transport (stdio, JSON-RPC, mapping)", ("acpfsm.adapters",)),
    ("anyio", ("anyio", "sniffio")),
    ("event loop (asyncio, trio, selectors)", ("asyncio", "trio", "outcome", "selectors")),
)  # fmt: skip
OTHER = "other"


@functools.cache
def _component_paths() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """:data:`COMPONENTS` with each module as the path it is loaded from: a package's
    folder (with a trailing separator), a module's file without its suffix."""
    out = []
    for title, modules in COMPONENTS:
        paths = []
        for name in modules:
            try:
                module = importlib.import_module(name)
            except ImportError:  # not installed: nothing of it can run
                continue
            file = os.path.realpath(module.__file__ or "")
            is_package = os.path.basename(file).startswith("__init__.")
            paths.append(os.path.dirname(file) + os.sep if is_package else file.rsplit(".", 1)[0])
        out.append((title, tuple(paths)))
    return tuple(out)


@functools.cache
def component(filename: str) -> str:
    """The :data:`COMPONENTS` entry the code of ``filename`` belongs to (else OTHER)."""
    path = os.path.realpath(filename)
    for title, prefixes in _component_paths():
        if path.startswith(prefixes):
            return title
    return OTHER


class _Sampler:
    """Counts, every ``interval`` seconds of this process's CPU (``ITIMER_PROF``; the kernel
    rounds it up to its tick, 4 ms at 250 Hz), the component of the Python code running: a
    sample of where CPU goes that does not slow small calls more than big ones (a tracing
    profiler does). Time spent in C (a decoder, a system call) lands on the Python code that
    called it."""

    def __init__(self, interval: float = 0.001) -> None:
        self.interval = interval
        self.counts: dict[str, int] = {}

    def _sample(self, _signum: int, frame: Any) -> None:
        # whatever this raised would be raised in the code it interrupted
        with contextlib.suppress(Exception):
            key = component(frame.f_code.co_filename) if frame is not None else OTHER
            self.counts[key] = self.counts.get(key, 0) + 1

    def __enter__(self) -> Self:
        self._previous = signal.signal(signal.SIGPROF, self._sample)
        signal.setitimer(signal.ITIMER_PROF, self.interval, self.interval)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        signal.signal(signal.SIGPROF, self._previous)


async def _profiled(path: _Path, first: int, count: int) -> dict[str, float]:
    """CPU microseconds per prompt of each component over ``count`` prompts of ``path``
    (untimed, so its row is left alone): the process CPU per prompt, split as the samples
    were."""
    cpu0 = time.process_time()
    with _Sampler() as sampler:
        await path.run(first, count, _GcWatch(), timed=False)
    per_prompt_us = (time.process_time() - cpu0) * 1e6 / count
    samples = sum(sampler.counts.values())
    if not samples:
        return {}
    return {k: per_prompt_us * n / samples for k, n in sampler.counts.items()}


async def bench_breakdown(opts: BenchOptions, root: Path, backend: str) -> list[ShareRow]:
    """Section 8: the bare and runtime paths, each profiled over ``profile_prompts`` prompts
    after a warm-up, one after the other."""
    count = max(1, opts.profile_prompts)
    per_path: list[dict[str, float]] = []
    async with contextlib.AsyncExitStack() as stack:
        for name, make in (("bare", _bare_path), ("runtime", _runtime_path)):
            ws = root / f"{backend}-profile-{name}"
            ws.mkdir()
            path = await make(stack, ws, backend, child_pids())
            await path.run(1, opts.warmup, _GcWatch(), timed=False)
            gc.collect()
            per_path.append(await _profiled(path, opts.warmup + 1, count))
    bare, runtime = per_path
    names = [title for title, _ in COMPONENTS] + [OTHER]  # every one, in this order
    return [ShareRow(name, backend, bare.get(name, 0.0), runtime.get(name, 0.0)) for name in names]


# ------------------------------------------------- 2. CPU per streamed notification --


async def _sampled(turn: Callable[[int], Awaitable[int]], turns: int) -> dict[str, float]:
    """CPU microseconds per notification of each component over ``turns`` turns."""
    seen = 0
    gc.collect()
    cpu0 = time.process_time()
    with _Sampler() as sampler:
        for t in range(turns):
            with anyio.fail_after(PROMPT_TIMEOUT):
                seen += await turn(t)
    per_item_us = (time.process_time() - cpu0) * 1e6 / max(1, seen)
    samples = sum(sampler.counts.values())
    return {k: per_item_us * n / samples for k, n in sampler.counts.items()} if samples else {}


STREAM_BARE = "bare StdioTransport: events()"
STREAM_RUNTIME = "Runtime.turn: its updates"


async def bench_streaming(
    opts: BenchOptions, root: Path, backend: str, breakdown: list[ShareRow] | None = None
) -> list[CostRow]:
    """CPU per notification through the bare transport and through the Runtime, both over
    the in-process agent, interleaved turn by turn; then, with ``breakdown``, each path
    sampled alone for five times the turns (:class:`_Sampler`), its CPU per notification by
    component appended to ``breakdown``: where the runtime's extra goes."""
    chunks = max(1, opts.chunks)
    bare_s = runtime_s = 0.0
    bare_n = runtime_n = 0
    executor = MemoryAgentExecutor(chunks)
    async with (
        memory_agent(chunks) as (receive, send),
        connect_stdio_transport(receive, send, workspace=root) as transport,
        Runtime(profiles=[MEMORY_AGENT], executors={"memory-acp": executor}) as rt,
    ):
        with anyio.fail_after(SETUP_TIMEOUT):
            await transport.initialize()
            await transport.new_session(str(root))
            ref = await rt.launch(_spec("memory-acp", root, MEMORY_AGENT.id))
            await rt.wait_ready(ref.id)

        async def bare(g: int) -> int:
            await transport.prompt("stream", [], g)
            return await _complete_of(transport, g)

        async def runtime() -> int:
            seen = 0
            async with rt.turn(ref.id, "stream") as turn:
                async for _update in turn:
                    seen += 1
            return seen

        await bare(1)  # warm-up
        await runtime()
        gc.collect()
        for t in range(opts.stream_turns):
            with anyio.fail_after(PROMPT_TIMEOUT):
                cpu0 = time.process_time()
                bare_n += await bare(t + 2)
                cpu1 = time.process_time()
                runtime_n += await runtime()
                runtime_s += time.process_time() - cpu1
                bare_s += cpu1 - cpu0
        if breakdown is not None:
            turns = 5 * opts.stream_turns
            bare_us = await _sampled(lambda t: bare(opts.stream_turns + 2 + t), turns)
            runtime_us = await _sampled(lambda _t: runtime(), turns)
            names = [title for title, _ in COMPONENTS] + [OTHER]
            breakdown += [
                ShareRow(name, backend, bare_us.get(name, 0.0), runtime_us.get(name, 0.0))
                for name in names
            ]
        await rt.stop(ref.id, "bench done")
    return [
        CostRow(STREAM_BARE, backend, bare_n, bare_s * 1000.0 / max(1, bare_n)),
        CostRow(STREAM_RUNTIME, backend, runtime_n, runtime_s * 1000.0 / max(1, runtime_n)),
    ]


# ----------------------------------------------------------------- 3. launch → READY --

LAUNCH_BARE = "open_stdio_transport + initialize + session/new"
LAUNCH_RUNTIME = "Runtime.launch + wait_ready"


async def bench_launch(opts: BenchOptions, root: Path, backend: str) -> list[CostRow]:
    """Client CPU from spawning the reference agent to a session ready for prompts."""
    ws = root / f"{backend}-launch"
    ws.mkdir()
    profile = reference_profile(*AGENT_ARGS, "--sessions-dir", str(ws / "sessions"))
    by_hand: list[tuple[float, float]] = []  # (cpu, wall) seconds
    runtime: list[tuple[float, float]] = []
    async with Runtime(profiles=[profile]) as rt:

        async def hand() -> None:
            cpu0, t0 = time.process_time(), time.perf_counter()
            argv = _agent_argv(ws / "sessions")
            async with open_stdio_transport(argv, cwd=ws) as transport:
                await transport.initialize()
                await transport.new_session(str(ws))
                by_hand.append((time.process_time() - cpu0, time.perf_counter() - t0))

        async def launched() -> None:
            cpu0, t0 = time.process_time(), time.perf_counter()
            ref = await rt.launch(_spec("stdio", ws, profile.id))
            await rt.wait_ready(ref.id)
            runtime.append((time.process_time() - cpu0, time.perf_counter() - t0))
            await rt.stop(ref.id, "bench done")

        with anyio.fail_after(SETUP_TIMEOUT):
            await hand()  # warm-up: the imports and caches of both paths
            await launched()
        by_hand.clear()
        runtime.clear()
        for k in range(opts.launches):
            with anyio.fail_after(SETUP_TIMEOUT):
                for step in (hand, launched) if k % 2 == 0 else (launched, hand):
                    await step()

    def row(name: str, runs: list[tuple[float, float]]) -> CostRow:
        cpu = statistics.mean(c for c, _ in runs) * 1000.0 if runs else math.nan
        wall = statistics.median(w for _, w in runs) * 1000.0 if runs else None
        return CostRow(name, backend, len(runs), cpu, wall)

    return [row(LAUNCH_BARE, by_hand), row(LAUNCH_RUNTIME, runtime)]
