"""One execution's failure stays in that execution; a careless caller's input is refused at
the facade; the body's own exception leaves ``async with Runtime()`` as itself.

Each crash runs beside a second execution whose prompt is running: that prompt completes, the
crashed execution is FAILED with a typed error (``ExecutionCrashed``, ``agent.failed`` phase
``crash``), and ``async with Runtime()`` exits cleanly."""

from __future__ import annotations

import os
import traceback
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import msgspec
import pytest

from acpfsm.adapters import events as ev
from acpfsm.adapters.errors import TransportClosed
from acpfsm.adapters.executor import AgentLaunch
from acpfsm.adapters.memory import MemoryTransport
from acpfsm.adapters.transport import AgentTransport, Attachment
from acpfsm.runtime import (
    AgentReportedError,
    ExecutionCrashed,
    ExecutionRef,
    InvalidPrompt,
    InvalidWorkspace,
    LaunchSpec,
    NotReadyForPrompts,
    PromptResult,
    Runtime,
    StdioExecutor,
    Timeouts,
    WorkspaceRef,
    reference_profile,
)
from acpfsm.runtime import events as le
from acpfsm.statecharts import IllegalTransition

from .memory_runtime import PROFILE, MemoryExecutor, session_of, settle, spec, wait_until

pytestmark = pytest.mark.both_backends

NOT_UTF8 = os.fsdecode(b"report-\xff.txt")  # what os.fsdecode gives for a Latin-1 name


class BrokenTeardown(MemoryExecutor):
    """A custom executor whose teardown raises (a bug in someone's executor)."""

    def open(self, launch: AgentLaunch) -> AbstractAsyncContextManager[AgentTransport]:
        inner = super().open(launch)

        @asynccontextmanager
        async def cm() -> AsyncIterator[AgentTransport]:
            async with inner as transport:
                yield transport
            raise RuntimeError("teardown exploded")

        return cm()


def make_runtime(time_scale: float, **executors: Any) -> Runtime:
    return Runtime(
        profiles=[PROFILE],
        executors={"memory": MemoryExecutor(), **executors},
        timeouts=Timeouts().scaled(time_scale),
    )


def published(rt: Runtime, execution_id: str, kind: type[Any]) -> list[Any]:
    return [e for e in session_of(rt, execution_id).hub._backlog if isinstance(e, kind)]


async def launched(rt: Runtime) -> tuple[ExecutionRef, MemoryTransport]:
    """A memory execution, READY, and its transport."""
    ref = await rt.launch(spec())
    await rt.wait_ready(ref.id)
    return ref, rt.executors["memory"].last  # type: ignore[attr-defined]


def a_bug(*args: Any) -> None:
    """A transport call that fails with a bug (no error of ours)."""
    raise KeyError("a bug")


@asynccontextmanager
async def a_running_prompt(rt: Runtime) -> AsyncIterator[list[PromptResult]]:
    """A second execution with a prompt in flight through the block; it completes after."""
    ref, transport = await launched(rt)
    results: list[PromptResult] = []
    async with anyio.create_task_group() as tg:

        async def prompt() -> None:
            results.append(await rt.prompt(ref.id, "the other one"))

        tg.start_soon(prompt)
        await wait_until(lambda: 1 in transport.running)
        yield results
        transport.complete(1)
    assert [r.stop_reason for r in results] == ["end_turn"]
    assert rt.get_execution(ref.id).status == "READY"


def assert_crashed(rt: Runtime, execution_id: str, cause: type[BaseException]) -> None:
    snap = rt.get_execution(execution_id)
    assert snap.status == "FAILED"
    assert (
        snap.error_message.startswith("execution crashed") and cause.__name__ in snap.error_message
    )
    (failed,) = [e for e in published(rt, execution_id, le.AgentFailed) if e.phase == "crash"]
    assert failed.error == snap.error_message


def root_cause(exc: BaseException) -> BaseException:
    while exc.__cause__ is not None:
        exc = exc.__cause__
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


