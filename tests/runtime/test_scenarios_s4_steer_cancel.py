"""Scenarios S4 (tests/runtime/README.md): reconnect retry, steer, stall detection, cancel and
escalation, readiness, recovery and stop (kandev lifecycle/session.go
``retryPromptAfterReconnect``, ``SendPromptSteerWithDispatchCallback``, ``waitForPromptDone``;
manager_interaction.go ``CancelAgent``, ``escalateStuckCancel``, ``StopAgentWithReason``), driven
through the real runtime over :class:`~acpfsm.adapters.memory.MemoryTransport`.

Every bound runs on the virtual clock under trio (``autojump_clock``) and shrunk by
``time_scale`` under asyncio: 5 s reconnect budget with 100 ms polls, 5 s steer dispatch, 1 min
stall tick / 5 min threshold, 10 s cancel wait, 2 s escalation. kandev's fake agentctl maps to
the memory transport: its per-action handlers are ``handlers[method]``, its recorded frames are
``calls`` (a ``steer`` call is agentctl's ``agent.prompt`` with ``steer:true``), and its
rejected/absent stream is ``MemoryTransport(reconnectable=True).drop()``: the AgentStream
chart then redials it (every dial fails until ``restore()``), silently after a clean close.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import msgspec
import pytest

from acpfsm.adapters import events as ev
from acpfsm.adapters.errors import (
    AgentRequestError,
    DialRefused,
    StreamNotConnected,
    TransportClosed,
)
from acpfsm.adapters.memory import MemoryTransport
from acpfsm.adapters.transport import Attachment, CancelResult, InitializeResult, RedialPolicy
from acpfsm.runtime import (
    AcpfsmError,
    AgentReportedError,
    CancelEscalated,
    CancelFailed,
    ExecutionIdRequired,
    ExecutionNotFound,
    NotReadyForPrompts,
    PromptDispatchError,
    PromptResult,
    PromptTimeout,
    Runtime,
    SteerAttachmentMaterializationError,
    SteerDispatchTimeout,
    SteerNotDispatched,
)
from acpfsm.runtime import events as le
from acpfsm.runtime.session import ExecutionSession

from .memory_runtime import (
    MemoryExecutor,
    launch_ready,
    launch_session,
    make_runtime,
    memory_agent,
    settle,
    wait_until,
)

pytestmark = pytest.mark.both_backends

PROMPT_ABANDONED = "prompt abandoned after cancel"


# ------------------------------------------------------------------------------ helpers --


@dataclass
class Run:
    """A prompt running in the background: its result or its error, and when it ended."""

    result: PromptResult | None = None
    error: AcpfsmError | None = None
    ended_at: float | None = None

    @property
    def done(self) -> bool:
        return self.ended_at is not None


def start_prompt(
    tg: anyio.abc.TaskGroup, rt: Runtime, execution_id: str, text: str, **kw: Any
) -> Run:
    run = Run()

    async def go() -> None:
        try:
            run.result = await rt.prompt(execution_id, text, **kw)
        except AcpfsmError as exc:
            run.error = exc
        run.ended_at = anyio.current_time()

    tg.start_soon(go)
    return run


def live(s: ExecutionSession, g: int = 1) -> Callable[[], bool]:
    """The generation ``g`` is dispatched (steerable)."""
    return lambda: (
        s.current is not None
        and s.current.generation == g
        and s.current.machine.is_in("dispatched")
    )


def published(s: ExecutionSession, kind: type[Any]) -> list[Any]:
    """Every event of ``kind`` the execution has published so far, in order."""
    return [e for e in s.hub._backlog if isinstance(e, kind)]


def methods(tr: MemoryTransport, *names: str) -> list[tuple[str, Any]]:
    return [c for c in tr.calls if c[0] in names]


def stream_path(s: ExecutionSession) -> list[str]:
    """The states the AgentStream chart entered (its targetless steps left out)."""
    return [r.target for r in s.transitions("agent_stream") if r.target != r.source]


def redialling(time_scale: float) -> Callable[[], MemoryTransport]:
    """A carrier that can be redialled (a WebSocket), its backoff shrunk like the timeouts
    (its 30 s budget is left alone: no test here waits that long)."""
    policy = RedialPolicy(initial_delay=0.1 * time_scale, max_delay=1.0 * time_scale)
    return lambda: MemoryTransport(reconnectable=True, redial_policy=policy)


def window(time_scale: float) -> float:
    """``time_scale``, but never so small under asyncio that the chart's redial and the
    resend cannot fit the 5 s retry window in real time on a busy machine."""
    return max(time_scale, 0.02)


def redialled_at(s: ExecutionSession) -> float:
    """When the stream's last redial came up."""
    return [r.time for r in s.transitions("agent_stream") if r.event == "redial_succeeded"][-1]


# ---------------------------------------------- reconnect retry (retryPromptAfterReconnect) --


async def test_s106_cancel_release_during_reconnect_retry(
    time_scale: float, autojump_clock: object
) -> None:
    """The stream is absent when the prompt goes out; after the carrier redials, agentctl
    rejects the resent prompt with ``prompt abandoned after cancel``: the prompt fails with
    CancelEscalated (not AgentReportedError), and the resend carried the same generation."""
    time_scale = window(time_scale)
    ex = MemoryExecutor(redialling(time_scale))
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        tr.drop(clean=True)
        await wait_until(lambda: s.stream.carrier() is not True)  # the chart heard of the drop

        def reject(text: str, atts: tuple[Attachment, ...], g: int) -> None:
            raise AgentRequestError(-32603, PROMPT_ABANDONED, method="session/prompt")

        tr.handlers["prompt"] = reject

        async def redial() -> None:
            await anyio.sleep(1.0 * time_scale)
            tr.restore()

        async with anyio.create_task_group() as tg:
            tg.start_soon(redial)
            with pytest.raises(CancelEscalated) as info:
                await rt.prompt(eid, "work")
        assert not isinstance(info.value, AgentReportedError)
        assert PROMPT_ABANDONED in str(info.value)
        assert [c[1][2] for c in methods(tr, "prompt")] == [1, 1]  # same generation resent
        assert s.current is not None and s.current.leaf == "cancel_escalated"
        assert "silent" in stream_path(s)  # a clean close is redialled silently
        assert s.stream.machine.state == "connected"
        assert rt.get_execution(eid).status == "READY"


async def test_s106_reconnect_retry_resends_same_generation(
    time_scale: float, autojump_clock: object, backend: str
) -> None:
    """The retry polls every 100 ms while the reconnectable carrier is down (no frame is
    sent meanwhile), then resends generation 1 once the AgentStream chart has redialled it
    (connected → reconnecting.silent → connected) and the turn then completes normally."""
    time_scale = window(time_scale)
    ex = MemoryExecutor(redialling(time_scale))
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        tr.drop(clean=True)
        await wait_until(lambda: s.stream.carrier() is not True)  # the chart heard of the drop
        restored_at: list[float] = []

        async def redial_then_complete() -> None:
            await anyio.sleep(0.45 * time_scale)
            tr.restore()
            restored_at.append(anyio.current_time())
            await wait_until(live(s))
            tr.complete(1)

        async with anyio.create_task_group() as tg:
            tg.start_soon(redial_then_complete)
            result = await rt.prompt(eid, "work")
        assert result.stop_reason == "end_turn" and result.generation == 1
        prompts = methods(tr, "prompt")
        assert [c[1] for c in prompts] == [("work", (), 1), ("work", (), 1)]
        assert stream_path(s)[-2:] == ["silent", "connected"]
        path = [r.target for r in s.transitions("prompt_generation", 1)]
        assert path[:2] == ["sending", "reconnecting"]
        assert redialled_at(s) >= restored_at[0]  # the chart's next dial, after the restore
        if backend == "trio":  # the resend waits for the next 100 ms poll, no longer
            dispatched_at = [r.time for r in rt.trace.records if r.event == "dispatch_accepted"]
            assert 0 <= dispatched_at[-1] - redialled_at(s) <= 0.1 + 1e-6
        assert rt.get_execution(eid).status == "READY"


