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
from collections.abc import Sequence

import anyio

from acpfsm.adapters.errors import AcpfsmError, StreamNotConnected, TransportClosed
from acpfsm.statecharts.coordination import Fired

from ..errors import CANCEL_ESCALATED_MESSAGE, CancelEscalated, CancelFailed
from .context import ExecutionContext
from .flows import FLOW, cancel_answer, wants
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
        if wants(fired, "await_dispatch"):
            with anyio.move_on_after(self.ctx.timeouts.cancel_wait):
                await generation.sent.wait()
            event = FLOW["await_dispatch"].after(generation.sent.is_set())
            fired = await self._step(generation, event)
        if not wants(fired, "send_cancel"):
            return  # withdrawn before it was sent: its caller gets a cancelled result
        fired = await self._step(
            generation, "cancel_answered", **cancel_answer(*await self._send())
        )
        await self._follow(generation, fired)

    async def abandoned(self, generation: Generation) -> None:
        """The waiter of ``generation`` left: cancel its turn at the agent, bounded; nobody
        is told (the chart and the trace say what happened)."""
        try:
            with anyio.fail_after(self.ctx.timeouts.cancel_wait):
                answer = await self._send()
            fired = await self._step(generation, "cancel_answered", **cancel_answer(*answer))
            await self._follow(generation, fired)
        except CancelEscalated:
            log.info("abandoned turn %s escalated", generation.number)
        except (AcpfsmError, TimeoutError) as exc:
            log.warning("cancelling abandoned turn %s failed: %s", generation.number, exc)

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

    async def _follow(self, generation: Generation, fired: Sequence[Fired]) -> None:
        """Act on what the chart answered to the cancel."""
        ctx = self.ctx
        if wants(fired, "escalate_idle"):
            # no turn in flight and nobody acknowledged: READY again (also from FAILED)
            await self.status.fire(FLOW["escalate_idle"].then, generation=generation.number)
            raise CancelEscalated(CANCEL_ESCALATED_MESSAGE, execution_id=ctx.id)
        if wants(fired, "report_escalation"):
            raise CancelEscalated(CANCEL_ESCALATED_MESSAGE, execution_id=ctx.id)
        if wants(fired, "await_waiter"):
            await self._finish_escalation(generation)
        if not wants(fired, "arm_cancel_wait"):
            return
        with anyio.move_on_after(ctx.timeouts.cancel_wait):
            await generation.turn_over.wait()
        if not generation.turn_over.is_set():
            expired = FLOW["arm_cancel_wait"].expired
            await self._follow(generation, await self._step(generation, expired))

    async def _finish_escalation(self, generation: Generation) -> None:
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
                event = FLOW["await_waiter"].after(generation.returned.is_set())
                await self._step(generation, event)
        raise CancelEscalated(CANCEL_ESCALATED_MESSAGE, execution_id=self.ctx.id)