async def illegal_models_update(event: Any) -> None:
    """A bug in the pump's handling of a models update: an illegal transition."""
    raise IllegalTransition("start_model_policy", ("settled",), "models_updated")


def crashing_prompt(tg: anyio.abc.TaskGroup, rt: Runtime, execution_id: str) -> list[BaseException]:
    """A prompt in the background that is to end with the execution's crash: the crash it
    raised, once it has."""
    waiting: list[BaseException] = []

    async def prompt() -> None:
        try:
            await rt.prompt(execution_id, "waits")
        except ExecutionCrashed as exc:
            waiting.append(exc)

    tg.start_soon(prompt)
    return waiting


# --- one execution's failure stays in it --------------------------------------------------


async def test_a_bug_in_a_transport_call_fails_only_its_execution(time_scale: float) -> None:
    async with make_runtime(time_scale) as rt, a_running_prompt(rt):
        ref, transport = await launched(rt)

        transport.handlers["prompt"] = a_bug
        with pytest.raises(ExecutionCrashed) as info:
            await rt.prompt(ref.id, "boom")
        assert isinstance(root_cause(info.value), KeyError)
        assert info.value.execution_id == ref.id
        assert_crashed(rt, ref.id, KeyError)
        with pytest.raises(NotReadyForPrompts):
            await rt.prompt(ref.id, "again")
        await wait_until(lambda: ("aclose", ()) in transport.calls)  # its tasks ended
        snap = await rt.stop(ref.id, "done")
        assert snap.status == "STOPPED"


async def test_a_crash_whose_caller_is_cancelled_meanwhile_is_still_contained_in_full(
    time_scale: float,
) -> None:
    """The bug surfaces in a caller whose own cancel scope was cancelled at the same moment
    (its deadline, a task group ending): the crash is still recorded in full (FAILED,
    published, the transport closed) instead of being cut short at its first wait."""
    async with make_runtime(time_scale) as rt:
        ref, transport = await launched(rt)
        scope = anyio.CancelScope()

        def explode(*args: Any) -> None:
            scope.cancel()
            raise KeyError("a bug")

        transport.handlers["prompt"] = explode
        with pytest.raises(ExecutionCrashed), scope:
            await rt.prompt(ref.id, "boom")
        assert_crashed(rt, ref.id, KeyError)
        await wait_until(lambda: ("aclose", ()) in transport.calls)  # its tasks ended
        assert (await rt.stop(ref.id, "done")).status == "STOPPED"


async def test_each_caller_gets_its_own_copy_of_the_crash(time_scale: float) -> None:
    """Every caller a crash reaches raises its own ``ExecutionCrashed`` (one shared exception
    object would collect every caller's traceback and context), and a failure after the
    crash never replaces the crash's recorded cause."""
    async with make_runtime(time_scale) as rt:
        ref, transport = await launched(rt)
        session = session_of(rt, ref.id)

        transport.handlers["prompt"] = a_bug
        with pytest.raises(ExecutionCrashed) as first:
            await rt.prompt(ref.id, "boom")

        async def another_bug() -> None:
            raise ValueError("a later bug")

        with pytest.raises(ExecutionCrashed) as second:
            await session.crash.call("later", another_bug)
        crash = session.ctx.crash
        assert crash is not None and len({id(crash), id(first.value), id(second.value)}) == 3
        assert str(first.value) == str(second.value) == str(crash)
        assert isinstance(crash.__cause__, KeyError)  # still the failure that crashed it
        assert first.value.__cause__ is crash.__cause__
        assert isinstance(second.value.__cause__, ValueError)
        await rt.stop(ref.id, "done")


