"""An app's executor is the app's code: whatever its ``open()`` or its context manager raises
when the agent starts fails the launch with ``ExecutorError`` (its cause kept), never a foreign
exception; a close that hangs is bounded by ``Timeouts.executor_close``, the rest of the
execution is released and ``stop`` reports it. Under trio (virtual clock) and asyncio."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import msgspec
import pytest

from acpfsm.adapters.errors import TransportError
from acpfsm.adapters.executor import AgentLaunch
from acpfsm.adapters.memory import MemoryTransport
from acpfsm.adapters.transport import AgentTransport
from acpfsm.runtime import AcpfsmError, ExecutorError, Runtime, Timeouts
from acpfsm.testing.memory import MemoryExecutor

from .memory_runtime import PROFILE
from .memory_runtime import spec as memory_spec

pytestmark = pytest.mark.both_backends


class WrongSignature:
    def open(self) -> Any:  # the launch is not taken
        raise AssertionError("unreachable")


class RaisesAtOpen:
    def open(self, launch: AgentLaunch) -> Any:
        raise RuntimeError("no sandbox left")


class RaisesOnEnter:
    def open(self, launch: AgentLaunch) -> AbstractAsyncContextManager[AgentTransport]:
        @asynccontextmanager
        async def cm() -> AsyncIterator[AgentTransport]:
            raise RuntimeError("the container did not come up")
            yield MemoryTransport()

        return cm()


class NotAContextManager:
    def open(self, launch: AgentLaunch) -> Any:
        return MemoryTransport()  # a transport, not a context manager giving one


class Typed:
    def open(self, launch: AgentLaunch) -> Any:
        raise TransportError("cannot start agent 'x': No such file or directory")


class HangsOnClose(MemoryExecutor):
    def __init__(self) -> None:
        super().__init__()
        self.closing = anyio.Event()

    def open(self, launch: AgentLaunch) -> AbstractAsyncContextManager[AgentTransport]:
        inner = super().open(launch)

        @asynccontextmanager
        async def cm() -> AsyncIterator[AgentTransport]:
            async with inner as transport:
                try:
                    yield transport
                finally:
                    self.closing.set()
                    await anyio.sleep_forever()  # e.g. a container that never stops

        return cm()


def spec(executor_id: str, **kw: Any) -> Any:
    return msgspec.structs.replace(memory_spec(**kw), executor_id=executor_id)


def _runtime(executors: dict[str, Any], time_scale: float) -> Runtime:
    return Runtime(
        profiles=(PROFILE,),
        executors={"memory": MemoryExecutor(), **executors},
        timeouts=Timeouts().scaled(time_scale),
    )


@pytest.mark.parametrize(
    ("executor", "cause", "text"),
    [
        (WrongSignature(), TypeError, "TypeError: "),
        (RaisesAtOpen(), RuntimeError, "RuntimeError: no sandbox left"),
        (RaisesOnEnter(), RuntimeError, "RuntimeError: the container did not come up"),
        (NotAContextManager(), AttributeError, "AttributeError: "),
    ],
    ids=["wrong_signature", "raises_at_open", "raises_on_enter", "not_a_context_manager"],
)
async def test_an_executor_failing_at_start_fails_the_launch_typed(
    time_scale: float, executor: Any, cause: type[BaseException], text: str
) -> None:
    async with _runtime({"app": executor}, time_scale) as rt:
        with pytest.raises(ExecutorError) as failed:
            await rt.launch(spec("app"))
        assert isinstance(failed.value, AcpfsmError)
        assert isinstance(failed.value.__cause__, cause)
        assert str(failed.value).startswith("executor 'app' could not start the agent: " + text)
        assert failed.value.execution_id
        assert rt.list_executions() == []  # nothing left behind
        ref = await rt.launch(spec("memory"))  # the Runtime goes on
        await rt.wait_ready(ref.id)
        await rt.stop(ref.id, "done")


async def test_an_acpfsm_error_of_an_executor_passes_as_it_is(time_scale: float) -> None:
    async with _runtime({"app": Typed()}, time_scale) as rt:
        with pytest.raises(TransportError, match="cannot start agent") as failed:
            await rt.launch(spec("app"))
        assert not isinstance(failed.value, ExecutorError)


async def test_a_close_that_hangs_is_bounded_reported_and_the_rest_released(
    time_scale: float, autojump_clock: object
) -> None:
    hangs = HangsOnClose()
    async with _runtime({"app": hangs}, time_scale) as rt:
        ref = await rt.launch(spec("app"))
        other = await rt.launch(spec("memory", metadata={"session_id": "other"}))
        await rt.wait_ready(ref.id)
        async with rt.subscribe_events(ref.id) as events:
            with anyio.fail_after(rt.timeouts.executor_close * 3):
                with pytest.raises(ExecutorError) as stuck:
                    await rt.stop(ref.id, "done")
                async for _ in events:  # the subscription ended: the execution released
                    pass
        assert hangs.closing.is_set()
        assert str(stuck.value) == (
            f"executor 'app' did not close within {rt.timeouts.executor_close:g}s: abandoned "
            "(the rest of the execution was released)"
        )
        assert stuck.value.execution_id == ref.id
        assert [e.id for e in rt.list_executions()] == [other.id]  # the other is untouched
        assert rt.get_execution(other.id).status == "READY"
        await rt.stop(other.id, "done")
