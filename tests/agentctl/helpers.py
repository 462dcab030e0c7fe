"""Shared helpers for the agentctl tests: a Runtime over the reference agent, specs, waits."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio

from acpfsm.adapters.acp.process import ShutdownPolicy
from acpfsm.adapters.acp.stdio import StdioConfig
from acpfsm.adapters.agentctl import AgentctlConfig
from acpfsm.runtime import (
    Executor,
    LaunchSpec,
    Runtime,
    StdioExecutor,
    Timeouts,
    WorkspaceRef,
    reference_profile,
)
from acpfsm.runtime.session import ExecutionSession

#: Test bounds: a dropped socket is redialled for at most 2 s.
TEST_CONFIG = AgentctlConfig(
    http_timeout=15.0,
    ready_timeout=10.0,
    request_timeout=30.0,
    reconnect_budget=2.0,
    keepalive_interval=None,
)
TIMEOUTS = Timeouts(cancel_wait=5.0, cancel_escalation=1.0, request=30.0)
FAST_SHUTDOWN = ShutdownPolicy(stdin_close_wait=1.0, term_wait=1.0, kill_wait=1.0)
DELAY = "0.005"


def stdio_executor() -> StdioExecutor:
    # agentctl joins a cancelled turn for 3 s before it gives up; stdio does the same here
    return StdioExecutor(config=StdioConfig(cancel_timeout=3.0), shutdown=FAST_SHUTDOWN)


def make_runtime(
    executors: Mapping[str, Executor], *profile_args: str, trace_path: Path | None = None
) -> Runtime:
    return Runtime(
        profiles=[reference_profile(*profile_args, "--delay", DELAY)],
        executors=executors,
        timeouts=TIMEOUTS,
        trace_path=trace_path,
    )


def spec(
    ws: Path,
    executor_id: str = "agentctl",
    *,
    prompt: str = "",
    prior: str = "",
    **kwargs: Any,
) -> LaunchSpec:
    return LaunchSpec(
        agent_profile_id="reference",
        executor_id=executor_id,
        workspace=WorkspaceRef(path=str(ws)),
        prompt=prompt,
        prior_acp_session=prior,
        **kwargs,
    )


def session_of(rt: Runtime, execution_id: str) -> ExecutionSession:
    return rt._session(execution_id)


async def wait_until(predicate: Callable[[], bool], *, limit: float = 15.0) -> None:
    with anyio.fail_after(limit):
        while not predicate():
            await anyio.sleep(0.01)


def published(rt: Runtime, execution_id: str, kind: type[Any]) -> list[Any]:
    return [e for e in session_of(rt, execution_id).hub._backlog if isinstance(e, kind)]


async def wait_turn_streaming(rt: Runtime, execution_id: str, generation: int) -> None:
    """Until the generation is live and the agent has streamed a chunk of it."""
    from acpfsm.adapters.events import MessageChunk

    s = session_of(rt, execution_id)
    await wait_until(
        lambda: (
            s.current is not None
            and s.current.generation == generation
            and s.current.machine.is_in("dispatched")
        )
    )
    await wait_until(
        lambda: any(
            isinstance(e, MessageChunk) and e.prompt_generation == generation
            for e in s.hub._backlog
        )
    )


async def wait_turn_started(rt: Runtime, execution_id: str, generation: int) -> None:
    """Until the generation is live and the agent has sent turn content for it (so that its
    ``session/prompt`` really is in flight: a steer can hand it off)."""
    from acpfsm.adapters.events import is_turn_content

    s = session_of(rt, execution_id)
    await wait_until(
        lambda: (
            s.current is not None
            and s.current.generation == generation
            and s.current.machine.is_in("dispatched")
            and any(
                is_turn_content(e) and getattr(e, "prompt_generation", 0) == generation
                for e in s.hub._backlog
            )
        )
    )


def workspace(tmp_path: Path, name: str = "ws") -> Path:
    path = tmp_path / name
    path.mkdir(exist_ok=True)
    return path
