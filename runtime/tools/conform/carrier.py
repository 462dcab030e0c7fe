"""The carrier seam: what the shared checks need from whatever carries the agent (the stdio
wire or an :class:`~acpfsm.adapters.transport.AgentTransport`), with answers in one shape."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from acpfsm.adapters.errors import (
    AcpfsmError,
)

if TYPE_CHECKING:
    from .wire import _Pending

from .report import (
    _excerpt,
)

# --------------------------------------------------------------------------- carriers


class AgentGone(AcpfsmError):
    """The agent is gone (its stdout ended, or the carrier reported its end)."""


@dataclass(slots=True)
class _Answer:
    """One request's answer, whatever carried it. ``error`` is what the classifier reads
    (an :class:`AgentRequestError` rebuilt from a stdio error object, or the error the
    transport raised); ``text`` quotes it; ``code`` is its JSON-RPC code when one is known;
    ``problem`` says why a result does not fit ACP v1 ("" when it does, or is not seen)."""

    result: Any = None
    error: BaseException | None = None
    text: str = ""
    code: int | None = None
    problem: str = ""
    at: float = 0.0


@dataclass(slots=True)
class _TurnEnd:
    """How a turn ended: its ``stopReason`` (or the error answer), when. ``problem`` is a
    carrier's own verdict (agentctl: a cancel it did not get acknowledged). ``line`` is the
    transcript index of the answer (-1: none)."""

    stop: Any
    answer: _Answer
    at: float
    problem: str = ""
    line: int = -1


@dataclass(slots=True)
class _Cancelled:
    """What the battery saw of a cancelled turn. ``read_by`` (stdio only) is when the agent
    answered a request sent right after session/cancel, if that answer came before the turn's:
    the agent had read the cancel by then (it reads its stdin in order). ``None`` when it
    came after (the turn's answer may have been on its way before the cancel arrived) or the
    carrier cannot tell (agentctl)."""

    sent: float
    end: _TurnEnd
    updates: int = 0
    """The turn's updates between the cancel and its answer."""
    read_by: float | None = None
    updates_after_read: int = 0
    last_line: int = -1
    """The transcript index the evidence ends at (the turn's answer, or a later answer to the
    request sent after the cancel)."""


@dataclass(slots=True, eq=False)
class _Turn:
    session_id: str
    started: float
    pending: _Pending | None = None
    """stdio: the ``session/prompt`` request."""
    generation: int = 0
    """through a transport: the prompt generation."""
    end: _TurnEnd | None = None
    done: anyio.Event = field(default_factory=anyio.Event)


@dataclass(frozen=True, slots=True)
class _Caps:
    load_session: bool | None
    """None: the carrier does not say (agentctl)."""
    media: list[str]
    prompt_queueing: bool
    auth_ids: list[str]
    session_caps: list[str]


@dataclass(frozen=True, slots=True)
class _Option:
    id: str
    category: Any
    type: Any
    current: str
    values: list[str]


@dataclass(frozen=True, slots=True)
class _SessionView:
    session_id: str
    modes: list[str]
    current_mode: str | None
    options: list[_Option]
    models: list[str]
    current_model: str | None


class _Carrier(abc.ABC):
    """How the shared checks reach the agent: the operations they need, with answers in one
    shape whatever carried them, and a transcript for the evidence."""

    name: str
    mode_update: str
    """What announces a mode change on this carrier (quoted in the set_mode detail)."""
    reflection_source: str
    """Where a set_config_option's new value is read back (quoted in the detail)."""
    replay_observable: bool
    """Whether the history session/load replays reaches the client."""
    reflection_in_answer: bool
    """Whether set_config_option's answer itself carries the new state (else it is reported
    later, and its absence within the wait is no verdict)."""
    in_flight_clause: str
    """How the cancel check shows a turn ended before the cancel could act (its n/a detail)."""
    set_model_note: str = ""
    models_label: str = "legacy models"
    """How the session's model list is named in the session_new detail."""

    def __init__(self) -> None:
        self.transcript: list[str] = []
        self.update_lines: set[int] = set()
        """Transcript indices of the agent's session updates (collapsed in the evidence)."""

    def evidence(self, start: int, end: int = -1) -> list[str]:
        """The transcript from ``start`` (to ``end`` included, -1: to the end), each run of
        session updates collapsed into a count, then excerpted."""
        stop = len(self.transcript) if end < 0 else end + 1
        out: list[str] = []
        run = 0
        for index in range(start, stop):
            if index in self.update_lines:
                run += 1
                continue
            if run:
                out.append(f"… {run} session/update(s) …")
                run = 0
            out.append(self.transcript[index])
        if run:
            out.append(f"… {run} session/update(s) …")
        return _excerpt(out)

    @abc.abstractmethod
    def now(self) -> float: ...

    @abc.abstractmethod
    async def gone_text(self, exc: AgentGone) -> str: ...

    @abc.abstractmethod
    async def new_session(self, cwd: str) -> tuple[_Answer, _SessionView | None]: ...

    @abc.abstractmethod
    async def load_session(self, session_id: str, cwd: str) -> tuple[_Answer, list[str]]:
        """The answer and the kinds of the history replayed meanwhile."""

    @abc.abstractmethod
    async def start_turn(self, session_id: str, text: str) -> _Turn: ...

    @abc.abstractmethod
    async def first_activity(self, turn: _Turn) -> bool:
        """Wait for the turn's first update; False when it ended first."""

    @abc.abstractmethod
    async def finish(self, turn: _Turn) -> _TurnEnd: ...

    @abc.abstractmethod
    async def cancel_turn(self, turn: _Turn) -> _Cancelled:
        """Cancel the running turn: when the cancel was sent, how the turn ended, and what
        shows whether the agent had read the cancel before it answered."""

    @abc.abstractmethod
    async def steer(self, turn: _Turn, text: str) -> list[tuple[str, _TurnEnd]] | None:
        """Queue ``text`` into the running ``turn``: every answer owed, in order, labelled;
        None when the turn was over before the agent could take ``text`` in (nothing was
        queued; every prompt sent is answered by then)."""

    @abc.abstractmethod
    def updates(self, turn: _Turn, since: float, until: float) -> list[str]:
        """The kinds of the turn's updates between ``since`` and ``until``."""

    @abc.abstractmethod
    def bad_updates(self, turn: _Turn, since: float, until: float) -> list[str]:
        """Those updates that do not decode, described."""

    @abc.abstractmethod
    async def set_mode(self, session_id: str, mode_id: str) -> tuple[_Answer, bool]:
        """The answer, and whether the mode change was announced."""

    @abc.abstractmethod
    async def set_config_option(
        self, session_id: str, option: _Option, value: str
    ) -> tuple[_Answer, str | None]:
        """The answer, and the option's value as read back afterwards."""

    @abc.abstractmethod
    async def set_model(self, session_id: str, model_id: str) -> _Answer: ...


def _lifecycle_after_load_error(error: BaseException | str, session_id: str) -> tuple[str, str]:
    """``(classification, what the SessionInit chart does next)`` for a session/load error."""
    from acpfsm.adapters.classify import Call, classify_error
    from acpfsm.statecharts import SessionInit

    cls = classify_error(error, call=Call.SESSION_LOAD, loading_session_id=session_id)
    init = SessionInit.start()
    init.fire("init_started")
    init.fire("stream_ready")
    init.fire("initialize_succeeded", native_session_resume=True, prior_session_id=session_id)
    step = init.fire("load_failed", error_class=cls.kind)
    if step.state == "creating":
        what = "the lifecycle falls back to session/new"
    elif step.state == "failed":
        what = "the lifecycle fails the session init and keeps the ACP session id"
    else:  # pragma: no cover - the chart changed
        what = f"the SessionInit chart goes to {step.state}"
    return str(cls.kind), what


def _option_values(option: dict[str, Any]) -> list[str]:
    values: list[str] = []
    for item in option.get("options") or []:
        if isinstance(item, dict) and "value" in item:
            values.append(str(item["value"]))
        elif isinstance(item, dict) and isinstance(item.get("options"), list):  # a group
            values += [
                str(o["value"]) for o in item["options"] if isinstance(o, dict) and "value" in o
            ]
    return values


def _option(raw: dict[str, Any]) -> _Option:
    return _Option(
        id=str(raw.get("id")),
        category=raw.get("category"),
        type=raw.get("type"),
        current=str(raw.get("currentValue")),
        values=_option_values(raw),
    )
