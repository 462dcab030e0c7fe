"""StdioTransport against the real reference agent as a subprocess (trio and asyncio).

Every test spawns ``python -m acpfsm.adapters.reference_agent`` (its event loop matches the
test's backend) through :func:`open_stdio_transport` and, once the transport is closed,
checks that the agent process (and any child it started) is gone. Every wait is bounded by
``BOUND``; a passing wait takes milliseconds, so the bound only matters when something hangs.

The happy path, permissions, cancel, steer, mode/config/model changes, session/load after a
restart and every entry of the fault vocabulary (``FAULTS``) each have a test; the fake-agent
tests in ``test_acp_stdio.py`` cover the transport's mechanics in isolation.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from acpfsm.adapters.acp.process import ShutdownPolicy
from acpfsm.adapters.acp.stdio import (
    PermissionPolicy,
    StdioConfig,
    StdioTransport,
    open_stdio_transport,
)
from acpfsm.adapters.classify import Call, authorizes_load_fallback, classify_error
from acpfsm.adapters.errors import (
    AgentRequestError,
    EventConsumerStalled,
    LocalProtocolError,
    SteerUnsupported,
    TransportClosed,
)
from acpfsm.adapters.events import (
    AgentEvent,
    AuthRequired,
    Complete,
    ErrorEvent,
    MessageChunk,
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
    is_turn_content,
)
from acpfsm.adapters.reference_agent import AGENT_NAME, FAULTS, reply_for
from acpfsm.adapters.transport import AgentTransport, allow_once_permission_policy
from acpfsm.statecharts.vocab import ErrorClass

pytestmark = [pytest.mark.both_backends, pytest.mark.integration]

BOUND = 5.0
"""Upper bound of any single wait (spawn, request, event, shutdown)."""
FAST = ShutdownPolicy(stdin_close_wait=0.5, term_wait=0.5, kill_wait=1.0, stderr_drain_wait=0.2)
CONFIG = StdioConfig(cancel_timeout=0.5, exit_grace=0.3)

TurnEnd = Complete | ErrorEvent
PLAN_NOTE = " Plan mode: no changes made."


@dataclass
class Agent:
    transport: StdioTransport
    pid: int
    workspace: Path
    meta: dict[str, Any]
    """``_meta.acpfsmReference`` of the agent's initialize answer (pid, faults, childPid)."""


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


async def _gone(pid: int) -> bool:
    """True once ``pid`` is dead: no such process, or a zombie its own parent (not this test:
    the agent we reap ourselves) has yet to collect."""
    with anyio.move_on_after(BOUND):
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            if _zombie(pid):
                return True
            await anyio.sleep(0.01)
    return False


