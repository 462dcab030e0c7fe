"""Several ``acpfsm serve`` processes as one pool, and the take-over of a dead member's
executions: the driver of the :class:`~acpfsm.statecharts.PoolMember` and
:class:`~acpfsm.statecharts.NamespaceAdoption` charts.

Each member keeps its executions in a PostgreSQL namespace of its own
(:class:`~acpfsm.runtime.store.PostgresStore`, whose advisory lock makes it the namespace's
only holder) and renews a lease on it: a row of ``acpfsm_pool`` (namespace, member,
``renewed_at``), renewed only while the row still names it. Every decision is the charts'
(:mod:`acpfsm.statecharts.pool_member`: when to renew, when to fence, whether to adopt);
this module performs their effects and feeds the outcomes back as facts. Time enters as
facts too: a renewal or a scan is due after the part of the lease its effect names
(``renew_due``, ``scan_due``), and the fence deadline the chart arms at each renewal
(:data:`~acpfsm.statecharts.pool_member.FENCE` of the lease: PostgreSQL out of reach)
fires ``fence_deadline_passed``. A fenced member (that, or its row found taken by another
member) stops with :class:`LeaseLost` before anyone may adopt its namespaces, so it never
drives an execution another one drives.

Every member looks for namespaces whose lease has run out (their holder was killed,
partitioned, hung) and adopts each by opening a :class:`~acpfsm.runtime.Runtime` on it: the
durable-executions recovery runs (agentctl executions are reattached, stdio ones reported
lost with their reason), the member claims the lease row and answers for those executions
from then on (:meth:`Service.host <acpfsm.runtime.service.Service.host>`) and renews their
lease. Two members never hold one namespace at once: opening it takes the store's advisory
lock, which PostgreSQL keeps for the holder's connection until that connection ends; the
member that loses a race of adopters gets :class:`~acpfsm.runtime.store.StoreLocked` and
leaves it. Events go on on the bus from the last committed ``seq``
(:mod:`acpfsm.runtime.durable`), so a subscriber sees each once.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc
import psycopg
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from acpfsm.statecharts import ChartMachine, Effect
from acpfsm.statecharts.charts import NAMESPACE_ADOPTION, POOL_MEMBER
from acpfsm.statecharts.names import (
    EffectName,
    EventName,
    NamespaceAdoptionEffect,
    NamespaceAdoptionEvent,
    PoolMemberEffect,
    PoolMemberEvent,
)

from ..runtime import Runtime
from ..store import StoreError, StoreLocked
from .server import Service
from .wire import ServiceError

__all__ = ["LeaseLost", "Pool"]

log = logging.getLogger("acpfsm.serve")

_SCHEMA = """CREATE TABLE IF NOT EXISTS acpfsm_pool (
namespace text PRIMARY KEY, member text NOT NULL, renewed_at timestamptz NOT NULL)"""
_CLAIM = """INSERT INTO acpfsm_pool (namespace, member, renewed_at) VALUES (%s, %s, now())
ON CONFLICT (namespace) DO UPDATE SET member = excluded.member, renewed_at = now()"""
_RENEW = "UPDATE acpfsm_pool SET renewed_at = now() WHERE namespace = %s AND member = %s"
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


class _Unreachable(Exception):
    """A lease query failed (PostgreSQL out of reach, or it did not answer in time)."""


Perform = Callable[[Effect], Awaitable[None]]


class _Adoption:
    """One expired namespace being taken over: its NamespaceAdoption machine, the effects it
    asked for and not yet performed, the Runtime that hosts it."""

    __slots__ = ("machine", "namespace", "runtime", "scope", "todo")

    def __init__(self, namespace: str, runtime: Runtime) -> None:
        self.namespace = namespace
        self.machine = NAMESPACE_ADOPTION.start(tags={"namespace": namespace})
        self.runtime = runtime
        self.scope = anyio.CancelScope()
        """The hosting task's: cancelled to let the namespace go (its Runtime detaches)."""
        self.todo: list[Effect] = []


