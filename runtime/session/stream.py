"""The AgentStream chart's driver: the carrier's facts in, the chart's view of the connection.

The transport reports facts (connected, lost with or without a redial, redialled); the chart
decides what they mean for the connection. :meth:`StreamDriver.carrier_up` is the one place
where the runtime asks the carrier whether it is up (a redial the event stream does not
announce) and tells the chart what it saw.
"""

from __future__ import annotations

from acpfsm.statecharts import AgentStream

from .context import ExecutionContext

__all__ = ["StreamDriver"]


class StreamDriver:
    """Owns the execution's :class:`~acpfsm.statecharts.AgentStream` machine."""

    def __init__(self, ctx: ExecutionContext) -> None:
        self.ctx = ctx
        self.machine = ctx.start(AgentStream)

    @property
    def reconnectable(self) -> bool:
        transport = self.ctx.transport
        return transport is not None and transport.reconnectable

    async def _fire(self, event: str, **data: object) -> None:
        if not self.machine.ended:  # closed on purpose: the carrier's late facts are moot
            await self.ctx.step(self.machine, event, **data)

    async def connect_started(self) -> None:
        await self._fire("connect_started")

    async def connect_succeeded(self) -> None:
        await self._fire("connect_succeeded")

    async def connect_failed(self) -> None:
        await self._fire("connect_failed")

    async def connect_timed_out(self) -> None:
        await self._fire("connect_timed_out")

    async def lost(self, *, reconnectable: bool) -> None:
        await self._fire("connection_lost", reconnectable=reconnectable)

    async def redialled(self) -> None:
        """The carrier announced a redial (agentctl's ``stream_reconnected``)."""
        if self.machine.is_in("reconnecting"):
            await self._fire("connect_succeeded")

    async def close(self) -> None:
        await self._fire("close_requested")

    async def carrier_up(self) -> bool:
        """Bring the chart in line with what the carrier reports now (a redial the event
        stream did not announce); True when the stream is connected."""
        transport = self.ctx.transport_or_raise()
        up = transport.is_connected()
        reconnectable = transport.reconnectable
        state = self.machine.state
        if up:
            if state == "disconnected" and reconnectable:
                await self._fire("reconnect_requested", reconnectable=True)
            if self.machine.is_in("reconnecting"):
                await self._fire("connect_succeeded")
        elif state == "connected":
            await self._fire("connection_lost", reconnectable=reconnectable)
        elif state == "disconnected" and reconnectable:
            await self._fire("reconnect_requested", reconnectable=True)
        return up and self.machine.is_in("connected")

    @property
    def redialling(self) -> bool:
        """The chart waits for the carrier to come back."""
        return self.machine.is_in("reconnecting")

    @property
    def live(self) -> bool:
        """Connecting or connected: a silently ended event stream is still a loss."""
        return self.machine.is_in("connecting", "connected")
