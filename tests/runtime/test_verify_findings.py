"""What ``acpfsm verify`` found in the runtime, one test each, through the in-memory agent.

Each test names the property whose counterexample showed the race, and fails on the code
before the fix.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from acpfsm.adapters.errors import StreamNotConnected
from acpfsm.adapters.memory import MemoryTransport
from acpfsm.adapters.transport import Attachment
from acpfsm.runtime import (
    CancelEscalated,
    ExecutionRef,
    NotReadyForPrompts,
    PromptDispatchError,
    Runtime,
)
from acpfsm.runtime import events as le
from acpfsm.runtime.session import ExecutionSession

from .memory_runtime import (
    MemoryExecutor,
    launch_session,
    make_runtime,
    memory_agent,
    settle,
    wait_until,
)
from .prompt_helpers import of_type, sent, start

pytestmark = pytest.mark.both_backends

ATTACHMENT = Attachment(name="a.txt", mime_type="text/plain", data=b"x")


@asynccontextmanager
async def ready(
    ex: MemoryExecutor, time_scale: float, **unscaled: float
) -> AsyncIterator[tuple[Runtime, ExecutionRef, ExecutionSession]]:
    """A runtime with one execution, READY (the ``unscaled`` timeouts as given)."""
    async with make_runtime(ex, time_scale=time_scale, timeouts=unscaled) as rt:
        ref, s = await launch_session(rt, ready=True)
        yield rt, ref, s


def gate(agent: MemoryTransport, method: str) -> anyio.Event:
    """``method`` blocks until the returned event is set."""
    release = anyio.Event()

    async def blocked(*args: Any) -> Any:
        await release.wait()
        return args[0] if method == "materialize" else None

    agent.handlers[method] = blocked
    return release


async def test_a_prompt_queued_behind_a_stop_is_refused_not_crashed(time_scale: float) -> None:
    """nothing_dispatched_after_stop (R24): a prompt that got the prompt lock after the
    execution was stopped is refused with NotReadyForPrompts (it asked the ended Execution
    chart before: an IllegalTransition that crashed the execution)."""
    ex = MemoryExecutor()
    async with ready(ex, time_scale) as (rt, ref, s):
        async with anyio.create_task_group() as tg:
            first = start(tg, s.prompt, "one")
            await wait_until(lambda: s.current is not None and s.current.leaf == "awaited")
            second = start(tg, s.prompt, "two")  # waits for the prompt lock
            await settle()
            await rt.stop(ref.id, "done")
            await first.wait()
            await second.wait()
        assert isinstance(second.error, NotReadyForPrompts), second.error
        assert s.ctx.crash is None
        assert [args[2] for args in sent(ex.last, "prompt")] == [1]


async def test_an_admission_after_a_stop_is_refused(time_scale: float) -> None:
    """nothing_dispatched_after_stop (R24): BeginPrompt re-checks the execution under the
    lifecycle lock; a stop that came between the status check and the admission refuses the
    prompt (before, ``prompt_began`` was fired on the ended Execution chart)."""
    ex = MemoryExecutor()
    async with ready(ex, time_scale) as (rt, ref, s):
        async with anyio.create_task_group() as tg:
            async with s.ctx.lifecycle_lock:
                p = start(tg, s.prompt, "late")
                await settle()  # validated, waiting for the lock to be admitted
                await s.status.fire("stop_requested", reason="done", error="stopped")
            await p.wait()
        assert isinstance(p.error, NotReadyForPrompts), p.error
        assert s.generations == {} and s.ctx.crash is None
        await rt.stop(ref.id, "done")


async def test_a_stop_withdraws_a_prompt_not_yet_sent(time_scale: float) -> None:
    """nothing_dispatched_after_stop: a prompt admitted but not yet sent when the execution
    is stopped is withdrawn (a cancelled result) and never reaches the agent; before, it was
    sent after the stop."""
    ex = MemoryExecutor()
    async with ready(ex, time_scale) as (rt, ref, s):
        agent = ex.last
        release = gate(agent, "materialize")
        async with anyio.create_task_group() as tg:
            p = start(tg, s.prompt, "with a file", attachments=[ATTACHMENT])
            await wait_until(lambda: s.current is not None and s.current.leaf == "admitted")
            await rt.stop(ref.id, "done")
            assert s.generations[1].leaf == "withdrawn"
            release.set()
            await p.wait()
        assert p.error is None and p.prompt_result.stop_reason == "cancelled"
        assert sent(agent, "prompt") == []


async def test_a_dispatch_only_prompt_withdrawn_before_it_was_sent_says_cancelled(
    time_scale: float,
) -> None:
    """The same with ``dispatch_only``: the caller is told ``cancelled``, not ``dispatched``,
    and its ``on_dispatched`` is never called (nothing was sent)."""
    ex = MemoryExecutor()
    async with ready(ex, time_scale) as (rt, ref, s):
        agent = ex.last
        release = gate(agent, "materialize")
        dispatched: list[bool] = []
        async with anyio.create_task_group() as tg:
            p = start(
                tg,
                s.prompt,
                "with a file",
                attachments=[ATTACHMENT],
                dispatch_only=True,
                on_dispatched=lambda: dispatched.append(True),
            )
            await wait_until(lambda: s.current is not None and s.current.leaf == "admitted")
            await rt.stop(ref.id, "done")
            release.set()
            await p.wait()
        assert p.error is None and p.prompt_result.stop_reason == "cancelled"
        assert dispatched == [] and sent(agent, "prompt") == []


async def test_a_turn_sent_while_ready_makes_the_execution_running(time_scale: float) -> None:
    """never_ready_under_a_live_turn: the agent ends an unrelated turn (generation 0) between
    a prompt's admission and its dispatch, so the execution reads READY; once the prompt is
    dispatched it is RUNNING again (before, it stayed READY under the live turn)."""
    ex = MemoryExecutor()
    async with ready(ex, time_scale) as (rt, ref, s):
        agent = ex.last
        release = gate(agent, "materialize")
        async with anyio.create_task_group() as tg:
            p = start(tg, rt.prompt, ref.id, "task", attachments=[ATTACHMENT])
            await wait_until(lambda: s.current is not None and s.current.leaf == "admitted")
            agent.complete(0)  # a wakeup turn's end: nobody's prompt claims it
            await wait_until(lambda: s.execution.status == "READY")
            running = len(of_type(s, le.AgentRunning))
            release.set()
            await wait_until(lambda: s.current is not None and s.current.leaf == "awaited")
            assert s.execution.status == "RUNNING"
            assert len(of_type(s, le.AgentRunning)) == running + 1
            agent.complete(1)
            await p.wait()
        assert p.error is None and p.prompt_result.generation == 1
        await rt.stop(ref.id, "done")


async def test_a_cancel_during_a_resend_waits_for_its_answer(time_scale: float) -> None:
    """A cancel that finds the prompt being sent again (the first send found the socket
    down) waits for that send's answer, then cancels the turn at the agent (before, the
    first send's stale signal made it return at once, sending nothing)."""
    ex = memory_agent(reconnectable=True)
    # neither the resend's window nor the cancel's wait for the send's answer may run out
    # while the test holds the resend: under asyncio, scaled, a slow scheduler crossed them
    whole = {"reconnect_retry": 5.0, "cancel_wait": 10.0}
    async with ready(ex, time_scale, **whole) as (rt, ref, s):
        agent = ex.last
        release = anyio.Event()
        attempts: list[int] = []

        async def prompt(text: str, attachments: Any, generation: int) -> None:
            attempts.append(generation)
            if len(attempts) == 1:
                raise StreamNotConnected()  # not written: sent again once connected
            await release.wait()
            agent.running.append(generation)

        agent.handlers["prompt"] = prompt
        async with anyio.create_task_group() as tg:
            p = start(tg, rt.prompt, ref.id, "again")
            await wait_until(lambda: attempts == [1, 1])  # the resend is in flight
            assert s.current is not None and s.current.leaf == "sending"
            c = start(tg, rt.cancel, ref.id)
            await settle()
            assert not c.done.is_set() and sent(agent, "cancel") == []
            release.set()
            await wait_until(lambda: sent(agent, "cancel") == [()])
            await c.wait()
            await p.wait()
        await rt.stop(ref.id, "done")


