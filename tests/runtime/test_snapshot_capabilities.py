"""What an agent's initialize answered reaches the runtime's Execution snapshot, including the
fields acpfsm does not model (``InitializeResult.unmodelled``)."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from acpfsm.adapters.acp.process import ShutdownPolicy
from acpfsm.runtime import LaunchSpec, Runtime, StdioExecutor, WorkspaceRef, reference_profile

pytestmark = pytest.mark.integration

FAKE_AGENT = Path(__file__).parents[1] / "adapters" / "fake_agents" / "fake_acp_agent.py"
FAST_SHUTDOWN = ShutdownPolicy(stdin_close_wait=1.0, term_wait=1.0, kill_wait=1.0)


async def test_the_snapshot_shows_what_the_agent_sent_that_acpfsm_does_not_model(
    tmp_path: Path,
) -> None:
    profile = reference_profile(id="fake", command=(sys.executable, str(FAKE_AGENT)))
    executor = StdioExecutor(shutdown=FAST_SHUTDOWN)
    async with Runtime(profiles=[profile], executors={"stdio": executor}) as rt:
        spec = LaunchSpec(agent_profile_id="fake", workspace=WorkspaceRef(path=str(tmp_path)))
        ref = await rt.launch(spec)
        with anyio.fail_after(10):
            while rt.get_execution(ref.id).status != "READY":
                await anyio.sleep(0.01)
        caps = rt.get_execution(ref.id).agent_capabilities
        assert caps is not None
        assert caps.agent.name == "fake-acp-agent"
        assert caps.unmodelled["agentCapabilities"] == {"auth": {"logout": {}}}