class Pool:
    """``service``'s membership of the pool (see the module docstring). ``open_runtime(ns)``
    makes the Runtime for namespace ``ns`` (the member's profiles, executors and bus, a
    :class:`PostgresStore` on ``ns``)."""

    _fence: anyio.CancelScope
    """The fence watch's scope, whose deadline is the fence deadline (``arm_fence_deadline``;
    made by :meth:`run`: a cancel scope needs the event loop)."""

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
        self.machine: ChartMachine = POOL_MEMBER.start(tags={"member": member})
        """The member's PoolMember machine: every decision about the lease is its."""
        self._conns: dict[str, Any] = {}
        """A connection per task (the renewal's, the scan's), opened when needed."""
        self._renewed_at = 0.0
        self._lost = ""
        self._tg: anyio.abc.TaskGroup | None = None
        self._route: dict[EffectName, tuple[MemoryObjectSendStream[Effect] | None, Perform]] = {}
        self._adoption_work: dict[EffectName, Callable[[_Adoption, Effect], Awaitable[None]]] = {
            NamespaceAdoptionEffect.open_namespace: self._open,
            NamespaceAdoptionEffect.claim_lease: self._claim_adopted,
            NamespaceAdoptionEffect.host_namespace: self._host_adopted,
            NamespaceAdoptionEffect.release_namespace: self._release,
            NamespaceAdoptionEffect.report_unadoptable: self._unadoptable,
        }

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Join, then renew and adopt until cancelled; :class:`LeaseLost` when the chart
        fences the member. The renewal has a task and a connection of its own: a long
        adoption (the recovery of many executions) never delays it."""
        renewals_in, renewals = anyio.create_memory_object_stream[Effect](math.inf)
        scans_in, scans = anyio.create_memory_object_stream[Effect](math.inf)
        self._fence = anyio.CancelScope()
        self._route = {
            PoolMemberEffect.claim_leases: (None, self._claim_own),
            PoolMemberEffect.refuse_join: (None, self._refuse),
            PoolMemberEffect.arm_fence_deadline: (None, self._arm_fence),
            PoolMemberEffect.fence_taken_over: (None, self._fence_taken_over),
            PoolMemberEffect.fence_unrenewed: (None, self._fence_unrenewed),
            PoolMemberEffect.schedule_renewal: (
                renewals_in,
                functools.partial(self._after_share, PoolMemberEvent.renew_due),
            ),
            PoolMemberEffect.renew_leases: (renewals_in, self._renew),
            PoolMemberEffect.schedule_scan: (
                scans_in,
                functools.partial(self._after_share, PoolMemberEvent.scan_due),
            ),
            PoolMemberEffect.scan_expired: (scans_in, self._scan),
            PoolMemberEffect.adopt_namespaces: (scans_in, self._adopt_all),
        }
        try:
            with renewals_in, renewals, scans_in, scans:
                await self._fire(PoolMemberEvent.join_requested)
                async with anyio.create_task_group() as tg:
                    self._tg = tg
                    tg.start_soon(self._perform, renewals)
                    tg.start_soon(self._perform, scans)
                    tg.start_soon(self._watch_fence)
                    task_status.started()
        finally:
            for role in list(self._conns):
                await self._drop(self._conns.pop(role))
        # the task group ends only when a fence effect cancelled it: the runtimes taken over
        # are detached, not stopped
        raise LeaseLost(self._lost)

    # --- the machinery: facts in, effects out -------------------------------------------------

    async def _fire(self, event: EventName, **data: Any) -> None:
        """Fire ``event`` on the member's machine; its effects are performed at once or queued
        for the task that performs them (the renewal's, the scan's)."""
        for effect in self.machine.fire(event, **data).effects:
            queue, perform = self._route[effect.name]
            if queue is None:
                await perform(effect)
            else:
                queue.send_nowait(effect)

    async def _perform(self, todo: MemoryObjectReceiveStream[Effect]) -> None:
        async for effect in todo:
            await self._route[effect.name][1](effect)

    async def _watch_fence(self) -> None:
        with self._fence:
            await anyio.sleep_forever()
        silent = anyio.current_time() - self._renewed_at
        await self._fire(PoolMemberEvent.fence_deadline_passed, silent=round(silent, 1))

    async def _query(self, role: str, bound: float, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(conn, *args)`` on ``role``'s connection (opened when it has none), the query
        bounded by ``bound`` seconds (a partition hangs a query); a failure drops the
        connection and raises :class:`_Unreachable`."""
        runner = self.service.bus.runner
        try:
            conn = self._conns.get(role)
            if conn is None:
                conn = self._conns[role] = await runner.run(_connect, self.dsn)
            with anyio.fail_after(bound):
                return await runner.run(fn, conn, *args)
        except (psycopg.Error, OSError, TimeoutError) as exc:
            await self._drop(self._conns.pop(role, None))
            raise _Unreachable(repr(exc)) from exc

    async def _drop(self, conn: Any) -> None:
        if conn is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                try:
                    await self.service.bus.runner.run(_close, conn)
                except (psycopg.Error, OSError):
                    pass

    # --- PoolMember's effects ------------------------------------------------------------------

    async def _claim_own(self, effect: Effect) -> None:
        try:
            await self._query("renew", self.lease, _claim, list(self.held), self.member)
        except _Unreachable as exc:
            await self._fire(PoolMemberEvent.claim_failed, reason=str(exc))
            return
        await self._fire(PoolMemberEvent.claimed)

    async def _refuse(self, effect: Effect) -> None:
        raise ServiceError(f"the pool could not be joined: {effect['reason']}")

    async def _arm_fence(self, effect: Effect) -> None:
        self._renewed_at = anyio.current_time()
        self._fence.deadline = self._renewed_at + self.lease * float(effect["share"])

    async def _fence_taken_over(self, effect: Effect) -> None:
        self._stop(f"another member took {', '.join(effect['taken'])} over")

    async def _fence_unrenewed(self, effect: Effect) -> None:
        self._stop(
            f"the lease of {', '.join(self.held)} could not be renewed for "
            f"{effect['silent']:.1f} s: stopping before another member takes them over"
        )

    def _stop(self, why: str) -> None:
        self._lost = why
        if self._tg is not None:
            self._tg.cancel_scope.cancel()

    async def _after_share(self, due: EventName, effect: Effect) -> None:
        """A timer the chart set (``schedule_renewal``, ``schedule_scan``): ``due`` fired a
        ``per_lease``-th of the lease later."""
        await anyio.sleep(self.lease / int(effect["per_lease"]))
        await self._fire(due)

    async def _renew(self, effect: Effect) -> None:
        held = list(self.held)
        try:
            renewed = await self._query("renew", self.lease / 3, _renew, held, self.member)
        except _Unreachable as exc:  # retried when the chart says
            log.warning("serve pool: the lease could not be renewed: %s", exc)
            await self._fire(PoolMemberEvent.renewal_failed, reason=str(exc))
            return
        await self._fire(PoolMemberEvent.renewed, taken=sorted(set(held) - set(renewed)))

    async def _scan(self, effect: Effect) -> None:
        try:
            expired = await self._query("scan", self.lease, _expired, self.lease, list(self.held))
        except _Unreachable as exc:
            log.warning("serve pool: expired leases could not be read: %s", exc)
            await self._fire(PoolMemberEvent.scan_failed, reason=str(exc))
            return
        await self._fire(PoolMemberEvent.expired_listed, namespaces=expired)

    async def _adopt_all(self, effect: Effect) -> None:
        """One NamespaceAdoption after the other, each until it rests."""
        for namespace in effect["namespaces"]:
            adoption = _Adoption(namespace, self.open_runtime(namespace))
            self._fire_adoption(adoption, NamespaceAdoptionEvent.adoption_started)
            while adoption.todo:
                todo = adoption.todo.pop(0)
                await self._adoption_work[todo.name](adoption, todo)

    # --- NamespaceAdoption's effects -----------------------------------------------------------

    def _fire_adoption(self, adoption: _Adoption, event: EventName, **data: Any) -> None:
        adoption.todo.extend(adoption.machine.fire(event, **data).effects)

    async def _open(self, adoption: _Adoption, effect: Effect) -> None:
        """Open the namespace's Runtime (its store takes the advisory lock, then the startup
        recovery runs) in a task of the pool's, which keeps it open until cancelled."""
        assert self._tg is not None
        try:
            await self._tg.start(self._hold, adoption)
        except StoreLocked:
            self._fire_adoption(adoption, NamespaceAdoptionEvent.namespace_locked)
        except StoreError as exc:
            self._fire_adoption(adoption, NamespaceAdoptionEvent.open_failed, reason=str(exc))
        else:
            self._fire_adoption(adoption, NamespaceAdoptionEvent.namespace_opened)

    async def _hold(self, adoption: _Adoption, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        with adoption.scope:
            async with adoption.runtime:
                task_status.started()
                try:
                    await anyio.sleep_forever()
                finally:
                    await self.service.forget(adoption.runtime)

    async def _claim_adopted(self, adoption: _Adoption, effect: Effect) -> None:
        try:
            await self._query("scan", self.lease, _claim, [adoption.namespace], self.member)
        except _Unreachable as exc:
            self._fire_adoption(
                adoption, NamespaceAdoptionEvent.lease_claim_failed, reason=str(exc)
            )
            return
        self._fire_adoption(adoption, NamespaceAdoptionEvent.lease_claimed)

    async def _host_adopted(self, adoption: _Adoption, effect: Effect) -> None:
        await self.service.host(adoption.runtime)
        self.held.append(adoption.namespace)
        self.adopted.append(adoption.namespace)
        log.warning("serve pool: took over %s", adoption.namespace)

    async def _release(self, adoption: _Adoption, effect: Effect) -> None:
        log.warning(
            "serve pool: %s let go, its lease could not be claimed: %s",
            adoption.namespace,
            effect["reason"],
        )
        adoption.scope.cancel()

    async def _unadoptable(self, adoption: _Adoption, effect: Effect) -> None:
        log.warning(
            "serve pool: %s could not be taken over: %s", adoption.namespace, effect["reason"]
        )
