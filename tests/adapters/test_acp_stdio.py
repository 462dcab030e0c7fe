"""StdioTransport against a small scripted ACP agent run as a real subprocess (trio and asyncio)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from acpfsm.adapters.acp.process import ShutdownPolicy
from acpfsm.adapters.acp.stdio import (
    DEFAULT_CONFIG,
    LOAD_UNSUPPORTED_MESSAGE,
    StdioConfig,
    StdioTransport,
    connect_stdio_transport,
    open_stdio_transport,
)
from acpfsm.adapters.errors import (
    AgentRequestError,
    LocalProtocolError,
    RemoteProtocolError,
    SteerUnsupported,
    TransportClosed,
)
from acpfsm.adapters.events import (
    AgentCapabilities,
    AgentEvent,
    AuthRequired,
    AvailableCommands,
    Complete,
    ContextWindow,
    ErrorEvent,
    MessageChunk,
    PermissionCancelled,
    PermissionOption,
    PermissionRequest,
    Plan,
    ProtocolErrorEvent,
    Reasoning,
    SessionInfo,
    SessionMode,
    SessionModels,
    SessionStatus,
    StreamDisconnected,
    ToolCall,
    ToolUpdate,
    Unknown,
)
from acpfsm.adapters.transport import (
    AgentTransport,
    Attachment,
    CancelResult,
    allow_once_permission_policy,
    reject_permission_policy,
)

from .pipes import HandPeer, Messages, PipeReader, PipeWriter, RecordingWriter, hand_peer

pytestmark = pytest.mark.both_backends

AGENT = Path(__file__).parent / "fake_agents" / "fake_acp_agent.py"
FAST = ShutdownPolicy(stdin_close_wait=1.0, term_wait=0.5, kill_wait=3.0, stderr_drain_wait=0.5)
CONFIG = StdioConfig(cancel_timeout=3.0, exit_grace=0.5)


def running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


@contextlib.asynccontextmanager
async def agent(
    workspace: Path,
    *flags: str,
    config: StdioConfig = CONFIG,
    initialize: bool = True,
    session: bool = True,
    **kwargs: Any,
) -> AsyncIterator[StdioTransport]:
    """A transport to the fake agent; on exit the agent process must be gone."""
    pid = 0
    with anyio.fail_after(20):
        async with open_stdio_transport(
            [sys.executable, str(AGENT), *flags],
            cwd=workspace,
            config=config,
            shutdown=FAST,
            **kwargs,
        ) as transport:
            assert transport.process is not None
            pid = transport.process.pid
            if initialize:
                await transport.initialize()
            if session:
                await transport.new_session(str(workspace))
            yield transport
    assert pid and not running(pid)


async def until(
    transport: StdioTransport, predicate: Callable[[AgentEvent], bool], seconds: float = 10
) -> list[AgentEvent]:
    """Events up to and including the first one matching ``predicate``."""
    seen: list[AgentEvent] = []
    with anyio.fail_after(seconds):
        async for event in transport.events():
            seen.append(event)
            if predicate(event):
                return seen
    raise AssertionError(f"event stream ended first: {seen}")


def completes(gen: int) -> Callable[[AgentEvent], bool]:
    return lambda e: isinstance(e, Complete | ErrorEvent) and e.prompt_generation == gen


def texts(events: list[AgentEvent]) -> list[str]:
    return [e.text for e in events if isinstance(e, MessageChunk) and e.text]


async def drain(transport: StdioTransport) -> list[AgentEvent]:
    with anyio.fail_after(10):
        return [event async for event in transport.events()]


# ------------------------------------------------------------------------------ handshake


async def test_initialize_and_new_session_snapshot(tmp_path: Path) -> None:
    async with agent(tmp_path, initialize=False, session=False) as t:
        assert isinstance(t, AgentTransport)
        assert t.capabilities is None and t.is_connected()
        caps = await t.initialize()
        assert caps.protocol_version == 1
        assert (caps.agent.name, caps.agent.version) == ("fake-acp-agent", "0.0.1")
        assert caps.load_session and not caps.prompt_queueing
        assert caps.supports_image and caps.supports_embedded_context and not caps.supports_audio
        assert caps.auth_methods == [{"id": "fake-login", "name": "Fake login"}]
        assert caps.session_capabilities == ["list", "resume"]
        # what acpfsm does not model is kept, where it was, as sent
        assert caps.unmodelled == {
            "agentCapabilities": {"auth": {"logout": {}}},
            "unknownTopLevelField": {"tolerated": True},
        }
        assert t.capabilities == caps
        result = await t.new_session(str(tmp_path))
        assert result.session_id == "sess-1" == t.session_id
        assert result.current_mode_id == "default"
        assert [m.id for m in result.modes] == ["default", "plan"]
        assert result.current_model_id == "fake-small"
        assert [m.model_id for m in result.models] == ["fake-small", "fake-large"]
        assert [o.id for o in result.config_options] == ["model", "fast"]
        assert result.config_options[0].category == "model"
        assert result.config_options[1].current_value == "false"
        assert result.has_model_state
        events = await until(t, lambda e: isinstance(e, SessionStatus))
        lifecycle = [e for e in events if not isinstance(e, AvailableCommands)]
        assert [type(e) for e in lifecycle] == [
            AgentCapabilities,
            SessionMode,
            SessionModels,
            SessionStatus,
        ]
        first = lifecycle[0]
        assert isinstance(first, AgentCapabilities) and first.supports_load_session
        models = lifecycle[2]
        assert isinstance(models, SessionModels)
        assert models.data == {"config_options_source": "provider_response"}
        status = lifecycle[3]
        assert isinstance(status, SessionStatus) and status.session_status == "new"
        assert status.session_id == "sess-1"


async def test_client_identity_and_capabilities_on_the_wire(tmp_path: Path) -> None:
    async def terminal(method: str, params: Any) -> Any:
        return {"terminalId": "term-1"}

    async with agent(tmp_path, terminal_handler=terminal) as t:
        await t.prompt("whoami", [], 1)
        events = await until(t, completes(1))
        sent = json.loads(texts(events)[0])
        assert sent["protocolVersion"] == 1
        assert sent["clientInfo"]["name"] == "acpfsm"
        assert sent["clientCapabilities"] == {
            "fs": {"readTextFile": True, "writeTextFile": True},
            "terminal": True,
        }
        await t.prompt("terminal", [], 2)
        assert 'terminal: {"terminalId": "term-1"}' in texts(await until(t, completes(2)))


async def test_protocol_version_mismatch(tmp_path: Path) -> None:
    async with agent(tmp_path, "--protocol", "2", initialize=False, session=False) as t:
        with pytest.raises(RemoteProtocolError, match="protocolVersion 2"):
            await t.initialize()


async def test_calls_in_the_wrong_order_are_local_errors(tmp_path: Path) -> None:
    async with agent(tmp_path, initialize=False, session=False) as t:
        with pytest.raises(LocalProtocolError, match="initialize"):
            await t.new_session(str(tmp_path))
        await t.initialize()
        with pytest.raises(LocalProtocolError, match="no ACP session"):
            await t.prompt("hi", [], 1)
        assert (await t.cancel()).acknowledged


async def test_auth_required_then_authenticate(tmp_path: Path) -> None:
    async with agent(tmp_path, "--auth-required", session=False) as t:
        with pytest.raises(AgentRequestError) as caught:
            await t.new_session(str(tmp_path))
        assert caught.value.code == -32000
        assert caught.value.method == "session/new"
        events = await until(t, lambda e: isinstance(e, AuthRequired))
        auth = events[-1]
        assert isinstance(auth, AuthRequired)
        assert auth.error == "Authentication required"
        assert auth.auth_methods == [{"id": "fake-login", "name": "Fake login"}]
        await t.authenticate("fake-login")
        assert (await t.new_session(str(tmp_path))).session_id == "sess-1"


# ------------------------------------------------------------------------------ turns


async def test_prompt_streams_then_completes_with_its_generation(tmp_path: Path) -> None:
    async with agent(tmp_path) as t:
        await t.prompt("hi there", [], 7)
        events = await until(t, completes(7))
        turn = [e for e in events if e.prompt_generation == 7]
        assert [type(e) for e in turn] == [Reasoning, MessageChunk, MessageChunk, Complete]
        assert texts(turn) == ["you said: ", "hi there"]
        reasoning = turn[0]
        assert isinstance(reasoning, Reasoning) and reasoning.reasoning_text == "thinking"
        complete = turn[-1]
        assert isinstance(complete, Complete)
        assert (complete.stop_reason, complete.session_id, complete.usage) == (
            "end_turn",
            "sess-1",
            None,
        )


async def test_prompts_pass_the_gate_one_at_a_time_in_order(tmp_path: Path) -> None:
    async with agent(tmp_path) as t:
        await t.prompt("sleep 0.2", [], 1)
        await t.prompt("second", [], 2)
        await t.prompt("third", [], 3)
        events = await until(t, completes(3))
        order = [
            (type(e).__name__, e.prompt_generation)
            for e in events
            if isinstance(e, Complete) or (isinstance(e, MessageChunk) and e.text != "you said: ")
        ]
        assert order == [
            ("MessageChunk", 1),
            ("Complete", 1),
            ("MessageChunk", 2),
            ("Complete", 2),
            ("MessageChunk", 3),
            ("Complete", 3),
        ]


async def test_every_update_kind_is_mapped(tmp_path: Path) -> None:
    async with agent(tmp_path) as t:
        await t.prompt("updates", [], 4)
        events = [
            e
            for e in await until(t, completes(4))
            if not isinstance(e, SessionStatus | AgentCapabilities)
        ]
        by_type: dict[type, list[Any]] = {}
        for event in events:
            by_type.setdefault(type(event), []).append(event)
        user, image = by_type[MessageChunk]
        assert (user.role, user.text) == ("user", "echo of the user")
        assert image.role == "assistant" and image.protocol_message_id == "m-1"
        assert image.content_blocks == [{"type": "image", "data": "aGk=", "mime_type": "image/png"}]
        (call,) = by_type[ToolCall]
        assert (call.tool_call_id, call.tool_name, call.tool_title, call.tool_status) == (
            "t1",
            "read",
            "Read file",
            "pending",
        )
        assert call.raw_input == {"path": "/x"}
        assert call.tool_call_contents == [
            {"type": "diff", "path": "/x", "old_text": "a", "new_text": "b"}
        ]
        progress, done = by_type[ToolUpdate]
        assert (progress.tool_status, progress.tool_title) == ("in_progress", "Reading")
        assert (done.tool_status, done.raw_output) == ("complete", {"ok": True})
        (plan,) = by_type[Plan]
        assert [(p.description, p.status, p.priority) for p in plan.plan_entries] == [
            ("step one", "completed", "high"),
            ("step two", "pending", "low"),
        ]
        commands = by_type[AvailableCommands][-1]
        assert commands.available_commands == [
            {"name": "review", "description": "Review code", "input_hint": "path"}
        ]
        (mode,) = [e for e in by_type[SessionMode] if e.current_mode_id == "plan"]
        assert [m.id for m in mode.available_modes] == ["default", "plan"]
        models = by_type[SessionModels][-1]
        assert models.data == {"config_options_source": "provider_update"}
        assert models.current_model_id == "fake-small"
        (info,) = by_type[SessionInfo]
        assert (info.session_title, info.session_updated_at) == ("A title", "t")
        first, second = by_type[ContextWindow]
        assert (first.context_window_size, first.context_window_used) == (1000, 10)
        assert (second.context_window_size, second.context_window_used) == (1000, 20)  # sticky
        (unknown,) = by_type[Unknown]
        assert unknown.kind == "future_kind"
        assert unknown.payload == {"sessionUpdate": "future_kind", "whatever": [1, 2]}
        (thought,) = by_type[Reasoning]
        assert thought.reasoning_text == "pondering"
        assert by_type[Complete][0].prompt_generation == 4
        assert all(e.session_id == "sess-1" for e in events)


async def test_rpc_error_becomes_an_error_event(tmp_path: Path) -> None:
    async with agent(tmp_path) as t:
        await t.prompt("error", [], 5)
        event = (await until(t, completes(5)))[-1]
        assert isinstance(event, ErrorEvent)
        assert event.error == (
            '{"code":-32603,"message":"Internal error","data":{"details":"model exploded"}}'
        )
        assert event.data == {
            "code": -32603,
            "message": "Internal error",
            "data": {"details": "model exploded"},
        }
        await t.prompt("still fine", [], 6)
        assert isinstance((await until(t, completes(6)))[-1], Complete)


async def test_usage_and_open_tool_sweep(tmp_path: Path) -> None:
    async with agent(tmp_path) as t:
        await t.prompt("usage", [], 1)
        complete = (await until(t, completes(1)))[-1]
        assert isinstance(complete, Complete)
        assert complete.usage == {"input_tokens": 3, "output_tokens": 5, "total_tokens": 8}
        await t.prompt("tool-open", [], 2)
        events = await until(t, completes(2))
        assert [(type(e).__name__, getattr(e, "tool_status", "")) for e in events[-3:]] == [
            ("ToolCall", "in_progress"),
            ("ToolUpdate", "cancelled"),
            ("Complete", ""),
        ]


# ------------------------------------------------------------------------------ permission / cancel


async def test_default_permission_policy_refuses(tmp_path: Path) -> None:
    """The transport's default policy picks the reject option (listed first here)."""
    async with agent(tmp_path) as t:
        await t.prompt("permission", [], 3)
        events = await until(t, completes(3))
        (request,) = [e for e in events if isinstance(e, PermissionRequest)]
        assert request.tool_call_id == "t-perm" and request.permission_title == "Write file"
        assert request.prompt_generation == 3
        assert [o.kind for o in request.options] == ["reject_once", "allow_once"]
        assert "permission: selected:reject" in texts(events)


