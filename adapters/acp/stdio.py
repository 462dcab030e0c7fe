"""``StdioTransport``: the :class:`~acpfsm.adapters.transport.AgentTransport` over an ACP agent's
stdin/stdout (a :class:`~.jsonrpc.JsonRpcConnection` to an :class:`~.process.AgentProcess`).

Theory of operation
-------------------
It behaves as agentctl's ACP adapter does (kandev internal/agentctl/server/adapter/transport/
acp/: adapter_prompt.go, adapter_prompt_cancel.go, adapter_updates.go; functions named below).
Requests (initialize, session/new|load, set_*) are plain awaited RPCs. Turns are not:
:meth:`StdioTransport.prompt` queues the turn and returns; one **prompt gate** (agentctl's
``acquirePromptTurn``) lets one ``session/prompt`` own the session at a time, in the
order the prompts were made. The transport's turn worker writes each ``session/prompt`` when
the gate is free; no task waits for its answer: the reader ends the turn the moment the
answer is read, so its end keeps its place in the wire order (what the agent writes after
answering follows it). The answer becomes ``Complete(stop_reason, prompt_generation=g)``, its
JSON-RPC error ``ErrorEvent(error=<compact JSON of the error>, prompt_generation=g)``.

**Steer** (``beginSteerHandoff``): when the agent advertised
``_meta.claudeCode.promptQueueing: true``, a steer is a second ``session/prompt`` sent at once
while the first is still open. The gate passes to the successor, the predecessor is *handed
off* and its early end is suppressed, so the pair yields exactly one ``Complete``, stamped with
the generation the steer carries (the runtime sends the active one). Without queueing, or with
no turn in flight, ``steer`` raises :class:`SteerUnsupported` and nothing is sent. A steer
whose ``session/prompt`` is not written (its caller cancelled, its bound reached) undoes the
handoff: a predecessor still running owes its end again and keeps the gate; one that ended
during the failed send frees the gate and delivers the end it had withheld.

**Cancel** (``Cancel``): the ``session/cancel`` notification, pending permission prompts
answered ``cancelled``, open tool calls marked cancelled; then a bounded wait
(``cancel_timeout``, 3 s) for the turn to end (a compliant agent answers ``stopReason:
cancelled``). If it does not, the turn is abandoned: ``CancelResult(acknowledged=False)``, the
gate is released, and the turn's later answer is suppressed (agentctl's ``prompt abandoned
after cancel``).

**Events** (``convertNotification``) arrive in order on :meth:`StdioTransport.events`:
``session/update`` notifications are mapped inline by the connection's reader, so every update
the agent sent before answering a prompt precedes that prompt's ``Complete``. The transport
adds ``agent_capabilities`` after initialize, ``session_mode``/``session_models``/``session_status``
after session/new|load, convergence events after set_*, ``permission_request``/
``permission_cancelled``, ``protocol_error`` for garbage the agent wrote (survived), and, as
the very last event, ``stream_disconnected`` (empty ``error`` for our own close). The stream
has backpressure: with ``event_queue_limit`` events undelivered the reader stops reading the
agent (it blocks on its full pipe) until the consumer has taken them down to half; a consumer
that does not catch up within ``backpressure_timeout`` closes the transport
(:class:`EventConsumerStalled`). On transport
death every turn still owed an end first gets an ``ErrorEvent`` quoting the death
(``peer disconnected before response: agent process exited with code N; stderr: …``).

**Agent → client requests**: ``session/request_permission`` goes to the permission policy
(default :func:`~acpfsm.adapters.transport.reject_permission_policy`: refuse); ``fs/read_text_file``/``fs/write_text_file``
are served by :class:`~acpfsm.adapters.workspace.Workspace`: every path is resolved beneath
the workspace's directory descriptor (``openat2``, else a walk that follows no link), only
regular files are read or replaced, reads stream ``line``/``limit`` up to ``fs_max_read_bytes``,
writes are atomic up to ``fs_max_write_bytes``, and each operation runs in a worker thread the
transport abandons after ``fs_timeout`` or when it closes. A refusal is a JSON-RPC error to the
agent: ``-32602`` for a bad path (NUL, relative, too long, outside, a refused symbolic link), a
file that is not regular, too large or text that is not Unicode; ``-32002`` for a missing file;
``-32603`` for any other failure (with ``data.details``). Unless ``fs_read``/``fs_write`` is
set, the method answers ``-32601``. A permission request reaches the app under
:func:`permission_request_id` of its JSON-RPC id, one string per distinct id (``7`` is
``"7"``, the string ``"1"`` is ``'"1"'`` so that it is not taken for the number ``1``); one
whose id would be longer than :data:`MAX_PERMISSION_ID_CHARS` is refused with ``-32600`` and
reported. ``terminal/*`` go to ``terminal_handler`` or are refused
with ``-32601`` (and the capability is not advertised). An in-memory attachment the agent
cannot take inline is saved privately under ``<workspace>/.acpfsm/attachments/<session>/``
through the same confinement, following no link.
"""

from __future__ import annotations

import base64
import contextlib
import enum
import functools
import logging
import os
import pathlib
import re
import secrets
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar

import anyio
import anyio.abc
import anyio.lowlevel
import msgspec
from msgspec import Raw

from ..classify import PHRASE_LOAD_UNSUPPORTED
from ..errors import (
    UNDECODABLE_JSON,
    AcpfsmError,
    AgentRequestError,
    DialRefused,
    EventConsumerStalled,
    ExceptionMapping,
    FileTooLarge,
    InvalidText,
    LocalProtocolError,
    MissingFile,
    NotRegularFile,
    PathRefused,
    RemoteProtocolError,
    SteerUnsupported,
    SymlinkRefused,
    TransportClosed,
    WorkspaceError,
    map_exceptions,
)
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
    ProtocolErrorEvent,
    Reasoning,
    SessionInfo,
    SessionMode,
    SessionModels,
    SessionStatus,
    StreamDisconnected,
    ToolCall,
    ToolUpdate,
    Unknown,
)
from ..mcp_servers import McpServerStdio
from ..sync import EventQueue, Flag, Wakeup
from ..transport import (
    AgentInfo,
    Attachment,
    CancelResult,
    InitializeResult,
    McpServer,
    PermissionPolicy,
    PermissionPrompts,
    RedialPolicy,
    SessionResult,
    attachment_content,
    reject_permission_policy,
)
from ..workspace import Resolver, Workspace, run_in_thread, safe_component
from . import messages as acp
from .jsonrpc import (
    DEFAULT_FLOOD_GRACE,
    DEFAULT_MAX_INCOMING,
    DEFAULT_MAX_LINE_BYTES,
    JsonRpcConnection,
    JsonRpcErrorReply,
    method_not_found,
)
from .process import (
    DEFAULT_INHERITED_ENV,
    DEFAULT_SHUTDOWN,
    AgentProcess,
    ShutdownPolicy,
    open_agent_process,
)

