"""`acpfsm conform --agentctl URL` against the real agentctl running the reference agent.

The shared checks run through agentctl's WebSocket; the five that need the agent's raw stdio
are n/a "not observable through agentctl"; a session/load error leads to the same
classification and lifecycle decision as over stdio; the instance is deleted at the end,
also when checks fail.
"""

from __future__ import annotations

import json
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import anyio
import pytest

from acpfsm.tools.conform import (
    CHECKS,
    DEFAULT_LONG_PROMPT,
    NOT_OBSERVABLE_THROUGH_AGENTCTL,
    ConformReport,
    Status,
    main,
    render_table,
    run_agentctl_battery,
    run_battery,
)

from .agentctl_server import AgentctlServer

pytestmark = pytest.mark.integration

REFERENCE = [sys.executable, "-m", "acpfsm.adapters.reference_agent", "--delay", "0.01"]
ALL_CHECKS = [check_id for check_id, _ in CHECKS]
NOT_OBSERVABLE = {
    "unknown_method",
    "malformed_input",
    "stdout_clean",
    "stdin_close",
    "version_negotiation",
    "schema",
}


def statuses(report: ConformReport) -> dict[str, str]:
    return {c.id: c.status.value for c in report.checks}


def details(report: ConformReport) -> dict[str, str]:
    return {c.id: c.detail for c in report.checks}


def decision(detail: str) -> str:
    """``kind: what the lifecycle does`` from a load check's ``<error> → kind: what``."""
    assert " → " in detail, detail
    return detail.rsplit(" → ", 1)[1]


async def agents_gone(server: AgentctlServer) -> None:
    with anyio.move_on_after(5.0):
        while server.agents():
            await anyio.sleep(0.05)
    assert server.agents() == []


async def cleaned_up(server: AgentctlServer) -> None:
    """No instance left, and no agent process."""
    assert server.instances() == []
    await agents_gone(server)


