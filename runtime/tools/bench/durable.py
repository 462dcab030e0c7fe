"""``make bench``, durable executions: what a store costs (``Runtime(store=...)``).

* **Prompt round trip with a store**: ``Runtime.prompt`` against the reference agent
  (``--delay 0``) without a store, with a :class:`~acpfsm.runtime.store.SqliteStore` and with
  a :class:`~acpfsm.runtime.store.PostgresStore` (a throwaway cluster on a unix socket,
  :mod:`acpfsm.testing.postgres`), interleaved rounds under each backend: the medians and
  their ratios to the storeless one (goals ≤ 1.1× and ≤ 1.3×), and beside them this
  process's CPU per prompt, every thread counted (the store's writer thread, PostgreSQL's
  loop thread): wall-clock ratios swing with the machine's load, the CPU says what the store
  itself costs.
* **Recovery of stored executions**: rows of ``--recover-executions`` executions whose
  in-memory agents survived (:class:`~acpfsm.testing.memory.MemoryExecutor`), then the wall
  time of ``async with Runtime(store=...)``, which returns once every one is reattached and
  READY (goal < 2 s for 1,000), on both stores, and the CPU it took (the recovery is bound
  by the CPU that builds each session and runs its reattach flow, not by the store).
* **Store size per execution**: executions over the in-memory agent, one prompt each, the
  store's size afterwards (the SQLite file and its WAL; PostgreSQL's two tables) divided by
  their number.

Without PostgreSQL's server programs the PostgreSQL rows say why and show no figure.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import statistics
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from acpfsm.runtime.runtime import Runtime, reference_profile
from acpfsm.runtime.store import (
    ExecutionStore,
    PostgresStore,
    SqliteStore,
    StoreBatch,
    StoredExecution,
    StoredRow,
)
from acpfsm.runtime.types import AgentProfile, LaunchSpec, WorkspaceRef
from acpfsm.testing.memory import MemoryExecutor
from acpfsm.testing.postgres import ClusterUnavailable, PostgresCluster, throwaway_cluster

__all__ = ["DurableReport", "format_into", "goals", "run"]

AGENT = ("--delay", "0", "--log-level", "error")
MEMORY = AgentProfile(id="mem", command=("unused",))
PATHS = ("no store", "SqliteStore", "PostgresStore")


@dataclass
class DurableReport:
    prompts: int = 0
    medians_ms: dict[tuple[str, str], float] = field(default_factory=dict)
    """(backend, path) → the prompt round trip's median."""
    cpu_ms: dict[tuple[str, str], float] = field(default_factory=dict)
    """(backend, path) → CPU per prompt, every thread of this process."""
    recovery_s: dict[str, float] = field(default_factory=dict)
    recovery_cpu_s: dict[str, float] = field(default_factory=dict)
    recovered: int = 0
    bytes_per_execution: dict[str, float] = field(default_factory=dict)
    sized: int = 0
    note: str = ""


def _stores(kind: str, root: Path, cluster: PostgresCluster | None) -> ExecutionStore | None:
    if kind == "SqliteStore":
        return SqliteStore(root / f"bench-{uuid.uuid4().hex[:8]}.db")
    if kind == "PostgresStore" and cluster is not None:
        return PostgresStore(cluster.dsn, namespace=f"bench-{uuid.uuid4().hex[:8]}")
    return None


