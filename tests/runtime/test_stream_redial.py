"""The AgentStream chart owns the redial, over the in-memory transport.

The transport only reports facts (the loss, clean or not; each dial's result) and obeys
(``redial()``, ``give_up()``); the chart decides whether a loss is announced, when to dial
(the backoff grows with the failures, from the transport's :class:`RedialPolicy`) and when
to give up (a refused dial, or the reconnect budget's timer). Each decision shows in the
trace as the chart's own event.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from acpfsm.adapters import events as ev
from acpfsm.adapters.errors import DialFailed, DialRefused, TransportClosed
from acpfsm.adapters.memory import MemoryTransport
from acpfsm.adapters.transport import RedialPolicy
from acpfsm.runtime import AgentReportedError, Runtime
from acpfsm.runtime import events as le
from acpfsm.runtime.session import ExecutionSession

from .memory_runtime import MemoryExecutor, launch_ready, make_runtime, settle, wait_until
from .prompt_helpers import Pending, history, history_runtime, start


def redialling(time_scale: float = 1.0, **policy: float) -> Callable[[], MemoryTransport]:
    """A carrier that can be redialled, its backoff shrunk like the timeouts."""
    redial = RedialPolicy(
        initial_delay=policy.pop("initial_delay", 0.1) * time_scale,
        max_delay=policy.pop("max_delay", 1.0) * time_scale,
        budget=policy.pop("budget", 30.0),
    )
    return lambda: MemoryTransport(reconnectable=True, redial_policy=redial)


UNREACHABLE = "agent stream dial failed: agentctl unreachable"


def gave_up(budget: float, last: str) -> str:
    """The reason the chart gives the transport when the reconnect budget runs out."""
    return f"not redialled within {budget:g}s (last dial: {last})"


def stream_steps(s: ExecutionSession) -> list[tuple[str, str]]:
    """The AgentStream chart's ``(event, target)`` records, in order."""
    return [(r.event, r.target) for r in s.transitions("agent_stream")]


def published(s: ExecutionSession, kind: type[object]) -> list[object]:
    return [e for e in s.hub._backlog if isinstance(e, kind)]


def dials(tr: MemoryTransport) -> int:
    return sum(1 for method, _ in tr.calls if method == "redial")


def dispatched(s: ExecutionSession) -> Callable[[], bool]:
    return lambda: s.current is not None and s.current.machine.is_in("dispatched")


async def drop_mid_turn(
    tg: anyio.abc.TaskGroup, rt: Runtime, s: ExecutionSession, tr: MemoryTransport, **drop: Any
) -> Pending:
    """A prompt is dispatched, then the carrier drops (``drop`` are ``MemoryTransport.drop``'s
    arguments)."""
    run = start(tg, rt.prompt, s.id, "long")
    await wait_until(dispatched(s))
    tr.drop(**drop)
    return run


@pytest.mark.both_backends
async def test_an_announced_drop_is_redialled_and_published(time_scale: float) -> None:
    """An abnormal drop mid-turn: the chart announces it (the waiter is released with the
    seed's text, the execution FAILED, ``agentctl.error`` published) and redials; the dials
    fail until the network is back, then the redial is published as ``StreamReconnected``
    and the execution can be recovered."""
    ex = MemoryExecutor(redialling(time_scale))
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        async with anyio.create_task_group() as tg:
            run = await drop_mid_turn(tg, rt, s, tr, error="websocket: close 1006")
            await run.done.wait()
        assert isinstance(run.error, AgentReportedError)
        assert "agent stream disconnected: websocket: close 1006" in str(run.error)
        assert rt.get_execution(eid).status == "FAILED"
        assert published(s, le.AgentctlError)
        await wait_until(lambda: dials(tr) >= 2)  # failing meanwhile
        assert s.stream.machine.state == "announced"
        tr.restore()
        await wait_until(lambda: s.stream.carrier() is True)
        [back] = published(s, ev.StreamReconnected)
        assert isinstance(back, ev.StreamReconnected) and back.attempts >= 2
        steps = stream_steps(s)
        lost = steps.index(("connection_lost", "announced"))
        assert ("redial_failed", "reconnecting") in steps[lost:]
        assert steps[-1] == ("redial_succeeded", "connected")
        await rt.recover_stream(eid)
        assert rt.get_execution(eid).status == "READY"
        tr.auto_complete = True
        assert (await rt.prompt(eid, "again")).stop_reason == "end_turn"


