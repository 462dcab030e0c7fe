"""Every kind of message acpfsm's ACP client sends, against the official ACP schema.

A recording agent (the fake agent with ``--record``) writes down every line it reads and
writes while the real :class:`StdioTransport` drives it through initialize, authenticate,
session/new and session/load with MCP servers of each transport, prompts with every content
block kind (text, image, audio, an embedded text and binary resource, a resource link for a
path delivery and for a saved attachment), the permission answers (an option selected, and
cancelled), fs answers (a read, a write, a refused path), every terminal answer, set_mode,
set_config_option and cancel. Each line acpfsm wrote is then validated as a client → agent
message of ACP v1, a response by the method of the agent's request it answers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from acpfsm.adapters.acp import messages as acp
from acpfsm.adapters.acp.process import ShutdownPolicy
from acpfsm.adapters.acp.stdio import StdioConfig, StdioTransport, open_stdio_transport
from acpfsm.adapters.events import AgentEvent, Complete, ErrorEvent, PermissionRequest
from acpfsm.adapters.mcp_servers import McpServerHttp, McpServerSse, McpServerStdio
from acpfsm.adapters.transport import Attachment, allow_once_permission_policy
from acpfsm.tools.conform.schema import Direction, MessageSchema

AGENT = Path(__file__).parent / "fake_agents" / "fake_acp_agent.py"
FAST = ShutdownPolicy(stdin_close_wait=1.0, term_wait=0.5, kill_wait=3.0, stderr_drain_wait=0.5)
#: Legacy methods outside the schema (acpfsm sends them only to agents that advertise them).
LEGACY = {"session/set_model"}
PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489")


async def _policy(request: PermissionRequest) -> str | None:
    """Allow the first request; leave the next unanswered until the turn is cancelled
    (acpfsm then answers it ``cancelled``)."""
    if request.prompt_generation == 7:
        await anyio.sleep_forever()
    return await allow_once_permission_policy(request)


async def _terminal(method: str, params: Any) -> Any:
    if method == "terminal/create":
        return acp.CreateTerminalResponse(terminal_id="term-1")
    if method == "terminal/output":
        status = acp.TerminalExitStatus(exit_code=0)
        return acp.TerminalOutputResponse(output="ok\n", truncated=False, exit_status=status)
    if method == "terminal/wait_for_exit":
        return acp.WaitForTerminalExitResponse(exit_code=0)
    return acp.EmptyResponse()


async def _turn(
    transport: StdioTransport, text: str, attachments: list[Attachment], gen: int
) -> None:
    await transport.prompt(text, attachments, gen)
    with anyio.fail_after(10):
        async for event in transport.events():
            if isinstance(event, Complete | ErrorEvent) and _generation(event) == gen:
                return


def _generation(event: AgentEvent) -> int:
    return event.prompt_generation


async def _drive(tmp_path: Path, record: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("some notes\n")
    linked = workspace / "linked.bin"
    linked.write_bytes(b"\x00\x01")
    argv = [sys.executable, str(AGENT), "--audio", "--record", str(record)]
    servers = [
        McpServerStdio(name="tools", command="/usr/bin/env", args=("true",), env={"K": "v"}),
        McpServerHttp(name="web", url="http://127.0.0.1:9/mcp", headers={"X-Key": "k"}),
        McpServerSse(name="events", url="http://127.0.0.1:9/sse", headers={}),
    ]
    async with open_stdio_transport(
        argv,
        cwd=workspace,
        shutdown=FAST,
        permission_policy=_policy,
        terminal_handler=_terminal,
        config=StdioConfig(cancel_timeout=3.0, exit_grace=0.5),
    ) as transport:
        await transport.initialize()
        await transport.authenticate("fake-login")
        session = await transport.new_session(str(workspace), servers)
        await transport.set_mode("plan")
        await transport.set_config_option("model", "fake-large")
        attachments = [
            Attachment(name="pixel.png", mime_type="image/png", data=PNG),
            Attachment(name="sound.wav", mime_type="audio/wav", data=b"RIFF0000WAVE"),
            Attachment(name="notes.txt", path=str(workspace / "notes.txt")),
            Attachment(name="blob.bin", mime_type="application/octet-stream", data=b"\x00\xff"),
            Attachment(name="linked.bin", path=str(linked), delivery_mode="path"),
        ]
        await _turn(transport, "blocks of every kind", attachments, 1)
        await _turn(transport, "permission", [], 2)
        await _turn(transport, f"read {workspace / 'notes.txt'}", [], 3)
        await _turn(transport, f"write {workspace / 'out.txt'} written", [], 4)
        await _turn(transport, "read /etc/passwd", [], 5)
        await _turn(transport, "terminal all", [], 6)
        await transport.prompt("permission-hang", [], 7)
        with anyio.fail_after(10):
            async for event in transport.events():
                if isinstance(event, PermissionRequest):
                    break
        await transport.cancel()
        await transport.load_session(session.session_id, str(workspace), servers)


def _methods_of_requests(lines: list[dict[str, str]]) -> dict[str, str]:
    """The agent's requests, by the JSON text of their id: method."""
    out: dict[str, str] = {}
    for entry in lines:
        if "out" in entry:
            message = json.loads(entry["out"])
            if "method" in message and "id" in message:
                out[json.dumps(message["id"])] = message["method"]
    return out


