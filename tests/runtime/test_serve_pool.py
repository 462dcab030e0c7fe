"""Two ``acpfsm serve`` processes as one pool on a real PostgreSQL (the throwaway cluster) and
a real NATS server: launches shared, every request reaching the owner of its execution, and
``kill -9`` of a member: within its lease (plus 5 s) the survivor answers for its executions
(stdio agents reported lost with their reason, raised again as ``ExecutionLost`` on the
client), and a subscriber in a third process (this one) sees every event of them exactly
once, in order, across the take-over. Two adopters racing for one namespace: one wins."""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

import anyio
import psycopg
import pytest

from acpfsm.runtime import ExecutionLost, LaunchSpec, Runtime, WorkspaceRef
from acpfsm.runtime import events as le
from acpfsm.runtime.service import ExecutionUnreachable, RemoteRuntime, ServiceTimeout
from acpfsm.runtime.store import PostgresStore, StoreLocked
from acpfsm.statecharts.pool_member import FENCE
from acpfsm.testing.natsserver import NatsServer
from acpfsm.testing.postgres import PostgresCluster

from .serve_helpers import ServeProcess

LEASE = 3.0


def fresh_database(cluster: PostgresCluster) -> str:
    name = f"pool_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return f"host={cluster.folder} port=5432 dbname={name} user=acpfsm"


def spec(tmp_path: Path) -> LaunchSpec:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    return LaunchSpec(
        agent_profile_id="reference",
        executor_id="stdio",
        workspace=WorkspaceRef(path=str(workspace)),
    )


@pytest.mark.both_backends
async def test_kill_9_of_a_member_its_executions_are_taken_over(
    nats_server: NatsServer, postgres_cluster: PostgresCluster, tmp_path: Path, backend: str
) -> None:
    extra = ("--pool", "--lease", str(LEASE))
    pool = fresh_database(postgres_cluster)  # a pool of its own: no earlier test's members
    first = ServeProcess(nats_server, tmp_path, name="a", store=pool, extra=extra, backend=backend)
    second: ServeProcess | None = None
    try:
        with anyio.fail_after(120):
            async with RemoteRuntime(nats_server.url) as rt:
                mine = [await rt.launch(spec(tmp_path)) for _ in range(3)]  # only a runs
                for ref in mine:
                    await rt.prompt(ref.id, "before")
                second = ServeProcess(
                    nats_server, tmp_path, name="b", store=pool, extra=extra, backend=backend
                )
                others = [await rt.launch(spec(tmp_path)) for _ in range(4)]  # shared
                assert len(await rt.list_executions()) == 7  # both answer list

                in_flight: list[BaseException] = []

                async def hung_prompt() -> None:  # a turn that never ends, in flight at the kill
                    try:
                        await rt.prompt(mine[1].id, "[[fault:hang]] wait")
                    except ServiceTimeout as exc:
                        in_flight.append(exc)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(hung_prompt)
                    await anyio.sleep(0.5)
                    first.kill()
                    killed = time.monotonic()
                assert in_flight and in_flight[0].retryable  # a typed, retryable error …
                assert time.monotonic() - killed < LEASE + 5  # … and no hang (two pings)
                # every execution answers again through the survivor within the bound
                for ref in mine:
                    while True:
                        try:
                            snapshot = await rt.get_execution(ref.id)
                            break
                        except ExecutionUnreachable:
                            assert time.monotonic() - killed < LEASE + 5
                            await anyio.sleep(0.1)
                    assert snapshot.status == "FAILED"  # a stdio agent dies with its owner
                    with pytest.raises(ExecutionLost) as lost:
                        await rt.prompt(ref.id, "after")
                    assert lost.value.execution_id == ref.id
                assert time.monotonic() - killed < LEASE + 5
                # the survivor's own executions: untouched, or lost with a, if a had them
                for ref in others:
                    snapshot = await rt.get_execution(ref.id)
                    assert snapshot.status in ("READY", "FAILED")
                # a subscriber here sees each event of a taken-over execution once, in order
                async with rt.events(mine[0].id, from_seq=0) as events:
                    seen: list[le.SequencedEvent] = []
                    async for item in events:
                        seen.append(item)
                        if isinstance(item.event, le.AgentLost):
                            break
                assert [i.seq for i in seen] == list(range(1, len(seen) + 1))
                kinds = [type(i.event).__name__ for i in seen]
                assert "PromptCompleted" in kinds  # the turn before the kill …
                assert kinds[-1] == "AgentLost"  # … then the take-over's verdict
    finally:
        first.kill() if first.process.poll() is None else None
        if second is not None:
            assert second.stop() == 0


