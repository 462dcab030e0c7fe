"""session/load failures through agentctl take the SessionInit chart's stdio decisions.

Each failure shape the reference agent produces reaches us as agentctl's string projection
(``load session failed: failed to load session: {…}``), and is judged by that text as kandev
judges it (seed ``isSessionLoadFallbackErr``: message-only at the WebSocket boundary): the
canonical phrases and the Codex rollout shape fall back to session/new; the −32002 and −32601
objects closing the text are inconclusive, so the launch fails keeping the ACP session id
(over stdio the same answers are structured and fall back: tests/runtime/test_e2e_reference_agent.py).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import msgspec
import pytest

from acpfsm.adapters.agentctl.executor import AgentctlExecutor
from acpfsm.runtime import NotReadyForPrompts, Runtime, reference_profile

from .agentctl_server import AgentctlServer
from .helpers import DELAY, TEST_CONFIG, TIMEOUTS, session_of, spec, workspace

pytestmark = [pytest.mark.integration, pytest.mark.both_backends]

SHAPES = [
    ("load_method_not_found", False),
    ("load_not_found", False),
    ("load_rollout_missing", True),
    ("no_load", True),
    ("load_rollout_other", False),
    ("load_internal", False),
    ("load_auth", False),
]


async def test_session_load_failure_shapes(agentctl: AgentctlServer, tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    profiles = [reference_profile("--delay", DELAY)] + [
        reference_profile("--delay", DELAY, "--fault", fault, id=f"ref-{fault}")
        for fault, _ in SHAPES
    ]
    executor = AgentctlExecutor(url=agentctl.url, token=agentctl.token(), config=TEST_CONFIG)
    async with Runtime(
        profiles=profiles, executors={"agentctl": executor}, timeouts=TIMEOUTS
    ) as rt:
        with anyio.fail_after(60):
            first = await rt.launch(spec(ws))
            await rt.resume(first.id, "remember me")
            acp_id = rt.get_execution(first.id).acp_session_id
            await rt.stop(first.id, "done")
            for fault, falls_back in SHAPES:
                launched = await rt.launch(
                    msgspec.structs.replace(spec(ws, prior=acp_id), agent_profile_id=f"ref-{fault}")
                )
                await session_of(rt, launched.id).init.admission.wait()
                snap = rt.get_execution(launched.id)
                init_events = [
                    r.event
                    for r in rt.trace.for_execution(launched.id)
                    if r.chart == "session_init"
                ]
                assert "load_failed" in init_events, fault
                if falls_back:
                    assert snap.status == "READY", fault
                    assert snap.acp_session_id != acp_id, fault  # a new ACP session
                    assert "new_session_succeeded" in init_events, fault
                else:
                    assert snap.status == "FAILED", fault
                    assert snap.charts["session_init"] == "failed", fault
                    assert snap.acp_session_id == acp_id, fault  # identity kept for a retry
                    assert "session/load failed: load session failed" in snap.error_message
                    assert "new_session_succeeded" not in init_events, fault
                    with pytest.raises(NotReadyForPrompts):
                        await rt.prompt(launched.id, "x")
                await rt.stop(launched.id, "done")
    assert agentctl.instances() == []
