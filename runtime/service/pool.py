"""Several ``acpfsm serve`` processes as one pool, and the take-over of a dead member's
executions.

Each member keeps its executions in a PostgreSQL namespace of its own
(:class:`~acpfsm.runtime.store.PostgresStore`, whose advisory lock makes it the namespace's
only holder) and renews a lease on it: a row of ``acpfsm_pool`` (namespace, member,
``renewed_at``), renewed every sixth of ``lease`` seconds, only while the row still names
it. A member whose renewal fails for 70 % of the lease (:data:`FENCE`: PostgreSQL out of
reach), or finds its row taken by another member, stops with :class:`LeaseLost` before
anyone may adopt its namespaces, so it never drives an execution another one drives. Every member looks for namespaces
whose lease has run out (their holder was killed, partitioned, hung) and adopts each by
opening a :class:`~acpfsm.runtime.Runtime` on it: the durable-executions recovery runs
(agentctl executions are reattached, stdio ones reported lost with their reason), the
member answers for those executions from then on (:meth:`Service.host
<acpfsm.runtime.service.Service.host>`) and renews their lease. Two members never hold one
namespace at once: opening it takes the store's advisory lock, which PostgreSQL keeps for the
holder's connection until that connection ends; the member that loses a race of adopters gets
:class:`~acpfsm.runtime.store.StoreLocked` and leaves it. Events go on on the bus from the
last committed ``seq`` (:mod:`acpfsm.runtime.durable`), so a subscriber sees each once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
import psycopg

from ..runtime import Runtime
from ..store import StoreError, StoreLocked
from .server import Service
from .wire import ServiceError

__all__ = ["FENCE", "LeaseLost", "Pool"]

log = logging.getLogger("acpfsm.serve")

_SCHEMA = """CREATE TABLE IF NOT EXISTS acpfsm_pool (
namespace text PRIMARY KEY, member text NOT NULL, renewed_at timestamptz NOT NULL)"""
_CLAIM = """INSERT INTO acpfsm_pool (namespace, member, renewed_at) VALUES (%s, %s, now())
ON CONFLICT (namespace) DO UPDATE SET member = excluded.member, renewed_at = now()"""
_RENEW = "UPDATE acpfsm_pool SET renewed_at = now() WHERE namespace = %s AND member = %s"
FENCE = 0.7
"""A member that could not renew its lease for this share of it stops (before any other
member may adopt its namespaces, at the whole lease)."""
_EXPIRED = """SELECT namespace FROM acpfsm_pool
WHERE renewed_at < now() - make_interval(secs => %s) AND NOT (namespace = ANY(%s))
ORDER BY renewed_at"""


async def _connect(dsn: str) -> Any:
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True, connect_timeout=10)
    await conn.execute(_SCHEMA)
    return conn


async def _claim(conn: Any, namespaces: list[str], member: str) -> None:
    for namespace in namespaces:
        await conn.execute(_CLAIM, (namespace, member))


async def _renew(conn: Any, namespaces: list[str], member: str) -> list[str]:
    """The namespaces whose lease is renewed: those still ours."""
    renewed = []
    for namespace in namespaces:
        cursor = await conn.execute(_RENEW, (namespace, member))
        if cursor.rowcount == 1:
            renewed.append(namespace)
    return renewed


async def _expired(conn: Any, lease: float, held: list[str]) -> list[str]:
    cursor = await conn.execute(_EXPIRED, (lease, held))
    return [str(row[0]) for row in await cursor.fetchall()]


async def _close(conn: Any) -> None:
    await conn.close()


class LeaseLost(ServiceError):
    """This serve process lost its lease (another member took its namespace over, or it
    could not renew it in time): it stops driving its executions, so that only one process
    ever does (``acpfsm serve`` exits with status 3; start it again)."""


class Pool:
    """``service``'s membership of the pool (see the module docstring). ``open_runtime(ns)``
    makes the Runtime for namespace ``ns`` (the member's profiles, executors and bus, a
    :class:`PostgresStore` on ``ns``)."""

    def __init__(
        self,
        service: Service,
        dsn: str,
        *,
        member: str,
        namespace: str,
        open_runtime: Callable[[str], Runtime],
        lease: float = 10.0,
    ) -> None:
        self.service = service
        self.dsn = dsn
        self.member = member
        self.held = [namespace]
        self.open_runtime = open_runtime
        self.lease = lease
        self.adopted: list[str] = []

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Renew and adopt until cancelled; :class:`LeaseLost` when the lease is lost. The
        renewal has a task and a connection of its own: a long adoption (the recovery of many
        executions) never delays it."""
        runner = self.service.bus.runner
        conn: Any = await runner.run(_connect, self.dsn)
        await runner.run(_claim, conn, self.held, self.member)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._adopter, tg)
            task_status.started()
            lost_why = await self._renewer(conn)
            tg.cancel_scope.cancel()  # the runtimes taken over: detached, not stopped
        raise LeaseLost(lost_why)

    async def _renewer(self, conn: Any) -> str:
        """Renew every sixth of the lease; returns why the lease is lost."""
        runner = self.service.bus.runner
        renewed_at = time.monotonic()
        try:
            while True:
                await anyio.sleep(self.lease / 6)
                silent = time.monotonic() - renewed_at
                if silent > self.lease * FENCE:
                    return (
                        f"the lease of {', '.join(self.held)} could not be renewed for "
                        f"{silent:.1f} s: stopping before another member takes them over"
                    )
                if conn is None and (conn := await self._reconnect()) is None:
                    continue
                held = list(self.held)
                try:
                    with anyio.fail_after(self.lease / 3):  # a partition hangs a query
                        renewed = await runner.run(_renew, conn, held, self.member)
                except (psycopg.Error, OSError, TimeoutError) as exc:  # retried next round
                    log.warning("serve pool: the lease could not be renewed: %r", exc)
                    await self._drop(conn)
                    conn = None
                    continue
                lost = sorted(set(held) - set(renewed))
                if lost:
                    return f"another member took {', '.join(lost)} over"
                renewed_at = time.monotonic()
        finally:
            await self._drop(conn)

    async def _adopter(self, tg: anyio.abc.TaskGroup) -> None:
        """Every third of the lease: adopt the namespaces whose lease ran out."""
        conn: Any = None
        try:
            while True:
                await anyio.sleep(self.lease / 3)
                if conn is None and (conn := await self._reconnect()) is None:
                    continue
                runner = self.service.bus.runner
                try:
                    with anyio.fail_after(self.lease):
                        expired = await runner.run(_expired, conn, self.lease, list(self.held))
                except (psycopg.Error, OSError, TimeoutError) as exc:
                    log.warning("serve pool: expired leases could not be read: %r", exc)
                    await self._drop(conn)
                    conn = None
                    continue
                for namespace in expired:
                    if await self._adopt(tg, namespace):
                        await runner.run(_claim, conn, [namespace], self.member)
                        self.held.append(namespace)
                        self.adopted.append(namespace)
        finally:
            await self._drop(conn)

    async def _drop(self, conn: Any) -> None:
        if conn is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                try:
                    await self.service.bus.runner.run(_close, conn)
                except (psycopg.Error, OSError):
                    pass

    async def _reconnect(self) -> Any:
        try:
            return await self.service.bus.runner.run(_connect, self.dsn)
        except (psycopg.Error, OSError):
            return None

    async def _adopt(self, tg: anyio.abc.TaskGroup, namespace: str) -> bool:
        """Take ``namespace`` over; False when another member holds it (or it fails)."""
        runtime = self.open_runtime(namespace)
        try:
            await tg.start(self._host, runtime)
        except StoreLocked:
            return False
        except StoreError as exc:
            log.warning("serve pool: %s could not be taken over: %s", namespace, exc)
            return False
        log.warning("serve pool: took over %s", namespace)
        return True

    async def _host(self, runtime: Runtime, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with runtime:
            await self.service.host(runtime)
            task_status.started()
            try:
                await anyio.sleep_forever()
            finally:
                await self.service.forget(runtime)
