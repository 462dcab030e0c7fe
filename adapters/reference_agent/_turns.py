"""The turns of :class:`~._agent.ReferenceAgent`: each ``session/prompt`` a task of its own,
played from its directives (chunks, thoughts, tools, plan), interrupted by cancel or a
steer, and the scripted faults at its fault point."""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable
from typing import Any

import anyio
import msgspec
from msgspec import UnsetType

from . import _wire as w
from ._base import (
    _block_note,
    _Session,
    _Turn,
    log,
)
from ._faults import Faults
from ._hostile import HOSTILE_FS_FAULTS, ProbeResult, run_probe, undecodable_requests
from ._script import (
    chunk_text,
    parse_directives,
    reply_for,
    thoughts_for,
)
from ._tools import _ToolSide


class _TurnSide(_ToolSide):
    """session/prompt as a scripted, interruptible turn; its faults."""

    # -- prompt turns ---------------------------------------------------------------------

    async def _prompt(self, rid: w.JsonId, params: msgspec.Raw | UnsetType) -> None:
        p = w.decode_params(params, w.PromptParams)
        self._require_auth()
        session = self._session(p.session_id)
        blocks: list[w.Block] = []
        for raw in p.prompt:
            try:
                blocks.append(msgspec.json.decode(raw, type=w.Block))
            except msgspec.DecodeError as exc:
                raise w.RpcError.invalid_params(f"prompt block: {exc}") from None
        text = " ".join(b.text for b in blocks if b.type == "text")
        directives = parse_directives(text)
        for warning in directives.warnings:
            log.warning("prompt %r: %s", rid, warning)
        faults = self._faults.turn_only().merged(Faults(directives.faults))
        delay = self._config.delay if directives.delay is None else directives.delay
        session.turns += 1
        turn = _Turn(rid, session.turns, directives, faults, delay)
        predecessors = list(session.live)
        session.live.append(turn)
        self._prompts[rid] = turn
        if predecessors and "no_queueing" not in self._faults:
            for before in predecessors:
                if before.interrupt("end_turn", is_cancel=False):
                    log.info("turn %s steered by %s", before.request_id, rid)
        self._tg.start_soon(self._run_turn, session, turn, predecessors, p.prompt, blocks)

    async def _run_turn(
        self,
        session: _Session,
        turn: _Turn,
        predecessors: list[_Turn],
        raw_blocks: list[msgspec.Raw],
        blocks: list[w.Block],
    ) -> None:
        error: w.RpcError | None = None
        try:
            with turn.scope:
                for before in predecessors:
                    await before.done.wait()
                self._store.mark_turn(session.id, turn.number)
                for raw in raw_blocks:
                    self._store.append_update(
                        session.id, w.encode_update(w.UserMessageChunk(content=raw))
                    )
                try:
                    await self._play(session, turn, blocks)
                except w.RpcError as exc:
                    error = exc
            if turn.stop == "cancelled" and turn.open_tool is not None:
                await self._update(
                    session,
                    w.ToolCallUpdate(
                        tool_call_id=turn.open_tool,
                        status="failed",
                        raw_output={"reason": "cancelled"},
                    ),
                )
            if error is not None:
                await self._error(turn.request_id, error)
            elif turn.stop == "request_cancelled":
                await self._error(turn.request_id, w.RpcError(-32800, "Request cancelled"))
            else:
                stop = turn.stop or "end_turn"
                log.info("turn %s ends: %s", turn.request_id, stop)
                await self._result(turn.request_id, w.PromptResult(stop_reason=stop))
        finally:
            turn.done.set()
            if turn in session.live:
                session.live.remove(turn)
            if self._prompts.get(turn.request_id) is turn:
                del self._prompts[turn.request_id]

    async def _emit(
        self, session: _Session, turn: _Turn, update: Any, *, persist: bool = True
    ) -> None:
        if turn.delay > 0:
            await anyio.sleep(turn.delay)
        await self._update(session, update, persist=persist)

    async def _play(self, session: _Session, turn: _Turn, blocks: list[w.Block]) -> None:
        d = turn.directives
        state = session.state
        notes = [n for n in (_block_note(b) for b in blocks) if n is not None]
        for thought in thoughts_for(d.text, state.model_id, state.thinking):
            await self._emit(session, turn, w.AgentThoughtChunk(content=w.TextContent(thought)))
        tools_allowed = state.mode_id != "plan"
        steps = ["Read the prompt"]
        if tools_allowed:
            if d.permission:
                steps.append("Run a command")
            steps += [f"Write {path}" for path in d.writes]
            steps += [f"Read {path}" for path in d.reads]
            steps += ["List the MCP tools"] if d.list_tools else []
            steps += [f"Call {name}" for name, _ in d.tool_calls]
        steps.append("Reply")
        done = 0

        async def plan() -> None:
            entries = [
                w.PlanEntry(
                    content=step,
                    priority="high" if i == 0 else "medium",
                    status="completed" if i < done else "in_progress" if i == done else "pending",
                )
                for i, step in enumerate(steps)
            ]
            await self._emit(session, turn, w.PlanUpdate(entries=entries))

        await plan()
        tool_no = 0

        def next_tool_id() -> str:
            nonlocal tool_no
            tool_no += 1
            return f"call_{turn.number}_{tool_no}"

        # 1. always: look at the prompt
        tid = next_tool_id()
        words = len(d.text.split())
        await self._tool_start(
            session,
            turn,
            tid,
            "Read the prompt",
            "read",
            {"words": words, "characters": len(d.text)},
        )
        await self._tool_done(
            session,
            turn,
            tid,
            "completed",
            f"{words} word{'' if words == 1 else 's'}, {len(d.text)} characters",
        )
        done += 1
        await plan()

        if not tools_allowed:
            notes.append("Plan mode: no changes made.")
        else:
            if d.permission:
                notes.append(await self._run_command(session, turn, next_tool_id()))
                done += 1
                await plan()
            for path in d.writes:
                notes.append(await self._write_file(session, turn, next_tool_id(), path))
                done += 1
                await plan()
            for path in d.reads:
                notes.append(await self._read_file(session, turn, next_tool_id(), path))
                done += 1
                await plan()
            if d.list_tools:
                notes.append(await self._list_mcp_tools(session, turn, next_tool_id()))
                done += 1
                await plan()
            for name, raw in d.tool_calls:
                notes.append(await self._call_mcp_tool(session, turn, next_tool_id(), name, raw))
                done += 1
                await plan()

        reply = reply_for(d.text) + "".join(" " + n for n in notes)
        for index, chunk in enumerate(chunk_text(reply)):
            await self._emit(session, turn, w.AgentMessageChunk(content=w.TextContent(chunk)))
            if index == 0:
                await self._fault_point(session, turn)
        done += 1
        await plan()
        if not session.titled:
            session.titled = True
            title = d.text[:60] or "Untitled"
            await self._emit(session, turn, w.SessionInfoUpdate(title=title))

    async def _fault_point(self, session: _Session, turn: _Turn) -> None:
        """Inject this turn's faults (right after its first agent_message_chunk)."""
        faults = turn.faults
        if not faults:
            return
        log.info("turn %s: injecting faults %s", turn.request_id, ", ".join(faults.describe()))
        if "garbage" in faults:
            await self._out.send(b"reference-agent: this line is not JSON {\n")
        if "non_utf8" in faults:
            update = w.encode_update(w.AgentMessageChunk(content=w.TextContent("@@BYTES@@")))
            line = w.encode(
                w.NotificationMessage(
                    method="session/update",
                    params=w.SessionUpdateParams(session_id=session.id, update=update),
                )
            )
            await self._out.send(line.replace(b"@@BYTES@@", b"not UTF-8: \xff\xfe\xc3("))
        for fault in HOSTILE_FS_FAULTS:
            if fault in faults:
                await self._hostile_fs(session, turn, fault)
        if "undecodable_requests" in faults:
            await self._report_probe(
                session, turn, "undecodable_requests", undecodable_requests(self._call, session.id)
            )
        if "oversized" in faults:
            size = int(faults.number("oversized"))
            # A valid session/update line whose length is size + 1 (more than `size`).
            probe = w.AgentMessageChunk(content=w.TextContent(""))
            base = len(
                w.encode(
                    w.NotificationMessage(
                        method="session/update",
                        params=w.SessionUpdateParams(
                            session_id=session.id, update=w.encode_update(probe)
                        ),
                    )
                )
            )
            filler = "x" * max(1, size + 2 - base)
            await self._emit(
                session, turn, w.AgentMessageChunk(content=w.TextContent(filler)), persist=False
            )
        if "flood" in faults:
            count = int(faults.number("flood"))
            for i in range(count):
                await self._update(
                    session,
                    w.AgentThoughtChunk(content=w.TextContent(f"flood {i + 1}/{count}\n")),
                    persist=False,
                )
        if "close_stdout" in faults:
            log.info("closing stdout (fault close_stdout)")
            await self._out.close_output()
        if "close_stdin" in faults:
            log.info("closing stdin (fault close_stdin); the turn hangs")
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, self._stdin_fd)  # the pipe's read end closes: writes get EPIPE
            os.close(devnull)
            turn.hanging = True
            await anyio.sleep_forever()
        if "crash" in faults:
            code = int(faults.number("crash"))
            await self._out.drain()
            log.error("crashing with status %d (fault crash)", code)
            logging.shutdown()
            os._exit(code)
        if "prompt_error" in faults:
            raise w.RpcError.internal("reference agent fault: prompt_error")
        if "hang" in faults:
            turn.hanging = True
            log.info("turn %s hangs (fault hang)", turn.request_id)
            await anyio.sleep_forever()
        if "stall" in faults:
            log.info("turn %s stalls until cancelled or steered (fault stall)", turn.request_id)
            await anyio.sleep_forever()

    async def _hostile_fs(self, session: _Session, turn: _Turn, fault: str) -> None:
        """Run a hostile fs probe; report it as a tool call and a sentence of the reply."""
        probe = run_probe(fault, self._call, session.id, session.cwd, turn.faults.number(fault))
        await self._report_probe(session, turn, fault, probe)

    async def _report_probe(
        self, session: _Session, turn: _Turn, fault: str, probe: Awaitable[ProbeResult]
    ) -> None:
        """Run a probe of the client; report it as a tool call and a sentence of the reply."""
        tid = f"call_{turn.number}_{fault}"
        await self._tool_start(session, turn, tid, f"Probe the client ({fault})", "other", {})
        result = await probe
        log.info("%s", result.sentence())
        await self._emit(
            session,
            turn,
            w.ToolCallUpdate(tool_call_id=tid, status="completed", raw_output=result.as_dict()),
        )
        turn.open_tool = None
        await self._emit(
            session, turn, w.AgentMessageChunk(content=w.TextContent(" " + result.sentence()))
        )
