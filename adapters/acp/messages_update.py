"""ACP ``session/update`` kinds (tag: ``sessionUpdate``). Part of
:mod:`acpfsm.adapters.acp.messages` (import them from there)."""

from __future__ import annotations

from typing import Any, TypeAlias

from msgspec import Raw, Struct

from .messages_base import (
    _Wire,
)
from .messages_content import (
    ContentBlock,
)
from .messages_session import (
    SessionConfigOption,
)

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
