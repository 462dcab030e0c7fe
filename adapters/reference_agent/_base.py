"""What every side of :class:`~._agent.ReferenceAgent` shares: its configuration, the
session and turn records, the scripted answers' shapes, and the agent's state and
cross-calls (declared for the type checker only). Its sides are mixins: the requests
(``_requests``), the turns (``_turns``) and the tools a turn runs (``_tools``)."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import msgspec
from anyio.abc import TaskGroup

from . import _wire as w
from ._faults import Faults
from ._io import Outbox
from ._mcp import CONNECT_SECONDS, SessionMcp
from ._script import (
    MODELS,
    MODES,
    THINKING_LEVELS,
    Directives,
)
from ._store import SessionState, SessionStore

log = logging.getLogger("acpfsm.reference_agent")

AUTH_METHOD_ID = "reference-login"
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|NONCE", re.IGNORECASE)
"""Names the ``leak_env`` fault prints."""
EOF_DRAIN_SECONDS = 1.0
"""At stdin EOF, how long queued output may take to drain before the process exits."""


@dataclass(frozen=True)
class AgentConfig:
    """How one agent process behaves."""

    faults: Faults = field(default_factory=Faults)
    delay: float = 0.002
    """Seconds before each streamed update of a turn (a directive can override it)."""
    sessions_dir: Path = field(default_factory=lambda: Path(".acpfsm-reference", "sessions"))
    max_line: int = 64 * 1024 * 1024
    """Longest accepted input line; a longer one is answered with a parse error."""
    version: str = "0"
    child_pid: int | None = None
    mcp_connect_seconds: float = CONNECT_SECONDS
    """How long an MCP server of a session may take to connect and list its tools."""


# ---------------------------------------------------------------------------------------
# Sessions and turns


class _Turn:
    def __init__(
        self,
        request_id: w.JsonId,
        number: int,
        directives: Directives,
        faults: Faults,
        delay: float,
    ) -> None:
        self.request_id = request_id
        self.number = number
        self.directives = directives
        self.faults = faults
        self.delay = delay
        self.scope = anyio.CancelScope()
        self.done = anyio.Event()
        self.stop: str | None = None
        """Set by an interruption: ``cancelled``, ``end_turn`` (steered) or ``request_cancelled``."""
        self.hanging = False
        self.open_tool: str | None = None

    def interrupt(self, stop: str, *, is_cancel: bool) -> bool:
        if self.stop is not None or self.hanging or self.done.is_set():
            return False
        if is_cancel and "ignore_cancel" in self.faults:
            log.info("turn %s ignores %s (fault ignore_cancel)", self.request_id, stop)
            return False
        self.stop = stop
        self.scope.cancel()
        return True


@dataclass
class _Session:
    id: str
    cwd: str
    state: SessionState
    live: list[_Turn] = field(default_factory=list)
    turns: int = 0
    titled: bool = False
    always_allow: set[str] = field(default_factory=set)
    always_reject: set[str] = field(default_factory=set)
    mcp: SessionMcp | None = None


@dataclass
class _Pending:
    event: anyio.Event = field(default_factory=anyio.Event)
    result: msgspec.Raw | None = None
    error: msgspec.Raw | None = None


def _options(table: tuple[tuple[str, str, str], ...]) -> list[w.SelectOption]:
    return [w.SelectOption(value=v, name=n, description=d) for v, n, d in table]


def _config_options(state: SessionState) -> list[w.ConfigOption]:
    return [
        w.ConfigOption(
            id="mode",
            name="Mode",
            description="How the agent works",
            category="mode",
            current_value=state.mode_id,
            options=_options(MODES),
        ),
        w.ConfigOption(
            id="model",
            name="Model",
            description="Which reference model answers",
            category="model",
            current_value=state.model_id,
            options=_options(MODELS),
        ),
        w.ConfigOption(
            id="thinking",
            name="Thinking",
            description="How much reasoning is shown",
            category="thought_level",
            current_value=state.thinking,
            options=_options(THINKING_LEVELS),
        ),
    ]


def _mode_state(state: SessionState) -> w.ModeState:
    return w.ModeState(
        current_mode_id=state.mode_id,
        available_modes=[w.ModeInfo(id=i, name=n, description=d) for i, n, d in MODES],
    )


def _model_state(state: SessionState) -> w.ModelState:
    return w.ModelState(
        current_model_id=state.model_id,
        available_models=[w.ModelInfo(model_id=i, name=n, description=d) for i, n, d in MODELS],
    )


def _check_cwd(cwd: str) -> None:
    if not os.path.isabs(cwd):
        raise w.RpcError(
            -32602,
            f"Invalid params: `cwd` must be an absolute path, but received: {cwd}",
            {"cwd": cwd},
        )


def _block_note(block: w.Block) -> str | None:
    if block.type == "text":
        return None
    if block.type in ("image", "audio"):
        size = len(block.data) * 3 // 4
        what = "an image" if block.type == "image" else "an audio clip"
        return f"Received {what} ({block.mime_type or 'unknown type'}, about {size} bytes)."
    if block.type == "resource_link":
        return f"Received a link to {block.uri or block.name or 'a resource'}."
    if block.type == "resource":
        uri = block.resource.get("uri", "an embedded resource")
        return f"Received the embedded resource {uri}."
    return f"Ignored a {block.type or 'typeless'} block."


_PERMISSION_OPTIONS = [
    {"optionId": "allow_once", "name": "Allow once", "kind": "allow_once"},
    {"optionId": "allow_always", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"},
    {"optionId": "reject_always", "name": "Always reject", "kind": "reject_always"},
]

_REJECT_FIRST = [_PERMISSION_OPTIONS[i] for i in (2, 3, 0, 1)]

_COMMANDS = [
    w.CommandInfo(name="help", description="List the reference agent's prompt directives"),
]


class _AgentBase:
    """The agent's state and the methods its sides call on one another (declared for the
    type checker only; :class:`~._agent.ReferenceAgent` and its mixins define them)."""

    if TYPE_CHECKING:
        _config: AgentConfig
        _stdin_fd: int
        _faults: Faults
        _out: Outbox
        _tg: TaskGroup
        _store: SessionStore
        _sessions: dict[str, _Session]
        _pending: dict[int, _Pending]
        _prompts: dict[w.JsonId, _Turn]
        _next_id: int
        _client: w.ClientCapabilities
        _authenticated: bool

        async def _send(self, message: Any) -> None: ...
        async def _result(self, rid: w.JsonId, result: Any) -> None: ...
        async def _error(self, rid: w.JsonId | None, error: w.RpcError) -> None: ...
        async def _notify_update(self, session_id: str, update: Any) -> None: ...
        async def _update(
            self, session: _Session, update: Any, *, persist: bool = True
        ) -> None: ...
        async def _call(self, method: str, params: object) -> msgspec.Raw: ...
        def _require_auth(self) -> None: ...
        def _session(self, session_id: str) -> _Session: ...
        async def _emit(
            self, session: _Session, turn: _Turn, update: Any, *, persist: bool = True
        ) -> None: ...
