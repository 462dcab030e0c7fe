"""MCP over the real agentctl: the reference agent behind agentctl calls an app-declared
Python tool (the app's tool server is on this host, so the agent reaches it) and one of
kandev's tools, which agentctl forwards to us as an ``mcp.*`` request answered by the app's
handler; ``set_mcp_mode`` switches both tool sets mid-session (agentctl's through ``PUT
/api/v1/mcp/mode``) and the actions answered; a hanging handler is answered within its bound;
the MCP servers of the launch reach ``agent.session.new`` and ``agent.session.load``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from acpfsm.adapters.agentctl.executor import AgentctlExecutor
from acpfsm.adapters.events import Unknown
from acpfsm.runtime import (
    AcpfsmError,
    McpServerStdio,
    Runtime,
    Timeouts,
    ToolSet,
    reference_profile,
)
from acpfsm.runtime import events as le
from tests.peers.app_tools import SLOW_MACHINE, add, shout

from .agentctl_server import AgentctlServer
from .helpers import DELAY, TEST_CONFIG, published, session_of, spec, workspace

pytestmark = pytest.mark.integration

PEER = Path(__file__).resolve().parent.parent / "peers" / "mcp_stdio_server.py"


def make_runtime(
    agentctl: AgentctlServer, tool_sets: list[ToolSet], *, profile_servers: Any = ()
) -> tuple[Runtime, AgentctlExecutor]:
    executor = AgentctlExecutor(url=agentctl.url, token=agentctl.token(), config=TEST_CONFIG)
    rt = Runtime(
        profiles=[reference_profile("--delay", DELAY, *SLOW_MACHINE, mcp_servers=profile_servers)],
        executors={"agentctl": executor},
        timeouts=Timeouts(cancel_wait=5.0, cancel_escalation=1.0, request=30.0, tool_call=1.0),
        tool_sets=tool_sets,
    )
    return rt, executor


async def test_app_and_kandev_tools_and_the_mode_switch_over_agentctl(
    agentctl: AgentctlServer, tmp_path: Path
) -> None:
    asked: list[tuple[str, Any]] = []

    async def list_workspaces(payload: Any) -> Any:
        asked.append(("mcp.list_workspaces", payload))
        return {"workspaces": [{"id": "ws-1", "name": "acpfsm-workspace"}]}

    async def hang(payload: Any) -> Any:
        await anyio.sleep_forever()

    tool_sets = [
        ToolSet(
            "task",
            tools=[add],
            actions={"mcp.list_workspaces": list_workspaces, "mcp.list_tasks": hang},
        ),
        ToolSet("config", tools=[shout]),
    ]
    rt, _ = make_runtime(agentctl, tool_sets)
    async with rt:
        with anyio.fail_after(90):
            ref = await rt.launch(spec(workspace(tmp_path), mcp_mode="task"))
            first = await rt.prompt(
                ref.id,
                'go [[tools]] [[tool:add {"a": 1, "b": 2}]] [[tool:list_workspaces_kandev {}]]',
            )
            reply = first.agent_message
            assert "acpfsm (http): add." in reply
            assert "list_workspaces_kandev" in reply and "get_settings_kandev" not in reply
            assert "Tool add returned: 3." in reply
            assert "Tool list_workspaces_kandev returned:" in reply and "acpfsm-workspace" in reply
            assert [a for a, _ in asked] == ["mcp.list_workspaces"]

            # a hanging handler: the agent gets an error within the bound, nothing breaks
            hung = await rt.prompt(ref.id, '[[tool:list_tasks_kandev {"workflow_id": "w-1"}]]')
            assert "mcp.list_tasks did not answer within 1s" in hung.agent_message
            assert rt.get_execution(ref.id).status == "READY"

            await rt.set_mcp_mode(ref.id, "config")
            second = await rt.prompt(
                ref.id,
                'then [[tools]] [[tool:shout {"text": "hi"}]] [[tool:list_workspaces_kandev {}]]',
            )
            reply = second.agent_message
            assert "acpfsm (http): shout." in reply  # the app's tool set switched
            assert "get_settings_kandev" in reply  # and agentctl's (its config mode)
            assert "Tool shout returned: HI." in reply
            assert (
                "backend error [UNKNOWN_ACTION]: acpfsm does not serve mcp.list_workspaces "
                "in MCP mode 'config'"
            ) in reply
            assert len(asked) == 1
            assert [e.mode for e in published(rt, ref.id, le.McpModeChanged)] == ["config"]

            # agentctl filters the servers the agent cannot take and says so (kandev's sse)
            filtered = [
                e.payload["mcp_attachment"]
                for e in published(rt, ref.id, Unknown)
                if e.kind == "mcp_attachment"
                and e.payload.get("mcp_attachment", {}).get("kind") == "filtered"
            ]
            assert [(f["server_name"], f["transport"]) for f in filtered] == [("kandev", "sse")]

            mcp = session_of(rt, ref.id).ctx.mcp
            assert mcp is not None and mcp.tool_server is not None
            secret = mcp.tool_server.headers["Authorization"].removeprefix("Bearer ")
            events = "".join(repr(e) for e in session_of(rt, ref.id).hub._backlog)
            assert secret not in events
            await rt.stop(ref.id, "done")


async def test_mcp_servers_reach_session_new_and_load_over_agentctl(
    agentctl: AgentctlServer, tmp_path: Path
) -> None:
    peer = McpServerStdio(
        name="peer", command=sys.executable, args=(str(PEER),), env={"PEER_NAME": "the peer"}
    )
    rt, _ = make_runtime(agentctl, [ToolSet("task", tools=[add])], profile_servers=(peer,))
    ws = workspace(tmp_path)
    async with rt:
        with anyio.fail_after(90):
            ref = await rt.launch(spec(ws))
            result = await rt.prompt(ref.id, "[[tools]] [[tool:whoami {}]]")
            assert "peer (stdio): whoami" in result.agent_message
            assert "acpfsm (http): add" in result.agent_message
            assert "Tool whoami returned: I am the peer." in result.agent_message
            acp_id = rt.get_execution(ref.id).acp_session_id
            await rt.stop(ref.id, "done")

            resumed = await rt.launch(spec(ws, prior=acp_id))
            result = await rt.prompt(resumed.id, "[[tools]] after load")
            assert published(rt, resumed.id, le.AcpSessionCreated)[0].resumed
            assert "peer (stdio): whoami" in result.agent_message
            assert "acpfsm (http): add" in result.agent_message
            await rt.stop(resumed.id, "done")


async def test_set_mcp_mode_of_an_unknown_mode_is_refused_before_agentctl_is_asked(
    agentctl: AgentctlServer, tmp_path: Path
) -> None:
    rt, _ = make_runtime(agentctl, [ToolSet("task", tools=[add])])
    async with rt:
        with anyio.fail_after(60):
            ref = await rt.launch(spec(workspace(tmp_path)))
            await rt.wait_ready(ref.id)
            with pytest.raises(AcpfsmError, match="not supported: MCP mode 'sideways'"):
                await rt.set_mcp_mode(ref.id, "sideways")
            await rt.set_mcp_mode(ref.id, "office")  # kandev's: forwarded, accepted
            assert session_of(rt, ref.id).ctx.mcp is not None
            await rt.stop(ref.id, "done")


async def test_the_tool_server_secret_is_masked_in_what_agentctl_reports(
    agentctl: AgentctlServer, tmp_path: Path
) -> None:
    """A careless agent behind agentctl logs the session/new it read, bearer secret and all;
    when it dies, agentctl reports its stderr, and acpfsm quotes it with the secret masked."""
    executor = AgentctlExecutor(url=agentctl.url, token=agentctl.token(), config=TEST_CONFIG)
    rt = Runtime(
        profiles=[reference_profile("--delay", DELAY, "--log-level", "debug", *SLOW_MACHINE)],
        executors={"agentctl": executor},
        timeouts=Timeouts(cancel_wait=5.0, cancel_escalation=1.0, request=30.0),
        tool_sets=[ToolSet("task", tools=[add])],
    )
    async with rt:
        with anyio.fail_after(60):
            ref = await rt.launch(spec(workspace(tmp_path)))
            await rt.wait_ready(ref.id)
            mcp = session_of(rt, ref.id).ctx.mcp
            assert mcp is not None and mcp.tool_server is not None
            secret = mcp.tool_server.headers["Authorization"].removeprefix("Bearer ")
            with pytest.raises(AcpfsmError) as died:
                await rt.prompt(ref.id, "[[fault:crash]] bye")
            events = "".join(repr(e) for e in session_of(rt, ref.id).hub._backlog)
            await rt.stop(ref.id, "done")
    assert '"name":"Authorization","value":"***"' in str(died.value)
    assert secret not in str(died.value) and secret not in events