__all__ = [
    "DEFAULT_CONFIG",
    "LOAD_UNSUPPORTED_MESSAGE",
    "MAX_PERMISSION_ID_CHARS",
    "PermissionPolicy",
    "StdioConfig",
    "StdioTransport",
    "TerminalHandler",
    "connect_stdio_transport",
    "open_stdio_transport",
    "permission_request_id",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_NO_REDIAL = RedialPolicy(initial_delay=0.0, max_delay=0.0, budget=0.0)

LOAD_UNSUPPORTED_MESSAGE: Final = PHRASE_LOAD_UNSUPPORTED

MAX_PERMISSION_ID_CHARS: Final = 256
"""The longest app-facing permission request id: the app keeps ids (events, history, the
answers it remembers), so an agent's megabyte id is refused rather than kept."""

_NUMBER_LIKE: Final = re.compile(r"-?[0-9]+", re.ASCII)


def permission_request_id(request_id: acp.RequestId) -> str:
    """The app-facing id of the agent's JSON-RPC request ``request_id``, one string per
    distinct id (JSON-RPC ids ``1`` and ``"1"`` are two requests): a number is its decimal
    (``7`` → ``"7"``); a string is itself, unless it could be taken for a number or for one
    given this way (it is empty, all digits after an optional ``-``, or starts with ``"``):
    then it is its JSON text (``"1"`` → ``'"1"'``)."""
    if isinstance(request_id, int):
        return str(request_id)
    if not request_id or request_id[0] == '"' or _NUMBER_LIKE.fullmatch(request_id):
        return msgspec.json.encode(request_id).decode()
    return request_id


TerminalHandler = Callable[[str, Any], Awaitable[Any]]
"""Serves ``terminal/*``: ``(method, typed params)`` → result struct; raise
:class:`~.jsonrpc.JsonRpcErrorReply` to answer with an error."""


def _package_version() -> str:
    from importlib import metadata  # on first initialize: importing it costs ~10 % of ours

    try:
        return metadata.version("acpfsm")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0"


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


_TEXTUAL_MIME = re.compile(r"^(text/|application/(json|xml|x-yaml|yaml|javascript|toml)\b)")
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")
_TERMINAL_TOOL_STATUSES = frozenset({"complete", "error", "cancelled"})


def _snake(name: str) -> str:
    return _CAMEL.sub("_", name).lower()


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


def _option_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _flat_options(options: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for option in options:
        if isinstance(option.get("options"), list):  # a group
            out.extend(o for o in option["options"] if isinstance(o, dict))
        else:
            out.append(option)
    return out


def _config_option(option: acp.SessionConfigOption) -> ConfigOption:
    return ConfigOption(
        id=option.id,
        name=option.name,
        type=option.type,
        category=option.category or "",
        current_value=_option_value(option.current_value),
        options=list(option.options),
    )


def _prompt_queueing(meta: dict[str, Any] | None) -> bool:
    claude = (meta or {}).get("claudeCode")
    return isinstance(claude, dict) and claude.get("promptQueueing") is True


class StdioTransport:
    """See the module docstring. Create with :func:`open_stdio_transport` (spawns the agent)
    or :func:`connect_stdio_transport` (any pair of byte streams)."""

    def __init__(
        self,
        receive_stream: anyio.abc.ByteReceiveStream,
        send_stream: anyio.abc.ByteSendStream,
        *,
        workspace: str | os.PathLike[str],
        process: AgentProcess | None = None,
        permission_policy: PermissionPolicy = reject_permission_policy,
        terminal_handler: TerminalHandler | None = None,
        config: StdioConfig = DEFAULT_CONFIG,
    ) -> None:
        self.config: Final = config
        self.process: Final = process
        self.workspace: Final = os.path.realpath(os.fspath(workspace))
        self._files = Workspace(workspace, resolver=config.fs_resolver)
        self._fs_limiter: anyio.CapacityLimiter | None = None
        self._permissions = PermissionPrompts(permission_policy)
        self._terminal_handler = terminal_handler
        self._conn = JsonRpcConnection(
            receive_stream,
            send_stream,
            request_handler=self._serve_request,
            notification_handler=self._on_notification,
            on_protocol_error=self._on_protocol_error,
            on_close=self._on_connection_closed,
            peer_info=self._peer_info if process is not None else None,
            max_line_bytes=config.max_line_bytes,
            max_incoming=config.max_incoming,
            flood_grace=config.flood_grace,
            name="agent",
        )
        self._events: EventQueue[AgentEvent] = EventQueue()
        self._capabilities: InitializeResult | None = None
        self._session_id: str | None = None
        self._modes: list[ModeInfo] = []
        self._current_mode_id = ""
        self._models: list[ModelInfo] = []
        self._current_model_id = ""
        self._config_options: list[acp.SessionConfigOption] = []
        # turns
        self._queue: deque[_Turn] = deque()
        self._active: _Turn | None = None
        self._wakeup = Wakeup()  # the turn worker, when a turn may go
        # per-session bookkeeping for the event mapping
        self._replaying = False
        self._replayed_plan: Plan | None = None
        self._open_tools: dict[str, int] = {}
        self._context_size = 0
        # lifecycle
        self._task_group: anyio.abc.TaskGroup | None = None
        self._run_scope: anyio.CancelScope | None = None
        self._closing = False
        self._closed = anyio.Event()
        self.paused = 0
        """How many times reading the agent was paused for a consumer behind (diagnostics)."""

    # ------------------------------------------------------------------ properties

    @property
    def capabilities(self) -> InitializeResult | None:
        return self._capabilities

    @property
    def session_id(self) -> str | None:
        return self._session_id

    @property
    def connection(self) -> JsonRpcConnection:
        return self._conn

    def is_connected(self) -> bool:
        return not self._closing and not self._conn.closed

    @property
    def reconnectable(self) -> bool:
        """Pipes never come back."""
        return False

    @property
    def redial_policy(self) -> RedialPolicy:
        """Unused: pipes are never redialled."""
        return _NO_REDIAL

    async def redial(self) -> None:
        """Pipes cannot be redialled: always :class:`DialRefused`."""
        raise DialRefused("the agent's stdio pipes cannot be redialled")

    def give_up(self, reason: str) -> None:
        """End the connection as a dead pipe would (owed turns fail, then the final
        ``stream_disconnected``; the process is shut down). A no-op once it has ended."""
        if not self._closing:
            self._conn.abort(reason)

    @property
    def endpoint(self) -> str:
        return ""

    async def stop_agent(self) -> None:
        """Nothing to ask a local process: its shutdown always escalates close stdin →
        SIGTERM → SIGKILL to its process group, bounded."""

    def events(self) -> AsyncIterator[AgentEvent]:
        """The ordered event stream (single consumer); ends after ``stream_disconnected``."""
        return self._events

    def stderr_tail(self, max_lines: int | None = None) -> str:
        return "" if self.process is None else self.process.stderr.tail(max_lines)

    # ------------------------------------------------------------------ lifecycle

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve the connection until :meth:`aclose` (the factories start this for you)."""
        with anyio.CancelScope() as self._run_scope:
            async with anyio.create_task_group() as tg:
                self._task_group = tg
                await tg.start(self._conn.run)
                tg.start_soon(self._turn_worker)
                task_status.started()
        self._task_group = None

    async def aclose(self) -> None:
        """Close the connection, shut the agent process down (close stdin → SIGTERM →
        SIGKILL to its group), emit the final ``stream_disconnected``. Idempotent, shielded."""
        with anyio.CancelScope(shield=True):
            if self._closing:
                await self._closed.wait()
                return
            self._closing = True
            try:
                self._cancel_permissions()
                self._conn.shutdown()  # pending requests fail; stdout is drained until EOF
                if self.process is not None:
                    await self.process.aclose()
                await self._conn.aclose()
                self._finish_events("")
            finally:
                if self._run_scope is not None:
                    self._run_scope.cancel()
                self._closed.set()

    # ------------------------------------------------------------------ events

    def _emit(self, event: AgentEvent, *, final: bool = False) -> None:
        if self._events.closed:
            return
        if not final and len(self._events) >= 2 * self.config.event_queue_limit:
            log.error("event queue overflow (%d undelivered events)", len(self._events))
            self._conn.abort("notification queue overflow")
            return
        self._events.put(event)

    async def _backpressure(self) -> None:
        """The consumer is behind (``event_queue_limit`` events undelivered): stop reading
        the agent (this runs in the connection's reader) until it has taken them down to
        half, at most ``backpressure_timeout``; then close the transport with
        :class:`EventConsumerStalled`, saying whether it took any."""
        events, config = self._events, self.config
        before = len(events)
        self.paused += 1
        log.info("event consumer behind (%d undelivered): reading the agent paused", before)
        if await events.wait_for_room(config.event_queue_limit // 2, config.backpressure_timeout):
            return
        left = len(events)
        why = (
            "is gone or stuck: it took none"
            if left >= before
            else f"is too slow: it took {before - left}"
        )
        message = (
            f"notification queue overflow: the event consumer {why} of {before} undelivered "
            f"events within {config.backpressure_timeout:g}s"
        )
        log.error("%s", message)
        self._conn.abort(message, kind=EventConsumerStalled)

    def _finish_events(self, error: str, stderr_tail: str = "") -> None:
        if self._events.closed:
            return
        process = self.process
        self._events.put(
            StreamDisconnected(
                session_id=self._session_id or "",
                error=error,
                exit_code=None if process is None else process.returncode,
                stderr_tail=stderr_tail or ("" if process is None else process.stderr.tail(20)),
            )
        )
        self._events.close()

    def _on_connection_closed(self, error: TransportClosed | None) -> None:
        if error is not None and not self._closing:
            message = str(error)
            owed = [self._active, *self._queue] if self._active else list(self._queue)
            for turn in owed:
                if turn is not None and turn.fate is _Fate.OWED:
                    turn.fate = _Fate.SETTLED
                    self._emit(
                        ErrorEvent(
                            session_id=self._session_id or "",
                            prompt_generation=turn.generation,
                            error=message,
                            data={"transport_closed": True, "stderr_tail": error.stderr_tail},
                        ),
                        final=True,
                    )
            self._queue.clear()
            self._finish_events(message, error.stderr_tail)
            if self.process is not None and self._task_group is not None:
                self._task_group.start_soon(self.process.aclose)
        elif error is None and not self._closing:
            self._finish_events("")

    def _on_protocol_error(self, error: RemoteProtocolError) -> None:
        log.warning("%s", error)
        self._emit(ProtocolErrorEvent(session_id=self._session_id or "", error=str(error)))

    async def _peer_info(self) -> tuple[str, str]:
        assert self.process is not None
        description, tail = await self.process.wait_exit_details(self.config.exit_grace)
        if tail:
            description += "; stderr: " + "; ".join(tail.splitlines()[-10:])
        return description, tail

    # ------------------------------------------------------------------ RPC helpers

    async def _call(self, method: str, params: Any) -> Any:
        raw = await self._conn.request(method, params)
        return self._decode_result(method, raw)

    @staticmethod
    def _decode_result(method: str, raw: Raw) -> Any:
        invalid: ExceptionMapping = {
            UNDECODABLE_JSON: lambda exc: RemoteProtocolError(
                f"invalid {method} result from agent: {exc}"
            )
        }
        with map_exceptions(invalid):
            return acp.decode_result(method, raw)

    def _require_initialized(self) -> InitializeResult:
        if self._capabilities is None:
            raise LocalProtocolError("initialize the agent first")
        return self._capabilities

    def _require_session(self) -> str:
        if self._session_id is None:
            raise LocalProtocolError("no ACP session: call new_session or load_session first")
        return self._session_id

    def _ensure_open(self) -> None:
        if self._closing:
            raise TransportClosed("connection closed")
        self._conn.ensure_open()

    # ------------------------------------------------------------------ initialize / sessions

    async def initialize(self) -> InitializeResult:
        self._ensure_open()
        request = acp.InitializeRequest(
            protocol_version=acp.PROTOCOL_VERSION,
            client_capabilities=acp.ClientCapabilities(
                fs=acp.FileSystemCapability(
                    read_text_file=self.config.fs_read, write_text_file=self.config.fs_write
                ),
                terminal=self._terminal_handler is not None,
            ),
            client_info=acp.Implementation(
                name=self.config.client_name,
                version=self.config.client_version or _package_version(),
            ),
        )
        raw = await self._conn.request("initialize", request)
        response: acp.InitializeResponse = self._decode_result("initialize", raw)
        if response.protocol_version != acp.PROTOCOL_VERSION:
            raise RemoteProtocolError(
                f"agent answered protocolVersion {response.protocol_version}; "
                f"acpfsm speaks {acp.PROTOCOL_VERSION}"
            )
        caps = response.agent_capabilities
        info = response.agent_info
        result = InitializeResult(
            protocol_version=response.protocol_version,
            agent=AgentInfo(name=info.name, version=info.version or "unknown")
            if info is not None
            else AgentInfo(),
            load_session=caps.load_session,
            prompt_queueing=_prompt_queueing(caps.meta),
            supports_image=caps.prompt_capabilities.image,
            supports_audio=caps.prompt_capabilities.audio,
            supports_embedded_context=caps.prompt_capabilities.embedded_context,
            auth_methods=list(response.auth_methods or ()),
            session_capabilities=caps.session_capabilities.advertised()
            if caps.session_capabilities is not None
            else [],
            meta={
                **({"agentCapabilities": caps.meta} if caps.meta else {}),
                **(response.meta or {}),
            },
            unmodelled=acp.unmodelled(acp.InitializeResponse, raw),
            mcp_http=caps.mcp_capabilities.http,
            mcp_sse=caps.mcp_capabilities.sse,
        )
        self._capabilities = result
        self._emit(
            AgentCapabilities(
                supports_image=result.supports_image,
                supports_audio=result.supports_audio,
                supports_embedded_context=result.supports_embedded_context,
                supports_prompt_queueing=result.prompt_queueing,
                supports_load_session=result.load_session,
                auth_methods=result.auth_methods,
            )
        )
        return result

    async def authenticate(self, method_id: str) -> None:
        self._ensure_open()
        await self._call("authenticate", acp.AuthenticateRequest(method_id=method_id))

    @staticmethod
    def _mcp_servers(servers: Sequence[McpServer]) -> list[Any]:
        out: list[Any] = []
        for server in servers:
            if isinstance(server, McpServerStdio):
                out.append(
                    acp.McpServerStdio(
                        name=server.name,
                        command=server.command,
                        args=list(server.args),
                        env=[acp.EnvVariable(name=k, value=v) for k, v in server.env.items()],
                    )
                )
                continue
            wire = acp.McpServerHttp if server.__struct_config__.tag == "http" else acp.McpServerSse
            out.append(
                wire(
                    type=str(server.__struct_config__.tag),
                    name=server.name,
                    url=server.url,
                    headers=[acp.HttpHeader(name=k, value=v) for k, v in server.headers.items()],
                )
            )
        return out

    async def new_session(self, cwd: str, mcp_servers: Sequence[McpServer] = ()) -> SessionResult:
        caps = self._require_initialized()
        self._ensure_open()
        request = acp.NewSessionRequest(cwd=cwd, mcp_servers=self._mcp_servers(mcp_servers))
        try:
            response: acp.NewSessionResponse = await self._call("session/new", request)
        except AgentRequestError as exc:
            if exc.code == -32000:
                self._emit(AuthRequired(error=exc.error_message, auth_methods=caps.auth_methods))
            raise
        self._reset_session(response.session_id)
        result = self._absorb_session_state(
            response.session_id, response.modes, response.models, response.config_options
        )
        self._emit_session_snapshot(result, "new")
        return result

    async def load_session(
        self, session_id: str, cwd: str, mcp_servers: Sequence[McpServer] = ()
    ) -> SessionResult:
        caps = self._require_initialized()
        if not caps.load_session:
            raise LocalProtocolError(LOAD_UNSUPPORTED_MESSAGE)
        self._ensure_open()
        previous = self._session_id
        request = acp.LoadSessionRequest(
            session_id=session_id, cwd=cwd, mcp_servers=self._mcp_servers(mcp_servers)
        )
        self._reset_session(session_id)
        self._replaying = self.config.suppress_replay

        def replay_over(result: Raw | None, error: Exception | None) -> None:
            self._replaying = False  # at once, in the reader: no later update is suppressed

        try:
            pending = await self._conn.send_request(
                "session/load", request, on_response=replay_over
            )
            response: acp.LoadSessionResponse = self._decode_result(
                "session/load", await pending.wait()
            )
        except BaseException:
            self._replaying = False
            self._session_id = previous
            raise
        result = self._absorb_session_state(
            session_id, response.modes, response.models, response.config_options
        )
        if self._replayed_plan is not None:
            # the last replayed plan is re-emitted (as agentctl does), marked as history
            self._emit(msgspec.structs.replace(self._replayed_plan, replayed=True))
            self._replayed_plan = None
        self._emit_session_snapshot(result, "resumed")
        return result

    def _reset_session(self, session_id: str) -> None:
        self._session_id = session_id
        self._replayed_plan = None
        self._open_tools.clear()
        self._context_size = 0

    def _model_option(self) -> acp.SessionConfigOption | None:
        for option in self._config_options:
            if option.category == "model":
                return option
        return None

    def _absorb_session_state(
        self,
        session_id: str,
        modes: acp.SessionModeState | None,
        models: acp.SessionModelState | None,
        config_options: list[acp.SessionConfigOption] | None,
    ) -> SessionResult:
        if modes is not None:
            self._current_mode_id = modes.current_mode_id
            self._modes = [
                ModeInfo(id=m.id, name=m.name, description=m.description or "")
                for m in modes.available_modes
            ]
        else:
            self._current_mode_id, self._modes = "", []
        self._config_options = list(config_options or ())
        self._refresh_models(models)
        return SessionResult(
            session_id=session_id,
            current_model_id=self._current_model_id,
            models=list(self._models),
            config_options=[_config_option(o) for o in self._config_options],
            current_mode_id=self._current_mode_id,
            modes=list(self._modes),
            has_model_state=models is not None or bool(self._config_options),
        )

    def _refresh_models(self, models: acp.SessionModelState | None = None) -> None:
        option = self._model_option()
        if models is not None:
            self._current_model_id = models.current_model_id
            self._models = [
                ModelInfo(model_id=m.model_id, name=m.name, description=m.description or "")
                for m in models.available_models
            ]
        elif option is not None:
            self._current_model_id = _option_value(option.current_value)
            self._models = [
                ModelInfo(
                    model_id=str(o.get("value", "")),
                    name=str(o.get("name", "")),
                    description=str(o.get("description") or ""),
                )
                for o in _flat_options(option.options)
            ]

    def _models_event(self, source: str, config_id: str = "") -> SessionModels:
        """The session's model state; ``config_id`` names the config option whose
        ``session/set_config_option`` answer this is (``config_options_config_id``, as
        kandev's agentctl ACP adapter marks its convergence event), so the runtime's config
        settlement waiting for that option can settle."""
        data = {"config_options_source": source}
        if config_id:
            data["config_options_config_id"] = config_id
        return SessionModels(
            session_id=self._session_id or "",
            current_model_id=self._current_model_id,
            session_models=list(self._models),
            config_options=[_config_option(o) for o in self._config_options],
            data=data,
        )

    def _emit_session_snapshot(self, result: SessionResult, status: str) -> None:
        sid = result.session_id
        if result.modes or result.current_mode_id:
            self._emit(
                SessionMode(
                    session_id=sid,
                    current_mode_id=result.current_mode_id,
                    available_modes=result.modes,
                )
            )
        if result.has_model_state:
            self._emit(self._models_event("provider_response"))
        self._emit(SessionStatus(session_id=sid, session_status=status))

    # ------------------------------------------------------------------ mode / model / config

    async def set_mode(self, mode_id: str) -> None:
        sid = self._require_session()
        self._ensure_open()
        await self._call(
            "session/set_mode", acp.SetSessionModeRequest(session_id=sid, mode_id=mode_id)
        )
        self._current_mode_id = mode_id
        self._emit(
            SessionMode(session_id=sid, current_mode_id=mode_id, available_modes=list(self._modes))
        )

    async def set_config_option(self, config_id: str, value: str) -> None:
        sid = self._require_session()
        self._ensure_open()
        known = next((o for o in self._config_options if o.id == config_id), None)
        wire_value: str | bool = value
        value_type: str | None = None
        if known is not None and known.type == "boolean":
            wire_value, value_type = value.strip().lower() == "true", "boolean"
        request = acp.SetSessionConfigOptionRequest(
            session_id=sid, config_id=config_id, value=wire_value, type=value_type
        )
        response: acp.SetSessionConfigOptionResponse = await self._call(
            "session/set_config_option", request
        )
        if response.config_options:
            self._config_options = list(response.config_options)
        else:
            self._config_options = [
                msgspec.structs.replace(o, current_value=wire_value) if o.id == config_id else o
                for o in self._config_options
            ]
        self._refresh_models()
        self._emit(self._models_event("provider_response", config_id))

    async def set_model(self, model_id: str) -> None:
        """Model selection: through the ``category: "model"`` config option when the agent
        has one, else (or on ``-32601``) the legacy ``session/set_model``. An agent that
        implements neither (``-32601`` twice) leaves the model unchanged and this returns
        quietly, with no event (agentctl's ``sessionmodel.Apply``)."""
        sid = self._require_session()
        self._ensure_open()
        option = self._model_option()
        if option is not None:
            try:
                await self.set_config_option(option.id, model_id)
                return
            except AgentRequestError as exc:
                if exc.code != -32601:
                    raise
        request = acp.SetSessionModelRequest(session_id=sid, model_id=model_id)
        try:
            await self._call("session/set_model", request)
        except AgentRequestError as exc:
            if exc.code == -32601:
                log.info("agent supports no model selection; model %r not applied", model_id)
                return
            raise
        self._current_model_id = model_id
        self._emit(self._models_event("provider_response"))

    # ------------------------------------------------------------------ attachments

    async def materialize_attachment(self, attachment: Attachment) -> Attachment:
        """Read a local attachment's file into ``data``; fill ``size`` and a guessed MIME type.
        An in-memory attachment the agent cannot take inline (:meth:`_inline`) is saved here,
        before anything is sent, and becomes a ``path`` attachment naming the saved file:
        a refused or failed save raises :class:`WorkspaceError` (the client's own failure,
        not the agent's)."""
        data, mime = await attachment_content(attachment)
        att = msgspec.structs.replace(attachment, data=data, size=len(data), mime_type=mime)
        if att.path or self._inline(att):
            return att
        path = await self._save_attachment(att)
        return msgspec.structs.replace(att, path=path, delivery_mode="path", data=b"")

    def _inline(self, att: Attachment) -> str:
        """How the agent takes ``att`` in the prompt itself: ``image`` or ``audio`` (a kind
        it supports, within ``inline_media_limit``), ``embedded`` (when it takes embedded
        context), or ``""``: not inline (it gets a link to a file)."""
        caps = self._capabilities or InitializeResult(protocol_version=acp.PROTOCOL_VERSION)
        small = att.size <= self.config.inline_media_limit
        if att.mime_type.startswith("image/") and caps.supports_image and small:
            return "image"
        if att.mime_type.startswith("audio/") and caps.supports_audio and small:
            return "audio"
        return "embedded" if caps.supports_embedded_context else ""

    def _file_uri(self, attachment: Attachment) -> str:
        if attachment.path:
            return pathlib.Path(os.path.abspath(attachment.path)).as_uri()
        return f"attachment:///{attachment.attachment_id or attachment.name}"

    async def _prompt_blocks(
        self, text: str, attachments: Sequence[Attachment]
    ) -> list[acp.ContentBlock]:
        blocks: list[acp.ContentBlock] = []
        if text or not attachments:
            blocks.append(acp.TextContent(text=text))
        for item in attachments:
            if item.delivery_mode == "path" and item.path:
                blocks.append(
                    acp.ResourceLink(
                        uri=self._file_uri(item),
                        name=item.name,
                        mime_type=item.mime_type,
                        size=item.size or None,
                    )
                )
                continue
            att = await self.materialize_attachment(item)  # saved, when not taken inline
            inline = self._inline(att)
            if not inline:
                blocks.append(
                    acp.ResourceLink(
                        uri=self._file_uri(att),
                        name=att.name,
                        mime_type=att.mime_type,
                        size=att.size,
                    )
                )
                continue
            encoded = base64.b64encode(att.data).decode("ascii")
            if inline == "image":
                blocks.append(acp.ImageContent(data=encoded, mime_type=att.mime_type))
            elif inline == "audio":
                blocks.append(acp.AudioContent(data=encoded, mime_type=att.mime_type))
            else:
                textual = _TEXTUAL_MIME.match(att.mime_type) is not None
                contents = acp.ResourceContents(
                    uri=self._file_uri(att),
                    mime_type=att.mime_type,
                    text=att.data.decode("utf-8", "replace") if textual else None,
                    blob=None if textual else encoded,
                )
                blocks.append(acp.EmbeddedResource(resource=contents))
        return blocks

    async def _save_attachment(self, att: Attachment) -> str:
        """An in-memory attachment the agent cannot take inline is saved as
        ``<workspace>/.acpfsm/attachments/<session>/<unique>/<name>`` (private, no link
        followed): every attachment its own file, whatever its name (two ``report.txt``, or
        two names that fall back to the same default, never share one)."""
        session = safe_component(self._session_id or "", "none")
        fallback = safe_component(att.attachment_id, "attachment")
        name = safe_component(os.path.basename(att.name), fallback)
        parts = (".acpfsm", "attachments", session, secrets.token_hex(8), name)
        data = att.data
        return await self._in_thread(
            lambda cancelled: self._files.save_private(parts, data, cancelled=cancelled),
            f"saving attachment {att.name!r}",
        )

    # ------------------------------------------------------------------ turns

    def _wake(self) -> None:
        self._wakeup.wake()

    def _release(self, turn: _Turn) -> None:
        if self._active is turn:
            self._active = None
            if self._queue:  # else the next prompt wakes the worker (no step in between)
                self._wake()

    def _active_generation(self) -> int:
        return self._active.generation if self._active is not None else 0

    async def prompt(self, text: str, attachments: Sequence[Attachment], generation: int) -> None:
        """Queue a turn; its end arrives as ``complete``/``error``. Before returning this
        yields once (it cannot be cancelled there: the turn is queued), which gives the turn
        worker, woken first, the chance to write the request of a turn the gate lets go
        before the caller goes on: what the caller does next is then off the round trip's
        path. On asyncio it has written it by the time this returns when the turn's content
        needed no file read and no other write held the pipe; trio runs ready tasks in a
        random order."""
        self._require_session()
        self._ensure_open()
        self._cancel_permissions()
        self._queue.append(_Turn(text, attachments, generation))
        self._wake()
        await anyio.lowlevel.cancel_shielded_checkpoint()

    async def _turn_worker(self) -> None:
        """Write each queued turn's ``session/prompt`` once the gate is free; its answer ends
        it in the reader (:meth:`_answered`), with no task waiting for it."""
        while True:
            while not self._queue or self._active is not None:
                await self._wakeup.wait()  # checked and waited for with no yield between
            turn = self._queue.popleft()
            self._active = turn
            await self._send_turn(turn)

    async def _send_turn(self, turn: _Turn) -> None:
        """Write ``turn``'s request; a turn that ends without one (abandoned meanwhile, a
        request that cannot be written, the transport closing) is ended here."""
        outcome: AgentEvent | None = None
        try:
            blocks = await self._prompt_blocks(turn.text, turn.attachments)
            if not _given_up(turn):
                self._replaying = False
                turn.pending = await self._conn.send_request(
                    "session/prompt",
                    acp.PromptRequest(session_id=self._require_session(), prompt=blocks),
                    on_response=functools.partial(self._answered, turn),
                )
                if _given_up(turn):  # cancel() gave up on it during the write
                    turn.pending.abandon()  # the agent is told; its late answer is dropped
                return
        except TransportClosed:
            pass  # the death handler has settled this turn (ending it again is a no-op)
        except AcpfsmError as exc:
            outcome = self._error_event(turn, str(exc), {})
        except BaseException:
            self._end_turn(turn, None)  # the transport is closing
            raise
        self._end_turn(turn, outcome)

    def _answered(self, turn: _Turn, result: Raw | None, error: Exception | None) -> None:
        """The end of ``turn``'s ``session/prompt``, told by the connection at once: its
        answer (in the reader, before any later line), or the connection's close or the
        request's abandonment (a :class:`TransportClosed`; in whichever task that
        happens)."""
        self._end_turn(turn, self._outcome(turn, result, error))

    def _outcome(
        self, turn: _Turn, result: Raw | None, error: Exception | None
    ) -> AgentEvent | None:
        if isinstance(error, AgentRequestError):
            return self._error_event(turn, error.json_projection(), error.as_dict())
        if isinstance(error, RemoteProtocolError):
            return self._error_event(turn, str(error), {})
        if error is not None or result is None:
            return None  # closed (the death handler settled it) or abandoned
        try:
            response: acp.PromptResponse = self._decode_result("session/prompt", result)
        except RemoteProtocolError as exc:
            return self._error_event(turn, str(exc), {})
        usage = None
        if response.usage:
            usage = {_snake(k): v for k, v in response.usage.items()}
        return Complete(
            session_id=self._session_id or "",
            prompt_generation=turn.generation,
            stop_reason=response.stop_reason,
            usage=usage,
        )

    def _end_turn(self, turn: _Turn, outcome: AgentEvent | None) -> None:
        self._settle(turn, outcome)
        self._release(turn)
        turn.finished.set()

    def _error_event(self, turn: _Turn, error: str, data: dict[str, Any]) -> ErrorEvent:
        return ErrorEvent(
            session_id=self._session_id or "",
            prompt_generation=turn.generation,
            error=error,
            data=data,
        )

    def _settle(self, turn: _Turn, outcome: AgentEvent | None) -> None:
        fate, turn.fate = turn.fate, _Fate.SETTLED
        if fate is _Fate.SETTLED:
            return
        if fate is _Fate.HANDED_OFF:
            log.debug(
                "suppressing completion from handed-off prompt (generation %d)", turn.generation
            )
            turn.withheld = outcome  # owed again if the steer is not delivered after all
            return
        if fate is _Fate.ABANDONED:
            log.debug("prompt abandoned after cancel (generation %d)", turn.generation)
            return
        self._deliver(outcome)

    def _deliver(self, outcome: AgentEvent | None) -> None:
        if outcome is None:
            return
        if isinstance(outcome, Complete):
            self._sweep_tools("cancelled")
        self._emit(outcome)

    async def steer(self, text: str, attachments: Sequence[Attachment], generation: int) -> None:
        """Deliver ``text`` into the running turn (agents with prompt queueing only). The
        successor takes the gate; only it will emit ``complete``, stamped ``generation``."""
        sid = self._require_session()
        self._ensure_open()
        caps = self._require_initialized()
        if not caps.prompt_queueing:
            raise SteerUnsupported(
                "steer was not dispatched: agent does not advertise prompt queueing"
            )
        self._in_flight_or_raise()
        blocks = await self._prompt_blocks(text, attachments)
        predecessor = self._in_flight_or_raise()
        self._cancel_permissions()
        successor = _Turn(text, attachments, generation)
        predecessor.fate = _Fate.HANDED_OFF
        self._active = successor
        try:
            successor.pending = await self._conn.send_request(
                "session/prompt",
                acp.PromptRequest(session_id=sid, prompt=blocks),
                on_response=functools.partial(self._answered, successor),
            )
        except BaseException:
            if successor.fate is _Fate.OWED:  # not delivered: the successor owes nothing
                successor.fate = _Fate.SETTLED
                self._take_back(predecessor, successor)
            raise

    def _take_back(self, predecessor: _Turn, successor: _Turn) -> None:
        """Undo the handoff of a steer that was not delivered. A predecessor still running
        owes its end again and takes the gate back; one that ended during the failed send is
        not restored (nothing would ever release it: every later prompt would wait behind it):
        the successor's gate is released and the end it had withheld is delivered."""
        if predecessor.fate is _Fate.HANDED_OFF:
            predecessor.fate = _Fate.OWED
            successor.finished = predecessor.finished  # a cancel waiting on it waits for this end
            if self._active is successor:
                self._active = predecessor
            return
        self._release(successor)
        successor.finished.set()  # the turn has ended: a cancel waiting on it stops waiting
        withheld, predecessor.withheld = predecessor.withheld, None
        self._deliver(withheld)

    def _in_flight_or_raise(self) -> _Turn:
        turn = self._active
        if turn is None or turn.fate is not _Fate.OWED or turn.pending is None or turn.pending.done:
            raise SteerUnsupported("steer was not dispatched: no prompt in flight")
        return turn

    async def cancel(self) -> CancelResult:
        """``session/cancel`` and wait ≤ ``cancel_timeout`` for the turn to end (see module doc)."""
        if self._session_id is None:
            return CancelResult(acknowledged=True)
        self._ensure_open()
        turn = self._active
        self._cancel_permissions()
        self._sweep_tools("cancelled")
        await self._conn.notify(
            "session/cancel", acp.CancelNotification(session_id=self._session_id)
        )
        if turn is None:
            return CancelResult(acknowledged=True)
        with anyio.move_on_after(self.config.cancel_timeout):
            await turn.finished.wait()
        if turn.finished.is_set():
            return CancelResult(acknowledged=True)
        log.warning(
            "turn cancel not acknowledged: in-flight session/prompt did not end within %ss",
            self.config.cancel_timeout,
        )
        if turn.fate is _Fate.OWED:
            turn.fate = _Fate.ABANDONED
        if turn.pending is not None:
            turn.pending.abandon()
        self._release(turn)
        return CancelResult(acknowledged=False)

    def _cancel_permissions(self) -> None:
        """Answer every pending permission request ``cancelled`` (and emit
        ``permission_cancelled``): on cancel, on close, and before a new prompt or steer."""
        self._permissions.withdraw_all()

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

    async def _serve_request(
        self, request_id: acp.RequestId, method: str, params: Raw | None
    ) -> Any:
        if method.startswith("terminal/"):
            if self._terminal_handler is None:
                raise method_not_found(method)
            return await self._terminal_handler(method, self._typed_params(method, params))
        if method == "session/request_permission":
            app_id = permission_request_id(request_id)
            if len(app_id) > MAX_PERMISSION_ID_CHARS:
                error = (
                    f"permission request id longer than {MAX_PERMISSION_ID_CHARS} characters "
                    f"({len(app_id)}): refused"
                )
                self._on_protocol_error(RemoteProtocolError(error))
                raise JsonRpcErrorReply(-32600, "Invalid Request", {"details": error})
            request: acp.RequestPermissionRequest = self._typed_params(method, params)
            if request.session_id != self._session_id:
                # no tool runs for a session this client does not own, whatever the policy
                error = (
                    f"permission request {app_id!r} names ACP session {request.session_id!r}, "
                    f"not this client's ({self._session_id!r}): refused"
                )
                self._on_protocol_error(RemoteProtocolError(error))
                raise JsonRpcErrorReply(
                    -32602, "Invalid params: unknown session", {"sessionId": request.session_id}
                )
            return await self._ask_permission(app_id, request)
        if method == "fs/read_text_file" and self.config.fs_read:
            return await self._read_text_file(self._typed_params(method, params))
        if method == "fs/write_text_file" and self.config.fs_write:
            return await self._write_text_file(self._typed_params(method, params))
        raise method_not_found(method)

    @staticmethod
    def _typed_params(method: str, params: Raw | None) -> Any:
        with map_exceptions(_INVALID_PARAMS):
            return acp.decode_agent_params(method, params)

    async def _ask_permission(
        self, request_id: str, params: acp.RequestPermissionRequest
    ) -> acp.RequestPermissionResponse:
        event = PermissionRequest(
            session_id=params.session_id,
            prompt_generation=self._active_generation(),
            request_id=request_id,
            tool_call_id=params.tool_call.tool_call_id,
            permission_title=params.tool_call.title or "",
            options=[
                PermissionOption(option_id=o.option_id, name=o.name, kind=o.kind)
                for o in params.options
            ],
            tool_kind=params.tool_call.kind or "",
            raw_input=params.tool_call.raw_input,
        )
        self._emit(event)
        choice, withdrawn = await self._permissions.ask(event)
        if withdrawn:
            self._emit(PermissionCancelled(session_id=params.session_id, request_id=request_id))
        outcome: acp.PermissionOutcome = (
            acp.DeniedOutcome() if choice is None else acp.SelectedOutcome(option_id=choice)
        )
        return acp.RequestPermissionResponse(outcome=outcome)

    async def _in_thread(self, func: Callable[[threading.Event], _T], what: str) -> _T:
        """``func(cancelled)`` in a worker thread bounded by ``fs_timeout``, abandoned when
        the caller is cancelled (at most four at a time per transport)."""
        if self._fs_limiter is None:
            self._fs_limiter = anyio.CapacityLimiter(4)
        return await run_in_thread(
            func, bound=self.config.fs_timeout, limiter=self._fs_limiter, what=what
        )

    async def _fs_call(self, method: str, func: Callable[[threading.Event], _T]) -> _T:
        try:
            return await self._in_thread(func, method)
        except WorkspaceError as exc:
            log.info("%s refused: %s: %.200r", method, exc.reason, exc.path)
            raise _fs_error_reply(exc) from None

    async def _read_text_file(self, params: acp.ReadTextFileRequest) -> acp.ReadTextFileResponse:
        config = self.config
        content: str = await self._fs_call(
            "fs/read_text_file",
            lambda cancelled: self._files.read_text(
                params.path,
                line=params.line,
                limit=params.limit,
                max_bytes=config.fs_max_read_bytes,
                cancelled=cancelled,
            ),
        )
        return acp.ReadTextFileResponse(content=content)

    async def _write_text_file(self, params: acp.WriteTextFileRequest) -> None:
        config = self.config
        await self._fs_call(
            "fs/write_text_file",
            lambda cancelled: self._files.write_text(
                params.path,
                params.content,
                max_bytes=config.fs_max_write_bytes,
                cancelled=cancelled,
            ),
        )


_INVALID_PARAMS: Final[ExceptionMapping] = {
    UNDECODABLE_JSON: lambda exc: JsonRpcErrorReply(-32602, "Invalid params", {"details": str(exc)})
}
"""An agent request whose params do not decode is answered ``-32602``."""


def _fs_error_reply(exc: WorkspaceError) -> JsonRpcErrorReply:
    """The JSON-RPC error an agent gets for a refused or failed fs operation."""
    if isinstance(exc, MissingFile):
        return JsonRpcErrorReply(-32002, "Resource not found", {"uri": exc.path})
    if isinstance(exc, PathRefused | NotRegularFile | FileTooLarge | InvalidText):
        data: dict[str, Any] = {"path": exc.path}
        if isinstance(exc, SymlinkRefused):
            data["symlink"] = exc.link
        if isinstance(exc, FileTooLarge):
            data["limit"] = exc.limit
        return JsonRpcErrorReply(-32602, f"Invalid params: {exc.reason}", data)
    return JsonRpcErrorReply(-32603, "Internal error", {"details": exc.reason, "path": exc.path})


# ---------------------------------------------------------------------------------------- factories


@contextlib.asynccontextmanager
async def connect_stdio_transport(
    receive_stream: anyio.abc.ByteReceiveStream,
    send_stream: anyio.abc.ByteSendStream,
    *,
    workspace: str | os.PathLike[str],
    process: AgentProcess | None = None,
    permission_policy: PermissionPolicy = reject_permission_policy,
    terminal_handler: TerminalHandler | None = None,
    config: StdioConfig = DEFAULT_CONFIG,
) -> AsyncIterator[StdioTransport]:
    """A :class:`StdioTransport` over an existing pair of byte streams (``receive`` is the
    agent's stdout, ``send`` its stdin), served until the block exits (then :meth:`aclose`).
    Each line is handed to ``send_stream.send`` as one bytes-like buffer (a ``bytearray``,
    never written to again): a stream that keeps the item rather than writing it out should
    copy it with ``bytes(item)``."""
    transport = StdioTransport(
        receive_stream,
        send_stream,
        workspace=workspace,
        process=process,
        permission_policy=permission_policy,
        terminal_handler=terminal_handler,
        config=config,
    )
    async with anyio.create_task_group() as tg:
        await tg.start(transport.run)
        try:
            yield transport
        finally:
            await transport.aclose()


@contextlib.asynccontextmanager
async def open_stdio_transport(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    inherit_env: Sequence[str] = DEFAULT_INHERITED_ENV,
    workspace: str | os.PathLike[str] | None = None,
    permission_policy: PermissionPolicy = reject_permission_policy,
    terminal_handler: TerminalHandler | None = None,
    config: StdioConfig = DEFAULT_CONFIG,
    shutdown: ShutdownPolicy = DEFAULT_SHUTDOWN,
    stderr_max_bytes: int = 64 * 1024,
    stderr_max_lines: int = 200,
    secrets: Iterable[str] = (),
) -> AsyncIterator[StdioTransport]:
    """Spawn the agent (``argv``, no shell, its own process group, ``cwd`` as working
    directory, environment per :func:`~.process.build_agent_env`) and yield a connected,
    not yet initialized :class:`StdioTransport`. The workspace (fs confinement root)
    defaults to ``cwd``. ``secrets`` are masked in the agent's stderr we keep, beside its
    secret-looking environment values. Leaving the block closes everything; no process
    survives."""
    async with (
        open_agent_process(
            argv,
            cwd=cwd,
            env=env,
            inherit_env=inherit_env,
            stderr_max_bytes=stderr_max_bytes,
            stderr_max_lines=stderr_max_lines,
            shutdown=shutdown,
            secrets=secrets,
        ) as process,
        connect_stdio_transport(
            process.stdout,
            process.stdin,
            workspace=cwd if workspace is None else workspace,
            process=process,
            permission_policy=permission_policy,
            terminal_handler=terminal_handler,
            config=config,
        ) as transport,
    ):
        yield transport
