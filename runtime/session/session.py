"""One execution: its drivers, its transport, and the tasks that run them.

The chart decides, the drivers do (see :mod:`acpfsm.runtime.session`). This module is the thin
anyio shell around them: it opens the transport, runs the session init and the event pump in
the execution's own task group, turns the transport's events into the drivers' facts, and
offers the facade's operations. It decides nothing.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.abc

from acpfsm.adapters import events as ev
from acpfsm.adapters.errors import AcpfsmError, TransportClosed
from acpfsm.adapters.transport import (
    AgentTransport,
    Attachment,
    PermissionPolicy,
    SupportsMcpMode,
)
from acpfsm.statecharts import ChartMachine, EngineName

from .. import events as le
from ..clock import loop_clock
from ..errors import NotReadyForPrompts, PendingDispatchedPromptTimeout, PromptError
from ..history import HistoryStore
from ..hub import EventHub
from ..mcp.execution import KANDEV_MCP_MODES
from ..trace import Trace, TraceRecord
from ..types import AgentProfile, LaunchSpec, PromptResult, Retention, Timeouts
from ..types import Execution as ExecutionSnapshot
from .cancelling import Canceller
from .config import ConfigDriver
from .context import ExecutionContext
from .crash import CrashGuard
from .init import InitDriver
from .permissions import PermissionBroker
from .prompting import PromptDriver
from .status import StatusDriver
from .stream import StreamDriver
from .turns import Generation, TurnDriver

if TYPE_CHECKING:
    from ..mcp.execution import ExecutionMcp

__all__ = ["ExecutionSession"]

log = logging.getLogger("acpfsm.runtime")
_TOOL_NAMES_KEPT = 1024  # the latest tool calls' names, for their results in the history

TransportFactory = Callable[[PermissionPolicy], AbstractAsyncContextManager[AgentTransport]]
"""Opens the execution's transport; the agent's permission requests go to the policy given."""


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
        self.canceller = Canceller(ctx, self.turns, self.status)
        self.prompts = PromptDriver(
            ctx, self.turns, self.status, self.stream, self.init, self.canceller, self._spawn
        )
        self.permissions = PermissionBroker(
            ctx, spec.permission_policy or profile.permission_policy, self._turn_over
        )
        self.crash = CrashGuard(self)
        self._tg: anyio.abc.TaskGroup | None = None
        self._stop_requested = anyio.Event()
        self._finished = anyio.Event()
        self._tool_names: dict[str, str] = {}
        self._clock: Callable[[], float] = anyio.current_time
        ctx.handle("execution", {"close_subscriptions": lambda effect, m: ctx.hub.close()})
        if mcp is not None:
            ctx.mcp = mcp
            mcp.publish = ctx.publish

    # --- identity and views ----------------------------------------------------------------

    @property
    def id(self) -> str:
        return self.ctx.id

    @property
    def session_id(self) -> str:
        return self.ctx.session_id

    @property
    def spec(self) -> LaunchSpec:
        return self.ctx.spec

    @property
    def profile(self) -> AgentProfile:
        return self.ctx.profile

    @property
    def hub(self) -> EventHub:
        return self.ctx.hub

    @property
    def metadata(self) -> dict[str, Any]:
        return self.ctx.metadata

    @property
    def started_at(self) -> dt.datetime:
        return self.ctx.started_at

    @property
    def endpoint(self) -> str:
        return self.ctx.endpoint

    @property
    def acp_session_id(self) -> str:
        return self.ctx.acp_session_id

    @property
    def transport(self) -> AgentTransport | None:
        return self.ctx.transport

    @property
    def execution(self) -> StatusDriver:
        return self.status

    @property
    def current(self) -> Generation | None:
        return self.turns.current

    @property
    def generations(self) -> dict[int, Generation]:
        return self.turns.generations

    @property
    def charts(self) -> dict[str, str]:
        init = self.init.machine
        current = self.turns.current
        return {
            "execution": self.status.machine.state,
            "agent_stream": self.stream.machine.state,
            "session_init": init.state if init is not None else "",
            "prompt_generation": current.machine.state if current is not None else "",
        }

    def transitions(self, chart: str, generation: int | None = None) -> list[TraceRecord]:
        """This execution's recorded transitions of ``chart`` (of one generation), in order,
        as far as the trace keeps them in memory (tests and tools read them)."""
        return [
            r
            for r in self.ctx.trace.for_execution(self.ctx.id)
            if r.chart == chart and (generation is None or r.generation == generation)
        ]

    def snapshot(self) -> ExecutionSnapshot:
        ctx = self.ctx
        caps = ctx.transport.capabilities if ctx.transport is not None else None
        current = self.turns.current
        return ExecutionSnapshot(
            id=ctx.id,
            session_id=ctx.session_id,
            task_id=str(ctx.metadata.get("task_id", "")),
            agent_profile_id=ctx.profile.id,
            workspace_path=ctx.spec.workspace.path,
            agentctl_url=ctx.endpoint,
            status=self.status.status,
            started_at=ctx.started_at,
            finished_at=ctx.finished_at,
            exit_code=ctx.exit_code,
            error_message=ctx.error_message,
            acp_session_id=ctx.acp_session_id,
            agent_name=caps.agent.name if caps is not None else "",
            agent_version=caps.agent.version if caps is not None else "",
            agent_capabilities=caps,
            charts=self.charts,
            prompt_generation=current.number if current is not None else 0,
            metadata=dict(ctx.metadata),
        )

    # --- the run -------------------------------------------------------------------------------

    async def run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Start the agent (raising if that fails), then drive the execution until stopped.
        Once started, nothing it raises leaves it: a failure of its executor, its transport
        or its own code makes the execution FAILED (:class:`~.crash.CrashGuard`)."""
        ctx = self.ctx
        await self.status.fire("start_requested")
        await self.stream.connect_started()
        started = False
        try:
            async with self._open_transport(self.permissions.decide) as transport:
                ctx.transport = transport
                ctx.endpoint = transport.endpoint
                task_status.started()
                started = True
                async with anyio.create_task_group() as tg:
                    self._tg = tg
                    self.stream.attach(tg)  # the redials and the reconnect budget run here
                    tg.start_soon(self._pump)
                    tg.start_soon(self.init.run)
                    await self._stop_requested.wait()
                    tg.cancel_scope.cancel()
        except BaseException as exc:
            if not started:  # the agent never started: FAILED, and the execution is removed
                with anyio.CancelScope(shield=True):
                    await self.stream.connect_failed()
                    await self.status.fire("agent_start_failed")
                    await self.status.fire("stop_requested", reason="agent not started", error="")
                raise
            rest = await self.crash.contain(exc, "run")
            if rest is not None:
                raise rest from None  # a cancellation from outside, KeyboardInterrupt …
        finally:
            self.init.admission.set()
            ctx.hub.close()
            self._finished.set()

    def stop_tasks(self) -> None:
        """End the execution's tasks and close its transport (a crash, or a stop)."""
        self._stop_requested.set()

    def _superseded(self, generation: int) -> bool:
        """The generation's chart says a successor superseded it (never the current one)."""
        current = self.turns.current
        if current is not None and current.number == generation:
            return False
        g = self.turns.generations.get(generation)
        return g is not None and g.machine.is_in("superseded")

    def _turn_over(self, generation: int) -> bool:
        """The generation's chart says its turn is over (ended or superseded)."""
        g = self.turns.generations.get(generation)
        return g is not None and g.machine.is_in("ended", "superseded")

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
            text = ctx.spec.prompt
            if ctx.has_resume_context():
                text = await ctx.with_resume_context(text)
            try:
                await self.prompts.prompt(
                    text, attachments=ctx.spec.attachments, validate_status=False, initial=True
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
        finally:
            self.init.admission.set()  # also when it failed before its generation was admitted

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
            lambda: self.prompts.steer(
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
            if self.ctx.crashed is not None:
                raise self.ctx.crashed
            if self.init.failure is not None:
                raise self.init.failure
            if self.status.status == "READY":
                return self.snapshot()
            if self.status.status in ("FAILED", "COMPLETED", "STOPPED"):
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
        if self.ctx.crashed is not None:
            raise self.ctx.crashed
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
        self.permissions.close("the execution stopped")
        if not self.status.ended:
            async with ctx.lifecycle_lock:
                await self.status.fire(
                    "stop_requested",
                    reason=reason,
                    error=f"agent stream disconnected: execution stopped: {reason}",
                )
        else:  # already STOPPED (R32): close the stream too
            await self.stream.close()
        transport = ctx.transport
        if not force and transport is not None and ctx.crashed is None:
            # a graceful stop first (agentctl's /api/v1/stop); its failure is only logged.
            # A stdio agent has none: its shutdown escalates close stdin → SIGTERM → SIGKILL.
            with anyio.move_on_after(ctx.timeouts.cancel_wait):
                try:
                    await transport.stop_agent()
                except AcpfsmError as exc:
                    log.warning("graceful agent stop failed for %s: %s", ctx.id, exc)
        self._stop_requested.set()
        with anyio.CancelScope(shield=True):
            await self._finished.wait()
        return self.snapshot()

    async def recover_stream(self) -> None:
        """RecoverAgentPromptStream: revive a FAILED execution whose stream is back. A no-op
        before ACP init (the startup owns its stream, R34) and unless FAILED."""
        init = self.init.machine
        if init is None or not init.is_in("prompting", "booted"):
            return
        if not self.status.machine.is_in("failed"):
            return
        ctx = self.ctx
        up = ctx.exit_code is None and self.stream.connected
        if not up:
            raise TransportClosed(
                f'agent process is not running for execution "{ctx.id}" (stream not recovered)',
                execution_id=ctx.id,
            )
        await self.status.fire("recovered")

    # --- the event pump ---------------------------------------------------------------------------

    async def _pump(self) -> None:
        """Handle the transport's events one at a time, in order."""
        self._clock = loop_clock()  # read for every event: looked up once
        async for event in self.ctx.transport_or_raise().events():
            await self._handle(event)
        if self.stream.live:
            # the stream ended without saying why: still a loss, so nobody waits forever
            await self._stream_lost(ev.StreamDisconnected(error="agent event stream ended"))

    async def _handle(self, event: ev.AgentEvent) -> None:
        ctx = self.ctx
        kind = type(event)
        if kind is ev.MessageChunk or kind is ev.Reasoning:
            await self._content(cast("ev.MessageChunk | ev.Reasoning", event))
            return
        if isinstance(event, ev.Complete | ev.ErrorEvent):
            self.permissions.turn_ended(event.prompt_generation)
            await self.turns.completion(event)
            return
        if isinstance(event, ev.StreamDisconnected):
            await self._stream_lost(event)
            return
        if isinstance(event, ev.StreamReconnected):
            await self.stream.redialled(event)  # published when the chart says so
            return
        await self.status.activity()
        await self._record_activity(event)
        if isinstance(event, ev.MessageChunk) and event.role != "user" and event.text:
            if not self._superseded(event.prompt_generation):
                # late text of a turn a successor superseded is not the current reply
                ctx.message.append(event.text)
        elif isinstance(event, ev.SessionModels):
            await self.config.models_updated(event)
        elif isinstance(event, ev.ToolCall):
            name = event.tool_name or event.tool_title
            self._tool_names[event.tool_call_id] = name
            if len(self._tool_names) > _TOOL_NAMES_KEPT:  # a long session, or a flood
                del self._tool_names[next(iter(self._tool_names))]
            await ctx.history_append(
                lambda h: h.append_tool_call(ctx.session_id, name, event.tool_call_id)
            )
        elif isinstance(event, ev.ToolUpdate) and ev.is_terminal_tool_update(event):
            name = self._tool_names.get(event.tool_call_id, "")
            output = _tool_output(event)
            await ctx.history_append(
                lambda h: h.append_tool_result(ctx.session_id, name, event.tool_call_id, output)
            )
        elif isinstance(event, ev.ForegroundIdle) and event.prompt_handoff:
            await self.turns.handoff(event)
        ctx.publish(event)

    async def _content(self, event: ev.MessageChunk | ev.Reasoning) -> None:
        """The high-rate turn content (message and thought chunks), as :meth:`_handle` treats
        any event, without its dispatch: activity, the reply text, published. No chart is
        read or fired unless the first activity is yet to be announced, a wakeup is watched,
        or the chunk is not the current generation's."""
        status = self.status
        if not status.first_activity.ended:
            await status.activity()
        act = self.ctx.activity
        act.last_at = self._clock()
        act.since_prompt = True
        act.epoch += 1
        if status.watching_wakeup:
            await status.turn_content()  # a wakeup turn (R26) when READY
        if (
            type(event) is ev.MessageChunk
            and event.role != "user"
            and event.text
            # late text of a turn a successor superseded is not the current reply
            and not self._superseded(event.prompt_generation)
        ):
            self.ctx.message.append(event.text)
        self.ctx.hub.publish(event)

    async def _record_activity(self, event: ev.AgentEvent) -> None:
        act = self.ctx.activity
        act.last_at = self._clock()
        if not ev.is_turn_content(event):
            return
        act.since_prompt = True
        act.epoch += 1
        if isinstance(event, ev.ToolCall) and not event.parent_tool_call_id:
            # the active *top-level* tool: a subagent's tool call does not replace it
            act.active_tool_id = event.tool_call_id
            act.active_tool_title = event.tool_title or event.tool_name
        elif isinstance(event, ev.ToolUpdate) and ev.is_terminal_tool_update(event):
            if event.tool_call_id == act.active_tool_id:
                act.active_tool_id = act.active_tool_title = ""
            return
        await self.status.turn_content()  # a wakeup turn (R26) when READY

    async def _stream_lost(self, event: ev.StreamDisconnected) -> None:
        """handleStreamDisconnect and, for a local process, its exit."""
        ctx = self.ctx
        if not await self.stream.lost(event):
            return  # the AgentStream chart redials a clean close silently (kandev H9)
        error = f"agent stream disconnected: {event.error or 'connection closed'}"
        if event.stderr_tail:
            error = f"{error} (stderr: {event.stderr_tail.strip()[-500:]})"
        async with ctx.lifecycle_lock:
            claimed = await self.turns.stream_lost(error)
            if event.exit_code is not None:
                await self.status.fire(
                    "process_exited",
                    exit_code=event.exit_code,
                    shutting_down=ctx.shutting_down(),
                    error=f"agent process exited with code {event.exit_code}",
                )
            elif not claimed:
                await self.status.fire("stream_lost", error=error, generation=0)


def _tool_output(event: ev.ToolUpdate) -> str:
    if event.raw_output is not None:
        return event.raw_output if isinstance(event.raw_output, str) else repr(event.raw_output)
    texts = [str(c.get("text", "")) for c in event.tool_call_contents if isinstance(c, dict)]
    return "".join(texts) or event.tool_status


def machine_of(session: ExecutionSession, chart: str) -> ChartMachine | None:
    """The session's current machine of ``chart`` (tests and tools inspect it)."""
    return session.ctx.machines.get(chart)
