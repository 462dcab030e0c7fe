"""``acpfsm demo``: a full life of an agent execution on the embedded reference agent.

It narrates every chart transition live, streams the reply, sends a follow-up, has the agent
call a Python tool of the app (served over MCP), steers a running turn, cancels a turn the
agent ignores (the cancel escalates), stops, relaunches with session/load, prints where each
chart went, and writes the trace as JSONL.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import anyio

from acpfsm.adapters.acp.executor import StdioExecutor
from acpfsm.adapters.acp.process import ShutdownPolicy
from acpfsm.adapters.acp.stdio import StdioConfig
from acpfsm.adapters.events import MessageChunk
from acpfsm.runtime.errors import AcpfsmError, CancelEscalated
from acpfsm.runtime.events import McpCallEnded, McpCallStarted, RuntimeEvent
from acpfsm.runtime.mcp.tools import ToolDeclarationError, ToolSet, tool
from acpfsm.runtime.runtime import Runtime, reference_profile
from acpfsm.runtime.trace import TraceRecord
from acpfsm.runtime.types import LaunchSpec, Timeouts, WorkspaceRef

__all__ = ["main"]


class _Narrator:
    def __init__(self, out: Callable[[str], None], color: bool) -> None:
        self.out = out
        self.color = color
        self.in_stream = False
        self.started = time.monotonic()

    def _c(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.color else text

    def _break_stream(self) -> None:
        if self.in_stream:
            self.out("\n")
            self.in_stream = False

    def step(self, title: str) -> None:
        self._break_stream()
        self.out("\n" + self._c("1;36", f"▶ {title}") + "\n")

    def note(self, text: str) -> None:
        self._break_stream()
        self.out(self._c("2", f"  {text}") + "\n")

    def transition(self, rec: TraceRecord) -> None:
        self._break_stream()
        gen = f"#{rec.generation}" if rec.generation else ""
        arrow = "↺" if rec.source == rec.target else "→"
        line = (
            f"  [{time.monotonic() - self.started:5.2f}s] {rec.chart}{gen:<4} "
            f"{rec.source} {arrow} {rec.target}  ({rec.event})"
        )
        self.out(self._c("33", line) + "\n")

    def chunk(self, text: str) -> None:
        if not self.in_stream:
            self.out(self._c("32", "  agent: "))
            self.in_stream = True
        self.out(self._c("32", text))


def _summary(rt: Runtime, narrate: _Narrator, execution_ids: list[str]) -> None:
    narrate.step("Where each chart went")
    for n, execution_id in enumerate(execution_ids, 1):
        narrate.note(f"execution {n} ({execution_id[:8]})")
        paths: dict[str, list[str]] = {}
        for rec in rt.trace.for_execution(execution_id):
            key = rec.chart + (f"#{rec.generation}" if rec.generation else "")
            path = paths.setdefault(key, [rec.source])
            if rec.target != path[-1]:
                path.append(rec.target)
        for key, path in paths.items():
            narrate.note(f"  {key:<22} {' → '.join(path)}")


@tool
async def count_words(text: str) -> str:
    """How many words ``text`` has (the demo's Python tool, served to the agent over MCP)."""
    words = len(text.split())
    return f"{words} word{'' if words == 1 else 's'}"


def _runtime(args: argparse.Namespace, trace_path: Path, narrate: _Narrator) -> Runtime:
    def make(tool_sets: list[ToolSet]) -> Runtime:
        return Runtime(
            profiles=[reference_profile("--delay", str(args.delay))],
            executors={
                "stdio": StdioExecutor(
                    config=StdioConfig(cancel_timeout=1.0),
                    shutdown=ShutdownPolicy(stdin_close_wait=1.0, term_wait=1.0, kill_wait=1.0),
                )
            },
            timeouts=Timeouts(cancel_wait=2.0, cancel_escalation=1.0),
            trace_path=trace_path,
            tool_sets=tool_sets,
        )

    try:
        return make([ToolSet("demo", tools=[count_words])])
    except ToolDeclarationError as exc:  # the acpfsm[mcp] extra is not installed
        narrate.note(f"no Python tool in this demo: {exc}")
        return make([])


async def _run(args: argparse.Namespace, narrate: _Narrator) -> int:
    workspace = Path(args.workspace or tempfile.mkdtemp(prefix="acpfsm-demo-"))
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    trace_path = Path(args.trace or f"traces/demo-{stamp}.jsonl")
    runtime = _runtime(args, trace_path, narrate)
    runtime.trace.listeners.append(narrate.transition)
    executions: list[str] = []
    async with runtime as rt:
        narrate.step("Launch the reference agent with an initial prompt")
        ref = await rt.launch(
            LaunchSpec(
                agent_profile_id="reference",
                executor_id="stdio",
                workspace=WorkspaceRef(path=str(workspace)),
                prompt="Explain in one breath what a statechart is.",
            )
        )
        executions.append(ref.id)

        seen: list[RuntimeEvent] = []
        arrived = anyio.Event()

        async def stream_replies() -> None:
            nonlocal arrived
            async with rt.subscribe_events(ref.id) as events:
                async for event in events:
                    seen.append(event)
                    arrived.set()
                    arrived = anyio.Event()
                    if isinstance(event, MessageChunk) and event.role != "user":
                        narrate.chunk(event.text)
                    elif isinstance(event, McpCallStarted):
                        narrate.note(f"the agent calls the app's {event.name}({event.arguments})")
                    elif isinstance(event, McpCallEnded):
                        narrate.note(f"{event.name} answered: {event.output or event.error}")

        async def chunk_of(generation: int) -> None:
            """Wait until the agent streams text for ``generation`` (its turn has started)."""
            with anyio.fail_after(10):
                while not any(
                    isinstance(e, MessageChunk) and e.prompt_generation == generation for e in seen
                ):
                    await arrived.wait()

        async with anyio.create_task_group() as tg:
            tg.start_soon(stream_replies)

            narrate.step("A follow-up (waits for the initial turn, then for its own)")
            result = await rt.resume(ref.id, "And why would an orchestrator want one?")
            narrate.note(f"turn {result.generation} ended: {result.stop_reason}")

            generation = result.generation
            if rt.tools is not None:
                narrate.step("The agent calls a Python tool of the app (over MCP)")
                result = await rt.prompt(
                    ref.id,
                    'How long was my question? [[tool:count_words {"text": "And why would an '
                    'orchestrator want one?"}]]',
                )
                generation = result.generation
                narrate.note(f"turn {generation} ended: {result.stop_reason}")

            narrate.step("Steer a running turn (folds into its generation)")
            async with anyio.create_task_group() as turn:
                outcome: list[str] = []

                async def long_turn() -> None:
                    r = await rt.prompt(ref.id, "Write a longer answer. [[delay:0.04]]")
                    outcome.append(f"turn {r.generation} ended: {r.stop_reason}")

                turn.start_soon(long_turn)
                await chunk_of(generation + 1)
                steer = await rt.steer(ref.id, "Actually, keep it to one line.")
                narrate.note(f"steer dispatched into generation {steer.generation}")
            narrate.note(outcome[0])

            narrate.step("Cancel a turn the agent ignores: the cancel escalates")
            async with anyio.create_task_group() as turn:

                async def hung_turn() -> None:
                    try:
                        await rt.prompt(ref.id, "[[fault:hang]] Think forever.")
                    except CancelEscalated as exc:
                        narrate.note(f"the waiting prompt was released: {exc}")

                turn.start_soon(hung_turn)
                await chunk_of(generation + 2)
                try:
                    await rt.cancel(ref.id)
                except CancelEscalated as exc:
                    narrate.note(f"cancel: {exc}")
            narrate.note(f"status now {rt.get_execution(ref.id).status}")

            acp_session = rt.get_execution(ref.id).acp_session_id
            narrate.step("Stop")
            final = await rt.stop(ref.id, "demo finished its first life")
            narrate.note(f"status {final.status}")
            tg.cancel_scope.cancel()

        narrate.step(f"Relaunch resumed with session/load ({acp_session[:8]}…)")
        ref2 = await rt.launch(
            LaunchSpec(
                agent_profile_id="reference",
                executor_id="stdio",
                workspace=WorkspaceRef(path=str(workspace)),
                prior_acp_session=acp_session,
            )
        )
        executions.append(ref2.id)
        result = await rt.resume(ref2.id, "Are you back?")
        narrate.chunk(result.agent_message)
        snap = rt.get_execution(ref2.id)
        narrate.note(
            f"same ACP session: {snap.acp_session_id == acp_session}; turn ended {result.stop_reason}"
        )
        await rt.stop(ref2.id, "demo done")
    _summary(rt, narrate, executions)
    narrate.step("Trace")
    narrate.note(f"{rt.trace.count} transitions written to {trace_path}")
    from .diagrams import INSTALL_HINT, DiagramError, write_run
    from .report import write_report

    narrate.step("Diagrams and report of the run")
    runs = trace_path.with_suffix("")
    try:
        svg = False
        for n, execution_id in enumerate(executions, 1):
            out = runs / f"{n}-{execution_id[:8]}"
            written = write_run(out, rt.trace.records, execution_id, source=str(trace_path))
            kinds = sorted({p.suffix for p in written if p.name != "README.md"})
            svg = svg or ".svg" in kinds
            narrate.note(
                f"execution {n}: {out}/README.md and {len(written) - 1} diagram files "
                f"({', '.join(kinds)})"
            )
        if not svg:
            narrate.note(f"no SVG drawn: the renderer is missing ({INSTALL_HINT})")
    except (DiagramError, OSError) as exc:
        narrate.note(f"diagrams not written: {exc}")
    narrate.note(f"the same for any trace: acpfsm diagrams --trace {trace_path} --execution ID")
    try:
        report = write_report(trace_path, trace_path.with_name(f"{trace_path.stem}-report"))
    except (AcpfsmError, OSError) as exc:
        narrate.note(f"report not written: {exc}")
    else:
        for n, page in enumerate(report.pages, 1):
            narrate.note(f"report of execution {n}: {page}")
        verdict = "OK" if report.verdict.ok else f"{len(report.verdict.violations)} violation(s)"
        drawn = "charts drawn" if not report.svg_skipped else "charts as Mermaid source"
        narrate.note(f"{drawn}, check-trace {verdict}; the same for any trace: acpfsm report "
                     f"{trace_path}")  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="acpfsm demo", description=__doc__)
    parser.add_argument("--backend", choices=("trio", "asyncio"), default="trio")
    parser.add_argument("--delay", type=float, default=0.01, help="reference agent pacing (s)")
    parser.add_argument("--workspace", help="workspace directory (default: a new temp dir)")
    parser.add_argument("--trace", help="trace JSONL path (default: traces/demo-<time>.jsonl)")
    args = parser.parse_args(argv)
    color = sys.stdout.isatty() and "NO_COLOR" not in os.environ

    def out(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    narrate = _Narrator(out, color)
    if args.workspace:
        Path(args.workspace).mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    code = anyio.run(_run, args, narrate, backend=args.backend)
    narrate.note(f"done in {time.monotonic() - started:.1f}s")
    return int(code)
