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
from typing import Any

import anyio
import msgspec

from acpfsm.adapters import events as ev
from acpfsm.adapters.classify import Call, classify_error
from acpfsm.adapters.sync import Flag
from acpfsm.statecharts import ChartMachine, Effect
from acpfsm.statecharts.charts import EXECUTION, PROMPT_GENERATION
from acpfsm.statecharts.coordination import Fired
from acpfsm.statecharts.flows import Cond
from acpfsm.statecharts.names import (
    EffectName,
    ExecutionEffect,
    ExecutionEvent,
    PromptGenerationEffect,
    PromptGenerationEvent,
    ResultName,
)

from .. import events as le
from ..errors import CANCEL_ESCALATED_SIGNAL, NotReadyForPrompts
from .context import ExecutionContext, Handler, flow_effects, nothing
from .crash import crash_of
from .status import StatusDriver

__all__ = ["Generation", "TurnDriver"]

log = logging.getLogger("acpfsm.runtime")
_GENERATIONS_KEPT = 64


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
        self.result = ResultName("")
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

    def signal(self, cond: Cond) -> Flag:
        """The signal ``cond`` names (``done``, ``sent``, ``returned``, ``turn_over``)."""
        flag = getattr(self, cond.value)
        assert isinstance(flag, Flag)
        return flag

    def renew(self, cond: Cond) -> None:
        """A new send attempt: its signal is unset again (a cancel waits for its answer)."""
        if self.signal(cond).is_set():
            setattr(self, cond.value, Flag())

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
        self.terminal: ev.Complete | ev.ErrorEvent | None = None
        """The agent's terminal event whose COMPLETION flow runs (its publishing effects)."""
        self._partial = ""
        handlers: dict[EffectName, Handler] = flow_effects(PROMPT_GENERATION.chart_name)
        own: dict[EffectName, Handler] = {
            PromptGenerationEffect.arm_activity: self._arm_activity,
            PromptGenerationEffect.claim_outcome: self._claim_outcome,
            PromptGenerationEffect.claim_handoff: self._claim_handoff,
            PromptGenerationEffect.claim_disconnect: self._claim_disconnect,
            PromptGenerationEffect.release_waiter: self._release_waiter,
            PromptGenerationEffect.record_escalation: self._record_escalation,
            PromptGenerationEffect.end_cancel: self._end_cancel,
            PromptGenerationEffect.publish_terminal_event: self._publish_terminal,
            PromptGenerationEffect.publish_prompt_completed: self._publish_completed,
            PromptGenerationEffect.publish_prompt_failed: self._publish_failed,
            PromptGenerationEffect.publish_stream_error: self._publish_stream_error,
            PromptGenerationEffect.report_stall: self._report_stall,
            # the answer to permission_requested, asked without firing (the broker's turn_over)
            PromptGenerationEffect.turn_over: nothing,
        }
        handlers.update(own)
        ctx.handle(PROMPT_GENERATION.chart_name, handlers)
        ctx.handle(EXECUTION.chart_name, {ExecutionEffect.end_wakeup_turn: self._end_wakeup_turn})

    def of(self, machine: ChartMachine) -> Generation:
        return self.generations[int(machine.constant("generation"))]

    # --- admission (BeginPrompt) -------------------------------------------------------------

    def admit(self, dispatch_only: bool) -> tuple[Generation, list[Fired]]:
        """Supersede the current generation and admit the next (under the lifecycle lock;
        the caller performs what was fired); raises NotReadyForPrompts once the execution
        was stopped (R24), and the crash (:class:`ExecutionCrashed`) once it crashed: the
        Crash chart's answer to ``crash_checked`` (``raise_crash``). A prompt that passed its
        status check before the crash would otherwise be admitted after it (``prompt_began``
        takes FAILED to RUNNING, as kandev's ``BeginPrompt`` does after an ordinary failure)
        and its request go out on the carrier being closed (found by ``acpfsm verify
        --crashes``: nothing_dispatched_after_a_crash)."""
        ctx = self.ctx
        if self.status.ended:
            raise NotReadyForPrompts(ctx.id, self.status.status)
        crash = crash_of(ctx)
        if crash is not None:
            raise crash from crash.__cause__
        fired: list[Fired] = []
        previous = self.current
        if previous is not None:
            fired += ctx.fire(previous.machine, PromptGenerationEvent.superseded_by_successor)
            # its prompt call has returned (the prompt lock): its reply is no longer kept
            previous.agent_message = ""
        self._next += 1
        g = self._next
        # kandev's promptFinished barrier is armed by the first prompt that waits for its turn
        before = previous is not None and (
            not previous.machine.constant("dispatch_only")
            or bool(previous.machine.constant("waited_before"))
        )
        generation = Generation(
            ctx.start(
                PROMPT_GENERATION, generation=g, dispatch_only=dispatch_only, waited_before=before
            ),
            g,
        )
        self.generations[g] = generation
        while len(self.generations) > _GENERATIONS_KEPT:
            self.generations.popitem(last=False)
        self.current = generation
        fired += ctx.fire(self.status.machine, ExecutionEvent.prompt_began)
        return generation, fired

    # --- the agent's facts (the flows COMPLETION, HANDOFF, LOSS of the table) ---------------

    def route(self, stamped: int) -> Generation | None:
        """The generation an event stamped ``stamped`` goes to (handleCompleteEvent): its own
        while it is kept (R6, R7); the current one for generation 0 (the unstamped path)."""
        if stamped == 0:
            return self.current
        return self.generations.get(stamped)

    def completion_values(self, event: ev.Complete | ev.ErrorEvent) -> dict[str, Any]:
        """The COMPLETION flow's values for a terminal event (its ``_terminal`` is set)."""
        is_error = isinstance(event, ev.ErrorEvent) or bool(event.data.get("is_error"))
        message = event.error if is_error else ""  # extractErrorMessage: error, else text
        if is_error and not message:
            message = "agent error completion"
        cls = classify_error(message, call=Call.PROMPT) if is_error else None
        stop_reason = (event.stop_reason if isinstance(event, ev.Complete) else "") or "end_turn"
        return {
            "stamped": event.prompt_generation,
            "unstamped": event.prompt_generation == 0,
            "is_error": is_error,
            "cancel_release": bool(cls and cls.cancel_release),
            "error": message,
            "stop_reason": stop_reason,
            "shutting_down": self.ctx.shutting_down(),
        }

    async def flush_partial(self) -> None:
        """handleStreamDisconnect's flush (R20): the partial text detached and persisted once,
        kept for the current generation's reply should it claim the loss."""
        partial = self.ctx.take_message()
        await self.ctx.persist_assistant(partial)
        self._partial = partial if self.current is not None else ""

    async def stream_lost(self, error: str) -> None:
        """The current generation's stream is gone for good (a crash): as the LOSS flow's
        steps for it (under the lifecycle lock)."""
        await self.flush_partial()
        if self.current is not None:
            await self.ctx.step(
                self.current.machine,
                PromptGenerationEvent.stream_lost,
                error=error,
                final=True,
                crashed=True,
            )

    async def _end_wakeup_turn(self, effect: Effect, machine: ChartMachine) -> None:
        """The wakeup turn's reply and terminal event, as a claimed turn's are."""
        ctx = self.ctx
        text = ctx.take_message()
        ctx.activity.last_at = anyio.current_time()
        await ctx.persist_assistant(text)
        if self.terminal is not None:
            ctx.publish(self.terminal)

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
        generation.result = ResultName(str(effect["result"]))
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
        event = self.terminal
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
