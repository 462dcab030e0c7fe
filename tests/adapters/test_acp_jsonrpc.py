"""JSON-RPC 2.0 over newline-delimited byte streams, against a scripted peer in memory."""

from __future__ import annotations

import contextlib
import json
import math
import sys
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import msgspec
import pytest

from acpfsm.adapters.acp.jsonrpc import JsonRpcConnection, JsonRpcErrorReply, PendingRequest
from acpfsm.adapters.errors import (
    AgentRequestError,
    LocalProtocolError,
    RemoteProtocolError,
    TransportClosed,
)

from .pipes import PipeReader, PipeWriter

pytestmark = pytest.mark.both_backends


def pipe() -> tuple[PipeWriter, PipeReader]:
    send, receive = anyio.create_memory_object_stream[bytes](math.inf)
    return PipeWriter(send), PipeReader(receive)


class Peer:
    """The far end: reads what the connection wrote, writes raw lines back."""

    def __init__(self, inbox: PipeReader, outbox: PipeWriter) -> None:
        self.inbox = inbox
        self.outbox = outbox
        self._buffer = b""

    async def read(self) -> dict[str, Any]:
        while b"\n" not in self._buffer:
            self._buffer += await self.inbox.receive()
        line, self._buffer = self._buffer.split(b"\n", 1)
        message = json.loads(line)
        assert isinstance(message, dict)
        return message

    async def write(self, obj: Any) -> None:
        await self.outbox.send(json.dumps(obj).encode() + b"\n")

    async def write_raw(self, data: bytes) -> None:
        await self.outbox.send(data)

    async def respond(self, request: dict[str, Any], result: Any) -> None:
        await self.write({"jsonrpc": "2.0", "id": request["id"], "result": result})


class Recorder:
    def __init__(self) -> None:
        self.protocol_errors: list[RemoteProtocolError] = []
        self.closes: list[TransportClosed | None] = []
        self.notifications: list[tuple[str, Any]] = []


@contextlib.asynccontextmanager
async def wired(
    *,
    request_handler: Any = None,
    max_line_bytes: int = 1024,
    peer_info: Any = None,
    max_incoming: int = 1024,
    flood_grace: float = 5.0,
    peer_reads: bool = True,
    on_close: Any = None,
    on_protocol_error: Any = None,
) -> AsyncIterator[tuple[JsonRpcConnection, Peer, Recorder]]:
    """A connection to a :class:`Peer`; with ``peer_reads=False`` the peer never reads, so
    whatever the connection writes blocks (a full pipe). The closes and protocol errors are
    recorded unless ``on_close`` / ``on_protocol_error`` take them instead."""
    if peer_reads:
        to_peer_w, to_peer_r = pipe()
    else:
        send, receive = anyio.create_memory_object_stream[bytes](0)
        to_peer_w, to_peer_r = PipeWriter(send), PipeReader(receive)
    from_peer_w, from_peer_r = pipe()
    record = Recorder()

    async def on_notification(method: str, params: msgspec.Raw | None) -> None:
        record.notifications.append((method, None if params is None else json.loads(bytes(params))))

    conn = JsonRpcConnection(
        from_peer_r,
        to_peer_w,
        request_handler=request_handler,
        notification_handler=on_notification,
        on_protocol_error=on_protocol_error or record.protocol_errors.append,
        on_close=on_close or record.closes.append,
        peer_info=peer_info,
        max_line_bytes=max_line_bytes,
        max_incoming=max_incoming,
        flood_grace=flood_grace,
    )
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(conn.run)
            yield conn, Peer(to_peer_r, from_peer_w), record
            await conn.aclose()
    finally:
        for stream in (to_peer_w, to_peer_r, from_peer_w, from_peer_r):
            await stream.aclose()


async def test_concurrent_requests_are_correlated_by_id() -> None:
    async with wired() as (conn, peer, _):
        results: dict[str, Any] = {}

        async def call(name: str) -> None:
            results[name] = json.loads(bytes(await conn.request("echo", {"name": name})))

        async with anyio.create_task_group() as tg:
            for name in ("a", "b", "c"):
                tg.start_soon(call, name)
            requests = [await peer.read() for _ in range(3)]
            assert len({r["id"] for r in requests}) == 3
            assert all(r["jsonrpc"] == "2.0" and r["method"] == "echo" for r in requests)
            for request in reversed(requests):
                await peer.respond(request, {"echo": request["params"]["name"]})
        assert results == {"a": {"echo": "a"}, "b": {"echo": "b"}, "c": {"echo": "c"}}


