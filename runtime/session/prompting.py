"""The PromptGeneration charts' driver, caller side: the prompt (kandev lifecycle/session.go
``sendPrompt``); the steer is :mod:`.steering`'s.

Each caller's flow fires the facts it observes (the send started, the trigger was accepted,
a bound expired, the caller left) and acts on the effects the chart returns: wait for a
predecessor that holds a barrier (``hold_barrier``), do not send a prompt that was cancelled
meanwhile (``skip_dispatch``), retry while the carrier redials (``wait_for_carrier``), cancel
an abandoned turn at the agent (``send_cancel``). What a waiter finally returns or raises is
what its generation's ``release_waiter`` effect said. A caller that leaves (its cancel scope,
or ``timeout=``) abandons its wait: the turn is withdrawn if it was not sent, else cancelled
at the agent in the background, and a successor waits (bounded) for it to end so its reply
never mixes with the next one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import anyio

from acpfsm.adapters.classify import Call, classify_error
from acpfsm.adapters.errors import AcpfsmError, StreamNotConnected
from acpfsm.adapters.sync import Flag, Mutex
from acpfsm.adapters.transport import Attachment
from acpfsm.statecharts import ErrorClass

from ..errors import (
    CANCEL_ESCALATED_MESSAGE,
    CANCEL_ESCALATED_SIGNAL,
    AgentReportedError,
    AttachmentError,
    CancelEscalated,
    CancelEscalatedAgentError,
    NotReadyForPrompts,
    PendingDispatchedPromptTimeout,
    PromptAuthenticationRequired,
    PromptDispatchError,
    PromptError,
    PromptTimeout,
)
from ..types import PromptResult, stop_reason_of
from .cancelling import Canceller
from .context import ExecutionContext
from .crash import copy_of
from .flows import FLOW, accepts_prompts, after_unreachable, trigger_fact, wants
from .init import InitDriver
from .stall import StallWatchdog
from .status import StatusDriver
from .stream import StreamDriver
from .turns import Generation, TurnDriver

__all__ = ["PromptDriver"]

log = logging.getLogger("acpfsm.runtime")


class PromptDriver:
    """Callers' prompts for one execution (and the status check, the composition and the
    attachments a steer shares with them)."""

    def __init__(
        self,
        ctx: ExecutionContext,
        turns: TurnDriver,
        status: StatusDriver,
        stream: StreamDriver,
        init: InitDriver,
        canceller: Canceller,
        spawn: Callable[[Callable[[], Coroutine[Any, Any, None]]], None],
    ) -> None:
        self.ctx = ctx
        self.turns = turns
        self.status = status
        self.stream = stream
        self.init = init
        self.canceller = canceller
        self._spawn = spawn
        self.stalls = StallWatchdog(ctx)  # the waits' (its task runs with the execution's)
        self.prompt_lock = Mutex()  # free: no yield; a cancelled caller's acquisition raises
        """kandev's ``promptMu``: one ordinary prompt at a time, through its completion."""

    # --- prompt ------------------------------------------------------------------------------

    async def prompt(
        self,
        text: str,
        *,
        attachments: Sequence[Attachment] = (),
        dispatch_only: bool = False,
        on_dispatched: Callable[[], object] | None = None,
        validate_status: bool = True,
        initial: bool = False,
        timeout: float | None = None,  # noqa: ASYNC109 - a typed PromptTimeout, turn cancelled
        on_admitted: Callable[[int], object] | None = None,
    ) -> PromptResult:
        """``sendPrompt``; ``timeout`` bounds the whole call (PromptTimeout, turn cancelled).
        ``on_admitted(generation)`` is called the moment the prompt's generation is admitted,
        before anything of that generation can be sent or published (a streamed turn
        attributes the events by it)."""
        args = (text, attachments, dispatch_only, on_dispatched, validate_status, initial)
        if timeout is None:  # no cancel scope entered and left on every prompt
            return await self._prompt(*args, on_admitted)
        with anyio.move_on_after(timeout) as bound:
            return await self._prompt(*args, on_admitted)
        assert bound.cancelled_caught
        raise PromptTimeout(
            f"prompt did not finish within {timeout:g}s; its turn was cancelled",
            execution_id=self.ctx.id,
            generation=self.turns.current.number if self.turns.current is not None else 0,
        )

    async def _prompt(
        self,
        text: str,
        attachments: Sequence[Attachment],
        dispatch_only: bool,
        on_dispatched: Callable[[], object] | None,
        validate_status: bool,
        initial: bool,
        on_admitted: Callable[[int], object] | None,
    ) -> PromptResult:
        ctx = self.ctx
        if not initial and not self.init.admission.is_set():  # open: no scheduler pass
            await self.init.admission.wait()
        async with self.prompt_lock:
            await self._pass_barrier()
            if validate_status:
                await self.validate_status()
            async with ctx.lifecycle_lock:
                generation, fired = self.turns.admit(dispatch_only)
                if on_admitted is not None:
                    on_admitted(generation.number)
                # resetStreamingStateWithHistory (R20): detach the unclaimed partial text and
                # reset the buffer in one step; a chunk arriving meanwhile is the new turn's
                partial = ctx.take_message()
                ctx.activity.active_tool_id = ctx.activity.active_tool_title = ""
                await ctx.perform(fired)
            try:
                await ctx.persist_assistant(partial)
                if initial:  # callers' prompts may queue behind the initial turn now
                    self.init.admission.set()
                return await self._run(generation, text, attachments, dispatch_only, on_dispatched)
            except anyio.get_cancelled_exc_class():
                await self._abandon(generation)
                raise
            finally:
                generation.sent.set()
                generation.returned.set()

    async def _run(
        self,
        generation: Generation,
        text: str,
        attachments: Sequence[Attachment],
        dispatch_only: bool,
        on_dispatched: Callable[[], object] | None,
    ) -> PromptResult:
        ctx = self.ctx
        await ctx.history_append(lambda h: h.append_user(ctx.session_id, text))
        effective = await self.compose(text)
        try:
            materialized = await self.materialize(attachments)
        except AttachmentError as exc:
            await ctx.step(generation.machine, "materialization_failed", error=str(exc))
            if generation.result != "undelivered":  # cancelled meanwhile: that is the result
                return self._raise_for(generation)
            raise AttachmentError(
                str(exc), execution_id=ctx.id, generation=generation.number
            ) from exc
        if not await self._dispatch(generation, effective, materialized):
            return self._raise_for(generation)  # cancelled before it was sent
        if on_dispatched is not None:
            on_dispatched()
        if dispatch_only:
            return PromptResult(stop_reason="dispatched", generation=generation.number)
        return await self._wait(generation)

    async def _abandon(self, generation: Generation) -> None:
        """The caller left: the chart withdraws the prompt or has its turn cancelled."""
        with anyio.CancelScope(shield=True):
            async with self.ctx.lifecycle_lock:
                fired = await self.ctx.step(generation.machine, "waiter_abandoned")
            if wants(fired, "send_cancel"):
                self._spawn(lambda: self.canceller.abandoned(generation))

    async def validate_status(self) -> None:
        if not accepts_prompts(await self.status.fire("prompt_requested")):
            # the init's failure, when that is why (AuthenticationRequired among them)
            raise NotReadyForPrompts(self.ctx.id, self.status.status) from self.init.failure

    async def _pass_barrier(self) -> None:
        """sendPrompt's barrier with seed D8: wait ≤ 10 s for a dispatch-only predecessor."""
        predecessor = self.turns.current
        if predecessor is None:
            return
        fired = await self.ctx.step(predecessor.machine, "successor_admitting")
        if not wants(fired, "hold_barrier"):
            return
        bound = self.ctx.timeouts.pending_dispatched_prompt
        with anyio.move_on_after(bound) as scope:
            await predecessor.done.wait()
        if scope.cancelled_caught:
            fired = await self.ctx.step(predecessor.machine, FLOW["hold_barrier"].expired)
            if wants(fired, "barrier_failed"):
                raise PendingDispatchedPromptTimeout(self.ctx.id, bound)

    async def compose(self, text: str) -> str:
        """buildEffectivePrompt: the session init's chart says whether the deferred resume
        context goes into this prompt."""
        init = self.init.machine
        if init is None or init.ended:
            return text
        fired = await self.ctx.step(init, "prompt_composed")
        if wants(fired, "inject_resume_context"):
            return await self.ctx.with_resume_context(text)
        return text

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

    async def _dispatch(
        self, generation: Generation, text: str, attachments: list[Attachment]
    ) -> bool:
        """triggerPrompt → dispatchPrompt, with the retry after a reconnect; False when the
        prompt was cancelled before it was sent."""
        fired = await self.ctx.step(generation.machine, "dispatch_started")
        if wants(fired, "skip_dispatch"):
            return False
        try:
            await self.ctx.transport_or_raise().prompt(text, attachments, generation.number)
        except StreamNotConnected as exc:
            if trigger_fact(_answer(exc), retrying=False) == "dispatch_failed":
                # kandev H2: the request was written and the stream dropped before the ack,
                # so the agent may have it: never re-send (at most once)
                await self._trigger_failed(generation, exc)
            return await self._retry_after_reconnect(generation, text, attachments, exc)
        except AcpfsmError as exc:
            await self._trigger_failed(generation, exc)
        else:
            await self.ctx.step(generation.machine, trigger_fact("accepted", retrying=False))
        finally:
            generation.sent.set()
        return True

    async def _trigger_failed(self, generation: Generation, exc: AcpfsmError) -> None:
        cls = classify_error(exc, call=Call.PROMPT)
        message = f"failed to trigger prompt: {exc}"
        await self.ctx.step(
            generation.machine, "dispatch_failed", cancel_release=cls.cancel_release, error=message
        )
        if cls.cancel_release:
            raise CancelEscalated(
                f"{message}: {CANCEL_ESCALATED_MESSAGE}",
                execution_id=self.ctx.id,
                generation=generation.number,
            ) from exc
        raise PromptDispatchError(
            message, execution_id=self.ctx.id, generation=generation.number
        ) from exc

    async def _retry_after_reconnect(
        self,
        generation: Generation,
        text: str,
        attachments: list[Attachment],
        first: StreamNotConnected,
    ) -> bool:
        """retryPromptAfterReconnect: within 5 s, wait (100 ms polls) for the AgentStream chart
        to say the carrier is back (its redial) and resend the same generation; the chart
        decides whether to wait at all. False when the prompt was cancelled meanwhile (never
        sent)."""
        ctx = self.ctx
        transport = ctx.transport_or_raise()
        message = f"failed to trigger prompt: {first}"
        fired = await ctx.step(
            generation.machine,
            "dispatch_unreachable",
            reconnectable=transport.reconnectable,
            error=message,
        )
        carrier = FLOW["wait_for_carrier"]
        next_ = after_unreachable(fired, generation.result)
        if next_ == "undelivered":
            raise PromptDispatchError(
                message, execution_id=ctx.id, generation=generation.number
            ) from first
        if next_ == "released":
            await self._wait_released(generation)
            return True
        generation.sent.set()  # not at the agent: a cancel now withdraws it
        last: AcpfsmError = first
        with anyio.move_on_after(ctx.timeouts.reconnect_retry):
            while not generation.done.is_set():  # a cancel withdraws it meanwhile
                if self.stream.connected:
                    fired = await ctx.step(generation.machine, carrier.then)
                    if wants(fired, "skip_dispatch"):
                        return False
                    # a new send attempt: a cancel now waits for its answer
                    generation.sent = Flag()
                    try:
                        await transport.prompt(text, attachments, generation.number)
                    except StreamNotConnected as exc:
                        last = exc
                        fact = trigger_fact(_answer(exc), retrying=True)
                        await ctx.step(generation.machine, fact, reconnectable=True, error=message)
                    except AcpfsmError as exc:
                        await self._trigger_failed(generation, exc)
                    else:
                        await ctx.step(generation.machine, trigger_fact("accepted", retrying=True))
                        return True
                    finally:
                        generation.sent.set()
                elif not self.stream.redialling:
                    break  # closed on purpose (stop) or given up: nothing will redial
                await anyio.sleep(ctx.timeouts.reconnect_poll)
        if generation.result == "withdrawn":
            return False
        reason = f"failed to trigger prompt: timed out waiting for updates stream reconnect: {last}"
        await ctx.step(generation.machine, carrier.expired, error=reason)
        raise PromptDispatchError(reason, execution_id=ctx.id, generation=generation.number)

    async def _wait_released(self, generation: Generation) -> None:
        """The generation was released by someone else (a cancel escalation): raise what its
        release said."""
        await generation.done.wait()
        self._raise_for(generation)

    async def _wait(self, generation: Generation) -> PromptResult:
        """waitForPromptDone, with the stall watchdog ticking meanwhile."""
        self.stalls.watch(generation)
        try:
            await generation.done.wait()
        finally:
            self.stalls.unwatch(generation)
        return self._raise_for(generation)

    def _raise_for(self, generation: Generation) -> PromptResult:
        """What the generation's ``release_waiter`` effect said, as a result or an error."""
        g, ctx = generation.number, self.ctx
        result = generation.result
        if ctx.crashed is not None and result not in ("completed", "handed_off", "withdrawn"):
            raise copy_of(ctx.crashed)
        if result == "completed":
            return PromptResult(
                stop_reason=stop_reason_of(generation.stop_reason or "end_turn"),
                generation=g,
                agent_message=generation.agent_message,
            )
        if result == "handed_off":
            return PromptResult(
                stop_reason="foreground_idle", generation=g, agent_message=generation.agent_message
            )
        if result == "agent_error" and _needs_authentication(generation.error):
            caps = ctx.transport.capabilities if ctx.transport is not None else None
            raise PromptAuthenticationRequired(
                generation.error,
                auth_methods=caps.auth_methods if caps is not None else (),
                execution_id=ctx.id,
                generation=g,
            )
        if result in ("agent_error", "disconnected"):
            raise AgentReportedError(generation.error, execution_id=ctx.id, generation=g)
        if result in ("cancel_escalated", "agent_cancel_escalated"):
            raise CancelEscalatedAgentError(
                generation.error or CANCEL_ESCALATED_SIGNAL, execution_id=ctx.id, generation=g
            )
        if result == "withdrawn":
            return PromptResult(stop_reason="cancelled", generation=g)
        raise PromptError(  # pragma: no cover - undelivered etc. are raised where they happen
            f"prompt generation {g} ended without a result ({result!r})", execution_id=ctx.id
        )


def _answer(exc: StreamNotConnected) -> str:
    """The prompt request's answer (:data:`~.flows.TRIGGER_ANSWERS`) a not-connected error is."""
    return "lost_while_waiting" if exc.while_waiting else "not_connected"


def _needs_authentication(error: str) -> bool:
    """The agent ended the turn with "authentication required" (JSON-RPC -32000)."""
    return classify_error(error, call=Call.PROMPT).kind is ErrorClass.AUTH_REQUIRED
