"""Error classification against the exact answers real agents give offline.

Shapes are what the agents answered when probed without credentials (claude-agent-acp
0.101.0, claude-code-acp 0.16.2, codex-acp 0.16.0, gemini-cli 0.61.0; README.md, "What conform
reports for real agents"). Their agentctl string projections are agentctl's: its ACP adapter
wraps the agent's error (``failed to load session: <the error's JSON>``, kandev
internal/agentctl/server/adapter/transport/acp/adapter_session.go) and kandev's Go client
prefixes it (``load session failed: …``, internal/agent/runtime/agentctl/agent.go
``LoadSession``). The expected kinds are the seed's (D1–D5, KANDEV.md).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from acpfsm.adapters.classify import (
    RULES,
    Call,
    Classification,
    authorizes_load_fallback,
    classify_error,
    has_canonical_message,
    is_benign_teardown,
    is_cancel_release,
    is_missing_provider_rollout,
    is_stream_not_connected,
    is_transport_dead,
)
from acpfsm.adapters.errors import (
    AgentRequestError,
    StreamNotConnected,
    TransportClosed,
    TransportTimeout,
)
from acpfsm.statecharts.vocab import FALLBACK_AUTHORIZING, ErrorClass

E = ErrorClass
LOAD_ID = "019a1b2c-3d4e-7f00-8000-000000000001"
UNKNOWN_ID = "00000000-0000-4000-8000-000000000000"
LOAD_PREFIX = "load session failed: failed to load session"  # agentctl, HEAD


def jsn(obj: dict[str, Any]) -> str:
    """Compact JSON like acp-go-sdk's RequestError.Error()."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def req(obj: dict[str, Any], **kw: Any) -> AgentRequestError:
    return AgentRequestError(obj["code"], obj["message"], obj.get("data"), **kw)


def projected(obj: dict[str, Any], prefix: str = LOAD_PREFIX) -> str:
    return f"{prefix}: {jsn(obj)}"


# --- exact agent answers -----------------------------------------------------------------
CLAUDE_AGENT_LOAD_UNKNOWN = {
    "code": -32002,
    "message": "Resource not found",
    "data": {"sessionId": UNKNOWN_ID},
}
CLAUDE_AGENT_PROMPT_UNKNOWN = {
    "code": -32002,
    "message": "Resource not found",
    "data": {"sessionId": "does-not-exist"},
}
CLAUDE_CODE_LOAD_UNKNOWN = {
    "code": -32603,
    "message": "Internal error",
    "data": {"details": "Session not found"},
}
AUTH_REQUIRED = {"code": -32000, "message": "Authentication required"}
GEMINI_NEW_NO_KEY = {"code": -32000, "message": "Gemini API key is missing or not configured."}
CODEX_UNKNOWN_METHOD = {"code": -32601, "message": "Method not found", "data": "no/such_method"}
CLAUDE_UNKNOWN_METHOD = {
    "code": -32601,
    "message": '"Method not found": no/such_method',
    "data": {"method": "no/such_method"},
}
CODEX_SET_MODEL = {"code": -32601, "message": "Method not found", "data": "session/set_model"}
GEMINI_PROMPT_UNKNOWN = {"code": -32602, "message": "Session not found: does-not-exist"}
CODEX_CLOSE_UNKNOWN = {"code": -32002, "message": "Resource not found"}
CLAUDE_AGENT_BAD_MODE = {"code": -32602, "message": "Invalid params: Invalid Mode: no-such-mode"}
AGENT_DIED = {
    "code": -32603,
    "message": "Internal error",
    "data": {"error": "peer disconnected before response"},
}
STDIN_CLOSED = {
    "code": -32603,
    "message": "Internal error",
    "data": {"error": "write |1: file already closed"},
}
LOAD_MNF = {"code": -32601, "message": "Method not found", "data": {"method": "session/load"}}
AUTHENTICATE_MNF = {
    "code": -32601,
    "message": "Method not found",
    "data": {"method": "authenticate"},
}
CAPABILITY_FALSE = (
    "load session failed: agent does not support session loading (LoadSession capability is false)"
)


def rollout(session_id: str, **override: Any) -> dict[str, Any]:
    shape: dict[str, Any] = {
        "code": -32603,
        "message": "Internal error",
        "data": {"details": f"no rollout found for thread id {session_id}"},
    }
    shape.update(override)
    return shape


Case = tuple[Any, Call, str, ErrorClass]

