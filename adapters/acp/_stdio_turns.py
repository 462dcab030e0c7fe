"""The turn side of :class:`~.stdio.StdioTransport`: the prompt gate and its worker, steer,
cancel, and the prompt's content (attachments inline, linked, or saved privately)."""

from __future__ import annotations

import base64
import functools
import logging
import os
import pathlib
import re
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import msgspec
from msgspec import Raw

from ..errors import (
    AcpfsmError,
    AgentRequestError,
    RemoteProtocolError,
    SteerUnsupported,
    TransportClosed,
)
from ..events import (
    AgentEvent,
    Complete,
    ErrorEvent,
)
from ..transport import (
    Attachment,
    CancelResult,
    InitializeResult,
    attachment_content,
)
from ..workspace import safe_component
from . import messages as acp
from ._stdio_base import (
    _Fate,
    _given_up,
    _StdioBase,
    _Turn,
)

log = logging.getLogger("acpfsm.adapters.acp.stdio")

_TEXTUAL_MIME = re.compile(r"^(text/|application/(json|xml|x-yaml|yaml|javascript|toml)\b)")
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def _snake(name: str) -> str:
    return _CAMEL.sub("_", name).lower()


class _TurnSide(_StdioBase):
    """prompt, steer and cancel over one prompt gate; the prompt's blocks."""

    # ------------------------------------------------------------------ attachments

    async def materialize_attachment(self, attachment: Attachment) -> Attachment:
        """Read a local attachment's file into ``data``; fill ``size`` and a guessed MIME type.
        An in-memory attachment the agent cannot take inline (:meth:`_inline`) is saved here,
        before anything is sent, and becomes a ``path`` attachment naming the saved file:
        a refused or failed save raises :class:`WorkspaceError` (the client's own failure,
        not the agent's)."""
        data, mime = await attachment_content(attachment)
        att = msgspec.structs.replace(attachment, data=data, size=len(data), mime_type=mime)
        if att.path or self._inline(att):
            return att
        path = await self._save_attachment(att)
        return msgspec.structs.replace(att, path=path, delivery_mode="path", data=b"")

    def _inline(self, att: Attachment) -> str:
        """How the agent takes ``att`` in the prompt itself: ``image`` or ``audio`` (a kind
        it supports, within ``inline_media_limit``), ``embedded`` (when it takes embedded
        context), or ``""``: not inline (it gets a link to a file)."""
        caps = self._capabilities or InitializeResult(protocol_version=acp.PROTOCOL_VERSION)
        small = att.size <= self.config.inline_media_limit
        if att.mime_type.startswith("image/") and caps.supports_image and small:
            return "image"
        if att.mime_type.startswith("audio/") and caps.supports_audio and small:
            return "audio"
        return "embedded" if caps.supports_embedded_context else ""

    def _file_uri(self, attachment: Attachment) -> str:
        if attachment.path:
            return pathlib.Path(os.path.abspath(attachment.path)).as_uri()
        return f"attachment:///{attachment.attachment_id or attachment.name}"

    async def _prompt_blocks(
        self, text: str, attachments: Sequence[Attachment]
    ) -> list[acp.ContentBlock]:
        blocks: list[acp.ContentBlock] = []
        if text or not attachments:
            blocks.append(acp.TextContent(text=text))
        for item in attachments:
            if item.delivery_mode == "path" and item.path:
                blocks.append(
                    acp.ResourceLink(
                        uri=self._file_uri(item),
                        name=item.name,
                        mime_type=item.mime_type,
                        size=item.size or None,
                    )
                )
                continue
            att = await self.materialize_attachment(item)  # saved, when not taken inline
            inline = self._inline(att)
            if not inline:
                blocks.append(
                    acp.ResourceLink(
                        uri=self._file_uri(att),
                        name=att.name,
                        mime_type=att.mime_type,
                        size=att.size,
                    )
                )
                continue
            encoded = base64.b64encode(att.data).decode("ascii")
            if inline == "image":
                blocks.append(acp.ImageContent(data=encoded, mime_type=att.mime_type))
            elif inline == "audio":
                blocks.append(acp.AudioContent(data=encoded, mime_type=att.mime_type))
            else:
                textual = _TEXTUAL_MIME.match(att.mime_type) is not None
                contents = acp.ResourceContents(
                    uri=self._file_uri(att),
                    mime_type=att.mime_type,
                    text=att.data.decode("utf-8", "replace") if textual else None,
                    blob=None if textual else encoded,
                )
                blocks.append(acp.EmbeddedResource(resource=contents))
        return blocks

    async def _save_attachment(self, att: Attachment) -> str:
        """An in-memory attachment the agent cannot take inline is saved as
        ``<workspace>/.acpfsm/attachments/<session>/<unique>/<name>`` (private, no link
        followed): every attachment its own file, whatever its name (two ``report.txt``, or
        two names that fall back to the same default, never share one)."""
        session = safe_component(self._session_id or "", "none")
        fallback = safe_component(att.attachment_id, "attachment")
        name = safe_component(os.path.basename(att.name), fallback)
        parts = (".acpfsm", "attachments", session, os.urandom(8).hex(), name)
        data = att.data
        return await self._in_thread(
            lambda cancelled: self._files.save_private(parts, data, cancelled=cancelled),
            f"saving attachment {att.name!r}",
        )

    # ------------------------------------------------------------------ turns

    def _wake(self) -> None:
        self._wakeup.wake()

    def _release(self, turn: _Turn) -> None:
        if self._active is turn:
            self._active = None
            if self._queue:  # else the next prompt wakes the worker (no step in between)
                self._wake()

    def _active_generation(self) -> int:
        return self._active.generation if self._active is not None else 0

    async def prompt(self, text: str, attachments: Sequence[Attachment], generation: int) -> None:
        """Queue a turn; its end arrives as ``complete``/``error``. Before returning this
        yields once (it cannot be cancelled there: the turn is queued), which gives the turn
        worker, woken first, the chance to write the request of a turn the gate lets go
        before the caller goes on: what the caller does next is then off the round trip's
        path. On asyncio it has written it by the time this returns when the turn's content
        needed no file read and no other write held the pipe; trio runs ready tasks in a
        random order."""
        self._require_session()
        self._ensure_open()
        self._cancel_permissions()
        self._queue.append(_Turn(text, attachments, generation))
        self._wake()
        await anyio.lowlevel.cancel_shielded_checkpoint()

    async def _turn_worker(self) -> None:
        """Write each queued turn's ``session/prompt`` once the gate is free; its answer ends
        it in the reader (:meth:`_answered`), with no task waiting for it."""
        while True:
            while not self._queue or self._active is not None:
                await self._wakeup.wait()  # checked and waited for with no yield between
            turn = self._queue.popleft()
            self._active = turn
            await self._send_turn(turn)

    async def _send_turn(self, turn: _Turn) -> None:
        """Write ``turn``'s request; a turn that ends without one (abandoned meanwhile, a
        request that cannot be written, the transport closing) is ended here."""
        outcome: AgentEvent | None = None
        try:
            blocks = await self._prompt_blocks(turn.text, turn.attachments)
            if not _given_up(turn):
                self._replaying = False
                turn.pending = await self._conn.send_request(
                    "session/prompt",
                    acp.PromptRequest(session_id=self._require_session(), prompt=blocks),
                    on_response=functools.partial(self._answered, turn),
                )
                if _given_up(turn):  # cancel() gave up on it during the write
                    turn.pending.abandon()  # the agent is told; its late answer is dropped
                return
        except TransportClosed:
            pass  # the death handler has settled this turn (ending it again is a no-op)
        except AcpfsmError as exc:
            outcome = self._error_event(turn, str(exc), {})
        except BaseException:
            self._end_turn(turn, None)  # the transport is closing
            raise
        self._end_turn(turn, outcome)

    def _answered(self, turn: _Turn, result: Raw | None, error: Exception | None) -> None:
        """The end of ``turn``'s ``session/prompt``, told by the connection at once: its
        answer (in the reader, before any later line), or the connection's close or the
        request's abandonment (a :class:`TransportClosed`; in whichever task that
        happens)."""
        self._end_turn(turn, self._outcome(turn, result, error))

    def _outcome(
        self, turn: _Turn, result: Raw | None, error: Exception | None
    ) -> AgentEvent | None:
        if isinstance(error, AgentRequestError):
            return self._error_event(turn, error.json_projection(), error.as_dict())
        if isinstance(error, RemoteProtocolError):
            return self._error_event(turn, str(error), {})
        if error is not None or result is None:
            return None  # closed (the death handler settled it) or abandoned
        try:
            response: acp.PromptResponse = self._decode_result("session/prompt", result)
        except RemoteProtocolError as exc:
            return self._error_event(turn, str(exc), {})
        usage = None
        if response.usage:
            usage = {_snake(k): v for k, v in response.usage.items()}
        return Complete(
            session_id=self._session_id or "",
            prompt_generation=turn.generation,
            stop_reason=response.stop_reason,
            usage=usage,
        )

    def _end_turn(self, turn: _Turn, outcome: AgentEvent | None) -> None:
        self._settle(turn, outcome)
        self._release(turn)
        turn.finished.set()

    def _error_event(self, turn: _Turn, error: str, data: dict[str, Any]) -> ErrorEvent:
        return ErrorEvent(
            session_id=self._session_id or "",
            prompt_generation=turn.generation,
            error=error,
            data=data,
        )

    def _settle(self, turn: _Turn, outcome: AgentEvent | None) -> None:
        fate, turn.fate = turn.fate, _Fate.SETTLED
        if fate is _Fate.SETTLED:
            return
        if fate is _Fate.HANDED_OFF:
            log.debug(
                "suppressing completion from handed-off prompt (generation %d)", turn.generation
            )
            turn.withheld = outcome  # owed again if the steer is not delivered after all
            return
        if fate is _Fate.ABANDONED:
            log.debug("prompt abandoned after cancel (generation %d)", turn.generation)
            return
        self._deliver(outcome)

    def _deliver(self, outcome: AgentEvent | None) -> None:
        if outcome is None:
            return
        if isinstance(outcome, Complete):
            self._sweep_tools("cancelled")
        self._emit(outcome)

    async def steer(self, text: str, attachments: Sequence[Attachment], generation: int) -> None:
        """Deliver ``text`` into the running turn (agents with prompt queueing only). The
        successor takes the gate; only it will emit ``complete``, stamped ``generation``."""
        sid = self._require_session()
        self._ensure_open()
        caps = self._require_initialized()
        if not caps.prompt_queueing:
            raise SteerUnsupported(
                "steer was not dispatched: agent does not advertise prompt queueing"
            )
        self._in_flight_or_raise()
        blocks = await self._prompt_blocks(text, attachments)
        predecessor = self._in_flight_or_raise()
        self._cancel_permissions()
        successor = _Turn(text, attachments, generation)
        predecessor.fate = _Fate.HANDED_OFF
        self._active = successor
        try:
            successor.pending = await self._conn.send_request(
                "session/prompt",
                acp.PromptRequest(session_id=sid, prompt=blocks),
                on_response=functools.partial(self._answered, successor),
            )
        except BaseException:
            if successor.fate is _Fate.OWED:  # not delivered: the successor owes nothing
                successor.fate = _Fate.SETTLED
                self._take_back(predecessor, successor)
            raise

    def _take_back(self, predecessor: _Turn, successor: _Turn) -> None:
        """Undo the handoff of a steer that was not delivered. A predecessor still running
        owes its end again and takes the gate back; one that ended during the failed send is
        not restored (nothing would ever release it: every later prompt would wait behind it):
        the successor's gate is released and the end it had withheld is delivered."""
        if predecessor.fate is _Fate.HANDED_OFF:
            predecessor.fate = _Fate.OWED
            successor.finished = predecessor.finished  # a cancel waiting on it waits for this end
            if self._active is successor:
                self._active = predecessor
            return
        self._release(successor)
        successor.finished.set()  # the turn has ended: a cancel waiting on it stops waiting
        withheld, predecessor.withheld = predecessor.withheld, None
        self._deliver(withheld)

    def _in_flight_or_raise(self) -> _Turn:
        turn = self._active
        if turn is None or turn.fate is not _Fate.OWED or turn.pending is None or turn.pending.done:
            raise SteerUnsupported("steer was not dispatched: no prompt in flight")
        return turn

    async def cancel(self) -> CancelResult:
        """``session/cancel`` and wait ≤ ``cancel_timeout`` for the turn to end (see module doc)."""
        if self._session_id is None:
            return CancelResult(acknowledged=True)
        self._ensure_open()
        turn = self._active
        self._cancel_permissions()
        self._sweep_tools("cancelled")
        await self._conn.notify(
            "session/cancel", acp.CancelNotification(session_id=self._session_id)
        )
        if turn is None:
            return CancelResult(acknowledged=True)
        with anyio.move_on_after(self.config.cancel_timeout):
            await turn.finished.wait()
        if turn.finished.is_set():
            return CancelResult(acknowledged=True)
        log.warning(
            "turn cancel not acknowledged: in-flight session/prompt did not end within %ss",
            self.config.cancel_timeout,
        )
        if turn.fate is _Fate.OWED:
            turn.fate = _Fate.ABANDONED
        if turn.pending is not None:
            turn.pending.abandon()
        self._release(turn)
        return CancelResult(acknowledged=False)

    def _cancel_permissions(self) -> None:
        """Answer every pending permission request ``cancelled`` (and emit
        ``permission_cancelled``): on cancel, on close, and before a new prompt or steer."""
        self._permissions.withdraw_all()
