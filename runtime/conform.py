"""``acpfsm conform``: a conformance battery for any ACP agent over stdio.

Theory of operation
-------------------
The battery spawns the agent (its own process group, in a fresh temporary working directory
that is also the session ``cwd``) and speaks newline-delimited JSON-RPC to it through a small
recording client of its own, so that every check can quote the exact lines exchanged as
evidence and can send what a well-behaved client never would (an unknown method, a line
that is not JSON). Shapes are validated with the same msgspec structs acpfsm's ACP client
uses (:mod:`acpfsm.adapters.acp.messages`); session/load errors are classified by
:mod:`acpfsm.adapters.classify` and the consequence is read off the SessionInit chart, as
the runtime would decide it.

Each check ends ``pass``, ``fail`` (with evidence) or ``n/a`` (not applicable, with the
reason, e.g. the agent needs credentials to open a session, or does not advertise the
capability). Every check is bounded by ``--timeout`` seconds; an agent that does not answer
in time fails that check ("timed out") and the battery goes on. The client advertises no
``fs``/``terminal`` capability and answers such requests ``-32601``; a permission request
is answered with a reject option (``cancelled`` once a cancel was sent). The agent's
environment is the caller's (credentials included), so to run offline pass a throw-away
``HOME`` and an unreachable proxy.

The checks, in order (one agent process, then a second one for version negotiation):

==================  ===========================================================================
id                  what passes
==================  ===========================================================================
initialize          ``initialize`` v1 is answered ``protocolVersion: 1`` in the v1 shape
capabilities        the advertised capabilities decode (listed in the detail)
session_new         session/new answers a ``sessionId`` (n/a: authentication required)
unknown_method      an unknown method is answered ``-32601``
load_unknown        session/load of an unknown id is an error; its classification and the
                    lifecycle's decision (fall back to session/new, or fail keeping the id)
prompt_turn         a prompt turn ends with a valid ``stopReason``; every update decodes
load_known          session/load of the session just used answers and replays its history
cancel              session/cancel during a turn ends it with ``stopReason: cancelled``
steer               with ``promptQueueing`` advertised, a second prompt during a turn is
                    accepted and both are answered, the first first (n/a otherwise)
set_mode            session/set_mode to another advertised mode
config_mode         session/set_config_option on the ``mode`` category option
config_model        session/set_config_option on the ``model`` category option
legacy_set_model    session/set_model to another advertised legacy model (n/a when none)
malformed_input     a non-JSON line and a non-JSON-RPC object do not kill the agent
stdout_clean        nothing but JSON was written on stdout
stdin_close         the agent exits when its stdin is closed
version_negotiation a fresh agent asked for protocol 999 answers a version it supports
==================  ===========================================================================

``--agentctl URL`` (the same battery through kandev's agentctl) will come with that adapter.
"""

from __future__ import annotations

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
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import msgspec

from acpfsm.adapters.acp import messages as acp
from acpfsm.adapters.acp.process import AgentProcess, ShutdownPolicy, open_agent_process
from acpfsm.adapters.errors import AcpfsmError

__all__ = [
    "DEFAULT_LONG_PROMPT",
    "DEFAULT_PROMPT",
    "DESCRIPTION",
    "CheckResult",
    "ConformReport",
    "Status",
    "add_arguments",
    "main",
    "render_junit",
    "render_table",
    "run",
    "run_battery",
]

DESCRIPTION = (
    "Run the ACP conformance battery against an agent started as AGENT_COMMAND [ARGS...] "
    "(put it after --). Each check passes, fails (with evidence) or is not applicable. "
    "Exit 0 when nothing failed, 1 otherwise, 2 on a usage error."
)

DEFAULT_TIMEOUT = 30.0
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
    checks: list[CheckResult] = []
    seconds: float = 0.0

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


def _na(detail: str) -> _Verdict:
    return _Verdict(Status.NA, detail)


def _excerpt(lines: list[str]) -> list[str]:
    """The first and last lines of a check's exchange (the middle elided)."""
    if len(lines) <= _EVIDENCE_LINES:
        return list(lines)
    head, tail = 4, _EVIDENCE_LINES - 5
    return [*lines[:head], f"… {len(lines) - head - tail} more line(s) …", *lines[-tail:]]


