"""The reference agent as a real subprocess, spoken to in raw JSON lines.

These tests deliberately do not use ``acpfsm.adapters.acp``: they check the agent's wire
behaviour on its own, so the client can later be tested against a peer known to be right.
Every process is started in its own process group and killed (group-wide) in ``finally``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from acpfsm.adapters.reference_agent import (
    FAULTS,
    FaultError,
    FaultScope,
    chunk_text,
    other_rollout_id,
    parse_fault,
    reply_for,
)
from acpfsm.adapters.reference_agent._script import parse_directives

Msg = dict[str, Any]


class Refuse(Exception):
    """Returned by an ``on_request`` callback: answer the agent's request with this error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code} {message}")
        self.code = code
        self.message = message


TIMEOUT = 5.0
MAX_LINE = 32 * 1024 * 1024


def _gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (absent, or a zombie nobody has reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


class Peer:
    """A raw JSON-lines client for one agent process."""

    def __init__(self, proc: Process, stderr_path: Path) -> None:
        self.proc = proc
        self.stderr_path = stderr_path
        assert proc.stdout is not None
        self._stdout = BufferedByteReceiveStream(proc.stdout)
        self._next_id = 100
        self.cwd = ""

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    async def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.send(data)

    async def send(self, message: Msg) -> None:
        await self.send_raw(json.dumps(message).encode() + b"\n")

    async def request(self, method: str, params: Any = None) -> int:
        rid = self._next_id
        self._next_id += 1
        message: Msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        return rid

    async def notify(self, method: str, params: Any) -> None:
        await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def read_line(self) -> bytes:
        with anyio.fail_after(TIMEOUT):
            return await self._stdout.receive_until(b"\n", MAX_LINE)

    async def recv(self) -> Msg:
        line = await self.read_line()
        message = json.loads(line)
        assert isinstance(message, dict), line
        return message

    async def until_response(
        self, rid: int, on_request: Callable[[Msg], Any] | None = None
    ) -> tuple[list[Msg], Msg]:
        """Read until the answer to ``rid``; return (session/update payloads, answer).

        Agent requests are answered with ``on_request(msg)`` (a result, or a :class:`Refuse`:
        an error), or refused with -32601 when there is no callback."""
        updates: list[Msg] = []
        while True:
            msg = await self.recv()
            if msg.get("id") == rid and "method" not in msg:
                return updates, msg
            if msg.get("method") == "session/update":
                updates.append(msg["params"]["update"])
            elif "method" in msg and "id" in msg:
                if on_request is None:
                    await self.send(
                        {
                            "jsonrpc": "2.0",
                            "id": msg["id"],
                            "error": {"code": -32601, "message": "Method not found"},
                        }
                    )
                else:
                    answer = on_request(msg)
                    if isinstance(answer, Refuse):
                        error = {"code": answer.code, "message": answer.message}
                        await self.send({"jsonrpc": "2.0", "id": msg["id"], "error": error})
                    else:
                        await self.send({"jsonrpc": "2.0", "id": msg["id"], "result": answer})
            else:
                raise AssertionError(f"unexpected message {msg}")

    async def call(self, method: str, params: Any = None) -> tuple[list[Msg], Msg]:
        return await self.until_response(await self.request(method, params))

    async def initialize(self, **client_capabilities: Any) -> Msg:
        _, answer = await self.call(
            "initialize",
            {
                "protocolVersion": 1,
                "clientCapabilities": client_capabilities,
                "clientInfo": {"name": "test", "version": "0"},
            },
        )
        return answer["result"]  # type: ignore[no-any-return]

    async def new_session(self) -> str:
        _, answer = await self.call("session/new", {"cwd": self.cwd, "mcpServers": []})
        sid = answer["result"]["sessionId"]
        commands = await self.recv()  # available_commands_update follows the answer
        assert commands["params"]["update"]["sessionUpdate"] == "available_commands_update"
        return sid  # type: ignore[no-any-return]

    async def prompt(self, sid: str, text: str) -> int:
        return await self.request(
            "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
        )

    async def until_update(self, kind: str) -> list[Msg]:
        """Read notifications up to and including the first update of ``kind``."""
        seen: list[Msg] = []
        while True:
            msg = await self.recv()
            assert msg.get("method") == "session/update", msg
            seen.append(msg["params"]["update"])
            if seen[-1]["sessionUpdate"] == kind:
                return seen

    async def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.aclose()

    async def wait(self) -> int:
        with anyio.fail_after(TIMEOUT):
            return await self.proc.wait()

    async def stdout_eof(self) -> bool:
        with anyio.fail_after(TIMEOUT):
            try:
                await self._stdout.receive()
            except anyio.EndOfStream:
                return True
        return False


@asynccontextmanager
async def spawn(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None, name: str = "agent"
) -> AsyncIterator[Peer]:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    stderr_path = tmp_path / f"{name}.stderr"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("ACPFSM_REFERENCE_")}
    full_env.update(env or {})
    with stderr_path.open("wb") as stderr:
        proc = await anyio.open_process(
            [
                sys.executable,
                "-m",
                "acpfsm.adapters.reference_agent",
                "--sessions-dir",
                str(tmp_path / "sessions"),
                "--delay",
                "0",
                *args,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd=workspace,
            env=full_env,
            start_new_session=True,
        )
    peer = Peer(proc, stderr_path)
    peer.cwd = str(workspace)
    try:
        yield peer
    finally:
        if proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        with anyio.move_on_after(TIMEOUT, shield=True):
            await proc.wait()
        await proc.aclose()
        assert proc.returncode is not None


def text_of(updates: list[Msg], kind: str = "agent_message_chunk") -> str:
    return "".join(u["content"]["text"] for u in updates if u["sessionUpdate"] == kind)


def kinds(updates: list[Msg]) -> list[str]:
    return [u["sessionUpdate"] for u in updates]


# ---------------------------------------------------------------------------------------
# Pure helpers


def test_chunks_join_back_and_reply_is_deterministic() -> None:
    reply = reply_for("  hello   world ")
    assert reply == 'Reference reply: "hello world" (2 words).'
    assert reply_for("hello world") == reply
    chunks = chunk_text(reply)
    assert len(chunks) >= 2
    assert "".join(chunks) == reply
    assert reply_for("") == "Reference reply: (empty prompt)."


def test_directives_are_parsed_and_removed() -> None:
    d = parse_directives(
        "fix [[fault:flood=10]] it [[permission]] [[write:a.txt]] [[delay:0.5]]"
        " [[fault:no_load]] [[fault:bogus]] [[nope]]"
    )
    assert d.text == "fix it"
    assert d.faults == [("flood", 10.0)]
    assert d.permission
    assert d.writes == ["a.txt"]
    assert d.delay == 0.5
    assert len(d.warnings) == 3


def test_fault_parsing() -> None:
    assert parse_fault("crash=7") == ("crash", 7.0)
    assert parse_fault("Hang") == ("hang", None)
    for bad in ("nope", "hang=1", "flood=x", "slow_start=-1"):
        with pytest.raises(FaultError):
            parse_fault(bad)
    assert FAULTS["crash"].scope is FaultScope.TURN
    assert FAULTS["load_not_found"].scope is FaultScope.RUN


# ---------------------------------------------------------------------------------------
# Protocol basics


async def test_echo_version_claims_whatever_version_it_is_asked_for(tmp_path: Path) -> None:
    async with spawn(tmp_path, "--fault", "echo_version") as agent:
        _, answer = await agent.call("initialize", {"protocolVersion": 999})
        assert answer["result"]["protocolVersion"] == 999
    async with spawn(tmp_path, "--fault", "echo_version", name="again") as agent:
        assert (await agent.initialize())["protocolVersion"] == 1


@pytest.mark.parametrize("backend_flag", ["trio", "asyncio"])
async def test_initialize_new_prompt(tmp_path: Path, backend_flag: str) -> None:
    async with spawn(tmp_path, "--backend", backend_flag) as agent:
        _, answer = await agent.call("initialize", {"protocolVersion": 99})
        result = answer["result"]
        assert result["protocolVersion"] == 1
        assert result["agentInfo"]["name"] == "acpfsm-reference-agent"
        caps = result["agentCapabilities"]
        assert caps["loadSession"] is True
        assert caps["promptCapabilities"]["image"] is True
        assert caps["promptCapabilities"]["embeddedContext"] is True
        assert caps["_meta"] == {"claudeCode": {"promptQueueing": True}}
        assert result["authMethods"] == []
        assert result["_meta"]["acpfsmReference"]["pid"] == agent.proc.pid

        _, answer = await agent.call("session/new", {"cwd": agent.cwd, "mcpServers": []})
        new = answer["result"]
        sid = new["sessionId"]
        assert new["modes"]["currentModeId"] == "default"
        assert {"default", "plan"} <= {m["id"] for m in new["modes"]["availableModes"]}
        assert [m["modelId"] for m in new["models"]["availableModels"]] == ["ref-fast", "ref-smart"]
        categories = {o["id"]: o["category"] for o in new["configOptions"]}
        assert categories == {"mode": "mode", "model": "model", "thinking": "thought_level"}
        first = await agent.recv()
        assert first["params"]["update"]["sessionUpdate"] == "available_commands_update"

        updates, answer = await agent.until_response(await agent.prompt(sid, "hello world"))
        assert answer["result"] == {"stopReason": "end_turn"}
        assert text_of(updates) == reply_for("hello world")
        assert text_of(updates, "agent_thought_chunk") == "Reading the prompt with ref-fast."
        seen = kinds(updates)
        for kind in (
            "agent_thought_chunk",
            "plan",
            "tool_call",
            "tool_call_update",
            "agent_message_chunk",
            "session_info_update",
        ):
            assert kind in seen
        assert seen.index("tool_call") < seen.index("agent_message_chunk")
        statuses = [u.get("status") for u in updates if u["sessionUpdate"] == "tool_call_update"]
        assert statuses == ["in_progress", "completed"]
        final_plan = [u for u in updates if u["sessionUpdate"] == "plan"][-1]
        assert {e["status"] for e in final_plan["entries"]} == {"completed"}

        await agent.close_stdin()
        assert await agent.wait() == 0


async def test_session_new_rejects_relative_cwd_and_unknown_session(tmp_path: Path) -> None:
    async with spawn(tmp_path) as agent:
        _, answer = await agent.call("session/new", {"cwd": "relative/path", "mcpServers": []})
        assert answer["error"] == {
            "code": -32602,
            "message": "Invalid params: `cwd` must be an absolute path, but received: "
            "relative/path",
            "data": {"cwd": "relative/path"},
        }
        _, answer = await agent.call("session/new", {"mcpServers": []})
        assert answer["error"]["code"] == -32602
        _, answer = await agent.call("session/prompt", {"sessionId": "nope", "prompt": []})
        assert answer["error"] == {
            "code": -32002,
            "message": "Resource not found",
            "data": {"sessionId": "nope"},
        }


async def test_unknown_method_malformed_and_invalid_lines(tmp_path: Path) -> None:
    async with spawn(tmp_path) as agent:
        _, answer = await agent.call("no/such_method", {})
        assert answer["error"] == {
            "code": -32601,
            "message": "Method not found",
            "data": {"method": "no/such_method"},
        }
        await agent.send_raw(b"this is not json\n")
        answer = await agent.recv()
        assert answer["id"] is None
        assert answer["error"]["code"] == -32700
        assert answer["error"]["message"] == "Parse error"
        await agent.send_raw(b"[1, 2]\n")
        answer = await agent.recv()
        assert answer["id"] is None
        assert answer["error"]["code"] == -32600
        await agent.send_raw(b"\n")  # blank lines are ignored
        # unknown notifications and responses to unknown ids are ignored; still alive:
        await agent.notify("_custom/thing", {})
        await agent.send({"jsonrpc": "2.0", "id": 999999, "result": {}})
        result = await agent.initialize()
        assert result["protocolVersion"] == 1


async def test_stdin_eof_exits_promptly_even_mid_turn(tmp_path: Path) -> None:
    async with spawn(tmp_path) as agent:
        await agent.initialize()
        sid = await agent.new_session()
        await agent.prompt(sid, "wait [[fault:stall]]")
        await agent.until_update("agent_message_chunk")
        start = time.monotonic()
        await agent.close_stdin()
        assert await agent.wait() == 0
        assert time.monotonic() - start < 2


# ---------------------------------------------------------------------------------------
# Turns: cancel, queueing, modes, permissions


async def test_cancel_ends_turn_cancelled(tmp_path: Path) -> None:
    async with spawn(tmp_path) as agent:
        await agent.initialize()
        sid = await agent.new_session()
        rid = await agent.prompt(sid, "take your time [[fault:stall]]")
        await agent.until_update("agent_message_chunk")
        await agent.notify("session/cancel", {"sessionId": sid})
        _, answer = await agent.until_response(rid)
        assert answer["result"] == {"stopReason": "cancelled"}
        # the session is usable afterwards
        updates, answer = await agent.until_response(await agent.prompt(sid, "again"))
        assert answer["result"] == {"stopReason": "end_turn"}
        assert text_of(updates) == reply_for("again")


async def test_cancel_request_answers_minus_32800(tmp_path: Path) -> None:
    async with spawn(tmp_path) as agent:
        await agent.initialize()
        sid = await agent.new_session()
        rid = await agent.prompt(sid, "[[fault:stall]]")
        await agent.until_update("agent_message_chunk")
        await agent.notify("$/cancel_request", {"requestId": rid})
        _, answer = await agent.until_response(rid)
        assert answer["error"] == {"code": -32800, "message": "Request cancelled"}


async def test_prompt_queueing_steer(tmp_path: Path) -> None:
    async with spawn(tmp_path) as agent:
        await agent.initialize()
        sid = await agent.new_session()
        first = await agent.prompt(sid, "long task [[fault:stall]]")
        await agent.until_update("agent_message_chunk")
        second = await agent.prompt(sid, "change of plan")
        # The predecessor is answered end_turn first ...
        _, answer = await agent.until_response(first)
        assert answer["result"] == {"stopReason": "end_turn"}
        # ... then the successor streams its own turn and is answered.
        updates, answer = await agent.until_response(second)
        assert answer["result"] == {"stopReason": "end_turn"}
        assert text_of(updates) == reply_for("change of plan")


async def test_no_queueing_serializes_prompts(tmp_path: Path) -> None:
    async with spawn(tmp_path, "--fault", "no_queueing") as agent:
        result = await agent.initialize()
        assert "_meta" not in result["agentCapabilities"]
        sid = await agent.new_session()
        first = await agent.prompt(sid, "slow one [[delay:0.01]]")
        second = await agent.prompt(sid, "next")
        updates, answer = await agent.until_response(first)
        assert answer["result"] == {"stopReason": "end_turn"}
        assert text_of(updates) == reply_for("slow one")  # ran to its natural end
        updates, answer = await agent.until_response(second)
        assert answer["result"] == {"stopReason": "end_turn"}
        assert text_of(updates) == reply_for("next")


async def test_modes_models_and_config_options(tmp_path: Path) -> None:
    async with spawn(tmp_path) as agent:
        await agent.initialize()
        sid = await agent.new_session()
        updates, answer = await agent.call("session/set_mode", {"sessionId": sid, "modeId": "plan"})
        assert answer["result"] == {}
        assert updates[0] == {"sessionUpdate": "current_mode_update", "currentModeId": "plan"}
        assert updates[1]["sessionUpdate"] == "config_option_update"
        mode = next(o for o in updates[1]["configOptions"] if o["id"] == "mode")
        assert mode["currentValue"] == "plan"

        updates, answer = await agent.call(
            "session/set_config_option",
            {"sessionId": sid, "configId": "model", "value": "ref-smart"},
        )
        options = {o["id"]: o["currentValue"] for o in answer["result"]["configOptions"]}
        assert options == {"mode": "plan", "model": "ref-smart", "thinking": "low"}
        assert kinds(updates) == ["config_option_update"]

        updates, answer = await agent.call(
            "session/set_model", {"sessionId": sid, "modelId": "ref-fast"}
        )
        assert answer["result"] == {}
        assert kinds(updates) == ["config_option_update"]

        _, answer = await agent.call(
            "session/set_config_option", {"sessionId": sid, "configId": "thinking", "value": "high"}
        )
        assert "error" not in answer

        _, answer = await agent.call("session/set_mode", {"sessionId": sid, "modeId": "bogus"})
        assert answer["error"] == {"code": -32602, "message": "Invalid params: Invalid Mode: bogus"}
        _, answer = await agent.call(
            "session/set_config_option", {"sessionId": sid, "configId": "model", "value": "gpt"}
        )
        assert answer["error"]["message"] == (
            "Invalid params: Invalid value for config option model: gpt"
        )

        # plan mode runs no tools beyond reading the prompt; high thinking shows 3 thoughts
        updates, answer = await agent.until_response(await agent.prompt(sid, "[[permission]] go"))
        assert answer["result"] == {"stopReason": "end_turn"}
        assert len([u for u in updates if u["sessionUpdate"] == "tool_call"]) == 1
        assert len([u for u in updates if u["sessionUpdate"] == "agent_thought_chunk"]) == 3
        assert text_of(updates).endswith("Plan mode: no changes made.")


async def test_permission_requests_are_honoured(tmp_path: Path) -> None:
    async with spawn(tmp_path) as agent:
        await agent.initialize()
        sid = await agent.new_session()
        asked: list[Msg] = []

        def answer_with(option: str) -> Callable[[Msg], Any]:
            def on_request(msg: Msg) -> Any:
                assert msg["method"] == "session/request_permission"
                asked.append(msg["params"])
                return {"outcome": {"outcome": "selected", "optionId": option}}

            return on_request

        rid = await agent.prompt(sid, "[[permission]] run this")
        updates, answer = await agent.until_response(rid, answer_with("allow_once"))
        assert answer["result"] == {"stopReason": "end_turn"}
        params = asked[0]
        assert params["sessionId"] == sid
        assert params["toolCall"]["kind"] == "execute"
        assert {o["kind"] for o in params["options"]} == {
            "allow_once",
            "allow_always",
            "reject_once",
            "reject_always",
        }
        tool_id = params["toolCall"]["toolCallId"]
        final = [u for u in updates if u.get("toolCallId") == tool_id][-1]
        assert final["status"] == "completed"
        assert "Ran `echo run this`." in text_of(updates)

        rid = await agent.prompt(sid, "[[permission]] no way")
        updates, answer = await agent.until_response(rid, answer_with("reject_once"))
        assert answer["result"] == {"stopReason": "end_turn"}
        assert "Permission denied" in text_of(updates)
        assert "failed" in [u.get("status") for u in updates]

        # a cancelled outcome ends the turn cancelled
        rid = await agent.prompt(sid, "[[permission]] whatever")
        _, answer = await agent.until_response(
            rid, lambda msg: {"outcome": {"outcome": "cancelled"}}
        )
        assert answer["result"] == {"stopReason": "cancelled"}


async def test_write_and_read_go_through_client_fs(tmp_path: Path) -> None:
    async with spawn(tmp_path) as agent:
        await agent.initialize(fs={"readTextFile": True, "writeTextFile": True})
        sid = await agent.new_session()
        calls: list[Msg] = []

        def on_request(msg: Msg) -> Any:
            calls.append(msg)
            if msg["method"] == "session/request_permission":
                return {"outcome": {"outcome": "selected", "optionId": "allow_always"}}
            if msg["method"] == "fs/write_text_file":
                return None
            assert msg["method"] == "fs/read_text_file"
            return {"content": "line one\nline two\n"}

        rid = await agent.prompt(sid, "[[write:notes.txt]] [[read:notes.txt]] keep this")
        updates, answer = await agent.until_response(rid, on_request)
        assert answer["result"] == {"stopReason": "end_turn"}
        methods = [c["method"] for c in calls]
        assert methods == ["session/request_permission", "fs/write_text_file", "fs/read_text_file"]
        target = os.path.join(agent.cwd, "notes.txt")
        assert calls[1]["params"] == {"sessionId": sid, "path": target, "content": "keep this\n"}
        assert "Wrote notes.txt." in text_of(updates)
        assert "notes.txt has 2 lines." in text_of(updates)
        # allow_always: the next write does not ask again
        calls.clear()
        _, answer = await agent.until_response(
            await agent.prompt(sid, "[[write:b.txt]]"), on_request
        )
        assert [c["method"] for c in calls] == ["fs/write_text_file"]


# ---------------------------------------------------------------------------------------
# Persistence


async def test_load_after_restart_replays_history(tmp_path: Path) -> None:
    async with spawn(tmp_path, name="first") as agent:
        await agent.initialize()
        sid = await agent.new_session()
        _, answer = await agent.until_response(await agent.prompt(sid, "remember me"))
        assert answer["result"] == {"stopReason": "end_turn"}
        await agent.call("session/set_mode", {"sessionId": sid, "modeId": "plan"})
        await agent.close_stdin()
        assert await agent.wait() == 0
    assert (tmp_path / "sessions" / f"{sid}.jsonl").is_file()

    async with spawn(tmp_path, name="second") as agent:
        await agent.initialize()
        updates, answer = await agent.call(
            "session/load", {"sessionId": sid, "cwd": agent.cwd, "mcpServers": []}
        )
        assert answer["result"]["modes"]["currentModeId"] == "plan"
        assert updates[0] == {
            "sessionUpdate": "user_message_chunk",
            "content": {"type": "text", "text": "remember me"},
        }
        assert text_of(updates) == reply_for("remember me")
        assert "tool_call" in kinds(updates)
        # the loaded session takes prompts; its history grows
        _, answer = await agent.until_response(await agent.prompt(sid, "and this"))
        assert answer["result"] == {"stopReason": "end_turn"}
        updates, _ = await agent.call(
            "session/load", {"sessionId": sid, "cwd": agent.cwd, "mcpServers": []}
        )
        users = [
            u["content"]["text"] for u in updates if u["sessionUpdate"] == "user_message_chunk"
        ]
        assert users == ["remember me", "and this"]
        tool_ids = [u["toolCallId"] for u in updates if u["sessionUpdate"] == "tool_call"]
        assert len(tool_ids) == len(set(tool_ids))

        for unknown in ("00000000-0000-4000-8000-000000000000", "../etc/passwd"):
            _, answer = await agent.call(
                "session/load", {"sessionId": unknown, "cwd": agent.cwd, "mcpServers": []}
            )
            assert answer["error"] == {
                "code": -32002,
                "message": "Resource not found",
                "data": {"sessionId": unknown},
            }


# ---------------------------------------------------------------------------------------
# Faults


LOAD_ID = "11111111-2222-4333-8444-555555555555"


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        (
            "load_method_not_found",
            {"code": -32601, "message": "Method not found", "data": {"method": "session/load"}},
        ),
        (
            "no_load",
            {"code": -32601, "message": "Method not found", "data": {"method": "session/load"}},
        ),
        (
            "load_not_found",
            {"code": -32002, "message": "Resource not found", "data": {"sessionId": LOAD_ID}},
        ),
        (
            "load_rollout_missing",
            {
                "code": -32603,
                "message": "Internal error",
                "data": {"details": f"no rollout found for thread id {LOAD_ID}"},
            },
        ),
        (
            "load_rollout_other",
            {
                "code": -32603,
                "message": "Internal error",
                "data": {"details": f"no rollout found for thread id {other_rollout_id(LOAD_ID)}"},
            },
        ),
        (
            "load_internal",
            {"code": -32603, "message": "Internal error", "data": {"details": "Session not found"}},
        ),
        ("load_auth", {"code": -32000, "message": "Authentication required"}),
    ],
)
async def test_load_fault_shapes(tmp_path: Path, fault: str, error: Msg) -> None:
    async with spawn(tmp_path, "--fault", fault) as agent:
        result = await agent.initialize()
        assert result["agentCapabilities"]["loadSession"] is (fault != "no_load")
        assert other_rollout_id(LOAD_ID) != LOAD_ID
        _, answer = await agent.call(
            "session/load", {"sessionId": LOAD_ID, "cwd": agent.cwd, "mcpServers": []}
        )
        assert answer["error"] == error