ROWS: list[Any] = [
    # ---- session_unknown
    pytest.param(
        req(CLAUDE_AGENT_LOAD_UNKNOWN),
        Call.SESSION_LOAD,
        UNKNOWN_ID,
        E.SESSION_UNKNOWN,
        id="claude-agent-acp/load/-32002/structured",
    ),
    pytest.param(
        req(CLAUDE_AGENT_LOAD_UNKNOWN, method="session/load", prefix=LOAD_PREFIX),
        Call.SESSION_LOAD,
        UNKNOWN_ID,
        E.SESSION_UNKNOWN,
        id="claude-agent-acp/load/-32002/structured-with-prefix",
    ),
    pytest.param(
        "load session failed: Resource not found",
        Call.SESSION_LOAD,
        UNKNOWN_ID,
        E.SESSION_UNKNOWN,
        id="canonical/resource-not-found/suffix",
    ),
    pytest.param(
        "  Session/Load Failed: RESOURCE NOT FOUND \n",
        Call.SESSION_LOAD,
        UNKNOWN_ID,
        E.SESSION_UNKNOWN,
        id="canonical/resource-not-found/case-and-space",
    ),
    pytest.param(
        "resource not found",
        Call.SESSION_LOAD,
        "",
        E.SESSION_UNKNOWN,
        id="canonical/resource-not-found/equal",
    ),
    pytest.param(
        req(CLAUDE_AGENT_PROMPT_UNKNOWN),
        Call.PROMPT,
        "",
        E.SESSION_UNKNOWN,
        id="claude-agent-acp/prompt/-32002/structured",
    ),
    pytest.param(
        req(CODEX_CLOSE_UNKNOWN),
        Call.OTHER,
        "",
        E.SESSION_UNKNOWN,
        id="codex-acp/close/-32002/structured",
    ),
    # ---- method_not_found
    pytest.param(
        req(CODEX_UNKNOWN_METHOD),
        Call.OTHER,
        "",
        E.METHOD_NOT_FOUND,
        id="codex-acp/unknown-method/structured",
    ),
    pytest.param(
        req(CLAUDE_UNKNOWN_METHOD),
        Call.OTHER,
        "",
        E.METHOD_NOT_FOUND,
        id="claude-code-acp/unknown-method/structured",
    ),
    pytest.param(
        req(LOAD_MNF),
        Call.SESSION_LOAD,
        LOAD_ID,
        E.METHOD_NOT_FOUND,
        id="load/-32601/structured",
    ),
    pytest.param(
        req(CODEX_SET_MODEL),
        Call.SET_MODEL,
        "",
        E.METHOD_NOT_FOUND,
        id="codex-acp/set_model/-32601/structured",
    ),
    pytest.param(
        req(CODEX_SET_MODEL),
        Call.SET_CONFIG_OPTION,
        "",
        E.METHOD_NOT_FOUND,
        id="gemini-cli/set_config_option/-32601/structured",
    ),
    pytest.param(
        "load session failed: Method not found",
        Call.SESSION_LOAD,
        LOAD_ID,
        E.METHOD_NOT_FOUND,
        id="canonical/method-not-found/suffix",
    ),
    # ---- load_unsupported
    pytest.param(
        CAPABILITY_FALSE,
        Call.SESSION_LOAD,
        LOAD_ID,
        E.LOAD_UNSUPPORTED,
        id="agentctl/capability-false",
    ),
    pytest.param(
        "session/load failed: " + CAPABILITY_FALSE.upper(),
        Call.SESSION_LOAD,
        LOAD_ID,
        E.LOAD_UNSUPPORTED,
        id="agentctl/capability-false/wrapped-upper",
    ),
    # ---- provider_rollout_missing
    pytest.param(
        req(rollout(LOAD_ID)),
        Call.SESSION_LOAD,
        LOAD_ID,
        E.PROVIDER_ROLLOUT_MISSING,
        id="codex-acp/rollout/structured",
    ),
    pytest.param(
        projected(rollout(LOAD_ID)),
        Call.SESSION_LOAD,
        LOAD_ID,
        E.PROVIDER_ROLLOUT_MISSING,
        id="codex-acp/rollout/projection",
    ),
    pytest.param(
        "session/load failed: " + projected(rollout(LOAD_ID)) + " \n",
        Call.SESSION_LOAD,
        LOAD_ID,
        E.PROVIDER_ROLLOUT_MISSING,
        id="codex-acp/rollout/trailing-whitespace",
    ),
    pytest.param(
        "junk {not json " + jsn(rollout(LOAD_ID)),
        Call.SESSION_LOAD,
        LOAD_ID,
        E.PROVIDER_ROLLOUT_MISSING,
        id="codex-acp/rollout/later-brace-closes",
    ),
    pytest.param(
        projected(
            rollout(
                LOAD_ID,
                extra=[1, 2],
                data={"details": f"no rollout found for thread id {LOAD_ID}", "x": {}},
            )
        ),
        Call.SESSION_LOAD,
        LOAD_ID,
        E.PROVIDER_ROLLOUT_MISSING,
        id="codex-acp/rollout/unknown-fields-ignored",
    ),
    pytest.param(
        projected(
            {
                "Code": -32603,
                "MESSAGE": "Internal error",
                "Data": {"Details": f"no rollout found for thread id {LOAD_ID}"},
            }
        ),
        Call.SESSION_LOAD,
        LOAD_ID,
        E.PROVIDER_ROLLOUT_MISSING,
        id="codex-acp/rollout/key-case-folds-like-go-encoding-json",
    ),
    # ---- auth_required
    pytest.param(
        req(AUTH_REQUIRED),
        Call.SESSION_LOAD,
        UNKNOWN_ID,
        E.AUTH_REQUIRED,
        id="codex-acp/load/-32000/structured",
    ),
    pytest.param(
        projected(AUTH_REQUIRED),
        Call.SESSION_LOAD,
        UNKNOWN_ID,
        E.AUTH_REQUIRED,
        id="gemini-cli/load/-32000/projection",
    ),
    pytest.param(
        req(GEMINI_NEW_NO_KEY),
        Call.SESSION_NEW,
        "",
        E.AUTH_REQUIRED,
        id="gemini-cli/new/-32000/structured",
    ),
    pytest.param(
        projected(GEMINI_NEW_NO_KEY, "agent.session.new failed: authentication required"),
        Call.SESSION_NEW,
        "",
        E.AUTH_REQUIRED,
        id="gemini-cli/new/-32000/projection",
    ),
    pytest.param(
        req(AUTH_REQUIRED),
        Call.PROMPT,
        "",
        E.AUTH_REQUIRED,
        id="claude-agent-acp/prompt-no-creds/-32000/structured",
    ),
    pytest.param(
        "Authentication required",
        Call.PROMPT,
        "",
        E.AUTH_REQUIRED,
        id="agentctl-v0.95.1/prompt-error-event/message-only",
    ),
    # ---- transport_dead
    pytest.param(
        req(AGENT_DIED),
        Call.SESSION_LOAD,
        LOAD_ID,
        E.TRANSPORT_DEAD,
        id="agent-died/structured",
    ),
    pytest.param(
        projected(AGENT_DIED),
        Call.SESSION_LOAD,
        LOAD_ID,
        E.TRANSPORT_DEAD,
        id="agent-died/projection",
    ),
    pytest.param(
        jsn(AGENT_DIED),
        Call.PROMPT,
        "",
        E.TRANSPORT_DEAD,
        id="agent-died/prompt-error-event",
    ),
    pytest.param(
        "peer disconnected while waiting for pre-response notifications",
        Call.SESSION_NEW,
        "",
        E.TRANSPORT_DEAD,
        id="text/peer-disconnected-pre-response",
    ),
    pytest.param(
        'connection closed cause="peer connection closed"',
        Call.SESSION_LOAD,
        LOAD_ID,
        E.TRANSPORT_DEAD,
        id="text/connection-closed",
    ),
    pytest.param(
        "session/load failed: notification queue overflow",
        Call.SESSION_LOAD,
        LOAD_ID,
        E.TRANSPORT_DEAD,
        id="text/notification-queue-overflow",
    ),
    pytest.param(
        "load session failed: context deadline exceeded",
        Call.SESSION_LOAD,
        LOAD_ID,
        E.TRANSPORT_DEAD,
        id="text/context-deadline-exceeded(D5)",
    ),
    pytest.param(
        "session/load failed: peer disconnected: Method not found",
        Call.SESSION_LOAD,
        LOAD_ID,
        E.TRANSPORT_DEAD,
        id="order/transport-dead-before-fallback",
    ),
    pytest.param(
        projected(
            rollout(
                LOAD_ID,
                data={
                    "details": f"no rollout found for thread id {LOAD_ID}",
                    "error": "connection closed",
                },
            )
        ),
        Call.SESSION_LOAD,
        LOAD_ID,
        E.TRANSPORT_DEAD,
        id="order/transport-dead-before-rollout",
    ),
    pytest.param(
        TransportClosed("agent process exited (status 1)", stderr_tail="boom"),
        Call.SESSION_LOAD,
        LOAD_ID,
        E.TRANSPORT_DEAD,
        id="ours/TransportClosed",
    ),
    pytest.param(
        TransportTimeout("session/load: no answer within 30 s"),
        Call.SESSION_LOAD,
        LOAD_ID,
        E.TRANSPORT_DEAD,
        id="ours/TransportTimeout",
    ),
    pytest.param(
        asyncio.CancelledError(),
        Call.SESSION_LOAD,
        LOAD_ID,
        E.TRANSPORT_DEAD,
        id="asyncio.CancelledError",
    ),
    pytest.param(TimeoutError(), Call.SESSION_LOAD, LOAD_ID, E.TRANSPORT_DEAD, id="TimeoutError"),
    # ---- cancel_released
    pytest.param(
        "cancel escalated: agent did not complete turn within timeout",
        Call.PROMPT,
        "",
        E.CANCEL_RELEASED,
        id="local/cancel-escalated",
    ),
    pytest.param(
        "prompt failed: prompt abandoned after cancel",
        Call.PROMPT,
        "",
        E.CANCEL_RELEASED,
        id="agentctl/prompt-abandoned-after-cancel",
    ),
    pytest.param(
        "cancel escalated: agent did not acknowledge within timeout",
        Call.CANCEL,
        "",
        E.CANCEL_RELEASED,
        id="local/ErrCancelEscalated",
    ),
    pytest.param(
        "cancel escalated: connection closed",
        Call.PROMPT,
        "",
        E.CANCEL_RELEASED,
        id="order/prompt/cancel-release-before-transport-dead",
    ),
    pytest.param(
        "cancel escalated: connection closed",
        Call.SESSION_LOAD,
        LOAD_ID,
        E.TRANSPORT_DEAD,
        id="order/load/transport-dead-before-cancel-release",
    ),
    # ---- stream_not_connected
    pytest.param(StreamNotConnected(), Call.PROMPT, "", E.STREAM_NOT_CONNECTED, id="ours/SNC"),
    pytest.param(
        StreamNotConnected(
            "agent stream not connected while waiting for response", while_waiting=True
        ),
        Call.STEER,
        "",
        E.STREAM_NOT_CONNECTED,
        id="ours/SNC/while-waiting",
    ),
    pytest.param(
        "initialize failed: initialize request failed: agent stream not connected",
        Call.INITIALIZE,
        "",
        E.STREAM_NOT_CONNECTED,
        id="lifecycle/initialize-no-stream",
    ),
    pytest.param(
        StreamNotConnected("agent stream not connected: connection closed"),
        Call.STEER,
        "",
        E.STREAM_NOT_CONNECTED,
        id="order/steer/stream-before-transport-dead",
    ),
    # both dispatch-only rows hold: the stream test comes first (the two rows swapped
    # would say cancel_released)
    pytest.param(
        "cancel escalated: agent stream not connected",
        Call.PROMPT,
        "",
        E.STREAM_NOT_CONNECTED,
        id="order/prompt/stream-before-cancel-release",
    ),
    pytest.param(
        StreamNotConnected("cancel escalated: agent stream not connected"),
        Call.CANCEL,
        "",
        E.STREAM_NOT_CONNECTED,
        id="order/cancel/stream-before-cancel-release",
    ),
    pytest.param(
        StreamNotConnected("agent stream not connected: connection closed"),
        Call.SESSION_LOAD,
        LOAD_ID,
        E.TRANSPORT_DEAD,
        id="order/load/transport-dead-first",
    ),
    # ---- inconclusive: real answers
    pytest.param(
        projected(CLAUDE_AGENT_LOAD_UNKNOWN),
        Call.SESSION_LOAD,
        UNKNOWN_ID,
        E.INCONCLUSIVE,
        id="claude-agent-acp/load/-32002/projection-ends-with-json(seed-code)",
    ),
    pytest.param(
        projected(LOAD_MNF),
        Call.SESSION_LOAD,
        LOAD_ID,
        E.INCONCLUSIVE,
        id="load/-32601/projection-ends-with-json",
    ),
    pytest.param(
        req(CLAUDE_CODE_LOAD_UNKNOWN),
        Call.SESSION_LOAD,
        UNKNOWN_ID,
        E.INCONCLUSIVE,
        id="claude-code-acp/load/session-not-found/structured",
    ),
    pytest.param(
        projected(CLAUDE_CODE_LOAD_UNKNOWN),
        Call.SESSION_LOAD,
        UNKNOWN_ID,
        E.INCONCLUSIVE,
        id="claude-code-acp/load/session-not-found/projection",
    ),
    pytest.param(
        req(GEMINI_PROMPT_UNKNOWN),
        Call.PROMPT,
        "",
        E.INCONCLUSIVE,
        id="gemini-cli/prompt/session-not-found",
    ),
    pytest.param(
        req(CLAUDE_AGENT_BAD_MODE),
        Call.SET_MODE,
        "",
        E.INCONCLUSIVE,
        id="claude-agent-acp/set_mode/-32602",
    ),
    pytest.param(
        projected(STDIN_CLOSED, "cancel failed"),
        Call.CANCEL,
        "",
        E.INCONCLUSIVE,
        id="agentctl/cancel/stdin-closed",
    ),
    pytest.param(
        projected(AUTHENTICATE_MNF, "authenticate failed: authenticate failed"),
        Call.AUTHENTICATE,
        "",
        E.INCONCLUSIVE,
        id="agentctl/authenticate/-32601-projection",
    ),
    pytest.param(
        jsn(CLAUDE_UNKNOWN_METHOD),
        Call.OTHER,
        "",
        E.INCONCLUSIVE,
        id="claude-code-acp/unknown-method/projection",
    ),
    pytest.param(
        "session/load failed: context canceled",
        Call.SESSION_LOAD,
        LOAD_ID,
        E.INCONCLUSIVE,
        id="text/context-canceled-is-not-transport-dead",
    ),
    # ---- inconclusive: near-misses of the rollout check
    pytest.param(
        req(rollout("some-other-thread")),
        Call.SESSION_LOAD,
        LOAD_ID,
        E.INCONCLUSIVE,
        id="rollout/other-id/structured",
    ),
    pytest.param(
        projected(rollout("some-other-thread")),
        Call.SESSION_LOAD,
        LOAD_ID,
        E.INCONCLUSIVE,
        id="rollout/other-id/projection",
    ),
    pytest.param(
        projected(rollout(LOAD_ID + "x")),
        Call.SESSION_LOAD,
        LOAD_ID,
        E.INCONCLUSIVE,
        id="rollout/id-prefix-only",
    ),
    pytest.param(
        projected(rollout(LOAD_ID)),
        Call.SESSION_LOAD,
        "",
        E.INCONCLUSIVE,
        id="rollout/blank-loading-id",
    ),
    pytest.param(
        projected(rollout("   ")),
        Call.SESSION_LOAD,
        "   ",
        E.INCONCLUSIVE,
        id="rollout/whitespace-loading-id",
    ),
    pytest.param(
        projected(rollout(LOAD_ID)),
        Call.SESSION_LOAD,
        LOAD_ID.upper(),
        E.INCONCLUSIVE,
        id="rollout/id-case-differs",
    ),
    pytest.param(
        projected(rollout(LOAD_ID, message="internal error")),
        Call.SESSION_LOAD,
        LOAD_ID,
        E.INCONCLUSIVE,
        id="rollout/message-case-differs",
    ),
    pytest.param(
        projected(rollout(LOAD_ID, data={"details": f"No rollout found for thread id {LOAD_ID}"})),
        Call.SESSION_LOAD,
        LOAD_ID,
        E.INCONCLUSIVE,
        id="rollout/details-case-differs",
    ),
    pytest.param(
        projected(rollout(LOAD_ID, data={"details": f"no rollout found for thread id {LOAD_ID} "})),
        Call.SESSION_LOAD,
        LOAD_ID,
        E.INCONCLUSIVE,
        id="rollout/details-untrimmed",
    ),
    pytest.param(
        projected(rollout(LOAD_ID, code=-32000)),
        Call.SESSION_LOAD,
        LOAD_ID,
        E.AUTH_REQUIRED,
        id="rollout/wrong-code",
    ),
    pytest.param(
        projected(rollout(LOAD_ID)).replace("-32603", "-32603.0"),
        Call.SESSION_LOAD,
        LOAD_ID,
        E.INCONCLUSIVE,
        id="rollout/code-not-an-integer",
    ),
    pytest.param(
        projected(rollout(LOAD_ID, data=f"no rollout found for thread id {LOAD_ID}")),
        Call.SESSION_LOAD,
        LOAD_ID,
        E.INCONCLUSIVE,
        id="rollout/data-not-an-object",
    ),
    pytest.param(
        projected(
            rollout(LOAD_ID, data={"details": [f"no rollout found for thread id {LOAD_ID}"]})
        ),
        Call.SESSION_LOAD,
        LOAD_ID,
        E.INCONCLUSIVE,
        id="rollout/details-not-a-string",
    ),
    pytest.param(
        projected(rollout(LOAD_ID)) + " (retry later)",
        Call.SESSION_LOAD,
        LOAD_ID,
        E.INCONCLUSIVE,
        id="rollout/json-does-not-close-message",
    ),
    pytest.param(
        projected(rollout(LOAD_ID)).replace("}}", ',"n":NaN}}'),
        Call.SESSION_LOAD,
        LOAD_ID,
        E.INCONCLUSIVE,
        id="rollout/NaN-is-not-json",
    ),
    pytest.param(
        f"no rollout found for thread id {LOAD_ID}",
        Call.SESSION_LOAD,
        LOAD_ID,
        E.INCONCLUSIVE,
        id="rollout/bare-text-without-json",
    ),
    pytest.param(
        req(rollout(LOAD_ID)),
        Call.PROMPT,
        "",
        E.INCONCLUSIVE,
        id="rollout/structured-without-loading-id",
    ),
    # ---- inconclusive: near-misses of the canonical rule
    pytest.param(
        "failed to read config: resource not found in cache",
        Call.SESSION_LOAD,
        LOAD_ID,
        E.INCONCLUSIVE,
        id="canonical/resource-not-found-mid-message",
    ),
    pytest.param(
        "load session failed: Resource not found: abc",
        Call.SESSION_LOAD,
        LOAD_ID,
        E.INCONCLUSIVE,
        id="canonical/resource-not-found-followed-by-text",
    ),
    pytest.param(
        "load session failed: Resource not found.",
        Call.SESSION_LOAD,
        LOAD_ID,
        E.INCONCLUSIVE,
        id="canonical/resource-not-found-trailing-dot",
    ),
    pytest.param(
        "load session failed:Resource not found",
        Call.SESSION_LOAD,
        LOAD_ID,
        E.INCONCLUSIVE,
        id="canonical/no-space-after-colon",
    ),
    pytest.param(
        "internal: MCP Resource not found",
        Call.SESSION_LOAD,
        LOAD_ID,
        E.INCONCLUSIVE,
        id="canonical/longer-phrase-ending-in-it",
    ),
    pytest.param(
        "load session failed: LoadSession capability is false",
        Call.SESSION_LOAD,
        LOAD_ID,
        E.INCONCLUSIVE,
        id="canonical/capability-substring-only",
    ),
    pytest.param(
        '"Method not found": no/such_method',
        Call.OTHER,
        "",
        E.INCONCLUSIVE,
        id="canonical/claude-method-not-found-message-text",
    ),
    pytest.param(
        "Cancel escalated: agent did not complete turn within timeout",
        Call.PROMPT,
        "",
        E.INCONCLUSIVE,
        id="cancel-release/prefix-is-case-sensitive",
    ),
    pytest.param(
        "agent error: cancel escalated",
        Call.PROMPT,
        "",
        E.INCONCLUSIVE,
        id="cancel-release/prefix-not-at-start",
    ),
    pytest.param("", Call.SESSION_LOAD, LOAD_ID, E.INCONCLUSIVE, id="empty-string"),
    pytest.param(None, Call.SESSION_LOAD, LOAD_ID, E.INCONCLUSIVE, id="none"),
]


