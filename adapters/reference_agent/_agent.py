"""The reference agent proper: JSON-RPC dispatch, sessions and scripted turns.

Theory of operation
-------------------
One reader loop decodes stdin lines and dispatches them in arrival order. Requests other
than ``session/prompt`` are answered inline (they never wait for the client), so their effects
are ordered exactly as the client sent them. Each ``session/prompt`` becomes a *turn*: a task
with its own cancel scope. ``session/cancel`` interrupts every live turn of the session with
``cancelled``; a second prompt on a busy session (prompt queueing, advertised as
``_meta.claudeCode.promptQueueing``) interrupts its predecessors with ``end_turn`` and starts
once their answers are queued, so both RPCs are answered, the predecessor first. A turn's
``session/update`` notifications are appended to the session file as they are sent, which
is what ``session/load`` replays after a restart.

Responses from the client (to ``session/request_permission`` and ``fs/*``) are routed back
by id to the waiting turn.
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import msgspec
from anyio.abc import TaskGroup
from anyio.lowlevel import checkpoint
from msgspec import UNSET, UnsetType

from . import _wire as w
from ._faults import Faults, other_rollout_id
from ._hostile import HOSTILE_FS_FAULTS, ProbeResult, run_probe, undecodable_requests
from ._io import LineReader, Outbox
from ._mcp import CONNECT_SECONDS, SessionMcp, clip, decode_arguments, parse_servers
from ._script import (
    DEFAULT_MODE,
    DEFAULT_MODEL,
    DEFAULT_THINKING,
    MODELS,
    MODES,
    THINKING_LEVELS,
    Directives,
    chunk_text,
    parse_directives,
    reply_for,
    thoughts_for,
)
from ._store import SessionState, SessionStore

__all__ = ["AgentConfig", "ReferenceAgent", "serve"]

log = logging.getLogger("acpfsm.reference_agent")

AUTH_METHOD_ID = "reference-login"
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|NONCE", re.IGNORECASE)
"""Names the ``leak_env`` fault prints."""
EOF_DRAIN_SECONDS = 1.0
"""At stdin EOF, how long queued output may take to drain before the process exits."""


@dataclass(frozen=True)
class AgentConfig:
    """How one agent process behaves."""

    faults: Faults = field(default_factory=Faults)
    delay: float = 0.002
    """Seconds before each streamed update of a turn (a directive can override it)."""
    sessions_dir: Path = field(default_factory=lambda: Path(".acpfsm-reference", "sessions"))
    max_line: int = 64 * 1024 * 1024
    """Longest accepted input line; a longer one is answered with a parse error."""
    version: str = "0"
    child_pid: int | None = None
    mcp_connect_seconds: float = CONNECT_SECONDS
    """How long an MCP server of a session may take to connect and list its tools."""


# ---------------------------------------------------------------------------------------
# Sessions and turns


class _Turn:
    def __init__(
        self,
        request_id: w.JsonId,
        number: int,
        directives: Directives,
        faults: Faults,
        delay: float,
    ) -> None:
        self.request_id = request_id
        self.number = number
        self.directives = directives
        self.faults = faults
        self.delay = delay
        self.scope = anyio.CancelScope()
        self.done = anyio.Event()
        self.stop: str | None = None
        """Set by an interruption: ``cancelled``, ``end_turn`` (steered) or ``request_cancelled``."""
        self.hanging = False
        self.open_tool: str | None = None

    def interrupt(self, stop: str, *, is_cancel: bool) -> bool:
        if self.stop is not None or self.hanging or self.done.is_set():
            return False
        if is_cancel and "ignore_cancel" in self.faults:
            log.info("turn %s ignores %s (fault ignore_cancel)", self.request_id, stop)
            return False
        self.stop = stop
        self.scope.cancel()
        return True


@dataclass
class _Session:
    id: str
    cwd: str
    state: SessionState
    live: list[_Turn] = field(default_factory=list)
    turns: int = 0
    titled: bool = False
    always_allow: set[str] = field(default_factory=set)
    always_reject: set[str] = field(default_factory=set)
    mcp: SessionMcp | None = None


@dataclass
class _Pending:
    event: anyio.Event = field(default_factory=anyio.Event)
    result: msgspec.Raw | None = None
    error: msgspec.Raw | None = None


def _options(table: tuple[tuple[str, str, str], ...]) -> list[w.SelectOption]:
    return [w.SelectOption(value=v, name=n, description=d) for v, n, d in table]


def _config_options(state: SessionState) -> list[w.ConfigOption]:
    return [
        w.ConfigOption(
            id="mode",
            name="Mode",
            description="How the agent works",
            category="mode",
            current_value=state.mode_id,
            options=_options(MODES),
        ),
        w.ConfigOption(
            id="model",
            name="Model",
            description="Which reference model answers",
            category="model",
            current_value=state.model_id,
            options=_options(MODELS),
        ),
        w.ConfigOption(
            id="thinking",
            name="Thinking",
            description="How much reasoning is shown",
            category="thought_level",
            current_value=state.thinking,
            options=_options(THINKING_LEVELS),
        ),
    ]


def _mode_state(state: SessionState) -> w.ModeState:
    return w.ModeState(
        current_mode_id=state.mode_id,
        available_modes=[w.ModeInfo(id=i, name=n, description=d) for i, n, d in MODES],
    )


def _model_state(state: SessionState) -> w.ModelState:
    return w.ModelState(
        current_model_id=state.model_id,
        available_models=[w.ModelInfo(model_id=i, name=n, description=d) for i, n, d in MODELS],
    )


def _check_cwd(cwd: str) -> None:
    if not os.path.isabs(cwd):
        raise w.RpcError(
            -32602,
            f"Invalid params: `cwd` must be an absolute path, but received: {cwd}",
            {"cwd": cwd},
        )


def _block_note(block: w.Block) -> str | None:
    if block.type == "text":
        return None
    if block.type in ("image", "audio"):
        size = len(block.data) * 3 // 4
        what = "an image" if block.type == "image" else "an audio clip"
        return f"Received {what} ({block.mime_type or 'unknown type'}, about {size} bytes)."
    if block.type == "resource_link":
        return f"Received a link to {block.uri or block.name or 'a resource'}."
    if block.type == "resource":
        uri = block.resource.get("uri", "an embedded resource")
        return f"Received the embedded resource {uri}."
    return f"Ignored a {block.type or 'typeless'} block."


_PERMISSION_OPTIONS = [
    {"optionId": "allow_once", "name": "Allow once", "kind": "allow_once"},
    {"optionId": "allow_always", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"},
    {"optionId": "reject_always", "name": "Always reject", "kind": "reject_always"},
]

_REJECT_FIRST = [_PERMISSION_OPTIONS[i] for i in (2, 3, 0, 1)]

_COMMANDS = [
    w.CommandInfo(name="help", description="List the reference agent's prompt directives"),
]


# ---------------------------------------------------------------------------------------
# The agent


class ReferenceAgent:
    """Dispatches decoded lines; owns sessions, turns and outstanding client requests."""

    def __init__(
        self, config: AgentConfig, outbox: Outbox, task_group: TaskGroup, *, stdin_fd: int = 0
    ) -> None:
        self._config = config
        self._stdin_fd = stdin_fd
        self._faults = config.faults
        self._out = outbox
        self._tg = task_group
        self._store = SessionStore(config.sessions_dir)
        self._sessions: dict[str, _Session] = {}
        self._pending: dict[int, _Pending] = {}
        self._prompts: dict[w.JsonId, _Turn] = {}
        self._next_id = 0
        self._client = w.ClientCapabilities()
        self._authenticated = "auth_required" not in self._faults
        self._requests: dict[str, Callable[[w.JsonId, msgspec.Raw | UnsetType], Awaitable[None]]]
        self._requests = {
            "initialize": self._initialize,
            "authenticate": self._authenticate,
            "session/new": self._new_session,
            "session/load": self._load_session,
            "session/prompt": self._prompt,
            "session/set_mode": self._set_mode,
            "session/set_config_option": self._set_config_option,
            "session/set_model": self._set_model,
        }

    # -- plumbing -------------------------------------------------------------------------

    async def _send(self, message: object) -> None:
        await self._out.send(w.encode(message))

    async def _result(self, rid: w.JsonId, result: object) -> None:
        await self._send(w.ResultMessage(id=rid, result=result))

    async def _error(self, rid: w.JsonId, error: w.RpcError) -> None:
        await self._send(w.ErrorMessage(id=rid, error=error.body()))

    async def _notify_update(self, session_id: str, update: msgspec.Raw) -> None:
        params = w.SessionUpdateParams(session_id=session_id, update=update)
        await self._send(w.NotificationMessage(method="session/update", params=params))

    async def _update(self, session: _Session, update: Any, *, persist: bool = True) -> None:
        raw = w.encode_update(update)
        await self._notify_update(session.id, raw)
        if persist:
            self._store.append_update(session.id, raw)

    async def _call(self, method: str, params: object) -> msgspec.Raw:
        """Send a request to the client and wait for its answer (cancellable)."""
        rid = self._next_id
        self._next_id += 1
        slot = _Pending()
        self._pending[rid] = slot
        try:
            await self._send(w.RequestMessage(id=rid, method=method, params=params))
            await slot.event.wait()
        finally:
            self._pending.pop(rid, None)
        if slot.error is not None:
            try:
                body = msgspec.json.decode(slot.error, type=w.ErrorBody)
            except msgspec.DecodeError:
                body = w.ErrorBody(code=-32603, message=bytes(slot.error).decode(errors="replace"))
            raise w.RpcError(body.code, body.message, body.data)
        return slot.result if slot.result is not None else msgspec.Raw(b"null")

    # -- dispatch -------------------------------------------------------------------------

    async def handle_line(self, line: bytes | None) -> None:
        if line is None:
            await self._error(None, w.RpcError.parse_error("line too long"))
            return
        if not line.strip():
            return
        try:
            env = w.decode_envelope(line)
        except msgspec.ValidationError as exc:
            log.warning("invalid request: %s", exc)
            await self._error(None, w.RpcError.invalid_request(str(exc)))
            return
        except msgspec.DecodeError as exc:
            log.warning("parse error: %s", exc)
            await self._error(None, w.RpcError.parse_error(str(exc)))
            return
        if log.isEnabledFor(logging.DEBUG):
            log.debug("<< %s", line[:500].decode(errors="replace"))
        if not isinstance(env.method, UnsetType):
            if isinstance(env.id, UnsetType):
                self._notification(env.method, env.params)
            else:
                await self._request(env.id, env.method, env.params)
        elif not isinstance(env.id, UnsetType) and (
            not isinstance(env.result, UnsetType) or not isinstance(env.error, UnsetType)
        ):
            self._response(env)
        else:
            rid = None if isinstance(env.id, UnsetType) else env.id
            await self._error(rid, w.RpcError.invalid_request("neither a request nor a response"))

    async def _request(self, rid: w.JsonId, method: str, params: msgspec.Raw | UnsetType) -> None:
        handler = self._requests.get(method)
        try:
            if handler is None:
                raise w.RpcError.method_not_found(method)
            await handler(rid, params)
        except w.RpcError as exc:
            log.info("%s -> error %s %s", method, exc.code, exc.message)
            await self._error(rid, exc)

    def _notification(self, method: str, params: msgspec.Raw | UnsetType) -> None:
        if method == "session/cancel":
            try:
                p = w.decode_params(params, w.SessionIdParams)
            except w.RpcError as exc:
                log.warning("bad session/cancel ignored: %s", exc.data)
                return
            session = self._sessions.get(p.session_id)
            if session is None:
                log.info("session/cancel for unknown session %s ignored", p.session_id)
                return
            for turn in list(session.live):
                if turn.interrupt("cancelled", is_cancel=True):
                    log.info("turn %s cancelled", turn.request_id)
        elif method == "$/cancel_request":
            try:
                c = w.decode_params(params, w.CancelRequestParams)
            except w.RpcError as exc:
                log.warning("bad $/cancel_request ignored: %s", exc.data)
                return
            target = self._prompts.get(c.request_id)
            if target is not None:
                target.interrupt("request_cancelled", is_cancel=True)
        else:
            log.debug("notification %s ignored", method)

    def _response(self, env: w.Envelope) -> None:
        slot = self._pending.get(env.id) if isinstance(env.id, int) else None
        if slot is None:
            log.warning("response to unknown request id %r ignored", env.id)
            return
        if not isinstance(env.error, UnsetType):
            slot.error = env.error
        elif not isinstance(env.result, UnsetType):
            slot.result = env.result
        slot.event.set()

    # -- requests -------------------------------------------------------------------------

    def _require_auth(self) -> None:
        if not self._authenticated:
            raise w.RpcError.auth_required()

    def _session(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise w.RpcError.resource_not_found(session_id)
        return session

    async def _initialize(self, rid: w.JsonId, params: msgspec.Raw | UnsetType) -> None:
        p = w.decode_params(params, w.InitializeParams)
        if "no_initialize" in self._faults:
            log.info("initialize %r left unanswered (fault no_initialize)", rid)
            return
        self._client = p.client_capabilities
        version = p.protocol_version if "echo_version" in self._faults else w.PROTOCOL_VERSION
        if p.protocol_version != w.PROTOCOL_VERSION:
            log.info("client asked for protocol %s; answering %s", p.protocol_version, version)
        caps_meta: dict[str, Any] | UnsetType = (
            UNSET if "no_queueing" in self._faults else {"claudeCode": {"promptQueueing": True}}
        )
        auth = (
            [
                w.AuthMethod(
                    id=AUTH_METHOD_ID,
                    name="Reference login",
                    description="Always succeeds (fault auth_required)",
                )
            ]
            if "auth_required" in self._faults
            else []
        )
        meta: dict[str, Any] = {"pid": os.getpid(), "faults": self._faults.describe()}
        if self._config.child_pid is not None:
            meta["childPid"] = self._config.child_pid
        result = w.InitializeResult(
            protocol_version=version,
            agent_capabilities=w.AgentCapabilities(
                load_session="no_load" not in self._faults,
                mcp_capabilities=w.McpCapabilities(http="no_mcp_http" not in self._faults),
                meta=caps_meta,
            ),
            auth_methods=auth,
            agent_info=w.Implementation(
                name=w.AGENT_NAME, title="acpfsm reference agent", version=self._config.version
            ),
            meta={"acpfsmReference": meta},
        )
        await self._result(rid, result)

    async def _authenticate(self, rid: w.JsonId, params: msgspec.Raw | UnsetType) -> None:
        p = w.decode_params(params, w.AuthenticateParams)
        if "auth_required" not in self._faults or p.method_id != AUTH_METHOD_ID:
            raise w.RpcError(
                -32602,
                f"Invalid params: Unsupported authentication method: {p.method_id}",
                {"methodId": p.method_id},
            )
        self._authenticated = True
        await self._result(rid, {})

    async def _new_session(self, rid: w.JsonId, params: msgspec.Raw | UnsetType) -> None:
        p = w.decode_params(params, w.NewSessionParams)
        self._require_auth()
        _check_cwd(p.cwd)
        state = SessionState(
            mode_id=DEFAULT_MODE, model_id=DEFAULT_MODEL, thinking=DEFAULT_THINKING
        )
        session = _Session(id=str(uuid.uuid4()), cwd=p.cwd, state=state)
        self._sessions[session.id] = session
        self._store.create(session.id, session.cwd, state)
        log.info("session/new %s (cwd %s)", session.id, session.cwd)
        await self._result(
            rid,
            w.NewSessionResult(
                session_id=session.id,
                modes=_mode_state(state),
                models=_model_state(state),
                config_options=_config_options(state),
            ),
        )
        await self._update(
            session, w.AvailableCommandsUpdate(available_commands=_COMMANDS), persist=False
        )
        self._connect_mcp(session, p.mcp_servers)

    async def _load_session(self, rid: w.JsonId, params: msgspec.Raw | UnsetType) -> None:
        if "no_load" in self._faults or "load_method_not_found" in self._faults:
            raise w.RpcError.method_not_found("session/load")
        p = w.decode_params(params, w.LoadSessionParams)
        self._require_auth()
        if "load_auth" in self._faults:
            raise w.RpcError.auth_required()
        _check_cwd(p.cwd)
        sid = p.session_id
        if "load_not_found" in self._faults:
            raise w.RpcError.resource_not_found(sid)
        if "load_rollout_missing" in self._faults:
            raise w.RpcError.internal(f"no rollout found for thread id {sid}")
        if "load_rollout_other" in self._faults:
            raise w.RpcError.internal(f"no rollout found for thread id {other_rollout_id(sid)}")
        if "load_internal" in self._faults:
            raise w.RpcError.internal("Session not found")
        stored = self._store.load(sid)
        if stored is None:
            raise w.RpcError.resource_not_found(sid)
        session = self._sessions.get(sid)
        if session is None:
            state = stored.state or SessionState(
                mode_id=DEFAULT_MODE, model_id=DEFAULT_MODEL, thinking=DEFAULT_THINKING
            )
            session = _Session(id=sid, cwd=p.cwd, state=state, titled=bool(stored.updates))
            session.turns = stored.turns
            self._sessions[sid] = session
        log.info("session/load %s: replaying %d updates", sid, len(stored.updates))
        for update in stored.updates:
            await self._notify_update(sid, update)
        await self._result(
            rid,
            w.LoadSessionResult(
                modes=_mode_state(session.state),
                models=_model_state(session.state),
                config_options=_config_options(session.state),
            ),
        )
        self._connect_mcp(session, p.mcp_servers)

    def _connect_mcp(self, session: _Session, servers: list[Any]) -> None:
        """Connect (in the background, once the session is answered) to the MCP servers the
        session is given, replacing those it had; their names and kinds are logged, never
        their headers."""
        if session.mcp is not None:
            session.mcp.close()
            session.mcp = None
        configs = parse_servers(servers)
        if not configs:
            return
        log.info(
            "session %s: MCP servers %s",
            session.id,
            ", ".join(f"{c.name} ({c.kind})" for c in configs),
        )
        session.mcp = SessionMcp(configs, self._tg, self._config.mcp_connect_seconds)

    async def _set_mode(self, rid: w.JsonId, params: msgspec.Raw | UnsetType) -> None:
        p = w.decode_params(params, w.SetModeParams)
        session = self._session(p.session_id)
        if p.mode_id not in {m[0] for m in MODES}:
            raise w.RpcError(-32602, f"Invalid params: Invalid Mode: {p.mode_id}")
        await self._change(session, mode_id=p.mode_id)
        await self._result(rid, {})

    async def _set_model(self, rid: w.JsonId, params: msgspec.Raw | UnsetType) -> None:
        p = w.decode_params(params, w.SetModelParams)
        session = self._session(p.session_id)
        if p.model_id not in {m[0] for m in MODELS}:
            raise w.RpcError(-32602, f"Invalid params: Invalid model: {p.model_id}")
        await self._change(session, model_id=p.model_id)
        await self._result(rid, {})

    async def _set_config_option(self, rid: w.JsonId, params: msgspec.Raw | UnsetType) -> None:
        p = w.decode_params(params, w.SetConfigOptionParams)
        session = self._session(p.session_id)
        tables = {"mode": MODES, "model": MODELS, "thinking": THINKING_LEVELS}
        table = tables.get(p.config_id)
        if table is None:
            raise w.RpcError(
                -32602,
                f"Invalid params: Unknown config option: {p.config_id}",
                {"configId": p.config_id},
            )
        if not isinstance(p.value, str) or p.value not in {t[0] for t in table}:
            raise w.RpcError(
                -32602,
                f"Invalid params: Invalid value for config option {p.config_id}: {p.value}",
            )
        if p.config_id == "mode":
            await self._change(session, mode_id=p.value)
        elif p.config_id == "model":
            await self._change(session, model_id=p.value)
        else:
            await self._change(session, thinking=p.value)
        await self._result(
            rid, w.ConfigOptionsResult(config_options=_config_options(session.state))
        )

    async def _change(
        self,
        session: _Session,
        *,
        mode_id: str | None = None,
        model_id: str | None = None,
        thinking: str | None = None,
    ) -> None:
        old = session.state
        session.state = SessionState(
            mode_id=mode_id or old.mode_id,
            model_id=model_id or old.model_id,
            thinking=thinking or old.thinking,
        )
        self._store.save_state(session.id, session.state)
        if mode_id is not None:
            await self._update(session, w.CurrentModeUpdate(current_mode_id=mode_id), persist=False)
        await self._update(
            session,
            w.ConfigOptionUpdate(config_options=_config_options(session.state)),
            persist=False,
        )

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


async def serve(config: AgentConfig, *, stdin_fd: int = 0, stdout_fd: int = 1) -> int:
    """Run the agent on two file descriptors until stdin ends; return the exit status.

    Works under trio and asyncio. ``slow_start`` sleeps before stdin is read; ``ignore_eof``
    keeps the process alive after stdin ends (until a signal); ``exit_at_startup`` returns its
    status before anything is read.
    """
    if "leak_env" in config.faults:
        leaked = [f"{k}={v}" for k, v in sorted(os.environ.items()) if _SECRET_NAME.search(k)]
        os.write(2, "".join(f"reference-agent env: {item}\n" for item in leaked).encode())
    if "exit_at_startup" in config.faults:
        code = int(config.faults.number("exit_at_startup"))
        log.error("exiting at startup with status %d (fault exit_at_startup)", code)
        return code
    if "slow_start" in config.faults:
        seconds = config.faults.number("slow_start")
        log.info("slow start: sleeping %.3gs before reading stdin", seconds)
        await anyio.sleep(seconds)
    async with anyio.create_task_group() as tg:

        def peer_gone() -> None:
            log.info("stdout is broken (client went away); exiting")
            tg.cancel_scope.cancel()

        outbox = Outbox(stdout_fd, on_peer_gone=peer_gone)
        tg.start_soon(outbox.run)
        async with anyio.create_task_group() as turns:
            agent = ReferenceAgent(config, outbox, turns, stdin_fd=stdin_fd)
            reader = LineReader(stdin_fd, max_line=config.max_line)
            async with contextlib.aclosing(reader.lines()) as lines:
                async for line in lines:
                    await agent.handle_line(line)
            log.info("stdin closed")
            if "ignore_eof" in config.faults:
                log.info("ignoring stdin EOF (fault ignore_eof); waiting for a signal")
                await anyio.sleep_forever()
            turns.cancel_scope.cancel()
        # Answers already queued still reach a client that reads on; a client that does
        # not read cannot hold the exit up for long.
        with anyio.move_on_after(EOF_DRAIN_SECONDS):
            await outbox.drain()
        tg.cancel_scope.cancel()
    return 0