async def test_allow_once_policy_allows(tmp_path: Path) -> None:
    async with agent(tmp_path, permission_policy=allow_once_permission_policy) as t:
        await t.prompt("permission", [], 3)
        assert "permission: selected:allow" in texts(await until(t, completes(3)))


def _options(*kinds: str) -> list[PermissionOption]:
    return [PermissionOption(option_id=f"id-{k}", name=k, kind=k) for k in kinds]


@pytest.mark.parametrize(
    ("kinds", "rejected", "allowed_once"),
    [
        # "rm -rf /" offering allow_always first: reject never picks an allow option, and
        # allow_once never takes allow_always (it refuses instead)
        (("allow_always", "reject_once"), "id-reject_once", "id-reject_once"),
        (
            ("allow_once", "allow_always", "reject_once", "reject_always"),
            "id-reject_once",
            "id-allow_once",
        ),
        (("reject_always", "allow_once", "reject_once"), "id-reject_once", "id-allow_once"),
        (("allow_always", "reject_always"), "id-reject_always", "id-reject_always"),
        (("allow_once", "allow_always"), None, "id-allow_once"),  # no reject option: cancelled
        (("allow_always",), None, None),
        ((), None, None),
    ],
)
async def test_built_in_policies_never_pick_the_wrong_kind(
    kinds: tuple[str, ...], rejected: str | None, allowed_once: str | None
) -> None:
    request = PermissionRequest(request_id="1", options=_options(*kinds))
    assert await reject_permission_policy(request) == rejected
    assert await allow_once_permission_policy(request) == allowed_once


