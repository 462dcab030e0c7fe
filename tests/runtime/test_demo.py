"""`acpfsm demo` runs the whole life on the reference agent and writes its trace."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_demo_runs_a_full_life(tmp_path: Path, backend: str) -> None:
    trace = tmp_path / "trace.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "acpfsm.tools.cli",
            "demo",
            "--backend",
            backend,
            "--workspace",
            str(tmp_path / "ws"),
            "--trace",
            str(trace),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for step in ("Steer a running turn", "the cancel escalates", "Relaunch resumed", "Where each"):
        assert step in out
    assert "the agent calls the app's count_words" in out
    assert "Tool count_words returned: 7 words." in out
    assert "same ACP session: True" in out
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    assert f"{len(records)} transitions written to" in out
    events = {(r["chart"], r["event"]) for r in records}
    assert ("prompt_generation", "steered") in events
    assert any(
        r["chart"] == "prompt_generation" and r["target"] == "cancel_escalated" for r in records
    )
    assert ("session_init", "load_succeeded") in events
    assert ("execution", "stop_requested") in events
