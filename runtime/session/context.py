"""What the drivers of one execution share: its identity, its data, and the one place where
charts are fired and their effects performed.

:meth:`ExecutionContext.fire` fires an event on a chart machine and applies the coordination
table (:mod:`acpfsm.statecharts.coordination`), so the drivers never move one chart because
another moved; :meth:`ExecutionContext.perform` performs the effects of the steps that
followed, in order, through the handlers each driver registered for its chart's effects. An
effect no driver handles is a bug and raises.

The data here is data, not state: ids, the model-catalog cache, stall accounting, the
buffered reply, timestamps. "Where is this execution in its life?" is always a chart's answer.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import msgspec

from acpfsm.adapters import events as ev
from acpfsm.adapters.errors import AcpfsmError, StreamNotConnected
from acpfsm.adapters.mcp_servers import McpServer, mcp_server_kind, split_mcp_servers
from acpfsm.adapters.sync import Mutex
from acpfsm.adapters.transport import AgentTransport
from acpfsm.statecharts import ChartMachine, Effect, EngineName, flows
from acpfsm.statecharts.charts import ChartRef
from acpfsm.statecharts.coordination import Fired, fire
from acpfsm.statecharts.names import EffectName, EventName

from .. import events as le
from ..errors import ExecutionCrashed
from ..history import HistoryStore
from ..hub import EventHub
from ..trace import Trace
from ..types import AgentProfile, LaunchSpec, Retention, Timeouts

if TYPE_CHECKING:
    from acpfsm.statecharts import Chart

    from ..mcp.execution import ExecutionMcp

__all__ = [
    "Activity",
    "ExecutionContext",
    "Failed",
    "Handler",
    "ModelCache",
    "bounded",
    "decision_id",
    "flow_effects",
    "nothing",
]

log = logging.getLogger("acpfsm.runtime")

_T = TypeVar("_T")

Handler = Callable[[Effect, ChartMachine], Awaitable[None] | None]
"""Performs one effect of a step ``machine`` took."""
_NO_HANDLERS: Mapping[EffectName, Handler] = {}


def nothing(effect: Effect, machine: ChartMachine) -> None:
    """A flow effect: the flow that fired the event acts on it (:mod:`acpfsm.statecharts.flows`)."""


def flow_effects(chart: str) -> dict[EffectName, Handler]:
    """``chart``'s flow effects, each with no handler of its own (:func:`nothing`)."""
    return dict.fromkeys(flows.flow_effects(chart), nothing)


class Failed(msgspec.Struct, frozen=True):
    """What :func:`bounded` answers when the request failed or its bound ran out."""

    error: AcpfsmError | TimeoutError


async def bounded(bound: float, call: Callable[[], Awaitable[_T]]) -> _T | Failed:
    """``call()`` bounded by ``bound`` seconds: its result, or :class:`Failed` with the typed
    error it raised (the adapters' :class:`AcpfsmError`) or the ``TimeoutError`` of the bound.
    The drivers' one bounded request outside the flow table (whose ``Do`` steps have their
    own bounds); a cancellation goes on."""
    try:
        with anyio.fail_after(bound):
            return await call()
    except (AcpfsmError, TimeoutError) as exc:
        return Failed(exc)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def decision_id(
    execution_id: str, acp_session_id: str, requested: str, reason: str, eff: str
) -> str:
    """Deterministic id of a model-selection warning (kandev start_model.go)."""
    raw = f"{execution_id}|{acp_session_id}|{requested}|{reason}|{eff}"
    import hashlib  # here, not at import: OpenSSL's loading is a twentieth of the import

    return hashlib.sha256(raw.encode()).hexdigest()


class ModelState(msgspec.Struct):
    """kandev's ``CachedModelState``: what the agent said about models and config options."""

    current_model_id: str = ""
    models: list[ev.ModelInfo] = msgspec.field(default_factory=list)
    config_options: list[ev.ConfigOption] = msgspec.field(default_factory=list)

    def copy(self) -> ModelState:
        return ModelState(self.current_model_id, list(self.models), list(self.config_options))

    @property
    def catalog_known(self) -> bool:
        """kandev's test is "``ConfigOptionsSettled``, or ≥ 1 config option"; an execution
        settles once, after the init's last read of this (the runtime-mode step), so here the
        options alone say it."""
        return bool(self.config_options)


