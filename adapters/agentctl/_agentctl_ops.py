"""The operations of :class:`~.transport.AgentctlTransport`: one request envelope and its one
answer, bounded, and the ``AgentTransport`` calls on top (initialize, sessions, prompt,
steer, cancel, set_*, attachments)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.abc

from ..errors import (
    AgentctlError,
    ExceptionMapping,
    RemoteProtocolError,
    SteerUnsupported,
    StreamNotConnected,
    TransportClosed,
    TransportTimeout,
    map_exceptions,
)
from ..events import AgentCapabilities
from ..mcp_servers import McpServerStdio, mcp_server_kind
from ..transport import (
    AgentInfo,
    Attachment,
    CancelResult,
    InitializeResult,
    McpServer,
    SessionResult,
)
from . import _wire
from ._agentctl_base import (
    _SEND_ERRORS,
    _AgentctlBase,
    _decode_payload,
    _Pending,
)

log = logging.getLogger("acpfsm.adapters.agentctl.transport")


def _attachment_kind(mime: str) -> str:
    if mime.startswith("image/"):
        return "image"
    if mime.startswith("audio/"):
        return "audio"
    return "resource"


class _OperationSide(_AgentctlBase):
    """Requests and their answers; the AgentTransport operations."""

    # ------------------------------------------------------------------ requests

    def _check_open(self) -> None:
        if self._closing:
            raise TransportClosed("agent stream closed")
        if self._dead is not None:
            raise TransportClosed(str(self._dead))

    async def _request(
        self, action: str, payload: Any, *, bound: float | None = None
    ) -> dict[str, Any]:
        """One request envelope, exactly one answer (see the module docstring)."""
        self._check_open()
        conn = self._conn
        if conn is None:
            raise StreamNotConnected()
        request_id, frame = _wire.encode_request(action, payload)
        waiter = _Pending(action)
        conn.pending[request_id] = waiter

        def write_failed(exc: BaseException) -> StreamNotConnected:
            conn.pending.pop(request_id, None)
            log.info("agent stream write failed (%r): dropping the socket", exc)
            conn.drop_reason = conn.drop_reason or f"websocket write failed: {exc!r}"
            conn.scope.cancel()
            return StreamNotConnected()

        with (
            map_exceptions({_SEND_ERRORS: write_failed}),
            anyio.fail_after(self.config.write_timeout),
        ):
            await conn.ws.send_text(frame.decode())
        bound = self.config.request_timeout if bound is None else bound
        unanswered: ExceptionMapping = {
            TimeoutError: lambda exc: TransportTimeout(
                f"{_wire.CLIENT_PREFIXES.get(action, action)}: agentctl did not answer "
                f"{action} within {bound:g}s: context deadline exceeded"
            )
        }
        try:
            with map_exceptions(unanswered), anyio.fail_after(bound):
                await waiter.done.wait()
        finally:
            conn.pending.pop(request_id, None)
        if waiter.lost is not None:
            raise waiter.lost
        if waiter.error is not None:
            raise _wire.error_from_text(action, waiter.error, code=waiter.code)
        return _decode_payload(waiter.payload, action)

    def _require_session(self) -> str:
        if self._session_id is None:
            raise AgentctlError("no active session - call new_session first", code="BAD_REQUEST")
        return self._session_id

    # ------------------------------------------------------------------ AgentTransport

    async def initialize(self) -> InitializeResult:
        data = await self._request(
            "agent.initialize",
            {"client_name": self.config.client_name, "client_version": self.config.client_version},
        )
        info = data.get("agent_info") if isinstance(data.get("agent_info"), dict) else {}
        assert isinstance(info, dict)
        with anyio.move_on_after(self.config.capabilities_wait):
            await self._caps_seen.wait()
        caps = self._wire_caps or AgentCapabilities()
        result = InitializeResult(
            protocol_version=1,
            agent=AgentInfo(
                name=str(info.get("name") or "unknown"),
                version=str(info.get("version") or "unknown"),
            ),
            load_session=True,  # agentctl does not say; it answers the canonical phrase
            prompt_queueing=caps.supports_prompt_queueing,
            supports_image=caps.supports_image,
            supports_audio=caps.supports_audio,
            supports_embedded_context=caps.supports_embedded_context,
            auth_methods=list(caps.auth_methods),
        )
        self._caps = result
        return result

    async def authenticate(self, method_id: str) -> None:
        await self._request("agent.session.authenticate", {"method_id": method_id})

    def adopt_session(self, session_id: str, capabilities: InitializeResult | None) -> None:
        """A reattach to an agent that survived the app (its executor's ``reattach``): the
        agent's ACP connection and ``session_id`` are the ones the app had, so nothing is
        initialized again (agentctl's ``agent.initialize`` would open a second ACP
        connection on the same pipes) and nothing is created or loaded. ``capabilities`` are
        what the agent said when the app initialized it (stored)."""
        self._session_id = session_id or None
        self._caps = capabilities

    @staticmethod
    def _mcp_servers(servers: Sequence[McpServer]) -> list[dict[str, Any]]:
        """agentctl's ``McpServer`` JSON: ``env`` and ``headers`` as maps."""
        out: list[dict[str, Any]] = []
        for s in servers:
            if isinstance(s, McpServerStdio):
                out.append(
                    {
                        "name": s.name,
                        "command": s.command,
                        "args": list(s.args),
                        "env": dict(s.env),
                        "type": "stdio",
                    }
                )
            else:
                out.append(
                    {
                        "name": s.name,
                        "url": s.url,
                        "headers": dict(s.headers),
                        "type": mcp_server_kind(s),
                    }
                )
        return out

    def _session_result(self, session_id: str, data: dict[str, Any]) -> SessionResult:
        state = data.get("model_state")
        if not isinstance(state, dict):
            return SessionResult(session_id=session_id)
        models = _wire.models(state.get("models"))
        options = _wire.config_options(state.get("config_options"))
        return SessionResult(
            session_id=session_id,
            current_model_id=str(state.get("current_model_id") or ""),
            models=models,
            config_options=options,
            has_model_state=bool(models or options),
        )

    async def new_session(self, cwd: str, mcp_servers: Sequence[McpServer] = ()) -> SessionResult:
        payload: dict[str, Any] = {"cwd": cwd}
        if mcp_servers:
            payload["mcp_servers"] = self._mcp_servers(mcp_servers)
        data = await self._request("agent.session.new", payload)
        session_id = str(data.get("session_id") or "")
        if not session_id:
            raise RemoteProtocolError("agent.session.new answered no session_id")
        self._session_id = session_id
        self._owed.clear()
        return self._session_result(session_id, data)

    async def load_session(
        self, session_id: str, cwd: str, mcp_servers: Sequence[McpServer] = ()
    ) -> SessionResult:
        payload: dict[str, Any] = {"session_id": session_id}
        if mcp_servers:
            payload["mcp_servers"] = self._mcp_servers(mcp_servers)
        self._loading = True  # plans replayed until session_status are history
        try:
            data = await self._request("agent.session.load", payload)
        except BaseException:
            self._loading = False
            raise
        self._session_id = session_id
        self._owed.clear()
        return self._session_result(session_id, data)

    async def _descriptors(self, attachments: Sequence[Attachment]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for item in attachments:
            if item.data or item.path or not item.attachment_id:
                item = await self.materialize_attachment(item)
            out.append(
                {
                    "type": _attachment_kind(item.mime_type),
                    "attachment_id": item.attachment_id,
                    "name": item.name,
                    "mime_type": item.mime_type,
                    "size_bytes": item.size,
                    "delivery_mode": item.delivery_mode or "prompt",
                }
            )
        return out

    async def _send_prompt(
        self, text: str, attachments: Sequence[Attachment], generation: int, *, steer: bool
    ) -> None:
        self._require_session()
        self._check_open()
        payload: dict[str, Any] = {"text": text, "prompt_generation": generation}
        descriptors = await self._descriptors(attachments)
        if descriptors:
            payload["attachments"] = descriptors
        if steer:
            payload["steer"] = True
        else:
            # a new turn goes out once the lifecycle is done with every earlier one: one still
            # owed here never gets its end (agentctl v0.95.1 may answer ``success`` to a cancel
            # whose turn it gave up, its 3 s cancel join racing its own release of the prompt
            # gate, and suppress the turn's end: the runtime escalated it after its cancel
            # wait), so it no longer claims the agent's unstamped content or a death's error
            self._owed = [g for g in self._owed if g >= generation]
            self._owed.append(generation)
        self._loading = False
        try:
            await self._request("agent.prompt", payload, bound=self.config.prompt_ack_timeout)
        except (StreamNotConnected, TransportTimeout) as exc:
            ambiguous = isinstance(exc, TransportTimeout) or exc.while_waiting
            if not steer and not ambiguous:
                self._settle(generation)
            raise
        except BaseException:
            if not steer:
                self._settle(generation)
            raise

    async def prompt(self, text: str, attachments: Sequence[Attachment], generation: int) -> None:
        """``agent.prompt``: returns on agentctl's ack; the turn's end arrives as an event."""
        await self._send_prompt(text, attachments, generation, steer=False)

    async def steer(self, text: str, attachments: Sequence[Attachment], generation: int) -> None:
        """``agent.prompt`` with ``steer: true`` into the running turn (agents that queue
        prompts only); the single ``complete`` is stamped ``generation``."""
        self._require_session()
        self._check_open()
        caps = self._caps
        if caps is None or not caps.prompt_queueing:
            raise SteerUnsupported(
                "steer was not dispatched: agent does not advertise prompt queueing"
            )
        if not self._owed:
            raise SteerUnsupported("steer was not dispatched: no prompt in flight")
        await self._send_prompt(text, attachments, generation, steer=True)

    async def cancel(self) -> CancelResult:
        if self._session_id is None:
            return CancelResult(acknowledged=True)
        self._permissions.withdraw_all()
        data = await self._request("agent.cancel", None, bound=self.config.cancel_timeout)
        if data.get("success") is True:
            return CancelResult(acknowledged=True)
        if data.get("not_acknowledged") is True:
            if self._owed:  # the abandoned turn sends no end
                self._owed.pop(0)
            log.warning("turn cancel not acknowledged: %s", data.get("error", ""))
            return CancelResult(acknowledged=False)
        raise _wire.error_from_text("agent.cancel", str(data.get("error", "")), code="FAILED")

    async def _converged(self, since: int) -> None:
        """Wait ≤ ``convergence_wait`` for a ``provider_response`` models event after ``since``."""
        with anyio.move_on_after(self.config.convergence_wait):
            while self._models_seq <= since:
                await self._models_changed.wait()

    async def set_model(self, model_id: str) -> None:
        self._require_session()
        since = self._models_seq
        await self._request("agent.session.set_model", {"model_id": model_id})
        await self._converged(since)

    async def set_mode(self, mode_id: str) -> None:
        session_id = self._require_session()
        await self._request(
            "agent.session.set_mode", {"session_id": session_id, "mode_id": mode_id}
        )

    async def set_config_option(self, config_id: str, value: str) -> None:
        self._require_session()
        since = self._models_seq
        await self._request(
            "agent.session.set_config_option", {"config_id": config_id, "value": value}
        )
        await self._converged(since)

    async def materialize_attachment(self, attachment: Attachment) -> Attachment:
        """Upload through ``/api/v1/attachments/materialize`` (needs the ACP session)."""
        self._check_open()
        return await self.instance.materialize(self._session_id or "", attachment)
