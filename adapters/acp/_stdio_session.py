"""The session side of :class:`~.stdio.StdioTransport`: initialize, session/new and
session/load, their state (modes, models, config options) and the ``set_*`` requests."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import msgspec
from msgspec import Raw

from ..errors import (
    AgentRequestError,
    LocalProtocolError,
    RemoteProtocolError,
)
from ..events import (
    AgentCapabilities,
    AuthRequired,
    ConfigOption,
    ModeInfo,
    ModelInfo,
    SessionMode,
    SessionModels,
    SessionStatus,
)
from ..mcp_servers import McpServerStdio
from ..transport import (
    AgentInfo,
    InitializeResult,
    McpServer,
    SessionResult,
)
from . import messages as acp
from ._stdio_base import (
    LOAD_UNSUPPORTED_MESSAGE,
    _StdioBase,
)

log = logging.getLogger("acpfsm.adapters.acp.stdio")


def _package_version() -> str:
    from importlib import metadata  # on first initialize: importing it costs ~10 % of ours

    try:
        return metadata.version("acpfsm")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0"


def _option_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _flat_options(options: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for option in options:
        if isinstance(option.get("options"), list):  # a group
            out.extend(o for o in option["options"] if isinstance(o, dict))
        else:
            out.append(option)
    return out


def _config_option(option: acp.SessionConfigOption) -> ConfigOption:
    return ConfigOption(
        id=option.id,
        name=option.name,
        type=option.type,
        category=option.category or "",
        current_value=_option_value(option.current_value),
        options=list(option.options),
    )


def _prompt_queueing(meta: dict[str, Any] | None) -> bool:
    claude = (meta or {}).get("claudeCode")
    return isinstance(claude, dict) and claude.get("promptQueueing") is True


class _SessionSide(_StdioBase):
    """initialize, authenticate, session/new|load, the session state, set_mode/model/config."""

    # ------------------------------------------------------------------ initialize / sessions

    async def initialize(self) -> InitializeResult:
        self._ensure_open()
        request = acp.InitializeRequest(
            protocol_version=acp.PROTOCOL_VERSION,
            client_capabilities=acp.ClientCapabilities(
                fs=acp.FileSystemCapability(
                    read_text_file=self.config.fs_read, write_text_file=self.config.fs_write
                ),
                terminal=self._terminal_handler is not None,
            ),
            client_info=acp.Implementation(
                name=self.config.client_name,
                version=self.config.client_version or _package_version(),
            ),
        )
        raw = await self._conn.request("initialize", request)
        response: acp.InitializeResponse = self._decode_result("initialize", raw)
        if response.protocol_version != acp.PROTOCOL_VERSION:
            raise RemoteProtocolError(
                f"agent answered protocolVersion {response.protocol_version}; "
                f"acpfsm speaks {acp.PROTOCOL_VERSION}"
            )
        caps = response.agent_capabilities
        info = response.agent_info
        result = InitializeResult(
            protocol_version=response.protocol_version,
            agent=AgentInfo(name=info.name, version=info.version or "unknown")
            if info is not None
            else AgentInfo(),
            load_session=caps.load_session,
            prompt_queueing=_prompt_queueing(caps.meta),
            supports_image=caps.prompt_capabilities.image,
            supports_audio=caps.prompt_capabilities.audio,
            supports_embedded_context=caps.prompt_capabilities.embedded_context,
            auth_methods=list(response.auth_methods or ()),
            session_capabilities=caps.session_capabilities.advertised()
            if caps.session_capabilities is not None
            else [],
            meta={
                **({"agentCapabilities": caps.meta} if caps.meta else {}),
                **(response.meta or {}),
            },
            unmodelled=acp.unmodelled(acp.InitializeResponse, raw),
            mcp_http=caps.mcp_capabilities.http,
            mcp_sse=caps.mcp_capabilities.sse,
        )
        self._capabilities = result
        self._emit(
            AgentCapabilities(
                supports_image=result.supports_image,
                supports_audio=result.supports_audio,
                supports_embedded_context=result.supports_embedded_context,
                supports_prompt_queueing=result.prompt_queueing,
                supports_load_session=result.load_session,
                auth_methods=result.auth_methods,
            )
        )
        return result

    async def authenticate(self, method_id: str) -> None:
        self._ensure_open()
        await self._call("authenticate", acp.AuthenticateRequest(method_id=method_id))

    @staticmethod
    def _mcp_servers(servers: Sequence[McpServer]) -> list[Any]:
        out: list[Any] = []
        for server in servers:
            if isinstance(server, McpServerStdio):
                out.append(
                    acp.McpServerStdio(
                        name=server.name,
                        command=server.command,
                        args=list(server.args),
                        env=[acp.EnvVariable(name=k, value=v) for k, v in server.env.items()],
                    )
                )
                continue
            wire = acp.McpServerHttp if server.__struct_config__.tag == "http" else acp.McpServerSse
            out.append(
                wire(
                    type=str(server.__struct_config__.tag),
                    name=server.name,
                    url=server.url,
                    headers=[acp.HttpHeader(name=k, value=v) for k, v in server.headers.items()],
                )
            )
        return out

    async def new_session(self, cwd: str, mcp_servers: Sequence[McpServer] = ()) -> SessionResult:
        caps = self._require_initialized()
        self._ensure_open()
        request = acp.NewSessionRequest(cwd=cwd, mcp_servers=self._mcp_servers(mcp_servers))
        try:
            response: acp.NewSessionResponse = await self._call("session/new", request)
        except AgentRequestError as exc:
            if exc.code == -32000:
                self._emit(AuthRequired(error=exc.error_message, auth_methods=caps.auth_methods))
            raise
        self._reset_session(response.session_id)
        result = self._absorb_session_state(
            response.session_id, response.modes, response.models, response.config_options
        )
        self._emit_session_snapshot(result, "new")
        return result

    async def load_session(
        self, session_id: str, cwd: str, mcp_servers: Sequence[McpServer] = ()
    ) -> SessionResult:
        caps = self._require_initialized()
        if not caps.load_session:
            raise LocalProtocolError(LOAD_UNSUPPORTED_MESSAGE)
        self._ensure_open()
        previous = self._session_id
        request = acp.LoadSessionRequest(
            session_id=session_id, cwd=cwd, mcp_servers=self._mcp_servers(mcp_servers)
        )
        self._reset_session(session_id)
        self._replaying = self.config.suppress_replay

        def replay_over(result: Raw | None, error: Exception | None) -> None:
            self._replaying = False  # at once, in the reader: no later update is suppressed

        try:
            pending = await self._conn.send_request(
                "session/load", request, on_response=replay_over
            )
            response: acp.LoadSessionResponse = self._decode_result(
                "session/load", await pending.wait()
            )
        except BaseException:
            self._replaying = False
            self._session_id = previous
            raise
        result = self._absorb_session_state(
            session_id, response.modes, response.models, response.config_options
        )
        if self._replayed_plan is not None:
            # the last replayed plan is re-emitted (as agentctl does), marked as history
            self._emit(msgspec.structs.replace(self._replayed_plan, replayed=True))
            self._replayed_plan = None
        self._emit_session_snapshot(result, "resumed")
        return result

    def _reset_session(self, session_id: str) -> None:
        self._session_id = session_id
        self._replayed_plan = None
        self._open_tools.clear()
        self._context_size = 0

    def _model_option(self) -> acp.SessionConfigOption | None:
        for option in self._config_options:
            if option.category == "model":
                return option
        return None

    def _absorb_session_state(
        self,
        session_id: str,
        modes: acp.SessionModeState | None,
        models: acp.SessionModelState | None,
        config_options: list[acp.SessionConfigOption] | None,
    ) -> SessionResult:
        if modes is not None:
            self._current_mode_id = modes.current_mode_id
            self._modes = [
                ModeInfo(id=m.id, name=m.name, description=m.description or "")
                for m in modes.available_modes
            ]
        else:
            self._current_mode_id, self._modes = "", []
        self._config_options = list(config_options or ())
        self._refresh_models(models)
        return SessionResult(
            session_id=session_id,
            current_model_id=self._current_model_id,
            models=list(self._models),
            config_options=[_config_option(o) for o in self._config_options],
            current_mode_id=self._current_mode_id,
            modes=list(self._modes),
            has_model_state=models is not None or bool(self._config_options),
        )

    def _refresh_models(self, models: acp.SessionModelState | None = None) -> None:
        option = self._model_option()
        if models is not None:
            self._current_model_id = models.current_model_id
            self._models = [
                ModelInfo(model_id=m.model_id, name=m.name, description=m.description or "")
                for m in models.available_models
            ]
        elif option is not None:
            self._current_model_id = _option_value(option.current_value)
            self._models = [
                ModelInfo(
                    model_id=str(o.get("value", "")),
                    name=str(o.get("name", "")),
                    description=str(o.get("description") or ""),
                )
                for o in _flat_options(option.options)
            ]

    def _models_event(self, source: str, config_id: str = "") -> SessionModels:
        """The session's model state; ``config_id`` names the config option whose
        ``session/set_config_option`` answer this is (``config_options_config_id``, as
        kandev's agentctl ACP adapter marks its convergence event), so the runtime's config
        settlement waiting for that option can settle."""
        data = {"config_options_source": source}
        if config_id:
            data["config_options_config_id"] = config_id
        return SessionModels(
            session_id=self._session_id or "",
            current_model_id=self._current_model_id,
            session_models=list(self._models),
            config_options=[_config_option(o) for o in self._config_options],
            data=data,
        )

    def _emit_session_snapshot(self, result: SessionResult, status: str) -> None:
        sid = result.session_id
        if result.modes or result.current_mode_id:
            self._emit(
                SessionMode(
                    session_id=sid,
                    current_mode_id=result.current_mode_id,
                    available_modes=result.modes,
                )
            )
        if result.has_model_state:
            self._emit(self._models_event("provider_response"))
        self._emit(SessionStatus(session_id=sid, session_status=status))

    # ------------------------------------------------------------------ mode / model / config

    async def set_mode(self, mode_id: str) -> None:
        sid = self._require_session()
        self._ensure_open()
        await self._call(
            "session/set_mode", acp.SetSessionModeRequest(session_id=sid, mode_id=mode_id)
        )
        self._current_mode_id = mode_id
        self._emit(
            SessionMode(session_id=sid, current_mode_id=mode_id, available_modes=list(self._modes))
        )

    async def set_config_option(self, config_id: str, value: str) -> None:
        sid = self._require_session()
        self._ensure_open()
        known = next((o for o in self._config_options if o.id == config_id), None)
        wire_value: str | bool = value
        value_type: str | None = None
        if known is not None and known.type == "boolean":
            wire_value, value_type = value.strip().lower() == "true", "boolean"
        request = acp.SetSessionConfigOptionRequest(
            session_id=sid, config_id=config_id, value=wire_value, type=value_type
        )
        response: acp.SetSessionConfigOptionResponse = await self._call(
            "session/set_config_option", request
        )
        if response.config_options:
            self._config_options = list(response.config_options)
        else:
            self._config_options = [
                msgspec.structs.replace(o, current_value=wire_value) if o.id == config_id else o
                for o in self._config_options
            ]
        self._refresh_models()
        self._emit(self._models_event("provider_response", config_id))

    async def set_model(self, model_id: str) -> None:
        """Model selection: through the ``category: "model"`` config option when the agent
        has one, else (or on ``-32601``) the legacy ``session/set_model``. An agent that
        implements neither (``-32601`` twice) leaves the model unchanged and this returns
        quietly, with no event (agentctl's ``sessionmodel.Apply``)."""
        sid = self._require_session()
        self._ensure_open()
        option = self._model_option()
        if option is not None:
            try:
                await self.set_config_option(option.id, model_id)
                return
            except AgentRequestError as exc:
                if exc.code != -32601:
                    raise
        request = acp.SetSessionModelRequest(session_id=sid, model_id=model_id)
        try:
            await self._call("session/set_model", request)
        except AgentRequestError as exc:
            if exc.code == -32601:
                log.info("agent supports no model selection; model %r not applied", model_id)
                return
            raise
        self._current_model_id = model_id
        self._emit(self._models_event("provider_response"))
