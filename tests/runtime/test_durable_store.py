"""A bad store: held by another process (at open; another program's write transaction
mid-run), corrupt, of a newer schema, read-only, full, disappearing mid-run, PostgreSQL stopped
and restarted. Every case is a typed error; while the Runtime runs it stays up, its executions go
on, and nothing is lost once the store is back."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import anyio
import pytest

from acpfsm.runtime import Runtime
from acpfsm.runtime import events as le
from acpfsm.runtime.store import (
    PostgresStore,
    SqliteStore,
    StoreCorrupt,
    StoreLocked,
    StoreReadOnly,
    StoreSchemaError,
)
from acpfsm.runtime.store.postgres import _lock_key
from acpfsm.testing.postgres import PostgresCluster

from .durable_helpers import StoreFactory, kinds, read_log, store_factory
from .memory_runtime import make_runtime, memory_agent, spec, wait_until

HOLDER = textwrap.dedent(
    """
    import sys, anyio
    from acpfsm.runtime.store import SqliteStore, PostgresStore

    async def main():
        kind, where, ns = sys.argv[1:4]
        store = SqliteStore(where) if kind == "sqlite" else PostgresStore(where, namespace=ns)
        await store.open()
        print("held", flush=True)
        sys.stdin.read()  # until the test lets go (or kills us)
        await store.close()

    anyio.run(main)
    """
)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_second_process_is_refused_naming_the_holder(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    namespace = f"t-{uuid.uuid4().hex[:12]}"
    if kind == "sqlite":
        where = str(tmp_path / "executions.db")
        make: StoreFactory = lambda: SqliteStore(where)
    else:
        cluster: PostgresCluster = request.getfixturevalue("postgres_cluster")
        where = cluster.dsn
        make = lambda: PostgresStore(where, namespace=namespace)
    with subprocess.Popen(  # noqa: ASYNC220 - a holder outside this event loop
        [sys.executable, "-c", HOLDER, kind, where, namespace],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "held\n"
            with pytest.raises(StoreLocked) as info:
                async with make_runtime(memory_agent(), store=make()):
                    pytest.fail("a second holder was let in")
            assert info.value.holder["pid"] == holder.pid
            assert str(holder.pid) in str(info.value)
        finally:
            holder.kill()  # the lock goes with the process, however it ends
            holder.wait()
    if kind == "postgres":
        await anyio.to_thread.run_sync(_outlive_the_session, where, namespace)
    async with make_runtime(memory_agent(auto_complete=True), store=make()) as rt:
        ref = await rt.launch(spec())
        await rt.prompt(ref.id, "hello")
    if kind == "sqlite":
        assert os.stat(where).st_mode & 0o777 == 0o600
        assert os.stat(where + ".lock").st_mode & 0o777 == 0o600


def _outlive_the_session(dsn: str, namespace: str) -> None:
    """Until the server has ended the killed holder's session (its lock goes with it).

    The kernel frees a dead process's file lock before ``wait()`` returns; PostgreSQL ends a
    session only once its backend has read the closed connection, which may come after: a
    blocking ``pg_advisory_lock`` returns exactly then (a new store opened before that is
    refused, rightly: the session still holds the lock)."""
    import psycopg

    key = _lock_key(namespace)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET statement_timeout = '30s'")
        conn.execute("SELECT pg_advisory_lock(%s)", (key,))
        conn.execute("SELECT pg_advisory_unlock(%s)", (key,))


async def test_a_corrupt_or_foreign_file_is_refused(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database" * 500)
    with pytest.raises(StoreCorrupt, match="damaged"):
        async with make_runtime(memory_agent(), store=SqliteStore(garbage)):
            pass
    assert garbage.read_bytes() == b"this is not a database" * 500  # left as it was
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER)")
    with pytest.raises(StoreCorrupt, match="something else"):
        async with make_runtime(memory_agent(), store=SqliteStore(foreign)):
            pass


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_newer_schema_is_refused(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    make = store_factory(kind, tmp_path, request)
    async with make_runtime(memory_agent(), store=make()):
        pass
    if kind == "sqlite":
        with sqlite3.connect(tmp_path / "executions.db") as conn:
            conn.execute("UPDATE acpfsm_schema SET version = 99")
    else:
        import psycopg

        cluster: PostgresCluster = request.getfixturevalue("postgres_cluster")
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            conn.execute("UPDATE acpfsm_schema SET version = 99")
    try:
        with pytest.raises(StoreSchemaError, match="schema version 99"):
            async with make_runtime(memory_agent(), store=make()):
                pass
    finally:
        if kind == "postgres":
            with psycopg.connect(cluster.dsn, autocommit=True) as conn:
                conn.execute("UPDATE acpfsm_schema SET version = 1")


def _mount(*argv: str) -> None:
    done = subprocess.run(["mount", *argv], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(f"mount {' '.join(argv)} failed (this test needs root): {done.stderr}")


async def test_a_store_on_a_read_only_file_system_is_refused(tmp_path: Path) -> None:
    writable, read_only = tmp_path / "rw", tmp_path / "ro"
    writable.mkdir()
    read_only.mkdir()
    async with make_runtime(memory_agent(), store=SqliteStore(writable / "x.db")):
        pass
    _mount("--bind", str(writable), str(read_only))
    try:
        _mount("-o", "remount,bind,ro", str(read_only))
        with pytest.raises(StoreReadOnly, match="Read-only file system"):
            async with make_runtime(memory_agent(), store=SqliteStore(read_only / "x.db")):
                pass
    finally:
        subprocess.run(["umount", str(read_only)], check=False)  # noqa: ASYNC221


async def _outage(rt: Runtime, execution_id: str, down: object, up: object) -> None:
    """Take the store away mid-run (``down``), prompt through it, bring it back (``up``)."""
    await rt.prompt(execution_id, "before")
    await wait_until(lambda: rt.store_health is not None and rt.store_health.pending == 0)
    await down()  # type: ignore[operator]
    result = await rt.prompt(execution_id, "during")  # the execution goes on
    assert result.stop_reason == "end_turn"
    await wait_until(lambda: rt.store_health is not None and not rt.store_health.ok, limit=30)
    health = rt.store_health
    assert health is not None and health.pending > 0 and health.failures >= 1
    await up()  # type: ignore[operator]
    await wait_until(lambda: rt.store_health is not None and rt.store_health.ok, limit=30)
    await wait_until(lambda: rt.store_health is not None and rt.store_health.pending == 0)


@pytest.mark.both_backends
async def test_a_store_file_that_disappears_mid_run_loses_nothing(tmp_path: Path) -> None:
    path, away = tmp_path / "executions.db", tmp_path / "elsewhere.db"
    ex = memory_agent(auto_complete=True)
    async with make_runtime(ex, store=SqliteStore(path)) as rt:
        ref = await rt.launch(spec())

        async def down() -> None:
            path.rename(away)

        async def up() -> None:
            away.rename(path)

        await _outage(rt, ref.id, down, up)
        live = await read_log(rt, ref.id, until=le.StoreWriteResumed)
    failed = next(i.event for i in live if isinstance(i.event, le.StoreWriteFailed))
    assert failed.kind == "StoreUnavailable" and "removed or replaced" in failed.error
    async with make_runtime(ex, store=SqliteStore(path)) as rt:
        stored = await read_log(rt, ref.id, until=le.AgentRecovered)
    assert [i.seq for i in stored] == list(range(1, len(stored) + 1))
    assert kinds(stored).count("PromptCompleted") == 2  # the one during the outage too


@pytest.mark.both_backends
async def test_a_full_disk_mid_run_loses_nothing(tmp_path: Path) -> None:
    """The store's file system fills up (a small tmpfs, filled by another file): the writes
    fail as ``StoreFull``, the execution goes on, and once space is freed nothing is lost."""
    small = tmp_path / "small"
    small.mkdir()
    _mount("-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(small))
    try:
        path, filler = small / "executions.db", small / "filler"
        ex = memory_agent(auto_complete=True)
        async with make_runtime(ex, store=SqliteStore(path)) as rt:
            ref = await rt.launch(spec())

            async def down() -> None:
                with filler.open("wb") as f:
                    try:
                        while True:
                            f.write(b"\0" * 65536)
                            f.flush()
                    except OSError:
                        pass  # full

            async def up() -> None:
                filler.unlink()

            await _outage(rt, ref.id, down, up)
            live = await read_log(rt, ref.id, until=le.StoreWriteResumed)
        failed = next(i.event for i in live if isinstance(i.event, le.StoreWriteFailed))
        assert failed.kind == "StoreFull", failed
        async with make_runtime(ex, store=SqliteStore(path)) as rt:
            stored = await read_log(rt, ref.id, until=le.AgentRecovered)
        assert [i.seq for i in stored] == list(range(1, len(stored) + 1))
        assert kinds(stored).count("PromptCompleted") == 2  # the one on the full disk too
    finally:
        subprocess.run(["umount", str(small)], check=False)  # noqa: ASYNC221


WRITER = textwrap.dedent(
    """
    import sqlite3, sys
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")  # another program's write transaction, left open
    print("writing", flush=True)
    sys.stdin.read()
    conn.execute("ROLLBACK")
    """
)


@pytest.mark.both_backends
async def test_a_store_file_locked_by_another_process_mid_run_loses_nothing(
    tmp_path: Path,
) -> None:
    """Another program (an admin's sqlite3 shell, a backup) holds a write transaction on the
    file: the writes fail, typed, until it lets go; nothing is lost."""
    path = tmp_path / "executions.db"
    ex = memory_agent(auto_complete=True)
    writer: list[subprocess.Popen[str]] = []
    async with make_runtime(ex, store=SqliteStore(path, busy_timeout=0.2)) as rt:
        ref = await rt.launch(spec())

        async def down() -> None:
            proc = subprocess.Popen(  # noqa: ASYNC220 - a writer outside this event loop
                [sys.executable, "-c", WRITER, str(path)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            writer.append(proc)
            assert proc.stdout is not None
            line = await anyio.to_thread.run_sync(proc.stdout.readline)
            assert line == "writing\n"

        async def up() -> None:
            proc = writer[0]
            await anyio.to_thread.run_sync(proc.communicate, "")

        try:
            await _outage(rt, ref.id, down, up)
        finally:
            for proc in writer:
                proc.kill()
                proc.wait()
        live = await read_log(rt, ref.id, until=le.StoreWriteResumed)
    failed = next(i.event for i in live if isinstance(i.event, le.StoreWriteFailed))
    assert failed.kind == "StoreUnavailable" and "locked" in failed.error, failed
    async with make_runtime(ex, store=SqliteStore(path)) as rt:
        stored = await read_log(rt, ref.id, until=le.AgentRecovered)
    assert [i.seq for i in stored] == list(range(1, len(stored) + 1))
    assert kinds(stored).count("PromptCompleted") == 2  # the one during the lock too


@pytest.mark.both_backends
async def test_postgres_stopped_and_restarted_loses_nothing(
    postgres_cluster: PostgresCluster,
) -> None:
    namespace = f"t-{uuid.uuid4().hex[:12]}"
    ex = memory_agent(auto_complete=True)

    def make() -> PostgresStore:
        return PostgresStore(postgres_cluster.dsn, namespace=namespace)

    async with make_runtime(ex, store=make()) as rt:
        ref = await rt.launch(spec())

        async def down() -> None:
            await anyio.to_thread.run_sync(postgres_cluster.stop)

        async def up() -> None:
            await anyio.to_thread.run_sync(postgres_cluster.start)

        try:
            await _outage(rt, ref.id, down, up)
        finally:
            if not (postgres_cluster.data / "postmaster.pid").exists():
                postgres_cluster.start()
        live = await read_log(rt, ref.id, until=le.StoreWriteResumed)
    assert "StoreWriteFailed" in kinds(live)
    async with make_runtime(ex, store=make()) as rt:
        stored = await read_log(rt, ref.id, until=le.AgentRecovered)
    assert [i.seq for i in stored] == list(range(1, len(stored) + 1))
    assert kinds(stored).count("PromptCompleted") == 2


@pytest.mark.both_backends
async def test_a_read_only_database_mid_run_loses_nothing(
    postgres_cluster: PostgresCluster,
) -> None:
    import psycopg

    namespace = f"t-{uuid.uuid4().hex[:12]}"
    ex = memory_agent(auto_complete=True)

    def read_only(on: bool) -> None:
        with psycopg.connect(postgres_cluster.dsn, autocommit=True) as conn:
            conn.execute(
                f"ALTER SYSTEM SET default_transaction_read_only = {'on' if on else 'off'}"
            )
            conn.execute("SELECT pg_reload_conf()")

    async with make_runtime(
        ex, store=PostgresStore(postgres_cluster.dsn, namespace=namespace)
    ) as rt:
        ref = await rt.launch(spec())

        async def down() -> None:
            read_only(True)

        async def up() -> None:
            read_only(False)

        try:
            await _outage(rt, ref.id, down, up)
        finally:
            read_only(False)
        live = await read_log(rt, ref.id, until=le.StoreWriteResumed)
    failed = next(i.event for i in live if isinstance(i.event, le.StoreWriteFailed))
    assert failed.kind == "StoreReadOnly"


def test_a_runtime_without_a_store_loads_no_store_code() -> None:
    code = textwrap.dedent(
        """
        import sys, anyio
        from acpfsm.runtime import Runtime

        async def main():
            async with Runtime() as rt:
                rt.list_executions()

        anyio.run(main)
        loaded = sorted(m for m in sys.modules if m.startswith(
            ("acpfsm.runtime.store", "acpfsm.runtime.durable", "acpfsm.runtime.persistence",
             "acpfsm.runtime.recovery", "sqlite3", "psycopg")))
        print(loaded)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"
    sqlite_only = textwrap.dedent(
        """
        import sys
        from acpfsm.runtime.store import SqliteStore
        print(sorted(m for m in sys.modules if m.startswith("psycopg")))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", sqlite_only], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"