@pytest.mark.parametrize(("error", "call", "loading_id", "expected"), ROWS)
def test_classify_rows(error: Any, call: Call, loading_id: str, expected: ErrorClass) -> None:
    result = classify_error(error, call=call, loading_session_id=loading_id)
    assert result.kind is expected
    assert result.call is call
    assert authorizes_load_fallback(result) is (expected in FALLBACK_AUTHORIZING)


def test_every_kind_has_a_row_in_the_table_and_in_the_tests() -> None:
    table_kinds = {rule.kind for rule in RULES}
    assert table_kinds == set(ErrorClass) - {ErrorClass.INCONCLUSIVE}
    tested = {p.values[3] for p in ROWS}
    assert tested == set(ErrorClass)


def test_session_load_order_is_the_seeds() -> None:
    load_rows = [r.name for r in RULES if r.applies(Call.SESSION_LOAD)]
    assert load_rows[0] == "transport_dead"
    authorizing = [
        r.name for r in RULES if r.applies(Call.SESSION_LOAD) and r.kind in FALLBACK_AUTHORIZING
    ]
    # isSessionLoadFallbackErr: structured −32601, isSessionUnknownErr, rollout, then canonical.
    assert authorizing == [
        "method_not_found_structured",
        "session_unknown",
        "provider_rollout_missing",
        "method_not_found_canonical",
        "load_unsupported",
    ]
    assert load_rows[1 : 1 + len(authorizing)] == authorizing


