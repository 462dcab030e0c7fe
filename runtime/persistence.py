"""The Runtime's side of durable executions (``Runtime(store=...)``): opening the store and
recovering at ``async with``, a row for every launch, leaving agents running at exit,
``relaunch``, ``subscribe`` and the lost executions.

Imported only by a Runtime given a store (a Runtime without one imports none of this, nor
:mod:`acpfsm.runtime.store`).

* **Open** (:meth:`Persistence.open`): the store is taken for this process (another holder is
  :class:`~acpfsm.runtime.store.StoreLocked`), its rows read, the writer started, and every
  row recovered (:mod:`.recovery`) before ``async with`` enters its body.
* **Launch**: each new execution gets its row (:meth:`Persistence.record_new`) and its
  DurableRecord machine; its events are logged from the first.
* **Exit** (:meth:`Persistence.close`): the executions are *detached*, not stopped (kandev
  stops its agents on a backend shutdown and loses them; a deploy here loses nothing): each
  one's DurableRecord goes ``detached``, its executor keeps the agent where it can outlive the
  app (agentctl; a stdio agent ends with its pipes), its tasks end, and the writer commits
  what is queued before the store is closed. The next start recovers them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from acpfsm.adapters.executor import AgentLaunch, Executor, RecoverableExecutor
from acpfsm.adapters.transport import AgentTransport
from acpfsm.statecharts.charts import DURABLE_RECORD
from acpfsm.statecharts.names import DurableRecordEvent, StartupRecoveryEvent

from .bus import bus_feed
from .durable import Durability, DurableSubscription, ExecutionLog
from .errors import ExecutionLost, ExecutionNotFound, Unsupported
from .recovery import DormantExecution, RecoveryDriver
from .store import ExecutionStore, StoredExecution
from .types import Execution, LaunchSpec, WorkspaceRef

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from .runtime import Runtime
    from .session import ExecutionSession

__all__ = ["Persistence"]

log = logging.getLogger("acpfsm.runtime")

CLOSE_FLUSH = 10.0
"""How long leaving ``async with`` waits for the store to take what is queued."""


class Persistence:
    """A Runtime's store, its executions' rows and logs, and their recovery."""

    def __init__(self, runtime: Runtime, store: ExecutionStore) -> None:
        self.rt = runtime
        self.durability = Durability(store, keep_events=runtime.retention.backlog_events)
        self.recovery = RecoveryDriver(self, self.durability)
        if runtime.bus is not None:  # every logged event, numbered, to the bus too
            self.durability.on_logged = bus_feed(runtime.bus)
        self._tg: anyio.abc.TaskGroup | None = None

    # what the recovery reads of the Runtime
    @property
    def profiles(self) -> Any:
        return self.rt.profiles

    @property
    def executors(self) -> Any:
        return self.rt.executors

    @property
    def timeouts(self) -> Any:
        return self.rt.timeouts

    @property
    def engine(self) -> Any:
        return self.rt.engine

    @property
    def trace(self) -> Any:
        return self.rt.trace

    # --- open and close --------------------------------------------------------------------

    async def open(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg
        records = await self.durability.store.open()
        await tg.start(self.durability.run)
        await self.recovery.recover_all(records)

    async def abort(self) -> None:
        """The open failed: release what it took."""
        await self.durability.close(0.0)

    async def close(self) -> None:
        async with anyio.create_task_group() as tg:
            for session in list(self.rt._sessions.values()):
                tg.start_soon(self._detach, session)
        await self.durability.close(CLOSE_FLUSH)

    async def _detach(self, session: ExecutionSession) -> None:
        record = session.ctx.machines.get(DURABLE_RECORD.chart_name)
        if record is not None and not record.ended:
            await session.ctx.step(record, DurableRecordEvent.runtime_detached)
        executor = self.rt.executors.get(session.ctx.spec.executor_id)
        if isinstance(executor, RecoverableExecutor):
            executor.detach(session.id)
        self.durability.detach(session.id)
        session.stop_tasks()
        await session.wait_finished()
        self.rt._forget(session)

    # --- a new execution -------------------------------------------------------------------

    def record_new(self, session: ExecutionSession, executor: Executor) -> None:
        ctx = session.ctx
        spec = ctx.spec
        record = StoredExecution(
            id=ctx.id,
            session_id=ctx.session_id,
            agent_profile_id=ctx.profile.id,
            executor_id=spec.executor_id,
            workspace_path=spec.workspace.path,
            acp_session_id=spec.prior_acp_session,
            mcp_mode=spec.mcp_mode,
            auth_method=spec.auth_method,
            permission_policy=spec.permission_policy or "",
            metadata=dict(ctx.metadata),
            started_at=ctx.started_at,
        )
        self.durability.attach(session, self.durability.log_of(record), executor)

    def follow(self, session: ExecutionSession) -> None:
        """Close the execution's log for live events once it finishes."""

        async def follow() -> None:
            await session.wait_finished()
            self.durability.ended(session.id)

        if self._tg is not None:
            self._tg.start_soon(follow)

    # --- a stored execution, running again ---------------------------------------------------

    def session_from(
        self, record: StoredExecution, entry: ExecutionLog, *, reattach: bool
    ) -> ExecutionSession:
        """A session for a stored execution: reattached to its surviving agent, or a new
        agent that loads the stored ACP session."""
        rt = self.rt
        profile = rt.profiles[record.agent_profile_id]
        executor = rt.executors[record.executor_id]
        spec = LaunchSpec(
            agent_profile_id=record.agent_profile_id,
            executor_id=record.executor_id,
            workspace=WorkspaceRef(path=record.workspace_path),
            prior_acp_session=record.acp_session_id,
            mcp_mode=record.mcp_mode,
            metadata=dict(record.metadata),
            auth_method=record.auth_method,
            permission_policy=record.permission_policy or None,  # type: ignore[arg-type]
        )
        opener = None
        if reattach:
            assert isinstance(executor, RecoverableExecutor)

            def opener(launch: AgentLaunch) -> AbstractAsyncContextManager[AgentTransport]:
                return executor.reattach(
                    launch, record.handle, record.acp_session_id, record.capabilities
                )

        session = rt._make_session(record.id, record.session_id, spec, profile, executor, opener)
        ctx = session.ctx
        ctx.started_at = record.started_at
        ctx.reattach = reattach
        ctx.startup_generation = record.startup_generation
        # a late completion of a generation the agent may have had is never a new prompt's
        session.turns._next = record.generation_reserved
        self.durability.attach(session, entry, executor)
        rt._sessions[record.id] = session
        rt._by_task_session[record.session_id] = record.id
        return session

    async def run_session(self, session: ExecutionSession) -> None:
        await self.rt._task_group().start(session.run)
        self.follow(session)

    async def discard(self, session: ExecutionSession) -> None:
        """A session that could not be started or made READY: end it, forget it."""
        self.durability.detach(session.id)
        session.stop_tasks()
        with anyio.CancelScope(shield=True):
            await session.wait_finished()
        self.rt._forget(session)

    # --- the facade --------------------------------------------------------------------------

    def dormant(self, execution_id: str) -> DormantExecution | None:
        return self.recovery.dormant.get(execution_id)

    def dormant_snapshots(self) -> list[Execution]:
        return [d.snapshot() for d in self.recovery.dormant.values()]

    def remove_dormant(self, execution_id: str) -> Execution:
        dormant = self.recovery.dormant.pop(execution_id)
        self.recovery.attempts.pop(execution_id, None)
        self.durability.delete(dormant.entry)
        return dormant.snapshot("STOPPED")

    async def relaunch(self, execution_id: str) -> Execution:
        dormant = self.dormant(execution_id)
        if dormant is None:
            if execution_id in self.rt._sessions:
                raise Unsupported(
                    f"relaunch of execution {execution_id!r}: it is running",
                    execution_id=execution_id,
                )
            raise ExecutionNotFound(execution_id)
        recovered = await self.recovery.attempt(
            dormant.entry.record, StartupRecoveryEvent.relaunch_requested
        )
        if recovered:
            return self.rt._sessions[execution_id].snapshot()
        lost = self.dormant(execution_id)
        raise lost.error() if lost is not None else ExecutionLost(execution_id, "relaunch failed")

    def subscribe(self, execution_id: str, after: int) -> DurableSubscription:
        if execution_id not in self.durability.logs:
            raise ExecutionNotFound(execution_id)
        return self.durability.subscribe(execution_id, after)

    async def override(self, session: ExecutionSession, key: str, value: str) -> None:
        """The app changed a runtime override (model, mode): the row keeps it, so a relaunch
        applies it again."""
        session.ctx.metadata[key] = value
        record = session.ctx.machines.get(DURABLE_RECORD.chart_name)
        if record is not None and not record.ended:
            await session.ctx.step(record, DurableRecordEvent.overrides_changed)
