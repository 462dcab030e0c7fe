"""``kill -9`` of a real app (``tests/peers/durable_app.py``) driving agents through the real
agentctl binary, on SQLite and PostgreSQL, the app on trio and on asyncio: the restarted app
finds the same agent processes, reattaches a new stream in the same ACP session (no session/new:
``agent.recovered``, then READY with ``agent.boot_ready``), the next prompt runs there, a turn
that was in flight is closed as interrupted, and the events from before the crash replay by
sequence number, none lost or doubled."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.runtime.durable_helpers import PAIRWISE, App, check_log, store_config_for

from .agentctl_server import AgentctlServer

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("kind", "app_backend", "turn"), PAIRWISE)
def test_kill_9_with_agentctl(
    kind: str,
    turn: str,
    app_backend: str,
    agentctl: AgentctlServer,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    store_config = store_config_for(kind, request, tmp_path)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    base = {
        **store_config,
        "executor": "agentctl",
        "url": agentctl.url,
        "token": agentctl.token(),  # a nonce is traded once; the restarted app needs the token
        "workspace": str(workspace),
        "backend": app_backend,
        "agent_args": ["--delay", "0", "--sessions-dir", str(tmp_path / "sessions")],
    }
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
        assert kinds[-2:] == ["AgentRecovered", "AgentBootReady"], kinds
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