async def test_auth_required_until_authenticate(tmp_path: Path) -> None:
    async with spawn(tmp_path, env={"ACPFSM_REFERENCE_FAULTS": "auth_required"}) as agent:
        result = await agent.initialize()
        assert [m["id"] for m in result["authMethods"]] == ["reference-login"]
        _, answer = await agent.call("session/new", {"cwd": agent.cwd, "mcpServers": []})
        assert answer["error"] == {"code": -32000, "message": "Authentication required"}
        _, answer = await agent.call("authenticate", {"methodId": "bogus"})
        assert answer["error"]["code"] == -32602
        _, answer = await agent.call("authenticate", {"methodId": "reference-login"})
        assert answer["result"] == {}
        assert await agent.new_session()


async def test_crash_mid_turn(tmp_path: Path) -> None:
    async with spawn(tmp_path) as agent:
        await agent.initialize()
        sid = await agent.new_session()
        await agent.prompt(sid, "boom [[fault:crash=7]]")
        seen = await agent.until_update("agent_message_chunk")
        assert "tool_call" in kinds(seen)
        assert await agent.stdout_eof()
        assert await agent.wait() == 7
        assert "fault crash" in agent.stderr


async def test_hang_ignores_cancel(tmp_path: Path) -> None:
    async with spawn(tmp_path) as agent:
        await agent.initialize()
        sid = await agent.new_session()
        await agent.prompt(sid, "[[fault:hang]]")
        await agent.until_update("agent_message_chunk")
        await agent.notify("session/cancel", {"sessionId": sid})
        with anyio.move_on_after(0.3) as scope:
            await agent.recv()
        assert scope.cancelled_caught  # nothing arrives: no answer, ever
        assert await agent.initialize()  # the process itself still works
        await agent.close_stdin()
        assert await agent.wait() == 0


