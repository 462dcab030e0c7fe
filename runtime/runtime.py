"""The :class:`Runtime` facade (kandev runtime/runtime.go and facade.go) and its session-manager
surface.

::

    async with Runtime(profiles=[...]) as rt:          # owns an anyio task group
        ref = await rt.launch(LaunchSpec(agent_profile_id="reference", executor_id="stdio",
                                         workspace=WorkspaceRef(path=...), prompt="..."))
        async with rt.subscribe_events(ref.id) as events:   # ends when the execution finishes
            async for event in events: ...
        await rt.resume(ref.id, "follow-up")                # waits for the turn
        await rt.stop(ref.id, "done")

Every method maps an unknown execution id to :class:`ExecutionNotFound` (kandev's facade did so
only for ``Stop`` and ``GetExecution``, H11).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import anyio
import anyio.abc
import msgspec

from acpfsm.adapters.acp.executor import StdioExecutor
from acpfsm.adapters.executor import AgentLaunch, Executor
from acpfsm.adapters.transport import AgentTransport, Attachment, PermissionPolicy
from acpfsm.statecharts import EngineName, default_engine

from .bus import EventBus, numbered_feed
from .checks import check_launch_spec, check_prompt
from .errors import (
    AcpfsmError,
    ExecutionAlreadyExists,
    ExecutionIdRequired,
    ExecutionNotFound,
    ExecutorError,
    ExecutorNotFound,
    LaunchSpecError,
    ProfileNotFound,
    Unsupported,
)
from .guard import GuardedExecutor
from .history import HistoryStore
from .hub import Subscription
from .mcp.execution import KANDEV_MCP_MODES, ExecutionMcp, RuntimeTools
from .mcp.tools import ToolSet
from .session import ExecutionSession
from .trace import Trace
from .turn import Turn
from .types import (
    PERMISSION_POLICIES,
    AgentProfile,
    Execution,
    ExecutionRef,
    LaunchSpec,
    PromptResult,
    Retention,
    Timeouts,
    WorkspaceRef,
)

if TYPE_CHECKING:  # the store's code is imported only by a Runtime given a store
    from .durable import DurableSubscription, StoreHealth
    from .persistence import Persistence
    from .store import ExecutionStore

__all__ = [
    "AGENT_ENV",
    "BUILTIN_PROFILES",
    "Runtime",
    "launch_spec_from_request",
    "reference_profile",
]

log = logging.getLogger("acpfsm.runtime")

MCP_MODES = KANDEV_MCP_MODES
LAUNCH_REQUEST_KEY = "launch_request"
DEFAULT_EXECUTOR_ID = "stdio"
"""The executor of a spec that names none, neither itself nor through its base request."""
_BASE_SPEC_FIELDS = ("agent_profile_id", "executor_id", "prompt", "prior_acp_session", "mcp_mode")
#: The base request's workspace keys (kandev ``LaunchRequest`` ``WorkspacePath``,
#: ``RepositoryID``, ``IsEphemeral``) and the :class:`WorkspaceRef` field each fills.
_BASE_WORKSPACE_FIELDS = {
    "workspace_path": "path",
    "repository_id": "repository_id",
    "is_ephemeral": "is_ephemeral",
}


def launch_spec_from_request(spec: LaunchSpec) -> LaunchSpec:
    """kandev's ``launchRequestFromSpec`` in Python terms: the spec actually launched.

    ``spec.metadata["launch_request"]``, when a mapping, is the base request: its keys become
    metadata, except those naming a typed spec field (``executor_id``, ``prompt``,
    ``prior_acp_session``, ``mcp_mode`` …) or a workspace field (``workspace_path``,
    ``repository_id``, ``is_ephemeral``), which fill that field only when the spec leaves it
    unset, as kandev overlays only the spec's non-zero fields (``is_ephemeral``: only the
    spec's ``True`` overrides). An executor named nowhere is :data:`DEFAULT_EXECUTOR_ID`. The
    spec's own metadata keys override the base, and the ``launch_request`` key itself is
    dropped. The MCP mode is recorded as metadata ``mcp_mode``. Unlike kandev's shallow copy
    (H11, KANDEV.md), nothing the caller passed is written to: the base mapping is copied."""
    if not isinstance(spec, LaunchSpec):
        raise LaunchSpecError(f"a LaunchSpec is needed, not {type(spec).__name__}")
    base = spec.metadata.get(LAUNCH_REQUEST_KEY) if isinstance(spec.metadata, Mapping) else None
    metadata: dict[str, Any] = dict(base) if isinstance(base, Mapping) else {}
    typed: dict[str, Any] = {}
    for name in _BASE_SPEC_FIELDS:
        if name in metadata:
            value = metadata.pop(name)
            if not getattr(spec, name) and value:
                typed[name] = str(value)
    workspace: dict[str, Any] = {}
    for key, field in _BASE_WORKSPACE_FIELDS.items():
        if key in metadata:
            value = metadata.pop(key)
            if not getattr(spec.workspace, field, None) and value:
                workspace[field] = True if field == "is_ephemeral" else str(value)
    if workspace and isinstance(spec.workspace, WorkspaceRef):
        typed["workspace"] = msgspec.structs.replace(spec.workspace, **workspace)
    if not typed.get("executor_id", spec.executor_id):
        typed["executor_id"] = DEFAULT_EXECUTOR_ID
    if isinstance(spec.metadata, Mapping):
        metadata.update((k, v) for k, v in spec.metadata.items() if k != LAUNCH_REQUEST_KEY)
    mcp_mode = typed.get("mcp_mode", spec.mcp_mode)
    if mcp_mode:
        metadata["mcp_mode"] = mcp_mode
    return msgspec.structs.replace(spec, metadata=metadata, **typed)


def reference_profile(*args: str, **overrides: Any) -> AgentProfile:
    """The embedded reference agent (no model, no credentials)."""
    fields: dict[str, Any] = {
        "id": "reference",
        "command": (sys.executable, "-m", "acpfsm.adapters.reference_agent", *args),
        "native_session_resume": True,
        "history_context_injection": False,
        "permission_policy": "allow_once",  # its tools only pretend; its writes stay inside
    }
    fields.update(overrides)
    return AgentProfile(**fields)


# What each built-in agent reads from its environment, passed through when set (beside the
# executor's base: the stdio executor's PATH, HOME and LANG).
NETWORK_ENV: tuple[str, ...] = (
    "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy",
    "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE",
)  # fmt: skip
"""Proxies and extra CA certificates: honoured by npx (which fetches the npm agents) and by
the agents themselves."""

CLAUDE_ENV: tuple[str, ...] = (
    "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_BASE_URL",
    "CLAUDE_CONFIG_DIR", "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "AWS_REGION",
    "AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
    "AWS_BEARER_TOKEN_BEDROCK", "ANTHROPIC_VERTEX_PROJECT_ID", "CLOUD_ML_REGION",
    "GOOGLE_APPLICATION_CREDENTIALS", "IS_SANDBOX",
)  # fmt: skip
"""Claude Code's credentials and provider selection (its environment-variable reference,
code.claude.com/docs/en/env-vars), and ``IS_SANDBOX``, without which the Claude adapters
refuse their permission-bypass mode as root (claude-agent-acp ``src/acp-agent.ts``)."""

CODEX_ENV: tuple[str, ...] = (
    "OPENAI_API_KEY", "CODEX_API_KEY", "OPENAI_BASE_URL", "CODEX_HOME", "NO_BROWSER",
)  # fmt: skip
"""codex-acp's API-key auth methods read ``CODEX_API_KEY`` and ``OPENAI_API_KEY``, and
``NO_BROWSER`` for the ChatGPT login (codex-acp ``src/codex_agent.rs``); Codex reads its
state from ``CODEX_HOME`` and an endpoint from ``OPENAI_BASE_URL``."""

GEMINI_ENV: tuple[str, ...] = (
    "GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION",
    "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_GCA", "GOOGLE_APPLICATION_CREDENTIALS",
)  # fmt: skip
"""Gemini CLI's auth methods: a Gemini API key, Vertex AI (project and location, or a Google
API key), Google login (gemini-cli ``packages/cli/src/config/auth.ts`` and its
authentication guide)."""

BUILTIN_PROFILES: tuple[AgentProfile, ...] = (
    reference_profile(),
    AgentProfile(
        id="claude-code-acp",
        command=("npx", "-y", "@zed-industries/claude-code-acp"),
        inherit_env=(*CLAUDE_ENV, *NETWORK_ENV),
        native_session_resume=True,
    ),
    AgentProfile(
        id="claude-agent-acp",
        command=("npx", "-y", "@agentclientprotocol/claude-agent-acp"),
        inherit_env=(*CLAUDE_ENV, *NETWORK_ENV),
        native_session_resume=True,
    ),
    AgentProfile(
        id="codex-acp",
        command=("npx", "-y", "@zed-industries/codex-acp"),
        inherit_env=(*CODEX_ENV, *NETWORK_ENV),
        native_session_resume=True,
    ),
    AgentProfile(
        id="gemini",
        command=("npx", "-y", "@google/gemini-cli", "--acp"),
        inherit_env=(*GEMINI_ENV, *NETWORK_ENV),
        native_session_resume=True,
    ),
)

AGENT_ENV: tuple[str, ...] = tuple(
    dict.fromkeys(name for profile in BUILTIN_PROFILES for name in profile.inherit_env)
)
"""Every variable a built-in profile passes through: what ``acpfsm conform`` gives an agent
it knows nothing about (beside ``PATH``, ``HOME`` and ``LANG``)."""


Opener = Callable[[AgentLaunch], AbstractAsyncContextManager[AgentTransport]]
"""Opens a transport to the execution's agent instead of its executor's ``open`` (a
reattach)."""


def agent_launch(
    execution_id: str, session_id: str, spec: LaunchSpec, profile: AgentProfile
) -> AgentLaunch:
    """What the executor is given to start the execution's agent."""
    return AgentLaunch(
        execution_id=execution_id,
        session_id=session_id,
        agent_id=profile.id,
        command=tuple(profile.command),
        workspace=spec.workspace.path,
        env=profile.launch_env(os.environ),
        task_id=str(spec.metadata.get("task_id", "")),
        mcp_mode=spec.mcp_mode,
    )


