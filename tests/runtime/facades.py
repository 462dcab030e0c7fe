"""The facade under test: the in-process :class:`~acpfsm.runtime.Runtime`, or
:class:`~acpfsm.runtime.service.RemoteRuntime` talking over a real NATS server to one real
``acpfsm serve`` process, so one scenario test asserts the same things through both.

A scenario opens ``async with facade(executor) as f`` (the ``facade`` fixture of the module):
``f.rt`` has the calls both share (:class:`~acpfsm.runtime.service.RuntimeControl`),
``await f.get(id)`` / ``await f.list()`` the snapshots (a coroutine on the wire), and
``f.events(id)`` the execution's events from its start until it stops. In-process, ``f.agent``
is the memory executor the test gave (what the agent was asked, the agent driven by hand);
through the wire it is None: the serve process runs the embedded reference agent over stdio,
driven by its prompt directives (``[[fault:stall]]`` keeps a turn open until a cancel or a
steer), under the same profile and executor names (:func:`serve_config`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio
import msgspec
import pytest

from acpfsm.runtime import (
    AgentProfile,
    Execution,
    Runtime,
    Timeouts,
    reference_profile,
)
from acpfsm.runtime import events as le
from acpfsm.runtime.service import RemoteRuntime, RuntimeControl
from acpfsm.testing.memory import MemoryExecutor
from acpfsm.testing.natsserver import throwaway_nats

from .serve_helpers import ServeProcess

BROKEN = "broken"
"""A profile whose agent cannot start (its command does not exist)."""


def serve_config(profiles: tuple[AgentProfile, ...], executors: tuple[str, ...]) -> dict[str, Any]:
    """The serve process's config: each of ``profiles``' ids runs the reference agent, plus
    :data:`BROKEN`; each of ``executors`` is a stdio executor."""
    agents = [msgspec.to_builtins(reference_profile("--delay", "0.001", id=p.id)) for p in profiles]
    agents.append(msgspec.to_builtins(AgentProfile(id=BROKEN, command=("/nonexistent/agent",))))
    return {
        "profiles": agents,
        "executors": {name: {"kind": "stdio"} for name in executors},
    }


@contextmanager
def serving(
    folder: Path, profiles: tuple[AgentProfile, ...], executors: tuple[str, ...]
) -> Iterator[tuple[ServeProcess, str]]:
    """One ``acpfsm serve`` process on a NATS server of its own (for a whole module), and
    the server's URL."""
    with throwaway_nats() as server:
        process = ServeProcess(server, folder, config_data=serve_config(profiles, executors))
        try:
            yield process, server.url
        finally:
            assert process.stop() == 0


@dataclass
class Facade:
    """See the module docstring."""

    rt: RuntimeControl
    local: Runtime | None = None
    agent: MemoryExecutor | None = None
    remote: RemoteRuntime | None = None

    async def get(self, execution_id: str) -> Execution:
        if self.remote is not None:
            return await self.remote.get_execution(execution_id)
        assert self.local is not None
        return self.local.get_execution(execution_id)

    async def until(
        self, execution_id: str, predicate: Callable[[Execution], bool], limit: float = 30.0
    ) -> Execution:
        """The execution's snapshot, once ``predicate`` holds for it."""
        with anyio.fail_after(limit):
            while not predicate(snapshot := await self.get(execution_id)):
                await anyio.sleep(0.005)
        return snapshot

    async def wait_event(
        self, execution_id: str, predicate: Callable[[le.RuntimeEvent], bool]
    ) -> le.RuntimeEvent:
        """The first of the execution's events (from its start) ``predicate`` holds for."""
        with anyio.fail_after(30):
            async with self.events(execution_id) as events:
                async for event in events:
                    if predicate(event):
                        return event
        raise AssertionError(f"no such event of {execution_id}")

    async def list(self) -> list[Execution]:
        if self.remote is not None:
            return await self.remote.list_executions()
        assert self.local is not None
        return self.local.list_executions()

    @asynccontextmanager
    async def events(self, execution_id: str) -> AsyncIterator[AsyncIterator[le.RuntimeEvent]]:
        """The execution's events from its start; the iteration ends after it stopped
        (``ExecutionNotFound``: no such execution)."""
        if self.local is not None:
            async with self.local.subscribe_events(execution_id) as events:
                yield events
            return
        assert self.remote is not None
        await self.remote.get_execution(execution_id)
        async with self.remote.events(execution_id, from_seq=0) as items:
            yield _UntilStopped(items)


class _UntilStopped:
    """The events of sequenced ones, ending after ``agent.stopped`` (a class, not an async
    generator: a caller may stop early and nothing is left to finalize)."""

    def __init__(self, items: AsyncIterator[le.SequencedEvent]) -> None:
        self._items = items
        self._done = False

    def __aiter__(self) -> _UntilStopped:
        return self

    async def __anext__(self) -> le.RuntimeEvent:
        if self._done:
            raise StopAsyncIteration
        item = await self._items.__anext__()
        self._done = isinstance(item.event, le.AgentStopped)
        return item.event


class Opener(Protocol):
    def __call__(
        self,
        agent: MemoryExecutor,
        name: str = ...,
        *,
        executors: Mapping[str, MemoryExecutor] | None = None,
    ) -> AbstractAsyncContextManager[Facade]: ...


def opener(
    where: str,
    profiles: tuple[AgentProfile, ...],
    time_scale: float,
    serve: ServeProcess | None,
    url: str = "",
    executor: str = "local_pc",
) -> Opener:
    """Opens the facade under test: in process over the given memory executors, or
    through ``url`` to ``serve`` (which stops every execution left at the end, as a
    Runtime's exit does)."""

    @asynccontextmanager
    async def open_facade(
        agent: MemoryExecutor,
        name: str = executor,
        *,
        executors: Mapping[str, MemoryExecutor] | None = None,
    ) -> AsyncIterator[Facade]:
        if where == "in_process":
            rt = Runtime(
                profiles=profiles,
                executors=dict(executors or {name: agent}),
                timeouts=Timeouts().scaled(time_scale),
            )
            async with rt:
                yield Facade(rt=rt, local=rt, agent=agent)
            return
        assert serve is not None
        async with RemoteRuntime(url, request_timeout=30) as remote:
            try:
                yield Facade(rt=remote, remote=remote)
            finally:
                for execution in await remote.list_executions():
                    await remote.stop(execution.id, "the test ended", force=True)

    return open_facade


def facade_fixtures(
    profiles: tuple[AgentProfile, ...], executors: tuple[str, ...]
) -> tuple[Any, Any]:
    """A module's ``serve`` fixture (one ``acpfsm serve`` process for the module, started
    on first use) and its ``facade`` fixture (in process, then through the wire); the
    first of ``executors`` is the default one."""

    @pytest.fixture(scope="module")
    def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServeProcess, str]]:
        with serving(tmp_path_factory.mktemp("serve"), profiles, executors) as served:
            yield served

    @pytest.fixture(params=["in_process", "remote"])
    def facade(request: pytest.FixtureRequest, time_scale: float) -> Opener:
        if request.param == "in_process":
            return opener("in_process", profiles, time_scale, None, executor=executors[0])
        process, url = request.getfixturevalue("serve")
        return opener("remote", profiles, time_scale, process, url, executor=executors[0])

    return serve, facade
