"""Every effect a chart declares has a handler, and every handler is for a declared effect:
checked when the execution is built (``ExecutionContext.check_handlers``), not when an effect
first fires."""

from __future__ import annotations

import pytest

from acpfsm.adapters.errors import AcpfsmError
from acpfsm.runtime.session.context import ExecutionContext, nothing
from acpfsm.runtime.trace import Trace
from acpfsm.runtime.types import AgentProfile, LaunchSpec, Timeouts, WorkspaceRef
from acpfsm.statecharts import FirstActivity
from acpfsm.statecharts.names import EffectName, FirstActivityEffect


def _context() -> ExecutionContext:
    return ExecutionContext(
        execution_id="e1",
        session_id="s1",
        spec=LaunchSpec(agent_profile_id="p", workspace=WorkspaceRef(path=".")),
        profile=AgentProfile(id="p", command=("agent",)),
        timeouts=Timeouts(),
        trace=Trace(),
        history=None,
        shutting_down=lambda: False,
    )


def test_a_missing_handler_is_found_when_the_execution_is_built() -> None:
    ctx = _context()
    with pytest.raises(AcpfsmError, match=r"no handler for the effects first_activity\."):
        ctx.check_handlers((FirstActivity,))
    ctx.handle(FirstActivity.chart_name, {FirstActivityEffect.publish_agent_running: nothing})
    ctx.check_handlers((FirstActivity,))


def test_a_handler_for_an_undeclared_effect_is_found_too() -> None:
    """A handler registered under a name no chart declares would never run: loud."""
    ctx = _context()
    ctx.handle(
        FirstActivity.chart_name,
        {
            FirstActivityEffect.publish_agent_running: nothing,
            EffectName("publish_agent_runing"): nothing,
        },
    )
    with pytest.raises(
        AcpfsmError, match=r"handlers for undeclared effects first_activity\.publish_agent_runing"
    ):
        ctx.check_handlers((FirstActivity,))
