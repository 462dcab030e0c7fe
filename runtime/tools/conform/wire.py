"""Over stdio: a recording JSON-RPC client on the agent's pipes (:class:`_Wire`) and the carrier
the shared checks use on it (:class:`_WireCarrier`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, get_args

import anyio
import anyio.abc
import msgspec

from acpfsm.adapters.acp import messages as acp
from acpfsm.adapters.acp.jsonrpc import method_not_found
from acpfsm.adapters.acp.process import AgentProcess
from acpfsm.adapters.errors import (
    UNDECODABLE_JSON,
    AgentRequestError,
)

from .carrier import (
    AgentGone,
    _Answer,
    _Cancelled,
    _Carrier,
    _Option,
    _option,
    _SessionView,
    _Turn,
    _TurnEnd,
)
from .judge import DELIBERATE, Recorded
from .report import (
    _IN_FLIGHT,
    _MAX_LINE,
    UNKNOWN_METHOD,
    _reject_option,
    _short,
)
from .schema import Direction

# --------------------------------------------------------------------------- the stdio wire


@dataclass(slots=True)
class _Reply:
    result: Any = None
    error: dict[str, Any] | None = None
    raw: bytes = b""
    at: float = 0.0
    line: int = -1
    """Its transcript index: the order lines crossed the pipe."""

    @property
    def code(self) -> int | None:
        if self.error is None:
            return None
        code = self.error.get("code")
        return code if isinstance(code, int) else None

    def describe_error(self) -> str:
        return _short(self.error, 240)


@dataclass(slots=True)
class _Note:
    at: float
    method: str
    params: Any
    raw: bytes
    line: int = -1


@dataclass(slots=True)
class _Pending:
    method: str
    done: anyio.Event = field(default_factory=anyio.Event)
    reply: _Reply | None = None


class _Wire:
    """A recording JSON-RPC client over the agent's stdin/stdout."""

    def __init__(self, process: AgentProcess) -> None:
        self.process = process
        self.transcript: list[str] = []
        self.update_lines: set[int] = set()
        self.notes: list[_Note] = []
        self.garbage: list[bytes] = []
        self.orphans: list[bytes] = []
        """Responses with an id we never sent (e.g. ``id: null`` errors)."""
        self.messages: list[Recorded] = []
        """Every JSON message that crossed the pipe, both ways, for the schema check."""
        self.gone = anyio.Event()
        self.cancelling = False
        self._pending: dict[int, _Pending] = {}
        self._next_id = 0
        self._lock = anyio.Lock()
        self._tg: anyio.abc.TaskGroup | None = None
        self._changed = anyio.Event()
        self.started = time.monotonic()

    # -- bookkeeping
    def _now(self) -> float:
        return time.monotonic() - self.started

    def _log(self, arrow: str, raw: bytes) -> None:
        self.transcript.append(f"{arrow} {_short(raw.decode(errors='replace').strip())}")

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def changed(self) -> None:
        """Wait for the next message (or the end of stdout)."""
        await self._changed.wait()

    # -- reading
    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            buffer = b""
            try:
                while True:
                    try:
                        chunk = await self.process.stdout.receive(65536)
                    except (
                        anyio.EndOfStream,
                        anyio.ClosedResourceError,
                        anyio.BrokenResourceError,
                    ):
                        break
                    except OSError:
                        break
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        self._line(line)
                    if len(buffer) > _MAX_LINE:
                        self._log("←", buffer[:200] + b"...")
                        self.garbage.append(buffer[:200])
                        buffer = b""
                if buffer.strip():
                    self._line(buffer)
            finally:
                self.gone.set()
                for pending in self._pending.values():
                    pending.done.set()
                self._wake()

    def _line(self, line: bytes) -> None:
        if not line.strip():
            return
        self._log("←", line)
        try:
            message = msgspec.json.decode(line)
        except UNDECODABLE_JSON:
            self.garbage.append(line)
            self._wake()
            return
        index = len(self.transcript) - 1
        answered = None
        if isinstance(message, dict) and "method" not in message and "id" in message:
            known = self._pending.get(message["id"]) if isinstance(message["id"], int) else None
            answered = known.method if known is not None else None
        self.messages.append(Recorded(Direction.AGENT_TO_CLIENT, message, answered, index))
        if not isinstance(message, dict):
            self.garbage.append(line)
        elif isinstance(message.get("method"), str):
            method = message["method"]
            if "id" in message:
                assert self._tg is not None
                self._tg.start_soon(self._answer, message["id"], method, message.get("params"))
            else:
                index = len(self.transcript) - 1
                if method == "session/update":
                    self.update_lines.add(index)
                self.notes.append(_Note(self._now(), method, message.get("params"), line, index))
        elif "id" in message:
            pending = self._pending.get(message["id"]) if isinstance(message["id"], int) else None
            if pending is None:
                self.orphans.append(line)
            else:
                error = message.get("error")
                pending.reply = _Reply(
                    result=message.get("result"),
                    error=error if isinstance(error, dict) else None,
                    raw=line,
                    at=self._now(),
                    line=len(self.transcript) - 1,
                )
                if "error" in message and not isinstance(error, dict):
                    pending.reply.error = {"code": None, "message": repr(error)}
                pending.done.set()
        else:
            self.orphans.append(line)
        self._wake()

    async def _answer(self, request_id: Any, method: str, params: Any) -> None:
        try:
            await self._answer_request(request_id, method, params)
        except AgentGone:
            pass  # the agent went away meanwhile: the waiting check reports it

    async def _answer_request(self, request_id: Any, method: str, params: Any) -> None:
        if method == "session/request_permission":
            options = params.get("options", []) if isinstance(params, dict) else []
            chosen = None
            if not self.cancelling:
                chosen = _reject_option(
                    (o.get("kind", ""), o.get("optionId")) for o in options if isinstance(o, dict)
                )
            outcome: dict[str, Any] = (
                {"outcome": "selected", "optionId": chosen}
                if chosen is not None
                else {"outcome": "cancelled"}
            )
            result = {"outcome": outcome}
            await self._send({"jsonrpc": "2.0", "id": request_id, "result": result}, method)
        else:
            reply = method_not_found(method)
            error = {"code": reply.code, "message": reply.message, "data": reply.data}
            await self._send({"jsonrpc": "2.0", "id": request_id, "error": error}, method)

    # -- writing
    async def _send(
        self, message: Any, answered: str | None = None, *, deliberate: bool = False
    ) -> None:
        """Write ``message`` (``answered``: the method of the agent's request it answers),
        recorded for the schema check; a message the battery sends on purpose outside ACP
        (:data:`DELIBERATE`) is recorded as such."""
        method = message.get("method")
        self.messages.append(
            Recorded(
                Direction.CLIENT_TO_AGENT,
                message,
                answered,
                len(self.transcript),
                deliberate=deliberate or method in DELIBERATE,
            )
        )
        await self.send_raw(msgspec.json.encode(message) + b"\n")

    async def send_raw(self, data: bytes) -> None:
        if self.gone.is_set():
            raise AgentGone(self.exit_text())
        self._log("→", data)
        async with self._lock:
            try:
                await self.process.stdin.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                raise AgentGone(self.exit_text()) from None

    async def start_request(
        self, method: str, params: Any, *, deliberate: bool = False
    ) -> _Pending:
        """Send a request (``deliberate``: outside ACP on purpose, not judged by the schema
        check)."""
        self._next_id += 1
        pending = _Pending(method)
        self._pending[self._next_id] = pending
        message = {"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params}
        await self._send(message, deliberate=deliberate)
        return pending

    async def wait(self, pending: _Pending) -> _Reply:
        await pending.done.wait()
        if pending.reply is None:
            raise AgentGone(self.exit_text())
        return pending.reply

    async def request(self, method: str, params: Any, *, deliberate: bool = False) -> _Reply:
        return await self.wait(await self.start_request(method, params, deliberate=deliberate))

    async def notify(self, method: str, params: Any) -> None:
        await self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def close_stdin(self) -> None:
        self.transcript.append("→ (stdin closed)")
        async with self._lock:
            try:
                await self.process.stdin.aclose()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass

    async def gone_text(self) -> str:
        """:meth:`exit_text` once the exit code and last stderr had a moment to arrive."""
        with anyio.CancelScope(shield=True):
            await self.process.wait_exit_details(1.0)
        return self.exit_text()

    def exit_text(self) -> str:
        tail = self.process.stderr.tail(5).strip()
        text = f"the agent's stdout ended ({self.process.describe_exit()})"
        return f"{text}; stderr: {_short(tail, 300)}" if tail else text

    def updates(self, session_id: str, since: float, until: float | None = None) -> list[_Note]:
        return [
            n
            for n in self.notes
            if n.method == "session/update"
            and n.at >= since
            and (until is None or n.at <= until)
            and isinstance(n.params, dict)
            and n.params.get("sessionId") == session_id
        ]


# --------------------------------------------------------------------------- shapes


def _decode(method: str, value: Any) -> str:
    """ "" when ``value`` decodes as the result of ``method``, else the decoder's complaint."""
    try:
        acp.decode_result(method, msgspec.json.encode(value))
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return str(exc)
    return ""


def _update_kind(note: _Note) -> str:
    update = note.params.get("update") if isinstance(note.params, dict) else None
    kind = update.get("sessionUpdate") if isinstance(update, dict) else None
    return str(kind) if kind is not None else "?"


def _bad_updates(notes: list[_Note]) -> list[str]:
    """Updates of a kind acpfsm models that do not fit its shape."""
    out: list[str] = []
    for note in notes:
        try:
            envelope = acp.decode_message(note.raw)
            decoded = acp.decode_agent_params("session/update", envelope.params or None)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            out.append(f"{_short(note.raw.decode(errors='replace'), 200)}: {exc}")
            continue
        update = decoded.update
        if isinstance(update, acp.UnknownUpdate) and update.kind in _KNOWN_UPDATE_KINDS:
            out.append(f"{_short(note.raw.decode(errors='replace'), 200)}: {update.error}")
    return out


#: The ``sessionUpdate`` kinds acpfsm models (the tags of :data:`acp.SessionUpdate`).
_KNOWN_UPDATE_KINDS = frozenset(
    str(cls.__struct_config__.tag) for cls in get_args(acp.SessionUpdate)
)


# --------------------------------------------------------------------------- stdio carrier


def _wire_answer(reply: _Reply, method: str) -> _Answer:
    error: AgentRequestError | None = None
    if reply.error is not None:
        code = reply.code if reply.code is not None else 0
        error = AgentRequestError(
            code, str(reply.error.get("message", "")), reply.error.get("data"), method=method
        )
    return _Answer(
        result=reply.result,
        error=error,
        text=reply.describe_error() if error is not None else "",
        code=reply.code,
        at=reply.at,
    )


class _WireCarrier(_Carrier):
    """The shared checks over the recording stdio client: raw ACP requests, results checked
    against the v1 shapes, updates read from the notifications."""

    name = "stdio"
    mode_update = "current_mode_update"
    reflection_source = "the answer"
    reflection_in_answer = True
    replay_observable = True
    in_flight_clause = "its answer came before the agent answered a request sent after the cancel"

    def __init__(self, wire: _Wire) -> None:
        super().__init__()
        self.wire = wire
        self.transcript = wire.transcript
        self.update_lines = wire.update_lines

    def now(self) -> float:
        return self.wire._now()

    async def gone_text(self, exc: AgentGone) -> str:
        return await self.wire.gone_text()

    async def new_session(self, cwd: str) -> tuple[_Answer, _SessionView | None]:
        reply = await self.wire.request("session/new", {"cwd": cwd, "mcpServers": []})
        answer = _wire_answer(reply, "session/new")
        if answer.error is not None:
            return answer, None
        result = reply.result
        answer.problem = _decode("session/new", result)
        session_id = result.get("sessionId") if isinstance(result, dict) else None
        if answer.problem or not isinstance(session_id, str) or not session_id:
            return answer, None
        assert isinstance(result, dict)
        modes = result.get("modes") or {}
        available = modes.get("availableModes") if isinstance(modes, dict) else None
        models = result.get("models") or {}
        legacy = models.get("availableModels") if isinstance(models, dict) else None
        current_mode = modes.get("currentModeId") if isinstance(modes, dict) else None
        current_model = models.get("currentModelId") if isinstance(models, dict) else None
        view = _SessionView(
            session_id=session_id,
            modes=[str(m.get("id")) for m in available or [] if isinstance(m, dict)],
            current_mode=None if current_mode is None else str(current_mode),
            options=[_option(o) for o in result.get("configOptions") or [] if isinstance(o, dict)],
            models=[str(m.get("modelId")) for m in legacy or [] if isinstance(m, dict)],
            current_model=None if current_model is None else str(current_model),
        )
        return answer, view

    async def load_session(self, session_id: str, cwd: str) -> tuple[_Answer, list[str]]:
        wire = self.wire
        started = wire._now()
        reply = await wire.request(
            "session/load", {"sessionId": session_id, "cwd": cwd, "mcpServers": []}
        )
        answer = _wire_answer(reply, "session/load")
        if answer.error is None:
            answer.problem = _decode("session/load", reply.result)
        replayed = wire.updates(session_id, started, reply.at)
        return answer, [_update_kind(n) for n in replayed]

    async def start_turn(self, session_id: str, text: str) -> _Turn:
        started = self.wire._now()
        pending = await self.wire.start_request(
            "session/prompt",
            {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]},
        )
        return _Turn(session_id=session_id, started=started, pending=pending)

    async def first_activity(self, turn: _Turn) -> bool:
        wire = self.wire
        assert turn.pending is not None
        while not turn.pending.done.is_set():
            if wire.updates(turn.session_id, turn.started):
                return True
            await wire.changed()
        return False

    async def finish(self, turn: _Turn) -> _TurnEnd:
        assert turn.pending is not None
        reply = await self.wire.wait(turn.pending)
        stop = reply.result.get("stopReason") if isinstance(reply.result, dict) else None
        answer = _wire_answer(reply, "session/prompt")
        return _TurnEnd(stop=stop, answer=answer, at=reply.at, line=reply.line)

    async def _probe(self) -> _Pending:
        """A request every agent answers at once (an unknown method, -32601): its answer
        shows the agent has read everything sent before it (stdin is read in order)."""
        return await self.wire.start_request(UNKNOWN_METHOD, {})

    async def cancel_turn(self, turn: _Turn) -> _Cancelled:
        wire = self.wire
        wire.cancelling = True
        try:
            sent = wire._now()
            await wire.notify("session/cancel", {"sessionId": turn.session_id})
            probe = await self._probe()
            end = await self.finish(turn)
        finally:
            wire.cancelling = False
        with anyio.move_on_after(_IN_FLIGHT):  # for the evidence: which answer came first
            await probe.done.wait()
        seen = _Cancelled(sent=sent, end=end, updates=len(self.updates(turn, sent, end.at)))
        heard = probe.reply
        seen.last_line = max(end.line, heard.line if heard is not None else -1)
        if heard is not None and heard.line < end.line:
            seen.read_by = heard.at
            seen.updates_after_read = sum(
                heard.line < n.line < end.line for n in wire.updates(turn.session_id, sent)
            )
        return seen

    async def steer(self, turn: _Turn, text: str) -> list[tuple[str, _TurnEnd]] | None:
        probe = await self._probe()
        second = await self.start_turn(turn.session_id, text)
        first_end = await self.finish(turn)
        second_end = await self.finish(second)
        heard = probe.reply
        if heard is not None and heard.line > first_end.line:
            # the first turn answered before the agent read the probe, hence before it read
            # the second prompt sent after it: that prompt was never queued
            return None
        return [("first", first_end), ("second", second_end)]

    def updates(self, turn: _Turn, since: float, until: float) -> list[str]:
        return [_update_kind(n) for n in self.wire.updates(turn.session_id, since, until)]

    def bad_updates(self, turn: _Turn, since: float, until: float) -> list[str]:
        return _bad_updates(self.wire.updates(turn.session_id, since, until))

    async def set_mode(self, session_id: str, mode_id: str) -> tuple[_Answer, bool]:
        wire = self.wire
        started = wire._now()
        reply = await wire.request("session/set_mode", {"sessionId": session_id, "modeId": mode_id})
        told = any(
            _update_kind(n) == "current_mode_update" for n in wire.updates(session_id, started)
        )
        return _wire_answer(reply, "session/set_mode"), told

    async def set_config_option(
        self, session_id: str, option: _Option, value: str
    ) -> tuple[_Answer, str | None]:
        method = "session/set_config_option"
        reply = await self.wire.request(
            method, {"sessionId": session_id, "configId": option.id, "value": value}
        )
        answer = _wire_answer(reply, method)
        if answer.error is not None:
            return answer, None
        answer.problem = _decode(method, reply.result)
        if answer.problem:
            return answer, None
        after = reply.result.get("configOptions") if isinstance(reply.result, dict) else None
        now = next(
            (
                o.current
                for o in (_option(raw) for raw in after or [] if isinstance(raw, dict))
                if o.id == option.id and o.category == option.category and o.type == "select"
            ),
            None,
        )
        return answer, now

    async def set_model(self, session_id: str, model_id: str) -> _Answer:
        reply = await self.wire.request(
            "session/set_model", {"sessionId": session_id, "modelId": model_id}
        )
        return _wire_answer(reply, "session/set_model")