@pytest.mark.both_backends
async def test_a_clean_close_is_redialled_silently(time_scale: float) -> None:
    """kandev H9: a normal close (WebSocket 1000) is redialled without a word: the waiter
    is not released, the status stays RUNNING, nothing is published about the loss or the
    redial, and the turn in flight ends normally over the redialled carrier."""
    ex = MemoryExecutor(redialling(time_scale))
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        async with anyio.create_task_group() as tg:
            run = await drop_mid_turn(tg, rt, s, tr, error="websocket: close 1000", clean=True)
            await wait_until(lambda: s.stream.carrier() is None)
            await settle()
            assert s.stream.machine.state == "silent"
            assert rt.get_execution(eid).status == "RUNNING" and not run.done.is_set()
            tr.restore()
            await wait_until(lambda: s.stream.carrier() is True)
            tr.complete(1)
        assert run.result is not None and run.result.stop_reason == "end_turn"
        assert published(s, ev.StreamReconnected) == []
        assert published(s, le.AgentctlError) == []
        assert rt.get_execution(eid).status == "READY"
        assert ("connection_lost", "silent") in stream_steps(s)
        assert stream_steps(s)[-1] == ("redial_succeeded", "connected")


async def test_a_refused_dial_gives_up_at_once(autojump_clock: object) -> None:
    """The first dial is refused (agentctl's 401: the token was revoked): the chart gives up
    at once, without waiting for its 30 s budget. The transport fails the owed turn (the
    waiter learns why), reports its final loss, and the execution is FAILED; nothing is
    redialled any more and requests fail as on a dead carrier."""
    ex = MemoryExecutor(redialling())
    async with make_runtime(ex) as rt:
        eid, s, tr = await launch_ready(rt, ex)

        def refused() -> None:
            raise DialRefused("agent stream upgrade refused with status 401")

        tr.handlers["redial"] = refused
        async with anyio.create_task_group() as tg:
            run = await drop_mid_turn(tg, rt, s, tr, clean=True)  # even a silent redial
            lost_at = anyio.current_time()
            await run.done.wait()
        assert isinstance(run.error, AgentReportedError)
        assert "agent stream lost and not redialled: redial failed: agent stream upgrade " in (
            str(run.error)
        )
        await wait_until(lambda: s.stream.machine.state == "disconnected")
        assert anyio.current_time() - lost_at < 1.0  # the first dial, not the budget
        assert stream_steps(s)[-3:] == [
            ("connection_lost", "silent"),
            ("redial_failed", "giving_up"),
            ("connection_lost", "disconnected"),
        ]
        assert dials(tr) == 1
        assert rt.get_execution(eid).status == "FAILED"
        with pytest.raises(TransportClosed, match="not running"):
            await rt.recover_stream(eid)
        await anyio.sleep(60)
        assert dials(tr) == 1


@pytest.mark.parametrize("budget", [3.0, 7.0])
async def test_the_reconnect_budget_gives_up(budget: float, autojump_clock: object) -> None:
    """The carrier never comes back: the dials fail (the last one still in flight when the
    time is up) until the budget's timer, armed when the chart entered ``reconnecting``, says
    ``reconnect_timed_out``; the chart gives up after exactly the configured budget."""
    ex = MemoryExecutor(redialling(budget=budget, max_delay=2.0))
    async with make_runtime(ex) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        dialled: list[float] = []

        async def unreachable() -> None:
            dialled.append(anyio.current_time())
            if len(dialled) < 4:
                raise DialFailed(UNREACHABLE)
            await anyio.sleep_forever()  # a dial that hangs until the give-up stops it

        tr.handlers["redial"] = unreachable
        tr.drop("websocket: close 1006 (abnormal closure)")
        await wait_until(lambda: s.stream.machine.state == "disconnected", limit=60)
        records = s.transitions("agent_stream")
        lost = next(r for r in records if r.event == "connection_lost")
        timed_out = next(r for r in records if r.event == "reconnect_timed_out")
        assert timed_out.time - lost.time == pytest.approx(budget)
        assert (timed_out.source, timed_out.target) == ("reconnecting", "giving_up")
        assert len(dialled) == 4
        assert rt.get_execution(eid).status == "FAILED"
        # the give-up names the last dial that answered (the hanging one never did)
        assert tr.calls[-1] == ("give_up", (gave_up(budget, UNREACHABLE),))
        await rt.stop(eid, "done")


