"""Which turns an agentctl carrier still owes an end: when the socket drops around a prompt,
and when agentctl gives a turn up on a cancel.

A prompt whose socket dropped *after* its request was written may have reached agentctl
(``StreamNotConnected(while_waiting=True)``: delivery is ambiguous, kandev H2): its turn
stays owed, so the agent's content for it after a redial is stamped with its generation and,
should the carrier be given up, the turn gets its ``ErrorEvent`` like every owed turn (the
runtime waits for that end). A prompt that found no socket was never written: it owes
nothing.

The real agentctl acknowledges ``agent.prompt`` at once, so the window between the write and
the ack cannot be hit on purpose against it: a small in-process agentctl plays the agent
stream here (kandev's ``handleAgentStreamWS`` envelopes, over httpx-ws's ASGI transport),
answering every request but ``agent.prompt``, whose ack it withholds.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from httpx_ws.transport import ASGIWebSocketTransport

from acpfsm.adapters.agentctl import AgentctlConfig, InstanceClient, open_agentctl_transport
from acpfsm.adapters.agentctl.transport import AgentctlTransport
from acpfsm.adapters.errors import StreamNotConnected
from acpfsm.adapters.events import AgentEvent, ErrorEvent, MessageChunk, StreamReconnected

pytestmark = pytest.mark.both_backends

CONFIG = AgentctlConfig(keepalive_interval=None, keepalive_timeout=None, exit_grace=0.05)


class FakeAgentStream:
    """agentctl's agent stream, in process: answers ``agent.session.new``, answers
    ``agent.cancel`` ``not_acknowledged``, acknowledges ``agent.prompt`` only with
    ``ack_prompts``, records every request; :meth:`send` writes a frame on the current
    socket."""

    def __init__(self, *, ack_prompts: bool = False) -> None:
        self.ack_prompts = ack_prompts
        self.requests: list[dict[str, Any]] = []
        self.connections = 0
        self._send: Any = None
        self.connected = anyio.Event()

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "websocket"
        assert scope["path"] == "/api/v1/agent/stream"
        message = await receive()
        assert message["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        self.connections += 1
        self._send = send
        self.connected.set()
        while True:
            message = await receive()
            if message["type"] != "websocket.receive":
                return
            request = json.loads(message["text"])
            self.requests.append(request)
            if request["action"] == "agent.session.new":
                await self.reply(request, {"session_id": "fake-session"})
            elif request["action"] == "agent.prompt" and self.ack_prompts:
                await self.reply(request, {"success": True})
            elif request["action"] == "agent.cancel":  # the agent ignored it for 3 s
                answer = {"success": False, "not_acknowledged": True, "error": "not acknowledged"}
                await self.reply(request, answer)

    async def reply(self, request: dict[str, Any], payload: Any) -> None:
        frame = {"id": request["id"], "type": "response", "action": request["action"]}
        await self._send(
            {"type": "websocket.send", "text": json.dumps(frame | {"payload": payload})}
        )

    async def send(self, frame: dict[str, Any]) -> None:
        await self._send({"type": "websocket.send", "text": json.dumps(frame)})

    def asked(self, action: str) -> bool:
        return any(r["action"] == action for r in self.requests)


@contextlib.asynccontextmanager
async def carrier(fake: FakeAgentStream) -> AsyncIterator[tuple[AgentctlTransport, list[Any]]]:
    """An AgentctlTransport on ``fake`` with a session, no redial of its own (the test
    decides, as the runtime's AgentStream chart would), its events collected."""
    events: list[AgentEvent] = []
    # the client enters (and leaves) its transport: the ASGI app's task group
    async with httpx.AsyncClient(transport=ASGIWebSocketTransport(fake.app)) as client:
        instance = InstanceClient(
            "http://agentctl.test", client, token="t", instance_id="i-1", config=CONFIG
        )
        async with (
            open_agentctl_transport(instance, config=CONFIG, auto_redial=False) as transport,
            anyio.create_task_group() as tg,
        ):

            async def collect() -> None:
                async for event in transport.events():
                    events.append(event)

            tg.start_soon(collect)
            await transport.new_session("/workspace")
            yield transport, events
            tg.cancel_scope.cancel()


async def until(predicate: Any, limit: float = 10.0) -> None:
    with anyio.fail_after(limit):
        while not predicate():
            await anyio.sleep(0.005)


async def prompt_dropped_after_the_write(
    transport: AgentctlTransport, fake: FakeAgentStream
) -> None:
    """``agent.prompt`` for generation 1 is written, then the socket drops before the ack."""
    async with anyio.create_task_group() as tg:
        errors: list[StreamNotConnected] = []

        async def prompt() -> None:
            try:
                await transport.prompt("hello", [], 1)
            except StreamNotConnected as exc:
                errors.append(exc)

        tg.start_soon(prompt)
        await until(lambda: fake.asked("agent.prompt"))
        await transport.drop_stream()
    assert len(errors) == 1 and errors[0].while_waiting  # the agent may have it


async def test_a_prompt_dropped_after_its_write_stays_owed_through_a_redial() -> None:
    """After the redial agentctl delivers the turn it had: its content, which carries no
    generation, is the owed turn's (generation 1), not a turn of the agent's own (0)."""
    fake = FakeAgentStream()
    async with carrier(fake) as (transport, events):
        await prompt_dropped_after_the_write(transport, fake)
        await transport.redial()
        await until(lambda: any(isinstance(e, StreamReconnected) for e in events))
        await fake.send({"type": "message_chunk", "text": "the answer"})
        await until(lambda: any(isinstance(e, MessageChunk) for e in events))
        (chunk,) = [e for e in events if isinstance(e, MessageChunk)]
        assert (chunk.text, chunk.prompt_generation) == ("the answer", 1)


async def test_a_prompt_dropped_after_its_write_ends_when_the_carrier_is_given_up() -> None:
    """The carrier is given up (no redial): the owed turn gets its ErrorEvent, so whoever
    waits for its end is told."""
    fake = FakeAgentStream()
    async with carrier(fake) as (transport, events):
        await prompt_dropped_after_the_write(transport, fake)
        transport.give_up("redial refused")
        await until(lambda: any(isinstance(e, ErrorEvent) for e in events))
        (end,) = [e for e in events if isinstance(e, ErrorEvent)]
        assert end.prompt_generation == 1
        assert "agent stream lost and not redialled" in end.error


async def test_a_prompt_that_found_no_socket_owes_nothing() -> None:
    """The socket was already gone: nothing was written, the agent cannot have the prompt,
    and the turn owes no end (a give-up ends no turn)."""
    fake = FakeAgentStream()
    async with carrier(fake) as (transport, events):
        await transport.drop_stream()
        with pytest.raises(StreamNotConnected) as refused:
            await transport.prompt("hello", [], 1)
        assert not refused.value.while_waiting
        assert not fake.asked("agent.prompt")
        transport.give_up("redial refused")
        await anyio.sleep(0.05)
        assert not any(isinstance(e, ErrorEvent) for e in events)


async def test_a_turn_whose_cancel_was_not_acknowledged_owes_nothing() -> None:
    """agentctl gave the turn up (``not_acknowledged``: it suppresses the turn's late end):
    the carrier no longer waits for it: what the agent says next is its own (generation 0),
    and a give-up ends no turn."""
    fake = FakeAgentStream(ack_prompts=True)
    async with carrier(fake) as (transport, events):
        await transport.prompt("hello", [], 1)
        assert not (await transport.cancel()).acknowledged
        await fake.send({"type": "message_chunk", "text": "on my own"})
        await until(lambda: any(isinstance(e, MessageChunk) for e in events))
        (chunk,) = [e for e in events if isinstance(e, MessageChunk)]
        assert chunk.prompt_generation == 0
        transport.give_up("redial refused")
        await anyio.sleep(0.05)
        assert not any(isinstance(e, ErrorEvent) for e in events)
