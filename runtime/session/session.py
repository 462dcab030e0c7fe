"""One execution: its drivers, its transport, and the tasks that run them.

The chart decides, the drivers do (see :mod:`acpfsm.runtime.session`). This module is the thin
anyio shell around them: it opens the transport, runs the session init and the event pump
(:mod:`.pump`) in the execution's own task group, and offers the facade's operations; what the
execution shows is :mod:`.views`'. It decides nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from acpfsm.adapters.errors import AcpfsmError, TransportClosed
from acpfsm.adapters.sync import Mutex
from acpfsm.adapters.transport import (
    AgentTransport,
    Attachment,
    PermissionPolicy,
    SupportsMcpMode,
)
from acpfsm.statecharts import EngineName, says
from acpfsm.statecharts.charts import EXECUTION, SESSION_CHARTS
from acpfsm.statecharts.flows import Lock, Op
from acpfsm.statecharts.names import (
    ExecutionEffect,
    ExecutionEvent,
    PromptGenerationEffect,
    PromptGenerationEvent,
    SessionInitEffect,
    SessionInitEvent,
)

from .. import events as le
from ..errors import NotReadyForPrompts, PendingDispatchedPromptTimeout, PromptError
from ..history import HistoryStore
from ..mcp.execution import KANDEV_MCP_MODES
from ..trace import Trace
from ..types import AgentProfile, LaunchSpec, PromptResult, Retention, Timeouts
from ..types import Execution as ExecutionSnapshot
from .cancelling import Canceller
from .config import ConfigDriver
from .context import ExecutionContext
from .crash import CrashGuard, crash_of
from .init import InitDriver
from .interpreter import Answer, FlowRun, Interpreter
from .permissions import PermissionBroker
from .prompting import PromptDriver
from .pump import EventPump
from .status import StatusDriver
from .steering import SteerDriver
from .stream import StreamDriver
from .turns import TurnDriver
from .views import SessionViews

if TYPE_CHECKING:
    from ..mcp.execution import ExecutionMcp

__all__ = ["ExecutionSession"]

log = logging.getLogger("acpfsm.runtime")

TransportFactory = Callable[[PermissionPolicy], AbstractAsyncContextManager[AgentTransport]]
"""Opens the execution's transport; the agent's permission requests go to the policy given."""


class ExecutionSession(SessionViews):
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
        engine: EngineName | None = None,
        mcp: ExecutionMcp | None = None,
        retention: Retention | None = None,
    ) -> None:
        ctx = self.ctx = ExecutionContext(
            execution_id=execution_id,
            session_id=session_id,
            spec=spec,
            profile=profile,
            timeouts=timeouts,
            trace=trace,
            history=history,
            shutting_down=shutting_down,
            engine=engine,
            retention=retention,
        )
        self._open_transport = open_transport
        self.status = StatusDriver(ctx)
        self.stream = StreamDriver(ctx)
        self.config = ConfigDriver(ctx)
        self.init = InitDriver(
            ctx, self.stream, self.config, start_initial_prompt=self._start_initial_prompt
        )
        self.turns = TurnDriver(ctx, self.status)
        self._tg: anyio.abc.TaskGroup | None = None
        self._stop_requested = anyio.Event()
        self._finished = anyio.Event()
        self.flows = Interpreter(
            ctx,
            turns=self.turns,
            status=self.status,
            stream=self.stream,
            locks={Lock.PROMPT: Mutex(), Lock.LIFECYCLE: ctx.lifecycle_lock},
            admission=self.init.admission,
            finished=self._finished.wait,
            spawn=self._spawn,
        )
        self.stream.attach(self.flows)
        self.init.attach(self.flows)
        self.canceller = Canceller(ctx, self.flows)
        self.prompts = PromptDriver(ctx, self.turns, self.status, self.init, self.flows)
        self.steers = SteerDriver(ctx, self.prompts, self.flows)
        self.permissions = PermissionBroker(
            ctx, spec.permission_policy or profile.permission_policy, self._turn_over
        )
        self.pump = EventPump(
            ctx, self.status, self.stream, self.turns, self.config, self.permissions, self.flows
        )
        self.crash = CrashGuard(self)
        ctx.handle(
            EXECUTION.chart_name,
            {ExecutionEffect.close_subscriptions: lambda effect, m: ctx.hub.close()},
        )
        self.flows.register(
            {
                Op.CLOSE_PERMISSIONS: self._close_permissions,
                Op.STOP_AGENT: self._stop_agent,
                Op.END_TASKS: self._end_tasks,
            }
        )
        self.flows.check()
        ctx.check_handlers(SESSION_CHARTS)
        if mcp is not None:
            ctx.mcp = mcp
            mcp.publish = ctx.publish

    # --- the run -------------------------------------------------------------------------------

    async def run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Start the agent (raising if that fails), then drive the execution until stopped.
        Once started, nothing it raises leaves it: a failure of its executor, its transport
        or its own code makes the execution FAILED (:class:`~.crash.CrashGuard`)."""
        ctx = self.ctx
        await self.status.fire(ExecutionEvent.start_requested)
        await self.stream.connect_started()
        started = False
        try:
            async with self._open_transport(self.permissions.decide) as transport:
                ctx.transport = transport
                ctx.endpoint = transport.endpoint
                task_status.started()
                started = True
                async with anyio.create_task_group() as tg:
                    self._tg = tg  # the flows in the background (redials, budget …) run here
                    tg.start_soon(self.pump.run)
                    tg.start_soon(self.init.run)
                    tg.start_soon(self.prompts.stalls.run)
                    await self._stop_requested.wait()
                    tg.cancel_scope.cancel()
        except BaseException as exc:
            if not started:  # the agent never started: FAILED, and the execution is removed
                with anyio.CancelScope(shield=True):
                    await self.stream.connect_failed()
                    await self.status.fire(ExecutionEvent.agent_start_failed)
                    await self.status.fire(
                        ExecutionEvent.stop_requested, reason="agent not started", error=""
                    )
                raise
            rest = await self.crash.contain(exc, "run")
            if rest is not None:
                raise rest from None  # a cancellation from outside, KeyboardInterrupt …
        finally:
            ctx.hub.close()
            self._finished.set()

    def stop_tasks(self) -> None:
        """End the execution's tasks and close its transport (a crash, or a stop)."""
        self._stop_requested.set()

    @property
    def stopping(self) -> bool:
        """Its tasks were told to end (a stop got that far, or a crash)."""
        return self._stop_requested.is_set()

    def _turn_over(self, generation: int) -> bool:
        """The generation's chart says its turn is over: its answer to
        ``permission_requested``, asked without firing."""
        g = self.turns.generations.get(generation)
        if g is None:
            return False
        return says(
            g.machine, PromptGenerationEvent.permission_requested, PromptGenerationEffect.turn_over
        )

    async def wait_finished(self) -> None:
        await self._finished.wait()

    def _start_initial_prompt(self) -> None:
        self._spawn(self._initial_prompt)

    def _spawn(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``work`` in the execution's task group (it ends with the execution)."""
        if self._tg is not None:
            self._tg.start_soon(work)

    async def _initial_prompt(self) -> None:
        """The initial dispatch (``InitializeAndPrompt``): resume context inline, then the
        prompt; its failure is reported, never raised (seed D9)."""
        ctx = self.ctx
        try:
            await self.prompts.prompt(
                ctx.spec.prompt,
                attachments=ctx.spec.attachments,
                validate_status=False,
                initial=True,
            )
        except PendingDispatchedPromptTimeout:
            pass  # a barrier failure is not reported (seed D9)
        except AcpfsmError as exc:
            generation = exc.generation if isinstance(exc, PromptError) else 0
            log.warning("initial prompt failed: %s", exc)
            ctx.publish(
                le.InitialPromptFailed(
                    execution_id=ctx.id,
                    session_id=ctx.session_id,
                    prompt_generation=generation,
                    error=str(exc),
                )
            )

    # --- the facade's operations ----------------------------------------------------------------

    async def prompt(
        self,
        text: str,
        *,
        attachments: Sequence[Attachment] = (),
        dispatch_only: bool = False,
        on_dispatched: Callable[[], object] | None = None,
        validate_status: bool = True,
        timeout: float | None = None,  # noqa: ASYNC109 - a typed PromptTimeout, turn cancelled
        on_admitted: Callable[[int], object] | None = None,
    ) -> PromptResult:
        return await self.crash.call(
            "prompt",
            lambda: self.prompts.prompt(
                text,
                attachments=attachments,
                dispatch_only=dispatch_only,
                on_dispatched=on_dispatched,
                validate_status=validate_status,
                timeout=timeout,
                on_admitted=on_admitted,
            ),
        )

    async def steer(
        self,
        text: str,
        *,
        attachments: Sequence[Attachment] = (),
        on_dispatched: Callable[[], object] | None = None,
        validate_status: bool = True,
    ) -> PromptResult:
        return await self.crash.call(
            "steer",
            lambda: self.steers.steer(
                text,
                attachments=attachments,
                on_dispatched=on_dispatched,
                validate_status=validate_status,
            ),
        )

    async def cancel(self) -> None:
        await self.crash.call("cancel", self.canceller.cancel)

    async def wait_ready(self) -> ExecutionSnapshot:
        """Wait until the execution is READY (its init, and its initial prompt, done);
        raises the init's SessionInitError (with its cause) when the init failed, and
        NotReadyForPrompts when the execution ended or failed otherwise."""
        await self.init.admission.wait()
        while True:
            if (crash := crash_of(self.ctx)) is not None:
                raise crash
            if self.init.failure is not None:
                raise self.init.failure
            ready = self.status.ready()  # the Execution chart's answer
            if ready:
                return self.snapshot()
            if ready is not None:
                raise NotReadyForPrompts(self.ctx.id, self.status.status)
            await self.status.changed()

    async def set_model(self, model_id: str) -> None:
        await self.init.admission.wait()
        await self.crash.call("set_model", lambda: self._transport().set_model(model_id))

    async def set_mode(self, mode_id: str) -> None:
        await self.init.admission.wait()
        await self.crash.call("set_mode", lambda: self._transport().set_mode(mode_id))

    async def set_config_option(self, config_id: str, value: str) -> None:
        await self.init.admission.wait()
        await self.crash.call(
            "set_config_option", lambda: self._transport().set_config_option(config_id, value)
        )

    def _transport(self) -> AgentTransport:
        """The transport, unless the execution crashed (its transport is being closed)."""
        if (crash := crash_of(self.ctx)) is not None:
            raise crash
        return self.ctx.transport_or_raise()

    async def set_mcp_mode(self, mode: str) -> None:
        """Switch the MCP mode (already validated): agentctl's embedded MCP server first
        (kandev's modes only), then the app's tool set and the ``mcp.*`` actions answered."""
        transport = self.ctx.transport
        if mode in KANDEV_MCP_MODES and isinstance(transport, SupportsMcpMode):
            await transport.set_mcp_mode(mode)
        self.ctx.metadata["mcp_mode"] = mode
        if self.ctx.mcp is not None:
            await self.ctx.mcp.set_mode(mode)

    async def stop(self, reason: str, *, force: bool = False) -> ExecutionSnapshot:
        """StopAgentWithReason: STOPPED (the live turn and the stream follow), a graceful
        agent stop unless ``force``, then the transport is closed."""
        return await self.crash.call("stop", lambda: self._stop(reason, force=force))

    async def _stop(self, reason: str, *, force: bool) -> ExecutionSnapshot:
        ctx = self.ctx
        ctx.stop_reason = ctx.stop_reason or reason
        await self.flows.run(
            "stop",
            reason=reason,
            error=f"agent stream disconnected: execution stopped: {reason}",
            graceful=not force and ctx.transport is not None and crash_of(ctx) is None,
        )
        return self.snapshot()

    async def _close_permissions(self, run: FlowRun) -> Answer:
        self.permissions.close("the execution stopped")
        return "ok"

    async def _stop_agent(self, run: FlowRun) -> Answer:
        """A graceful agent stop (agentctl's /api/v1/stop; a stdio agent has none: its
        shutdown escalates close stdin → SIGTERM → SIGKILL); its failure is only logged."""
        try:
            await self.ctx.transport_or_raise().stop_agent()
        except AcpfsmError as exc:
            log.warning("graceful agent stop failed for %s: %s", self.ctx.id, exc)
            return "failed"
        return "ok"

    async def _end_tasks(self, run: FlowRun) -> Answer:
        """STOPPED: the execution's tasks end (even when the caller left meanwhile)."""
        self._stop_requested.set()
        return "ok"

    async def recover_stream(self) -> None:
        """RecoverAgentPromptStream: revive a FAILED execution whose stream is back. A no-op
        before ACP init (the startup owns its stream, R34) and unless FAILED."""
        ctx = self.ctx
        init, status = self.init.machine, self.status.machine
        if not says(
            init, SessionInitEvent.stream_recovery_requested, SessionInitEffect.recover_stream
        ):
            return  # the init is not over (or failed): the startup owns the stream (R34)
        if not says(
            status, ExecutionEvent.stream_recovery_requested, ExecutionEffect.recover_stream
        ):
            return  # nothing to recover: the execution is not FAILED
        if ctx.exit_code is not None or self.stream.carrier() is not True:
            raise TransportClosed(
                f'agent process is not running for execution "{ctx.id}" (stream not recovered)',
                execution_id=ctx.id,
            )
        await self.status.fire(ExecutionEvent.recovered)