async def test_a_send_that_fails_after_its_cancel_escalated_tells_the_escalation(
    time_scale: float, autojump_clock: object
) -> None:
    """The first send of a prompt hangs; a cancel waits for its answer, then cancels the
    turn and escalates; the send then fails with the stream down. The escalation already
    released the waiter: the caller is told the cancel escalation, not a dispatch error
    (retryPromptAfterReconnect gives up a turn the cancel already ended)."""
    ex = memory_agent(reconnectable=True)
    async with ready(ex, time_scale) as (rt, ref, s):
        agent = ex.last
        release = anyio.Event()

        async def prompt(text: str, attachments: Any, generation: int) -> None:
            await release.wait()
            raise StreamNotConnected()

        agent.handlers["prompt"] = prompt
        async with anyio.create_task_group() as tg:
            p = start(tg, rt.prompt, ref.id, "hangs")
            await wait_until(lambda: s.current is not None and s.current.leaf == "sending")
            c = start(tg, rt.cancel, ref.id)
            await wait_until(lambda: s.current is not None and s.current.leaf == "escalating")
            release.set()
            await c.wait()
            await p.wait()
        assert isinstance(p.error, CancelEscalated), p.error
        assert not isinstance(p.error, PromptDispatchError)
        assert s.generations[1].leaf == "cancel_escalated"
        await rt.stop(ref.id, "done")