# --- the seed's diagnostic booleans -----------------------------------------------------


@pytest.mark.parametrize(
    ("error", "loading_id", "flags"),
    [
        pytest.param(req(LOAD_MNF), LOAD_ID, {"method_not_found"}, id="structured-32601"),
        pytest.param(
            "load session failed: Method not found",
            LOAD_ID,
            set(),
            id="canonical-mnf-is-not-the-structured-flag",
        ),
        pytest.param(CAPABILITY_FALSE, LOAD_ID, {"capability_mismatch"}, id="capability"),
        pytest.param(
            req(CLAUDE_AGENT_LOAD_UNKNOWN), UNKNOWN_ID, {"session_unknown"}, id="structured-32002"
        ),
        pytest.param(
            "x: resource not found", LOAD_ID, {"session_unknown"}, id="canonical-resource"
        ),
        pytest.param(
            projected(rollout(LOAD_ID)), LOAD_ID, {"provider_session_missing"}, id="rollout"
        ),
        pytest.param(
            projected(AGENT_DIED),
            LOAD_ID,
            {"transport_dead", "benign_teardown"},
            id="peer-disconnected",
        ),
        pytest.param(
            "context deadline exceeded",
            LOAD_ID,
            {"transport_dead"},
            id="deadline-is-not-benign",
        ),
        pytest.param(TransportTimeout("t"), LOAD_ID, {"transport_dead"}, id="timeout-not-benign"),
        pytest.param(
            "context canceled", LOAD_ID, {"benign_teardown"}, id="canceled-text-benign-only"
        ),
        pytest.param(
            "cancel escalated: x",
            LOAD_ID,
            {"cancel_release", "benign_teardown"},
            id="cancel-release",
        ),
        pytest.param(StreamNotConnected(), LOAD_ID, {"stream_not_connected"}, id="snc"),
        pytest.param(projected(CLAUDE_CODE_LOAD_UNKNOWN), LOAD_ID, set(), id="none-set"),
        pytest.param(None, LOAD_ID, set(), id="no-error"),
        pytest.param("", LOAD_ID, set(), id="empty-text"),
    ],
)
def test_diagnostic_flags(error: Any, loading_id: str, flags: set[str]) -> None:
    result = classify_error(error, call=Call.SESSION_LOAD, loading_session_id=loading_id)
    all_flags = {
        "method_not_found",
        "capability_mismatch",
        "session_unknown",
        "provider_session_missing",
        "transport_dead",
        "benign_teardown",
        "cancel_release",
        "stream_not_connected",
    }
    assert {f for f in all_flags if getattr(result, f)} == flags