async def test_policy_can_refuse(tmp_path: Path) -> None:
    async def refuse(request: PermissionRequest) -> str | None:
        return None

    async with agent(tmp_path, permission_policy=refuse) as t:
        await t.prompt("permission", [], 1)
        assert "permission: cancelled" in texts(await until(t, completes(1)))


async def test_cancel_answers_pending_permission_and_ends_the_turn(tmp_path: Path) -> None:
    asked = anyio.Event()

    async def never(request: PermissionRequest) -> str | None:
        asked.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async with agent(tmp_path, permission_policy=never) as t:
        await t.prompt("permission-hang", [], 2)
        with anyio.fail_after(10):
            await asked.wait()
        result = await t.cancel()
        assert result.acknowledged
        events = await until(t, completes(2))
        kinds = [type(e) for e in events]
        assert kinds.index(PermissionRequest) < kinds.index(PermissionCancelled)
        assert "permission: cancelled" in texts(events)
        complete = events[-1]
        assert isinstance(complete, Complete) and complete.stop_reason == "cancelled"


async def test_cancel_of_a_hanging_turn_is_acknowledged(tmp_path: Path) -> None:
    async with agent(tmp_path) as t:
        await t.prompt("hang", [], 8)
        await until(t, lambda e: isinstance(e, MessageChunk) and e.text == "hanging")
        assert (await t.cancel()).acknowledged
        complete = (await until(t, completes(8)))[-1]
        assert isinstance(complete, Complete) and complete.stop_reason == "cancelled"
        assert (await t.cancel()).acknowledged  # nothing in flight


