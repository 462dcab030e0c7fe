"""The Runtime's MCP plumbing over the in-memory transport: the profile's and the launch's MCP
servers (and the app's tool server) reach session/new and session/load and the executor's
``AgentLaunch``; servers the agent cannot take are dropped with an event naming each and why;
kandev's ``mcp.*`` requests are answered from the current mode's actions, bounded, and refused
clearly when the mode serves none; tool declarations are checked."""

from __future__ import annotations

import subprocess
import sys
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import pytest

from acpfsm.adapters.errors import AgentctlError, AgentRequestError
from acpfsm.adapters.executor import AgentLaunch
from acpfsm.adapters.memory import MemoryTransport
from acpfsm.adapters.transport import AgentTransport
from acpfsm.runtime import (
    AgentProfile,
    McpServerHttp,
    McpServerSse,
    McpServerStdio,
    Tool,
    ToolDeclarationError,
    ToolSet,
    tool,
)
from acpfsm.runtime import events as le
from acpfsm.runtime.mcp.execution import ExecutionMcp, RuntimeTools
from acpfsm.runtime.mcp.tools import describe_failure
from acpfsm.testing.memory import MemoryExecutor

from .memory_runtime import make_runtime, session_of, spec, wait_until

FILES = McpServerStdio(name="files", command="/usr/bin/mcp-files")
DOCS = McpServerHttp(name="docs", url="http://127.0.0.1:9/mcp", headers={"X-Api-Key": "k-123456"})
OLD = McpServerSse(name="old", url="http://127.0.0.1:9/sse")
PROFILE = AgentProfile(id="mem", command=("unused",), mcp_servers=(FILES,))


class RecordingExecutor(MemoryExecutor):
    """A MemoryExecutor that keeps each AgentLaunch it was given."""

    def __init__(self, **transport: Any) -> None:
        super().__init__(lambda: MemoryTransport(auto_complete=True, **transport))
        self.launches: list[AgentLaunch] = []

    def open(self, launch: AgentLaunch) -> AbstractAsyncContextManager[AgentTransport]:
        self.launches.append(launch)
        return super().open(launch)


@tool
async def echo(text: str) -> str:
    """Echo."""
    return text


@pytest.mark.both_backends
async def test_profile_and_launch_servers_reach_session_new_and_load(time_scale: float) -> None:
    ex = RecordingExecutor()
    async with make_runtime(ex, profiles=(PROFILE,), time_scale=time_scale) as rt:
        ref = await rt.launch(spec(mcp_servers=(DOCS,)))
        await rt.wait_ready(ref.id)
        resumed = await rt.launch(spec(mcp_servers=(DOCS,), prior_acp_session="acp-1"))
        await rt.wait_ready(resumed.id)
        assert ex.transports[0].mcp_servers == [("session/new", (FILES, DOCS))]
        assert ex.transports[1].mcp_servers == [("session/load", (FILES, DOCS))]
        # the executor sees them too (to mask their credentials); no handler without actions
        assert [launch.mcp_servers for launch in ex.launches] == [(FILES, DOCS), (FILES, DOCS)]
        assert all(launch.mcp_handler is None for launch in ex.launches)
        assert session_of(rt, ref.id).ctx.mcp is not None
        await rt.stop(ref.id, "done")
        await rt.stop(resumed.id, "done")


@pytest.mark.both_backends
async def test_without_servers_or_tools_sessions_get_none(time_scale: float) -> None:
    ex = RecordingExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref = await rt.launch(spec())
        await rt.wait_ready(ref.id)
        assert ex.last.mcp_servers == [("session/new", ())]
        assert session_of(rt, ref.id).ctx.mcp is None
        await rt.stop(ref.id, "done")