def test_classification_is_frozen_and_carries_the_message() -> None:
    result = classify_error(projected(AGENT_DIED), call=Call.SESSION_LOAD)
    assert isinstance(result, Classification)
    assert result.message == projected(AGENT_DIED)
    with pytest.raises(AttributeError):
        result.kind = ErrorClass.INCONCLUSIVE  # type: ignore[misc]
    for nothing in (None, ""):  # the seed's nil error: inconclusive, every flag false
        none = classify_error(nothing, call=Call.PROMPT)
        assert none == Classification(kind=ErrorClass.INCONCLUSIVE, call=Call.PROMPT)
    # the fields are keyword-only: a caller cannot depend on their order
    with pytest.raises(TypeError):
        Classification(ErrorClass.INCONCLUSIVE, Call.PROMPT)  # type: ignore[misc]


# --- wrapped errors, groups, real cancellation -----------------------------------------


def _wrapped(outer: str, inner: BaseException) -> RuntimeError:
    """``raise RuntimeError(outer) from inner``, as a value."""
    err = RuntimeError(outer)
    err.__cause__ = inner
    return err


def test_structured_error_found_through_cause_chain() -> None:
    err = _wrapped("session/load failed", req(CLAUDE_AGENT_LOAD_UNKNOWN))
    result = classify_error(err, call=Call.SESSION_LOAD, loading_session_id=UNKNOWN_ID)
    assert result.kind is E.SESSION_UNKNOWN
    assert result.message == "session/load failed: " + jsn(CLAUDE_AGENT_LOAD_UNKNOWN)


