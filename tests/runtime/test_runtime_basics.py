"""The runtime over the in-memory transport: launch, prompt, steer, cancel, stop.

The tests taking ``facade`` run twice (:mod:`.facades`): on the in-process Runtime over the
memory agent, and through :class:`~acpfsm.runtime.service.RemoteRuntime` against one real
``acpfsm serve`` process for the module (the reference agent over stdio, under the same
profile and executor names), with the same assertions; what only the memory agent shows
(the ACP calls it recorded, its canned text and session id, the turn machine's state) is
asserted in process alone. Through the wire the reference agent's ``[[fault:stall]]`` holds a
turn open (after its first chunk) until it is cancelled or steered. The other tests need the
memory agent driven by hand or the virtual clock (``autojump_clock``: a cancel escalating
after 10 s, the dispatch barrier timing out), which a serve process in another process and
on the real clock cannot give; the escalation and the barrier over the wire are answered by
the serve's Runtime, whose errors come back as their own classes (``test_serve.py``)."""

from __future__ import annotations

from pathlib import Path

import anyio
import msgspec
import pytest

from acpfsm.adapters.events import Complete, MessageChunk
from acpfsm.runtime import (
    AgentReportedError,
    CancelEscalated,
    ExecutionNotFound,
    NotReadyForPrompts,
    PendingDispatchedPromptTimeout,
    SteerNotDispatched,
)
from acpfsm.runtime import events as le
from acpfsm.runtime.types import Timeouts

from .facades import Facade, Opener, facade_fixtures
from .memory_runtime import (
    PROFILE,
    MemoryExecutor,
    launch_session,
    make_runtime,
    memory_agent,
    session_of,
    settle,
    spec,
    wait_until,
)
from .prompt_helpers import prompting

pytestmark = pytest.mark.both_backends

serve, facade = facade_fixtures((PROFILE,), ("memory",))


async def test_launch_initializes_and_is_ready(facade: Opener, tmp_path: Path) -> None:
    ex = MemoryExecutor()
    async with facade(ex) as f:
        ref = await f.rt.launch(spec(path=str(tmp_path)))
        snap = await f.until(ref.id, lambda e: e.status == "READY")
        assert snap.status == "READY"
        if f.local is not None:
            assert snap.acp_session_id == "mem-session-1"
            methods = [c[0] for c in ex.last.calls]
            assert methods[:2] == ["initialize", "session/new"]
        else:  # the reference agent's own
            assert snap.acp_session_id != ""
        assert snap.charts["session_init"] == "ready"
        assert snap.charts["agent_stream"] == "connected"
        await f.rt.stop(ref.id, "done")
        with pytest.raises(ExecutionNotFound):
            await f.get(ref.id)


async def test_prompt_waits_for_completion_and_collects_text(
    facade: Opener, tmp_path: Path
) -> None:
    ex = memory_agent(auto_complete=True)
    async with facade(ex) as f:
        ref = await f.rt.launch(spec(path=str(tmp_path)))
        result = await f.rt.resume(ref.id, "hi")
        assert result.stop_reason == "end_turn"
        if f.local is not None:
            assert result.agent_message == "Hello world"
        else:  # the reference agent answers with the prompt
            assert "hi" in result.agent_message
        assert result.generation == 1
        assert (await f.get(ref.id)).status == "READY"
        result2 = await f.rt.prompt(ref.id, "again")
        assert result2.generation == 2
        await f.rt.stop(ref.id, "done")


async def test_initial_prompt_and_events_in_order(facade: Opener, tmp_path: Path) -> None:
    ex = memory_agent(auto_complete=True)
    async with facade(ex) as f:
        ref = await f.rt.launch(spec("do the thing", path=str(tmp_path)))
        seen: list[str] = []
        async with f.events(ref.id) as events:
            async for event in events:
                seen.append(type(event).__name__)
                if isinstance(event, le.AgentReady):
                    break
        assert seen.index("AcpSessionCreated") < seen.index("MessageChunk")
        assert seen.index("MessageChunk") < seen.index("Complete") < seen.index("AgentReady")
        await f.rt.stop(ref.id, "done")


