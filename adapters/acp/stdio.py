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

import contextlib
import logging
import os
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
from msgspec import Raw

from ..errors import (
    UNDECODABLE_JSON,
    DialRefused,
    EventConsumerStalled,
    ExceptionMapping,
    LocalProtocolError,
    RemoteProtocolError,
    TransportClosed,
    map_exceptions,
)
from ..events import (
    AgentEvent,
    ErrorEvent,
    ModeInfo,
    ModelInfo,
    Plan,
    ProtocolErrorEvent,
    StreamDisconnected,
)
from ..sync import EventQueue, Wakeup
from ..transport import (
    InitializeResult,
    PermissionPolicy,
    PermissionPrompts,
    RedialPolicy,
    reject_permission_policy,
)
from ..workspace import Workspace
from . import messages as acp
from ._stdio_base import (
    DEFAULT_CONFIG,
    LOAD_UNSUPPORTED_MESSAGE,
    StdioConfig,
    TerminalHandler,
    _Fate,
    _Turn,
)
from ._stdio_client import MAX_PERMISSION_ID_CHARS, _ClientSide, permission_request_id
from ._stdio_session import _SessionSide
from ._stdio_turns import _TurnSide
from ._stdio_updates import _UpdateSide
from .jsonrpc import JsonRpcConnection
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

_NO_REDIAL = RedialPolicy(initial_delay=0.0, max_delay=0.0, budget=0.0)


class StdioTransport(_ClientSide, _TurnSide, _SessionSide, _UpdateSide):
    """See the module docstring. Create with :func:`open_stdio_transport` (spawns the agent)
    or :func:`connect_stdio_transport` (any pair of byte streams). Its sides are mixins:
    ``_stdio_session``, ``_stdio_turns``, ``_stdio_updates``, ``_stdio_client``."""

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
        self.config = config
        self.process = process
        self.workspace = os.path.realpath(os.fspath(workspace))
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
