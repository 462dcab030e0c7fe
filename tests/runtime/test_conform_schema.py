"""The official ACP schema in conform: its provenance, the SDK's golden corpus, mutated
messages each failing at its pointer, safe quoting, and the command line's schema options."""

from __future__ import annotations

import copy
import hashlib
import json
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from acpfsm.tools.conform import ConformUsageError, main, render_table, run_battery
from acpfsm.tools.conform.judge import SchemaOptions
from acpfsm.tools.conform.schema import (
    BUNDLED,
    SCHEMA_PACKAGE,
    SCHEMA_PACKAGE_VERSION,
    SCHEMA_TARBALL_SHA256,
    Direction,
    MessageSchema,
    quote,
)
from tests.peers.acp_schema_package import ensure_schema_package
from tests.peers.sdk_corpus import SdkCorpus

VENDORED = Path(__file__).parents[2] / "runtime" / "tools" / "conform" / "acp_schema"
REFERENCE = [sys.executable, "-m", "acpfsm.adapters.reference_agent"]
FAKE_AGENT = [
    sys.executable,
    str(Path(__file__).parents[1] / "adapters/fake_agents/fake_acp_agent.py"),
]
A, C = Direction.AGENT_TO_CLIENT, Direction.CLIENT_TO_AGENT

Message = tuple[Direction, dict[str, Any], str | None]


def _request(method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}