@pytest.mark.both_backends
async def test_servers_the_agent_cannot_take_are_dropped_with_an_event(time_scale: float) -> None:
    # the agent takes no http and no sse servers; session/load fails, session/new follows
    ex = RecordingExecutor(mcp_http=False, mcp_sse=False)

    def refuse(*_: Any) -> None:
        raise AgentRequestError(-32002, "Resource not found", method="session/load")

    async with make_runtime(
        ex, profiles=(PROFILE,), time_scale=time_scale, tool_sets=[ToolSet("task", [echo])]
    ) as rt:
        ex.make = lambda: _with_handler(MemoryTransport(mcp_http=False, mcp_sse=False), refuse)
        ref = await rt.launch(spec(mcp_servers=(DOCS, OLD, FILES), prior_acp_session="acp-1"))
        await rt.wait_ready(ref.id)
        offered = ex.last.mcp_servers
        assert offered == [("session/load", (FILES,)), ("session/new", (FILES,))]
        dropped = [
            (e.name, e.kind, e.reason)
            for e in session_of(rt, ref.id).hub._backlog
            if isinstance(e, le.McpServerDropped)
        ]
        assert dropped == [  # once each, although two sessions were asked for
            (
                "docs",
                "http",
                "the agent does not take http MCP servers (its mcpCapabilities.http is not true)",
            ),
            (
                "old",
                "sse",
                "the agent does not take sse MCP servers (its mcpCapabilities.sse is not true)",
            ),
            ("files", "stdio", "an earlier MCP server is also named 'files'"),
            (
                "acpfsm",
                "http",
                "the agent does not take http MCP servers (its mcpCapabilities.http is not true)",
            ),
        ]
        await rt.stop(ref.id, "done")


def _with_handler(transport: MemoryTransport, load: Any) -> MemoryTransport:
    transport.handlers["session/load"] = load
    return transport


@pytest.mark.both_backends
async def test_the_tool_server_joins_every_session_of_the_execution(time_scale: float) -> None:
    ex = RecordingExecutor()
    async with make_runtime(
        ex, profiles=(PROFILE,), time_scale=time_scale, tool_sets=[ToolSet("task", [echo])]
    ) as rt:
        ref = await rt.launch(spec())
        await rt.wait_ready(ref.id)
        ((method, servers),) = ex.last.mcp_servers
        assert method == "session/new"
        assert servers[0] == FILES
        server = servers[1]
        assert isinstance(server, McpServerHttp) and server.name == "acpfsm"
        assert server.url.startswith("http://127.0.0.1:") and server.url.endswith("/mcp")
        assert server.headers["Authorization"].startswith("Bearer ")
        assert ex.launches[-1].mcp_servers == servers
        mcp = session_of(rt, ref.id).ctx.mcp
        assert mcp is not None and mcp.mode == "task"  # the first tool set's, by default
        await rt.stop(ref.id, "done")
        assert mcp.tool_server is None  # stopped with the execution


async def wait_event(rt: Any, execution_id: str, kind: type[Any], count: int) -> list[Any]:
    hub = session_of(rt, execution_id).hub
    await wait_until(lambda: len([e for e in hub._backlog if isinstance(e, kind)]) >= count)
    return [e for e in hub._backlog if isinstance(e, kind)]


