"""The SessionInit chart's driver: from a started agent process to a session that is prompting
or booted (kandev lifecycle/session.go ``InitializeAndPromptWithLayers``).

Each working state of :class:`~acpfsm.statecharts.SessionInit` has one entry effect that names
the one thing to do next. :meth:`InitDriver.run` is a table from that effect to a step: it
performs the step (I/O, bounded), feeds its result back as the chart's event, and takes the
next effect the chart returns, until the chart names nothing more to do.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

import anyio

from acpfsm.adapters.classify import Call, classify_error
from acpfsm.adapters.sync import Flag
from acpfsm.statecharts import ChartMachine, Effect
from acpfsm.statecharts.charts import SESSION_INIT
from acpfsm.statecharts.flows import Op
from acpfsm.statecharts.names import SessionInitEffect

from .. import events as le
from ..errors import AuthenticationRequired, SessionInitError
from .config import ConfigDriver
from .context import ExecutionContext, Failed, bounded, flow_effects, nothing
from .interpreter import Answer, FlowRun, Interpreter, Later
from .stream import StreamDriver

_T = TypeVar("_T")

__all__ = ["InitDriver"]

log = logging.getLogger("acpfsm.runtime")


def _why(exc: BaseException) -> str:
    # our request bound raises a bare TimeoutError; say what Go's deadline says
    return str(exc) or "context deadline exceeded"


class InitDriver:
    """Owns the execution's :class:`~acpfsm.statecharts.SessionInit` machine."""

    _snapshot_cached: bool
    """Whether session/new or session/load gave a catalog snapshot: set by their success,
    the one way to ``check_catalog``, its reader (the chart's ``awaiting_catalog``)."""

    def __init__(
        self,
        ctx: ExecutionContext,
        stream: StreamDriver,
        config: ConfigDriver,
        *,
        start_initial_prompt: Callable[[], None],
    ) -> None:
        self.ctx = ctx
        self.stream = stream
        self.config = config
        self.machine: ChartMachine = ctx.start(SESSION_INIT)
        """From the execution's start (``pending`` until the init task runs), so that a stop
        before it ran still abandons it (the coordination table)."""
        self.admission = Flag()
        """Set by the chart's ``open_admission`` effect only: callers' prompts may be admitted
        (the init ended, or the initial prompt's generation was admitted, so callers queue
        behind it)."""
        self.flows: Interpreter = cast("Interpreter", None)
        self.failure: SessionInitError | None = None
        self._start_initial_prompt = start_initial_prompt
        self._error = ""
        self._cause: BaseException | None = None
        self._needs_authentication = False
        self._applied_model = ""
        self._final_config_id = ""
        self._profile_applied: dict[str, str] = {}
        self._failures: list[str] = []
        self._resumed = False
        handlers = flow_effects(SESSION_INIT.chart_name)
        handlers.update(
            {
                SessionInitEffect.send_initial_prompt: self._send_initial_prompt,
                SessionInitEffect.open_admission: self._open_admission,
                SessionInitEffect.fail_init: self._fail_init,
                SessionInitEffect.require_authentication: self._require_authentication,
                SessionInitEffect.publish_agent_recovered: self._publish_agent_recovered,
                # stream_recovery_requested's answer, a question asked in place
                SessionInitEffect.recover_stream: nothing,
            }
        )
        ctx.handle(SESSION_INIT.chart_name, handlers)

    def _publish_agent_recovered(self, effect: Effect, machine: ChartMachine) -> None:
        ctx = self.ctx
        ctx.publish(
            le.AgentRecovered(
                execution_id=ctx.id,
                startup_generation=ctx.startup_generation,
                acp_session_id=ctx.acp_session_id,
            )
        )

    # --- the flow ------------------------------------------------------------------------

    def attach(self, flows: Interpreter) -> None:
        flows.register(
            {
                Op.AWAIT_STREAM: self._await_stream,
                Op.INITIALIZE: self._initialize,
                Op.AUTHENTICATE: self._authenticate,
                Op.LOAD_SESSION: self._load_session,
                Op.NEW_SESSION: self._new_session,
                Op.CHECK_CATALOG: self._check_catalog,
                Op.WAIT_FOR_CATALOG: self._wait_for_catalog,
                Op.APPLY_START_MODEL: self._apply_start_model,
                Op.APPLY_PROFILE_LAYER: self._apply_profile_layer,
                Op.PUBLISH_ORIGINAL_SNAPSHOT: self._publish_original_snapshot,
                Op.APPLY_RUNTIME_MODE: self._apply_runtime_mode,
                Op.APPLY_RUNTIME_OPTIONS: self._apply_runtime_options,
                Op.SETTLE: self._settle,
                Op.ANNOUNCE: self._announce,
            }
        )
        self.flows = flows

    async def run(self) -> None:
        """Drive the init (the SESSION_INIT flow) until the chart names nothing more to do."""
        await self.flows.run("session_init", error=Later(self._message))

    def _message(self) -> str:
        return f"failed to initialize ACP: {self._error}"

    def _failed(self, what: str, exc: BaseException) -> Answer:
        self._error, self._cause = f"{what} failed: {_why(exc)}", exc
        return "failed"

    async def _request(self, call: Callable[[], Awaitable[_T]]) -> _T | Failed:
        """One of the init's requests, bounded by ``Timeouts.request``."""
        return await bounded(self.ctx.timeouts.request, call)

    # --- the steps (ops) ---------------------------------------------------------------------

    async def _await_stream(self, run: FlowRun) -> Answer:
        transport = self.ctx.transport_or_raise()
        while not transport.is_connected():
            self._error, self._cause = "timeout waiting for agent stream to connect", None
            await anyio.sleep(self.ctx.timeouts.catalog_poll)
        self._error = ""
        return "ok", {"reattach": self.ctx.reattach}

    async def _initialize(self, run: FlowRun) -> Answer:
        transport = self.ctx.transport_or_raise()
        got = await self._request(transport.initialize)
        if isinstance(got, Failed):
            return self._failed("initialize", got.error)
        return "ok", {
            "auth_method": self._auth_method(),
            "native_session_resume": self.ctx.profile.native_session_resume,
            "prior_session_id": self.ctx.spec.prior_acp_session,
        }

    def _auth_method(self) -> str:
        return self.ctx.spec.auth_method or self.ctx.profile.auth_method

    async def _authenticate(self, run: FlowRun) -> Answer:
        method = self._auth_method()
        transport = self.ctx.transport_or_raise()
        got = await self._request(lambda: transport.authenticate(method))
        if isinstance(got, Failed):
            return self._failed(f"authenticate {method!r}", got.error)
        return "ok", {
            "native_session_resume": self.ctx.profile.native_session_resume,
            "prior_session_id": self.ctx.spec.prior_acp_session,
        }

    async def _load_session(self, run: FlowRun) -> Answer:
        ctx = self.ctx
        prior = ctx.spec.prior_acp_session
        transport = ctx.transport_or_raise()
        result = await self._request(
            lambda: transport.load_session(
                prior, ctx.spec.workspace.path, ctx.session_mcp_servers()
            )
        )
        if isinstance(result, Failed):
            exc = result.error
            cls = classify_error(exc, call=Call.SESSION_LOAD, loading_session_id=prior)
            log.warning("session/load failed (%s): %s", cls.kind, exc)
            self._failed("session/load", exc)
            return "failed", {"error_class": cls.kind}
        # the existing id is kept whatever the response says
        self._snapshot_cached = self.config.establish(prior, result)
        self._resumed = True
        return "ok"

    async def _new_session(self, run: FlowRun) -> Answer:
        ctx = self.ctx
        transport = ctx.transport_or_raise()
        result = await self._request(
            lambda: transport.new_session(ctx.spec.workspace.path, ctx.session_mcp_servers())
        )
        if isinstance(result, Failed):
            cls = classify_error(result.error, call=Call.SESSION_NEW)
            self._failed("session/new", result.error)
            return "failed", {"error_class": cls.kind}
        self._snapshot_cached = self.config.establish(result.session_id, result)
        return "ok"

    async def _check_catalog(self, run: FlowRun) -> Answer:
        ctx = self.ctx
        return "ok", {
            "snapshot_available": self._snapshot_cached,
            "model_requested": bool(ctx.profile.model or ctx.metadata.get("runtime_model")),
        }

    async def _wait_for_catalog(self, run: FlowRun) -> Answer:
        models = self.ctx.models
        while not models.present():  # noqa: ASYNC110 - 10 ms polls, bounded (the table's)
            await anyio.sleep(self.ctx.timeouts.catalog_poll)
        return "ok"

    async def _apply_start_model(self, run: FlowRun) -> Answer:
        self._applied_model, error = await self.config.start_model()
        if error:
            self._error, self._cause = error, None
            return "failed"
        return "ok"

    async def _apply_profile_layer(self, run: FlowRun) -> Answer:
        self._final_config_id, self._profile_applied = await self.config.profile_layer(
            self._applied_model
        )
        return "ok"

    async def _publish_original_snapshot(self, run: FlowRun) -> Answer:
        self.config.publish_original_snapshot(self._applied_model, self._profile_applied)
        return "ok"

    async def _apply_runtime_mode(self, run: FlowRun) -> Answer:
        self._failures = await self.config.runtime_mode(self._profile_applied)
        return "ok", {"catalog_known": self.config.catalog_known()}

    async def _apply_runtime_options(self, run: FlowRun) -> Answer:
        self._final_config_id, failures = await self.config.runtime_options(self._final_config_id)
        self._failures += failures
        return "ok"

    async def _settle(self, run: FlowRun) -> Answer:
        await self.config.settle(self._final_config_id)
        return "ok"

    async def _announce(self, run: FlowRun) -> Answer:
        ctx = self.ctx
        if self._failures:
            ctx.publish(le.ConfigFailures(execution_id=ctx.id, failures=self._failures))
        ctx.publish(
            le.AcpSessionCreated(
                execution_id=ctx.id,
                session_id=ctx.session_id,
                task_id=str(ctx.metadata.get("task_id", "")),
                acp_session_id=ctx.acp_session_id,
                resumed=self._resumed,
                resume_attempt_id=str(ctx.metadata.get("resume_attempt_id", "")),
            )
        )
        return "ok", {
            "has_initial_prompt": bool(ctx.spec.prompt or ctx.spec.attachments),
            "resume_context_pending": ctx.has_resume_context(),
        }

    # --- effects -----------------------------------------------------------------------------

    def _send_initial_prompt(self, effect: Effect, machine: ChartMachine) -> None:
        self._start_initial_prompt()

    def _open_admission(self, effect: Effect, machine: ChartMachine) -> None:
        self.admission.set()

    def _require_authentication(self, effect: Effect, machine: ChartMachine) -> None:
        self._needs_authentication = True

    def _fail_init(self, effect: Effect, machine: ChartMachine) -> None:
        ctx = self.ctx
        message = f"failed to initialize ACP: {self._error}"
        if self._needs_authentication:
            caps = ctx.transport.capabilities if ctx.transport is not None else None
            self.failure = AuthenticationRequired(
                message,
                auth_methods=caps.auth_methods if caps is not None else (),
                execution_id=ctx.id,
            )
        else:
            self.failure = SessionInitError(message, execution_id=ctx.id)
        self.failure.__cause__ = self._cause
