"""Helpers for the durable-execution tests: a store of either backend, rows written by hand,
a log read back; the app killed with ``kill -9`` (``tests/peers/durable_app.py``) and its
agents."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from acpfsm.runtime import Runtime
from acpfsm.runtime import events as le
from acpfsm.runtime.store import (
    ExecutionStore,
    PostgresStore,
    SqliteStore,
    StoreBatch,
    StoredExecution,
    StoredRow,
)

StoreFactory = Callable[[], ExecutionStore]

#: (store, the app's backend, where the kill falls): every pair of values at least once
PAIRWISE = [
    ("sqlite", "trio", "mid"),
    ("sqlite", "asyncio", "between"),
    ("postgres", "trio", "between"),
    ("postgres", "asyncio", "mid"),
]


def store_factory(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> StoreFactory:
    """New handles on one store of ``kind`` (``sqlite``: a file in ``tmp_path``;
    ``postgres``: a namespace of its own in the session's throwaway cluster)."""
    if kind == "sqlite":
        path = tmp_path / "executions.db"
        return lambda: SqliteStore(path)
    cluster = request.getfixturevalue("postgres_cluster")
    namespace = f"t-{uuid.uuid4().hex[:12]}"
    return lambda: PostgresStore(cluster.dsn, namespace=namespace)


def stored(execution_id: str = "", **fields: Any) -> StoredExecution:
    """A row as a Runtime over the memory executor would have written it."""
    values: dict[str, Any] = {
        "id": execution_id or str(uuid.uuid4()),
        "session_id": "",
        "agent_profile_id": "mem",
        "executor_id": "memory",
        "workspace_path": "/tmp",
        "status": "READY",
        "acp_session_id": "acp-1",
        "handle": {"memory": True},
        "started_at": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
    }
    values.update(fields)
    values["session_id"] = values["session_id"] or values["id"]
    return StoredExecution(**values)


async def write_rows(make: StoreFactory, *records: StoredExecution) -> None:
    store = make()
    await store.open()
    try:
        await store.write(StoreBatch(upserts=[StoredRow.of(r) for r in records]))
    finally:
        await store.close()


async def read_log(
    rt: Runtime,
    execution_id: str,
    after: int = 0,
    *,
    until: type[Any] | None = None,
    upto: int | None = None,
    limit: float = 10.0,
) -> list[le.SequencedEvent]:
    """What ``rt.subscribe`` delivers until the log ends, or (a live one) up to the first
    event of type ``until`` or the event numbered ``upto``; bounded by ``limit`` seconds."""
    out: list[le.SequencedEvent] = []
    with anyio.fail_after(limit):
        async for item in rt.subscribe(execution_id, after=after):
            out.append(item)
            if until is not None and isinstance(item.event, until):
                break
            if upto is not None and item.seq >= upto:
                break
    return out


def kinds(items: list[le.SequencedEvent]) -> list[str]:
    return [type(i.event).__name__ for i in items]


# --- the app in a process of its own ---------------------------------------------------------

APP = Path(__file__).resolve().parents[1] / "peers" / "durable_app.py"
REPO = Path(__file__).resolve().parents[2]


def agents_of(marker: str) -> list[int]:
    """Live processes carrying the run's marker (the agents the app started)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"ACPFSM_DURABLE_TEST={marker}".encode() in env and state not in ("Z", "X"):
            out.append(int(entry.name))
    return sorted(out)


class App:
    """One run of the app: its config, its output lines, its process."""

    def __init__(self, base: dict[str, Any], tmp: Path, **config: Any) -> None:
        self.config = {**base, **config}
        self.config.setdefault("marker", uuid.uuid4().hex)
        self.config["seen"] = str(tmp / f"seen-{uuid.uuid4().hex[:8]}.jsonl")
        self.path = tmp / f"app-{uuid.uuid4().hex[:8]}.json"
        self.path.write_text(json.dumps(self.config))
        self.lines: dict[str, Any] = {}
        self.proc = subprocess.Popen(
            [sys.executable, str(APP), str(self.path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )

    def read_until(self, key: str, *, limit: float = 120.0) -> Any:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + limit
        while key not in self.lines:
            line = self.proc.stdout.readline()
            if not line:
                stderr = self.proc.stderr.read() if self.proc.stderr else ""
                pytest.fail(f"the app ended before {key!r}:\n{stderr[-4000:]}")
            self.lines.update(json.loads(line))
            assert time.monotonic() < deadline, f"no {key!r} within {limit} s"
        return self.lines[key]

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.close()

    def close(self) -> None:
        self.proc.wait(timeout=120)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()

    def seen(self) -> dict[str, list[tuple[int, str]]]:
        out: dict[str, list[tuple[int, str]]] = {}
        path = Path(self.config["seen"])
        for line in path.read_text().splitlines() if path.exists() else ():
            execution_id, seq, kind = json.loads(line)
            out.setdefault(execution_id, []).append((seq, kind))
        return out


def store_config_for(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """The app's store settings: a file in ``tmp_path``, or a namespace of its own in the
    session's PostgreSQL cluster."""
    if kind == "sqlite":
        return {"store": "sqlite", "path": str(tmp_path / "executions.db")}
    cluster = request.getfixturevalue("postgres_cluster")
    return {"store": "postgres", "dsn": cluster.dsn, "namespace": uuid.uuid4().hex[:12]}


def check_log(
    before: dict[str, list[tuple[int, str]]], recovered: dict[str, Any], ids: list[str]
) -> None:
    """The log of each execution, read from 0 after the restart: numbered 1, 2, 3 … with no
    gap or double, and what the killed app had seen is its beginning, event for event."""
    for execution_id in ids:
        logged = [tuple(e) for e in recovered[execution_id]["events"]]
        assert [seq for seq, _ in logged] == list(range(1, len(logged) + 1))
        seen = sorted(set(before.get(execution_id, [])))
        assert seen, f"the app saw nothing of {execution_id}"
        assert logged[: len(seen)] == seen


def kill_restart_loop(
    base: dict[str, Any],
    tmp_path: Path,
    each_round: Callable[[App, dict[str, Any]], None],
    rounds: int = 4,
) -> App:
    """``rounds`` apps on ``base``, alternating trio and asyncio, each killed with ``kill -9``
    at a random point (seeded: during recovery, a launch, a turn, or at rest): after each
    restart every execution ever launched is there, ``each_round`` checks the app and what it
    recovered, and what the killed app had seen is each log's beginning, event for event.
    Then a last app recovers everything (checked the same way) and stops it; it is returned,
    closed."""
    rng = random.Random(29)
    known: set[str] = set()
    killed: App | None = None
    for round_ in range(rounds):
        app = App(
            base,
            tmp_path,
            recover=True,
            launch=1,
            turn=rng.choice(["mid", "between"]),
            then="wait",
            backend=("trio", "asyncio")[round_ % 2],
        )
        recovered = app.read_until("recovered")
        assert known <= set(recovered), known - set(recovered)
        each_round(app, recovered)
        if killed is not None:  # nothing the killed app saw is lost or doubled
            check_log(killed.seen(), recovered, list(killed.seen()))
        known |= set(recovered)
        if rng.random() < 0.5:
            time.sleep(rng.uniform(0.0, 1.5))  # somewhere in the recovery or the launch
        else:
            known |= set(app.read_until("ready"))
            time.sleep(rng.uniform(0.0, 0.3))
        app.kill()
        killed = app
    final = App(base, tmp_path, recover=True, then="stop")
    recovered = final.read_until("recovered")
    assert known <= set(recovered)
    assert killed is not None
    check_log(killed.seen(), recovered, list(killed.seen()))
    final.read_until("done")
    final.close()
    return final
