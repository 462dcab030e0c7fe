"""``rt.turn`` over the real agentctl (v0.95.1) running the reference agent: the same checks
as over stdio (tests/runtime/real_agent_scenarios.py), under trio and asyncio."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from acpfsm.runtime import AgentctlExecutor
from tests.runtime.real_agent_scenarios import check_turns

from .agentctl_server import AgentctlServer
from .helpers import TEST_CONFIG, make_runtime, spec, workspace

pytestmark = [pytest.mark.both_backends, pytest.mark.integration]


async def test_turns_stream_their_own_updates_and_leaving_early_cancels(
    agentctl: AgentctlServer, tmp_path: Path
) -> None:
    executor = AgentctlExecutor(url=agentctl.url, nonce=agentctl.nonce, config=TEST_CONFIG)
    async with make_runtime({"agentctl": executor}) as rt:
        with anyio.fail_after(30):
            ref = await rt.launch(spec(workspace(tmp_path)))
            agentctl.adopt_token(executor.token)
        await check_turns(rt, ref.id, session_generation=1)
        with anyio.fail_after(30):
            await rt.stop(ref.id, "done")
