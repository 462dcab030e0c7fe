"""``kill -9`` of a real app (``tests/peers/durable_app.py``, on the public API) mid-turn and
between turns, with the stdio reference agent, on SQLite and PostgreSQL, the app on trio and on
asyncio; then a new app process on the same store. Every execution is accounted for (lost with
its reason: a stdio agent cannot outlive its pipes), no agent process is left without an owner
(agents that ignore stdin EOF are ended by the recovery), the conversation comes back with a
relaunch, and the events from before the crash replay by sequence number, none lost or
doubled. Then a bounded kill/restart loop at random points. (The real agentctl binary:
tests/agentctl/test_durable_agentctl.py.)"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from .durable_helpers import (
    PAIRWISE,
    App,
    agents_of,
    check_log,
    kill_restart_loop,
    store_config_for,
)


@pytest.mark.parametrize(("kind", "app_backend", "turn"), PAIRWISE)
def test_kill_9_with_stdio_agents(
    kind: str, turn: str, app_backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store_config = store_config_for(kind, request, tmp_path)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    base = {
        **store_config,
        "executor": "stdio",
        "workspace": str(workspace),
        "backend": app_backend,
        # agents that outlive the app's pipes: recovery must end them (codex-acp does this)
        "agent_args": [
            "--delay",
            "0",
            "--fault",
            "ignore_eof",
            "--sessions-dir",
            str(tmp_path / "sessions"),
        ],
    }
    first = App(base, tmp_path, launch=2, turn=turn, then="wait")
    ids = first.read_until("ready")
    sessions = first.lines["sessions"]
    assert len(agents_of(first.config["marker"])) == 2
    first.kill()
    assert len(agents_of(first.config["marker"])) == 2  # orphaned, running
    second = App(base, tmp_path, recover=True, then="stop")
    recovered = second.read_until("recovered")
    assert agents_of(first.config["marker"]) == []  # ended by the recovery, nothing orphaned
    assert set(recovered) == set(ids)
    for execution_id in ids:
        info = recovered[execution_id]
        assert info["status"] == "FAILED" and info["error"], info
        assert info["acp_session_id"] == sessions[execution_id]
        kinds = [k for _, k in info["events"]]
        assert kinds[-1] == "AgentLost"
        assert ("PromptInterrupted" in kinds) == (turn == "mid")
    check_log(first.seen(), recovered, ids)
    prompted = second.read_until("prompted")
    second.read_until("done")
    second.close()
    for execution_id in ids:  # relaunched: a new agent, the conversation loaded
        assert prompted[execution_id]["stop_reason"] == "end_turn", prompted
        assert prompted[execution_id]["acp_session_id"] == sessions[execution_id]
    assert agents_of(second.config["marker"]) == []


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_kill_restart_loop_accounts_for_everything(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Four rounds, each killed at a random point (during recovery, a launch, a turn, or
    at rest), on SQLite and on PostgreSQL, the app alternating trio and asyncio: after each
    restart every execution ever launched is there, lost with a reason (stdio) and
    relaunched, the agents of every earlier round are gone, every log is numbered without a
    gap, and what the killed app had seen of each is its beginning, event for event."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    base = {
        **store_config_for(kind, request, tmp_path),
        "executor": "stdio",
        "workspace": str(workspace),
        "agent_args": [
            "--delay",
            "0",
            "--fault",
            "ignore_eof",
            "--sessions-dir",
            str(tmp_path / "sessions"),
        ],
    }
    markers: list[str] = []
    started = time.monotonic()

    def each_round(app: App, recovered: dict[str, Any]) -> None:
        for info in recovered.values():
            assert info["status"] == "FAILED" and info["error"], info
            seqs = [seq for seq, _ in info["events"]]
            assert seqs == list(range(1, len(seqs) + 1))
        for marker in markers:
            assert agents_of(marker) == [], "an agent of an earlier round is orphaned"
        markers.append(app.config["marker"])

    final = kill_restart_loop(base, tmp_path, each_round)
    for marker in [*markers, final.config["marker"]]:
        assert agents_of(marker) == []
    assert time.monotonic() - started < 60
