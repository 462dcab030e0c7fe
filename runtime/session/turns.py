"""The PromptGeneration charts' driver, agent side: each generation as an object, and the
agent's facts that end a turn (kandev manager_events.go ``handleCompleteEvent``,
``handlePromptHandoffEvent``, ``handleStreamDisconnect``).

Every admitted prompt is a :class:`Generation`: its own chart machine, its own outcome, its
own events (``done`` when its waiter is released, ``turn_over`` when the agent no longer owes
the turn, ``returned`` when the prompt call that owns it has returned, ``sent`` when its
send attempt is over). The chart decides what
an agent fact means for a generation (claimed or ignored, the outcome, what the execution's
status does next); :class:`TurnDriver` feeds the facts in and performs the effects.
"""

from __future__ import annotations

import collections
import logging

import anyio
import msgspec

from acpfsm.adapters import events as ev
from acpfsm.adapters.classify import Call, classify_error
from acpfsm.adapters.sync import Flag
from acpfsm.statecharts import ChartMachine, Effect, PromptGeneration
from acpfsm.statecharts.coordination import Fired

from .. import events as le
from ..errors import CANCEL_ESCALATED_SIGNAL, NotReadyForPrompts
from .context import ExecutionContext, Handler
from .flows import (
    ADMISSION,
    admits,
    completion_route,
    ends_wakeup,
    flow_effects,
    wakeup_fact,
    wants,
)
from .status import StatusDriver

__all__ = ["Generation", "TurnDriver", "wants"]

log = logging.getLogger("acpfsm.runtime")
_GENERATIONS_KEPT = 64


def _nothing(effect: Effect, machine: ChartMachine) -> None:
    """A flow effect: the caller that fired the event acts on it (see :mod:`.flows`)."""


class Generation:
    """One admitted prompt (see the module docstring)."""

    __slots__ = (
        "agent_message",
        "cancel_result",
        "done",
        "error",
        "machine",
        "number",
        "result",
        "returned",
        "sent",
        "stop_reason",
        "turn_over",
    )

    def __init__(self, machine: ChartMachine, number: int) -> None:
        self.machine = machine
        self.number = number
        self.result = ""
        """What the waiter learns (the ``release_waiter`` effect's ``result``)."""
        self.stop_reason = ""
        self.error = ""
        self.agent_message = ""
        self.cancel_result = ""
        self.done = Flag()  # allocates only when waited on (most are not)
        self.turn_over = Flag()
        self.returned = Flag()
        self.sent = Flag()
        """Set once the prompt's send attempt is over (answered, failed, or never made)."""

    @property
    def generation(self) -> int:
        return self.number

    @property
    def state(self) -> str:
        return self.machine.state

    @property
    def leaf(self) -> str:  # the name tests and snapshots read
        return self.machine.state

    def __repr__(self) -> str:
        return f"<Generation {self.number} {self.machine.state}>"