async def test_mcp_actions_follow_the_mode_and_are_bounded(autojump_clock: Any) -> None:
    asked: list[Any] = []

    async def create_task(payload: Any) -> Any:
        asked.append(payload)
        return {"task_id": "t-1"}

    async def hang(payload: Any) -> Any:
        await anyio.sleep_forever()

    async def fail(payload: Any) -> Any:
        raise KeyError("no such thing: token tk-123")

    tools = RuntimeTools(
        [
            ToolSet(
                "task",
                actions={"mcp.create_task": create_task, "mcp.hang": hang, "mcp.fail": fail},
            ),
            ToolSet("config"),
        ]
    )
    assert tools.compiled is None  # actions only: no tool server, no MCP SDK needed
    mcp = ExecutionMcp(execution_id="e-1", servers=(), tools=tools, mode="task", call_timeout=5.0)
    events: list[Any] = []
    mcp.publish = events.append
    assert mcp.action_handler is not None

    assert await mcp.handle_action("mcp.create_task", {"title": "x"}) == {"task_id": "t-1"}
    assert asked == [{"title": "x"}]
    with pytest.raises(AgentctlError) as hung:
        await mcp.handle_action("mcp.hang", None)
    assert (hung.value.code, str(hung.value)) == (
        "INTERNAL_ERROR",
        "mcp.hang did not answer within 5s",
    )
    with pytest.raises(AgentctlError) as failed:
        await mcp.handle_action("mcp.fail", None)
    assert failed.value.code == "INTERNAL_ERROR"
    assert str(failed.value) == "mcp.fail failed: KeyError"  # not its message: its type

    await mcp.set_mode("config")
    with pytest.raises(AgentctlError) as refused:
        await mcp.handle_action("mcp.create_task", {"title": "y"})
    assert refused.value.code == "UNKNOWN_ACTION"
    assert str(refused.value) == "acpfsm does not serve mcp.create_task in MCP mode 'config'"
    assert asked == [{"title": "x"}]
    ends = [(e.name, e.mode, bool(e.error)) for e in events if isinstance(e, le.McpCallEnded)]
    assert ends == [
        ("mcp.create_task", "task", False),
        ("mcp.hang", "task", True),
        ("mcp.fail", "task", True),
        ("mcp.create_task", "config", True),
    ]
    assert [e.mode for e in events if isinstance(e, le.McpModeChanged)] == ["config"]


async def test_an_action_tells_its_message_when_the_tool_set_says_so() -> None:
    async def fail(payload: Any) -> Any:
        raise KeyError("no such thing: token tk-123")

    told, redacted = (
        ExecutionMcp(
            execution_id="e-1",
            servers=(),
            tools=RuntimeTools([ToolSet("task", actions={"mcp.fail": fail}, expose_errors=x)]),
            mode="task",
            call_timeout=5.0,
        )
        for x in (True, lambda exc: str(exc).replace("tk-123", "***"))
    )
    with pytest.raises(AgentctlError, match=r"^mcp.fail failed: KeyError: .*tk-123"):
        await told.handle_action("mcp.fail", None)
    with pytest.raises(AgentctlError) as hidden:
        await redacted.handle_action("mcp.fail", None)
    assert str(hidden.value) == "mcp.fail failed: KeyError: 'no such thing: token ***'"
    with pytest.raises(ToolDeclarationError, match="expose_errors"):
        ToolSet("bad", expose_errors="yes")  # type: ignore[arg-type]


def test_a_failing_redaction_tells_the_type_alone(caplog: pytest.LogCaptureFixture) -> None:
    def broken(exc: BaseException) -> str:
        raise RuntimeError("the redaction broke")

    assert describe_failure(ValueError("secret"), broken) == "ValueError"
    assert describe_failure(ValueError(""), True) == "ValueError"
    assert "redaction failed" in caplog.text


@pytest.mark.both_backends
async def test_actions_reach_the_executor_as_the_launch_handler(time_scale: float) -> None:
    async def create_task(payload: Any) -> Any:
        return {"ok": True}

    ex = RecordingExecutor()
    async with make_runtime(
        ex,
        time_scale=time_scale,
        tool_sets=[ToolSet("task", actions={"mcp.create_task": create_task})],
    ) as rt:
        ref = await rt.launch(spec())
        await rt.wait_ready(ref.id)
        handler = ex.launches[-1].mcp_handler
        assert handler is not None
        assert await handler("mcp.create_task", {}) == {"ok": True}
        assert ex.last.mcp_servers == [("session/new", ())]  # actions alone start no server
        await rt.stop(ref.id, "done")