async def test_a_message_that_cannot_be_encoded_is_never_written() -> None:
    """A lone surrogate (``os.fsdecode`` of a name that is not UTF-8) or a value JSON cannot
    carry: a typed error for that call, nothing written, the connection goes on."""
    async with wired() as (conn, peer, record):
        for params in ({"text": "bad \udcff"}, {"value": object()}):
            with pytest.raises(LocalProtocolError, match="cannot send session/prompt to peer"):
                await conn.send_request("session/prompt", params)
            with pytest.raises(LocalProtocolError, match="cannot send session/cancel"):
                await conn.notify("session/cancel", params)
        assert not conn.closed and record.closes == []
        async with anyio.create_task_group() as tg:
            answers: list[Any] = []

            async def call() -> None:
                answers.append(json.loads(bytes(await conn.request("ping", {}))))

            tg.start_soon(call)
            request = await peer.read()  # the first message the peer sees
            assert request["method"] == "ping"
            await peer.respond(request, {"pong": True})
        assert answers == [{"pong": True}]


class SizeSink(anyio.abc.ByteSendStream):
    """Counts what is written and keeps none of it."""

    def __init__(self) -> None:
        self.lines: list[int] = []

    async def send(self, item: bytes) -> None:
        self.lines.append(len(item))

    async def aclose(self) -> None:
        pass


async def test_a_large_answer_is_one_buffer_while_it_is_written() -> None:
    """A whole file read answered (its text escapes to six bytes a character): encoding it
    and appending the line's newline hold one copy of the line at a time, not two, and the
    result is encoded once (so a result that cannot be encoded is still answered -32603)."""
    content = "\x00" * (256 * 1024)
    sink = SizeSink()
    from_peer_w, from_peer_r = pipe()
    unused_w, unused_r = pipe()

    async def handler(request_id: Any, method: str, params: Any) -> Any:
        if method == "bad":
            return {"value": object()}
        return {"content": content}

    conn = JsonRpcConnection(from_peer_r, sink, request_handler=handler)
    peer = Peer(unused_r, from_peer_w)
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                await tg.start(conn.run)
                await peer.write({"jsonrpc": "2.0", "id": 0, "method": "warm"})
                while not sink.lines:
                    await anyio.lowlevel.checkpoint()
                tracemalloc.reset_peak()
                before = tracemalloc.get_traced_memory()[0]
                await peer.write({"jsonrpc": "2.0", "id": 1, "method": "fs/read_text_file"})
                while len(sink.lines) < 2:
                    await anyio.lowlevel.checkpoint()
                peak = tracemalloc.get_traced_memory()[1] - before
                await peer.write({"jsonrpc": "2.0", "id": 2, "method": "bad"})
                while len(sink.lines) < 3:
                    await anyio.lowlevel.checkpoint()
                await conn.aclose()
    finally:
        if not tracing:
            tracemalloc.stop()
        for stream in (from_peer_w, from_peer_r, unused_w, unused_r):
            await stream.aclose()
    line = sink.lines[1]
    assert line > 6 * len(content)
    assert peak < 1.5 * line, (peak, line)
    assert 0 < sink.lines[2] < 1024  # the -32603 answer


async def test_notifications_are_handled_in_order_before_the_response() -> None:
    async with wired() as (conn, peer, record):
        async with anyio.create_task_group() as tg:
            seen_at_response: list[Any] = []

            async def call() -> None:
                await conn.request("session/prompt", {})
                seen_at_response.extend(record.notifications)

            tg.start_soon(call)
            request = await peer.read()
            for i in range(3):
                await peer.write({"jsonrpc": "2.0", "method": "session/update", "params": {"i": i}})
            await peer.respond(request, {"stopReason": "end_turn"})
        assert seen_at_response == [("session/update", {"i": i}) for i in range(3)]
        await conn.notify("session/cancel", {"sessionId": "s"})
        assert await peer.read() == {
            "jsonrpc": "2.0",
            "method": "session/cancel",
            "params": {"sessionId": "s"},
        }


