"""agentctl's wire shapes: the WebSocket envelope (kandev apps/backend/pkg/websocket/message.go),
its AgentEvent frames (internal/agentctl/types/streams/agent.go) and its error texts, mapped onto
acpfsm's events and errors.

Two event formats are understood, kandev HEAD's and the v0.95.1 binary's (KANDEV.md):
``turn_started`` and ``control_turn_id`` are kept; a v0.95.1 prompt ``error`` (the bare RPC
message plus ``provider_error.rpc_code``) gets back the compact JSON projection HEAD sends
(``{"code":-32603,"message":"Internal error"}``) so that it classifies like a stdio one.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

import msgspec

from ..errors import AcpfsmError, AgentctlError, AgentRequestError, TransportClosed
from ..events import (
    AgentCapabilities,
    AgentEvent,
    AuthRequired,
    AvailableCommands,
    Complete,
    ConfigOption,
    ContextWindow,
    ErrorEvent,
    ForegroundIdle,
    MessageChunk,
    ModeInfo,
    ModelInfo,
    PermissionCancelled,
    PermissionOption,
    PermissionRequest,
    Plan,
    PlanEntry,
    Reasoning,
    SessionInfo,
    SessionMode,
    SessionModels,
    SessionStatus,
    ToolCall,
    ToolUpdate,
    TurnStarted,
    Unknown,
)

__all__ = [
    "ACP_METHODS",
    "CLIENT_PREFIXES",
    "Envelope",
    "WireEvent",
    "config_options",
    "decode_envelope",
    "decode_wire_event",
    "encode_reply",
    "encode_request",
    "error_from_text",
    "is_process_exit",
    "models",
    "to_event",
]

#: The text kandev's Go client puts before an error frame's message (``agent.go``).
CLIENT_PREFIXES: Final[Mapping[str, str]] = {
    "agent.initialize": "initialize failed",
    "agent.session.new": "agent.session.new failed",
    "agent.session.load": "load session failed",
    "agent.prompt": "prompt failed",
    "agent.cancel": "cancel failed",
    "agent.session.set_mode": "set mode failed",
    "agent.session.set_model": "set model failed",
    "agent.session.set_config_option": "set config option failed",
    "agent.session.authenticate": "authenticate failed",
    "agent.permissions.respond": "permission response failed",
}

#: The ACP method behind each action (for :attr:`AgentRequestError.method`).
ACP_METHODS: Final[Mapping[str, str]] = {
    "agent.initialize": "initialize",
    "agent.session.new": "session/new",
    "agent.session.load": "session/load",
    "agent.prompt": "session/prompt",
    "agent.cancel": "session/cancel",
    "agent.session.set_mode": "session/set_mode",
    "agent.session.set_model": "session/set_model",
    "agent.session.set_config_option": "session/set_config_option",
    "agent.session.authenticate": "authenticate",
}

#: Texts that say the agent process (or agentctl's pipe to it) is gone. The first three are
#: the seed's transport-dead phrases; ``file already closed`` is agentctl's cancel write to a
#: dead agent's stdin, ``broken pipe`` its sibling.
_DEAD_PHRASES: Final = (
    "peer disconnected",
    "connection closed",
    "notification queue overflow",
    "file already closed",
    "broken pipe",
)


class Envelope(msgspec.Struct, kw_only=True):
    """One text frame, read loosely: requests and answers carry ``id``/``action``/``payload``;
    an AgentEvent frame has only its own ``type`` (and no ``id``)."""

    id: str = ""
    type: str = ""
    action: str = ""
    payload: msgspec.Raw = msgspec.Raw(b"null")


_envelope_decoder = msgspec.json.Decoder(Envelope)
_encoder = msgspec.json.Encoder()


def decode_envelope(raw: str | bytes) -> Envelope:
    """Raises ``msgspec.DecodeError`` for a frame that is not a JSON object."""
    return _envelope_decoder.decode(raw)


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def encode_request(action: str, payload: Any) -> tuple[str, bytes]:
    """A fresh request envelope: ``(id, frame)``."""
    request_id = str(uuid.uuid4())
    frame = {
        "id": request_id,
        "type": "request",
        "action": action,
        "payload": payload,
        "timestamp": _now(),
    }
    return request_id, _encoder.encode(frame)


def encode_reply(request_id: str, action: str, *, payload: Any = None, error: Any = None) -> bytes:
    """A ``response`` (``payload``) or ``error`` (``error`` = ``{"code","message"}``) frame."""
    frame = {
        "id": request_id,
        "type": "error" if error is not None else "response",
        "action": action,
        "payload": error if error is not None else payload,
        "timestamp": _now(),
    }
    return _encoder.encode(frame)


# --------------------------------------------------------------------------- errors


def _trailing_rpc_error(text: str) -> tuple[int, dict[str, Any]] | None:
    """The JSON-RPC error object that closes ``text`` (``…: {"code":N,"message":…}``), as
    ``(offset of its "{", object)``; None when the text does not end with one."""
    decoder = json.JSONDecoder()
    stripped = text.rstrip()
    offset = stripped.find("{")
    while offset >= 0:
        try:
            obj, end = decoder.raw_decode(stripped, offset)
        except ValueError:
            pass
        else:
            if (
                end == len(stripped)
                and isinstance(obj, dict)
                and type(obj.get("code")) is int
                and isinstance(obj.get("message"), str)
            ):
                return offset, obj
        offset = stripped.find("{", offset + 1)
    return None


#: Actions whose failure text is judged as text alone, as kandev does: no JSON-RPC error is
#: rebuilt from it and no death is read into it.
#:
#: * ``agent.session.load``: kandev classifies agentctl's load failure by its message
#:   (seed ``isSessionLoadFallbackErr``: "Errors from the agentctl WebSocket boundary are
#:   message-only"), so ``…: {"code":-32002,…}`` and the −32601 shape are *inconclusive*
#:   there (the launch fails, the stored ACP session id is kept); only the canonical phrases
#:   and the Codex rollout shape (read from the text) fall back to session/new. Over stdio
#:   the error is structured and classified by its code.
#: * ``agent.cancel``: kandev lifecycle/manager_interaction.go ``CancelAgent`` tolerates only
#:   stream-not-connected and not-acknowledged; any other answer, ``file already closed``
#:   included, is ``failed to cancel agent: …`` (acpfsm's ``CancelFailed``).
TEXT_ONLY_ACTIONS: Final = frozenset({"agent.session.load"})
NO_DEATH_ACTIONS: Final = frozenset({"agent.cancel"})


def error_from_text(action: str, message: str, *, code: str = "") -> AcpfsmError:
    """The acpfsm error for agentctl's failure ``message`` on ``action`` (an error frame, or a
    ``success:false`` answer). The text becomes what kandev's client would print
    (``load session failed: failed to load session: {…}``). A closing JSON-RPC error object is
    rebuilt as a structured :class:`AgentRequestError` (with that text as its ``str``), so the
    charts decide as they do on a stdio error, except for the actions of
    :data:`TEXT_ONLY_ACTIONS` (session/load: judged by its text, as kandev does); a dead agent
    is :class:`TransportClosed` (never for :data:`NO_DEATH_ACTIONS`: a cancel's failure is
    its own); anything else is :class:`AgentctlError`."""
    prefix = CLIENT_PREFIXES.get(action, f"{action} failed")
    text = f"{prefix}: {message}" if message else prefix
    structured: AgentRequestError | None = None
    found = None if action in TEXT_ONLY_ACTIONS else _trailing_rpc_error(text)
    if found is not None:
        offset, obj = found
        structured = AgentRequestError(
            obj["code"],
            obj["message"],
            obj.get("data"),
            method=ACP_METHODS.get(action, action),
            prefix=text[:offset].rstrip().removesuffix(":"),
        )
    lowered = text.lower()
    if action not in NO_DEATH_ACTIONS and any(phrase in lowered for phrase in _DEAD_PHRASES):
        dead = TransportClosed(text)
        dead.__cause__ = structured
        return dead
    if structured is not None:
        return structured
    return AgentctlError(text, code=code, action=action)


# --------------------------------------------------------------------------- events


class WireEvent(msgspec.Struct, kw_only=True):
    """agentctl's ``AgentEvent``, every field optional and loosely typed."""

    type: str
    session_id: str = ""
    prompt_generation: int = 0
    control_turn_id: int = 0
    text: str = ""
    role: str = ""
    protocol_message_id: str = ""
    content_blocks: list[dict[str, Any]] | None = None
    reasoning_text: str = ""
    tool_call_id: str = ""
    parent_tool_call_id: str = ""
    tool_name: str = ""
    tool_title: str = ""
    tool_status: str = ""
    tool_call_contents: list[dict[str, Any]] | None = None
    plan_entries: list[dict[str, Any]] | None = None
    error: str = ""
    provider_error: dict[str, Any] | None = None
    request_id: str = ""
    pending_id: str = ""
    permission_title: str = ""
    permission_options: list[dict[str, Any]] | None = None
    action_type: str = ""
    action_details: Any = None
    session_status: str = ""
    data: dict[str, Any] | None = None
    context_window_size: int = 0
    context_window_used: int = 0
    available_commands: list[dict[str, Any]] | None = None
    current_mode_id: str = ""
    available_modes: list[dict[str, Any]] | None = None
    supports_image: bool = False
    supports_audio: bool = False
    supports_embedded_context: bool = False
    supports_prompt_queueing: bool = False
    auth_methods: list[dict[str, Any]] | None = None
    current_model_id: str = ""
    session_models: list[dict[str, Any]] | None = None
    config_options: list[dict[str, Any]] | None = None
    config_baseline_candidate: list[dict[str, Any]] | None = None
    original_config_candidate: list[dict[str, Any]] | None = None
    session_title: str = ""
    session_updated_at: str = ""
    usage: dict[str, Any] | None = None