async def _prompts(
    report: DurableReport, root: Path, cluster: PostgresCluster | None, backend: str, n: int
) -> None:
    paths = [p for p in PATHS if p == "no store" or _stores(p, root, cluster) is not None]
    workspace = root / "ws"
    workspace.mkdir(exist_ok=True)
    spec = LaunchSpec(agent_profile_id="reference", workspace=WorkspaceRef(path=str(workspace)))
    samples: dict[str, list[float]] = {p: [] for p in paths}
    cpu: dict[str, float] = dict.fromkeys(paths, 0.0)
    async with contextlib.AsyncExitStack() as stack:
        runtimes: dict[str, tuple[Runtime, str]] = {}
        for path in paths:
            store = _stores(path, root, cluster) if path != "no store" else None
            rt = await stack.enter_async_context(
                Runtime(profiles=[reference_profile(*AGENT)], store=store)
            )
            ref = await rt.launch(spec)
            await rt.wait_ready(ref.id)
            for _ in range(20):  # warm up
                await rt.prompt(ref.id, "warm up")
            runtimes[path] = (rt, ref.id)
        rounds = 5
        for r in range(rounds):
            order = paths if r % 2 == 0 else list(reversed(paths))
            for path in order:
                rt, execution_id = runtimes[path]
                cpu_started = time.process_time()
                for _ in range(max(1, n // rounds)):
                    started = time.perf_counter()
                    await rt.prompt(execution_id, "hello")
                    samples[path].append((time.perf_counter() - started) * 1000)
                cpu[path] += time.process_time() - cpu_started
    for path, values in samples.items():
        report.medians_ms[(backend, path)] = statistics.median(values)
        report.cpu_ms[(backend, path)] = cpu[path] * 1000 / len(values)


def _row(i: int) -> StoredExecution:
    return StoredExecution(
        id=f"bench-{i:05d}",
        session_id=f"bench-{i:05d}",
        agent_profile_id="mem",
        executor_id="memory",
        workspace_path="/tmp",
        status="READY",
        acp_session_id=str(uuid.uuid4()),
        handle={"memory": True},
        started_at=dt.datetime.now(dt.UTC),
    )


async def _recovery(report: DurableReport, store: ExecutionStore, count: int, name: str) -> None:
    rows = [_row(i) for i in range(count)]
    await store.open()
    await store.write(StoreBatch(upserts=[StoredRow.of(r) for r in rows]))
    await store.close()
    ex = MemoryExecutor()
    ex.survivors.update(r.id for r in rows)
    rt = Runtime(profiles=[MEMORY], executors={"memory": ex}, store=store)
    started, cpu_started = time.perf_counter(), time.process_time()
    async with rt:
        report.recovery_s[name] = time.perf_counter() - started
        report.recovery_cpu_s[name] = time.process_time() - cpu_started
        ready = sum(e.status == "READY" for e in rt.list_executions())
        report.recovered = ready


async def _size(report: DurableReport, store: ExecutionStore, count: int, name: str) -> int:
    ex = MemoryExecutor()
    spec = LaunchSpec(
        agent_profile_id="mem", executor_id="memory", workspace=WorkspaceRef(path="/tmp")
    )
    async with Runtime(profiles=[MEMORY], executors={"memory": ex}, store=store) as rt:
        for _ in range(count):
            ref = await rt.launch(spec)
            transport = ex.last
            transport.auto_complete = True
            await rt.prompt(ref.id, "hello")
    report.sized = count
    return count


def _sqlite_bytes(path: Path) -> int:
    return sum(os.stat(p).st_size for p in (path, Path(f"{path}-wal")) if os.path.exists(p))


def _postgres_bytes(cluster: PostgresCluster) -> int:
    import psycopg

    with psycopg.connect(cluster.dsn) as conn:
        row = conn.execute(
            "SELECT pg_total_relation_size('acpfsm_executions') "
            "+ pg_total_relation_size('acpfsm_events')"
        ).fetchone()
    return int(row[0]) if row is not None else 0


@contextlib.contextmanager
def _cluster(report: DurableReport) -> Iterator[PostgresCluster | None]:
    try:
        with throwaway_cluster() as cluster:
            yield cluster
    except ClusterUnavailable as exc:
        report.note = f"PostgreSQL rows not measured: {exc}"
        yield None


def run(root: Path, *, backends: tuple[str, ...], prompts: int, executions: int) -> DurableReport:
    """Every durable row (see the module docstring); nothing is printed."""
    report = DurableReport(prompts=prompts)
    with _cluster(report) as cluster:
        for backend in backends:
            anyio.run(_prompts, report, root, cluster, backend, prompts, backend=backend)
        stores: dict[str, Any] = {"SqliteStore": SqliteStore(root / "recover.db")}
        if cluster is not None:
            stores["PostgresStore"] = PostgresStore(cluster.dsn, namespace="bench-recover")
        for name, store in stores.items():
            anyio.run(_recovery, report, store, executions, name)
        sized = max(1, executions // 5)
        path = root / "size.db"
        anyio.run(_size, report, SqliteStore(path), sized, "SqliteStore")
        report.bytes_per_execution["SqliteStore"] = _sqlite_bytes(path) / sized
        if cluster is not None:
            before = _postgres_bytes(cluster)
            store = PostgresStore(cluster.dsn, namespace="bench-size")
            anyio.run(_size, report, store, sized, "PostgresStore")
            report.bytes_per_execution["PostgresStore"] = (
                _postgres_bytes(cluster) - before
            ) / sized
    return report


def goals(report: DurableReport | None, goal: type[Any]) -> list[Any]:
    """The summary lines (``goal``: bench's ``Goal``)."""
    if report is None:
        return []
    out = []
    for (backend, path), median in sorted(report.medians_ms.items()):
        base = report.medians_ms.get((backend, "no store"))
        if path == "no store" or not base:
            continue
        limit = 1.1 if path == "SqliteStore" else 1.3
        cpu, cpu_base = report.cpu_ms.get((backend, path)), report.cpu_ms.get((backend, "no store"))
        detail = f"{median:.3f} vs {base:.3f} ms"
        if cpu is not None and cpu_base:
            detail += f"; CPU {cpu:.3f} vs {cpu_base:.3f} ms ({cpu / cpu_base:.2f}x)"
        out.append(
            goal(
                f"Runtime.prompt median with {path} vs without",
                backend,
                "compiled",
                median / base,
                limit,
                "x",
                detail=detail,
            )
        )
    for name, seconds in sorted(report.recovery_s.items()):
        figure = f"recovery of {report.recovered:,} stored executions ({name})"
        cpu_s = report.recovery_cpu_s.get(name)
        detail = "" if cpu_s is None else f"CPU {cpu_s:.2f} s"
        out.append(goal(figure, "trio", "compiled", seconds, 2.0, "s", strict=True, detail=detail))
    return out


_WHERE_THE_TIME_GOES = (
    "Where the time goes (cProfile): a store adds to a prompt the writer's hop to its thread "
    "(a batch per 5 ms gathered: the wake-up, the GIL handed over) and the encoding of the "
    "row and the events; on a loaded machine the wall-clock ratios swing with the load, so "
    "read them beside the CPU. The recovery is bound by the CPU that builds each session and "
    "runs its reattach flow, not by the store's reads and writes."
)


def format_into(table: Any, report: DurableReport | None) -> None:
    """The section's detail lines (``table``: bench's table)."""
    if report is None:
        return
    table.section(
        f"durable executions ({report.prompts} prompts per path)",
        ["median ms", "x no store"],
        width=14,
    )
    for (backend, path), median in sorted(report.medians_ms.items()):
        base = report.medians_ms.get((backend, "no store"))
        ratio = f"{median / base:.2f}x" if base else "n/a"
        cpu = report.cpu_ms.get((backend, path))
        note = "" if cpu is None else f"CPU {cpu:.3f} ms per prompt, every thread"
        table.row(f"Runtime.prompt, {path} [{backend}]", [f"{median:.3f}", ratio], note)
    for name, seconds in sorted(report.recovery_s.items()):
        table.row(
            f"recovery of {report.recovered:,} executions, {name}",
            [f"{seconds * 1000:.0f}", ""],
            "ms to READY",
        )
    for name, size in sorted(report.bytes_per_execution.items()):
        table.row(
            f"store size per execution, {name}",
            [f"{size:,.0f}", ""],
            f"bytes, {report.sized} executions, one prompt each",
        )
    table.lines.extend(
        textwrap.wrap(_WHERE_THE_TIME_GOES, 92, initial_indent="  ", subsequent_indent="  ")
    )
    if report.note:
        table.lines.append(f"  {report.note}")
