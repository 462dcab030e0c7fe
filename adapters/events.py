"""The agent event vocabulary every transport emits (agentctl's ``AgentEvent``, kandev
internal/agentctl/types/streams/agent.go).

Events are frozen, tagged msgspec Structs (``type`` is the tag, snake_case like agentctl's
``AgentEvent``). A transport yields them in order on one stream; the runtime routes the few
lifecycle-relevant ones (``complete``, ``error``, ``foreground_idle`` …) into charts and
passes high-rate content (``message_chunk``, ``reasoning``) straight to subscribers.

Events, and the structs inside them, are not tracked by the garbage collector (``gc=False``):
they are acyclic data, and a hub keeps thousands of them for late subscribers, which would
otherwise lengthen every young-generation collection. A reference cycle through an event (a
list inside it made to hold the event) would therefore never be collected: do not build one.

``prompt_generation`` is the generation the event belongs to; 0 is the wildcard/legacy value
(kandev lifecycle/manager_events.go ``claimPromptCompletion`` accepts it without a claim).
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, ClassVar, TypeGuard, cast, get_args

import msgspec

__all__ = [
    "AgentCapabilities",
    "AgentEvent",
    "AuthRequired",
    "AvailableCommands",
    "Complete",
    "ConfigOption",
    "ContextWindow",
    "ErrorEvent",
    "ForegroundIdle",
    "MessageChunk",
    "ModeInfo",
    "ModelInfo",
    "PermissionCancelled",
    "PermissionOption",
    "PermissionRequest",
    "Plan",
    "PlanEntry",
    "ProtocolErrorEvent",
    "Reasoning",
    "SessionInfo",
    "SessionMode",
    "SessionModels",
    "SessionStatus",
    "StreamDisconnected",
    "StreamReconnected",
    "ToolCall",
    "ToolUpdate",
    "TurnStarted",
    "TurnUpdate",
    "Unknown",
    "decode_event",
    "encode_event",
    "is_terminal_tool_update",
    "is_turn_content",
]


class _Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", gc=False):
    session_id: str = ""
    prompt_generation: int = 0


class MessageChunk(_Event, tag="message_chunk", frozen=True):
    text: str = ""
    role: str = "assistant"
    protocol_message_id: str = ""
    content_blocks: list[dict[str, Any]] = []


class Reasoning(_Event, tag="reasoning", frozen=True):
    reasoning_text: str = ""
    protocol_message_id: str = ""


class ToolCall(_Event, tag="tool_call", frozen=True):
    tool_call_id: str
    tool_name: str = ""
    tool_title: str = ""
    tool_status: str = "in_progress"
    parent_tool_call_id: str = ""
    raw_input: Any = None
    tool_call_contents: list[dict[str, Any]] = []


class ToolUpdate(_Event, tag="tool_update", frozen=True):
    tool_call_id: str
    tool_status: str = ""
    tool_title: str = ""
    raw_output: Any = None
    tool_call_contents: list[dict[str, Any]] = []


class PlanEntry(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    description: str
    status: str = "pending"
    priority: str = "medium"


class Plan(_Event, tag="plan", frozen=True):
    plan_entries: list[PlanEntry] = []
    replayed: bool = False  # re-emitted after session/load: history, not turn activity


class TurnStarted(_Event, tag="turn_started", frozen=True):
    """agentctl v0.95.1 (not kandev HEAD): a ``session/prompt`` took the prompt gate and
    started. Informational; it is not turn content (no wakeup)."""


class Complete(_Event, tag="complete", frozen=True):
    """A turn ended. ``stop_reason`` is the ACP stopReason verbatim. ``control_turn_id`` is
    agentctl v0.95.1's own turn counter (0 when absent: stdio, kandev HEAD). A completion
    with ``data["is_error"]`` carries its error text in ``error`` (kandev
    ``extractErrorMessage``: the frame's error, else its text)."""

    stop_reason: str = "end_turn"
    usage: dict[str, Any] | None = None
    data: dict[str, Any] = {}
    control_turn_id: int = 0
    error: str = ""


class ErrorEvent(_Event, tag="error", frozen=True):
    """A turn or process failure; treated like a ``complete`` with is_error (kandev
    lifecycle/manager_events.go ``handleErrorEvent``).

    ``provider_error`` is agentctl's structured projection when it sent one (v0.95.1:
    ``{"source": "acp_prompt", "rpc_code": -32603, "message": …}``); ``control_turn_id`` as
    on :class:`Complete`."""

    error: str
    data: dict[str, Any] = {}
    provider_error: dict[str, Any] | None = None
    control_turn_id: int = 0


class PermissionOption(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    option_id: str
    name: str
    kind: str


class _RenamedFields(type(msgspec.Struct)):  # type: ignore[misc]
    """Accepts a field's former keyword (``_renamed``: old → new) with a DeprecationWarning."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        for old, new in cls._renamed.items():
            if old in kwargs:
                warnings.warn(
                    f"{cls.__name__}({old}=…) is deprecated: use {new}=…",
                    DeprecationWarning,
                    stacklevel=2,
                )
                kwargs.setdefault(new, kwargs.pop(old))
        return super().__call__(*args, **kwargs)


class PermissionRequest(_Event, tag="permission_request", frozen=True, metaclass=_RenamedFields):
    """The agent asks before running a tool. ``tool_kind`` and ``raw_input`` say what it
    wants to do (stdio: the request's ``toolCall.kind`` and ``rawInput``; agentctl: its
    ``action_type`` and ``action_details``). ``request_id`` is one string per distinct request
    (stdio: :func:`~acpfsm.adapters.acp.stdio.permission_request_id` of its JSON-RPC id, so
    that ids ``1`` and ``"1"`` are ``"1"`` and ``'"1"'``); ``session_id`` is the ACP session
    the request names. ``options`` are the answers it offers (the name the lifecycle's
    ``PermissionRequested`` uses too; ``permission_options`` is its deprecated former name)."""

    _renamed: ClassVar[dict[str, str]] = {"permission_options": "options"}

    request_id: str
    tool_call_id: str = ""
    permission_title: str = ""
    options: list[PermissionOption] = []
    tool_kind: str = ""
    raw_input: Any = None

    @property
    def permission_options(self) -> list[PermissionOption]:
        """Deprecated: :attr:`options`."""
        warnings.warn(
            "PermissionRequest.permission_options is deprecated: use options",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.options


class PermissionCancelled(_Event, tag="permission_cancelled", frozen=True):
    request_id: str


class SessionStatus(_Event, tag="session_status", frozen=True):
    session_status: str  # "new" | "resumed"


class ContextWindow(_Event, tag="context_window", frozen=True):
    context_window_size: int = 0
    context_window_used: int = 0


class ForegroundIdle(_Event, tag="foreground_idle", frozen=True):
    """The provider finished a foreground cycle; ``prompt_handoff`` marks a handoff (kandev
    lifecycle/manager_events.go ``handlePromptHandoffEvent``)."""

    prompt_handoff: bool = False


class AvailableCommands(_Event, tag="available_commands", frozen=True):
    available_commands: list[dict[str, Any]] = []


class ModeInfo(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    id: str
    name: str = ""
    description: str = ""


class SessionMode(_Event, tag="session_mode", frozen=True):
    current_mode_id: str = ""
    available_modes: list[ModeInfo] = []


class ModelInfo(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    model_id: str
    name: str = ""
    description: str = ""


class ConfigOption(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    id: str
    name: str = ""
    type: str = "select"
    category: str = ""
    current_value: str = ""
    options: list[dict[str, Any]] = []


class SessionModels(_Event, tag="session_models", frozen=True):
    """Model/config catalog. ``data`` carries markers such as ``config_options_source``,
    ``original_config_settled``, ``config_options_settled``, ``workflow_session_config_failures``."""

    current_model_id: str = ""
    session_models: list[ModelInfo] = []
    config_options: list[ConfigOption] = []
    config_baseline_candidate: list[ConfigOption] | None = None
    original_config_candidate: list[ConfigOption] | None = None
    data: dict[str, Any] = {}


class SessionInfo(_Event, tag="session_info", frozen=True):
    session_title: str = ""
    session_updated_at: str = ""


class AgentCapabilities(_Event, tag="agent_capabilities", frozen=True):
    supports_image: bool = False
    supports_audio: bool = False
    supports_embedded_context: bool = False
    supports_prompt_queueing: bool = False
    supports_load_session: bool = False
    auth_methods: list[dict[str, Any]] = []


class AuthRequired(_Event, tag="auth_required", frozen=True):
    error: str = ""
    auth_methods: list[dict[str, Any]] = []


class StreamDisconnected(_Event, tag="stream_disconnected", frozen=True):
    """The transport lost its stream (pipe EOF, WebSocket drop). Always the last event of a
    connection; ``error`` is empty for a clean close (as kandev's agentctl/agent.go
    ``readUpdatesStream`` leaves it). A stdio transport
    whose agent process has exited fills ``exit_code`` and the last lines of stderr."""

    error: str = ""
    exit_code: int | None = None
    stderr_tail: str = ""
    reconnecting: bool = False
    """True when the loss is not final: the carrier can be redialled
    (:meth:`~acpfsm.adapters.transport.AgentTransport.redial`; agentctl's WebSocket) and the
    event stream goes on; :class:`StreamReconnected` follows a successful redial. Whether and
    when to redial is not the transport's decision (the runtime's AgentStream chart decides).
    False for the final loss (stdio EOF, agent exit, a carrier given up or closed)."""
    clean: bool = False
    """The peer closed the connection normally (WebSocket 1000/1001) rather than losing it.
    The runtime redials such a loss without announcing it (kandev H9: a normal close released
    no waiter)."""


class StreamReconnected(_Event, tag="stream_reconnected", frozen=True):
    """A lost carrier was redialled after ``StreamDisconnected(reconnecting=True)``: requests
    flow again, and the events the peer buffered meanwhile follow (this event comes first).
    ``attempts`` is the number of dials it took."""

    attempts: int = 1


class ProtocolErrorEvent(_Event, tag="protocol_error", frozen=True):
    """The agent sent something invalid that the transport survived (malformed JSON, an
    oversize line, a response to an unknown id, an error without id). Informational: the
    connection keeps going."""

    error: str


class Unknown(_Event, tag="unknown", frozen=True):
    """An update kind we do not model; kept whole so nothing is lost."""

    kind: str = ""
    payload: dict[str, Any] = {}


AgentEvent = (
    MessageChunk
    | Reasoning
    | ToolCall
    | ToolUpdate
    | Plan
    | Complete
    | ErrorEvent
    | PermissionRequest
    | PermissionCancelled
    | SessionStatus
    | ContextWindow
    | ForegroundIdle
    | AvailableCommands
    | SessionMode
    | SessionModels
    | SessionInfo
    | AgentCapabilities
    | AuthRequired
    | StreamDisconnected
    | StreamReconnected
    | TurnStarted
    | ProtocolErrorEvent
    | Unknown
)

TurnUpdate = MessageChunk | Reasoning | ToolCall | ToolUpdate | Plan | PermissionRequest
"""Turn content: what the agent streams while it works on a turn (its reply and thoughts, its
tool calls and their updates, its plan, the permissions it asks for)."""

_TURN_CONTENT: tuple[type[TurnUpdate], ...] = get_args(TurnUpdate)
_TURN_CONTENT_KINDS: frozenset[type] = frozenset(_TURN_CONTENT)
_TERMINAL_TOOL_STATUSES = frozenset(
    {"complete", "completed", "success", "error", "failed", "cancelled"}
)

_encoder = msgspec.json.Encoder()


@functools.cache
def _decoder() -> msgspec.json.Decoder[AgentEvent]:
    """Built on first use: the decoder of the whole union (every event type's fields) is
    not built by ``import acpfsm.runtime``, which never decodes an event."""
    return msgspec.json.Decoder(AgentEvent)


def decode_event(raw: bytes | str) -> AgentEvent:
    """Decode one event (raises ``msgspec.DecodeError``; callers map it)."""
    return _decoder().decode(raw)


def encode_event(event: AgentEvent) -> bytes:
    return _encoder.encode(event)


def is_turn_content(event: object) -> TypeGuard[TurnUpdate]:
    """Turn-content events mark prompt activity (kandev lifecycle/manager_events.go
    ``recordActivity``); a plan re-emitted after
    session/load is history, not activity."""
    kind = type(event)
    if kind in _TURN_CONTENT_KINDS:  # the common case, read per streamed event: no isinstance
        return kind is not Plan or not cast(Plan, event).replayed
    if isinstance(event, Plan) and event.replayed:
        return False
    return isinstance(event, _TURN_CONTENT)


def is_terminal_tool_update(event: AgentEvent) -> bool:
    return isinstance(event, ToolUpdate) and event.tool_status in _TERMINAL_TOOL_STATUSES