def test_green_through_agentctl_json_and_junit(
    agentctl: AgentctlServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junit = tmp_path / "conform.xml"
    code = main(
        [
            "--json",
            "--junit-xml",
            str(junit),
            "--timeout",
            "10",
            "--agentctl",
            agentctl.url,
            "--token",
            agentctl.token(),
            "--",
            *REFERENCE,
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0, data
    keys = {"command", "agent", "agentctl", "checks", "seconds", "unmodelled", "causes", "ok"}
    keys.add("summary")
    assert set(data) == keys  # no token: a secret is never in a report
    assert data["unmodelled"] == {}  # agentctl does not forward the initialize answer
    assert data["ok"] is True
    assert data["command"] == REFERENCE
    assert data["agentctl"] == agentctl.url
    assert data["agent"].startswith("acpfsm-reference-agent")
    assert [c["id"] for c in data["checks"]] == ALL_CHECKS
    n_a = len(NOT_OBSERVABLE)  # the schema check too: agentctl forwards events, not messages
    assert data["summary"] == {"pass": len(ALL_CHECKS) - n_a, "fail": 0, "n/a": n_a}
    for check in data["checks"]:
        assert set(check) == {"id", "title", "status", "detail", "evidence", "seconds"}
        if check["id"] in NOT_OBSERVABLE:
            assert check["status"] == "n/a", check
            assert check["detail"].startswith(NOT_OBSERVABLE_THROUGH_AGENTCTL + ": "), check
        else:
            assert check["status"] == "pass", check
    by_id = {c["id"]: c["detail"] for c in data["checks"]}
    assert by_id["initialize"].startswith("agentctl's ACP handshake (protocolVersion 1)")
    assert "promptQueueing true" in by_id["capabilities"]
    assert "modes [default, plan, accept_edits]" in by_id["session_new"]
    # kandev judges agentctl's load failure by its text: a −32002 closing it is inconclusive
    assert decision(by_id["load_unknown"]) == (
        "inconclusive: the lifecycle fails the session init and keeps the ACP session id"
    )
    assert by_id["prompt_turn"].startswith("stopReason end_turn")
    assert by_id["cancel"].startswith("stopReason cancelled")
    assert by_id["steer"].startswith("the steer was accepted into the running turn")
    assert by_id["set_mode"] == "default → plan accepted with a session_mode event"
    assert by_id["config_model"].startswith("model: ref-fast → ref-smart, reflected in agentctl")

    suite = ET.parse(junit).getroot()
    assert suite.get("tests") == str(len(ALL_CHECKS))
    assert suite.get("failures") == "0" and suite.get("skipped") == str(n_a)
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["agentctl"] == agentctl.url
    anyio.run(cleaned_up, agentctl)


async def test_a_session_load_error_is_classified_as_kandev_does(agentctl: AgentctlServer) -> None:
    """Over stdio the error is structured; through agentctl it is text, judged as kandev
    judges it (seed ``isSessionLoadFallbackErr``): a −32002 object closing the text is
    inconclusive there, the Codex rollout object read from the text still falls back."""
    token = agentctl.token()
    inconclusive = "inconclusive: the lifecycle fails the session init and keeps the ACP session id"
    expected = {
        "load_not_found": (
            "session_unknown: the lifecycle falls back to session/new",
            inconclusive,
        ),
        "load_internal": (inconclusive, inconclusive),
        # the Codex shape: only an error naming the very id being loaded authorizes a fallback
        "load_rollout_missing": (
            "provider_rollout_missing: the lifecycle falls back to session/new",
        )
        * 2,
    }
    for fault, (lifecycle, through_agentctl) in expected.items():
        agent = [*REFERENCE, "--fault", fault]
        stdio = await run_battery(agent, check_timeout=10)
        remote = await run_agentctl_battery(agent, url=agentctl.url, token=token, check_timeout=10)
        for check_id in ("load_unknown", "load_known"):
            over_stdio = next(c for c in stdio.checks if c.id == check_id)
            through = next(c for c in remote.checks if c.id == check_id)
            assert over_stdio.status is through.status, (fault, check_id)
            assert decision(over_stdio.detail) == lifecycle, (fault, check_id)
            assert decision(through.detail) == through_agentctl, (fault, check_id)
        # the known session fails to load with the same error, after a completed turn
        assert statuses(remote)["load_known"] == "fail"
        assert details(remote)["load_unknown"].startswith("load session failed: ")
    await cleaned_up(agentctl)


async def test_failures_carry_evidence_and_the_instance_is_deleted(
    agentctl: AgentctlServer,
) -> None:
    agent = [*REFERENCE, "--fault", "ignore_cancel"]
    # agentctl does not show when the agent read the cancel: only a turn that goes on well
    # after it shows the cancel was ignored, so the cancelled turn is paced (the reference
    # agent's [[delay]]) to go on for about a second, within agentctl's 3 s join
    slow = f"{DEFAULT_LONG_PROMPT} [[delay:0.05]]"
    report = await run_agentctl_battery(
        agent, url=agentctl.url, nonce=agentctl.nonce, check_timeout=5, long_prompt=slow
    )
    failed = {c.id: c for c in report.failed}
    assert set(failed) == {"cancel"}, render_table(report)
    cancel = failed["cancel"]
    assert cancel.detail.startswith("stopReason 'end_turn'")
    assert cancel.detail.endswith("the turn went on more than 0.5 s after the cancel")
    assert any(line.startswith("→ cancel") for line in cancel.evidence)
    assert '"type":"complete"' in cancel.evidence[-1] and "end_turn" in cancel.evidence[-1]
    assert "cancel: evidence" in render_table(report)
    # the battery traded the nonce for the token, so the instance list is out of reach here:
    # its agent is gone (the other tests see the instance list empty)
    await agents_gone(agentctl)


async def test_a_hung_turn_fails_with_a_timeout_not_a_hang(agentctl: AgentctlServer) -> None:
    started = time.monotonic()
    report = await run_agentctl_battery(
        [*REFERENCE, "--fault", "hang"], url=agentctl.url, token=agentctl.token(), check_timeout=3
    )  # 3 s: a loaded machine needs more than 1 s to start the agent and answer initialize
    prompt_turn = next(c for c in report.checks if c.id == "prompt_turn")
    assert prompt_turn.status is Status.FAIL
    assert prompt_turn.detail == "timed out after 3 s: the agent did not answer"
    assert prompt_turn.evidence[0].startswith("→ prompt")
    assert statuses(report)["session_new"] == "pass"
    assert time.monotonic() - started < 15
    await cleaned_up(agentctl)


async def test_an_agent_agentctl_cannot_start_and_a_refused_token(
    agentctl: AgentctlServer,
) -> None:
    token = agentctl.token()
    report = await run_agentctl_battery(
        ["/nonexistent/agent"], url=agentctl.url, token=token, check_timeout=5
    )
    assert not report.ok
    s = statuses(report)
    assert s["initialize"] == "fail"
    assert "could not start the agent in an agentctl instance" in report.checks[0].detail
    assert "/nonexistent/agent" in report.checks[0].detail
    assert {s[c] for c in ALL_CHECKS[1:]} == {"n/a"}
    assert details(report)["stdin_close"].startswith(NOT_OBSERVABLE_THROUGH_AGENTCTL)
    assert details(report)["session_new"] == "the agent could not be started"
    await cleaned_up(agentctl)

    refused = await run_agentctl_battery(
        REFERENCE, url=agentctl.url, token="not-the-token", check_timeout=5
    )
    assert statuses(refused)["initialize"] == "fail"
    assert "401" in refused.checks[0].detail
    assert [c.status for c in refused.checks[1:]] == [Status.NA] * (len(ALL_CHECKS) - 1)
    await cleaned_up(agentctl)


def test_cli_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    url = "http://127.0.0.1:9"
    assert main(["--agentctl", url, "--", *REFERENCE]) == 2
    assert "--nonce N, its --token T or a --token-file FILE" in capsys.readouterr().err
    assert main(["--nonce", "n", "--", *REFERENCE]) == 2
    assert "--nonce need --agentctl URL" in capsys.readouterr().err
    assert main(["--agentctl", url, "--token", "t", "--cwd", "/tmp", "--", *REFERENCE]) == 2
    assert "--workspace DIR" in capsys.readouterr().err
    remote = ["--agentctl", "http://agentctl.example:39429", "--token", "t", "--", *REFERENCE]
    assert main(remote) == 2
    assert "not on this machine" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["--agentctl", url, "--nonce", "n", "--token", "t", "--", *REFERENCE])
    assert exc.value.code == 2