async def test_the_record_of_a_crash_is_never_raised_itself(time_scale: float) -> None:
    """Every call after a crash (a setting, ``wait_ready``) raises a copy: the execution's
    record of the crash gathers no caller's frames however often it is reached (a service
    retrying a crashed execution would grow it without bound), and no caller's chain links
    to it, so one caller's exception never changes after the fact through another's."""
    async with make_runtime(time_scale) as rt:
        ref, transport = await launched(rt)
        transport.handlers["prompt"] = a_bug
        with pytest.raises(ExecutionCrashed):
            await rt.prompt(ref.id, "boom")
        crash = session_of(rt, ref.id).ctx.crash
        assert crash is not None
        frames = len(traceback.extract_tb(crash.__traceback__))
        raised: list[ExecutionCrashed] = []
        for call in (
            lambda: rt.set_model(ref.id, "m"),
            lambda: rt.set_mode(ref.id, "m"),
            lambda: rt.wait_ready(ref.id),
            lambda: rt.set_model(ref.id, "m"),
        ):
            with pytest.raises(ExecutionCrashed) as info:
                await call()
            raised.append(info.value)
        assert len(traceback.extract_tb(crash.__traceback__)) == frames
        assert all(e is not crash and e.__context__ is not crash for e in raised)
        assert all(isinstance(e.__cause__, KeyError) and str(e) == str(crash) for e in raised)
        await rt.stop(ref.id, "done")


async def test_model_mode_and_option_calls_reach_the_agent_until_its_execution_crashed(
    time_scale: float,
) -> None:
    """``set_model``, ``set_mode`` and ``set_config_option`` go to the execution's agent;
    once it crashed they raise the crash (its transport is being closed: nothing is sent),
    each call its own copy of it."""
    settings = ("set_model", "set_mode", "set_config_option")
    async with make_runtime(time_scale) as rt:
        ref, transport = await launched(rt)
        await rt.set_model(ref.id, "fast")
        await rt.set_mode(ref.id, "plan")
        await rt.set_config_option(ref.id, "effort", "high")
        assert [c for c in transport.calls if c[0] in settings] == [
            ("set_model", ("fast",)),
            ("set_mode", ("plan",)),
            ("set_config_option", ("effort", "high")),
        ]

        transport.handlers["prompt"] = a_bug
        with pytest.raises(ExecutionCrashed):
            await rt.prompt(ref.id, "boom")
        before = len(transport.calls)
        raised: list[ExecutionCrashed] = []
        for call in (
            lambda: rt.set_model(ref.id, "m"),
            lambda: rt.set_mode(ref.id, "m"),
            lambda: rt.set_config_option(ref.id, "k", "v"),
            lambda: rt.set_model(ref.id, "m"),
        ):
            with pytest.raises(ExecutionCrashed) as info:
                await call()
            assert isinstance(root_cause(info.value), KeyError)
            raised.append(info.value)
        assert [c for c in transport.calls[before:] if c[0] in settings] == []
        # each its own object, never the execution's record of the crash
        crash = session_of(rt, ref.id).ctx.crash
        assert len({id(e) for e in [crash, *raised]}) == len(raised) + 1
        await rt.stop(ref.id, "done")


async def test_an_illegal_transition_in_the_pump_fails_only_its_execution(
    time_scale: float,
) -> None:
    async with make_runtime(time_scale) as rt, a_running_prompt(rt):
        ref, transport = await launched(rt)
        session = session_of(rt, ref.id)

        session.config.models_updated = illegal_models_update  # type: ignore[method-assign]
        async with anyio.create_task_group() as tg:
            waiting = crashing_prompt(tg, rt, ref.id)
            await wait_until(lambda: 2 in transport.running or 1 in transport.running)
            transport.emit(ev.SessionModels(current_model_id="fast"))
        (crash,) = waiting
        assert isinstance(root_cause(crash), IllegalTransition)
        assert_crashed(rt, ref.id, IllegalTransition)
        await rt.stop(ref.id, "done")


