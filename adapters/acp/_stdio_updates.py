"""The update side of :class:`~.stdio.StdioTransport`: each ``session/update`` the agent
streams, mapped inline (in the reader) onto acpfsm's events (agentctl's
``convertNotification``), and the open tool calls a turn's end sweeps."""

from __future__ import annotations

import logging
from typing import Any

import msgspec
from msgspec import Raw

from ..errors import (
    UNDECODABLE_JSON,
    RemoteProtocolError,
)
from ..events import (
    AgentEvent,
    AvailableCommands,
    ContextWindow,
    ForegroundIdle,
    MessageChunk,
    Plan,
    PlanEntry,
    Reasoning,
    SessionInfo,
    SessionMode,
    ToolCall,
    ToolUpdate,
    Unknown,
)
from . import messages as acp
from ._stdio_base import _StdioBase

log = logging.getLogger("acpfsm.adapters.acp.stdio")

_TERMINAL_TOOL_STATUSES = frozenset({"complete", "error", "cancelled"})


def _block_dict(block: acp.ContentBlock) -> dict[str, Any]:
    """A content block in agentctl's ``content_blocks`` shape (snake_case, no empties)."""
    out: dict[str, Any] = {"type": type(block).__struct_config__.tag}
    if isinstance(block, acp.TextContent):
        out["text"] = block.text
    elif isinstance(block, acp.ImageContent | acp.AudioContent):
        out["data"] = block.data
        out["mime_type"] = block.mime_type
        if isinstance(block, acp.ImageContent) and block.uri:
            out["uri"] = block.uri
    elif isinstance(block, acp.ResourceLink):
        for key in ("uri", "name", "mime_type", "title", "description", "size"):
            value = getattr(block, key)
            if value is not None:
                out[key] = value
    else:
        resource = block.resource
        out["uri"] = resource.uri
        if resource.mime_type:
            out["mime_type"] = resource.mime_type
        if resource.text is not None:
            out["text"] = resource.text
        if resource.blob is not None:
            out["data"] = resource.blob
    return out


