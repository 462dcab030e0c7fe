"""Bounded memory for a service that runs for days: every store the runtime keeps per prompt
or per event is capped (:class:`~acpfsm.runtime.Retention`), in records, events or bytes, and
the caps do not break their users (a late subscriber is told what it missed, the trace file
and the pytest plugin's trace checks see every record)."""

from __future__ import annotations

import gc
import json
import sys
import tracemalloc
from pathlib import Path

import pytest

from acpfsm.adapters.events import MessageChunk, Reasoning, ToolCall, ToolUpdate
from acpfsm.runtime import Retention, SubscriberOverflow, Trace
from acpfsm.runtime.events import AgentReady, EventsTruncated
from acpfsm.runtime.hub import EVENT_OVERHEAD, EventHub, event_size
from acpfsm.runtime.trace import TraceRecord
from acpfsm.statecharts import Execution, TransitionRecord
from acpfsm.testing import assert_trace_conforms
from acpfsm.testing.memory import MemoryExecutor
from acpfsm.testing.plugin import TraceCollector
from acpfsm.tools.check_trace import check_records

from .memory_runtime import make_runtime, memory_agent, session_of, spec, wait_until

KIB = 1024


def _record(i: int) -> TransitionRecord:
    return TransitionRecord("execution", "ready", f"event_{i}", "ready", {})


# --- the trace ------------------------------------------------------------------------------


@pytest.mark.acpfsm_unchecked_trace  # fabricated records
def test_trace_records_are_a_ring_while_the_file_and_listeners_get_every_record(
    tmp_path: Path,
) -> None:
    path = tmp_path / "trace.jsonl"
    trace = Trace(path, keep=3)
    heard: list[int] = []
    trace.listeners.append(lambda r: heard.append(r.seq))
    observe = trace.observer("x")
    for i in range(10):
        observe(_record(i))
    trace.close()
    assert [r.seq for r in trace.records] == [8, 9, 10]
    assert (trace.count, trace.dropped) == (10, 7)
    assert heard == list(range(1, 11))
    assert [json.loads(line)["seq"] for line in path.read_text().splitlines()] == heard


@pytest.mark.acpfsm_unchecked_trace  # fabricated records
def test_making_trace_records_does_not_bring_the_next_garbage_collection_closer() -> None:
    """About ten records are made per prompt; were they GC objects, each would count towards
    the next young collection (even though msgspec untracks a flat one at once). A record
    is flat data: no cycle can go through it."""
    trace = Trace(keep=1000)
    observe = trace.observer("x")
    records = [_record(i) for i in range(500)]
    gc.disable()
    try:
        before = gc.get_count()[0]
        for record in records:
            observe(record)
        counted = gc.get_count()[0] - before
    finally:
        gc.enable()
    assert len(trace.records) == 500 and counted < 50, counted
    assert not TraceRecord.__struct_config__.gc and not gc.is_tracked(trace.records[0])


@pytest.mark.acpfsm_unchecked_trace  # fabricated records
def test_a_trace_can_keep_no_records_and_refuses_a_negative_ring() -> None:
    trace = Trace(keep=0)
    observe = trace.observer("x")
    observe(_record(1))
    assert (len(trace.records), trace.dropped) == (0, 1)
    assert Trace(keep=False).records.maxlen == 0  # the flag it once was
    assert Trace(keep=True).records.maxlen == Retention().trace_records
    with pytest.raises(ValueError, match="number of records"):
        Trace(keep=-1)


@pytest.mark.acpfsm_unchecked_trace  # fabricated records
def test_a_trace_whose_ring_dropped_records_is_not_checked_as_whole() -> None:
    trace = Trace(keep=1)
    observe = trace.observer("x")
    observe(TransitionRecord("execution", "idle", "start_requested", "starting", {}))
    observe(TransitionRecord("execution", "starting", "agent_start_failed", "failed", {}))
    with pytest.raises(ValueError, match="dropped its 1 oldest"):
        assert_trace_conforms(trace)


async def test_the_runtime_keeps_a_bounded_ring_and_the_plugin_still_sees_every_record(
    tmp_path: Path,
) -> None:
    assert make_runtime(MemoryExecutor()).trace.records.maxlen == 10_000  # the default
    collector = TraceCollector()  # what --acpfsm-check-traces installs around each test
    collector.start()
    try:
        executor = memory_agent(auto_complete=True)
        path = tmp_path / "trace.jsonl"
        rt = make_runtime(executor, trace_path=path, retention=Retention(trace_records=5))
        async with rt:
            ref = await rt.launch(spec())
            for i in range(20):
                await rt.prompt(ref.id, f"prompt {i}")
            await rt.stop(ref.id, "done")
    finally:
        collector.stop()
    assert len(rt.trace.records) == 5 and rt.trace.count > 100
    assert rt.trace.records[-1].seq == rt.trace.count
    (full,) = collector.traces
    assert [r.seq for r in full] == list(range(1, rt.trace.count + 1))
    assert check_records(full).ok
    assert len(path.read_text().splitlines()) == rt.trace.count


# --- the hub: retained backlog ------------------------------------------------------------


def big_chunk(i: int, size: int = 10 * KIB) -> MessageChunk:
    return MessageChunk(text=f"{i:06d}" + "x" * (size - 6))


def test_event_size_counts_the_text_or_the_json() -> None:
    assert event_size(MessageChunk(text="abc")) == EVENT_OVERHEAD + 3
    assert event_size(Reasoning(reasoning_text="a" * 100)) == EVENT_OVERHEAD + 100
    call = ToolCall(tool_call_id="t", raw_input={"path": "p" * 5000})
    assert EVENT_OVERHEAD + 5000 < event_size(call) < EVENT_OVERHEAD + 5500
    # a payload JSON cannot hold (an in-process transport's object) is still counted
    assert event_size(ToolCall(tool_call_id="t", raw_input=object())) > EVENT_OVERHEAD