@contextlib.asynccontextmanager
async def reference(
    tmp_path: Path,
    backend: str,
    *faults: str,
    config: StdioConfig = CONFIG,
    shutdown: ShutdownPolicy = FAST,
    sessions: Path | None = None,
    permission_policy: PermissionPolicy = allow_once_permission_policy,
    initialize: bool = True,
    session: bool = True,
    env: dict[str, str] | None = None,
) -> AsyncIterator[Agent]:
    """The reference agent behind a StdioTransport; on exit no process of it may be left."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "acpfsm.adapters.reference_agent",
        "--backend",
        backend,
        "--log-level",
        "warning",
        "--sessions-dir",
        str(sessions or tmp_path / "sessions"),
        *(f"--fault={fault}" for fault in faults),
    ]
    pids: list[int] = []
    async with open_stdio_transport(
        argv,
        cwd=workspace,
        env=env,
        config=config,
        shutdown=shutdown,
        permission_policy=permission_policy,
    ) as transport:
        assert transport.process is not None
        agent = Agent(transport, transport.process.pid, workspace, {})
        pids.append(agent.pid)
        if initialize:
            with anyio.fail_after(BOUND):
                # a raw initialize first, for the agent's _meta (the typed result drops it)
                raw = await transport.connection.request(
                    "initialize",
                    {
                        "protocolVersion": 1,
                        "clientCapabilities": {"fs": {"readTextFile": True}},
                    },
                )
                agent.meta = msgspec.json.decode(raw)["_meta"]["acpfsmReference"]
                assert agent.meta["pid"] == agent.pid
                pids.extend([agent.meta["childPid"]] if "childPid" in agent.meta else [])
                await transport.initialize()
                if session:
                    await transport.new_session(str(workspace))
        yield agent
    with pytest.raises(ProcessLookupError):  # we reaped the agent itself
        os.kill(pids[0], 0)
    for pid in pids[1:]:
        assert await _gone(pid), f"process {pid} outlived the transport"


async def until(
    transport: StdioTransport, predicate: Callable[[AgentEvent], bool]
) -> list[AgentEvent]:
    """Events up to and including the first one matching ``predicate`` (bounded)."""
    seen: list[AgentEvent] = []
    with anyio.fail_after(BOUND):
        async for event in transport.events():
            seen.append(event)
            if predicate(event):
                return seen
    raise AssertionError(f"event stream ended first: {seen}")


async def drain(transport: StdioTransport) -> list[AgentEvent]:
    """Every event until the stream ends (after ``stream_disconnected``)."""
    with anyio.fail_after(BOUND):
        return [event async for event in transport.events()]


def ends(gen: int) -> Callable[[AgentEvent], bool]:
    return lambda e: isinstance(e, TurnEnd) and e.prompt_generation == gen


def first_chunk(event: AgentEvent) -> bool:
    return isinstance(event, MessageChunk) and event.role == "assistant"


def turn_ends(events: list[AgentEvent]) -> list[tuple[str, int, str]]:
    """``(type, generation, stop_reason or error)`` of every Complete/ErrorEvent."""
    return [
        ("complete", e.prompt_generation, e.stop_reason)
        if isinstance(e, Complete)
        else ("error", e.prompt_generation, e.error)
        for e in events
        if isinstance(e, TurnEnd)
    ]


def said(events: list[AgentEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, MessageChunk) and e.role == "assistant")


def collapse(kinds: list[type]) -> list[type]:
    return [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] is not k]


# ------------------------------------------------------------------------------ the happy path


async def test_handshake_and_a_turn_stream_in_order(tmp_path: Path, backend: str) -> None:
    async with reference(tmp_path, backend, session=False) as agent:
        t = agent.transport
        assert isinstance(t, AgentTransport)
        caps = t.capabilities
        assert caps is not None
        assert (caps.protocol_version, caps.agent.name) == (1, AGENT_NAME)
        assert caps.load_session and caps.prompt_queueing
        assert caps.supports_image and caps.supports_embedded_context
        assert agent.meta["faults"] == []
        with anyio.fail_after(BOUND):
            result = await t.new_session(str(agent.workspace))
        assert result.session_id == t.session_id
        assert (result.current_mode_id, result.current_model_id) == ("default", "ref-fast")
        assert [m.id for m in result.modes] == ["default", "plan", "accept_edits"]
        assert [m.model_id for m in result.models] == ["ref-fast", "ref-smart"]
        assert [o.id for o in result.config_options] == ["mode", "model", "thinking"]
        assert result.has_model_state

        await t.prompt("hello reference agent", [], 1)
        events = await until(t, ends(1))
        turn = [
            e
            for e in events
            if isinstance(e, Reasoning | Plan | ToolCall | ToolUpdate | MessageChunk | SessionInfo)
        ]
        assert collapse([type(e) for e in turn]) == [
            Reasoning,
            Plan,
            ToolCall,
            ToolUpdate,
            Plan,
            MessageChunk,
            Plan,
            SessionInfo,
        ]
        assert all(e.prompt_generation == 1 for e in turn if not isinstance(e, SessionInfo))
        assert all(e.session_id == result.session_id for e in turn)
        assert said(events) == reply_for("hello reference agent")
        call = next(e for e in turn if isinstance(e, ToolCall))
        assert (call.tool_title, call.tool_name) == ("Read the prompt", "read")
        updates = [e for e in turn if isinstance(e, ToolUpdate)]
        assert {u.tool_call_id for u in updates} == {call.tool_call_id}
        assert [u.tool_status for u in updates] == ["in_progress", "complete"]
        final_plan = [e for e in turn if isinstance(e, Plan)][-1]
        assert {p.status for p in final_plan.plan_entries} == {"completed"}
        end = events[-1]
        assert isinstance(end, Complete)
        assert (end.stop_reason, end.prompt_generation) == ("end_turn", 1)
        assert end.session_id == result.session_id
        assert turn_ends(events) == [("complete", 1, "end_turn")]


async def test_permission_requests_are_answered_by_the_policy(tmp_path: Path, backend: str) -> None:
    asked: list[PermissionRequest] = []
    answers = iter(["reject_once", "allow_always"])

    async def policy(request: PermissionRequest) -> str | None:
        asked.append(request)
        return next(answers)

    async with reference(tmp_path, backend, permission_policy=policy) as agent:
        t = agent.transport
        for gen in (1, 2, 3):
            await t.prompt("[[permission]] list files", [], gen)
        events = await until(t, ends(3))
    assert turn_ends(events) == [("complete", g, "end_turn") for g in (1, 2, 3)]
    # asked twice: the third turn runs under the remembered "allow_always"
    assert [r.prompt_generation for r in asked] == [1, 2]
    assert [e for e in events if isinstance(e, PermissionRequest)] == asked
    request = asked[0]
    assert request.permission_title == "Run `echo list files`"
    assert [(o.option_id, o.kind) for o in request.options] == [
        ("allow_once", "allow_once"),
        ("allow_always", "allow_always"),
        ("reject_once", "reject_once"),
        ("reject_always", "reject_always"),
    ]
    tools = {e.tool_call_id: e for e in events if isinstance(e, ToolCall)}
    assert tools[request.tool_call_id].tool_name == "execute"
    by_turn = {g: said([e for e in events if e.prompt_generation == g]) for g in (1, 2, 3)}
    assert "Permission denied for Run `echo list files`." in by_turn[1]
    assert "Ran `echo list files`." in by_turn[2]
    assert "Ran `echo list files`." in by_turn[3]


async def test_cancel_ends_the_turn_cancelled(tmp_path: Path, backend: str) -> None:
    async with reference(tmp_path, backend) as agent:
        t = agent.transport
        await t.prompt("[[fault:stall]] wait for me", [], 1)
        await until(t, first_chunk)
        with anyio.fail_after(BOUND):
            assert (await t.cancel()).acknowledged
        events = await until(t, ends(1))
        assert turn_ends(events) == [("complete", 1, "cancelled")]
        await t.prompt("and now finish", [], 2)
        events = await until(t, ends(2))
        assert turn_ends(events) == [("complete", 2, "end_turn")]
        assert said(events) == reply_for("and now finish")


async def test_steer_with_prompt_queueing_yields_one_complete(tmp_path: Path, backend: str) -> None:
    async with reference(tmp_path, backend) as agent:
        t = agent.transport
        await t.prompt("[[fault:stall]] first task", [], 1)
        await until(t, first_chunk)
        with anyio.fail_after(BOUND):
            await t.steer("second task", [], 2)
        events = await until(t, ends(2))
        # the stalled predecessor was answered end_turn by the agent: suppressed
        await t.prompt("third task", [], 3)
        events += await until(t, ends(3))
        assert turn_ends(events) == [("complete", 2, "end_turn"), ("complete", 3, "end_turn")]
        steered = [e for e in events if e.prompt_generation == 2]
        assert said(steered) == reply_for("second task")
        assert said([e for e in events if e.prompt_generation == 3]) == reply_for("third task")


async def test_steer_without_prompt_queueing_is_refused(tmp_path: Path, backend: str) -> None:
    async with reference(tmp_path, backend, "no_queueing") as agent:
        t = agent.transport
        assert t.capabilities is not None and not t.capabilities.prompt_queueing
        await t.prompt("[[fault:stall]] busy", [], 1)
        await until(t, first_chunk)
        with anyio.fail_after(BOUND), pytest.raises(SteerUnsupported, match="prompt queueing"):
            await t.steer("more", [], 1)
        with anyio.fail_after(BOUND):
            assert (await t.cancel()).acknowledged
        # two prompts on a non-queueing agent: each gets its own end_turn, in order
        await t.prompt("one", [], 2)
        await t.prompt("two", [], 3)
        events = await until(t, ends(3))
        assert turn_ends(events) == [
            ("complete", 1, "cancelled"),
            ("complete", 2, "end_turn"),
            ("complete", 3, "end_turn"),
        ]


async def test_mode_config_option_and_model(tmp_path: Path, backend: str) -> None:
    async with reference(tmp_path, backend) as agent:
        t = agent.transport
        with anyio.fail_after(BOUND):
            await t.set_mode("accept_edits")
            await t.set_config_option("thinking", "high")
            await t.set_model("ref-smart")
        events = await until(
            t, lambda e: isinstance(e, SessionModels) and e.current_model_id == "ref-smart"
        )
        modes = [e for e in events if isinstance(e, SessionMode)]
        assert modes and modes[-1].current_mode_id == "accept_edits"
        models = [e for e in events if isinstance(e, SessionModels)]
        options = {o.id: o.current_value for o in models[-1].config_options}
        assert options == {"mode": "accept_edits", "model": "ref-smart", "thinking": "high"}

        # accept_edits: the write goes through fs/write_text_file without a permission prompt
        await t.prompt("[[write:notes.txt]] keep this", [], 1)
        events = await until(t, ends(1))
        assert turn_ends(events) == [("complete", 1, "end_turn")]
        assert not any(isinstance(e, PermissionRequest) for e in events)
        assert (agent.workspace / "notes.txt").read_text() == "keep this\n"
        thoughts = [e.reasoning_text for e in events if isinstance(e, Reasoning)]
        assert len(thoughts) == 3 and thoughts[0] == "Reading the prompt with ref-smart."

        with anyio.fail_after(BOUND), pytest.raises(AgentRequestError) as caught:
            await t.set_mode("nope")
        assert (caught.value.code, caught.value.error_message) == (
            -32602,
            "Invalid params: Invalid Mode: nope",
        )
        assert classify_error(caught.value, call=Call.SET_MODE).kind is ErrorClass.INCONCLUSIVE
        with anyio.fail_after(BOUND), pytest.raises(AgentRequestError) as caught:
            await t.set_model("ref-huge")
        assert caught.value.code == -32602
        assert t.is_connected()


# ------------------------------------------------------------------------------ session/load


async def test_load_after_restart_replays_history_quietly(tmp_path: Path, backend: str) -> None:
    sessions = tmp_path / "sessions"
    async with reference(tmp_path, backend, sessions=sessions) as agent:
        t = agent.transport
        sid = t.session_id
        assert sid
        with anyio.fail_after(BOUND):
            await t.set_mode("plan")
        await t.prompt("remember the alamo", [], 1)
        await until(t, ends(1))

    # a new process on the same sessions dir: history is replayed but not leaked as live events
    async with reference(tmp_path, backend, sessions=sessions, session=False) as agent:
        t = agent.transport
        with anyio.fail_after(BOUND):
            result = await t.load_session(sid, str(agent.workspace))
        assert result.session_id == sid == t.session_id
        assert result.current_mode_id == "plan"  # state persisted across the restart
        loaded = await until(t, lambda e: isinstance(e, SessionStatus))
        status = loaded[-1]
        assert isinstance(status, SessionStatus) and status.session_status == "resumed"
        assert not [e for e in loaded if isinstance(e, MessageChunk | Reasoning | ToolCall)]
        assert not [e for e in loaded if isinstance(e, ToolUpdate)]
        plans = [e for e in loaded if isinstance(e, Plan)]
        assert len(plans) == 1 and plans[0].replayed and not is_turn_content(plans[0])
        assert {p.status for p in plans[0].plan_entries} == {"completed"}
        assert not [e for e in loaded if is_turn_content(e)]
        await t.prompt("what now", [], 5)
        events = await until(t, ends(5))
        assert said(events) == reply_for("what now") + PLAN_NOTE  # still in plan mode
        assert not [e for e in events if isinstance(e, MessageChunk) and e.role == "user"]
        assert all(e.prompt_generation == 5 for e in events if is_turn_content(e))
        assert turn_ends(events) == [("complete", 5, "end_turn")]

        with anyio.fail_after(BOUND), pytest.raises(AgentRequestError) as caught:
            await t.load_session("no-such-session", str(agent.workspace))
        assert (caught.value.code, caught.value.data) == (-32002, {"sessionId": "no-such-session"})
        c = classify_error(caught.value, call=Call.SESSION_LOAD, loading_session_id="no-such")
        assert c.kind is ErrorClass.SESSION_UNKNOWN
        assert t.session_id == sid

    # with suppress_replay off, the replay arrives as generation-0 history
    keep = StdioConfig(cancel_timeout=0.5, exit_grace=0.3, suppress_replay=False)
    async with reference(tmp_path, backend, sessions=sessions, config=keep, session=False) as agent:
        t = agent.transport
        with anyio.fail_after(BOUND):
            await t.load_session(sid, str(agent.workspace))
        loaded = await until(t, lambda e: isinstance(e, SessionStatus))
        chunks = [e for e in loaded if isinstance(e, MessageChunk)]
        assert [e.text for e in chunks if e.role == "user"] == ["remember the alamo", "what now"]
        assert said(loaded) == reply_for("remember the alamo") + PLAN_NOTE + (
            reply_for("what now") + PLAN_NOTE
        )
        assert any(isinstance(e, Reasoning) for e in loaded)
        assert all(e.prompt_generation == 0 for e in loaded)


LOAD_SHAPES = [
    # fault, kind, authorizes the fallback to session/new, JSON-RPC code (None: not sent)
    ("no_load", ErrorClass.LOAD_UNSUPPORTED, True, None),
    ("load_method_not_found", ErrorClass.METHOD_NOT_FOUND, True, -32601),
    ("load_not_found", ErrorClass.SESSION_UNKNOWN, True, -32002),
    ("load_rollout_missing", ErrorClass.PROVIDER_ROLLOUT_MISSING, True, -32603),
    ("load_rollout_other", ErrorClass.INCONCLUSIVE, False, -32603),
    ("load_internal", ErrorClass.INCONCLUSIVE, False, -32603),
    # the seed keeps the session identity (no fallback); the table names the reason
    ("load_auth", ErrorClass.AUTH_REQUIRED, False, -32000),
]


@pytest.mark.parametrize(
    ("fault", "kind", "fallback", "code"), LOAD_SHAPES, ids=[s[0] for s in LOAD_SHAPES]
)
async def test_load_error_shapes_are_classified(
    tmp_path: Path, backend: str, fault: str, kind: ErrorClass, fallback: bool, code: int | None
) -> None:
    sid = str(uuid.uuid4())
    async with reference(tmp_path, backend, fault, session=False) as agent:
        t = agent.transport
        assert t.capabilities is not None
        assert t.capabilities.load_session is (fault != "no_load")
        with anyio.fail_after(BOUND), pytest.raises((AgentRequestError, LocalProtocolError)) as ei:
            await t.load_session(sid, str(agent.workspace))
        error = ei.value
        if code is None:
            assert isinstance(error, LocalProtocolError)
        else:
            assert isinstance(error, AgentRequestError) and error.code == code
            assert error.method == "session/load"
        result = classify_error(error, call=Call.SESSION_LOAD, loading_session_id=sid)
        assert result.kind is kind
        assert authorizes_load_fallback(result) is fallback
        assert not result.transport_dead
        assert t.session_id is None and t.is_connected()
        if fallback:  # what the runtime then does: a fresh session that works
            with anyio.fail_after(BOUND):
                await t.new_session(str(agent.workspace))
            await t.prompt("fresh start", [], 1)
            assert turn_ends(await until(t, ends(1))) == [("complete", 1, "end_turn")]


# ------------------------------------------------------------------------------ turn faults


async def test_crash_mid_turn_is_transport_death(tmp_path: Path, backend: str) -> None:
    async with reference(tmp_path, backend) as agent:
        t = agent.transport
        await t.prompt("[[fault:crash=7]] going down", [], 1)
        await t.prompt("queued behind the crash", [], 2)
        events = await drain(t)
        errors = [e for e in events if isinstance(e, ErrorEvent)]
        assert [e.prompt_generation for e in errors] == [1, 2]
        for e in errors:
            assert e.error.startswith("peer disconnected before response")
            assert "agent process exited with code 7" in e.error
            assert "crashing with status 7" in e.error  # the agent's stderr is quoted
            assert classify_error(e.error, call=Call.PROMPT).kind is ErrorClass.TRANSPORT_DEAD
        last = events[-1]
        assert isinstance(last, StreamDisconnected) and last.exit_code == 7
        assert "crashing with status 7" in last.stderr_tail
        assert not any(isinstance(e, Complete) for e in events)
        assert not t.is_connected()
        with pytest.raises(TransportClosed, match="peer disconnected"):
            await t.prompt("again", [], 3)


async def test_hang_leaves_cancel_unacknowledged(tmp_path: Path, backend: str) -> None:
    async with reference(tmp_path, backend) as agent:
        t = agent.transport
        await t.prompt("[[fault:hang]] never ends", [], 1)
        await until(t, first_chunk)
        started = anyio.current_time()
        with anyio.fail_after(BOUND):
            result = await t.cancel()
        assert not result.acknowledged
        assert anyio.current_time() - started >= CONFIG.cancel_timeout * 0.9
        with pytest.raises(SteerUnsupported, match="no prompt in flight"):
            await t.steer("wake up", [], 1)
        assert t.is_connected()
        with anyio.fail_after(BOUND):
            await t.aclose()
        rest = await drain(t)
        assert turn_ends(rest) == []  # the abandoned turn owes nothing
        assert isinstance(rest[-1], StreamDisconnected) and rest[-1].error == ""


async def test_ignore_cancel_turn_is_abandoned_then_the_next_prompt_runs(
    tmp_path: Path, backend: str
) -> None:
    async with reference(tmp_path, backend) as agent:
        t = agent.transport
        await t.prompt("[[fault:ignore_cancel]] [[fault:stall]] stubborn", [], 1)
        await until(t, first_chunk)
        with anyio.fail_after(BOUND):
            assert not (await t.cancel()).acknowledged
        # the next prompt steers the stalled turn away; its late end_turn is suppressed
        await t.prompt("next", [], 2)
        events = await until(t, ends(2))
        assert turn_ends(events) == [("complete", 2, "end_turn")]
        assert said([e for e in events if e.prompt_generation == 2]) == reply_for("next")

    # without the stall the agent simply finishes the turn: end_turn, not cancelled
    patient = StdioConfig(cancel_timeout=BOUND, exit_grace=0.3)
    async with reference(tmp_path, backend, config=patient) as agent:
        t = agent.transport
        await t.prompt("[[fault:ignore_cancel]] [[delay:0.02]] one two three four five six", [], 1)
        await until(t, first_chunk)
        with anyio.fail_after(BOUND):
            assert (await t.cancel()).acknowledged
        events = await until(t, ends(1))
        assert turn_ends(events) == [("complete", 1, "end_turn")]


async def test_survivable_turn_faults(tmp_path: Path, backend: str) -> None:
    """prompt_error, garbage, oversized (17 MiB over the 16 MiB default limit) and flood:
    each gives a typed event and the same agent keeps serving."""
    async with reference(tmp_path, backend) as agent:
        t = agent.transport
        await t.prompt("[[fault:prompt_error]] a", [], 1)
        events = await until(t, ends(1))
        error = events[-1]
        assert isinstance(error, ErrorEvent)
        assert error.error == (
            '{"code":-32603,"message":"Internal error",'
            '"data":{"details":"reference agent fault: prompt_error"}}'
        )
        assert error.data["code"] == -32603
        assert classify_error(error.error, call=Call.PROMPT).kind is ErrorClass.INCONCLUSIVE

        await t.prompt("[[fault:garbage]] b", [], 2)
        events = await until(t, ends(2))
        problems = [e.error for e in events if isinstance(e, ProtocolErrorEvent)]
        assert len(problems) == 1
        assert problems[0].startswith("malformed JSON-RPC message from agent")
        assert said(events) == reply_for("b")
        assert turn_ends(events) == [("complete", 2, "end_turn")]

        await t.prompt("[[fault:oversized]] c", [], 3)
        events = await until(t, ends(3))
        problems = [e.error for e in events if isinstance(e, ProtocolErrorEvent)]
        assert len(problems) == 1 and "exceeds" in problems[0]
        assert said(events) == reply_for("c")  # the oversized chunk was dropped
        assert turn_ends(events) == [("complete", 3, "end_turn")]

        await t.prompt("[[fault:flood=3000]] d", [], 4)
        events = await until(t, ends(4))
        thoughts = [e for e in events if isinstance(e, Reasoning)]
        assert len(thoughts) == 1 + 3000
        assert thoughts[-1].reasoning_text == "flood 3000/3000\n"
        assert turn_ends(events) == [("complete", 4, "end_turn")]
        assert t.is_connected()


async def test_a_flood_is_paused_for_a_slow_consumer_and_nothing_is_lost(
    tmp_path: Path, backend: str
) -> None:
    """Backpressure: a flood of 5000 updates against a consumer that takes them slowly and a
    limit of 200 undelivered: the transport stops reading the agent while the consumer is
    behind (the agent blocks on its pipe) rather than failing, and every update arrives, in
    order; the queue never holds more than the limit plus one notification's events."""
    small = StdioConfig(cancel_timeout=0.5, exit_grace=0.3, event_queue_limit=200)
    async with reference(tmp_path, backend, config=small) as agent:
        t = agent.transport
        await t.prompt("[[fault:flood=5000]] a lot", [], 1)
        thoughts, most = [], 0
        with anyio.fail_after(BOUND * 4):
            while not t.paused:  # the consumer is late: the flood is paused for it
                await anyio.sleep(0.01)
            assert len(t._events) <= 200 + 2
            async for event in t.events():
                most = max(most, len(t._events))
                if isinstance(event, Reasoning):
                    thoughts.append(event.reasoning_text)
                    if len(thoughts) % 100 == 0:
                        await anyio.sleep(0.005)  # a consumer that falls behind
                if isinstance(event, TurnEnd) and event.prompt_generation == 1:
                    assert isinstance(event, Complete) and event.stop_reason == "end_turn"
                    break
        assert len(thoughts) == 1 + 5000
        assert thoughts[1:] == [f"flood {i}/5000\n" for i in range(1, 5001)]
        assert most <= 200 + 2
        assert t.is_connected()


