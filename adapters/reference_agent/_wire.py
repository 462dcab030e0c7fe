"""JSON-RPC 2.0 envelopes and the ACP v1 shapes the reference agent reads and writes.

Inbound types tolerate unknown fields (msgspec ignores them); outbound types omit unset
optionals. This module is deliberately independent of ``acpfsm.adapters.acp``: the reference
agent is a separate peer and must not share the client's codec.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from msgspec import UNSET, UnsetType, field

__all__ = [
    "AGENT_NAME",
    "PROTOCOL_VERSION",
    "Envelope",
    "RpcError",
    "decode_envelope",
    "encode",
]

AGENT_NAME = "acpfsm-reference-agent"
PROTOCOL_VERSION = 1

JsonId = int | str | None
_T = TypeVar("_T")

# ---------------------------------------------------------------------------------------
# Envelopes


class Envelope(msgspec.Struct):
    """Any inbound JSON-RPC message: request, notification or response."""

    jsonrpc: str | UnsetType = UNSET
    id: JsonId | UnsetType = UNSET
    method: str | UnsetType = UNSET
    params: msgspec.Raw | UnsetType = UNSET
    result: msgspec.Raw | UnsetType = UNSET
    error: msgspec.Raw | UnsetType = UNSET


class ErrorBody(msgspec.Struct, omit_defaults=True):
    code: int
    message: str
    data: Any = UNSET


class ResultMessage(msgspec.Struct, kw_only=True):
    jsonrpc: str = "2.0"
    id: JsonId
    result: Any


class ErrorMessage(msgspec.Struct, kw_only=True):
    jsonrpc: str = "2.0"
    id: JsonId
    error: ErrorBody


class RequestMessage(msgspec.Struct, kw_only=True):
    jsonrpc: str = "2.0"
    id: int
    method: str
    params: Any


class NotificationMessage(msgspec.Struct, kw_only=True):
    jsonrpc: str = "2.0"
    method: str
    params: Any


class RpcError(Exception):
    """Raised by a handler; answered as a JSON-RPC error object."""

    def __init__(self, code: int, message: str, data: Any = UNSET) -> None:
        super().__init__(f"{code} {message}")
        self.code = code
        self.message = message
        self.data = data

    def body(self) -> ErrorBody:
        return ErrorBody(code=self.code, message=self.message, data=self.data)

    @classmethod
    def parse_error(cls, details: str) -> RpcError:
        return cls(-32700, "Parse error", {"details": details})

    @classmethod
    def invalid_request(cls, details: str) -> RpcError:
        return cls(-32600, "Invalid Request", {"details": details})

    @classmethod
    def method_not_found(cls, method: str) -> RpcError:
        return cls(-32601, "Method not found", {"method": method})

    @classmethod
    def invalid_params(cls, details: str) -> RpcError:
        return cls(-32602, "Invalid params", {"details": details})

    @classmethod
    def resource_not_found(cls, session_id: str) -> RpcError:
        return cls(-32002, "Resource not found", {"sessionId": session_id})

    @classmethod
    def auth_required(cls) -> RpcError:
        return cls(-32000, "Authentication required")

    @classmethod
    def internal(cls, details: str) -> RpcError:
        return cls(-32603, "Internal error", {"details": details})


_encoder = msgspec.json.Encoder()
_envelope_decoder = msgspec.json.Decoder(Envelope)


def encode(message: object) -> bytes:
    """One newline-terminated JSON line."""
    buf = bytearray()
    _encoder.encode_into(message, buf)
    buf += b"\n"
    return bytes(buf)


def decode_envelope(line: bytes) -> Envelope:
    """Decode one line; raises ``msgspec.ValidationError`` (not an object of the right shape)
    or ``msgspec.DecodeError`` (not JSON)."""
    return _envelope_decoder.decode(line)


def decode_params(raw: msgspec.Raw | UnsetType, typ: type[_T]) -> _T:
    """Decode request params into ``typ``; raise ``RpcError`` -32602 when they do not fit."""
    data = b"{}" if isinstance(raw, UnsetType) else bytes(raw)
    try:
        return msgspec.json.decode(data, type=typ)
    except msgspec.DecodeError as exc:
        raise RpcError.invalid_params(str(exc)) from None


# ---------------------------------------------------------------------------------------
# Params (client -> agent)


class FsCapabilities(msgspec.Struct, rename="camel"):
    read_text_file: bool = False
    write_text_file: bool = False


class ClientCapabilities(msgspec.Struct, rename="camel"):
    fs: FsCapabilities = field(default_factory=FsCapabilities)
    terminal: bool = False


class InitializeParams(msgspec.Struct, rename="camel"):
    protocol_version: int
    client_capabilities: ClientCapabilities = field(default_factory=ClientCapabilities)
    client_info: Any = None


class AuthenticateParams(msgspec.Struct, rename="camel"):
    method_id: str


class NewSessionParams(msgspec.Struct, rename="camel"):
    cwd: str
    mcp_servers: list[Any] = field(default_factory=list)
    additional_directories: list[str] = field(default_factory=list)


class LoadSessionParams(msgspec.Struct, rename="camel"):
    session_id: str
    cwd: str
    mcp_servers: list[Any] = field(default_factory=list)


class PromptParams(msgspec.Struct, rename="camel"):
    session_id: str
    prompt: list[msgspec.Raw]


class Block(msgspec.Struct, rename="camel"):
    """A tolerant view of one prompt content block (unknown types are kept, not rejected)."""

    type: str = ""
    text: str = ""
    mime_type: str = ""
    data: str = ""
    uri: str = ""
    name: str = ""
    resource: dict[str, Any] = field(default_factory=dict)


class SessionIdParams(msgspec.Struct, rename="camel"):
    session_id: str


class CancelRequestParams(msgspec.Struct, rename="camel"):
    request_id: JsonId


class SetModeParams(msgspec.Struct, rename="camel"):
    session_id: str
    mode_id: str


class SetConfigOptionParams(msgspec.Struct, rename="camel"):
    session_id: str
    config_id: str
    value: str | bool
    type: str = ""


class SetModelParams(msgspec.Struct, rename="camel"):
    session_id: str
    model_id: str


class PermissionOutcome(msgspec.Struct, rename="camel"):
    outcome: str = ""
    option_id: str = ""


class PermissionResult(msgspec.Struct):
    outcome: PermissionOutcome = field(default_factory=PermissionOutcome)


class ReadTextFileResult(msgspec.Struct):
    content: str = ""


# ---------------------------------------------------------------------------------------
# Results and capabilities (agent -> client)


class PromptCapabilities(msgspec.Struct, rename="camel"):
    image: bool = True
    audio: bool = False
    embedded_context: bool = True


class McpCapabilities(msgspec.Struct):
    http: bool = True
    sse: bool = False


class AgentCapabilities(msgspec.Struct, rename="camel", omit_defaults=True):
    load_session: bool
    prompt_capabilities: PromptCapabilities = field(default_factory=PromptCapabilities)
    mcp_capabilities: McpCapabilities = field(default_factory=McpCapabilities)
    meta: dict[str, Any] | UnsetType = field(default=UNSET, name="_meta")


class AuthMethod(msgspec.Struct):
    id: str
    name: str
    description: str


class Implementation(msgspec.Struct):
    name: str
    title: str
    version: str


class InitializeResult(msgspec.Struct, rename="camel", omit_defaults=True):
    protocol_version: int
    agent_capabilities: AgentCapabilities
    auth_methods: list[AuthMethod]
    agent_info: Implementation
    meta: dict[str, Any] | UnsetType = field(default=UNSET, name="_meta")


class ModeInfo(msgspec.Struct):
    id: str
    name: str
    description: str


class ModeState(msgspec.Struct, rename="camel"):
    current_mode_id: str
    available_modes: list[ModeInfo]


class ModelInfo(msgspec.Struct, rename="camel"):
    model_id: str
    name: str
    description: str


class ModelState(msgspec.Struct, rename="camel"):
    current_model_id: str
    available_models: list[ModelInfo]


class SelectOption(msgspec.Struct):
    value: str
    name: str
    description: str


class ConfigOption(msgspec.Struct, rename="camel"):
    id: str
    name: str
    description: str
    category: str
    current_value: str
    options: list[SelectOption]
    type: str = "select"


class NewSessionResult(msgspec.Struct, rename="camel"):
    session_id: str
    modes: ModeState
    models: ModelState
    config_options: list[ConfigOption]


class LoadSessionResult(msgspec.Struct, rename="camel"):
    modes: ModeState
    models: ModelState
    config_options: list[ConfigOption]


class ConfigOptionsResult(msgspec.Struct, rename="camel"):
    config_options: list[ConfigOption]


class PromptResult(msgspec.Struct, rename="camel"):
    stop_reason: str


# ---------------------------------------------------------------------------------------
# session/update payloads (discriminator ``sessionUpdate``)


class TextContent(msgspec.Struct, tag_field="type", tag="text"):
    text: str


class ToolContent(msgspec.Struct, tag_field="type", tag="content"):
    content: TextContent


class DiffContent(msgspec.Struct, tag_field="type", tag="diff", rename="camel"):
    path: str
    new_text: str
    old_text: str | None = None


class Location(msgspec.Struct):
    path: str


class _Update(msgspec.Struct, tag_field="sessionUpdate", rename="camel", omit_defaults=True):
    pass


class UserMessageChunk(_Update, tag="user_message_chunk"):
    content: Any


class AgentMessageChunk(_Update, tag="agent_message_chunk"):
    content: TextContent


class AgentThoughtChunk(_Update, tag="agent_thought_chunk"):
    content: TextContent


class ToolCallStart(_Update, tag="tool_call"):
    tool_call_id: str
    title: str
    kind: str
    status: str = "pending"
    raw_input: Any = UNSET
    locations: list[Location] | UnsetType = UNSET


class ToolCallUpdate(_Update, tag="tool_call_update"):
    tool_call_id: str
    status: str | UnsetType = UNSET
    title: str | UnsetType = UNSET
    content: list[ToolContent | DiffContent] | UnsetType = UNSET
    raw_output: Any = UNSET


class PlanEntry(msgspec.Struct):
    content: str
    priority: str
    status: str


class PlanUpdate(_Update, tag="plan"):
    entries: list[PlanEntry]


class CurrentModeUpdate(_Update, tag="current_mode_update"):
    current_mode_id: str


class ConfigOptionUpdate(_Update, tag="config_option_update"):
    config_options: list[ConfigOption]


class SessionInfoUpdate(_Update, tag="session_info_update"):
    title: str


class CommandInfo(msgspec.Struct):
    name: str
    description: str


class AvailableCommandsUpdate(_Update, tag="available_commands_update"):
    available_commands: list[CommandInfo]


class SessionUpdateParams(msgspec.Struct, rename="camel"):
    session_id: str
    update: msgspec.Raw


def encode_update(update: _Update) -> msgspec.Raw:
    """Encode an update once; the bytes are both sent and persisted."""
    return msgspec.Raw(_encoder.encode(update))
