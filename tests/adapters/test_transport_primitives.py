"""The transport's small synchronization pieces: :class:`Flag` (a one-shot event that
allocates only when waited on) and :class:`PermissionPrompts` withdrawing its questions."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from acpfsm.adapters.events import PermissionRequest
from acpfsm.adapters.transport import Flag, PermissionPrompts

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
