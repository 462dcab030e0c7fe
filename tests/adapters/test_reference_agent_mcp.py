"""The reference agent's MCP side, as a real subprocess: the MCP SDK is imported only when a
session is given MCP servers; an unreachable server is reported, never waited on; the tool
directives are parsed whatever JSON they carry."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from acpfsm.adapters.reference_agent._script import HELP_TEXT, parse_directives

pytestmark = pytest.mark.integration


def _run_agent(
    tmp_path: Path, mcp_servers: list[dict[str, Any]], prompt: str, *flags: str
) -> tuple[str, str]:
    """Initialize, session/new with ``mcp_servers``, one prompt, EOF: (stdout, stderr), with
    ``-X importtime`` writing every imported module to stderr."""
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "session/new",
            "params": {"cwd": str(tmp_path), "mcpServers": mcp_servers},
        },
    ]
    sent = "\n".join(json.dumps(line) for line in lines) + "\n"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "acpfsm.adapters.reference_agent",
            "--delay",
            "0",
            "--sessions-dir",
            str(tmp_path / "sessions"),
            *flags,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(sent)
    proc.stdin.flush()
    session_id = ""
    for line in proc.stdout:  # until session/new is answered
        message = json.loads(line)
        if message.get("id") == 2:
            session_id = message["result"]["sessionId"]
            break
    prompt_line = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "session/prompt",
        "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": prompt}]},
    }
    proc.stdin.write(json.dumps(prompt_line) + "\n")
    proc.stdin.flush()
    seen = []
    for line in proc.stdout:  # until the prompt is answered (stdin EOF would cancel it)
        seen.append(line)
        if json.loads(line).get("id") == 3:
            break
    rest, err = proc.communicate(timeout=60)
    return "".join(seen) + rest, err


def _reply(stdout: str) -> str:
    text = []
    for line in stdout.splitlines():
        update = json.loads(line).get("params", {}).get("update", {})
        if update.get("sessionUpdate") == "agent_message_chunk":
            text.append(update["content"]["text"])
    return "".join(text)


def _imports_mcp(stderr: str) -> bool:
    modules = {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if "|" in line}
    return "mcp" in modules


def test_the_sdk_is_imported_only_for_a_session_with_mcp_servers(tmp_path: Path) -> None:
    out, err = _run_agent(tmp_path, [], "hello [[tools]]")
    assert "MCP tools: none." in _reply(out)
    assert not _imports_mcp(err)

    unreachable = {"type": "http", "name": "gone", "url": "http://127.0.0.1:9/mcp", "headers": []}
    out, err = _run_agent(tmp_path, [unreachable], "hello [[tools]] [[tool:x {}]]")
    assert _imports_mcp(err)
    reply = _reply(out)
    assert "MCP tools: gone (http): unavailable (" in reply  # reported, not waited on forever
    assert "Tool x failed: no MCP server offers a tool named 'x'." in reply


def test_a_server_that_never_answers_is_reported_at_the_connect_bound_given(
    tmp_path: Path,
) -> None:
    silent = {  # a stdio server that never answers initialize
        "type": "stdio",
        "name": "mute",
        "command": sys.executable,
        "args": ["-c", "import time; time.sleep(60)"],
        "env": [],
    }
    out, _ = _run_agent(tmp_path, [silent], "hello [[tools]]", "--mcp-connect-seconds", "1.5")
    assert "MCP tools: mute (stdio): unavailable (not connected within 1.5s)." in _reply(out)


@pytest.mark.parametrize("bound", ["0", "-1", "nan", "inf", "soon"])
def test_the_connect_bound_is_a_finite_number_of_seconds(bound: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "acpfsm.adapters.reference_agent", "--mcp-connect-seconds", bound],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--mcp-connect-seconds" in done.stderr


def test_tool_directives_carry_any_json() -> None:
    d = parse_directives('a [[tool:add {"a": [1, 2], "b": "]]"}]] b [[tools]] [[tool:bare]]')
    assert d.text == "a b"
    assert d.tool_calls == [("add", '{"a": [1, 2], "b": "]]"}'), ("bare", "")]
    assert d.list_tools and not d.warnings
    broken = parse_directives("[[tool:x {not json]] then")
    assert broken.tool_calls == [("x", "{not json")] and broken.text == "then"
    assert parse_directives('[[tool:y {"a": 1} no end').warnings
    assert "[[tool:NAME" in HELP_TEXT and "[[tools]]" in HELP_TEXT