async def test_unacknowledged_cancel_abandons_the_turn(tmp_path: Path) -> None:
    config = StdioConfig(cancel_timeout=0.3, exit_grace=0.5)
    async with agent(tmp_path, config=config) as t:
        await t.prompt("ignore-cancel", [], 1)
        await until(t, lambda e: isinstance(e, MessageChunk) and e.text == "ignoring cancel")
        result = await t.cancel()
        assert not result.acknowledged
        # the gate is free again; the abandoned turn's late end_turn is suppressed
        await t.prompt("next one", [], 2)
        events = await until(t, completes(2))
        assert [e for e in events if isinstance(e, Complete | ErrorEvent)] == [events[-1]]
        assert events[-1].prompt_generation == 2
        assert t.is_connected()
        await t.aclose()
        rest = await drain(t)
        assert not any(isinstance(e, Complete | ErrorEvent) for e in rest)


# ------------------------------------------------------------------------------ steer


async def test_steer_with_prompt_queueing_yields_one_complete(tmp_path: Path) -> None:
    async with agent(tmp_path, "--queueing") as t:
        assert t.capabilities is not None and t.capabilities.prompt_queueing
        await t.prompt("slow", [], 1)
        await until(t, lambda e: isinstance(e, MessageChunk) and e.text == "slow start")
        await t.steer("steered words", [], 1)
        seen: list[AgentEvent] = []
        with anyio.fail_after(10):
            async for event in t.events():
                seen.append(event)
                if any(isinstance(e, Complete) for e in seen) and "slow end." in texts(seen):
                    break
        await t.prompt("after", [], 2)
        seen += await until(t, completes(2))
        ends = [e for e in seen if isinstance(e, Complete | ErrorEvent)]
        assert [(type(e), e.prompt_generation) for e in ends] == [(Complete, 1), (Complete, 2)]
        assert "steered words" in texts(seen)


async def test_steer_is_refused_without_queueing_or_without_a_turn(tmp_path: Path) -> None:
    async with agent(tmp_path) as t:
        await t.prompt("hang", [], 1)
        await until(t, lambda e: isinstance(e, MessageChunk) and e.text == "hanging")
        with pytest.raises(SteerUnsupported, match="prompt queueing"):
            await t.steer("more", [], 1)
        assert (await t.cancel()).acknowledged
    async with agent(tmp_path, "--queueing") as t:
        with pytest.raises(SteerUnsupported, match="no prompt in flight"):
            await t.steer("more", [], 1)


# ------------------------------------------------------------------------------ sessions


async def test_load_session_replays_quietly_and_resumes(tmp_path: Path) -> None:
    async with agent(tmp_path, session=False) as t:
        result = await t.load_session("sess-known", str(tmp_path))
        assert result.session_id == "sess-known" == t.session_id
        assert result.current_model_id == "fake-small"
        events = await until(t, lambda e: isinstance(e, SessionStatus))
        assert not any(isinstance(e, MessageChunk) for e in events)  # replay suppressed
        assert [type(e) for e in events[1:]] == [
            AvailableCommands,
            Plan,
            SessionMode,
            SessionModels,
            SessionStatus,
        ]
        plan = events[2]
        assert isinstance(plan, Plan) and plan.plan_entries[0].description == "old plan"
        status = events[-1]
        assert isinstance(status, SessionStatus) and status.session_status == "resumed"
        with pytest.raises(AgentRequestError) as caught:
            await t.load_session("nope", str(tmp_path))
        assert caught.value.code == -32002
        assert caught.value.data == {"sessionId": "nope"}
        assert t.session_id == "sess-known"


async def test_load_session_replay_can_be_kept(tmp_path: Path) -> None:
    config = StdioConfig(suppress_replay=False)
    async with agent(tmp_path, config=config, session=False) as t:
        await t.load_session("sess-known", str(tmp_path))
        events = await until(t, lambda e: isinstance(e, SessionStatus))
        chunks = [(e.role, e.text) for e in events if isinstance(e, MessageChunk)]
        assert chunks == [("user", "old question"), ("assistant", "old answer")]