async def test_steer_folds_into_the_live_generation(facade: Opener, tmp_path: Path) -> None:
    ex = MemoryExecutor()
    async with facade(ex) as f:
        ref = await f.rt.launch(spec(path=str(tmp_path)))
        await f.until(ref.id, lambda e: e.status == "READY")
        with pytest.raises(SteerNotDispatched):
            await f.rt.steer(ref.id, "too early")
        results = []

        async def run_prompt() -> None:
            results.append(await f.rt.prompt(ref.id, "[[fault:stall]] long task"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_prompt)
            await _dispatched(f, ref.id)
            steered = await f.rt.steer(ref.id, "also this")
            assert steered.stop_reason == "dispatched"
            assert steered.generation == 1
            if f.local is not None:
                assert ("steer", ("also this", (), 1)) in ex.last.calls
                ex.last.emit(MessageChunk(text="done", prompt_generation=1))
                ex.last.complete(1)
        assert results[0].stop_reason == "end_turn"
        if f.local is not None:
            assert results[0].agent_message == "done"
            assert session_of(f.local, ref.id).turns._next == 1  # a steer never starts one
        assert (await f.get(ref.id)).prompt_generation == 1  # a steer never starts a generation
        await f.rt.stop(ref.id, "done")


async def _dispatched(f: Facade, execution_id: str) -> None:
    """Once the execution's first turn is dispatched (through the wire: the reference agent
    sent its first chunk, after which ``[[fault:stall]]`` holds the turn)."""
    if f.local is not None:
        s = session_of(f.local, execution_id)
        await wait_until(lambda: s.current is not None and s.current.machine.is_in("dispatched"))
    else:
        await f.wait_event(execution_id, lambda e: isinstance(e, MessageChunk))


async def test_cancel_with_cooperative_agent(facade: Opener, tmp_path: Path) -> None:
    ex = MemoryExecutor()
    async with facade(ex) as f:
        ref = await f.rt.launch(spec(path=str(tmp_path)))
        await f.until(ref.id, lambda e: e.status == "READY")
        results = []

        async def run_prompt() -> None:
            results.append(await f.rt.prompt(ref.id, "[[fault:stall]] long task"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_prompt)
            await _dispatched(f, ref.id)
            await f.rt.cancel(ref.id)
        assert results[0].stop_reason == "cancelled"
        assert (await f.get(ref.id)).status == "READY"
        await f.rt.stop(ref.id, "done")


async def test_cancel_escalates_when_the_agent_ignores_it(
    time_scale: float, autojump_clock: object
) -> None:
    """The agent acknowledges the cancel but never ends the turn: after the 10 s wait the
    cancel escalates (the waiter and the canceller learn it) and the execution is READY
    (kandev escalateStuckCancel); a second cancel, acknowledged with no turn in flight, is
    complete; the turn's late end is ignored by generation."""
    ex = memory_agent(cancel_completes=False)
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "long task")
            start = anyio.current_time()
            with pytest.raises(CancelEscalated):
                await rt.cancel(ref.id)
            assert anyio.current_time() - start >= 10 * time_scale
        assert isinstance(p.error, CancelEscalated)
        assert "cancel escalated" in str(p.error)
        assert s.current is not None
        assert s.current.leaf == "cancel_escalated"  # the agent may still owe that turn
        assert rt.get_execution(ref.id).status == "READY"
        await rt.cancel(ref.id)  # acknowledged, nothing in flight: complete
        assert rt.get_execution(ref.id).status == "READY"
        ex.last.complete(1, "cancelled")  # the late end of the escalated turn
        await settle()
        assert s.current.leaf == "cancel_escalated"
        assert rt.get_execution(ref.id).status == "READY"
        await rt.stop(ref.id, "done")


async def test_agent_error_fails_the_turn(time_scale: float) -> None:
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, _ = await launch_session(rt)
        async with anyio.create_task_group() as tg:
            p = await prompting(tg, rt, ref.id, "x")
            ex.last.fail(1, '{"code":-32603,"message":"Internal error"}')
        assert isinstance(p.error, AgentReportedError)
        assert str(p.error).startswith("agent error: ")
        assert rt.get_execution(ref.id).status == "FAILED"
        with pytest.raises(NotReadyForPrompts):
            await rt.prompt(ref.id, "again")
        await rt.stop(ref.id, "done")


async def test_dispatch_only_barrier_times_out_and_keeps_the_gate(
    time_scale: float, autojump_clock: object
) -> None:
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        first = await rt.prompt(ref.id, "background", dispatch_only=True)
        assert first.stop_reason == "dispatched"
        with pytest.raises(PendingDispatchedPromptTimeout):
            await rt.prompt(ref.id, "next")
        assert s.current is not None
        assert s.current.state == "unawaited"
        ex.last.complete(1)
        await settle()
        ex2 = ex.last
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.prompt, ref.id, "next")
            await wait_until(lambda: s.current is not None and s.current.generation == 2)
            await wait_until(
                lambda: s.current is not None and s.current.machine.is_in("dispatched")
            )
            ex2.emit(Complete(prompt_generation=2))
        await rt.stop(ref.id, "done")