@pytest.mark.integration
async def test_every_message_acpfsm_sends_is_valid_acp_v1(tmp_path: Path) -> None:
    record = tmp_path / "record.jsonl"
    await _drive(tmp_path, record)
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    requests = _methods_of_requests(lines)
    sent = [json.loads(entry["in"]) for entry in lines if "in" in entry and entry["in"].strip()]
    schema = MessageSchema.bundled(1)
    kinds: set[str] = set()
    for message in sent:
        method = message.get("method")
        if method in LEGACY:
            continue
        answered = None if method else requests.get(json.dumps(message.get("id")))
        kinds.add(method or f"answer to {answered}" + (" (error)" if "error" in message else ""))
        violations = schema.check(Direction.CLIENT_TO_AGENT, message, answered)
        assert violations == [], (
            f"{json.dumps(message)[:300]}: {[v.describe() for v in violations]}"
        )
    # every kind was there to be checked
    assert {
        "initialize",
        "authenticate",
        "session/new",
        "session/load",
        "session/prompt",
        "session/cancel",
        "session/set_mode",
        "session/set_config_option",
        "answer to session/request_permission",
        "answer to fs/read_text_file",
        "answer to fs/read_text_file (error)",
        "answer to fs/write_text_file",
        "answer to terminal/create",
        "answer to terminal/output",
        "answer to terminal/wait_for_exit",
        "answer to terminal/kill",
        "answer to terminal/release",
    } <= kinds, sorted(kinds)
    blocks = {
        block["type"]
        for message in sent
        if message.get("method") == "session/prompt"
        for block in message["params"]["prompt"]
    }
    assert blocks == {"text", "image", "audio", "resource", "resource_link"}
    resources = [
        block["resource"]
        for message in sent
        if message.get("method") == "session/prompt"
        for block in message["params"]["prompt"]
        if block["type"] == "resource"
    ]
    assert {"text", "blob"} <= {key for r in resources for key in r}
    servers = next(m for m in sent if m.get("method") == "session/new")["params"]["mcpServers"]
    assert sorted(s.get("type", "stdio") for s in servers) == ["http", "sse", "stdio"]
    outcomes = {
        json.dumps(m["result"]["outcome"]["outcome"])
        for m in sent
        if "result" in m and requests.get(json.dumps(m["id"])) == "session/request_permission"
    }
    assert outcomes == {'"selected"', '"cancelled"'}
