"""`acpfsm conform` against real processes: green on both peers, and failures with evidence."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from acpfsm.runtime.tools.conform import ConformReport, Status, main, render_table, run_battery

pytestmark = pytest.mark.integration

REFERENCE = [sys.executable, "-m", "acpfsm.adapters.reference_agent"]
SDK_AGENT = [sys.executable, str(Path(__file__).parents[1] / "peers" / "sdk_agent.py")]

ALL_CHECKS = [
    "initialize",
    "capabilities",
    "session_new",
    "unknown_method",
    "load_unknown",
    "prompt_turn",
    "load_known",
    "cancel",
    "steer",
    "set_mode",
    "config_mode",
    "config_model",
    "legacy_set_model",
    "malformed_input",
    "stdout_clean",
    "stdin_close",
    "version_negotiation",
]


def statuses(report: ConformReport) -> dict[str, str]:
    return {c.id: c.status.value for c in report.checks}


async def test_the_reference_agent_passes_everything() -> None:
    report = await run_battery(REFERENCE, check_timeout=10)
    assert [c.id for c in report.checks] == ALL_CHECKS
    assert set(statuses(report).values()) == {"pass"}, render_table(report)
    assert report.agent.startswith("acpfsm-reference-agent")
    detail = {c.id: c.detail for c in report.checks}
    assert "session_unknown: the lifecycle falls back to session/new" in detail["load_unknown"]
    assert detail["cancel"].startswith("stopReason cancelled")


async def test_the_sdk_agent_is_green() -> None:
    report = await run_battery(SDK_AGENT, check_timeout=10)
    assert report.ok, render_table(report)
    assert report.agent == "sdk-scripted-agent 1.0"
    s = statuses(report)
    assert s["prompt_turn"] == s["cancel"] == s["load_known"] == s["config_model"] == "pass"
    # not advertised, hence not applicable: no promptQueueing, no mode option, no legacy models
    assert s["steer"] == s["config_mode"] == s["legacy_set_model"] == "n/a"


async def test_authentication_required_is_not_applicable_not_a_failure() -> None:
    report = await run_battery([*REFERENCE, "--fault", "auth_required"], check_timeout=10)
    assert report.ok, render_table(report)
    s = statuses(report)
    assert s["session_new"] == s["load_unknown"] == s["prompt_turn"] == "n/a"
    assert s["cancel"] == s["set_mode"] == "n/a"
    assert s["unknown_method"] == s["malformed_input"] == s["stdin_close"] == "pass"
    session_new = next(c for c in report.checks if c.id == "session_new")
    assert "needs authentication" in session_new.detail and "reference-login" in session_new.detail


async def test_a_session_load_that_fails_the_lifecycle_is_reported_as_such() -> None:
    report = await run_battery([*REFERENCE, "--fault", "load_internal"], check_timeout=10)
    load_unknown = next(c for c in report.checks if c.id == "load_unknown")
    assert load_unknown.status is Status.PASS
    assert "inconclusive: the lifecycle fails the session init and keeps" in load_unknown.detail
    load_known = next(c for c in report.checks if c.id == "load_known")
    assert load_known.status is Status.FAIL  # a completed turn, then "Session not found"
    assert not report.ok


async def test_ignored_cancel_and_ignored_eof_fail_with_evidence() -> None:
    agent = [*REFERENCE, "--fault", "ignore_cancel", "--fault", "ignore_eof"]
    report = await run_battery(agent, check_timeout=2)
    failed = {c.id: c for c in report.failed}
    assert set(failed) == {"cancel", "stdin_close"}, render_table(report)
    cancel = failed["cancel"]
    assert cancel.detail.startswith("stopReason 'end_turn'")
    assert any('"method":"session/cancel"' in line for line in cancel.evidence)
    assert any('"stopReason":"end_turn"' in line for line in cancel.evidence)
    assert "still running" in failed["stdin_close"].detail
    text = render_table(report)
    assert "cancel: evidence" in text and "→ " in text


async def test_a_hung_agent_fails_with_a_timeout_not_a_hang() -> None:
    report = await run_battery([*REFERENCE, "--fault", "slow_start=30"], check_timeout=0.5)
    s = statuses(report)
    assert s["initialize"] == s["version_negotiation"] == "fail"
    assert {s[c] for c in ALL_CHECKS[1:-2]} == {"n/a"}
    initialize = report.checks[0]
    assert initialize.detail == "timed out after 0.5 s: the agent did not answer"
    assert initialize.evidence and '"method":"initialize"' in initialize.evidence[0]
    assert report.seconds < 15


async def test_an_agent_that_cannot_start() -> None:
    report = await run_battery(["/nonexistent/agent-binary"], check_timeout=5)
    assert statuses(report)["initialize"] == "fail"
    assert "cannot start agent" in report.checks[0].detail
    assert not report.ok


def test_cli_json_junit_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junit = tmp_path / "conform.xml"
    assert main(["--json", "--junit-xml", str(junit), "--timeout", "10", "--", *REFERENCE]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True
    assert data["summary"] == {"pass": len(ALL_CHECKS), "fail": 0, "n/a": 0}
    assert data["command"] == REFERENCE
    first = data["checks"][0]
    assert set(first) == {"id", "title", "status", "detail", "evidence", "seconds"}
    suite = ET.parse(junit).getroot()
    assert suite.tag == "testsuite" and suite.get("tests") == str(len(ALL_CHECKS))
    assert suite.get("failures") == "0"

    bad = [*REFERENCE, "--fault", "ignore_cancel"]
    assert main(["--junit-xml", str(junit), "--timeout", "5", "--", *bad]) == 1
    out = capsys.readouterr().out
    assert "cancel" in out and "fail" in out
    suite = ET.parse(junit).getroot()
    assert suite.get("failures") == "1"
    (failure,) = suite.iter("failure")
    assert failure.get("message", "").startswith("stopReason 'end_turn'")

    sdk = main(["--junit-xml", str(junit), "--timeout", "10", "--", *SDK_AGENT])
    assert sdk == 0
    suite = ET.parse(junit).getroot()
    assert int(suite.get("skipped", "0")) == 3
    capsys.readouterr()

    assert main([]) == 2
    assert main(["--timeout", "0", "--", *REFERENCE]) == 2