async def test_error_response_raises_agent_request_error() -> None:
    async with wired() as (conn, peer, _):
        async with anyio.create_task_group() as tg:

            async def answer() -> None:
                request = await peer.read()
                error = {"code": -32002, "message": "Resource not found", "data": {"uri": "x"}}
                await peer.write({"jsonrpc": "2.0", "id": request["id"], "error": error})

            tg.start_soon(answer)
            with pytest.raises(AgentRequestError) as caught:
                await conn.request("session/load", {"sessionId": "x"})
        error = caught.value
        assert (error.code, error.error_message, error.data) == (
            -32002,
            "Resource not found",
            {"uri": "x"},
        )
        assert error.method == "session/load"
        assert str(error) == '{"code":-32002,"message":"Resource not found","data":{"uri":"x"}}'


async def test_incoming_requests_are_served_without_blocking_the_reader() -> None:
    release = anyio.Event()

    async def handler(request_id: Any, method: str, params: msgspec.Raw | None) -> Any:
        if method == "slow":
            await release.wait()
            return {"slow": True}
        if method == "refuse":
            raise JsonRpcErrorReply(-32602, "Invalid params", {"why": "no"})
        if method == "bug":
            raise ValueError("oops")
        if method == "echo":
            return {"id": request_id, "params": json.loads(bytes(params)) if params else None}
        raise JsonRpcErrorReply(-32601, "Method not found", {"method": method})

    async with wired(request_handler=handler) as (_, peer, record):
        await peer.write({"jsonrpc": "2.0", "id": 1, "method": "slow"})
        await peer.write({"jsonrpc": "2.0", "id": 2, "method": "echo", "params": [1]})
        await peer.write({"jsonrpc": "2.0", "id": "three", "method": "refuse"})
        await peer.write({"jsonrpc": "2.0", "id": 4, "method": "bug"})
        await peer.write({"jsonrpc": "2.0", "id": 5, "method": "terminal/create"})
        await peer.write({"jsonrpc": "2.0", "method": "note"})
        answers = {}
        for _ in range(4):
            answer = await peer.read()
            answers[answer["id"]] = answer
        assert record.notifications == [("note", None)]  # the slow handler blocked nothing
        assert answers[2]["result"] == {"id": 2, "params": [1]}
        assert answers["three"]["error"] == {
            "code": -32602,
            "message": "Invalid params",
            "data": {"why": "no"},
        }
        assert answers[4]["error"] == {
            "code": -32603,
            "message": "Internal error",
            "data": {"details": "oops"},
        }
        assert answers[5]["error"]["code"] == -32601
        release.set()
        assert await peer.read() == {"jsonrpc": "2.0", "id": 1, "result": {"slow": True}}


async def test_requests_without_handler_get_method_not_found() -> None:
    async with wired() as (_, peer, _record):
        await peer.write({"jsonrpc": "2.0", "id": 9, "method": "fs/read_text_file"})
        answer = await peer.read()
        assert answer["error"] == {
            "code": -32601,
            "message": "Method not found",
            "data": {"method": "fs/read_text_file"},
        }


async def test_protocol_errors_are_reported_and_survived() -> None:
    async with wired(max_line_bytes=64) as (conn, peer, record):
        await peer.write_raw(b"this is not json\n")
        await peer.write_raw(b"[1, 2, 3]\n")
        await peer.write({"jsonrpc": "2.0", "id": 4242, "result": {}})
        await peer.write({"jsonrpc": "2.0", "error": {"code": -32602, "message": "bad"}})
        await peer.write({"jsonrpc": "2.0", "id": None, "method": "x"})
        await peer.write_raw(b'{"jsonrpc":"2.0","method":"big","params":"' + b"x" * 100 + b'"}\n')
        # an oversize line arriving in pieces is discarded up to its newline
        await peer.write_raw(b'{"jsonrpc":"2.0","method":"huge","params":"' + b"y" * 80)
        await peer.write_raw(b"y" * 80)
        await peer.write_raw(b'"}\n{"jsonrpc":"2.0","method":"after"}\n')
        await peer.write_raw(b"\n   \n")  # blank lines are not errors
        async with anyio.create_task_group() as tg:

            async def answer() -> None:
                while "method" not in (request := await peer.read()):
                    replies.append(request)
                await peer.respond(request, "still alive")

            replies: list[dict[str, Any]] = []
            tg.start_soon(answer)
            assert json.loads(bytes(await conn.request("ping"))) == "still alive"
        # the request with a null id was answered as JSON-RPC asks
        assert replies == [INVALID_REQUEST]
        messages = [str(e) for e in record.protocol_errors]
        assert len(messages) == 7, messages
        assert "malformed JSON-RPC message" in messages[0]
        assert "malformed JSON-RPC message" in messages[1]
        assert messages[2] == "response to unknown request id 4242 from peer"
        assert messages[3].startswith("error response without id from peer")
        assert '"code":-32602' in messages[3]
        assert messages[4].startswith("request with null id")
        assert "exceeds 64 bytes" in messages[5]
        assert "exceeds 64 bytes" in messages[6]
        assert all(isinstance(e, RemoteProtocolError) for e in record.protocol_errors)
        assert record.notifications == [("after", None)]
        assert conn.protocol_errors == 7
        assert not conn.closed and record.closes == []


