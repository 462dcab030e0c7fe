"""The transport's small pieces: :class:`Flag` (a one-shot event that allocates only when
waited on), :class:`Wakeup` and :class:`Mutex`, :class:`PermissionPrompts` asking and
withdrawing, and the refusing option."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel
import pytest

from acpfsm.adapters.events import PermissionOption, PermissionRequest
from acpfsm.adapters.sync import EventQueue, Flag, Mutex, Wakeup
from acpfsm.adapters.transport import PermissionPrompts, reject_option

pytestmark = pytest.mark.both_backends


async def test_a_flag_wakes_every_waiter_and_stays_set() -> None:
    flag = Flag()
    woken: list[int] = []

    async def waiter(n: int) -> None:
        await flag.wait()
        woken.append(n)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for n in range(3):
                tg.start_soon(waiter, n)
            await anyio.wait_all_tasks_blocked()
            assert not flag.is_set() and woken == []
            flag.set()
            flag.set()  # idempotent
        assert sorted(woken) == [0, 1, 2] and flag.is_set()
        await flag.wait()  # already set: returns at once


async def test_waiting_on_a_set_flag_is_still_a_checkpoint() -> None:
    flag = Flag()
    flag.set()
    with anyio.CancelScope() as scope:
        scope.cancel()
        await flag.wait()
        pytest.fail("a cancelled wait on a set flag returned")
    assert scope.cancelled_caught


async def test_withdrawing_waits_until_each_policy_has_returned() -> None:
    """What a policy does when withdrawn (its ``finally``) is done before
    ``withdraw_all_and_wait`` returns, even if it takes turns of the loop."""
    done: list[str] = []

    async def policy(request: PermissionRequest) -> str | None:
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                for _ in range(5):
                    await anyio.lowlevel.checkpoint()
            done.append(request.request_id)
        return None

    prompts = PermissionPrompts(policy)
    answers: list[tuple[str | None, bool]] = []

    async def ask(rid: str) -> None:
        answers.append(await prompts.ask(PermissionRequest(request_id=rid)))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, "a")
            tg.start_soon(ask, "b")
            await anyio.wait_all_tasks_blocked()
            await prompts.withdraw_all_and_wait()
            assert sorted(done) == ["a", "b"]
        assert answers == [(None, True), (None, True)]
        await prompts.withdraw_all_and_wait()  # nothing asked: returns at once


def test_reject_option_takes_only_a_refusing_kind_whatever_else_the_agent_lists() -> None:
    """An agent's own option kinds (any string) are never taken for a refusal."""
    options = [
        PermissionOption(option_id="own", name="Sure", kind="yes_please"),
        PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
        PermissionOption(option_id="never", name="Never", kind="reject_always"),
    ]
    assert reject_option(options) == "never"
    assert reject_option(options[:2]) is None


async def test_an_answered_question_is_not_withdrawn_and_one_can_be_withdrawn_alone() -> None:
    async def policy(request: PermissionRequest) -> str | None:
        if request.request_id == "quick":
            return "ok"
        await anyio.sleep_forever()
        return None  # pragma: no cover

    prompts = PermissionPrompts(policy)
    assert await prompts.ask(PermissionRequest(request_id="quick")) == ("ok", False)
    answers: dict[str, tuple[str | None, bool]] = {}

    async def ask(rid: str) -> None:
        answers[rid] = await prompts.ask(PermissionRequest(request_id=rid))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, "a")
            tg.start_soon(ask, "b")
            await anyio.wait_all_tasks_blocked()
            prompts.withdraw("a")
            prompts.withdraw("unknown")  # nothing asked under that id: nothing happens
            await anyio.wait_all_tasks_blocked()
            assert answers == {"a": (None, True)}
            prompts.withdraw("b")
    assert answers == {"a": (None, True), "b": (None, True)}


