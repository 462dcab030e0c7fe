"""``acpfsm conform``: a conformance battery for any ACP agent, over stdio or through agentctl.

Theory of operation
-------------------
**Over stdio** (``acpfsm conform -- AGENT_COMMAND [ARGS…]``) the battery spawns the agent
(its own process group, in a fresh temporary working directory that is also the session
``cwd``) and speaks newline-delimited JSON-RPC to it through a small recording client of its
own, so that every check can quote the exact lines exchanged as evidence and can send what a
well-behaved client never would (an unknown method, a line that is not JSON). Shapes are
validated with the same msgspec structs acpfsm's ACP client uses
(:mod:`acpfsm.adapters.acp.messages`).

**Through agentctl** (``acpfsm conform --agentctl URL (--nonce N | --token T) -- AGENT…``)
the battery creates an agentctl instance running the agent (as
:class:`~acpfsm.adapters.agentctl.executor.AgentctlExecutor` does for the runtime: create,
health, configure, start, the agent WebSocket), drives it through the
:class:`~acpfsm.adapters.transport.AgentTransport` seam, and deletes the instance at the end,
whatever happened. The evidence is then the operations and the events agentctl reported.

**One set of checks.** Every check that means the same on both carriers is written once
(:class:`_Suite`) against a small carrier interface (:class:`_Carrier`): the recording stdio
client (:class:`_WireCarrier`) or any ``AgentTransport`` (:class:`_TransportCarrier`, used
with agentctl's). session/load errors are classified by :mod:`acpfsm.adapters.classify` and
the consequence is read off the SessionInit chart, as the runtime would decide it, so an
agent's answer leads to the same lifecycle decision whichever carrier brought it. The checks
that need the raw pipe exist only over stdio; through agentctl they are reported n/a "not
observable through agentctl".

Each check ends ``pass``, ``fail`` (with evidence) or ``n/a`` (not applicable, with the
reason, e.g. the agent needs credentials to open a session, or does not advertise the
capability). Every check is bounded by ``--timeout`` seconds; an agent that does not answer
in time fails that check ("timed out") and the battery goes on. The client advertises no
``fs``/``terminal`` capability and answers such requests ``-32601``; a permission request
is answered with a reject option (``cancelled`` once a cancel was sent). The agent's
environment follows the runtime's rule (:func:`conform_env_names`): over stdio ``PATH``,
``HOME``, ``LANG`` and every variable a built-in agent profile passes through (credentials,
provider settings, proxies), copied from ours; through agentctl, agentctl's environment plus
those variables. ``--inherit-env`` gives the agent our whole environment. To run offline
pass a throw-away ``HOME`` and an unreachable proxy. ``--agentctl auto`` starts an agentctl
on this machine for the run (:mod:`acpfsm.tools.agentctl`); a run given agentctl's
one-shot nonce saves the token it got to a private file (``--token-file``) for the next run and
says where, on stderr; the token itself never reaches the terminal or a report.

The checks, in order (over stdio: one agent process, then a second one for version
negotiation; "agentctl" says what the check observes there):

==================  ===========================================================================
id                  what passes
==================  ===========================================================================
initialize          ``initialize`` v1 is answered ``protocolVersion: 1`` in the v1 shape
                    (agentctl: its own ACP handshake with the agent succeeded)
capabilities        the advertised capabilities decode (listed in the detail; agentctl does not
                    report ``loadSession`` nor the session capabilities)
session_new         session/new answers a ``sessionId`` (n/a: authentication required)
unknown_method      an unknown method is answered ``-32601`` (stdio only)
load_unknown        session/load of an unknown id is an error; its classification and the
                    lifecycle's decision (fall back to session/new, or fail keeping the id)
prompt_turn         a prompt turn ends with a valid ``stopReason``; every update decodes
load_known          session/load of the session just used answers and replays its history
                    (agentctl does not forward the replay: the answer alone is checked)
cancel              session/cancel during a turn ends it with ``stopReason: cancelled``;
                    another stopReason fails when the agent demonstrably had the cancel (see
                    "Races" below); a turn whose answer was already on its way is n/a
steer               with ``promptQueueing`` advertised, a second prompt during a turn is
                    accepted and both are answered, the first first (agentctl: a steer into the
                    running turn is accepted and the turn then ends once); n/a otherwise, or
                    when every turn ended before the agent took the second prompt in
set_mode            session/set_mode to another advertised mode
config_mode         session/set_config_option on the ``mode`` category option
config_model        session/set_config_option on the ``model`` category option
legacy_set_model    session/set_model to another advertised legacy model (n/a when none;
                    agentctl's set_model picks set_config_option or set_model itself)
malformed_input     a non-JSON line and a non-JSON-RPC object do not kill the agent (stdio only)
stdout_clean        nothing but JSON was written on stdout (stdio only)
stdin_close         the agent exits when its stdin is closed (stdio only)
version_negotiation a fresh agent asked for protocol 999 answers a version it supports, not
                    999 (no such version exists) nor a later one (stdio only: agentctl always
                    asks for 1)
==================  ===========================================================================

Races
-----
The cancel and steer checks race the agent: they start a turn with a prompt that asks for a
long answer (``--long-prompt``), wait for its first update, then send session/cancel or the
second prompt. An agent whose turns are instant can answer before that arrives; no verdict
comes from a race the battery lost. Over stdio the battery sends, right after the cancel (or
right before the second prompt), a request every agent answers at once (an unknown method):
the agent reads its stdin in order, so when that answer comes before the turn's, the agent had
read the cancel before it ended the turn, and a stopReason other than ``cancelled`` fails;
when the turn's answer comes first, it may have been on its way before the cancel arrived.
A turn that goes on more than 0.5 s after the cancel fails too (the only evidence through
agentctl). Otherwise the turn ended before the cancel could act: the battery tries another
turn, and after three the check is n/a with the evidence. Likewise a steer whose first turn
answered before the agent read the request sent ahead of the second prompt queued nothing.
Through agentctl, a config option's new value that agentctl does not report within 1 s is
not observed (n/a), not a failure.
"""

from __future__ import annotations

import abc
import argparse
import enum
import functools
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, get_args

import anyio
import anyio.abc
import msgspec

