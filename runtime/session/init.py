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

import anyio

from acpfsm.adapters.classify import Call, classify_error
from acpfsm.adapters.errors import AcpfsmError
from acpfsm.statecharts import ChartMachine, Effect, SessionInit

from .. import events as le
from ..errors import AuthenticationRequired, SessionInitError
from .config import ConfigDriver
from .context import ExecutionContext
from .stream import StreamDriver

__all__ = ["InitDriver"]

log = logging.getLogger("acpfsm.runtime")


def _why(exc: BaseException) -> str:
    # our request bound raises a bare TimeoutError; say what Go's deadline says
    return str(exc) or "context deadline exceeded"


class InitDriver:
    """Owns the execution's :class:`~acpfsm.statecharts.SessionInit` machine."""

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
        self.machine: ChartMachine | None = None
        self.admission = anyio.Event()
        """Set once callers' prompts may be admitted: the init ended, or the initial
        prompt's generation was admitted (so callers queue behind it)."""
        self.failure: SessionInitError | None = None
        self._start_initial_prompt = start_initial_prompt
        self._todo: list[str] = []
        self._error = ""
        self._cause: BaseException | None = None
        self._needs_authentication = False
        self._applied_model = ""
        self._final_config_id = ""
        self._profile_applied: dict[str, str] = {}
        self._failures: list[str] = []
        self._resumed = False
        self._snapshot_cached = False
        self._steps: dict[str, Callable[[ChartMachine], Awaitable[None]]] = {
            "await_stream": self._await_stream,
            "initialize": self._initialize,
            "authenticate": self._authenticate,
            "load_session": self._load_session,
            "new_session": self._new_session,
            "check_catalog": self._check_catalog,
            "wait_for_catalog": self._wait_for_catalog,
            "apply_start_model": self._apply_start_model,
            "apply_profile_layer": self._apply_profile_layer,
            "publish_original_snapshot": self._publish_original_snapshot,
            "apply_runtime_mode": self._apply_runtime_mode,
            "apply_runtime_options": self._apply_runtime_options,
            "settle": self._settle,
            "announce": self._announce,
        }
        handlers = dict.fromkeys(self._steps, self._queue)
        handlers.update(
            {
                "send_initial_prompt": self._send_initial_prompt,
                "open_admission": self._open_admission,
                "fail_init": self._fail_init,
                "require_authentication": self._require_authentication,
                "inject_resume_context": self._noop,
            }
        )
        ctx.handle(SessionInit.chart_name, handlers)

    # --- the loop ----------------------------------------------------------------------------

    def _queue(self, effect: Effect, machine: ChartMachine) -> None:
        self._todo.append(effect.name)

    @staticmethod
    def _noop(effect: Effect, machine: ChartMachine) -> None:
        """Performed by the prompt that composed its text (it reads the step)."""

    async def run(self) -> None:
        """Drive the init until the chart names nothing more to do."""
        machine = self.machine = self.ctx.start(SessionInit)
        try:
            self._todo = [e.name for e in machine.initial_effects()]
            while self._todo:
                await self._steps[self._todo.pop(0)](machine)
        except anyio.get_cancelled_exc_class():
            self.admission.set()
            with anyio.CancelScope(shield=True):
                if not machine.ended:
                    await self.ctx.step(machine, "init_abandoned")
            raise
        except BaseException:
            self.admission.set()
            raise

    # --- the steps ---------------------------------------------------------------------------

    async def _await_stream(self, machine: ChartMachine) -> None:
        t = self.ctx.timeouts
        transport = self.ctx.transport_or_raise()
        with anyio.move_on_after(t.stream_connect) as scope:
            while not transport.is_connected():  # noqa: ASYNC110 - a bounded poll
                await anyio.sleep(t.catalog_poll)
        if scope.cancelled_caught:
            self._error, self._cause = "timeout waiting for agent stream to connect", None
            await self.stream.connect_timed_out()
            await self._fire(machine, "stream_connect_timed_out")
        else:
            await self.stream.connect_succeeded()
            await self._fire(machine, "stream_ready", reattach=self.ctx.reattach)

    async def _initialize(self, machine: ChartMachine) -> None:
        try:
            with anyio.fail_after(self.ctx.timeouts.request):
                await self.ctx.transport_or_raise().initialize()
        except (AcpfsmError, TimeoutError) as exc:
            self._error, self._cause = f"initialize failed: {_why(exc)}", exc
            await self._fire(machine, "initialize_failed")
        else:
            await self._fire(
                machine,
                "initialize_succeeded",
                auth_method=self._auth_method(),
                native_session_resume=self.ctx.profile.native_session_resume,
                prior_session_id=self.ctx.spec.prior_acp_session,
            )

    def _auth_method(self) -> str:
        return self.ctx.spec.auth_method or self.ctx.profile.auth_method

    async def _authenticate(self, machine: ChartMachine) -> None:
        method = self._auth_method()
        try:
            with anyio.fail_after(self.ctx.timeouts.request):
                await self.ctx.transport_or_raise().authenticate(method)
        except (AcpfsmError, TimeoutError) as exc:
            self._error, self._cause = f"authenticate {method!r} failed: {_why(exc)}", exc
            await self._fire(machine, "authentication_failed")
        else:
            await self._fire(
                machine,
                "authenticated",
                native_session_resume=self.ctx.profile.native_session_resume,
                prior_session_id=self.ctx.spec.prior_acp_session,
            )

    async def _load_session(self, machine: ChartMachine) -> None:
        ctx = self.ctx
        prior = ctx.spec.prior_acp_session
        try:
            with anyio.fail_after(ctx.timeouts.request):
                result = await ctx.transport_or_raise().load_session(
                    prior, ctx.spec.workspace.path, ctx.session_mcp_servers()
                )
        except (AcpfsmError, TimeoutError) as exc:
            cls = classify_error(exc, call=Call.SESSION_LOAD, loading_session_id=prior)
            self._error, self._cause = f"session/load failed: {_why(exc)}", exc
            log.warning("session/load failed (%s): %s", cls.kind, exc)
            await self._fire(machine, "load_failed", error_class=cls.kind)
        else:
            # the existing id is kept whatever the response says
            self._snapshot_cached = self.config.establish(prior, result)
            self._resumed = True
            await self._fire(machine, "load_succeeded")

    async def _new_session(self, machine: ChartMachine) -> None:
        ctx = self.ctx
        try:
            with anyio.fail_after(ctx.timeouts.request):
                result = await ctx.transport_or_raise().new_session(
                    ctx.spec.workspace.path, ctx.session_mcp_servers()
                )
        except (AcpfsmError, TimeoutError) as exc:
            cls = classify_error(exc, call=Call.SESSION_NEW)
            self._error, self._cause = f"session/new failed: {_why(exc)}", exc
            await self._fire(machine, "new_session_failed", error_class=cls.kind)
        else:
            self._snapshot_cached = self.config.establish(result.session_id, result)
            await self._fire(machine, "new_session_succeeded")

    async def _check_catalog(self, machine: ChartMachine) -> None:
        ctx = self.ctx
        await self._fire(
            machine,
            "catalog_checked",
            snapshot_available=self._snapshot_cached,
            model_requested=bool(ctx.profile.model or ctx.metadata.get("runtime_model")),
        )

    async def _wait_for_catalog(self, machine: ChartMachine) -> None:
        t = self.ctx.timeouts
        models = self.ctx.models
        with anyio.move_on_after(t.catalog_wait):
            while not models.present():  # noqa: ASYNC110 - 10 ms polls, bounded
                await anyio.sleep(t.catalog_poll)
        await self._fire(
            machine, "catalog_arrived" if models.present() else "catalog_wait_timed_out"
        )

    async def _apply_start_model(self, machine: ChartMachine) -> None:
        self._applied_model, error = await self.config.start_model()
        if error:
            self._error, self._cause = error, None
            await self._fire(machine, "start_model_failed")
        else:
            await self._fire(machine, "start_model_settled")

    async def _apply_profile_layer(self, machine: ChartMachine) -> None:
        self._final_config_id, self._profile_applied = await self.config.profile_layer(
            self._applied_model
        )
        await self._fire(machine, "profile_layer_applied")

    async def _publish_original_snapshot(self, machine: ChartMachine) -> None:
        self.config.publish_original_snapshot(self._applied_model, self._profile_applied)
        await self._fire(machine, "original_snapshot_published")

    async def _apply_runtime_mode(self, machine: ChartMachine) -> None:
        self._failures = await self.config.runtime_mode(self._profile_applied)
        await self._fire(machine, "runtime_mode_applied", catalog_known=self.config.catalog_known())

    async def _apply_runtime_options(self, machine: ChartMachine) -> None:
        self._final_config_id, failures = await self.config.runtime_options(self._final_config_id)
        self._failures += failures
        await self._fire(machine, "runtime_options_applied")

    async def _settle(self, machine: ChartMachine) -> None:
        await self.config.settle(self._final_config_id)
        await self._fire(machine, "settlement_requested")

    async def _announce(self, machine: ChartMachine) -> None:
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
        await self._fire(
            machine,
            "session_announced",
            has_initial_prompt=bool(ctx.spec.prompt or ctx.spec.attachments),
            resume_context_pending=ctx.has_resume_context(),
        )

    async def _fire(self, machine: ChartMachine, event: str, **data: object) -> None:
        await self.ctx.step(
            machine, event, error=f"failed to initialize ACP: {self._error}", **data
        )

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
