"""``SqliteStore``: the embedded execution store of one process, on the standard library's
sqlite3.

* **One file**, created ``0600`` (its ``-wal`` and ``-shm`` files take the same mode), in WAL
  mode with ``synchronous=NORMAL``: a commit survives the process being killed (``kill -9``,
  the OOM killer); a power loss may lose the last commits, never the file.
* **Off the event loop, one writer**: every statement runs on the store's one thread (a
  single-worker executor); the event loop awaits it without blocking (see
  :func:`acpfsm.runtime._aioloop.await_future`).
* **One process at a time**: opening takes an exclusive advisory lock on ``<file>.lock`` (also
  ``0600``) and writes the holder into it (pid, host, since); a second process is refused with
  :class:`~.errors.StoreLocked` naming the holder, and never touches the database. The lock
  goes with the process, however it ends.
* **Checked at open**: the schema's migrations (:mod:`.migrations`), and ``PRAGMA
  quick_check``: a damaged or foreign file is :class:`~.errors.StoreCorrupt`, not opened.
* **A file that disappears** (removed, renamed away, its volume gone) is noticed before each
  transaction (the path must still name the file opened): writes fail with
  :class:`~.errors.StoreUnavailable` until the same file is back at its path; they never go
  to a file nobody can open again.

sqlite3's and the OS's exceptions are translated here (:func:`translate`).
"""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import errno
import fcntl
import json
import os
import socket
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from .._aioloop import await_future
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

__all__ = ["SqliteStore", "translate"]

T = TypeVar("T")

_UPSERT = """INSERT INTO executions (id, executor_id, status, acp_session_id, record, updated_at)
VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET executor_id = excluded.executor_id, status = excluded.status,
acp_session_id = excluded.acp_session_id, record = excluded.record,
updated_at = excluded.updated_at"""


def translate(exc: BaseException, store: str) -> StoreError:
    """The :class:`~.errors.StoreError` for what sqlite3 or the OS raised."""
    if isinstance(exc, StoreError):
        return exc
    text = str(exc) or type(exc).__name__
    lowered = text.lower()
    if isinstance(exc, OSError):
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return StoreFull(f"the execution store {store} is full: {text}")
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return StoreReadOnly(f"the execution store {store} cannot be written: {text}")
        return StoreUnavailable(f"the execution store {store} is unavailable: {text}")
    if isinstance(exc, sqlite3.OperationalError):
        if "full" in lowered:
            return StoreFull(f"the execution store {store} is full: {text}")
        if "readonly" in lowered or "read-only" in lowered:
            return StoreReadOnly(f"the execution store {store} is read-only: {text}")
        return StoreUnavailable(f"the execution store {store} is unavailable: {text}")
    if isinstance(exc, sqlite3.DatabaseError | msgspec.DecodeError | msgspec.ValidationError):
        return StoreCorrupt(f"the execution store {store} is damaged: {text}")
    return StoreError(f"the execution store {store} failed: {text}")