def _short(value: Any, limit: int = _EVIDENCE_CHARS) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------- the wire


class AgentGone(AcpfsmError):
    """The agent's stdout ended (it exited or closed it)."""


@dataclass(slots=True)
class _Reply:
    result: Any = None
    error: dict[str, Any] | None = None
    raw: bytes = b""
    at: float = 0.0

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
        except msgspec.DecodeError:
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
                self.notes.append(_Note(self._now(), method, message.get("params"), line))
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
                kinds = [
                    (o.get("kind", ""), o.get("optionId")) for o in options if isinstance(o, dict)
                ]
                chosen = next((oid for kind, oid in kinds if kind == "reject_once"), None) or next(
                    (oid for kind, oid in kinds if str(kind).startswith("reject")), None
                )
            outcome: dict[str, Any] = (
                {"outcome": "selected", "optionId": chosen}
                if chosen is not None
                else {"outcome": "cancelled"}
            )
            await self._send({"jsonrpc": "2.0", "id": request_id, "result": {"outcome": outcome}})
        else:
            await self._send(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "error": {
                        "code": -32601,
                        "message": "Method not found",
                        "data": {"method": method},
                    },
                }
            )

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


# --------------------------------------------------------------------------- the battery


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


_KNOWN_UPDATE_KINDS = frozenset(
    {
        "user_message_chunk",
        "agent_message_chunk",
        "agent_thought_chunk",
        "tool_call",
        "tool_call_update",
        "plan",
        "available_commands_update",
        "current_mode_update",
        "config_option_update",
        "session_info_update",
        "usage_update",
    }
)


def _lifecycle_after_load_error(error: BaseException | str, session_id: str) -> tuple[str, str]:
    """``(classification, what the SessionInit chart does next)`` for a session/load error."""
    from acpfsm.adapters.classify import Call, classify_error
    from acpfsm.statecharts import SessionInit

    cls = classify_error(error, call=Call.SESSION_LOAD, loading_session_id=session_id)
    init = SessionInit()
    init.fire("stream_ready")
    init.fire("initialize_succeeded", native_session_resume=True, prior_session_id=session_id)
    init.fire("load_failed", error_class=cls.kind)
    if init.leaf == "creating":
        what = "the lifecycle falls back to session/new"
    elif init.leaf == "failed":
        what = "the lifecycle fails the session init and keeps the ACP session id"
    else:  # pragma: no cover - the chart changed
        what = f"the SessionInit chart goes to {init.leaf}"
    return str(cls.kind), what


def _load_error(reply: _Reply) -> BaseException:
    from acpfsm.adapters.errors import AgentRequestError

    error = reply.error or {}
    code = reply.code if reply.code is not None else 0
    return AgentRequestError(
        code, str(error.get("message", "")), error.get("data"), method="session/load"
    )


def _select_options(config_options: Any, category: str) -> list[dict[str, Any]]:
    if not isinstance(config_options, list):
        return []
    return [
        o
        for o in config_options
        if isinstance(o, dict) and o.get("category") == category and o.get("type") == "select"
    ]


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


