"""Durable executions over the in-memory executor, on both stores (SQLite, PostgreSQL) and both
backends: what a restart of the app keeps, recovers, reports lost, relaunches; the event log
continued by sequence number; the rows the charts write."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from acpfsm.adapters.events import Complete, MessageChunk
from acpfsm.adapters.executor import Probe
from acpfsm.runtime import ExecutionLost, Runtime, Unsupported
from acpfsm.runtime import events as le
from acpfsm.runtime.durable import GENERATION_BLOCK
from acpfsm.runtime.recovery import INTERRUPTED
from acpfsm.runtime.store import ExecutionStore, StoreBatch, StoredEvent, StoredExecution
from acpfsm.statecharts.names import StartupRecoveryEvent
from acpfsm.testing.memory import MemoryExecutor

from .durable_helpers import StoreFactory, kinds, read_log, store_factory, stored, write_rows
from .memory_runtime import make_runtime, memory_agent, spec, wait_until

pytestmark = pytest.mark.both_backends


@pytest.fixture(params=["sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    return store_factory(request.param, tmp_path, request)


def _rt(ex: MemoryExecutor, make: StoreFactory, **kw: object) -> Runtime:
    return make_runtime(ex, store=make(), **kw)  # type: ignore[arg-type]


async def test_a_restart_reattaches_and_the_log_goes_on(make_store: StoreFactory) -> None:
    ex = memory_agent(auto_complete=True)
    async with _rt(ex, make_store) as rt:
        ref = await rt.launch(spec())
        first = await rt.prompt(ref.id, "hello")
        before = await read_log(rt, ref.id, until=le.AgentReady)
        assert rt.store_health is not None and rt.store_health.ok
    assert [i.seq for i in before] == list(range(1, len(before) + 1))
    assert ex.survivors == {ref.id}  # detached, not stopped
    async with _rt(ex, make_store) as rt:
        snapshot = rt.get_execution(ref.id)
        assert (snapshot.status, snapshot.acp_session_id) == ("READY", ex.transports[0].session_id)
        after = await read_log(rt, ref.id, after=before[-1].seq, until=le.AgentBootReady)
        assert kinds(after) == ["AgentRecovered", "AgentBootReady"]
        assert after[0].seq == before[-1].seq + 1  # no gap, no double
        result = await rt.prompt(ref.id, "again")
        assert result.generation == first.generation + GENERATION_BLOCK
        assert ex.last.calls[0][0] != "initialize"  # nothing initialized or created again
        assert not [c for c in ex.last.calls if c[0] in ("initialize", "session/new")]
        whole = await read_log(rt, ref.id, upto=after[-1].seq + 6)  # running … ready
    assert [i.seq for i in whole] == list(range(1, len(whole) + 1))
    assert kinds(whole)[-2:] == ["PromptCompleted", "AgentReady"]
    assert [i.event for i in whole[: len(before)]] == [i.event for i in before]


async def test_a_turn_in_flight_is_interrupted_and_its_late_end_ignored(
    make_store: StoreFactory,
) -> None:
    ex = memory_agent()
    row = stored(status="RUNNING", prompt_generation=3, generation_reserved=GENERATION_BLOCK)
    await write_rows(make_store, row)
    ex.survivors.add(row.id)
    async with _rt(ex, make_store) as rt:
        log = await read_log(rt, row.id, until=le.AgentBootReady)
        assert kinds(log) == ["PromptInterrupted", "AgentRecovered", "AgentBootReady"]
        assert log[0].event == le.PromptInterrupted(
            execution_id=row.id, prompt_generation=3, reason=INTERRUPTED
        )
        transport = ex.last
        transport.emit(Complete(prompt_generation=3))  # the interrupted turn's late end

        async def prompt() -> None:
            result = await rt.prompt(row.id, "next")
            assert result.generation == GENERATION_BLOCK + 1

        async with anyio.create_task_group() as tg:
            tg.start_soon(prompt)
            await wait_until(lambda: bool(transport.running))
            transport.complete(transport.running[0])
        assert rt.get_execution(row.id).status == "READY"


async def test_a_gone_agent_is_lost_with_its_reason_and_relaunched(
    make_store: StoreFactory,
) -> None:
    ex = memory_agent(auto_complete=True)
    row = stored(metadata={"runtime_model": "smart"})
    await write_rows(make_store, row)
    async with _rt(ex, make_store) as rt:
        lost = rt.get_execution(row.id)
        reason = "the agent instance ended while the app was down"
        assert (lost.status, lost.error_message, lost.acp_session_id) == ("FAILED", reason, "acp-1")
        with pytest.raises(ExecutionLost) as info:
            await rt.prompt(row.id, "hello")
        assert info.value.reason == reason and info.value.status == "FAILED"
        log = await read_log(rt, row.id)
        assert [i.event for i in log] == [
            le.AgentLost(execution_id=row.id, reason=reason, acp_session_id="acp-1",
                         startup_generation=1)
        ]  # fmt: skip
        ready = await rt.relaunch(row.id)
        assert (ready.status, ready.acp_session_id) == ("READY", "acp-1")
        calls = [c[0] for c in ex.last.calls]
        assert "session/load" in calls and "session/new" not in calls
        assert ("set_model", ("smart",)) in ex.last.calls  # the stored override, again
        assert (await rt.prompt(row.id, "back")).stop_reason == "end_turn"
        with pytest.raises(Unsupported):
            await rt.relaunch(row.id)  # it runs


async def test_an_orphan_is_ended_then_lost(make_store: StoreFactory) -> None:
    ex = MemoryExecutor()
    row = stored()
    await write_rows(make_store, row)
    ex.orphans.add(row.id)
    async with _rt(ex, make_store) as rt:
        snapshot = rt.get_execution(row.id)
    assert ex.ended == [row.id]
    assert snapshot.status == "FAILED"
    assert (
        snapshot.error_message == "the in-memory agent was left running; ended the in-memory agent"
    )


async def test_what_had_ended_stays_as_it_was_and_a_stop_removes_it(
    make_store: StoreFactory,
) -> None:
    ex = MemoryExecutor()
    done = stored(status="COMPLETED", exit_code=0)
    unknown = stored(executor_id="elsewhere")
    await write_rows(make_store, done, unknown)
    ex.survivors.add(done.id)  # never asked: its agent had ended
    async with _rt(ex, make_store) as rt:
        assert rt.get_execution(done.id).status == "COMPLETED"
        gone = rt.get_execution(unknown.id)
        assert gone.status == "FAILED"
        assert "executor 'elsewhere' is not configured" in gone.error_message
        assert {e.id for e in rt.list_executions()} == {done.id, unknown.id}
        assert (await rt.stop(unknown.id, "bye")).status == "STOPPED"
    assert ex.transports == []
    async with _rt(ex, make_store) as rt:
        assert [e.id for e in rt.list_executions()] == [done.id]


async def test_a_stopped_execution_leaves_nothing_stored(make_store: StoreFactory) -> None:
    ex = memory_agent(auto_complete=True)
    async with _rt(ex, make_store) as rt:
        ref = await rt.launch(spec())
        await rt.prompt(ref.id, "hello")
        await rt.stop(ref.id, "done")
    async with _rt(ex, make_store) as rt:
        assert rt.list_executions() == []


async def test_model_and_mode_overrides_are_kept(make_store: StoreFactory) -> None:
    ex = memory_agent(auto_complete=True)
    async with _rt(ex, make_store) as rt:
        ref = await rt.launch(spec())
        await rt.wait_ready(ref.id)
        await rt.set_model(ref.id, "smart")
        await rt.set_mode(ref.id, "plan")
    async with _rt(ex, make_store) as rt:
        metadata = rt.get_execution(ref.id).metadata
    assert (metadata["runtime_model"], metadata["session_mode"]) == ("smart", "plan")


async def test_the_log_is_bounded_and_says_what_it_dropped(make_store: StoreFactory) -> None:
    from acpfsm.runtime import Retention

    ex = memory_agent(auto_complete=True)
    async with _rt(ex, make_store, retention=Retention(backlog_events=4)) as rt:
        ref = await rt.launch(spec())
        for _ in range(3):
            await rt.prompt(ref.id, "hello")
        await wait_until(lambda: rt.store_health is not None and rt.store_health.pending == 0)
    async with _rt(ex, make_store, retention=Retention(backlog_events=4)) as rt:
        log = await read_log(rt, ref.id, until=le.AgentBootReady)
    marker = log[0]
    assert isinstance(marker.event, le.EventsTruncated)
    assert marker.seq == marker.event.missed and log[1].seq == marker.seq + 1


async def test_without_a_store_nothing_durable_is_offered() -> None:
    async with make_runtime(memory_agent(auto_complete=True)) as rt:
        ref = await rt.launch(spec())
        assert rt.store_health is None
        with pytest.raises(Unsupported, match=r"subscribe needs Runtime\(store=...\)"):
            rt.subscribe(ref.id)
        with pytest.raises(Unsupported, match="relaunch"):
            await rt.relaunch(ref.id)


async def test_another_attempts_answer_is_ignored(make_store: StoreFactory) -> None:
    """Two attempts at one stored execution: the older one's late answer reaches the newer
    attempt's machine stamped with its own startup generation, and is ignored there."""
    release = anyio.Event()

    class Slow(MemoryExecutor):
        async def probe(self, execution_id: str, handle: Mapping[str, Any]) -> Probe:
            await release.wait()
            return await super().probe(execution_id, handle)

    ex = Slow()
    row = stored()
    async with _rt(ex, make_store) as rt:  # an empty store: the attempts are made by hand
        assert rt._persistence is not None
        driver = rt._persistence.recovery
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                functools.partial(driver.attempt, row, StartupRecoveryEvent.recovery_started)
            )
            await wait_until(lambda: row.id in driver.attempts)  # generation 1, probing
            # generation 2: the chart says it recovered (its mark_recovered)
            assert await driver.attempt(row, StartupRecoveryEvent.relaunch_requested)
            newer = driver.attempts[row.id]
            assert newer.state == "recovered"
            release.set()  # generation 1's probe: "gone", on generation 2's machine
        assert driver.attempts[row.id] is newer and newer.state == "recovered"
        assert rt.get_execution(row.id).status == "READY"
        log = await read_log(rt, row.id, until=le.AgentBootReady)
        assert "AgentLost" not in kinds(log)