async def test_the_backlog_is_bounded_in_bytes_and_a_late_subscriber_is_told() -> None:
    hub = EventHub("x", retain_bytes=50 * KIB)
    for i in range(100):  # 1 MB of text
        hub.publish(big_chunk(i))
    assert hub.retained_bytes <= 50 * KIB
    kept = hub.retained
    assert 0 < kept < 100
    late = hub.subscribe()
    hub.publish(AgentReady(execution_id="x"))
    hub.close()
    seen = [e async for e in late]
    assert seen[0] == EventsTruncated(execution_id="x", missed=100 - kept)
    texts = [e.text[:6] for e in seen if isinstance(e, MessageChunk)]
    assert texts == [f"{i:06d}" for i in range(100 - kept, 100)]  # the newest, in order
    assert isinstance(seen[-1], AgentReady)


async def test_an_event_larger_than_the_backlog_is_not_retained() -> None:
    hub = EventHub("x", retain_bytes=4 * KIB)
    hub.publish(big_chunk(1, size=64 * KIB))
    assert (hub.retained, hub.retained_bytes) == (0, 0)
    hub.close()
    assert [e async for e in hub.subscribe()] == [EventsTruncated(execution_id="x", missed=1)]


async def test_a_runtime_execution_retains_its_latest_events_within_the_bound() -> None:
    reply = tuple("y" * (8 * KIB) for _ in range(16))  # 128 KiB a turn
    executor = memory_agent(auto_complete=True, reply=reply)
    async with make_runtime(executor, retention=Retention(backlog_bytes=64 * KIB)) as rt:
        ref = await rt.launch(spec())
        for i in range(4):
            await rt.prompt(ref.id, f"prompt {i}")
        hub = session_of(rt, ref.id).ctx.hub
        assert hub.retained_bytes <= 64 * KIB
        async with rt.subscribe_events(ref.id) as late:
            first = await late.__anext__()
        assert isinstance(first, EventsTruncated) and first.missed > 60
        await rt.stop(ref.id, "done")


# --- the hub: a slow subscriber -------------------------------------------------------------


async def test_a_slow_subscriber_is_cut_off_by_bytes_long_before_its_event_count() -> None:
    hub = EventHub("x", buffer=10_000, buffer_bytes=40 * KIB)
    slow = hub.subscribe(replay=False)
    for i in range(50):
        hub.publish(big_chunk(i))
        assert slow.buffered_bytes <= 40 * KIB
    delivered: list[str] = []

    async def drain() -> None:
        async for event in slow:
            assert isinstance(event, MessageChunk)
            delivered.append(event.text[:6])

    with pytest.raises(SubscriberOverflow) as info:
        await drain()
    assert delivered == [f"{i:06d}" for i in range(len(delivered))]  # what it had room for
    assert 0 < len(delivered) < 5
    assert info.value.missed == 50 - len(delivered)


async def test_a_subscriber_that_keeps_up_receives_an_event_larger_than_its_buffer() -> None:
    hub = EventHub("x", buffer_bytes=4 * KIB)
    sub = hub.subscribe(replay=False)
    hub.publish(big_chunk(7, size=64 * KIB))
    event = await sub.__anext__()
    assert isinstance(event, MessageChunk) and event.text.startswith("000007")
    hub.publish(AgentReady(execution_id="x"))
    assert isinstance(await sub.__anext__(), AgentReady)


# --- per prompt ---------------------------------------------------------------------------


async def test_only_the_current_generation_keeps_its_reply_text() -> None:
    reply = ("z" * (32 * KIB),)
    executor = memory_agent(auto_complete=True, reply=reply)
    async with make_runtime(executor) as rt:
        ref = await rt.launch(spec())
        for i in range(10):
            result = await rt.prompt(ref.id, f"prompt {i}")
            assert result.agent_message == reply[0]  # the caller has its reply
        generations = session_of(rt, ref.id).generations
        assert len(generations) == 10
        assert sum(len(g.agent_message) for g in generations.values()) == len(reply[0])
        await rt.stop(ref.id, "done")


async def test_tool_call_names_are_bounded_under_a_flood() -> None:
    executor = MemoryExecutor()
    async with make_runtime(executor) as rt:
        ref = await rt.launch(spec())
        await rt.wait_ready(ref.id)
        session = session_of(rt, ref.id)
        for i in range(3000):  # tool calls that never end
            executor.last.emit(ToolCall(tool_call_id=f"t{i}", tool_name="flood"))
        await wait_until(lambda: "t2999" in session.pump._tool_names)
        assert len(session.pump._tool_names) <= 1024
        await rt.stop(ref.id, "done")


def test_a_chart_machine_keeps_nothing_per_transition() -> None:
    machine = Execution.start(tags={"execution_id": "x"})
    machine.fire("start_requested")
    machine.fire("booted")

    def cycles(n: int) -> None:
        for g in range(n):
            machine.fire("prompt_began")
            machine.fire("turn_completed", generation=g, stop_reason="end_turn")

    cycles(100)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        cycles(5000)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 10_000 * 8  # under a pointer per transition: nothing is kept per transition


def test_event_size_of_an_event_json_cannot_hold_is_counted_big() -> None:
    """An agent's raw payload msgspec cannot encode (a nesting too deep) is not an error."""
    deep: object = []
    for _ in range(sys.getrecursionlimit() + 1000):
        deep = [deep]
    assert event_size(ToolUpdate(tool_call_id="t", raw_output=deep)) == EVENT_OVERHEAD * 16
