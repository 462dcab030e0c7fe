"""ACP v1 (``protocolVersion`` 1) and JSON-RPC 2.0 messages as frozen msgspec Structs.

Wire names are camelCase (``rename="camel"``); ``_meta`` is the Python field ``meta``.
Every wire struct tolerates unknown fields (msgspec ignores them), and fields that are
optional on the wire are omitted when they hold their default (``omit_defaults``), so a
field the spec requires never has a default on a request struct.

Decoding happens in two steps, with one reusable decoder per step and direction:

1. :func:`decode_message` turns one line into a :class:`JsonRpcMessage` envelope whose
   ``params``/``result`` stay :class:`msgspec.Raw` (the result's type depends on the request
   it answers, which only the connection knows).
2. :func:`decode_agent_params` (messages the agent sends: ``session/update``,
   ``session/request_permission``, ``fs/*``, ``terminal/*``) or :func:`decode_client_params`
   (messages the client sends) turns ``params`` into the typed struct for the method;
   :func:`decode_result` does the same for a response.

A ``session/update`` whose ``sessionUpdate`` kind is unknown (or whose known kind has an
unexpected shape) decodes to :class:`UnknownUpdate` holding the raw object: never a crash.
:class:`UnknownUpdate` is decode-only; do not build a msgspec decoder for
:class:`SessionNotification` yourself, use :func:`decode_agent_params`.

Design note: what survives a round trip, and where unmodelled fields go
-----------------------------------------------------------------------
Decoding then encoding a message gives the same JSON back for everything acpfsm models (a
test holds each golden message of the official ACP SDK to it). Two msgspec rules shape the structs:
``omit_defaults`` leaves out a field equal to its default, and it takes an empty list or dict
as equal to an empty default, while a struct-valued field is left out only when it *is* its
default instance (so a decoded ``"mcpCapabilities": {}`` is written back). Hence a list or
object whose mere presence means something (``authMethods: []``, ``sessionCapabilities: {}``
and each capability in it) is typed ``X | None = None``, ``None`` meaning absent. A boolean
or number sent equal to its default (``"audio": false``) is written back by omission, which
ACP reads the same.

msgspec ignores fields a struct does not declare. Where they reach users they are kept:
:func:`unmodelled` returns the members of a raw object that a struct has no field for, nested
where they were (it recurses into struct-valued fields, not into lists), so encoding the
struct and merging them back gives the message again. The stdio transport keeps those of the
agent's ``initialize`` answer in ``InitializeResult.unmodelled`` (the runtime's snapshot
carries that result as ``Execution.agent_capabilities``; ``acpfsm conform`` reports them):
capabilities from a newer ACP, such as ``agentCapabilities.auth`` or ``providers``, are not
lost on the way to the user.
"""

from __future__ import annotations

import functools
from typing import Any, Final, TypeAlias

import msgspec
import msgspec.inspect
from msgspec import UNSET, Raw, Struct, UnsetType, field