class TurnDriver:
    """Owns the execution's prompt generations (see the module docstring)."""

    def __init__(self, ctx: ExecutionContext, status: StatusDriver) -> None:
        self.ctx = ctx
        self.status = status
        self.generations: collections.OrderedDict[int, Generation] = collections.OrderedDict()
        self.current: Generation | None = None
        self._next = 0
        self._terminal: ev.Complete | ev.ErrorEvent | None = None
        self._partial = ""
        handlers: dict[str, Handler] = dict.fromkeys(
            flow_effects(PromptGeneration.chart_name), _nothing
        )
        own: dict[str, Handler] = {
            "arm_activity": self._arm_activity,
            "claim_outcome": self._claim_outcome,
            "claim_handoff": self._claim_handoff,
            "claim_disconnect": self._claim_disconnect,
            "release_waiter": self._release_waiter,
            "record_escalation": self._record_escalation,
            "end_cancel": self._end_cancel,
            "publish_terminal_event": self._publish_terminal,
            "publish_prompt_completed": self._publish_completed,
            "publish_prompt_failed": self._publish_failed,
            "publish_stream_error": self._publish_stream_error,
            "report_stall": self._report_stall,
        }
        handlers.update(own)
        ctx.handle(PromptGeneration.chart_name, handlers)
        ctx.handle("execution", {"end_wakeup_turn": self._end_wakeup_turn})

    def of(self, machine: ChartMachine) -> Generation:
        return self.generations[int(machine.constant("generation"))]

    # --- admission (BeginPrompt) -------------------------------------------------------------

    def admit(self, dispatch_only: bool) -> tuple[Generation, list[Fired]]:
        """Supersede the current generation and admit the next (under the lifecycle lock;
        the caller performs what was fired); raises NotReadyForPrompts once the execution
        was stopped (R24)."""
        ctx = self.ctx
        if not admits(self.status.ended):
            raise NotReadyForPrompts(ctx.id, self.status.status)
        fired: list[Fired] = []
        supersede, begin = ADMISSION
        previous = self.current
        if previous is not None:
            fired += ctx.fire(previous.machine, supersede)
            # its prompt call has returned (the prompt lock): its reply is no longer kept
            previous.agent_message = ""
        self._next += 1
        g = self._next
        generation = Generation(
            ctx.start(PromptGeneration, generation=g, dispatch_only=dispatch_only), g
        )
        self.generations[g] = generation
        while len(self.generations) > _GENERATIONS_KEPT:
            self.generations.popitem(last=False)
        self.current = generation
        fired += ctx.fire(self.status.machine, begin)
        return generation, fired

    # --- the agent's facts -------------------------------------------------------------------

    async def completion(self, event: ev.Complete | ev.ErrorEvent) -> None:
        """``handleCompleteEvent``: claim once per generation, or end a wakeup turn.

        A generation-bearing event is offered to its own generation only (R6, R7); a
        generation-0 event (the wildcard/legacy path) to the current one and, when that one
        does not claim it, it ends a wakeup turn (kandev's gen-0 path, R27)."""
        ctx = self.ctx
        is_error = isinstance(event, ev.ErrorEvent) or bool(event.data.get("is_error"))
        message = event.error if is_error else ""  # extractErrorMessage: error, else text
        if is_error and not message:
            message = "agent error completion"
        cls = classify_error(message, call=Call.PROMPT) if is_error else None
        stop_reason = (event.stop_reason if isinstance(event, ev.Complete) else "") or "end_turn"
        async with ctx.lifecycle_lock:
            g = event.prompt_generation
            current = self.current.number if self.current is not None else None
            target = completion_route(g, current, self.generations)
            generation = self.generations[target] if target is not None else None
            if generation is None:
                if ends_wakeup(g, claimed=False):
                    await self._wakeup_ended(event, is_error, message, stop_reason)
                else:
                    log.debug("ignoring completion for unknown generation %s", g)
                return
            self._terminal = event
            fired = ctx.fire(
                generation.machine,
                "completion_received",
                is_error=is_error,
                cancel_release=bool(cls and cls.cancel_release),
                error=message,
                stop_reason=stop_reason,
                shutting_down=ctx.shutting_down(),
            )
            await ctx.perform(fired)
            self._terminal = None
            claimed = wants(fired, "unclaimed") is None
            if ends_wakeup(g, claimed):
                await self._wakeup_ended(event, is_error, message, stop_reason)
            elif not claimed:
                log.debug("ignoring completion for prompt generation %s", g)

    async def _wakeup_ended(
        self, event: ev.Complete | ev.ErrorEvent, is_error: bool, message: str, stop_reason: str
    ) -> None:
        """A generation-0 terminal event no generation claimed: a wakeup turn ended (the
        Execution chart decides; before the session is initialized it is ignored, R10)."""
        fact, data = wakeup_fact(
            is_error=is_error,
            error=message,
            stop_reason=stop_reason,
            shutting_down=self.ctx.shutting_down(),
        )
        self._terminal = event
        try:
            await self.status.fire(fact, **data)
        finally:
            self._terminal = None

    async def _end_wakeup_turn(self, effect: Effect, machine: ChartMachine) -> None:
        """The wakeup turn's reply and terminal event, as a claimed turn's are."""
        ctx = self.ctx
        text = ctx.take_message()
        ctx.activity.last_at = anyio.current_time()
        await ctx.persist_assistant(text)
        if self._terminal is not None:
            ctx.publish(self._terminal)

    async def handoff(self, event: ev.ForegroundIdle) -> None:
        """``handlePromptHandoffEvent``: only the owning generation's waiter is released (R22)."""
        if event.prompt_generation == 0:
            return
        async with self.ctx.lifecycle_lock:
            generation = self.generations.get(event.prompt_generation)
            if generation is not None:
                await self.ctx.step(generation.machine, "handoff_received")

    async def stream_lost(self, error: str, *, final: bool) -> bool:
        """``handleStreamDisconnect`` for the current generation: True when it claimed the
        loss (the caller then leaves the execution's status to the coordination). ``final``:
        the carrier is gone for good (the AgentStream chart does not redial)."""
        ctx = self.ctx
        # flush the partial text once (R20): detached here, so a later reset finds nothing
        partial = ctx.take_message()
        await ctx.persist_assistant(partial)
        generation = self.current
        if generation is None:
            return False
        self._partial = partial
        fired = await ctx.step(generation.machine, "stream_lost", error=error, final=final)
        return bool(wants(fired, "claim_disconnect"))

    # --- effects -------------------------------------------------------------------------------

    def _arm_activity(self, effect: Effect, machine: ChartMachine) -> None:
        act = self.ctx.activity
        act.last_at = anyio.current_time()
        act.since_prompt = False
        act.epoch += 1

    def _claim_outcome(self, effect: Effect, machine: ChartMachine) -> None:
        generation = self.of(machine)
        generation.agent_message = self.ctx.take_message()
        generation.stop_reason = str(effect.get("stop_reason", ""))
        generation.error = str(effect.get("error", ""))
        self.ctx.activity.last_at = anyio.current_time()

    async def _claim_handoff(self, effect: Effect, machine: ChartMachine) -> None:
        generation = self.of(machine)
        generation.agent_message = self.ctx.take_message()
        await self.ctx.persist_assistant(generation.agent_message)

    async def _claim_disconnect(self, effect: Effect, machine: ChartMachine) -> None:
        """The turn ended without its end (its stream lost, the execution stopped): its
        reply is the text it streamed so far. A loss detached and persisted it already
        (:meth:`stream_lost`); a stop did not, so what is still pending is taken and
        persisted here, once (R20)."""
        generation = self.of(machine)
        generation.error = str(effect["error"])
        pending = self.ctx.take_message()
        await self.ctx.persist_assistant(pending)
        generation.agent_message, self._partial = self._partial + pending, ""

    def _release_waiter(self, effect: Effect, machine: ChartMachine) -> None:
        generation = self.of(machine)
        generation.result = str(effect["result"])
        if "error" in dict(effect.args):
            generation.error = str(effect["error"])
        generation.done.set()

    def _record_escalation(self, effect: Effect, machine: ChartMachine) -> None:
        self.of(machine).error = CANCEL_ESCALATED_SIGNAL

    def _end_cancel(self, effect: Effect, machine: ChartMachine) -> None:
        generation = self.of(machine)
        generation.cancel_result = str(effect["result"])
        generation.turn_over.set()

    async def _publish_terminal(self, effect: Effect, machine: ChartMachine) -> None:
        generation = self.of(machine)
        await self.ctx.persist_assistant(generation.agent_message)
        event = self._terminal
        if event is None:  # pragma: no cover - only completions publish their event
            return
        if event.prompt_generation == 0:  # like kandev's turn id: name the turn it ended
            event = msgspec.structs.replace(event, prompt_generation=generation.number)
        self.ctx.publish(event)

    def _publish_completed(self, effect: Effect, machine: ChartMachine) -> None:
        self.ctx.publish(
            le.PromptCompleted(
                execution_id=self.ctx.id,
                prompt_generation=int(effect["generation"]),
                stop_reason=str(effect["stop_reason"]),
            )
        )

    def _publish_failed(self, effect: Effect, machine: ChartMachine) -> None:
        self.ctx.publish(
            le.PromptFailed(
                execution_id=self.ctx.id,
                prompt_generation=int(effect["generation"]),
                error=str(effect["error"]),
                outcome=str(effect["outcome"]),
            )
        )

    def _publish_stream_error(self, effect: Effect, machine: ChartMachine) -> None:
        self.ctx.publish(
            le.AgentctlError(
                execution_id=self.ctx.id,
                error=str(effect["error"]),
                prompt_generation=int(effect["generation"]),
            )
        )

    def _report_stall(self, effect: Effect, machine: ChartMachine) -> None:
        act = self.ctx.activity
        self.ctx.publish(
            le.AgentStalled(
                execution_id=self.ctx.id,
                prompt_generation=int(effect["generation"]),
                activity_epoch=act.epoch,
                stalled_for=float(effect["stalled_for"]),
                never_started=not act.since_prompt,
                active_tool_id=act.active_tool_id,
                active_tool_title=act.active_tool_title,
            )
        )
