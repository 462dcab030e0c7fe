"""The permission API over the real agentctl (v0.95.1): agentctl relays the agent's request as
a ``permission_request`` event and takes the answer with ``agent.permissions.respond``; the
execution's policy drives that flow exactly as over stdio. Each under trio and asyncio."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from acpfsm.adapters.agentctl.executor import AgentctlExecutor
from acpfsm.runtime import (
    AgentProfile,
    LaunchSpec,
    PermissionAlreadyResolved,
    PermissionOptionNotOffered,
    PromptResult,
    Runtime,
    reference_profile,
)
from acpfsm.runtime import events as le

from .agentctl_server import AgentctlServer
from .helpers import DELAY, TEST_CONFIG, TIMEOUTS, published, spec, workspace

pytestmark = [pytest.mark.both_backends, pytest.mark.integration]

REFERENCE = reference_profile("--delay", DELAY)
OTHER = AgentProfile(id="other-agent", command=REFERENCE.command)  # no policy given: reject
DENIED = "Permission denied for Run `echo list files`."
RAN = "Ran `echo list files`."


def make_runtime(agentctl: AgentctlServer) -> Runtime:
    executor = AgentctlExecutor(url=agentctl.url, token=agentctl.token(), config=TEST_CONFIG)
    return Runtime(profiles=[REFERENCE, OTHER], executors={"agentctl": executor}, timeouts=TIMEOUTS)


async def requested(rt: Runtime, execution_id: str, seen: int = 0) -> le.PermissionRequested:
    while len(found := published(rt, execution_id, le.PermissionRequested)) <= seen:
        await anyio.sleep(0.01)
    request: le.PermissionRequested = found[seen]
    return request


async def until(predicate: Any) -> None:
    while not predicate():
        await anyio.sleep(0.01)


async def test_an_agent_of_ones_own_is_refused_by_default(
    agentctl: AgentctlServer, tmp_path: Path
) -> None:
    async with make_runtime(agentctl) as rt:
        with anyio.fail_after(30):
            ref = await rt.launch(_spec(tmp_path, "other-agent"))
            result = await rt.prompt(ref.id, "list files [[permission]]")
            assert DENIED in result.agent_message
            (resolved,) = published(rt, ref.id, le.PermissionResolved)
            assert (resolved.option_id, resolved.decided_by) == ("reject_once", "policy")
            await rt.stop(ref.id, "done")


async def test_ask_over_agentctl(agentctl: AgentctlServer, tmp_path: Path) -> None:
    """The app answers through ``respond_permission``; agentctl delivers it to the agent. A
    cancel withdraws the question (nothing is sent to agentctl) and a late answer is
    refused with a typed error."""
    async with make_runtime(agentctl) as rt, anyio.create_task_group() as tg:
        with anyio.fail_after(30):
            ref = await rt.launch(_spec(tmp_path, "other-agent", permission_policy="ask"))
            await rt.wait_ready(ref.id)
            results: list[PromptResult] = []

            async def prompt() -> None:
                results.append(await rt.prompt(ref.id, "list files [[permission]]"))

            tg.start_soon(prompt)
            request = await requested(rt, ref.id)
            assert request.execution_id == ref.id and request.policy == "ask"
            assert request.tool_call.title == "Run `echo list files`"
            assert [o.option_id for o in request.options] == [
                "allow_once",
                "allow_always",
                "reject_once",
                "reject_always",
            ]
            with pytest.raises(PermissionOptionNotOffered):
                await rt.respond_permission(ref.id, request.request_id, "sudo")
            await rt.respond_permission(ref.id, request.request_id, "allow_once")
            with pytest.raises(PermissionAlreadyResolved):
                await rt.respond_permission(ref.id, request.request_id, "allow_once")
            await until(lambda: len(results) == 1)
            assert RAN in results[0].agent_message

            # withdrawn by a cancel, then answered too late
            tg.start_soon(prompt)
            request = await requested(rt, ref.id, seen=1)
            await rt.cancel(ref.id)
            await until(lambda: len(results) == 2)
            assert results[1].stop_reason == "cancelled"
            with pytest.raises(PermissionAlreadyResolved, match="withdrawn"):
                await rt.respond_permission(ref.id, request.request_id, "allow_once")
            late = published(rt, ref.id, le.PermissionResolved)[-1]
            assert (late.request_id, late.outcome) == (request.request_id, "cancelled")

            # the execution goes on, and asks again
            tg.start_soon(prompt)
            request = await requested(rt, ref.id, seen=2)
            await rt.respond_permission(ref.id, request.request_id, "reject_once")
            await until(lambda: len(results) == 3)
            assert DENIED in results[2].agent_message
            await rt.stop(ref.id, "done")


def _spec(tmp_path: Path, profile: str, **kw: Any) -> LaunchSpec:
    return msgspec.structs.replace(spec(workspace(tmp_path)), agent_profile_id=profile, **kw)
