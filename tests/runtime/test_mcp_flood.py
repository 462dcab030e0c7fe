"""The tool server as an attacker sees it: any local process can connect to an execution's MCP
server without its secret. A flood of idle (or chatty, unauthenticated) connections is held to
the server's bound: past it a new connection takes the place of the oldest unauthenticated one
(closed), or is refused with ``503`` while evicted ones are still ending; the held ones are
closed once they have made no authenticated request within ``Timeouts.tool_server_idle``. The
Runtime keeps its file descriptors, nothing prints a traceback, other executions launch and
call their tools meanwhile, and a connection that carries the secret still gets in during the
flood. Under trio and asyncio, against the reference agent as a real subprocess."""

from __future__ import annotations

import json
import os
import resource
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import httpx
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from acpfsm.adapters.acp.stdio import StdioConfig
from acpfsm.runtime import Runtime, StdioExecutor, Timeouts, reference_profile
from acpfsm.runtime.mcp.server import MAX_CONNECTIONS
from tests.peers.app_tools import SLOW_MACHINE

from .test_mcp_tools import FAST_SHUTDOWN, TOOL_SETS, launch_spec, session_of

pytestmark = [pytest.mark.both_backends, pytest.mark.integration]

ATTACKER = Path(__file__).resolve().parent.parent / "peers" / "connection_flood.py"
FLOOD = 1500
IDLE = 1.0  # the test's Timeouts.tool_server_idle (real seconds: sockets are real)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def few_descriptors() -> Iterator[int]:
    """This process may open 300 more file descriptors than it has open now (a flood the
    server accepted without a bound would exhaust them)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = _open_fds() + 300
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(limit, hard), hard))
    try:
        yield limit
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _runtime(idle: float = IDLE) -> Runtime:
    return Runtime(
        profiles=[reference_profile("--delay", "0", *SLOW_MACHINE)],
        executors={
            "stdio": StdioExecutor(config=StdioConfig(cancel_timeout=0.5), shutdown=FAST_SHUTDOWN)
        },
        timeouts=Timeouts(cancel_wait=2.0, cancel_escalation=0.5, tool_server_idle=idle),
        tool_sets=TOOL_SETS,
    )


async def _tool_call_works(rt: Runtime, execution_id: str) -> None:
    result = await rt.prompt(execution_id, 'add [[tool:add {"a": 2, "b": 40}]]')
    assert "Tool add returned: 42." in result.agent_message, result.agent_message


@pytest.mark.parametrize("chatty", [False, True], ids=["idle", "chatty"])
async def test_a_connection_flood_is_bounded_and_harms_no_other_execution(
    tmp_path: Path, few_descriptors: int, capfd: pytest.CaptureFixture[str], chatty: bool
) -> None:
    async with _runtime() as rt:
        with anyio.fail_after(120):
            (tmp_path / "a").mkdir()
            (tmp_path / "b").mkdir()
            victim = await rt.launch(launch_spec(tmp_path / "a"))
            await _tool_call_works(rt, victim.id)
            mcp = session_of(rt, victim.id).ctx.mcp
            assert mcp is not None and mcp.tool_server is not None
            url = urlsplit(mcp.tool_server.url)
            before = _open_fds()
            args = [str(url.hostname), str(url.port), str(FLOOD), *(["--chatty"] * chatty)]
            async with await anyio.open_process(
                [sys.executable, str(ATTACKER), *args], stderr=None
            ) as attacker:
                assert attacker.stdout is not None and attacker.stdin is not None
                lines = BufferedByteReceiveStream(attacker.stdout)
                opened = json.loads(await lines.receive_until(b"\n", 1 << 16))["opened"]
                assert opened > MAX_CONNECTIONS
                # the flood holds at most twice the bound of this process's descriptors
                # (the admitted ones and the evicted ones still ending)
                assert _open_fds() <= before + 2 * MAX_CONNECTIONS + 16
                # another execution launches and calls its tools meanwhile
                other = await rt.launch(launch_spec(tmp_path / "b"))
                await _tool_call_works(rt, other.id)
                # the held connections made no authenticated request: closed after the bound
                await anyio.sleep(IDLE * 2.5)
                await attacker.stdin.aclose()
                counts = json.loads(await lines.receive_until(b"\n", 1 << 16))
            assert counts["open"] == 0, counts
            assert counts["refused"] + counts["closed"] == opened
            # the victim's agent calls its tools again
            await _tool_call_works(rt, victim.id)
            await rt.stop(victim.id, "done")
            await rt.stop(other.id, "done")
    err = capfd.readouterr().err
    assert "Traceback" not in err, err[-3000:]
    assert "Too many open files" not in err


async def test_a_client_with_the_secret_gets_in_while_a_flood_holds_the_bound(
    tmp_path: Path, few_descriptors: int, capfd: pytest.CaptureFixture[str]
) -> None:
    """The flood's connections stay (a long idle bound), filling the server's bound: a new
    connection that carries the secret (the agent's next one) is still admitted and answered,
    in the place of the oldest unauthenticated connection, which is closed without a ``503``;
    the agent's tool calls keep working during the flood."""
    async with _runtime(idle=600.0) as rt:
        with anyio.fail_after(120):
            victim = await rt.launch(launch_spec(tmp_path))
            await _tool_call_works(rt, victim.id)
            mcp = session_of(rt, victim.id).ctx.mcp
            assert mcp is not None and mcp.tool_server is not None
            server = mcp.tool_server
            url = urlsplit(server.url)
            args = [str(url.hostname), str(url.port), str(2 * MAX_CONNECTIONS)]
            async with await anyio.open_process(
                [sys.executable, str(ATTACKER), *args], stderr=None
            ) as attacker:
                assert attacker.stdout is not None and attacker.stdin is not None
                lines = BufferedByteReceiveStream(attacker.stdout)
                opened = json.loads(await lines.receive_until(b"\n", 1 << 16))["opened"]
                assert opened == 2 * MAX_CONNECTIONS
                headers = dict(server.headers)
                headers["Accept"] = "application/json, text/event-stream"
                initialize = {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "flood-test", "version": "1"},
                    },
                }
                for _ in range(3):  # each a new connection
                    async with (
                        httpx.AsyncClient(headers=headers) as client,
                        client.stream("POST", server.url, json=initialize) as response,
                    ):
                        assert response.status_code == 200, response.status_code
                await _tool_call_works(rt, victim.id)
                await attacker.stdin.aclose()
                counts = json.loads(await lines.receive_until(b"\n", 1 << 16))
            # the flood's oldest connections made room: closed, not answered 503
            assert counts["closed"] >= 3, counts
            assert counts["open"] <= MAX_CONNECTIONS, counts
            assert counts["refused"] + counts["closed"] + counts["open"] == opened
            await rt.stop(victim.id, "done")
    err = capfd.readouterr().err
    assert "Traceback" not in err, err[-3000:]