async def test_a_crash_while_a_prompt_is_being_sent_ends_its_turn_disconnected(
    time_scale: float,
) -> None:
    """The execution crashes while a prompt request is still in flight (written, not yet
    answered): the carrier is gone for good, so the turn ends ``disconnected`` through its
    chart (the stream error is published) instead of staying live, and its caller gets the
    crash, not the failed request the closed carrier left behind."""
    async with make_runtime(time_scale) as rt:
        ref, transport = await launched(rt)
        session = session_of(rt, ref.id)

        async def unanswered(*args: Any) -> None:  # until the crash closes the carrier
            await wait_until(lambda: ("aclose", ()) in transport.calls)
            raise TransportClosed("closed")

        session.config.models_updated = illegal_models_update  # type: ignore[method-assign]
        transport.handlers["prompt"] = unanswered
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                waiting = crashing_prompt(tg, rt, ref.id)
                await wait_until(lambda: 1 in session.generations)
                await wait_until(lambda: session.generations[1].leaf == "sending")
                transport.emit(ev.SessionModels(current_model_id="fast"))
        (crash,) = waiting
        assert isinstance(root_cause(crash), IllegalTransition)
        assert session.generations[1].leaf == "disconnected"
        (lost,) = published(rt, ref.id, le.AgentctlError)
        assert lost.prompt_generation == 1 and lost.error.startswith("execution crashed")
        await rt.stop(ref.id, "done")


class HangingStart(MemoryExecutor):
    """An executor whose agent never comes up."""

    def __init__(self) -> None:
        super().__init__()
        self.opening = anyio.Event()

    def open(self, launch: AgentLaunch) -> AbstractAsyncContextManager[AgentTransport]:
        @asynccontextmanager
        async def cm() -> AsyncIterator[AgentTransport]:
            self.opening.set()
            await anyio.sleep_forever()
            yield MemoryTransport()  # never reached

        return cm()


async def test_a_launch_cancelled_while_its_agent_starts_leaves_nothing_behind(
    time_scale: float,
) -> None:
    """The caller gives up on a launch whose agent never comes up: the execution is FAILED
    then STOPPED in its trace (its stream closed, its session init abandoned before it
    started), it is gone from the Runtime, and the Runtime goes on launching."""
    hangs = HangingStart()
    async with make_runtime(time_scale, hangs=hangs) as rt:
        async with anyio.create_task_group() as tg:

            async def launching() -> None:
                await rt.launch(msgspec.structs.replace(spec(), executor_id="hangs"))

            tg.start_soon(launching)
            await hangs.opening.wait()
            tg.cancel_scope.cancel()
        steps = [(r.chart, r.event, r.target) for r in rt.trace.records]
        assert steps[-4:] == [
            ("execution", "agent_start_failed", "failed"),
            ("execution", "stop_requested", "stopped"),
            ("agent_stream", "close_requested", "closed"),
            ("session_init", "init_abandoned", "abandoned"),
        ]
        assert rt.list_executions() == []
        ref = await rt.launch(spec())
        await rt.wait_ready(ref.id)
        await rt.stop(ref.id, "done")


async def test_a_waiter_is_released_even_when_the_crash_cannot_end_its_turn(
    time_scale: float,
) -> None:
    """The execution crashes and ending its live turn through the charts fails too (a second
    bug): the crash still releases whoever waits on the turn, with the crash, instead of
    leaving the caller waiting for ever."""
    async with make_runtime(time_scale) as rt:
        ref, transport = await launched(rt)
        session = session_of(rt, ref.id)

        async def broken(error: str) -> None:
            raise RuntimeError("the turn cannot be ended")

        session.config.models_updated = illegal_models_update  # type: ignore[method-assign]
        session.turns.stream_lost = broken  # type: ignore[method-assign]
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                waiting = crashing_prompt(tg, rt, ref.id)
                await wait_until(lambda: 1 in transport.running)
                transport.emit(ev.SessionModels(current_model_id="fast"))
        (crash,) = waiting
        assert isinstance(root_cause(crash), IllegalTransition)
        await rt.stop(ref.id, "done")


