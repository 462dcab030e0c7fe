"""ACP v1 (``protocolVersion`` 1) and JSON-RPC 2.0 messages as frozen msgspec Structs.

Wire names are camelCase (``rename="camel"``); ``_meta`` is the Python field ``meta``.
Every wire struct tolerates unknown fields (msgspec ignores them), and fields that are
optional on the wire are omitted when they hold their default (``omit_defaults``), so a
field the spec requires never has a default on a request struct.

The structs live by concern in ``messages_base`` (the base and the constants),
``messages_content`` (content blocks), ``messages_session`` (initialize and the session
methods), ``messages_update`` (``session/update`` kinds) and ``messages_client`` (what the agent
asks the client); this module holds the JSON-RPC envelopes, the method tables and the decoders,
and exports every name: import them from here. The official ACP schema is the authority on
what is sent: a test validates every kind of message the client writes against it
(``tests/adapters/test_own_messages_schema.py``); decoding stays tolerant (a field the schema
requires but an agent left out gets its default here, and ``acpfsm conform`` reports it).

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
from typing import Any, Final

import msgspec
import msgspec.inspect
from msgspec import UNSET, Raw, Struct, UnsetType

from .messages_base import (
    CLIENT_INFO_NAME,
    PROTOCOL_VERSION,
    RequestId,
)
from .messages_client import (
    CreateTerminalRequest,
    CreateTerminalResponse,
    DeniedOutcome,
    KillTerminalCommandRequest,
    PermissionOption,
    PermissionOutcome,
    ReadTextFileRequest,
    ReadTextFileResponse,
    ReleaseTerminalRequest,
    RequestPermissionRequest,
    RequestPermissionResponse,
    SelectedOutcome,
    TerminalExitStatus,
    TerminalOutputRequest,
    TerminalOutputResponse,
    WaitForTerminalExitRequest,
    WaitForTerminalExitResponse,
    WriteTextFileRequest,
)
from .messages_content import (
    AudioContent,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    ResourceContents,
    ResourceLink,
    TextContent,
    text_block,
)
from .messages_session import (
    AgentCapabilities,
    AuthenticateRequest,
    CancelNotification,
    ClientCapabilities,
    EmptyResponse,
    EnvVariable,
    FileSystemCapability,
    HttpHeader,
    Implementation,
    InitializeRequest,
    InitializeResponse,
    LoadSessionRequest,
    LoadSessionResponse,
    McpCapabilities,
    McpServerHttp,
    McpServerSse,
    McpServerStdio,
    ModelInfo,
    NewSessionRequest,
    NewSessionResponse,
    PromptCapabilities,
    PromptRequest,
    PromptResponse,
    SessionCapabilities,
    SessionConfigOption,
    SessionMode,
    SessionModelState,
    SessionModeState,
    SetSessionConfigOptionRequest,
    SetSessionConfigOptionResponse,
    SetSessionModelRequest,
    SetSessionModeRequest,
)
from .messages_update import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AvailableCommand,
    AvailableCommandsUpdate,
    ConfigOptionUpdate,
    CurrentModeUpdate,
    PlanEntry,
    SessionInfoUpdate,
    SessionNotification,
    SessionUpdate,
    ToolCallProgress,
    ToolCallRef,
    ToolCallStart,
    UnknownUpdate,
    UsageUpdate,
    UserMessageChunk,
    _RawSessionNotification,
)

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
