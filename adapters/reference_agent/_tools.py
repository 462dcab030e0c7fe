"""The tools a turn of :class:`~._agent.ReferenceAgent` runs: tool-call updates, permission
requests, commands, ``fs/*`` reads and writes through the client, MCP tools."""

from __future__ import annotations

import posixpath
from typing import Any

import msgspec
from anyio.lowlevel import checkpoint
from msgspec import UNSET

from . import _wire as w
from ._base import (
    _PERMISSION_OPTIONS,
    _REJECT_FIRST,
    _AgentBase,
    _Session,
    _Turn,
    log,
)
from ._mcp import clip, decode_arguments


class _ToolSide(_AgentBase):
    """the turn's tool calls: permission, command, fs, MCP."""

    async def _tool_start(
        self,
        session: _Session,
        turn: _Turn,
        tid: str,
        title: str,
        kind: str,
        raw_input: Any,
        locations: list[str] | None = None,
    ) -> None:
        turn.open_tool = tid
        await self._emit(
            session,
            turn,
            w.ToolCallStart(
                tool_call_id=tid,
                title=title,
                kind=kind,
                status="pending",
                raw_input=raw_input,
                locations=[w.Location(path=p) for p in locations] if locations else UNSET,
            ),
        )
        await self._emit(session, turn, w.ToolCallUpdate(tool_call_id=tid, status="in_progress"))

    async def _tool_done(
        self,
        session: _Session,
        turn: _Turn,
        tid: str,
        status: str,
        text: str | None = None,
        content: list[w.ToolContent | w.DiffContent] | None = None,
    ) -> None:
        items: list[w.ToolContent | w.DiffContent] = list(content or [])
        if text is not None:
            items.append(w.ToolContent(content=w.TextContent(text)))
        await self._emit(
            session,
            turn,
            w.ToolCallUpdate(
                tool_call_id=tid,
                status=status,
                content=items or UNSET,
            ),
        )
        turn.open_tool = None

    async def _ask(
        self, session: _Session, turn: _Turn, tid: str, title: str, kind: str, raw_input: Any
    ) -> bool:
        """Ask the client for permission; True when allowed. A cancelled outcome ends the turn."""
        if kind in session.always_allow:
            return True
        if kind in session.always_reject:
            return False
        other = "permission_other_session" in turn.faults
        params = {
            "sessionId": f"{session.id}-other" if other else session.id,
            "toolCall": {
                "toolCallId": tid,
                "title": title,
                "kind": kind,
                "status": "pending",
                "rawInput": raw_input,
            },
            "options": (
                _REJECT_FIRST if "permission_reject_first" in turn.faults else _PERMISSION_OPTIONS
            ),
        }
        try:
            raw = await self._call("session/request_permission", params)
            answer = msgspec.json.decode(raw, type=w.PermissionResult)
        except w.RpcError as exc:
            log.warning("permission request failed (%s %s): rejecting", exc.code, exc.message)
            return False
        except msgspec.DecodeError as exc:
            log.warning("unreadable permission answer (%s): rejecting", exc)
            return False
        outcome = answer.outcome
        if outcome.outcome == "cancelled":
            turn.interrupt("cancelled", is_cancel=False)
            await checkpoint()
            return False
        option = outcome.option_id
        if option == "allow_always":
            session.always_allow.add(kind)
        elif option == "reject_always":
            session.always_reject.add(kind)
        return outcome.outcome == "selected" and option.startswith("allow")

    async def _run_command(self, session: _Session, turn: _Turn, tid: str) -> str:
        words = turn.directives.text.split()[:5]
        command = ["echo", *words]
        title = "Run `" + " ".join(command) + "`"
        raw_input = {"command": command}
        await self._emit(
            session,
            turn,
            w.ToolCallStart(
                tool_call_id=tid,
                title=title,
                kind="execute",
                status="pending",
                raw_input=raw_input,
            ),
        )
        turn.open_tool = tid
        if not await self._ask(session, turn, tid, title, "execute", raw_input):
            await self._tool_done(session, turn, tid, "failed", "Permission denied")
            return f"Permission denied for {title}."
        await self._emit(session, turn, w.ToolCallUpdate(tool_call_id=tid, status="in_progress"))
        output = " ".join(words)
        await self._tool_done(session, turn, tid, "completed", output)
        return "Ran `" + " ".join(command) + "`."

    async def _write_file(self, session: _Session, turn: _Turn, tid: str, path: str) -> str:
        target = posixpath.join(session.cwd, path)
        content = turn.directives.text + "\n"
        title = f"Write {path}"
        raw_input = {"path": target, "content": content}
        await self._emit(
            session,
            turn,
            w.ToolCallStart(
                tool_call_id=tid,
                title=title,
                kind="edit",
                status="pending",
                raw_input=raw_input,
                locations=[w.Location(path=target)],
            ),
        )
        turn.open_tool = tid
        if session.state.mode_id != "accept_edits" and not await self._ask(
            session, turn, tid, title, "edit", raw_input
        ):
            await self._tool_done(session, turn, tid, "failed", "Permission denied")
            return f"Permission denied for {title}."
        await self._emit(session, turn, w.ToolCallUpdate(tool_call_id=tid, status="in_progress"))
        if not self._client.fs.write_text_file:
            await self._tool_done(
                session, turn, tid, "failed", "The client does not offer fs/write_text_file"
            )
            return f"Could not write {path}: the client cannot write files."
        try:
            await self._call(
                "fs/write_text_file", {"sessionId": session.id, "path": target, "content": content}
            )
        except w.RpcError as exc:
            await self._tool_done(session, turn, tid, "failed", f"{exc.code} {exc.message}")
            return f"Could not write {path}: {exc.message}."
        await self._tool_done(
            session,
            turn,
            tid,
            "completed",
            content=[w.DiffContent(path=target, new_text=content, old_text=None)],
        )
        return f"Wrote {path}."

    async def _read_file(self, session: _Session, turn: _Turn, tid: str, path: str) -> str:
        target = posixpath.join(session.cwd, path)
        await self._tool_start(
            session, turn, tid, f"Read {path}", "read", {"path": target}, [target]
        )
        if not self._client.fs.read_text_file:
            await self._tool_done(
                session, turn, tid, "failed", "The client does not offer fs/read_text_file"
            )
            return f"Could not read {path}: the client cannot read files."
        try:
            raw = await self._call("fs/read_text_file", {"sessionId": session.id, "path": target})
            text = msgspec.json.decode(raw, type=w.ReadTextFileResult).content
        except w.RpcError as exc:
            await self._tool_done(session, turn, tid, "failed", f"{exc.code} {exc.message}")
            return f"Could not read {path}: {exc.message}."
        except msgspec.DecodeError as exc:
            await self._tool_done(session, turn, tid, "failed", str(exc))
            return f"Could not read {path}: unreadable answer."
        lines = len(text.splitlines())
        await self._tool_done(session, turn, tid, "completed", text[:200])
        return f"{path} has {lines} line{'' if lines == 1 else 's'}."

    async def _list_mcp_tools(self, session: _Session, turn: _Turn, tid: str) -> str:
        await self._tool_start(session, turn, tid, "List the MCP tools", "other", {})
        listing = await session.mcp.listing() if session.mcp is not None else "MCP tools: none."
        await self._tool_done(session, turn, tid, "completed", listing)
        return listing

    async def _call_mcp_tool(
        self, session: _Session, turn: _Turn, tid: str, name: str, raw: str
    ) -> str:
        """A tool call of the prompt, streamed as a tool call whose result is the tool's."""
        arguments, bad = decode_arguments(raw)
        await self._tool_start(session, turn, tid, f"Call {name}", "other", arguments or raw)
        if bad:
            await self._tool_done(session, turn, tid, "failed", bad)
            return f"Tool {name} not called: {bad}."
        if session.mcp is None:
            await self._tool_done(session, turn, tid, "failed", "no MCP servers")
            return f"Tool {name} not called: the session has no MCP servers."
        outcome = await session.mcp.call(name, arguments)
        text = clip(outcome.text)
        await self._emit(
            session,
            turn,
            w.ToolCallUpdate(
                tool_call_id=tid,
                status="failed" if outcome.is_error else "completed",
                content=[w.ToolContent(content=w.TextContent(text))],
                raw_output={"server": outcome.server, "isError": outcome.is_error, "text": text},
            ),
        )
        turn.open_tool = None
        if outcome.is_error:
            return f"Tool {name} failed: {text}."
        return f"Tool {name} returned: {text}."