from acpfsm.adapters.acp import messages as acp
from acpfsm.adapters.acp.jsonrpc import method_not_found
from acpfsm.adapters.acp.process import AgentProcess, ShutdownPolicy, open_agent_process
from acpfsm.adapters.errors import (
    UNDECODABLE_JSON,
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
    from acpfsm.adapters.agentctl import AgentctlConfig
    from acpfsm.adapters.transport import AgentTransport, InitializeResult

__all__ = [
    "AGENTCTL_NOT_OBSERVABLE",
    "CHECKS",
    "DEFAULT_LONG_PROMPT",
    "DEFAULT_PROMPT",
    "DESCRIPTION",
    "NONEXISTENT_VERSION",
    "NOT_OBSERVABLE_THROUGH_AGENTCTL",
    "CheckResult",
    "ConformReport",
    "ConformUsageError",
    "Status",
    "add_arguments",
    "main",
    "render_junit",
    "render_markdown",
    "render_table",
    "run",
    "run_agentctl_battery",
    "run_battery",
]

DESCRIPTION = (
    "Run the ACP conformance battery against an agent started as AGENT_COMMAND [ARGS...] "
    "(put it after --), over stdio or, with --agentctl URL, in an instance of kandev's "
    "agentctl. Each check passes, fails (with evidence) or is not applicable. "
    "Exit 0 when nothing failed, 1 otherwise, 2 on a usage error."
)

DEFAULT_TIMEOUT = 30.0
AGENTCTL_AUTO = "auto"
"""``--agentctl auto``: start an agentctl on this machine for the run."""
DEFAULT_PROMPT = "acpfsm conformance check: please answer with one short sentence."
DEFAULT_LONG_PROMPT = (
    "acpfsm conformance check: this turn will be cancelled by the client, so please hang on "
    "and take your time. Write a detailed, numbered list of one hundred distinct facts about "
    "finite state machines, statecharts and their use in software engineering, with one full "
    "sentence for each fact, and do not stop early or summarize."
)
UNKNOWN_METHOD = "acpfsm/no_such_method"
STOP_REASONS = frozenset({"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"})
_EVIDENCE_LINES = 14
_EVIDENCE_CHARS = 400
_MAX_LINE = 64 * 1024 * 1024
_SETTLE = 1.0
"""Through agentctl: how long to wait for the events that follow an answer (agentctl's
``session_mode``/``session_models`` convergence, ``session_status``)."""
_IN_FLIGHT = 0.5
"""What reaches the battery within this long after it sent session/cancel may have been on its
way before the agent could read the cancel (a line crosses a pipe or a loopback WebSocket in
milliseconds; the margin absorbs a loaded machine). A turn answered later went on after it."""
_TRIES = 3
"""How many turns the cancel and steer checks start before they give up on winning the race."""
NONEXISTENT_VERSION = 999
"""The protocolVersion the negotiation check asks for: no ACP release is anywhere near it, so
an agent that answers it claims a version that does not exist."""

#: Every check, in report order: ``(id, title)``.
CHECKS: tuple[tuple[str, str], ...] = (
    ("initialize", "initialize (protocol v1)"),
    ("capabilities", "advertised capabilities"),
    ("session_new", "session/new"),
    ("unknown_method", "unknown method → -32601"),
    ("load_unknown", "session/load of an unknown session"),
    ("prompt_turn", "prompt turn and stopReason"),
    ("load_known", "session/load of a known session"),
    ("cancel", "session/cancel → stopReason cancelled"),
    ("steer", "prompt queueing for steer"),
    ("set_mode", "mode selection (session/set_mode)"),
    ("config_mode", "mode selection (config option)"),
    ("config_model", "model selection (config option)"),
    ("legacy_set_model", "legacy session/set_model"),
    ("malformed_input", "malformed input survived"),
    ("stdout_clean", "only JSON-RPC on stdout"),
    ("stdin_close", "exit on stdin close"),
    ("version_negotiation", "protocol version negotiation"),
)
_TITLES = dict(CHECKS)

NOT_OBSERVABLE_THROUGH_AGENTCTL = "not observable through agentctl"
#: The stdio-only checks and why agentctl hides what they look at (the n/a detail).
AGENTCTL_NOT_OBSERVABLE: dict[str, str] = {
    "unknown_method": "agentctl sends the agent only the ACP methods it knows, and answers an "
    "unknown action (UNKNOWN_ACTION) itself",
    "malformed_input": "only agentctl writes to the agent's stdin",
    "stdout_clean": "agentctl reads the agent's stdout and forwards decoded events only",
    "stdin_close": "agentctl owns the agent's stdin and stops the agent itself",
    "version_negotiation": "agentctl always asks for protocolVersion 1",
}


class ConformUsageError(AcpfsmError):
    """The battery cannot run with these arguments (the CLI exits 2)."""


class Status(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    NA = "n/a"


class CheckResult(msgspec.Struct, kw_only=True):
    id: str
    title: str
    status: Status
    detail: str
    evidence: list[str] = []
    seconds: float = 0.0


class ConformReport(msgspec.Struct, kw_only=True):
    command: list[str]
    agent: str = ""
    """``name version`` from ``agentInfo`` ("" when initialize failed)."""
    agentctl: str = ""
    """The agentctl control URL the battery ran through ("" over stdio)."""
    agentctl_token: str = ""
    """The bearer token the battery got for agentctl's bootstrap nonce (the nonce is one-shot:
    run again with this token); "" when it was given a token or ran over stdio. A secret: it
    is shown on the terminal (stderr), never written into the JSON or JUnit report."""
    checks: list[CheckResult] = []
    seconds: float = 0.0
    unmodelled: dict[str, Any] = {}
    """The fields of the agent's initialize answer acpfsm does not model, as sent, nested
    where they were (:func:`acpfsm.adapters.acp.messages.unmodelled`; empty through agentctl,
    which does not forward the answer)."""

    @property
    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status is Status.FAIL]

    @property
    def ok(self) -> bool:
        return not self.failed

    def counts(self) -> dict[str, int]:
        return {s.value: sum(c.status is s for c in self.checks) for s in Status}


@dataclass(frozen=True, slots=True)
class _Verdict:
    status: Status
    detail: str
    evidence: list[str] | None = None


def _pass(detail: str) -> _Verdict:
    return _Verdict(Status.PASS, detail)


def _fail(detail: str, evidence: list[str] | None = None) -> _Verdict:
    return _Verdict(Status.FAIL, detail, evidence)


def _na(detail: str, evidence: list[str] | None = None) -> _Verdict:
    return _Verdict(Status.NA, detail, evidence)


def _excerpt(lines: list[str]) -> list[str]:
    """The first and last lines of a check's exchange (the middle elided)."""
    if len(lines) <= _EVIDENCE_LINES:
        return list(lines)
    head, tail = 4, _EVIDENCE_LINES - 5
    return [*lines[:head], f"… {len(lines) - head - tail} more line(s) …", *lines[-tail:]]


def _short(value: Any, limit: int = _EVIDENCE_CHARS) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _reject_option(options: Iterable[tuple[Any, Any]]) -> Any:
    """The option the battery answers a permission request with, from ``(kind, optionId)``
    pairs: the ``reject_once`` one, else any ``reject*`` one, else None."""
    pairs = list(options)
    return next((oid for kind, oid in pairs if kind == "reject_once"), None) or next(
        (oid for kind, oid in pairs if str(kind).startswith("reject")), None
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
            await self._send({"jsonrpc": "2.0", "id": request_id, "result": {"outcome": outcome}})
        else:
            reply = method_not_found(method)
            error = {"code": reply.code, "message": reply.message, "data": reply.data}
            await self._send({"jsonrpc": "2.0", "id": request_id, "error": error})

    # -- writing
    async def _send(self, message: Any) -> None:
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

    async def start_request(self, method: str, params: Any) -> _Pending:
        self._next_id += 1
        pending = _Pending(method)
        self._pending[self._next_id] = pending
        await self._send(
            {"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params}
        )
        return pending

    async def wait(self, pending: _Pending) -> _Reply:
        await pending.done.wait()
        if pending.reply is None:
            raise AgentGone(self.exit_text())
        return pending.reply

    async def request(self, method: str, params: Any) -> _Reply:
        return await self.wait(await self.start_request(method, params))

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
            out.append(f"{_short(note.raw, 200)}: {exc}")
            continue
        update = decoded.update
        if isinstance(update, acp.UnknownUpdate) and update.kind in _KNOWN_UPDATE_KINDS:
            out.append(f"{_short(note.raw, 200)}: {update.error}")
    return out


#: The ``sessionUpdate`` kinds acpfsm models (the tags of :data:`acp.SessionUpdate`).
_KNOWN_UPDATE_KINDS = frozenset(
    str(cls.__struct_config__.tag) for cls in get_args(acp.SessionUpdate)
)


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


# --------------------------------------------------------------------------- the checks


def _judge_cancel(seen: _Cancelled, in_flight_clause: str) -> _Verdict:
    """The cancel check's verdict on what the battery saw of one cancelled turn (the
    carrier's errors aside). ``cancelled`` passes. Any other stopReason fails when the agent
    demonstrably had the cancel and went on: it answered a request sent after the cancel
    before it answered the prompt (stdio), or the turn went on more than :data:`_IN_FLIGHT`
    after the cancel. Otherwise the answer may have been on its way before the cancel could
    reach the agent: n/a, the race was lost (the caller tries another turn)."""
    end = seen.end
    took = end.at - seen.sent
    if end.stop == "cancelled":
        return _pass(f"stopReason cancelled {took:.2f} s after session/cancel")
    what = (
        f"stopReason {end.stop!r} {took:.2f} s after session/cancel "
        f"({seen.updates} update(s) in between)"
    )
    if not isinstance(end.stop, str) or end.stop not in STOP_REASONS:
        return _fail(f"{what}: not a stopReason")
    if seen.read_by is not None:
        return _fail(
            f"{what}: the agent had read the cancel, it answered a request sent after it "
            f"{seen.read_by - seen.sent:.2f} s after the cancel, and then still ended the turn "
            f"{end.stop} ({seen.updates_after_read} update(s) after that answer)"
        )
    if took > _IN_FLIGHT:
        return _fail(f"{what}: the turn went on more than {_IN_FLIGHT:g} s after the cancel")
    return _na(f"{what}: the turn ended before the cancel could act; {in_flight_clause}")


_Body = Callable[[], Awaitable[_Verdict]]


class _Suite:
    """The battery's bookkeeping and every check that is the same on both carriers."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        prompt: str,
        long_prompt: str,
        workspace: Path,
        echo: Callable[[CheckResult], None] | None,
    ) -> None:
        self.argv = list(argv)
        self.timeout = timeout
        self.prompt = prompt
        self.long_prompt = long_prompt
        self.workspace = workspace
        self.echo = echo
        self.report = ConformReport(command=self.argv)
        self.carrier: _Carrier | None = None
        self.caps: _Caps | None = None
        self.session: _SessionView | None = None
        self.session_blocked = "no session"
        self.turn_ok = False
        self.turn_blocked = "no prompt turn"

    # -- plumbing
    def _record(self, result: CheckResult) -> None:
        self.report.checks.append(result)
        if self.echo is not None:
            self.echo(result)

    async def check(self, check_id: str, title: str, body: _Body) -> CheckResult:
        carrier = self.carrier
        mark = len(carrier.transcript) if carrier is not None else 0
        started = time.monotonic()
        verdict: _Verdict | None = None
        with anyio.move_on_after(self.timeout) as scope:
            try:
                verdict = await body()
            except AgentGone as exc:
                assert carrier is not None
                verdict = _fail(f"the agent is gone: {await carrier.gone_text(exc)}")
        if verdict is None or scope.cancelled_caught:
            verdict = _fail(f"timed out after {self.timeout:g} s: the agent did not answer")
        evidence = verdict.evidence
        if evidence is None and verdict.status is Status.FAIL and carrier is not None:
            evidence = _excerpt(carrier.transcript[mark:])
        result = CheckResult(
            id=check_id,
            title=title,
            status=verdict.status,
            detail=verdict.detail,
            evidence=list(evidence or []),
            seconds=round(time.monotonic() - started, 3),
        )
        self._record(result)
        return result

    def skip(self, check_id: str, title: str, status: Status, reason: str) -> None:
        self._record(CheckResult(id=check_id, title=title, status=status, detail=reason))

    def _carrier(self) -> _Carrier:
        assert self.carrier is not None
        return self.carrier

    def _caps(self) -> _Caps:
        assert self.caps is not None
        return self.caps

    def _shared(self) -> dict[str, _Body]:
        return {
            "capabilities": self._capabilities,
            "session_new": self._session_new,
            "load_unknown": self._load_unknown,
            "prompt_turn": self._prompt_turn,
            "load_known": self._load_known,
            "cancel": self._cancel,
            "steer": self._steer,
            "set_mode": self._set_mode,
            "config_mode": self._config_mode,
            "config_model": self._config_model,
            "legacy_set_model": self._legacy_set_model,
        }

    # -- shared checks
    async def _capabilities(self) -> _Verdict:
        caps = self._caps()
        load = (
            f"loadSession {json.dumps(caps.load_session)}"
            if caps.load_session is not None
            else f"loadSession not reported by {self._carrier().name}"
        )
        parts = [
            load,
            f"prompt {'+'.join(caps.media) or 'text only'}",
            f"promptQueueing {json.dumps(caps.prompt_queueing)}",
            f"authMethods [{', '.join(caps.auth_ids)}]",
        ]
        if caps.session_caps:
            parts.append(f"session {'/'.join(caps.session_caps)}")
        return _pass("; ".join(parts))

    def _auth_reason(self, answer: _Answer, what: str) -> str:
        ids = ", ".join(self._caps().auth_ids) or "none"
        return (
            f"{what} needs authentication ({answer.text}; authMethods: {ids}); "
            f"run with credentials to check it"
        )

    async def _session_new(self) -> _Verdict:
        carrier = self._carrier()
        answer, view = await carrier.new_session(str(self.workspace))
        if answer.code == -32000:
            self.session_blocked = "session/new needs authentication"
            return _na(self._auth_reason(answer, "session/new"))
        if answer.error is not None:
            self.session_blocked = "session/new failed"
            return _fail(f"session/new answered an error: {answer.text}")
        if view is None:
            self.session_blocked = "session/new answered no usable session"
            return _fail(
                f"the session/new result does not fit ACP v1: {answer.problem or 'no sessionId'}"
            )
        self.session = view
        parts = [f"sessionId {view.session_id}"]
        if view.modes:
            parts.append(f"modes [{', '.join(view.modes)}]")
        if view.options:
            parts.append(f"configOptions [{', '.join(o.id for o in view.options)}]")
        if view.models:
            parts.append(f"{carrier.models_label} [{', '.join(view.models)}]")
        return _pass("; ".join(parts))

    async def _load_unknown(self) -> _Verdict:
        unknown = str(uuid.uuid4())
        if self._caps().load_session is False:
            from acpfsm.adapters.acp.stdio import LOAD_UNSUPPORTED_MESSAGE
            from acpfsm.adapters.errors import LocalProtocolError

            kind, what = _lifecycle_after_load_error(
                LocalProtocolError(LOAD_UNSUPPORTED_MESSAGE), unknown
            )
            return _na(
                f"loadSession not advertised: acpfsm never sends session/load ({kind}: {what})"
            )
        answer, _ = await self._carrier().load_session(unknown, str(self.workspace))
        if answer.error is None:
            return _fail(
                f"session/load of the unknown id {unknown} succeeded: {_short(answer.result, 200)}"
            )
        kind, what = _lifecycle_after_load_error(answer.error, unknown)
        detail = f"{answer.text} → {kind}: {what}"
        if answer.code == -32000:
            return _na(f"needs authentication: {detail}")
        if kind == "load_unsupported":
            return _na(f"loadSession not supported: {detail}")
        return _pass(detail)

    async def _prompt_turn(self) -> _Verdict:
        if self.session is None:
            self.turn_blocked = self.session_blocked
            return _na(self.session_blocked)
        carrier = self._carrier()
        turn = await carrier.start_turn(self.session.session_id, self.prompt)
        end = await carrier.finish(turn)
        kinds = carrier.updates(turn, turn.started, end.at)
        if end.answer.code == -32000:
            self.turn_blocked = "the prompt needs authentication"
            return _na(self._auth_reason(end.answer, "session/prompt"))
        if end.answer.error is not None:
            self.turn_blocked = "the prompt turn failed"
            return _fail(f"session/prompt answered an error: {end.answer.text}")
        stop = end.stop
        if not isinstance(stop, str) or stop not in STOP_REASONS:
            self.turn_blocked = "the prompt turn failed"
            return _fail(f"stopReason {stop!r} is not one of {', '.join(sorted(STOP_REASONS))}")
        bad = carrier.bad_updates(turn, turn.started, end.at)
        if bad:
            return _fail(f"{len(bad)} session/update(s) do not fit ACP v1", bad[:_EVIDENCE_LINES])
        self.turn_ok = True
        return _pass(
            f"stopReason {stop} in {end.at - turn.started:.2f} s after {len(kinds)} update(s) "
            f"({', '.join(sorted(set(kinds))) or 'none'})"
        )

    async def _load_known(self) -> _Verdict:
        if self.session is None:
            return _na(self.session_blocked)
        if self._caps().load_session is False:
            return _na("loadSession not advertised")
        carrier = self._carrier()
        session_id = self.session.session_id
        answer, replayed = await carrier.load_session(session_id, str(self.workspace))
        if answer.error is not None:
            kind, what = _lifecycle_after_load_error(answer.error, session_id)
            detail = f"{answer.text} → {kind}: {what}"
            if answer.code == -32000:
                return _na(f"needs authentication: {detail}")
            if kind == "load_unsupported":
                return _na(f"loadSession not supported: {detail}")
            if not self.turn_ok:
                return _na(
                    f"the session never completed a turn ({self.turn_blocked}), so the agent "
                    f"may not have stored it: {detail}"
                )
            return _fail(f"session/load of the session just used failed: {detail}")
        if answer.problem:
            return _fail(f"the session/load result does not fit ACP v1: {answer.problem}")
        kinds = ", ".join(sorted(set(replayed))) or "none"
        if not carrier.replay_observable:
            return _pass(
                f"answered; {carrier.name} does not forward the replayed history "
                f"({len(replayed)} event(s) of it came through: {kinds})"
            )
        if self.turn_ok and not replayed:
            return _fail("the session had a completed turn but session/load replayed nothing")
        return _pass(f"answered after replaying {len(replayed)} update(s) ({kinds})")

    async def _cancel(self) -> _Verdict:
        if not self.turn_ok:
            return _na(self.turn_blocked)
        carrier = self._carrier()
        assert self.session is not None
        lost: _Verdict | None = None
        for _ in range(_TRIES):
            mark = len(carrier.transcript)
            turn = await carrier.start_turn(self.session.session_id, self.long_prompt)
            if not await carrier.first_activity(turn):
                await carrier.finish(turn)
                continue
            seen = await carrier.cancel_turn(turn)
            end = seen.end
            if end.problem:
                return _fail(end.problem)
            if end.answer.error is not None:
                return _fail(f"the cancelled prompt answered an error: {end.answer.text}")
            verdict = _judge_cancel(seen, carrier.in_flight_clause)
            evidence = carrier.evidence(mark, seen.last_line)
            if verdict.status is not Status.NA:
                return _Verdict(verdict.status, verdict.detail, evidence)
            lost = _na(verdict.detail, evidence)
        if lost is not None:
            return _na(f"{lost.detail} ({_TRIES} tries)", lost.evidence)
        return _na("every turn ended before its first update, so no cancel could be sent")

    async def _steer(self) -> _Verdict:
        if not self.turn_ok:
            return _na(self.turn_blocked)
        if not self._caps().prompt_queueing:
            return _na(
                "promptQueueing not advertised (_meta.claudeCode): acpfsm does not steer this "
                "agent (SteerUnsupported); a second prompt waits for the first"
            )
        carrier = self._carrier()
        assert self.session is not None
        sent = False
        for _ in range(_TRIES):
            first = await carrier.start_turn(self.session.session_id, self.long_prompt)
            if not await carrier.first_activity(first):
                await carrier.finish(first)
                continue
            sent = True
            ends = await carrier.steer(first, self.prompt)
            if ends is None:
                await carrier.finish(first)
                continue
            for label, end in ends:
                if end.answer.error is not None:
                    return _fail(f"the {label} prompt answered an error: {end.answer.text}")
                if not isinstance(end.stop, str) or end.stop not in STOP_REASONS:
                    return _fail(f"the {label} prompt answered stopReason {end.stop!r}")
            if len(ends) == 1:
                return _pass(
                    f"the steer was accepted into the running turn, which then ended once "
                    f"with {ends[0][1].stop} (the queued prompt took the turn over)"
                )
            a, b = ends[0][1], ends[1][1]
            if b.at < a.at:
                return _fail("the second prompt was answered before the first")
            return _pass(f"the first turn answered {a.stop}, then the queued one {b.stop}")
        if sent:
            return _na(
                f"every turn ended before the agent took the second prompt in, so nothing was "
                f"queued ({_TRIES} tries)"
            )
        return _na("every turn ended before its first update, so no steer could be sent")

    async def _set_mode(self) -> _Verdict:
        if self.session is None:
            return _na(self.session_blocked)
        session = self.session
        if not session.modes:
            return _na("no modes advertised by session/new")
        current = session.current_mode
        others = [m for m in session.modes if m != current]
        if not others:
            return _na(f"only one mode advertised ({current})")
        target = others[0]
        carrier = self._carrier()
        answer, told = await carrier.set_mode(session.session_id, target)
        if answer.error is not None:
            return _fail(f"set_mode {target!r} (advertised) answered {answer.text}")
        note = f" with a {carrier.mode_update}" if told else f" (no {carrier.mode_update})"
        if current is not None:
            await carrier.set_mode(session.session_id, current)
        return _pass(f"{current} → {target} accepted{note}")

    async def _config_option(self, category: str) -> _Verdict:
        if self.session is None:
            return _na(self.session_blocked)
        options = [o for o in self.session.options if o.category == category and o.type == "select"]
        if not options:
            return _na(f"no select config option of category {category!r} advertised")
        option = options[0]
        current = option.current
        others = [v for v in option.values if v != current]
        if not others:
            return _na(f"config option {option.id!r} offers no other value than {current!r}")
        target = others[0]
        carrier = self._carrier()
        session_id = self.session.session_id
        answer, now = await carrier.set_config_option(session_id, option, target)
        if answer.error is not None:
            return _fail(
                f"set_config_option {option.id}={target!r} (advertised) answered {answer.text}"
            )
        if answer.problem:
            return _fail(f"the set_config_option result does not fit ACP v1: {answer.problem}")
        if now is None and not carrier.reflection_in_answer:
            return _na(
                f"set_config_option {option.id}={target!r} was accepted, but "
                f"{carrier.reflection_source} did not report the option within {_SETTLE:g} s, "
                f"so its new value was not observed"
            )
        if now != target:
            return _fail(
                f"set_config_option {option.id}={target!r} was accepted, but "
                f"{carrier.reflection_source} says currentValue {now!r}"
            )
        await carrier.set_config_option(session_id, option, current)
        return _pass(f"{option.id}: {current} → {target}, reflected in {carrier.reflection_source}")

    async def _config_mode(self) -> _Verdict:
        return await self._config_option("mode")

    async def _config_model(self) -> _Verdict:
        return await self._config_option("model")

    async def _legacy_set_model(self) -> _Verdict:
        if self.session is None:
            return _na(self.session_blocked)
        carrier = self._carrier()
        session = self.session
        if not session.models:
            answer = await carrier.set_model(session.session_id, "acpfsm-conform")
            said = answer.text if answer.error is not None else "a result"
            return _na(
                f"no legacy models advertised (session/set_model answered {said}); model "
                f"selection goes through config options"
            )
        current = session.current_model
        target = next((m for m in session.models if m != current), session.models[0])
        answer = await carrier.set_model(session.session_id, target)
        if answer.error is not None:
            return _fail(f"set_model {target!r} (advertised) answered {answer.text}")
        return _pass(f"{current} → {target} accepted{carrier.set_model_note}")


# --------------------------------------------------------------------------- over stdio


class _StdioBattery(_Suite):
    """The whole battery over the agent's stdio: the shared checks plus those that need the
    raw pipe (an unknown method, malformed input, stdout, stdin close, a second process for
    version negotiation)."""

    def __init__(self, argv: Sequence[str], *, inherit_env: Sequence[str], **kwargs: Any) -> None:
        super().__init__(argv, **kwargs)
        self.inherit_env = tuple(inherit_env)
        self.wire: _Wire | None = None
        self.init: dict[str, Any] | None = None

    def _wire(self) -> _Wire:
        assert self.wire is not None
        return self.wire

    def _attach(self, process: AgentProcess) -> _Wire:
        self.wire = _Wire(process)
        self.carrier = _WireCarrier(self.wire)
        return self.wire

    # -- the run
    async def run(self) -> ConformReport:
        started = time.monotonic()
        try:
            await self._main_process()
            await self._negotiation_process()
        finally:
            self.report.seconds = round(time.monotonic() - started, 3)
        return self.report

    def _open(self) -> Any:
        return open_agent_process(
            self.argv,
            cwd=self.workspace,
            inherit_env=self.inherit_env,
            shutdown=ShutdownPolicy(stdin_close_wait=1.0, term_wait=2.0, kill_wait=2.0),
        )

    async def _main_process(self) -> None:
        try:
            async with self._open() as process, anyio.create_task_group() as tg:
                await tg.start(self._attach(process).serve)
                await self._main_checks()
                tg.cancel_scope.cancel()
        except AcpfsmError as exc:  # the agent could not be started
            if self.report.checks:
                raise
            self.skip("initialize", _TITLES["initialize"], Status.FAIL, str(exc))
            for check_id, title, _ in self._rest():
                self.skip(check_id, title, Status.NA, "the agent could not be started")

    def _rest(self) -> list[tuple[str, str, _Body]]:
        bodies = {
            **self._shared(),
            "unknown_method": self._unknown_method,
            "malformed_input": self._malformed_input,
            "stdout_clean": self._stdout_clean,
            "stdin_close": self._stdin_close,
        }
        return [
            (check_id, title, bodies[check_id])
            for check_id, title in CHECKS
            if check_id not in ("initialize", "version_negotiation")
        ]

    async def _main_checks(self) -> None:
        result = await self.check("initialize", _TITLES["initialize"], self._initialize)
        rest = self._rest()
        if result.status is not Status.PASS:
            for check_id, title, _ in rest:
                if check_id == "stdin_close":
                    await self.check(check_id, title, self._stdin_close)
                else:
                    self.skip(check_id, title, Status.NA, "initialize failed")
            return
        for check_id, title, body in rest:
            await self.check(check_id, title, body)

    # -- checks that need the raw pipe
    def _initialize_params(self, version: int) -> dict[str, Any]:
        return {
            "protocolVersion": version,
            "clientCapabilities": {
                "fs": {"readTextFile": False, "writeTextFile": False},
                "terminal": False,
            },
            "clientInfo": {"name": "acpfsm-conform", "version": "1"},
        }

    async def _initialize(self) -> _Verdict:
        wire = self._wire()
        reply = await wire.request("initialize", self._initialize_params(acp.PROTOCOL_VERSION))
        if reply.error is not None:
            return _fail(f"initialize answered an error: {reply.describe_error()}")
        result = reply.result
        if not isinstance(result, dict):
            return _fail(f"initialize result is not an object: {_short(result, 120)}")
        version = result.get("protocolVersion")
        if version != acp.PROTOCOL_VERSION:
            return _fail(f"asked for protocolVersion 1, the agent answered {version!r}")
        problem = _decode("initialize", result)
        if problem:
            return _fail(f"the initialize result does not fit ACP v1: {problem}")
        self.init = result
        self.caps = self._caps_of(result)
        self.report.unmodelled = acp.unmodelled(acp.InitializeResponse, result)
        info = result.get("agentInfo") if isinstance(result.get("agentInfo"), dict) else {}
        assert isinstance(info, dict)
        name = str(info.get("name", "")) or "(no agentInfo)"
        version_text = str(info.get("version", ""))
        self.report.agent = f"{name} {version_text}".strip()
        return _pass(f"protocolVersion 1 in {reply.at:.2f} s, agent {self.report.agent}")

    @staticmethod
    def _caps_of(result: dict[str, Any]) -> _Caps:
        caps = result.get("agentCapabilities")
        caps = caps if isinstance(caps, dict) else {}
        prompt = caps.get("promptCapabilities")
        prompt = prompt if isinstance(prompt, dict) else {}
        meta = caps.get("_meta")
        claude = meta.get("claudeCode") if isinstance(meta, dict) else None
        auth = result.get("authMethods") or []
        session_caps = caps.get("sessionCapabilities")
        return _Caps(
            load_session=bool(caps.get("loadSession")),
            media=[k for k in ("image", "audio", "embeddedContext") if prompt.get(k)],
            prompt_queueing=isinstance(claude, dict) and claude.get("promptQueueing") is True,
            auth_ids=[str(a.get("id")) for a in auth if isinstance(a, dict)],
            session_caps=sorted(session_caps) if isinstance(session_caps, dict) else [],
        )

    async def _unknown_method(self) -> _Verdict:
        reply = await self._wire().request(UNKNOWN_METHOD, {})
        if reply.code == -32601:
            return _pass(f"answered {reply.describe_error()}")
        if reply.error is not None:
            return _fail(f"expected -32601, got {reply.describe_error()}")
        return _fail(f"expected -32601, got a result: {_short(reply.result, 200)}")

    async def _malformed_input(self) -> _Verdict:
        wire = self._wire()
        before = len(wire.orphans)
        await wire.send_raw(b"this line is not JSON\n")
        await wire.send_raw(b'{"acpfsm": "an object that is not JSON-RPC"}\n')
        reply = await wire.request(UNKNOWN_METHOD, {})
        if reply.error is None and reply.result is None:
            return _fail("the agent stopped answering after malformed input")
        orphans = wire.orphans[before:]
        answered = [_short(o.decode(errors="replace"), 160) for o in orphans]
        how = f"answered {'; '.join(answered)}" if answered else "ignored them"
        if any(b'"id"' not in o for o in orphans):
            how += " (an error response without `id` is not JSON-RPC 2.0; acpfsm ignores it)"
        return _pass(f"still answering; {how}")

    async def _stdout_clean(self) -> _Verdict:
        garbage = self._wire().garbage
        if garbage:
            lines = [_short(g.decode(errors="replace"), 200) for g in garbage[:_EVIDENCE_LINES]]
            return _fail(f"{len(garbage)} line(s) on stdout are not JSON-RPC", lines)
        return _pass("every line on stdout was JSON")

    async def _stdin_close(self) -> _Verdict:
        wire = self._wire()
        process = wire.process
        started = time.monotonic()
        await wire.close_stdin()
        with anyio.move_on_after(min(self.timeout * 0.9, 10.0)):
            await process.wait()
        code = process.returncode
        if code is None:
            return _fail(
                f"still running {time.monotonic() - started:.1f} s after stdin was closed "
                f"(acpfsm then signals its process group)",
                [*wire.transcript[-4:]],
            )
        return _pass(
            f"exited with code {code} {time.monotonic() - started:.2f} s after stdin closed"
        )

    # -- a second process
    async def _negotiation_process(self) -> None:
        title = _TITLES["version_negotiation"]
        try:
            async with self._open() as process, anyio.create_task_group() as tg:
                await tg.start(self._attach(process).serve)
                await self.check("version_negotiation", title, self._negotiation)
                tg.cancel_scope.cancel()
        except AcpfsmError as exc:
            self.skip("version_negotiation", title, Status.FAIL, str(exc))

    async def _negotiation(self) -> _Verdict:
        asked = NONEXISTENT_VERSION
        reply = await self._wire().request("initialize", self._initialize_params(asked))
        if reply.error is not None:
            return _fail(
                f"initialize with protocolVersion {asked} answered an error instead of the "
                f"agent's latest version: {reply.describe_error()}"
            )
        version = reply.result.get("protocolVersion") if isinstance(reply.result, dict) else None
        if not isinstance(version, int) or isinstance(version, bool):
            return _fail(f"protocolVersion {version!r} is not an integer")
        if version > asked:
            return _fail(f"asked for {asked}, the agent answered a later version {version}")
        if version == asked:
            return _fail(
                f"asked for {asked}, a protocol version that does not exist (acpfsm speaks "
                f"{acp.PROTOCOL_VERSION}), the agent answered {asked}: it claims to speak it; ACP "
                f"wants the requested version only if supported, else the agent's latest"
            )
        v1 = " (acpfsm speaks it)" if version == acp.PROTOCOL_VERSION else ""
        return _pass(f"asked for {asked}: answered its latest, {version}{v1}")


# --------------------------------------------------------------------------- through agentctl


class _AgentctlBattery(_Suite):
    """The shared checks through an agentctl instance running the agent; the stdio-only
    checks are n/a. The instance is created, started and deleted by
    :class:`~acpfsm.adapters.agentctl.executor.AgentctlExecutor`."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        url: str,
        nonce: str,
        token: str,
        config: AgentctlConfig,
        env: dict[str, str],
        **kwargs: Any,
    ) -> None:
        super().__init__(argv, **kwargs)
        self.url = url
        self.nonce = nonce
        self.token = token
        self.config = config
        self.env = env
        self.permissions = _Permissions()
        self.report.agentctl = url

    async def run(self) -> ConformReport:
        from acpfsm.adapters.agentctl.executor import AgentctlExecutor
        from acpfsm.adapters.executor import AgentLaunch

        started = time.monotonic()
        executor = AgentctlExecutor(
            url=self.url,
            nonce=self.nonce,
            token=self.token,
            config=self.config,
            auto_redial=True,  # no Runtime here to decide a redial
        )
        execution_id = f"acpfsm-conform-{uuid.uuid4().hex[:12]}"
        launch = AgentLaunch(
            execution_id=execution_id,
            session_id=execution_id,
            agent_id="acpfsm-conform",
            command=tuple(self.argv),
            workspace=str(self.workspace),
            env=self.env,
            permission_policy=self.permissions.answer,
        )
        try:
            async with (
                executor.open(launch) as transport,
                anyio.create_task_group() as tg,
            ):
                carrier = _TransportCarrier(transport, self.permissions)
                self.carrier = carrier
                await tg.start(carrier.pump)
                await self._main_checks(carrier)
                tg.cancel_scope.cancel()
        except AcpfsmError as exc:  # no instance, or the agent could not be started in it
            if self.report.checks:
                raise
            self.skip(
                "initialize",
                _TITLES["initialize"],
                Status.FAIL,
                f"could not start the agent in an agentctl instance at {self.url}: {exc}",
            )
            self._skip_rest("the agent could not be started")
        finally:
            self.report.seconds = round(time.monotonic() - started, 3)
            if self.nonce and executor.token:
                self.report.agentctl_token = executor.token
        return self.report

    def _skip_rest(self, reason: str) -> None:
        for check_id, title in CHECKS[1:]:
            if check_id in AGENTCTL_NOT_OBSERVABLE:
                self.skip(check_id, title, Status.NA, self._not_observable(check_id))
            else:
                self.skip(check_id, title, Status.NA, reason)

    @staticmethod
    def _not_observable(check_id: str) -> str:
        return f"{NOT_OBSERVABLE_THROUGH_AGENTCTL}: {AGENTCTL_NOT_OBSERVABLE[check_id]}"

    async def _main_checks(self, carrier: _TransportCarrier) -> None:
        initialize = functools.partial(self._initialize, carrier)
        result = await self.check("initialize", _TITLES["initialize"], initialize)
        if result.status is not Status.PASS:
            self._skip_rest("initialize failed")
            return
        shared = self._shared()
        for check_id, title in CHECKS[1:]:
            if check_id in shared:
                await self.check(check_id, title, shared[check_id])
            else:
                self.skip(check_id, title, Status.NA, self._not_observable(check_id))

    async def _initialize(self, carrier: _TransportCarrier) -> _Verdict:
        started = carrier.now()
        result, answer = await carrier.initialize()
        if result is None:
            return _fail(f"agentctl's initialize failed: {answer.text}")
        self.caps = _Caps(
            load_session=None,  # agentctl does not report it
            media=[
                name
                for name, flag in (
                    ("image", result.supports_image),
                    ("audio", result.supports_audio),
                    ("embeddedContext", result.supports_embedded_context),
                )
                if flag
            ],
            prompt_queueing=result.prompt_queueing,
            auth_ids=[str(a.get("id")) for a in result.auth_methods if isinstance(a, dict)],
            session_caps=[],
        )
        self.report.agent = f"{result.agent.name} {result.agent.version}".strip()
        self.report.unmodelled = dict(result.unmodelled)
        return _pass(
            f"agentctl's ACP handshake (protocolVersion {result.protocol_version}) in "
            f"{answer.at - started:.2f} s, agent {self.report.agent}"
        )


# --------------------------------------------------------------------------- entry points


def _resolve_program(argv: Sequence[str]) -> list[str]:
    """A relative program path (``./agent``) is relative to our directory, not the agent's."""
    out = list(argv)
    if os.sep in out[0] and not os.path.isabs(out[0]):
        out[0] = os.path.abspath(out[0])
    return out


async def run_battery(
    argv: Sequence[str],
    *,
    check_timeout: float = DEFAULT_TIMEOUT,
    prompt: str = DEFAULT_PROMPT,
    long_prompt: str = DEFAULT_LONG_PROMPT,
    workspace: str | Path | None = None,
    echo: Callable[[CheckResult], None] | None = None,
    inherit_env: Sequence[str] | None = None,
) -> ConformReport:
    """Run every check against the agent ``argv`` over its stdio; ``echo`` sees each result
    as it is made. The agent works in ``workspace`` (default: a new temporary directory,
    removed after); a relative program path is taken from the current directory. Each check
    is bounded by ``check_timeout`` seconds. The agent's environment holds the variables
    ``inherit_env`` names (default :func:`conform_env_names`: ``PATH``, ``HOME``, ``LANG`` and
    what the built-in profiles pass through), copied from ours."""
    if not argv:
        raise ConformUsageError("no agent command")
    argv = _resolve_program(argv)
    own = workspace is None
    path = Path(tempfile.mkdtemp(prefix="acpfsm-conform-")) if own else Path(str(workspace))
    try:
        battery = _StdioBattery(
            argv,
            inherit_env=conform_env_names() if inherit_env is None else inherit_env,
            timeout=check_timeout,
            prompt=prompt,
            long_prompt=long_prompt,
            workspace=path.resolve(),
            echo=echo,
        )
        return await battery.run()
    finally:
        if own:
            shutil.rmtree(path, ignore_errors=True)


def conform_env_names() -> tuple[str, ...]:
    """What an agent checked over stdio gets of our environment by default: the stdio
    executor's base (``PATH``, ``HOME``, ``LANG``) and every variable a built-in agent
    profile passes through (credentials, provider settings, proxies), as the runtime would
    give them; ``--inherit-env`` gives it everything."""
    from acpfsm.adapters.acp.process import DEFAULT_INHERITED_ENV
    from acpfsm.runtime.runtime import AGENT_ENV

    return tuple(dict.fromkeys((*DEFAULT_INHERITED_ENV, *AGENT_ENV)))


def _environ_of(names: Sequence[str]) -> dict[str, str]:
    return {name: os.environ[name] for name in names if name in os.environ}


_HTTP_FLOOR = 30.0


def _agentctl_config(check_timeout: float) -> AgentctlConfig:
    """agentctl client bounds above the check bound (so a check times out, not a request).
    Each HTTP call of the instance's setup and teardown is bounded by ``check_timeout`` but
    never by less than :data:`_HTTP_FLOOR`: deleting an instance whose agent ignores its
    stdin takes agentctl 15 s (its graceful wait before it signals the process group)."""
    from acpfsm.adapters.agentctl import AgentctlConfig

    bound = max(check_timeout, 1.0)
    return AgentctlConfig(
        http_timeout=max(bound, _HTTP_FLOOR),
        ready_timeout=bound,
        request_timeout=bound + 5.0,
        prompt_ack_timeout=bound,
        cancel_timeout=bound + 5.0,
        capabilities_wait=min(2.0, bound),
        reconnect_budget=min(bound, 30.0),
    )


async def run_agentctl_battery(
    argv: Sequence[str],
    *,
    url: str,
    nonce: str = "",
    token: str = "",
    check_timeout: float = DEFAULT_TIMEOUT,
    prompt: str = DEFAULT_PROMPT,
    long_prompt: str = DEFAULT_LONG_PROMPT,
    workspace: str | Path | None = None,
    echo: Callable[[CheckResult], None] | None = None,
    config: AgentctlConfig | None = None,
    inherit_env: Sequence[str] | None = None,
) -> ConformReport:
    """Run the battery against the agent ``argv`` in an instance of the agentctl at ``url``
    (control port), authenticated by its bootstrap ``nonce`` (traded for the token) or its
    bearer ``token``. ``workspace`` is the instance's workspace, a directory on agentctl's
    machine (default when agentctl is on this machine: a new temporary directory, removed
    after; required otherwise). The instance is deleted at the end, whatever happened. The
    checks that need the agent's raw stdio are n/a, "not observable through agentctl".
    ``config`` overrides the agentctl client bounds derived from ``check_timeout``. The agent
    runs in agentctl's environment plus the variables ``inherit_env`` names (default: what
    the built-in profiles pass through), copied from ours. ``report.agentctl_token`` holds
    the token the nonce was traded for."""
    from acpfsm.adapters.agentctl.executor import AgentctlExecutor
    from acpfsm.runtime.runtime import AGENT_ENV

    if not argv:
        raise ConformUsageError("no agent command")
    if bool(nonce) == bool(token):
        raise ConformUsageError("give agentctl's bootstrap nonce or its token (exactly one)")
    local = AgentctlExecutor(url=url).check_workspace  # agentctl runs on this machine
    if workspace is None and not local:
        raise ConformUsageError(
            f"agentctl at {url} is not on this machine: give the workspace, a directory on "
            f"agentctl's machine"
        )
    argv = _resolve_program(argv) if local else list(argv)
    own = workspace is None
    path = Path(tempfile.mkdtemp(prefix="acpfsm-conform-")) if own else Path(str(workspace))
    try:
        battery = _AgentctlBattery(
            argv,
            url=url,
            nonce=nonce,
            token=token,
            config=config or _agentctl_config(check_timeout),
            env=_environ_of(AGENT_ENV if inherit_env is None else inherit_env),
            timeout=check_timeout,
            prompt=prompt,
            long_prompt=long_prompt,
            workspace=path.resolve() if local else path,
            echo=echo,
        )
        return await battery.run()
    finally:
        if own:
            shutil.rmtree(path, ignore_errors=True)


# --------------------------------------------------------------------------- output


def _via(report: ConformReport) -> str:
    return f" via agentctl {report.agentctl}" if report.agentctl else ""


def render_table(report: ConformReport, *, evidence: bool = True) -> str:
    counts = report.counts()
    head = (
        f"acpfsm conform: {' '.join(report.command)}"
        + _via(report)
        + (f" ({report.agent})" if report.agent else "")
        + f": {counts['pass']} pass, {counts['fail']} fail, {counts['n/a']} n/a "
        f"in {report.seconds:.1f} s"
    )
    rows = [("check", "result", "time", "detail")] + [
        (c.id, c.status.value, f"{c.seconds:.2f}s", c.detail) for c in report.checks
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [head, ""]
    if report.unmodelled:
        lines += [f"not modelled by acpfsm (kept): {_short(report.unmodelled)}", ""]
    for i, row in enumerate(rows):
        lines.append("  ".join(row[j].ljust(widths[j]) for j in range(3)) + "  " + row[3])
        if i == 0:
            lines.append("  ".join("-" * w for w in widths) + "  " + "-" * 6)
    if evidence:
        for c in report.checks:
            if c.evidence and c.status is not Status.PASS:
                lines += ["", f"{c.id}: evidence ({c.status.value})"]
                lines += [f"  {e}" for e in c.evidence]
    return "\n".join(lines)


def render_markdown(report: ConformReport) -> str:
    """The report as a Markdown table (what the README shows)."""
    counts = report.counts()
    lines = [
        f"`{' '.join(report.command)}`"
        + _via(report)
        + (f" ({report.agent})" if report.agent else "")
        + f": {counts['pass']} pass, {counts['fail']} fail, {counts['n/a']} n/a",
        "",
        "| check | result | detail |",
        "| --- | --- | --- |",
    ]
    for c in report.checks:
        detail = c.detail.replace("|", "\\|")
        lines.append(f"| {c.id} | {c.status.value} | {detail} |")
    return "\n".join(lines)


def render_junit(report: ConformReport) -> bytes:
    counts = report.counts()
    suite = ET.Element(
        "testsuite",
        name="acpfsm conform",
        tests=str(len(report.checks)),
        failures=str(counts["fail"]),
        skipped=str(counts["n/a"]),
        errors="0",
        time=f"{report.seconds:.3f}",
    )
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="command", value=" ".join(report.command))
    ET.SubElement(props, "property", name="agent", value=report.agent)
    if report.agentctl:
        ET.SubElement(props, "property", name="agentctl", value=report.agentctl)
    for c in report.checks:
        case = ET.SubElement(
            suite, "testcase", classname="acpfsm.conform", name=c.id, time=f"{c.seconds:.3f}"
        )
        if c.status is Status.FAIL:
            failure = ET.SubElement(case, "failure", message=c.detail)
            failure.text = "\n".join(c.evidence)
        elif c.status is Status.NA:
            ET.SubElement(case, "skipped", message=c.detail)
        else:
            ET.SubElement(case, "system-out").text = c.detail
    ET.indent(suite)
    body: bytes = ET.tostring(suite, encoding="utf-8", xml_declaration=True)
    return body + b"\n"


# --------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument("--junit-xml", metavar="FILE", help="also write a JUnit XML report")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help=f"bound of each check in seconds (default {DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument("--prompt", default=DEFAULT_PROMPT, help="the prompt of the turn check")
    parser.add_argument(
        "--long-prompt",
        default=DEFAULT_LONG_PROMPT,
        help="the prompt of the cancel and steer checks (should take the agent a while)",
    )
    parser.add_argument(
        "--cwd",
        metavar="DIR",
        help="over stdio: the agent's working directory and session cwd (default: a new "
        "temporary directory; relative paths in ARGS resolve against it, so give absolute ones)",
    )
    remote = parser.add_argument_group(
        "through agentctl",
        "run the agent in an instance of kandev's agentctl and check it through agentctl's "
        "WebSocket; the checks that need the agent's raw stdio are n/a",
    )
    remote.add_argument(
        "--agentctl",
        metavar="URL",
        help="agentctl's control URL, e.g. http://127.0.0.1:39429, or `auto`: start one on "
        "this machine for this run (as `acpfsm agentctl` does) and stop it at the end",
    )
    credentials = remote.add_mutually_exclusive_group()
    credentials.add_argument(
        "--nonce", metavar="N", help="agentctl's bootstrap nonce (traded for its token)"
    )
    credentials.add_argument(
        "--token",
        metavar="T",
        help="agentctl's bearer token (the nonce is one-shot: a run given --nonce saves the "
        "token it got to --token-file, for the next run)",
    )
    remote.add_argument(
        "--token-file",
        metavar="FILE",
        help="read agentctl's bearer token from FILE; a run given --nonce writes the token it "
        "got there (default: a private file in the user cache folder, named after the URL)",
    )
    remote.add_argument(
        "--workspace",
        metavar="DIR",
        help="the instance's workspace, a directory on agentctl's machine (default when "
        "agentctl runs on this machine: a new temporary directory)",
    )
    parser.add_argument(
        "--inherit-env",
        action="store_true",
        help="give the agent this whole environment (default: PATH, HOME, LANG and the "
        "credentials and settings the built-in agent profiles pass through)",
    )
    parser.add_argument(
        "agent", nargs=argparse.REMAINDER, metavar="-- AGENT_COMMAND [ARGS...]",
        help="the agent to check, after --",
    )  # fmt: skip


def token_file(url: str) -> Path:
    """The default token file for agentctl at ``url``: in the user cache folder, private."""
    from acpfsm.adapters.agentctl.local import default_cache_dir
    from acpfsm.adapters.workspace import safe_component

    name = safe_component(url.split("://", 1)[-1].replace(":", "-"), "agentctl")
    return default_cache_dir().parent / "tokens" / f"agentctl-{name}"


def _save_token(args: argparse.Namespace, token: str) -> Path:
    """Write ``token`` to ``--token-file`` (or the default one), mode 0600 in a 0700 folder:
    a secret, kept off the terminal, the logs and the reports."""
    from acpfsm.adapters.workspace import make_private_dirs, open_private

    path = Path(args.token_file) if args.token_file else token_file(args.agentctl)
    make_private_dirs(path.parent)
    fd = open_private(path, os.O_WRONLY | os.O_TRUNC)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(token + "\n")
    return path


def _usage_error(args: argparse.Namespace) -> str:
    """Why these arguments cannot run ("" when they can)."""
    if args.timeout <= 0:
        return "--timeout must be positive"
    if args.agentctl is None:
        given = [
            f"--{n.replace('_', '-')}"
            for n in ("nonce", "token", "token_file", "workspace")
            if getattr(args, n)
        ]
        return f"{' and '.join(given)} need --agentctl URL" if given else ""
    if args.agentctl == AGENTCTL_AUTO:
        if args.nonce or args.token or args.token_file:
            return "--agentctl auto starts its own agentctl: give no --nonce or --token"
    elif not args.nonce and not args.token:
        if not args.token_file:
            return (
                "--agentctl needs agentctl's bootstrap --nonce N, its --token T or a "
                "--token-file FILE (or: auto)"
            )
        try:
            args.token = Path(args.token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            return f"cannot read --token-file {args.token_file}: {exc.strerror or exc}"
        if not args.token:
            return f"--token-file {args.token_file} is empty"
    if args.cwd:
        return "with --agentctl, give the agent's directory as --workspace DIR"
    return ""


def run(args: argparse.Namespace) -> int:
    argv = list(args.agent)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("acpfsm conform: give the agent command after --", file=sys.stderr)
        return 2
    problem = _usage_error(args)
    if problem:
        print(f"acpfsm conform: {problem}", file=sys.stderr)
        return 2
    if args.agentctl != AGENTCTL_AUTO:
        return _run(args, argv)
    from acpfsm.adapters.agentctl.local import AgentctlUnavailable

    from .agentctl import local_agentctl

    def note(text: str) -> None:
        print(f"acpfsm conform: {text}", file=sys.stderr, flush=True)

    try:
        with local_agentctl(echo=note) as server:
            note(f"started agentctl at {server.url} (stopped at the end)")
            args.agentctl, args.nonce = server.url, server.nonce
            return _run(args, argv, token_hint=False)
    except AgentctlUnavailable as exc:
        note(f"cannot start agentctl: {exc}")
        return 2


def _run(args: argparse.Namespace, argv: list[str], *, token_hint: bool = True) -> int:
    def echo(result: CheckResult) -> None:
        if not args.json:
            print(
                f"  {result.status.value:<4} {result.id} ({result.seconds:.2f}s)", file=sys.stderr
            )

    common: dict[str, Any] = {
        "check_timeout": args.timeout,
        "prompt": args.prompt,
        "long_prompt": args.long_prompt,
        "echo": echo,
        "inherit_env": tuple(os.environ) if args.inherit_env else None,
    }
    battery: Callable[[], Awaitable[ConformReport]]
    if args.agentctl is not None:
        battery = functools.partial(
            run_agentctl_battery,
            argv,
            url=args.agentctl,
            nonce=args.nonce or "",
            token=args.token or "",
            workspace=args.workspace,
            **common,
        )
    else:
        battery = functools.partial(run_battery, argv, workspace=args.cwd, **common)
    try:
        report = anyio.run(battery)
    except ConformUsageError as exc:
        print(f"acpfsm conform: {exc}", file=sys.stderr)
        return 2
    if args.junit_xml:
        Path(args.junit_xml).write_bytes(render_junit(report))
    if args.json:
        data = msgspec.to_builtins(report)
        del data["agentctl_token"]  # a secret: never in a report
        data["ok"] = report.ok
        data["summary"] = report.counts()
        print(json.dumps(data, ensure_ascii=False))
    else:
        print(render_table(report))
    if report.agentctl_token and token_hint:
        path = _save_token(args, report.agentctl_token)
        print(
            f"acpfsm conform: the nonce is spent; agentctl's token was saved to {path}: "
            f"run again with --token-file {path}",
            file=sys.stderr,
        )
    return 0 if report.ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="acpfsm conform", description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