class McpCarrier(MemoryTransport):
    """A carrier serving MCP tools of its own, as agentctl's embedded MCP server does: it
    records the modes it is switched to."""

    def __init__(self) -> None:
        super().__init__()
        self.mcp_modes: list[str] = []

    async def set_mcp_mode(self, mode: str) -> None:
        self.mcp_modes.append(mode)


@pytest.mark.both_backends
async def test_only_kandevs_mcp_modes_reach_a_carrier_with_its_own_mcp_server(
    time_scale: float,
) -> None:
    """kandev ``SetMcpMode``: a carrier with its own MCP server (agentctl's) is switched to
    kandev's modes (task, config, office), never to a mode only the app's tool sets know;
    the execution's mode follows every switch."""
    ex = MemoryExecutor(McpCarrier)
    sets = [ToolSet("task"), ToolSet("config"), ToolSet("review")]
    async with make_runtime(ex, time_scale=time_scale, tool_sets=sets) as rt:
        ref = await rt.launch(spec())
        await rt.wait_ready(ref.id)
        carrier = ex.last
        assert isinstance(carrier, McpCarrier)
        for mode in ("review", "config", "task", "review"):
            await rt.set_mcp_mode(ref.id, mode)
            assert rt.get_execution(ref.id).metadata["mcp_mode"] == mode
        assert carrier.mcp_modes == ["config", "task"]
        await rt.stop(ref.id, "done")


def test_tool_declarations_are_checked() -> None:
    async def fine(x: int) -> int:
        return x

    def not_async(x: int) -> int:
        return x

    with pytest.raises(ToolDeclarationError, match="not an async def"):
        tool(not_async)  # type: ignore[arg-type]
    with pytest.raises(ToolDeclarationError, match="two tools named 'fine'"):
        ToolSet("task", [fine, fine])
    with pytest.raises(ToolDeclarationError, match="not an mcp"):
        ToolSet("task", actions={"create_task": fine})
    with pytest.raises(ToolDeclarationError, match="needs a name"):
        ToolSet("", [fine])
    with pytest.raises(ToolDeclarationError, match="two tool sets"):
        RuntimeTools([ToolSet("a"), ToolSet("a")])
    with pytest.raises(ToolDeclarationError, match="timeout must be positive"):
        tool(timeout=0)(fine)
    with pytest.raises(ToolDeclarationError, match="not a JSON schema"):
        RuntimeTools([ToolSet("a", [tool(input_schema={"type": 12})(fine)])])

    class Opaque:
        pass

    async def unserializable(thing: Opaque) -> str:
        return ""

    with pytest.raises(ToolDeclarationError, match="cannot be served"):
        RuntimeTools([ToolSet("a", [unserializable])])  # type: ignore[list-item]

    plain = ToolSet("task", [fine])
    (declared,) = plain.tools
    assert isinstance(declared, Tool) and declared.name == "fine"
    compiled = RuntimeTools([plain]).compiled
    assert compiled is not None
    schema = compiled.of("task")["fine"].definition.input_schema
    assert schema["properties"]["x"]["type"] == "integer" and schema["required"] == ["x"]


async def test_a_tool_stays_a_callable_function() -> None:
    assert await echo("hi") == "hi"


def _imported(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print(' '.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


def test_the_mcp_sdk_is_imported_only_when_tools_are_configured() -> None:
    plain = _imported(
        "import acpfsm.runtime\n"
        "from acpfsm.runtime import Runtime, ToolSet, tool\n"
        "@tool\nasync def f(x: int) -> int: return x\n"
        "Runtime(tool_sets=[ToolSet('task', actions={'mcp.x': f})])"
    )
    assert not {"mcp", "hypercorn", "starlette"} & plain
    served = _imported(
        "from acpfsm.runtime import Runtime, ToolSet, tool\n"
        "@tool\nasync def f(x: int) -> int: return x\n"
        "Runtime(tool_sets=[ToolSet('task', [f])])"
    )
    assert "mcp" in served
