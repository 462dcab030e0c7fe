"""The prompt (kandev lifecycle/session.go ``sendPrompt``): the PROMPT flow of the table
(:mod:`acpfsm.statecharts.flows`) run by the interpreter, this module's ops, and what each
of the flow's outcomes is for the caller.

The flow's order (barrier, status check, admission, composition, dispatch, the retry after
a reconnect, the wait) is the table's. This module performs its ops: the prompt request
(``send_prompt``: its typed errors become the answers the table names), the attachments
(``materialize``), the history and the resume context; and it turns the outcome into the
caller's :class:`~acpfsm.runtime.types.PromptResult` or typed error (:meth:`outcome`). What
a waiter finally returns or raises is what its generation's ``release_waiter`` effect said
(:meth:`result`). A caller that leaves (its cancel scope, or ``timeout=``) abandons its
wait: the flow's ``abandon`` step has the turn withdrawn or cancelled at the agent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import anyio

from acpfsm.adapters.classify import Call, classify_error
from acpfsm.adapters.errors import AcpfsmError, StreamNotConnected
from acpfsm.adapters.sync import Mutex
from acpfsm.adapters.transport import Attachment
from acpfsm.statecharts import ErrorClass
from acpfsm.statecharts.flows import RETURNED_RESULTS, Lock, Op, Outcome
from acpfsm.statecharts.names import Result

from ..errors import (
    CANCEL_ESCALATED_MESSAGE,
    CANCEL_ESCALATED_SIGNAL,
    AgentReportedError,
    AttachmentError,
    CancelEscalated,
    CancelEscalatedAgentError,
    ExecutionStopped,
    NotReadyForPrompts,
    PendingDispatchedPromptTimeout,
    PromptAuthenticationRequired,
    PromptDispatchError,
    PromptError,
    PromptTimeout,
)
from ..types import PromptResult, stop_reason_of
from .context import ExecutionContext
from .crash import crash_of
from .init import InitDriver
from .interpreter import Answer, FlowRun, Interpreter
from .stall import StallWatchdog
from .status import StatusDriver
from .turns import Generation, TurnDriver

__all__ = ["PromptDriver"]

log = logging.getLogger("acpfsm.runtime")


class PromptDriver:
    """Callers' prompts for one execution (and the composition and the attachments a steer
    shares with them)."""

    def __init__(
        self,
        ctx: ExecutionContext,
        turns: TurnDriver,
        status: StatusDriver,
        init: InitDriver,
        flows: Interpreter,
    ) -> None:
        self.ctx = ctx
        self.turns = turns
        self.status = status
        self.init = init
        self.flows = flows
        self.stalls = StallWatchdog(ctx)  # the waits' (its task runs with the execution's)
        self.prompt_lock: Mutex = flows.locks[Lock.PROMPT]
        """kandev's ``promptMu``: one ordinary prompt at a time, through its completion."""
        flows.stall_watch = self.stalls.watch
        flows.stall_unwatch = self.stalls.unwatch
        flows.register(
            {
                Op.SEND_PROMPT: self._send,
                Op.MATERIALIZE: self._materialize,
                Op.INJECT_RESUME_CONTEXT: self._inject,
                Op.APPEND_USER: self._append_user,
                Op.DISPATCHED: self._dispatched,
            }
        )

    # --- the caller --------------------------------------------------------------------------

    async def prompt(
        self,
        text: str,
        *,
        attachments: Sequence[Attachment] = (),
        dispatch_only: bool = False,
        on_dispatched: Callable[[], object] | None = None,
        validate_status: bool,
        initial: bool = False,
        timeout: float | None = None,  # noqa: ASYNC109 - a typed PromptTimeout, turn cancelled
        on_admitted: Callable[[int], object] | None = None,
    ) -> PromptResult:
        """``sendPrompt``; ``timeout`` bounds the whole call (PromptTimeout, turn cancelled).
        ``on_admitted(generation)`` is called the moment the prompt's generation is admitted,
        before anything of that generation can be sent or published (a streamed turn
        attributes the events by it)."""
        values: dict[str, Any] = {
            "text": text,
            "attachments": attachments,
            "dispatch_only": dispatch_only,
            "on_dispatched": on_dispatched,
            "validate_status": validate_status,
            "initial": initial,
            "on_admitted": on_admitted,
        }
        if timeout is None:  # no cancel scope entered and left on every prompt
            return self.outcome(await self.flows.run("prompt", **values))
        with anyio.move_on_after(timeout) as bound:
            return self.outcome(await self.flows.run("prompt", **values))
        assert bound.cancelled_caught
        raise PromptTimeout(
            f"prompt did not finish within {timeout:g}s; its turn was cancelled",
            execution_id=self.ctx.id,
            generation=self.turns.current.number if self.turns.current is not None else 0,
        )

    def outcome(self, run: FlowRun) -> PromptResult:
        """What the PROMPT flow's outcome is for its caller."""
        ctx, values, g = self.ctx, run.values, run.number
        outcome = run.outcome
        if outcome is Outcome.RESULT:
            assert run.generation is not None
            return self.result(run.generation)
        if outcome is Outcome.DISPATCHED:
            return PromptResult(stop_reason="dispatched", generation=g)
        if outcome is Outcome.NOT_READY:
            raise NotReadyForPrompts(ctx.id, self.status.status) from self.init.failure
        if outcome is Outcome.BARRIER_FAILED:
            raise PendingDispatchedPromptTimeout(ctx.id, ctx.timeouts.pending_dispatched_prompt)
        cause = values.get("cause")
        if outcome is Outcome.ATTACHMENT_FAILED:
            raise AttachmentError(str(cause), execution_id=ctx.id, generation=g) from cause
        message = str(values.get("error", ""))
        if outcome is Outcome.DISPATCH_CANCEL_ESCALATED:
            raise CancelEscalated(
                f"{message}: {CANCEL_ESCALATED_MESSAGE}", execution_id=ctx.id, generation=g
            ) from cause
        assert outcome is Outcome.DISPATCH_FAILED, outcome
        raise PromptDispatchError(message, execution_id=ctx.id, generation=g) from cause

    def result(self, generation: Generation) -> PromptResult:
        """What the generation's ``release_waiter`` effect said, as a result or an error."""
        g, ctx = generation.number, self.ctx
        result = generation.result
        if result not in RETURNED_RESULTS and (crash := crash_of(ctx)) is not None:
            raise crash  # the Crash chart says the execution crashed: the reason
        if result == Result.completed:
            return PromptResult(
                stop_reason=stop_reason_of(generation.stop_reason or "end_turn"),
                generation=g,
                agent_message=generation.agent_message,
            )
        if result == Result.handed_off:
            return PromptResult(
                stop_reason="foreground_idle", generation=g, agent_message=generation.agent_message
            )
        if result == Result.agent_error and _needs_authentication(generation.error):
            caps = ctx.transport.capabilities if ctx.transport is not None else None
            raise PromptAuthenticationRequired(
                generation.error,
                auth_methods=caps.auth_methods if caps is not None else (),
                execution_id=ctx.id,
                generation=g,
            )
        if result == Result.stopped:
            raise ExecutionStopped(
                ctx.stop_reason, "the turn was ended", execution_id=ctx.id, generation=g
            )
        if result in (Result.agent_error, Result.disconnected):
            raise AgentReportedError(generation.error, execution_id=ctx.id, generation=g)
        if result in (Result.cancel_escalated, Result.agent_cancel_escalated):
            raise CancelEscalatedAgentError(
                generation.error or CANCEL_ESCALATED_SIGNAL, execution_id=ctx.id, generation=g
            )
        if result == Result.withdrawn:
            return PromptResult(stop_reason="cancelled", generation=g)
        raise PromptError(  # pragma: no cover - undelivered etc. are raised where they happen
            f"prompt generation {g} ended without a result ({result!r})", execution_id=ctx.id
        )

    # --- the ops -------------------------------------------------------------------------------

    async def _send(self, run: FlowRun) -> Answer:
        """triggerPrompt: the request, and what its answer is (TRIGGER's answers)."""
        ctx = self.ctx
        transport = ctx.transport_or_raise()
        try:
            await transport.prompt(run.values["effective"], run.values["materialized"], run.number)
        except StreamNotConnected as exc:
            error = f"failed to trigger prompt: {exc}"
            answer = "lost_while_waiting" if exc.while_waiting else "not_connected"
            return answer, {"error": error, "cause": exc, "reconnectable": transport.reconnectable}
        except AcpfsmError as exc:
            cls = classify_error(exc, call=Call.PROMPT)
            answer = "cancel_release" if cls.cancel_release else "failed"
            return answer, {"error": f"failed to trigger prompt: {exc}", "cause": exc}
        return "accepted"

    async def _materialize(self, run: FlowRun) -> Answer:
        try:
            materialized = await self.materialize(run.values["attachments"])
        except AttachmentError as exc:
            return "failed", {"error": str(exc), "cause": exc}
        values = run.values
        values["materialized"] = materialized
        values.setdefault("effective", values["text"])
        return "ok"

    async def materialize(self, attachments: Sequence[Attachment]) -> list[Attachment]:
        """materializeAttachments: every attachment goes through the carrier before anything
        is sent; errors name the attachment id (else its name)."""
        ctx = self.ctx
        out: list[Attachment] = []
        for attachment in attachments:
            label = attachment.attachment_id or attachment.name
            if not ctx.acp_session_id:
                raise AttachmentError(
                    f'attachment "{label}" cannot be delivered: ACP session is not ready',
                    execution_id=ctx.id,
                )
            try:
                out.append(await ctx.transport_or_raise().materialize_attachment(attachment))
            except AcpfsmError as exc:
                raise AttachmentError(
                    f'materialize attachment "{label}": {exc}', execution_id=ctx.id
                ) from exc
        return out

    async def _inject(self, run: FlowRun) -> Answer:
        """The resume context goes into the text (the initial prompt's inline, when there is
        history; a later prompt's when the session init's chart said so)."""
        ctx, values = self.ctx, run.values
        if not values.get("initial"):
            values["effective"] = await ctx.with_resume_context(values["text"])
        elif ctx.has_resume_context():  # InitializeAndPrompt: inline, the prompt's own text
            values["text"] = await ctx.with_resume_context(values["text"])
        return "ok"

    async def _append_user(self, run: FlowRun) -> Answer:
        ctx, text = self.ctx, run.values["text"]
        await ctx.history_append(lambda h: h.append_user(ctx.session_id, text))
        return "ok"

    async def _dispatched(self, run: FlowRun) -> Answer:
        on_dispatched = run.values.get("on_dispatched")
        if on_dispatched is not None:
            on_dispatched()
        return "ok"


def _needs_authentication(error: str) -> bool:
    """The agent ended the turn with "authentication required" (JSON-RPC -32000)."""
    return classify_error(error, call=Call.PROMPT).kind is ErrorClass.AUTH_REQUIRED