class ModelCache(msgspec.Struct):
    """The cached model state, the provider default captured before the start-model policy,
    and the config ids whose provider response has already been applied."""

    state: ModelState | None = None
    provider_default: ModelState | None = None
    responses_applied: set[str] = msgspec.field(default_factory=set)

    def present(self) -> bool:
        """The catalog wait's test (kandev's "models, options or ``ConfigOptionsSettled``";
        the settlement comes after the wait, so it is never settled here)."""
        state = self.state
        return state is not None and bool(state.models or state.config_options)

    def apply(self, event: ev.SessionModels) -> None:
        state = self.state or ModelState()
        if event.current_model_id:
            state.current_model_id = event.current_model_id
        if event.session_models:
            state.models = list(event.session_models)
        if event.config_options:
            state.config_options = list(event.config_options)
        self.state = state
        if self.provider_default is None and state.config_options:
            # the settlement's baseline when no provider default was captured before the
            # policy: the first cached state that had config options (scenario s62 d)
            self.provider_default = state.copy()


class Activity(msgspec.Struct):
    """Stall accounting (kandev ``waitForPromptDone``, manager_events.go)."""

    last_at: float = 0.0
    since_prompt: bool = False
    epoch: int = 0
    active_tool_id: str = ""
    active_tool_title: str = ""


