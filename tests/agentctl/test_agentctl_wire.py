"""agentctl's wire shapes without a binary: error texts classify exactly as the stdio errors
for the same agent answer (agentctl passes an agent's JSON-RPC error on as text), and both event
formats (kandev HEAD's and the v0.95.1 binary's, KANDEV.md) decode to the same acpfsm events."""

from __future__ import annotations

import json
from typing import Any

import pytest

from acpfsm.adapters.acp.stdio import LOAD_UNSUPPORTED_MESSAGE
from acpfsm.adapters.agentctl import _wire
from acpfsm.adapters.agentctl._wire import error_from_text
from acpfsm.adapters.classify import Call, classify_error
from acpfsm.adapters.errors import (
    AcpfsmError,
    AgentctlError,
    AgentRequestError,
    LocalProtocolError,
    TransportClosed,
)
from acpfsm.adapters.events import (
    AgentCapabilities,
    Complete,
    ErrorEvent,
    ForegroundIdle,
    MessageChunk,
    PermissionRequest,
    SessionModels,
    TurnStarted,
    Unknown,
)
from acpfsm.statecharts.vocab import ErrorClass

LOAD_ID = "019a1b2c-3d4e-7f00-8000-000000000001"


def jsn(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def rpc(obj: dict[str, Any], method: str) -> AgentRequestError:
    return AgentRequestError(obj["code"], obj["message"], obj.get("data"), method=method)


# (agent JSON-RPC error, the message agentctl puts in its ws error frame, agentctl action,
#  classification call, the error the stdio transport raises for the same answer)
RESOURCE = {"code": -32002, "message": "Resource not found", "data": {"sessionId": LOAD_ID}}
NO_METHOD = {"code": -32601, "message": "Method not found", "data": {"method": "session/load"}}
ROLLOUT = {
    "code": -32603,
    "message": "Internal error",
    "data": {"details": f"no rollout found for thread id {LOAD_ID}"},
}
ROLLOUT_OTHER = {
    "code": -32603,
    "message": "Internal error",
    "data": {"details": "no rollout found for thread id 00000000-0000-4000-8000-000000000000"},
}
INTERNAL = {"code": -32603, "message": "Internal error", "data": {"details": "Session not found"}}
AUTH = {"code": -32000, "message": "Authentication required"}
DEAD = {
    "code": -32603,
    "message": "Internal error",
    "data": {"error": "peer disconnected before response"},
}
BAD_OPTION = {"code": -32602, "message": "Invalid params", "data": {"details": "no such option"}}

CASES: list[tuple[str, str, str, Call, AcpfsmError, ErrorClass]] = [
    (
        "load_rollout_missing",
        f"failed to load session: {jsn(ROLLOUT)}",
        "agent.session.load",
        Call.SESSION_LOAD,
        rpc(ROLLOUT, "session/load"),
        ErrorClass.PROVIDER_ROLLOUT_MISSING,
    ),
    (
        "load_rollout_other",
        f"failed to load session: {jsn(ROLLOUT_OTHER)}",
        "agent.session.load",
        Call.SESSION_LOAD,
        rpc(ROLLOUT_OTHER, "session/load"),
        ErrorClass.INCONCLUSIVE,
    ),
    (
        "load_internal",
        f"failed to load session: {jsn(INTERNAL)}",
        "agent.session.load",
        Call.SESSION_LOAD,
        rpc(INTERNAL, "session/load"),
        ErrorClass.INCONCLUSIVE,
    ),
    (
        "load_auth",
        f"failed to load session: {jsn(AUTH)}",
        "agent.session.load",
        Call.SESSION_LOAD,
        rpc(AUTH, "session/load"),
        ErrorClass.AUTH_REQUIRED,
    ),
    (
        "no_load",
        LOAD_UNSUPPORTED_MESSAGE,
        "agent.session.load",
        Call.SESSION_LOAD,
        LocalProtocolError(LOAD_UNSUPPORTED_MESSAGE),
        ErrorClass.LOAD_UNSUPPORTED,
    ),
    (
        "load_peer_died",
        f"failed to load session: {jsn(DEAD)}",
        "agent.session.load",
        Call.SESSION_LOAD,
        TransportClosed("peer disconnected before response: agent process exited with code 3"),
        ErrorClass.TRANSPORT_DEAD,
    ),
    (
        "new_auth",
        f"authentication required: {jsn(AUTH)}",
        "agent.session.new",
        Call.SESSION_NEW,
        rpc(AUTH, "session/new"),
        ErrorClass.AUTH_REQUIRED,
    ),
    (
        "bad_config_option",
        f"set session config option failed: {jsn(BAD_OPTION)}",
        "agent.session.set_config_option",
        Call.SET_CONFIG_OPTION,
        rpc(BAD_OPTION, "session/set_config_option"),
        ErrorClass.INCONCLUSIVE,
    ),
]


@pytest.mark.parametrize(
    ("message", "action", "call", "stdio_error", "kind"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_agentctl_errors_classify_like_stdio(
    message: str, action: str, call: Call, stdio_error: AcpfsmError, kind: ErrorClass
) -> None:
    error = error_from_text(action, message, code="INTERNAL_ERROR")
    over_agentctl = classify_error(error, call=call, loading_session_id=LOAD_ID)
    over_stdio = classify_error(stdio_error, call=call, loading_session_id=LOAD_ID)
    assert over_agentctl.kind is over_stdio.kind is kind
    for flag in (
        "method_not_found",
        "session_unknown",
        "capability_mismatch",
        "provider_session_missing",
        "transport_dead",
        "stream_not_connected",
    ):
        assert getattr(over_agentctl, flag) == getattr(over_stdio, flag), flag
    # the text is what kandev's Go client prints (internal/agent/runtime/agentctl/agent.go)
    assert str(error) == f"{_wire.CLIENT_PREFIXES[action]}: {message}"


@pytest.mark.parametrize(
    ("shape", "stdio_kind"),
    [(RESOURCE, ErrorClass.SESSION_UNKNOWN), (NO_METHOD, ErrorClass.METHOD_NOT_FOUND)],
    ids=["load_not_found", "load_method_not_found"],
)
def test_session_load_codes_are_inconclusive_over_agentctl(
    shape: dict[str, Any], stdio_kind: ErrorClass
) -> None:
    """kandev judges agentctl's session/load failure by its text (seed
    ``isSessionLoadFallbackErr``: message-only at the WebSocket boundary): the −32002 and
    −32601 objects closing it are inconclusive (the launch fails, the ACP session id is kept),
    where the same structured error over stdio falls back to session/new."""
    error = error_from_text("agent.session.load", f"failed to load session: {jsn(shape)}")
    assert type(error) is AgentctlError
    assert str(error) == f"load session failed: failed to load session: {jsn(shape)}"
    over_agentctl = classify_error(error, call=Call.SESSION_LOAD, loading_session_id=LOAD_ID)
    assert over_agentctl.kind is ErrorClass.INCONCLUSIVE
    assert not over_agentctl.method_not_found and not over_agentctl.session_unknown
    over_stdio = classify_error(
        rpc(shape, "session/load"), call=Call.SESSION_LOAD, loading_session_id=LOAD_ID
    )
    assert over_stdio.kind is stdio_kind
    # a structured code is still rebuilt for the other actions (session/new's auth, say)
    created = error_from_text("agent.session.new", f"failed: {jsn(RESOURCE)}")
    assert isinstance(created, AgentRequestError) and created.code == -32002


def test_error_types() -> None:
    plain = error_from_text(
        "agent.prompt", "no active session - call new_session first", code="BAD_REQUEST"
    )
    assert isinstance(plain, AgentctlError)
    assert (plain.code, plain.action) == ("BAD_REQUEST", "agent.prompt")
    assert str(plain) == "prompt failed: no active session - call new_session first"
    stdin_closed = jsn(
        {
            "code": -32603,
            "message": "Internal error",
            "data": {"error": "write |1: file already closed"},
        }
    )
    # kandev CancelAgent tolerates only stream-not-connected and not-acknowledged: agentctl's
    # "file already closed" answer to a cancel is the cancel's own failure (CancelFailed)
    cancel_failed = error_from_text("agent.cancel", stdin_closed)
    assert not isinstance(cancel_failed, TransportClosed)
    assert isinstance(cancel_failed, AgentRequestError)
    assert str(cancel_failed) == f"cancel failed: {stdin_closed}"
    broken = error_from_text("agent.cancel", "write |1: broken pipe", code="FAILED")
    assert type(broken) is AgentctlError
    # on any other action the same text says the agent's pipe is gone
    closed_stdin = error_from_text("agent.prompt", stdin_closed)
    assert isinstance(closed_stdin, TransportClosed)
    assert isinstance(closed_stdin.__cause__, AgentRequestError)
    assert str(closed_stdin).startswith("prompt failed: {")
    unknown = error_from_text("agent.bogus", "unknown action: agent.bogus", code="UNKNOWN_ACTION")
    assert isinstance(unknown, AgentctlError) and unknown.code == "UNKNOWN_ACTION"


# --------------------------------------------------------------------------- events

COMMON = ',"supports_image":false,"supports_audio":false,"supports_embedded_context":false,"supports_prompt_queueing":false'


def decode(frame: str) -> Any:
    return _wire.to_event(_wire.decode_wire_event(frame), frame)


def test_v0951_and_head_complete_and_error() -> None:
    v0951 = decode(
        '{"type":"complete","session_id":"s","prompt_generation":7,"control_turn_id":6,'
        '"data":{"stop_reason":"end_turn"}' + COMMON + "}"
    )
    head = decode(
        '{"type":"complete","session_id":"s","prompt_generation":7,"data":{"stop_reason":"end_turn"},'
        '"usage":{"input_tokens":3,"output_tokens":5,"output_tokens_present":true}' + COMMON + "}"
    )
    assert isinstance(v0951, Complete) and isinstance(head, Complete)
    assert (v0951.prompt_generation, v0951.stop_reason, v0951.control_turn_id) == (7, "end_turn", 6)
    assert (head.prompt_generation, head.stop_reason, head.control_turn_id) == (7, "end_turn", 0)
    assert head.usage == {"input_tokens": 3, "output_tokens": 5, "output_tokens_present": True}

    # v0.95.1: the bare RPC message plus provider_error → HEAD's JSON projection is rebuilt
    v_error = decode(
        '{"type":"error","prompt_generation":2,"control_turn_id":2,"error":"Internal error",'
        '"provider_error":{"source":"acp_prompt","provider_id":"reference","model_id":"ref-fast",'
        '"rpc_code":-32603,"message":"Internal error","occurred_at":"2026-11-29T17:39:11Z"}'
        + COMMON
        + "}"
    )
    assert isinstance(v_error, ErrorEvent)
    assert v_error.error == '{"code":-32603,"message":"Internal error"}'
    assert v_error.provider_error is not None and v_error.provider_error["rpc_code"] == -32603
    # HEAD: the full RequestError JSON, kept verbatim (and classified transport-dead)
    dead = jsn(DEAD)
    h_error = decode(json.dumps({"type": "error", "prompt_generation": 3, "error": dead}))
    assert isinstance(h_error, ErrorEvent) and h_error.error == dead
    assert classify_error(h_error.error, call=Call.PROMPT).transport_dead
    assert classify_error(v_error.error, call=Call.PROMPT).kind is ErrorClass.INCONCLUSIVE


def test_process_exit_event() -> None:
    frame = json.dumps(
        {
            "type": "error",
            "control_turn_id": 5,
            "error": "Agent process exited with code 3: boom",
            "data": {"exit_code": 3, "recent_stderr": ["boom"]},
        }
    )
    assert _wire.is_process_exit(_wire.decode_wire_event(frame))
    turn_error = json.dumps(
        {"type": "error", "prompt_generation": 3, "error": "x", "data": {"exit_code": 3}}
    )
    assert not _wire.is_process_exit(_wire.decode_wire_event(turn_error))


def test_other_event_types() -> None:
    assert isinstance(decode('{"type":"turn_started","session_id":"s"' + COMMON + "}"), TurnStarted)
    chunk = decode('{"type":"message_chunk","session_id":"s","text":"hi"' + COMMON + "}")
    assert chunk == MessageChunk(session_id="s", text="hi")
    caps = decode(
        '{"type":"agent_capabilities","supports_image":true,"supports_audio":false,'
        '"supports_embedded_context":true,"supports_prompt_queueing":true}'
    )
    assert isinstance(caps, AgentCapabilities)
    assert (caps.supports_image, caps.supports_prompt_queueing) == (True, True)
    models = decode(
        '{"type":"session_models","session_id":"s","data":{"config_options_config_id":"model",'
        '"config_options_source":"provider_response"},"current_model_id":"ref-smart",'
        '"session_models":[{"model_id":"ref-fast","name":"Fast"},{"model_id":"ref-smart","name":"Smart"}],'
        '"config_options":[{"type":"select","id":"model","name":"Model","current_value":"ref-smart",'
        '"category":"model","options":[{"value":"ref-fast","name":"Fast"}]}]' + COMMON + "}"
    )
    assert isinstance(models, SessionModels)
    assert [m.model_id for m in models.session_models] == ["ref-fast", "ref-smart"]
    assert models.config_options[0].current_value == "ref-smart"
    assert models.data["config_options_source"] == "provider_response"
    permission = decode(
        '{"type":"permission_request","session_id":"task-sess-1","tool_call_id":"call_3_2",'
        '"request_id":"r-1","pending_id":"p-1","permission_title":"Run","permission_options":'
        '[{"option_id":"allow_once","name":"Allow once","kind":"allow_once"}],"action_type":"command"'
        + COMMON
        + "}"
    )
    assert isinstance(permission, PermissionRequest)
    assert permission.request_id == "r-1"
    assert permission.options[0].kind == "allow_once"
    idle = decode('{"type":"foreground_idle","prompt_generation":4,"data":{"prompt_handoff":true}}')
    assert idle == ForegroundIdle(prompt_generation=4, prompt_handoff=True)
    evidence = decode(
        '{"type":"mcp_attachment","mcp_attachment":{"kind":"configured"}' + COMMON + "}"
    )
    assert isinstance(evidence, Unknown) and evidence.kind == "mcp_attachment"
    assert evidence.payload["mcp_attachment"] == {"kind": "configured"}


def test_envelopes() -> None:
    request_id, frame = _wire.encode_request("agent.prompt", {"text": "hi"})
    parsed = json.loads(frame)
    assert parsed["id"] == request_id and parsed["type"] == "request"
    assert parsed["action"] == "agent.prompt" and parsed["payload"] == {"text": "hi"}
    # an AgentEvent of type "error" has no id: it is not an answer
    envelope = _wire.decode_envelope('{"type":"error","error":"boom","prompt_generation":1}')
    assert envelope.id == "" and envelope.type == "error"
    reply = json.loads(
        _wire.encode_reply("abc", "mcp.x", error={"code": "UNKNOWN_ACTION", "message": "no"})
    )
    assert (reply["id"], reply["type"], reply["payload"]["code"]) == (
        "abc",
        "error",
        "UNKNOWN_ACTION",
    )


def test_an_error_completion_carries_its_text_error_winning_over_text() -> None:
    """kandev ``extractErrorMessage``: an error ``complete`` frame's message is its ``error``,
    else its ``text``, else the default; the runtime ends the turn with that message (it was
    always "agent error completion")."""
    both = decode(
        '{"type":"complete","prompt_generation":4,"error":"quota exceeded","text":"partial",'
        '"data":{"is_error":true}' + COMMON + "}"
    )
    only_text = decode(
        '{"type":"complete","prompt_generation":4,"text":"the model refused",'
        '"data":{"is_error":true}' + COMMON + "}"
    )
    neither = decode('{"type":"complete","prompt_generation":4,"data":{"is_error":true}}')
    fine = decode('{"type":"complete","prompt_generation":4,"text":"x","data":{}}')
    assert isinstance(both, Complete) and both.error == "quota exceeded"
    assert isinstance(only_text, Complete) and only_text.error == "the model refused"
    assert isinstance(neither, Complete) and neither.error == ""
    assert isinstance(fine, Complete) and fine.error == ""  # not an error: no error text