INVALID_REQUEST = {
    "jsonrpc": "2.0",
    "id": None,
    "error": {
        "code": -32600,
        "message": "Invalid Request",
        "data": {"details": "a request id is a string or an integer"},
    },
}


DEEP = sys.getrecursionlimit() + 1000


@pytest.mark.parametrize(
    ("bad_id", "told"),
    [
        (b"null", "request with null id"),
        (b"1.0", "request with invalid id 1.0"),
        (b"1.5", "request with invalid id 1.5"),
        (b"-1e3", "request with invalid id -1e3"),
        (b"true", "request with invalid id true"),
        (b"false", "request with invalid id false"),
        (b"[1]", "request with invalid id [1]"),
        (b'{"id": 1}', 'request with invalid id {"id": 1}'),
        (b"[" * DEEP + b"]" * DEEP, "request with invalid id [[["),
    ],
    ids=["null", "1.0", "1.5", "-1e3", "true", "false", "array", "object", "deep"],
)
async def test_a_request_whose_id_is_no_id_is_refused_and_answered(
    bad_id: bytes, told: str
) -> None:
    """A request whose id is neither a string nor an integer never reaches the handler: the
    peer gets ``Invalid Request`` under id null (it cannot be answered under its own), the
    owner a protocol error naming the id (also one nested too deep to decode). The connection
    goes on: ids 1 and "1" are then served, each under its own."""
    served: list[Any] = []

    async def handler(request_id: Any, method: str, params: Any) -> Any:
        served.append(request_id)
        return request_id

    with anyio.fail_after(10):
        async with wired(request_handler=handler, max_line_bytes=1 << 16) as (conn, peer, record):
            await peer.write_raw(b'{"jsonrpc":"2.0","method":"x","id":' + bad_id + b"}\n")
            await peer.write({"jsonrpc": "2.0", "id": 1, "method": "x"})
            await peer.write({"jsonrpc": "2.0", "id": "1", "method": "x"})
            refused = told != "malformed JSON-RPC message"
            replies = [await peer.read() for _ in range(3 if refused else 2)]
            answers = [r for r in replies if r["id"] is not None]
            assert sorted(json.dumps([a["id"], a["result"]]) for a in answers) == [
                '["1", "1"]',
                "[1, 1]",
            ]
            assert [r for r in replies if r["id"] is None] == ([INVALID_REQUEST] if refused else [])
            assert sorted(served, key=repr) == ["1", 1]
            (error,) = [str(e) for e in record.protocol_errors]
            assert error.startswith(told)
            assert not conn.closed


UNDECODABLE = [
    (b'{"sessionId":"s","path":"/tmp/\\ud800"}', "lone surrogate"),
    (b'{"deep":' + b"[" * DEEP + b"]" * DEEP + b"}", "deep"),
]


@pytest.mark.parametrize(("params", "what"), UNDECODABLE, ids=[u[1] for u in UNDECODABLE])
@pytest.mark.parametrize("request_id", [b"7", b'"r-1"'], ids=["int", "str"])
async def test_an_undecodable_request_is_answered_under_its_id(
    params: bytes, what: str, request_id: bytes
) -> None:
    """A request the decoder refuses (a lone-surrogate escape, nesting deeper than it
    allows) whose id and method are plain is answered ``-32700 Parse error`` under its own
    id, never reaching the handler: the peer does not wait for an answer that never comes.
    The owner is told; the connection goes on."""
    served: list[Any] = []

    async def handler(request_id: Any, method: str, params: Any) -> Any:
        served.append(request_id)
        return "ok"

    with anyio.fail_after(10):
        async with wired(request_handler=handler, max_line_bytes=1 << 16) as (conn, peer, record):
            line = b'{"jsonrpc":"2.0","params":' + params + b',"method":"fs/read_text_file","id":'
            await peer.write_raw(line + request_id + b"}\n")
            answer = await peer.read()
            assert answer["id"] == json.loads(request_id)
            assert (answer["error"]["code"], answer["error"]["message"]) == (-32700, "Parse error")
            assert answer["error"]["data"]["details"]
            (error,) = [str(e) for e in record.protocol_errors]
            assert error.startswith("undecodable request from peer (")
            await peer.write({"jsonrpc": "2.0", "id": 8, "method": "x"})
            assert (await peer.read())["result"] == "ok"
            assert served == [8] and not conn.closed


