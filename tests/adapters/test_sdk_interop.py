"""Interoperability with the official ACP Python SDK (``agent-client-protocol``), both ways.

The SDK is asyncio-only, so its side always runs in a process of its own:

* our :class:`StdioTransport` (trio and asyncio) drives ``tests/peers/sdk_agent.py``, a scripted
  agent written on the SDK;
* ``tests/peers/sdk_client.py``, a client written on the SDK, drives our reference agent and
  prints a JSON summary that the test checks.

Every wait is bounded and no process survives a test.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from acpfsm.adapters.acp.process import ShutdownPolicy, open_agent_process
from acpfsm.adapters.acp.stdio import StdioConfig, StdioTransport, open_stdio_transport
from acpfsm.adapters.classify import Call, classify_error
from acpfsm.adapters.errors import AgentRequestError, SteerUnsupported
from acpfsm.adapters.events import (
    AgentEvent,
    Complete,
    ErrorEvent,
    MessageChunk,
    PermissionRequest,
    Plan,
    Reasoning,
    SessionMode,
    SessionModels,
    SessionStatus,
    ToolCall,
    ToolUpdate,
)
from acpfsm.adapters.reference_agent import AGENT_NAME, reply_for
from acpfsm.adapters.transport import allow_once_permission_policy
from acpfsm.statecharts.vocab import ErrorClass

pytestmark = [pytest.mark.both_backends, pytest.mark.integration]

PEERS = Path(__file__).resolve().parents[1] / "peers"
START_BOUND = 15.0
"""The SDK's first answer: importing it (pydantic) takes about a second, more on a busy box."""
BOUND = 5.0
"""Any other single wait."""
SHUTDOWN = ShutdownPolicy(stdin_close_wait=2.0, term_wait=0.5, kill_wait=1.0, stderr_drain_wait=0.2)