async def test_s106_reconnect_retry_gives_up_after_5s(
    time_scale: float, autojump_clock: object, backend: str
) -> None:
    """A carrier that does not come back within the 5 s budget ends the prompt with
    ``failed to trigger prompt: timed out waiting for updates stream reconnect: agent stream
    not connected``; the generation is undelivered and the execution is not left RUNNING
    with nobody waiting (kandev H7)."""
    ex = MemoryExecutor(redialling(time_scale))
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        tr.drop(clean=True)
        await wait_until(lambda: s.stream.carrier() is not True)  # the chart heard of the drop
        start = anyio.current_time()
        with pytest.raises(PromptDispatchError) as info:
            await rt.prompt(eid, "work")
        elapsed = anyio.current_time() - start
        assert str(info.value) == (
            "failed to trigger prompt: timed out waiting for updates stream reconnect: "
            "agent stream not connected"
        )
        assert elapsed >= 5.0 * time_scale
        if backend == "trio":
            assert elapsed <= 5.0 + 0.1 + 1e-6
        assert len(methods(tr, "prompt")) == 1  # nothing is sent while the carrier is down
        assert s.generations[1].leaf == "undelivered"
        assert s.stream.machine.state == "silent"  # the stream's own budget is 30 s
        assert rt.get_execution(eid).status == "READY"
        # the carrier comes back later: the chart redials it and the next prompt goes out
        # (once it is up: a prompt sent before would race the redial's backoff against its
        # own 5 s window, which is this test's first half)
        tr.restore()
        await wait_until(lambda: s.stream.carrier() is True)
        async with anyio.create_task_group() as tg:
            run = start_prompt(tg, rt, eid, "again")
            await wait_until(live(s, 2))
            tr.complete(2)
        assert run.result is not None and run.result.generation == 2


async def test_s106_reconnect_retry_stops_when_the_stream_is_given_up(
    time_scale: float, autojump_clock: object, backend: str
) -> None:
    """kandev ``retryPromptAfterReconnect`` polls while the stream manager may still redial;
    once the AgentStream chart gave the carrier up (its dial refused: nothing will redial),
    the waiting prompt fails at its next poll, not at the end of its 5 s window, with the
    same dispatch error, and the generation is undelivered."""
    ex = MemoryExecutor(redialling(time_scale))
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        refuse = anyio.Event()

        async def refused() -> None:
            await refuse.wait()
            raise DialRefused("agent stream upgrade refused with status 401")

        tr.handlers["redial"] = refused
        tr.drop(clean=True)
        await wait_until(lambda: s.stream.carrier() is not True)  # the chart heard of the drop
        async with anyio.create_task_group() as tg:
            run = start_prompt(tg, rt, eid, "work")
            await wait_until(lambda: s.current is not None and s.current.leaf == "reconnecting")
            refuse.set()
            await wait_until(lambda: s.stream.carrier() is not None)
            given_up_at = anyio.current_time()
        assert isinstance(run.error, PromptDispatchError), run.error
        assert str(run.error).startswith(
            "failed to trigger prompt: timed out waiting for updates stream reconnect: "
        )
        if backend == "trio":  # at its next 100 ms poll
            assert run.ended_at is not None and run.ended_at - given_up_at <= 0.1 + 1e-6
        assert s.generations[1].leaf == "undelivered"
        assert len(methods(tr, "prompt")) == 1  # nothing is sent to a carrier given up


async def test_s106_local_cancel_during_reconnect_retry(
    time_scale: float, autojump_clock: object, backend: str
) -> None:
    """A cancel while the prompt waits for the carrier: the agent never had the prompt, so it
    is withdrawn at once (no session/cancel, nothing to escalate); the retry stops at its next
    100 ms poll, the prompt's caller gets a ``cancelled`` result, nothing is resent, status
    READY. (Before, the cancel escalated and the prompt failed with CancelEscalated.)"""
    ex = MemoryExecutor(redialling(time_scale))
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        tr.drop(clean=True)
        await wait_until(lambda: s.stream.carrier() is not True)  # the chart heard of the drop
        async with anyio.create_task_group() as tg:
            run = start_prompt(tg, rt, eid, "work")
            await wait_until(lambda: s.current is not None and s.current.leaf == "reconnecting")
            start = anyio.current_time()
            await rt.cancel(eid)
            if backend == "trio":
                assert anyio.current_time() - start <= 0.1 + 1e-6
        assert run.error is None
        assert run.result is not None and run.result.stop_reason == "cancelled"
        assert s.generations[1].leaf == "withdrawn"
        assert methods(tr, "cancel") == []  # nothing to cancel at the agent
        tr.restore()
        await anyio.sleep(6 * time_scale)
        assert len(methods(tr, "prompt")) == 1
        assert rt.get_execution(eid).status == "READY"


@pytest.mark.parametrize("dispatch_only", [False, True])
async def test_s106_a_prompt_withdrawn_while_waiting_for_the_carrier_was_never_dispatched(
    time_scale: float, autojump_clock: object, dispatch_only: bool
) -> None:
    """A cancel while the prompt waits for the carrier withdraws it: it never reached the
    agent, so ``on_dispatched`` is never called and the caller's result is ``cancelled``,
    for a dispatch-only prompt too (not ``dispatched``)."""
    ex = MemoryExecutor(redialling(time_scale))
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        tr.drop(clean=True)
        await wait_until(lambda: s.stream.carrier() is not True)  # the chart heard of the drop
        dispatched: list[int] = []
        async with anyio.create_task_group() as tg:
            run = start_prompt(
                tg,
                rt,
                eid,
                "work",
                dispatch_only=dispatch_only,
                on_dispatched=lambda: dispatched.append(1),
            )
            await wait_until(lambda: s.current is not None and s.current.leaf == "reconnecting")
            await rt.cancel(eid)
        assert run.error is None
        assert run.result is not None and run.result.stop_reason == "cancelled"
        assert dispatched == []
        assert s.generations[1].leaf == "withdrawn"
        assert len(methods(tr, "prompt")) == 1  # the first attempt only, never resent


async def test_s106_stdio_carrier_is_not_redialled(time_scale: float, backend: str) -> None:
    """kandev retries only when a StreamManager can redial (``dispatchPrompt``). Over a
    carrier that cannot (stdio pipes) the error is the trigger's at once: no 5 s wait, no
    resend, and the AgentStream chart never enters ``reconnecting``."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)

        def broken(text: str, atts: tuple[Attachment, ...], g: int) -> None:
            raise StreamNotConnected()

        tr.handlers["prompt"] = broken
        start = anyio.current_time()
        with pytest.raises(PromptDispatchError, match=r"^failed to trigger prompt: agent stream"):
            await rt.prompt(eid, "work")
        if backend == "trio":
            # far below the 5 s reconnect bound; not zero, because the virtual clock may
            # jump to other timers' deadlines while the history append runs in a thread
            assert anyio.current_time() - start < 4.0
        assert len(methods(tr, "prompt")) == 1
        assert "reconnecting" not in stream_path(s)
        assert s.generations[1].leaf == "undelivered"
        assert rt.get_execution(eid).status == "READY"


async def test_s107_cancel_release_at_trigger_time(time_scale: float) -> None:
    """A connected stream; agentctl answers the prompt request with ``prompt abandoned after
    cancel``: the prompt fails with CancelEscalated and not AgentReportedError."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)

        def reject(text: str, atts: tuple[Attachment, ...], g: int) -> None:
            raise AgentRequestError(-32603, PROMPT_ABANDONED, method="session/prompt")

        tr.handlers["prompt"] = reject
        with pytest.raises(CancelEscalated) as info:
            await rt.prompt(eid, "work")
        assert not isinstance(info.value, AgentReportedError)
        assert str(info.value).startswith("failed to trigger prompt: ")
        assert info.value.generation == 1
        assert len(methods(tr, "prompt")) == 1
        assert s.generations[1].leaf == "cancel_escalated"
        assert rt.get_execution(eid).status == "READY"


# ------------------------------------------------------------------------------ steer --