_wire_decoder = msgspec.json.Decoder(WireEvent)


def _str(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def models(items: list[dict[str, Any]] | None) -> list[ModelInfo]:
    return [
        ModelInfo(
            model_id=_str(m.get("model_id")),
            name=_str(m.get("name")),
            description=_str(m.get("description")),
        )
        for m in items or ()
        if isinstance(m, dict) and m.get("model_id")
    ]


def config_options(items: list[dict[str, Any]] | None) -> list[ConfigOption]:
    out: list[ConfigOption] = []
    for o in items or ():
        if not isinstance(o, dict) or not o.get("id"):
            continue
        options = o.get("options")
        out.append(
            ConfigOption(
                id=_str(o.get("id")),
                name=_str(o.get("name")),
                type=_str(o.get("type")) or "select",
                category=_str(o.get("category")),
                current_value=_str(o.get("current_value")),
                options=[x for x in options if isinstance(x, dict)]
                if isinstance(options, list)
                else [],
            )
        )
    return out


def _modes(items: list[dict[str, Any]] | None) -> list[ModeInfo]:
    return [
        ModeInfo(
            id=_str(m.get("id")), name=_str(m.get("name")), description=_str(m.get("description"))
        )
        for m in items or ()
        if isinstance(m, dict) and m.get("id")
    ]


def _head_projection(event: WireEvent) -> str:
    """v0.95.1 sends a prompt error as the bare RPC message plus ``provider_error.rpc_code``;
    HEAD sends the RequestError's compact JSON. Rebuild HEAD's text (without ``data``, which
    v0.95.1 does not forward) so classification sees the JSON-RPC code."""
    provider = event.provider_error
    if not provider or provider.get("source") != "acp_prompt":
        return event.error
    code = provider.get("rpc_code")
    message = provider.get("message")
    if type(code) is not int or not isinstance(message, str) or event.error != message:
        return event.error
    return AgentRequestError(code, message).json_projection()


def is_process_exit(event: WireEvent) -> bool:
    """agentctl's own ``error`` event for an agent process that exited with an error
    (``Agent process exited with code N[: stderr…]``, ``data.exit_code``; agentctl's process
    manager, ``waitForExit``)."""
    return (
        event.type == "error"
        and event.prompt_generation == 0
        and isinstance(event.data, dict)
        and type(event.data.get("exit_code")) is int
        and event.error.startswith("Agent process exited")
    )


def decode_wire_event(raw: str | bytes) -> WireEvent:
    """Raises ``msgspec.DecodeError`` (callers report a protocol error)."""
    return _wire_decoder.decode(raw)


def to_event(event: WireEvent, raw: str | bytes) -> AgentEvent:
    """The acpfsm event for one agentctl AgentEvent frame (unmodelled types → ``Unknown``)."""
    sid = event.session_id
    gen = event.prompt_generation
    data = event.data or {}
    match event.type:
        case "message_chunk":
            return MessageChunk(
                session_id=sid,
                prompt_generation=gen,
                text=event.text,
                # agentctl marks only replayed user chunks ``role: "user"``; any other role
                # (none, or one acpfsm does not know) is the agent's own text
                role="user" if event.role == "user" else "assistant",
                protocol_message_id=event.protocol_message_id,
                content_blocks=list(event.content_blocks or ()),
            )
        case "reasoning":
            return Reasoning(
                session_id=sid,
                prompt_generation=gen,
                reasoning_text=event.reasoning_text,
                protocol_message_id=event.protocol_message_id,
            )
        case "tool_call":
            return ToolCall(
                session_id=sid,
                prompt_generation=gen,
                tool_call_id=event.tool_call_id,
                tool_name=event.tool_name,
                tool_title=event.tool_title,
                tool_status=event.tool_status or "in_progress",
                parent_tool_call_id=event.parent_tool_call_id,
                tool_call_contents=list(event.tool_call_contents or ()),
            )
        case "tool_update":
            return ToolUpdate(
                session_id=sid,
                prompt_generation=gen,
                tool_call_id=event.tool_call_id,
                tool_status=event.tool_status,
                tool_title=event.tool_title,
                tool_call_contents=list(event.tool_call_contents or ()),
            )
        case "plan":
            return Plan(
                session_id=sid,
                prompt_generation=gen,
                plan_entries=[
                    PlanEntry(
                        description=_str(e.get("description")),
                        status=_str(e.get("status")) or "pending",
                        priority=_str(e.get("priority")) or "medium",
                    )
                    for e in event.plan_entries or ()
                    if isinstance(e, dict)
                ],
            )
        case "complete":
            return Complete(
                session_id=sid,
                prompt_generation=gen,
                stop_reason=_str(data.get("stop_reason")) or "end_turn",
                usage=event.usage,
                data=dict(data),
                control_turn_id=event.control_turn_id,
                # an error completion's text: the frame's error wins over its text
                error=(event.error or event.text) if data.get("is_error") else "",
            )
        case "error":
            return ErrorEvent(
                session_id=sid,
                prompt_generation=gen,
                error=_head_projection(event) or "agent error",
                data=dict(data),
                provider_error=event.provider_error,
                control_turn_id=event.control_turn_id,
            )
        case "turn_started":
            return TurnStarted(session_id=sid, prompt_generation=gen)
        case "permission_request":
            return PermissionRequest(
                session_id=sid,
                prompt_generation=gen,
                request_id=event.request_id or event.pending_id,
                tool_call_id=event.tool_call_id,
                permission_title=event.permission_title,
                options=[
                    PermissionOption(
                        option_id=_str(o.get("option_id")),
                        name=_str(o.get("name")),
                        kind=_str(o.get("kind")),
                    )
                    for o in event.permission_options or ()
                    if isinstance(o, dict)
                ],
                tool_kind=event.action_type,
                raw_input=event.action_details,
            )
        case "permission_cancelled":
            return PermissionCancelled(
                session_id=sid, request_id=event.request_id or event.pending_id
            )
        case "session_status":
            return SessionStatus(session_id=sid, session_status=event.session_status)
        case "context_window":
            return ContextWindow(
                session_id=sid,
                context_window_size=event.context_window_size,
                context_window_used=event.context_window_used,
            )
        case "foreground_idle":
            return ForegroundIdle(
                session_id=sid,
                prompt_generation=gen,
                prompt_handoff=data.get("prompt_handoff") is True,
            )
        case "available_commands":
            return AvailableCommands(
                session_id=sid, available_commands=list(event.available_commands or ())
            )
        case "session_mode":
            return SessionMode(
                session_id=sid,
                current_mode_id=event.current_mode_id,
                available_modes=_modes(event.available_modes),
            )
        case "session_models":
            return SessionModels(
                session_id=sid,
                current_model_id=event.current_model_id,
                session_models=models(event.session_models),
                config_options=config_options(event.config_options),
                config_baseline_candidate=None
                if event.config_baseline_candidate is None
                else config_options(event.config_baseline_candidate),
                original_config_candidate=None
                if event.original_config_candidate is None
                else config_options(event.original_config_candidate),
                data=dict(data),
            )
        case "session_info":
            return SessionInfo(
                session_id=sid,
                session_title=event.session_title,
                session_updated_at=event.session_updated_at,
            )
        case "agent_capabilities":
            return AgentCapabilities(
                session_id=sid,
                supports_image=event.supports_image,
                supports_audio=event.supports_audio,
                supports_embedded_context=event.supports_embedded_context,
                supports_prompt_queueing=event.supports_prompt_queueing,
                auth_methods=list(event.auth_methods or ()),
            )
        case "auth_required":
            return AuthRequired(
                session_id=sid, error=event.error, auth_methods=list(event.auth_methods or ())
            )
        case _:
            try:
                payload = json.loads(raw)
            except ValueError:  # pragma: no cover - it decoded as a WireEvent just before
                payload = {}
            return Unknown(
                session_id=sid,
                prompt_generation=gen,
                kind=event.type,
                payload=payload if isinstance(payload, dict) else {},
            )