async def test_a_consumer_that_takes_nothing_is_given_up_after_the_bound(
    tmp_path: Path, backend: str
) -> None:
    """Nobody consumes the events: the transport pauses, and when the consumer has taken
    none within ``backpressure_timeout`` it is closed with ``EventConsumerStalled`` (a
    transport death, ``notification queue overflow``, as kandev classifies it)."""
    small = StdioConfig(
        cancel_timeout=0.5, exit_grace=0.3, event_queue_limit=200, backpressure_timeout=0.5
    )
    async with reference(tmp_path, backend, config=small) as agent:
        t = agent.transport
        await t.prompt("[[fault:flood=5000]] too much", [], 1)
        with anyio.fail_after(BOUND):
            while t.is_connected():  # nobody reads events meanwhile
                await anyio.sleep(0.01)
        with pytest.raises(EventConsumerStalled) as stalled:
            await t.set_mode("plan")
        events = await drain(t)
        message = (
            "notification queue overflow: the event consumer is gone or stuck: it took none "
            "of 200 undelivered events within 0.5s"
        )
        assert str(stalled.value) == message
        assert turn_ends(events) == [("error", 1, message)]
        last = events[-1]
        assert isinstance(last, StreamDisconnected)
        assert last.error == message
        kind = classify_error(last.error, call=Call.PROMPT).kind
        assert kind is ErrorClass.TRANSPORT_DEAD


