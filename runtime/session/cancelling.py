"""Cancel (kandev manager_interaction.go ``CancelAgent``, ``escalateStuckCancel``): the
PromptGeneration chart decides, this module sends and waits.

A cancel first asks the current generation's chart (``cancel_requested``): a prompt not yet
sent is withdrawn there and then (the prompt's caller gets a ``cancelled`` result and nothing
reaches the agent); one whose request is in flight is cancelled once that request is answered,
so ``session/cancel`` never overtakes the ``session/prompt`` it cancels (``await_dispatch``);
otherwise ``session/cancel`` goes out (``send_cancel``) and the agent's answer decides
(``cancel_answered``): escalate now (``await_waiter``: the released waiter is given ≤ 2 s to
return, then ``CancelEscalated``), wait ≤ 10 s for the turn to end (``arm_cancel_wait``), or,
with no turn in flight, escalate the idle execution back to READY (``escalate_idle``).

An abandoned wait (the prompt's caller left) runs the same flow in the background, bounded,
with nobody to raise to.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio

from acpfsm.adapters.errors import AcpfsmError, StreamNotConnected, TransportClosed
from acpfsm.adapters.sync import Flag
from acpfsm.statecharts.coordination import Fired

from ..errors import CANCEL_ESCALATED_MESSAGE, CancelEscalated, CancelFailed
from .context import ExecutionContext
from .flows import FLOW, Flow, cancel_answer, cancel_next
from .status import StatusDriver
from .turns import Generation, TurnDriver

__all__ = ["Canceller"]

log = logging.getLogger("acpfsm.runtime")


class Canceller:
    """Callers' cancels, and the background cancel of an abandoned turn."""

    def __init__(self, ctx: ExecutionContext, turns: TurnDriver, status: StatusDriver) -> None:
        self.ctx = ctx
        self.turns = turns
        self.status = status

    async def cancel(self) -> None:
        """CancelAgent (see the module docstring); raises CancelEscalated or CancelFailed."""
        generation = self.turns.current
        if generation is None:  # no prompt ever ran: the cancel goes out, nothing waits
            await self._send()
            return
        fired = await self._step(generation, "cancel_requested")
        await self._run(generation, cancel_next(fired, None), self._send)

    async def abandoned(self, generation: Generation) -> None:
        """The waiter of ``generation`` left (its chart said ``send_cancel``): cancel its
        turn at the agent, the request bounded; nobody is told (the chart and the trace say
        what happened)."""

        async def send() -> tuple[bool, bool]:
            with anyio.fail_after(self.ctx.timeouts.cancel_wait):
                return await self._send()

        try:
            await self._run(generation, "send_cancel", send)
        except CancelEscalated:
            log.info("abandoned turn %s escalated", generation.number)
        except (AcpfsmError, TimeoutError) as exc:
            log.warning("cancelling abandoned turn %s failed: %s", generation.number, exc)

    async def _run(
        self,
        generation: Generation,
        effect: str | None,
        send: Callable[[], Awaitable[tuple[bool, bool]]],
    ) -> None:
        """Act on each flow effect the chart returns (:func:`~.flows.cancel_next`) until the
        cancel is over."""
        while effect is not None:
            flow = FLOW[effect]
            if effect == "send_cancel":
                fired = await self._step(generation, flow.then, **cancel_answer(*await send()))
            elif effect == "escalate_idle":
                # no turn in flight and nobody acknowledged: READY again (also from FAILED)
                await self.status.fire(flow.then, generation=generation.number)
                raise CancelEscalated(CANCEL_ESCALATED_MESSAGE, execution_id=self.ctx.id)
            elif effect == "report_escalation":
                raise CancelEscalated(CANCEL_ESCALATED_MESSAGE, execution_id=self.ctx.id)
            elif effect == "await_waiter":
                await self._finish_escalation(generation, flow)
            else:  # await_dispatch, arm_cancel_wait: a bounded wait on the generation
                with anyio.move_on_after(getattr(self.ctx.timeouts, flow.bound)):
                    await _event(generation, flow.waits_for).wait()
                fact = flow.after(_event(generation, flow.waits_for).is_set())
                if not fact:
                    return  # the turn ended: the acknowledged cancel is done
                fired = await self._step(generation, fact)
            effect = cancel_next(fired, effect)

    async def _step(self, generation: Generation, event: str, **data: object) -> list[Fired]:
        async with self.ctx.lifecycle_lock:
            return await self.ctx.step(generation.machine, event, **data)

    async def _send(self) -> tuple[bool, bool]:
        """session/cancel: ``(acknowledged, stream_disconnected)``."""
        try:
            result = await self.ctx.transport_or_raise().cancel()
        except (StreamNotConnected, TransportClosed):
            return True, True
        except AcpfsmError as exc:
            raise CancelFailed(f"failed to cancel agent: {exc}", execution_id=self.ctx.id) from exc
        return result.acknowledged, False

    async def _finish_escalation(self, generation: Generation, flow: Flow) -> None:
        """escalateStuckCancel after the chart escalated: let the released waiter return
        (≤ 2 s), then the chart ends the escalation, and the canceller learns
        ``CancelEscalated``."""
        try:
            with anyio.move_on_after(self.ctx.timeouts.cancel_escalation):
                await generation.returned.wait()
        finally:
            # R17: the cleanup runs even when the caller's deadline ends the wait (the
            # caller then gets its own cancellation, not CancelEscalated)
            with anyio.CancelScope(shield=True):
                await self._step(generation, flow.after(generation.returned.is_set()))
        raise CancelEscalated(CANCEL_ESCALATED_MESSAGE, execution_id=self.ctx.id)


def _event(generation: Generation, name: str) -> Flag:
    """The generation's event a flow waits for (``sent``, ``turn_over`` …)."""
    event = getattr(generation, name)
    assert isinstance(event, Flag)
    return event
