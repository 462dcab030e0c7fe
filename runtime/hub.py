"""Fan-out of one execution's events to its subscribers, in bounded memory.

Retention (the bounds are :class:`~acpfsm.runtime.types.Retention`'s): a hub keeps the
execution's last events, at most ``retain`` of them and ``retain_bytes`` in all, so a
subscriber that comes late first replays them. When older events were dropped, the replay
starts with an :class:`~acpfsm.runtime.events.EventsTruncated` marker naming how many it
missed; ``subscribe_events`` right after ``launch`` therefore sees the whole life. A live-only
subscriber (``replay=False``) starts with the next event published.

Overflow policy (never silent): publishing never blocks the execution. Each subscriber has a
bounded buffer: it may fall ``buffer`` events and ``buffer_bytes`` behind (beside its replay;
a single event larger than that is still delivered to a subscriber that has nothing else
waiting). One that falls further behind is cut off: it receives everything that was buffered,
then :class:`SubscriberOverflow` naming how many events it missed.

Sizes are estimates (:func:`event_size`): an event's text, or for any other event its JSON,
plus a fixed overhead for the object itself.

Durable log: with an execution store (``Runtime(store=...)``) the hub's ``sink`` receives every
event published, in order, before any subscriber does (the store numbers and logs them, in
batches; see :mod:`acpfsm.runtime.durable`).
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Callable, Sequence
from types import TracebackType
from typing import Self

import msgspec

from acpfsm.adapters.errors import AcpfsmError
from acpfsm.adapters.events import MessageChunk, Reasoning
from acpfsm.adapters.sync import Wakeup

from .events import EventsTruncated, RuntimeEvent

__all__ = ["EVENT_OVERHEAD", "EventHub", "SubscriberOverflow", "Subscription", "event_size"]

EVENT_OVERHEAD = 256
"""What an event costs beside its payload (the struct, its short strings), in bytes."""

_encode = msgspec.json.Encoder().encode


def event_size(event: RuntimeEvent) -> int:
    """The estimated memory of ``event`` in bytes: its text (a message chunk without content
    blocks, a reasoning chunk) or its JSON encoding, plus :data:`EVENT_OVERHEAD`."""
    if type(event) is MessageChunk:
        if not event.content_blocks:
            return EVENT_OVERHEAD + len(event.text)
    elif type(event) is Reasoning:
        return EVENT_OVERHEAD + len(event.reasoning_text)
    try:
        return EVENT_OVERHEAD + len(_encode(event))
    except (msgspec.EncodeError, TypeError, ValueError, OverflowError, RecursionError):
        # a payload JSON cannot hold, or nested too deep: count it big
        return EVENT_OVERHEAD * 16


class SubscriberOverflow(AcpfsmError):
    """A subscriber fell too far behind and was cut off (``missed`` events not delivered)."""

    missed: int

    def __init__(self, execution_id: str, missed: int) -> None:
        super().__init__(
            f"subscriber of execution {execution_id!r} fell behind and missed {missed} events",
            execution_id=execution_id,
        )
        self.missed = missed


class Subscription:
    """An async iterator of one execution's events; ends when the execution finishes."""

    def __init__(
        self, hub: EventHub, backlog: list[RuntimeEvent], sizes: list[int], backlog_bytes: int
    ) -> None:
        self._hub = hub
        self._queue: collections.deque[RuntimeEvent] = collections.deque(backlog)
        self._sizes: collections.deque[int] = collections.deque(sizes)
        self._bytes = backlog_bytes
        # room for the replayed backlog plus ``buffer`` events published after subscribing
        self._capacity = hub.buffer + len(backlog)
        self._capacity_bytes = hub.buffer_bytes + backlog_bytes
        self._wakeup = Wakeup()
        self._overflowed = 0
        self._closed = False

    # called by the hub (sync, never blocks)
    def _push_one(self, event: RuntimeEvent, size: int) -> None:
        self._take_in(event, size)
        self._wakeup.wake()

    def _push(self, events: Sequence[RuntimeEvent], sizes: Sequence[int], total: int) -> None:
        """Take ``events`` (``sizes`` each, ``total`` in all) as one by one, in bulk when all
        of them fit."""
        queue = self._queue
        if (
            not self._overflowed
            and len(queue) + len(events) <= self._capacity
            and self._bytes + total <= self._capacity_bytes
        ):
            queue.extend(events)
            self._sizes.extend(sizes)
            self._bytes += total
        else:
            for event, size in zip(events, sizes, strict=True):
                self._take_in(event, size)
        self._wakeup.wake()

    def _take_in(self, event: RuntimeEvent, size: int) -> None:
        """Buffer one event, or count it missed once this subscriber has overflowed."""
        if self._overflowed:
            self._overflowed += 1
            return
        queue = self._queue
        if queue and (len(queue) >= self._capacity or self._bytes + size > self._capacity_bytes):
            self._overflowed = 1
        else:
            queue.append(event)
            self._sizes.append(size)
            self._bytes += size

    def _finish(self) -> None:
        self._closed = True
        self._wakeup.wake()

    @property
    def buffered(self) -> int:
        """Events received and not yet taken."""
        return len(self._queue)

    @property
    def buffered_bytes(self) -> int:
        """Their estimated size (see :func:`event_size`)."""
        return self._bytes

    def close(self) -> None:
        """Stop receiving: the events already received are still delivered, then the
        iteration ends (leaving the ``async with`` block closes it too)."""
        self._hub._unsubscribe(self)
        self._finish()

    def __aiter__(self) -> AsyncIterator[RuntimeEvent]:
        return self

    def take(self) -> RuntimeEvent | None:
        """The next event already received, without waiting; ``None`` when there is none
        (then :meth:`__anext__` waits, or says why nothing more will come). A consumer that
        drains a burst takes it this way, with no coroutine per event."""
        if self._queue:
            self._bytes -= self._sizes.popleft()
            return self._queue.popleft()
        return None

    async def __anext__(self) -> RuntimeEvent:
        while True:
            if self._queue:
                self._bytes -= self._sizes.popleft()
                return self._queue.popleft()
            if self._overflowed:
                missed, self._overflowed = self._overflowed, 0
                self._closed = True
                raise SubscriberOverflow(self._hub.execution_id, missed)
            if self._closed:
                raise StopAsyncIteration
            await self._wakeup.wait()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._hub._unsubscribe(self)


