"""The peer's side of a :class:`~.jsonrpc.JsonRpcConnection`: reading its lines (split,
bounded, decoded), resolving its responses, serving its requests (bounded in number, refused
when their id is none), and telling the owner what it got wrong. A mixin over the
connection's state, declared here for the type checker only."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.abc
import msgspec
from msgspec import UNSET, Raw

from ..errors import (
    UNDECODABLE_JSON,
    AgentRequestError,
    RemoteProtocolError,
    TransportClosed,
)
from ..sync import Wakeup
from .messages import (
    JsonRpcError,
    JsonRpcErrorResponse,
    JsonRpcMessage,
    JsonRpcResponse,
    RequestId,
    decode_message,
    encode_line,
)

log = logging.getLogger("acpfsm.adapters.acp.jsonrpc")

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


class _PeerSide:
    """Reading and serving the peer (see the module docstring)."""

    if TYPE_CHECKING:
        name: str
        max_line_bytes: int
        max_incoming: int
        flood_grace: float
        protocol_errors: int
        _receive: anyio.abc.ByteReceiveStream
        _request_handler: RequestHandler | None
        _notification_handler: NotificationHandler | None
        _on_protocol_error: ProtocolErrorHandler
        _incoming: int
        _slot_freed: Wakeup
        _pending: dict[RequestId, Any]
        _abandoned: set[RequestId]
        _task_group: anyio.abc.TaskGroup | None
        _close_message: str | None

        @property
        def closed(self) -> bool: ...
        def abort(self, message: str, *, kind: type[TransportClosed] = TransportClosed) -> None: ...
        def _die(
            self, message: str, stderr_tail: str = "", *, local: bool = False, drain: bool = False
        ) -> None: ...
        async def _peer_died(self, base: str) -> None: ...
        async def _write(self, message: Any) -> None: ...
        async def _send_line(self, line: bytearray) -> None: ...

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
