"""The socket side of :class:`~.transport.AgentctlTransport`: dialling agentctl's agent
WebSocket, serving it until it is lost, reporting the loss, redialling when told (or on its
own with ``auto_redial``), giving the carrier up; the frames read off it (answers, agentctl's
own ``mcp.*`` requests, events) sorted."""

from __future__ import annotations

import contextlib
import logging

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
    StreamNotConnected,
    TransportClosed,
    TransportTimeout,
)
from ..events import (
    ProtocolErrorEvent,
    StreamDisconnected,
    StreamReconnected,
)
from . import _wire
from ._agentctl_base import (
    _CLEAN_CLOSE_CODES,
    _SEND_ERRORS,
    _AgentctlBase,
    _Connection,
    _decode_payload,
    _Fatal,
)

log = logging.getLogger("acpfsm.adapters.agentctl.transport")


class _SocketSide(_AgentctlBase):
    """The WebSocket: dial, serve, lose, redial, give up; the frames read."""

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
