"""The official ACP Python SDK's golden messages through acpfsm's msgspec types.

Each of the 36 canonical messages the pinned SDK's sdist ships (``tests/golden/*.json``,
fetched into ``.cache/``, never copied here) decodes into the type acpfsm uses for it and
encodes back to the same JSON, and none of it is left unmodelled. A fragment that only ever
travels inside another message goes through that message: a content block as a prompt's,
a tool call content item as a ``tool_call_update``'s (acpfsm keeps those items as objects),
a permission outcome as a permission response's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import msgspec
import pytest

from acpfsm.adapters.acp import messages as acp
from tests.peers.sdk_corpus import REPO, VERSION, SdkCorpus


def _typed(cls: Any) -> Callable[[bytes], tuple[Any, dict[str, Any]]]:
    """Decode as ``cls`` (a struct or a union of structs); encoding it back is the message."""

    def run(raw: bytes) -> tuple[Any, dict[str, Any]]:
        value = msgspec.json.decode(raw, type=cls)
        return value, json.loads(acp.encode(value))

    return run


def _update(raw: bytes) -> tuple[Any, dict[str, Any]]:
    value = acp.decode_session_update(raw)
    assert not isinstance(value, acp.UnknownUpdate), value.error
    return value, json.loads(acp.encode(value))


def _tool_content(raw: bytes) -> tuple[Any, dict[str, Any]]:
    update = {"sessionUpdate": "tool_call_update", "toolCallId": "t", "content": [json.loads(raw)]}
    value, back = _update(json.dumps(update).encode())
    return value.content[0], back["content"][0]


def _content_block(raw: bytes) -> tuple[Any, dict[str, Any]]:
    request = {"sessionId": "s", "prompt": [json.loads(raw)]}
    value = acp.decode_client_params("session/prompt", json.dumps(request).encode())
    return value.prompt[0], json.loads(acp.encode(value))["prompt"][0]


def _outcome(raw: bytes) -> tuple[Any, dict[str, Any]]:
    response = json.dumps({"outcome": json.loads(raw)}).encode()
    value = acp.decode_result("session/request_permission", response)
    return value.outcome, json.loads(acp.encode(value))["outcome"]


GOLDEN: dict[str, Callable[[bytes], tuple[Any, dict[str, Any]]]] = {
    "cancel_notification": _typed(acp.CancelNotification),
    "content_audio": _content_block,
    "content_image": _content_block,
    "content_resource_blob": _content_block,
    "content_resource_link": _content_block,
    "content_resource_text": _content_block,
    "content_text": _content_block,
    "fs_read_text_file_request": _typed(acp.ReadTextFileRequest),
    "fs_read_text_file_response": _typed(acp.ReadTextFileResponse),
    "fs_write_text_file_request": _typed(acp.WriteTextFileRequest),
    "initialize_request": _typed(acp.InitializeRequest),
    "initialize_response": _typed(acp.InitializeResponse),
    "new_session_request": _typed(acp.NewSessionRequest),
    "new_session_response": _typed(acp.NewSessionResponse),
    "permission_outcome_cancelled": _outcome,
    "permission_outcome_selected": _outcome,
    "prompt_request": _typed(acp.PromptRequest),
    "request_permission_request": _typed(acp.RequestPermissionRequest),
    "request_permission_response_selected": _typed(acp.RequestPermissionResponse),
    "session_update_agent_message_chunk": _update,
    "session_update_agent_thought_chunk": _update,
    "session_update_config_option_update": _update,
    "session_update_plan": _update,
    "session_update_tool_call": _update,
    "session_update_tool_call_edit": _update,
    "session_update_tool_call_locations_rawinput": _update,
    "session_update_tool_call_read": _update,
    "session_update_tool_call_update_content": _update,
    "session_update_tool_call_update_more_fields": _update,
    "session_update_user_message_chunk": _update,
    "set_session_config_option_request": _typed(acp.SetSessionConfigOptionRequest),
    "set_session_config_option_response": _typed(acp.SetSessionConfigOptionResponse),
    "tool_content_content_text": _tool_content,
    "tool_content_diff": _tool_content,
    "tool_content_diff_no_old": _tool_content,
    "tool_content_terminal": _tool_content,
}


def test_the_corpus_is_the_pinned_sdk(sdk_corpus: SdkCorpus) -> None:
    assert version("agent-client-protocol") == VERSION  # the examples run on the installed SDK
    pins = (REPO / "constraints.txt").read_text().splitlines()
    assert f"agent-client-protocol=={VERSION}" in pins
    assert sorted(p.stem for p in sdk_corpus.golden.glob("*.json")) == sorted(GOLDEN)
    assert len(GOLDEN) == 36
    assert (sdk_corpus.examples / "echo_agent.py").is_file()


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_a_golden_message_round_trips(sdk_corpus: SdkCorpus, name: str) -> None:
    raw = (sdk_corpus.golden / f"{name}.json").read_bytes()
    _, back = GOLDEN[name](raw)
    assert back == json.loads(raw)


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_acpfsm_models_every_field_of_a_golden_message(sdk_corpus: SdkCorpus, name: str) -> None:
    raw = (sdk_corpus.golden / f"{name}.json").read_bytes()
    value, _ = GOLDEN[name](raw)
    if isinstance(value, msgspec.Struct):  # a tool call content item stays an object
        assert acp.unmodelled(type(value), raw) == {}