def _reaped(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _dead(pid: int) -> bool:
    """Gone, or a zombie that only its own (dead) parent could have reaped."""
    if _reaped(pid):
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


async def _gone(pid: int) -> bool:
    with anyio.move_on_after(BOUND):
        while not _dead(pid):
            await anyio.sleep(0.01)
        return True
    return False


async def until(
    transport: StdioTransport, predicate: Callable[[AgentEvent], bool]
) -> list[AgentEvent]:
    seen: list[AgentEvent] = []
    with anyio.fail_after(BOUND):
        async for event in transport.events():
            seen.append(event)
            if predicate(event):
                return seen
    raise AssertionError(f"event stream ended first: {seen}")


def ends(gen: int) -> Callable[[AgentEvent], bool]:
    return lambda e: isinstance(e, Complete | ErrorEvent) and e.prompt_generation == gen


def said(events: list[AgentEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, MessageChunk) and e.role == "assistant")


# ------------------------------------------------------------------------ our client, SDK agent


async def test_our_client_drives_an_sdk_agent(tmp_path: Path) -> None:
    pid = 0
    async with open_stdio_transport(
        [sys.executable, str(PEERS / "sdk_agent.py")],
        cwd=tmp_path,
        config=StdioConfig(cancel_timeout=BOUND, exit_grace=0.3),
        shutdown=SHUTDOWN,
        permission_policy=allow_once_permission_policy,
    ) as t:
        assert t.process is not None
        pid = t.process.pid
        with anyio.fail_after(START_BOUND):
            caps = await t.initialize()
        assert (caps.protocol_version, caps.agent.name) == (1, "sdk-scripted-agent")
        assert caps.load_session and not caps.prompt_queueing

        with anyio.fail_after(BOUND):
            session = await t.new_session(str(tmp_path))
        sid = session.session_id
        assert sid.startswith("sdk-")
        assert (session.current_mode_id, [m.id for m in session.modes]) == ("ask", ["ask", "code"])
        assert session.current_model_id == "small"
        assert [m.model_id for m in session.models] == ["small", "large"]
        assert session.has_model_state

        # a turn: thought, tool call, plan, two chunks, end_turn
        await t.prompt("hello sdk", [], 1)
        events = await until(t, ends(1))
        kinds = [
            type(e)
            for e in events
            if isinstance(e, Reasoning | ToolCall | ToolUpdate | Plan | MessageChunk | Complete)
        ]
        assert kinds == [
            Reasoning,
            ToolCall,
            ToolUpdate,
            Plan,
            MessageChunk,
            MessageChunk,
            Complete,
        ]
        assert said(events) == "echo: hello sdk"
        thought = next(e for e in events if isinstance(e, Reasoning))
        assert thought.reasoning_text == "thinking with small"
        call = next(e for e in events if isinstance(e, ToolCall))
        assert (call.tool_name, call.tool_title, call.tool_status) == (
            "read",
            "Read the prompt",
            "pending",
        )
        update = next(e for e in events if isinstance(e, ToolUpdate))
        assert (update.tool_call_id, update.tool_status) == (call.tool_call_id, "complete")
        end = events[-1]
        assert isinstance(end, Complete) and (end.stop_reason, end.session_id) == ("end_turn", sid)

        # the SDK agent asks permission; the allow_once policy picks its allow option
        await t.prompt("permission please", [], 2)
        events = await until(t, ends(2))
        request = next(e for e in events if isinstance(e, PermissionRequest))
        assert [o.option_id for o in request.options] == ["yes", "no"]
        assert said(events) == "echo: permission please [permission: yes]"

        # mode, model (through the category "model" option), and their validation errors
        with anyio.fail_after(BOUND):
            await t.set_mode("code")
            await t.set_model("large")
        events = await until(
            t, lambda e: isinstance(e, SessionModels) and e.current_model_id == "large"
        )
        assert [e.current_mode_id for e in events if isinstance(e, SessionMode)][-1] == "code"
        with anyio.fail_after(BOUND), pytest.raises(AgentRequestError) as caught:
            await t.set_mode("bogus")
        assert caught.value.as_dict() == {
            "code": -32602,
            "message": "Invalid params",
            "data": {"modeId": "bogus"},
        }
        with anyio.fail_after(BOUND), pytest.raises(AgentRequestError) as caught:
            await t.set_config_option("model", "huge")
        assert caught.value.code == -32602
        with anyio.fail_after(BOUND), pytest.raises(AgentRequestError) as caught:
            await t.authenticate("anything")  # not implemented by the scripted agent
        assert caught.value.as_dict() == {
            "code": -32601,
            "message": "Method not found",
            "data": {"method": "authenticate"},
        }
        c = classify_error(caught.value, call=Call.AUTHENTICATE)
        assert c.kind is ErrorClass.METHOD_NOT_FOUND

        # cancel; steer is refused (no prompt queueing advertised)
        await t.prompt("hang until cancelled", [], 3)
        first = await until(t, lambda e: isinstance(e, MessageChunk))
        assert first[-1].prompt_generation == 3
        with pytest.raises(SteerUnsupported, match="prompt queueing"):
            await t.steer("more", [], 3)
        with anyio.fail_after(BOUND):
            assert (await t.cancel()).acknowledged
        events = first + await until(t, ends(3))
        end = events[-1]
        assert isinstance(end, Complete) and end.stop_reason == "cancelled"
        assert "thinking with large" in [
            e.reasoning_text for e in events if isinstance(e, Reasoning)
        ]

        # session/load: a known id replays quietly; the error shapes are classified
        with anyio.fail_after(BOUND):
            loaded = await t.load_session("sdk-known-session", str(tmp_path))
        assert (loaded.session_id, loaded.current_mode_id) == ("sdk-known-session", "ask")
        events = await until(t, lambda e: isinstance(e, SessionStatus))
        assert not any(isinstance(e, MessageChunk) for e in events)  # replay suppressed
        for bad, code, kind in [
            ("nope", -32002, ErrorClass.SESSION_UNKNOWN),
            ("codex-abc", -32603, ErrorClass.PROVIDER_ROLLOUT_MISSING),
        ]:
            with anyio.fail_after(BOUND), pytest.raises(AgentRequestError) as caught:
                await t.load_session(bad, str(tmp_path))
            assert caught.value.code == code
            assert (
                classify_error(caught.value, call=Call.SESSION_LOAD, loading_session_id=bad).kind
                is kind
            )
        assert t.session_id == "sdk-known-session"

        # the session made earlier in this process: loaded, then a live turn on it
        with anyio.fail_after(BOUND):
            await t.load_session(sid, str(tmp_path))
        await t.prompt("back again", [], 4)
        events = await until(t, ends(4))
        assert said(events) == "echo: back again"  # nothing of the replayed history
        assert not any(isinstance(e, MessageChunk) and e.role == "user" for e in events)

        with anyio.fail_after(BOUND):
            await t.aclose()
        assert t.process.returncode == 0  # the SDK agent exits on stdin EOF
    assert _reaped(pid)


# ------------------------------------------------------------------------ SDK client, our agent


async def test_sdk_client_drives_the_reference_agent(tmp_path: Path, backend: str) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    argv = [sys.executable, str(PEERS / "sdk_client.py"), str(workspace), "--backend", backend]
    output = bytearray()
    async with open_agent_process(argv, cwd=tmp_path, shutdown=SHUTDOWN) as client:
        with anyio.fail_after(START_BOUND * 2):
            async for data in client.stdout:
                output += data
            code = await client.wait()
        assert code == 0, client.stderr.tail()
    summary = json.loads(output)
    assert summary["sdkLog"] == []  # the SDK's schema accepted everything the agent sent
    assert (summary["protocolVersion"], summary["agent"]) == (1, AGENT_NAME)
    assert summary["loadSession"] is True
    assert summary["modes"] == ["default", "plan", "accept_edits"]
    assert summary["configOptions"] == ["mode", "model", "thinking"]

    first, written, cancelled = summary["turns"]
    assert first["stopReason"] == "end_turn"
    turn_kinds = [
        "agent_thought_chunk",
        "plan",
        "tool_call",
        "tool_call_update",
        "agent_message_chunk",
        "session_info_update",
    ]
    assert [k for k in first["kinds"] if k in turn_kinds] == turn_kinds
    assert first["text"] == reply_for("hello from the sdk") + " Ran `echo hello from the sdk`."
    assert summary["permissions"] == [
        {
            "title": "Run `echo hello from the sdk`",
            "options": ["allow_once", "allow_always", "reject_once", "reject_always"],
        }
    ]

    assert summary["modelAfter"] == "ref-smart"
    assert written["stopReason"] == "end_turn"
    assert written["text"] == reply_for("written by the sdk") + " Wrote sdk.txt."
    assert (workspace / "sdk.txt").read_text() == "written by the sdk\n"  # via the SDK's fs

    assert cancelled["stopReason"] == "cancelled"
    assert "agent_message_chunk" in cancelled["kinds"]

    replay = summary["replay"]
    assert replay["kinds"][0] == "user_message_chunk"
    assert "agent_message_chunk" in replay["kinds"]
    assert "hello from the sdk" in replay["userText"]
    assert replay["mode"] == "accept_edits"
    assert summary["loadUnknown"] == {
        "code": -32002,
        "message": "Resource not found",
        "data": {"sessionId": "no-such-session"},
    }
    assert summary["agentExit"] == 0
    assert _reaped(client.pid)
    assert await _gone(summary["agentPid"])