async def test_a_give_up_with_no_dial_answered_says_so(autojump_clock: object) -> None:
    """When no dial answered before the budget ran out (each hangs), the give-up says so
    rather than naming a dial error."""
    ex = MemoryExecutor(redialling(budget=4.0))
    async with make_runtime(ex) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        tr.handlers["redial"] = anyio.sleep_forever
        tr.drop("websocket: close 1006 (abnormal closure)")
        await wait_until(lambda: s.stream.machine.state == "disconnected", limit=60)
        assert tr.calls[-1] == ("give_up", (gave_up(4.0, "no dial answered"),))
        await rt.stop(eid, "done")


async def test_the_backoff_grows_with_the_failures(autojump_clock: object) -> None:
    """Each failed dial asks for the next one after a longer wait (the chart's ``redial``
    effect carries the failures so far; the transport's policy turns them into a delay):
    0.1 s, then doubling up to the 1 s cap."""
    ex = MemoryExecutor(redialling(budget=6.0))
    async with make_runtime(ex) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        dialled: list[float] = []

        def unreachable() -> None:
            dialled.append(anyio.current_time())
            raise DialFailed("agent stream dial failed: agentctl unreachable")

        tr.handlers["redial"] = unreachable
        lost_at = anyio.current_time()
        tr.drop("websocket: close 1006 (abnormal closure)")
        await wait_until(lambda: s.stream.machine.state == "disconnected", limit=60)
        waits = [b - a for a, b in zip([lost_at, *dialled], dialled, strict=False)]
        assert waits == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0])
        failed = [r for r in s.transitions("agent_stream") if r.event == "redial_failed"]
        assert len(failed) == len(dialled)
        await rt.stop(eid, "done")


async def test_a_stop_while_redialling_stops_the_dials(autojump_clock: object) -> None:
    """Stopping the execution closes the stream from ``reconnecting``: the dial and the
    budget's timer stop with it."""
    ex = MemoryExecutor(redialling())
    async with make_runtime(ex) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        tr.drop("websocket: close 1006 (abnormal closure)")
        await wait_until(lambda: dials(tr) >= 3)
        await rt.stop(eid, "done")
        made = dials(tr)
        assert ("close_requested", "closed") in stream_steps(s)
        await anyio.sleep(60)
        assert dials(tr) == made


@pytest.mark.both_backends
async def test_a_drop_after_the_stop_closed_the_stream_is_nobodys_news(
    time_scale: float, tmp_path: Path
) -> None:
    """The graceful stop makes the carrier drop (agentctl's does: stopping the agent ends its
    WebSocket) after the stop closed the AgentStream chart: the drop is not a loss any more.
    Nothing is announced, redialled or published for it, and the stopped turn's partial
    text, written to the history by the stop, is not written again."""
    ex = MemoryExecutor(redialling(time_scale))
    async with history_runtime(ex, tmp_path, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        handled: list[bool] = []
        lost = s.pump.stream_lost

        async def noting(event: ev.StreamDisconnected) -> None:
            handled.append(s.stream.machine.ended)
            await lost(event)

        async def stop_agent() -> None:  # the agent stops: its carrier drops at once
            tr.emit(ev.StreamDisconnected(error="websocket: close 1006 (abnormal closure)"))
            await wait_until(lambda: bool(handled))

        s.pump.stream_lost = noting  # type: ignore[method-assign]
        tr.handlers["stop_agent"] = stop_agent
        async with anyio.create_task_group() as tg:
            run = start(tg, rt.prompt, eid, "go")
            await wait_until(dispatched(s))
            tr.emit(ev.MessageChunk(text="partial", prompt_generation=1))
            await wait_until(lambda: s.ctx.message == ["partial"])
            await rt.stop(eid, "done")
            await run.done.wait()
        assert handled == [True]  # the drop reached the stream after it was closed
        await wait_until(lambda: len(history(rt, s)) == 2)  # written off the event loop
        await settle()
        assert history(rt, s) == [("user_message", "go"), ("agent_message", "partial")]
        assert not published(s, le.AgentctlError) and dials(tr) == 0
        assert stream_steps(s)[-1] == ("close_requested", "closed")
        # nor does the stopped turn hear of it
        assert [r.event for r in s.transitions("prompt_generation", 1)][-1] == "execution_stopped"