def _notification(method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def _result(result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "result": result}


def _update(update: Any) -> Message:
    return A, _notification("session/update", {"sessionId": "s", "update": update}), None


def _as(direction: Direction, kind: str, method: str) -> Callable[[Any], Message]:
    def wrap(value: Any) -> Message:
        if kind == "request":
            return direction, _request(method, value), None
        if kind == "notification":
            return direction, _notification(method, value), None
        return direction, _result(value), method

    return wrap


#: Each golden message of the official SDK, as the whole JSON-RPC message it travels in.
GOLDEN: dict[str, Callable[[Any], Message]] = {
    "cancel_notification": _as(C, "notification", "session/cancel"),
    **{
        f"content_{kind}": lambda block: (
            C,
            _request("session/prompt", {"sessionId": "s", "prompt": [block]}),
            None,
        )
        for kind in ("audio", "image", "resource_blob", "resource_link", "resource_text", "text")
    },
    "fs_read_text_file_request": _as(A, "request", "fs/read_text_file"),
    "fs_read_text_file_response": _as(C, "response", "fs/read_text_file"),
    "fs_write_text_file_request": _as(A, "request", "fs/write_text_file"),
    "initialize_request": _as(C, "request", "initialize"),
    "initialize_response": _as(A, "response", "initialize"),
    "new_session_request": _as(C, "request", "session/new"),
    "new_session_response": _as(A, "response", "session/new"),
    "permission_outcome_cancelled": lambda o: (
        C,
        _result({"outcome": o}),
        "session/request_permission",
    ),
    "permission_outcome_selected": lambda o: (
        C,
        _result({"outcome": o}),
        "session/request_permission",
    ),
    "prompt_request": _as(C, "request", "session/prompt"),
    "request_permission_request": _as(A, "request", "session/request_permission"),
    "request_permission_response_selected": _as(C, "response", "session/request_permission"),
    **dict.fromkeys(
        (
            "session_update_agent_message_chunk",
            "session_update_agent_thought_chunk",
            "session_update_config_option_update",
            "session_update_plan",
            "session_update_tool_call",
            "session_update_tool_call_edit",
            "session_update_tool_call_locations_rawinput",
            "session_update_tool_call_read",
            "session_update_tool_call_update_content",
            "session_update_tool_call_update_more_fields",
            "session_update_user_message_chunk",
        ),
        _update,
    ),
    "set_session_config_option_request": _as(C, "request", "session/set_config_option"),
    "set_session_config_option_response": _as(A, "response", "session/set_config_option"),
    **{
        f"tool_content_{kind}": lambda item: _update(
            {"sessionUpdate": "tool_call_update", "toolCallId": "t", "content": [item]}
        )
        for kind in ("content_text", "diff", "diff_no_old", "terminal")
    },
}


@pytest.fixture(scope="module")
def v1() -> MessageSchema:
    return MessageSchema.bundled(1)


def test_the_vendored_schemas_are_the_pinned_npm_package_s() -> None:
    package = ensure_schema_package()
    for version, (relative, pinned) in BUNDLED.items():
        vendored = (VENDORED / relative).read_bytes()
        assert vendored == (package / "schema" / relative).read_bytes(), version
        assert hashlib.sha256(vendored).hexdigest() == pinned
    assert (VENDORED / "LICENSE").read_bytes() == (package / "LICENSE").read_bytes()
    assert "Apache License" in (VENDORED / "LICENSE").read_text()


def test_the_docs_name_the_pinned_schema() -> None:
    """What users read says which schema is vendored, from where, and why: the README, the
    guide and the provenance note beside the files name the pinned package and digests."""
    root = Path(__file__).parents[2]
    pinned = f"{SCHEMA_PACKAGE} {SCHEMA_PACKAGE_VERSION}"
    readme = (root / "README.md").read_text(encoding="utf-8")
    assert pinned in readme and "vendored" in readme and "never downloads" in readme
    guide = (root / "docs/guides/conform-schema.md").read_text(encoding="utf-8")
    assert f"version {SCHEMA_PACKAGE_VERSION}" in guide and "never downloads" in guide
    provenance = (VENDORED / "README.md").read_text(encoding="utf-8")
    digests = [SCHEMA_TARBALL_SHA256, *(sha for _, sha in BUNDLED.values())]
    assert all(f"`{sha}`" in provenance for sha in digests)
    assert f"`{SCHEMA_PACKAGE}` version {SCHEMA_PACKAGE_VERSION}" in provenance


def test_a_damaged_bundled_file_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import acpfsm.tools.conform.schema as schema_module

    monkeypatch.setitem(schema_module.BUNDLED, 1, ("v1/schema.json", "0" * 64))  # type: ignore[index]
    with pytest.raises(ConformUsageError, match="not the pinned"):
        MessageSchema.bundled(1)


def test_the_golden_corpus_is_the_whole_corpus(sdk_corpus: SdkCorpus) -> None:
    assert sorted(p.stem for p in sdk_corpus.golden.glob("*.json")) == sorted(GOLDEN)


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_a_golden_message_is_valid_acp_v1(
    sdk_corpus: SdkCorpus, v1: MessageSchema, name: str
) -> None:
    value = json.loads((sdk_corpus.golden / f"{name}.json").read_text())
    direction, message, answered = GOLDEN[name](value)
    assert v1.check(direction, message, answered) == []


def _golden(corpus: SdkCorpus, name: str) -> Message:
    return GOLDEN[name](json.loads((corpus.golden / f"{name}.json").read_text()))


def _drop(path: list[Any]) -> Callable[[dict[str, Any]], None]:
    def mutate(message: dict[str, Any]) -> None:
        target = message
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return mutate


def _set(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(message: dict[str, Any]) -> None:
        target = message
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


#: (golden message, mutation, the pointer of the violation, what the schema expects there)
MUTATIONS = {
    "required removed: a text chunk's text": (
        "session_update_agent_message_chunk",
        _drop(["params", "update", "content", "text"]),
        "/params/update/content/text",
        "required member text (TextContent)",
    ),
    "required removed: a prompt's sessionId": (
        "prompt_request",
        _drop(["params", "sessionId"]),
        "/params/sessionId",
        "required member sessionId (PromptRequest)",
    ),
    "required removed: a stdio MCP server's env": (
        "new_session_request",
        _drop(["params", "mcpServers", 0, "env"]),
        "/params/mcpServers/0/env",
        "required member env (McpServerStdio)",
    ),
    "required removed: a session/new answer's sessionId": (
        "new_session_response",
        _drop(["result", "sessionId"]),
        "/result/sessionId",
        "required member sessionId (NewSessionResponse)",
    ),
    "wrong enum: a tool kind": (
        "session_update_tool_call",
        _set(["params", "update", "kind"], "reading"),
        "/params/update/kind",
        'one of "read", "edit"',
    ),
    "wrong enum: a plan entry's priority": (
        "session_update_plan",
        _set(["params", "update", "entries", 1, "priority"], "urgent"),
        "/params/update/entries/1/priority",
        'one of "high", "medium", "low"',
    ),
    "wrong enum: a permission outcome": (
        "permission_outcome_selected",
        _set(["result", "outcome", "outcome"], "maybe"),
        "/result/outcome/outcome",
        'one of "cancelled", "selected"',
    ),
    "wrong enum: an update kind": (
        "session_update_agent_thought_chunk",
        _set(["params", "update", "sessionUpdate"], "agent_thinking"),
        "/params/update/sessionUpdate",
        'one of "user_message_chunk", "agent_message_chunk"',
    ),
    "wrong type: a read's line": (
        "fs_read_text_file_request",
        _set(["params", "line"], "10"),
        "/params/line",
        "type integer or null",
    ),
    "wrong type: the protocol version": (
        "initialize_request",
        _set(["params", "protocolVersion"], "1"),
        "/params/protocolVersion",
        "type integer (ProtocolVersion)",
    ),
    "wrong type: a prompt's text": (
        "content_text",
        _set(["params", "prompt", 0, "text"], 5),
        "/params/prompt/0/text",
        "type string",
    ),
    "wrong type: the envelope's jsonrpc": (
        "cancel_notification",
        _set(["jsonrpc"], 2.0),
        "/jsonrpc",
        '"2.0"',
    ),
}


@pytest.mark.parametrize("case", sorted(MUTATIONS))
def test_a_mutated_message_fails_at_its_pointer(
    sdk_corpus: SdkCorpus, v1: MessageSchema, case: str
) -> None:
    name, mutate, pointer, expected = MUTATIONS[case]
    direction, message, answered = _golden(sdk_corpus, name)
    mutated = copy.deepcopy(message)
    mutate(mutated)
    violations = v1.check(direction, mutated, answered)
    assert [v.pointer for v in violations] == [pointer], [v.describe() for v in violations]
    assert violations[0].expected.startswith(expected), violations[0].expected
    assert violations[0].direction is direction


def test_an_extra_member_fails_where_the_schema_constrains_extra_members(
    v1: MessageSchema,
) -> None:
    """ACP v1 forbids no extra member outright (no ``additionalProperties: false`` anywhere:
    unknown members are tolerated for extensibility); where it constrains extra members (a
    map's values, as an accepted elicitation's content), an extra member of the wrong kind
    fails at its own pointer, and an extra member elsewhere is fine."""
    accepted = {"action": "accept", "content": {"name": "Ada"}}
    assert v1.check(C, _result(accepted), "elicitation/create") == []
    extra = {"action": "accept", "content": {"name": "Ada", "address": {"city": "x"}}}
    (violation,) = v1.check(C, _result(extra), "elicitation/create")
    assert violation.pointer == "/result/content/address"
    assert violation.expected.startswith("one of: type string; type integer")
    tolerated = {"action": "accept", "content": {"name": "Ada"}, "unknownMember": 1}
    assert v1.check(C, _result(tolerated), "elicitation/create") == []


def test_what_the_schema_does_not_define(v1: MessageSchema) -> None:
    # an extension method (named _…) is anything's; another method is no ACP method
    assert v1.check(A, _notification("_acme/status", {"anything": [1]})) == []
    (wrong,) = v1.check(A, _notification("acme/status", {}))
    assert wrong.pointer == "/method" and "extension method named _" in wrong.expected
    # a response's shape, and an answer whose request is unknown keeps its envelope checks
    (both,) = v1.check(A, {"jsonrpc": "2.0", "id": 1, "result": {}, "error": {}})
    assert both.expected == "exactly one of result, error"
    (no_id,) = v1.check(A, {"jsonrpc": "2.0", "error": {"code": -32700, "message": "Parse"}})
    assert no_id.pointer == "/id" and no_id.value == "(absent)"
    (not_object,) = v1.check(A, [1, 2])
    assert not_object.kind == "message" and not_object.value == "[1, 2]"
    (null_result,) = v1.check(A, _result(None), "session/set_mode")
    assert null_result.pointer == "/result"
    assert null_result.expected == "type object (SetSessionModeResponse)"


def test_values_are_quoted_safely_and_bounded() -> None:
    hostile = "\x1b[2J\u202egnp.exe\ud800\u2028" + "x" * 500
    text = quote(hostile)
    assert "\x1b" not in text and "\u202e" not in text and "\u2028" not in text
    assert "\\u001b" in text and "\\u202e" in text and "\\ud800" in text
    assert len(text) < 200 and text.endswith("chars)")
    text.encode("utf-8")  # no lone surrogate left to break a terminal or a file
    assert quote(b"\xff\x00bytes") == '"\ufffd\\u0000bytes"'
    assert quote({"a": object()}).startswith('{"a": "<object object')


async def test_the_reference_agent_s_run_is_valid_and_both_directions_are_counted() -> None:
    report = await run_battery(REFERENCE, check_timeout=10)
    (schema,) = [c for c in report.checks if c.id.startswith("schema")]
    assert schema.status.value == "pass", schema.detail
    assert "agent → client" in schema.detail and "client → agent" in schema.detail
    assert "negotiated v1, ACP v1 schema of @agentclientprotocol/sdk 2.4.0" in schema.detail


async def test_a_schema_given_as_a_file_judges_the_run(tmp_path: Path) -> None:
    stricter = json.loads((VENDORED / "v1" / "schema.json").read_text())
    stricter["$defs"]["StopReason"] = {"type": "string", "const": "refusal"}
    path = tmp_path / "stricter.json"
    path.write_text(json.dumps(stricter))
    report = await run_battery(REFERENCE, check_timeout=10, schema=SchemaOptions(path=str(path)))
    failed = {c.id: c for c in report.failed}
    check = failed["schema:agent:session/prompt:/result/stopReason"]
    assert 'expected "refusal"; got "end_turn"' in check.detail
    assert check.evidence and '"stopReason":"end_turn"' in check.evidence[0]
    assert f"the schema {path} (sha256" in failed["schema"].detail


async def test_a_forced_version_and_no_schema() -> None:
    report = await run_battery(REFERENCE, check_timeout=10, schema=SchemaOptions(version=2))
    summary = next(c for c in report.checks if c.id == "schema")
    assert "ACP v2 schema" in summary.detail and "(--schema-version)" in summary.detail
    assert summary.status.value == "fail"  # a v1 conversation is not v2's
    assert any(c.id.startswith("schema:client:initialize:") for c in report.failed)
    off = await run_battery(REFERENCE, check_timeout=10, schema=SchemaOptions(enabled=False))
    assert [(c.id, c.status.value, c.detail) for c in off.checks if c.id == "schema"] == [
        ("schema", "n/a", "turned off (--no-schema)")
    ]


async def test_an_agent_that_negotiates_v2_is_judged_against_v2() -> None:
    """An agent answering protocolVersion 2 (to the v1 the client asked for) has its
    messages judged against the v2 schema, with no option given; the client's initialize
    request, sent before any version was agreed, is judged in the v1 it asked for. The fake
    agent's answers are v1-shaped: v2's required ``info`` is missing, a finding."""
    report = await run_battery([*FAKE_AGENT, "--protocol", "2"], check_timeout=10)
    summary = next(c for c in report.checks if c.id == "schema")
    assert "the main process: negotiated v2, ACP v2 schema" in summary.detail
    assert "its initialize request against the v1 schema it asked for" in summary.detail
    failed = {c.id: c for c in report.failed}
    assert "expected required member info (InitializeResponse)" in (
        failed["schema:agent:initialize:/result/info"].detail
    )
    assert not [c.id for c in report.failed if c.id.startswith("schema:client:")]
    # the text report: the violation's own row (method, direction, pointer, expectation,
    # value) and its evidence, the message quoted
    row = next(line for line in render_table(report).splitlines() if "/result/info" in line)
    assert row.startswith("schema:agent:initialize:/result/info") and " fail " in row
    assert "initialize result, agent → client, at /result/info: expected required" in row
    assert "got (absent)" in row
    assert "schema:agent:initialize:/result/info: evidence (fail)" in render_table(report)


def test_cli_schema_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert main(["--schema", str(broken), "--", *REFERENCE]) == 2
    assert "cannot read the schema" in capsys.readouterr().err
    assert main(["--schema-version", "9", "--", *REFERENCE]) == 2
    assert "no official schema of ACP protocol version 9" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--no-schema", "--schema-version", "1", "--", *REFERENCE])
    capsys.readouterr()
    junit = tmp_path / "conform.xml"
    args = ["--json", "--schema-version", "2", "--junit-xml", str(junit), "--timeout", "10"]
    assert main([*args, "--", *REFERENCE]) == 1
    data = json.loads(capsys.readouterr().out)
    violations = [c for c in data["checks"] if c["id"].startswith("schema:")]
    assert violations and all(c["status"] == "fail" for c in violations)
    assert all(
        "client → agent" in c["detail"] or "agent → client" in c["detail"] for c in violations
    )
    cases = {case.get("name"): case for case in ET.parse(junit).getroot().iter("testcase")}
    assert {c["id"] for c in violations} <= set(cases)
    for check in violations:  # each a failure whose message is the violation's detail
        failure = cases[check["id"]].find("failure")
        assert failure is not None and failure.get("message") == check["detail"]
        assert " at " in check["detail"] and ": expected " in check["detail"]
        assert "; got " in check["detail"]


def test_cli_no_schema_and_schema_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The two options reach the run from the command line: ``--no-schema`` makes the check
    n/a; ``--schema FILE`` judges by that file, its violation a row of the text report."""
    assert main(["--json", "--no-schema", "--timeout", "10", "--", *REFERENCE]) == 0
    checks = {c["id"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert (checks["schema"]["status"], checks["schema"]["detail"]) == (
        "n/a",
        "turned off (--no-schema)",
    )
    stricter = json.loads((VENDORED / "v1" / "schema.json").read_text())
    stricter["$defs"]["StopReason"] = {"type": "string", "const": "refusal"}
    path = tmp_path / "stricter.json"
    path.write_text(json.dumps(stricter))
    assert main(["--schema", str(path), "--timeout", "10", "--", *REFERENCE]) == 1
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("schema:agent:session/prompt"))
    assert 'at /result/stopReason: expected "refusal"; got "end_turn"' in row


def test_stop_reasons_are_the_schema_s(v1: MessageSchema) -> None:
    """The stop reasons conform accepts are exactly those of the official v1 schema, and the
    runtime's ``StopReason`` names each (CONTRIBUTING.md: adding a stop reason)."""
    from typing import get_args

    from acpfsm.runtime.types import StopReason
    from acpfsm.tools.conform.report import STOP_REASONS

    official = {branch["const"] for branch in v1.defs["StopReason"]["oneOf"]}
    assert set(STOP_REASONS) == official
    assert official <= set(get_args(StopReason))
