"""The state every side of :class:`~.stdio.StdioTransport` shares, declared once for the
type checker (``_StdioBase``), its tunables (:class:`StdioConfig`) and its turns
(:class:`_Turn`); the transport's sides are mixins over it: the session (``_stdio_session``),
the turns (``_stdio_turns``), the updates the agent streams (``_stdio_updates``) and the
agent's requests (``_stdio_client``)."""

from __future__ import annotations

import enum
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

import anyio
import anyio.abc
import anyio.lowlevel
import msgspec
from msgspec import Raw

from ..classify import PHRASE_LOAD_UNSUPPORTED
from ..errors import RemoteProtocolError
from ..events import (
    AgentEvent,
    ModeInfo,
    ModelInfo,
    Plan,
    SessionModels,
)
from ..sync import EventQueue, Flag, Wakeup
from ..transport import (
    Attachment,
    InitializeResult,
    PermissionPrompts,
)
from ..workspace import Resolver, Workspace
from . import messages as acp
from .jsonrpc import (
    DEFAULT_FLOOD_GRACE,
    DEFAULT_MAX_INCOMING,
    DEFAULT_MAX_LINE_BYTES,
    JsonRpcConnection,
)
from .process import AgentProcess

_T = TypeVar("_T")

LOAD_UNSUPPORTED_MESSAGE: Final = PHRASE_LOAD_UNSUPPORTED

TerminalHandler = Callable[[str, Any], Awaitable[Any]]
"""Serves ``terminal/*``: ``(method, typed params)`` → result struct; raise
:class:`~.jsonrpc.JsonRpcErrorReply` to answer with an error."""


class StdioConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Tunables of a :class:`StdioTransport` (seconds, bytes, counts)."""

    cancel_timeout: float = 3.0
    """How long :meth:`StdioTransport.cancel` waits for the turn to end (agentctl: 3 s)."""
    exit_grace: float = 0.5
    """After the agent hung up: how long to wait for its exit code and last stderr."""
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    max_incoming: int = DEFAULT_MAX_INCOMING
    """The agent's requests served at once; the next waits ``flood_grace`` for a free slot,
    then the transport dies (``request flood``)."""
    flood_grace: float = DEFAULT_FLOOD_GRACE
    event_queue_limit: int = 131072
    """Backpressure: with this many events undelivered the transport stops reading the
    agent's output (the agent then blocks on its full pipe) until the consumer has taken them
    down to half; twice as many (events the transport makes itself, e.g. a flood of garbage
    lines while paused) kill the transport (``notification queue overflow``)."""
    backpressure_timeout: float = 30.0
    """How long the transport stays paused for a consumer that does not catch up; then it
    is closed with :class:`~acpfsm.adapters.errors.EventConsumerStalled`."""
    fs_read: bool = True
    """Serve ``fs/read_text_file`` (and advertise it); else the method answers -32601."""
    fs_write: bool = True
    """Serve ``fs/write_text_file`` (and advertise it); else the method answers -32601."""
    fs_max_read_bytes: int = 16 * 1024 * 1024
    """Most bytes of file text one ``fs/read_text_file`` returns; beyond, -32602 (the agent
    reads in parts with ``line``/``limit``)."""
    fs_max_write_bytes: int = 16 * 1024 * 1024
    """Most bytes (UTF-8) one ``fs/write_text_file`` writes; beyond, -32602."""
    fs_timeout: float = 30.0
    """Bound of one fs operation (and of saving one attachment); then -32603."""
    fs_resolver: Resolver = "auto"
    """How paths are resolved beneath the workspace: ``auto`` (``openat2`` where the kernel
    has it), ``walk`` (forced fallback: no symbolic link is followed) or ``openat2``."""
    suppress_replay: bool = True
    """Drop the history an agent replays during session/load (agentctl does)."""
    inline_media_limit: int = 8 * 1024 * 1024
    client_name: str = acp.CLIENT_INFO_NAME
    client_version: str = ""


DEFAULT_CONFIG: Final = StdioConfig()


class _Fate(enum.Enum):
    """What a ``session/prompt`` owes the event stream.

    ``OWED`` → ``SETTLED`` when its terminal event is emitted (or nothing is owed any more);
    ``OWED`` → ``HANDED_OFF`` when a steer's prompt takes over (its own end is then
    suppressed; a steer that fails to send gives it back: ``HANDED_OFF`` → ``OWED``);
    ``OWED`` → ``ABANDONED`` when its cancel was not acknowledged in time (its end is
    suppressed: ``prompt abandoned after cancel``). Settling a handed-off or abandoned turn
    emits nothing."""

    OWED = "owed"
    HANDED_OFF = "handed_off"
    ABANDONED = "abandoned"
    SETTLED = "settled"


class _Turn:
    """One ``session/prompt`` owed a terminal event (Complete/ErrorEvent)."""

    __slots__ = ("attachments", "fate", "finished", "generation", "pending", "text", "withheld")

    def __init__(self, text: str, attachments: Sequence[Attachment], generation: int) -> None:
        self.text = text
        self.attachments = tuple(attachments)
        self.generation = generation
        self.fate = _Fate.OWED
        self.pending: Any = None  # jsonrpc.PendingRequest once sent
        self.finished = Flag()  # its end is known (answered, abandoned, or it never went)
        self.withheld: AgentEvent | None = None  # the end suppressed while handed off


def _given_up(turn: _Turn) -> bool:
    """Whether a cancel gave up on ``turn`` (read anew after each wait: another task sets it)."""
    return turn.fate is _Fate.ABANDONED


class _StdioBase:
    """The transport's shared state and the methods its sides call on one another (declared
    for the type checker only; :class:`~.stdio.StdioTransport` and its mixins define them)."""

    if TYPE_CHECKING:
        config: StdioConfig
        process: AgentProcess | None
        workspace: str
        _files: Workspace
        _fs_limiter: anyio.CapacityLimiter | None
        _permissions: PermissionPrompts
        _terminal_handler: TerminalHandler | None
        _conn: JsonRpcConnection
        _events: EventQueue[AgentEvent]
        _capabilities: InitializeResult | None
        _session_id: str | None
        _modes: list[ModeInfo]
        _current_mode_id: str
        _models: list[ModelInfo]
        _current_model_id: str
        _config_options: list[acp.SessionConfigOption]
        _queue: deque[_Turn]
        _active: _Turn | None
        _wakeup: Wakeup
        _replaying: bool
        _replayed_plan: Plan | None
        _open_tools: dict[str, int]
        _context_size: int
        paused: int

        def _emit(self, event: AgentEvent, *, final: bool = False) -> None: ...
        async def _backpressure(self) -> None: ...
        def _on_protocol_error(self, error: RemoteProtocolError) -> None: ...
        async def _call(self, method: str, params: Any) -> Any: ...
        @staticmethod
        def _decode_result(method: str, raw: Raw) -> Any: ...
        def _require_initialized(self) -> InitializeResult: ...
        def _require_session(self) -> str: ...
        def _ensure_open(self) -> None: ...
        def _refresh_models(self, models: acp.SessionModelState | None = None) -> None: ...
        def _models_event(self, source: str, config_id: str = "") -> SessionModels: ...
        def _active_generation(self) -> int: ...
        def _cancel_permissions(self) -> None: ...
        def _sweep_tools(self, status: str) -> None: ...
        async def _in_thread(self, func: Callable[[threading.Event], _T], what: str) -> _T: ...
