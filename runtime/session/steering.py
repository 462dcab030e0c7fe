"""The PromptGeneration charts' driver, caller side: the steer (kandev lifecycle/session.go
``SendPromptSteerWithDispatchCallback``, seed D6-D7).

A steer folds text into the turn the agent is running. The chart decides whether there is one
(``steer_requested``: ``dispatch_steer`` only for the current generation while it is
dispatched, else ``steer_refused``); the pre-check before the attachments are uploaded is only
an optimisation, the selection under the lifecycle lock decides (R1), and the request is
bounded (R4). A refused or undelivered steer raises :class:`SteerNotDispatched`: whether to
re-admit the text as a prompt is the caller's decision (kandev H1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import anyio

from acpfsm.adapters.errors import AcpfsmError, SteerUnsupported, StreamNotConnected
from acpfsm.adapters.transport import Attachment

from ..errors import (
    AttachmentError,
    PromptDispatchError,
    SteerAttachmentMaterializationError,
    SteerDispatchTimeout,
    SteerNotDispatched,
)
from ..types import PromptResult
from .context import ExecutionContext
from .flows import FLOW, wants
from .prompting import PromptDriver
from .turns import Generation, TurnDriver

__all__ = ["SteerDriver"]


class SteerDriver:
    """Callers' steers for one execution (the status check, the composition and the
    attachments are the prompt's)."""

    def __init__(self, ctx: ExecutionContext, turns: TurnDriver, prompts: PromptDriver) -> None:
        self.ctx = ctx
        self.turns = turns
        self.prompts = prompts

    async def steer(
        self,
        text: str,
        *,
        attachments: Sequence[Attachment] = (),
        on_dispatched: Callable[[], object] | None = None,
        validate_status: bool = True,
    ) -> PromptResult:
        """SendPromptSteerWithDispatchCallback (see the module docstring)."""
        ctx, prompts = self.ctx, self.prompts
        await prompts.init.admission.wait()
        if validate_status:
            await prompts.validate_status()
        await self._target()  # before materializing: nothing to steer into is cheap
        try:
            materialized = await prompts.materialize(attachments)
        except AttachmentError as exc:
            raise SteerAttachmentMaterializationError(
                f"steer attachment materialization failed: {exc}", execution_id=ctx.id
            ) from exc
        async with ctx.lifecycle_lock:
            generation = await self._target()
            effective = await prompts.compose(text)
            try:
                with anyio.fail_after(ctx.timeouts.steer_dispatch):
                    await ctx.transport_or_raise().steer(effective, materialized, generation.number)
            except (StreamNotConnected, SteerUnsupported) as exc:
                raise SteerNotDispatched(str(exc), execution_id=ctx.id) from exc
            except TimeoutError as exc:
                raise SteerDispatchTimeout(
                    f"steer dispatch timed out after {ctx.timeouts.steer_dispatch:g}s",
                    execution_id=ctx.id,
                    generation=generation.number,
                ) from exc
            except AcpfsmError as exc:
                raise PromptDispatchError(
                    f"failed to steer prompt: {exc}",
                    execution_id=ctx.id,
                    generation=generation.number,
                ) from exc
            await ctx.step(generation.machine, FLOW["dispatch_steer"].then)
        await ctx.history_append(lambda h: h.append_user(ctx.session_id, text))
        ctx.activity.last_at = anyio.current_time()
        if on_dispatched is not None:
            on_dispatched()
        return PromptResult(stop_reason="dispatched", generation=generation.number)

    async def _target(self) -> Generation:
        """The generation the chart lets the steer go to, else SteerNotDispatched."""
        generation = self.turns.current
        if generation is not None:
            fired = await self.ctx.step(generation.machine, "steer_requested")
            if wants(fired, "dispatch_steer"):
                return generation
        raise SteerNotDispatched("no live prompt generation", execution_id=self.ctx.id)
