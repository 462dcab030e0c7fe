"""One turn as a stream of its updates (:meth:`Runtime.turn <acpfsm.runtime.Runtime.turn>`).

::

    async with rt.turn(execution_id, "fix the tests") as turn:
        async for update in turn:            # this turn's updates only, as they arrive
            match update:
                case MessageChunk(text=text): print(text, end="")
                case ToolCall(tool_title=title): print(f"\\n[{title}]")
    print(turn.result.stop_reason)          # the PromptResult, as rt.prompt returns it

A :class:`Turn` is a thin layer over two things the runtime already has: the prompt call
(:meth:`Runtime.prompt`, run in the background, with all its lifecycle: the prompt lock, the
barrier, the PromptGeneration chart) and a live subscription to the execution's event hub. The
prompt call reports the generation it is admitted as the moment it is admitted, before
anything of that generation can be sent; the subscription, opened before the prompt, keeps
the turn content (:data:`~acpfsm.adapters.events.TurnUpdate`) stamped with that generation.
The transports stamp every piece of turn content with the generation of the turn that owes
it (stdio: the turn holding the prompt gate; agentctl: the oldest turn still owed an end), so
the content of the turn before and of the turn after is never yielded. The iteration ends
when the prompt call has returned: the agent's updates precede its end of the turn, and the
event pump publishes them before it handles that end, so none is lost.

Leaving the block before the turn ended abandons the prompt call exactly as leaving
``rt.prompt`` does (a prompt not yet sent is withdrawn, one sent is cancelled at the agent in
the background). :meth:`Turn.cancel` cancels the turn and keeps the stream: the updates the
agent still sends follow, then the result (``stop_reason == "cancelled"`` for an agent that
honours the cancel).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any, Self

import anyio

from acpfsm.adapters.errors import AcpfsmError
from acpfsm.adapters.events import MessageChunk, TurnUpdate, is_turn_content
from acpfsm.adapters.transport import Attachment

from .errors import PromptError
from .hub import Subscription
from .session import ExecutionSession
from .types import PromptResult

__all__ = ["Turn"]

Spawn = Callable[[Callable[[], Coroutine[Any, Any, None]]], object]


class Turn:
    """One prompt's turn, streamed: see :meth:`Runtime.turn <acpfsm.runtime.Runtime.turn>`."""

    def __init__(
        self,
        session: ExecutionSession,
        spawn: Spawn,
        text: str,
        attachments: Sequence[Attachment],
        timeout: float | None,
    ) -> None:
        self._session = session
        self._spawn = spawn
        self._text = text
        self._attachments = tuple(attachments)
        self._timeout = timeout
        self._generation: int | None = None
        self._subscription: Subscription | None = None
        self._scope = anyio.CancelScope()
        self._finished = anyio.Event()
        self._result: PromptResult | None = None
        self._error: BaseException | None = None

    @property
    def execution_id(self) -> str:
        return self._session.id

    @property
    def generation(self) -> int:
        """The prompt generation of this turn; 0 until the prompt is admitted (it may wait
        behind another prompt)."""
        return self._generation or 0

    @property
    def done(self) -> bool:
        """The turn has ended (its result, or its error, is known)."""
        return self._finished.is_set()

    @property
    def result(self) -> PromptResult:
        """How the turn ended, as :meth:`Runtime.prompt` returns it; raises what
        :meth:`Runtime.prompt` raises when the turn failed (also raised at the end of the
        iteration). Available once the iteration has ended."""
        if not self._finished.is_set():
            raise AcpfsmError(
                "the turn has not ended yet: iterate it to the end first",
                execution_id=self._session.id,
            )
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    async def cancel(self) -> None:
        """Cancel this turn (as :meth:`Runtime.cancel` does): a prompt not yet admitted or
        not yet sent is withdrawn (result ``cancelled``), one at the agent is cancelled there.
        Keep iterating for what the agent still sends and the result. Raises
        :class:`~acpfsm.runtime.CancelEscalated` when the agent does not end the turn."""
        if self._finished.is_set():
            return
        if self._generation is None:  # still queued: nothing of it exists yet
            self._scope.cancel()
            await self._finished.wait()
            return
        # admitted and not returned: this turn is the execution's current generation (the
        # prompt lock is held until the prompt returns), which is what a cancel targets
        await self._session.cancel()

    # --- the prompt call ---------------------------------------------------------------------

    def _admitted(self, generation: int) -> None:
        self._generation = generation

    async def _run(self) -> None:
        try:
            with self._scope:
                try:
                    self._result = await self._session.prompt(
                        self._text,
                        attachments=self._attachments,
                        timeout=self._timeout,
                        on_admitted=self._admitted,
                    )
                except Exception as exc:  # noqa: BLE001 - handed to the caller (iteration, result)
                    self._error = exc
            if self._scope.cancelled_caught and self._generation is None:
                self._result = PromptResult(stop_reason="cancelled")  # withdrawn while queued
        finally:
            if self._result is None and self._error is None:
                self._error = PromptError(
                    "the turn was cut short: its execution or the runtime closed",
                    execution_id=self._session.id,
                    generation=self.generation,
                )
            if self._subscription is not None:
                self._subscription.close()
            self._finished.set()

    # --- the stream ----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._subscription is not None:
            raise AcpfsmError("a turn is entered once", execution_id=self._session.id)
        # live only, and opened before the prompt can be admitted: nothing of it is missed
        self._subscription = self._session.hub.subscribe(replay=False)
        self._spawn(self._run)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._finished.is_set():  # left early: the prompt call is abandoned
            self._scope.cancel()
            with anyio.CancelScope(shield=True):
                await self._finished.wait()
        if self._subscription is not None:
            self._subscription.close()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> TurnUpdate:
        subscription = self._subscription
        if subscription is None:
            raise AcpfsmError(
                "iterate a turn inside `async with rt.turn(...) as turn`",
                execution_id=self._session.id,
            )
        take = subscription.take
        while True:
            # what is already buffered is taken without a coroutine per event
            event = take()
            if event is None:
                event = await anext(subscription, None)
            if event is None:
                # the prompt returned (or the execution ended: the prompt returns with it)
                await self._finished.wait()
                if self._error is not None:
                    raise self._error
                raise StopAsyncIteration
            generation = self._generation
            if (
                generation is not None
                and (type(event) is MessageChunk or is_turn_content(event))  # no call per chunk
                and event.prompt_generation == generation
            ):
                return event
