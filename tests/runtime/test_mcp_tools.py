"""App-declared Python tools, served over MCP to the reference agent as a real subprocess over
stdio: the agent calls a tool and its result reaches the reply; ``set_mcp_mode`` switches the
tools it sees mid-session; a failing, hanging, oversized or badly called tool answers the
agent with an MCP tool error and leaves the execution healthy; the server refuses requests
without its bearer secret, which appears in no event, trace or log.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from acpfsm.adapters.acp.process import ShutdownPolicy
from acpfsm.adapters.acp.stdio import StdioConfig
from acpfsm.adapters.events import ToolCall, ToolUpdate
from acpfsm.runtime import (
    AgentReportedError,
    ExecutionIdRequired,
    ExecutionNotFound,
    LaunchSpec,
    McpServerSse,
    McpServerStdio,
    Runtime,
    StdioExecutor,
    Timeouts,
    ToolSet,
    Unsupported,
    WorkspaceRef,
    reference_profile,
    tool,
)
from acpfsm.runtime import events as le
from acpfsm.runtime.session import ExecutionSession
from tests.peers.app_tools import SLOW_MACHINE, add, shout

pytestmark = [pytest.mark.both_backends, pytest.mark.integration]

FAST_SHUTDOWN = ShutdownPolicy(stdin_close_wait=1.0, term_wait=1.0, kill_wait=1.0)


@tool
async def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"exploded: {reason}")


@tool(timeout=0.5)
async def never() -> str:
    """Never returns (bounded by its timeout)."""
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


@tool(max_result_bytes=10_000)
async def huge(size: int) -> str:
    """Returns ``size`` characters."""
    return "x" * size


@tool(
    name="lookup",
    description="Look a key up.",
    input_schema={
        "type": "object",
        "properties": {"key": {"type": "string", "maxLength": 8}},
        "required": ["key"],
        "additionalProperties": False,
    },
)
async def lookup_impl(key: str) -> dict[str, str]:
    return {"key": key, "value": key[::-1]}


TOOL_SETS = [
    ToolSet("task", tools=[add, explode, never, huge, lookup_impl]),
    ToolSet("review", tools=[shout]),
]


def make_runtime(*profile_args: str, trace_path: Path | None = None) -> Runtime:
    return Runtime(
        profiles=[reference_profile(*profile_args, "--delay", "0", *SLOW_MACHINE)],
        executors={
            "stdio": StdioExecutor(config=StdioConfig(cancel_timeout=0.5), shutdown=FAST_SHUTDOWN)
        },
        timeouts=Timeouts(cancel_wait=2.0, cancel_escalation=0.5),
        trace_path=trace_path,
        tool_sets=TOOL_SETS,
    )


def launch_spec(ws: Path, **kwargs: Any) -> LaunchSpec:
    return LaunchSpec(
        agent_profile_id="reference",
        executor_id="stdio",
        workspace=WorkspaceRef(path=str(ws)),
        **kwargs,
    )


def session_of(rt: Runtime, execution_id: str) -> ExecutionSession:
    return rt._session(execution_id)


def published(rt: Runtime, execution_id: str, kind: type[Any]) -> list[Any]:
    return [e for e in session_of(rt, execution_id).hub._backlog if isinstance(e, kind)]


async def test_the_agent_calls_an_app_tool_and_the_result_reaches_its_reply(
    tmp_path: Path,
) -> None:
    async with make_runtime() as rt:
        with anyio.fail_after(60):
            ref = await rt.launch(launch_spec(tmp_path))
            result = await rt.prompt(ref.id, 'add them [[tool:add {"a": 2, "b": 40}]]')
            assert result.stop_reason == "end_turn"
            assert "Tool add returned: 42." in result.agent_message

            # the call and its result streamed as ACP tool_call updates
            calls = [e for e in published(rt, ref.id, ToolCall) if e.tool_title == "Call add"]
            assert len(calls) == 1
            updates = [
                e
                for e in published(rt, ref.id, ToolUpdate)
                if e.tool_call_id == calls[0].tool_call_id and e.tool_status == "complete"
            ]
            assert updates and updates[-1].raw_output["text"] == "42"
            assert updates[-1].raw_output["server"] == "acpfsm"

            # and as the Runtime's own events
            started = published(rt, ref.id, le.McpCallStarted)
            ended = published(rt, ref.id, le.McpCallEnded)
            assert [(e.kind, e.name, e.mode) for e in started] == [("tool", "add", "task")]
            assert json.loads(started[0].arguments) == {"a": 2, "b": 40}
            assert [(e.call_id, e.output, e.error) for e in ended] == [
                (started[0].call_id, "42", "")
            ]

            # a given JSON schema is honoured, the result converted to text
            result = await rt.prompt(ref.id, 'find [[tool:lookup {"key": "abc"}]]')
            assert '"value": "cba"' in result.agent_message
            await rt.stop(ref.id, "done")


async def test_set_mcp_mode_changes_the_tools_the_agent_sees_mid_session(tmp_path: Path) -> None:
    async with make_runtime() as rt:
        with anyio.fail_after(60):
            ref = await rt.launch(launch_spec(tmp_path, mcp_mode="task"))
            first = await rt.prompt(ref.id, "which [[tools]]")
            assert "acpfsm (http): add, explode, huge, lookup, never" in first.agent_message

            await rt.set_mcp_mode(ref.id, "review")
            second = await rt.prompt(ref.id, 'now [[tools]] [[tool:shout {"text": "hi"}]]')
            assert "acpfsm (http): shout." in second.agent_message
            assert "Tool shout returned: HI." in second.agent_message
            third = await rt.prompt(ref.id, 'gone [[tool:add {"a": 1, "b": 1}]]')
            assert "Tool add failed: no MCP server offers a tool named 'add'" in (
                third.agent_message
            )
            changed = published(rt, ref.id, le.McpModeChanged)
            assert [(e.previous, e.mode) for e in changed] == [("task", "review")]
            assert rt.get_execution(ref.id).metadata["mcp_mode"] == "review"

            # the facade's guards
            with pytest.raises(Unsupported):
                await rt.set_mcp_mode(ref.id, "everything")
            with pytest.raises(ExecutionIdRequired):
                await rt.set_mcp_mode("", "task")
            with pytest.raises(ExecutionNotFound):
                await rt.set_mcp_mode("missing", "task")
            assert rt.get_execution(ref.id).metadata["mcp_mode"] == "review"
            with pytest.raises(Unsupported):
                await rt.launch(launch_spec(tmp_path, mcp_mode="everything"))
            await rt.stop(ref.id, "done")


async def test_failing_hanging_oversized_and_badly_called_tools_answer_with_mcp_errors(
    tmp_path: Path,
) -> None:
    async with make_runtime() as rt:
        with anyio.fail_after(60):
            ref = await rt.launch(launch_spec(tmp_path))
            prompts = {
                '[[tool:explode {"reason": "boom"}]]': (
                    "Tool explode failed: tool 'explode' failed: RuntimeError."
                ),
                "[[tool:never {}]]": "Tool never failed: tool 'never' did not finish within 0.5s.",
                '[[tool:huge {"size": 200000}]]': "Tool huge failed: tool 'huge' returned",
                '[[tool:add {"a": "two", "b": 1}]]': "Tool add failed: invalid arguments for tool",
                '[[tool:add {"a": 1}]]': "b: Field required",
                '[[tool:lookup {"key": "far too long a key"}]]': "is too long",
                '[[tool:lookup {"key": "k", "extra": 1}]]': "Additional properties",
            }
            for directive, expected in prompts.items():
                result = await rt.prompt(ref.id, f"try {directive}")
                assert result.stop_reason == "end_turn"
                assert expected in result.agent_message, result.agent_message
                assert rt.get_execution(ref.id).status == "READY"
            ended = published(rt, ref.id, le.McpCallEnded)
            assert len(ended) == len(prompts) and all(e.error and not e.output for e in ended)
            assert len(ended[2].error) < 5000  # the event quotes no huge result

            # the execution is healthy: the next call works
            result = await rt.prompt(ref.id, 'again [[tool:add {"a": 1, "b": 2}]]')
            assert "Tool add returned: 3." in result.agent_message
            await rt.stop(ref.id, "done")


DSN = "postgresql://app:s3cr3t-pw@db.internal/tickets"


@tool
async def query(sql: str) -> str:
    """Fails as a database driver does: its message quotes the connection URL."""
    raise ConnectionError(f"could not connect to {DSN}: connection refused")


@tool(expose_errors=True)
async def query_told(sql: str) -> str:
    """The same, its message told (the app opted in for this tool)."""
    raise ConnectionError(f"could not connect to {DSN}: connection refused")


def _redact(exc: BaseException) -> str:
    return str(exc).replace(DSN, "postgresql://***@db.internal/tickets")


async def test_a_tool_exception_tells_the_agent_its_type_not_its_message(
    tmp_path: Path,
) -> None:
    """By default the agent learns the tool's name and the exception's type, never the
    message (a password in a database URL); the app opts in to the message per tool, or per
    tool set with its own redaction; the app's own event carries the same text."""
    sets = [
        ToolSet("task", tools=[query, query_told]),
        ToolSet("redacted", tools=[query], expose_errors=_redact),
    ]
    async with Runtime(
        profiles=[reference_profile("--delay", "0", *SLOW_MACHINE)],
        executors={"stdio": StdioExecutor(shutdown=FAST_SHUTDOWN)},
        tool_sets=sets,
    ) as rt:
        with anyio.fail_after(60):
            ref = await rt.launch(launch_spec(tmp_path))
            plain = await rt.prompt(ref.id, 'go [[tool:query {"sql": "select 1"}]]')
            assert "Tool query failed: tool 'query' failed: ConnectionError." in (
                plain.agent_message
            ), plain.agent_message
            told = await rt.prompt(ref.id, 'go [[tool:query_told {"sql": "select 1"}]]')
            assert f"ConnectionError: could not connect to {DSN}" in told.agent_message
            await rt.set_mcp_mode(ref.id, "redacted")
            redacted = await rt.prompt(ref.id, 'go [[tool:query {"sql": "select 1"}]]')
            assert (
                "failed: ConnectionError: could not connect to "
                "postgresql://***@db.internal/tickets: connection refused"
            ) in redacted.agent_message, redacted.agent_message
            ended = published(rt, ref.id, le.McpCallEnded)
            await rt.stop(ref.id, "done")
    assert DSN not in plain.agent_message and DSN not in redacted.agent_message
    assert [DSN in e.error for e in ended] == [False, True, False]


