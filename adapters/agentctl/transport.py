"""``AgentctlTransport``: the :class:`~acpfsm.adapters.transport.AgentTransport` over one
agentctl instance's agent WebSocket, ``/api/v1/agent/stream`` (kandev internal/agentctl/server/
api/agent.go ``handleAgentStreamWS``; kandev's own client: agent.go ``readUpdatesStream``).

Theory of operation
-------------------
**One socket, three kinds of frames.** Every agent operation is a request envelope with a
fresh uuid ``id``; agentctl answers each with exactly one ``response`` or ``error`` frame
carrying the same id, in any order, interleaved with its events. The reader resolves a
frame as an answer only when its ``id`` is one this connection is waiting for (never by
``type``: agentctl's ``error`` *events* have no id); ``request`` frames with an id are
agentctl's own ``mcp.*`` calls, answered on the same socket (refused with an error envelope
unless an ``mcp_handler`` serves them); everything else is an AgentEvent. Events go through
one FIFO and one worker, so a slow consumer never delays an answer.

**Waiting.** Every request wait is bounded (:class:`~.control.AgentctlConfig`). No socket →
:class:`StreamNotConnected` (``agent stream not connected``), nothing written; the socket
drops after the write → ``StreamNotConnected(while_waiting=True)`` (``… while waiting for
response``: delivery is ambiguous). An error frame becomes the text kandev's client prints
(``load session failed: failed to load session: {…}``); a JSON-RPC error closing it is
rebuilt as a structured :class:`AgentRequestError` so classification matches stdio's, except
for session/load, judged by its text as kandev judges it; a dead agent's text is
:class:`TransportClosed`, except in a cancel's answer (see :func:`._wire.error_from_text`).

**Turns.** ``prompt`` is acknowledged at once; the turn's end is a ``complete``/``error``
event stamped with the prompt generation. The transport keeps the generations still owed an
end; turn content that carries no generation (agentctl sends none) is stamped with the
oldest owed one, as the stdio transport does. ``steer`` is the same action with
``steer: true``, only when the agent queues prompts and a turn is in flight (else
:class:`SteerUnsupported`, nothing sent). ``cancel`` maps ``not_acknowledged`` to
``CancelResult(acknowledged=False)`` (that turn will send no end).

**Agent death.** agentctl reports an agent that exited with an error as an ``error`` event
with ``data.exit_code``. The transport turns it into what the stdio transport emits for a
dead pipe: an ``ErrorEvent`` per owed turn quoting ``peer disconnected before response:
agent process exited with code N; stderr: …``, then the final
``StreamDisconnected(exit_code=N)``. A v0.95.1 prompt error that is only ``Internal error``
(code −32603, the SDK's projection of a peer disconnect) is held ≤ ``exit_grace`` for that
exit event, so a crash mid-turn classifies as transport death.

**Reconnect: facts here, decisions in the runtime.** A lost socket releases its pending
requests and is reported as ``StreamDisconnected(reconnecting=True)``, with ``clean=True``
for a normal close (1000/1001); the transport then waits to be told. :meth:`redial` is one
dial: on success ``StreamReconnected`` is queued ahead of the events agentctl buffered
meanwhile; a refused upgrade (401/403/404: wrong token, instance gone) raises
:class:`DialRefused`, a network error or timeout :class:`DialFailed`.
:attr:`AgentctlTransport.redial_policy` states the backoff and budget of the config
(``reconnect_initial_delay`` doubling to ``reconnect_max_delay``, ``reconnect_budget``).
:meth:`give_up` ends the carrier: owed turns get an ``ErrorEvent``, then the final
``StreamDisconnected(reconnecting=False)``; requests raise :class:`TransportClosed`. Under a
Runtime the AgentStream chart decides when to dial, whether a loss is announced (a clean
close is redialled silently, kandev H9) and when to give up. Used without a Runtime
(``auto_redial=True``, e.g. ``acpfsm conform``), the transport follows the same policy on its
own: dial after each backoff, give up on a refused dial or when the budget runs out.
:attr:`AgentctlTransport.reconnectable` is true while a redial is still possible;
:attr:`AgentctlTransport.carrier_events` keeps every loss and redial reported;
:meth:`AgentctlTransport.drop_stream` loses the socket on purpose (abortively, or with a
normal close), as a network failure would.

**Session state.** A plan agentctl re-emits after ``session/load`` (before its
``session_status: resumed``) is marked ``replayed`` (history, not a wakeup). ``set_model`` and
``set_config_option`` return once agentctl's ``session_models`` convergence event is queued
(≤ ``convergence_wait``), as the stdio transport emits it before returning.

**Permissions**: agentctl relays the agent's request as a ``permission_request`` event; it
goes to ``permission_policy`` (default: refuse, as on stdio) in a task of its own, so the
reader keeps draining agentctl's queue (agentctl cancels a request it cannot queue within
5 s), and the answer goes back with ``agent.permissions.respond`` (``pending_id`` and the
option, or ``cancelled``). ``permission_cancelled``, a cancel and the end of the carrier
withdraw the question (the policy is cancelled; nothing is sent).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.abc

from ..errors import (
    AcpfsmError,
    TransportClosed,
)
from ..events import (
    AgentCapabilities,
    AgentEvent,
    StreamDisconnected,
    StreamReconnected,
)
from ..mcp_servers import McpRequestHandler
from ..redaction import NO_REDACTION, Redactor
from ..sync import EventQueue
from ..transport import (
    InitializeResult,
    PermissionPolicy,
    PermissionPrompts,
    RedialPolicy,
    reject_permission_policy,
)
from ._agentctl_base import _Connection
from ._agentctl_events import _EventSide
from ._agentctl_ops import _OperationSide
from ._agentctl_socket import _SocketSide
from .control import AgentctlConfig, InstanceClient

__all__ = ["AgentctlTransport", "McpHandler", "open_agentctl_transport"]

log = logging.getLogger(__name__)

McpHandler = McpRequestHandler
"""Serves agentctl's ``mcp.*`` requests: ``(action, payload)`` → the response payload; an
:class:`AgentctlError` answers with an error envelope of its ``code`` (``UNKNOWN_ACTION`` for
an action not served), any other exception with ``INTERNAL_ERROR``."""


class AgentctlTransport(_OperationSide, _EventSide, _SocketSide):
    """See the module docstring. Create with :func:`open_agentctl_transport`. With
    ``auto_redial`` (the default) a lost socket is redialled by the transport itself; a
    Runtime's executor turns it off, since the AgentStream chart decides."""

    def __init__(
        self,
        instance: InstanceClient,
        *,
        config: AgentctlConfig | None = None,
        permission_policy: PermissionPolicy = reject_permission_policy,
        mcp_handler: McpHandler | None = None,
        redact: Redactor = NO_REDACTION,
        auto_redial: bool = True,
    ) -> None:
        self.instance = instance
        self.config = config or instance.config
        self._redact = redact
        self._permissions = PermissionPrompts(permission_policy)
        self._mcp_handler = mcp_handler
        self._auto_redial = auto_redial
        self._conn: _Connection | None = None
        self._connections = 0
        self._dials = 0  # since the last loss
        self._lost_reason = ""
        # (WireEvent, raw frame) | an AgentEvent we made | _Fatal
        self._inbox: EventQueue[Any] = EventQueue()
        self._events: EventQueue[AgentEvent] = EventQueue()
        self._owed: list[int] = []
        self._caps: InitializeResult | None = None
        self._caps_seen = anyio.Event()
        self._wire_caps: AgentCapabilities | None = None
        self._session_id: str | None = None
        self._loading = False
        self._models_seq = 0
        self._models_changed = anyio.Event()
        self._pending_ids: dict[str, str] = {}
        self._dead: AcpfsmError | None = None
        self._closing = False
        self._closed = anyio.Event()
        self._tg: anyio.abc.TaskGroup | None = None
        self._run_scope: anyio.CancelScope | None = None
        self.start_error: AcpfsmError | None = None
        self.carrier_events: list[StreamDisconnected | StreamReconnected] = []
        """Every loss and redial this transport reported, in order (diagnostics)."""

    # ------------------------------------------------------------------ properties

    @property
    def capabilities(self) -> InitializeResult | None:
        return self._caps

    @property
    def session_id(self) -> str | None:
        return self._session_id

    @property
    def reconnectable(self) -> bool:
        """True while a lost socket can still be redialled (not closed, not given up)."""
        return self._dead is None and not self._closing

    @property
    def redial_policy(self) -> RedialPolicy:
        """The config's backoff and budget for redialling a lost socket."""
        config = self.config
        return RedialPolicy(
            initial_delay=config.reconnect_initial_delay,
            max_delay=config.reconnect_max_delay,
            budget=config.reconnect_budget,
        )

    @property
    def endpoint(self) -> str:
        """The agentctl instance's URL (not the control URL)."""
        return self.instance.base_url

    @property
    def connections(self) -> int:
        """How many WebSockets this transport has dialled so far."""
        return self._connections

    def is_connected(self) -> bool:
        return self._conn is not None and self._dead is None and not self._closing

    def events(self) -> AsyncIterator[AgentEvent]:
        """The ordered event stream (single consumer); ends after the final
        ``stream_disconnected``."""
        return self._events

    # ------------------------------------------------------------------ lifecycle

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Dial the socket and serve it until :meth:`aclose`. A failed first dial is left in
        :attr:`start_error` (raised by :func:`open_agentctl_transport`)."""
        with anyio.CancelScope() as self._run_scope:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._event_worker)
                try:
                    await tg.start(self._serve, False)
                except AcpfsmError as exc:
                    self.start_error = self._dead = exc
                    tg.cancel_scope.cancel()
                task_status.started()
        self._tg = None

    async def stop_agent(self) -> None:
        """Ask agentctl to stop the agent process gracefully (``POST /api/v1/stop``)."""
        await self.instance.stop()

    async def set_mcp_mode(self, mode: str) -> None:
        """Switch the tools of agentctl's embedded MCP server (``PUT /api/v1/mcp/mode``)."""
        self._check_open()
        await self.instance.set_mcp_mode(mode)

    async def aclose(self) -> None:
        """Close the socket (normal close), release every waiter, end the event stream with
        ``stream_disconnected``. Idempotent, shielded. The agentctl instance is not touched:
        its owner (the executor) deletes it."""
        with anyio.CancelScope(shield=True):
            if self._closing:
                await self._closed.wait()
                return
            self._closing = True
            try:
                self._permissions.withdraw_all()
                conn = self._conn
                if conn is not None:
                    conn.release(TransportClosed("agent stream closed"))
                    conn.scope.cancel()
                self._finish("")
            finally:
                if self._run_scope is not None:
                    self._run_scope.cancel()
                self._closed.set()

    async def drop_stream(self, *, clean: bool = False) -> None:
        """Lose the current WebSocket as a network failure would, to exercise the reconnect
        path: ``clean=False`` aborts the TCP connection (no close frame: an abnormal drop,
        announced); ``clean=True`` closes it normally (1000, redialled silently). A no-op
        when no socket is up."""
        conn = self._conn
        if conn is None:
            return
        self._lose(conn)  # from now on requests see no socket
        if clean:
            conn.drop_clean = True
            conn.drop_reason = "websocket: close 1000 (normal)"
            self._report_loss(conn)
            conn.scope.cancel()
            return
        conn.drop_reason = "websocket: close 1006 (abnormal closure): connection reset"
        self._report_loss(conn)
        with contextlib.suppress(Exception):
            await conn.ws.stream.aclose()


