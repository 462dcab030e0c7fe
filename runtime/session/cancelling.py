"""Cancel (kandev manager_interaction.go ``CancelAgent``, ``escalateStuckCancel``): the
CANCEL flow of the table run by the interpreter, its request, and what each outcome is for
the caller.

A cancel first asks the current generation's chart (``cancel_requested``): a prompt not yet
sent is withdrawn there and then (the prompt's caller gets a ``cancelled`` result and nothing
reaches the agent); one whose request is in flight is cancelled once that request is answered,
so ``session/cancel`` never overtakes the ``session/prompt`` it cancels (``await_dispatch``);
otherwise ``session/cancel`` goes out (``send_cancel``) and the agent's answer decides
(``cancel_answered``): escalate now (``await_waiter``: the released waiter is given ≤ 2 s to
return, then ``CancelEscalated``), wait ≤ 10 s for the turn to end (``arm_cancel_wait``), or,
with no turn in flight, escalate the idle execution back to READY (``escalate_idle``; only
once a prompt that waits has run: kandev's ``promptFinished`` barrier). A cancel of an
execution the app stopped, or one whose wait the stop ended, raises ``ExecutionStopped``.

An abandoned wait (the prompt's caller left) runs the same flow from its ``abandoned`` entry
in the background, the request bounded, with nobody to raise to.
"""

from __future__ import annotations

import logging

from acpfsm.adapters.errors import AcpfsmError, StreamNotConnected, TransportClosed
from acpfsm.statecharts.flows import Op, Outcome

from ..errors import CANCEL_ESCALATED_MESSAGE, CancelEscalated, CancelFailed, ExecutionStopped
from .context import ExecutionContext
from .interpreter import Answer, FlowRun, Interpreter

__all__ = ["Canceller"]

log = logging.getLogger("acpfsm.runtime")


class Canceller:
    """Callers' cancels, and the background cancel of an abandoned turn."""

    def __init__(self, ctx: ExecutionContext, flows: Interpreter) -> None:
        self.ctx = ctx
        flows.register({Op.SEND_CANCEL: self._send})
        flows.outcomes["cancel"] = self._abandoned_over
        self.flows = flows

    async def cancel(self) -> None:
        """CancelAgent (see the module docstring); raises CancelEscalated or CancelFailed."""
        run = await self.flows.run("cancel")
        if run.outcome is Outcome.STOPPED:
            raise ExecutionStopped(
                self.ctx.stop_reason, "nothing left to cancel", execution_id=self.ctx.id
            )
        if run.outcome is Outcome.CANCEL_ESCALATED:
            raise CancelEscalated(CANCEL_ESCALATED_MESSAGE, execution_id=self.ctx.id)
        if run.outcome is Outcome.CANCEL_FAILED:
            cause = run.values["cause"]
            raise CancelFailed(
                f"failed to cancel agent: {cause}", execution_id=self.ctx.id
            ) from cause

    def _abandoned_over(self, run: FlowRun) -> None:
        """The background cancel of an abandoned turn ended: nobody is told (the chart and
        the trace say what happened)."""
        if run.outcome is Outcome.CANCEL_ESCALATED:
            log.info("abandoned turn %s escalated", run.number)
        elif run.outcome is Outcome.STOPPED:
            log.info("abandoned turn %s ended by the app's stop", run.number)
        elif run.outcome is Outcome.CANCEL_FAILED:
            cause = run.values.get("cause", "no answer within the bound")
            log.warning("cancelling abandoned turn %s failed: %s", run.number, cause)

    async def _send(self, run: FlowRun) -> Answer:
        """session/cancel: acknowledged or not; the stream gone; or failed."""
        try:
            result = await self.ctx.transport_or_raise().cancel()
        except (StreamNotConnected, TransportClosed):
            return "disconnected"
        except AcpfsmError as exc:
            return "failed", {"cause": exc}
        return "acknowledged" if result.acknowledged else "unacknowledged"
