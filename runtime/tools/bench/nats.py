"""``make bench``, across processes: what NATS costs (:mod:`acpfsm.runtime.bus`,
``acpfsm serve``).

* **Prompt round trip over NATS**: :class:`~acpfsm.runtime.service.RemoteRuntime.prompt`
  against an ``acpfsm serve`` process (a SQLite store, the reference agent with
  ``--delay 0``) beside an in-process ``Runtime.prompt`` on the same agent, interleaved
  rounds: the medians and their ratio (goal ≤ 1.5× on loopback).
* **Events per second to a subscriber**: events of one execution published on a
  :class:`~acpfsm.runtime.bus.NatsBus` and read back through another connection (another
  subscriber process would read them the same way), and fanned out to 10 subscribers.

* **Take-over after the owner dies**: two ``acpfsm serve --pool`` processes on a throwaway
  PostgreSQL cluster (:mod:`acpfsm.testing.postgres`), ``--takeover`` executions (the stdio
  reference agent: agentctl's port range could not hold a hundred) launched while only the
  owner runs, then the owner killed with ``SIGKILL``: the time until the first, and until
  every one, answers ``get_execution`` through the survivor (the stdio agents die with their
  owner: they answer as lost), beside the goal (the lease plus 5 s; ``--nats-lease``, by default
  ``acpfsm serve``'s 10 s).

The NATS server is a throwaway one (:mod:`acpfsm.testing.natsserver`); without
``nats-server`` (or PostgreSQL, for the take-over) the section says why and shows no figure.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
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
from acpfsm.testing.postgres import ClusterUnavailable, throwaway_cluster

__all__ = ["NatsReport", "format_into", "goals", "run"]

AGENT = ("--delay", "0", "--log-level", "error")
GOAL = 1.5
LEASE = 10.0
"""The pool's lease in the take-over row by default (``acpfsm serve --lease``'s default: a
member launching a hundred agents on a loaded machine can miss a much shorter one's
renewals)."""
TAKEOVER_SLACK = 5.0
"""The take-over's goal: every execution answers within the lease plus this."""


@dataclass
class NatsReport:
    prompts: int = 0
    medians_ms: dict[str, float] = field(default_factory=dict)
    """"Runtime.prompt" / "RemoteRuntime.prompt" → median round trip."""
    events: int = 0
    events_per_s: dict[int, float] = field(default_factory=dict)
    """subscribers → events per second each of them received."""
    takeover: int = 0
    lease: float = LEASE
    takeover_s: dict[str, float] = field(default_factory=dict)
    """"first" / "all" → seconds from the owner's SIGKILL until the first / every execution
    answered ``get_execution`` through the survivor."""
    note: str = ""
    takeover_note: str = ""