@contextlib.asynccontextmanager
async def open_agentctl_transport(
    instance: InstanceClient,
    *,
    config: AgentctlConfig | None = None,
    permission_policy: PermissionPolicy = reject_permission_policy,
    mcp_handler: McpHandler | None = None,
    redact: Redactor = NO_REDACTION,
    auto_redial: bool = True,
) -> AsyncIterator[AgentctlTransport]:
    """Dial ``instance``'s agent stream and yield a connected, not yet initialized
    :class:`AgentctlTransport`; leaving the block closes it (the instance itself is left to
    its owner). A refused or failed first dial raises here, unwrapped. ``redact`` masks
    secrets in the agent's stderr that agentctl reports. ``auto_redial`` (the default here)
    lets the transport redial a lost socket on its own, for use without a Runtime; a
    Runtime's executor turns it off (the AgentStream chart decides)."""
    transport = AgentctlTransport(
        instance,
        config=config,
        permission_policy=permission_policy,
        mcp_handler=mcp_handler,
        redact=redact,
        auto_redial=auto_redial,
    )
    async with anyio.create_task_group() as tg:
        await tg.start(transport.run)
        if transport.start_error is None:
            try:
                yield transport
            finally:
                await transport.aclose()
    if transport.start_error is not None:
        raise transport.start_error
