"""MCP server configurations at the adapter level: ACP's three shapes, decoded from JSON,
filtered by the agent's ``mcpCapabilities``, their credentials listed for redaction, and
written on the wire as ACP (stdio transport) and as agentctl's JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from acpfsm.adapters.acp.stdio import connect_stdio_transport
from acpfsm.adapters.agentctl.transport import AgentctlTransport
from acpfsm.adapters.mcp_servers import (
    McpServer,
    McpServerHttp,
    McpServerSse,
    McpServerStdio,
    mcp_server_kind,
    mcp_server_secrets,
    split_mcp_servers,
)
from acpfsm.adapters.transport import InitializeResult

from .test_acp_stdio import PipeReader, PipeWriter, scripted_agent

STDIO = McpServerStdio(name="files", command="/usr/bin/mcp-files", args=("--ro",), env={"A": "1"})
HTTP = McpServerHttp(name="tools", url="http://127.0.0.1:9/mcp", headers={"X-Trace": "on"})
SSE = McpServerSse(name="legacy", url="http://127.0.0.1:9/sse")


def caps(*, http: bool | None, sse: bool | None) -> InitializeResult:
    return InitializeResult(protocol_version=1, mcp_http=http, mcp_sse=sse)


def test_the_three_shapes_decode_from_json_by_their_type() -> None:
    raw = [
        {"type": "stdio", "name": "files", "command": "/usr/bin/mcp-files", "args": ["--ro"]},
        {"type": "http", "name": "tools", "url": "http://h/mcp", "headers": {"X": "1"}},
        {"type": "sse", "name": "legacy", "url": "http://h/sse"},
    ]
    servers = msgspec.convert(raw, list[McpServer])
    assert [type(s) for s in servers] == [McpServerStdio, McpServerHttp, McpServerSse]
    assert [mcp_server_kind(s) for s in servers] == ["stdio", "http", "sse"]
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert([{"type": "acp", "name": "x"}], list[McpServer])


def test_servers_the_agent_cannot_take_are_dropped_with_the_reason() -> None:
    servers = [STDIO, HTTP, SSE]
    kept, dropped = split_mcp_servers(servers, caps(http=True, sse=False))
    assert kept == [STDIO, HTTP]
    assert [(s.name, why) for s, why in dropped] == [
        ("legacy", "the agent does not take sse MCP servers (its mcpCapabilities.sse is not true)")
    ]
    kept, dropped = split_mcp_servers(servers, caps(http=False, sse=False))
    assert kept == [STDIO] and [s.name for s, _ in dropped] == ["tools", "legacy"]
    # a carrier that does not report the capabilities filters on its side (agentctl)
    assert split_mcp_servers(servers, caps(http=None, sse=None)) == (servers, [])
    assert split_mcp_servers(servers, None) == (servers, [])


def test_a_second_server_of_one_name_is_dropped() -> None:
    twin = McpServerHttp(name="files", url="http://127.0.0.1:9/other")
    kept, dropped = split_mcp_servers([STDIO, twin], caps(http=True, sse=True))
    assert kept == [STDIO]
    assert dropped == [(twin, "an earlier MCP server is also named 'files'")]


def test_credentials_are_listed_for_redaction() -> None:
    servers: list[McpServer] = [
        McpServerHttp(
            name="a",
            url="http://h",
            headers={"Authorization": "Bearer s3cr3t-token", "Accept": "text/plain"},
        ),
        McpServerSse(name="b", url="http://h", headers={"X-Api-Key": "key-123456"}),
        McpServerStdio(name="c", command="x", env={"GITHUB_TOKEN": "ghp_abcdef", "LANG": "C"}),
    ]
    assert mcp_server_secrets(servers) == [
        "Bearer s3cr3t-token",
        "s3cr3t-token",
        "key-123456",
        "ghp_abcdef",
    ]


def test_agentctl_json_shapes() -> None:
    assert AgentctlTransport._mcp_servers([STDIO, HTTP, SSE]) == [
        {
            "name": "files",
            "command": "/usr/bin/mcp-files",
            "args": ["--ro"],
            "env": {"A": "1"},
            "type": "stdio",
        },
        {
            "name": "tools",
            "url": "http://127.0.0.1:9/mcp",
            "headers": {"X-Trace": "on"},
            "type": "http",
        },
        {"name": "legacy", "url": "http://127.0.0.1:9/sse", "headers": {}, "type": "sse"},
    ]


@pytest.mark.both_backends
async def test_stdio_transport_writes_acp_shapes_and_reads_the_capabilities(
    tmp_path: Path,
) -> None:
    to_agent_send, to_agent_receive = anyio.create_memory_object_stream[bytes](100)
    from_agent_send, from_agent_receive = anyio.create_memory_object_stream[bytes](100)
    seen: dict[str, Any] = {}
    with to_agent_send, to_agent_receive, from_agent_send, from_agent_receive:
        results: dict[str, Any] = {
            "initialize": {
                "protocolVersion": 1,
                "agentCapabilities": {
                    "loadSession": True,
                    "mcpCapabilities": {"http": True, "sse": False},
                },
            },
            "session/new": {"sessionId": "mem-1"},
            "session/load": {},
        }

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(scripted_agent, to_agent_receive, from_agent_send, results, seen)
                async with connect_stdio_transport(
                    PipeReader(from_agent_receive), PipeWriter(to_agent_send), workspace=tmp_path
                ) as t:
                    result = await t.initialize()
                    assert (result.mcp_http, result.mcp_sse) == (True, False)
                    await t.new_session(str(tmp_path), [STDIO, HTTP, SSE])
                    await t.load_session("mem-1", str(tmp_path), [HTTP])
                tg.cancel_scope.cancel()
    assert seen["session/new"]["mcpServers"] == [
        {
            "name": "files",
            "command": "/usr/bin/mcp-files",
            "args": ["--ro"],
            "env": [{"name": "A", "value": "1"}],
        },
        {
            "type": "http",
            "name": "tools",
            "url": "http://127.0.0.1:9/mcp",
            "headers": [{"name": "X-Trace", "value": "on"}],
        },
        {"type": "sse", "name": "legacy", "url": "http://127.0.0.1:9/sse", "headers": []},
    ]
    assert seen["session/load"]["mcpServers"] == [seen["session/new"]["mcpServers"][1]]