__all__ = [
    "CLIENT_INFO_NAME",
    "PROTOCOL_VERSION",
    "AgentCapabilities",
    "AgentMessageChunk",
    "AgentPlanUpdate",
    "AgentThoughtChunk",
    "AudioContent",
    "AuthenticateRequest",
    "AvailableCommand",
    "AvailableCommandsUpdate",
    "CancelNotification",
    "ClientCapabilities",
    "ConfigOptionUpdate",
    "ContentBlock",
    "CreateTerminalRequest",
    "CreateTerminalResponse",
    "CurrentModeUpdate",
    "DeniedOutcome",
    "EmbeddedResource",
    "EmptyResponse",
    "EnvVariable",
    "FileSystemCapability",
    "HttpHeader",
    "ImageContent",
    "Implementation",
    "InitializeRequest",
    "InitializeResponse",
    "JsonRpcError",
    "JsonRpcErrorResponse",
    "JsonRpcMessage",
    "JsonRpcNotification",
    "JsonRpcRequest",
    "JsonRpcResponse",
    "KillTerminalCommandRequest",
    "LoadSessionRequest",
    "LoadSessionResponse",
    "McpCapabilities",
    "McpServerHttp",
    "McpServerSse",
    "McpServerStdio",
    "ModelInfo",
    "NewSessionRequest",
    "NewSessionResponse",
    "PermissionOption",
    "PermissionOutcome",
    "PlanEntry",
    "PromptCapabilities",
    "PromptRequest",
    "PromptResponse",
    "ReadTextFileRequest",
    "ReadTextFileResponse",
    "ReleaseTerminalRequest",
    "RequestId",
    "RequestPermissionRequest",
    "RequestPermissionResponse",
    "ResourceContents",
    "ResourceLink",
    "SelectedOutcome",
    "SessionCapabilities",
    "SessionConfigOption",
    "SessionInfoUpdate",
    "SessionMode",
    "SessionModeState",
    "SessionModelState",
    "SessionNotification",
    "SessionUpdate",
    "SetSessionConfigOptionRequest",
    "SetSessionConfigOptionResponse",
    "SetSessionModeRequest",
    "SetSessionModelRequest",
    "TerminalExitStatus",
    "TerminalOutputRequest",
    "TerminalOutputResponse",
    "TextContent",
    "ToolCallProgress",
    "ToolCallRef",
    "ToolCallStart",
    "UnknownUpdate",
    "UsageUpdate",
    "UserMessageChunk",
    "WaitForTerminalExitRequest",
    "WaitForTerminalExitResponse",
    "WriteTextFileRequest",
    "decode_agent_params",
    "decode_client_params",
    "decode_message",
    "decode_result",
    "decode_session_update",
    "encode",
    "encode_line",
    "text_block",
    "unmodelled",
]

PROTOCOL_VERSION: Final = 1
CLIENT_INFO_NAME: Final = "acpfsm"

RequestId: TypeAlias = int | str