async def test_a_reused_id_neither_hides_nor_ends_the_first_question() -> None:
    """An agent asking twice under one id: the second answered at once leaves the first
    open, and a withdrawal by that id (an equal string, decoded apart: not the same object)
    still reaches it; ``withdraw_all_and_wait`` waits for it too."""

    async def policy(request: PermissionRequest) -> str | None:
        if request.tool_call_id == "second":
            return "no"
        await anyio.sleep_forever()
        return None  # pragma: no cover

    prompts = PermissionPrompts(policy)
    n = 7
    rid = f"req-{n}"
    answers: list[tuple[str | None, bool]] = []

    async def ask_first() -> None:
        answers.append(await prompts.ask(PermissionRequest(request_id=rid)))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask_first)
            await anyio.wait_all_tasks_blocked()
            second = PermissionRequest(request_id=f"req-{n}", tool_call_id="second")
            assert await prompts.ask(second) == ("no", False)
            await anyio.wait_all_tasks_blocked()
            assert answers == []  # the first is still open
            same_id = f"req-{n}"
            assert same_id == rid and same_id is not rid
            prompts.withdraw(same_id)
        assert answers == [(None, True)]
        tg_answers: list[tuple[str | None, bool]] = []

        async def ask(tool: str) -> None:
            tg_answers.append(
                await prompts.ask(PermissionRequest(request_id=rid, tool_call_id=tool))
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, "a")
            tg.start_soon(ask, "b")
            await anyio.wait_all_tasks_blocked()
            await prompts.withdraw_all_and_wait()  # both, though they share an id
            assert tg_answers == [(None, True), (None, True)]


async def test_a_wakeup_wakes_only_who_waits_then() -> None:
    """A wake with nobody waiting is not kept for a later wait (unlike a :class:`Flag`)."""
    wakeup = Wakeup()
    wakeup.wake()
    woken: list[int] = []

    async def waiter() -> None:
        await wakeup.wait()
        woken.append(1)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            tg.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            assert woken == []
            wakeup.wake()
    assert woken == [1, 1]


async def test_a_wait_on_a_flag_or_a_wakeup_ends_with_its_cancel_scope_and_leaves_it_usable() -> (
    None
):
    """They wait on the backend's own event (what anyio's wraps): anyio's cancel scopes end
    the wait on either backend, and a later waiter is still woken."""
    flag, wakeup = Flag(), Wakeup()
    for wait in (flag.wait, wakeup.wait):
        with anyio.move_on_after(0.01) as scope:
            await wait()
        assert scope.cancelled_caught
    woken: list[str] = []

    async def waiter(name: str, wait: Callable[[], Awaitable[None]]) -> None:
        await wait()
        woken.append(name)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter, "flag", flag.wait)
            tg.start_soon(waiter, "wakeup", wakeup.wait)
            await anyio.wait_all_tasks_blocked()
            assert woken == []
            flag.set()
            wakeup.wake()
    assert sorted(woken) == ["flag", "wakeup"]


async def test_a_free_mutex_is_taken_with_no_scheduler_pass() -> None:
    mutex = Mutex()
    ran: list[str] = []

    async def other() -> None:
        ran.append("other")

    async with anyio.create_task_group() as tg:
        tg.start_soon(other)
        async with mutex:
            assert mutex.locked() and ran == []
        assert not mutex.locked() and ran == []


async def test_a_taken_mutex_goes_to_its_waiters_first_come_first_served() -> None:
    mutex = Mutex()
    held: list[str] = []

    async def take(name: str) -> None:
        async with mutex:
            held.append(name)
            await anyio.lowlevel.checkpoint()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            async with mutex:
                for name in ("b", "c", "d"):
                    tg.start_soon(take, name)
                    await anyio.wait_all_tasks_blocked()  # queued in this order
                held.append("a")
            assert mutex.locked()  # handed over, never free in between
    assert held == ["a", "b", "c", "d"]
    assert not mutex.locked()


async def test_a_waiter_cancelled_before_its_turn_leaves_the_queue() -> None:
    mutex = Mutex()
    held: list[str] = []
    leaving = anyio.CancelScope()

    async def take(name: str) -> None:
        with leaving if name == "b" else anyio.CancelScope():
            async with mutex:
                held.append(name)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg, mutex:
            for name in ("b", "c"):
                tg.start_soon(take, name)
                await anyio.wait_all_tasks_blocked()
            leaving.cancel()
            await anyio.wait_all_tasks_blocked()
    assert held == ["c"]
    assert not mutex.locked()