async def test_ignore_cancel_completes_normally(tmp_path: Path) -> None:
    async with spawn(tmp_path, "--fault", "ignore_cancel", "--delay", "0.005") as agent:
        await agent.initialize()
        sid = await agent.new_session()
        rid = await agent.prompt(sid, "one two three four five six seven eight nine")
        await agent.until_update("agent_message_chunk")
        await agent.notify("session/cancel", {"sessionId": sid})
        _, answer = await agent.until_response(rid)
        assert answer["result"] == {"stopReason": "end_turn"}


async def test_prompt_error(tmp_path: Path) -> None:
    async with spawn(tmp_path) as agent:
        await agent.initialize()
        sid = await agent.new_session()
        updates, answer = await agent.until_response(
            await agent.prompt(sid, "[[fault:prompt_error]]")
        )
        assert "agent_message_chunk" in kinds(updates)
        assert answer["error"] == {
            "code": -32603,
            "message": "Internal error",
            "data": {"details": "reference agent fault: prompt_error"},
        }


async def test_garbage_line_then_normal_end(tmp_path: Path) -> None:
    async with spawn(tmp_path) as agent:
        await agent.initialize()
        sid = await agent.new_session()
        rid = await agent.prompt(sid, "[[fault:garbage]] hi")
        await agent.until_update("agent_message_chunk")
        line = await agent.read_line()
        with pytest.raises(json.JSONDecodeError):
            json.loads(line)
        _, answer = await agent.until_response(rid)
        assert answer["result"] == {"stopReason": "end_turn"}


