"""ACP v1 message structs: wire names, round trips, tolerance of what real agents send."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acpfsm.adapters.acp import messages as acp

# initialize answers real agents gave offline (the runs README.md's "What conform reports for
# real agents" summarises), abridged only in the auth list
CLAUDE_AGENT_ACP_INIT = {
    "protocolVersion": 1,
    "agentCapabilities": {
        "_meta": {"claudeCode": {"promptQueueing": True}, "authStatus": {}},
        "promptCapabilities": {"image": True, "embeddedContext": True},
        "mcpCapabilities": {"http": True, "sse": True},
        "auth": {"logout": {}},
        "providers": {},
        "loadSession": True,
        "sessionCapabilities": {"additionalDirectories": {}, "close": {}, "fork": {}},
    },
    "agentInfo": {"name": "@agentclientprotocol/claude-agent-acp", "version": "0.101.0"},
    "authMethods": [],
    "_meta": {"steering": {"supported": True}},
}
CODEX_ACP_INIT = {
    "protocolVersion": 1,
    "agentCapabilities": {
        "loadSession": True,
        "promptCapabilities": {"image": True, "audio": False, "embeddedContext": True},
        "mcpCapabilities": {"http": True, "sse": False, "acp": False},
        "sessionCapabilities": {"list": {}, "resume": {}, "close": {}},
        "auth": {"logout": {}},
    },
    "authMethods": [
        {"id": "chatgpt", "name": "ChatGPT"},
        {
            "type": "env_var",
            "id": "codex-api-key",
            "name": "API key",
            "vars": [{"name": "CODEX_API_KEY"}],
        },
    ],
    "agentInfo": {"name": "codex-acp", "title": "Codex", "version": "0.16.0"},
}


def wire(obj: Any) -> dict[str, Any]:
    result = json.loads(acp.encode(obj))
    assert isinstance(result, dict)
    return result


def raw(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def test_initialize_request_is_camel_case_and_omits_unset_optionals() -> None:
    request = acp.InitializeRequest(
        protocol_version=1,
        client_capabilities=acp.ClientCapabilities(
            fs=acp.FileSystemCapability(read_text_file=True, write_text_file=True), terminal=True
        ),
        client_info=acp.Implementation(name="acpfsm", version="1.2"),
    )
    assert wire(request) == {
        "protocolVersion": 1,
        "clientCapabilities": {
            "fs": {"readTextFile": True, "writeTextFile": True},
            "terminal": True,
        },
        "clientInfo": {"name": "acpfsm", "version": "1.2"},
    }
    assert wire(acp.InitializeRequest(protocol_version=1)) == {"protocolVersion": 1}


def test_required_fields_are_always_on_the_wire() -> None:
    assert wire(acp.NewSessionRequest(cwd="/w", mcp_servers=[])) == {"cwd": "/w", "mcpServers": []}
    load = acp.LoadSessionRequest(session_id="s", cwd="/w", mcp_servers=[])
    assert wire(load) == {"sessionId": "s", "cwd": "/w", "mcpServers": []}
    server = acp.McpServerStdio(name="fs", command="/bin/mcp", args=[], env=[])
    assert wire(server) == {"name": "fs", "command": "/bin/mcp", "args": [], "env": []}


def test_meta_is_spelled_with_an_underscore() -> None:
    block = acp.TextContent(text="hi", meta={"k": 1})
    assert wire(block) == {"type": "text", "text": "hi", "_meta": {"k": 1}}
    decoded = acp.decode_agent_params(
        "session/update",
        raw(
            {
                "sessionId": "s",
                "update": {
                    "sessionUpdate": "usage_update",
                    "used": 1,
                    "size": 2,
                    "_meta": {"x": 1},
                },
            }
        ),
    )
    assert decoded.update.meta == {"x": 1}


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (acp.TextContent(text="t"), {"type": "text", "text": "t"}),
        (
            acp.ImageContent(data="aGk=", mime_type="image/png"),
            {"type": "image", "data": "aGk=", "mimeType": "image/png"},
        ),
        (
            acp.AudioContent(data="aGk=", mime_type="audio/wav"),
            {"type": "audio", "data": "aGk=", "mimeType": "audio/wav"},
        ),
        (
            acp.ResourceLink(uri="file:///a", name="a", size=3),
            {"type": "resource_link", "uri": "file:///a", "name": "a", "size": 3},
        ),
        (
            acp.EmbeddedResource(resource=acp.ResourceContents(uri="file:///a", text="x")),
            {"type": "resource", "resource": {"uri": "file:///a", "text": "x"}},
        ),
    ],
)
def test_prompt_content_blocks_round_trip(
    block: acp.ContentBlock, expected: dict[str, Any]
) -> None:
    request = acp.PromptRequest(session_id="s", prompt=[block])
    assert wire(request) == {"sessionId": "s", "prompt": [expected]}
    assert acp.decode_client_params("session/prompt", acp.encode(request)) == request


@pytest.mark.parametrize(
    "request_struct",
    [
        acp.InitializeRequest(protocol_version=1, client_info=acp.Implementation(name="c")),
        acp.AuthenticateRequest(method_id="m"),
        acp.NewSessionRequest(cwd="/w", mcp_servers=[]),
        acp.LoadSessionRequest(session_id="s", cwd="/w", mcp_servers=[]),
        acp.CancelNotification(session_id="s"),
        acp.SetSessionModeRequest(session_id="s", mode_id="plan"),
        acp.SetSessionConfigOptionRequest(session_id="s", config_id="model", value="big"),
        acp.SetSessionConfigOptionRequest(
            session_id="s", config_id="f", value=True, type="boolean"
        ),
        acp.SetSessionModelRequest(session_id="s", model_id="m"),
    ],
)
def test_client_requests_round_trip(request_struct: msgspec.Struct) -> None:
    method = {
        acp.InitializeRequest: "initialize",
        acp.AuthenticateRequest: "authenticate",
        acp.NewSessionRequest: "session/new",
        acp.LoadSessionRequest: "session/load",
        acp.CancelNotification: "session/cancel",
        acp.SetSessionModeRequest: "session/set_mode",
        acp.SetSessionConfigOptionRequest: "session/set_config_option",
        acp.SetSessionModelRequest: "session/set_model",
    }[type(request_struct)]
    assert acp.decode_client_params(method, acp.encode(request_struct)) == request_struct


def test_set_config_option_wire_shapes() -> None:
    select = acp.SetSessionConfigOptionRequest(session_id="s", config_id="model", value="haiku")
    assert wire(select) == {"sessionId": "s", "configId": "model", "value": "haiku"}
    boolean = acp.SetSessionConfigOptionRequest(
        session_id="s", config_id="fast", value=False, type="boolean"
    )
    assert wire(boolean) == {
        "sessionId": "s",
        "configId": "fast",
        "value": False,
        "type": "boolean",
    }


def test_real_initialize_answers_decode_with_unknown_fields() -> None:
    claude = acp.decode_result("initialize", raw(CLAUDE_AGENT_ACP_INIT))
    assert claude.agent_capabilities.load_session is True
    assert claude.agent_capabilities.meta == {
        "claudeCode": {"promptQueueing": True},
        "authStatus": {},
    }
    assert claude.agent_capabilities.prompt_capabilities.image is True
    assert claude.agent_capabilities.prompt_capabilities.audio is False
    assert claude.meta == {"steering": {"supported": True}}
    codex = acp.decode_result("initialize", raw(CODEX_ACP_INIT))
    assert codex.agent_info == acp.Implementation(name="codex-acp", title="Codex", version="0.16.0")
    assert codex.auth_methods[1]["vars"] == [{"name": "CODEX_API_KEY"}]


def test_empty_lists_and_objects_the_agent_sent_survive_a_round_trip() -> None:
    # sessionCapabilities: {} and authMethods: [] (the official SDK's golden initialize answer)
    answer = {
        "protocolVersion": 1,
        "agentCapabilities": {
            "loadSession": True,
            "mcpCapabilities": {},
            "promptCapabilities": {"image": True},
            "sessionCapabilities": {"list": {}, "close": {"_meta": {"x": 1}}},
        },
        "authMethods": [],
    }
    decoded = acp.decode_result("initialize", raw(answer))
    assert wire(decoded) == answer
    caps = decoded.agent_capabilities.session_capabilities
    assert caps.advertised() == ["close", "list"]
    assert caps.list_ == {} and caps.close == {"_meta": {"x": 1}} and caps.fork is None
    assert wire(acp.InitializeResponse(protocol_version=1)) == {"protocolVersion": 1}


def _merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        inner = out.get(key)
        out[key] = _merged(inner, value) if isinstance(inner, dict) else value
    return out


def test_what_acpfsm_does_not_model_is_kept_where_it_was() -> None:
    claude = acp.unmodelled(acp.InitializeResponse, raw(CLAUDE_AGENT_ACP_INIT))
    assert claude == {"agentCapabilities": {"auth": {"logout": {}}, "providers": {}}}
    codex = acp.unmodelled(acp.InitializeResponse, CODEX_ACP_INIT)
    assert codex == {
        "agentCapabilities": {"mcpCapabilities": {"acp": False}, "auth": {"logout": {}}}
    }
    # the typed message plus what it does not model is the message again
    assert _merged(wire(acp.decode_result("initialize", raw(CLAUDE_AGENT_ACP_INIT))), claude) == (
        CLAUDE_AGENT_ACP_INIT
    )
    back = _merged(wire(acp.decode_result("initialize", raw(CODEX_ACP_INIT))), codex)
    # but for booleans sent equal to their default, which ACP reads the same when absent
    expected = json.loads(json.dumps(CODEX_ACP_INIT))
    del expected["agentCapabilities"]["promptCapabilities"]["audio"]
    del expected["agentCapabilities"]["mcpCapabilities"]["sse"]
    assert back == expected
    # tags are declared fields; lists are not searched; not an object: nothing
    block = {"type": "text", "text": "x", "futureField": [1]}
    assert acp.unmodelled(acp.TextContent, block) == {"futureField": [1]}
    plan = {"sessionUpdate": "plan", "entries": [{"content": "c", "futureField": 1}]}
    assert acp.unmodelled(acp.AgentPlanUpdate, plan) == {}
    assert acp.unmodelled(acp.InitializeResponse, b"null") == {}
    assert acp.unmodelled(acp.InitializeResponse, {"agentCapabilities": 3}) == {}


def test_session_new_answer_with_modes_models_and_config_options() -> None:
    answer = {
        "sessionId": "abc",
        "modes": {"currentModeId": "default", "availableModes": [{"id": "default", "name": "D"}]},
        "models": {"currentModelId": "m1", "availableModels": [{"modelId": "m1", "name": "M"}]},
        "configOptions": [
            {
                "id": "model",
                "name": "Model",
                "category": "model",
                "type": "select",
                "currentValue": "m1",
                "options": [{"value": "m1", "name": "M"}],
            },
            {"id": "fast", "name": "Fast", "type": "boolean", "currentValue": True},
        ],
    }
    result = acp.decode_result("session/new", raw(answer))
    assert result.session_id == "abc"
    assert result.modes.current_mode_id == "default"
    assert result.models.available_models == [acp.ModelInfo(model_id="m1", name="M")]
    assert result.config_options[0].category == "model"
    assert result.config_options[1].current_value is True


def test_empty_results_decode_from_null_and_objects() -> None:
    assert acp.decode_result("session/set_mode", b"null") == acp.EmptyResponse()
    assert acp.decode_result("authenticate", b"{}") == acp.EmptyResponse()
    assert acp.decode_result("session/load", b"{}") == acp.LoadSessionResponse()
    with pytest.raises(msgspec.ValidationError):
        acp.decode_result("session/new", b"null")
    with pytest.raises(KeyError):
        acp.decode_result("no/such_method", b"{}")


UPDATES: list[tuple[dict[str, Any], type]] = [
    (
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x"}},
        acp.AgentMessageChunk,
    ),
    (
        {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "x"}},
        acp.UserMessageChunk,
    ),
    (
        {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "x"}},
        acp.AgentThoughtChunk,
    ),
    ({"sessionUpdate": "tool_call", "toolCallId": "t", "title": "T"}, acp.ToolCallStart),
    ({"sessionUpdate": "tool_call_update", "toolCallId": "t"}, acp.ToolCallProgress),
    ({"sessionUpdate": "plan", "entries": [{"content": "c"}]}, acp.AgentPlanUpdate),
    (
        {"sessionUpdate": "available_commands_update", "availableCommands": [{"name": "n"}]},
        acp.AvailableCommandsUpdate,
    ),
    ({"sessionUpdate": "current_mode_update", "currentModeId": "m"}, acp.CurrentModeUpdate),
    ({"sessionUpdate": "config_option_update", "configOptions": []}, acp.ConfigOptionUpdate),
    ({"sessionUpdate": "session_info_update", "title": "t"}, acp.SessionInfoUpdate),
    ({"sessionUpdate": "usage_update", "used": 1, "size": 9}, acp.UsageUpdate),
]


@pytest.mark.parametrize(("payload", "cls"), UPDATES)
def test_every_session_update_kind_decodes(payload: dict[str, Any], cls: type) -> None:
    notification = acp.decode_agent_params(
        "session/update", raw({"sessionId": "s", "update": {**payload, "futureField": 1}})
    )
    assert notification.session_id == "s"
    assert type(notification.update) is cls
    # and encodes back to the same wire kind
    assert wire(notification.update)["sessionUpdate"] == payload["sessionUpdate"]


def test_tool_call_fields() -> None:
    payload = {
        "sessionUpdate": "tool_call",
        "toolCallId": "t1",
        "title": "Edit",
        "kind": "edit",
        "status": "pending",
        "rawInput": {"path": "/a"},
        "content": [{"type": "diff", "path": "/a", "oldText": None, "newText": "b"}],
        "locations": [{"path": "/a", "line": 3}],
    }
    update = acp.decode_session_update(raw(payload))
    assert isinstance(update, acp.ToolCallStart)
    assert (update.tool_call_id, update.kind, update.status) == ("t1", "edit", "pending")
    assert update.raw_input == {"path": "/a"}
    assert update.content is not None and update.content[0]["newText"] == "b"


@pytest.mark.parametrize(
    "payload",
    [
        {"sessionUpdate": "brand_new_kind", "data": [1, 2, 3]},
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "video", "url": "x"}},
        {"sessionUpdate": "tool_call"},  # tolerated: every tool-call field has a default
        {"sessionUpdate": "usage_update", "used": "many"},
        {"noKindAtAll": True},
    ],
)
def test_unknown_or_unexpected_updates_pass_through(payload: dict[str, Any]) -> None:
    update = acp.decode_session_update(raw(payload))
    if payload.get("sessionUpdate") == "tool_call":
        assert isinstance(update, acp.ToolCallStart)
        return
    assert isinstance(update, acp.UnknownUpdate)
    assert update.payload == payload
    assert update.kind == payload.get("sessionUpdate", "")
    assert update.error


def test_non_object_update_is_a_decode_error() -> None:
    with pytest.raises(msgspec.DecodeError):
        acp.decode_agent_params("session/update", raw({"sessionId": "s", "update": [1]}))
    with pytest.raises(msgspec.DecodeError):
        acp.decode_agent_params("session/update", None)


def test_agent_requests_decode() -> None:
    permission = acp.decode_agent_params(
        "session/request_permission",
        raw(
            {
                "sessionId": "s",
                "toolCall": {"toolCallId": "t", "title": "Run", "status": "pending"},
                "options": [{"optionId": "a", "name": "Allow", "kind": "allow_once"}],
            }
        ),
    )
    assert permission.tool_call.tool_call_id == "t"
    assert permission.options == [
        acp.PermissionOption(option_id="a", name="Allow", kind="allow_once")
    ]
    read = acp.decode_agent_params(
        "fs/read_text_file", raw({"sessionId": "s", "path": "/a", "line": 2, "limit": 3})
    )
    assert (read.path, read.line, read.limit) == ("/a", 2, 3)
    write = acp.decode_agent_params(
        "fs/write_text_file", raw({"sessionId": "s", "path": "/a", "content": "x"})
    )
    assert write.content == "x"
    create = acp.decode_agent_params(
        "terminal/create",
        raw({"sessionId": "s", "command": "ls", "env": [{"name": "A", "value": "1"}]}),
    )
    assert create.env == [acp.EnvVariable(name="A", value="1")]
    for method in (
        "terminal/output",
        "terminal/release",
        "terminal/wait_for_exit",
        "terminal/kill",
    ):
        params = acp.decode_agent_params(method, raw({"sessionId": "s", "terminalId": "t"}))
        assert params.terminal_id == "t"
    assert acp.decode_agent_params("_auth/status_update", raw({"x": 1})) is None
    with pytest.raises(msgspec.ValidationError):
        acp.decode_agent_params("fs/read_text_file", raw({"sessionId": "s"}))


def test_permission_outcomes_on_the_wire() -> None:
    selected = acp.RequestPermissionResponse(outcome=acp.SelectedOutcome(option_id="a"))
    assert wire(selected) == {"outcome": {"outcome": "selected", "optionId": "a"}}
    cancelled = acp.RequestPermissionResponse(outcome=acp.DeniedOutcome())
    assert wire(cancelled) == {"outcome": {"outcome": "cancelled"}}
    assert acp.decode_result("session/request_permission", acp.encode(selected)) == selected


def test_envelopes() -> None:
    request = acp.decode_message(b'{"jsonrpc":"2.0","id":7,"method":"m","params":{"a":1}}')
    assert (request.id, request.method) == (7, "m")
    assert isinstance(request.params, msgspec.Raw)
    assert json.loads(bytes(request.params)) == {"a": 1}
    notification = acp.decode_message(b'{"jsonrpc":"2.0","method":"n"}')
    assert notification.id is msgspec.UNSET and notification.params is msgspec.UNSET
    response = acp.decode_message(b'{"jsonrpc":"2.0","id":"x","result":null}')
    assert response.id == "x" and bytes(response.result) == b"null"  # type: ignore[arg-type]
    error = acp.decode_message(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700}}')
    assert error.id is None and error.error == acp.JsonRpcError(code=-32700)
    codex_style = acp.decode_message(b'{"jsonrpc":"2.0","error":{"code":-32602,"message":"m"}}')
    assert codex_style.id is msgspec.UNSET
    out = acp.JsonRpcErrorResponse(id=3, error=acp.JsonRpcError(code=-32601, message="nope"))
    assert wire(out) == {"id": 3, "error": {"code": -32601, "message": "nope"}, "jsonrpc": "2.0"}
    for bad in (b"not json", b"[1,2]", b'"text"', b'{"id": {"a": 1}}'):
        with pytest.raises(msgspec.DecodeError):
            acp.decode_message(bad)


def test_structs_are_frozen() -> None:
    block = acp.text_block("a")
    with pytest.raises(AttributeError):
        block.text = "b"  # type: ignore[misc]


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
kinds = st.sampled_from([kind for kind, _ in ((p["sessionUpdate"], c) for p, c in UPDATES)])


@settings(max_examples=300, deadline=None)
@given(
    kind=kinds | st.text(max_size=12),
    fields=st.dictionaries(
        st.sampled_from(["content", "toolCallId", "entries", "used", "size", "title", "x"]),
        json_values,
        max_size=4,
    ),
)
def test_any_update_object_decodes_without_crashing(kind: str, fields: dict[str, Any]) -> None:
    payload = {"sessionUpdate": kind, **fields}
    update = acp.decode_session_update(raw(payload))
    if isinstance(update, acp.UnknownUpdate):
        assert update.payload == payload
    else:
        assert wire(update)["sessionUpdate"] == kind


@settings(max_examples=200, deadline=None)
@given(text=st.text(), session_id=st.text(min_size=1))
def test_prompt_text_round_trips_on_one_line(text: str, session_id: str) -> None:
    request = acp.PromptRequest(session_id=session_id, prompt=[acp.text_block(text)])
    encoded = acp.encode(acp.JsonRpcRequest(id=1, method="session/prompt", params=request))
    assert b"\n" not in encoded
    envelope = acp.decode_message(encoded)
    assert isinstance(envelope.params, msgspec.Raw)
    assert acp.decode_client_params("session/prompt", envelope.params) == request