def make_session(
    rt: Runtime,
    launch: AgentLaunch,
    spec: LaunchSpec,
    profile: AgentProfile,
    executor: Executor,
    mcp: ExecutionMcp | None,
    opener: Opener | None,
) -> ExecutionSession:
    """An execution's session in ``rt``: its transport opened by ``opener`` when given (then
    without the execution's MCP side), else by the executor, through ``mcp`` when it has
    one. The executor is guarded: whatever its ``open`` raises is a launch error with the
    cause, and its close is bounded (a hung one is reported by :meth:`Runtime.stop`)."""
    execution_id = launch.execution_id
    guarded = GuardedExecutor(
        executor,
        spec.executor_id,
        close_bound=rt.timeouts.executor_close,
        stuck=lambda error: rt._stuck.__setitem__(execution_id, error),
    )

    def open_transport(policy: PermissionPolicy) -> AbstractAsyncContextManager[AgentTransport]:
        # the execution's own permission policy (its PermissionBroker) goes with the launch
        with_policy = dataclasses.replace(launch, permission_policy=policy)
        if opener is not None:
            return opener(with_policy)
        if mcp is not None:
            return mcp.open_transport(guarded, with_policy)
        return guarded.open(with_policy)

    return ExecutionSession(
        execution_id=launch.execution_id,
        session_id=launch.session_id,
        spec=spec,
        profile=profile,
        open_transport=open_transport,
        trace=rt.trace,
        timeouts=rt.timeouts,
        history=rt.history,
        shutting_down=lambda: rt._closing,
        engine=rt.engine,
        mcp=mcp,
        retention=rt.retention,
    )


