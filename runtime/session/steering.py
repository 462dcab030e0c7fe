"""The steer (kandev lifecycle/session.go ``SendPromptSteerWithDispatchCallback``, seed
D6-D7): the STEER flow of the table run by the interpreter, its request, and what each
outcome is for the caller.

A steer folds text into the turn the agent is running. The chart decides whether there is one
(``steer_requested``: ``dispatch_steer`` only for the current generation while it is
dispatched, else ``steer_refused``); the flow's pre-check before the attachments are uploaded
is only an optimisation, the selection under the lifecycle lock decides (R1), and the request
is bounded (R4). A refused or undelivered steer raises :class:`SteerNotDispatched`: whether to
re-admit the text as a prompt is the caller's decision (kandev H1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import anyio

from acpfsm.adapters.errors import AcpfsmError, SteerUnsupported, StreamNotConnected
from acpfsm.adapters.transport import Attachment
from acpfsm.statecharts.flows import Op, Outcome

from ..errors import (
    NotReadyForPrompts,
    PromptDispatchError,
    SteerAttachmentMaterializationError,
    SteerDispatchTimeout,
    SteerNotDispatched,
)
from ..types import PromptResult
from .context import ExecutionContext
from .interpreter import Answer, FlowRun, Interpreter
from .prompting import PromptDriver

__all__ = ["SteerDriver"]


class SteerDriver:
    """Callers' steers for one execution."""

    def __init__(self, ctx: ExecutionContext, prompts: PromptDriver, flows: Interpreter) -> None:
        self.ctx = ctx
        self.prompts = prompts
        self.flows = flows
        flows.register({Op.SEND_STEER: self._send})

    async def steer(
        self,
        text: str,
        *,
        attachments: Sequence[Attachment] = (),
        on_dispatched: Callable[[], object] | None = None,
        validate_status: bool,
    ) -> PromptResult:
        """SendPromptSteerWithDispatchCallback (see the module docstring)."""
        run = await self.flows.run(
            "steer",
            text=text,
            attachments=attachments,
            on_dispatched=on_dispatched,
            validate_status=validate_status,
        )
        ctx, values, outcome = self.ctx, run.values, run.outcome
        cause = values.get("cause")
        if outcome is Outcome.DISPATCHED:
            ctx.activity.last_at = anyio.current_time()
            return PromptResult(stop_reason="dispatched", generation=run.number)
        if outcome is Outcome.NOT_READY:
            raise NotReadyForPrompts(ctx.id, self.prompts.status.status) from (
                self.prompts.init.failure
            )
        if outcome is Outcome.STEER_NOT_DISPATCHED:
            message = str(cause) if cause is not None else "no live prompt generation"
            raise SteerNotDispatched(message, execution_id=ctx.id) from cause
        if outcome is Outcome.STEER_ATTACHMENT_FAILED:
            raise SteerAttachmentMaterializationError(
                f"steer attachment materialization failed: {cause}", execution_id=ctx.id
            ) from cause
        if outcome is Outcome.STEER_TIMED_OUT:
            raise SteerDispatchTimeout(
                f"steer dispatch timed out after {ctx.timeouts.steer_dispatch:g}s",
                execution_id=ctx.id,
                generation=run.number,
            )
        assert outcome is Outcome.STEER_FAILED, outcome
        raise PromptDispatchError(
            f"failed to steer prompt: {cause}", execution_id=ctx.id, generation=run.number
        ) from cause

    async def _send(self, run: FlowRun) -> Answer:
        """The steer request into the flow's generation (under the lifecycle lock)."""
        values = run.values
        text = values.get("effective", values["text"])
        try:
            await self.ctx.transport_or_raise().steer(text, values["materialized"], run.number)
        except (StreamNotConnected, SteerUnsupported) as exc:
            return "not_dispatched", {"cause": exc}
        except AcpfsmError as exc:
            return "failed", {"cause": exc}
        return "ok"