async def test_a_crash_the_charts_cannot_record_is_still_contained(time_scale: float) -> None:
    """Even when recording the crash fails (the Execution chart refuses ``execution_crashed``:
    the charts themselves are broken), the crash stays in its execution: the caller gets
    ExecutionCrashed from the first failure, the execution keeps the crash's message and
    refuses prompts, its tasks end, and the other execution's prompt completes."""
    async with make_runtime(time_scale) as rt, a_running_prompt(rt):
        ref, transport = await launched(rt)
        session = session_of(rt, ref.id)

        def explode(*args: Any) -> None:
            raise KeyError("a bug")

        fire = session.status.fire

        async def broken(event: str, **data: Any) -> Any:
            if event == "execution_crashed":
                raise IllegalTransition("execution", ("running",), event)
            return await fire(event, **data)

        transport.handlers["prompt"] = explode
        session.status.fire = broken  # type: ignore[method-assign]
        with pytest.raises(ExecutionCrashed) as info:
            await rt.prompt(ref.id, "boom")
        assert isinstance(root_cause(info.value), KeyError)
        snap = rt.get_execution(ref.id)
        assert snap.error_message.startswith("execution crashed") and "KeyError" in (
            snap.error_message
        )
        with pytest.raises(ExecutionCrashed):
            await rt.prompt(ref.id, "again")
        await wait_until(lambda: ("aclose", ()) in transport.calls)  # its tasks ended
        await rt.stop(ref.id, "done")


class SlowTeardown(MemoryExecutor):
    """An executor whose teardown waits until released."""

    def __init__(self) -> None:
        super().__init__()
        self.tearing_down = anyio.Event()
        self.release = anyio.Event()
        self.torn_down = False

    def open(self, launch: AgentLaunch) -> AbstractAsyncContextManager[AgentTransport]:
        inner = super().open(launch)

        @asynccontextmanager
        async def cm() -> AsyncIterator[AgentTransport]:
            async with inner as transport:
                yield transport
            self.tearing_down.set()
            with anyio.CancelScope(shield=True):
                await self.release.wait()
            self.torn_down = True

        return cm()


async def test_a_stop_whose_caller_is_cancelled_still_waits_for_the_teardown(
    time_scale: float,
) -> None:
    """The caller of ``stop`` gives up while the agent is being torn down: the stop still
    returns to it only once the execution is finished (its teardown done), so nothing of the
    execution outlives a stop its caller saw end."""
    slow = SlowTeardown()
    async with make_runtime(time_scale, slow=slow) as rt:
        ref = await rt.launch(msgspec.structs.replace(spec(), executor_id="slow"))
        await rt.wait_ready(ref.id)
        left: list[bool] = []
        async with anyio.create_task_group() as tg:
            scope = anyio.CancelScope()

            async def stopping() -> None:
                try:
                    with scope:
                        await rt.stop(ref.id, "done")
                finally:
                    left.append(slow.torn_down)

            tg.start_soon(stopping)
            await slow.tearing_down.wait()
            scope.cancel()
            await settle()
            assert left == []  # still waiting for the teardown
            slow.release.set()
        assert left == [True]


async def test_a_failing_executor_teardown_is_contained(time_scale: float) -> None:
    """The teardown fails after the stop: the stop still returns the final snapshot (its
    error recorded), and when it fails as the Runtime closes, the Runtime closes cleanly."""
    async with make_runtime(time_scale, broken=BrokenTeardown()) as rt:
        async with a_running_prompt(rt):
            ref = await rt.launch(broken_spec())
            await rt.wait_ready(ref.id)
            snap = await rt.stop(ref.id, "done")
        assert snap.status == "STOPPED"
        assert "RuntimeError: teardown exploded" in snap.error_message
        await rt.launch(broken_spec())  # left for the Runtime to stop


def stdio_runtime() -> Runtime:
    return Runtime(
        profiles=[reference_profile("--delay", "0.001")], executors={"stdio": StdioExecutor()}
    )


class Other:
    """The other execution, with a slow prompt running beside the crash."""

    def __init__(self, rt: Runtime, execution_id: str) -> None:
        self.rt, self.id = rt, execution_id
        self.results: list[PromptResult] = []

    async def run(self) -> None:
        self.results.append(await self.rt.prompt(self.id, "slow one [[delay:0.03]]"))

    async def started(self) -> None:
        await wait_until(lambda: self.rt.get_execution(self.id).status == "RUNNING")

    async def completed(self) -> None:
        await wait_until(lambda: bool(self.results))
        assert self.results[0].stop_reason == "end_turn"
        assert "slow one" in self.results[0].agent_message
        assert (await self.rt.prompt(self.id, "still here")).stop_reason == "end_turn"