async def test_an_undecodable_response_fails_its_request() -> None:
    async with wired() as (conn, peer, record):
        with anyio.fail_after(10):
            pending = await conn.send_request("ask")
            request = await peer.read()
            bad = b'{"jsonrpc":"2.0","id":%d,"result":{"text":"\\udc00"}}\n' % request["id"]
            await peer.write_raw(bad)
            with pytest.raises(RemoteProtocolError, match=r"^undecodable response to ask from"):
                await pending.wait()
            # an undecodable notification, or a response to nobody, is only reported
            await peer.write_raw(b'{"jsonrpc":"2.0","method":"n","params":"\\udc00"}\n')
            await peer.write_raw(b'{"jsonrpc":"2.0","id":99,"result":"\\udc00"}\n')
            while len(record.protocol_errors) < 3:
                await anyio.sleep(0.01)
            assert [str(e).split(" (")[0] for e in record.protocol_errors[1:]] == [
                "malformed JSON-RPC message from peer",
                "malformed JSON-RPC message from peer",
            ]
            assert not conn.closed


@pytest.mark.parametrize("request_id", [b"7", b"true"], ids=["served", "refused"])
async def test_a_peer_that_floods_requests_and_never_reads_is_cut_off(request_id: bytes) -> None:
    """Each of the peer's requests holds a task until its answer (or refusal) is written; a
    peer that keeps sending requests and never reads (its stdin full) would cost a task per
    line for ever. With ``max_incoming`` in flight the reader waits for one to finish; when
    none does within ``flood_grace`` the connection is aborted: a typed close naming the
    flood, and nothing after it is served."""
    handled: list[Any] = []

    async def handler(request_id: Any, method: str, params: Any) -> Any:
        handled.append(request_id)
        return "answered"  # never read: the write blocks

    line = b'{"jsonrpc":"2.0","method":"ask","id":' + request_id + b"}\n"
    with anyio.fail_after(10):
        async with wired(
            request_handler=handler, max_incoming=4, flood_grace=0.05, peer_reads=False
        ) as (conn, peer, record):
            for _ in range(4):
                await peer.write_raw(line)
            await anyio.wait_all_tasks_blocked()
            assert not conn.closed and record.closes == []
            await peer.write_raw(line + b'{"jsonrpc":"2.0","method":"ask","id":8}\n')
            while not conn.closed:  # the grace runs out: no answer can be written meanwhile
                await anyio.sleep(0.01)
            assert [str(c) for c in record.closes] == [
                "request flood: peer keeps sending requests while 4 are not answered for 0.05s"
            ]
            assert str(record.protocol_errors[-1]).startswith("request flood")
            assert handled == ([7] * 4 if request_id == b"7" else [])  # none after the abort
            with pytest.raises(TransportClosed, match="request flood"):
                await conn.request("x")


@pytest.mark.parametrize("request_id", [b"7", b"true"], ids=["served", "refused"])
async def test_a_burst_of_requests_past_the_cap_is_served_as_the_answers_go_out(
    request_id: bytes,
) -> None:
    """An agent that sends many requests at once and reads its answers is no flood: the
    reader waits for a slot (the cap bounds the tasks, not the burst), then takes the rest;
    slots come back as answers are written, round after round."""

    async def handler(request_id: Any, method: str, params: Any) -> Any:
        return "answered"

    line = b'{"jsonrpc":"2.0","method":"ask","id":' + request_id + b"}\n"
    with anyio.fail_after(10):
        async with wired(request_handler=handler, max_incoming=4, flood_grace=5.0) as (
            conn,
            peer,
            record,
        ):
            for _round in range(3):
                await peer.write_raw(line * 9)  # one write, one read: more than the cap
                replies = [await peer.read() for _ in range(9)]
                assert len(replies) == 9 and not conn.closed
            assert record.closes == [] and conn._incoming == 0


