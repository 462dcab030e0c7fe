"""Fan-out of one execution's events to its subscribers.

Overflow policy (never silent): every subscriber has a bounded buffer. Publishing never
blocks the execution; a subscriber that falls ``buffer`` events behind is cut off: it receives
everything that was buffered and then :class:`SubscriberOverflow` naming how many events it
missed. A hub also retains the execution's last ``retain`` events, so a subscriber that comes
late first replays them (preceded by an ``EventsTruncated`` marker when older ones were
dropped); ``subscribe_events`` right after ``launch`` therefore sees the whole life. A live-only
subscriber (``replay=False``) starts with the next event published.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Self

import anyio

from acpfsm.adapters.errors import AcpfsmError

from .events import EventsTruncated, RuntimeEvent

__all__ = ["EventHub", "SubscriberOverflow", "Subscription"]


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

    def __init__(self, hub: EventHub, backlog: list[RuntimeEvent]) -> None:
        self._hub = hub
        self._queue: collections.deque[RuntimeEvent] = collections.deque(backlog)
        # room for the replayed backlog plus ``buffer`` events published after subscribing
        self._capacity = hub.buffer + len(backlog)
        self._wakeup = anyio.Event()
        self._overflowed = 0
        self._closed = False

    # called by the hub (sync, never blocks)
    def _push(self, event: RuntimeEvent) -> None:
        if self._overflowed:
            self._overflowed += 1
            return
        if len(self._queue) >= self._capacity:
            self._overflowed = 1
        else:
            self._queue.append(event)
        self._wakeup.set()

    def _finish(self) -> None:
        self._closed = True
        self._wakeup.set()

    def close(self) -> None:
        """Stop receiving: the events already received are still delivered, then the
        iteration ends (leaving the ``async with`` block closes it too)."""
        self._hub._unsubscribe(self)
        self._finish()

    def __aiter__(self) -> AsyncIterator[RuntimeEvent]:
        return self

    async def __anext__(self) -> RuntimeEvent:
        while True:
            if self._queue:
                return self._queue.popleft()
            if self._overflowed:
                missed, self._overflowed = self._overflowed, 0
                self._closed = True
                raise SubscriberOverflow(self._hub.execution_id, missed)
            if self._closed:
                raise StopAsyncIteration
            self._wakeup = anyio.Event()
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
    def __init__(self, execution_id: str, *, retain: int = 10_000, buffer: int = 10_000) -> None:
        self.execution_id = execution_id
        self.retain = retain
        self.buffer = buffer
        self._backlog: collections.deque[RuntimeEvent] = collections.deque(maxlen=retain)
        self._published = 0
        self._subscribers: list[Subscription] = []
        self._closed = False

    def publish(self, event: RuntimeEvent) -> None:
        if self._closed:
            return
        self._published += 1
        self._backlog.append(event)
        for sub in self._subscribers:
            sub._push(event)

    def subscribe(self, *, replay: bool = True) -> Subscription:
        """A subscription to every event from now on, after (``replay``) the retained ones."""
        backlog: list[RuntimeEvent] = []
        dropped = self._published - len(self._backlog)
        if replay and dropped:
            backlog.append(EventsTruncated(execution_id=self.execution_id, missed=dropped))
        if replay:
            backlog.extend(self._backlog)
        sub = Subscription(self, backlog)
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
