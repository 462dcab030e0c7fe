"""A JSON-RPC 2.0 connection over anyio byte streams (newline-delimited JSON, ACP's stdio framing).

Theory of operation
-------------------
One reader task (:meth:`JsonRpcConnection.run`) owns the receive stream. It splits lines,
decodes each into an envelope (:func:`~.messages.decode_message`) and:

* resolves a **response** by id: the request's ``on_response`` is told at once, then the
  waiting :meth:`PendingRequest.wait` wakes up;
* calls the **notification** handler *inline*, so notifications are handled strictly in
  arrival order and before any response that follows them on the wire (the handler must
  not block: it should only enqueue);
* answers an **incoming request** in its own task (a permission prompt may take minutes and
  must not stall the reader), with the handler's result or a JSON-RPC error.

A message that cannot be encoded (text holding a lone surrogate, a value JSON cannot carry)
is never written: the call raises :class:`LocalProtocolError` and the connection goes on.

What the peer gets wrong is a :class:`RemoteProtocolError` passed to ``on_protocol_error``
and survived: a line longer than ``max_line_bytes`` (discarded up to its newline), malformed
JSON, a message that is not JSON-RPC, a response to an id we never sent, an error without id.
A request whose id is neither a string nor an integer (``null``, ``1.5``, ``true``, ``[1]``)
is also answered, as JSON-RPC 2.0 asks: ``-32600 Invalid Request`` under id ``null``. A
request that does not decode (a lone-surrogate escape, nesting deeper than the decoder
allows) but whose id and method can be read off the top-level object is answered ``-32700
Parse error`` under that id, so the peer is not left waiting; a response that does not
decode fails the request it answers (a :class:`RemoteProtocolError`).

The peer's requests are served concurrently, at most ``max_incoming`` at once (being served
or answered, the refusals included). The reader waits for a free slot before it takes the
next one (a burst is served as its answers go out); when none frees within ``flood_grace``
seconds the peer floods (it keeps sending and does not read its answers), and the connection
is aborted (``request flood``) rather than holding a task for each of its requests. While
it waits the reader reads nothing, so a request handler must not wait for a later line of
the peer's (a response to a request of ours, a notification).

Transport death is EOF on the receive stream or a failed write (broken pipe). Every pending
request then fails with :class:`TransportClosed` (``peer disconnected before response``, plus
the detail and stderr tail the owner's ``peer_info`` supplies), later calls fail at once, and
``on_close`` is called exactly once. :meth:`JsonRpcConnection.aclose` is the local close
(``connection closed``). Every wait is cancellable; a request whose waiter is cancelled is
abandoned (a late answer is dropped quietly) and the peer is told with a
``$/cancel_request`` notification.
"""

from __future__ import annotations

import logging
from typing import Any, Final, cast

import anyio
import anyio.abc
import msgspec
from msgspec import Raw

from ..errors import (
    ExceptionMapping,
    LocalProtocolError,
    RemoteProtocolError,
    TransportClosed,
    map_exceptions,
)
from ..sync import Wakeup
from ._jsonrpc_peer import (
    CloseHandler,
    JsonRpcErrorReply,
    NotificationHandler,
    OnResponse,
    PeerInfo,
    ProtocolErrorHandler,
    RequestHandler,
    _PeerSide,
    method_not_found,
)
from .messages import (
    JsonRpcNotification,
    JsonRpcRequest,
    RequestId,
    encode_line,
)