class _Battery:
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
        self.wire: _Wire | None = None
        self.init: dict[str, Any] | None = None
        self.session_id: str | None = None
        self.session: dict[str, Any] = {}
        self.session_blocked = "no session"
        self.turn_ok = False
        self.turn_blocked = "no prompt turn"

    # -- plumbing
    def _record(self, result: CheckResult) -> None:
        self.report.checks.append(result)
        if self.echo is not None:
            self.echo(result)

    async def check(
        self, check_id: str, title: str, body: Callable[[], Awaitable[_Verdict]]
    ) -> CheckResult:
        wire = self.wire
        mark = len(wire.transcript) if wire is not None else 0
        started = time.monotonic()
        verdict: _Verdict | None = None
        with anyio.move_on_after(self.timeout) as scope:
            try:
                verdict = await body()
            except AgentGone:
                assert wire is not None
                verdict = _fail(f"the agent is gone: {await wire.gone_text()}")
        if verdict is None or scope.cancelled_caught:
            verdict = _fail(f"timed out after {self.timeout:g} s: the agent did not answer")
        evidence = verdict.evidence
        if evidence is None and verdict.status is Status.FAIL and wire is not None:
            evidence = _excerpt(wire.transcript[mark:])
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

    def _wire(self) -> _Wire:
        assert self.wire is not None
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
            inherit_env=tuple(os.environ),
            shutdown=ShutdownPolicy(stdin_close_wait=1.0, term_wait=2.0, kill_wait=2.0),
        )

    async def _main_process(self) -> None:
        try:
            async with self._open() as process, anyio.create_task_group() as tg:
                self.wire = _Wire(process)
                await tg.start(self.wire.serve)
                await self._main_checks()
                tg.cancel_scope.cancel()
        except AcpfsmError as exc:  # the agent could not be started
            if self.report.checks:
                raise
            self.skip("initialize", "initialize (protocol v1)", Status.FAIL, str(exc))
            for check_id, title, _ in self._rest():
                self.skip(check_id, title, Status.NA, "the agent could not be started")

    def _rest(self) -> list[tuple[str, str, Callable[[], Awaitable[_Verdict]]]]:
        return [
            ("capabilities", "advertised capabilities", self._capabilities),
            ("session_new", "session/new", self._session_new),
            ("unknown_method", "unknown method → -32601", self._unknown_method),
            ("load_unknown", "session/load of an unknown session", self._load_unknown),
            ("prompt_turn", "prompt turn and stopReason", self._prompt_turn),
            ("load_known", "session/load of a known session", self._load_known),
            ("cancel", "session/cancel → stopReason cancelled", self._cancel),
            ("steer", "prompt queueing for steer", self._steer),
            ("set_mode", "mode selection (session/set_mode)", self._set_mode),
            ("config_mode", "mode selection (config option)", self._config_mode),
            ("config_model", "model selection (config option)", self._config_model),
            ("legacy_set_model", "legacy session/set_model", self._legacy_set_model),
            ("malformed_input", "malformed input survived", self._malformed_input),
            ("stdout_clean", "only JSON-RPC on stdout", self._stdout_clean),
            ("stdin_close", "exit on stdin close", self._stdin_close),
        ]

    async def _main_checks(self) -> None:
        result = await self.check("initialize", "initialize (protocol v1)", self._initialize)
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

    # -- checks on the main process
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
        info = result.get("agentInfo") if isinstance(result.get("agentInfo"), dict) else {}
        assert isinstance(info, dict)
        name = str(info.get("name", "")) or "(no agentInfo)"
        version_text = str(info.get("version", ""))
        self.report.agent = f"{name} {version_text}".strip()
        return _pass(f"protocolVersion 1 in {reply.at:.2f} s, agent {self.report.agent}")

    def _caps(self) -> dict[str, Any]:
        caps = (self.init or {}).get("agentCapabilities")
        return caps if isinstance(caps, dict) else {}

    def _queueing(self) -> bool:
        meta = self._caps().get("_meta")
        claude = meta.get("claudeCode") if isinstance(meta, dict) else None
        return isinstance(claude, dict) and claude.get("promptQueueing") is True

    async def _capabilities(self) -> _Verdict:
        caps = self._caps()
        prompt = (
            caps.get("promptCapabilities")
            if isinstance(caps.get("promptCapabilities"), dict)
            else {}
        )
        assert isinstance(prompt, dict)
        media = [k for k in ("image", "audio", "embeddedContext") if prompt.get(k)]
        auth = (self.init or {}).get("authMethods") or []
        auth_ids = [str(a.get("id")) for a in auth if isinstance(a, dict)]
        parts = [
            f"loadSession {json.dumps(bool(caps.get('loadSession')))}",
            f"prompt {'+'.join(media) or 'text only'}",
            f"promptQueueing {json.dumps(self._queueing())}",
            f"authMethods [{', '.join(auth_ids)}]",
        ]
        session_caps = caps.get("sessionCapabilities")
        if isinstance(session_caps, dict) and session_caps:
            parts.append(f"session {'/'.join(sorted(session_caps))}")
        return _pass("; ".join(parts))

    def _auth_reason(self, reply: _Reply, what: str) -> str:
        auth = (self.init or {}).get("authMethods") or []
        ids = ", ".join(str(a.get("id")) for a in auth if isinstance(a, dict)) or "none"
        return (
            f"{what} needs authentication ({reply.describe_error()}; authMethods: {ids}); "
            f"run with credentials to check it"
        )

    async def _session_new(self) -> _Verdict:
        wire = self._wire()
        reply = await wire.request("session/new", {"cwd": str(self.workspace), "mcpServers": []})
        if reply.code == -32000:
            self.session_blocked = "session/new needs authentication"
            return _na(self._auth_reason(reply, "session/new"))
        if reply.error is not None:
            self.session_blocked = "session/new failed"
            return _fail(f"session/new answered an error: {reply.describe_error()}")
        result = reply.result
        problem = _decode("session/new", result)
        session_id = result.get("sessionId") if isinstance(result, dict) else None
        if problem or not isinstance(session_id, str) or not session_id:
            self.session_blocked = "session/new answered no usable session"
            return _fail(f"the session/new result does not fit ACP v1: {problem or 'no sessionId'}")
        assert isinstance(result, dict)
        self.session_id = session_id
        self.session = result
        modes = result.get("modes") or {}
        mode_ids = [m.get("id") for m in modes.get("availableModes", []) if isinstance(m, dict)]
        options = [o.get("id") for o in result.get("configOptions") or [] if isinstance(o, dict)]
        models = result.get("models") or {}
        model_ids = [
            m.get("modelId") for m in models.get("availableModels", []) if isinstance(m, dict)
        ]
        parts = [f"sessionId {session_id}"]
        if mode_ids:
            parts.append(f"modes [{', '.join(map(str, mode_ids))}]")
        if options:
            parts.append(f"configOptions [{', '.join(map(str, options))}]")
        if model_ids:
            parts.append(f"legacy models [{', '.join(map(str, model_ids))}]")
        return _pass("; ".join(parts))

    async def _unknown_method(self) -> _Verdict:
        reply = await self._wire().request(UNKNOWN_METHOD, {})
        if reply.code == -32601:
            return _pass(f"answered {reply.describe_error()}")
        if reply.error is not None:
            return _fail(f"expected -32601, got {reply.describe_error()}")
        return _fail(f"expected -32601, got a result: {_short(reply.result, 200)}")

    async def _load_unknown(self) -> _Verdict:
        unknown = str(uuid.uuid4())
        if not self._caps().get("loadSession"):
            from acpfsm.adapters.acp.stdio import LOAD_UNSUPPORTED_MESSAGE
            from acpfsm.adapters.errors import LocalProtocolError

            kind, what = _lifecycle_after_load_error(
                LocalProtocolError(LOAD_UNSUPPORTED_MESSAGE), unknown
            )
            return _na(
                f"loadSession not advertised: acpfsm never sends session/load ({kind}: {what})"
            )
        reply = await self._wire().request(
            "session/load", {"sessionId": unknown, "cwd": str(self.workspace), "mcpServers": []}
        )
        if reply.error is None:
            return _fail(
                f"session/load of the unknown id {unknown} succeeded: {_short(reply.result, 200)}"
            )
        kind, what = _lifecycle_after_load_error(_load_error(reply), unknown)
        detail = f"{reply.describe_error()} → {kind}: {what}"
        if reply.code == -32000:
            return _na(f"needs authentication: {detail}")
        return _pass(detail)

    async def _turn(self, text: str) -> tuple[_Pending, float]:
        wire = self._wire()
        assert self.session_id is not None
        started = wire._now()
        pending = await wire.start_request(
            "session/prompt",
            {"sessionId": self.session_id, "prompt": [{"type": "text", "text": text}]},
        )
        return pending, started

    async def _prompt_turn(self) -> _Verdict:
        if self.session_id is None:
            self.turn_blocked = self.session_blocked
            return _na(self.session_blocked)
        wire = self._wire()
        pending, started = await self._turn(self.prompt)
        reply = await wire.wait(pending)
        notes = wire.updates(self.session_id, started, reply.at)
        if reply.code == -32000:
            self.turn_blocked = "the prompt needs authentication"
            return _na(self._auth_reason(reply, "session/prompt"))
        if reply.error is not None:
            self.turn_blocked = "the prompt turn failed"
            return _fail(f"session/prompt answered an error: {reply.describe_error()}")
        stop = reply.result.get("stopReason") if isinstance(reply.result, dict) else None
        if stop not in STOP_REASONS:
            self.turn_blocked = "the prompt turn failed"
            return _fail(f"stopReason {stop!r} is not one of {', '.join(sorted(STOP_REASONS))}")
        bad = _bad_updates(notes)
        if bad:
            return _fail(f"{len(bad)} session/update(s) do not fit ACP v1", bad[:_EVIDENCE_LINES])
        self.turn_ok = True
        kinds = sorted({_update_kind(n) for n in notes})
        return _pass(
            f"stopReason {stop} in {reply.at - started:.2f} s after {len(notes)} update(s) "
            f"({', '.join(kinds) or 'none'})"
        )

    async def _load_known(self) -> _Verdict:
        if self.session_id is None:
            return _na(self.session_blocked)
        if not self._caps().get("loadSession"):
            return _na("loadSession not advertised")
        wire = self._wire()
        started = wire._now()
        reply = await wire.request(
            "session/load",
            {"sessionId": self.session_id, "cwd": str(self.workspace), "mcpServers": []},
        )
        replayed = wire.updates(self.session_id, started, reply.at)
        if reply.error is not None:
            kind, what = _lifecycle_after_load_error(_load_error(reply), self.session_id)
            detail = f"{reply.describe_error()} → {kind}: {what}"
            if reply.code == -32000:
                return _na(f"needs authentication: {detail}")
            if not self.turn_ok:
                return _na(
                    f"the session never completed a turn ({self.turn_blocked}), so the agent "
                    f"may not have stored it: {detail}"
                )
            return _fail(f"session/load of the session just used failed: {detail}")
        problem = _decode("session/load", reply.result)
        if problem:
            return _fail(f"the session/load result does not fit ACP v1: {problem}")
        if self.turn_ok and not replayed:
            return _fail("the session had a completed turn but session/load replayed nothing")
        kinds = sorted({_update_kind(n) for n in replayed})
        return _pass(
            f"answered after replaying {len(replayed)} update(s) ({', '.join(kinds) or 'none'})"
        )

    async def _first_activity(self, pending: _Pending, started: float) -> bool:
        """Wait for the turn's first session/update; False when it was answered first."""
        wire = self._wire()
        assert self.session_id is not None
        while not pending.done.is_set():
            if wire.updates(self.session_id, started):
                return True
            await wire.changed()
        return False

    async def _cancel(self) -> _Verdict:
        if not self.turn_ok:
            return _na(self.turn_blocked)
        wire = self._wire()
        assert self.session_id is not None
        for _ in range(3):
            mark = len(wire.transcript)
            pending, started = await self._turn(self.long_prompt)
            if not await self._first_activity(pending, started):
                await wire.wait(pending)
                continue
            wire.cancelling = True
            try:
                cancelled_at = wire._now()
                await wire.notify("session/cancel", {"sessionId": self.session_id})
                reply = await wire.wait(pending)
            finally:
                wire.cancelling = False
            after = len(wire.updates(self.session_id, cancelled_at, reply.at))
            if reply.error is not None:
                return _fail(f"the cancelled prompt answered an error: {reply.describe_error()}")
            stop = reply.result.get("stopReason") if isinstance(reply.result, dict) else None
            took = reply.at - cancelled_at
            if stop == "cancelled":
                return _pass(f"stopReason cancelled {took:.2f} s after session/cancel")
            exchange = wire.transcript[mark:]
            sent = [line for line in exchange if '"method":"session/cancel"' in line]
            return _fail(
                f"stopReason {stop!r} {took:.2f} s after session/cancel "
                f"({after} update(s) in between)",
                [*exchange[:2], *sent[:1], f"… {after} session/update(s) …", exchange[-1]],
            )
        return _na("every turn ended before its first update, so no cancel could be sent")

    async def _steer(self) -> _Verdict:
        if not self.turn_ok:
            return _na(self.turn_blocked)
        if not self._queueing():
            return _na(
                "promptQueueing not advertised (_meta.claudeCode): acpfsm does not steer this "
                "agent (SteerUnsupported); a second prompt waits for the first"
            )
        wire = self._wire()
        for _ in range(3):
            first, started = await self._turn(self.long_prompt)
            if not await self._first_activity(first, started):
                await wire.wait(first)
                continue
            second, _ = await self._turn(self.prompt)
            a = await wire.wait(first)
            b = await wire.wait(second)
            for label, reply in (("first", a), ("second", b)):
                if reply.error is not None:
                    return _fail(f"the {label} prompt answered an error: {reply.describe_error()}")
                stop = reply.result.get("stopReason") if isinstance(reply.result, dict) else None
                if stop not in STOP_REASONS:
                    return _fail(f"the {label} prompt answered stopReason {stop!r}")
            if b.at < a.at:
                return _fail("the second prompt was answered before the first")
            return _pass(
                f"the first turn answered {a.result.get('stopReason')}, then the queued one "
                f"{b.result.get('stopReason')}"
            )
        return _na("every turn ended before its first update, so no steer could be sent")

    async def _set_mode(self) -> _Verdict:
        if self.session_id is None:
            return _na(self.session_blocked)
        modes = self.session.get("modes")
        if not isinstance(modes, dict) or not modes.get("availableModes"):
            return _na("no modes advertised by session/new")
        current = modes.get("currentModeId")
        ids = [str(m.get("id")) for m in modes["availableModes"] if isinstance(m, dict)]
        others = [m for m in ids if m != current]
        if not others:
            return _na(f"only one mode advertised ({current})")
        target = others[0]
        wire = self._wire()
        started = wire._now()
        reply = await wire.request(
            "session/set_mode", {"sessionId": self.session_id, "modeId": target}
        )
        if reply.error is not None:
            return _fail(f"set_mode {target!r} (advertised) answered {reply.describe_error()}")
        updates = [
            n
            for n in wire.updates(self.session_id, started)
            if _update_kind(n) == "current_mode_update"
        ]
        told = " with a current_mode_update" if updates else " (no current_mode_update)"
        await wire.request("session/set_mode", {"sessionId": self.session_id, "modeId": current})
        return _pass(f"{current} → {target} accepted{told}")

    async def _config_option(self, category: str) -> _Verdict:
        if self.session_id is None:
            return _na(self.session_blocked)
        options = _select_options(self.session.get("configOptions"), category)
        if not options:
            return _na(f"no select config option of category {category!r} advertised")
        option = options[0]
        current = str(option.get("currentValue"))
        others = [v for v in _option_values(option) if v != current]
        if not others:
            return _na(f"config option {option.get('id')!r} offers no other value than {current!r}")
        target = others[0]
        reply = await self._wire().request(
            "session/set_config_option",
            {"sessionId": self.session_id, "configId": option.get("id"), "value": target},
        )
        if reply.error is not None:
            return _fail(
                f"set_config_option {option.get('id')}={target!r} (advertised) answered "
                f"{reply.describe_error()}"
            )
        problem = _decode("session/set_config_option", reply.result)
        if problem:
            return _fail(f"the set_config_option result does not fit ACP v1: {problem}")
        after = _select_options((reply.result or {}).get("configOptions"), category)
        now = next(
            (str(o.get("currentValue")) for o in after if o.get("id") == option.get("id")), None
        )
        if now != target:
            return _fail(
                f"set_config_option {option.get('id')}={target!r} answered currentValue {now!r}"
            )
        await self._wire().request(
            "session/set_config_option",
            {"sessionId": self.session_id, "configId": option.get("id"), "value": current},
        )
        return _pass(f"{option.get('id')}: {current} → {target}, reflected in the answer")

    async def _config_mode(self) -> _Verdict:
        return await self._config_option("mode")

    async def _config_model(self) -> _Verdict:
        return await self._config_option("model")

    async def _legacy_set_model(self) -> _Verdict:
        if self.session_id is None:
            return _na(self.session_blocked)
        models = self.session.get("models")
        available = models.get("availableModels") if isinstance(models, dict) else None
        if not available:
            reply = await self._wire().request(
                "session/set_model", {"sessionId": self.session_id, "modelId": "acpfsm-conform"}
            )
            answer = reply.describe_error() if reply.error is not None else "a result"
            return _na(
                f"no legacy models advertised (session/set_model answered {answer}); model "
                f"selection goes through config options"
            )
        current = models.get("currentModelId") if isinstance(models, dict) else None
        ids = [str(m.get("modelId")) for m in available if isinstance(m, dict)]
        target = next((m for m in ids if m != current), ids[0] if ids else "")
        reply = await self._wire().request(
            "session/set_model", {"sessionId": self.session_id, "modelId": target}
        )
        if reply.error is not None:
            return _fail(f"set_model {target!r} (advertised) answered {reply.describe_error()}")
        return _pass(f"{current} → {target} accepted")

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
        title = "protocol version negotiation"
        try:
            async with self._open() as process, anyio.create_task_group() as tg:
                self.wire = _Wire(process)
                await tg.start(self.wire.serve)
                await self.check("version_negotiation", title, self._negotiation)
                tg.cancel_scope.cancel()
        except AcpfsmError as exc:
            self.skip("version_negotiation", title, Status.FAIL, str(exc))

    async def _negotiation(self) -> _Verdict:
        asked = 999
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
            return _pass(f"asked for {asked}: echoed {asked} (the agent claims to speak it)")
        v1 = " (acpfsm speaks it)" if version == acp.PROTOCOL_VERSION else ""
        return _pass(f"asked for {asked}: answered its latest, {version}{v1}")


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
) -> ConformReport:
    """Run every check against the agent ``argv``; ``echo`` sees each result as it is made.
    The agent works in ``workspace`` (default: a new temporary directory, removed after); a
    relative program path is taken from the current directory. Each check is bounded by
    ``check_timeout`` seconds."""
    if not argv:
        raise ValueError("no agent command")
    argv = _resolve_program(argv)
    own = workspace is None
    path = Path(tempfile.mkdtemp(prefix="acpfsm-conform-")) if own else Path(str(workspace))
    try:
        battery = _Battery(
            argv,
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


# --------------------------------------------------------------------------- output


def render_table(report: ConformReport, *, evidence: bool = True) -> str:
    counts = report.counts()
    head = (
        f"acpfsm conform: {' '.join(report.command)}"
        + (f" ({report.agent})" if report.agent else "")
        + f": {counts['pass']} pass, {counts['fail']} fail, {counts['n/a']} n/a "
        f"in {report.seconds:.1f} s"
    )
    rows = [("check", "result", "time", "detail")] + [
        (c.id, c.status.value, f"{c.seconds:.2f}s", c.detail) for c in report.checks
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [head, ""]
    for i, row in enumerate(rows):
        lines.append("  ".join(row[j].ljust(widths[j]) for j in range(3)) + "  " + row[3])
        if i == 0:
            lines.append("  ".join("-" * w for w in widths) + "  " + "-" * 6)
    if evidence:
        for c in report.failed:
            if c.evidence:
                lines += ["", f"{c.id}: evidence"] + [f"  {e}" for e in c.evidence]
    return "\n".join(lines)


def render_markdown(report: ConformReport) -> str:
    """The report as a Markdown table (what the README shows)."""
    counts = report.counts()
    lines = [
        f"`{' '.join(report.command)}`"
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
        help="the agent's working directory and session cwd (default: a new temporary "
        "directory; relative paths in ARGS resolve against it, so give absolute ones)",
    )
    parser.add_argument(
        "agent", nargs=argparse.REMAINDER, metavar="-- AGENT_COMMAND [ARGS...]",
        help="the agent to check, after --",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    argv = list(args.agent)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("acpfsm conform: give the agent command after --", file=sys.stderr)
        return 2
    if args.timeout <= 0:
        print("acpfsm conform: --timeout must be positive", file=sys.stderr)
        return 2

    def echo(result: CheckResult) -> None:
        if not args.json:
            print(
                f"  {result.status.value:<4} {result.id} ({result.seconds:.2f}s)", file=sys.stderr
            )

    battery = functools.partial(
        run_battery,
        argv,
        check_timeout=args.timeout,
        prompt=args.prompt,
        long_prompt=args.long_prompt,
        workspace=args.cwd,
        echo=echo,
    )
    report = anyio.run(battery)
    if args.junit_xml:
        Path(args.junit_xml).write_bytes(render_junit(report))
    if args.json:
        data = msgspec.to_builtins(report)
        data["ok"] = report.ok
        data["summary"] = report.counts()
        print(json.dumps(data, ensure_ascii=False))
    else:
        print(render_table(report))
    return 0 if report.ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="acpfsm conform", description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
