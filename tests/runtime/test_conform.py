"""`acpfsm conform` against real processes: green on both peers, and failures with evidence."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, cast

import msgspec
import pytest

from acpfsm.tools.conform import (
    NONEXISTENT_VERSION,
    ConformReport,
    Status,
    _Wire,
    main,
    render_table,
    run_battery,
)
from tests.peers.sdk_corpus import SdkCorpus

pytestmark = pytest.mark.integration

REFERENCE = [sys.executable, "-m", "acpfsm.adapters.reference_agent"]
SDK_AGENT = [sys.executable, str(Path(__file__).parents[1] / "peers" / "sdk_agent.py")]
FAKE_AGENT = [
    sys.executable,
    str(Path(__file__).parents[1] / "adapters" / "fake_agents" / "fake_acp_agent.py"),
]

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
    "schema",
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
    # the proof it had the cancel: it answered a request sent after it, then went on
    assert "the agent had read the cancel" in cancel.detail
    lines = cancel.evidence
    sent = next(i for i, line in enumerate(lines) if '"method":"session/cancel"' in line)
    probe = next(i for i, line in enumerate(lines) if '"code":-32601' in line)
    answer = next(i for i, line in enumerate(lines) if '"stopReason":"end_turn"' in line)
    assert sent < probe < answer
    assert any(line.startswith("… ") and "session/update(s)" in line for line in lines)
    assert "still running" in failed["stdin_close"].detail
    text = render_table(report)
    assert "cancel: evidence" in text and "→ " in text


async def test_a_hung_agent_fails_with_a_timeout_not_a_hang() -> None:
    report = await run_battery([*REFERENCE, "--fault", "slow_start=30"], check_timeout=0.5)
    s = statuses(report)
    assert s["initialize"] == s["version_negotiation"] == "fail"
    assert {s[c] for c in ALL_CHECKS[1:-3]} == {"n/a"}
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


async def test_an_agent_claiming_a_version_that_does_not_exist_fails_negotiation() -> None:
    report = await run_battery([*REFERENCE, "--fault", "echo_version"], check_timeout=10)
    failed = {c.id: c for c in report.failed}
    assert set(failed) == {"version_negotiation"}, render_table(report)
    check = failed["version_negotiation"]
    assert check.detail.startswith(f"asked for {NONEXISTENT_VERSION}, a protocol version that")
    assert f'"protocolVersion":{NONEXISTENT_VERSION}' in check.evidence[0]  # what was asked
    assert f'"result":{{"protocolVersion":{NONEXISTENT_VERSION}' in check.evidence[-1]


async def test_fields_acpfsm_does_not_model_reach_the_report() -> None:
    report = await run_battery(FAKE_AGENT, check_timeout=10)
    kept = {
        "agentCapabilities": {"auth": {"logout": {}}},
        "unknownTopLevelField": {"tolerated": True},
    }
    assert report.unmodelled == kept
    assert 'not modelled by acpfsm (kept): {"agentCapabilities"' in render_table(report)
    capabilities = next(c for c in report.checks if c.id == "capabilities")
    assert "session list/resume" in capabilities.detail
    assert msgspec.to_builtins(report)["unmodelled"] == kept  # what --json prints


# The official SDK's example agents (from its pinned sdist, fetched into .cache/): a fair
# verdict, with every check pinned. Their turns end at once, so no cancel can act on them (n/a,
# never a fail); echo_agent.py answers initialize with whatever version it is asked for.
SDK_EXAMPLE_VERDICTS: dict[str, dict[str, str]] = {
    "agent.py": {
        "initialize": "pass",
        "capabilities": "pass",
        "session_new": "pass",
        "unknown_method": "pass",
        "load_unknown": "n/a",  # loadSession not advertised
        "prompt_turn": "pass",
        "load_known": "n/a",
        "cancel": "n/a",
        "steer": "n/a",  # promptQueueing not advertised
        "set_mode": "n/a",  # no modes
        "config_mode": "n/a",
        "config_model": "n/a",
        "legacy_set_model": "n/a",
        "malformed_input": "pass",
        "stdout_clean": "pass",
        "stdin_close": "pass",
        "version_negotiation": "pass",
        "schema": "pass",  # every message both ways valid ACP v1
    },
}
SDK_EXAMPLE_VERDICTS["echo_agent.py"] = {
    **SDK_EXAMPLE_VERDICTS["agent.py"],
    "version_negotiation": "fail",
}
RACE_LOST = ("the turn ended before the cancel could act", "before its first update")


@pytest.mark.parametrize("example", sorted(SDK_EXAMPLE_VERDICTS))
async def test_the_sdk_example_agents_get_a_fair_verdict(
    sdk_corpus: SdkCorpus, example: str
) -> None:
    agent = [sys.executable, str(sdk_corpus.examples / example)]
    report = await run_battery(agent, check_timeout=10)
    assert statuses(report) == SDK_EXAMPLE_VERDICTS[example], render_table(report)
    cancel = next(c for c in report.checks if c.id == "cancel")
    assert any(reason in cancel.detail for reason in RACE_LOST), cancel.detail
    if "could act" in cancel.detail:  # the evidence: the turn's answer came first
        lines = cancel.evidence
        answer = next(i for i, line in enumerate(lines) if '"stopReason":"end_turn"' in line)
        probe = [i for i, line in enumerate(lines) if '"code":-32601' in line]
        assert not probe or probe[-1] > answer
    if example == "echo_agent.py":
        version = next(c for c in report.checks if c.id == "version_negotiation")
        assert f'{{"protocolVersion":{NONEXISTENT_VERSION}}}' in version.evidence[-1]


async def test_no_verdict_from_a_race_the_battery_lost() -> None:
    # this agent reads nothing while a turn runs, and its turns are short: neither the cancel
    # nor the second prompt of the steer can reach a running turn (it advertises queueing)
    report = await run_battery([*FAKE_AGENT, "--queueing", "--sequential"], check_timeout=10)
    checks = {c.id: c for c in report.checks}
    cancel, steer = checks["cancel"], checks["steer"]
    assert cancel.status is steer.status is Status.NA, render_table(report)
    assert "'end_turn'" in cancel.detail
    assert "the turn ended before the cancel could act" in cancel.detail
    assert "its answer came before the agent answered a request sent after" in cancel.detail
    assert cancel.detail.endswith("(3 tries)")
    lines = cancel.evidence
    sent = next(i for i, line in enumerate(lines) if '"method":"session/cancel"' in line)
    answer = next(i for i, line in enumerate(lines) if '"stopReason"' in line)
    probe = next(i for i, line in enumerate(lines) if "-32601" in line)
    assert sent < answer < probe  # the fake agent writes JSON with spaces
    assert steer.detail == (
        "every turn ended before the agent took the second prompt in, so nothing was queued "
        "(3 tries)"
    )


def _cancelled(stop: str, took: float, read_by: float | None = None) -> Any:
    from acpfsm.tools.conform import _Answer, _Cancelled, _TurnEnd

    end = _TurnEnd(stop=stop, answer=_Answer(at=10 + took), at=10 + took)
    return _Cancelled(sent=10.0, end=end, updates=2, read_by=read_by, updates_after_read=1)


@pytest.mark.parametrize(
    ("seen", "status", "says"),
    [
        (_cancelled("cancelled", 3.0), Status.PASS, "stopReason cancelled 3.00 s after"),
        (_cancelled("end_turn", 0.01, read_by=10.005), Status.FAIL, "the agent had read the"),
        (_cancelled("end_turn", 2.0), Status.FAIL, "went on more than 0.5 s after the cancel"),
        (_cancelled("max_tokens", 0.01), Status.NA, "ended before the cancel could act; CLAUSE"),
        (_cancelled("stopped", 0.01), Status.FAIL, "'stopped' 0.01 s after session/cancel (2"),
    ],
)
def test_the_cancel_verdict_judges_only_what_was_seen(seen: Any, status: Status, says: str) -> None:
    from acpfsm.tools.conform import _judge_cancel

    verdict = _judge_cancel(seen, "CLAUSE")
    assert verdict.status is status and says in verdict.detail, verdict.detail


def test_an_answer_nested_too_deep_is_garbage_not_a_crash() -> None:
    """A hostile agent's line nested past the recursion limit is recorded as garbage, as any
    other undecodable line (the battery goes on)."""
    wire = _Wire(cast(Any, None))
    depth = sys.getrecursionlimit() + 1000
    deep = b'{"jsonrpc": "2.0", "id": 1, "result": ' + b"[" * depth + b"]" * depth + b"}"
    wire._line(deep)
    assert wire.garbage == [deep]


async def test_a_malformed_agent_message_is_a_failed_check_not_a_crash() -> None:
    """A text chunk without ``text`` (and a chunk with a terminal escape and a lone surrogate,
    and a tool call of no ACP kind): each is a failed check quoting the message safely; the
    battery goes on."""
    report = await run_battery(FAKE_AGENT, prompt="malformed please", check_timeout=10)
    failed = {c.id: c for c in report.failed}
    prompt_turn = failed["prompt_turn"]
    assert prompt_turn.detail == "1 session/update(s) do not fit ACP v1"
    assert '"content": {"type": "text"}' in prompt_turn.evidence[0]
    text = failed["schema:agent:session/update:/params/update/content/text"]
    assert "expected required member text (TextContent); got (absent)" in text.detail
    assert '"sessionUpdate": "agent_message_chunk"' in text.evidence[0]
    kind = failed["schema:agent:session/update:/params/update/kind"]
    assert "at /params/update/kind: expected one of" in kind.detail
    table = render_table(report)
    assert "\x1b" not in table and "\\u001b[2J" in table  # the escape is shown, not obeyed
    assert [c.id for c in report.checks][: len(ALL_CHECKS)] == ALL_CHECKS


def test_the_report_of_a_malformed_agent_is_always_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junit = tmp_path / "conform.xml"
    args = ["--json", "--junit-xml", str(junit), "--prompt", "malformed please", "--timeout", "10"]
    assert main([*args, "--", *FAKE_AGENT]) == 1
    out = capsys.readouterr().out
    assert out.isascii()  # whatever the agent sent, the JSON prints anywhere
    data = json.loads(out)
    assert data["ok"] is False and data["summary"]["fail"] >= 3
    assert any(c["id"] == "schema:agent:session/update:/params/update/content/text"
               for c in data["checks"])  # fmt: skip
    suite = ET.parse(junit).getroot()
    assert int(suite.get("failures", "0")) == data["summary"]["fail"]


async def test_an_agent_that_refuses_to_run_as_root_is_named_and_never_passes() -> None:
    """Claude Code's adapters, run as root without IS_SANDBOX, refuse session/new (and
    session/load): the verdict names that cause, and no check passes on the refusal."""
    report = await run_battery([*FAKE_AGENT, "--refuse-root"], check_timeout=10)
    s = statuses(report)
    assert s["session_new"] == s["load_unknown"] == "fail", render_table(report)
    (cause,) = report.causes
    assert cause.startswith("the agent refuses to run as root")
    assert "IS_SANDBOX=1" in cause
    checks = {c.id: c for c in report.checks}
    assert checks["session_new"].detail.startswith(f"session/new refused: {cause} (")
    assert checks["load_unknown"].detail.startswith(f"session/load refused: {cause} (")
    assert "root/sudo privileges" in checks["load_unknown"].detail  # the agent's own words
    assert checks["prompt_turn"].status is Status.NA
    assert "refuses to run as root" in checks["prompt_turn"].detail
    passed = [c for c in report.checks if c.status is Status.PASS]
    assert not any("root" in c.detail for c in passed)
    assert f"cause: {cause}" in render_table(report)
    assert msgspec.to_builtins(report)["causes"] == [cause]
