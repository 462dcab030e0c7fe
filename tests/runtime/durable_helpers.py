"""Helpers for the durable-execution tests: a store of either backend, rows written by hand,
a log read back."""

from __future__ import annotations

import datetime as dt
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