def test_a_waiter_cancelled_as_it_is_handed_the_mutex_hands_it_on() -> None:
    """asyncio's own ``Task.cancel`` can land after the release woke the waiter and before
    it ran (anyio's scopes wait for such a task to run first): the waiter's wait raises,
    and it passes the mutex to the next one instead of keeping it."""

    async def main() -> list[str]:
        mutex = Mutex()
        held: list[str] = []

        async def take(name: str) -> None:
            async with mutex:
                held.append(name)

        async with mutex:
            first = asyncio.ensure_future(take("b"))
            second = asyncio.ensure_future(take("c"))
            for _ in range(3):
                await asyncio.sleep(0)  # both queued
        first.cancel()  # b was handed it by the release just now
        await asyncio.wait_for(second, 5)
        assert first.cancelled() and not mutex.locked()
        return held

    assert asyncio.run(main()) == ["c"]


async def test_taking_a_mutex_checks_cancellation_unless_told_not_to() -> None:
    checked, unchecked = Mutex(), Mutex(check_cancelled=False)
    with anyio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(anyio.get_cancelled_exc_class()):
            async with checked:
                pass
        assert not checked.locked()
        async with unchecked:
            assert unchecked.locked()
        assert not unchecked.locked()
        await anyio.lowlevel.checkpoint()  # the caller meets its cancellation here
    assert scope.cancelled_caught


@pytest.mark.parametrize("first", ["trio", "asyncio"])
def test_a_wakeup_serves_each_event_loop_it_is_used_in(first: str) -> None:
    """A wait arms an event of the backend running it then: the same Wakeup still works in
    a later run of the other backend (an idle one allocates nothing to carry over)."""
    wakeup = Wakeup()

    async def wait_and_wake() -> None:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(wakeup.wait)
                await anyio.wait_all_tasks_blocked()
                wakeup.wake()

    second = "asyncio" if first == "trio" else "trio"
    for backend in (first, second, first):
        anyio.run(wait_and_wake, backend=backend)


async def test_an_event_queue_hands_out_what_is_queued_without_waiting_a_batch_at_a_time() -> None:
    """``take`` gives the items already queued with no await (the event pump takes a burst of
    chunks this way), ``None`` when there is none, and ``None`` again once ``batch`` items
    were taken since the consumer last went through ``__anext__``, which yields: a burst is
    still shared with the other tasks once per batch."""
    queue: EventQueue[int] = EventQueue(batch=3)
    assert queue.take() is None
    for i in range(8):
        queue.put(i)
    assert [queue.take(), queue.take(), queue.take()] == [0, 1, 2]
    assert queue.take() is None  # a batch taken: the next one comes through __anext__
    with anyio.CancelScope() as scope:  # __anext__ yields first: a cancellation point
        scope.cancel()
        await queue.__anext__()
    assert scope.cancelled_caught
    assert await queue.__anext__() == 3  # nothing was lost to the cancellation
    assert [queue.take(), queue.take()] == [4, 5]
    assert queue.take() is None
    assert await queue.__anext__() == 6
    assert queue.take() == 7
    assert queue.take() is None  # empty
    queue.close()
    assert [item async for item in queue] == []


async def test_a_producer_waits_for_room_until_the_consumer_drains_or_the_bound() -> None:
    """``wait_for_room``: True once the consumer has taken the queue down to ``low`` (by
    ``take`` or by iterating) or the queue closes; False when the bound passes first."""
    queue: EventQueue[int] = EventQueue(batch=1000)
    for i in range(10):
        queue.put(i)
    assert await queue.wait_for_room(10, 1.0)  # already there: no wait
    got: list[bool] = []
    async with anyio.create_task_group() as tg:

        async def produce() -> None:
            got.append(await queue.wait_for_room(5, 10.0))

        tg.start_soon(produce)
        await anyio.wait_all_tasks_blocked()
        assert got == []
        taken = [queue.take() for _ in range(4)]
        await anyio.wait_all_tasks_blocked()
        assert got == []  # 6 left: not yet
        taken.append(await queue.__anext__())
    assert got == [True] and taken == [0, 1, 2, 3, 4]
    with anyio.fail_after(5):
        assert not await queue.wait_for_room(0, 0.05)  # nobody consumes: the bound
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: _append(got, queue.wait_for_room(0, 10.0)))
        await anyio.wait_all_tasks_blocked()
        queue.close()
    assert got == [True, True]


async def _append(into: list[bool], waited: Awaitable[bool]) -> None:
    into.append(await waited)
