"""The requests side of :class:`~._agent.ReferenceAgent`: initialize, authenticate,
session/new and session/load (with their MCP servers), and the ``set_*`` requests."""

from __future__ import annotations

import os
import uuid
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from . import _wire as w
from ._base import (
    _COMMANDS,
    AUTH_METHOD_ID,
    _AgentBase,
    _check_cwd,
    _config_options,
    _mode_state,
    _model_state,
    _Session,
    log,
)
from ._faults import other_rollout_id
from ._mcp import SessionMcp, parse_servers
from ._script import (
    DEFAULT_MODE,
    DEFAULT_MODEL,
    DEFAULT_THINKING,
    MODELS,
    MODES,
    THINKING_LEVELS,
)
from ._store import SessionState


class _RequestSide(_AgentBase):
    """initialize, authenticate, the sessions and their settings."""

    # -- requests -------------------------------------------------------------------------

    def _require_auth(self) -> None:
        if not self._authenticated:
            raise w.RpcError.auth_required()

    def _session(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise w.RpcError.resource_not_found(session_id)
        return session

    async def _initialize(self, rid: w.JsonId, params: msgspec.Raw | UnsetType) -> None:
        p = w.decode_params(params, w.InitializeParams)
        if "no_initialize" in self._faults:
            log.info("initialize %r left unanswered (fault no_initialize)", rid)
            return
        self._client = p.client_capabilities
        version = p.protocol_version if "echo_version" in self._faults else w.PROTOCOL_VERSION
        if p.protocol_version != w.PROTOCOL_VERSION:
            log.info("client asked for protocol %s; answering %s", p.protocol_version, version)
        caps_meta: dict[str, Any] | UnsetType = (
            UNSET if "no_queueing" in self._faults else {"claudeCode": {"promptQueueing": True}}
        )
        auth = (
            [
                w.AuthMethod(
                    id=AUTH_METHOD_ID,
                    name="Reference login",
                    description="Always succeeds (fault auth_required)",
                )
            ]
            if "auth_required" in self._faults
            else []
        )
        meta: dict[str, Any] = {"pid": os.getpid(), "faults": self._faults.describe()}
        if self._config.child_pid is not None:
            meta["childPid"] = self._config.child_pid
        result = w.InitializeResult(
            protocol_version=version,
            agent_capabilities=w.AgentCapabilities(
                load_session="no_load" not in self._faults,
                mcp_capabilities=w.McpCapabilities(http="no_mcp_http" not in self._faults),
                meta=caps_meta,
            ),
            auth_methods=auth,
            agent_info=w.Implementation(
                name=w.AGENT_NAME, title="acpfsm reference agent", version=self._config.version
            ),
            meta={"acpfsmReference": meta},
        )
        await self._result(rid, result)

    async def _authenticate(self, rid: w.JsonId, params: msgspec.Raw | UnsetType) -> None:
        p = w.decode_params(params, w.AuthenticateParams)
        if "auth_required" not in self._faults or p.method_id != AUTH_METHOD_ID:
            raise w.RpcError(
                -32602,
                f"Invalid params: Unsupported authentication method: {p.method_id}",
                {"methodId": p.method_id},
            )
        self._authenticated = True
        await self._result(rid, {})

    async def _new_session(self, rid: w.JsonId, params: msgspec.Raw | UnsetType) -> None:
        p = w.decode_params(params, w.NewSessionParams)
        self._require_auth()
        _check_cwd(p.cwd)
        state = SessionState(
            mode_id=DEFAULT_MODE, model_id=DEFAULT_MODEL, thinking=DEFAULT_THINKING
        )
        session = _Session(id=str(uuid.uuid4()), cwd=p.cwd, state=state)
        self._sessions[session.id] = session
        self._store.create(session.id, session.cwd, state)
        log.info("session/new %s (cwd %s)", session.id, session.cwd)
        await self._result(
            rid,
            w.NewSessionResult(
                session_id=session.id,
                modes=_mode_state(state),
                models=_model_state(state),
                config_options=_config_options(state),
            ),
        )
        await self._update(
            session, w.AvailableCommandsUpdate(available_commands=_COMMANDS), persist=False
        )
        self._connect_mcp(session, p.mcp_servers)

    async def _load_session(self, rid: w.JsonId, params: msgspec.Raw | UnsetType) -> None:
        if "no_load" in self._faults or "load_method_not_found" in self._faults:
            raise w.RpcError.method_not_found("session/load")
        p = w.decode_params(params, w.LoadSessionParams)
        self._require_auth()
        if "load_auth" in self._faults:
            raise w.RpcError.auth_required()
        _check_cwd(p.cwd)
        sid = p.session_id
        if "load_not_found" in self._faults:
            raise w.RpcError.resource_not_found(sid)
        if "load_rollout_missing" in self._faults:
            raise w.RpcError.internal(f"no rollout found for thread id {sid}")
        if "load_rollout_other" in self._faults:
            raise w.RpcError.internal(f"no rollout found for thread id {other_rollout_id(sid)}")
        if "load_internal" in self._faults:
            raise w.RpcError.internal("Session not found")
        stored = self._store.load(sid)
        if stored is None:
            raise w.RpcError.resource_not_found(sid)
        session = self._sessions.get(sid)
        if session is None:
            state = stored.state or SessionState(
                mode_id=DEFAULT_MODE, model_id=DEFAULT_MODEL, thinking=DEFAULT_THINKING
            )
            session = _Session(id=sid, cwd=p.cwd, state=state, titled=bool(stored.updates))
            session.turns = stored.turns
            self._sessions[sid] = session
        log.info("session/load %s: replaying %d updates", sid, len(stored.updates))
        for update in stored.updates:
            await self._notify_update(sid, update)
        await self._result(
            rid,
            w.LoadSessionResult(
                modes=_mode_state(session.state),
                models=_model_state(session.state),
                config_options=_config_options(session.state),
            ),
        )
        self._connect_mcp(session, p.mcp_servers)

    def _connect_mcp(self, session: _Session, servers: list[Any]) -> None:
        """Connect (in the background, once the session is answered) to the MCP servers the
        session is given, replacing those it had; their names and kinds are logged, never
        their headers."""
        if session.mcp is not None:
            session.mcp.close()
            session.mcp = None
        configs = parse_servers(servers)
        if not configs:
            return
        log.info(
            "session %s: MCP servers %s",
            session.id,
            ", ".join(f"{c.name} ({c.kind})" for c in configs),
        )
        session.mcp = SessionMcp(configs, self._tg, self._config.mcp_connect_seconds)

    async def _set_mode(self, rid: w.JsonId, params: msgspec.Raw | UnsetType) -> None:
        p = w.decode_params(params, w.SetModeParams)
        session = self._session(p.session_id)
        if p.mode_id not in {m[0] for m in MODES}:
            raise w.RpcError(-32602, f"Invalid params: Invalid Mode: {p.mode_id}")
        await self._change(session, mode_id=p.mode_id)
        await self._result(rid, {})

    async def _set_model(self, rid: w.JsonId, params: msgspec.Raw | UnsetType) -> None:
        p = w.decode_params(params, w.SetModelParams)
        session = self._session(p.session_id)
        if p.model_id not in {m[0] for m in MODELS}:
            raise w.RpcError(-32602, f"Invalid params: Invalid model: {p.model_id}")
        await self._change(session, model_id=p.model_id)
        await self._result(rid, {})

    async def _set_config_option(self, rid: w.JsonId, params: msgspec.Raw | UnsetType) -> None:
        p = w.decode_params(params, w.SetConfigOptionParams)
        session = self._session(p.session_id)
        tables = {"mode": MODES, "model": MODELS, "thinking": THINKING_LEVELS}
        table = tables.get(p.config_id)
        if table is None:
            raise w.RpcError(
                -32602,
                f"Invalid params: Unknown config option: {p.config_id}",
                {"configId": p.config_id},
            )
        if not isinstance(p.value, str) or p.value not in {t[0] for t in table}:
            raise w.RpcError(
                -32602,
                f"Invalid params: Invalid value for config option {p.config_id}: {p.value}",
            )
        if p.config_id == "mode":
            await self._change(session, mode_id=p.value)
        elif p.config_id == "model":
            await self._change(session, model_id=p.value)
        else:
            await self._change(session, thinking=p.value)
        await self._result(
            rid, w.ConfigOptionsResult(config_options=_config_options(session.state))
        )

    async def _change(
        self,
        session: _Session,
        *,
        mode_id: str | None = None,
        model_id: str | None = None,
        thinking: str | None = None,
    ) -> None:
        old = session.state
        session.state = SessionState(
            mode_id=mode_id or old.mode_id,
            model_id=model_id or old.model_id,
            thinking=thinking or old.thinking,
        )
        self._store.save_state(session.id, session.state)
        if mode_id is not None:
            await self._update(session, w.CurrentModeUpdate(current_mode_id=mode_id), persist=False)
        await self._update(
            session,
            w.ConfigOptionUpdate(config_options=_config_options(session.state)),
            persist=False,
        )
