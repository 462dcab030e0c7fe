"""The event pump: the transport's events, one at a time and in order, turned into the
drivers' facts (kandev agentctl/client agent.go ``readUpdatesStream`` and the session
manager's ``handleAgentEvent``, ``handleStreamDisconnect``).

A terminal event goes to the turns (:meth:`~.turns.TurnDriver.completion`), a loss to the
AgentStream chart and, when the chart announces it, to the current generation and the
execution (:func:`~.flows.loss_followup`), a redial to the AgentStream chart; every other
event is activity (stall accounting, the first activity, a wakeup turn's content), buffered
reply text, model updates, history, a handoff, and is published. It decides nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import anyio

from acpfsm.adapters import events as ev

from ..clock import loop_clock
from .config import ConfigDriver
from .context import ExecutionContext
from .flows import loss_followup
from .permissions import PermissionBroker
from .status import StatusDriver
from .stream import StreamDriver
from .turns import TurnDriver

__all__ = ["EventPump"]

_TOOL_NAMES_KEPT = 1024  # the latest tool calls' names, for their results in the history


class EventPump:
    """Handles one execution's transport events (see the module docstring)."""

    def __init__(
        self,
        ctx: ExecutionContext,
        status: StatusDriver,
        stream: StreamDriver,
        turns: TurnDriver,
        config: ConfigDriver,
        permissions: PermissionBroker,
    ) -> None:
        self.ctx = ctx
        self.status = status
        self.stream = stream
        self.turns = turns
        self.config = config
        self.permissions = permissions
        self._tool_names: dict[str, str] = {}
        self._clock: Callable[[], float] = anyio.current_time

    def _replaced(self, generation: int) -> bool:
        """A successor was admitted after ``generation`` (every admission supersedes the turn
        before it, so this is its chart's ``superseded``, known from the numbers alone and
        still known once the generation's record is dropped); 0 is text of no turn."""
        current = self.turns.current
        return current is not None and 0 < generation < current.number

    async def run(self) -> None:
        """Handle the transport's events one at a time, in order."""
        self._clock = loop_clock()  # read for every event: looked up once
        async for event in self.ctx.transport_or_raise().events():
            await self.handle(event)
        if self.stream.live:
            # the stream ended without saying why: still a loss, so nobody waits forever
            await self.stream_lost(ev.StreamDisconnected(error="agent event stream ended"))

    async def handle(self, event: ev.AgentEvent) -> None:
        ctx = self.ctx
        kind = type(event)
        if kind is ev.MessageChunk or kind is ev.Reasoning:
            await self._content(cast("ev.MessageChunk | ev.Reasoning", event))
            return
        if isinstance(event, ev.Complete | ev.ErrorEvent):
            self.permissions.turn_ended(event.prompt_generation)
            await self.turns.completion(event)
            return
        if isinstance(event, ev.StreamDisconnected):
            await self.stream_lost(event)
            return
        if isinstance(event, ev.StreamReconnected):
            await self.stream.redialled(event)  # published when the chart says so
            return
        await self.status.activity()
        await self._record_activity(event)
        if isinstance(event, ev.SessionModels):
            await self.config.models_updated(event)
        elif isinstance(event, ev.ToolCall):
            name = event.tool_name or event.tool_title
            self._tool_names[event.tool_call_id] = name
            if len(self._tool_names) > _TOOL_NAMES_KEPT:  # a long session, or a flood
                del self._tool_names[next(iter(self._tool_names))]
            await ctx.history_append(
                lambda h: h.append_tool_call(ctx.session_id, name, event.tool_call_id)
            )
        elif isinstance(event, ev.ToolUpdate) and ev.is_terminal_tool_update(event):
            name = self._tool_names.get(event.tool_call_id, "")
            output = _tool_output(event)
            await ctx.history_append(
                lambda h: h.append_tool_result(ctx.session_id, name, event.tool_call_id, output)
            )
        elif isinstance(event, ev.ForegroundIdle) and event.prompt_handoff:
            await self.turns.handoff(event)
        ctx.publish(event)

    async def _content(self, event: ev.MessageChunk | ev.Reasoning) -> None:
        """The high-rate turn content (message and thought chunks), as :meth:`handle` treats
        any event, without its dispatch: activity, the reply text, published. No chart is
        read or fired unless the first activity is yet to be announced or a wakeup is
        watched."""
        status = self.status
        if not status.first_activity.ended:
            await status.activity()
        act = self.ctx.activity
        act.last_at = self._clock()
        act.since_prompt = True
        act.epoch += 1
        if status.watching_wakeup:
            await status.turn_content()  # a wakeup turn (R26) when READY
        if (
            type(event) is ev.MessageChunk
            and event.role != "user"
            and event.text
            # late text of a turn a successor superseded is not the current reply
            and not self._replaced(event.prompt_generation)
        ):
            self.ctx.message.append(event.text)
        self.ctx.hub.publish(event)

    async def _record_activity(self, event: ev.AgentEvent) -> None:
        act = self.ctx.activity
        act.last_at = self._clock()
        if not ev.is_turn_content(event):
            return
        act.since_prompt = True
        act.epoch += 1
        if isinstance(event, ev.ToolCall) and not event.parent_tool_call_id:
            # the active *top-level* tool: a subagent's tool call does not replace it
            act.active_tool_id = event.tool_call_id
            act.active_tool_title = event.tool_title or event.tool_name
        elif isinstance(event, ev.ToolUpdate) and ev.is_terminal_tool_update(event):
            if event.tool_call_id == act.active_tool_id:
                act.active_tool_id = act.active_tool_title = ""
            return
        await self.status.turn_content()  # a wakeup turn (R26) when READY

    async def stream_lost(self, event: ev.StreamDisconnected) -> None:
        """handleStreamDisconnect and, for a local process, its exit."""
        ctx = self.ctx
        if not await self.stream.lost(event):
            return  # the AgentStream chart redials a clean close silently (kandev H9)
        final = not self.stream.redialling  # the chart gave the carrier up for good
        error = f"agent stream disconnected: {event.error or 'connection closed'}"
        if event.stderr_tail:
            error = f"{error} (stderr: {event.stderr_tail.strip()[-500:]})"
        async with ctx.lifecycle_lock:
            claimed = await self.turns.stream_lost(error, final=final)
            follow = loss_followup(
                exit_code=event.exit_code,
                claimed=claimed,
                error=error,
                shutting_down=ctx.shutting_down(),
            )
            if follow is not None:
                await self.status.fire(follow[0], **follow[1])


def _tool_output(event: ev.ToolUpdate) -> str:
    if event.raw_output is not None:
        return event.raw_output if isinstance(event.raw_output, str) else repr(event.raw_output)
    texts = [str(c.get("text", "")) for c in event.tool_call_contents if isinstance(c, dict)]
    return "".join(texts) or event.tool_status
