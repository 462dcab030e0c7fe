"""An executor over the in-memory transport: a :class:`~acpfsm.runtime.Runtime` without agents.

``Runtime(profiles=[...], executors={"memory": MemoryExecutor()})`` runs every launch whose
spec names the ``memory`` executor against a fresh
:class:`~acpfsm.adapters.memory.MemoryTransport` (the tests drive it; the bench measures the
runtime's own footprint with it). Not imported by :mod:`acpfsm.testing` itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from acpfsm.adapters.executor import AgentLaunch
from acpfsm.adapters.memory import MemoryTransport
from acpfsm.adapters.transport import AgentTransport

__all__ = ["MemoryExecutor"]


class MemoryExecutor:
    """Hands out MemoryTransports (closed when their execution ends); ``make`` customises
    each new one, ``transports`` keeps every one handed out, in order. Each one answers its
    permission requests with its launch's ``permission_policy``."""

    def __init__(self, make: Callable[[], MemoryTransport] | None = None) -> None:
        self.make = make or MemoryTransport
        self.transports: list[MemoryTransport] = []

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

    @property
    def last(self) -> MemoryTransport:
        """The transport handed out most recently."""
        return self.transports[-1]
