"""Event fan-out: order, replay for late subscribers, and the never-silent overflow policy."""

from __future__ import annotations

import gc
import typing

import anyio
import anyio.lowlevel
import msgspec
import pytest

from acpfsm.adapters.events import MessageChunk, Plan, PlanEntry, decode_event
from acpfsm.runtime import SubscriberOverflow
from acpfsm.runtime.events import AgentReady, EventsTruncated, RuntimeEvent
from acpfsm.runtime.hub import EventHub, event_size

pytestmark = pytest.mark.both_backends


def chunk(i: int) -> MessageChunk:
    return MessageChunk(text=str(i))


async def test_every_subscriber_sees_every_event_in_order() -> None:
    hub = EventHub("x")
    a, b = hub.subscribe(), hub.subscribe()
    for i in range(5):
        hub.publish(chunk(i))
    hub.close()
    for sub in (a, b):
        async with sub:
            assert [e.text async for e in sub if isinstance(e, MessageChunk)] == list("01234")


async def test_a_late_subscriber_replays_the_backlog_and_is_told_what_was_dropped() -> None:
    hub = EventHub("x", retain=3)
    for i in range(5):
        hub.publish(chunk(i))
    late = hub.subscribe()
    hub.publish(AgentReady(execution_id="x"))
    hub.close()
    seen = [e async for e in late]
    assert isinstance(seen[0], EventsTruncated)
    assert seen[0].missed == 2
    assert [e.text for e in seen if isinstance(e, MessageChunk)] == ["2", "3", "4"]
    assert isinstance(seen[-1], AgentReady)


async def test_a_slow_subscriber_is_cut_off_loudly_without_stalling_the_publisher() -> None:
    hub = EventHub("x", buffer=3)
    slow = hub.subscribe()
    for i in range(10):  # publish is synchronous: it never waits for a subscriber
        hub.publish(chunk(i))
    delivered: list[str] = []

    async def drain() -> None:
        async for event in slow:
            assert isinstance(event, MessageChunk)
            delivered.append(event.text)

    with pytest.raises(SubscriberOverflow) as info:
        await drain()
    assert delivered == ["0", "1", "2"]  # everything it had room for, then the error
    assert info.value.missed == 7
    assert info.value.execution_id == "x"
    # a subscriber that keeps up loses nothing
    keeping_up = hub.subscribe()
    got: list[str] = []
    for i in range(10, 20):
        hub.publish(chunk(i))
        event = await keeping_up.__anext__()
        if isinstance(event, MessageChunk) and int(event.text) >= 10:
            got.append(event.text)
    hub.close()
    rest = [e.text async for e in keeping_up if isinstance(e, MessageChunk)]
    assert got + [t for t in rest if int(t) >= 10] == [str(i) for i in range(10, 20)]


async def test_subscription_ends_when_the_execution_finishes() -> None:
    hub = EventHub("x")
    sub = hub.subscribe()
    got: list[object] = []

    async def consume() -> None:
        async for event in sub:
            got.append(event)

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await anyio.lowlevel.checkpoint()
        hub.publish(chunk(1))
        hub.close()
    assert len(got) == 1


async def test_a_burst_published_at_once_is_what_publishing_each_event_gives() -> None:
    """``publish_all`` (the event pump's burst of chunks) keeps the backlog's bounds and each
    subscriber's overflow policy event by event: a subscriber with room for part of the burst
    gets that part, then is cut off naming the rest."""
    one, burst = EventHub("x", retain=4, buffer=3), EventHub("x", retain=4, buffer=3)
    early = [one.subscribe(replay=False), burst.subscribe(replay=False)]
    for hub in (one, burst):
        hub.publish(chunk(0))
    later = [one.subscribe(replay=False), burst.subscribe(replay=False)]
    for i in range(1, 7):
        one.publish(chunk(i))
    burst.publish_all([chunk(i) for i in range(1, 7)])
    burst.publish_all([])  # nothing: no change
    kept = (4, 4 * event_size(chunk(6)))
    assert (one.retained, one.retained_bytes) == (burst.retained, burst.retained_bytes) == kept
    late = [one.subscribe(), burst.subscribe()]
    for hub in (one, burst):
        hub.close()
    seen: list[list[object]] = []
    for sub in (*early, *later, *late):
        got: list[object] = []
        try:
            async for event in sub:
                got.append(event.text if isinstance(event, MessageChunk) else event)
        except SubscriberOverflow as exc:
            got.append(("overflow", exc.missed))
        seen.append(got)
    early_one, early_burst, later_one, later_burst, late_one, late_burst = seen
    assert early_one == early_burst == ["0", "1", "2", ("overflow", 4)]  # room for 3
    assert later_one == later_burst == ["1", "2", "3", ("overflow", 3)]  # part of the burst
    assert late_one == late_burst
    assert late_one == [EventsTruncated(execution_id="x", missed=3), "3", "4", "5", "6"]


async def test_take_hands_out_what_was_received_without_waiting() -> None:
    hub = EventHub("x")
    sub = hub.subscribe(replay=False)
    assert sub.take() is None
    hub.publish_all([chunk(1), chunk(2)])
    assert sub.buffered == 2
    taken = [sub.take(), sub.take()]
    assert [e.text for e in taken if isinstance(e, MessageChunk)] == ["1", "2"]
    assert (sub.take(), sub.buffered, sub.buffered_bytes) == (None, 0, 0)


def _struct_types(tp: object, seen: set[type[msgspec.Struct]]) -> set[type[msgspec.Struct]]:
    """Every msgspec Struct type reachable from ``tp`` (a union, a field annotation)."""
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        if tp not in seen:
            seen.add(tp)
            for field in msgspec.structs.fields(tp):
                _struct_types(field.type, seen)
        return seen
    for arg in typing.get_args(tp):
        _struct_types(arg, seen)
    return seen


def test_retained_events_cost_the_garbage_collector_nothing() -> None:
    """A hub keeps thousands of events; were they tracked, every young collection would walk
    them. Every event type, and every struct inside one, is untracked (acyclic data)."""
    types = _struct_types(RuntimeEvent, set())
    assert {MessageChunk, Plan, PlanEntry, AgentReady} <= types
    assert [t.__name__ for t in types if t.__struct_config__.gc] == []
    plan = decode_event(b'{"type":"plan","plan_entries":[{"description":"a","priority":"high"}]}')
    hub = EventHub("x")
    hub.publish(plan)
    assert isinstance(plan, Plan) and plan.plan_entries
    assert not gc.is_tracked(plan) and not gc.is_tracked(plan.plan_entries[0])
