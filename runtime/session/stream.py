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

from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import anyio.abc

from acpfsm.adapters import events as ev
from acpfsm.adapters.errors import DialFailed, DialRefused
from acpfsm.statecharts import AgentStream, ChartMachine, Effect

from .context import ExecutionContext
from .flows import FLOW, flow_effects, loss_data, wants

__all__ = ["StreamDriver"]


def _flow(effect: Effect, machine: ChartMachine) -> None:
    """A flow effect: the caller that fired the event acts on it."""


class StreamDriver:
    """Owns the execution's :class:`~acpfsm.statecharts.AgentStream` machine."""

    def __init__(self, ctx: ExecutionContext) -> None:
        self.ctx = ctx
        self.machine = ctx.start(AgentStream)
        self._tg: anyio.abc.TaskGroup | None = None
        self._dial = anyio.CancelScope()
        self._budget = anyio.CancelScope()
        self._last_dial_error = ""
        ctx.handle(
            AgentStream.chart_name, dict.fromkeys(flow_effects(AgentStream.chart_name), _flow)
        )
        ctx.handle(
            AgentStream.chart_name,
            {
                "redial": self._redial,
                "stop_redialling": lambda effect, machine: self._dial.cancel(),
                "arm_reconnect_budget": self._arm_budget,
                "disarm_reconnect_budget": lambda effect, machine: self._budget.cancel(),
                "give_up": self._give_up,
                "publish_reconnected": self._publish_reconnected,
            },
        )

    def attach(self, tg: anyio.abc.TaskGroup) -> None:
        """The execution's task group, where the dials and the budget's timer run."""
        self._tg = tg

    # --- the chart's view ---------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """The chart says the carrier is up."""
        return self.machine.is_in("connected")

    @property
    def redialling(self) -> bool:
        """The chart waits for a redial."""
        return self.machine.is_in("reconnecting")

    @property
    def live(self) -> bool:
        """Not at rest: a silently ended event stream is still a loss."""
        return self.machine.is_in("connecting", "connected", "reconnecting", "giving_up")

    # --- facts ----------------------------------------------------------------------------

    async def _fire(self, event: str, **data: Any) -> list[Any]:
        if self.machine.ended:  # closed on purpose: the carrier's late facts are moot
            return []
        return await self.ctx.step(self.machine, event, **data)

    async def connect_started(self) -> None:
        await self._fire("connect_started")

    async def connect_succeeded(self) -> None:
        await self._fire("connect_succeeded")

    async def connect_failed(self) -> None:
        await self._fire("connect_failed")

    async def connect_timed_out(self) -> None:
        await self._fire("connect_timed_out")

    async def lost(self, event: ev.StreamDisconnected) -> bool:
        """The transport lost the stream; True when the chart announces the loss (the
        caller then releases the generations and tells the execution)."""
        if self.machine.ended:
            return False  # closed on purpose (the execution stopped): nobody's news any more
        fired = await self._fire(
            "connection_lost",
            **loss_data(
                reconnecting=event.reconnecting,
                exit_code=event.exit_code,
                clean=event.clean,
                error=event.error,
            ),
        )
        return wants(fired, "announce_loss") is not None

    async def redialled(self, event: ev.StreamReconnected) -> None:
        """The transport's redial is up (its ``StreamReconnected``, ahead of the new
        connection's events)."""
        await self._fire("redial_succeeded", session_id=event.session_id, attempts=event.attempts)

    async def close(self) -> None:
        await self._fire("close_requested")

    # --- effects --------------------------------------------------------------------------

    def _spawn(
        self,
        scope: anyio.CancelScope,
        task: Callable[[anyio.CancelScope], Coroutine[Any, Any, None]],
    ) -> None:
        if self._tg is None:  # pragma: no cover - attached before the pump runs
            raise RuntimeError("StreamDriver: no task group attached")
        self._tg.start_soon(task, scope)

    def _redial(self, effect: Effect, machine: ChartMachine) -> None:
        failures = int(effect["failures"])
        self._dial.cancel()
        self._dial = anyio.CancelScope()

        async def dial(scope: anyio.CancelScope) -> None:
            transport = self.ctx.transport_or_raise()
            fatal: bool | None = None
            error = ""
            with scope:
                await anyio.sleep(transport.redial_policy.delay(failures))
                try:
                    await transport.redial()
                except DialRefused as exc:
                    fatal, error = True, f"redial failed: {exc}"
                except DialFailed as exc:
                    fatal, error = False, f"redial failed: {exc}"
                    self._last_dial_error = str(exc)
            if fatal is not None:  # success is the transport's StreamReconnected
                await self._fire("redial_failed", fatal=fatal, error=error, failures=failures + 1)

        self._spawn(self._dial, dial)

    def _arm_budget(self, effect: Effect, machine: ChartMachine) -> None:
        self._budget.cancel()
        self._budget = anyio.CancelScope()
        self._last_dial_error = ""

        async def timer(scope: anyio.CancelScope) -> None:
            budget = self.ctx.transport_or_raise().redial_policy.budget
            with scope:
                await anyio.sleep(budget)
            if not scope.cancel_called:
                last = self._last_dial_error or "no dial answered"
                await self._fire(
                    FLOW["arm_reconnect_budget"].expired,
                    error=f"not redialled within {budget:g}s (last dial: {last})",
                )

        self._spawn(self._budget, timer)

    def _give_up(self, effect: Effect, machine: ChartMachine) -> None:
        self.ctx.transport_or_raise().give_up(str(effect["error"]))

    def _publish_reconnected(self, effect: Effect, machine: ChartMachine) -> None:
        self.ctx.publish(
            ev.StreamReconnected(
                session_id=str(effect["session_id"]), attempts=int(effect["attempts"])
            )
        )
