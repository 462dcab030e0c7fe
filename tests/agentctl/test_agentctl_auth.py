"""Authentication behind the real agentctl (v0.95.1): the reference agent's ``auth_required``
fault surfaces as AuthenticationRequired with its methods, and ``auth_method`` authenticates
through agentctl's ``agent.session.authenticate`` first."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from acpfsm.runtime import AgentctlExecutor
from tests.runtime.real_agent_scenarios import check_authentication

from .agentctl_server import AgentctlServer
from .helpers import TEST_CONFIG, make_runtime, workspace

pytestmark = [pytest.mark.both_backends, pytest.mark.integration]


async def test_the_reference_agent_wanting_authentication(
    agentctl: AgentctlServer, tmp_path: Path
) -> None:
    executor = AgentctlExecutor(url=agentctl.url, nonce=agentctl.nonce, config=TEST_CONFIG)
    async with make_runtime({"agentctl": executor}, "--fault", "auth_required") as rt:
        with anyio.fail_after(60):
            await check_authentication(rt, workspace(tmp_path), "agentctl")
        agentctl.adopt_token(executor.token)
