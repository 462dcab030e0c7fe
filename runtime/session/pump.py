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

import anyio

from acpfsm.adapters import events as ev
from acpfsm.adapters.sync import EventQueue
from acpfsm.statecharts.flows import Op

from ..clock import loop_clock
from .config import ConfigDriver
from .context import ExecutionContext
from .interpreter import Answer, FlowRun, Interpreter
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
        flows: Interpreter,
    ) -> None:
        self.ctx = ctx
        self.flows = flows
        flows.register({Op.FLUSH_PARTIAL: self._flush})
        self.status = status
        self.stream = stream
        self.turns = turns
        self.config = config
        self.permissions = permissions
        self._tool_names: dict[str, str] = {}
        self._clock: Callable[[], float] = anyio.current_time

    async def run(self) -> None:
        """Handle the transport's events one at a time, in order.

        The plain turn content (message and thought chunks, plans: what only counts as
        activity and is published) is taken in this loop, with no coroutine per event,
        unless a chart is to hear of it (the first activity is yet to be announced, or a
        wakeup is watched: :meth:`handle`). Taking one never yields, so the events already
        queued behind it follow at once (up to the queue's batch, :meth:`EventQueue.take
        <acpfsm.adapters.transport.EventQueue.take>`) and no other task runs meanwhile:
        what the charts say and the current generation hold for the whole run, which shares
        one clock read and is published at once, before any other event is handled and
        before the pump yields."""
        self._clock = clock = loop_clock()  # looked up once
        events = self.ctx.transport_or_raise().events()
        take = events.take if isinstance(events, EventQueue) else _nothing
        status, act, message = self.status, self.ctx.activity, self.ctx.message
        first_activity, publish = status.first_activity, self.ctx.hub.publish_all
        chunk, reasoning, plan = ev.MessageChunk, ev.Reasoning, ev.Plan
        async for first in events:
            event: ev.AgentEvent | None = first
            if first_activity.ended and not status.watching_wakeup:
                taken: list[ev.AgentEvent] = []
                newest: int | None = None  # looked up at the first chunk
                # (no cast() below: it is a call, and this runs per event)
                while (
                    (kind := type(event)) is chunk
                    or kind is reasoning
                    or (kind is plan and not event.replayed)  # type: ignore[union-attr]
                ):
                    if kind is chunk:  # _reply's test, with no call per chunk
                        c: ev.MessageChunk = event  # type: ignore[assignment]
                        if newest is None:
                            newest = self._newest()
                        if c.text and c.role != "user" and not 0 < c.prompt_generation < newest:
                            message.append(c.text)
                    taken.append(event)  # type: ignore[arg-type]
                    event = take()
                if taken:
                    act.last_at = clock()
                    act.since_prompt = True
                    act.epoch += len(taken)
                    publish(taken)
            if event is not None:
                await self.handle(event)  # may yield: the next one comes the checked way
        if self.stream.silent_end_is_loss():
            # the stream ended without saying why: still a loss, so nobody waits forever
            await self.stream_lost(ev.StreamDisconnected(error="agent event stream ended"))

    def _newest(self) -> int:
        """The number of the current generation (0 when there is none)."""
        current = self.turns.current
        return 0 if current is None else current.number

    async def handle(self, event: ev.AgentEvent) -> None:
        ctx = self.ctx
        if isinstance(event, ev.Complete | ev.ErrorEvent):
            self.permissions.turn_ended(event.prompt_generation)
            turns = self.turns
            turns.terminal = event
            try:
                await self.flows.run("completion", "", **turns.completion_values(event))
            finally:
                turns.terminal = None
            return
        if isinstance(event, ev.StreamDisconnected):
            await self.stream_lost(event)
            return
        if isinstance(event, ev.StreamReconnected):  # published when the chart says so
            await self.flows.run("redialled", session_id=event.session_id, attempts=event.attempts)
            return
        status = self.status
        if not status.first_activity.ended:  # the chart hears of it (no coroutine made else)
            await status.activity()
        if self._record_activity(event) and status.watching_wakeup:
            await status.turn_content()  # a wakeup turn (R26) when READY
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
            g = event.prompt_generation
            await self.flows.run("handoff", stamped=g, unstamped=g == 0)
        text = _reply(event, self._newest())  # a chunk a chart heard of (else run() took it)
        if text:
            ctx.message.append(text)
        ctx.publish(event)

    async def _flush(self, run: FlowRun) -> Answer:
        await self.turns.flush_partial()
        return "ok"

    def _record_activity(self, event: ev.AgentEvent) -> bool:
        """Stall accounting for ``event``; True when it is turn content that may start a
        wakeup turn (any but a tool call's end)."""
        act = self.ctx.activity
        act.last_at = self._clock()
        if not ev.is_turn_content(event):
            return False
        act.since_prompt = True
        act.epoch += 1
        if isinstance(event, ev.ToolCall) and not event.parent_tool_call_id:
            # the active *top-level* tool: a subagent's tool call does not replace it
            act.active_tool_id = event.tool_call_id
            act.active_tool_title = event.tool_title or event.tool_name
        elif isinstance(event, ev.ToolUpdate) and ev.is_terminal_tool_update(event):
            if event.tool_call_id == act.active_tool_id:
                act.active_tool_id = act.active_tool_title = ""
            return False
        return True

    async def stream_lost(self, event: ev.StreamDisconnected) -> None:
        """handleStreamDisconnect and, for a local process, its exit (the LOSS flow)."""
        error = f"agent stream disconnected: {event.error or 'connection closed'}"
        if event.stderr_tail:
            error = f"{error} (stderr: {event.stderr_tail.strip()[-500:]})"
        exit_code = event.exit_code
        await self.flows.run(
            "loss",
            # only a carrier that redials, and whose process did not exit, is redialable
            redialable=event.reconnecting and exit_code is None,
            clean=event.clean,
            raw_error=event.error,
            error=error,
            exited=exit_code is not None,
            exit_code=exit_code,
            exit_error=f"agent process exited with code {exit_code}",
            shutting_down=self.ctx.shutting_down(),
        )


def _reply(event: ev.AgentEvent | None, newest: int) -> str:
    """The text ``event`` adds to the current reply ("" for none): the agent's message text
    of no turn (generation 0) or of a turn no successor superseded. Every admission
    supersedes the turn before it, so that is known from the numbers alone (``newest``, the
    current generation's), even once the generation's record is dropped."""
    if (
        type(event) is ev.MessageChunk
        and event.role != "user"
        and not 0 < event.prompt_generation < newest
    ):
        return event.text
    return ""


def _nothing() -> None:
    """No event already queued (a transport whose events are not an :class:`EventQueue`)."""


def _tool_output(event: ev.ToolUpdate) -> str:
    if event.raw_output is not None:
        return event.raw_output if isinstance(event.raw_output, str) else repr(event.raw_output)
    texts = [str(c.get("text", "")) for c in event.tool_call_contents if isinstance(c, dict)]
    return "".join(texts) or event.tool_status
