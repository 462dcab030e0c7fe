"""``kill -9`` of a real app (``tests/peers/durable_app.py``) driving agents through the real
agentctl binary, on SQLite and PostgreSQL, the app on trio and on asyncio: the restarted app
finds the same agent processes, reattaches a new stream in the same ACP session (no session/new:
``agent.recovered``, then READY with ``agent.boot_ready``), the next prompt runs there, a turn
that was in flight is closed as interrupted, and the events from before the crash replay by
sequence number, none lost or doubled."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.runtime.durable_helpers import (
    PAIRWISE,
    App,
    check_log,
    kill_restart_loop,
    store_config_for,
)

from .agentctl_server import AgentctlServer

pytestmark = pytest.mark.integration


def _config(
    kind: str,
    app_backend: str,
    agentctl: AgentctlServer,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> dict[str, Any]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return {
        **store_config_for(kind, request, tmp_path),
        "executor": "agentctl",
        "url": agentctl.url,
        "token": agentctl.token(),  # a nonce is traded once; the restarted app needs the token
        "workspace": str(workspace),
        "backend": app_backend,
        "agent_args": ["--delay", "0", "--sessions-dir", str(tmp_path / "sessions")],
    }


@pytest.mark.parametrize(("kind", "app_backend", "turn"), PAIRWISE)
def test_kill_9_with_agentctl(
    kind: str,
    turn: str,
    app_backend: str,
    agentctl: AgentctlServer,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    base = _config(kind, app_backend, agentctl, tmp_path, request)
    first = App(base, tmp_path, launch=2, turn=turn, then="wait")
    ids = first.read_until("ready")
    sessions = first.lines["sessions"]
    pids = sorted(agentctl.agents())
    assert len(pids) == 2
    first.kill()
    second = App(base, tmp_path, recover=True, then="stop")
    recovered = second.read_until("recovered")
    assert sorted(agentctl.agents()) == pids  # the same agent processes, reattached
    for execution_id in ids:
        info = recovered[execution_id]
        assert info["status"] == "READY", info
        assert info["acp_session_id"] == sessions[execution_id]
        kinds = [k for _, k in info["events"]]
        at = len(kinds) - 1 - kinds[::-1].index("AgentRecovered")  # this start's recovery
        assert kinds[at : at + 2] == ["AgentRecovered", "AgentBootReady"], kinds
        assert ("PromptInterrupted" in kinds) == (turn == "mid")
        assert "AcpSessionCreated" not in kinds[len(first.seen()[execution_id]) :]
    check_log(first.seen(), recovered, ids)
    prompted = second.read_until("prompted")
    for execution_id in ids:  # the same agent and session take the next prompt
        assert prompted[execution_id]["stop_reason"] == "end_turn", prompted
        assert prompted[execution_id]["acp_session_id"] == sessions[execution_id]
        assert prompted[execution_id]["generation"] > 64  # past the stored reservation
    assert sorted(agentctl.agents()) == pids
    second.read_until("done")
    second.close()
    assert agentctl.agents() == []  # stopped by the second app: nothing left


@pytest.mark.parametrize(("kind", "app_backend"), [("sqlite", "asyncio"), ("postgres", "trio")])
def test_kill_9_then_agents_gone_with_agentctl(
    kind: str,
    app_backend: str,
    agentctl: AgentctlServer,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """While the app is down one instance is deleted and the other's agent process dies: the
    restarted app reports both lost with their reason (``ExecutionLost``), their ACP sessions
    kept, leaves no instance behind, and a relaunch brings each conversation back in a new
    agent."""
    base = _config(kind, app_backend, agentctl, tmp_path, request)
    first = App(base, tmp_path, launch=2, turn="between", then="wait")
    deleted, died = first.read_until("ready")
    sessions = first.lines["sessions"]
    first.kill()
    response = httpx.delete(
        f"{agentctl.url}/api/v1/instances/{deleted}",
        headers={"Authorization": f"Bearer {agentctl.token()}"},
        timeout=10.0,
    )
    response.raise_for_status()
    deadline = time.monotonic() + 30
    while len(agentctl.agents()) != 1:  # the deleted instance's agent ends with it
        assert time.monotonic() < deadline, agentctl.agents()
        time.sleep(0.05)
    os.kill(agentctl.agents()[0], signal.SIGKILL)  # the other instance stays, its agent dead
    second = App(base, tmp_path, recover=True, then="stop")
    recovered = second.read_until("recovered")
    assert set(recovered) == {deleted, died}
    assert recovered[deleted]["error"].startswith(
        "the agent instance ended while the app was down"
    ), recovered[deleted]
    assert recovered[died]["error"].startswith("the agent process ended while the app was down"), (
        recovered[died]
    )
    for execution_id in (deleted, died):
        info = recovered[execution_id]
        assert info["status"] == "FAILED", info
        assert info["acp_session_id"] == sessions[execution_id]
        assert [k for _, k in info["events"]][-1] == "AgentLost"
    check_log(first.seen(), recovered, [deleted, died])
    prompted = second.read_until("prompted")
    for execution_id in (deleted, died):  # relaunched: a new agent, the conversation loaded
        assert prompted[execution_id]["stop_reason"] == "end_turn", prompted
        assert prompted[execution_id]["acp_session_id"] == sessions[execution_id]
    second.read_until("done")
    second.close()
    assert agentctl.agents() == []
    assert agentctl.instances() == []


def test_a_kill_restart_loop_with_agentctl(
    agentctl: AgentctlServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Four rounds on SQLite, the app alternating trio and asyncio, each killed at a random
    point (during recovery, a launch, a turn, or at rest): after each restart every execution
    ever launched is there, reattached READY or lost with its reason, every log is numbered
    without a gap and begins with what the killed app had seen; at the end no agent and no
    instance is left."""
    base = _config("sqlite", "trio", agentctl, tmp_path, request)
    started = time.monotonic()

    def each_round(app: App, recovered: dict[str, Any]) -> None:
        for info in recovered.values():
            assert info["status"] == "READY" or (info["status"] == "FAILED" and info["error"])

    kill_restart_loop(base, tmp_path, each_round)
    assert agentctl.agents() == []  # every agent of every round: reattached, then stopped
    assert agentctl.instances() == []
    assert time.monotonic() - started < 60