__all__ = [
    "DEFAULT_FLOOD_GRACE",
    "DEFAULT_MAX_INCOMING",
    "DEFAULT_MAX_LINE_BYTES",
    "JsonRpcConnection",
    "JsonRpcErrorReply",
    "PendingRequest",
    "method_not_found",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_LINE_BYTES: Final = 16 * 1024 * 1024
DEFAULT_MAX_INCOMING: Final = 1024
"""The peer's requests served or answered at once; the next one waits for a free slot."""
DEFAULT_FLOOD_GRACE: Final = 5.0
"""How long the next request waits for a free slot before the peer counts as flooding."""


def _log_protocol_error(error: RemoteProtocolError) -> None:
    log.warning("%s", error)


class _Slot:
    __slots__ = ("ended", "error", "event", "method", "on_response", "result")

    def __init__(self, method: str, on_response: OnResponse | None) -> None:
        self.method = method
        self.on_response = on_response
        self.event = anyio.Event()
        self.ended = False
        self.result: Raw | None = None
        self.error: Exception | None = None

    def end(self, result: Raw | None = None, error: Exception | None = None) -> None:
        """Give the request its result or error, once (a later end is ignored): tell
        ``on_response``, then wake the waiters, even when ``on_response`` raises."""
        if self.ended:
            return
        self.ended = True
        self.result, self.error = result, error
        try:
            if self.on_response is not None:
                self.on_response(result, error)
        finally:
            self.event.set()


class PendingRequest:
    """A request that was written; :meth:`wait` for its result (``msgspec.Raw``)."""

    def __init__(self, connection: JsonRpcConnection, request_id: int, slot: _Slot) -> None:
        self._connection = connection
        self._slot = slot
        self.id: Final = request_id
        self.method: Final = slot.method

    @property
    def done(self) -> bool:
        """Ended, and its waiters woken (not yet while ``on_response`` is told)."""
        return self._slot.event.is_set()

    async def wait(self) -> Raw:
        """The raw result. Raises :class:`AgentRequestError` for an error response,
        :class:`TransportClosed` when the connection dies first. Cancelling the wait abandons
        the request (see :meth:`abandon`)."""
        finished = False
        try:
            await self._slot.event.wait()
            finished = True
        finally:
            if not finished:
                self.abandon()
        if self._slot.error is not None:
            raise self._slot.error
        assert self._slot.result is not None
        return self._slot.result

    def abandon(self) -> None:
        """Stop caring about the answer: drop it quietly when it comes, wake waiters with
        ``TransportClosed("request abandoned")`` and tell the peer (``$/cancel_request``)."""
        self._connection._abandon(self.id, self._slot)


class JsonRpcConnection(_PeerSide):
    """See the module docstring. Start :meth:`run` in a task group (``await tg.start(conn.run)``)."""

    def __init__(
        self,
        receive_stream: anyio.abc.ByteReceiveStream,
        send_stream: anyio.abc.ByteSendStream,
        *,
        request_handler: RequestHandler | None = None,
        notification_handler: NotificationHandler | None = None,
        on_protocol_error: ProtocolErrorHandler | None = None,
        on_close: CloseHandler | None = None,
        peer_info: PeerInfo | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_incoming: int = DEFAULT_MAX_INCOMING,
        flood_grace: float = DEFAULT_FLOOD_GRACE,
        name: str = "peer",
    ) -> None:
        self._receive = receive_stream
        self._send = send_stream
        self._request_handler = request_handler
        self._notification_handler = notification_handler
        self._on_protocol_error = on_protocol_error or _log_protocol_error
        self._on_close = on_close
        self._peer_info = peer_info
        self.max_line_bytes = max_line_bytes
        if max_incoming < 1 or not flood_grace >= 0:  # (not >= : NaN too)
            raise ValueError(
                f"max_incoming must be at least 1 and flood_grace at least 0, not "
                f"{max_incoming!r} and {flood_grace!r}"
            )
        self.max_incoming = max_incoming
        self.flood_grace = flood_grace
        self._incoming = 0  # the peer's requests being served or answered
        self._slot_freed = Wakeup()  # one of them finished, or the connection closed
        self.name: Final = name
        self._send_lock = anyio.Lock(fast_acquire=True)
        """One line written at a time; taken without a scheduler pass when free (the write
        itself yields), so a message goes out as soon as it is sent."""
        self._next_id = 0
        self._pending: dict[RequestId, _Slot] = {}
        self._abandoned: set[RequestId] = set()
        self._task_group: anyio.abc.TaskGroup | None = None
        self._reader_scope: anyio.CancelScope | None = None
        self._close_message: str | None = None
        self._close_kind: type[TransportClosed] = TransportClosed
        self._close_tail = ""
        self._closed_locally = False
        self.protocol_errors = 0
        self._encoding: Any = None  # the message being encoded (for its error)
        self._unencodable: ExceptionMapping = {
            (msgspec.EncodeError, TypeError, ValueError, OverflowError): self._cannot_send
        }

    # ---------------------------------------------------------------------------- state

    @property
    def closed(self) -> bool:
        return self._close_message is not None

    @property
    def closed_locally(self) -> bool:
        return self._closed_locally

    def ensure_open(self) -> None:
        """Raise the :class:`TransportClosed` that ended the connection, if it has ended."""
        if self.closed:
            raise self._closed_error()

    def shutdown(self) -> None:
        """Local close that leaves the streams open: pending requests fail with
        ``connection closed`` and the reader keeps draining (and discarding) the peer's
        output until EOF, so a peer that is flushing on its way out never blocks on a full
        pipe. Follow with :meth:`aclose`."""
        self._die("connection closed", local=True, drain=True)

    def abort(self, message: str, *, kind: type[TransportClosed] = TransportClosed) -> None:
        """Declare the transport dead from our side for a reason that is not a local close
        (e.g. ``notification queue overflow``): pending requests, and later calls, fail
        with ``kind(message)``."""
        self._close_kind = kind
        self._die(message)

    def _closed_error(self) -> TransportClosed:
        assert self._close_message is not None
        return self._close_kind(self._close_message, stderr_tail=self._close_tail)

    def _die(
        self, message: str, stderr_tail: str = "", *, local: bool = False, drain: bool = False
    ) -> None:
        """Enter the closed state once: fail every pending request, tell the owner. The
        reader stops, or with ``drain`` keeps discarding input until EOF."""
        if self._close_message is not None:
            return
        self._close_message = message
        self._close_tail = stderr_tail
        self._closed_locally = local
        self._slot_freed.wake()  # a reader waiting for a slot goes on (or drains)
        pending, self._pending = self._pending, {}
        if self._reader_scope is not None and not drain:
            self._reader_scope.cancel()
        failure: BaseException | None = None
        try:
            if self._on_close is not None:  # told first: it knows why the requests fail
                self._on_close(None if local else self._closed_error())
        except BaseException as exc:  # noqa: BLE001 - raised below, once every request ended
            failure = exc
        for slot in pending.values():
            try:
                slot.end(error=self._closed_error())
            except BaseException as exc:  # noqa: BLE001 - an on_response failed: raised below
                failure = failure or exc
        if failure is not None:
            raise failure

    async def _peer_died(self, base: str) -> None:
        if self.closed:
            return
        detail, tail = ("", "")
        if self._peer_info is not None:
            with anyio.CancelScope(shield=True):
                detail, tail = await self._peer_info()
        self._die(f"{base}: {detail}" if detail else base, tail)

    # ---------------------------------------------------------------------------- sending

    async def _write(self, message: Any) -> None:
        self._encoding = message
        with map_exceptions(self._unencodable):
            data = encode_line(message)
        await self._send_line(data)

    def _cannot_send(self, exc: Exception) -> LocalProtocolError:
        """A message that cannot be encoded (e.g. a lone surrogate: ``os.fsdecode`` of a
        name that is not UTF-8) is never sent."""
        what = getattr(self._encoding, "method", "") or "a response"
        return LocalProtocolError(f"cannot send {what} to {self.name}: {type(exc).__name__}: {exc}")

    async def _send_line(self, line: bytearray) -> None:
        """Write one message's line (:func:`~.messages.encode_line`)."""
        if self.closed:
            raise self._closed_error()
        async with self._send_lock:
            if self.closed:
                raise self._closed_error()
            try:
                # every byte stream takes a bytes-like buffer: no copy made to type it bytes
                await self._send.send(cast("bytes", line))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                reason = type(exc).__name__ if not str(exc) else f"{type(exc).__name__}: {exc}"
                await self._peer_died(f"peer disconnected: write to {self.name} failed ({reason})")
                raise self._closed_error() from None

    async def send_request(
        self,
        method: str,
        params: Any = None,
        *,
        on_response: OnResponse | None = None,
    ) -> PendingRequest:
        """Write a request and return at once. ``on_response(result, error)`` is called
        exactly once when the request ends, synchronously and before its waiters wake: in
        the reader the moment the answer is read (before any later message; ``error`` an
        :class:`AgentRequestError` for an error answer), or with a :class:`TransportClosed`
        when the connection closes or the request is abandoned first, wherever that
        happens. The request counts from the moment this is called: if the connection
        closes before or while it is written, ``on_response`` is told of the close and this
        raises (or, when the write still went through, returns the request already ended);
        a write that is cancelled or cannot be encoded raises alone, and is never told."""
        if self.closed:
            raise self._closed_error()
        self._next_id += 1
        request_id = self._next_id
        slot = _Slot(method, on_response)
        self._pending[request_id] = slot
        try:
            await self._write(JsonRpcRequest(id=request_id, method=method, params=params))
        except BaseException:
            self._pending.pop(request_id, None)
            raise
        return PendingRequest(self, request_id, slot)

    async def request(self, method: str, params: Any = None) -> Raw:
        """Send a request and wait for its raw result (see :meth:`PendingRequest.wait`)."""
        pending = await self.send_request(method, params)
        return await pending.wait()

    async def notify(self, method: str, params: Any = None) -> None:
        await self._write(JsonRpcNotification(method=method, params=params))

    def _abandon(self, request_id: int, slot: _Slot) -> None:
        if slot.ended:
            return
        self._pending.pop(request_id, None)
        self._abandoned.add(request_id)
        try:
            slot.end(error=TransportClosed(f"request {slot.method} abandoned"))
        finally:  # the peer is told even when the owner's on_response fails
            if not self.closed and self._task_group is not None:
                self._task_group.start_soon(self._send_cancel_request, request_id)

    async def _send_cancel_request(self, request_id: int) -> None:
        try:
            await self.notify("$/cancel_request", {"requestId": request_id})
        except TransportClosed:
            pass

    # ---------------------------------------------------------------------------- lifecycle

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Read until EOF (transport death) or :meth:`aclose`. Incoming requests are served
        in tasks of an internal task group that ends with the reader."""
        try:
            async with anyio.create_task_group() as tg:
                self._task_group = tg
                with anyio.CancelScope() as self._reader_scope:
                    task_status.started()
                    if not self.closed:
                        await self._read_loop()
                tg.cancel_scope.cancel()
        finally:
            self._task_group = None
            self._die("connection closed", local=True)

    async def aclose(self) -> None:
        """Local close: pending requests fail with ``connection closed``; streams closed."""
        self._die("connection closed", local=True)
        if self._reader_scope is not None:
            self._reader_scope.cancel()
        with anyio.CancelScope(shield=True):
            for stream in (self._send, self._receive):
                try:
                    await stream.aclose()
                except (anyio.BrokenResourceError, OSError):
                    pass