async def launch_two(rt: Runtime, tmp_path: Path) -> tuple[Other, str]:
    a = await rt.launch(LaunchSpec(agent_profile_id="reference", workspace=ws(tmp_path)))
    b = await rt.launch(LaunchSpec(agent_profile_id="reference", workspace=ws(tmp_path)))
    await rt.wait_ready(a.id)
    await rt.wait_ready(b.id)
    return Other(rt, a.id), b.id


async def test_a_text_the_transport_cannot_encode_fails_only_its_execution(
    tmp_path: Path,
) -> None:
    """Over stdio, beneath the facade's check (as a bug would): the transport cannot encode
    the prompt, nothing is written, the turn fails with that typed error and the execution is
    FAILED. Before, the UnicodeEncodeError escaped the transport's task: ``async with
    Runtime()`` raised an ExceptionGroup and the other execution's prompt was cancelled."""
    async with stdio_runtime() as rt, anyio.create_task_group() as tg:
        with anyio.fail_after(30):
            other, b = await launch_two(rt, tmp_path)
            tg.start_soon(other.run)
            await other.started()
            with pytest.raises(AgentReportedError, match="cannot send session/prompt"):
                await session_of(rt, b).prompt(NOT_UTF8)
            snap = rt.get_execution(b)
            assert snap.status == "FAILED" and "UnicodeEncodeError" in snap.error_message
            assert [e.phase for e in published(rt, b, le.AgentFailed)] == ["prompt_send"]
            await other.completed()


async def test_a_bug_in_the_transports_own_task_fails_only_its_execution(
    tmp_path: Path,
) -> None:
    """A bug inside the stdio transport's own task (not a typed error) ends that execution's
    tasks: it is FAILED, its waiter gets a typed error, the other execution goes on."""
    async with stdio_runtime() as rt, anyio.create_task_group() as tg:
        with anyio.fail_after(30):
            other, b = await launch_two(rt, tmp_path)
            transport = session_of(rt, b).transport

            async def bug(*args: Any) -> Any:
                raise ZeroDivisionError("a bug in the transport")

            transport._prompt_blocks = bug  # type: ignore[union-attr]
            tg.start_soon(other.run)
            await other.started()
            # the waiter learns it from the crash, or (asyncio may run the pump first) from
            # the loss of the stream the crash closed: typed either way
            with pytest.raises((ExecutionCrashed, AgentReportedError)):
                await rt.prompt(b, "boom")
            await wait_until(lambda: session_of(rt, b).ctx.crash is not None)
            assert rt.get_execution(b).status == "FAILED"
            assert isinstance(root_cause(session_of(rt, b).ctx.crash), ZeroDivisionError)  # type: ignore[arg-type]
            await other.completed()


# --- input checked at the facade --------------------------------------------------------------


BAD_TEXTS = [NOT_UTF8, None, b"bytes", 42]
BAD_ATTACHMENTS = [
    [b"raw bytes"],
    ["a path"],
    "not a sequence",
    [Attachment(name=NOT_UTF8, data=b"x")],
    [Attachment(name="a", data="not bytes")],  # type: ignore[arg-type]
]