async def test_the_tool_server_wants_its_bearer_secret_and_never_tells_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    trace = tmp_path / "trace.jsonl"
    ws = tmp_path / "ws"
    ws.mkdir()
    # a careless agent: it logs every line it reads, the session/new with the secret too
    async with make_runtime("--log-level", "debug", trace_path=trace) as rt:
        with anyio.fail_after(60):
            ref = await rt.launch(launch_spec(ws))
            result = await rt.prompt(ref.id, '[[tool:add {"a": 1, "b": 1}]]')
            assert "Tool add returned: 2." in result.agent_message
            mcp = session_of(rt, ref.id).ctx.mcp
            assert mcp is not None and mcp.tool_server is not None
            server = mcp.tool_server
            secret = server.headers["Authorization"].removeprefix("Bearer ")
            assert server.url.startswith("http://127.0.0.1:")

            body = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "add", "arguments": {"a": 1, "b": 2}},
            }
            headers = {"Accept": "application/json, text/event-stream"}
            async with httpx.AsyncClient(timeout=10) as client:
                for auth in (None, "Bearer wrong", f"Basic {secret}", f"Bearer {secret}x"):
                    sent = dict(headers, Authorization=auth) if auth else headers
                    answer = await client.post(server.url, json=body, headers=sent)
                    assert answer.status_code == 401, (auth, answer.text)
            assert len(published(rt, ref.id, le.McpCallStarted)) == 1  # nothing ran

            # the agent dies: its stderr tail (which logged the secret) is quoted, masked
            with pytest.raises(AgentReportedError) as died:
                await rt.prompt(ref.id, "[[fault:crash]] bye")
            assert '"name":"Authorization","value":"***"' in str(died.value)
            events = [repr(e) for e in session_of(rt, ref.id).hub._backlog]
            await rt.stop(ref.id, "done")
    assert secret not in "".join(events)
    assert secret not in str(died.value)
    assert secret not in trace.read_text()
    assert secret not in caplog.text