@pytest.mark.parametrize(
    ("inner", "call", "flag"),
    [
        (CLAUDE_AGENT_LOAD_UNKNOWN, Call.SESSION_LOAD, "session_unknown"),
        (CODEX_SET_MODEL, Call.SET_MODEL, "method_not_found"),
    ],
)
def test_the_first_structured_error_in_the_chain_decides(
    inner: dict[str, Any], call: Call, flag: str
) -> None:
    """Go's ``errors.As`` stops at the first request error: an outer −32603 wrapping an inner
    −32002 (or −32601) is an internal error, inconclusive, not the inner code's kind."""
    outer = req({"code": -32603, "message": "Internal error"})
    outer.__cause__ = req(inner)
    result = classify_error(outer, call=call, loading_session_id=UNKNOWN_ID)
    assert result.kind is E.INCONCLUSIVE
    assert getattr(result, flag) is False
    # the inner error alone, or behind a plain wrapper, is decided by its code
    alone = classify_error(_wrapped("failed", req(inner)), call=call)
    assert getattr(alone, flag) is True and alone.kind is not E.INCONCLUSIVE


def test_cause_text_is_read_like_go_wrapping() -> None:
    err = _wrapped("load session failed", ValueError("Resource not found"))
    assert classify_error(err, call=Call.SESSION_LOAD).kind is E.SESSION_UNKNOWN
    err = _wrapped("session/load failed", TransportClosed("agent exited"))
    assert classify_error(err, call=Call.SESSION_LOAD).kind is E.TRANSPORT_DEAD
    err = _wrapped("load failed", req(rollout(LOAD_ID)))
    result = classify_error(err, call=Call.SESSION_LOAD, loading_session_id=LOAD_ID)
    assert result.kind is E.PROVIDER_ROLLOUT_MISSING