async def test_load_session_without_the_capability(tmp_path: Path) -> None:
    async with agent(tmp_path, "--no-load", session=False) as t:
        with pytest.raises(LocalProtocolError) as caught:
            await t.load_session("sess-known", str(tmp_path))
        assert str(caught.value) == LOAD_UNSUPPORTED_MESSAGE
        assert str(caught.value) == (
            "agent does not support session loading (LoadSession capability is false)"
        )


async def test_mode_and_config_options(tmp_path: Path) -> None:
    async with agent(tmp_path) as t:
        await until(t, lambda e: isinstance(e, SessionStatus))
        await t.set_mode("plan")
        mode = (await until(t, lambda e: isinstance(e, SessionMode)))[-1]
        assert isinstance(mode, SessionMode) and mode.current_mode_id == "plan"
        assert len(mode.available_modes) == 2
        with pytest.raises(AgentRequestError) as caught:
            await t.set_mode("bogus")
        assert caught.value.code == -32602
        await t.set_model("fake-large")
        models = (await until(t, lambda e: isinstance(e, SessionModels)))[-1]
        assert isinstance(models, SessionModels) and models.current_model_id == "fake-large"
        await t.set_config_option("fast", "true")
        models = (await until(t, lambda e: isinstance(e, SessionModels)))[-1]
        assert isinstance(models, SessionModels)
        # the answer names the option it answers, so a settlement waiting for it can settle
        assert models.data == {
            "config_options_source": "provider_response",
            "config_options_config_id": "fast",
        }
        with pytest.raises(AgentRequestError, match="Invalid value"):
            await t.set_model("no-such-model")
        with pytest.raises(AgentRequestError) as caught:
            await t.set_config_option("nope", "1")
        assert caught.value.data == {"details": "no such option"}


async def test_legacy_model_selection(tmp_path: Path) -> None:
    async with agent(tmp_path, "--legacy-models", session=False) as t:
        result = await t.new_session(str(tmp_path))
        assert result.config_options == [] and result.has_model_state
        assert [m.model_id for m in result.models] == ["fake-small", "fake-large"]
        await until(t, lambda e: isinstance(e, SessionStatus))
        await t.set_model("fake-large")
        models = (await until(t, lambda e: isinstance(e, SessionModels)))[-1]
        assert isinstance(models, SessionModels) and models.current_model_id == "fake-large"


async def test_agent_without_model_selection_ignores_set_model(tmp_path: Path) -> None:
    async with agent(tmp_path, "--no-models", session=False) as t:
        result = await t.new_session(str(tmp_path))
        assert not result.has_model_state and result.models == []
        await t.set_model("anything")  # -32601 from session/set_model: quietly unchanged
        await t.prompt("hi", [], 1)
        events = await until(t, completes(1))
        assert not any(isinstance(e, SessionModels) for e in events)


# ------------------------------------------------------------------------------ fs / terminal


async def test_fs_requests_are_confined_to_the_workspace(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "inside.txt").write_text("inside text")
    (tmp_path / "outside.txt").write_text("secret")
    os.symlink(tmp_path / "outside.txt", workspace / "link.txt")
    async with agent(workspace) as t:
        script = [
            f"read {workspace / 'inside.txt'}",
            f"read {tmp_path / 'outside.txt'}",
            f"read {workspace / 'link.txt'}",
            f"read {workspace / '..' / 'outside.txt'}",
            "read inside.txt",
            f"read {workspace / 'missing.txt'}",
            f"write {workspace / 'sub' / 'new.txt'} hello",
            f"write {tmp_path / 'evil.txt'} pwned",
        ]
        answers = []
        for gen, line in enumerate(script, start=1):
            await t.prompt(line, [], gen)
            answers.append(texts(await until(t, completes(gen)))[0])
        assert answers == [
            "content: inside text",
            "error: -32602 Invalid params: path is outside the workspace",
            "error: -32602 Invalid params: path is outside the workspace",
            "error: -32602 Invalid params: path is outside the workspace",
            "error: -32602 Invalid params: path must be absolute",
            "error: -32002 Resource not found",
            "written",
            "error: -32602",
        ]
        assert (workspace / "sub" / "new.txt").read_text() == "hello"
        assert not (tmp_path / "evil.txt").exists()


