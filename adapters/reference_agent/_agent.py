"""The reference agent proper: JSON-RPC dispatch, sessions and scripted turns.

Theory of operation
-------------------
One reader loop decodes stdin lines and dispatches them in arrival order. Requests other
than ``session/prompt`` are answered inline (they never wait for the client), so their effects
are ordered exactly as the client sent them. Each ``session/prompt`` becomes a *turn*: a task
with its own cancel scope. ``session/cancel`` interrupts every live turn of the session with
``cancelled``; a second prompt on a busy session (prompt queueing, advertised as
``_meta.claudeCode.promptQueueing``) interrupts its predecessors with ``end_turn`` and starts
once their answers are queued, so both RPCs are answered, the predecessor first. A turn's
``session/update`` notifications are appended to the session file as they are sent, which
is what ``session/load`` replays after a restart.

Responses from the client (to ``session/request_permission`` and ``fs/*``) are routed back
by id to the waiting turn.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import msgspec
from anyio.abc import TaskGroup
from msgspec import UnsetType

from . import _wire as w
from ._base import (
    _SECRET_NAME,
    EOF_DRAIN_SECONDS,
    AgentConfig,
    _Pending,
    _Session,
    _Turn,
    log,
)
from ._io import LineReader, Outbox
from ._requests import _RequestSide
from ._store import SessionStore
from ._turns import _TurnSide

__all__ = ["AgentConfig", "ReferenceAgent", "serve"]


# ---------------------------------------------------------------------------------------
# The agent


class ReferenceAgent(_TurnSide, _RequestSide):
    """Dispatches decoded lines; owns sessions, turns and outstanding client requests."""

    def __init__(
        self, config: AgentConfig, outbox: Outbox, task_group: TaskGroup, *, stdin_fd: int = 0
    ) -> None:
        self._config = config
        self._stdin_fd = stdin_fd
        self._faults = config.faults
        self._out = outbox
        self._tg = task_group
        self._store = SessionStore(config.sessions_dir)
        self._sessions: dict[str, _Session] = {}
        self._pending: dict[int, _Pending] = {}
        self._prompts: dict[w.JsonId, _Turn] = {}
        self._next_id = 0
        self._client = w.ClientCapabilities()
        self._authenticated = "auth_required" not in self._faults
        self._requests: dict[str, Callable[[w.JsonId, msgspec.Raw | UnsetType], Awaitable[None]]]
        self._requests = {
            "initialize": self._initialize,
            "authenticate": self._authenticate,
            "session/new": self._new_session,
            "session/load": self._load_session,
            "session/prompt": self._prompt,
            "session/set_mode": self._set_mode,
            "session/set_config_option": self._set_config_option,
            "session/set_model": self._set_model,
        }

    # -- plumbing -------------------------------------------------------------------------

    async def _send(self, message: object) -> None:
        await self._out.send(w.encode(message))

    async def _result(self, rid: w.JsonId, result: object) -> None:
        await self._send(w.ResultMessage(id=rid, result=result))

    async def _error(self, rid: w.JsonId, error: w.RpcError) -> None:
        await self._send(w.ErrorMessage(id=rid, error=error.body()))

    async def _notify_update(self, session_id: str, update: msgspec.Raw) -> None:
        params = w.SessionUpdateParams(session_id=session_id, update=update)
        await self._send(w.NotificationMessage(method="session/update", params=params))

    async def _update(self, session: _Session, update: Any, *, persist: bool = True) -> None:
        raw = w.encode_update(update)
        await self._notify_update(session.id, raw)
        if persist:
            self._store.append_update(session.id, raw)

    async def _call(self, method: str, params: object) -> msgspec.Raw:
        """Send a request to the client and wait for its answer (cancellable)."""
        rid = self._next_id
        self._next_id += 1
        slot = _Pending()
        self._pending[rid] = slot
        try:
            await self._send(w.RequestMessage(id=rid, method=method, params=params))
            await slot.event.wait()
        finally:
            self._pending.pop(rid, None)
        if slot.error is not None:
            try:
                body = msgspec.json.decode(slot.error, type=w.ErrorBody)
            except msgspec.DecodeError:
                body = w.ErrorBody(code=-32603, message=bytes(slot.error).decode(errors="replace"))
            raise w.RpcError(body.code, body.message, body.data)
        return slot.result if slot.result is not None else msgspec.Raw(b"null")

    # -- dispatch -------------------------------------------------------------------------

    async def handle_line(self, line: bytes | None) -> None:
        if line is None:
            await self._error(None, w.RpcError.parse_error("line too long"))
            return
        if not line.strip():
            return
        try:
            env = w.decode_envelope(line)
        except msgspec.ValidationError as exc:
            log.warning("invalid request: %s", exc)
            await self._error(None, w.RpcError.invalid_request(str(exc)))
            return
        except msgspec.DecodeError as exc:
            log.warning("parse error: %s", exc)
            await self._error(None, w.RpcError.parse_error(str(exc)))
            return
        if log.isEnabledFor(logging.DEBUG):
            log.debug("<< %s", line[:500].decode(errors="replace"))
        if not isinstance(env.method, UnsetType):
            if isinstance(env.id, UnsetType):
                self._notification(env.method, env.params)
            else:
                await self._request(env.id, env.method, env.params)
        elif not isinstance(env.id, UnsetType) and (
            not isinstance(env.result, UnsetType) or not isinstance(env.error, UnsetType)
        ):
            self._response(env)
        else:
            rid = None if isinstance(env.id, UnsetType) else env.id
            await self._error(rid, w.RpcError.invalid_request("neither a request nor a response"))

    async def _request(self, rid: w.JsonId, method: str, params: msgspec.Raw | UnsetType) -> None:
        handler = self._requests.get(method)
        try:
            if handler is None:
                raise w.RpcError.method_not_found(method)
            await handler(rid, params)
        except w.RpcError as exc:
            log.info("%s -> error %s %s", method, exc.code, exc.message)
            await self._error(rid, exc)

    def _notification(self, method: str, params: msgspec.Raw | UnsetType) -> None:
        if method == "session/cancel":
            try:
                p = w.decode_params(params, w.SessionIdParams)
            except w.RpcError as exc:
                log.warning("bad session/cancel ignored: %s", exc.data)
                return
            session = self._sessions.get(p.session_id)
            if session is None:
                log.info("session/cancel for unknown session %s ignored", p.session_id)
                return
            for turn in list(session.live):
                if turn.interrupt("cancelled", is_cancel=True):
                    log.info("turn %s cancelled", turn.request_id)
        elif method == "$/cancel_request":
            try:
                c = w.decode_params(params, w.CancelRequestParams)
            except w.RpcError as exc:
                log.warning("bad $/cancel_request ignored: %s", exc.data)
                return
            target = self._prompts.get(c.request_id)
            if target is not None:
                target.interrupt("request_cancelled", is_cancel=True)
        else:
            log.debug("notification %s ignored", method)

    def _response(self, env: w.Envelope) -> None:
        slot = self._pending.get(env.id) if isinstance(env.id, int) else None
        if slot is None:
            log.warning("response to unknown request id %r ignored", env.id)
            return
        if not isinstance(env.error, UnsetType):
            slot.error = env.error
        elif not isinstance(env.result, UnsetType):
            slot.result = env.result
        slot.event.set()


async def serve(config: AgentConfig, *, stdin_fd: int = 0, stdout_fd: int = 1) -> int:
    """Run the agent on two file descriptors until stdin ends; return the exit status.

    Works under trio and asyncio. ``slow_start`` sleeps before stdin is read; ``ignore_eof``
    keeps the process alive after stdin ends (until a signal); ``exit_at_startup`` returns its
    status before anything is read.
    """
    if "leak_env" in config.faults:
        leaked = [f"{k}={v}" for k, v in sorted(os.environ.items()) if _SECRET_NAME.search(k)]
        os.write(2, "".join(f"reference-agent env: {item}\n" for item in leaked).encode())
    if "exit_at_startup" in config.faults:
        code = int(config.faults.number("exit_at_startup"))
        log.error("exiting at startup with status %d (fault exit_at_startup)", code)
        return code
    if "slow_start" in config.faults:
        seconds = config.faults.number("slow_start")
        log.info("slow start: sleeping %.3gs before reading stdin", seconds)
        await anyio.sleep(seconds)
    async with anyio.create_task_group() as tg:

        def peer_gone() -> None:
            log.info("stdout is broken (client went away); exiting")
            tg.cancel_scope.cancel()

        outbox = Outbox(stdout_fd, on_peer_gone=peer_gone)
        tg.start_soon(outbox.run)
        async with anyio.create_task_group() as turns:
            agent = ReferenceAgent(config, outbox, turns, stdin_fd=stdin_fd)
            reader = LineReader(stdin_fd, max_line=config.max_line)
            async with contextlib.aclosing(reader.lines()) as lines:
                async for line in lines:
                    await agent.handle_line(line)
            log.info("stdin closed")
            if "ignore_eof" in config.faults:
                log.info("ignoring stdin EOF (fault ignore_eof); waiting for a signal")
                await anyio.sleep_forever()
            turns.cancel_scope.cancel()
        # Answers already queued still reach a client that reads on; a client that does
        # not read cannot hold the exit up for long.
        with anyio.move_on_after(EOF_DRAIN_SECONDS):
            await outbox.drain()
        tg.cancel_scope.cancel()
    return 0
