"""An in-process ACP agent over memory byte streams: the bench's agent without a process.

:func:`memory_agent` yields the two byte streams a :class:`~acpfsm.adapters.acp.stdio.StdioTransport`
reads and writes (``connect_stdio_transport(receive, send, ...)``), served by a task that
answers ``initialize``, ``session/new`` (with a model catalog, so no catalog wait follows),
``session/set_*`` and ``session/prompt``. A prompt is answered with ``chunks``
``agent_message_chunk`` notifications, written at once as one pre-encoded block, then
``{"stopReason": "end_turn"}``: the agent's own cost per notification is a slice of a bytes
object, so what the process spends is the client's (the transport decoding and mapping each
line, and whatever runs above it).

:class:`MemoryAgentExecutor` hands out one such agent per launch, so a
:class:`~acpfsm.runtime.Runtime` runs the real stdio transport with no pipe and no process.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import anyio.abc
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from acpfsm.adapters.acp.stdio import connect_stdio_transport
from acpfsm.adapters.executor import AgentLaunch
from acpfsm.adapters.transport import AgentTransport

__all__ = ["SESSION_ID", "MemoryAgentExecutor", "memory_agent", "notification_block"]

SESSION_ID = "bench-session"
_WORDS = "one two three four five six seven eight nine ten "
_encoder = msgspec.json.Encoder()
_blocks: dict[tuple[int, str], bytes] = {}


class _Reader(anyio.abc.ByteReceiveStream):
    """The receiving end of a one-way memory pipe of bytes."""

    def __init__(self, stream: MemoryObjectReceiveStream[bytes]) -> None:
        self._stream = stream

    async def receive(self, max_bytes: int = 65536) -> bytes:
        return await self._stream.receive()  # EndOfStream once the writer closed

    async def aclose(self) -> None:
        self._stream.close()


class _Writer(anyio.abc.ByteSendStream):
    """The sending end of a one-way memory pipe of bytes (never blocks)."""

    def __init__(self, stream: MemoryObjectSendStream[bytes]) -> None:
        self._stream = stream

    async def send(self, item: bytes) -> None:
        try:
            self._stream.send_nowait(bytes(item))
        except anyio.ClosedResourceError as exc:
            raise anyio.BrokenResourceError from exc

    async def aclose(self) -> None:
        self._stream.close()


def notification_block(chunks: int, session_id: str = SESSION_ID) -> bytes:
    """``chunks`` ``agent_message_chunk`` notifications, one JSON-RPC line each (cached)."""
    key = (chunks, session_id)
    block = _blocks.get(key)
    if block is None:
        lines = [
            _encoder.encode(
                {
                    "jsonrpc": "2.0",
                    "method": "session/update",
                    "params": {
                        "sessionId": session_id,
                        "update": {
                            "sessionUpdate": "agent_message_chunk",
                            "content": {"type": "text", "text": _WORDS[i % 10 * 4 :][:24]},
                        },
                    },
                }
            )
            for i in range(chunks)
        ]
        block = _blocks[key] = b"\n".join(lines) + b"\n" if lines else b""
    return block


_MODELS = {
    "currentModelId": "fast",
    "availableModels": [{"modelId": "fast", "name": "Fast"}, {"modelId": "smart", "name": "Smart"}],
}
_INITIALIZE = {
    "protocolVersion": 1,
    "agentCapabilities": {"loadSession": False},
    "agentInfo": {"name": "bench-memory-agent", "version": "1"},
    "authMethods": [],
}


def _answer(request_id: Any, result: Any) -> bytes:
    return _encoder.encode({"jsonrpc": "2.0", "id": request_id, "result": result}) + b"\n"


async def _serve(
    requests: MemoryObjectReceiveStream[bytes], out: MemoryObjectSendStream[bytes], chunks: int
) -> None:
    buffer = bytearray()
    decode = msgspec.json.decode
    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
        async for data in requests:
            buffer += data
            while (newline := buffer.find(b"\n")) >= 0:
                message = decode(bytes(buffer[:newline]))
                del buffer[: newline + 1]
                request_id = message.get("id")
                if request_id is None:
                    continue  # a notification (session/cancel): nothing to answer
                method = message.get("method")
                result: Any = {}
                if method == "initialize":
                    result = _INITIALIZE
                elif method == "session/new":
                    result = {"sessionId": SESSION_ID, "models": _MODELS}
                elif method == "session/prompt":
                    out.send_nowait(notification_block(chunks))
                    result = {"stopReason": "end_turn"}
                out.send_nowait(_answer(request_id, result))


@contextlib.asynccontextmanager
async def memory_agent(
    chunks: int = 2,
) -> AsyncIterator[tuple[anyio.abc.ByteReceiveStream, anyio.abc.ByteSendStream]]:
    """``(agent stdout, agent stdin)`` of an in-process agent streaming ``chunks`` message
    chunks per prompt; the agent ends with the block (its stdout then reaches EOF)."""
    to_agent, agent_in = anyio.create_memory_object_stream[bytes](math.inf)
    agent_out, from_agent = anyio.create_memory_object_stream[bytes](math.inf)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_serve, agent_in, agent_out, chunks)
        try:
            yield _Reader(from_agent), _Writer(to_agent)
        finally:
            tg.cancel_scope.cancel()
            for stream in (to_agent, agent_in, agent_out, from_agent):
                stream.close()


class MemoryAgentExecutor:
    """An executor whose every launch talks stdio ACP to an in-process agent (see
    :func:`memory_agent`) through the real :class:`StdioTransport`."""

    def __init__(self, chunks: int = 2) -> None:
        self.chunks = chunks

    def open(self, launch: AgentLaunch) -> AbstractAsyncContextManager[AgentTransport]:
        @contextlib.asynccontextmanager
        async def cm() -> AsyncIterator[AgentTransport]:
            async with (
                memory_agent(self.chunks) as (receive, send),
                connect_stdio_transport(
                    receive,
                    send,
                    workspace=launch.workspace,
                    permission_policy=launch.permission_policy,
                ) as transport,
            ):
                yield transport

        return cm()
