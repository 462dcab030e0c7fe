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
rebuilt as a structured :class:`AgentRequestError` so classification matches stdio's; a
dead agent's text is :class:`TransportClosed` (see :func:`._wire.error_from_text`).

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
from collections.abc import AsyncIterator, Sequence
from typing import Any, Final

import anyio
import anyio.abc
import httpx
import msgspec
import wsproto.events
import wsproto.utilities
from httpx_ws import (
    AsyncWebSocketSession,
    HTTPXWSException,
    WebSocketDisconnect,
    WebSocketUpgradeError,
    aconnect_ws,
)

from ..classify import STREAM_NOT_CONNECTED_PHRASE
from ..errors import (
    UNDECODABLE_JSON,
    AcpfsmError,
    AgentctlError,
    AuthenticationFailed,
    DialFailed,
    DialRefused,
    RemoteProtocolError,
    SteerUnsupported,
    StreamNotConnected,
    TransportClosed,
    TransportTimeout,
)
from ..events import (
    AgentCapabilities,
    AgentEvent,
    Complete,
    ErrorEvent,
    MessageChunk,
    PermissionCancelled,
    PermissionRequest,
    Plan,
    ProtocolErrorEvent,
    Reasoning,
    SessionModels,
    SessionStatus,
    StreamDisconnected,
    StreamReconnected,
    ToolCall,
    ToolUpdate,
    TurnStarted,
)
from ..mcp_servers import McpRequestHandler, McpServerStdio, mcp_server_kind
from ..redaction import NO_REDACTION, Redactor
from ..sync import EventQueue
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
    reject_permission_policy,
)
from . import _wire
from .control import AgentctlConfig, InstanceClient

__all__ = ["AgentctlTransport", "McpHandler", "open_agentctl_transport"]

log = logging.getLogger(__name__)

McpHandler = McpRequestHandler
"""Serves agentctl's ``mcp.*`` requests: ``(action, payload)`` → the response payload; an
:class:`AgentctlError` answers with an error envelope of its ``code`` (``UNKNOWN_ACTION`` for
an action not served), any other exception with ``INTERNAL_ERROR``."""

_CLEAN_CLOSE_CODES: Final = frozenset({1000, 1001})
_STAMPED = (MessageChunk, Reasoning, ToolCall, ToolUpdate, Plan, PermissionRequest)
_SEND_ERRORS: Final = (
    HTTPXWSException,
    wsproto.utilities.LocalProtocolError,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    OSError,
    TimeoutError,
)


class _Pending:
    __slots__ = ("action", "code", "done", "error", "lost", "payload")

    def __init__(self, action: str) -> None:
        self.action = action
        self.done = anyio.Event()
        self.payload: msgspec.Raw | None = None
        self.error: str | None = None  # the error frame's message
        self.code = ""
        self.lost: AcpfsmError | None = None  # the socket went away first


class _Connection:
    """One WebSocket and the requests waiting on it."""

    def __init__(self, ws: AsyncWebSocketSession, number: int) -> None:
        self.ws = ws
        self.number = number
        self.pending: dict[str, _Pending] = {}
        self.scope = anyio.CancelScope()
        self.drop_reason = ""
        self.drop_clean = False
        self.reported = False  # its loss was reported

    def release(self, error: AcpfsmError) -> None:
        pending, self.pending = self.pending, {}
        for waiter in pending.values():
            waiter.lost = error
            waiter.done.set()


def _decode_payload(raw: msgspec.Raw | None, action: str) -> dict[str, Any]:
    if raw is None:
        return {}
    try:
        data = msgspec.json.decode(raw)
    except UNDECODABLE_JSON as exc:
        raise RemoteProtocolError(f"invalid {action} response from agentctl: {exc}") from None
    return data if isinstance(data, dict) else {}


def _attachment_kind(mime: str) -> str:
    if mime.startswith("image/"):
        return "image"
    if mime.startswith("audio/"):
        return "audio"
    return "resource"


