"""What one execution shows: its identity, its drivers' views and its snapshot (the facade's
``Execution``), read from its context and its charts. Mixed into
:class:`~.session.ExecutionSession`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from acpfsm.adapters.transport import AgentTransport
from acpfsm.statecharts import answer
from acpfsm.statecharts.names import ExecutionEffect, ExecutionEvent

from ..hub import EventHub
from ..trace import TraceRecord
from ..types import AgentProfile, LaunchSpec
from ..types import Execution as ExecutionSnapshot
from .context import ExecutionContext
from .init import InitDriver
from .status import StatusDriver
from .stream import StreamDriver
from .turns import Generation, TurnDriver

__all__ = ["SessionViews"]


class SessionViews:
    """The read-only side of an execution (see the module docstring)."""

    ctx: ExecutionContext
    status: StatusDriver
    stream: StreamDriver
    init: InitDriver
    turns: TurnDriver

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
            accepts_prompts=self.accepts_prompts(),
        )

    def accepts_prompts(self) -> bool:
        """Whether a prompt sent now would be admitted: the Execution chart's answer to
        ``prompt_requested`` (the question the prompt path asks, kandev ``validateStatus``),
        asked without firing it."""
        names = answer(self.status.machine, ExecutionEvent.prompt_requested)
        return names is not None and ExecutionEffect.refuse_prompt not in names
