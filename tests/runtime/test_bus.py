"""The event bus seam against a real NATS server with JetStream (Debian's nats-server, started
by the ``nats_server`` fixture) and in process (``LocalBus``), on trio and asyncio: replay
after a ``seq`` then live, each event once and in order; a Runtime publishing every event of
its executions (numbered by itself, or by its store); a subscriber in another process; and
the hostile cases: an event too large for the server, garbage on an execution's subject, a
slow subscriber, events the stream's limits dropped, the server killed mid-stream."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import nats
import pytest

from acpfsm.runtime import events as le
from acpfsm.runtime.bus import (
    BusClosed,
    BusError,
    BusUnavailable,
    EventBus,
    LocalBus,
    NatsBus,
    event_subject,
    event_type,
)
from acpfsm.runtime.store import SqliteStore
from acpfsm.testing.natsserver import NatsServer

from .memory_runtime import make_runtime, memory_agent, spec

pytestmark = pytest.mark.both_backends

Seq = le.SequencedEvent


def chunks(first: int, last: int, execution_id: str = "ex-1") -> list[Seq]:
    return [Seq(i, le.MessageChunk(text=f"chunk {i}")) for i in range(first, last + 1)]


@asynccontextmanager
async def open_bus(kind: str, server: NatsServer | None, **kw: object) -> AsyncIterator[EventBus]:
    if kind == "local":
        async with LocalBus() as local:
            yield local
    else:
        assert server is not None
        async with NatsBus(server.url, **kw) as remote:  # type: ignore[arg-type]
            yield remote


async def take(bus: EventBus, execution_id: str, n: int, after: int = 0) -> list[Seq]:
    got: list[Seq] = []
    with anyio.fail_after(30):
        async with bus.subscribe(execution_id, after=after) as sub:
            async for item in sub:
                got.append(item)
                if len(got) == n:
                    break
    return got


@pytest.fixture(params=["local", "nats"])
def bus_kind(request: pytest.FixtureRequest) -> tuple[str, NatsServer | None]:
    if request.param == "nats":
        return "nats", request.getfixturevalue("nats_server")
    return "local", None


async def test_replay_after_a_seq_then_live_once_and_in_order(
    bus_kind: tuple[str, NatsServer | None],
) -> None:
    kind, server = bus_kind
    async with open_bus(kind, server) as bus:
        bus.publish("ex-1", chunks(1, 5))
        bus.publish("ex-2", chunks(1, 3))  # another execution: never crossed
        got: list[Seq] = []
        with anyio.fail_after(30):
            async with bus.subscribe("ex-1", after=2) as sub:
                async for item in sub:
                    got.append(item)
                    if item.seq == 5:
                        bus.publish("ex-1", chunks(4, 8))  # 4, 5 again: a retried publish
                    if item.seq == 8:
                        break
        assert [i.seq for i in got] == [3, 4, 5, 6, 7, 8]
        assert [i.event for i in got] == [i.event for i in chunks(3, 8)]
        late = await take(bus, "ex-1", 8)  # a late subscriber from the start
        assert [i.seq for i in late] == list(range(1, 9))
        assert [i.seq for i in await take(bus, "ex-2", 3)] == [1, 2, 3]


async def test_a_subject_is_the_execution_and_the_event_type() -> None:
    ready = le.AgentReady(execution_id="e")
    assert event_subject("e-1", ready) == "acpfsm.exec.e-1.agent.ready"
    assert event_type(le.MessageChunk(text="x")) == "message_chunk"
    for bad in ("", "a.b", "a*", "a>", "a b", "x" * 300):
        with pytest.raises(BusError):
            event_subject(bad, ready)
    bus = LocalBus()
    with pytest.raises(BusClosed):
        bus.publish("e", chunks(1, 1))


async def test_a_runtime_publishes_every_event_numbered(
    bus_kind: tuple[str, NatsServer | None],
) -> None:
    kind, server = bus_kind
    async with open_bus(kind, server) as bus:
        async with make_runtime(memory_agent(auto_complete=True), bus=bus) as rt:
            ref = await rt.launch(spec())
            local = rt.subscribe_events(ref.id)
            await rt.prompt(ref.id, "hello")
            expected = []
            while (event := local.take()) is not None:
                expected.append(event)
            assert any(isinstance(e, le.PromptCompleted) for e in expected)
        got = await take(bus, ref.id, len(expected))
        assert [i.seq for i in got] == list(range(1, len(expected) + 1))
        assert [i.event for i in got] == expected  # the hub's events, the same, in order


async def test_with_a_store_the_bus_carries_the_logs_numbers(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    ex = memory_agent(auto_complete=True)
    store = tmp_path / "executions.db"
    async with NatsBus(nats_server.url) as bus:
        async with make_runtime(ex, store=SqliteStore(store), bus=bus) as rt:
            ref = await rt.launch(spec())
            await rt.prompt(ref.id, "hello")
            await rt.flush()
            logged = rt._persistence.durability.logs[ref.id].committed  # type: ignore[union-attr]
        async with make_runtime(ex, store=SqliteStore(store), bus=bus) as rt:
            await rt.prompt(ref.id, "again")  # the recovered execution goes on numbering
            async with rt.subscribe(ref.id) as durable:
                want = []
                async for item in durable:
                    want.append(item)
                    if isinstance(item.event, le.AgentReady) and item.seq > logged + 2:
                        break
        got = await take(bus, ref.id, len(want))
        assert got == want  # the same seqs and events as the durable log, across the restart
        assert any(isinstance(i.event, le.AgentRecovered) for i in got)


async def test_with_a_store_a_stopped_executions_last_events_reach_the_bus(
    tmp_path: Path,
) -> None:
    """Stopping deletes the execution's row and log, but the events it logged last (its
    ``agent.stopped``) are committed just before and published like every other: a
    subscriber on the bus sees the execution end, with no gap in the numbers."""
    async with LocalBus() as bus:
        store = SqliteStore(tmp_path / "executions.db")
        async with make_runtime(memory_agent(auto_complete=True), store=store, bus=bus) as rt:
            ref = await rt.launch(spec())
            await rt.prompt(ref.id, "hello")
            await rt.stop(ref.id, "done")
            assert await rt.flush()
        got: list[Seq] = []
        with anyio.fail_after(30):
            async with bus.subscribe(ref.id) as sub:
                async for item in sub:
                    got.append(item)
                    if isinstance(item.event, le.AgentStopped):
                        break
        assert [i.seq for i in got] == list(range(1, len(got) + 1))
        assert got[-1].event == le.AgentStopped(execution_id=ref.id, reason="done")


def test_a_subscriber_in_another_process_follows_live(nats_server: NatsServer) -> None:
    async def publish(proc: subprocess.Popen[str]) -> None:
        async with NatsBus(nats_server.url) as bus:
            bus.publish("ex-far", chunks(1, 50))
            assert proc.stdout is not None
            assert json.loads(proc.stdout.readline()) == {"subscribed": True}
            bus.publish("ex-far", chunks(51, 100))

    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.peers.bus_follower", nats_server.url, "ex-far", "20",
         "80", "trio"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        anyio.run(publish, proc)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    lines = [json.loads(line) for line in out.splitlines()]
    assert [line["seq"] for line in lines] == list(range(21, 101))
    assert {line["type"] for line in lines} == {"message_chunk"}


async def test_an_event_too_large_for_the_server_keeps_its_seq(nats_server: NatsServer) -> None:
    async with NatsBus(nats_server.url) as bus:
        huge = le.MessageChunk(text="x" * (bus.max_payload + 10))
        bus.publish("ex-1", [*chunks(1, 2), Seq(3, huge), *chunks(4, 5)])
        got = await take(bus, "ex-1", 5)
    assert [i.seq for i in got] == [1, 2, 3, 4, 5]
    assert got[2].event == le.Unknown(
        kind="event too large for the bus", payload={"type": "message_chunk"}
    )


async def test_garbage_on_an_executions_subject_is_skipped(nats_server: NatsServer) -> None:
    async with NatsBus(nats_server.url) as bus:
        bus.publish("ex-1", chunks(1, 2))
        await take(bus, "ex-1", 2)  # stored

        async def hostile() -> None:
            nc = await nats.connect(nats_server.url)
            js = nc.jetstream()
            for body in (b"\xff\xfe not json", b"[" * 100_000, b'{"seq": "x"}', b"x" * 900_000):
                await js.publish("acpfsm.exec.ex-1.message_chunk", body)
            await js.publish("acpfsm.exec.ex-1.agent.ready", b'{"seq": 1, "event": {"type": '
                             b'"agent.ready", "execution_id": "forged"}}')  # fmt: skip
            await nc.close()

        await bus.runner.run(hostile)
        bus.publish("ex-1", chunks(3, 4))
        with anyio.fail_after(30):
            async with bus.subscribe("ex-1") as sub:
                got = [await sub.__anext__() for _ in range(4)]
                assert sub.rejected == 4
            async with bus.subscribe("ex-1", after=3) as late:  # the lookup meets garbage:
                assert await late.__anext__() == chunks(4, 4)[0]  # it reads from the start
    assert [i.seq for i in got] == [1, 2, 3, 4]  # the forged seq 1 was a duplicate
    assert got == chunks(1, 4)


async def test_a_slow_subscriber_holds_one_batch(nats_server: NatsServer) -> None:
    async with NatsBus(nats_server.url, batch=64) as bus:
        bus.publish("ex-1", chunks(1, 2000))
        most = 0
        got = 0
        with anyio.fail_after(60):
            async with bus.subscribe("ex-1") as sub:
                async for item in sub:
                    got += 1
                    assert item.seq == got
                    most = max(most, sub.buffered)
                    if got % 500 == 0:
                        await anyio.sleep(0.2)  # slow: the rest waits in JetStream
                    if got == 2000:
                        break
    assert most <= 64


async def test_events_the_stream_dropped_are_one_marker(nats_server: NatsServer) -> None:
    big = [Seq(i, le.MessageChunk(text="y" * 2000)) for i in range(1, 201)]
    async with NatsBus(nats_server.url, stream="SMALL", max_bytes=64_000) as bus:
        bus.publish("ex-1", big)
        with anyio.fail_after(30):
            while bus.published < 200:
                await anyio.sleep(0.01)
            async with bus.subscribe("ex-1") as sub:
                first = await sub.__anext__()
                second = await sub.__anext__()
    assert isinstance(first.event, le.EventsTruncated)
    assert first.event.missed == second.seq - 1 == first.seq
    assert second.event == big[second.seq - 1].event


async def test_the_server_killed_mid_stream(nats_server: NatsServer) -> None:
    async with NatsBus(nats_server.url, unavailable_after=1.0) as bus:
        bus.publish("ex-1", chunks(1, 10))
        got: list[Seq] = []

        async def follow() -> None:
            async with bus.subscribe("ex-1") as sub:
                async for item in sub:
                    got.append(item)
                    if item.seq == 10:
                        nats_server.kill()
                        bus.publish("ex-1", chunks(11, 20))  # queued meanwhile

        with anyio.fail_after(30), pytest.raises(BusUnavailable):  # no hang: typed, bounded
            await follow()
        assert [i.seq for i in got] == list(range(1, 11))
        nats_server.start()  # back, with its store: the queued events go out once
        with anyio.fail_after(30):
            while not bus.connected:
                await anyio.sleep(0.05)
        rest = await take(bus, "ex-1", 10, after=10)
        assert rest == chunks(11, 20)
        again = await take(bus, "ex-1", 20)
        assert [i.seq for i in again] == list(range(1, 21))


async def test_no_server_is_a_typed_error(nats_server: NatsServer) -> None:
    nats_server.kill()
    with anyio.fail_after(30), pytest.raises(BusUnavailable):
        async with NatsBus(nats_server.url, request_timeout=1.0, connect={
            "max_reconnect_attempts": 0, "allow_reconnect": False}):  # fmt: skip
            pass


async def test_killed_while_batches_are_in_flight_nothing_is_reordered(
    nats_server: NatsServer,
) -> None:
    """The server killed three times while a flood of events is being published: the
    publishes the client had not yet written when the connection died are not sent again by
    the client on reconnect (they would land before the retried batch's first events, which
    died in the socket); the bus's own retry sends them, in order. Read back from the start,
    every event is there once and in order, with no truncation marker."""
    async with NatsBus(nats_server.url, linger=0.0, request_timeout=1.0) as bus:
        published = 0

        async def flood() -> None:
            nonlocal published
            while published < 6000:
                bus.publish("ex-1", chunks(published + 1, published + 40))
                published += 40
                await anyio.sleep(0.002)

        with anyio.fail_after(90):
            async with anyio.create_task_group() as tg:
                tg.start_soon(flood)
                for _ in range(3):
                    while bus.published < published - 200:  # batches in flight right now
                        await anyio.sleep(0.001)
                    await anyio.sleep(0.01)
                    nats_server.kill()
                    await anyio.sleep(0.3)
                    nats_server.start()
                    while not bus.connected:
                        await anyio.sleep(0.05)
            while bus.published < published:
                await anyio.sleep(0.05)
        got = await take(bus, "ex-1", published)
        assert [type(i.event) for i in got] == [le.MessageChunk] * published
        assert [i.seq for i in got] == list(range(1, published + 1))


async def test_a_local_bus_keeps_the_latest_executions_only() -> None:
    """Many executions one after another: the bus keeps the logs of the ``executions`` it
    published to most recently, however many went before; a subscriber reading a forgotten
    log reads what it holds, is told what went, and follows the execution when it publishes
    again, and one waiting on a forgotten execution does not spin."""
    async with LocalBus(retain=50, executions=10) as bus:
        bus.publish("first", chunks(1, 5))
        with anyio.fail_after(10):
            async with bus.subscribe("first") as early:
                assert [(await early.__anext__()).seq for _ in range(2)] == [1, 2]
                for n in range(1000):
                    bus.publish(f"ex-{n}", chunks(1, 3))
                assert bus.kept == 10 and bus.forgotten == 991  # "first" and 990 others
                rest = [(await early.__anext__()).seq for _ in range(3)]
                assert rest == [3, 4, 5]  # what the forgotten log held, once
                got: list[Seq] = []

                async def follow() -> None:
                    async for item in early:
                        got.append(item)
                        if item.seq == 8:
                            return

                async with anyio.create_task_group() as tg:
                    tg.start_soon(follow)
                    await anyio.sleep(0.05)  # waiting on the forgotten log, not spinning
                    assert got == []
                    bus.publish("first", chunks(6, 8))
                assert [i.seq for i in got] == [6, 7, 8]
        later = await take(bus, "first", 4)  # from the start: the forgotten five are told
        assert later[0] == Seq(5, le.EventsTruncated(execution_id="first", missed=5))
        assert later[1:] == chunks(6, 8)
        async with bus.subscribe("ex-0") as gone:  # forgotten, nothing published since
            bus.publish("ex-0", chunks(4, 4))
            item = await gone.__anext__()
            assert isinstance(item.event, le.EventsTruncated) and item.event.missed == 3
            assert (await gone.__anext__()).seq == 4
    with pytest.raises(ValueError, match="at least one"):
        LocalBus(executions=0)


async def test_a_subscriber_resuming_late_reads_from_its_seq(nats_server: NatsServer) -> None:
    """A long execution beside another one: subscribed after seq 1500 (or 2999, or past the
    end), the subscriber starts at its seq in the stream and reads none of the history
    before it again; a subscription from the start still reads them all."""
    async with NatsBus(nats_server.url, batch=64) as bus:
        for first in range(1, 3001, 100):
            bus.publish("ex-1", chunks(first, first + 99))
            bus.publish("ex-2", chunks(first, first + 99))
        with anyio.fail_after(30):
            while bus.published < 6000:
                await anyio.sleep(0.05)
        for after in (1500, 2999, 1):
            async with bus.subscribe("ex-1", after=after) as sub:
                got = [await sub.__anext__() for _ in range(3000 - after)]
                assert got == chunks(after + 1, 3000)
                assert sub.skipped == 0
        async with bus.subscribe("ex-1", after=3000) as sub:
            bus.publish("ex-1", chunks(3001, 3001))
            with anyio.fail_after(10):
                assert await sub.__anext__() == chunks(3001, 3001)[0]
            assert sub.skipped == 0
