"""hypercorn serving one tool server's ASGI app on its loopback socket, connections bounded.

Any local process can connect to a tool server: only the agent has the bearer secret, but
connecting needs none. So the server accepts connections itself (hypercorn's per-connection
server and lifespan run what it admits, under trio or asyncio, whichever runs the Runtime):

* at most ``max_connections`` at once; past the bound a new connection takes the place of the
  oldest one that has not authenticated yet (that one is shut down), so a flood of
  connections without the secret cannot keep the agent out; only when every admitted
  connection has authenticated (or ``max_connections`` evicted ones are still ending) is a new
  one answered ``503 Service Unavailable`` (``Retry-After: 1``) and closed at once;
* a connection must make an authenticated request (``Authorization: Bearer <secret>``)
  within ``idle`` seconds of being accepted, else it is shut down (a silent one, a slow one,
  one that keeps asking without the secret);
* ``accept`` failing for want of file descriptors or memory (``EMFILE`` …) is logged once
  per episode, without a traceback, and retried after a pause.

One execution's flood thus holds at most twice ``max_connections`` descriptors of the
Runtime's process, briefly; the other executions' launches and servers are not touched, and
the execution's own agent still gets in: its connection authenticates on its first request,
after which no unauthenticated connection can take its place.
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import sniffio
from hypercorn.config import Config

__all__ = ["ConnectionGate", "serve_gated"]

log = logging.getLogger("acpfsm.runtime.mcp.http")

REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: 41\r\n"
    b"Retry-After: 1\r\n"
    b"Connection: close\r\n"
    b"\r\n"
    b"too many connections to this tool server\n"
)
_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_ACCEPT_PAUSE = 0.1

Asgi = Callable[[Any, Any, Any], Awaitable[None]]


@dataclass(slots=True, eq=False)
class _Connection:
    """One admitted connection (counted from its accept); :meth:`close` ends it."""

    key: Any
    sock: Any = None
    authenticated: bool = False
    closing: bool = False
    scope: anyio.CancelScope | None = None

    def close(self) -> None:
        """End it at once: its server is cancelled (the socket is closed as it ends; hypercorn
        would otherwise keep a closed connection for its keep-alive bound), or, before its
        server started, the socket is closed now."""
        self.closing = True
        if self.scope is not None:
            self.scope.cancel()
        elif self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()


class ConnectionGate:
    """The bounds of one tool server's connections (see the module docstring); :meth:`app`
    is the ASGI app to serve (it marks a connection authenticated on its first request that
    carries the secret, then hands every request to ``app``)."""

    def __init__(self, app: Asgi, secret: str, *, max_connections: int, idle: float) -> None:
        self._app = app
        self._expected = f"Bearer {secret}".encode()
        self.max_connections = max_connections
        self.idle = idle
        self.connections: dict[Any, _Connection] = {}
        """The admitted connections, by the peer's address (the ASGI scope's ``client``)."""
        self.evicting: set[_Connection] = set()
        """Connections shut down to make room, until their servers end (bounded too)."""
        self.refused = 0
        """How many connections were refused for the bound."""
        self.evicted = 0
        """How many unauthenticated connections were shut down to make room for a new one."""
        self.expired = 0
        """How many were shut down for making no authenticated request in time."""
        self._starved = False

    async def app(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            client = scope.get("client")
            connection = self.connections.get(tuple(client)) if client else None
            if connection is not None and not connection.authenticated:
                for name, value in scope.get("headers", ()):
                    if name == b"authorization" and hmac.compare_digest(value, self._expected):
                        connection.authenticated = True
                        break
        await self._app(scope, receive, send)

    def admit(self, peer: Any) -> _Connection | None:
        """The connection from ``peer``, counted at once, in the place of the oldest
        unauthenticated one when the bound is reached; None when none can make room (refuse
        it)."""
        if len(self.connections) >= self.max_connections and not self._evict_one():
            self.refused += 1
            if self.refused == 1 or self.refused % 1000 == 0:
                log.warning(
                    "tool server refuses connections: %d open, %d refused so far",
                    len(self.connections),
                    self.refused,
                )
            return None
        key = tuple(peer) if isinstance(peer, list | tuple) else peer
        connection = self.connections[key] = _Connection(key)
        return connection

    def _evict_one(self) -> bool:
        """Shut the oldest unauthenticated connection down to make room; False when every
        connection has authenticated or too many evicted ones are still ending."""
        if len(self.evicting) >= self.max_connections:
            return False
        oldest = next((c for c in self.connections.values() if not c.authenticated), None)
        if oldest is None:
            return False
        del self.connections[oldest.key]
        self.evicted += 1
        if oldest.scope is not None:  # its server is ending (else its socket is gone now)
            self.evicting.add(oldest)
        oldest.close()
        return True

    def accept_failed(self, exc: OSError) -> bool:
        """Whether ``accept``'s failure is one to wait out (logged once per episode)."""
        if exc.errno not in _CAPACITY_ERRNOS:
            return exc.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EINTR)
        if not self._starved:
            self._starved = True
            log.warning("tool server cannot accept a connection: %s; retrying", exc.strerror)
        return True

    def accepted(self) -> None:
        self._starved = False

    async def run(self, connection: _Connection, serve: Awaitable[None]) -> None:
        """Serve one admitted connection; shut it down when it has made no authenticated
        request ``idle`` seconds after it was accepted."""
        try:
            with anyio.CancelScope() as connection.scope:
                if connection.closing:
                    connection.scope.cancel()
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._expire, connection)
                    await serve
                    tg.cancel_scope.cancel()
        finally:
            self.ended(connection)

    def ended(self, connection: _Connection) -> None:
        if self.connections.get(connection.key) is connection:
            del self.connections[connection.key]
        self.evicting.discard(connection)

    async def _expire(self, connection: _Connection) -> None:
        await anyio.sleep(self.idle)
        if not connection.authenticated:
            self.expired += 1
            connection.close()


