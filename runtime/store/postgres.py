"""``PostgresStore``: the execution store in PostgreSQL, for several processes and hosts, on
psycopg 3 (``pip install 'acpfsm[postgres]'``).

* **Namespaces.** Apps sharing a database keep their executions apart by ``namespace``
  (default ``"default"``): a Runtime recovers its own namespace's executions only.
* **One holder per namespace.** Opening takes a session-level advisory lock
  (``pg_try_advisory_lock``) on the writer's connection and records the holder (pid, host,
  since) in ``acpfsm_holders``; a second process opening the same namespace is refused with
  :class:`~.errors.StoreLocked` naming it. The lock lives as long as that connection: when
  the connection breaks (the server restarted), the next write reconnects and takes the lock
  again before writing, or is refused if someone else took it meanwhile.
* **Writes** go through that one connection, one transaction per batch; **reads** (event
  replays for subscribers) through psycopg's connection pool.
* **Migrations** (:mod:`.migrations`) are checked and applied at open, under a
  transaction-level advisory lock so two processes never migrate at once.
* psycopg's async API is asyncio's: under trio every call runs on an asyncio loop in a thread
  of the store's own (:mod:`acpfsm.runtime._aioloop`).

psycopg's, psycopg_pool's and the OS's exceptions are translated here (:func:`translate`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec
import psycopg
import psycopg.conninfo
import psycopg.errors
import psycopg_pool

from .._aioloop import AsyncioLoopThread, DirectRunner
from .errors import (
    StoreCorrupt,
    StoreError,
    StoreFull,
    StoreLocked,
    StoreReadOnly,
    StoreUnavailable,
)
from .migrations import pending
from .records import StoreBatch, StoredEvent, StoredExecution, decode_record

__all__ = ["PostgresStore", "translate"]

T = TypeVar("T")

_UPSERT = """INSERT INTO acpfsm_executions
(namespace, id, executor_id, status, acp_session_id, record, updated_at)
VALUES (%s, %s, %s, %s, %s, %s, now())
ON CONFLICT (namespace, id) DO UPDATE SET executor_id = excluded.executor_id,
status = excluded.status, acp_session_id = excluded.acp_session_id, record = excluded.record,
updated_at = excluded.updated_at"""
_MIGRATION_LOCK = 0x61637066736D  # "acpfsm": one migration at a time in a database


def translate(exc: BaseException, store: str) -> StoreError:
    """The :class:`~.errors.StoreError` for what psycopg, its pool or the OS raised."""
    if isinstance(exc, StoreError):
        return exc
    text = (str(exc) or type(exc).__name__).strip()
    if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
        return StoreReadOnly(f"the execution store {store} is read-only: {text}")
    if isinstance(exc, psycopg.errors.DiskFull):
        return StoreFull(f"the execution store {store} is full: {text}")
    if isinstance(
        exc, psycopg.OperationalError | psycopg_pool.PoolTimeout | psycopg.InterfaceError | OSError
    ):
        return StoreUnavailable(f"the execution store {store} is unavailable: {text}")
    if isinstance(
        exc, psycopg.errors.UndefinedTable | msgspec.DecodeError | msgspec.ValidationError
    ):
        return StoreCorrupt(f"the execution store {store} is damaged: {text}")
    return StoreError(f"the execution store {store} failed: {text}")


def _lock_key(namespace: str) -> int:
    """The namespace's advisory lock key (a signed 64-bit integer)."""
    digest = hashlib.sha256(f"acpfsm:{namespace}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PostgresStore:
    """The execution store in a PostgreSQL database (see the module docstring). ``dsn`` is a
    libpq connection string or URI; ``timeout`` bounds each connection attempt and each wait
    for a pooled connection (seconds)."""

    def __init__(
        self, dsn: str, *, namespace: str = "default", pool_size: int = 4, timeout: float = 5.0
    ) -> None:
        if not namespace:
            raise ValueError("PostgresStore: the namespace must not be empty")
        self.dsn = dsn
        self.namespace = namespace
        self.pool_size = pool_size
        self.timeout = timeout
        self._runner: AsyncioLoopThread | DirectRunner | None = None
        self._writer: psycopg.AsyncConnection[Any] | None = None
        self._pool: psycopg_pool.AsyncConnectionPool | None = None
        self._key = _lock_key(namespace)

    @property
    def name(self) -> str:
        try:
            parts = psycopg.conninfo.conninfo_to_dict(self.dsn)
        except psycopg.ProgrammingError:
            parts = {}
        shown = " ".join(f"{k}={v}" for k, v in sorted(parts.items()) if k != "password")
        return f"postgresql:[{shown}] namespace {self.namespace!r}"

    async def _call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        runner = self._runner
        if runner is None:
            raise StoreUnavailable(f"the execution store {self.name} is not open")
        try:
            return await runner.run(fn, *args)
        except (psycopg.Error, psycopg_pool.PoolTimeout, OSError) as exc:
            raise translate(exc, self.name) from exc
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise translate(exc, self.name) from exc

    # --- open / close ------------------------------------------------------------------------

    async def open(self) -> list[StoredExecution]:
        runner = AsyncioLoopThread("acpfsm-postgres")  # off the caller's loop, on any backend
        await runner.__aenter__()
        self._runner = runner
        try:
            return await self._call(self._open)
        except BaseException:
            await self.close()
            raise

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(
            self.dsn, autocommit=True, connect_timeout=max(1, round(self.timeout))
        )

    async def _open(self) -> list[StoredExecution]:
        self._writer = await self._take_lock()
        await self._migrate(self._writer)
        await self._record_holder(self._writer)
        pool = psycopg_pool.AsyncConnectionPool(
            self.dsn,
            min_size=1,
            max_size=max(1, self.pool_size),
            open=False,
            timeout=self.timeout,
            check=psycopg_pool.AsyncConnectionPool.check_connection,
            name="acpfsm-store",
        )
        await pool.open(wait=True, timeout=self.timeout)
        self._pool = pool
        return await self._load(self._writer)

    async def _take_lock(self) -> psycopg.AsyncConnection[Any]:
        conn = await self._connect()
        try:
            row = await (
                await conn.execute("SELECT pg_try_advisory_lock(%s)", (self._key,))
            ).fetchone()
            if row is None or not row[0]:
                raise StoreLocked(self.name, await self._holder_of(conn))
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _holder_of(self, conn: psycopg.AsyncConnection[Any]) -> dict[str, Any]:
        try:
            row = await (
                await conn.execute(
                    "SELECT pid, host, since FROM acpfsm_holders WHERE namespace = %s",
                    (self.namespace,),
                )
            ).fetchone()
        except psycopg.errors.UndefinedTable:
            return {}
        if row is None:
            return {}
        return {"pid": row[0], "host": row[1], "since": row[2].isoformat(timespec="seconds")}

    async def _record_holder(self, conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute(
            "INSERT INTO acpfsm_holders (namespace, pid, host, since) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (namespace) DO UPDATE SET pid = excluded.pid, host = excluded.host, "
            "since = excluded.since",
            (self.namespace, os.getpid(), socket.gethostname(), dt.datetime.now(dt.UTC)),
        )

    async def _migrate(self, conn: psycopg.AsyncConnection[Any]) -> None:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS acpfsm_schema (version INTEGER NOT NULL)"
            )
            row = await (await conn.execute("SELECT version FROM acpfsm_schema")).fetchone()
            if row is None:
                await conn.execute("INSERT INTO acpfsm_schema VALUES (0)")
                version = 0
            else:
                version = int(row[0])
            for migration in pending(version, self.name):
                for statement in migration.postgres:
                    await conn.execute(statement)
                await conn.execute("UPDATE acpfsm_schema SET version = %s", (migration.version,))

    async def _load(self, conn: psycopg.AsyncConnection[Any]) -> list[StoredExecution]:
        last_rows = await (
            await conn.execute(
                "SELECT execution_id, MAX(seq) FROM acpfsm_events WHERE namespace = %s "
                "GROUP BY execution_id",
                (self.namespace,),
            )
        ).fetchall()
        last = {str(r[0]): int(r[1]) for r in last_rows}
        rows = await (
            await conn.execute(
                "SELECT id, record FROM acpfsm_executions WHERE namespace = %s ORDER BY id",
                (self.namespace,),
            )
        ).fetchall()
        out: list[StoredExecution] = []
        for execution_id, blob in rows:
            try:
                record = decode_record(bytes(blob))
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise StoreCorrupt(
                    f"the execution store {self.name} holds an unreadable row for execution "
                    f"{execution_id!r}: {exc}"
                ) from None
            record.last_seq = last.get(str(execution_id), 0)
            out.append(record)
        return out

    async def close(self) -> None:
        runner, self._runner = self._runner, None
        if runner is None:
            return
        try:
            await runner.run(self._close)
        except (psycopg.Error, OSError):
            pass  # closing what is already broken
        finally:
            await runner.__aexit__(None, None, None)

    async def _close(self) -> None:
        pool, self._pool = self._pool, None
        writer, self._writer = self._writer, None
        try:
            if pool is not None:
                await pool.close()
        finally:
            if writer is not None:
                try:  # at once: the server ends a closed connection's session a moment later
                    if not writer.broken:
                        await writer.execute("SELECT pg_advisory_unlock(%s)", (self._key,))
                finally:
                    await writer.close()

    # --- writes and reads ----------------------------------------------------------------------

    async def write(self, batch: StoreBatch) -> None:
        if not batch.empty():
            await self._call(self._write, batch)

    async def _writer_conn(self) -> psycopg.AsyncConnection[Any]:
        conn = self._writer
        if conn is None or conn.closed or conn.broken:
            self._writer = None
            if conn is not None:
                await conn.close()
            conn = self._writer = await self._take_lock()  # the lock went with the session
            await self._record_holder(conn)
        return conn

    async def _write(self, batch: StoreBatch) -> None:
        conn = await self._writer_conn()
        ns = self.namespace
        async with conn.transaction(), conn.cursor() as cur:
            if batch.upserts:
                await cur.executemany(
                    _UPSERT,
                    [
                        (ns, r.id, r.executor_id, r.status, r.acp_session_id, r.record)
                        for r in batch.upserts
                    ],
                )
            for execution_id, events in batch.events.items():
                await cur.executemany(
                    "INSERT INTO acpfsm_events (namespace, execution_id, seq, body) "
                    "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    [(ns, execution_id, e.seq, e.body) for e in events],
                )
                newest = max(e.seq for e in events)
                await cur.execute(
                    "DELETE FROM acpfsm_events WHERE namespace = %s AND execution_id = %s "
                    "AND seq <= %s",
                    (ns, execution_id, newest - batch.keep_events),
                )
            for execution_id in batch.deletes:
                await cur.execute(
                    "DELETE FROM acpfsm_executions WHERE namespace = %s AND id = %s",
                    (ns, execution_id),
                )
                await cur.execute(
                    "DELETE FROM acpfsm_events WHERE namespace = %s AND execution_id = %s",
                    (ns, execution_id),
                )

    async def read_events(
        self, execution_id: str, after: int, limit: int
    ) -> tuple[int, list[StoredEvent]]:
        return await self._call(self._read_events, execution_id, after, limit)

    async def _read_events(
        self, execution_id: str, after: int, limit: int
    ) -> tuple[int, list[StoredEvent]]:
        pool = self._pool
        if pool is None:
            raise StoreUnavailable(f"the execution store {self.name} is not open")
        async with pool.connection() as conn:
            first = await (
                await conn.execute(
                    "SELECT MIN(seq) FROM acpfsm_events WHERE namespace = %s AND execution_id = %s",
                    (self.namespace, execution_id),
                )
            ).fetchone()
            rows = await (
                await conn.execute(
                    "SELECT seq, body FROM acpfsm_events WHERE namespace = %s "
                    "AND execution_id = %s AND seq > %s ORDER BY seq LIMIT %s",
                    (self.namespace, execution_id, after, limit),
                )
            ).fetchall()
        oldest = int(first[0]) if first is not None and first[0] is not None else 0
        return oldest, [StoredEvent(int(seq), bytes(body)) for seq, body in rows]
