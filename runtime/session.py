"""One execution: its charts, its transport, and the tasks that drive them.

The chart decides, the session does. Each lifecycle decision is a transition of one of the
execution's charts (:mod:`acpfsm.statecharts`); this module performs I/O, measures time, and
feeds every result back as an event. It keeps data (ids, the model catalog cache, activity
timestamps, message buffers) but no flag that duplicates a chart's state: "is there a live
turn?" is ``PromptGeneration.is_steerable``; "may a prompt start?" is
``Execution.accepts_prompts``; "does a dispatch-only predecessor gate us?" is
``PromptGeneration.holds_barrier``.

Concurrency (lifecycle.md §1.2): ``_prompt_lock`` is kandev's ``promptMu`` (one ordinary
prompt at a time, held through its completion wait); ``_lifecycle_lock`` is
``promptLifecycleMu`` (generation ownership: begin, completion claim, disconnect claim,
handoff, steer selection + dispatch). Agent events are handled one at a time, in order, by the
event pump; a steer holding the lifecycle lock across its RPC cannot deadlock it because the
RPC's answer is read by the transport, not by the pump (R5).
"""

from __future__ import annotations

import collections
import datetime as dt
import hashlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import msgspec

from acpfsm.adapters import events as ev
from acpfsm.adapters.classify import Call, classify_error
from acpfsm.adapters.errors import (
    AcpfsmError,
    AgentRequestError,
    SteerUnsupported,
    StreamNotConnected,
    TransportClosed,
)
from acpfsm.adapters.transport import AgentTransport, Attachment, SessionResult
from acpfsm.statecharts import (
    AgentStream,
    Execution,
    PromptGeneration,
    SessionInit,
    StartModelPolicy,
)

from . import events as le
from .errors import (
    CANCEL_ESCALATED_MESSAGE,
    CANCEL_ESCALATED_SIGNAL,
    AgentReportedError,
    AttachmentError,
    CancelEscalated,
    CancelEscalatedAgentError,
    CancelFailed,
    NotReadyForPrompts,
    PendingDispatchedPromptTimeout,
    PromptDispatchError,
    PromptError,
    SteerAttachmentMaterializationError,
    SteerDispatchTimeout,
    SteerNotDispatched,
)
from .history import HistoryStore
from .hub import EventHub
from .trace import Trace
from .types import AgentProfile, LaunchSpec, PromptResult, Timeouts
from .types import Execution as ExecutionSnapshot

__all__ = ["ExecutionSession"]

log = logging.getLogger("acpfsm.runtime")

TransportFactory = Callable[[], AbstractAsyncContextManager[AgentTransport]]
_LIVE_GENERATIONS_KEPT = 64
_RESERVED_OPTION_KEYS = ("model", "mode")


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class _ModelState:
    """kandev's ``CachedModelState`` (lifecycle.md §1.1, §4)."""

    current_model_id: str = ""
    models: list[ev.ModelInfo] = field(default_factory=list)
    config_options: list[ev.ConfigOption] = field(default_factory=list)
    settled: bool = False

    def copy(self) -> _ModelState:
        return _ModelState(
            self.current_model_id, list(self.models), list(self.config_options), self.settled
        )

    @property
    def catalog_known(self) -> bool:
        return self.settled or bool(self.config_options)


@dataclass
class _Outcome:
    """What a claimed terminal event said (data for the waiter, not state)."""

    stop_reason: str = ""
    error: str = ""
    agent_message: str = ""


@dataclass
class _Activity:
    """Stall accounting (lifecycle.md §5.9)."""

    last_at: float = 0.0
    since_prompt: bool = False
    epoch: int = 0
    active_tool_id: str = ""
    active_tool_title: str = ""


def decision_id(
    execution_id: str, acp_session_id: str, requested: str, reason: str, eff: str
) -> str:
    """Deterministic id of a model-selection warning (lifecycle.md §3.3)."""
    raw = f"{execution_id}|{acp_session_id}|{requested}|{reason}|{eff}"
    return hashlib.sha256(raw.encode()).hexdigest()