class ExecutionContext:
    """One execution's shared data and its chart plumbing (see the module docstring)."""

    def __init__(
        self,
        *,
        execution_id: str,
        session_id: str,
        spec: LaunchSpec,
        profile: AgentProfile,
        timeouts: Timeouts,
        trace: Trace,
        history: HistoryStore | None,
        shutting_down: Callable[[], bool],
        engine: EngineName | None = None,
        retention: Retention | None = None,
    ) -> None:
        self.id = execution_id
        self.session_id = session_id
        self.spec = spec
        self.profile = profile
        self.timeouts = timeouts
        self.history = history
        self.shutting_down = shutting_down
        self.engine = engine
        self.trace = trace
        self.observers = (trace.observer(execution_id),)
        keep = retention or Retention()
        self.hub = EventHub(
            execution_id,
            retain=keep.backlog_events,
            retain_bytes=keep.backlog_bytes,
            buffer=keep.buffer_events,
            buffer_bytes=keep.buffer_bytes,
        )
        self.metadata: dict[str, Any] = dict(spec.metadata)
        self.started_at = utcnow()
        self.finished_at: dt.datetime | None = None
        self.exit_code: int | None = None
        self.error_message = ""
        self.acp_session_id = spec.prior_acp_session
        self.endpoint = ""
        self.reattach = False
        """The transport reaches an agent that survived a restart of the app, its session
        established (the session init reattaches, :mod:`acpfsm.runtime.recovery`)."""
        self.startup_generation = 0
        """The recovery attempt that rebuilt this execution (0: launched in this process)."""
        self.transport: AgentTransport | None = None
        self.models = ModelCache()
        self.activity = Activity()
        self.message: list[str] = []
        self.crash: ExecutionCrashed | None = None
        """The first failure of the execution's own code (see :mod:`.crash`): what its
        callers raise once the Crash chart says it crashed (data: nothing decides on it)."""
        self.stop_reason = ""
        """The reason the app gave to ``stop`` (what a call the stop ended says)."""
        self.lifecycle_lock = Mutex(check_cancelled=False)
        """kandev's ``promptLifecycleMu``: generation ownership (begin, claims, steer). Taking
        it free checks no cancellation: a caller's operation checks once at its start
        (:meth:`CrashGuard.call <.crash.CrashGuard.call>`, every facade operation's way in);
        its other holders are the execution's own tasks."""
        self.machines: dict[str, ChartMachine] = {}
        """The current machine of each chart, by chart name (what coordination reaches)."""
        self._handlers: dict[str, dict[EffectName, Handler]] = {}  # chart → effect → handler
        self._listeners: dict[str, Callable[[], None]] = {}
        self.mcp: ExecutionMcp | None = None
        """The execution's MCP side (its servers, tool server and mode), when it has one."""
        self._mcp_dropped: set[tuple[str, str, str]] = set()

    # ------------------------------------------------------------------ charts --

    def start(
        self, chart: ChartRef | type[Chart], *, current: bool = True, **constants: Any
    ) -> ChartMachine:
        """A new machine of ``chart`` for this execution (the current one when ``current``)."""
        tags: dict[str, Any] = {"execution_id": self.id}
        if "generation" in constants:
            tags["generation"] = constants["generation"]
        machine = chart.start(engine=self.engine, tags=tags, observers=self.observers, **constants)
        if current:
            self.machines[chart.chart_name] = machine
        return machine

    def handle(self, chart: str, effects: Mapping[EffectName, Handler]) -> None:
        """Register the handlers of ``chart``'s effects."""
        self._handlers.setdefault(chart, {}).update(effects)

    def fire(self, machine: ChartMachine, event: EventName, **data: Any) -> list[Fired]:
        """Fire ``event`` and what the coordination table makes follow (nothing performed)."""
        return fire(self.machines, machine, event, data)

    def check_handlers(self, charts: Iterable[ChartRef | type[Chart]]) -> None:
        """Every effect each of ``charts`` declares has a handler, and every handler is for an
        effect its chart declares (raises naming the missing and the unknown ones): checked
        when the execution is built, not when an effect first fires."""
        missing: list[str] = []
        unknown: list[str] = []
        for chart in charts:
            declared = chart.compiled().effect_names
            handled = self._handlers.get(chart.chart_name, _NO_HANDLERS)
            missing += (f"{chart.chart_name}.{n}" for n in declared if n not in handled)
            unknown += (f"{chart.chart_name}.{n}" for n in handled if n not in declared)
        problems = []
        if missing:
            problems.append(f"no handler for the effects {', '.join(sorted(missing))}")
        if unknown:
            problems.append(f"handlers for undeclared effects {', '.join(sorted(unknown))}")
        if problems:
            raise AcpfsmError("; ".join(problems))

    def on_step(self, chart: str, listener: Callable[[], None]) -> None:
        """Call ``listener`` after each performed step of ``chart`` (a driver's waiters)."""
        self._listeners[chart] = listener

    async def perform(self, fired: list[Fired]) -> None:
        """Perform the effects of ``fired``, in order."""
        for machine, step in fired:
            listener = self._listeners.get(step.chart)
            if listener is not None:
                listener()
            handlers = self._handlers.get(step.chart, _NO_HANDLERS)
            for effect in step.effects:
                handler = handlers.get(effect.name)
                if handler is None:
                    raise AcpfsmError(
                        f"{step.chart}: no handler for effect {effect.name!r}", execution_id=self.id
                    )
                result = handler(effect, machine)
                if result is not None:
                    await result

    async def step(self, machine: ChartMachine, event: EventName, **data: Any) -> list[Fired]:
        """Fire and perform: the common case."""
        fired = self.fire(machine, event, **data)
        await self.perform(fired)
        return fired

    # ------------------------------------------------------------------ data --

    def transport_or_raise(self) -> AgentTransport:
        if self.transport is None:  # pragma: no cover - run() sets it before anything else
            raise StreamNotConnected(execution_id=self.id)
        return self.transport

    def publish(self, event: le.RuntimeEvent) -> None:
        self.hub.publish(event)

    def session_mcp_servers(self) -> list[McpServer]:
        """The MCP servers a session/new or session/load offers: the execution's servers the
        agent can take (its initialize answer); each one left out is published once as an
        ``McpServerDropped`` naming it and why."""
        if self.mcp is None:
            return []
        caps = self.transport.capabilities if self.transport is not None else None
        kept, dropped = split_mcp_servers(self.mcp.servers(), caps)
        for server, reason in dropped:
            key = (server.name, mcp_server_kind(server), reason)
            if key not in self._mcp_dropped:
                self._mcp_dropped.add(key)
                log.warning("MCP server %r not offered to %s: %s", server.name, self.id, reason)
                self.publish(
                    le.McpServerDropped(
                        execution_id=self.id, name=key[0], kind=key[1], reason=reason
                    )
                )
        return kept

    def set_failed(self, message: str) -> None:
        self.error_message = message
        if self.finished_at is None:
            self.finished_at = utcnow()

    def take_message(self) -> str:
        """Detach the buffered assistant text and reset the buffer in one step (R20)."""
        text = "".join(self.message)
        self.message.clear()
        return text

    async def history_append(self, append: Callable[[HistoryStore], object]) -> None:
        """``append(store)`` off the event loop, when history is kept for this profile; a
        failure is only logged."""
        if self.history is None or not self.profile.history_context_injection:
            return
        try:
            await anyio.to_thread.run_sync(append, self.history)
        except (OSError, AcpfsmError) as exc:
            log.warning("history append failed for %s: %s", self.session_id, exc)

    async def persist_assistant(self, text: str) -> None:
        if text:
            await self.history_append(lambda h: h.append_assistant(self.session_id, text))

    def has_resume_context(self) -> bool:
        return (
            self.history is not None
            and self.profile.history_context_injection
            and self.history.has_history(self.session_id)
        )

    async def with_resume_context(self, text: str) -> str:
        """GenerateResumeContext off the event loop; the plain text when history is unreadable."""
        if self.history is None:
            return text
        prompt, err = await anyio.to_thread.run_sync(
            self.history.generate_resume_context, self.session_id, text
        )
        if err is not None:
            log.warning("resume context generation failed: %s", err)
        return prompt