async def test_close_stdout_is_transport_death(tmp_path: Path, backend: str) -> None:
    patient = ShutdownPolicy(stdin_close_wait=BOUND, term_wait=0.5, kill_wait=1.0)
    async with reference(tmp_path, backend, shutdown=patient) as agent:
        t = agent.transport
        assert t.process is not None
        await t.prompt("[[fault:close_stdout]] bye", [], 1)
        events = await drain(t)
        error = events[-2]
        assert isinstance(error, ErrorEvent) and error.prompt_generation == 1
        assert error.error.startswith(
            "peer disconnected before response: agent process still running"
        )
        assert classify_error(error.error, call=Call.PROMPT).kind is ErrorClass.TRANSPORT_DEAD
        assert isinstance(events[-1], StreamDisconnected)
        # the agent still runs with its stdout closed; the transport shuts it down itself
        with anyio.fail_after(BOUND):
            await t.process.exited.wait()
        assert t.process.returncode == 0  # it exits cleanly on the stdin EOF (no signal)


# ------------------------------------------------------------------------------ run faults


async def test_slow_start(tmp_path: Path, backend: str) -> None:
    async with reference(tmp_path, backend, "slow_start=0.6", initialize=False) as agent:
        t = agent.transport
        started = anyio.current_time()
        with anyio.move_on_after(0.1) as scope:  # a caller's short deadline
            await t.initialize()
        assert scope.cancelled_caught and t.capabilities is None
        with anyio.fail_after(BOUND):
            caps = await t.initialize()  # the connection survived the abandoned request
        assert caps.agent.name == AGENT_NAME
        assert anyio.current_time() - started >= 0.5
        with anyio.fail_after(BOUND):
            await t.new_session(str(agent.workspace))
        await t.prompt("finally", [], 1)
        events = await until(t, ends(1))
        assert turn_ends(events) == [("complete", 1, "end_turn")]
        assert not any(isinstance(e, ProtocolErrorEvent) for e in events)