async def test_s109_steer_reuses_live_generation_without_blocking(time_scale: float) -> None:
    """A waiting prompt on generation 1 is in flight (it holds the prompt lock through its
    wait); a steer returns ``dispatched`` at once, the frame is a steer for generation 1,
    generation 1 stays the live one, and one ``complete(1)`` wakes the waiter exactly once."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        dispatched: list[int] = []
        async with anyio.create_task_group() as tg:
            run = start_prompt(tg, rt, eid, "long task")
            await wait_until(live(s))
            assert s.prompts.prompt_lock.locked()  # promptMu is held by the waiting prompt
            with anyio.fail_after(2):
                steered = await rt.steer(
                    eid, "also this", on_dispatched=lambda: dispatched.append(1)
                )
            assert steered == PromptResult(stop_reason="dispatched", generation=1)
            assert dispatched == [1]
            assert methods(tr, "steer") == [("steer", ("also this", (), 1))]
            assert (
                s.current is not None
                and s.current.generation == 1
                and s.current.machine.is_in("dispatched")
            )
            assert not run.done
            tr.complete(1)
        assert run.result is not None and run.result.stop_reason == "end_turn"
        assert s.turns._next == 1
        assert len(published(s, le.PromptCompleted)) == 1
        assert [r.event for r in s.transitions("prompt_generation", 1)].count(
            "completion_received"
        ) == 1


async def test_a_steer_reaches_the_initial_prompts_turn(time_scale: float) -> None:
    """The launch's initial prompt opens the execution to its callers as soon as its turn is
    admitted (``InitializeAndPrompt``: callers queue behind the initial turn, not behind its
    end): a steer while that turn runs goes into it, generation 1, at once."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt, "initial task")
        await wait_until(live(s))
        tr = ex.last
        with anyio.fail_after(2):
            steered = await rt.steer(ref.id, "also this")
        assert steered == PromptResult(stop_reason="dispatched", generation=1)
        assert methods(tr, "steer") == [("steer", ("also this", (), 1))]
        tr.complete(1)
        await wait_until(lambda: rt.get_execution(ref.id).status == "READY")
        assert [c[1][0] for c in methods(tr, "prompt")] == ["initial task"]
        await rt.stop(ref.id, "done")


async def test_a_stray_handoff_does_not_hold_up_the_events_behind_it(time_scale: float) -> None:
    """A handoff of no turn (generation 0: ``handlePromptHandoffEvent`` ignores it) arrives
    while a steer request holds the lifecycle: the pump drops it without waiting for the
    lifecycle, so the events behind it still flow while the steer waits for its answer.
    The steer's own bound is not scaled down: under asyncio a scaled one (10 ms of real time)
    ran out on a loaded machine before the pump had its turn."""
    ex = MemoryExecutor()
    unscaled = {"steer_dispatch": 5.0}
    async with make_runtime(ex, time_scale=time_scale, timeouts=unscaled) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        flowed: list[bool] = []

        async def steer_answered_later(text: str, atts: Any, g: int) -> None:
            tr.emit(ev.ForegroundIdle(prompt_generation=0, prompt_handoff=True))
            tr.emit(ev.MessageChunk(text="behind it", prompt_generation=g))
            with anyio.move_on_after(2.0):
                await wait_until(lambda: s.ctx.message == ["behind it"])
            flowed.append(s.ctx.message == ["behind it"])

        tr.handlers["steer"] = steer_answered_later
        async with anyio.create_task_group() as tg:
            run = start_prompt(tg, rt, eid, "long task")
            await wait_until(live(s))
            await rt.steer(eid, "more")
            tr.complete(1)
        assert flowed == [True]
        assert run.result is not None and run.result.stop_reason == "end_turn"
        await rt.stop(eid, "done")


async def test_s110_idle_steer_is_not_dispatched(time_scale: float) -> None:
    """No turn in flight: SteerNotDispatched (``steer was not dispatched``); nothing reaches
    the agent, no generation begins, no attachment is materialized, on_dispatched is not
    called (seed D6). Ordinary admission is left to the caller."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        before = list(tr.calls)
        called: list[int] = []
        with pytest.raises(SteerNotDispatched) as info:
            await rt.steer(
                eid,
                "hello",
                attachments=[Attachment(name="a.txt", attachment_id="att-1", data=b"x")],
                on_dispatched=lambda: called.append(1),
            )
        assert str(info.value).startswith("steer was not dispatched")
        assert info.value.execution_id == eid
        assert tr.calls == before
        assert s.current is None and s.turns._next == 0
        assert called == []
        assert rt.get_execution(eid).status == "READY"
        # after a completed turn the generation is no longer live either
        tr.auto_complete = True
        await rt.prompt(eid, "one turn")
        with pytest.raises(SteerNotDispatched):
            await rt.steer(eid, "late")
        assert methods(tr, "steer") == []


async def test_s112_steer_never_overtakes_undispatched_turn(time_scale: float) -> None:
    """A predecessor pinned between BeginPrompt and dispatch (here: its attachment upload is
    held, kandev's ``beforePromptDispatchHook``): a racing steer gets SteerNotDispatched at
    once, no frame reaches the agent while the predecessor is pinned, and once released the
    predecessor sends ordinary generation 1 while the steer never sends anything (seed D6)."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        release = anyio.Event()
        pinned = anyio.Event()

        async def held(att: Attachment) -> Attachment:
            pinned.set()
            await release.wait()
            return att

        tr.handlers["materialize"] = held
        async with anyio.create_task_group() as tg:
            run = start_prompt(tg, rt, eid, "first", attachments=[Attachment(name="f.txt")])
            await pinned.wait()
            assert s.current is not None and s.current.leaf == "admitted"
            with anyio.fail_after(1):
                with pytest.raises(SteerNotDispatched):
                    await rt.steer(eid, "overtake?")
            assert methods(tr, "prompt", "steer") == []
            release.set()
            await wait_until(live(s))
            tr.complete(1)
        assert run.result is not None and run.result.generation == 1
        assert [c[0] for c in methods(tr, "prompt", "steer")] == ["prompt"]
        assert methods(tr, "prompt")[0][1][0] == "first"


async def test_s113_no_toctou_between_selection_and_dispatch(time_scale: float) -> None:
    """The steer selected generation 1 and holds the lifecycle lock across its RPC; a
    ``complete(1)`` arriving meanwhile does not apply until the steer releases the lock. The
    steer frame goes out first, then the predecessor wakes (R1). The bounds are kandev's own
    (unscaled): the steer's dispatch bound must not expire while the test holds its ack."""
    ex = MemoryExecutor()
    async with make_runtime(ex) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        entered = anyio.Event()
        release = anyio.Event()
        order: list[str] = []

        async def slow_ack(text: str, atts: tuple[Attachment, ...], g: int) -> None:
            entered.set()
            await release.wait()

        tr.handlers["steer"] = slow_ack
        async with anyio.create_task_group() as tg:
            run = start_prompt(tg, rt, eid, "long task")
            await wait_until(live(s))

            async def steer() -> None:
                result = await rt.steer(eid, "more")
                order.append(f"steer:{result.stop_reason}:{result.generation}")

            tg.start_soon(steer)
            await entered.wait()
            tr.complete(1)
            await settle()
            assert s.generations[1].leaf == "awaited"  # the completion waits for the lock
            assert not run.done
            release.set()
            await wait_until(lambda: run.done)
            order.append("prompt woke")
        assert order == ["steer:dispatched:1", "prompt woke"]
        assert run.result is not None and run.result.stop_reason == "end_turn"
        assert [c[0] for c in tr.calls[-2:]] == ["prompt", "steer"]


async def test_s115_steer_wire_encoding(time_scale: float) -> None:
    """kandev's ``PromptSteer(text, attachments, 42)`` frame maps to the transport seam's
    ``steer(text, attachments, 42)``: the runtime hands the carrier the exact text, the
    (materialized) attachments and generation 42; ordinary prompts use ``prompt`` and never
    carry a steer. (agentctl's JSON ``steer`` key is the agentctl adapter's encoding of the
    same call; the stdio carrier has no such key.)"""
    ex = memory_agent(auto_complete=True)
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        for i in range(41):
            await rt.prompt(eid, f"turn {i}")
        tr.auto_complete = False
        att = Attachment(name="diagram.png", mime_type="image/png", data=b"\x89PNG")
        async with anyio.create_task_group() as tg:
            run = start_prompt(tg, rt, eid, "turn 41")
            await wait_until(live(s, 42))
            await rt.steer(eid, "  exact text\n", attachments=[att])
            tr.complete(42)
        assert run.result is not None and run.result.generation == 42
        assert methods(tr, "steer") == [("steer", ("  exact text\n", (att,), 42))]
        prompts = methods(tr, "prompt")
        assert len(prompts) == 42
        assert [c[1][2] for c in prompts] == list(range(1, 43))


async def test_s116_steer_over_a_disconnected_stream_is_not_dispatched(
    time_scale: float, autojump_clock: object
) -> None:
    """A live dispatched generation, but the steer RPC fails with ``agent stream not
    connected`` (also ``… while waiting for response``, written then dropped, H1): the steer
    returns SteerNotDispatched and does not reconnect, re-send or queue behind the turn."""
    ex = MemoryExecutor(redialling(time_scale))
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)

        def dropped_after_write(text: str, atts: tuple[Attachment, ...], g: int) -> None:
            raise StreamNotConnected(
                "agent stream not connected while waiting for response", while_waiting=True
            )

        async with anyio.create_task_group() as tg:
            run = start_prompt(tg, rt, eid, "long task")
            await wait_until(live(s))
            tr.handlers["steer"] = dropped_after_write
            with pytest.raises(SteerNotDispatched, match="while waiting for response"):
                await rt.steer(eid, "once")
            tr.handlers.pop("steer")
            tr.drop(clean=True)  # now the carrier itself is down
            with pytest.raises(SteerNotDispatched):
                await rt.steer(eid, "twice")
            await anyio.sleep(6 * time_scale)  # longer than any retry budget
            # the stream redials, not the steer (waited for: how many of its backoff's
            # dials fit the sleep depends on the scheduler under asyncio)
            await wait_until(lambda: len(methods(tr, "redial")) > 1)
            assert len(methods(tr, "steer")) == 2  # one attempt each, no re-send
            assert len(methods(tr, "prompt")) == 1  # not queued as an ordinary prompt
            assert s.stream.machine.state == "silent"  # and the clean close released nobody
            assert s.current is not None and s.current.machine.is_in("dispatched")
            tr.restore()
            await wait_until(lambda: s.stream.carrier() is True)
            tr.complete(1)
        assert run.result is not None and run.result.stop_reason == "end_turn"
        assert s.turns._next == 1