async def test_a_prompt_that_cannot_be_sent_is_refused_and_changes_nothing(
    time_scale: float,
) -> None:
    async with make_runtime(time_scale) as rt:
        ref, transport = await launched(rt)
        before = (len(rt.trace.for_execution(ref.id)), len(transport.calls))
        for text in BAD_TEXTS:
            with pytest.raises(InvalidPrompt) as info:
                await rt.prompt(ref.id, text)  # type: ignore[arg-type]
            assert info.value.execution_id == ref.id and info.value.generation == 0
            with pytest.raises(InvalidPrompt):
                await rt.steer(ref.id, text)  # type: ignore[arg-type]
        for attachments in BAD_ATTACHMENTS:
            with pytest.raises(InvalidPrompt):
                await rt.prompt(ref.id, "fine text", attachments=attachments)  # type: ignore[arg-type]
        assert (len(rt.trace.for_execution(ref.id)), len(transport.calls)) == before
        assert rt.get_execution(ref.id).status == "READY"
        transport.auto_complete = True
        assert (await rt.prompt(ref.id, "fine")).generation == 1
        await rt.stop(ref.id, "done")


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("", "empty"),
        (".", "relative"),
        ("some/dir", "relative"),
        ("/tmp/a\0b", "NUL"),
        ("/tmp/" + NOT_UTF8, "not valid Unicode"),
    ],
)
async def test_a_workspace_that_cannot_be_used_is_refused_before_launch(
    time_scale: float, path: str, why: str
) -> None:
    executor = MemoryExecutor()
    rt = Runtime(profiles=[PROFILE], executors={"memory": executor})
    async with rt:
        with pytest.raises(InvalidWorkspace, match=why):
            await rt.launch(spec(path=path))
        with pytest.raises(InvalidWorkspace):
            await rt.launch(LaunchSpec(agent_profile_id="mem", workspace=WorkspaceRef(path=path)))
        assert executor.transports == [] and rt.list_executions() == []


async def test_an_initial_prompt_that_cannot_be_sent_is_refused_before_launch(
    time_scale: float,
) -> None:
    executor = MemoryExecutor()
    async with Runtime(profiles=[PROFILE], executors={"memory": executor}) as rt:
        for text in BAD_TEXTS:
            with pytest.raises(InvalidPrompt, match="initial prompt"):
                await rt.launch(spec(text))  # type: ignore[arg-type]
        with pytest.raises(InvalidPrompt):
            await rt.launch(spec("hi", attachments=(b"x",)))  # type: ignore[arg-type]
        assert executor.transports == [] and rt.list_executions() == []


async def test_over_stdio_a_bad_prompt_no_longer_fails_the_execution(tmp_path: Path) -> None:
    """Before, ``None`` reached the agent (answered -32602: the execution FAILED for good) and
    a lone surrogate took the whole Runtime down."""
    rt = Runtime(profiles=[reference_profile("--delay", "0.001")])
    async with rt:
        with anyio.fail_after(30):
            ref = await rt.launch(LaunchSpec(agent_profile_id="reference", workspace=ws(tmp_path)))
            await rt.wait_ready(ref.id)
            for text in (None, NOT_UTF8):
                with pytest.raises(InvalidPrompt):
                    await rt.prompt(ref.id, text)  # type: ignore[arg-type]
            assert rt.get_execution(ref.id).status == "READY"
            result = await rt.prompt(ref.id, os.fsdecode(b"report.txt"))
            assert result.stop_reason == "end_turn" and result.generation == 1


# --- the body's own exception -------------------------------------------------------------------


@pytest.mark.parametrize("error", [ValueError("mine"), KeyboardInterrupt()], ids=repr)
async def test_the_bodys_exception_propagates_as_itself(
    time_scale: float, error: BaseException
) -> None:
    executor = MemoryExecutor()

    async def body() -> None:
        async with Runtime(profiles=[PROFILE], executors={"memory": executor}) as rt:
            ref = await rt.launch(spec())
            await rt.wait_ready(ref.id)
            raise error

    with pytest.raises(type(error)) as info:
        await body()
    assert info.value is error  # not wrapped in an exception group
    assert [c for c in executor.last.calls if c[0] == "aclose"] == [("aclose", ())]


async def test_a_launch_error_in_the_body_propagates_as_itself(time_scale: float) -> None:
    with pytest.raises(InvalidWorkspace):
        async with Runtime(profiles=[PROFILE], executors={"memory": MemoryExecutor()}) as rt:
            await rt.launch(spec(path="relative"))


def broken_spec() -> LaunchSpec:
    return msgspec.structs.replace(spec(), executor_id="broken")


def ws(tmp_path: Path) -> WorkspaceRef:
    return WorkspaceRef(path=str(tmp_path))