async def test_auth_required_until_authenticate(tmp_path: Path, backend: str) -> None:
    async with reference(tmp_path, backend, "auth_required", session=False) as agent:
        t = agent.transport
        assert t.capabilities is not None
        assert [m["id"] for m in t.capabilities.auth_methods] == ["reference-login"]
        with anyio.fail_after(BOUND), pytest.raises(AgentRequestError) as caught:
            await t.new_session(str(agent.workspace))
        assert caught.value.as_dict() == {"code": -32000, "message": "Authentication required"}
        assert classify_error(caught.value, call=Call.SESSION_NEW).kind is ErrorClass.AUTH_REQUIRED
        events = await until(t, lambda e: isinstance(e, AuthRequired))
        required = events[-1]
        assert isinstance(required, AuthRequired)
        assert required.error == "Authentication required"
        assert [m["id"] for m in required.auth_methods] == ["reference-login"]
        with anyio.fail_after(BOUND):
            await t.authenticate("reference-login")
            await t.new_session(str(agent.workspace))
        await t.prompt("let me in", [], 1)
        assert turn_ends(await until(t, ends(1))) == [("complete", 1, "end_turn")]


async def test_ignore_eof_needs_sigterm(tmp_path: Path, backend: str) -> None:
    async with reference(tmp_path, backend, "ignore_eof") as agent:
        t = agent.transport
        assert t.process is not None
        started = anyio.current_time()
        with anyio.fail_after(BOUND):
            await t.aclose()
        assert t.process.returncode == -signal.SIGTERM
        assert anyio.current_time() - started >= FAST.stdin_close_wait * 0.9