def test_a_cause_already_in_the_message_is_not_repeated() -> None:
    """Go prints a wrapped error once: a cause whose text the wrapper already holds adds
    nothing (and an empty cause adds no separator)."""
    err = _wrapped("load failed: boom", ValueError("boom"))
    assert classify_error(err, call=Call.PROMPT).message == "load failed: boom"
    err = _wrapped("load failed", ValueError(""))
    assert classify_error(err, call=Call.PROMPT).message == "load failed"


def test_a_message_that_is_only_the_json_object_is_decoded() -> None:
    """The JSON tail may start at the message's first character (an agentctl body that is
    only the error object)."""
    assert is_missing_provider_rollout(jsn(rollout(LOAD_ID)), LOAD_ID)
    result = classify_error(
        jsn(rollout(LOAD_ID)), call=Call.SESSION_LOAD, loading_session_id=LOAD_ID
    )
    assert result.kind is E.PROVIDER_ROLLOUT_MISSING


def test_an_error_met_twice_in_the_tree_does_not_stop_the_walk() -> None:
    """A member repeated in a group (or a cause that is also a member) is visited once; the
    members after it are still searched."""
    repeated = ValueError("x")
    group = BaseExceptionGroup("g", [repeated, repeated, TransportClosed("eof")])
    assert is_transport_dead(group)


@pytest.mark.parametrize(
    "override",
    [{"code": -32700}, {"code": -32000}, {"message": "Internal"}, {"message": "Internal errors"}],
)
def test_the_rollout_shape_needs_exactly_its_code_and_message(override: dict[str, Any]) -> None:
    assert not is_missing_provider_rollout(req(rollout(LOAD_ID, **override)), LOAD_ID)
    assert not is_missing_provider_rollout(jsn(rollout(LOAD_ID, **override)), LOAD_ID)


def test_the_structured_rollout_error_decides_whatever_its_text() -> None:
    """The request error's own data is read even when the effective message does not close
    with its JSON (a cause's text follows it)."""
    err = req(rollout(LOAD_ID))
    err.__cause__ = ValueError("the codex process said so")
    assert is_missing_provider_rollout(err, LOAD_ID)


def test_no_error_has_no_canonical_message() -> None:
    assert not has_canonical_message(None, "Method not found")
    assert not has_canonical_message(None, "")


def test_the_rule_table_is_immutable() -> None:
    with pytest.raises(AttributeError):
        RULES[0].kind = ErrorClass.INCONCLUSIVE  # type: ignore[misc]


def test_exception_groups_are_searched() -> None:
    group = BaseExceptionGroup("task group failed", [ValueError("x"), TransportClosed("eof")])
    assert is_transport_dead(group)
    assert is_benign_teardown(group)
    group2 = ExceptionGroup("g", [req(CODEX_SET_MODEL)])
    assert classify_error(group2, call=Call.SET_MODEL).kind is E.METHOD_NOT_FOUND
    assert is_stream_not_connected(ExceptionGroup("g", [StreamNotConnected()]))


async def test_trio_cancelled_is_transport_dead() -> None:
    caught: list[BaseException] = []
    with trio.CancelScope() as scope:
        scope.cancel()
        try:
            await trio.lowlevel.checkpoint()
        except trio.Cancelled as exc:
            caught.append(exc)
            raise
    (cancelled,) = caught
    result = classify_error(cancelled, call=Call.SESSION_LOAD, loading_session_id=LOAD_ID)
    assert result.kind is E.TRANSPORT_DEAD
    assert result.benign_teardown