class _Counted:
    """A real store whose batches are counted on their way in: the rows (their statuses)
    and the events the Runtime asked it to write."""

    def __init__(self, inner: ExecutionStore) -> None:
        self.inner = inner
        self.rows: list[str] = []
        self.events = 0

    @property
    def name(self) -> str:
        return self.inner.name

    async def open(self) -> list[StoredExecution]:
        return await self.inner.open()

    async def write(self, batch: StoreBatch) -> None:
        await self.inner.write(batch)
        self.rows += [row.status for row in batch.upserts]
        self.events += sum(map(len, batch.events.values()))

    async def read_events(
        self, execution_id: str, after: int, limit: int
    ) -> tuple[int, list[StoredEvent]]:
        return await self.inner.read_events(execution_id, after, limit)

    async def close(self) -> None:
        await self.inner.close()


async def test_a_message_chunk_writes_no_row(make_store: StoreFactory) -> None:
    """The row is written when the DurableRecord chart says (here: the turn's two statuses),
    never per message chunk: thirty chunks, each committed in a batch of its own, write
    thirty events and two rows, as a turn of one chunk does."""
    store = _Counted(make_store())
    ex = memory_agent()
    async with make_runtime(ex, store=store) as rt:
        ref = await rt.launch(spec())
        await rt.wait_ready(ref.id)

        async def turn(chunks: int) -> tuple[list[str], int]:
            await wait_until(lambda: rt.store_health is not None and rt.store_health.pending == 0)
            rows, events = len(store.rows), store.events
            async with anyio.create_task_group() as tg:
                tg.start_soon(rt.prompt, ref.id, "hello")
                await wait_until(lambda: bool(ex.last.running))
                generation = ex.last.running[0]
                for _ in range(chunks):
                    ex.last.emit(MessageChunk(text="x", prompt_generation=generation))
                    await anyio.sleep(0.02)  # past the writer's gathering: a batch of its own
                ex.last.complete(generation)
            await wait_until(lambda: rt.store_health is not None and rt.store_health.pending == 0)
            return store.rows[rows:], store.events - events

        await turn(1)  # the first turn also reserves a block of generations
        rows, written = await turn(30)
    assert written >= 30
    assert rows == ["RUNNING", "READY"]


async def test_flush_waits_until_the_store_holds_what_was_logged(make_store: StoreFactory) -> None:
    """``Runtime.flush`` returns once every event logged so far is written (the writer may
    still be gathering when the prompt returns), and says False when the store does not
    take it in time; without a store it has nothing to wait for."""
    store = _Counted(make_store())
    async with make_runtime(memory_agent(auto_complete=True), store=store) as rt:
        ref = await rt.launch(spec())
        await rt.prompt(ref.id, "hello")
        assert await rt.flush()
        assert rt.store_health is not None and rt.store_health.pending == 0
        logged = await read_log(rt, ref.id, until=le.AgentReady)
        assert store.events == len(logged)
        hold = anyio.Event()
        write = store.write

        async def held(batch: StoreBatch) -> None:
            await hold.wait()
            await write(batch)

        store.write = held  # type: ignore[method-assign]
        await rt.prompt(ref.id, "again")
        assert not await rt.flush(0.2)  # the store is not taking it: told, not hung
        hold.set()
        assert await rt.flush()
        assert store.events > len(logged)
    async with make_runtime(memory_agent(auto_complete=True)) as rt:
        assert await rt.flush(0)
