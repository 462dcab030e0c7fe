"""What an MCP mode allows: the app's tool server lists *and runs* only the current mode's
tools. A tool of another mode is refused exactly like a tool no mode has (the mode is how an
app limits what its agent may do, so a call by name must not reach past it), and after a
switch the old mode's tools are refused and the new one's run. Driven through the facade over
the memory transport, with the MCP SDK's own client on the tool server the agent is offered.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from acpfsm.adapters.mcp_servers import McpServerHttp
from acpfsm.adapters.memory import MemoryTransport
from acpfsm.runtime import AgentProfile, Runtime, Timeouts, ToolSet, tool
from acpfsm.testing.memory import MemoryExecutor

from .memory_runtime import spec

pytestmark = pytest.mark.both_backends

ran: list[str] = []


@tool
async def read_ticket(ticket: str) -> str:
    """Read a ticket."""
    ran.append("read_ticket")
    return f"{ticket}: open"


@tool
async def slow_ticket(ticket: str) -> str:
    """Never answers (bounded by the Runtime's tool_call bound)."""
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


@tool
async def delete_ticket(ticket: str) -> str:
    """Delete a ticket (only the admin mode has it)."""
    ran.append("delete_ticket")
    return f"{ticket}: deleted"


TOOL_SETS = [
    ToolSet("task", tools=[read_ticket]),
    ToolSet("admin", tools=[read_ticket, delete_ticket, slow_ticket]),
]


def offered(tr: MemoryTransport) -> McpServerHttp:
    """The app's tool server as the agent's session/new was offered it."""
    (server,) = [s for _, servers in tr.mcp_servers for s in servers if s.name == "acpfsm"]
    assert isinstance(server, McpServerHttp)
    return server


@contextlib.asynccontextmanager
async def client(server: McpServerHttp) -> AsyncIterator[Any]:
    """The MCP SDK's client on ``server``, as an agent connects to it."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers=server.headers)
    async with http, Client(streamable_http_client(server.url, http_client=http)) as c:
        yield c


async def call(c: Any, name: str) -> tuple[bool, str]:
    result = await c.call_tool(name, {"ticket": "T-1"})
    return bool(result.is_error), "".join(getattr(b, "text", "") for b in result.content)


# The MCP SDK's client leaves its SSE readers (httpx async generators) to trio's finalizer
# when its streams close; only those warnings are let through.
@pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <async_generator object "
    "(EventSource.__aiter__|PoolByteStream.__aiter__|Response.aiter_bytes|Response.aiter_text)"
    ":pytest.PytestUnraisableExceptionWarning"
)
async def test_tools_call_runs_only_the_current_modes_tools() -> None:
    ran.clear()
    ex = MemoryExecutor()
    profiles = (AgentProfile(id="mem", command=("unused",)),)
    # a tool without a timeout of its own is bounded by Timeouts.tool_call (not another bound)
    bounds = Timeouts(tool_call=0.3)
    async with Runtime(
        profiles=profiles, executors={"memory": ex}, tool_sets=TOOL_SETS, timeouts=bounds
    ) as rt:
        with anyio.fail_after(60):
            ref = await rt.launch(spec(mcp_mode="task"))
            await rt.wait_ready(ref.id)
            async with client(offered(ex.last)) as c:
                assert [t.name for t in (await c.list_tools()).tools] == ["read_ticket"]
                assert await call(c, "read_ticket") == (False, "T-1: open")
                # another mode's tool is refused as a tool no mode has: nothing runs
                unknown = await call(c, "no_such_tool")
                assert unknown == (True, "no tool 'no_such_tool' in MCP mode 'task'")
                assert await call(c, "delete_ticket") == (
                    True,
                    "no tool 'delete_ticket' in MCP mode 'task'",
                )
                assert ran == ["read_ticket"]

                await rt.set_mcp_mode(ref.id, "admin")
                assert await call(c, "delete_ticket") == (False, "T-1: deleted")
                assert await call(c, "slow_ticket") == (
                    True,
                    "tool 'slow_ticket' did not finish within 0.3s",
                )
                await rt.set_mcp_mode(ref.id, "task")
                assert await call(c, "delete_ticket") == (
                    True,
                    "no tool 'delete_ticket' in MCP mode 'task'",
                )
                # a mode without a tool set (one of kandev's) runs nothing at all
                await rt.set_mcp_mode(ref.id, "office")
                assert await call(c, "read_ticket") == (
                    True,
                    "no tool 'read_ticket' in MCP mode 'office'",
                )
                assert ran == ["read_ticket", "delete_ticket"]
            await rt.stop(ref.id, "done")
