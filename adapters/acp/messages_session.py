"""ACP initialize/authenticate and the session methods' params and results. Part of
:mod:`acpfsm.adapters.acp.messages` (import them from there)."""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import field

from .messages_base import (
    _Wire,
)
from .messages_content import (
    ContentBlock,
)

# --------------------------------------------------------------------------------------------
# initialize / authenticate


class Implementation(_Wire, frozen=True, kw_only=True):
    name: str
    version: str = ""
    title: str | None = None


class FileSystemCapability(_Wire, frozen=True, kw_only=True):
    read_text_file: bool = False
    write_text_file: bool = False


class ClientCapabilities(_Wire, frozen=True, kw_only=True):
    fs: FileSystemCapability = FileSystemCapability()
    terminal: bool = False


class InitializeRequest(_Wire, frozen=True, kw_only=True):
    protocol_version: int
    client_capabilities: ClientCapabilities = ClientCapabilities()
    client_info: Implementation | None = None


class PromptCapabilities(_Wire, frozen=True, kw_only=True):
    image: bool = False
    audio: bool = False
    embedded_context: bool = False


class McpCapabilities(_Wire, frozen=True, kw_only=True):
    http: bool = False
    sse: bool = False


class SessionCapabilities(_Wire, frozen=True, kw_only=True):
    """The session methods an agent supports beyond new/load/prompt: each one present (an
    object, ``{}`` or with ``_meta``) means supported, ``None`` means not advertised."""

    list_: dict[str, Any] | None = field(default=None, name="list")
    delete: dict[str, Any] | None = None
    fork: dict[str, Any] | None = None
    resume: dict[str, Any] | None = None
    close: dict[str, Any] | None = None
    additional_directories: dict[str, Any] | None = None

    def advertised(self) -> list[str]:
        """The wire names of the capabilities present, sorted."""
        return sorted(
            f.encode_name
            for f in msgspec.structs.fields(self)
            if f.name != "meta" and getattr(self, f.name) is not None
        )


class AgentCapabilities(_Wire, frozen=True, kw_only=True):
    """``meta`` carries extensions such as ``{"claudeCode": {"promptQueueing": true}}``."""

    load_session: bool = False
    prompt_capabilities: PromptCapabilities = PromptCapabilities()
    mcp_capabilities: McpCapabilities = McpCapabilities()
    session_capabilities: SessionCapabilities | None = None


class InitializeResponse(_Wire, frozen=True, kw_only=True):
    protocol_version: int
    agent_capabilities: AgentCapabilities = AgentCapabilities()
    auth_methods: list[dict[str, Any]] | None = None
    """``None``: not sent (no authentication methods)."""
    agent_info: Implementation | None = None


class AuthenticateRequest(_Wire, frozen=True, kw_only=True):
    method_id: str


class EmptyResponse(_Wire, frozen=True, kw_only=True):
    """``{}``: authenticate, session/set_mode, session/set_model, fs/write_text_file …"""


# --------------------------------------------------------------------------------------------
# Sessions


class EnvVariable(_Wire, frozen=True, kw_only=True):
    name: str
    value: str


class McpServerStdio(_Wire, frozen=True, kw_only=True):
    name: str
    command: str
    args: list[str]
    env: list[EnvVariable]


class HttpHeader(_Wire, frozen=True, kw_only=True):
    name: str
    value: str


class _McpServerUrl(_Wire, frozen=True, kw_only=True):
    type: str
    name: str
    url: str
    headers: list[HttpHeader]


class McpServerHttp(_McpServerUrl, frozen=True, kw_only=True):
    """``{"type": "http", name, url, headers}`` (needs ``mcpCapabilities.http``)."""


class McpServerSse(_McpServerUrl, frozen=True, kw_only=True):
    """``{"type": "sse", name, url, headers}`` (needs ``mcpCapabilities.sse``)."""


class SessionMode(_Wire, frozen=True, kw_only=True):
    id: str
    name: str = ""
    description: str | None = None


class SessionModeState(_Wire, frozen=True, kw_only=True):
    current_mode_id: str = ""
    available_modes: list[SessionMode] = []


class ModelInfo(_Wire, frozen=True, kw_only=True):
    model_id: str
    name: str = ""
    description: str | None = None


class SessionModelState(_Wire, frozen=True, kw_only=True):
    """The legacy (removed from the spec, still sent by older agents) model surface."""

    current_model_id: str = ""
    available_models: list[ModelInfo] = []


class SessionConfigOption(_Wire, frozen=True, kw_only=True):
    """A session config option. ``category == "model"`` marks model selection; ``options``
    are ``{value, name, description?}`` objects (or groups of them) kept as dicts."""

    id: str
    name: str = ""
    description: str | None = None
    category: str | None = None
    type: str = "select"
    current_value: Any = None
    options: list[dict[str, Any]] = []


class NewSessionRequest(_Wire, frozen=True, kw_only=True):
    cwd: str
    mcp_servers: list[Any]
    additional_directories: list[str] | None = None


class NewSessionResponse(_Wire, frozen=True, kw_only=True):
    session_id: str
    modes: SessionModeState | None = None
    models: SessionModelState | None = None
    config_options: list[SessionConfigOption] | None = None


class LoadSessionRequest(_Wire, frozen=True, kw_only=True):
    session_id: str
    cwd: str
    mcp_servers: list[Any]
    additional_directories: list[str] | None = None


class LoadSessionResponse(_Wire, frozen=True, kw_only=True):
    modes: SessionModeState | None = None
    models: SessionModelState | None = None
    config_options: list[SessionConfigOption] | None = None


class PromptRequest(_Wire, frozen=True, kw_only=True):
    session_id: str
    prompt: list[ContentBlock]


class PromptResponse(_Wire, frozen=True, kw_only=True):
    """``stop_reason``: end_turn, max_tokens, max_turn_requests, refusal, cancelled."""

    stop_reason: str = "end_turn"
    usage: dict[str, Any] | None = None


class CancelNotification(_Wire, frozen=True, kw_only=True):
    session_id: str


class SetSessionModeRequest(_Wire, frozen=True, kw_only=True):
    session_id: str
    mode_id: str


class SetSessionConfigOptionRequest(_Wire, frozen=True, kw_only=True):
    session_id: str
    config_id: str
    value: str | bool
    type: str | None = None
    """``"boolean"`` with a boolean ``value``; absent for a select option."""


class SetSessionConfigOptionResponse(_Wire, frozen=True, kw_only=True):
    config_options: list[SessionConfigOption] = []


class SetSessionModelRequest(_Wire, frozen=True, kw_only=True):
    """Legacy ``session/set_model`` (removed from the spec; older agents implement it)."""

    session_id: str
    model_id: str
