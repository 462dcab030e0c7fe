"""``rt.turn`` over stdio against the reference agent as a real subprocess."""

from __future__ import annotations

from pathlib import Path

import pytest

from acpfsm.adapters.acp.process import ShutdownPolicy
from acpfsm.adapters.acp.stdio import StdioConfig
from acpfsm.runtime import (
    LaunchSpec,
    Runtime,
    StdioExecutor,
    Timeouts,
    WorkspaceRef,
    reference_profile,
)

from .real_agent_scenarios import check_turns

pytestmark = [pytest.mark.both_backends, pytest.mark.integration]

FAST_SHUTDOWN = ShutdownPolicy(stdin_close_wait=1.0, term_wait=1.0, kill_wait=1.0)


async def test_turns_stream_their_own_updates_and_leaving_early_cancels(tmp_path: Path) -> None:
    executor = StdioExecutor(config=StdioConfig(cancel_timeout=2.0), shutdown=FAST_SHUTDOWN)
    async with Runtime(
        profiles=[reference_profile("--delay", "0.001")],
        executors={"stdio": executor},
        timeouts=Timeouts(cancel_wait=5.0, cancel_escalation=1.0),
    ) as rt:
        ref = await rt.launch(
            LaunchSpec(agent_profile_id="reference", workspace=WorkspaceRef(path=str(tmp_path)))
        )
        await check_turns(rt, ref.id, session_generation=1)
        await rt.stop(ref.id, "done")