def _holder() -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class SqliteStore:
    """The execution store in one SQLite file (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 5.0) -> None:
        self.path = Path(path)
        self.busy_timeout = busy_timeout
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None
        self._lock_fd: int | None = None
        self._ident: tuple[int, int] | None = None

    @property
    def name(self) -> str:
        return f"sqlite:{self.path}"

    @property
    def lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

    # --- the one thread ----------------------------------------------------------------------

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._pool is None:
            raise StoreUnavailable(f"the execution store {self.name} is not open")
        try:
            return await await_future(self._pool.submit(fn, *args))
        except (sqlite3.Error, OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise translate(exc, self.name) from exc

    # --- open / close ------------------------------------------------------------------------

    async def open(self) -> list[StoredExecution]:
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="acpfsm-sqlite")
        try:
            return await self._call(self._open)
        except BaseException:
            await self.close()
            raise

    def _lock(self) -> None:
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise StoreLocked(self.name, holder) from None
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd = fd
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(_holder()).encode(), 0)

    def _open(self) -> list[StoredExecution]:
        self._lock()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        os.close(fd)
        conn = self._conn = sqlite3.connect(
            self.path, timeout=self.busy_timeout, isolation_level=None
        )
        if conn.execute("PRAGMA journal_mode=WAL").fetchone()[0].lower() != "wal":
            raise StoreUnavailable(f"the execution store {self.name} cannot use WAL mode")
        conn.execute("PRAGMA synchronous=NORMAL")
        check = conn.execute("PRAGMA quick_check(1)").fetchone()[0]
        if check != "ok":
            raise StoreCorrupt(f"the execution store {self.name} is damaged: {check}")
        self._migrate(conn)
        st = os.stat(self.path)
        self._ident = (st.st_dev, st.st_ino)
        return self._load(conn)

    def _migrate(self, conn: sqlite3.Connection) -> None:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "acpfsm_schema" not in tables:
            if tables:
                raise StoreCorrupt(
                    f"the execution store {self.name} is a database of something else "
                    f"(tables: {', '.join(sorted(tables))})"
                )
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("CREATE TABLE acpfsm_schema (version INTEGER NOT NULL)")
            conn.execute("INSERT INTO acpfsm_schema VALUES (0)")
            conn.execute("COMMIT")
        row = conn.execute("SELECT version FROM acpfsm_schema").fetchone()
        version = int(row[0]) if row is not None else -1
        for migration in pending(version, self.name):
            conn.execute("BEGIN IMMEDIATE")
            try:
                for statement in migration.sqlite:
                    conn.execute(statement)
                conn.execute("UPDATE acpfsm_schema SET version = ?", (migration.version,))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def _load(self, conn: sqlite3.Connection) -> list[StoredExecution]:
        last = dict(conn.execute("SELECT execution_id, MAX(seq) FROM events GROUP BY 1"))
        out: list[StoredExecution] = []
        for execution_id, blob in conn.execute("SELECT id, record FROM executions ORDER BY id"):
            try:
                record = decode_record(blob)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise StoreCorrupt(
                    f"the execution store {self.name} holds an unreadable row for execution "
                    f"{execution_id!r}: {exc}"
                ) from None
            record.last_seq = int(last.get(execution_id) or 0)
            out.append(record)
        return out

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        try:
            await await_future(pool.submit(self._close))
        finally:
            pool.shutdown(wait=False)

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        fd, self._lock_fd = self._lock_fd, None
        try:
            if conn is not None:
                conn.close()
        finally:
            if fd is not None:
                os.close(fd)  # releases the lock

    # --- writes and reads ----------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        conn = self._conn
        if conn is None:
            raise StoreUnavailable(f"the execution store {self.name} is not open")
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            st = None
        if st is None or (st.st_dev, st.st_ino) != self._ident:
            raise StoreUnavailable(
                f"the execution store {self.name} was removed or replaced while open: "
                "writes wait until it is back at its path"
            )
        return conn

    async def write(self, batch: StoreBatch) -> None:
        if not batch.empty():
            await self._call(self._write, batch)

    def _write(self, batch: StoreBatch) -> None:
        conn = self._connection()
        now = time.time()
        conn.execute("BEGIN IMMEDIATE")
        try:
            for r in batch.upserts:
                conn.execute(
                    _UPSERT,
                    (r.id, r.executor_id, r.status, r.acp_session_id, r.record, now),
                )
            for execution_id, events in batch.events.items():
                conn.executemany(
                    "INSERT OR REPLACE INTO events (execution_id, seq, body) VALUES (?, ?, ?)",
                    [(execution_id, e.seq, e.body) for e in events],
                )
                newest = max(e.seq for e in events)
                conn.execute(
                    "DELETE FROM events WHERE execution_id = ? AND seq <= ?",
                    (execution_id, newest - batch.keep_events),
                )
            for execution_id in batch.deletes:
                conn.execute("DELETE FROM executions WHERE id = ?", (execution_id,))
                conn.execute("DELETE FROM events WHERE execution_id = ?", (execution_id,))
            conn.execute("COMMIT")
        except BaseException:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # the failed statement already rolled the transaction back
            raise

    async def read_events(
        self, execution_id: str, after: int, limit: int
    ) -> tuple[int, list[StoredEvent]]:
        return await self._call(self._read_events, execution_id, after, limit)

    def _read_events(
        self, execution_id: str, after: int, limit: int
    ) -> tuple[int, list[StoredEvent]]:
        conn = self._conn
        if conn is None:
            raise StoreUnavailable(f"the execution store {self.name} is not open")
        (first,) = conn.execute(
            "SELECT MIN(seq) FROM events WHERE execution_id = ?", (execution_id,)
        ).fetchone()
        rows = conn.execute(
            "SELECT seq, body FROM events WHERE execution_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (execution_id, after, limit),
        ).fetchall()
        return int(first or 0), [StoredEvent(int(seq), bytes(body)) for seq, body in rows]
