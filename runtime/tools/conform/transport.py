"""Through an :class:`~acpfsm.adapters.transport.AgentTransport` (agentctl's): the carrier the
shared checks use, reading turns and updates off the transport's events."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.abc
import msgspec

from acpfsm.adapters.errors import (
    AcpfsmError,
    AgentRequestError,
    SteerUnsupported,
    TransportClosed,
)
from acpfsm.adapters.events import (
    AgentCapabilities,
    AgentEvent,
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
    StreamReconnected,
    ToolCall,
    ToolUpdate,
    TurnStarted,
    Unknown,
    encode_event,
    is_turn_content,
)

if TYPE_CHECKING:
    from acpfsm.adapters.transport import AgentTransport, InitializeResult

from .carrier import (
    AgentGone,
    _Answer,
    _Cancelled,
    _Carrier,
    _Option,
    _option_values,
    _SessionView,
    _Turn,
    _TurnEnd,
)
from .report import (
    _IN_FLIGHT,
    _SETTLE,
    _reject_option,
    _short,
)

# --------------------------------------------------------------------------- transport carrier

_T = TypeVar("_T")

#: Events a transport makes itself, or that are about the carrier: never an agent's update.
_NOT_UPDATES = (
    Complete,
    ErrorEvent,
    TurnStarted,
    StreamDisconnected,
    StreamReconnected,
    AgentCapabilities,
    SessionStatus,
)
#: What session/load may replay (agentctl suppresses most of it).
_HISTORY = (MessageChunk, Reasoning, ToolCall, ToolUpdate, Plan, SessionInfo)


def _event_kind(event: AgentEvent) -> str:
    if isinstance(event, Unknown):
        return event.kind or "unknown"
    return str(event.__struct_config__.tag)


def _is_update(event: AgentEvent) -> bool:
    if isinstance(event, _NOT_UPDATES):
        return False
    return not (isinstance(event, Unknown) and event.kind == "mcp_attachment")


def _rpc_code(error: BaseException | None) -> int | None:
    """The JSON-RPC code of the first :class:`AgentRequestError` in the ``__cause__`` chain."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, AgentRequestError):
            return error.code
        error = error.__cause__
    return None


def _error_answer(error: BaseException, at: float) -> _Answer:
    return _Answer(error=error, text=_short(str(error), 300), code=_rpc_code(error), at=at)


def _builtins(value: Any) -> Any:
    try:
        return msgspec.to_builtins(value)
    except (TypeError, msgspec.EncodeError):
        return repr(value)


class _Permissions:
    """Answers the agent's permission requests as the stdio client does: a reject option,
    or ``cancelled`` once a cancel was sent."""

    def __init__(self) -> None:
        self.cancelling = False

    async def answer(self, request: PermissionRequest) -> str | None:
        if self.cancelling:
            return None
        chosen: str | None = _reject_option((o.kind, o.option_id) for o in request.options)
        return chosen


