"""An executor over the in-memory transport: a :class:`~acpfsm.runtime.Runtime` without agents.

``Runtime(profiles=[...], executors={"memory": MemoryExecutor()})`` runs every launch whose
spec names the ``memory`` executor against a fresh
:class:`~acpfsm.adapters.memory.MemoryTransport` (the tests drive it; the bench measures the
runtime's own footprint with it). Not imported by :mod:`acpfsm.testing` itself.

It is a :class:`~acpfsm.adapters.executor.RecoverableExecutor` within one process: an
execution it was told to :meth:`~MemoryExecutor.detach` (a Runtime with a store left it
running) survives, and a later Runtime on the same store reattaches to it (a new transport
with the stored session); any other stored execution is gone. ``orphans`` names executions to
report as orphaned instead (``end_orphan`` forgets them).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from acpfsm.adapters.executor import AgentLaunch, Probe
from acpfsm.adapters.memory import MemoryTransport
from acpfsm.adapters.transport import AgentTransport, InitializeResult

__all__ = ["MemoryExecutor"]


class MemoryExecutor:
    """Hands out MemoryTransports (closed when their execution ends); ``make`` customises
    each new one, ``transports`` keeps every one handed out, in order. Each one answers its
    permission requests with its launch's ``permission_policy``."""

    def __init__(self, make: Callable[[], MemoryTransport] | None = None) -> None:
        self.make = make or MemoryTransport
        self.transports: list[MemoryTransport] = []
        self.survivors: set[str] = set()
        """Executions whose agent outlived their Runtime (detached, or put here by a test)."""
        self.orphans: set[str] = set()
        self.ended: list[str] = []
        """Executions whose orphan :meth:`end_orphan` ended, in order."""

    def open(self, launch: AgentLaunch) -> AbstractAsyncContextManager[AgentTransport]:
        @asynccontextmanager
        async def cm() -> AsyncIterator[AgentTransport]:
            transport = self.make()
            transport.permission_policy = launch.permission_policy
            self.transports.append(transport)
            try:
                yield transport
            finally:
                await transport.aclose()

        return cm()

    # --- recovery ----------------------------------------------------------------------

    def handle_of(self, transport: AgentTransport) -> dict[str, Any]:
        return {"memory": True}

    async def probe(self, execution_id: str, handle: Mapping[str, Any]) -> Probe:
        if execution_id in self.survivors:
            return Probe(found="alive", reason="the in-memory agent survived its Runtime")
        if execution_id in self.orphans:
            return Probe(found="orphaned", reason="the in-memory agent was left running")
        return Probe(found="gone", reason="the agent instance ended while the app was down")

    def reattach(
        self,
        launch: AgentLaunch,
        handle: Mapping[str, Any],
        acp_session_id: str,
        capabilities: InitializeResult | None,
    ) -> AbstractAsyncContextManager[AgentTransport]:
        @asynccontextmanager
        async def cm() -> AsyncIterator[AgentTransport]:
            self.survivors.discard(launch.execution_id)
            async with self.open(launch) as transport:
                self.last.adopt_session(acp_session_id, capabilities)
                yield transport

        return cm()

    async def end_orphan(self, execution_id: str, handle: Mapping[str, Any]) -> str:
        self.orphans.discard(execution_id)
        self.ended.append(execution_id)
        return "ended the in-memory agent"

    def detach(self, execution_id: str) -> None:
        self.survivors.add(execution_id)

    @property
    def last(self) -> MemoryTransport:
        """The transport handed out most recently."""
        return self.transports[-1]