async def test_fs_and_terminal_can_be_refused(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a")
    config = StdioConfig(fs_read=False, fs_write=False)
    async with agent(tmp_path, config=config) as t:
        await t.prompt(f"read {tmp_path / 'a.txt'}", [], 1)
        assert texts(await until(t, completes(1))) == ["error: -32601 Method not found"]
        await t.prompt("terminal", [], 2)
        assert texts(await until(t, completes(2))) == ["error: -32601 Method not found"]
        await t.prompt("whoami", [], 3)
        sent = json.loads(texts(await until(t, completes(3)))[0])
        assert sent["clientCapabilities"] == {"fs": {}}


# ------------------------------------------------------------------------------ attachments


async def test_attachments_become_content_blocks(tmp_path: Path) -> None:
    image = tmp_path / "pic.png"
    image.write_bytes(b"\x89PNG fake")
    async with agent(tmp_path) as t:
        materialized = await t.materialize_attachment(Attachment(name="pic.png", path=str(image)))
        assert materialized.data == b"\x89PNG fake"
        assert materialized.size == len(b"\x89PNG fake")
        assert materialized.mime_type == "image/png"
        attachments = [
            Attachment(name="pic.png", path=str(image)),
            Attachment(name="notes.txt", data=b"some notes", mime_type="text/plain"),
            Attachment(name="big.bin", path=str(image), delivery_mode="path"),
        ]
        await t.prompt("blocks", attachments, 1)
        events = await until(t, completes(1))
        assert texts(events) == ["blocks: text,image,resource,resource_link"]
        with pytest.raises(LocalProtocolError, match="cannot read attachment"):
            await t.materialize_attachment(Attachment(name="x", path=str(tmp_path / "missing")))
        await t.prompt("blocks", [Attachment(name="x", path=str(tmp_path / "missing"))], 2)
        error = (await until(t, completes(2)))[-1]
        assert isinstance(error, ErrorEvent) and "cannot read attachment" in error.error


# ------------------------------------------------------------------------------ faults


async def test_agent_crash_mid_turn_is_transport_death(tmp_path: Path) -> None:
    async with agent(tmp_path) as t:
        await t.prompt("crash", [], 1)
        await t.prompt("queued behind the crash", [], 2)
        events = await drain(t)
        ends = [e for e in events if isinstance(e, ErrorEvent)]
        assert [e.prompt_generation for e in ends] == [1, 2]
        for end in ends:
            assert end.error.startswith("peer disconnected before response")
            assert "agent process exited with code 3" in end.error
            assert "fatal: boom" in end.error
        last = events[-1]
        assert isinstance(last, StreamDisconnected)
        assert "peer disconnected" in last.error and "exited with code 3" in last.error
        assert last.exit_code == 3
        assert last.stderr_tail == "fatal: boom\nsecond line"
        assert not t.is_connected()
        with pytest.raises(TransportClosed, match="peer disconnected"):
            await t.prompt("again", [], 3)
        with pytest.raises(TransportClosed, match="peer disconnected"):
            await t.set_mode("plan")
        assert "fatal: boom" in t.stderr_tail()


async def test_garbage_and_oversize_lines_are_survived(tmp_path: Path) -> None:
    config = StdioConfig(max_line_bytes=4096)
    async with agent(tmp_path, config=config) as t:
        await t.prompt("garbage", [], 1)
        events = await until(t, completes(1))
        errors = [e.error for e in events if isinstance(e, ProtocolErrorEvent)]
        assert len(errors) == 3
        assert errors[0].startswith("malformed JSON-RPC message from agent")
        assert errors[1] == "response to unknown request id 999999 from agent"
        assert errors[2].startswith("error response without id from agent")
        assert "after garbage" in texts(events)
        assert isinstance(events[-1], Complete)
        await t.prompt("oversize 10000", [], 2)
        events = await until(t, completes(2))
        errors = [e.error for e in events if isinstance(e, ProtocolErrorEvent)]
        assert len(errors) == 1 and "exceeds 4096 bytes" in errors[0]
        assert texts(events) == ["after oversize"]
        assert isinstance(events[-1], Complete)
        assert t.is_connected()


async def test_agent_closing_stdout_is_transport_death(tmp_path: Path) -> None:
    async with agent(tmp_path) as t:
        assert t.process is not None
        await t.prompt("close-stdout", [], 1)
        events = await drain(t)
        assert isinstance(events[-1], StreamDisconnected)
        assert events[-1].error.startswith("peer disconnected before response")
        error = events[-2]
        assert isinstance(error, ErrorEvent) and error.prompt_generation == 1
        # the still-running agent is shut down without waiting for aclose
        with anyio.fail_after(10):
            await t.process.exited.wait()


async def test_the_request_flood_bounds_are_the_configs(tmp_path: Path) -> None:
    """How many of the agent's requests are served at once, and how long the next waits for
    a slot, are tunables of the transport (the flood itself: test_acp_jsonrpc.py)."""
    config = StdioConfig(max_incoming=3, flood_grace=0.5)
    async with agent(tmp_path, config=config) as t:
        assert (t.connection.max_incoming, t.connection.flood_grace) == (3, 0.5)
    assert (DEFAULT_CONFIG.max_incoming, DEFAULT_CONFIG.flood_grace) == (1024, 5.0)


async def test_an_event_consumer_that_stalls_closes_the_transport(tmp_path: Path) -> None:
    config = StdioConfig(event_queue_limit=50, backpressure_timeout=0.2)
    async with agent(tmp_path, config=config) as t:
        await t.prompt("flood 500", [], 1)
        for _ in range(1000):  # do not consume events until the transport gave up
            if not t.is_connected():
                break
            await anyio.sleep(0.01)
        assert not t.is_connected()
        assert t.paused == 1
        events = await drain(t)
        assert isinstance(events[-1], StreamDisconnected)
        error = events[-1].error
        assert error.startswith("notification queue overflow: the event consumer is gone or")
        assert any(isinstance(e, ErrorEvent) and e.error == error for e in events)


async def test_aclose_is_clean_and_final(tmp_path: Path) -> None:
    async with agent(tmp_path) as t:
        assert t.process is not None
        await t.aclose()
        assert not t.is_connected()
        events = await drain(t)
        last = events[-1]
        assert isinstance(last, StreamDisconnected)
        assert (last.error, last.exit_code) == ("", 0)
        assert not running(t.process.pid)
        with pytest.raises(TransportClosed, match="connection closed"):
            await t.prompt("hi", [], 1)
        await t.aclose()  # idempotent


# ------------------------------------------------------------------------------ without a process


async def scripted_agent(
    requests: MemoryObjectReceiveStream[bytes],
    answers: MemoryObjectSendStream[bytes],
    results: dict[str, Any],
    seen: dict[str, Any] | None = None,
) -> None:
    """Answer each JSON-RPC request line with ``results[method]`` until the client closes;
    ``seen`` keeps the params of each method's last request."""
    messages = Messages(requests)
    while (request := await messages.next()) is not None:
        if seen is not None:
            seen[request["method"]] = request.get("params")
        answer = {"jsonrpc": "2.0", "id": request["id"], "result": results[request["method"]]}
        await answers.send(json.dumps(answer).encode() + b"\n")


async def test_transport_over_plain_byte_streams(tmp_path: Path) -> None:
    to_agent_send, to_agent_receive = anyio.create_memory_object_stream[bytes](100)
    from_agent_send, from_agent_receive = anyio.create_memory_object_stream[bytes](100)
    with to_agent_send, to_agent_receive, from_agent_send, from_agent_receive:
        results = {"initialize": {"protocolVersion": 1}, "session/new": {"sessionId": "mem-1"}}
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(scripted_agent, to_agent_receive, from_agent_send, results)
                async with connect_stdio_transport(
                    PipeReader(from_agent_receive), PipeWriter(to_agent_send), workspace=tmp_path
                ) as t:
                    assert t.process is None
                    caps = await t.initialize()
                    assert caps.agent.name == "unknown" and not caps.load_session
                    result = await t.new_session(str(tmp_path))
                    assert result.session_id == "mem-1" and not result.has_model_state
                events = await drain(t)
                assert [type(e) for e in events] == [
                    AgentCapabilities,
                    SessionStatus,
                    StreamDisconnected,
                ]
                last = events[-1]
                assert isinstance(last, StreamDisconnected)
                assert (last.error, last.exit_code, last.stderr_tail) == ("", None, "")


# ------------------------------------------------------------------------------ steer handoff undone


@contextlib.asynccontextmanager
async def turn_in_flight(workspace: Path) -> AsyncIterator[tuple[StdioTransport, HandPeer, int]]:
    """A transport to a prompt-queueing :func:`hand_peer` with turn 1 sent (and its request
    id), inside a 30 s bound."""
    with anyio.fail_after(30):
        async with (
            hand_peer() as peer,
            connect_stdio_transport(peer.reader, peer.writer, workspace=workspace) as t,
        ):
            await t.initialize()
            await t.new_session(str(workspace))
            await t.prompt("first", [], 1)
            yield t, peer, await peer.next_prompt()


async def test_prompt_lets_the_turn_worker_write_before_it_returns(
    tmp_path: Path, backend: str
) -> None:
    """``prompt()`` queues the turn and yields once, so the woken turn worker writes the
    request before the caller goes on: on asyncio by the time ``prompt()`` returns; trio runs
    each batch of ready tasks in a random order, so there by the caller's next checkpoint."""
    written: list[bytes] = []

    class Recording(PipeWriter):
        async def send(self, item: bytes) -> None:
            written.append(bytes(item))
            await super().send(item)

    def prompts() -> int:
        return sum(b'"session/prompt"' in line for line in written)

    with anyio.fail_after(30):
        async with (
            hand_peer() as peer,
            connect_stdio_transport(
                peer.reader, Recording(peer.writer.stream), workspace=tmp_path
            ) as t,
        ):
            await t.initialize()
            await t.new_session(str(tmp_path))
            await t.prompt("first", [], 1)
            if backend == "trio":
                await anyio.lowlevel.checkpoint()
            assert prompts() == 1
            await peer.end_turn(await peer.next_prompt())
            await until(t, completes(1))


async def test_a_turn_given_up_while_its_request_is_written_is_abandoned_once_written(
    tmp_path: Path, autojump_clock: object, backend: str
) -> None:
    """cancel() gives up on a turn (no end within its bound) while the turn's request is
    still being written (stdin full, after its attachments were prepared): once written, the
    request is abandoned: the agent is told (``$/cancel_request`` with the request's id), and
    its late answer will be dropped."""
    prepared = anyio.Event()
    # the cancel's bound outlasts the start of the write (virtual time under trio)
    config = StdioConfig(cancel_timeout=3.0 if backend == "trio" else 0.5, exit_grace=0.5)
    with anyio.fail_after(30):
        async with hand_peer() as peer:
            writer = RecordingWriter(peer.writer.stream)
            async with connect_stdio_transport(
                peer.reader, writer, workspace=tmp_path, config=config
            ) as t:
                await t.initialize()
                await t.new_session(str(tmp_path))
                blocks = t._prompt_blocks

                async def preparing(text: str, attachments: Any) -> Any:
                    await prepared.wait()  # the attachments take a while
                    return await blocks(text, attachments)

                t._prompt_blocks = preparing  # type: ignore[method-assign]
                await t.prompt("first", [], 1)
                async with anyio.create_task_group() as tg:
                    results: list[CancelResult] = []

                    async def cancel() -> None:
                        results.append(await t.cancel())

                    tg.start_soon(cancel)
                    await anyio.wait_all_tasks_blocked()  # session/cancel went out
                    writer.hold()
                    prepared.set()
                    await writer.blocked.wait()  # the prompt's request is being written
                assert results == [CancelResult(acknowledged=False)]
                writer.release()
                request_id = await peer.next_prompt()
                with anyio.fail_after(5):
                    while not writer.sent("$/cancel_request"):
                        await anyio.sleep(0.01)
                cancels = writer.sent("$/cancel_request")
                assert [c["params"] for c in cancels] == [{"requestId": request_id}]


async def test_a_turns_end_keeps_its_place_in_the_wire_order(tmp_path: Path) -> None:
    """The agent answers the prompt and goes on writing at once (here a message of a next,
    wakeup turn): the prompt's Complete comes before what followed its answer, as on the
    wire. The answer is turned into the turn's end by the reader the moment it is read; a
    task woken by the answer would emit it after the lines read meanwhile."""
    async with turn_in_flight(tmp_path) as (t, peer, first):
        answer = {"jsonrpc": "2.0", "id": first, "result": {"stopReason": "end_turn"}}
        after = {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {
                "sessionId": t.session_id,
                "update": {
                    "sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": "after the answer"},
                },
            },
        }
        await peer.answers.send(
            json.dumps(answer).encode() + b"\n" + json.dumps(after).encode() + b"\n"
        )
        seen = await until(t, lambda e: isinstance(e, MessageChunk))
        ends = [type(e).__name__ for e in seen if isinstance(e, Complete | MessageChunk)]
        assert ends == ["Complete", "MessageChunk"]


