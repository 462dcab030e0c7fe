"""agentctl's agent stream, played in process (kandev internal/agentctl/server/api/agent.go
``handleAgentStreamWS`` envelopes, served over httpx-ws's ASGI transport), for the windows
the real binary does not let a test hit on purpose: an ``agent.prompt`` whose ack never
comes, a frame the real agentctl would not send."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
from httpx_ws.transport import ASGIWebSocketTransport

from acpfsm.adapters.agentctl import AgentctlConfig, InstanceClient, open_agentctl_transport
from acpfsm.adapters.agentctl.transport import AgentctlTransport
from acpfsm.adapters.events import AgentEvent

__all__ = ["CONFIG", "FakeAgentStream", "carrier"]

CONFIG = AgentctlConfig(keepalive_interval=None, keepalive_timeout=None, exit_grace=0.05)


class FakeAgentStream:
    """agentctl's agent stream, in process: answers ``agent.session.new``, answers
    ``agent.cancel`` ``not_acknowledged`` (``success`` with ``ack_cancels``), acknowledges ``agent.prompt`` only with
    ``ack_prompts``, records every request; :meth:`send` writes a frame on the current
    socket."""

    def __init__(self, *, ack_prompts: bool = False, ack_cancels: bool = False) -> None:
        self.ack_prompts = ack_prompts
        self.ack_cancels = ack_cancels
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
            elif (request["action"], True) in {
                ("agent.prompt", self.ack_prompts),
                ("agent.cancel", self.ack_cancels),
            }:
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