async def test_s116_steer_attachment_is_materialized_before_the_lock(time_scale: float) -> None:
    """An attachment with an AttachmentID is materialized before the lifecycle lock is taken
    (R35): while its upload is held, a completion is claimed at once; the steer then finds no
    live generation and returns SteerNotDispatched with the upload already done (the seed's
    derived consequence). Undisturbed, the steer frame carries the materialized descriptor."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        att = Attachment(
            name="notes.txt", mime_type="text/plain", attachment_id="att-1", data=b"hi"
        )
        descriptor = Attachment(
            name="agentctl-notes.txt", mime_type="text/plain", attachment_id="att-1", size=2
        )
        uploading = anyio.Event()
        release = anyio.Event()

        async def upload(a: Attachment) -> Attachment:
            uploading.set()
            await release.wait()
            return descriptor

        tr.handlers["materialize"] = upload
        async with anyio.create_task_group() as tg:
            run = start_prompt(tg, rt, eid, "first")
            await wait_until(live(s))
            outcome: list[BaseException] = []

            async def steer() -> None:
                try:
                    await rt.steer(eid, "with file", attachments=[att])
                except SteerNotDispatched as exc:
                    outcome.append(exc)

            tg.start_soon(steer)
            await uploading.wait()
            tr.complete(1)  # claimed although the steer is mid-upload
            await wait_until(lambda: run.done)
            release.set()
        assert run.result is not None and run.result.stop_reason == "end_turn"
        assert len(outcome) == 1
        assert methods(tr, "materialize") == [("materialize", (att,))]
        assert methods(tr, "steer") == []

        tr.handlers["materialize"] = lambda a: descriptor
        async with anyio.create_task_group() as tg:
            run = start_prompt(tg, rt, eid, "second")
            await wait_until(live(s, 2))
            result = await rt.steer(eid, "with file", attachments=[att])
            tr.complete(2)
        assert result.stop_reason == "dispatched" and result.generation == 2
        assert methods(tr, "steer") == [("steer", ("with file", (descriptor,), 2))]
        sent = methods(tr, "steer")[0][1][1][0]
        assert sent.data == b"" and sent.delivery_mode == "prompt"


async def test_s116_steer_attachment_materialization_failure(time_scale: float) -> None:
    """A failed upload: the error is a SteerAttachmentMaterializationError
    (``steer attachment materialization failed: <cause>``) chained to the cause, and no
    frame is sent; the turn is untouched (seed D7)."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)

        def fail(a: Attachment) -> Attachment:
            raise AgentRequestError(-32603, "disk full", method="materialize")

        tr.handlers["materialize"] = fail
        async with anyio.create_task_group() as tg:
            run = start_prompt(tg, rt, eid, "first")
            await wait_until(live(s))
            with pytest.raises(SteerAttachmentMaterializationError) as info:
                await rt.steer(eid, "x", attachments=[Attachment(name="a", attachment_id="a1")])
            tr.complete(1)
        err = info.value
        assert str(err).startswith("steer attachment materialization failed: ")
        assert "disk full" in str(err)
        assert isinstance(err.__cause__, AcpfsmError) and "disk full" in str(err.__cause__)
        assert methods(tr, "steer") == []
        assert run.result is not None and run.result.stop_reason == "end_turn"


async def test_s116_steer_requires_a_ready_or_running_execution(time_scale: float) -> None:
    """validateStatus with Status FAILED: the steer fails with NotReadyForPrompts before any
    request reaches the agent."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        async with anyio.create_task_group() as tg:
            run = start_prompt(tg, rt, eid, "x")
            await wait_until(live(s))
            tr.fail(1, "boom")
        assert isinstance(run.error, AgentReportedError)
        assert rt.get_execution(eid).status == "FAILED"
        before = list(tr.calls)
        with pytest.raises(
            NotReadyForPrompts, match=r"is not ready for prompts \(status: FAILED\)"
        ):
            await rt.steer(eid, "steer", attachments=[Attachment(name="a", attachment_id="a1")])
        assert tr.calls == before


async def test_s116_stalled_steer_ack_times_out_after_5s(
    time_scale: float, autojump_clock: object, backend: str
) -> None:
    """R4: a steer ack that never comes holds the lifecycle lock for at most the 5 s steer
    dispatch bound; the error is returned as is (no re-send, no reconnect) and the turn
    then completes normally."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        never = anyio.Event()

        async def hang(text: str, atts: tuple[Attachment, ...], g: int) -> None:
            await never.wait()

        tr.handlers["steer"] = hang
        async with anyio.create_task_group() as tg:
            run = start_prompt(tg, rt, eid, "long")
            await wait_until(live(s))
            start = anyio.current_time()
            with pytest.raises(SteerDispatchTimeout) as info:
                await rt.steer(eid, "stuck")
            elapsed = anyio.current_time() - start
            assert elapsed >= 5 * time_scale
            if backend == "trio":
                assert elapsed == pytest.approx(5.0, abs=0.01)
            assert info.value.generation == 1
            assert not s.ctx.lifecycle_lock.locked()
            tr.complete(1)
        assert run.result is not None and run.result.stop_reason == "end_turn"
        assert len(methods(tr, "steer")) == 1


