"""Byte streams over memory object streams, for a StdioTransport with no process, and a
hand-driven ACP peer whose prompts the test answers when it chooses."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

__all__ = [
    "QUEUEING_AGENT",
    "HandPeer",
    "HoldingWriter",
    "Messages",
    "PipeReader",
    "PipeWriter",
    "hand_peer",
]

QUEUEING_AGENT: dict[str, Any] = {
    "initialize": {
        "protocolVersion": 1,
        "agentCapabilities": {"_meta": {"claudeCode": {"promptQueueing": True}}},
    },
    "session/new": {"sessionId": "mem-steer"},
}


class PipeWriter(anyio.abc.ByteSendStream):
    def __init__(self, stream: MemoryObjectSendStream[bytes]) -> None:
        self.stream = stream

    async def send(self, item: bytes) -> None:
        await self.stream.send(item)

    async def aclose(self) -> None:
        self.stream.close()


class PipeReader(anyio.abc.ByteReceiveStream):
    def __init__(self, stream: MemoryObjectReceiveStream[bytes]) -> None:
        self.stream = stream

    async def receive(self, max_bytes: int = 65536) -> bytes:
        return await self.stream.receive()

    async def aclose(self) -> None:
        self.stream.close()


class Messages:
    """The JSON-RPC messages written on a pipe, one a line."""

    def __init__(self, stream: MemoryObjectReceiveStream[bytes]) -> None:
        self.stream = stream
        self.buffer = b""

    async def next(self) -> dict[str, Any] | None:
        """The next message, ``None`` once the writer closed."""
        while b"\n" not in self.buffer:
            try:
                self.buffer += await self.stream.receive()
            except anyio.EndOfStream:
                return None
        line, self.buffer = self.buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message


class HoldingWriter(PipeWriter):
    """A stdin that takes no bytes between :meth:`hold` and :meth:`release` (a full pipe):
    ``blocked`` is set once a write waits."""

    def __init__(self, stream: MemoryObjectSendStream[bytes]) -> None:
        super().__init__(stream)
        self._open: anyio.Event | None = None
        self.blocked = anyio.Event()

    def hold(self) -> None:
        self._open = anyio.Event()

    def release(self) -> None:
        if self._open is not None:
            self._open.set()
            self._open = None

    async def send(self, item: bytes) -> None:
        if self._open is not None:
            self.blocked.set()
            await self._open.wait()
        await super().send(item)


class RecordingWriter(HoldingWriter):
    """A :class:`HoldingWriter` that keeps what the client wrote, line by line."""

    def __init__(self, stream: MemoryObjectSendStream[bytes]) -> None:
        super().__init__(stream)
        self.written: list[bytes] = []

    async def send(self, item: bytes) -> None:
        await super().send(item)
        self.written.extend(line for line in bytes(item).splitlines() if line.strip())

    def sent(self, method: str) -> list[dict[str, Any]]:
        """The messages written so far that call ``method``."""
        messages = [json.loads(line) for line in self.written]
        return [m for m in messages if m.get("method") == method]


async def hand_agent(
    requests: MemoryObjectReceiveStream[bytes],
    answers: MemoryObjectSendStream[bytes],
    prompts: MemoryObjectSendStream[int],
    results: dict[str, Any] = QUEUEING_AGENT,
    replies: MemoryObjectSendStream[dict[str, Any]] | None = None,
) -> None:
    """Answer each request with ``results[method]`` (method not found if absent), except
    session/prompt: its id goes to ``prompts`` and the test answers it (:func:`end_turn`).
    The client's answers to the agent's own requests go to ``replies``."""
    messages = Messages(requests)
    while (request := await messages.next()) is not None:
        if "method" not in request:
            if replies is not None:
                await replies.send(request)
            continue
        if "id" not in request:
            continue  # a notification (session/cancel, $/cancel_request)
        if request["method"] == "session/prompt":
            await prompts.send(request["id"])
            continue
        answer: dict[str, Any] = {"jsonrpc": "2.0", "id": request["id"]}
        if request["method"] in results:
            answer["result"] = results[request["method"]]
        else:
            answer["error"] = {"code": -32601, "message": "Method not found"}
        await answers.send(json.dumps(answer).encode() + b"\n")


@dataclass(frozen=True, slots=True)
class HandPeer:
    """The client's ends of the pipes to a :func:`hand_agent`, and the test's hand on it."""

    reader: PipeReader
    writer: HoldingWriter
    prompt_ids: MemoryObjectReceiveStream[int]
    answers: MemoryObjectSendStream[bytes]
    replies: MemoryObjectReceiveStream[dict[str, Any]]

    async def next_prompt(self) -> int:
        """The id of the next session/prompt the agent was sent."""
        return await self.prompt_ids.receive()

    async def end_turn(self, request_id: int) -> None:
        """Answer the session/prompt ``request_id``: ``stopReason: end_turn``."""
        answer = {"jsonrpc": "2.0", "id": request_id, "result": {"stopReason": "end_turn"}}
        await self.answers.send(json.dumps(answer).encode() + b"\n")

    async def request(self, request_id: Any, method: str, params: Any) -> None:
        """Send the client a request of the agent's, its id written as given (any JSON)."""
        request = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        await self.answers.send(json.dumps(request).encode() + b"\n")

    async def next_reply(self) -> dict[str, Any]:
        """The client's next answer to a request of the agent's (or error without id)."""
        return await self.replies.receive()


@contextlib.asynccontextmanager
async def hand_peer(results: dict[str, Any] = QUEUEING_AGENT) -> AsyncIterator[HandPeer]:
    """A :func:`hand_agent` running for the block."""
    to_agent_send, to_agent_receive = anyio.create_memory_object_stream[bytes](100)
    from_agent_send, from_agent_receive = anyio.create_memory_object_stream[bytes](100)
    prompt_ids_send, prompt_ids = anyio.create_memory_object_stream[int](10)
    replies_send, replies = anyio.create_memory_object_stream[dict[str, Any]](math.inf)
    with (
        to_agent_send,
        to_agent_receive,
        from_agent_send,
        from_agent_receive,
        prompt_ids_send,
        prompt_ids,
        replies_send,
        replies,
    ):
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                hand_agent,
                to_agent_receive,
                from_agent_send,
                prompt_ids_send,
                results,
                replies_send,
            )
            yield HandPeer(
                PipeReader(from_agent_receive),
                HoldingWriter(to_agent_send),
                prompt_ids,
                from_agent_send,
                replies,
            )
            tg.cancel_scope.cancel()
