"""Helpers for runtime tests over the in-memory transport."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import anyio
import anyio.lowlevel
import msgspec

from acpfsm.adapters.memory import MemoryTransport
from acpfsm.runtime import (
    AgentProfile,
    ExecutionRef,
    LaunchSpec,
    Runtime,
    Timeouts,
    WorkspaceRef,
)
from acpfsm.runtime.session import ExecutionSession
from acpfsm.testing.memory import MemoryExecutor

PROFILE = AgentProfile(id="mem", command=("unused",))


def spec(prompt: str = "", **kw: Any) -> LaunchSpec:
    return LaunchSpec(
        agent_profile_id=kw.pop("agent_profile_id", "mem"),
        executor_id="memory",
        workspace=WorkspaceRef(path=kw.pop("path", "/tmp")),
        prompt=prompt,
        **kw,
    )


def memory_agent(
    setup: Callable[[MemoryTransport], None] | None = None, **kw: Any
) -> MemoryExecutor:
    """A memory executor whose every transport is ``MemoryTransport(**kw)``, then handed to
    ``setup`` (to install handlers or change its state) before the execution uses it."""

    def make() -> MemoryTransport:
        t = MemoryTransport(**kw)
        if setup is not None:
            setup(t)
        return t

    return MemoryExecutor(make)


def raiser(exc: BaseException) -> Callable[..., Any]:
    """A transport handler that raises ``exc`` whatever it is called with."""

    def handler(*_: Any) -> Any:
        raise exc

    return handler


def make_runtime(
    executor: MemoryExecutor,
    *,
    profiles: tuple[AgentProfile, ...] = (PROFILE,),
    time_scale: float = 1.0,
    timeouts: Mapping[str, float] | None = None,
    **kw: Any,
) -> Runtime:
    """A runtime over ``executor`` with every timeout scaled by ``time_scale``, then the
    ``timeouts`` given (by field name) as they are."""
    bounds = msgspec.structs.replace(Timeouts().scaled(time_scale), **(timeouts or {}))
    return Runtime(profiles=profiles, executors={"memory": executor}, timeouts=bounds, **kw)


def session_of(rt: Runtime, execution_id: str) -> ExecutionSession:
    return rt._session(execution_id)


async def launch_session(
    rt: Runtime, prompt: str = "", *, ready: bool = False, **kw: Any
) -> tuple[ExecutionRef, ExecutionSession]:
    """Launch ``spec(prompt, **kw)`` and return its ref and session; with ``ready``, once the
    execution is READY."""
    ref = await rt.launch(spec(prompt, **kw))
    s = session_of(rt, ref.id)
    if ready:
        await wait_until(lambda: s.execution.status == "READY")
    return ref, s


async def launch_ready(
    rt: Runtime, ex: MemoryExecutor, **kw: Any
) -> tuple[str, ExecutionSession, MemoryTransport]:
    """Launch ``spec(**kw)`` over ``ex``; once READY, its id, session and transport."""
    ref, s = await launch_session(rt, ready=True, **kw)
    return ref.id, s, ex.last


async def settle() -> None:
    """Let every ready task run (a few scheduler passes)."""
    for _ in range(20):
        await anyio.lowlevel.checkpoint()


async def wait_until(predicate: Callable[[], bool], *, limit: float = 30.0) -> None:
    with anyio.fail_after(limit):
        while not predicate():
            await anyio.sleep(0.001)