async def serve_gated(
    app: Asgi,
    config: Config,
    sock: socket.socket,
    gate: ConnectionGate,
    stop: anyio.Event,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` (the gate's :meth:`~ConnectionGate.app` around it) on the listening
    ``sock`` until ``stop``: hypercorn's lifespan, then each admitted connection by
    hypercorn's per-connection server; at ``stop`` open connections get
    ``config.graceful_timeout`` to finish."""
    from hypercorn.app_wrappers import ASGIWrapper

    wrapped = ASGIWrapper(gate.app)
    if sniffio.current_async_library() == "trio":
        backend: _Backend = _Trio(wrapped, config, sock)
    else:
        backend = _Asyncio(wrapped, config, sock)
    async with anyio.create_task_group() as lifespan_group:
        await backend.start_lifespan(lifespan_group)
        async with anyio.create_task_group() as connections:
            task_status.started()
            async with anyio.create_task_group() as acceptor:
                acceptor.start_soon(_accept_loop, backend, gate, connections)
                await stop.wait()
                acceptor.cancel_scope.cancel()
            await backend.context.terminated.set()
            connections.cancel_scope.deadline = anyio.current_time() + config.graceful_timeout
        for left in [*gate.connections.values(), *gate.evicting]:  # admitted, never served
            with contextlib.suppress(OSError):
                left.sock.close()
        gate.connections.clear()
        gate.evicting.clear()
        await backend.lifespan.wait_for_shutdown()
        lifespan_group.cancel_scope.cancel()


async def _accept_loop(
    backend: _Backend, gate: ConnectionGate, connections: anyio.abc.TaskGroup
) -> None:
    while True:
        try:
            accepted = await backend.accept()
        except OSError as exc:
            if not gate.accept_failed(exc):
                log.warning("tool server stops accepting: %s", exc)
                return
            await anyio.sleep(_ACCEPT_PAUSE)
            continue
        gate.accepted()
        connection = gate.admit(accepted[1])
        if connection is None:
            backend.refuse(accepted)
        else:
            connection.sock = accepted[0]
            connections.start_soon(backend.serve, gate, connection, accepted[0])


class _Backend:
    lifespan: Any
    context: Any

    async def start_lifespan(self, tg: anyio.abc.TaskGroup) -> None:
        raise NotImplementedError

    async def accept(self) -> Any:
        raise NotImplementedError

    def refuse(self, accepted: Any) -> None:
        raise NotImplementedError

    async def serve(self, gate: ConnectionGate, connection: _Connection, conn: Any) -> None:
        raise NotImplementedError


def _refuse(sock: socket.socket) -> None:
    """Answer ``503`` without waiting (a fresh socket's buffer takes it) and close."""
    with contextlib.suppress(OSError):
        sock.send(REFUSAL)
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
    sock.close()


class _Trio(_Backend):
    def __init__(self, app: Any, config: Config, sock: socket.socket) -> None:
        import trio
        from hypercorn.trio.lifespan import Lifespan
        from hypercorn.trio.worker_context import WorkerContext

        self.app, self.config = app, config
        self.state: dict[str, Any] = {}
        self.lifespan = Lifespan(app, config, self.state)
        self.context = WorkerContext(None)
        self.listener = trio.socket.from_stdlib_socket(sock)

    async def start_lifespan(self, tg: anyio.abc.TaskGroup) -> None:
        await tg.start(self.lifespan.handle_lifespan)
        await self.lifespan.wait_for_startup()

    async def accept(self) -> Any:
        return await self.listener.accept()

    def refuse(self, accepted: Any) -> None:
        conn, _ = accepted
        _refuse(socket.socket(fileno=conn.detach()))

    async def serve(self, gate: ConnectionGate, connection: _Connection, conn: Any) -> None:
        import trio

        if connection.closing:  # evicted before it was served (its socket closed)
            return
        from hypercorn.trio.tcp_server import TCPServer

        stream: Any = trio.SocketStream(conn)  # hypercorn takes a plain one for http
        server = TCPServer(self.app, self.config, self.context, self.state, stream)
        try:
            await gate.run(connection, server.run())
        finally:  # a server cancelled (closed by the gate) did not close its socket
            conn.close()


class _Asyncio(_Backend):
    def __init__(self, app: Any, config: Config, sock: socket.socket) -> None:
        import asyncio

        from hypercorn.asyncio.lifespan import Lifespan
        from hypercorn.asyncio.worker_context import WorkerContext

        self.loop = asyncio.get_running_loop()
        self.app, self.config = app, config
        self.state: dict[str, Any] = {}
        self.lifespan = Lifespan(app, config, self.loop, self.state)
        self.context = WorkerContext(None)
        self.sock = sock

    async def start_lifespan(self, tg: anyio.abc.TaskGroup) -> None:
        tg.start_soon(self.lifespan.handle_lifespan)
        await self.lifespan.wait_for_startup()

    async def accept(self) -> Any:
        return await self.loop.sock_accept(self.sock)

    def refuse(self, accepted: Any) -> None:
        _refuse(accepted[0])

    async def serve(self, gate: ConnectionGate, connection: _Connection, conn: Any) -> None:
        import asyncio

        from hypercorn.asyncio.tcp_server import TCPServer

        if connection.closing:  # evicted before it was served (its socket closed)
            return
        try:
            reader, writer = await asyncio.open_connection(sock=conn)
        except OSError:
            gate.ended(connection)
            conn.close()
            return
        server = TCPServer(
            self.app, self.loop, self.config, self.context, self.state, reader, writer
        )
        try:
            await gate.run(connection, server.run())
        finally:  # a server cancelled (closed by the gate) did not close its transport
            writer.close()
