"""Startup recovery (``async with Runtime(store=...)``) and ``Runtime.relaunch``: the
:class:`~acpfsm.statecharts.StartupRecovery` chart's driver.

kandev's lifecycle ``Manager.Start`` (lifecycle/manager_lifecycle.go) recovers every execution
its executor backends report (executor_registry.go ``RecoverAll``) before it serves anything.
Here :meth:`RecoveryDriver.recover_all` takes every row the store holds, each in a task of its
own (at most ``concurrency`` at a time; one execution's failure never touches another), and
runs one StartupRecovery machine per row: a new attempt with the next startup generation. The
chart's effects are performed here: the work (``probe_agent``, ``reattach_agent``,
``end_orphan``, ``relaunch_agent``) runs with its bounds and feeds its outcome back, stamped
with the attempt's generation and fired on the execution's *current* attempt (a late answer of
an older attempt is ignored there). When ``async with`` enters its body every stored
execution is accounted for: recovered (a running :class:`~acpfsm.runtime.session.ExecutionSession`
again), or a :class:`DormantExecution`: lost (FAILED, its reason, its ACP session id) or
finished as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from acpfsm.adapters.errors import AcpfsmError
from acpfsm.adapters.executor import RecoverableExecutor
from acpfsm.statecharts import ChartMachine, Effect
from acpfsm.statecharts.charts import STARTUP_RECOVERY
from acpfsm.statecharts.names import (
    EffectName,
    EventName,
    StartupRecoveryEffect,
    StartupRecoveryEvent,
)

from . import events as le
from .durable import Durability, ExecutionLog
from .errors import ExecutionLost
from .store import StoredExecution
from .types import Execution as ExecutionSnapshot
from .types import ExecutionStatus

if TYPE_CHECKING:
    from .persistence import Persistence
    from .session import ExecutionSession

__all__ = ["INTERRUPTED", "DormantExecution", "RecoveryDriver"]

log = logging.getLogger("acpfsm.runtime")

INTERRUPTED = "the app stopped while the turn was in flight: its caller is gone"


class DormantExecution:
    """A stored execution with no agent here: lost (FAILED with ``reason``) or finished as it
    was (its stored status). ``Runtime.relaunch`` starts it again; ``Runtime.stop`` removes
    it."""

    def __init__(
        self, entry: ExecutionLog, machine: ChartMachine, reason: str, *, lost: bool
    ) -> None:
        self.entry = entry
        self.machine = machine
        self.reason = reason
        self.lost = lost
        """Lost (the chart's ``mark_lost``), else finished as it was (``mark_finished``)."""

    @property
    def id(self) -> str:
        return self.entry.record.id

    def error(self) -> ExecutionLost:
        return ExecutionLost(self.id, self.reason)

    def snapshot(self, status: ExecutionStatus | None = None) -> ExecutionSnapshot:
        record = self.entry.record
        caps = record.capabilities
        stored = record.status if record.status in _STATUSES else "FAILED"
        return ExecutionSnapshot(
            id=record.id,
            session_id=record.session_id,
            task_id=str(record.metadata.get("task_id", "")),
            agent_profile_id=record.agent_profile_id,
            workspace_path=record.workspace_path,
            agentctl_url=str(record.handle.get("control_url", "")),
            status=status or ("FAILED" if self.lost else stored),  # type: ignore[arg-type]
            started_at=record.started_at,
            finished_at=None,
            exit_code=record.exit_code,
            error_message=record.error_message,
            acp_session_id=record.acp_session_id,
            agent_name=caps.agent.name if caps is not None else "",
            agent_version=caps.agent.version if caps is not None else "",
            agent_capabilities=caps,
            charts={STARTUP_RECOVERY.chart_name: self.machine.state},
            prompt_generation=record.prompt_generation,
            metadata=dict(record.metadata),
        )


_STATUSES = ("STARTING", "RUNNING", "READY", "COMPLETED", "FAILED", "STOPPED")


class _Attempt:
    __slots__ = ("cancel_turn", "entry", "error", "generation", "reason", "recovered", "todo")

    def __init__(self, entry: ExecutionLog, generation: int) -> None:
        self.entry = entry
        self.generation = generation
        self.todo: list[EffectName] = []
        self.recovered = False
        """The chart said so (its ``mark_recovered``)."""
        self.reason = ""
        self.error: BaseException | None = None
        self.cancel_turn = False
        """The chart asked for the interrupted turn to be cancelled once reattached."""


Work = Callable[[_Attempt], Awaitable[None]]


class RecoveryDriver:
    """Drives one StartupRecovery machine per attempt (see the module docstring)."""

    def __init__(self, host: Persistence, durability: Durability) -> None:
        self.rt = host
        self.durability = durability
        self.attempts: dict[str, ChartMachine] = {}
        """The current attempt of each execution (where every fact is fired)."""
        self.dormant: dict[str, DormantExecution] = {}
        self._work: dict[EffectName, Work] = {
            StartupRecoveryEffect.probe_agent: self._probe,
            StartupRecoveryEffect.end_orphan: self._end_orphan,
            StartupRecoveryEffect.reattach_agent: self._reattach,
            StartupRecoveryEffect.relaunch_agent: self._relaunch,
        }
        self._now: dict[EffectName, Callable[[_Attempt, Effect], Awaitable[None] | None]] = {
            StartupRecoveryEffect.claim_attempt: self._claim,
            StartupRecoveryEffect.publish_turn_interrupted: self._interrupted,
            StartupRecoveryEffect.cancel_interrupted_turn: self._cancel_later,
            StartupRecoveryEffect.mark_lost: self._mark_lost,
            StartupRecoveryEffect.mark_finished: self._mark_finished,
            StartupRecoveryEffect.mark_recovered: self._mark_recovered,
            StartupRecoveryEffect.persist_recovery: lambda a, e: self.durability.persist(a.entry),
        }

    # --- attempts ------------------------------------------------------------------------------

    async def recover_all(self, records: list[StoredExecution], *, concurrency: int = 32) -> None:
        limiter = anyio.CapacityLimiter(max(1, concurrency))

        async def one(record: StoredExecution) -> None:
            async with limiter:
                try:
                    await self.attempt(
                        record, StartupRecoveryEvent.recovery_started, **_facts(record)
                    )
                except Exception:  # contained: the others are recovered all the same
                    log.exception("recovering execution %s failed", record.id)

        async with anyio.create_task_group() as tg:
            for record in records:
                tg.start_soon(one, record)

    async def attempt(self, record: StoredExecution, event: EventName, **data: Any) -> bool:
        """One attempt: a new machine with the next startup generation, ``event`` fired,
        then its work until it rests; whether the chart said it recovered."""
        entry = self.durability.log_of(record)
        generation = record.startup_generation + 1
        machine = STARTUP_RECOVERY.start(
            engine=self.rt.engine,
            # the trace's "generation": the reservation its prompts are numbered past; each
            # attempt is an instance of its own
            tags={"execution_id": record.id, "generation": record.generation_reserved},
            observers=(self.rt.trace.observer(record.id, instance=generation),),
            startup_generation=generation,
        )
        self.attempts[record.id] = machine
        attempt = _Attempt(entry, generation)
        await self._fire(attempt, event, **data)
        while attempt.todo:
            await self._work[attempt.todo.pop(0)](attempt)
        return attempt.recovered

    async def _fire(self, attempt: _Attempt, event: EventName, **data: Any) -> None:
        machine = self.attempts[attempt.entry.record.id]
        step = machine.fire(event, startup_generation=attempt.generation, **data)
        for effect in step.effects:
            if effect.name in self._work:
                attempt.todo.append(effect.name)
                continue
            result = self._now[effect.name](attempt, effect)
            if result is not None:
                await result

    # --- effects -----------------------------------------------------------------------------

    async def _claim(self, attempt: _Attempt, effect: Effect) -> None:
        attempt.entry.record.startup_generation = attempt.generation
        self.durability.persist(attempt.entry)
        await self.durability.flush()

    def _interrupted(self, attempt: _Attempt, effect: Effect) -> None:
        record = attempt.entry.record
        self.durability.publish(
            record.id,
            le.PromptInterrupted(
                execution_id=record.id,
                prompt_generation=int(effect["generation"]),
                reason=INTERRUPTED,
            ),
        )

    def _cancel_later(self, attempt: _Attempt, effect: Effect) -> None:
        attempt.cancel_turn = True

    async def _cancel_interrupted(self, session: ExecutionSession) -> None:
        """Ask the reattached agent to end the turn nobody waits for (bounded; its late end
        is ignored by generation); a failure is only logged."""
        transport = session.ctx.transport
        if transport is None:
            return
        with anyio.move_on_after(self.rt.timeouts.cancel_wait):
            try:
                await transport.cancel()
            except AcpfsmError as exc:
                log.warning("interrupted turn of %s not cancelled: %s", session.id, exc)

    def _mark_lost(self, attempt: _Attempt, effect: Effect) -> None:
        record = attempt.entry.record
        reason = str(effect["reason"]) or "the agent did not survive the app's restart"
        record.status, record.error_message = "FAILED", reason
        self.durability.publish(
            record.id,
            le.AgentLost(
                execution_id=record.id,
                reason=reason,
                acp_session_id=record.acp_session_id,
                startup_generation=attempt.generation,
            ),
        )
        self.dormant[record.id] = DormantExecution(
            attempt.entry, self.attempts[record.id], reason, lost=True
        )

    def _mark_recovered(self, attempt: _Attempt, effect: Effect) -> None:
        attempt.recovered = True

    def _mark_finished(self, attempt: _Attempt, effect: Effect) -> None:
        record = attempt.entry.record
        reason = f"the agent had ended before the app restarted ({record.status})"
        self.dormant[record.id] = DormantExecution(
            attempt.entry, self.attempts[record.id], reason, lost=False
        )

    # --- work ----------------------------------------------------------------------------------

    def _executor(self, record: StoredExecution) -> RecoverableExecutor | None:
        executor = self.rt.executors.get(record.executor_id)
        return executor if isinstance(executor, RecoverableExecutor) else None

    async def _probe(self, attempt: _Attempt) -> None:
        record = attempt.entry.record
        executor = self._executor(record)
        if executor is None:
            why = (
                "is not configured in this Runtime"
                if record.executor_id not in self.rt.executors
                else "cannot find its agents again"
            )
            reason = f"executor {record.executor_id!r} {why}: its agent may still run"
            await self._fire(attempt, StartupRecoveryEvent.agent_gone, reason=reason)
            return
        with anyio.move_on_after(self.rt.timeouts.request):
            probe = await executor.probe(record.id, record.handle)
        if not probe or probe.found == "gone":
            reason = probe.reason if probe else "the executor did not answer in time"
            await self._fire(attempt, StartupRecoveryEvent.agent_gone, reason=reason)
        elif probe.found == "alive" and record.agent_profile_id in self.rt.profiles:
            await self._fire(attempt, StartupRecoveryEvent.agent_alive)
        else:
            attempt.reason = probe.reason
            if probe.found == "alive":
                attempt.reason = f"agent profile {record.agent_profile_id!r} is not configured"
            await self._fire(attempt, StartupRecoveryEvent.orphan_found)

    async def _end_orphan(self, attempt: _Attempt) -> None:
        record = attempt.entry.record
        executor = self._executor(record)
        done = "nothing to end"
        if executor is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self.rt.timeouts.request):
                done = await executor.end_orphan(record.id, record.handle)
        await self._fire(
            attempt, StartupRecoveryEvent.orphan_ended, reason=f"{attempt.reason}; {done}"
        )

    async def _start(self, attempt: _Attempt, session: ExecutionSession) -> BaseException | None:
        """Run ``session`` and wait until it is READY; the failure, else None."""
        try:
            await self.rt.run_session(session)
            await session.wait_ready()
        except AcpfsmError as exc:
            await self.rt.discard(session)
            return exc
        return None

    async def _reattach(self, attempt: _Attempt) -> None:
        record = attempt.entry.record
        session = self.rt.session_from(record, attempt.entry, reattach=True)
        failure = await self._start(attempt, session)
        if failure is None:
            if attempt.cancel_turn:
                await self._cancel_interrupted(session)
            self.dormant.pop(record.id, None)
            await self._fire(attempt, StartupRecoveryEvent.reattached)
        else:
            await self._fire(
                attempt,
                StartupRecoveryEvent.reattach_failed,
                reason=f"the agent could not be reattached: {failure}",
            )

    async def _relaunch(self, attempt: _Attempt) -> None:
        record = attempt.entry.record
        if record.agent_profile_id not in self.rt.profiles:
            reason = f"agent profile {record.agent_profile_id!r} is not configured"
            await self._fire(attempt, StartupRecoveryEvent.relaunch_failed, reason=reason)
            return
        session = self.rt.session_from(record, attempt.entry, reattach=False)
        failure = await self._start(attempt, session)
        if failure is None:
            self.dormant.pop(record.id, None)
            await self._fire(attempt, StartupRecoveryEvent.relaunched)
        else:
            attempt.error = failure
            await self._fire(
                attempt, StartupRecoveryEvent.relaunch_failed, reason=f"relaunch failed: {failure}"
            )


def _facts(record: StoredExecution) -> dict[str, Any]:
    """``recovery_started``'s data, read from the row."""
    ended = record.status == "COMPLETED" or (
        record.status == "FAILED" and record.exit_code is not None
    )
    return {
        "agent_ended": ended,
        "turn_in_flight": record.status == "RUNNING",
        "generation": record.prompt_generation,
    }
