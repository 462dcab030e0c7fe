"""Helpers for runtime tests over the in-memory transport."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel

from acpfsm.adapters.memory import MemoryTransport
from acpfsm.adapters.transport import AgentTransport
from acpfsm.runtime import AgentProfile, LaunchSpec, Runtime, Timeouts, WorkspaceRef
from acpfsm.runtime.session import ExecutionSession


class MemoryExecutor:
    """Hands out MemoryTransports; ``make`` customises each new one."""

    def __init__(self, make: Callable[[], MemoryTransport] | None = None) -> None:
        self.make = make or MemoryTransport
        self.transports: list[MemoryTransport] = []

    def open(
        self, profile: AgentProfile, spec: LaunchSpec, execution_id: str
    ) -> AbstractAsyncContextManager[AgentTransport]:
        @asynccontextmanager
        async def cm() -> AsyncIterator[AgentTransport]:
            transport = self.make()
            self.transports.append(transport)
            try:
                yield transport
            finally:
                await transport.aclose()

        return cm()

    @property
    def last(self) -> MemoryTransport:
        return self.transports[-1]


PROFILE = AgentProfile(id="mem", command=("unused",))


def spec(prompt: str = "", **kw: Any) -> LaunchSpec:
    return LaunchSpec(
        agent_profile_id=kw.pop("agent_profile_id", "mem"),
        executor_id="memory",
        workspace=WorkspaceRef(path=kw.pop("path", "/tmp")),
        prompt=prompt,
        **kw,
    )


def make_runtime(
    executor: MemoryExecutor,
    *,
    profiles: tuple[AgentProfile, ...] = (PROFILE,),
    time_scale: float = 1.0,
    **kw: Any,
) -> Runtime:
    return Runtime(
        profiles=profiles,
        executors={"memory": executor},
        timeouts=Timeouts().scaled(time_scale),
        **kw,
    )


def session_of(rt: Runtime, execution_id: str) -> ExecutionSession:
    return rt._session(execution_id)


async def settle() -> None:
    """Let every ready task run (a few scheduler passes)."""
    for _ in range(20):
        await anyio.lowlevel.checkpoint()


async def wait_until(predicate: Callable[[], bool], *, limit: float = 30.0) -> None:
    with anyio.fail_after(limit):
        while not predicate():
            await anyio.sleep(0.001)