class ExecutionSession:
    """One agent execution (see the module docstring)."""

    def __init__(
        self,
        *,
        execution_id: str,
        session_id: str,
        spec: LaunchSpec,
        profile: AgentProfile,
        open_transport: TransportFactory,
        trace: Trace,
        timeouts: Timeouts,
        history: HistoryStore | None,
        shutting_down: Callable[[], bool],
        agentctl_url: str = "",
    ) -> None:
        self.id = execution_id
        self.session_id = session_id
        self.spec = spec
        self.profile = profile
        self.timeouts = timeouts
        self.history = history
        self.agentctl_url = agentctl_url
        self._open_transport = open_transport
        self._trace = trace
        self._shutting_down = shutting_down
        self.metadata: dict[str, Any] = dict(spec.metadata)
        self.started_at = _utcnow()
        self.finished_at: dt.datetime | None = None
        self.exit_code: int | None = None
        self.error_message = ""
        self.acp_session_id = spec.prior_acp_session
        self.hub = EventHub(execution_id)

        obs = (trace.observer(execution_id),)
        self.execution = Execution(tags={"execution_id": execution_id}, observers=obs)
        self.stream = AgentStream(tags={"execution_id": execution_id}, observers=obs)
        self.init: SessionInit | None = None
        self.generations: collections.OrderedDict[int, PromptGeneration] = collections.OrderedDict()
        self.current: PromptGeneration | None = None
        self._outcomes: dict[int, _Outcome] = {}
        self._next_generation = 0

        self.transport: AgentTransport | None = None
        self._prompt_lock = anyio.Lock()
        self._lifecycle_lock = anyio.Lock()
        self._changed = anyio.Event()
        self._init_done = anyio.Event()
        self._stop_requested = anyio.Event()
        self._finished = anyio.Event()

        self._model_state: _ModelState | None = None
        self._provider_default: _ModelState | None = None
        self._authoritative: set[str] = set()
        self._pending_settlement: tuple[str, _ModelState | None] | None = None
        self._activity = _Activity()
        self._message: list[str] = []
        self._resume_context_consumed = False
        self._tool_names: dict[str, str] = {}

    # ------------------------------------------------------------------ small helpers --

    def _notify(self) -> None:
        """Wake every waiter: something in a chart or in the outcome data changed."""
        self._changed.set()
        self._changed = anyio.Event()

    def _publish(self, event: le.RuntimeEvent) -> None:
        self.hub.publish(event)

    @property
    def charts(self) -> dict[str, str]:
        return {
            "execution": self.execution.leaf,
            "agent_stream": self.stream.leaf,
            "session_init": self.init.leaf if self.init is not None else "",
            "prompt_generation": self.current.leaf if self.current is not None else "",
        }

    def snapshot(self) -> ExecutionSnapshot:
        caps = self.transport.capabilities if self.transport is not None else None
        return ExecutionSnapshot(
            id=self.id,
            session_id=self.session_id,
            task_id=str(self.metadata.get("task_id", "")),
            agent_profile_id=self.profile.id,
            workspace_path=self.spec.workspace.path,
            agentctl_url=self.agentctl_url,
            status=self.execution.status,
            started_at=self.started_at,
            finished_at=self.finished_at,
            exit_code=self.exit_code,
            error_message=self.error_message,
            acp_session_id=self.acp_session_id,
            agent_name=caps.agent.name if caps is not None else "",
            agent_version=caps.agent.version if caps is not None else "",
            charts=self.charts,
            prompt_generation=self.current.generation if self.current is not None else 0,
            metadata=dict(self.metadata),
        )

    def _transport(self) -> AgentTransport:
        if self.transport is None:  # pragma: no cover - run() sets it before anything else
            raise StreamNotConnected(execution_id=self.id)
        return self.transport

    def _set_failed(self, message: str) -> None:
        self.error_message = message
        if self.finished_at is None:
            self.finished_at = _utcnow()

    async def _history(self, append: Callable[[HistoryStore], object]) -> None:
        """``append(store)`` off the event loop, when history is kept for this profile; a
        failure is only logged."""
        if self.history is None or not self.profile.history_context_injection:
            return
        try:
            await anyio.to_thread.run_sync(append, self.history)
        except (OSError, AcpfsmError) as exc:
            log.warning("history append failed for %s: %s", self.session_id, exc)

    def _take_message(self) -> str:
        """Detach the buffered assistant text and reset the buffer in one step (R20)."""
        text = "".join(self._message)
        self._message.clear()
        return text

    async def _persist_assistant(self, text: str) -> None:
        if text:
            await self._history(lambda h: h.append_assistant(self.session_id, text))

    async def _with_resume_context(self, text: str) -> str:
        """GenerateResumeContext off the event loop; the plain text when history is unreadable."""
        if self.history is None:
            return text
        prompt, err = await anyio.to_thread.run_sync(
            self.history.generate_resume_context, self.session_id, text
        )
        if err is not None:
            log.warning("resume context generation failed: %s", err)
        return prompt

    # ---------------------------------------------------------------------- the run --

    async def run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Start the agent (raising if that fails), then drive the execution until stopped."""
        self.execution.fire("start_requested")
        self.stream.fire("connect_started")
        started = False
        try:
            async with self._open_transport() as transport:
                self.transport = transport
                task_status.started()
                started = True
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._pump)
                    tg.start_soon(self._initialize_then_dispatch, tg)
                    await self._stop_requested.wait()
                    tg.cancel_scope.cancel()
        except BaseException:
            if not started:  # the agent never started: FAILED, and the execution is removed
                self.execution.fire("init_failed")
                self.execution.fire("stop_requested")
                self.stream.fire("connect_failed")
            raise
        finally:
            self._init_done.set()
            self.hub.close()
            self._finished.set()

    async def wait_finished(self) -> None:
        await self._finished.wait()

    # ------------------------------------------------------------------ session init --

    async def _initialize_then_dispatch(self, tg: anyio.abc.TaskGroup) -> None:
        """Session init, then the dispatch its final state names (§2.3).

        ``_init_done`` opens admission for callers' prompts: right after init for a boot
        without prompt, and only once the initial prompt's generation is admitted otherwise,
        so that a caller's ``prompt``/``resume`` queues behind the initial turn."""
        try:
            await self._initialize()
            init = self.init
            assert init is not None
            if init.leaf == "prompting":
                tg.start_soon(self._initial_prompt)
                return
            if init.succeeded:  # ready, with or without resume context pending
                self.execution.fire("booted")
                self._publish(
                    le.AgentBootReady(
                        execution_id=self.id,
                        resume_context_pending=init.leaf == "ready_resume_context_pending",
                    )
                )
            self._init_done.set()
            self._notify()
        except BaseException:
            self._init_done.set()
            self._notify()
            raise

    async def _initialize(self) -> None:
        init = SessionInit(
            tags={"execution_id": self.id}, observers=(self._trace.observer(self.id),)
        )
        self.init = init
        transport = self._transport()
        t = self.timeouts
        error = ""
        model_requested = bool(self.profile.model or self.metadata.get("runtime_model"))
        applied_model = ""
        final_config_id = ""
        failures: list[str] = []
        resumed = False
        snapshot_cached = False

        def why(exc: BaseException) -> str:
            # our request bound raises a bare TimeoutError; say what Go's deadline says
            return str(exc) or "context deadline exceeded"

        try:
            while not init.is_terminated:
                state = init.leaf
                if state == "connecting_stream":
                    with anyio.move_on_after(t.stream_connect) as scope:
                        while not transport.is_connected():  # noqa: ASYNC110 - a bounded poll
                            await anyio.sleep(t.catalog_poll)
                    if scope.cancelled_caught:
                        error = "timeout waiting for agent stream to connect"
                        self.stream.fire("connect_timed_out")
                        init.fire("stream_connect_timed_out")
                    else:
                        self.stream.fire("connect_succeeded")
                        init.fire("stream_ready")
                elif state == "handshaking":
                    try:
                        with anyio.fail_after(t.request):
                            await transport.initialize()
                    except (AcpfsmError, TimeoutError) as exc:
                        error = f"initialize failed: {why(exc)}"
                        init.fire("initialize_failed")
                    else:
                        init.fire(
                            "initialize_succeeded",
                            native_session_resume=self.profile.native_session_resume,
                            prior_session_id=self.spec.prior_acp_session,
                        )
                elif state == "loading":
                    prior = self.spec.prior_acp_session
                    try:
                        with anyio.fail_after(t.request):
                            result = await transport.load_session(prior, self.spec.workspace.path)
                    except (AcpfsmError, TimeoutError) as exc:
                        cls = classify_error(exc, call=Call.SESSION_LOAD, loading_session_id=prior)
                        error = f"session/load failed: {why(exc)}"
                        log.warning("session/load failed (%s): %s", cls.kind, exc)
                        init.fire("load_failed", error_class=cls.kind)
                    else:
                        # the existing id is kept whatever the response says (§2.1 step 4)
                        snapshot_cached = self._establish(prior, result)
                        resumed = True
                        init.fire("load_succeeded")
                elif state == "creating":
                    try:
                        with anyio.fail_after(t.request):
                            result = await transport.new_session(self.spec.workspace.path)
                    except (AcpfsmError, TimeoutError) as exc:
                        error = f"session/new failed: {why(exc)}"
                        init.fire("new_session_failed")
                    else:
                        snapshot_cached = self._establish(result.session_id, result)
                        init.fire("new_session_succeeded")
                elif state == "awaiting_catalog":
                    init.fire(
                        "catalog_checked",
                        snapshot_available=snapshot_cached,
                        model_requested=model_requested,
                    )
                elif state == "waiting_for_catalog":
                    with anyio.move_on_after(t.catalog_wait):
                        while not self._catalog_present():  # noqa: ASYNC110 - §2.1: 10 ms polls
                            await anyio.sleep(t.catalog_poll)
                    init.fire(
                        "catalog_arrived" if self._catalog_present() else "catalog_wait_timed_out"
                    )
                elif state == "applying_start_model":
                    self._provider_default = (
                        self._model_state.copy() if self._model_state is not None else None
                    )
                    applied_model, policy_error = await self._start_model()
                    if policy_error:
                        error = policy_error
                        init.fire("start_model_failed")
                    else:
                        init.fire("start_model_settled")
                elif state == "applying_profile_layer":
                    final_config_id, profile_applied = await self._profile_layer(applied_model)
                    init.fire("profile_layer_applied")
                elif state == "original_snapshot":
                    self._publish_original_snapshot(applied_model, profile_applied)
                    init.fire("original_snapshot_published")
                elif state == "applying_runtime_mode":
                    failures = await self._runtime_mode(profile_applied)
                    known = self._model_state is not None and self._model_state.catalog_known
                    init.fire("runtime_mode_applied", catalog_known=known)
                elif state == "applying_runtime_options":
                    final_config_id, option_failures = await self._runtime_options(final_config_id)
                    failures += option_failures
                    init.fire("runtime_options_applied")
                elif state == "settling":
                    if self._settle(final_config_id):
                        init.fire("settlement_published")
                    else:
                        init.fire("settlement_deferred")
                elif state == "announcing":
                    if failures:
                        self._publish(le.ConfigFailures(execution_id=self.id, failures=failures))
                    self._publish(
                        le.AcpSessionCreated(
                            execution_id=self.id,
                            session_id=self.session_id,
                            task_id=str(self.metadata.get("task_id", "")),
                            acp_session_id=self.acp_session_id,
                            resumed=resumed,
                        )
                    )
                    init.fire(
                        "session_announced",
                        has_initial_prompt=bool(self.spec.prompt or self.spec.attachments),
                        resume_context=self._should_inject_resume_context(),
                    )
                else:  # pragma: no cover - every working state is handled above
                    raise AssertionError(f"unhandled session_init state {state}")
        except anyio.get_cancelled_exc_class():
            if not init.is_terminated:
                init.fire("init_abandoned")
            raise
        if init.leaf == "failed":
            message = f"failed to initialize ACP: {error}"
            self._set_failed(message)
            self.execution.fire("init_failed")
            self._publish(le.AgentFailed(execution_id=self.id, error=message, phase="session_init"))

    def _establish(self, acp_session_id: str, result: SessionResult) -> bool:
        """Record the session; cache the synchronous catalog snapshot of the response, if it
        carried one (``cacheFreshSessionModelState``, §2.1 step 6). Returns whether it did.

        Without a snapshot the cache keeps what the agent's ``session_models`` updates already
        put there: a state holding only a current model id is not a catalog, so the catalog
        wait still runs for it (scenario s43)."""
        self.acp_session_id = acp_session_id
        if not result.has_model_state:
            return False
        self._model_state = _ModelState(
            current_model_id=result.current_model_id,
            models=list(result.models),
            config_options=list(result.config_options),
        )
        return True

    def _catalog_present(self) -> bool:
        state = self._model_state
        return state is not None and bool(state.models or state.config_options or state.settled)

    async def _start_model(self) -> tuple[str, str]:
        """The start-model policy wrapper (§3.3): ``(applied_model, error)``."""
        model = str(self.metadata.get("runtime_model", "")) or self.profile.model
        if not model:
            return "", ""
        policy = StartModelPolicy(
            model=model,
            fallback_model=self.profile.fallback_model,
            auto_fallback=self.profile.auto_fallback,
            tags={"execution_id": self.id},
            observers=(self._trace.observer(self.id),),
        )
        state = self._model_state
        policy.fire(
            "policy_evaluated",
            advertised=[m.model_id for m in state.models] if state is not None else [],
            current_model=state.current_model_id if state is not None else "",
        )
        while to_set := policy.model_to_set:
            try:
                with anyio.fail_after(self.timeouts.request):
                    await self._transport().set_model(to_set)
            except (AcpfsmError, TimeoutError) as exc:
                policy.fire(
                    "set_model_failed",
                    method_not_found=isinstance(exc, AgentRequestError) and exc.code == -32601,
                    error=str(exc),
                )
            else:
                policy.fire("set_model_succeeded")
        decision = policy.decision()
        if decision.error:
            log.warning("start model unavailable, failing session start: %s", decision.error)
            return "", decision.error
        if decision.warning:
            self._publish(
                le.ModelSelectionWarning(
                    execution_id=self.id,
                    decision_id=decision_id(
                        self.id,
                        self.acp_session_id,
                        decision.requested_model,
                        decision.reason,
                        decision.effective_model,
                    ),
                    reason=decision.reason,
                    requested_model=decision.requested_model,
                    effective_model=decision.effective_model,
                    fallback_model=decision.fallback_model
                    if decision.outcome == "explicit_fallback"
                    else "",
                    agent_id=self.profile.id,
                    executor_type=self.spec.executor_id,
                    executor_profile_id=str(self.metadata.get("executor_profile_id", "")),
                )
            )
            if decision.outcome == "explicit_fallback":
                # the legacy event follows only a warning that names a fallback (seed
                # publishModelSelectionWarningEvent: warning.FallbackModel != "")
                self._publish(
                    le.ModelFallback(execution_id=self.id, fallback_model=decision.fallback_model)
                )
        applied = (
            decision.effective_model if decision.outcome in ("applied", "explicit_fallback") else ""
        )
        if applied and self._model_state is not None:
            self._model_state.current_model_id = applied
        return applied, ""

    def _model_config_id(self) -> str:
        state = self._model_state
        if state is not None:
            for option in state.config_options:
                if option.id == "model" or option.category == "model":
                    return option.id
        return "model"

    async def _profile_layer(self, applied_model: str) -> tuple[str, dict[str, str]]:
        """§4.1: returns ``(final_config_id, applied)`` where ``applied`` maps ``model``,
        ``mode`` and config ids to the values that took effect. The profile's model is the
        start-model policy's business (it runs whenever a model is requested); only the model
        it applied is recorded here."""
        transport = self._transport()
        applied: dict[str, str] = {}
        final_config_id = ""
        if applied_model:
            applied["model"] = applied_model
            final_config_id = self._model_config_id()
        if self.profile.mode:
            try:
                with anyio.fail_after(self.timeouts.request):
                    await transport.set_mode(self.profile.mode)
            except (AcpfsmError, TimeoutError) as exc:
                log.warning("profile mode %s not applied: %s", self.profile.mode, exc)
            else:
                applied["mode"] = self.profile.mode
        options = {
            k.strip(): v.strip()
            for k, v in self.profile.config_options.items()
            if k.strip() and v.strip() and k.strip() not in _RESERVED_OPTION_KEYS
        }
        for key in sorted(options):
            try:
                with anyio.fail_after(self.timeouts.request):
                    await transport.set_config_option(key, options[key])
            except (AcpfsmError, TimeoutError) as exc:
                log.warning("profile config option %s not applied: %s", key, exc)
            else:
                applied[key] = options[key]
                final_config_id = key
        return final_config_id, applied

    def _publish_original_snapshot(self, applied_model: str, applied: dict[str, str]) -> None:
        """§4.2: the immutable "original" snapshot, once."""
        state = self._model_state
        if state is None:
            return
        options = list(state.config_options)
        current = applied_model or state.current_model_id
        if current:
            for i, option in enumerate(options):
                if option.id == "model" or option.category == "model":
                    options[i] = _with_value(option, current)
                    break
            else:
                options.append(ev.ConfigOption(id="model", category="model", current_value=current))
        for key, value in applied.items():
            if key in _RESERVED_OPTION_KEYS:
                continue
            for i, option in enumerate(options):
                if option.id == key:
                    options[i] = _with_value(option, value)
                    break
            else:
                options.append(ev.ConfigOption(id=key, current_value=value))
        if not current and not options:
            return
        self._publish(
            ev.SessionModels(
                current_model_id=current,
                session_models=list(state.models),
                config_options=options,
                original_config_candidate=options,
                data={"original_config_settled": True},
            )
        )

    async def _runtime_mode(self, profile_applied: dict[str, str]) -> list[str]:
        """§4.3 step 2: the persisted session mode, unless the profile already applied it.
        (Step 1, the runtime model, was consumed by the start-model policy at launch.)"""
        mode = str(self.metadata.get("session_mode", ""))
        if not mode or mode == profile_applied.get("mode", ""):
            return []
        try:
            with anyio.fail_after(self.timeouts.request):
                await self._transport().set_mode(mode)
        except (AcpfsmError, TimeoutError):
            return ["mode"]
        return []

    async def _runtime_options(self, final_config_id: str) -> tuple[str, list[str]]:
        """§4.3 step 3: runtime config options, only reached when the catalog is known (the
        SessionInit chart withholds them otherwise); sanitized against that catalog."""
        transport = self._transport()
        failures: list[str] = []
        state = self._model_state
        requested = self.metadata.get("runtime_config_options") or {}
        catalog = {o.id: o for o in state.config_options} if state is not None else {}
        clean: dict[str, str] = {}
        if isinstance(requested, dict):
            for raw_key, raw_value in requested.items():
                key, value = str(raw_key).strip(), str(raw_value).strip()
                option = catalog.get(key)
                if option is None or not value or key.lower() in _RESERVED_OPTION_KEYS:
                    continue
                if option.category.lower() in _RESERVED_OPTION_KEYS:
                    continue
                clean[key] = value
        for key in sorted(clean):
            try:
                with anyio.fail_after(self.timeouts.request):
                    await transport.set_config_option(key, clean[key])
            except (AcpfsmError, TimeoutError):
                failures.append(key)
            else:
                final_config_id = key
        return final_config_id, failures

    def _settle(self, final_config_id: str) -> bool:
        """§4.4: publish the settled snapshot now (True) or defer it (False)."""
        baseline = self._provider_default
        if final_config_id == "":
            if self._model_state is None:
                self._pending_settlement = ("", baseline)
                return False
            self._publish_settled()
            return True
        if final_config_id in self._authoritative:
            # The response was applied to the cache when it arrived; a newer provider update
            # since then is the live state (scenario s62 b), so it is not applied again.
            self._authoritative.discard(final_config_id)
            self._publish_settled()
            return True
        self._pending_settlement = (final_config_id, baseline)
        return False

    def _publish_settled(self, baseline: _ModelState | None = None) -> None:
        """Publish the cache as settled; its config baseline is ``baseline``, else the provider
        default, else the cache itself."""
        live = self._model_state
        assert live is not None
        baseline = baseline or self._provider_default or live
        live.settled = True
        self._publish(
            ev.SessionModels(
                current_model_id=live.current_model_id,
                session_models=list(live.models),
                config_options=list(live.config_options),
                config_baseline_candidate=list(baseline.config_options),
                data={"config_options_settled": True},
            )
        )

    def _apply_models_event(self, event: ev.SessionModels) -> None:
        state = self._model_state or _ModelState()
        if event.current_model_id:
            state.current_model_id = event.current_model_id
        if event.session_models:
            state.models = list(event.session_models)
        if event.config_options:
            state.config_options = list(event.config_options)
        self._model_state = state
        if self._provider_default is None and state.config_options:
            # SettleConfigOptions' baseline when no provider default was captured before the
            # policy (§2.1 step 7): the first cached state that had config options (§4.4,
            # scenario s62 d). The capture at step 7 overwrites this when it runs later.
            self._provider_default = state.copy()

    def _should_inject_resume_context(self) -> bool:
        return (
            self.history is not None
            and self.profile.history_context_injection
            and self.history.has_history(self.session_id)
        )

    async def _effective_prompt(self, text: str) -> str:
        """buildEffectivePrompt (§2.3): inject deferred resume context once."""
        init = self.init
        if (
            init is None
            or init.leaf != "ready_resume_context_pending"
            or self._resume_context_consumed
        ):
            return text
        self._resume_context_consumed = True
        return await self._with_resume_context(text)

    # --------------------------------------------------------------------- prompting --

    async def _wait_initialized(self) -> None:
        await self._init_done.wait()

    async def _initial_prompt(self) -> None:
        try:
            await self._send_initial_prompt()
        finally:
            self._init_done.set()  # also when it failed before its generation was admitted
            self._notify()

    async def _send_initial_prompt(self) -> None:
        text = self.spec.prompt
        if self._should_inject_resume_context():
            text = await self._with_resume_context(text)
        try:
            await self.prompt(
                text, attachments=self.spec.attachments, validate_status=False, initial=True
            )
        except PendingDispatchedPromptTimeout:
            pass  # a barrier failure is not reported (seed D9)
        except AcpfsmError as exc:
            generation = exc.generation if isinstance(exc, PromptError) else 0
            log.warning("initial prompt failed: %s", exc)
            self._publish(
                le.InitialPromptFailed(
                    execution_id=self.id,
                    session_id=self.session_id,
                    prompt_generation=generation,
                    error=str(exc),
                )
            )

    async def prompt(
        self,
        text: str,
        *,
        attachments: Sequence[Attachment] = (),
        dispatch_only: bool = False,
        on_dispatched: Callable[[], object] | None = None,
        validate_status: bool = True,
        initial: bool = False,
    ) -> PromptResult:
        """sendPrompt (lifecycle.md §5.3)."""
        if not initial:
            await self._wait_initialized()
        async with self._prompt_lock:
            await self._pass_dispatch_barrier()
            if validate_status and not self.execution.accepts_prompts:
                raise NotReadyForPrompts(self.id, self.execution.status)
            generation = await self._begin(dispatch_only)
            g = generation.generation
            if initial:  # callers' prompts may queue behind the initial turn from now on
                self._init_done.set()
            await self._history(lambda h: h.append_user(self.session_id, text))
            effective = await self._effective_prompt(text)
            try:
                materialized = await self._materialize(attachments)
            except AttachmentError as exc:
                await self._end_undelivered(generation, "materialization_failed", error=str(exc))
                raise AttachmentError(str(exc), execution_id=self.id, generation=g) from exc
            await self._dispatch(generation, effective, materialized)
            if on_dispatched is not None:
                on_dispatched()
            if dispatch_only:
                return PromptResult(stop_reason="dispatched", generation=g)
            return await self._wait_outcome(generation)

    async def _pass_dispatch_barrier(self) -> None:
        """§5.3 step 3 with seed D8: wait ≤ 10 s for a dispatch-only predecessor."""
        predecessor = self.current
        if predecessor is None or not predecessor.holds_barrier:
            return
        with anyio.move_on_after(self.timeouts.pending_dispatched_prompt):
            while predecessor.holds_barrier:
                await self._changed.wait()
        if predecessor.holds_barrier:  # a completion at the boundary would have released it
            predecessor.fire("barrier_timed_out")
            raise PendingDispatchedPromptTimeout(self.id, self.timeouts.pending_dispatched_prompt)

    async def _begin(self, dispatch_only: bool) -> PromptGeneration:
        """BeginPrompt (§5.1): supersede the previous generation, admit the next."""
        async with self._lifecycle_lock:
            previous = self.current
            if previous is not None:
                previous.fire("superseded_by_successor")
            self._next_generation += 1
            g = self._next_generation
            generation = PromptGeneration(
                g,
                dispatch_only=dispatch_only,
                tags={"execution_id": self.id},
                observers=(self._trace.observer(self.id),),
            )
            self.generations[g] = generation
            while len(self.generations) > _LIVE_GENERATIONS_KEPT:
                old, _ = self.generations.popitem(last=False)
                self._outcomes.pop(old, None)
            self.current = generation
            self._outcomes[g] = _Outcome()
            # resetStreamingStateWithHistory (§5.3 step 6c, R20): detach the unclaimed
            # partial text and reset the buffer in one step; what was detached is persisted
            # once, below; a chunk arriving meanwhile belongs to the new buffer (s104)
            partial = self._take_message()
            self._activity.active_tool_id = ""
            self._activity.active_tool_title = ""
            self.execution.fire("prompt_began")
            self._notify()
        await self._persist_assistant(partial)
        return generation

    async def _materialize(self, attachments: Sequence[Attachment]) -> list[Attachment]:
        """materializeAttachments (§5.3 step 7): every attachment goes through the carrier
        before anything is sent; errors name the attachment id (else its name)."""
        out: list[Attachment] = []
        for attachment in attachments:
            label = attachment.attachment_id or attachment.name
            if not self.acp_session_id:
                raise AttachmentError(
                    f'attachment "{label}" cannot be delivered: ACP session is not ready',
                    execution_id=self.id,
                )
            try:
                out.append(await self._transport().materialize_attachment(attachment))
            except AcpfsmError as exc:
                raise AttachmentError(
                    f'materialize attachment "{label}": {exc}', execution_id=self.id
                ) from exc
        return out

    async def _end_undelivered(
        self, generation: PromptGeneration, event: str, *, error: str = "", **data: Any
    ) -> None:
        """The turn never reached the agent (§5.3 steps 7-8): end the generation and report it.

        kandev H7 left the execution RUNNING with an admitted generation and nobody waiting;
        here the generation ends ``undelivered`` (or ``cancel_escalated``), the execution is
        ready for the next prompt again, and subscribers see ``prompt.failed`` (with that
        outcome) followed by ``agent.ready``."""
        g = generation.generation
        async with self._lifecycle_lock:
            ended_here = False
            if generation.accepts(event):
                leaf = generation.leaf
                generation.fire(event, **data)
                ended_here = generation.leaf != leaf
            outcome = generation.leaf
            before = self.execution.leaf
            if outcome in ("undelivered", "cancel_escalated") and before == "running":
                self.execution.fire("turn_completed")
            self._notify()
        if ended_here and outcome in ("undelivered", "cancel_escalated"):
            self._publish(
                le.PromptFailed(
                    execution_id=self.id,
                    prompt_generation=g,
                    error=error or f"prompt generation {g} was not delivered",
                    outcome=outcome,
                )
            )
        if self.execution.leaf != before:
            self._publish(le.AgentReady(execution_id=self.id, prompt_generation=g))

    async def _dispatch(
        self, generation: PromptGeneration, text: str, attachments: list[Attachment]
    ) -> None:
        """triggerPrompt → dispatchPrompt with the reconnect retry (§5.3 step 8, §5.7)."""
        transport = self._transport()
        g = generation.generation
        try:
            await transport.prompt(text, attachments, g)
        except StreamNotConnected as exc:
            if exc.while_waiting:
                # kandev H2: the request was written and the stream dropped before the ack,
                # so the agent may have it: never re-send (at most once); the caller decides
                await self._trigger_failed(generation, exc)
            await self._retry_after_reconnect(generation, text, attachments, exc)
        except AcpfsmError as exc:
            await self._trigger_failed(generation, exc)
        else:
            await self._mark_dispatched(generation)

    async def _retry_after_reconnect(
        self,
        generation: PromptGeneration,
        text: str,
        attachments: list[Attachment],
        first: StreamNotConnected,
    ) -> None:
        """retryPromptAfterReconnect (§5.7): within 5 s, wait (100 ms polls) for a carrier that
        can redial to come back and resend the same generation. The AgentStream chart follows
        the carrier (``reconnecting`` only when it is ``reconnectable``); a carrier that cannot
        redial (stdio pipes) has nothing to wait for, so the first error is the trigger's."""
        transport = self._transport()
        reconnectable = bool(getattr(transport, "reconnectable", False))
        if generation.leaf == "admitted":
            await self._end_undelivered(
                generation,
                "dispatch_unreachable",
                reconnectable=reconnectable,
                error=f"failed to trigger prompt: {first}",
            )
        if generation.leaf == "undelivered":  # the chart: nothing will redial this carrier
            raise PromptDispatchError(
                f"failed to trigger prompt: {first}",
                execution_id=self.id,
                generation=generation.generation,
            ) from first
        last: AcpfsmError = first
        with anyio.move_on_after(self.timeouts.reconnect_retry):
            # a cancel escalation releases the generation while we wait (§5.10)
            while generation.leaf == "reconnecting":
                if self._follow_carrier(transport.is_connected(), reconnectable):
                    try:
                        await transport.prompt(text, attachments, generation.generation)
                    except StreamNotConnected as exc:
                        last = exc
                        if generation.accepts("dispatch_unreachable"):
                            generation.fire("dispatch_unreachable")
                    except AcpfsmError as exc:
                        await self._trigger_failed(generation, exc)
                    else:
                        await self._mark_dispatched(generation)
                        return
                elif self.stream.leaf != "reconnecting":
                    break  # closed on purpose (stop): nothing will redial
                await anyio.sleep(self.timeouts.reconnect_poll)
        if self.stream.accepts("connect_timed_out") and self.stream.leaf == "reconnecting":
            self.stream.fire("connect_timed_out")
        if generation.leaf == "cancel_escalated":
            raise CancelEscalated(
                f"failed to trigger prompt: {last}: {CANCEL_ESCALATED_MESSAGE}",
                execution_id=self.id,
                generation=generation.generation,
            )
        await self._end_undelivered(generation, "reconnect_timed_out")
        raise PromptDispatchError(
            f"failed to trigger prompt: timed out waiting for updates stream reconnect: {last}",
            execution_id=self.id,
            generation=generation.generation,
        )

    def _follow_carrier(self, carrier_up: bool, reconnectable: bool) -> bool:
        """Bring the AgentStream chart in line with what the carrier reports (a redial the
        event stream does not announce); True when the stream is connected."""
        stream = self.stream
        if carrier_up:
            if stream.leaf == "disconnected" and reconnectable:
                stream.fire("reconnect_requested", reconnectable=True)
            if stream.leaf == "reconnecting":
                stream.fire("connect_succeeded")
        elif stream.leaf == "connected":
            stream.fire("connection_lost", reconnectable=reconnectable)
        elif stream.leaf == "disconnected" and reconnectable:
            stream.fire("reconnect_requested", reconnectable=True)
        return carrier_up and stream.leaf == "connected"

    async def _trigger_failed(self, generation: PromptGeneration, exc: AcpfsmError) -> None:
        cls = classify_error(exc, call=Call.PROMPT)
        await self._end_undelivered(
            generation,
            "dispatch_failed",
            error=f"failed to trigger prompt: {exc}",
            cancel_release=cls.cancel_release,
        )
        if cls.cancel_release:
            raise CancelEscalated(
                f"failed to trigger prompt: {exc}: {CANCEL_ESCALATED_MESSAGE}",
                execution_id=self.id,
                generation=generation.generation,
            ) from exc
        raise PromptDispatchError(
            f"failed to trigger prompt: {exc}",
            execution_id=self.id,
            generation=generation.generation,
        ) from exc

    async def _mark_dispatched(self, generation: PromptGeneration) -> None:
        """MarkPromptDispatched (§5.1): arms activity; ignored after completion (R23)."""
        before = generation.leaf
        generation.fire("dispatch_accepted")
        if generation.is_steerable and before != generation.leaf:
            self._activity.last_at = anyio.current_time()
            self._activity.since_prompt = False
            self._activity.epoch += 1
        self._notify()

    async def _wait_outcome(self, generation: PromptGeneration) -> PromptResult:
        """waitForPromptDone (§5.4) with the stall watchdog (§5.9)."""
        g = generation.generation
        while True:
            leaf = generation.leaf
            outcome = self._outcomes.get(g, _Outcome())
            if leaf == "completed":
                return PromptResult(
                    stop_reason=outcome.stop_reason or "end_turn",
                    generation=g,
                    agent_message=outcome.agent_message,
                )
            if leaf == "handed_off":
                return PromptResult(
                    stop_reason="foreground_idle",
                    generation=g,
                    agent_message=outcome.agent_message,
                )
            if leaf == "failed":
                raise AgentReportedError(outcome.error, execution_id=self.id, generation=g)
            if leaf == "cancel_escalated":
                raise CancelEscalatedAgentError(
                    outcome.error or CANCEL_ESCALATED_SIGNAL, execution_id=self.id, generation=g
                )
            if leaf == "disconnected":
                raise AgentReportedError(outcome.error, execution_id=self.id, generation=g)
            if leaf in ("superseded", "undelivered"):  # pragma: no cover - prompt lock held
                raise PromptError(f"prompt generation {g} {leaf}", execution_id=self.id)
            with anyio.move_on_after(self.timeouts.stall_tick) as tick:
                await self._changed.wait()
            if tick.cancelled_caught:
                self._check_stall(generation)

    def _check_stall(self, generation: PromptGeneration) -> None:
        act = self._activity
        quiet = anyio.current_time() - act.last_at
        if quiet < self.timeouts.stall_threshold or not generation.accepts("stall_detected"):
            return
        before = generation.leaf
        generation.fire("stall_detected")
        if before == "awaited":  # entered stall_reported: publish once per wait
            self._publish(
                le.AgentStalled(
                    execution_id=self.id,
                    prompt_generation=generation.generation,
                    activity_epoch=act.epoch,
                    stalled_for=quiet,
                    never_started=not act.since_prompt,
                    active_tool_id=act.active_tool_id,
                    active_tool_title=act.active_tool_title,
                )
            )

    # ------------------------------------------------------------------------- steer --

    async def steer(
        self,
        text: str,
        *,
        attachments: Sequence[Attachment] = (),
        on_dispatched: Callable[[], object] | None = None,
        validate_status: bool = True,
    ) -> PromptResult:
        """SendPromptSteerWithDispatchCallback (§5.8, seed D6-D7)."""
        await self._wait_initialized()
        if validate_status and not self.execution.accepts_prompts:
            raise NotReadyForPrompts(self.id, self.execution.status)
        if self.current is None or not self.current.is_steerable:  # pre-check (optimization)
            raise SteerNotDispatched("no live prompt generation", execution_id=self.id)
        try:
            materialized = await self._materialize(attachments)
        except AttachmentError as exc:
            raise SteerAttachmentMaterializationError(
                f"steer attachment materialization failed: {exc}", execution_id=self.id
            ) from exc
        async with self._lifecycle_lock:
            generation = self.current
            if generation is None or not generation.accepts("steered"):
                raise SteerNotDispatched("no live prompt generation", execution_id=self.id)
            effective = await self._effective_prompt(text)
            try:
                with anyio.fail_after(self.timeouts.steer_dispatch):
                    await self._transport().steer(effective, materialized, generation.generation)
            except (StreamNotConnected, SteerUnsupported) as exc:
                raise SteerNotDispatched(str(exc), execution_id=self.id) from exc
            except TimeoutError as exc:
                raise SteerDispatchTimeout(
                    f"steer dispatch timed out after {self.timeouts.steer_dispatch:g}s",
                    execution_id=self.id,
                    generation=generation.generation,
                ) from exc
            except AcpfsmError as exc:
                raise PromptDispatchError(
                    f"failed to steer prompt: {exc}",
                    execution_id=self.id,
                    generation=generation.generation,
                ) from exc
            generation.fire("steered")
        await self._history(lambda h: h.append_user(self.session_id, text))
        self._activity.last_at = anyio.current_time()
        if on_dispatched is not None:
            on_dispatched()
        return PromptResult(stop_reason="dispatched", generation=generation.generation)

    # ------------------------------------------------------------------------ cancel --

    async def cancel(self) -> None:
        """CancelAgent (§5.10)."""
        stream_disconnected = False
        acknowledged = True
        try:
            result = await self._transport().cancel()
            acknowledged = result.acknowledged
        except (StreamNotConnected, TransportClosed):
            stream_disconnected = True
        except AcpfsmError as exc:
            raise CancelFailed(f"failed to cancel agent: {exc}", execution_id=self.id) from exc
        generation = self.current
        if generation is None:
            return
        # the chart decides: escalate now, keep waiting, or nothing to cancel
        if await self._fire_escalation(
            generation,
            "cancel_answered",
            acknowledged=acknowledged,
            stream_disconnected=stream_disconnected,
        ):
            await self._finish_escalation(generation)
        with anyio.move_on_after(self.timeouts.cancel_wait):
            while generation.awaits_turn_end:
                await self._changed.wait()
        if generation.awaits_turn_end and await self._fire_escalation(generation, "escalated"):
            await self._finish_escalation(generation)

    async def _fire_escalation(self, generation: PromptGeneration, event: str, **data: Any) -> bool:
        """Send a cancel fact to the generation; True when it entered ``cancel_escalated``."""
        async with self._lifecycle_lock:
            before = generation.leaf
            if generation.accepts(event):
                generation.fire(event, **data)
            escalated = generation.leaf == "cancel_escalated" and before != "cancel_escalated"
            if escalated:
                outcome = self._outcomes.setdefault(generation.generation, _Outcome())
                outcome.error = CANCEL_ESCALATED_SIGNAL
            self._notify()
        return escalated

    async def _finish_escalation(self, generation: PromptGeneration) -> None:
        """escalateStuckCancel (§5.10) after the chart escalated: let the released waiter
        return (≤ 2 s), mark READY, report ``CancelEscalated``."""
        try:
            with anyio.move_on_after(self.timeouts.cancel_escalation):
                async with self._prompt_lock:  # the released waiter has returned
                    pass
        finally:
            # R17: the cleanup runs even when the caller's deadline ends the post-wait (the
            # caller then gets its own cancellation, not CancelEscalated); it never awaits.
            self._ready_after_escalation(generation.generation)
        raise CancelEscalated(CANCEL_ESCALATED_MESSAGE, execution_id=self.id)

    def _ready_after_escalation(self, g: int) -> None:
        """escalateStuckCancel's status step: READY + ``agent.ready`` (not once stopped)."""
        if self.execution.accepts("cancel_escalated"):
            self.execution.fire("cancel_escalated")
            self._publish(le.AgentReady(execution_id=self.id, prompt_generation=g))

    # ------------------------------------------------------------------ configuration --

    async def set_model(self, model_id: str) -> None:
        await self._wait_initialized()
        await self._transport().set_model(model_id)

    async def set_mode(self, mode_id: str) -> None:
        await self._wait_initialized()
        await self._transport().set_mode(mode_id)

    async def set_config_option(self, config_id: str, value: str) -> None:
        await self._wait_initialized()
        await self._transport().set_config_option(config_id, value)

    # -------------------------------------------------------------------------- stop --

    async def stop(self, reason: str, *, force: bool = False) -> ExecutionSnapshot:
        """StopAgentWithReason (§5.12): release any waiter, STOPPED, close the transport."""
        if self.execution.accepts("stop_requested"):
            async with self._lifecycle_lock:
                generation = self.current
                if generation is not None and generation.is_in("dispatched", "handed_off"):
                    self._outcomes.setdefault(
                        generation.generation, _Outcome()
                    ).error = f"agent stream disconnected: execution stopped: {reason}"
                    generation.fire("stream_lost")
                self.execution.fire("stop_requested")
                if self.stream.accepts("close_requested"):
                    self.stream.fire("close_requested")
                self.finished_at = self.finished_at or _utcnow()
                self._notify()
            self._publish(le.AgentStopped(execution_id=self.id, reason=reason))
        elif self.stream.accepts("close_requested"):  # already STOPPED (R32): close it too
            self.stream.fire("close_requested")
        graceful = getattr(self.transport, "stop_agent", None)
        if not force and graceful is not None:
            # §5.12 step 3: a graceful stop first (agentctl's /api/v1/stop); its failure is only
            # logged. ``force`` skips it. A stdio agent has no such step: its shutdown always
            # escalates close stdin → SIGTERM → SIGKILL to its process group, bounded.
            with anyio.move_on_after(self.timeouts.cancel_wait):
                try:
                    await graceful()
                except AcpfsmError as exc:
                    log.warning("graceful agent stop failed for %s: %s", self.id, exc)
        self._stop_requested.set()
        with anyio.CancelScope(shield=True):
            await self._finished.wait()
        return self.snapshot()

    async def recover_stream(self) -> None:
        """RecoverAgentPromptStream (§5.11): revive a FAILED execution whose stream is back.

        A no-op before ACP init (the startup owns its stream, R34) and unless FAILED. When
        the carrier is up again (a reconnectable one redialled) and the agent process has not
        exited, the AgentStream chart follows the redial and the execution goes READY with
        ``agent.boot_ready``; otherwise :class:`TransportClosed` (``agent process is not
        running``) and it stays FAILED."""
        init = self.init
        if init is None or not init.succeeded:
            return
        if not self.execution.accepts("recovered"):
            return
        transport = self._transport()
        reconnectable = bool(getattr(transport, "reconnectable", False))
        up = self.exit_code is None and transport.is_connected()
        if not up or not self._follow_carrier(True, reconnectable):
            raise TransportClosed(
                f'agent process is not running for execution "{self.id}" (stream not recovered)',
                execution_id=self.id,
            )
        self.execution.fire("recovered")
        self._publish(le.AgentBootReady(execution_id=self.id))

    # ------------------------------------------------------------------ event pump --

    async def _pump(self) -> None:
        """Handle the transport's events one at a time, in order (lifecycle.md §1.3)."""
        events: AsyncIterator[ev.AgentEvent] = self._transport().events()
        try:
            async for event in events:
                await self._handle(event)
            if self.stream.leaf in ("connecting", "connected"):
                # the stream ended without saying why: still a loss, so nobody waits forever
                await self._on_stream_lost(ev.StreamDisconnected(error="agent event stream ended"))
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:  # an async generator: finish it now, not at GC time
                with anyio.CancelScope(shield=True):
                    await aclose()

    async def _handle(self, event: ev.AgentEvent) -> None:
        if isinstance(event, ev.Complete | ev.ErrorEvent):
            await self._on_completion(event)
            return
        if isinstance(event, ev.StreamDisconnected):
            await self._on_stream_lost(event)
            return
        if isinstance(event, ev.StreamReconnected):
            if self.stream.accepts("connect_succeeded"):  # the carrier redialled
                self.stream.fire("connect_succeeded")
            self._publish(event)
            return
        self._record_activity(event)
        if isinstance(event, ev.MessageChunk) and event.role != "user" and event.text:
            self._message.append(event.text)
        elif isinstance(event, ev.SessionModels):
            self._on_models(event)
        elif isinstance(event, ev.ToolCall):
            name = event.tool_name or event.tool_title
            self._tool_names[event.tool_call_id] = name
            await self._history(
                lambda h: h.append_tool_call(self.session_id, name, event.tool_call_id)
            )
        elif isinstance(event, ev.ToolUpdate) and ev.is_terminal_tool_update(event):
            name = self._tool_names.get(event.tool_call_id, "")
            output = _tool_output(event)
            await self._history(
                lambda h: h.append_tool_result(self.session_id, name, event.tool_call_id, output)
            )
        elif isinstance(event, ev.ForegroundIdle) and event.prompt_handoff:
            await self._on_handoff(event)
        self._publish(event)

    def _record_activity(self, event: ev.AgentEvent) -> None:
        act = self._activity
        act.last_at = anyio.current_time()
        if not ev.is_turn_content(event):
            return
        act.since_prompt = True
        act.epoch += 1
        if isinstance(event, ev.ToolCall) and not event.parent_tool_call_id:
            # the active *top-level* tool (§5.9): a subagent's tool call does not replace it
            act.active_tool_id = event.tool_call_id
            act.active_tool_title = event.tool_title or event.tool_name
        elif (
            isinstance(event, ev.ToolUpdate)
            and ev.is_terminal_tool_update(event)
            and event.tool_call_id == act.active_tool_id
        ):
            act.active_tool_id = act.active_tool_title = ""
        if self._init_done.is_set() and not ev.is_terminal_tool_update(event):
            self._wakeup_running()  # a wakeup turn (R26): content while READY flips to RUNNING

    def _wakeup_running(self) -> None:
        if self.execution.leaf == "ready":
            self.execution.fire("wakeup_content_arrived")
            self._publish(le.AgentRunning(execution_id=self.id))

    def _on_models(self, event: ev.SessionModels) -> None:
        data = event.data
        if data.get("config_options_source") == "provider_response":
            config_id = str(data.get("config_options_config_id", ""))
            pending = self._pending_settlement
            if pending is not None and pending[0] == config_id:
                self._pending_settlement = None
                self._apply_models_event(event)
                self._publish_settled(pending[1])
                return
            self._authoritative.add(config_id)
        self._apply_models_event(event)
        pending = self._pending_settlement
        if pending is not None and pending[0] == "":
            self._pending_settlement = None
            self._publish_settled(pending[1])

    def _chart_for(self, g: int) -> PromptGeneration | None:
        if g == 0:  # the wildcard/legacy path: the current generation
            return self.current
        return self.generations.get(g)

    async def _on_completion(self, event: ev.Complete | ev.ErrorEvent) -> None:
        """handleCompleteEvent (§5.5): claim once per generation, then mark state.

        A generation-bearing event is claimed by its own generation's chart only (R6, R7); a
        generation-0 event (the wildcard/legacy path) is offered to the current generation
        and, when no live generation takes it, ends a wakeup turn as kandev's gen-0 path does
        (§5.5 step 6b: READY→RUNNING for an empty wakeup, R27, then READY; or FAILED)."""
        is_error = isinstance(event, ev.ErrorEvent) or bool(event.data.get("is_error"))
        message = event.error if isinstance(event, ev.ErrorEvent) else ""
        if is_error and not message:
            message = "agent error completion"
        cls = classify_error(message, call=Call.PROMPT) if is_error else None
        cancel_release = bool(cls and cls.cancel_release)
        stop_reason = (event.stop_reason if isinstance(event, ev.Complete) else "") or "end_turn"
        async with self._lifecycle_lock:
            if not self._init_done.is_set():
                log.debug("ignoring completion before ACP init (R10)")
                return
            generation = self._chart_for(event.prompt_generation)
            if generation is None:
                if event.prompt_generation == 0:
                    await self._on_wakeup_completion(event, is_error, message, stop_reason)
                else:
                    log.debug(
                        "ignoring completion for unknown generation %s", event.prompt_generation
                    )
                return
            g = generation.generation
            before = generation.leaf
            generation.fire("completion_received", is_error=is_error, cancel_release=cancel_release)
            after = generation.leaf
            if before == after or after == "superseded":
                if event.prompt_generation == 0:
                    await self._on_wakeup_completion(event, is_error, message, stop_reason)
                else:
                    log.debug("ignoring completion for prompt generation %s (%s)", g, after)
                return
            outcome = self._outcomes.setdefault(g, _Outcome())
            outcome.agent_message = self._take_message()
            if after == "completed":
                outcome.stop_reason = stop_reason
            else:
                outcome.error = message
            self._activity.last_at = anyio.current_time()
            self._notify()  # R11: the waiter's outcome is set before agent.ready is published
            await self._persist_assistant(outcome.agent_message)
            if event.prompt_generation == 0:  # like kandev's turn id: name the turn it ended
                event = msgspec.structs.replace(event, prompt_generation=g)
            self._publish(event)
            # a stopped execution (stop raced this event) takes no further status change
            if after == "completed":
                ready = self.execution.accepts("turn_completed")
                if ready:
                    self.execution.fire("turn_completed")
                self._publish(
                    le.PromptCompleted(
                        execution_id=self.id, prompt_generation=g, stop_reason=outcome.stop_reason
                    )
                )
                if ready:
                    self._publish(
                        le.AgentReady(
                            execution_id=self.id,
                            prompt_generation=g,
                            stop_reason=outcome.stop_reason,
                        )
                    )
            elif after == "cancel_escalated":
                self._ready_after_escalation(g)
            else:  # failed
                self._publish(
                    le.PromptFailed(
                        execution_id=self.id, prompt_generation=g, error=message, outcome=after
                    )
                )
                self._mark_turn_failed(message, g)

    def _mark_turn_failed(self, message: str, g: int) -> None:
        """handleCompleteEventMarkState, error (§5.5): FAILED + agent.failed, or STOPPED +
        agent.stopped while shutting down (R32); an already-FAILED execution keeps its first
        message and publishes nothing (R7)."""
        status = self.execution.leaf
        if not self.execution.accepts("turn_failed"):
            return  # stopped: final
        self.execution.fire("turn_failed", shutting_down=self._shutting_down())
        if self.execution.leaf == status:
            return
        if self.execution.leaf == "stopped":
            self.finished_at = self.finished_at or _utcnow()
            self._publish(le.AgentStopped(execution_id=self.id, reason="shutdown"))
        else:
            self._set_failed(message)
            self._publish(
                le.AgentFailed(
                    execution_id=self.id, error=message, prompt_generation=g, phase="prompt_send"
                )
            )

    async def _on_wakeup_completion(
        self, event: ev.Complete | ev.ErrorEvent, is_error: bool, message: str, stop_reason: str
    ) -> None:
        """A generation-0 terminal event no live generation claimed: the end of a wakeup (or
        legacy) turn (§5.5 step 6b). Called under the lifecycle lock."""
        text = self._take_message()
        self._activity.last_at = anyio.current_time()
        await self._persist_assistant(text)
        self._publish(event)
        if is_error:
            self._mark_turn_failed(message, 0)
            return
        self._wakeup_running()  # an empty wakeup turn (R27): show it ran
        if self.execution.accepts("turn_completed"):  # never READY here: a real change
            self.execution.fire("turn_completed")
            self._publish(
                le.AgentReady(execution_id=self.id, prompt_generation=0, stop_reason=stop_reason)
            )

    async def _on_handoff(self, event: ev.ForegroundIdle) -> None:
        """handlePromptHandoffEvent (§5.6): only the owning generation's waiter is released
        (R22); the buffer is flushed into its result and into the history, once."""
        if event.prompt_generation == 0:
            return
        async with self._lifecycle_lock:
            generation = self.generations.get(event.prompt_generation)
            if generation is None or not generation.accepts("handoff_received"):
                return
            before = generation.leaf
            generation.fire("handoff_received")
            if generation.leaf == "handed_off" and before != "handed_off":
                outcome = self._outcomes.setdefault(generation.generation, _Outcome())
                outcome.agent_message = self._take_message()
                self._notify()
                await self._persist_assistant(outcome.agent_message)

    def _execution_lost_stream(self) -> bool:
        """Tell the Execution chart the owning stream is gone; True when that made it FAILED
        (an already-FAILED execution absorbs the fact and keeps its first error, R7)."""
        if not self.execution.accepts("stream_lost"):
            return False  # stopped: final
        before = self.execution.leaf
        self.execution.fire("stream_lost")
        return self.execution.leaf != before

    async def _on_stream_lost(self, event: ev.StreamDisconnected) -> None:
        """handleStreamDisconnect (§5.6) and, for a local process, its exit (§5.11)."""
        reconnectable = event.exit_code is None and (
            event.reconnecting or bool(getattr(self.transport, "reconnectable", False))
        )
        if self.stream.accepts("connection_lost"):
            self.stream.fire("connection_lost", reconnectable=reconnectable)
        if not self._init_done.is_set():
            return  # the startup caller owns that failure (R10)
        error = f"agent stream disconnected: {event.error or 'connection closed'}"
        if event.stderr_tail:
            error = f"{error} (stderr: {event.stderr_tail.strip()[-500:]})"
        async with self._lifecycle_lock:
            # flush the partial text once (R20): detached here, so a later reset finds nothing
            partial = self._take_message()
            await self._persist_assistant(partial)
            generation = self.current
            if generation is not None and generation.accepts("stream_lost"):
                before = generation.leaf
                generation.fire("stream_lost")
                if generation.leaf == "disconnected" and before != "disconnected":
                    outcome = self._outcomes.setdefault(generation.generation, _Outcome())
                    outcome.error = error
                    outcome.agent_message = partial
                    if self._execution_lost_stream():
                        self._set_failed(error)
                    self._publish(
                        le.AgentctlError(
                            execution_id=self.id,
                            error=error,
                            prompt_generation=generation.generation,
                        )
                    )
                    self._notify()
            if event.exit_code is not None and self.execution.accepts("process_exited"):
                self.exit_code = event.exit_code
                before_status = self.execution.leaf
                self.execution.fire(
                    "process_exited",
                    exit_code=event.exit_code,
                    shutting_down=self._shutting_down(),
                )
                after_status = self.execution.leaf
                if after_status != before_status:
                    self.finished_at = self.finished_at or _utcnow()
                    if after_status == "completed":
                        self._publish(
                            le.AgentCompleted(execution_id=self.id, exit_code=event.exit_code)
                        )
                    elif after_status == "failed":
                        message = f"agent process exited with code {event.exit_code}"
                        self._set_failed(message)
                        self._publish(
                            le.AgentFailed(execution_id=self.id, error=message, phase="process")
                        )
                    elif after_status == "stopped":
                        self._publish(le.AgentStopped(execution_id=self.id, reason="shutdown"))
            elif event.exit_code is None and self._execution_lost_stream():
                self._set_failed(error)
                self._publish(le.AgentctlError(execution_id=self.id, error=error))
            self._notify()
        if event.exit_code is not None:
            self.hub.close()  # the execution finished: subscriptions end


def _with_value(option: ev.ConfigOption, value: str) -> ev.ConfigOption:
    return ev.ConfigOption(
        id=option.id,
        name=option.name,
        type=option.type,
        category=option.category,
        current_value=value,
        options=option.options,
    )


def _tool_output(event: ev.ToolUpdate) -> str:
    if event.raw_output is not None:
        return event.raw_output if isinstance(event.raw_output, str) else repr(event.raw_output)
    texts = [str(c.get("text", "")) for c in event.tool_call_contents if isinstance(c, dict)]
    return "".join(texts) or event.tool_status