async def test_a_reader_waiting_for_a_slot_drains_once_the_connection_shuts_down() -> None:
    """``shutdown`` keeps the reader draining what the peer still writes (so a peer flushing
    on its way out never blocks): a reader waiting for a free slot goes on at once, it does
    not wait out the flood grace."""

    async def handler(request_id: Any, method: str, params: Any) -> Any:
        await anyio.sleep_forever()

    with anyio.fail_after(1):  # the grace is 5 s
        async with wired(request_handler=handler, max_incoming=1) as (conn, peer, record):
            sent = peer.outbox.stream  # type: ignore[attr-defined]
            await peer.write({"jsonrpc": "2.0", "id": 1, "method": "ask"})
            await peer.write({"jsonrpc": "2.0", "id": 2, "method": "ask"})  # waits for a slot
            await peer.write({"jsonrpc": "2.0", "method": "note"})
            await anyio.wait_all_tasks_blocked()
            assert sent.statistics().current_buffer_used == 1  # the reader waits
            conn.shutdown()
            while sent.statistics().current_buffer_used:
                await anyio.sleep(0.01)
            assert record.notifications == [] and "request flood" not in str(record.closes)


def test_the_flood_bounds_are_checked() -> None:
    for bad in ({"max_incoming": 0}, {"flood_grace": -1.0}, {"flood_grace": math.nan}):
        with pytest.raises(ValueError, match="max_incoming must be at least 1"):
            JsonRpcConnection(PipeReader(None), PipeWriter(None), **bad)  # type: ignore[arg-type]


async def test_response_without_result_or_error_fails_that_request() -> None:
    async with wired() as (conn, peer, record):
        async with anyio.create_task_group() as tg:

            async def answer() -> None:
                request = await peer.read()
                await peer.write({"jsonrpc": "2.0", "id": request["id"]})

            tg.start_soon(answer)
            with pytest.raises(RemoteProtocolError, match="neither result nor error"):
                await conn.request("x")
        assert len(record.protocol_errors) == 1


async def test_eof_fails_pending_requests_with_peer_disconnected() -> None:
    async def peer_info() -> tuple[str, str]:
        return "agent process exited with code 3", "fatal: boom"

    async with wired(peer_info=peer_info) as (conn, peer, record):
        failures: list[TransportClosed] = []

        async def call() -> None:
            with pytest.raises(TransportClosed) as caught:
                await conn.request("session/prompt", {})
            failures.append(caught.value)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            tg.start_soon(call)
            await peer.read()
            await peer.read()
            await peer.write({"jsonrpc": "2.0", "method": "last words"})
            await peer.write_raw(b'{"jsonrpc":"2.0","method":"unterminated"}')
            await peer.outbox.aclose()  # EOF
        assert len(failures) == 2
        for failure in failures:
            assert "peer disconnected" in str(failure)
            assert str(failure) == (
                "peer disconnected before response: agent process exited with code 3"
            )
            assert failure.stderr_tail == "fatal: boom"
        assert [m for m, _ in record.notifications] == ["last words", "unterminated"]
        assert len(record.closes) == 1 and record.closes[0] is not None
        assert "peer disconnected" in str(record.closes[0])
        assert conn.closed and not conn.closed_locally
        with pytest.raises(TransportClosed, match="peer disconnected"):
            await conn.request("again")
        with pytest.raises(TransportClosed, match="peer disconnected"):
            await conn.notify("again")
        with pytest.raises(TransportClosed, match="peer disconnected"):
            conn.ensure_open()


async def test_broken_pipe_on_write_is_transport_death() -> None:
    async with wired() as (conn, peer, record):
        async with anyio.create_task_group() as tg:
            failures: list[TransportClosed] = []

            async def pending_call() -> None:
                with pytest.raises(TransportClosed) as caught:
                    await conn.request("first")
                failures.append(caught.value)

            tg.start_soon(pending_call)
            await peer.read()
            await peer.inbox.aclose()  # the peer stops reading: our next write breaks
            with pytest.raises(TransportClosed, match="peer disconnected: write to peer failed"):
                await conn.request("second")
        assert len(failures) == 1 and "peer disconnected" in str(failures[0])
        assert len(record.closes) == 1 and conn.closed