class Runtime:
    """Launch, prompt, steer, cancel, stop and observe agent executions.

    ``profiles`` are added to (and override) the built-in ones; ``executors`` map executor ids
    to :class:`Executor` objects (``stdio`` is built in). ``trace_path`` appends every chart
    transition as JSONL; ``history_root`` enables the on-disk history store used for
    resume-context injection. ``engine`` runs the charts on acpfsm's compiled engine
    (``"compiled"``, the default) or on python-statemachine's own (``"reference"``); the
    environment variable ``ACPFSM_ENGINE`` sets the default.

    ``tool_sets`` are the app's MCP tools, one :class:`~acpfsm.runtime.mcp.ToolSet` per MCP
    mode: each execution serves its mode's tools to the agent (a tool server on loopback,
    offered to every session it opens) and answers agentctl's ``mcp.*`` requests from the
    mode's actions; see :meth:`set_mcp_mode`. Serving tools needs the ``acpfsm[mcp]`` extra.

    ``retention`` bounds what stays in memory (:class:`~acpfsm.runtime.Retention`), so a
    service that runs for days does not grow: ``trace.records`` keeps the last 10,000
    transitions (the trace file gets them all); each execution retains 1 MiB of its latest
    events for a late subscriber (told by an ``EventsTruncated`` marker what it missed) and
    lets one subscriber fall 16 MiB behind before cutting it off with
    :class:`SubscriberOverflow`.

    ``store`` (an :class:`~acpfsm.runtime.store.ExecutionStore`: ``SqliteStore``,
    ``PostgresStore``) makes the executions durable: each one's row and event log are kept
    there, ``async with`` recovers every stored execution before its body runs (reattached,
    or lost with its reason: :meth:`relaunch`), leaving it leaves the agents that can
    outlive the app running, and :meth:`subscribe` continues an event log across restarts.
    See :mod:`acpfsm.runtime.persistence`. ``bus``: every event, numbered, to other processes.
    """

    def __init__(
        self,
        *,
        profiles: Iterable[AgentProfile] = (),
        executors: Mapping[str, Executor] | None = None,
        timeouts: Timeouts | None = None,
        trace_path: str | Path | None = None,
        history_root: str | Path | None = None,
        engine: EngineName | None = None,
        tool_sets: Iterable[ToolSet] = (),
        retention: Retention | None = None,
        store: ExecutionStore | None = None,
        bus: EventBus | None = None,
    ) -> None:
        self.retention = retention or Retention()
        self.store, self.bus = store, bus
        self._persistence: Persistence | None = None
        self.profiles: dict[str, AgentProfile] = {p.id: p for p in BUILTIN_PROFILES}
        self.profiles.update({p.id: p for p in profiles})
        self.executors: dict[str, Executor] = {"stdio": StdioExecutor()}
        self.executors.update(executors or {})
        self.timeouts = timeouts or Timeouts()
        self.trace = Trace(trace_path, keep=self.retention.trace_records)
        self.history = HistoryStore(Path(history_root)) if history_root is not None else None
        self.engine: EngineName = engine or default_engine()
        self._sessions: dict[str, ExecutionSession] = {}
        self._by_task_session: dict[str, str] = {}
        self._stuck: dict[str, ExecutorError] = {}  # executors whose close was abandoned
        self._tg: anyio.abc.TaskGroup | None = None
        self._closing = False
        tool_sets = tuple(tool_sets)
        self.tools = RuntimeTools(tool_sets) if tool_sets else None
        self.mcp_modes = self.tools.modes if self.tools is not None else MCP_MODES
        """The modes :meth:`set_mcp_mode` and ``LaunchSpec.mcp_mode`` accept."""

    # ------------------------------------------------------------------ lifecycle --

    async def __aenter__(self) -> Self:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        if self.store is not None:
            from .persistence import Persistence

            persistence = Persistence(self, self.store)
            try:
                await persistence.open(self._tg)
            except BaseException:  # StoreLocked, StoreCorrupt …: raised as themselves
                self._tg.cancel_scope.cancel()
                with anyio.CancelScope(shield=True):
                    await persistence.abort()
                try:
                    await self._tg.__aexit__(None, None, None)
                finally:
                    self.trace.close()
                raise
            self._persistence = persistence
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        """Stop every execution, then leave the task group. An exception raised in the body
        of ``async with`` (``KeyboardInterrupt`` too) propagates as itself, never wrapped in
        an exception group; a failing stop is logged (its execution is contained)."""
        self._closing = True
        assert self._tg is not None
        try:
            with anyio.CancelScope(shield=True):
                if self._persistence is not None:  # the agents that can outlive us do
                    await self._persistence.close()
                for session in list(self._sessions.values()):
                    try:
                        await session.stop("runtime closed")
                    except Exception:
                        log.exception("stopping execution %s failed", session.id)
                    finally:
                        self._forget(session)
            if exc is None or isinstance(exc, anyio.get_cancelled_exc_class()):
                return await self._tg.__aexit__(exc_type, exc, tb)  # it may be the group's own
            # the body's own exception: leave the (now idle) task group as if the body ended,
            # and let the exception propagate unwrapped
            self._tg.cancel_scope.cancel()
            try:
                await self._tg.__aexit__(None, None, None)
            except BaseException:
                log.exception("the runtime's task group failed while %r propagated", exc)
            return None
        finally:
            self.trace.close()

    def _task_group(self) -> anyio.abc.TaskGroup:
        if self._tg is None:
            raise AcpfsmError("Runtime is not running: use `async with Runtime(...) as rt`")
        return self._tg

    def _session(self, execution_id: str) -> ExecutionSession:
        if not execution_id:
            raise ExecutionIdRequired()
        session = self._sessions.get(execution_id)
        if session is None:
            dormant = self._persistence.dormant(execution_id) if self._persistence else None
            if dormant is not None:
                raise dormant.error()
            raise ExecutionNotFound(execution_id)
        return session

    # ---------------------------------------------------------------------- facade --

    async def launch(self, spec: LaunchSpec) -> ExecutionRef:
        """Start the agent and its session; returns once the process is running. Session
        initialization (and the initial prompt) continue in the background: watch them with
        :meth:`subscribe_events`, or just call :meth:`prompt`, which waits for them."""
        tg = self._task_group()
        spec = launch_spec_from_request(spec)  # the base request fills what the spec leaves unset
        check_launch_spec(spec)
        profile = self.profiles.get(spec.agent_profile_id)
        if profile is None:
            raise ProfileNotFound(f"unknown agent profile {spec.agent_profile_id!r}")
        executor = self.executors.get(spec.executor_id)
        if executor is None:
            raise ExecutorNotFound(
                f"unknown executor {spec.executor_id!r} (known: {', '.join(self.executors)})"
            )
        policy = spec.permission_policy or profile.permission_policy
        if policy not in PERMISSION_POLICIES:
            raise LaunchSpecError(
                f"unknown permission policy {policy!r} (one of: {', '.join(PERMISSION_POLICIES)})"
            )
        if spec.mcp_mode and spec.mcp_mode not in self.mcp_modes:
            raise Unsupported(f"MCP mode {spec.mcp_mode!r}")
        execution_id = str(uuid.uuid4())
        session_id = str(spec.metadata.get("session_id") or execution_id)
        if session_id in self._by_task_session:
            raise ExecutionAlreadyExists(
                f"session {session_id!r} already has execution {self._by_task_session[session_id]}"
            )
        session = self._make_session(execution_id, session_id, spec, profile, executor)
        if self._persistence is not None:
            self._persistence.record_new(session, executor)
        self._sessions[execution_id] = session
        self._by_task_session[session_id] = execution_id
        try:
            await tg.start(session.run)
        except BaseException:
            self._forget(session)
            raise
        if self._persistence is not None:
            self._persistence.follow(session)
        return ExecutionRef(
            id=execution_id,
            session_id=session_id,
            agentctl_url=session.endpoint,
            started_at=session.started_at,
        )

    def _make_session(
        self,
        execution_id: str,
        session_id: str,
        spec: LaunchSpec,
        profile: AgentProfile,
        executor: Executor,
        opener: Opener | None = None,
    ) -> ExecutionSession:
        """The execution's session, not yet running (see :func:`make_session`)."""
        mcp = self._execution_mcp(execution_id, spec, profile) if opener is None else None
        session = make_session(
            self, agent_launch(execution_id, session_id, spec, profile), spec, profile,
            executor, mcp, opener,
        )  # fmt: skip
        if self.bus is not None and self.store is None:  # with a store: the log's numbers
            session.ctx.hub.tap = numbered_feed(self.bus, execution_id)
        return session

    def _execution_mcp(
        self, execution_id: str, spec: LaunchSpec, profile: AgentProfile
    ) -> ExecutionMcp | None:
        """The execution's MCP side, when it has MCP servers or the Runtime has tools."""
        servers = (*profile.mcp_servers, *spec.mcp_servers)
        if not servers and self.tools is None:
            return None
        return ExecutionMcp(
            execution_id=execution_id,
            servers=servers,
            tools=self.tools,
            mode=spec.mcp_mode or (self.tools.default_mode if self.tools is not None else ""),
            call_timeout=self.timeouts.tool_call,
            idle_timeout=self.timeouts.tool_server_idle,
        )

    def _forget(self, session: ExecutionSession) -> None:
        self._sessions.pop(session.id, None)
        if self._by_task_session.get(session.session_id) == session.id:
            del self._by_task_session[session.session_id]

    async def resume(self, execution_id: str, prompt: str) -> PromptResult:
        """Send ``prompt`` and wait for the turn to complete (seed ``Resume``)."""
        return await self.prompt(execution_id, prompt)

    async def stop(self, execution_id: str, reason: str, *, force: bool = False) -> Execution:
        """Stop the agent and remove the execution; returns its final snapshot. A caller
        cancelled before the stop began stops nothing, and the execution stays. A lost
        execution (nothing runs) is removed, with its stored row and events."""
        if self._persistence is not None and self._persistence.dormant(execution_id):
            return self._persistence.remove_dormant(execution_id)
        session = self._session(execution_id)
        try:
            final = await session.stop(reason, force=force)
        finally:
            if session.stopping:
                self._forget(session)
        stuck = self._stuck.pop(execution_id, None)
        if stuck is not None:  # its executor's close was abandoned (all else is released)
            raise stuck
        return final

    def get_execution(self, execution_id: str) -> Execution:
        dormant = self._persistence.dormant(execution_id) if self._persistence else None
        if dormant is not None:
            return dormant.snapshot()
        return self._session(execution_id).snapshot()

    def list_executions(self) -> list[Execution]:
        stored = self._persistence.dormant_snapshots() if self._persistence else []
        return [s.snapshot() for s in self._sessions.values()] + stored

    # ----------------------------------------------------------- durable executions --

    def subscribe(self, execution_id: str, *, after: int = 0) -> DurableSubscription:
        """The execution's stored events after sequence number ``after`` (the last ``seq``
        seen; 0: the whole bounded log), each a :class:`~.events.SequencedEvent`, across
        restarts; ends when the execution no longer runs here. Needs a store."""
        return self._need_store("subscribe").subscribe(execution_id, after)

    async def relaunch(self, execution_id: str) -> Execution:
        """Start a lost execution's agent again (a new recovery attempt) and bring its
        conversation back with session/load (the stored ACP session id, where the agent's
        profile has ``native_session_resume``); returns once READY. Raises
        :class:`ExecutionLost` (the failure as its cause) when it could not be started."""
        return await self._need_store("relaunch").relaunch(execution_id)

    async def flush(self, bound: float | None = None) -> bool:
        """Wait until everything the executions logged so far is in the store (at most
        ``bound`` seconds, default 5); False when the store did not take it in time
        (nothing is lost: the writes go on). True at once without a store."""
        if self._persistence is None:
            return True
        return await self._persistence.durability.flush(bound)

    @property
    def store_health(self) -> StoreHealth | None:
        """Whether the store is being written (None without a store): ``ok`` false while
        writes fail (retried; the executions go on and nothing queued is lost)."""
        return self._persistence.durability.health_now() if self._persistence else None

    def _need_store(self, what: str) -> Persistence:
        if self._persistence is None:
            raise Unsupported(f"{what} needs Runtime(store=...)")
        return self._persistence

    def subscribe_events(self, execution_id: str, *, replay: bool = True) -> Subscription:
        """Every event of the execution in order, from its start (``replay=False``: from
        now on); ends when it finishes. Use as ``async with rt.subscribe_events(id) as
        events: async for e in events``; the types are in :mod:`acpfsm.runtime.events`."""
        return self._session(execution_id).hub.subscribe(replay=replay)

    async def set_mcp_mode(self, execution_id: str, mode: str) -> None:
        """Switch the execution's MCP mode while it runs (kandev's ``SetMcpMode``): the tool
        set its agent sees (the tool server announces ``notifications/tools/list_changed``),
        the ``mcp.*`` actions answered, and, for kandev's modes over agentctl, agentctl's
        embedded MCP server. An unknown mode is :class:`Unsupported`."""
        session = self._session(execution_id)
        if mode not in self.mcp_modes:
            raise Unsupported(f"MCP mode {mode!r}", execution_id=execution_id)
        await session.set_mcp_mode(mode)

    # -------------------------------------------------------- session-manager surface --

    async def prompt(
        self,
        execution_id: str,
        text: str,
        *,
        attachments: Sequence[Attachment] = (),
        dispatch_only: bool = False,
        on_dispatched: Callable[[], object] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - a typed PromptTimeout, turn cancelled
    ) -> PromptResult:
        """Send ``text`` and wait for the turn to end (``sendPrompt``). ``timeout`` bounds
        the whole call: past it the turn is cancelled at the agent (or never sent) and
        :class:`PromptTimeout` is raised. Leaving the call early (a cancel scope) also
        cancels the turn; the next prompt is never blocked by it for long nor sees its
        reply. Text that is not a ``str`` or cannot be encoded, and attachments that are not
        :class:`Attachment` values, raise :class:`InvalidPrompt` before anything is sent."""
        session = self._session(execution_id)
        attachments = check_prompt(text, attachments, execution_id=execution_id)
        return await session.prompt(
            text,
            attachments=attachments,
            dispatch_only=dispatch_only,
            on_dispatched=on_dispatched,
            timeout=timeout,
        )

    def turn(
        self,
        execution_id: str,
        text: str,
        *,
        attachments: Sequence[Attachment] = (),
        timeout: float | None = None,
    ) -> Turn:
        """Send ``text`` and stream this turn's updates as they arrive::

            async with rt.turn(execution_id, "hello") as turn:
                async for update in turn:  # MessageChunk, Reasoning, ToolCall, ToolUpdate,
                    ...                    # Plan, PermissionRequest: this turn's only
            print(turn.result.stop_reason)

        The prompt is :meth:`prompt`'s (same queueing, ``attachments`` and ``timeout``); the
        iteration ends when the turn does, raising what :meth:`prompt` would raise.
        ``turn.cancel()`` cancels the turn and keeps the stream; leaving the block before the
        turn ended cancels it (withdrawn if not sent, else cancelled at the agent)."""
        return Turn(
            self._session(execution_id),
            self._task_group().start_soon,
            text,
            attachments,
            timeout,
        )

    async def steer(
        self,
        execution_id: str,
        text: str,
        *,
        attachments: Sequence[Attachment] = (),
        on_dispatched: Callable[[], object] | None = None,
    ) -> PromptResult:
        session = self._session(execution_id)
        attachments = check_prompt(text, attachments, execution_id=execution_id, what="steer")
        return await session.steer(text, attachments=attachments, on_dispatched=on_dispatched)

    async def cancel(self, execution_id: str) -> None:
        """Cancel the current turn (``CancelAgent``): a prompt not yet sent is withdrawn (its
        caller gets a ``cancelled`` result); one being sent is cancelled once the agent has
        it; raises :class:`CancelEscalated` when the agent does not end the turn."""
        await self._session(execution_id).cancel()

    async def wait_ready(self, execution_id: str) -> Execution:
        """Wait until the execution is READY and return its snapshot; raises
        :class:`SessionInitError` (its ``__cause__`` the failure) when the session could not
        be initialized, :class:`NotReadyForPrompts` when it ended otherwise."""
        return await self._session(execution_id).wait_ready()

    async def recover_stream(self, execution_id: str) -> None:
        """Revive a FAILED execution whose agent stream is back (kandev's
        ``RecoverAgentPromptStream``): READY and ``agent.boot_ready``, or
        ``TransportClosed`` when the agent is not running; a no-op unless FAILED."""
        await self._session(execution_id).recover_stream()

    async def respond_permission(self, execution_id: str, request_id: str, option_id: str) -> None:
        """Answer the agent's permission request ``request_id`` (a ``permission.requested``
        event of an execution whose policy is ``ask``) with one of its options. Raises
        :class:`PermissionRequestNotFound` (never asked), :class:`PermissionAlreadyResolved`
        (answered, refused at its bound, or cancelled with its turn: a second or late
        answer), :class:`PermissionOptionNotOffered` (the request stays pending)."""
        self._session(execution_id).permissions.respond(request_id, option_id)

    async def set_model(self, execution_id: str, model_id: str) -> None:
        session = self._session(execution_id)
        await session.set_model(model_id)
        if self._persistence is not None:
            await self._persistence.override(session, "runtime_model", model_id)

    async def set_mode(self, execution_id: str, mode_id: str) -> None:
        session = self._session(execution_id)
        await session.set_mode(mode_id)
        if self._persistence is not None:
            await self._persistence.override(session, "session_mode", mode_id)

    async def set_config_option(self, execution_id: str, config_id: str, value: str) -> None:
        await self._session(execution_id).set_config_option(config_id, value)
