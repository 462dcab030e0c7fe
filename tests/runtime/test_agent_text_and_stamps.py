"""What an agent's events count for, whatever they carry (the agent is untrusted): a message
chunk is the agent's reply text unless it is the user's (``role: "user"``, a replayed user
chunk), whatever other role a carrier hands over; a terminal event stamped with a generation
that never was (below zero) ends nothing, not even a wakeup turn (only generation 0 is the
unstamped path, kandev ``handleCompleteEvent``). Through the facade over the memory
transport."""

from __future__ import annotations

import anyio
import pytest

from acpfsm.adapters.events import Complete, MessageChunk
from acpfsm.runtime import Runtime
from acpfsm.testing.memory import MemoryExecutor

from .memory_runtime import make_runtime, spec

pytestmark = pytest.mark.both_backends


async def ready(rt: Runtime) -> str:
    ref = await rt.launch(spec())
    await rt.wait_ready(ref.id)
    return ref.id


async def status_becomes(rt: Runtime, execution_id: str, status: str) -> None:
    with anyio.fail_after(30):
        while rt.get_execution(execution_id).status != status:
            await anyio.sleep(0.001)


async def test_every_chunk_but_the_users_is_reply_text(time_scale: float) -> None:
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid = await ready(rt)
        dispatched = anyio.Event()
        results = []
        async with anyio.create_task_group() as tg:

            async def prompt() -> None:
                results.append(await rt.prompt(eid, "go", on_dispatched=dispatched.set))

            tg.start_soon(prompt)
            await dispatched.wait()
            for role, text in (
                ("zzz", "0"),  # the first content: the charts hear of it (one at a time)
                ("assistant", "a"),  # then the batched path
                ("user", "[the user's]"),
                ("system", "b"),
                ("zzz", "c"),
                ("", "d"),
            ):
                ex.last.emit(MessageChunk(prompt_generation=1, role=role, text=text))
            ex.last.complete(1)
        assert results[0].agent_message == "0abcd"
        await rt.stop(eid, "done")


async def test_a_completion_stamped_below_zero_does_not_end_a_wakeup_turn(
    time_scale: float,
) -> None:
    ex = MemoryExecutor()
    async with make_runtime(ex, time_scale=time_scale) as rt:
        eid = await ready(rt)
        ex.last.emit(MessageChunk(text="woke up"))  # content while READY: a wakeup turn
        await status_becomes(rt, eid, "RUNNING")
        ex.last.emit(Complete(prompt_generation=-1))  # nobody's
        await anyio.sleep(0.05 * time_scale)
        assert rt.get_execution(eid).status == "RUNNING"
        ex.last.emit(Complete())  # its own end: the unstamped path
        await status_becomes(rt, eid, "READY")
        await rt.stop(eid, "done")