async def test_cancelled_wait_abandons_the_request_and_tells_the_peer() -> None:
    async with wired() as (conn, peer, record):
        scope = anyio.CancelScope()

        async def ask() -> None:
            with scope:
                await conn.request("session/prompt", {"x": 1})

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            request = await peer.read()  # written: the caller now gives up waiting
            scope.cancel()
        assert scope.cancelled_caught
        cancel = await peer.read()
        assert cancel == {
            "jsonrpc": "2.0",
            "method": "$/cancel_request",
            "params": {"requestId": request["id"]},
        }
        await peer.respond(request, {"stopReason": "cancelled"})  # late answer: dropped quietly
        async with anyio.create_task_group() as tg:

            async def answer() -> None:
                req = await peer.read()
                await peer.respond(req, 1)

            tg.start_soon(answer)
            assert json.loads(bytes(await conn.request("next"))) == 1
        assert record.protocol_errors == []


async def test_explicit_abandon_wakes_the_waiter() -> None:
    async with wired() as (conn, peer, _):
        pending = await conn.send_request("session/prompt", {})
        assert not pending.done
        await peer.read()
        pending.abandon()
        with pytest.raises(TransportClosed, match="abandoned"):
            await pending.wait()
        assert (await peer.read())["method"] == "$/cancel_request"


async def test_on_response_runs_before_later_messages_are_read() -> None:
    async with wired() as (conn, peer, record):
        marks: list[str] = []

        def on_response(result: msgspec.Raw | None, error: Exception | None) -> None:
            done = "done" if pending_box and pending_box[0].done else "not done"
            marks.append(
                f"{bytes(result or b'')!r} {error!r} after {len(record.notifications)}"
                f" notifications, {done}"
            )

        pending_box: list[PendingRequest] = []
        pending = await conn.send_request("session/load", {}, on_response=on_response)
        pending_box.append(pending)
        request = await peer.read()
        await peer.write({"jsonrpc": "2.0", "method": "replay"})
        await peer.respond(request, {})
        await peer.write({"jsonrpc": "2.0", "method": "live"})
        assert bytes(await pending.wait()) == b"{}"
        # told before its waiters can see it done
        assert marks == ["b'{}' None after 1 notifications, not done"]


async def test_on_response_is_told_every_end_of_a_written_request_once() -> None:
    """An error answer, an abandonment, the connection's death: each request's
    ``on_response`` hears of its end exactly once, and of a death only after ``on_close``
    (which says why the requests fail)."""
    async with wired() as (conn, peer, record):
        ends: list[tuple[str, str]] = []

        def told(name: str) -> Any:
            def on_response(result: msgspec.Raw | None, error: Exception | None) -> None:
                ends.append(
                    (name, f"{type(error).__name__}: {error} (closes {len(record.closes)})")
                )

            return on_response

        refused = await conn.send_request("a", {}, on_response=told("refused"))
        abandoned = await conn.send_request("b", {}, on_response=told("abandoned"))
        dying = await conn.send_request("c", {}, on_response=told("dying"))
        first = await peer.read()
        await peer.write(
            {"jsonrpc": "2.0", "id": first["id"], "error": {"code": -32000, "message": "no"}}
        )
        with pytest.raises(AgentRequestError):
            await refused.wait()
        abandoned.abandon()
        abandoned.abandon()  # once is enough
        await peer.outbox.aclose()  # EOF: the peer is gone
        with pytest.raises(TransportClosed):
            await dying.wait()
        assert ends == [
            ("refused", 'AgentRequestError: {"code":-32000,"message":"no"} (closes 0)'),
            ("abandoned", "TransportClosed: request b abandoned (closes 0)"),
            ("dying", "TransportClosed: peer disconnected before response (closes 1)"),
        ]


async def test_local_close_fails_pending_with_connection_closed() -> None:
    async with wired() as (conn, peer, record):
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                with pytest.raises(TransportClosed, match=r"^connection closed$"):
                    await conn.request("x")

            tg.start_soon(call)
            await peer.read()
            await conn.aclose()
        assert record.closes == [None]
        assert conn.closed_locally
        await conn.aclose()  # idempotent
        assert record.closes == [None]


async def test_abort_is_transport_death_with_the_given_reason() -> None:
    async with wired() as (conn, _peer, record):
        conn.abort("notification queue overflow")
        assert len(record.closes) == 1
        assert str(record.closes[0]) == "notification queue overflow"
        with pytest.raises(TransportClosed, match="notification queue overflow"):
            await conn.request("x")


