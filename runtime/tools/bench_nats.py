"""``make bench``, across processes: what NATS costs (:mod:`acpfsm.runtime.bus`,
``acpfsm serve``).

* **Prompt round trip over NATS**: :class:`~acpfsm.runtime.service.RemoteRuntime.prompt`
  against an ``acpfsm serve`` process (a SQLite store, the reference agent with
  ``--delay 0``) beside an in-process ``Runtime.prompt`` on the same agent, interleaved
  rounds: the medians and their ratio (goal ≤ 1.5× on loopback).
* **Events per second to a subscriber**: events of one execution published on a
  :class:`~acpfsm.runtime.bus.NatsBus` and read back through another connection (another
  subscriber process would read them the same way), and fanned out to 10 subscribers.

The NATS server is a throwaway one (:mod:`acpfsm.testing.natsserver`); without
``nats-server`` the section says why and shows no figure. Not measured yet: the take-over
time of 100 executions after a member dies (``tests/agentctl/test_serve_pool_agentctl.py``
checks 10 within the lease plus 5 s).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from acpfsm.runtime.events import MessageChunk, SequencedEvent
from acpfsm.runtime.runtime import Runtime, reference_profile
from acpfsm.runtime.types import LaunchSpec, WorkspaceRef
from acpfsm.testing.natsserver import NatsServer, NatsUnavailable, throwaway_nats

__all__ = ["NatsReport", "format_into", "goals", "run"]

AGENT = ("--delay", "0", "--log-level", "error")
GOAL = 1.5


@dataclass
class NatsReport:
    prompts: int = 0
    medians_ms: dict[str, float] = field(default_factory=dict)
    """"Runtime.prompt" / "RemoteRuntime.prompt" → median round trip."""
    events: int = 0
    events_per_s: dict[int, float] = field(default_factory=dict)
    """subscribers → events per second each of them received."""
    note: str = ""


def _serve(server: NatsServer, root: Path) -> subprocess.Popen[bytes]:
    config = root / "serve.json"
    config.write_text(json.dumps({"reference_agent": list(AGENT)}))
    process = subprocess.Popen(
        [sys.executable, "-m", "acpfsm.tools.cli", "serve", "--nats", server.url,
         "--store", str(root / "serve.db"), "--config", str(config), "--insecure-local"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=dict(os.environ),
    )  # fmt: skip
    assert process.stdout is not None
    if not process.stdout.readline():
        raise NatsUnavailable("acpfsm serve did not start")
    return process


async def _prompts(report: NatsReport, server: NatsServer, root: Path, n: int) -> None:
    from acpfsm.runtime.service import RemoteRuntime

    workspace = root / "ws"
    workspace.mkdir(exist_ok=True)
    spec = LaunchSpec(
        agent_profile_id="reference",
        executor_id="stdio",
        workspace=WorkspaceRef(path=str(workspace)),
    )
    samples: dict[str, list[float]] = {"Runtime.prompt": [], "RemoteRuntime.prompt": []}
    async with (
        Runtime(profiles=[reference_profile(*AGENT)]) as local,
        RemoteRuntime(server.url) as remote,
    ):
        targets: dict[str, tuple[Any, str]] = {}
        for name, rt in (("Runtime.prompt", local), ("RemoteRuntime.prompt", remote)):
            ref = await rt.launch(spec)
            for _ in range(20):  # warm up
                await rt.prompt(ref.id, "warm up")
            targets[name] = (rt, ref.id)
        rounds = 5
        for r in range(rounds):
            order = list(targets) if r % 2 == 0 else list(reversed(targets))
            for name in order:
                rt, execution_id = targets[name]
                for _ in range(max(1, n // rounds)):
                    started = time.perf_counter()
                    await rt.prompt(execution_id, "hello")
                    samples[name].append((time.perf_counter() - started) * 1000)
        await remote.stop(targets["RemoteRuntime.prompt"][1], "bench done")
    for name, values in samples.items():
        report.medians_ms[name] = statistics.median(values)


async def _events(report: NatsReport, server: NatsServer, n: int, subscribers: int) -> None:
    from acpfsm.runtime.bus import NatsBus

    execution_id = f"bench-{subscribers}"
    items = [SequencedEvent(i, MessageChunk(text=f"chunk {i} " * 4)) for i in range(1, n + 1)]
    async with NatsBus(server.url) as publisher, NatsBus(server.url) as reader:
        rates: list[float] = []

        async def read() -> None:
            started = time.perf_counter()
            got = 0
            async with reader.subscribe(execution_id) as sub:
                async for _ in sub:
                    got += 1
                    if got == n:
                        break
            rates.append(n / (time.perf_counter() - started))

        async with anyio.create_task_group() as tg:
            for _ in range(subscribers):
                tg.start_soon(read)
            publisher.publish(execution_id, items)
    report.events_per_s[subscribers] = min(rates)


def run(root: Path, *, prompts: int, events: int) -> NatsReport:
    """Every row (see the module docstring); nothing is printed."""
    report = NatsReport(prompts=prompts, events=events)
    try:
        with throwaway_nats() as server:
            process = _serve(server, root)
            try:
                anyio.run(_prompts, report, server, root, prompts, backend="trio")
            finally:
                process.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(30)
                if process.poll() is None:
                    process.kill()
                    process.wait()
                if process.stdout is not None:
                    process.stdout.close()
            for subscribers in (1, 10):
                anyio.run(_events, report, server, events, subscribers, backend="trio")
    except NatsUnavailable as exc:
        report.note = str(exc)
    return report


def goals(report: NatsReport | None, goal: type[Any]) -> list[Any]:
    """The summary lines (``goal``: bench's ``Goal``)."""
    if report is None:
        return []
    remote = report.medians_ms.get("RemoteRuntime.prompt")
    local = report.medians_ms.get("Runtime.prompt")
    ratio = remote / local if remote and local else None
    detail = f"{remote:.3f} vs {local:.3f} ms" if remote and local else report.note
    figure = "RemoteRuntime.prompt median vs Runtime.prompt"
    return [goal(figure, "trio", "compiled", ratio, GOAL, "x", detail=detail)]


def format_into(table: Any, report: NatsReport | None) -> None:
    """The section's detail lines (``table``: bench's table)."""
    if report is None:
        return
    table.section(
        f"across processes over NATS ({report.prompts} prompts per path)",
        ["median ms", "x local"],
        width=14,
    )
    local = report.medians_ms.get("Runtime.prompt")
    for name, median in report.medians_ms.items():
        ratio = f"{median / local:.2f}x" if local else "n/a"
        table.row(f"{name} [trio]", [f"{median:.3f}", ratio])
    for subscribers, rate in sorted(report.events_per_s.items()):
        table.row(
            f"events per second to {subscribers} subscriber(s)",
            [f"{rate:,.0f}", ""],
            f"{report.events:,} events of one execution, each subscriber on the bus",
        )
    if report.note:
        table.lines.append(f"  ({report.note})")
