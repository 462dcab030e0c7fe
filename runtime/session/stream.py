"""The AgentStream chart's driver: the carrier's facts in, the chart's redial performed.

The transport reports facts on its event stream (lost, cleanly or not; redialled) and in
the result of each dial (:meth:`~acpfsm.adapters.transport.AgentTransport.redial` returns,
or raises :class:`~acpfsm.adapters.errors.DialFailed` / ``DialRefused``); the
:class:`~acpfsm.statecharts.AgentStream` chart decides what they mean. This driver performs
its effects in the execution's task group: a dial after the backoff the transport's
:class:`~acpfsm.adapters.transport.RedialPolicy` gives for the failures so far
(``redial``), the reconnect budget's timer (``arm_reconnect_budget``), the give-up
(``give_up``), and the ``StreamReconnected`` subscribers see (``publish_reconnected``).
``announce_loss`` is the caller's (the event pump's ``stream_lost``): it tells the generations
and the execution.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from acpfsm.adapters import events as ev
from acpfsm.adapters.errors import DialFailed, DialRefused
from acpfsm.statecharts import ChartMachine, Effect, answer, says
from acpfsm.statecharts.charts import AGENT_STREAM
from acpfsm.statecharts.flows import Op
from acpfsm.statecharts.names import AgentStreamEffect, AgentStreamEvent, EventName

from .context import ExecutionContext, flow_effects, nothing
from .interpreter import Later

if TYPE_CHECKING:
    from .interpreter import Answer, FlowRun, Interpreter

__all__ = ["StreamDriver"]


_NO_FLOWS: Any = None  # attached once the interpreter exists (:meth:`StreamDriver.attach`)


class StreamDriver:
    """Owns the execution's :class:`~acpfsm.statecharts.AgentStream` machine."""

    def __init__(self, ctx: ExecutionContext) -> None:
        self.ctx = ctx
        self.machine = ctx.start(AGENT_STREAM)
        self._last_dial_error = ""
        self.flows: Interpreter = _NO_FLOWS
        ctx.handle(AGENT_STREAM.chart_name, flow_effects(AGENT_STREAM.chart_name))
        ctx.handle(
            AGENT_STREAM.chart_name,
            {
                AgentStreamEffect.redial: self._redial,
                AgentStreamEffect.stop_redialling: lambda effect, machine: self.flows.stop(
                    "redial"
                ),
                AgentStreamEffect.arm_reconnect_budget: self._arm_budget,
                AgentStreamEffect.disarm_reconnect_budget: lambda e, m: self.flows.stop(
                    "reconnect_budget"
                ),
                AgentStreamEffect.give_up: self._give_up,
                AgentStreamEffect.publish_reconnected: self._publish_reconnected,
                # the answers to carrier_awaited and event_stream_ended, questions asked in
                # place (carrier(), silent_end_is_loss())
                AgentStreamEffect.report_connected: nothing,
                AgentStreamEffect.report_not_connected: nothing,
                AgentStreamEffect.report_loss: nothing,
            },
        )

    def attach(self, flows: Interpreter) -> None:
        """The execution's interpreter (the redials and the budget run as its flows)."""
        self.flows = flows
        flows.register({Op.DIAL: self._dial})

    # --- the chart's view ---------------------------------------------------------------

    def carrier(self) -> bool | None:
        """The AgentStream chart's answer to ``carrier_awaited``, asked without firing: True
        when the carrier is up, None while a redial is under way, False when it never will
        be without another fact (closed: the chart has ended, which says the same)."""
        names = answer(self.machine, AgentStreamEvent.carrier_awaited)
        if names is None:
            return False
        if AgentStreamEffect.report_connected in names:
            return True
        return False if AgentStreamEffect.report_not_connected in names else None

    def silent_end_is_loss(self) -> bool:
        """The chart's answer to ``event_stream_ended``, asked without firing: an event
        stream that ended without saying why is a loss unless the stream rests already."""
        return says(
            self.machine, AgentStreamEvent.event_stream_ended, AgentStreamEffect.report_loss
        )

    # --- facts ----------------------------------------------------------------------------

    async def _fire(self, event: EventName, **data: Any) -> list[Any]:
        if self.machine.ended:  # closed on purpose: the carrier's late facts are moot
            return []
        return await self.ctx.step(self.machine, event, **data)

    async def connect_started(self) -> None:
        await self._fire(AgentStreamEvent.connect_started)

    async def connect_succeeded(self) -> None:
        await self._fire(AgentStreamEvent.connect_succeeded)

    async def connect_failed(self) -> None:
        await self._fire(AgentStreamEvent.connect_failed)

    async def connect_timed_out(self) -> None:
        await self._fire(AgentStreamEvent.connect_timed_out)

    async def close(self) -> None:
        await self._fire(AgentStreamEvent.close_requested)

    # --- effects and the DIAL op ------------------------------------------------------------

    def _redial(self, effect: Effect, machine: ChartMachine) -> None:
        self.flows.start("redial", failures=int(effect["failures"]))

    def _arm_budget(self, effect: Effect, machine: ChartMachine) -> None:
        self._last_dial_error = ""
        budget = self.ctx.transport_or_raise().redial_policy.budget
        self.flows.start("reconnect_budget", error=Later(lambda: self.budget_error(budget)))

    async def _dial(self, run: FlowRun) -> Answer:
        """One dial; success is the transport's StreamReconnected (the pump's)."""
        failures = int(run.values.get("failures", 0)) + 1
        try:
            await self.ctx.transport_or_raise().redial()
        except DialRefused as exc:
            return "refused", {"error": f"redial failed: {exc}", "failures": failures}
        except DialFailed as exc:
            self._last_dial_error = str(exc)
            return "failed", {"error": f"redial failed: {exc}", "failures": failures}
        return "ok"

    def budget_error(self, budget: float) -> str:
        last = self._last_dial_error or "no dial answered"
        return f"not redialled within {budget:g}s (last dial: {last})"

    def _give_up(self, effect: Effect, machine: ChartMachine) -> None:
        self.ctx.transport_or_raise().give_up(str(effect["error"]))

    def _publish_reconnected(self, effect: Effect, machine: ChartMachine) -> None:
        self.ctx.publish(
            ev.StreamReconnected(
                session_id=str(effect["session_id"]), attempts=int(effect["attempts"])
            )
        )