async def test_a_message_nested_too_deep_is_malformed_and_survived() -> None:
    """A hostile peer's params nested thousands deep make the JSON decoder recurse too far:
    reported as a malformed message, the connection goes on."""
    depth = sys.getrecursionlimit() + 1000
    deep = b"[" * depth + b"]" * depth
    async with wired(max_line_bytes=4 * depth + 1024) as (conn, peer, record):
        await peer.write_raw(
            b'{"jsonrpc":"2.0","method":"session/update","params":' + deep + b"}\n"
        )
        async with anyio.create_task_group() as tg:

            async def answer() -> None:
                request = await peer.read()
                await peer.respond(request, "still alive")

            tg.start_soon(answer)
            assert json.loads(bytes(await conn.request("ping"))) == "still alive"
        messages = [str(e) for e in record.protocol_errors]
        assert len(messages) == 1 and "malformed JSON-RPC message" in messages[0], messages


async def test_a_line_goes_to_the_stream_before_any_other_ready_task_runs() -> None:
    """A free send lock is taken without a scheduler pass: a request reaches the byte stream
    at once (a prompt's round trip does not wait a pass before its write)."""
    order: list[str] = []

    class Recording(anyio.abc.ByteSendStream):
        async def send(self, item: bytes) -> None:
            order.append("written")

        async def aclose(self) -> None:
            pass

    async def other() -> None:
        order.append("another task")

    writer, reader = pipe()
    async with writer, reader, anyio.create_task_group() as tg:
        conn = JsonRpcConnection(reader, Recording())
        tg.start_soon(other)
        await conn.notify("session/cancel", {})
        await conn.send_request("session/prompt", {})
    assert order == ["written", "written", "another task"]


@pytest.mark.parametrize("owner", ["abandons in on_close", "on_response raises"])
async def test_every_request_ends_once_whatever_the_owner_does_at_the_close(owner: str) -> None:
    """At the connection's death, an ``on_close`` that abandons a request (the request then
    ends once, abandoned) or an ``on_response`` that raises (the error propagates, and every
    other request still ends: told, and its waiters woken)."""
    told: list[str] = []
    pending: list[PendingRequest] = []

    def on_close(error: TransportClosed | None) -> None:
        if owner == "abandons in on_close":
            pending[0].abandon()

    def on_response(result: msgspec.Raw | None, error: Exception | None) -> None:
        told.append(str(error))
        if owner == "on_response raises" and len(told) == 1:
            raise RuntimeError("owner bug")

    async def dies() -> None:
        async with wired(on_close=on_close) as (conn, peer, _):
            for method in ("a", "b"):
                pending.append(await conn.send_request(method, on_response=on_response))
            await peer.outbox.aclose()  # EOF: the peer is gone
            for request in pending:
                with pytest.raises(TransportClosed):
                    await request.wait()

    with anyio.fail_after(5):
        if owner == "on_response raises":
            with pytest.raises(BaseExceptionGroup) as caught:
                await dies()
            assert caught.group_contains(RuntimeError, match="owner bug", depth=None)
            assert told == ["peer disconnected before response"] * 2
        else:
            await dies()
            assert told == ["request a abandoned", "peer disconnected before response"]
    assert all(request.done for request in pending)


async def test_an_answer_with_neither_result_nor_error_ends_its_request_whatever_the_report_does() -> (
    None
):
    """The owner's ``on_protocol_error`` raising on such an answer (its error ends the
    connection) does not keep the request from ending: it is told and its waiter wakes."""
    told: list[str] = []

    def report(error: RemoteProtocolError) -> None:
        raise RuntimeError("owner bug")

    request: list[PendingRequest] = []

    async def answered_badly() -> None:
        async with wired(on_protocol_error=report) as (conn, peer, _):
            request.append(
                await conn.send_request("a", on_response=lambda r, e: told.append(str(e)))
            )
            await peer.write_raw(b'{"jsonrpc":"2.0","id":1}\n')
            await request[0].wait()

    with anyio.fail_after(5), pytest.raises(BaseExceptionGroup) as caught:
        await answered_badly()
    assert caught.group_contains(RuntimeError, match="owner bug", depth=None)
    assert told == ["response to a from peer has neither result nor error"]
    assert request[0].done