@pytest.mark.parametrize("size", [None, 100_000])
async def test_oversized_line(tmp_path: Path, size: int | None) -> None:
    async with spawn(tmp_path) as agent:
        await agent.initialize()
        sid = await agent.new_session()
        directive = "[[fault:oversized]]" if size is None else f"[[fault:oversized={size}]]"
        rid = await agent.prompt(sid, directive)
        await agent.until_update("agent_message_chunk")
        line = await agent.read_line()
        limit = 17 * 1024 * 1024 if size is None else size
        assert len(line) == limit + 1
        assert json.loads(line)["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        _, answer = await agent.until_response(rid)
        assert answer["result"] == {"stopReason": "end_turn"}


async def test_notification_flood(tmp_path: Path) -> None:
    async with spawn(tmp_path) as agent:
        await agent.initialize()
        sid = await agent.new_session()
        updates, answer = await agent.until_response(
            await agent.prompt(sid, "[[fault:flood=3000]]")
        )
        assert answer["result"] == {"stopReason": "end_turn"}
        floods = [
            u
            for u in updates
            if u["sessionUpdate"] == "agent_thought_chunk"
            and u["content"]["text"].startswith("flood ")
        ]
        assert len(floods) == 3000


async def test_close_stdout_keeps_running_until_stdin_eof(tmp_path: Path) -> None:
    async with spawn(tmp_path) as agent:
        await agent.initialize()
        sid = await agent.new_session()
        await agent.prompt(sid, "[[fault:close_stdout]]")
        await agent.until_update("agent_message_chunk")
        assert await agent.stdout_eof()
        await anyio.sleep(0.1)
        assert agent.proc.returncode is None
        await agent.prompt(sid, "still listening")  # accepted, output goes nowhere
        await agent.close_stdin()
        assert await agent.wait() == 0


async def test_run_fault_from_env_applies_to_every_turn(tmp_path: Path) -> None:
    async with spawn(tmp_path, env={"ACPFSM_REFERENCE_FAULTS": "prompt_error"}) as agent:
        result = await agent.initialize()
        assert result["_meta"]["acpfsmReference"]["faults"] == ["prompt_error"]
        sid = await agent.new_session()
        for text in ("one", "two"):
            _, answer = await agent.until_response(await agent.prompt(sid, text))
            assert answer["error"]["code"] == -32603


async def test_slow_start(tmp_path: Path) -> None:
    start = time.monotonic()
    async with spawn(tmp_path, "--fault", "slow_start=0.6") as agent:
        await agent.initialize()
        assert time.monotonic() - start >= 0.6


async def test_ignore_eof_needs_sigterm(tmp_path: Path) -> None:
    async with spawn(tmp_path, "--fault", "ignore_eof") as agent:
        await agent.initialize()
        await agent.close_stdin()
        with anyio.move_on_after(0.3):
            await agent.proc.wait()
        assert agent.proc.returncode is None
        agent.proc.terminate()
        assert await agent.wait() == -signal.SIGTERM


async def test_spawn_child_orphan_is_reaped_by_group_kill(tmp_path: Path) -> None:
    async with spawn(tmp_path, "--fault", "spawn_child", "--fault", "ignore_eof") as agent:
        result = await agent.initialize()
        child = result["_meta"]["acpfsmReference"]["childPid"]
        assert not _gone(child)
        assert os.getpgid(child) == agent.proc.pid
        os.kill(agent.proc.pid, signal.SIGTERM)  # the wrapper only: the child survives
        assert await agent.wait() == -signal.SIGTERM
        assert not _gone(child)
        os.killpg(agent.proc.pid, signal.SIGKILL)
        with anyio.fail_after(TIMEOUT):
            for _ in range(int(TIMEOUT / 0.01)):
                if _gone(child):
                    break
                await anyio.sleep(0.01)
        assert _gone(child)


async def test_non_utf8_bytes_on_stdout(tmp_path: Path) -> None:
    async with spawn(tmp_path) as agent:
        await agent.initialize()
        sid = await agent.new_session()
        rid = await agent.prompt(sid, "[[fault:non_utf8]] hi")
        await agent.until_update("agent_message_chunk")
        line = await agent.read_line()
        assert b"\xff\xfe" in line and b'"session/update"' in line
        with pytest.raises(UnicodeDecodeError):
            line.decode("utf-8")
        _, answer = await agent.until_response(rid)
        assert answer["result"] == {"stopReason": "end_turn"}


async def test_exit_at_startup(tmp_path: Path) -> None:
    async with spawn(tmp_path, "--fault", "exit_at_startup=5") as agent:
        assert await agent.stdout_eof()
        assert await agent.wait() == 5
        assert "exiting at startup with status 5 (fault exit_at_startup)" in agent.stderr


async def test_no_initialize_is_never_answered(tmp_path: Path) -> None:
    async with spawn(tmp_path, "--fault", "no_initialize") as agent:
        await agent.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        with anyio.move_on_after(0.3) as scope:
            await agent.recv()
        assert scope.cancelled_caught  # nothing arrives
        assert await agent.new_session()  # every other request is answered
        await agent.close_stdin()
        assert await agent.wait() == 0


async def test_permission_options_reject_first(tmp_path: Path) -> None:
    async with spawn(tmp_path) as agent:
        await agent.initialize()
        sid = await agent.new_session()
        asked: list[Msg] = []

        def first_option(msg: Msg) -> Any:
            asked.append(msg["params"])
            option = msg["params"]["options"][0]["optionId"]
            return {"outcome": {"outcome": "selected", "optionId": option}}

        rid = await agent.prompt(sid, "[[fault:permission_reject_first]] [[permission]] rm it")
        updates, answer = await agent.until_response(rid, first_option)
        assert answer["result"] == {"stopReason": "end_turn"}
        kinds_offered = [o["kind"] for o in asked[0]["options"]]
        assert kinds_offered == ["reject_once", "reject_always", "allow_once", "allow_always"]
        assert "Permission denied" in text_of(updates)


def probe_report(updates: list[Msg]) -> Msg:
    """The ``rawOutput`` of the hostile fs probe's tool call."""
    outputs = [
        u["rawOutput"]
        for u in updates
        if u["sessionUpdate"] == "tool_call_update" and "rawOutput" in u
    ]
    assert len(outputs) == 1, updates
    return outputs[0]  # type: ignore[no-any-return]


def naive_fs(msg: Msg) -> Any:
    """A client that trusts the agent: reads and writes whatever path it is given."""
    params = msg["params"]
    path = params["path"]
    try:
        if msg["method"] == "fs/read_text_file":
            with open(path, encoding="utf-8", errors="replace") as handle:
                return {"content": handle.read()}
        assert msg["method"] == "fs/write_text_file"
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(params["content"])
        return None
    except (OSError, ValueError) as exc:
        return Refuse(-32603, str(exc))


def refuse_all(msg: Msg) -> Any:
    return Refuse(-32602, "Invalid params: refused")


async def test_fs_traversal_counts_what_escaped(tmp_path: Path) -> None:
    async with spawn(tmp_path) as agent:
        await agent.initialize(fs={"readTextFile": True, "writeTextFile": True})
        sid = await agent.new_session()
        rid = await agent.prompt(sid, "[[fault:fs_traversal]] look around")
        updates, answer = await agent.until_response(rid, refuse_all)
        assert answer["result"] == {"stopReason": "end_turn"}
        report = probe_report(updates)
        assert report == {
            "fault": "fs_traversal",
            "requests": 12,
            "answered": 0,
            "escaped": 0,
            "errors": {"-32602 Invalid params: refused": 12},
        }
        assert "fs_traversal: 12 requests, 0 answered, 12 refused" in text_of(updates)
        # a client that trusts the agent: every request reaches outside
        rid = await agent.prompt(sid, "[[fault:fs_traversal]] again")
        updates, _ = await agent.until_response(rid, naive_fs)
        assert probe_report(updates)["escaped"] >= 10
    assert sorted(os.listdir(tmp_path)) == ["agent.stderr", "sessions", "ws"]  # cleaned up
    assert os.listdir(tmp_path / "ws") == []


async def test_fs_symlink_race_swaps_while_asking(tmp_path: Path) -> None:
    async with spawn(tmp_path) as agent:
        await agent.initialize(fs={"readTextFile": True, "writeTextFile": True})
        sid = await agent.new_session()
        rid = await agent.prompt(sid, "[[fault:fs_symlink_race=0.5]] race")
        updates, answer = await agent.until_response(rid, naive_fs)
        assert answer["result"] == {"stopReason": "end_turn"}
        report = probe_report(updates)
        assert report["reads"] > 0 and report["swaps"] > 0
        assert report["requests"] == report["reads"] + report["writes"]
        assert report["escaped"] > 0  # a client that opens by path is beaten by the race
    assert os.listdir(tmp_path / "ws") == []


async def test_fs_fifo_huge_read_and_bad_paths_requests(tmp_path: Path) -> None:
    seen: list[tuple[str, str, Msg]] = []

    def record(msg: Msg) -> Any:
        path = msg["params"]["path"]
        kind = ""
        if os.path.isabs(path) and "\x00" not in path and len(path) < 4096:
            with contextlib.suppress(OSError):
                mode = os.lstat(path).st_mode
                kind = "fifo" if stat.S_ISFIFO(mode) else f"file of {os.lstat(path).st_size}"
        seen.append((msg["method"], kind, msg["params"]))
        return Refuse(-32602, "Invalid params: refused")

    async with spawn(tmp_path) as agent:
        await agent.initialize(fs={"readTextFile": True, "writeTextFile": True})
        sid = await agent.new_session()
        for fault in ("fs_fifo", "fs_huge_read=20", "fs_bad_paths"):
            rid = await agent.prompt(sid, f"[[fault:{fault}]] probe")
            updates, answer = await agent.until_response(rid, record)
            assert answer["result"] == {"stopReason": "end_turn"}
            assert probe_report(updates)["escaped"] == 0
    fifo, huge, bad = seen[:2], seen[2:4], seen[4:]
    assert [(m, k) for m, k, _ in fifo] == [
        ("fs/read_text_file", "fifo"),
        ("fs/write_text_file", "fifo"),
    ]
    assert [k for _, k, _ in huge] == [f"file of {20 * 1024 * 1024}"] * 2
    assert huge[0][2]["limit"] == 1 and "limit" not in huge[1][2]
    paths = [p["path"] for _, _, p in bad]
    assert len(paths) == 6 and "\x00" in paths[0] and paths[2] == "relative.txt"
    assert len(paths[4].encode()) > 4096
    assert os.listdir(tmp_path / "ws") == []


async def test_leak_env_prints_secret_looking_variables(tmp_path: Path) -> None:
    env = {"MY_API_KEY": "sk-123456", "OTHER": "plain"}
    async with spawn(tmp_path, "--fault", "leak_env", env=env) as agent:
        await agent.initialize()
        await agent.close_stdin()
        assert await agent.wait() == 0
    assert "reference-agent env: MY_API_KEY=sk-123456" in agent.stderr
    assert "OTHER" not in agent.stderr