async def steer_given_up(
    t: StdioTransport, peer: HandPeer, meanwhile: Callable[[], Awaitable[object]]
) -> None:
    """A steer whose session/prompt is stuck in the write (stdin full): ``meanwhile`` runs,
    then the steer's caller gives up and stdin drains again."""
    peer.writer.hold()
    with anyio.CancelScope() as steer_scope:
        async with anyio.create_task_group() as steering:
            steering.start_soon(t.steer, "more", [], 1)
            await peer.writer.blocked.wait()
            await meanwhile()
            await anyio.wait_all_tasks_blocked()
            steer_scope.cancel()
    peer.writer.release()


async def next_turn_completes(t: StdioTransport, peer: HandPeer) -> list[AgentEvent]:
    """Prompt turn 2: the gate is free, so it reaches the agent; the events up to its end."""
    await t.prompt("next", [], 2)
    with anyio.fail_after(5):
        await peer.end_turn(await peer.next_prompt())
    seen = await until(t, completes(2))
    assert isinstance(seen[-1], Complete)
    return seen


async def test_steer_whose_send_fails_after_the_turn_ended_leaves_no_stale_gate(
    tmp_path: Path, autojump_clock: object
) -> None:
    """The steer's session/prompt cannot be written (stdin full) and, while it waits, the
    running turn ends (its end withheld for the successor); then the steer's caller gives up.
    The ended turn must not get the gate back (nothing would ever release it again): its end is
    delivered and the next prompt runs."""
    async with turn_in_flight(tmp_path) as (t, peer, first):
        await steer_given_up(t, peer, lambda: peer.end_turn(first))
        with pytest.raises(SteerUnsupported):  # the ended turn is not in flight
            await t.steer("late", [], 1)
        seen = await next_turn_completes(t, peer)
        ends = [(e.prompt_generation, e.stop_reason) for e in seen if isinstance(e, Complete)]
        assert ends == [(1, "end_turn"), (2, "end_turn")]  # turn 1's withheld end, delivered