def _tool_contents(items: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for item in items or ():
        kind = item.get("type")
        if kind == "content":
            out.append({"type": "content", "content": item.get("content")})
        elif kind == "diff":
            entry = {"type": "diff", "path": item.get("path", "")}
            entry["old_text"] = item.get("oldText")
            entry["new_text"] = item.get("newText", "")
            out.append(entry)
        elif kind == "terminal":
            out.append({"type": "terminal", "terminal_id": item.get("terminalId", "")})
        else:
            out.append(dict(item))
    return out


def _tool_update_status(update: acp.ToolCallProgress) -> str:
    if update.status == "completed":
        return "complete"
    if update.status == "failed":
        return "error"
    if update.status:
        return update.status
    if update.title is not None or update.raw_input is not None or update.content is not None:
        return "in_progress"
    return ""


class _UpdateSide(_StdioBase):
    """session/update notifications as events, in order; the open tool calls."""

    # ------------------------------------------------------------------ agent → client

    async def _on_notification(self, method: str, params: Raw | None) -> None:
        if method != "session/update":
            log.debug("ignoring notification %s", method)
            return
        try:
            notification: acp.SessionNotification = acp.decode_agent_params(method, params)
        except UNDECODABLE_JSON as exc:
            self._on_protocol_error(RemoteProtocolError(f"invalid session/update: {exc}"))
            return
        for event in self._map_update(notification):
            self._emit(event)
        if len(self._events) >= self.config.event_queue_limit:
            await self._backpressure()

    def _map_update(self, notification: acp.SessionNotification) -> list[AgentEvent]:
        sid = notification.session_id
        gen = self._active_generation()
        update = notification.update
        replaying = self._replaying
        match update:
            case acp.AgentMessageChunk() | acp.UserMessageChunk():
                if replaying:
                    return []
                role = "user" if isinstance(update, acp.UserMessageChunk) else "assistant"
                content = update.content
                if isinstance(content, acp.TextContent):
                    chunk = MessageChunk(text=content.text)
                else:
                    chunk = MessageChunk(content_blocks=[_block_dict(content)])
                return [
                    msgspec.structs.replace(
                        chunk,
                        session_id=sid,
                        prompt_generation=gen,
                        role=role,
                        protocol_message_id=update.message_id or "",
                    )
                ]
            case acp.AgentThoughtChunk():
                if replaying or not isinstance(update.content, acp.TextContent):
                    return []
                return [
                    Reasoning(
                        session_id=sid,
                        prompt_generation=gen,
                        reasoning_text=update.content.text,
                        protocol_message_id=update.message_id or "",
                    )
                ]
            case acp.ToolCallStart():
                if replaying:
                    return []
                status = update.status or "in_progress"
                if status not in ("completed", "failed"):
                    self._open_tools[update.tool_call_id] = gen
                return [
                    ToolCall(
                        session_id=sid,
                        prompt_generation=gen,
                        tool_call_id=update.tool_call_id,
                        tool_name=update.kind or "",
                        tool_title=update.title or "",
                        tool_status=status,
                        raw_input=update.raw_input,
                        tool_call_contents=_tool_contents(update.content),
                    )
                ]
            case acp.ToolCallProgress():
                if replaying:
                    return []
                status = _tool_update_status(update)
                if status in _TERMINAL_TOOL_STATUSES:
                    self._open_tools.pop(update.tool_call_id, None)
                return [
                    ToolUpdate(
                        session_id=sid,
                        prompt_generation=gen,
                        tool_call_id=update.tool_call_id,
                        tool_status=status,
                        tool_title=update.title or "",
                        raw_output=update.raw_output,
                        tool_call_contents=_tool_contents(update.content),
                    )
                ]
            case acp.AgentPlanUpdate():
                plan = Plan(
                    session_id=sid,
                    prompt_generation=gen,
                    plan_entries=[
                        PlanEntry(description=e.content, status=e.status, priority=e.priority)
                        for e in update.entries
                    ],
                )
                if replaying:
                    self._replayed_plan = plan
                    return []
                return [plan]
            case acp.AvailableCommandsUpdate():
                commands: dict[str, dict[str, Any]] = {}
                for command in update.available_commands:
                    if command.name in commands:
                        continue
                    entry: dict[str, Any] = {"name": command.name}
                    if command.description:
                        entry["description"] = command.description
                    hint = (command.input or {}).get("hint")
                    if hint:
                        entry["input_hint"] = hint
                    commands[command.name] = entry
                return [
                    AvailableCommands(session_id=sid, available_commands=list(commands.values()))
                ]
            case acp.CurrentModeUpdate():
                if replaying:
                    return []
                self._current_mode_id = update.current_mode_id
                return [
                    SessionMode(
                        session_id=sid,
                        current_mode_id=update.current_mode_id,
                        available_modes=list(self._modes),
                    )
                ]
            case acp.ConfigOptionUpdate():
                if replaying:
                    return []
                self._config_options = list(update.config_options)
                self._refresh_models()
                return [
                    msgspec.structs.replace(self._models_event("provider_update"), session_id=sid)
                ]
            case acp.SessionInfoUpdate():
                return [
                    SessionInfo(
                        session_id=sid,
                        session_title=update.title or "",
                        session_updated_at=update.updated_at or "",
                    )
                ]
            case acp.UsageUpdate():
                return self._map_usage(sid, gen, update)
            case acp.UnknownUpdate():
                return [
                    Unknown(
                        session_id=sid,
                        prompt_generation=gen,
                        kind=update.kind,
                        payload=update.payload,
                    )
                ]

    def _map_usage(self, sid: str, gen: int, update: acp.UsageUpdate) -> list[AgentEvent]:
        out: list[AgentEvent] = []
        if update.size > 0:
            self._context_size = max(self._context_size, update.size)
            out.append(
                ContextWindow(
                    session_id=sid,
                    context_window_size=self._context_size,
                    context_window_used=update.used,
                )
            )
        origin = (update.meta or {}).get("_claude/origin")
        if isinstance(origin, dict) and origin.get("kind") == "human":
            caps = self._capabilities
            if gen == 0 or (caps is not None and caps.prompt_queueing):
                out.append(ForegroundIdle(session_id=sid, prompt_generation=gen))
        return out

    def _sweep_tools(self, status: str) -> None:
        open_tools, self._open_tools = self._open_tools, {}
        for tool_call_id, generation in open_tools.items():
            self._emit(
                ToolUpdate(
                    session_id=self._session_id or "",
                    prompt_generation=generation,
                    tool_call_id=tool_call_id,
                    tool_status=status,
                )
            )