async def test_two_adopters_racing_for_one_namespace_one_wins(
    postgres_cluster: PostgresCluster,
) -> None:
    namespace = f"race-{uuid.uuid4().hex[:8]}"
    outcomes: list[str] = []
    gate = anyio.Event()
    done = anyio.Event()

    async def adopt() -> None:
        await gate.wait()
        try:
            async with Runtime(store=PostgresStore(postgres_cluster.dsn, namespace=namespace)):
                outcomes.append("held")
                await done.wait()
        except StoreLocked:
            outcomes.append("locked")

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(adopt)
        gate.set()
        with anyio.fail_after(60):
            while len(outcomes) < 4:
                await anyio.sleep(0.05)
        done.set()
    assert sorted(outcomes) == ["held", "locked", "locked", "locked"]


def test_a_member_whose_namespace_was_taken_stops(
    nats_server: NatsServer, postgres_cluster: PostgresCluster, tmp_path: Path
) -> None:
    """Fencing: a member that finds its lease row taken by another member (it was thought
    dead, e.g. partitioned from PostgreSQL) stops driving its executions (exit status 3)."""
    pool = fresh_database(postgres_cluster)
    member = ServeProcess(
        nats_server, tmp_path, name="a", store=pool, extra=("--pool", "--lease", str(LEASE))
    )
    try:
        namespace = str(member.ready["namespace"])
        with psycopg.connect(pool, autocommit=True) as conn:
            conn.execute(
                "UPDATE acpfsm_pool SET member = 'another' WHERE namespace = %s", (namespace,)
            )
        member.process.wait(LEASE + 10)
        member.stderr.seek(0)
        err = member.stderr.read().decode()
        assert member.process.returncode == 3, err
        assert f"LeaseLost: another member took {namespace} over" in err
    finally:
        member.stop()


def test_a_member_that_cannot_renew_for_most_of_its_lease_stops(
    nats_server: NatsServer, postgres_cluster: PostgresCluster, tmp_path: Path
) -> None:
    """Fencing on the deadline: PostgreSQL stops answering the member's renewals (the lease
    table locked: every renewal hangs until its bound); the chart's fence deadline (70 % of
    the lease since the last renewal) passes and the member stops (exit status 3) before
    anyone may adopt its namespace, at the whole lease."""
    pool = fresh_database(postgres_cluster)
    member = ServeProcess(
        nats_server, tmp_path, name="a", store=pool, extra=("--pool", "--lease", str(LEASE))
    )
    try:
        namespace = str(member.ready["namespace"])
        with psycopg.connect(pool) as conn:  # one transaction, holding the lock
            conn.execute("LOCK TABLE acpfsm_pool IN ACCESS EXCLUSIVE MODE")
            member.process.wait(LEASE + 10)
            conn.rollback()
        member.stderr.seek(0)
        err = member.stderr.read().decode()
        assert member.process.returncode == 3, err
        lost = re.search(
            f"LeaseLost: the lease of {namespace} could not be renewed for ([0-9.]+) s", err
        )
        assert lost is not None, err
        # the renewals hung (each dropped at its bound): the member stopped at the deadline,
        # before the lease ran out
        assert FENCE * LEASE <= float(lost.group(1)) < LEASE, err
    finally:
        member.stop()