async def test_spawn_child_does_not_survive_a_crash(tmp_path: Path, backend: str) -> None:
    async with reference(tmp_path, backend, "spawn_child") as agent:
        t = agent.transport
        child = agent.meta["childPid"]
        assert os.getpgid(child) == agent.pid  # same process group as the agent
        # a crash (os._exit) skips the agent's own cleanup: the child is orphaned
        await t.prompt("[[fault:crash]] leave the child behind", [], 1)
        events = await drain(t)
        last = events[-1]
        assert isinstance(last, StreamDisconnected) and last.exit_code == 3
        # the transport's shutdown signals the whole group: the child dies too
        assert await _gone(child)


# ------------------------------------------------------------------------------ hostile agents


async def test_non_utf8_output_is_a_protocol_error_and_survived(
    tmp_path: Path, backend: str
) -> None:
    async with reference(tmp_path, backend) as agent:
        t = agent.transport
        await t.prompt("[[fault:non_utf8]] e", [], 1)
        events = await until(t, ends(1))
        problems = [e.error for e in events if isinstance(e, ProtocolErrorEvent)]
        assert problems == ["invalid session/update: Invalid UTF-8 encoded string"]
        assert said(events) == reply_for("e")  # the undecodable chunk was dropped
        assert turn_ends(events) == [("complete", 1, "end_turn")]
        assert t.is_connected()