async def test_s116_steer_the_agent_refuses_is_a_dispatch_error_of_its_turn(
    time_scale: float,
) -> None:
    """kandev ``SendPromptSteerWithDispatchCallback``: a steer request the agent answers with
    an error is ``failed to steer prompt: …``, a PromptDispatchError naming the live turn (not
    the carrier's raw error, not a crash); the turn itself goes on and completes."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)

        def refuse(text: str, atts: tuple[Attachment, ...], g: int) -> None:
            raise AgentRequestError(-32603, "steer rejected", method="session/prompt")

        tr.handlers["steer"] = refuse
        async with anyio.create_task_group() as tg:
            run = start_prompt(tg, rt, eid, "long")
            await wait_until(live(s))
            with pytest.raises(PromptDispatchError) as info:
                await rt.steer(eid, "more")
            assert str(info.value).startswith("failed to steer prompt: ")
            assert "steer rejected" in str(info.value)
            assert info.value.generation == 1
            assert isinstance(info.value.__cause__, AgentRequestError)
            tr.complete(1)
        assert run.result is not None and run.result.stop_reason == "end_turn"
        assert rt.get_execution(eid).status == "READY"


# -------------------------------------------------------------------- stall detection --


def stall_scale(time_scale: float) -> float:
    """The stall bounds are minutes: on asyncio shrink them four times more than the rest."""
    return time_scale if time_scale == 1.0 else time_scale / 4


async def until_stalled(rt: Runtime, s: ExecutionSession) -> None:
    """Wait for the first ``agent.stalled``, polling once per (scaled) second so the virtual
    clock crosses the 5 minutes in a few hundred steps."""
    with anyio.fail_after(2 * rt.timeouts.stall_threshold):
        while not published(s, le.AgentStalled):
            await anyio.sleep(rt.timeouts.stall_tick / 60)


def _trace_time(rt: Runtime, event: str) -> float:
    return next(r.time for r in rt.trace.records if r.event == event)


async def _stall_after_quiet(
    rt: Runtime, s: ExecutionSession, tr: MemoryTransport, eid: str, *events: ev.AgentEvent
) -> tuple[list[le.AgentStalled], float]:
    """Run a waiting prompt, emit ``events`` right after dispatch, then stay silent for
    15 minutes; return the stall events and when the first one came (after dispatch)."""
    async with anyio.create_task_group() as tg:
        run = start_prompt(tg, rt, eid, "work")
        await wait_until(live(s))
        for event in events:
            tr.emit(event)
        await until_stalled(rt, s)
        first_at = _trace_time(rt, "stall_detected") - _trace_time(rt, "dispatch_accepted")
        await anyio.sleep(3 * rt.timeouts.stall_tick)  # three more ticks: still one stall
        assert not run.done
        assert rt.get_execution(eid).status == "RUNNING"  # a stall changes no state
        tr.complete(1)
    assert run.result is not None and run.result.stop_reason == "end_turn"
    return published(s, le.AgentStalled), first_at


async def test_s118_silent_agent_is_never_started(
    time_scale: float, autojump_clock: object, backend: str
) -> None:
    """No agent event since dispatch: after 5 minutes (1-minute ticks) one ``agent.stalled``
    with ``never_started=True``, once per wait however long the silence lasts."""
    ex = MemoryExecutor()
    ts = stall_scale(time_scale)
    async with make_runtime(ex, time_scale=ts) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        stalls, first_at = await _stall_after_quiet(rt, s, tr, eid)
        assert len(stalls) == 1
        stall = stalls[0]
        assert stall.never_started is True
        assert stall.prompt_generation == 1
        assert stall.stalled_for >= 300 * ts * (1 - 1e-9)
        assert first_at >= 300 * ts * (1 - 1e-9)
        if backend == "trio":  # the fifth 1-minute tick finds exactly 5 minutes of quiet
            assert first_at == pytest.approx(300.0, abs=1e-6)
            assert stall.stalled_for == pytest.approx(300.0, abs=1e-6)
        stalled = next(
            r for r in s.transitions("prompt_generation", 1) if r.event == "stall_detected"
        )
        assert stalled.target == "stall_reported"


async def test_s119_content_event_means_started(time_scale: float, autojump_clock: object) -> None:
    """A ``message_chunk`` after dispatch: the stall 5 minutes later says
    ``never_started=False`` and carries the bumped activity epoch."""
    ex = MemoryExecutor()
    ts = stall_scale(time_scale)
    async with make_runtime(ex, time_scale=ts) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        stalls, _ = await _stall_after_quiet(
            rt, s, tr, eid, ev.MessageChunk(text="thinking…", prompt_generation=1)
        )
        assert len(stalls) == 1
        assert stalls[0].never_started is False
        assert stalls[0].activity_epoch >= 2  # armed at dispatch, bumped by the chunk


async def test_s119_content_of_a_prompt_sent_into_a_running_turn_means_started(
    time_scale: float, autojump_clock: object
) -> None:
    """The same for a prompt sent while the execution is RUNNING (the turn before was
    handed off: the agent works on in the background): its chunks come through the pump's
    batch path, no chart hearing of them (the first activity is announced, no wakeup is
    watched), and still mark it started."""
    ex = MemoryExecutor()
    ts = stall_scale(time_scale)
    async with make_runtime(ex, time_scale=ts) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        async with anyio.create_task_group() as tg:
            first = start_prompt(tg, rt, eid, "first")
            await wait_until(live(s, 1))
            tr.emit(ev.MessageChunk(text="one", prompt_generation=1))
            tr.emit(ev.ForegroundIdle(prompt_generation=1, prompt_handoff=True))
            await wait_until(lambda: first.done)
            assert first.result is not None and first.result.stop_reason == "foreground_idle"
            second = start_prompt(tg, rt, eid, "second")
            await wait_until(live(s, 2))
            assert rt.get_execution(eid).status == "RUNNING"
            tr.emit(ev.MessageChunk(text="two", prompt_generation=2))
            await until_stalled(rt, s)
            tr.complete(2)
        assert second.result is not None and second.result.stop_reason == "end_turn"
        (stall,) = published(s, le.AgentStalled)
        assert stall.prompt_generation == 2 and stall.never_started is False
        await rt.stop(eid, "done")


async def test_s119_metadata_event_is_not_turn_content(
    time_scale: float, autojump_clock: object
) -> None:
    """Only turn content marks a turn as started: a metadata event (``session_models``) after
    dispatch bumps the activity time but the stall still says ``never_started=True``."""
    ex = MemoryExecutor()
    ts = stall_scale(time_scale)
    async with make_runtime(ex, time_scale=ts) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        stalls, _ = await _stall_after_quiet(
            rt, s, tr, eid, ev.SessionModels(current_model_id="fast"), ev.ContextWindow()
        )
        assert len(stalls) == 1 and stalls[0].never_started is True


async def test_stall_ticks_are_counted_from_each_wait(
    time_scale: float, autojump_clock: object, backend: str
) -> None:
    """kandev starts the stall ticker when a wait starts, and so does the watchdog here
    (one ticker per execution that each wait re-arms): a prompt sent 90 s after the previous
    one (whose wait's first tick found nobody waiting and turned the ticker off), to an agent
    that stays silent, is reported stalled on its own fifth tick, exactly 5 minutes after its
    dispatch (not on a tick of the previous wait's, nor of the execution's start)."""
    ex = MemoryExecutor()
    ts = stall_scale(time_scale)
    async with make_runtime(ex, time_scale=ts) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        async with anyio.create_task_group() as tg:
            first = start_prompt(tg, rt, eid, "one")
            await wait_until(live(s, 1))
            await anyio.sleep(10 * ts)
            tr.complete(1)
        assert first.result is not None
        await anyio.sleep(80 * ts)  # the first wait's tick finds nobody waiting: off
        async with anyio.create_task_group() as tg:
            second = start_prompt(tg, rt, eid, "two")
            await wait_until(live(s, 2))
            await until_stalled(rt, s)
            tr.complete(2)
        assert second.result is not None
        stalls = [e for e in published(s, le.AgentStalled) if e.prompt_generation == 2]
        assert len(stalls) == 1
        records = s.transitions("prompt_generation", 2)
        dispatched = next(r.time for r in records if r.event == "dispatch_accepted")
        stalled = next(r.time for r in records if r.event == "stall_detected")
        assert stalled - dispatched >= 300 * ts * (1 - 1e-9)
        if backend == "trio":
            assert stalled - dispatched == pytest.approx(300.0, abs=1e-6)


async def test_a_wait_the_caller_left_gets_no_more_ticks(
    time_scale: float, autojump_clock: object
) -> None:
    """The caller of a turn the agent never ends nor cancels leaves (its timeout); the next
    prompt, dispatch-only, supersedes that turn once its barrier gave up waiting. Minutes of
    quiet later, nothing ticks for the left turn (a superseded generation hears no stall
    fact) and the execution is unharmed."""
    ex = memory_agent(cancel_completes=False)
    async with make_runtime(ex, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt, ready=True)

        async def cancel() -> None:
            await anyio.sleep_forever()  # session/cancel is never answered

        ex.last.handlers["cancel"] = cancel
        with pytest.raises(PromptTimeout):
            await rt.prompt(ref.id, "hang", timeout=30 * time_scale)
        first = [r.event for r in s.transitions("prompt_generation", 1)]
        assert "dispatch_accepted" in first  # it was waited for
        result = await rt.prompt(ref.id, "next", dispatch_only=True)
        assert result.generation == 2
        assert s.turns.generations[1].machine.is_in("superseded")
        await anyio.sleep(600 * time_scale)
        assert s.ctx.crash is None
        assert not [r for r in s.transitions("prompt_generation", 1) if r.event == "stall_detected"]
        await rt.stop(ref.id, "done")


async def test_a_stall_tick_too_short_ticks_every_millisecond(
    time_scale: float, autojump_clock: object
) -> None:
    """A ``stall_tick`` of 1e-320 s (whose arithmetic overflows) ticks every millisecond: the
    stall is reported once, the ticks neither spin nor crash the execution."""
    ex = MemoryExecutor()
    tiny = {"stall_tick": 1e-320, "stall_threshold": 0.0}
    async with make_runtime(ex, time_scale=time_scale, timeouts=tiny) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        async with anyio.create_task_group() as tg:
            run = start_prompt(tg, rt, eid, "work")
            await wait_until(live(s))
            await anyio.sleep(0.05)
            assert len(published(s, le.AgentStalled)) == 1
            ticks = [
                r for r in s.transitions("prompt_generation", 1) if r.event == "stall_detected"
            ]
            assert 1 <= len(ticks) <= 60
            tr.complete(1)
        assert s.ctx.crash is None
        assert run.result is not None and run.result.stop_reason == "end_turn"


async def test_the_first_stall_tick_comes_one_tick_after_the_wait_starts(
    time_scale: float, autojump_clock: object, backend: str
) -> None:
    """With no quiet needed (a zero threshold) the stall is reported on the wait's first tick:
    one minute after the wait started, not at once."""
    ex = MemoryExecutor()
    ts = stall_scale(time_scale)
    async with make_runtime(ex, time_scale=ts, timeouts={"stall_threshold": 0.0}) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        async with anyio.create_task_group() as tg:
            run = start_prompt(tg, rt, eid, "work")
            await wait_until(live(s))
            with anyio.fail_after(120 * ts):  # (until_stalled's bound is the threshold's)
                while not published(s, le.AgentStalled):
                    await anyio.sleep(ts)
            tr.complete(1)
        assert run.result is not None
        records = s.transitions("prompt_generation", 1)
        dispatched = next(r.time for r in records if r.event == "dispatch_accepted")
        stalled = next(r.time for r in records if r.event == "stall_detected")
        assert stalled - dispatched >= 60 * ts * (1 - 1e-9)
        if backend == "trio":
            assert stalled - dispatched == pytest.approx(60.0, abs=1e-6)


@pytest.mark.parametrize("tick", [0.0, -60.0])
async def test_a_stall_tick_that_is_not_positive_turns_the_watchdog_off(
    time_scale: float, autojump_clock: object, tick: float
) -> None:
    """A ``stall_tick`` of zero or less: no tick at all (a zero tick would spin), so no stall
    is reported however long the agent stays silent, even with a zero threshold."""
    ex = MemoryExecutor()
    zero = {"stall_tick": tick, "stall_threshold": 0.0}
    async with make_runtime(ex, time_scale=time_scale, timeouts=zero) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        async with anyio.create_task_group() as tg:
            run = start_prompt(tg, rt, eid, "work")
            await wait_until(live(s))
            await settle()
            assert published(s, le.AgentStalled) == []
            await anyio.sleep(600 * time_scale)
            assert published(s, le.AgentStalled) == []
            tr.complete(1)
        assert run.result is not None and run.result.stop_reason == "end_turn"


async def test_s121_active_tool_tracking(time_scale: float, autojump_clock: object) -> None:
    """A top-level ``tool_call`` sets the active tool; a subagent ``tool_call`` (with a parent
    id) leaves it unchanged; a terminal ``tool_update`` of the top-level tool clears it. The
    stall payload reports the active top-level tool."""
    ex = MemoryExecutor()
    ts = stall_scale(time_scale)
    async with make_runtime(ex, time_scale=ts) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        async with anyio.create_task_group() as tg:
            run = start_prompt(tg, rt, eid, "work")
            await wait_until(live(s))
            tr.emit(ev.ToolCall(tool_call_id="top", tool_name="bash", tool_title="Run tests"))
            await settle()
            assert (s.ctx.activity.active_tool_id, s.ctx.activity.active_tool_title) == (
                "top",
                "Run tests",
            )
            tr.emit(
                ev.ToolCall(
                    tool_call_id="sub",
                    tool_name="grep",
                    tool_title="Sub",
                    parent_tool_call_id="top",
                )
            )
            await settle()
            assert s.ctx.activity.active_tool_id == "top"
            await until_stalled(rt, s)
            stall = published(s, le.AgentStalled)[0]
            assert (stall.active_tool_id, stall.active_tool_title) == ("top", "Run tests")
            assert stall.never_started is False
            tr.emit(ev.ToolUpdate(tool_call_id="sub", tool_status="completed"))
            await settle()
            assert s.ctx.activity.active_tool_id == "top"  # a subagent's end is not ours
            tr.emit(ev.ToolUpdate(tool_call_id="top", tool_status="completed"))
            await settle()
            assert (s.ctx.activity.active_tool_id, s.ctx.activity.active_tool_title) == ("", "")
            tr.complete(1)
        assert run.result is not None


@pytest.mark.parametrize(
    "event",
    [
        ev.AvailableCommands(available_commands=[{"name": "help"}]),
        ev.AgentCapabilities(supports_image=True),
        ev.SessionMode(current_mode_id="code"),
        ev.SessionModels(current_model_id="fast"),
        ev.ContextWindow(context_window_size=1000, context_window_used=10),
        *(
            ev.ToolUpdate(tool_call_id="late", tool_status=status)
            for status in ("complete", "completed", "success", "error", "failed", "cancelled")
        ),
    ],
    ids=lambda e: type(e).__name__ + (f"-{e.tool_status}" if isinstance(e, ev.ToolUpdate) else ""),
)
async def test_s122_no_spurious_ready_to_running(time_scale: float, event: ev.AgentEvent) -> None:
    """READY after boot: metadata events and a standalone terminal ``tool_update`` publish no
    ``agent.running`` and leave the status READY (R26). Turn content does flip it (a wakeup
    turn), which shows the check is live."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        tr.emit(event)
        await settle()
        await wait_until(lambda: any(e is event or e == event for e in s.hub._backlog))
        assert published(s, le.AgentRunning) == []
        assert rt.get_execution(eid).status == "READY"
        tr.emit(ev.MessageChunk(text="wakeup"))
        await wait_until(lambda: rt.get_execution(eid).status == "RUNNING")
        assert len(published(s, le.AgentRunning)) == 1


# ------------------------------------------------------------- cancel and escalation --


async def test_s124_hung_agent_escalates(
    time_scale: float, autojump_clock: object, backend: str
) -> None:
    """The agent acks the cancel but never completes: after the 10 s cancel wait the cancel
    escalates (2 s escalation bound): CancelEscalated; the blocked waiter receives
    ``cancel escalated…`` as an agent error; then, as kandev's escalateStuckCancel does, the
    execution is READY and ``agent.ready`` is published (after the waiter was released), so
    the user can prompt again although the hung agent still owes the turn. Its late end is
    ignored by generation: no second ``agent.ready``, the next prompt's turn is its own."""
    ex = memory_agent(cancel_completes=False)
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        readies: list[tuple[le.AgentReady, bool]] = []  # (event, waiter released yet?)
        publish = s.hub.publish

        def spy(event: Any) -> None:
            if isinstance(event, le.AgentReady):
                readies.append((event, run.done))
            publish(event)

        s.hub.publish = spy  # type: ignore[method-assign]
        async with anyio.create_task_group() as tg:
            run = start_prompt(tg, rt, eid, "long")
            await wait_until(live(s))
            start = anyio.current_time()
            with pytest.raises(CancelEscalated) as info:
                await rt.cancel(eid)
            elapsed = anyio.current_time() - start
        assert str(info.value) == "cancel escalated: agent did not acknowledge within timeout"
        assert elapsed >= 10 * time_scale
        if backend == "trio":
            assert elapsed < 10 + 2
        assert methods(tr, "cancel") == [("cancel", ())]
        assert isinstance(run.error, AgentReportedError) and isinstance(run.error, CancelEscalated)
        assert "cancel escalated: agent did not complete turn within timeout" in str(run.error)
        assert run.ended_at is not None and run.ended_at - start >= 10 * time_scale
        assert rt.get_execution(eid).status == "READY"
        assert len(readies) == 1
        ready, waiter_released = readies[0]
        assert ready.prompt_generation == 1
        assert waiter_released  # published after the waiter got its error (R11, R16)
        assert s.generations[1].leaf == "cancel_escalated"
        tr.complete(1, "cancelled")  # the agent ends the turn at last: ignored
        await settle()
        assert rt.get_execution(eid).status == "READY" and len(readies) == 1
        async with anyio.create_task_group() as tg:
            follow = start_prompt(tg, rt, eid, "next")
            await wait_until(live(s, 2))
            await settle()
            assert not follow.done  # the late end was not this turn's
            tr.complete(2)
        assert follow.result is not None and follow.result.generation == 2


async def test_s125_escalation_clears_the_dispatch_only_gate(
    time_scale: float, autojump_clock: object, backend: str
) -> None:
    """A dispatch-only prompt holds the barrier; the cancel escalates at once: CancelEscalated,
    the gate is released, and a follow-up dispatch-only prompt reaches the agent within
    500 ms (R19: the gate is cleared before anything is released)."""
    ex = memory_agent(cancel_completes=False)
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        first = await rt.prompt(eid, "background", dispatch_only=True)
        assert first.stop_reason == "dispatched"
        assert s.generations[1].state == "unawaited"
        with pytest.raises(CancelEscalated):
            await rt.cancel(eid)
        assert s.generations[1].state != "unawaited"
        assert s.generations[1].leaf == "cancel_escalated"  # READY; the agent may still owe it
        assert rt.get_execution(eid).status == "READY"
        start = anyio.current_time()
        # a gate still held would end this prompt with PendingDispatchedPromptTimeout
        second = await rt.prompt(eid, "next", dispatch_only=True)
        if backend == "trio":  # 500 ms of the virtual clock (asyncio's real one may be late)
            assert anyio.current_time() - start < 0.5
        assert second.generation == 2
        assert methods(tr, "prompt")[-1][1] == ("next", (), 2)


async def test_s127_disconnected_stream_with_a_waiting_prompt(
    time_scale: float, autojump_clock: object, backend: str
) -> None:
    """RUNNING with a waiting prompt and no stream (a silent drop, H9: nothing released the
    waiter): the cancel cannot reach the agent and escalates at once: CancelEscalated, and
    the waiter is released; the execution is READY again (kandev escalateStuckCancel), though
    the redialled carrier may still deliver the turn's end (ignored by generation)."""
    ex = MemoryExecutor(redialling(time_scale))
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        async with anyio.create_task_group() as tg:
            run = start_prompt(tg, rt, eid, "long")
            await wait_until(live(s))
            tr.drop(clean=True)
            await settle()
            assert rt.get_execution(eid).status == "RUNNING" and not run.done
            start = anyio.current_time()
            with pytest.raises(CancelEscalated):
                await rt.cancel(eid)
            if backend == "trio":
                assert anyio.current_time() - start < 10  # no cancel wait
        assert isinstance(run.error, CancelEscalated)
        assert s.generations[1].leaf == "cancel_escalated"
        assert rt.get_execution(eid).status == "READY"


async def test_s128_cleanup_survives_caller_cancellation(
    time_scale: float, autojump_clock: object, backend: str
) -> None:
    """The caller's deadline passes during the escalation's post-wait (the ≤ 2 s wait for the
    released prompt to return): the caller gets its own timeout (Go: ``context.
    DeadlineExceeded``, not ErrCancelEscalated), **but** the escalation still ends (the
    generation is ``cancel_escalated`` and the execution READY, as kandev's cleanup marks
    it), and nothing stale is left for the next prompt (R17). The prompt here is stuck in
    its trigger (the ack never comes): the cancel waits for it (≤ 10 s, so it never overtakes
    the prompt), goes out anyway, then waits for the turn (≤ 10 s) and escalates; the prompt
    cannot return during the post-wait; its late ack afterwards is ignored. The deadline is
    moved to "now" once the escalation is seen, so it lands inside the post-wait, while the
    lifecycle lock is held elsewhere (the cleanup waits for it, its caller's deadline past)."""
    ex = memory_agent(cancel_completes=False)
    async with make_runtime(ex, time_scale=time_scale) as rt:
        rt.timeouts = msgspec.structs.replace(rt.timeouts, cancel_escalation=2.0)
        eid, s, tr = await launch_ready(rt, ex)
        ack = anyio.Event()

        async def slow_ack(text: str, atts: tuple[Attachment, ...], g: int) -> None:
            if g == 1:
                await ack.wait()
            tr.running.append(g)

        tr.handlers["prompt"] = slow_ack
        outcome: list[str] = []
        async with anyio.create_task_group() as tg:
            run = start_prompt(tg, rt, eid, "stuck")
            await wait_until(lambda: bool(methods(tr, "prompt")))
            scopes: list[anyio.CancelScope] = []

            async def cancel_with_deadline() -> None:
                try:
                    with anyio.fail_after(3600) as scope:
                        scopes.append(scope)
                        await rt.cancel(eid)
                except TimeoutError:
                    outcome.append("deadline")
                except CancelEscalated:
                    outcome.append("escalated")

            start = anyio.current_time()
            tg.start_soon(cancel_with_deadline)
            with anyio.fail_after(60):  # coarse polls: the 10 s cancel wait is virtual on trio
                while s.generations[1].leaf != "escalating":
                    await anyio.sleep(0.05 * time_scale)
            if backend == "trio":
                assert anyio.current_time() - start >= 20  # after both 10 s waits
            assert rt.get_execution(eid).status == "RUNNING"  # mid post-wait
            async with s.ctx.lifecycle_lock:  # held: the cleanup waits for it, shielded
                scopes[0].deadline = anyio.current_time()  # the caller's deadline passes now
                await settle()
            await wait_until(lambda: bool(outcome))
            assert outcome == ["deadline"]
            assert s.generations[1].leaf == "cancel_escalated"
            assert rt.get_execution(eid).status == "READY"
            assert methods(tr, "cancel") == [("cancel", ())]
            ack.set()
            await wait_until(lambda: run.done)
        assert isinstance(run.error, CancelEscalated)
        assert s.generations[1].leaf == "cancel_escalated"
        async with anyio.create_task_group() as tg:
            follow = start_prompt(tg, rt, eid, "next")
            await wait_until(live(s, 2))
            await settle()
            assert not follow.done  # no stale outcome satisfies the next waiter
            tr.complete(2)
        assert follow.result is not None and follow.result.generation == 2


async def test_s130_async_ready_payload_is_immutable(
    time_scale: float, autojump_clock: object
) -> None:
    """The escalation's ``agent.ready`` (escalateStuckCancel's READY) is captured at
    generation 1; a new prompt begins generation 2 before a subscriber reads it: the
    delivered event still says generation 1. (Our events are frozen Structs, so a payload
    cannot change after publication; the status, READY, is implied by the event type.)"""
    ex = memory_agent(cancel_completes=False)
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        async with rt.subscribe_events(eid) as events:
            async with anyio.create_task_group() as tg:
                start_prompt(tg, rt, eid, "long")
                await wait_until(live(s))
                with pytest.raises(CancelEscalated):
                    await rt.cancel(eid)
                tr.complete(1, "cancelled")  # the escalated turn ends at last: ignored
                await wait_until(lambda: rt.get_execution(eid).status == "READY")
                follow = start_prompt(tg, rt, eid, "next")
                await wait_until(live(s, 2))
                readies: list[le.AgentReady] = []
                while not readies:
                    event = await events.__anext__()
                    if isinstance(event, le.AgentReady):
                        readies.append(event)
                tr.complete(2)
            assert readies[0].prompt_generation == 1
            with pytest.raises(AttributeError):
                readies[0].prompt_generation = 2  # type: ignore[misc]
            assert msgspec.to_builtins(readies[0])["prompt_generation"] == 1
        assert follow.result is not None and follow.result.generation == 2


async def test_s131_cancel_guard_errors(time_scale: float) -> None:
    """An unknown execution: ExecutionNotFound naming it, and nothing is sent to any agent.
    kandev's ``CancelAgentBySessionID`` on an unknown session maps to the same lookup: a task
    session id is not an execution id, so it is not found and nothing is sent. kandev's
    ``has no agentctl client`` has no Python state (a session owns its transport from launch
    to stop); its closest case, an execution whose agent connection is gone with no turn in
    flight, makes the cancel a quiet no-op (Go returns nil for a disconnected stream with no
    prompt barrier)."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex, metadata={"session_id": "task-session-1"})
        before = list(tr.calls)
        with pytest.raises(ExecutionNotFound, match='execution "missing"') as info:
            await rt.cancel("missing")
        assert info.value.execution_id == "missing"
        with pytest.raises(ExecutionNotFound):
            await rt.cancel("task-session-1")
        with pytest.raises(ExecutionIdRequired):
            await rt.cancel("")
        assert tr.calls == before
        tr.disconnect("gone")
        await wait_until(lambda: s.stream.machine.state == "disconnected")
        await rt.cancel(eid)  # no turn, no connection: nothing to cancel
        assert methods(tr, "cancel") == [("cancel", ())]


async def test_s133_not_acknowledged_escalates_at_once(
    time_scale: float, autojump_clock: object, backend: str
) -> None:
    """``agent.cancel`` answers ``not_acknowledged``: with a prompt in flight the cancel
    escalates without waiting the 10 s cancel wait."""
    ex = memory_agent(cancel_completes=False)
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        tr.handlers["cancel"] = lambda: CancelResult(acknowledged=False)
        async with anyio.create_task_group() as tg:
            run = start_prompt(tg, rt, eid, "long")
            await wait_until(live(s))
            start = anyio.current_time()
            with pytest.raises(CancelEscalated):
                await rt.cancel(eid)
            if backend == "trio":
                assert anyio.current_time() - start < 10
        assert isinstance(run.error, CancelEscalated)
        assert rt.get_execution(eid).status == "READY"


async def test_s133_other_cancel_errors_fail_the_cancel(time_scale: float) -> None:
    """Any other cancel error: ``failed to cancel agent: …`` (CancelFailed); nothing is
    escalated and the turn goes on."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)

        def refuse() -> CancelResult:
            raise AgentRequestError(-32603, "cannot cancel now", method="session/cancel")

        tr.handlers["cancel"] = refuse
        async with anyio.create_task_group() as tg:
            run = start_prompt(tg, rt, eid, "long")
            await wait_until(live(s))
            with pytest.raises(CancelFailed, match=r"^failed to cancel agent: .*cannot cancel now"):
                await rt.cancel(eid)
            assert s.generations[1].machine.is_in("dispatched")
            assert rt.get_execution(eid).status == "RUNNING"
            tr.complete(1)
        assert run.result is not None and run.result.stop_reason == "end_turn"


async def test_s134_turn_is_held_until_completion(time_scale: float) -> None:
    """kandev's activity lease (maintenance fails with ErrBusy until the waiting prompt
    completes) has no coordinator here; its observable meaning is that the execution stays
    busy until the turn's completion: a dispatched waiting prompt keeps the execution
    RUNNING and holds the prompt lock, so a second ordinary prompt begins nothing and sends
    nothing until the first completes, then proceeds."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        async with anyio.create_task_group() as tg:
            first = start_prompt(tg, rt, eid, "first")
            await wait_until(live(s))
            second = start_prompt(tg, rt, eid, "second")
            await settle()
            assert rt.get_execution(eid).status == "RUNNING"
            assert s.turns._next == 1 and len(methods(tr, "prompt")) == 1
            assert not second.done
            tr.complete(1)
            await wait_until(live(s, 2))
            assert first.result is not None and first.result.generation == 1
            tr.complete(2)
        assert second.result is not None and second.result.generation == 2
        assert rt.get_execution(eid).status == "READY"


# --------------------------------------------------------- readiness, recovery, stop --


async def test_s136_stream_recovery_revives_failed(time_scale: float) -> None:
    """A FAILED, initialized execution whose (reconnectable) stream is back and whose agent is
    running: recovery makes it READY and publishes ``agent.boot_ready``; the AgentStream chart
    follows the redial. With the agent gone it raises ``agent process is not running…``,
    stays FAILED and publishes no boot_ready. Before ACP init it is a no-op (R34). An unknown
    execution gives ExecutionNotFound. (kandev's passthrough PTY executions have no
    counterpart.)"""
    ex = MemoryExecutor(redialling(time_scale))
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex)
        tr.drop("websocket: close 1006 (abnormal closure)")
        await wait_until(lambda: rt.get_execution(eid).status == "FAILED")
        assert published(s, le.AgentctlError)
        assert s.stream.machine.state == "announced"  # a WebSocket-like carrier is redialled
        boots = len(published(s, le.AgentBootReady))
        with pytest.raises(TransportClosed, match="agent process is not running"):
            await rt.recover_stream(eid)  # the carrier has not come back yet
        assert rt.get_execution(eid).status == "FAILED"
        assert len(published(s, le.AgentBootReady)) == boots
        tr.restore()
        await wait_until(lambda: s.stream.carrier() is True)  # the chart's next dial
        await rt.recover_stream(eid)
        assert rt.get_execution(eid).status == "READY"
        assert len(published(s, le.AgentBootReady)) == boots + 1
        assert stream_path(s)[-2:] == ["announced", "connected"]
        assert len(published(s, ev.StreamReconnected)) == 1  # the announced loss's redial
        await rt.recover_stream(eid)  # not FAILED: nothing to do
        assert len(published(s, le.AgentBootReady)) == boots + 1
        tr.auto_complete = True
        assert (await rt.prompt(eid, "after recovery")).stop_reason == "end_turn"

        with pytest.raises(ExecutionNotFound):
            await rt.recover_stream("missing")

    # an agent process that exited cannot be revived
    ex2 = MemoryExecutor()
    async with make_runtime(ex2, time_scale=time_scale) as rt:
        eid, s, tr = await launch_ready(rt, ex2)
        boots = len(published(s, le.AgentBootReady))
        tr.disconnect("peer disconnected", exit_code=1)
        await wait_until(lambda: rt.get_execution(eid).status == "FAILED")
        with pytest.raises(TransportClosed, match="agent process is not running"):
            await rt.recover_stream(eid)
        assert rt.get_execution(eid).status == "FAILED"
        assert len(published(s, le.AgentBootReady)) == boots

    # before ACP init: a no-op
    gate = anyio.Event()

    async def slow_initialize() -> InitializeResult:
        await gate.wait()
        return InitializeResult(protocol_version=1, load_session=True, prompt_queueing=True)

    ex3 = memory_agent(lambda t: t.handlers.update(initialize=slow_initialize), reconnectable=True)
    async with make_runtime(ex3, time_scale=time_scale) as rt:
        ref, s = await launch_session(rt)
        await wait_until(lambda: bool(methods(ex3.last, "initialize")))
        status = rt.get_execution(ref.id).status
        await rt.recover_stream(ref.id)
        assert rt.get_execution(ref.id).status == status == "STARTING"
        assert published(s, le.AgentBootReady) == []
        gate.set()
        await wait_until(lambda: s.execution.status == "READY")


async def test_s137_stop_on_an_unknown_execution(time_scale: float) -> None:
    """StopAgentWithReason(…, force=true) on an unknown execution: ExecutionNotFound; a known
    one stops (STOPPED, ``agent.stopped`` with the reason) and is then unknown too."""
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        with pytest.raises(ExecutionNotFound):
            await rt.stop("missing", "user_cancelled", force=True)
        eid, s, tr = await launch_ready(rt, ex)
        final = await rt.stop(eid, "user_cancelled", force=True)
        assert final.status == "STOPPED"
        assert final.finished_at is not None
        assert published(s, le.AgentStopped)[-1].reason == "user_cancelled"
        assert ("aclose", ()) in tr.calls
        with pytest.raises(ExecutionNotFound):
            await rt.stop(eid, "again", force=True)