PEER = Path(__file__).resolve().parent.parent / "peers" / "mcp_stdio_server.py"


async def test_mcp_servers_of_the_profile_and_launch_reach_session_new_and_load(
    tmp_path: Path,
) -> None:
    """A stdio MCP server of the profile and one of the launch are started by the agent at
    session/new, and again at session/load when the execution resumes the session; an SSE
    one (the reference agent takes none) is dropped with an event saying why."""
    peer = McpServerStdio(
        name="peer", command=sys.executable, args=(str(PEER),), env={"PEER_NAME": "profile peer"}
    )
    other = McpServerStdio(
        name="other", command=sys.executable, args=(str(PEER),), env={"PEER_NAME": "launch peer"}
    )
    old = McpServerSse(name="old", url="http://127.0.0.1:9/sse")
    profile = reference_profile("--delay", "0", *SLOW_MACHINE, mcp_servers=(peer,))
    async with Runtime(
        profiles=[profile],
        executors={"stdio": StdioExecutor(shutdown=FAST_SHUTDOWN)},
        tool_sets=TOOL_SETS,
    ) as rt:
        with anyio.fail_after(90):
            ref = await rt.launch(launch_spec(tmp_path, mcp_servers=(other, old)))
            result = await rt.prompt(ref.id, "[[tools]] [[tool:whoami {}]]")
            assert (
                "MCP tools: peer (stdio): whoami; other (stdio): whoami; acpfsm (http): add"
                in result.agent_message
            )
            assert "Tool whoami returned: I am profile peer." in result.agent_message
            dropped = published(rt, ref.id, le.McpServerDropped)
            assert [(e.name, e.kind) for e in dropped] == [("old", "sse")]
            acp_id = rt.get_execution(ref.id).acp_session_id
            await rt.stop(ref.id, "done")

            resumed = await rt.launch(launch_spec(tmp_path, prior_acp_session=acp_id))
            result = await rt.prompt(resumed.id, "[[tools]] again")
            created = published(rt, resumed.id, le.AcpSessionCreated)
            assert created and created[0].resumed  # session/load, not session/new
            assert "MCP tools: peer (stdio): whoami; acpfsm (http): add" in result.agent_message
            await rt.stop(resumed.id, "done")


