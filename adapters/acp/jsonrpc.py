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
import re
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final, cast

import anyio
import anyio.abc
import msgspec
from msgspec import UNSET, Raw

from ..errors import (
    UNDECODABLE_JSON,
    AgentRequestError,
    ExceptionMapping,
    LocalProtocolError,
    RemoteProtocolError,
    TransportClosed,
    map_exceptions,
)
from ..sync import Wakeup
from .messages import (
    JsonRpcError,
    JsonRpcErrorResponse,
    JsonRpcMessage,
    JsonRpcNotification,
    JsonRpcRequest,
    JsonRpcResponse,
    RequestId,
    decode_message,
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
_READ_CHUNK: Final = 64 * 1024
_PREVIEW: Final = 120

RequestHandler = Callable[[RequestId, str, Raw | None], Awaitable[Any]]
NotificationHandler = Callable[[str, Raw | None], Awaitable[None]]
ProtocolErrorHandler = Callable[[RemoteProtocolError], None]
CloseHandler = Callable[[TransportClosed | None], None]
PeerInfo = Callable[[], Awaitable[tuple[str, str]]]
OnResponse = Callable[[Raw | None, Exception | None], None]
"""Told a written request's end, synchronously: its result, or what it raised instead."""


class JsonRpcErrorReply(Exception):
    """Raise from a request handler to answer with a JSON-RPC error object."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{code} {message}")
        self.code = code
        self.message = message
        self.data = data


def method_not_found(method: str) -> JsonRpcErrorReply:
    return JsonRpcErrorReply(-32601, "Method not found", {"method": method})


def _preview(line: bytes) -> str:
    text = line[:_PREVIEW].decode("utf-8", "replace")
    return text + ("…" if len(line) > _PREVIEW else "")


def _log_protocol_error(error: RemoteProtocolError) -> None:
    log.warning("%s", error)


_ID_DECODER: Final = msgspec.json.Decoder(RequestId)
_INVALID_ID: Final = JsonRpcError(
    code=-32600,
    message="Invalid Request",
    data={"details": "a request id is a string or an integer"},
)


_TOKEN: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[{}\[\]:,]', re.DOTALL)
_KEYS: Final = {b'"id"': "id", b'"method"': "method"}


def _top_level(line: bytes) -> dict[str, bytes]:
    """The raw values of the ``id`` and ``method`` keys of the JSON object on ``line``, read
    without decoding anything (strings are skipped whole, nesting only counted), so that a
    message the decoder refuses still tells who it is. Empty when ``line`` is no object."""
    found: dict[str, bytes] = {}
    depth = 0
    key: str | None = None
    start = -1  # where the current top-level value begins
    tokens = _TOKEN.finditer(line)
    first = next(tokens, None)
    if first is None or first.group() != b"{" or line[: first.start()].strip():
        return found
    depth = 1
    expect_key = True
    for token in tokens:
        text = token.group()
        if depth == 1 and expect_key:
            if text[:1] == b'"':
                key = _KEYS.get(text)
            elif text == b":":
                expect_key, start = False, token.end()
            elif text == b"}":
                break
            continue
        if text in (b"{", b"["):
            depth += 1
        elif text in (b"}", b"]"):
            depth -= 1
            if depth == 0:
                if key is not None and start >= 0:
                    found.setdefault(key, line[start : token.start()].strip())
                break
        elif text == b"," and depth == 1:
            if key is not None:
                found.setdefault(key, line[start : token.start()].strip())
                if len(found) == len(_KEYS):
                    break
            key, expect_key, start = None, True, -1
    return found


def _decoded_id(raw: bytes) -> RequestId | None:
    """``raw`` as a request id (a string or an integer), or None."""
    try:
        return _ID_DECODER.decode(raw)
    except UNDECODABLE_JSON:
        return None


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


class JsonRpcConnection:
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
        self.max_line_bytes: Final = max_line_bytes
        if max_incoming < 1 or not flood_grace >= 0:  # (not >= : NaN too)
            raise ValueError(
                f"max_incoming must be at least 1 and flood_grace at least 0, not "
                f"{max_incoming!r} and {flood_grace!r}"
            )
        self.max_incoming: Final = max_incoming
        self.flood_grace: Final = flood_grace
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

    # ---------------------------------------------------------------------------- reading

    def _report(self, message: str) -> None:
        self.protocol_errors += 1
        self._on_protocol_error(RemoteProtocolError(message))

    async def _read_loop(self) -> None:
        buffer = bytearray()
        discarding = False
        limit = self.max_line_bytes
        while True:
            try:
                chunk = await self._receive.receive(_READ_CHUNK)
            except anyio.EndOfStream:
                if buffer and not discarding:
                    await self._handle_line(bytes(buffer))
                await self._peer_died("peer disconnected before response")
                return
            except anyio.ClosedResourceError:
                self._die("connection closed", local=True)
                return
            except (anyio.BrokenResourceError, OSError) as exc:
                await self._peer_died(f"peer disconnected before response ({exc!r})")
                return
            if self.closed:  # draining after shutdown(): discard
                buffer.clear()
                continue
            start = len(buffer)
            buffer += chunk
            while True:
                newline = buffer.find(b"\n", start)
                if newline < 0:
                    break
                line = bytes(buffer[:newline])
                del buffer[: newline + 1]
                start = 0
                if discarding:
                    discarding = False
                    continue
                if len(line) > limit:
                    self._report(
                        f"line from {self.name} exceeds {limit} bytes ({len(line)} bytes); discarded"
                    )
                    continue
                await self._handle_line(line)
                if self._close_message is not None:
                    break
            if not discarding and len(buffer) > limit:
                self._report(f"line from {self.name} exceeds {limit} bytes; discarded")
                discarding = True
            if discarding:
                buffer.clear()

    async def _handle_line(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            message = decode_message(line)
        except UNDECODABLE_JSON as exc:
            await self._undecodable(line, exc)
            return
        if message.method is not UNSET:
            await self._handle_call(message, message.method, line)
        elif message.id is UNSET or message.id is None:
            if message.error is not UNSET:
                error = message.error
                self._report(
                    f"error response without id from {self.name}: "
                    f"{AgentRequestError(error.code, error.message, error.data)}"
                )
            else:
                self._report(f"invalid JSON-RPC message from {self.name}: {_preview(line)}")
        else:
            self._handle_response(message, message.id, line)

    async def _handle_call(self, message: JsonRpcMessage, method: str, line: bytes) -> None:
        params = None if message.params is UNSET else message.params
        if message.id is UNSET:
            if self._notification_handler is not None:
                try:
                    await self._notification_handler(method, params)
                except Exception:
                    log.exception("notification handler failed for %s", method)
        elif message.id is None:
            await self._refuse_request(f"request with null id from {self.name}: {_preview(line)}")
        elif await self._free_slot():
            self._incoming_task(self._serve_request(message.id, method, params))

    async def _undecodable(self, line: bytes, exc: Exception) -> None:
        """A line that does not decode: answered when it is a request whose id can be read,
        failing the request it answers when it is a response, else reported."""
        what = f"from {self.name} ({exc}): {_preview(line)}"
        found = _top_level(line)
        raw_id = found.get("id")
        request_id = None if raw_id is None else _decoded_id(raw_id)
        if "method" in found and raw_id is not None:
            if request_id is None:
                await self._refuse_request(f"request with invalid id {_preview(raw_id)} {what}")
                return
            self._report(f"undecodable request {what}")
            error = JsonRpcError(code=-32700, message="Parse error", data={"details": str(exc)})
            if await self._free_slot():
                reply = JsonRpcErrorResponse(id=request_id, error=error)
                self._incoming_task(self._send_reply(reply))
            return
        slot = None if request_id is None else self._pending.pop(request_id, None)
        if slot is None:
            self._report(f"malformed JSON-RPC message {what}")
            return
        undecodable = RemoteProtocolError(f"undecodable response to {slot.method} {what}")
        try:
            self._report(str(undecodable))
        finally:
            slot.end(error=undecodable)

    async def _refuse_request(self, error: str) -> None:
        """Report a request whose id is not one, and answer it ``Invalid Request`` (id null)."""
        self._report(error)
        if await self._free_slot():
            reply = JsonRpcErrorResponse(id=None, error=_INVALID_ID)
            self._incoming_task(self._send_reply(reply))

    async def _free_slot(self) -> bool:
        """Wait until fewer than ``max_incoming`` of the peer's requests are in flight; False
        (the connection aborted: the peer floods) when none finished within
        ``flood_grace``, or when the connection is closed."""
        if self._incoming >= self.max_incoming:
            with anyio.move_on_after(self.flood_grace):
                while self._incoming >= self.max_incoming and not self.closed:
                    await self._slot_freed.wait()
            if self._incoming >= self.max_incoming and not self.closed:
                message = (
                    f"request flood: {self.name} keeps sending requests while "
                    f"{self.max_incoming} are not answered for {self.flood_grace:g}s"
                )
                self._report(message)
                self.abort(message)
        return self._task_group is not None and not self.closed

    def _incoming_task(self, work: Coroutine[Any, Any, None]) -> None:
        """Serve or answer one of the peer's requests in a task of its own (a slot is free)."""
        assert self._task_group is not None
        self._incoming += 1
        try:
            self._task_group.start_soon(self._counted, work)
        except BaseException:
            self._incoming -= 1
            work.close()
            raise

    async def _counted(self, work: Coroutine[Any, Any, None]) -> None:
        try:
            await work
        finally:
            self._incoming -= 1
            self._slot_freed.wake()

    async def _send_reply(self, reply: JsonRpcErrorResponse) -> None:
        try:
            await self._write(reply)
        except TransportClosed:
            pass

    def _handle_response(self, message: JsonRpcMessage, request_id: RequestId, line: bytes) -> None:
        slot = self._pending.pop(request_id, None)
        if slot is None:
            if request_id in self._abandoned:
                self._abandoned.discard(request_id)
            else:
                self._report(f"response to unknown request id {request_id!r} from {self.name}")
            return
        if message.error is not UNSET:
            error = message.error
            slot.end(
                error=AgentRequestError(error.code, error.message, error.data, method=slot.method)
            )
        elif message.result is not UNSET:
            slot.end(result=message.result)
        else:
            neither = RemoteProtocolError(
                f"response to {slot.method} from {self.name} has neither result nor error"
            )
            try:
                self._report(str(neither))
            finally:  # an owner's failing report still ends the request
                slot.end(error=neither)

    async def _serve_request(self, request_id: RequestId, method: str, params: Raw | None) -> None:
        reply: JsonRpcErrorResponse | None = None
        try:
            if self._request_handler is None:
                raise method_not_found(method)
            result = await self._request_handler(request_id, method, params)
            # encoded once, here: a result that cannot be encoded is answered -32603
            data = encode_line(JsonRpcResponse(id=request_id, result=result))
        except JsonRpcErrorReply as exc:
            reply = JsonRpcErrorResponse(
                id=request_id, error=JsonRpcError(code=exc.code, message=exc.message, data=exc.data)
            )
        except Exception as exc:
            log.exception("request handler failed for %s", method)
            reply = JsonRpcErrorResponse(
                id=request_id,
                error=JsonRpcError(
                    code=-32603, message="Internal error", data={"details": str(exc)}
                ),
            )
        if reply is not None:
            await self._send_reply(reply)
            return
        try:
            await self._send_line(data)
        except TransportClosed:
            pass