class EventHub:
    """One execution's events: retained for late subscribers, fanned out to live ones
    (see the module docstring for the bounds)."""

    def __init__(
        self,
        execution_id: str,
        *,
        retain: int = 10_000,
        retain_bytes: int = 1 << 20,
        buffer: int = 10_000,
        buffer_bytes: int = 16 << 20,
    ) -> None:
        self.execution_id = execution_id
        self.retain = retain
        self.retain_bytes = retain_bytes
        self.buffer = buffer
        self.buffer_bytes = buffer_bytes
        self._backlog: collections.deque[RuntimeEvent] = collections.deque()
        self._sizes: collections.deque[int] = collections.deque()  # each event's, in step
        self._backlog_bytes = 0
        self._published = 0
        self._subscribers: list[Subscription] = []
        self._closed = False
        self.sink: Callable[[Sequence[RuntimeEvent]], None] | None = None
        """Receives every event published, in order (the durable log), when set."""
        self.tap: Callable[[Sequence[RuntimeEvent]], None] | None = None
        """Receives them too, after ``sink`` (the event bus of a Runtime without a store)."""

    @property
    def retained(self) -> int:
        """Events retained for a late subscriber."""
        return len(self._backlog)

    @property
    def retained_bytes(self) -> int:
        """Their estimated size (see :func:`event_size`)."""
        return self._backlog_bytes

    def publish(self, event: RuntimeEvent) -> None:
        """Retain ``event`` and hand it to every subscriber."""
        if self._closed:
            return
        if self.sink is not None:
            self.sink((event,))
        if self.tap is not None:
            self.tap((event,))
        size = event_size(event)
        self._published += 1
        self._backlog.append(event)
        self._sizes.append(size)
        self._trim(self._backlog_bytes + size)
        for sub in self._subscribers:
            sub._push_one(event, size)

    def publish_all(self, events: Sequence[RuntimeEvent]) -> None:
        """:meth:`publish` each of ``events`` in order, in bulk: a burst of chunks costs one
        call, one trim of the backlog and one hand-over to each subscriber."""
        if self._closed or not events:
            return
        if self.sink is not None:
            self.sink(events)
        if self.tap is not None:
            self.tap(events)
        # a chunk's size as event_size gives it, with no call per chunk
        sizes = [
            EVENT_OVERHEAD + len(e.text)
            if type(e) is MessageChunk and not e.content_blocks
            else event_size(e)
            for e in events
        ]
        total = sum(sizes)
        self._published += len(events)
        self._backlog.extend(events)
        self._sizes.extend(sizes)
        self._trim(self._backlog_bytes + total)
        for sub in self._subscribers:
            sub._push(events, sizes, total)

    def _trim(self, retained: int) -> None:
        """Drop the oldest events beyond the bounds; ``retained``: the bytes before."""
        backlog, sizes = self._backlog, self._sizes
        if retained > self.retain_bytes or len(backlog) > self.retain:
            retain, retain_bytes = self.retain, self.retain_bytes
            while backlog and (retained > retain_bytes or len(backlog) > retain):
                backlog.popleft()
                retained -= sizes.popleft()
        self._backlog_bytes = retained

    def subscribe(self, *, replay: bool = True) -> Subscription:
        """A subscription to every event from now on, after (``replay``) the retained ones."""
        backlog: list[RuntimeEvent] = []
        sizes: list[int] = []
        dropped = self._published - len(self._backlog)
        if replay and dropped:
            backlog.append(EventsTruncated(execution_id=self.execution_id, missed=dropped))
            sizes.append(EVENT_OVERHEAD)
        if replay:
            backlog.extend(self._backlog)
            sizes.extend(self._sizes)
        sub = Subscription(self, backlog, sizes, sum(sizes))
        if self._closed:
            sub._finish()
        else:
            self._subscribers.append(sub)
        return sub

    def _unsubscribe(self, sub: Subscription) -> None:
        if sub in self._subscribers:
            self._subscribers.remove(sub)

    def close(self) -> None:
        """The execution finished: subscriptions end after delivering what they hold."""
        self._closed = True
        for sub in self._subscribers:
            sub._finish()
        self._subscribers.clear()