class _Wire(Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """Base of every ACP payload: camelCase names, tolerant of unknown fields, ``_meta``."""

    meta: dict[str, Any] | None = field(default=None, name="_meta")


# --------------------------------------------------------------------------------------------
# JSON-RPC 2.0 envelopes


class JsonRpcError(Struct, frozen=True, kw_only=True, omit_defaults=True):
    code: int
    message: str = ""
    data: Any = None


class JsonRpcMessage(Struct, frozen=True, kw_only=True):
    """Any incoming JSON-RPC message. Which fields are set tells what it is:
    ``method`` and ``id`` → request; ``method`` only → notification; ``result`` → response;
    ``error`` → error response (``id`` may be null or, from some agents, absent)."""

    jsonrpc: str | UnsetType = UNSET
    id: RequestId | UnsetType | None = UNSET
    method: str | UnsetType = UNSET
    params: Raw | UnsetType = UNSET
    result: Raw | UnsetType = UNSET
    error: JsonRpcError | UnsetType = UNSET


class JsonRpcRequest(Struct, frozen=True, kw_only=True):
    id: RequestId
    method: str
    params: Any = None
    jsonrpc: str = "2.0"


class JsonRpcNotification(Struct, frozen=True, kw_only=True):
    method: str
    params: Any = None
    jsonrpc: str = "2.0"


class JsonRpcResponse(Struct, frozen=True, kw_only=True):
    id: RequestId
    result: Any = None
    jsonrpc: str = "2.0"


class JsonRpcErrorResponse(Struct, frozen=True, kw_only=True):
    id: RequestId | None
    error: JsonRpcError
    jsonrpc: str = "2.0"


# --------------------------------------------------------------------------------------------
# Content blocks (tag: ``type``)


class TextContent(_Wire, frozen=True, kw_only=True, tag_field="type", tag="text"):
    text: str
    annotations: Any = None


class ImageContent(_Wire, frozen=True, kw_only=True, tag_field="type", tag="image"):
    data: str
    mime_type: str
    uri: str | None = None
    annotations: Any = None


class AudioContent(_Wire, frozen=True, kw_only=True, tag_field="type", tag="audio"):
    data: str
    mime_type: str
    annotations: Any = None


class ResourceLink(_Wire, frozen=True, kw_only=True, tag_field="type", tag="resource_link"):
    uri: str
    name: str
    mime_type: str | None = None
    title: str | None = None
    description: str | None = None
    size: int | None = None
    annotations: Any = None


class ResourceContents(_Wire, frozen=True, kw_only=True):
    """Text (``text``) or binary (``blob``, base64) contents of an embedded resource."""

    uri: str
    mime_type: str | None = None
    text: str | None = None
    blob: str | None = None


class EmbeddedResource(_Wire, frozen=True, kw_only=True, tag_field="type", tag="resource"):
    resource: ResourceContents
    annotations: Any = None


ContentBlock: TypeAlias = (
    TextContent | ImageContent | AudioContent | ResourceLink | EmbeddedResource
)


def text_block(text: str) -> TextContent:
    return TextContent(text=text)


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


# --------------------------------------------------------------------------------------------
# session/update (tag: ``sessionUpdate``)


class UserMessageChunk(
    _Wire, frozen=True, kw_only=True, tag_field="sessionUpdate", tag="user_message_chunk"
):
    content: ContentBlock
    message_id: str | None = None


class AgentMessageChunk(
    _Wire, frozen=True, kw_only=True, tag_field="sessionUpdate", tag="agent_message_chunk"
):
    content: ContentBlock
    message_id: str | None = None


class AgentThoughtChunk(
    _Wire, frozen=True, kw_only=True, tag_field="sessionUpdate", tag="agent_thought_chunk"
):
    content: ContentBlock
    message_id: str | None = None


class _ToolCallBody(_Wire, frozen=True, kw_only=True):
    """Fields of a tool call; ``None`` means absent on the wire. ``content`` items are
    ``{type: content|diff|terminal, …}`` and ``locations`` ``{path, line?}``, kept as dicts."""

    tool_call_id: str = ""
    title: str | None = None
    kind: str | None = None
    status: str | None = None
    content: list[dict[str, Any]] | None = None
    locations: list[dict[str, Any]] | None = None
    raw_input: Any = None
    raw_output: Any = None


class ToolCallStart(
    _ToolCallBody, frozen=True, kw_only=True, tag_field="sessionUpdate", tag="tool_call"
):
    pass


class ToolCallProgress(
    _ToolCallBody, frozen=True, kw_only=True, tag_field="sessionUpdate", tag="tool_call_update"
):
    pass


class ToolCallRef(_ToolCallBody, frozen=True, kw_only=True):
    """The ``toolCall`` of a permission request (an untagged tool-call update)."""


class PlanEntry(_Wire, frozen=True, kw_only=True):
    content: str
    priority: str = "medium"
    status: str = "pending"


class AgentPlanUpdate(_Wire, frozen=True, kw_only=True, tag_field="sessionUpdate", tag="plan"):
    entries: list[PlanEntry] = []


class AvailableCommand(_Wire, frozen=True, kw_only=True):
    name: str
    description: str = ""
    input: dict[str, Any] | None = None


class AvailableCommandsUpdate(
    _Wire, frozen=True, kw_only=True, tag_field="sessionUpdate", tag="available_commands_update"
):
    available_commands: list[AvailableCommand] = []


class CurrentModeUpdate(
    _Wire, frozen=True, kw_only=True, tag_field="sessionUpdate", tag="current_mode_update"
):
    current_mode_id: str = ""


class ConfigOptionUpdate(
    _Wire, frozen=True, kw_only=True, tag_field="sessionUpdate", tag="config_option_update"
):
    config_options: list[SessionConfigOption] = []


class SessionInfoUpdate(
    _Wire, frozen=True, kw_only=True, tag_field="sessionUpdate", tag="session_info_update"
):
    title: str | None = None
    updated_at: str | None = None


class UsageUpdate(_Wire, frozen=True, kw_only=True, tag_field="sessionUpdate", tag="usage_update"):
    used: int = 0
    size: int = 0
    cost: dict[str, Any] | None = None


SessionUpdate: TypeAlias = (
    UserMessageChunk
    | AgentMessageChunk
    | AgentThoughtChunk
    | ToolCallStart
    | ToolCallProgress
    | AgentPlanUpdate
    | AvailableCommandsUpdate
    | CurrentModeUpdate
    | ConfigOptionUpdate
    | SessionInfoUpdate
    | UsageUpdate
)


class UnknownUpdate(Struct, frozen=True, kw_only=True):
    """A ``session/update`` we do not model, or a known kind we could not decode (``error``
    says why). ``payload`` is the whole ``update`` object. Decode-only."""

    kind: str
    payload: dict[str, Any]
    error: str = ""


class SessionNotification(_Wire, frozen=True, kw_only=True):
    session_id: str
    update: SessionUpdate | UnknownUpdate


class _RawSessionNotification(_Wire, frozen=True, kw_only=True):
    session_id: str
    update: Raw


# --------------------------------------------------------------------------------------------
# Agent → client requests


class PermissionOption(_Wire, frozen=True, kw_only=True):
    """``kind``: allow_once, allow_always, reject_once, reject_always."""

    option_id: str
    name: str = ""
    kind: str = ""


class RequestPermissionRequest(_Wire, frozen=True, kw_only=True):
    session_id: str
    tool_call: ToolCallRef = ToolCallRef()
    options: list[PermissionOption] = []


class SelectedOutcome(_Wire, frozen=True, kw_only=True, tag_field="outcome", tag="selected"):
    option_id: str


class DeniedOutcome(_Wire, frozen=True, kw_only=True, tag_field="outcome", tag="cancelled"):
    pass


PermissionOutcome: TypeAlias = SelectedOutcome | DeniedOutcome


class RequestPermissionResponse(_Wire, frozen=True, kw_only=True):
    outcome: PermissionOutcome


class ReadTextFileRequest(_Wire, frozen=True, kw_only=True):
    """``line`` is 1-based; ``limit`` is a number of lines."""

    session_id: str
    path: str
    line: int | None = None
    limit: int | None = None


class ReadTextFileResponse(_Wire, frozen=True, kw_only=True):
    content: str


class WriteTextFileRequest(_Wire, frozen=True, kw_only=True):
    session_id: str
    path: str
    content: str


class CreateTerminalRequest(_Wire, frozen=True, kw_only=True):
    session_id: str
    command: str
    args: list[str] = []
    env: list[EnvVariable] = []
    cwd: str | None = None
    output_byte_limit: int | None = None


class CreateTerminalResponse(_Wire, frozen=True, kw_only=True):
    terminal_id: str


class _TerminalRef(_Wire, frozen=True, kw_only=True):
    """The params of every ``terminal/*`` request but ``terminal/create``."""

    session_id: str
    terminal_id: str


class TerminalOutputRequest(_TerminalRef, frozen=True, kw_only=True):
    pass


class TerminalExitStatus(_Wire, frozen=True, kw_only=True):
    exit_code: int | None = None
    signal: str | None = None


class TerminalOutputResponse(_Wire, frozen=True, kw_only=True):
    output: str
    truncated: bool
    exit_status: TerminalExitStatus | None = None


class ReleaseTerminalRequest(_TerminalRef, frozen=True, kw_only=True):
    pass


class WaitForTerminalExitRequest(_TerminalRef, frozen=True, kw_only=True):
    pass


class WaitForTerminalExitResponse(TerminalExitStatus, frozen=True, kw_only=True):
    """The exit status itself (``exitCode``, ``signal``)."""


class KillTerminalCommandRequest(_TerminalRef, frozen=True, kw_only=True):
    pass


# --------------------------------------------------------------------------------------------
# Method tables and decoders

#: params of the requests and notifications a client sends (the agent decodes these)
CLIENT_PARAMS: Final[dict[str, type[Struct]]] = {
    "initialize": InitializeRequest,
    "authenticate": AuthenticateRequest,
    "session/new": NewSessionRequest,
    "session/load": LoadSessionRequest,
    "session/prompt": PromptRequest,
    "session/cancel": CancelNotification,
    "session/set_mode": SetSessionModeRequest,
    "session/set_config_option": SetSessionConfigOptionRequest,
    "session/set_model": SetSessionModelRequest,
}

#: params of the requests and notifications an agent sends (the client decodes these);
#: ``session/update`` is decoded specially (see :func:`decode_agent_params`)
AGENT_PARAMS: Final[dict[str, type[Struct]]] = {
    "session/update": SessionNotification,
    "session/request_permission": RequestPermissionRequest,
    "fs/read_text_file": ReadTextFileRequest,
    "fs/write_text_file": WriteTextFileRequest,
    "terminal/create": CreateTerminalRequest,
    "terminal/output": TerminalOutputRequest,
    "terminal/release": ReleaseTerminalRequest,
    "terminal/wait_for_exit": WaitForTerminalExitRequest,
    "terminal/kill": KillTerminalCommandRequest,
}

#: result type of each request, by method (both directions)
RESULTS: Final[dict[str, type[Struct]]] = {
    "initialize": InitializeResponse,
    "authenticate": EmptyResponse,
    "session/new": NewSessionResponse,
    "session/load": LoadSessionResponse,
    "session/prompt": PromptResponse,
    "session/set_mode": EmptyResponse,
    "session/set_config_option": SetSessionConfigOptionResponse,
    "session/set_model": EmptyResponse,
    "session/request_permission": RequestPermissionResponse,
    "fs/read_text_file": ReadTextFileResponse,
    "fs/write_text_file": EmptyResponse,
    "terminal/create": CreateTerminalResponse,
    "terminal/output": TerminalOutputResponse,
    "terminal/release": EmptyResponse,
    "terminal/wait_for_exit": WaitForTerminalExitResponse,
    "terminal/kill": EmptyResponse,
}

_message_decoder = msgspec.json.Decoder(JsonRpcMessage)
_encoder = msgspec.json.Encoder()
_update_decoder: msgspec.json.Decoder[SessionUpdate] = msgspec.json.Decoder(SessionUpdate)
_raw_notification_decoder = msgspec.json.Decoder(_RawSessionNotification)
_object_decoder = msgspec.json.Decoder(dict[str, Any])
# one decoder per typed params/result, made on its first use: building all ~40 at import
# (msgspec reads each class's annotations) was a tenth of ``import acpfsm.runtime``'s own time
_decoders: dict[type[Struct], msgspec.json.Decoder[Any]] = {}


def encode(message: Any) -> bytes:
    """Encode one message (no trailing newline; msgspec never emits raw newlines)."""
    return _encoder.encode(message)


def encode_line(message: Any) -> bytearray:
    """Encode one message as its line, the newline appended in place: one buffer, where
    ``encode(message) + b"\\n"`` holds two copies of a large message (a whole file read) at
    once."""
    line = bytearray()
    _encoder.encode_into(message, line)
    line += b"\n"
    return line


def decode_message(line: bytes | str) -> JsonRpcMessage:
    """Decode one line into an envelope. Raises ``msgspec.DecodeError`` (bad JSON or not a
    JSON-RPC object); the connection maps it to :class:`~acpfsm.adapters.errors.RemoteProtocolError`."""
    return _message_decoder.decode(line)


def _decode_typed(cls: type[Struct], raw: Raw | bytes | None) -> Any:
    data = b"null" if raw is None else raw
    decoder = _decoders.get(cls)
    if decoder is None:
        decoder = _decoders[cls] = msgspec.json.Decoder(cls | None)
    value = decoder.decode(data)
    if value is not None:
        return value
    try:
        return cls()
    except TypeError:
        raise msgspec.ValidationError(f"Expected `object`, got `null` for {cls.__name__}") from None


def decode_session_update(raw: Raw | bytes) -> SessionUpdate | UnknownUpdate:
    """Decode one ``update`` object; anything we cannot model becomes :class:`UnknownUpdate`."""
    try:
        return _update_decoder.decode(raw)
    except msgspec.ValidationError as exc:
        obj = _object_decoder.decode(raw)  # still raises DecodeError if not an object
        kind = obj.get("sessionUpdate")
        return UnknownUpdate(
            kind=kind if isinstance(kind, str) else "", payload=obj, error=str(exc)
        )


def _decode_session_notification(raw: Raw | bytes) -> SessionNotification:
    envelope = _raw_notification_decoder.decode(raw)
    return SessionNotification(
        session_id=envelope.session_id,
        update=decode_session_update(envelope.update),
        meta=envelope.meta,
    )


def decode_agent_params(method: str, raw: Raw | bytes | None) -> Any:
    """Typed params of a message the agent sent, or ``None`` when ``method`` is not modelled
    (an extension such as ``_auth/status_update``). Raises ``msgspec.DecodeError`` when the
    params do not fit the method (answer ``-32602 Invalid params``)."""
    if method == "session/update":
        return _decode_session_notification(b"null" if raw is None else raw)
    cls = AGENT_PARAMS.get(method)
    return None if cls is None else _decode_typed(cls, raw)


def decode_client_params(method: str, raw: Raw | bytes | None) -> Any:
    """Typed params of a message the client sent, or ``None`` when ``method`` is unknown."""
    cls = CLIENT_PARAMS.get(method)
    return None if cls is None else _decode_typed(cls, raw)


@functools.cache
def _nested_structs(cls: type[Struct]) -> dict[str, type[Struct] | None]:
    """``cls``'s fields by wire name: the struct type a field holds (alone or with ``None``),
    else ``None``. A tagged struct's tag field counts as declared."""
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    out: dict[str, type[Struct] | None] = {}
    if info.tag_field is not None:
        out[info.tag_field] = None
    for f in info.fields:
        kind = f.type
        options = kind.types if isinstance(kind, msgspec.inspect.UnionType) else (kind,)
        structs = [t.cls for t in options if isinstance(t, msgspec.inspect.StructType)]
        out[f.encode_name] = structs[0] if len(structs) == 1 else None
    return out


def unmodelled(cls: type[Struct], value: Raw | bytes | dict[str, Any] | None) -> dict[str, Any]:
    """The members of the JSON object ``value`` (raw or parsed) that ``cls`` declares no field
    for, nested where they were: recursing into struct-valued fields, not into lists. ``{}``
    when there are none or ``value`` is not an object. See the module docstring."""
    obj = value if isinstance(value, dict) else msgspec.json.decode(value or b"null")
    if not isinstance(obj, dict):
        return {}
    fields = _nested_structs(cls)
    out: dict[str, Any] = {}
    for key, item in obj.items():
        if key not in fields:
            out[key] = item
            continue
        nested = fields[key]
        if nested is not None and isinstance(item, dict):
            inner = unmodelled(nested, item)
            if inner:
                out[key] = inner
    return out


def decode_result(method: str, raw: Raw | bytes | None) -> Any:
    """Typed result of ``method``; ``null`` or ``{}`` give the all-default struct."""
    cls = RESULTS.get(method)
    if cls is None:
        raise KeyError(method)
    return _decode_typed(cls, raw)