async def test_exit_at_startup_is_a_typed_transport_death(tmp_path: Path, backend: str) -> None:
    async with reference(tmp_path, backend, "exit_at_startup=5", initialize=False) as agent:
        t = agent.transport
        with anyio.fail_after(BOUND), pytest.raises(TransportClosed) as caught:
            await t.initialize()
        assert "agent process exited with code 5" in str(caught.value)
        assert "fault exit_at_startup" in caught.value.stderr_tail
        assert classify_error(caught.value, call=Call.INITIALIZE).transport_dead
        last = (await drain(t))[-1]
        assert isinstance(last, StreamDisconnected) and last.exit_code == 5


async def test_an_unanswered_initialize_is_bounded_by_the_caller(
    tmp_path: Path, backend: str
) -> None:
    async with reference(tmp_path, backend, "no_initialize", initialize=False) as agent:
        t = agent.transport
        with anyio.move_on_after(0.3) as scope:
            await t.initialize()
        assert scope.cancelled_caught and t.capabilities is None
        assert t.is_connected()
        with anyio.fail_after(BOUND):
            await t.aclose()  # no hang; the context manager checks the process is gone


async def test_permission_options_listed_reject_first(tmp_path: Path, backend: str) -> None:
    asked: list[PermissionRequest] = []

    async def first_listed(request: PermissionRequest) -> str | None:
        asked.append(request)
        return request.options[0].option_id

    async with reference(tmp_path, backend, permission_policy=first_listed) as agent:
        t = agent.transport
        await t.prompt("[[fault:permission_reject_first]] [[permission]] rm -rf /", [], 1)
        events = await until(t, ends(1))
    assert [o.kind for o in asked[0].options] == [
        "reject_once",
        "reject_always",
        "allow_once",
        "allow_always",
    ]
    assert "Permission denied for Run `echo rm -rf /`." in said(events)
    assert turn_ends(events) == [("complete", 1, "end_turn")]


def probe(events: list[AgentEvent]) -> dict[str, Any]:
    """The hostile fs probe's report (its tool call's raw output)."""
    reports = [e.raw_output for e in events if isinstance(e, ToolUpdate) and e.raw_output]
    assert len(reports) == 1, reports
    report = reports[0]
    assert isinstance(report, dict)
    return report


HOSTILE = [
    # fault, resolver, expected errors (message → count)
    ("fs_traversal", "auto", {"-32602 Invalid params: path is outside the workspace": 12}),
    ("fs_fifo", "auto", {"-32602 Invalid params: not a regular file": 2}),
    ("fs_fifo", "walk", {"-32602 Invalid params: not a regular file": 2}),
    (
        "fs_bad_paths",
        "auto",
        {
            "-32602 Invalid params: path contains a NUL byte": 2,
            "-32602 Invalid params: path must be absolute": 2,
            "-32602 Invalid params: path is too long (over 4095 bytes)": 2,
        },
    ),
    # requests that do not decode, answered under their ids rather than left waiting
    ("undecodable_requests", "auto", {"-32700 Parse error": 2}),
]


@pytest.mark.parametrize(
    ("fault", "resolver", "errors"), HOSTILE, ids=[h[0] + "-" + h[1] for h in HOSTILE]
)
async def test_hostile_fs_requests_are_refused(
    tmp_path: Path, backend: str, fault: str, resolver: str, errors: dict[str, int]
) -> None:
    config = StdioConfig(cancel_timeout=0.5, exit_grace=0.3, fs_resolver=resolver)  # type: ignore[arg-type]
    async with reference(tmp_path, backend, config=config) as agent:
        t = agent.transport
        await t.prompt(f"[[fault:{fault}]] probe", [], 1)
        events = await until(t, ends(1))
        report = probe(events)
        assert (report["escaped"], report["answered"], report["errors"]) == (0, 0, errors)
        assert report.get("unanswered", 0) == 0
        assert turn_ends(events) == [("complete", 1, "end_turn")]
        assert f"{fault}: {sum(errors.values())} requests, 0 answered" in said(events)
        with anyio.fail_after(BOUND):
            await t.aclose()
    assert os.listdir(agent.workspace) == []