# --- predicates --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fn", "error", "expected"),
    [
        pytest.param(is_transport_dead, None, False, id="dead/none"),
        pytest.param(is_transport_dead, "", False, id="dead/empty"),
        pytest.param(is_transport_dead, "peer disconnected before response", True, id="dead/pd"),
        pytest.param(is_transport_dead, "context canceled", False, id="dead/canceled-text"),
        pytest.param(is_transport_dead, StreamNotConnected(), False, id="dead/snc"),
        pytest.param(is_cancel_release, None, False, id="release/none"),
        pytest.param(is_cancel_release, "cancel escalated", True, id="release/prefix"),
        pytest.param(is_cancel_release, " cancel escalated", False, id="release/untrimmed"),
        pytest.param(
            is_cancel_release, "x: prompt abandoned after cancel: y", True, id="release/contains"
        ),
        pytest.param(is_benign_teardown, None, False, id="benign/none"),
        pytest.param(is_benign_teardown, "", False, id="benign/empty"),
        pytest.param(is_benign_teardown, "notification queue overflow", True, id="benign/nqo"),
        pytest.param(is_benign_teardown, "context deadline exceeded", False, id="benign/deadl"),
        pytest.param(is_benign_teardown, asyncio.CancelledError(), True, id="benign/cancelled"),
        pytest.param(is_benign_teardown, TransportClosed("eof"), True, id="benign/closed"),
        pytest.param(is_benign_teardown, jsn(CLAUDE_CODE_LOAD_UNKNOWN), False, id="benign/other"),
        pytest.param(is_stream_not_connected, None, False, id="snc/none"),
        pytest.param(is_stream_not_connected, "x: agent stream not connected", True, id="snc/t"),
        pytest.param(is_stream_not_connected, "Agent Stream Not Connected", False, id="snc/case"),
    ],
)
def test_predicates(fn: Any, error: Any, expected: bool) -> None:
    assert fn(error) is expected


def test_rollout_predicate_directly() -> None:
    assert is_missing_provider_rollout(req(rollout(LOAD_ID)), LOAD_ID)
    assert not is_missing_provider_rollout(req(rollout(LOAD_ID)), "other")
    assert not is_missing_provider_rollout(None, LOAD_ID)
    # data that cannot be re-encoded falls back to the message (which still closes with JSON)
    odd = AgentRequestError(-32603, "Internal error", {"details": "x"})
    odd.data = {"details": object()}
    assert not is_missing_provider_rollout(odd, LOAD_ID)


@pytest.mark.parametrize(
    ("kind", "authorizes"), [pytest.param(k, k in FALLBACK_AUTHORIZING, id=k.value) for k in E]
)
def test_authorizes_load_fallback(kind: ErrorClass, authorizes: bool) -> None:
    assert authorizes_load_fallback(Classification(kind=kind, call=Call.SESSION_LOAD)) is authorizes
    assert authorizes is (
        kind
        in {E.METHOD_NOT_FOUND, E.SESSION_UNKNOWN, E.LOAD_UNSUPPORTED, E.PROVIDER_ROLLOUT_MISSING}
    )


# --- the canonical rule, by property -----------------------------------------------------

PHRASES = st.sampled_from(
    [
        "Method not found",
        "Resource not found",
        "agent does not support session loading (LoadSession capability is false)",
    ]
)
SPACE = st.text(alphabet=" \t\n\r\v\f\u00a0\u3000", max_size=3)


def _recase(text: str, flips: list[bool]) -> str:
    return "".join(c.upper() if flips[i % len(flips)] else c.lower() for i, c in enumerate(text))


@given(
    phrase=PHRASES,
    prefix=st.text(max_size=40),
    flips=st.lists(st.booleans(), min_size=1, max_size=8),
    lead=SPACE,
    trail=SPACE,
    with_prefix=st.booleans(),
)
def test_canonical_suffix_or_equal_matches(
    phrase: str, prefix: str, flips: list[bool], lead: str, trail: str, with_prefix: bool
) -> None:
    body = _recase(phrase, flips)
    message = lead + (f"{prefix}: {body}" if with_prefix else body) + trail
    assert has_canonical_message(message, phrase)


@given(
    phrase=PHRASES,
    prefix=st.text(max_size=40),
    suffix=st.text(alphabet=st.characters(blacklist_characters=":"), min_size=1, max_size=20),
)
def test_canonical_phrase_followed_by_text_does_not_match(
    phrase: str, prefix: str, suffix: str
) -> None:
    if not suffix.strip():
        suffix = "x" + suffix
    # the suffix has no ':', so the message cannot end with ': <phrase>' again
    message = f"{prefix}: {phrase}{suffix}"
    assert not has_canonical_message(message, phrase)


@given(text=st.text(max_size=200), call=st.sampled_from(list(Call)), sid=st.text(max_size=10))
def test_arbitrary_text_never_raises_and_fallback_needs_a_recognized_shape(
    text: str, call: Call, sid: str
) -> None:
    result = classify_error(text, call=call, loading_session_id=sid)
    if authorizes_load_fallback(result):
        lowered = text.lower()
        assert "not found" in lowered or "loadsession" in lowered or "rollout" in lowered