class _TransportCarrier(_Carrier):
    """The shared checks over an :class:`~acpfsm.adapters.transport.AgentTransport`: typed
    requests, the turn's end and updates read from its events. Made for agentctl's transport
    (its texts name agentctl, and a turn's error event is read as agentctl projects it). The
    transcript records each operation, its answer and every event."""

    name = "agentctl"
    mode_update = "session_mode event"
    reflection_source = "agentctl's session_models event"
    reflection_in_answer = False
    replay_observable = False
    in_flight_clause = (
        f"its answer came within {_IN_FLIGHT:g} s (agentctl does not show when the agent read "
        f"the cancel)"
    )
    set_model_note = (
        " (agentctl's set_model, which picks session/set_config_option or session/set_model itself)"
    )
    models_label = "models"  # agentctl's model_state also lists a model config option's values

    def __init__(self, transport: AgentTransport, permissions: _Permissions) -> None:
        super().__init__()
        self.transport = transport
        self.permissions = permissions
        self.events: list[tuple[float, AgentEvent]] = []
        self.gone = anyio.Event()
        self.gone_reason = "the agent's event stream ended"
        self._turns: dict[int, _Turn] = {}
        self._open: list[_Turn] = []
        self._generation = 0
        self._changed = anyio.Event()
        self.started = time.monotonic()

    # -- bookkeeping
    def now(self) -> float:
        return time.monotonic() - self.started

    def _log(self, arrow: str, text: str) -> None:
        self.transcript.append(f"{arrow} {_short(text)}")

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def _until(self, predicate: Callable[[], bool], limit: float = _SETTLE) -> bool:
        """Wait ≤ ``limit`` for ``predicate`` to hold (re-tested on each event)."""
        with anyio.move_on_after(limit):
            while not predicate() and not self.gone.is_set():
                await self._changed.wait()
        return predicate()

    def _since(self, mark: int) -> list[AgentEvent]:
        return [event for _, event in self.events[mark:]]

    async def gone_text(self, exc: AgentGone) -> str:
        return str(exc) or self.gone_reason

    # -- events
    async def pump(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        try:
            async for event in self.transport.events():
                self._on_event(event)
        finally:
            self.gone.set()
            for turn in self._open:
                turn.done.set()
            self._wake()

    def _on_event(self, event: AgentEvent) -> None:
        at = self.now()
        self.events.append((at, event))
        if not (isinstance(event, Unknown) and event.kind == "mcp_attachment"):  # agentctl's own
            self._log("←", encode_event(event).decode(errors="replace"))
            if _is_update(event):
                self.update_lines.add(len(self.transcript) - 1)
        if isinstance(event, Complete | ErrorEvent):
            self._turn_ended(event, at, len(self.transcript) - 1)
        elif isinstance(event, StreamDisconnected) and not event.reconnecting:
            reason = event.error or "the agent's event stream ended"
            if event.exit_code is not None:
                reason += f" (exit code {event.exit_code})"
            self.gone_reason = reason
        self._wake()

    def _turn_ended(self, event: Complete | ErrorEvent, at: float, line: int) -> None:
        generation = event.prompt_generation
        turn = self._turns.get(generation) if generation else None
        if turn is None and not generation and self._open:
            turn = self._open[0]  # the wildcard generation ends the oldest turn
        if turn is None or turn.end is not None:
            return
        if isinstance(event, Complete):
            end = _TurnEnd(stop=event.stop_reason, answer=_Answer(at=at), at=at, line=line)
        else:
            from acpfsm.adapters.agentctl import error_from_text

            # agentctl's projection of the agent's error, rebuilt as the stdio client would
            # have raised it (a closing JSON-RPC error object becomes structured)
            error = error_from_text("agent.prompt", event.error)
            if event.data.get("transport_closed"):
                error = TransportClosed(event.error)
            end = _TurnEnd(stop=None, answer=_error_answer(error, at), at=at, line=line)
        self._close(turn, end)

    def _close(self, turn: _Turn, end: _TurnEnd) -> None:
        if turn.end is None:
            turn.end = end
        if turn in self._open:
            self._open.remove(turn)
        turn.done.set()

    # -- requests
    async def _call(
        self, op: str, params: dict[str, Any], call: Callable[[], Awaitable[_T]]
    ) -> tuple[_T | None, _Answer]:
        self._log("→", f"{op} {json.dumps(params, ensure_ascii=False)}" if params else op)
        try:
            value = await call()
        except TransportClosed as exc:
            self._log("←", f"{op}: {exc}")
            raise AgentGone(str(exc)) from None
        except AcpfsmError as exc:
            self._log("←", f"{op} error: {exc}")
            return None, _error_answer(exc, self.now())
        result = _builtins(value)
        self._log("←", f"{op}: {_short(result)}" if value is not None else f"{op}: ok")
        return value, _Answer(result=result, at=self.now())

    async def initialize(self) -> tuple[InitializeResult | None, _Answer]:
        return await self._call("initialize", {}, self.transport.initialize)

    async def new_session(self, cwd: str) -> tuple[_Answer, _SessionView | None]:
        mark = len(self.events)
        result, answer = await self._call(
            "new_session", {"cwd": cwd}, lambda: self.transport.new_session(cwd)
        )
        if result is None:
            return answer, None
        # agentctl follows session/new with session_mode, session_models, session_status
        await self._until(lambda: any(isinstance(e, SessionStatus) for e in self._since(mark)))
        modes = [m.id for m in result.modes]
        current_mode = result.current_mode_id or None
        announced = [e for e in self._since(mark) if isinstance(e, SessionMode)]
        if not modes and announced:
            modes = [m.id for m in announced[-1].available_modes]
            current_mode = announced[-1].current_mode_id or None
        options = [
            _Option(
                id=o.id,
                category=o.category,
                type=o.type,
                current=o.current_value,
                values=_option_values({"options": o.options}),
            )
            for o in result.config_options
        ]
        view = _SessionView(
            session_id=result.session_id,
            modes=modes,
            current_mode=current_mode,
            options=options,
            models=[m.model_id for m in result.models],
            current_model=result.current_model_id or None,
        )
        return answer, view

    async def load_session(self, session_id: str, cwd: str) -> tuple[_Answer, list[str]]:
        mark = len(self.events)
        result, answer = await self._call(
            "load_session",
            {"session_id": session_id},
            lambda: self.transport.load_session(session_id, cwd),
        )
        if result is None:
            return answer, []
        await self._until(lambda: any(isinstance(e, SessionStatus) for e in self._since(mark)))
        return answer, [_event_kind(e) for e in self._since(mark) if isinstance(e, _HISTORY)]

    async def start_turn(self, session_id: str, text: str) -> _Turn:
        self._generation += 1
        generation = self._generation
        turn = _Turn(session_id=session_id, started=self.now(), generation=generation)
        self._turns[generation] = turn
        self._open.append(turn)
        _, answer = await self._call(
            "prompt",
            {"text": _short(text, 80), "prompt_generation": generation},
            lambda: self.transport.prompt(text, (), generation),
        )
        if answer.error is not None:  # not even accepted: the turn is over
            self._close(turn, _TurnEnd(stop=None, answer=answer, at=answer.at))
        return turn

    def _turn_events(self, turn: _Turn, since: float, until: float) -> list[AgentEvent]:
        return [
            event
            for at, event in self.events
            if since <= at <= until
            and event.prompt_generation in (0, turn.generation)
            and _is_update(event)
        ]

    async def first_activity(self, turn: _Turn) -> bool:
        seen = 0
        while turn.end is None and not self.gone.is_set():
            fresh, seen = self._since(seen), len(self.events)
            if any(is_turn_content(e) and e.prompt_generation == turn.generation for e in fresh):
                return True
            await self._changed.wait()
        return False

    async def finish(self, turn: _Turn) -> _TurnEnd:
        await turn.done.wait()
        end = turn.end
        if end is None:
            raise AgentGone(self.gone_reason)
        if isinstance(end.answer.error, TransportClosed):
            raise AgentGone(end.answer.text)
        return end

    async def cancel_turn(self, turn: _Turn) -> _Cancelled:
        self.permissions.cancelling = True
        try:
            sent = self.now()
            result, answer = await self._call("cancel", {}, self.transport.cancel)
            if answer.error is not None:
                end = _TurnEnd(stop=None, answer=answer, at=answer.at)
            elif result is not None and not result.acknowledged:
                end = _TurnEnd(
                    stop=None,
                    answer=answer,
                    at=answer.at,
                    problem="agentctl answered the cancel not_acknowledged: the turn did not "
                    "end within agentctl's 3 s join after session/cancel, so agentctl "
                    "abandoned it (no stopReason)",
                )
                self._close(turn, end)
            else:
                end = await self.finish(turn)
        finally:
            self.permissions.cancelling = False
        updates = len(self.updates(turn, sent, end.at))
        return _Cancelled(sent=sent, end=end, updates=updates, last_line=end.line)

    async def steer(self, turn: _Turn, text: str) -> list[tuple[str, _TurnEnd]] | None:
        _, answer = await self._call(
            "steer",
            {"text": _short(text, 80), "prompt_generation": turn.generation},
            lambda: self.transport.steer(text, (), turn.generation),
        )
        if isinstance(answer.error, SteerUnsupported):
            return None  # the turn was over before the steer: nothing sent
        if answer.error is not None:
            return [("steered", _TurnEnd(stop=None, answer=answer, at=answer.at))]
        return [("steered", await self.finish(turn))]

    def updates(self, turn: _Turn, since: float, until: float) -> list[str]:
        return [_event_kind(e) for e in self._turn_events(turn, since, until)]

    def bad_updates(self, turn: _Turn, since: float, until: float) -> list[str]:
        return [
            e.error
            for e in self._turn_events(turn, since, until)
            if isinstance(e, ProtocolErrorEvent)
        ]

    async def set_mode(self, session_id: str, mode_id: str) -> tuple[_Answer, bool]:
        mark = len(self.events)
        _, answer = await self._call(
            "set_mode", {"mode_id": mode_id}, lambda: self.transport.set_mode(mode_id)
        )
        if answer.error is not None:
            return answer, False
        told = await self._until(
            lambda: any(
                isinstance(e, SessionMode) and e.current_mode_id == mode_id
                for e in self._since(mark)
            )
        )
        return answer, told

    async def set_config_option(
        self, session_id: str, option: _Option, value: str
    ) -> tuple[_Answer, str | None]:
        mark = len(self.events)
        _, answer = await self._call(
            "set_config_option",
            {"config_id": option.id, "value": value},
            lambda: self.transport.set_config_option(option.id, value),
        )
        if answer.error is not None:
            return answer, None

        def reported() -> str | None:
            found: str | None = None
            for event in self._since(mark):
                if isinstance(event, SessionModels):
                    for o in event.config_options:
                        if o.id == option.id:
                            found = o.current_value
            return found

        await self._until(lambda: reported() == value)
        return answer, reported()

    async def set_model(self, session_id: str, model_id: str) -> _Answer:
        _, answer = await self._call(
            "set_model", {"model_id": model_id}, lambda: self.transport.set_model(model_id)
        )
        return answer