async def test_walk_refuses_the_planted_links_naming_them(tmp_path: Path, backend: str) -> None:
    config = StdioConfig(cancel_timeout=0.5, exit_grace=0.3, fs_resolver="walk")
    async with reference(tmp_path, backend, config=config) as agent:
        t = agent.transport
        await t.prompt("[[fault:fs_traversal]] probe", [], 1)
        report = probe(await until(t, ends(1)))
    assert report["escaped"] == 0 and report["answered"] == 0
    links = {
        key for key in report["errors"] if key.startswith("-32602 Invalid params: path crosses")
    }
    names = sorted(key.rsplit("/", 1)[1] for key in links)
    assert names == [".acpfsm-escape-dir)", ".acpfsm-escape-file)", ".acpfsm-escape-rel)"]


async def test_huge_read_with_limit_1_and_whole(tmp_path: Path, backend: str) -> None:
    async with reference(tmp_path, backend) as agent:
        t = agent.transport
        await t.prompt("[[fault:fs_huge_read]] probe", [], 1)  # 200 MiB, sparse
        report = probe(await until(t, ends(1)))
    assert report["first_line"] == "the first line of a sparse file\n"
    assert report["whole_characters"] is None and report["escaped"] == 0
    [(error, count)] = report["errors"].items()
    assert error.startswith("-32602 Invalid params: the text is over the 16777216-byte read")
    assert count == 1


@pytest.mark.parametrize("resolver", ["auto", "walk"])
async def test_symlink_race_through_the_reference_agent(
    tmp_path: Path, backend: str, resolver: str
) -> None:
    config = StdioConfig(cancel_timeout=0.5, exit_grace=0.3, fs_resolver=resolver)  # type: ignore[arg-type]
    async with reference(tmp_path, backend, config=config) as agent:
        t = agent.transport
        await t.prompt("[[fault:fs_symlink_race=1]] race", [], 1)
        with anyio.fail_after(BOUND):
            report = probe(await until(t, ends(1)))
    print(
        f"{resolver}: {report['reads']} reads, {report['writes']} writes, {report['escaped']} escaped"
    )
    assert report["escaped"] == 0
    assert report["reads"] > 0 and report["swaps"] > 0  # counts, never a rate: load varies
    assert report["inside_reads"] > 0 and sum(report["errors"].values()) > 0  # the race was on


async def test_credentials_the_agent_prints_are_masked(tmp_path: Path, backend: str) -> None:
    secret = "sk-test-" + uuid.uuid4().hex
    env = {"MY_API_KEY": secret, "AUTH_TOKEN": secret[:12], "PLAIN": "not-a-secret-value"}
    async with reference(tmp_path, backend, "leak_env", env=env) as agent:
        t = agent.transport
        await t.prompt("[[fault:crash]] bye", [], 1)
        events = await drain(t)
    error = next(e for e in events if isinstance(e, ErrorEvent))
    last = events[-1]
    assert isinstance(last, StreamDisconnected)
    for quoted in (error.error, last.stderr_tail, t.stderr_tail()):
        assert "reference-agent env: MY_API_KEY=***" in quoted
        assert "reference-agent env: AUTH_TOKEN=***" in quoted
        assert secret[:12] not in quoted
    assert "PLAIN" not in last.stderr_tail  # the agent printed only secret-looking names


COVERED = {
    "crash",  # test_crash_mid_turn_is_transport_death, test_spawn_child_…
    "hang",
    "stall",  # cancel, steer (with and without queueing), ignore_cancel
    "ignore_cancel",
    "prompt_error",  # test_survivable_turn_faults
    "garbage",
    "oversized",
    "flood",  # also test_a_flood_is_paused_for_a_slow_consumer_…
    "close_stdout",
    "slow_start",
    "auth_required",
    "no_queueing",  # test_steer_without_prompt_queueing_is_refused
    "ignore_eof",
    "spawn_child",
    "echo_version",  # test_reference_agent::test_echo_version_…, conform's version_negotiation
    "non_utf8",
    "exit_at_startup",
    "no_initialize",
    "permission_reject_first",
    "permission_other_session",  # test_permissions_stdio: refused whatever the policy
    "leak_env",
    "fs_traversal",  # test_hostile_fs_requests_are_refused, test_walk_refuses_…
    "fs_fifo",
    "fs_bad_paths",
    "fs_huge_read",
    "fs_symlink_race",
    "undecodable_requests",  # test_hostile_fs_requests_are_refused
    "close_stdin",  # tests/agentctl/test_agentctl_faults.py: agentctl's cancel write fails
    "no_mcp_http",  # test_mcp_tools::test_an_agent_without_http_support_gets_no_tool_server
    *(shape[0] for shape in LOAD_SHAPES),
}


def test_every_fault_has_a_test() -> None:
    assert set(FAULTS) == COVERED