async def test_unknown_execution_everywhere(facade: Opener) -> None:
    ex = MemoryExecutor()
    async with facade(ex) as f:
        for call in (
            lambda: f.rt.resume("nope", "x"),
            lambda: f.rt.stop("nope", "x"),
            lambda: f.rt.steer("nope", "x"),
            lambda: f.rt.cancel("nope"),
            lambda: f.rt.set_mcp_mode("nope", "task"),
            lambda: f.rt.prompt("nope", "x"),
        ):
            with pytest.raises(ExecutionNotFound):
                await call()
        if f.local is not None:  # not a call of the wire's
            with pytest.raises(ExecutionNotFound):
                await f.local.set_model("nope", "m")
        with pytest.raises(ExecutionNotFound):
            await f.get("nope")
        with pytest.raises(ExecutionNotFound):
            async with f.events("nope"):
                pass


async def test_agent_stream_follows_a_carrier_that_redials_or_gives_up(time_scale: float) -> None:
    """A carrier that can be redialled (agentctl's WebSocket) reports its losses and the
    result of each dial; the AgentStream chart decides: an abnormal drop is announced and
    redialled (the redial is published), a clean close is redialled silently, a refused dial
    gives the carrier up: connected → announced → connected → silent → connected → announced
    → giving_up → disconnected."""
    from acpfsm.adapters.errors import DialRefused
    from acpfsm.adapters.events import StreamReconnected
    from acpfsm.adapters.transport import RedialPolicy

    policy = RedialPolicy(initial_delay=0.1 * time_scale, max_delay=1.0 * time_scale)
    ex = memory_agent(reconnectable=True, redial_policy=policy)
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt, ready=True)
        tr = ex.last
        tr.drop("websocket: close 1006 (abnormal closure)")
        await wait_until(lambda: s.stream.carrier() is None)  # a redial under way
        tr.restore()
        await wait_until(lambda: s.stream.carrier() is True)
        tr.drop("websocket: close 1000 (normal)", clean=True)
        await wait_until(lambda: s.stream.carrier() is None)  # a redial under way
        tr.restore()
        await wait_until(lambda: s.stream.carrier() is True)

        def refused() -> None:
            raise DialRefused("agent stream upgrade refused with status 401")

        tr.handlers["redial"] = refused
        tr.drop("websocket: close 1006 (abnormal closure)")
        await wait_until(lambda: s.stream.machine.state == "disconnected")
        path = [r.target for r in s.transitions("agent_stream") if r.target != r.source]
        assert path[-7:] == [
            "announced",
            "connected",
            "silent",
            "connected",
            "announced",
            "giving_up",
            "disconnected",
        ]
        reconnected = [e for e in s.hub._backlog if isinstance(e, StreamReconnected)]
        assert len(reconnected) == 1  # only the announced loss's redial is published
        await rt.stop(ref.id, "done")


async def test_stop_tries_a_graceful_agent_stop_unless_forced(time_scale: float) -> None:
    """kandev's ``StopAgentWithReason``: without ``force`` the carrier's graceful stop runs
    first (its failure is only logged); with ``force`` it is skipped. Either way the execution
    is STOPPED."""
    from acpfsm.adapters.errors import TransportClosed

    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        gentle = await rt.launch(spec())
        first = ex.last
        first.handlers["stop_agent"] = lambda: (_ for _ in ()).throw(TransportClosed("gone"))
        snap = await rt.stop(gentle.id, "done")
        assert snap.status == "STOPPED"
        assert ("stop_agent", ()) in first.calls
        forced = await rt.launch(spec())
        second = ex.last
        snap = await rt.stop(forced.id, "now", force=True)
        assert snap.status == "STOPPED"
        assert ("stop_agent", ()) not in second.calls


def test_the_lifecycle_bounds_are_kandevs() -> None:
    """Every default bound, in seconds, as kandev's lifecycle has it (lifecycle/session.go and
    lifecycle/*.go), and acpfsm's own for app tools and permission answers: a changed bound
    is a changed decision, whatever tests measure relative to it."""
    assert msgspec.structs.asdict(Timeouts()) == {
        "stream_connect": 10.0,
        "catalog_wait": 2.0,
        "catalog_poll": 0.01,
        "reconnect_retry": 5.0,
        "reconnect_poll": 0.1,
        "steer_dispatch": 5.0,
        "pending_dispatched_prompt": 10.0,
        "stall_tick": 60.0,
        "stall_threshold": 300.0,
        "cancel_wait": 10.0,
        "cancel_escalation": 2.0,
        "request": 120.0,
        "tool_call": 60.0,
        "permission_wait": 300.0,
        "executor_close": 30.0,
        "tool_server_idle": 5.0,
    }
    assert Timeouts().scaled(0.5).cancel_wait == 5.0
    # one set of bounds is shared by every execution of a runtime: it cannot be changed in
    # place (msgspec.structs.replace makes another)
    with pytest.raises(AttributeError):
        Timeouts().cancel_wait = 1.0  # type: ignore[misc]
    # each bound is named: Timeouts(10.0, 2.0) would silently set the first two fields, and
    # a field added in between would shift them
    with pytest.raises(TypeError):
        Timeouts(10.0)  # type: ignore[misc]