class AgentctlTransport:
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
        self.instance: Final = instance
        self.config: Final = config or instance.config
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

    # ------------------------------------------------------------------ the socket

    def _open_socket(self) -> contextlib.AbstractAsyncContextManager[AsyncWebSocketSession]:
        return aconnect_ws(
            self.instance.stream_url,
            self.instance.client,
            headers=dict(self.instance.headers),
            keepalive_ping_interval_seconds=self.config.keepalive_interval,
            keepalive_ping_timeout_seconds=self.config.keepalive_timeout,
            timeout=httpx.Timeout(self.config.http_timeout, connect=self.config.connect_timeout),
        )

    def _dial_error(self, exc: BaseException) -> AcpfsmError:
        url = self.instance.stream_url
        if isinstance(exc, WebSocketUpgradeError):
            status = exc.response.status_code
            if status == 401:
                return AuthenticationFailed(
                    f"agent stream upgrade refused with status 401: agentctl refused the auth "
                    f"token ({url})"
                )
            if status == 404:
                return AuthenticationFailed(
                    f"agent stream upgrade refused with status 404: instance "
                    f"{self.instance.instance_id!r} does not exist at this port ({url})"
                )
            return AgentctlError(
                f"agent stream upgrade refused with status {status} ({url})",
                code=f"HTTP {status}",
                status=status,
                action="agent stream",
            )
        if isinstance(exc, httpx.TimeoutException | TimeoutError):
            return TransportTimeout(f"agent stream dial to {url} timed out")
        detail = str(exc) or type(exc).__name__
        return TransportClosed(f"agent stream dial failed: agentctl unreachable at {url}: {detail}")

    async def _serve(self, redial: bool, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Dial one socket (a failed dial raises from ``start``, as an acpfsm error), serve it
        until it is lost, then report the loss (see the module docstring). A redial queues
        ``StreamReconnected`` before the new socket's first frame."""
        conn: _Connection | None = None
        try:  # the dial is bounded by httpx's connect/read timeouts
            async with self._open_socket() as ws:
                self._connections += 1
                conn = _Connection(ws, self._connections)
                self._conn = conn
                if redial:
                    self._inbox.put(
                        StreamReconnected(session_id=self._session_id or "", attempts=self._dials)
                    )
                task_status.started()
                log.debug("agent stream %d up", conn.number)
                try:
                    with conn.scope:
                        ended = await self._read_loop(conn)
                        conn.drop_reason = conn.drop_reason or ended
                finally:
                    self._lose(conn)
        except Exception as exc:  # noqa: BLE001 - mapped below, nothing escapes
            if conn is None:
                raise self._dial_error(exc) from None
            log.debug("agent stream teardown: %r", exc)  # httpx-ws's task group failed
            conn.drop_reason = conn.drop_reason or f"websocket error: {exc!r}"
        assert conn is not None
        self._report_loss(conn)

    def _report_loss(self, conn: _Connection) -> None:
        """The fact, once per socket: ``StreamDisconnected(reconnecting=True, clean=…)``
        (nothing when we closed it or gave the carrier up)."""
        if conn.reported or self._closing or self._dead is not None:
            return
        conn.reported = True
        reason = self._lost_reason = conn.drop_reason or "websocket: connection lost"
        self._dials = 0
        log.log(
            logging.INFO if conn.drop_clean else logging.WARNING, "agent stream lost (%s)", reason
        )
        self._inbox.put(
            StreamDisconnected(
                session_id=self._session_id or "",
                error=reason,
                reconnecting=True,
                clean=conn.drop_clean,
            )
        )
        if self._auto_redial and self._tg is not None:
            self._tg.start_soon(self._redial_on_its_own)

    async def redial(self) -> None:
        """One dial of the lost socket; see
        :meth:`~acpfsm.adapters.transport.AgentTransport.redial`. A refused upgrade (401,
        403, 404) or a closed or given-up transport is :class:`DialRefused`; agentctl
        unreachable or the dial timing out is :class:`DialFailed`."""
        if self._closing or self._dead is not None:
            raise DialRefused(f"agent stream not redialled: {self._dead or 'agent stream closed'}")
        if self._conn is not None:
            return
        assert self._tg is not None
        self._dials += 1
        try:
            await self._tg.start(self._serve, True)
        except (AuthenticationFailed, AgentctlError) as exc:
            raise DialRefused(str(exc)) from exc
        except AcpfsmError as exc:
            raise DialFailed(str(exc)) from exc

    def give_up(self, reason: str) -> None:
        """End the carrier for good; see
        :meth:`~acpfsm.adapters.transport.AgentTransport.give_up`."""
        if self._closing or self._dead is not None:
            return
        lost = f"{self._lost_reason}; " if self._lost_reason else ""
        message = f"agentctl unreachable: agent stream lost and not redialled: {lost}{reason}"
        self._dead = TransportClosed(message)
        conn = self._conn
        if conn is not None:  # given up while up: the socket goes too
            self._lose(conn)
            conn.scope.cancel()
        log.warning("%s", message)
        self._inbox.put(_Fatal(f"peer disconnected before response: {message}", message))

    async def _redial_on_its_own(self) -> None:
        """``auto_redial`` (no Runtime decides): dial after each backoff of
        :attr:`redial_policy`, give up on a refused dial or once its budget has run out."""
        policy = self.redial_policy
        last = "no dial answered"
        with anyio.move_on_after(policy.budget):
            failures = 0
            while True:
                await anyio.sleep(policy.delay(failures))
                try:
                    await self.redial()
                except DialRefused as exc:
                    self.give_up(f"redial failed: {exc}")
                    return
                except DialFailed as exc:
                    last, failures = str(exc), failures + 1
                else:
                    return
        self.give_up(f"not redialled within {policy.budget:g}s (last dial: {last})")

    def _lose(self, conn: _Connection) -> None:
        """The socket is gone: nobody may write to it, its waiters are released."""
        if self._conn is conn:
            self._conn = None
        conn.release(
            StreamNotConnected(
                f"{STREAM_NOT_CONNECTED_PHRASE} while waiting for response", while_waiting=True
            )
        )

    async def _read_loop(self, conn: _Connection) -> str:
        ws = conn.ws
        while True:
            try:
                message = await ws.receive()
            except WebSocketDisconnect as exc:
                if exc.code in _CLEAN_CLOSE_CODES:
                    conn.drop_clean = True
                return f"websocket: close {exc.code} ({exc.reason or 'no reason'})"
            except HTTPXWSException:
                return "websocket: close 1006 (abnormal closure): unexpected EOF"
            if isinstance(message, wsproto.events.TextMessage):
                self._on_frame(conn, message.data)
            elif isinstance(message, wsproto.events.BytesMessage):
                self._on_frame(conn, bytes(message.data))

    # ------------------------------------------------------------------ frames in

    def _on_frame(self, conn: _Connection, raw: str | bytes) -> None:
        try:
            envelope = _wire.decode_envelope(raw)
        except UNDECODABLE_JSON as exc:
            self._inbox.put(
                ProtocolErrorEvent(error=f"agentctl sent a frame that is not a JSON object: {exc}")
            )
            return
        if envelope.id and envelope.type in ("response", "error"):
            waiter = conn.pending.pop(envelope.id, None)
            if waiter is None:
                log.debug(
                    "dropping a late %s for %s (%s)", envelope.type, envelope.id, envelope.action
                )
                return
            if envelope.type == "error":
                error = _decode_payload(envelope.payload, envelope.action)
                waiter.error = str(error.get("message", "")) or "unknown error"
                waiter.code = str(error.get("code", ""))
            else:
                waiter.payload = envelope.payload
            waiter.done.set()
            return
        if envelope.id and envelope.type == "request":
            assert self._tg is not None
            self._tg.start_soon(self._serve_peer_request, conn, envelope)
            return
        try:
            wire = _wire.decode_wire_event(raw)
        except UNDECODABLE_JSON as exc:
            self._inbox.put(ProtocolErrorEvent(error=f"agentctl sent an invalid event: {exc}"))
            return
        self._inbox.put((wire, raw))

    async def _serve_peer_request(self, conn: _Connection, envelope: _wire.Envelope) -> None:
        """agentctl's own request (``mcp.*``): answered on the socket it came from."""
        action = envelope.action
        reply: bytes
        if self._mcp_handler is None or not action.startswith("mcp."):
            reply = _wire.encode_reply(
                envelope.id,
                action,
                error={
                    "code": "UNKNOWN_ACTION",
                    "message": f"acpfsm does not serve {action or 'this request'}",
                },
            )
        else:
            try:
                payload = msgspec.json.decode(envelope.payload)
                result = await self._mcp_handler(action, payload)
                reply = _wire.encode_reply(envelope.id, action, payload=result)
            except AgentctlError as exc:
                reply = _wire.encode_reply(
                    envelope.id,
                    action,
                    error={"code": exc.code or "INTERNAL_ERROR", "message": str(exc)},
                )
            except Exception as exc:  # noqa: BLE001 - user code: any failure is an answer
                reply = _wire.encode_reply(
                    envelope.id, action, error={"code": "INTERNAL_ERROR", "message": str(exc)}
                )
        try:
            with anyio.fail_after(self.config.write_timeout):
                await conn.ws.send_text(reply.decode())
        except _SEND_ERRORS as exc:
            log.info("could not answer agentctl's %s: %r", action, exc)

    # ------------------------------------------------------------------ events

    def _emit(self, event: AgentEvent) -> None:
        if not self._events.closed:
            if isinstance(event, StreamDisconnected | StreamReconnected):
                self.carrier_events.append(event)
            self._events.put(event)

    def _finish(self, error: str, *, exit_code: int | None = None, stderr_tail: str = "") -> None:
        if self._events.closed:
            return
        self._emit(
            StreamDisconnected(
                session_id=self._session_id or "",
                error=error,
                exit_code=exit_code,
                stderr_tail=stderr_tail,
            )
        )
        self._events.close()

    def _active_generation(self) -> int:
        return self._owed[0] if self._owed else 0

    def _settle(self, generation: int) -> None:
        if generation in self._owed:
            self._owed.remove(generation)
        elif generation == 0 and self._owed:
            self._owed.pop(0)

    async def _event_worker(self) -> None:
        async for item in self._inbox:  # never closed: the worker ends with the task group
            await self._process(item)

    async def _process(self, item: Any) -> None:
        if isinstance(item, _Fatal):
            self._die(item)
            return
        if not isinstance(item, tuple):  # an event the transport made itself
            self._emit(item)
            return
        wire, raw = item
        if _wire.is_process_exit(wire):
            self._die(self._exit_fatal(wire))
            return
        event = _wire.to_event(wire, raw)
        if (
            isinstance(event, ErrorEvent)
            and self._may_be_death(wire)
            and await self._await_exit_event()
        ):
            return  # the exit event (now processed) settled this turn too
        self._route(event, wire)

    def _may_be_death(self, wire: _wire.WireEvent) -> bool:
        provider = wire.provider_error or {}
        return (
            wire.prompt_generation in self._owed
            and provider.get("rpc_code") == -32603
            and wire.error == "Internal error"
        )

    async def _await_exit_event(self) -> bool:
        """Wait ≤ ``exit_grace`` for agentctl's process-exit event; when it comes, process
        what precedes it, then the death. True when the agent died."""
        with anyio.move_on_after(self.config.exit_grace):
            while True:
                for index, queued in enumerate(self._inbox.items):
                    if isinstance(queued, tuple) and _wire.is_process_exit(queued[0]):
                        before = [self._inbox.items.popleft() for _ in range(index)]
                        exit_item = self._inbox.items.popleft()
                        for other in before:
                            await self._process(other)
                        self._die(self._exit_fatal(exit_item[0]))
                        return True
                await self._inbox.changed()
        return False

    def _exit_fatal(self, wire: _wire.WireEvent) -> _Fatal:
        data = wire.data or {}
        code = data.get("exit_code")
        lines = [self._redact(x) for x in data.get("recent_stderr") or () if isinstance(x, str)]
        description = f"agent process exited with code {code}"
        message = f"peer disconnected before response: {description}"
        if lines:
            message += "; stderr: " + "; ".join(lines[-10:])
        return _Fatal(
            message,
            f"peer disconnected: {description}",
            exit_code=code if type(code) is int else None,
            stderr_tail="\n".join(lines[-20:]),
        )

    def _die(self, fatal: _Fatal) -> None:
        """The agent (or agentctl) is gone: every owed turn ends with the death, then the
        final ``stream_disconnected`` (what the stdio transport emits for a dead pipe)."""
        if self._dead is None:
            self._dead = TransportClosed(fatal.dead_message)
        for generation in self._owed:
            self._emit(
                ErrorEvent(
                    session_id=self._session_id or "",
                    prompt_generation=generation,
                    error=fatal.message,
                    data={
                        "transport_closed": True,
                        "exit_code": fatal.exit_code,
                        "stderr_tail": fatal.stderr_tail,
                    },
                )
            )
        self._owed.clear()
        self._permissions.withdraw_all()
        self._finish(fatal.message, exit_code=fatal.exit_code, stderr_tail=fatal.stderr_tail)
        log.warning("agent carrier ended: %s", fatal.message)

    def _route(self, event: AgentEvent, wire: _wire.WireEvent) -> None:
        if isinstance(event, Complete | ErrorEvent):
            self._settle(event.prompt_generation)
        elif isinstance(event, _STAMPED) and event.prompt_generation == 0:
            if isinstance(event, Plan) and self._loading:
                event = msgspec.structs.replace(event, replayed=True)
            else:
                event = msgspec.structs.replace(event, prompt_generation=self._active_generation())
        if isinstance(event, SessionStatus | TurnStarted):
            self._loading = False
        elif isinstance(event, AgentCapabilities):
            self._wire_caps = event
            self._caps_seen.set()
        elif isinstance(event, SessionModels):
            if event.data.get("config_options_source") == "provider_response":
                self._models_seq += 1
                self._models_changed.set()
                self._models_changed = anyio.Event()
        elif isinstance(event, PermissionRequest):
            self._pending_ids[event.request_id] = wire.pending_id or event.request_id
            assert self._tg is not None
            self._tg.start_soon(self._ask_permission, event)
        elif isinstance(event, PermissionCancelled):
            self._permissions.withdraw(event.request_id)
        self._emit(event)

    async def _ask_permission(self, event: PermissionRequest) -> None:
        pending_id = self._pending_ids.get(event.request_id, event.request_id)
        choice, withdrawn = await self._permissions.ask(event)
        self._pending_ids.pop(event.request_id, None)
        if withdrawn or self._closing:
            return
        payload: dict[str, Any] = {"pending_id": pending_id}
        if choice is None:
            payload["cancelled"] = True
        else:
            payload["option_id"] = choice
        try:
            await self._request("agent.permissions.respond", payload)
        except AcpfsmError as exc:
            log.info("permission answer for %s not delivered: %s", event.request_id, exc)

    # ------------------------------------------------------------------ requests

    def _check_open(self) -> None:
        if self._closing:
            raise TransportClosed("agent stream closed")
        if self._dead is not None:
            raise TransportClosed(str(self._dead))

    async def _request(
        self, action: str, payload: Any, *, bound: float | None = None
    ) -> dict[str, Any]:
        """One request envelope, exactly one answer (see the module docstring)."""
        self._check_open()
        conn = self._conn
        if conn is None:
            raise StreamNotConnected()
        request_id, frame = _wire.encode_request(action, payload)
        waiter = _Pending(action)
        conn.pending[request_id] = waiter
        try:
            with anyio.fail_after(self.config.write_timeout):
                await conn.ws.send_text(frame.decode())
        except _SEND_ERRORS as exc:
            conn.pending.pop(request_id, None)
            log.info("agent stream write failed (%r): dropping the socket", exc)
            conn.drop_reason = conn.drop_reason or f"websocket write failed: {exc!r}"
            conn.scope.cancel()
            raise StreamNotConnected() from None
        bound = self.config.request_timeout if bound is None else bound
        try:
            with anyio.fail_after(bound):
                await waiter.done.wait()
        except TimeoutError:
            raise TransportTimeout(
                f"{_wire.CLIENT_PREFIXES.get(action, action)}: agentctl did not answer "
                f"{action} within {bound:g}s: context deadline exceeded"
            ) from None
        finally:
            conn.pending.pop(request_id, None)
        if waiter.lost is not None:
            raise waiter.lost
        if waiter.error is not None:
            raise _wire.error_from_text(action, waiter.error, code=waiter.code)
        return _decode_payload(waiter.payload, action)

    def _require_session(self) -> str:
        if self._session_id is None:
            raise AgentctlError("no active session - call new_session first", code="BAD_REQUEST")
        return self._session_id

    # ------------------------------------------------------------------ AgentTransport

    async def initialize(self) -> InitializeResult:
        data = await self._request(
            "agent.initialize",
            {"client_name": self.config.client_name, "client_version": self.config.client_version},
        )
        info = data.get("agent_info") if isinstance(data.get("agent_info"), dict) else {}
        assert isinstance(info, dict)
        with anyio.move_on_after(self.config.capabilities_wait):
            await self._caps_seen.wait()
        caps = self._wire_caps or AgentCapabilities()
        result = InitializeResult(
            protocol_version=1,
            agent=AgentInfo(
                name=str(info.get("name") or "unknown"),
                version=str(info.get("version") or "unknown"),
            ),
            load_session=True,  # agentctl does not say; it answers the canonical phrase
            prompt_queueing=caps.supports_prompt_queueing,
            supports_image=caps.supports_image,
            supports_audio=caps.supports_audio,
            supports_embedded_context=caps.supports_embedded_context,
            auth_methods=list(caps.auth_methods),
        )
        self._caps = result
        return result

    async def authenticate(self, method_id: str) -> None:
        await self._request("agent.session.authenticate", {"method_id": method_id})

    def adopt_session(self, session_id: str, capabilities: InitializeResult | None) -> None:
        """A reattach to an agent that survived the app (its executor's ``reattach``): the
        agent's ACP connection and ``session_id`` are the ones the app had, so nothing is
        initialized again (agentctl's ``agent.initialize`` would open a second ACP
        connection on the same pipes) and nothing is created or loaded. ``capabilities`` are
        what the agent said when the app initialized it (stored)."""
        self._session_id = session_id or None
        self._caps = capabilities

    @staticmethod
    def _mcp_servers(servers: Sequence[McpServer]) -> list[dict[str, Any]]:
        """agentctl's ``McpServer`` JSON: ``env`` and ``headers`` as maps."""
        out: list[dict[str, Any]] = []
        for s in servers:
            if isinstance(s, McpServerStdio):
                out.append(
                    {
                        "name": s.name,
                        "command": s.command,
                        "args": list(s.args),
                        "env": dict(s.env),
                        "type": "stdio",
                    }
                )
            else:
                out.append(
                    {
                        "name": s.name,
                        "url": s.url,
                        "headers": dict(s.headers),
                        "type": mcp_server_kind(s),
                    }
                )
        return out

    def _session_result(self, session_id: str, data: dict[str, Any]) -> SessionResult:
        state = data.get("model_state")
        if not isinstance(state, dict):
            return SessionResult(session_id=session_id)
        models = _wire.models(state.get("models"))
        options = _wire.config_options(state.get("config_options"))
        return SessionResult(
            session_id=session_id,
            current_model_id=str(state.get("current_model_id") or ""),
            models=models,
            config_options=options,
            has_model_state=bool(models or options),
        )

    async def new_session(self, cwd: str, mcp_servers: Sequence[McpServer] = ()) -> SessionResult:
        payload: dict[str, Any] = {"cwd": cwd}
        if mcp_servers:
            payload["mcp_servers"] = self._mcp_servers(mcp_servers)
        data = await self._request("agent.session.new", payload)
        session_id = str(data.get("session_id") or "")
        if not session_id:
            raise RemoteProtocolError("agent.session.new answered no session_id")
        self._session_id = session_id
        self._owed.clear()
        return self._session_result(session_id, data)

    async def load_session(
        self, session_id: str, cwd: str, mcp_servers: Sequence[McpServer] = ()
    ) -> SessionResult:
        payload: dict[str, Any] = {"session_id": session_id}
        if mcp_servers:
            payload["mcp_servers"] = self._mcp_servers(mcp_servers)
        self._loading = True  # plans replayed until session_status are history
        try:
            data = await self._request("agent.session.load", payload)
        except BaseException:
            self._loading = False
            raise
        self._session_id = session_id
        self._owed.clear()
        return self._session_result(session_id, data)

    async def _descriptors(self, attachments: Sequence[Attachment]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for item in attachments:
            if item.data or item.path or not item.attachment_id:
                item = await self.materialize_attachment(item)
            out.append(
                {
                    "type": _attachment_kind(item.mime_type),
                    "attachment_id": item.attachment_id,
                    "name": item.name,
                    "mime_type": item.mime_type,
                    "size_bytes": item.size,
                    "delivery_mode": item.delivery_mode or "prompt",
                }
            )
        return out

    async def _send_prompt(
        self, text: str, attachments: Sequence[Attachment], generation: int, *, steer: bool
    ) -> None:
        self._require_session()
        self._check_open()
        payload: dict[str, Any] = {"text": text, "prompt_generation": generation}
        descriptors = await self._descriptors(attachments)
        if descriptors:
            payload["attachments"] = descriptors
        if steer:
            payload["steer"] = True
        else:
            self._owed.append(generation)
        self._loading = False
        try:
            await self._request("agent.prompt", payload, bound=self.config.prompt_ack_timeout)
        except (StreamNotConnected, TransportTimeout) as exc:
            ambiguous = isinstance(exc, TransportTimeout) or exc.while_waiting
            if not steer and not ambiguous:
                self._settle(generation)
            raise
        except BaseException:
            if not steer:
                self._settle(generation)
            raise

    async def prompt(self, text: str, attachments: Sequence[Attachment], generation: int) -> None:
        """``agent.prompt``: returns on agentctl's ack; the turn's end arrives as an event."""
        await self._send_prompt(text, attachments, generation, steer=False)

    async def steer(self, text: str, attachments: Sequence[Attachment], generation: int) -> None:
        """``agent.prompt`` with ``steer: true`` into the running turn (agents that queue
        prompts only); the single ``complete`` is stamped ``generation``."""
        self._require_session()
        self._check_open()
        caps = self._caps
        if caps is None or not caps.prompt_queueing:
            raise SteerUnsupported(
                "steer was not dispatched: agent does not advertise prompt queueing"
            )
        if not self._owed:
            raise SteerUnsupported("steer was not dispatched: no prompt in flight")
        await self._send_prompt(text, attachments, generation, steer=True)

    async def cancel(self) -> CancelResult:
        if self._session_id is None:
            return CancelResult(acknowledged=True)
        self._permissions.withdraw_all()
        data = await self._request("agent.cancel", None, bound=self.config.cancel_timeout)
        if data.get("success") is True:
            return CancelResult(acknowledged=True)
        if data.get("not_acknowledged") is True:
            if self._owed:  # the abandoned turn sends no end
                self._owed.pop(0)
            log.warning("turn cancel not acknowledged: %s", data.get("error", ""))
            return CancelResult(acknowledged=False)
        raise _wire.error_from_text("agent.cancel", str(data.get("error", "")), code="FAILED")

    async def _converged(self, since: int) -> None:
        """Wait ≤ ``convergence_wait`` for a ``provider_response`` models event after ``since``."""
        with anyio.move_on_after(self.config.convergence_wait):
            while self._models_seq <= since:
                await self._models_changed.wait()

    async def set_model(self, model_id: str) -> None:
        self._require_session()
        since = self._models_seq
        await self._request("agent.session.set_model", {"model_id": model_id})
        await self._converged(since)

    async def set_mode(self, mode_id: str) -> None:
        session_id = self._require_session()
        await self._request(
            "agent.session.set_mode", {"session_id": session_id, "mode_id": mode_id}
        )

    async def set_config_option(self, config_id: str, value: str) -> None:
        self._require_session()
        since = self._models_seq
        await self._request(
            "agent.session.set_config_option", {"config_id": config_id, "value": value}
        )
        await self._converged(since)

    async def materialize_attachment(self, attachment: Attachment) -> Attachment:
        """Upload through ``/api/v1/attachments/materialize`` (needs the ACP session)."""
        self._check_open()
        return await self.instance.materialize(self._session_id or "", attachment)


class _Fatal:
    """The end of the carrier, queued behind the events that precede it."""

    __slots__ = ("dead_message", "exit_code", "message", "stderr_tail")

    def __init__(
        self,
        message: str,
        dead_message: str,
        *,
        exit_code: int | None = None,
        stderr_tail: str = "",
    ) -> None:
        self.message = message
        self.dead_message = dead_message
        self.exit_code = exit_code
        self.stderr_tail = stderr_tail


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
