"""The Execution chart's driver: the execution's status and the ``agent.*`` events it publishes.

Every status change is a transition of :class:`~acpfsm.statecharts.Execution`, most of them
coordinated from another chart (a generation's outcome, the session init's end); this driver
performs the Execution chart's effects and turns the runtime's own facts (the process exited,
a wakeup turn, a stop) into its events.
"""

from __future__ import annotations

from typing import Any, cast

from acpfsm.adapters.sync import Wakeup
from acpfsm.statecharts import ChartMachine, Effect, answer
from acpfsm.statecharts.charts import EXECUTION, FIRST_ACTIVITY
from acpfsm.statecharts.coordination import Fired
from acpfsm.statecharts.names import (
    EventName,
    ExecutionEffect,
    ExecutionEvent,
    FirstActivityEffect,
    FirstActivityEvent,
)

from .. import events as le
from ..types import ExecutionStatus
from .context import ExecutionContext, flow_effects, nothing, utcnow

__all__ = ["StatusDriver"]


class StatusDriver:
    """Owns the execution's :class:`~acpfsm.statecharts.Execution` machine."""

    def __init__(self, ctx: ExecutionContext) -> None:
        self.ctx = ctx
        self.machine = ctx.start(EXECUTION)
        self.first_activity = ctx.start(FIRST_ACTIVITY)
        self._wakeup_watch = False
        self._changed = Wakeup()
        ctx.handle(
            EXECUTION.chart_name,
            {
                ExecutionEffect.publish_agent_ready: self._ready,
                ExecutionEffect.publish_agent_running: self._running,
                ExecutionEffect.publish_agent_failed: self._failed,
                ExecutionEffect.publish_agent_stopped: self._stopped,
                ExecutionEffect.publish_agent_completed: self._completed,
                ExecutionEffect.publish_agent_boot_ready: self._boot_ready,
                ExecutionEffect.publish_stream_error: self._stream_error,
                ExecutionEffect.record_failure: self._record_failure,
                ExecutionEffect.record_finish: self._record_finish,
                ExecutionEffect.record_exit: self._record_exit,
                ExecutionEffect.watch_for_wakeup: self._watch,
                ExecutionEffect.unwatch_wakeup: self._unwatch,
                ExecutionEffect.announce_first_activity: self._announce,
                # the answers to ready_awaited, a question asked without firing (ready())
                ExecutionEffect.report_ready: nothing,
                ExecutionEffect.report_not_ready: nothing,
                ExecutionEffect.recover_stream: nothing,  # stream_recovery_requested's answer
            }
            | flow_effects(EXECUTION.chart_name),
        )
        ctx.handle(
            FIRST_ACTIVITY.chart_name, {FirstActivityEffect.publish_agent_running: self._running}
        )
        ctx.on_step(EXECUTION.chart_name, self._notify)

    @property
    def status(self) -> ExecutionStatus:
        """The kandev status name (``READY`` …)."""
        return cast(ExecutionStatus, self.machine.compiled.display[self.machine.state])

    @property
    def ended(self) -> bool:
        """STOPPED: the execution is removed and its chart has ended."""
        return self.machine.ended

    async def changed(self) -> None:
        """Wait for the execution's next status step."""
        await self._changed.wait()

    def _notify(self) -> None:
        self._changed.wake()

    # --- facts ----------------------------------------------------------------------------

    async def activity(self) -> None:
        """The agent showed activity (any event but a claim): the Execution chart says
        whether it is the one first activity to announce."""
        if not self.first_activity.ended:
            await self.fire(ExecutionEvent.activity_recorded)

    async def fire(self, event: EventName, **data: Any) -> list[Fired]:
        """A fact for the Execution chart, and the steps it took; after STOPPED the execution
        is removed and late facts are moot (none: the coordination table treats an ended
        chart the same way)."""
        if self.machine.ended:
            return []
        return await self.ctx.step(self.machine, event, **data)

    def ready(self) -> bool | None:
        """The Execution chart's answer to ``ready_awaited``, asked without firing: True when
        READY, False when it never will be without another fact (FAILED, COMPLETED, or
        STOPPED: the chart has ended), None while it is on its way."""
        names = answer(self.machine, ExecutionEvent.ready_awaited)
        if names is None:
            return False
        if ExecutionEffect.report_ready in names:
            return True
        return False if ExecutionEffect.report_not_ready in names else None

    @property
    def watching_wakeup(self) -> bool:
        """READY and no turn content since (nor a prompt: ``unwatch_wakeup``): the next
        content is a wakeup fact."""
        return self._wakeup_watch

    async def turn_content(self) -> None:
        """Turn content arrived: the first one after the execution became READY is a wakeup
        fact (the chart decides whether it starts a wakeup turn)."""
        if self._wakeup_watch:  # the chart's unwatch_wakeup ends the watch
            await self.fire(ExecutionEvent.wakeup_content_arrived)

    # --- effects ----------------------------------------------------------------------------

    async def _announce(self, effect: Effect, machine: ChartMachine) -> None:
        if not self.first_activity.ended:
            await self.ctx.step(self.first_activity, FirstActivityEvent.activity_seen)

    def _watch(self, effect: Effect, machine: ChartMachine) -> None:
        self._wakeup_watch = True

    def _unwatch(self, effect: Effect, machine: ChartMachine) -> None:
        self._wakeup_watch = False

    def _ready(self, effect: Effect, machine: ChartMachine) -> None:
        self.ctx.publish(
            le.AgentReady(
                execution_id=self.ctx.id,
                prompt_generation=int(effect["generation"]),
                stop_reason=str(effect["stop_reason"]),
            )
        )

    def _running(self, effect: Effect, machine: ChartMachine) -> None:
        self.ctx.publish(le.AgentRunning(execution_id=self.ctx.id))

    def _failed(self, effect: Effect, machine: ChartMachine) -> None:
        self.ctx.publish(
            le.AgentFailed(
                execution_id=self.ctx.id,
                error=str(effect["error"]),
                prompt_generation=int(effect["generation"]),
                phase=str(effect["phase"]),
            )
        )

    def _stopped(self, effect: Effect, machine: ChartMachine) -> None:
        self.ctx.publish(le.AgentStopped(execution_id=self.ctx.id, reason=str(effect["reason"])))

    def _completed(self, effect: Effect, machine: ChartMachine) -> None:
        self.ctx.publish(
            le.AgentCompleted(execution_id=self.ctx.id, exit_code=int(effect["exit_code"]))
        )

    def _boot_ready(self, effect: Effect, machine: ChartMachine) -> None:
        self.ctx.publish(
            le.AgentBootReady(
                execution_id=self.ctx.id,
                resume_context_pending=bool(effect["resume_context_pending"]),
            )
        )

    def _stream_error(self, effect: Effect, machine: ChartMachine) -> None:
        self.ctx.publish(
            le.AgentctlError(
                execution_id=self.ctx.id,
                error=str(effect["error"]),
                prompt_generation=int(effect["generation"]),
            )
        )

    def _record_failure(self, effect: Effect, machine: ChartMachine) -> None:
        self.ctx.set_failed(str(effect["error"]))

    def _record_finish(self, effect: Effect, machine: ChartMachine) -> None:
        self.ctx.finished_at = self.ctx.finished_at or utcnow()

    def _record_exit(self, effect: Effect, machine: ChartMachine) -> None:
        self.ctx.exit_code = int(effect["exit_code"])
