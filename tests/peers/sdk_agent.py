"""A scripted ACP agent written on the official Python SDK (``agent-client-protocol``).

It runs as its own asyncio process (the SDK is asyncio-only): ``python tests/peers/sdk_agent.py``.
Deliberately not a subclass of ``acp.Agent``, so every method it does not implement answers
``-32601 Method not found`` (the SDK's router, ``acp.router``).

Script
    * ``initialize``: protocol 1, ``loadSession: true``, agent info ``sdk-scripted-agent``.
    * ``session/new``: a fresh id, modes ``ask``/``code`` (current ``ask``) and a
      ``category: "model"`` select option ``model`` (``small``/``large``).
    * ``session/load``: a session created in this process, or the built-in
      ``sdk-known-session``, replays its history (user and agent chunks) and answers the
      current modes and options; an id starting ``codex-`` answers Codex's missing-rollout
      shape; any other id answers ``RequestError.resource_not_found`` (-32002).
    * ``session/prompt``: a thought, a ``read`` tool call (pending → completed), a plan, then
      ``echo:`` and the prompt text as two agent message chunks (then a ``link NAME URI`` line
      per ``resource_link`` block); ``end_turn``. A prompt
      containing ``permission`` first asks ``session/request_permission`` and reports the
      chosen option in a third chunk; one containing ``hang`` waits for ``session/cancel``
      and answers ``cancelled``.
    * ``session/set_mode`` sends ``current_mode_update``; ``session/set_config_option`` answers
      the new options (unknown values: -32602).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from acp import (
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
    RequestError,
    SetSessionConfigOptionResponse,
    plan_entry,
    run_agent,
    start_tool_call,
    update_agent_message_text,
    update_agent_thought_text,
    update_plan,
    update_tool_call,
    update_user_message_text,
)
from acp.helpers import update_current_mode
from acp.schema import (
    AgentCapabilities,
    Implementation,
    PermissionOption,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionMode,
    SessionModeState,
    ToolCallUpdate,
)

AGENT_NAME = "sdk-scripted-agent"
KNOWN_SESSION = "sdk-known-session"
MODES = {"ask": "Ask", "code": "Code"}
MODELS = {"small": "Small model", "large": "Large model"}


class Session:
    def __init__(self) -> None:
        self.mode = "ask"
        self.model = "small"
        self.history: list[tuple[str, str]] = []  # (role, text)
        self.cancelled = asyncio.Event()


class ScriptedAgent:
    def __init__(self) -> None:
        self._conn: Any = None
        self._sessions: dict[str, Session] = {}
        known = Session()
        known.history = [("user", "earlier question"), ("agent", "earlier answer")]
        self._sessions[KNOWN_SESSION] = known

    def on_connect(self, conn: Any) -> None:
        self._conn = conn

    # -- helpers -----------------------------------------------------------------------

    def _session(self, session_id: str) -> Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise RequestError.resource_not_found(session_id)
        return session

    @staticmethod
    def _modes(session: Session) -> SessionModeState:
        return SessionModeState(
            current_mode_id=session.mode,
            available_modes=[SessionMode(id=k, name=v) for k, v in MODES.items()],
        )

    @staticmethod
    def _options(session: Session) -> list[Any]:
        return [
            SessionConfigOptionSelect(
                id="model",
                name="Model",
                category="model",
                type="select",
                current_value=session.model,
                options=[SessionConfigSelectOption(value=k, name=v) for k, v in MODELS.items()],
            )
        ]

    async def _say(self, session_id: str, update: Any) -> None:
        await self._conn.session_update(session_id=session_id, update=update)

    # -- ACP methods ---------------------------------------------------------------------

    async def initialize(self, protocol_version: int, **kw: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=1,
            agent_capabilities=AgentCapabilities(load_session=True),
            agent_info=Implementation(name=AGENT_NAME, version="1.0"),
        )

    async def new_session(self, cwd: str, **kw: Any) -> NewSessionResponse:
        session_id = f"sdk-{uuid.uuid4().hex}"
        session = self._sessions[session_id] = Session()
        return NewSessionResponse(
            session_id=session_id, modes=self._modes(session), config_options=self._options(session)
        )

    async def load_session(self, cwd: str, session_id: str, **kw: Any) -> LoadSessionResponse:
        if session_id.startswith("codex-"):
            raise RequestError(
                -32603,
                "Internal error",
                {"details": f"no rollout found for thread id {session_id}"},
            )
        session = self._session(session_id)
        for role, text in session.history:
            if role == "user":
                await self._say(session_id, update_user_message_text(text))
            else:
                await self._say(session_id, update_agent_message_text(text))
        return LoadSessionResponse(
            modes=self._modes(session), config_options=self._options(session)
        )

    async def prompt(self, session_id: str, prompt: list[Any], **kw: Any) -> PromptResponse:
        session = self._session(session_id)
        session.cancelled = asyncio.Event()
        text = "".join(getattr(block, "text", "") for block in prompt)
        session.history.append(("user", text))
        await self._say(session_id, update_agent_thought_text(f"thinking with {session.model}"))
        tool_id = f"tool-{len(session.history)}"
        await self._say(
            session_id,
            start_tool_call(tool_id, "Read the prompt", kind="read", status="pending"),
        )
        await self._say(session_id, update_tool_call(tool_id, status="completed"))
        await self._say(session_id, update_plan([plan_entry("Answer", status="completed")]))
        await self._say(session_id, update_agent_message_text("echo: "))
        await self._say(session_id, update_agent_message_text(text))
        for block in prompt:  # each file the client linked, as a line of its own
            if getattr(block, "type", "") == "resource_link":
                link = f"\nlink {block.name!r} {block.uri}"
                await self._say(session_id, update_agent_message_text(link))
        session.history.append(("agent", "echo: " + text))
        if "permission" in text:
            answer = await self._conn.request_permission(
                session_id=session_id,
                tool_call=ToolCallUpdate(tool_call_id=tool_id, title="Run a command"),
                options=[
                    PermissionOption(option_id="yes", name="Yes", kind="allow_once"),
                    PermissionOption(option_id="no", name="No", kind="reject_once"),
                ],
            )
            outcome = answer.outcome
            chosen = getattr(outcome, "option_id", None) or outcome.outcome
            await self._say(session_id, update_agent_message_text(f" [permission: {chosen}]"))
        if "hang" in text:
            await session.cancelled.wait()
            return PromptResponse(stop_reason="cancelled")
        return PromptResponse(stop_reason="end_turn")

    async def cancel(self, session_id: str, **kw: Any) -> None:
        session = self._sessions.get(session_id)
        if session is not None:
            session.cancelled.set()

    async def set_session_mode(self, session_id: str, mode_id: str, **kw: Any) -> None:
        session = self._session(session_id)
        if mode_id not in MODES:
            raise RequestError.invalid_params({"modeId": mode_id})
        session.mode = mode_id
        await self._say(session_id, update_current_mode(mode_id))

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kw: Any
    ) -> SetSessionConfigOptionResponse:
        session = self._session(session_id)
        if config_id != "model" or value not in MODELS:
            raise RequestError.invalid_params({"configId": config_id, "value": value})
        session.model = str(value)
        return SetSessionConfigOptionResponse(config_options=self._options(session))


if __name__ == "__main__":
    asyncio.run(run_agent(ScriptedAgent()))