def _serve(
    server: NatsServer, root: Path, store: str = "", extra: tuple[str, ...] = ()
) -> subprocess.Popen[bytes]:
    config = root / "serve.json"
    config.write_text(json.dumps({"reference_agent": list(AGENT)}))
    process = subprocess.Popen(
        [sys.executable, "-m", "acpfsm.tools.cli", "serve", "--nats", server.url,
         "--store", store or str(root / "serve.db"), "--config", str(config),
         "--insecure-local", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=dict(os.environ),
    )  # fmt: skip
    assert process.stdout is not None
    if not process.stdout.readline():
        _end(process)
        raise NatsUnavailable("acpfsm serve did not start")
    return process


def _end(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    """Stop ``process`` (``sig``, then SIGKILL after 30 s) and close its pipe."""
    if process.poll() is None:
        process.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(30)
        if process.poll() is None:
            process.kill()
            process.wait()
    if process.stdout is not None:
        process.stdout.close()


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


async def _takeover(report: NatsReport, server: NatsServer, root: Path, dsn: str, n: int) -> None:
    """``n`` executions launched on the owner, the owner killed, the survivor asked."""
    from acpfsm.runtime.service import RemoteRuntime, ServiceError

    workspace = root / "ws"
    workspace.mkdir(exist_ok=True)
    spec = LaunchSpec(
        agent_profile_id="reference",
        executor_id="stdio",
        workspace=WorkspaceRef(path=str(workspace)),
    )
    extra = ("--pool", "--lease", str(report.lease))
    owner = await anyio.to_thread.run_sync(_serve, server, root, dsn, (*extra, "--member", "a"))
    survivor: subprocess.Popen[bytes] | None = None
    try:
        async with RemoteRuntime(server.url) as rt:
            ids: list[str] = []
            limit = anyio.Semaphore(8)

            async def launch() -> None:
                async with limit:
                    ids.append((await rt.launch(spec)).id)

            async with anyio.create_task_group() as tg:
                for _ in range(n):
                    tg.start_soon(launch)
            survivor = await anyio.to_thread.run_sync(
                _serve, server, root, dsn, (*extra, "--member", "b")
            )
            await anyio.to_thread.run_sync(_end, owner, signal.SIGKILL)
            killed = time.monotonic()
            waiting = set(ids)
            with anyio.move_on_after(report.lease + TAKEOVER_SLACK + 60):
                while waiting:  # one sweep asks each once; a sweep with no answer pauses
                    answered = 0
                    for execution_id in sorted(waiting):
                        try:
                            await rt.get_execution(execution_id)
                        except ServiceError:  # unreachable, no reply yet: asked again
                            continue
                        waiting.discard(execution_id)
                        answered += 1
                        report.takeover_s.setdefault("first", time.monotonic() - killed)
                    if waiting and not answered:
                        await anyio.sleep(0.05)
            if waiting:
                report.takeover_note = f"{len(waiting)} of {n} never answered"
            else:
                report.takeover_s["all"] = time.monotonic() - killed
    finally:
        await anyio.to_thread.run_sync(_end, owner, signal.SIGKILL)
        if survivor is not None:
            await anyio.to_thread.run_sync(_end, survivor)


def run(
    root: Path, *, prompts: int, events: int, takeover: int = 0, lease: float = LEASE
) -> NatsReport:
    """Every row (see the module docstring); nothing is printed."""
    report = NatsReport(prompts=prompts, events=events, takeover=takeover, lease=lease)
    try:
        with throwaway_nats() as server:
            if prompts:
                process = _serve(server, root)
                try:
                    anyio.run(_prompts, report, server, root, prompts, backend="trio")
                finally:
                    _end(process)
            for subscribers in (1, 10) if events else ():
                anyio.run(_events, report, server, events, subscribers, backend="trio")
            if takeover:
                try:
                    with throwaway_cluster() as cluster:
                        anyio.run(
                            _takeover, report, server, root, cluster.dsn, takeover, backend="trio"
                        )
                except ClusterUnavailable as exc:
                    report.takeover_note = f"take-over not measured: {exc}"
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
    out = [goal(figure, "trio", "compiled", ratio, GOAL, "x", detail=detail)]
    if report.takeover:
        first = report.takeover_s.get("first")
        detail = report.takeover_note or (
            f"first after {first:.1f} s, lease {report.lease:g} s" if first is not None else ""
        )
        figure = f"take-over of {report.takeover} executions after the owner's SIGKILL"
        limit = report.lease + TAKEOVER_SLACK
        value = report.takeover_s.get("all")
        out.append(goal(figure, "trio", "compiled", value, limit, "s", detail=detail))
    return out


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
    for which, label in (("first", "the first"), ("all", f"all {report.takeover}")):
        if which in report.takeover_s:
            table.row(
                f"take-over: {label} answering after SIGKILL",
                [f"{report.takeover_s[which]:.1f} s", ""],
                f"stdio reference agents (lost with their owner), lease {report.lease:g} s, "
                f"goal <= {report.lease + TAKEOVER_SLACK:g} s",
            )
    for note in (report.note, report.takeover_note):
        if note:
            table.lines.append(f"  ({note})")