async def test_an_agent_without_http_support_gets_no_tool_server(tmp_path: Path) -> None:
    async with make_runtime("--fault", "no_mcp_http") as rt:
        with anyio.fail_after(60):
            ref = await rt.launch(launch_spec(tmp_path))
            result = await rt.prompt(ref.id, "[[tools]]")
            assert "MCP tools: none." in result.agent_message
            dropped = published(rt, ref.id, le.McpServerDropped)
            assert [(e.name, e.kind, e.reason) for e in dropped] == [
                (
                    "acpfsm",
                    "http",
                    (
                        "the agent does not take http MCP servers "
                        "(its mcpCapabilities.http is not true)"
                    ),
                )
            ]
            await rt.stop(ref.id, "done")


# The MCP SDK's client leaves its SSE readers (httpx2 async generators) to trio's finalizer
# when its streams close; only those warnings are let through.
@pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <async_generator object "
    "(EventSource.__aiter__|PoolByteStream.__aiter__|Response.aiter_bytes|Response.aiter_text)"
    ":pytest.PytestUnraisableExceptionWarning"
)
async def test_a_mode_switch_is_announced_as_tools_list_changed(tmp_path: Path) -> None:
    """Both MCP eras hear of it: a handshake-era client on its standalone stream, a 2026-era
    client on its ``subscriptions/listen`` stream (the MCP SDK's own client, each)."""
    from mcp import Client, types
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
    from mcp.shared.subscriptions import ToolsListChanged

    async with make_runtime() as rt:
        with anyio.fail_after(60):
            ref = await rt.launch(launch_spec(tmp_path))
            await rt.wait_ready(ref.id)
            mcp = session_of(rt, ref.id).ctx.mcp
            assert mcp is not None and mcp.tool_server is not None
            server = mcp.tool_server
            heard = anyio.Event()

            async def on_message(message: Any) -> None:
                if isinstance(message, types.ToolListChangedNotification):
                    heard.set()

            legacy_http = create_mcp_http_client(headers=server.headers)
            modern_http = create_mcp_http_client(headers=server.headers)
            async with (
                legacy_http,
                modern_http,
                Client(
                    streamable_http_client(server.url, http_client=legacy_http),
                    mode="legacy",
                    message_handler=on_message,
                    cache=None,
                ) as legacy,
                Client(
                    streamable_http_client(server.url, http_client=modern_http), cache=None
                ) as modern,
            ):
                assert legacy.server_capabilities.tools is not None
                assert legacy.server_capabilities.tools.list_changed
                assert "add" in [t.name for t in (await legacy.list_tools()).tools]
                assert modern.protocol_version.startswith("2026")
                async with modern.listen(tools_list_changed=True) as changes:
                    await anyio.sleep(0.2)  # the legacy client's standalone stream opens
                    await rt.set_mcp_mode(ref.id, "review")
                    async for change in changes:
                        assert isinstance(change, ToolsListChanged)
                        break
                await heard.wait()
                assert [t.name for t in (await legacy.list_tools()).tools] == ["shout"]
                assert [t.name for t in (await modern.list_tools()).tools] == ["shout"]
            await rt.stop(ref.id, "done")