async def test_steer_whose_send_fails_while_the_turn_runs_hands_the_gate_back(
    tmp_path: Path, autojump_clock: object
) -> None:
    """The same failed send, but the running turn is still open when the steer gives up: it
    owes its end again (one Complete, its own) and keeps the gate until then."""
    async with turn_in_flight(tmp_path) as (t, peer, first):
        await steer_given_up(t, peer, anyio.lowlevel.checkpoint)
        await t.prompt("next", [], 2)  # queued behind the running turn
        await anyio.wait_all_tasks_blocked()
        with pytest.raises(anyio.WouldBlock):
            peer.prompt_ids.receive_nowait()  # the gate is still the first turn's
        await peer.end_turn(first)
        seen = await until(t, completes(1))
        assert [e.prompt_generation for e in seen if isinstance(e, Complete)] == [1]
        await peer.end_turn(await peer.next_prompt())
        seen = await until(t, completes(2))
        assert isinstance(seen[-1], Complete)


@pytest.mark.parametrize("ended_first", [False, True], ids=["turn-still-running", "turn-ended"])
async def test_cancel_queued_behind_a_failed_steer_hears_the_turn_end(
    tmp_path: Path, autojump_clock: object, ended_first: bool
) -> None:
    """A cancel made while a steer's session/prompt is stuck in the write (it takes the steer's
    turn to wait on) is acknowledged by the end of the turn the failed steer leaves behind,
    whether that turn ended during the failed send or after it."""
    results: list[CancelResult] = []
    async with turn_in_flight(tmp_path) as (t, peer, first), anyio.create_task_group() as tg:

        async def cancel() -> None:
            results.append(await t.cancel())

        async def meanwhile() -> None:
            tg.start_soon(cancel)  # its session/cancel waits behind the steer's write
            if ended_first:
                await peer.end_turn(first)

        await steer_given_up(t, peer, meanwhile)
        if not ended_first:
            await peer.end_turn(first)
        seen = await until(t, completes(1))
        assert isinstance(seen[-1], Complete)
        await anyio.wait_all_tasks_blocked()
        assert results == [CancelResult(acknowledged=True)]
        await next_turn_completes(t, peer)
