"""The in-process event bus: each execution's latest events kept in memory (bounded), for
subscribers in this process. Same contract as :class:`~acpfsm.runtime.bus.NatsBus` (replay
after a ``seq``, then live; a subscriber that fell behind what is kept gets an
:class:`~acpfsm.runtime.events.EventsTruncated` marker), without a server.

Memory is bounded by ``retain`` events per execution, whatever the number or speed of the
subscribers: they all read the one kept log, none has a queue of its own.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from types import TracebackType
from typing import Self

from acpfsm.adapters.sync import Wakeup

from ..events import EventsTruncated, SequencedEvent
from .base import BusClosed, check_execution_id

__all__ = ["LocalBus", "LocalSubscription"]


class _Log:
    __slots__ = ("changed", "events", "last")

    def __init__(self, retain: int) -> None:
        self.events: collections.deque[SequencedEvent] = collections.deque(maxlen=retain)
        self.last = 0
        self.changed = Wakeup()


class LocalBus:
    """The in-process bus (see the module docstring)."""

    def __init__(self, *, retain: int = 10_000) -> None:
        self.retain = retain
        self._logs: dict[str, _Log] = {}
        self._open = False

    def _log(self, execution_id: str) -> _Log:
        entry = self._logs.get(execution_id)
        if entry is None:
            entry = self._logs[check_execution_id(execution_id)] = _Log(self.retain)
        return entry

    def publish(self, execution_id: str, events: Sequence[SequencedEvent]) -> None:
        if not self._open:
            raise BusClosed("LocalBus.publish outside its `async with` block")
        entry = self._log(execution_id)
        for item in events:
            if item.seq > entry.last:  # a replayed seq is taken once
                entry.events.append(item)
                entry.last = item.seq
        entry.changed.wake()

    def subscribe(self, execution_id: str, *, after: int = 0) -> LocalSubscription:
        if not self._open:
            raise BusClosed("LocalBus.subscribe outside its `async with` block")
        return LocalSubscription(self, execution_id, self._log(execution_id), after)

    async def __aenter__(self) -> Self:
        self._open = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._open = False
        for entry in self._logs.values():
            entry.changed.wake()


class LocalSubscription:
    """One execution's events after ``after``, then the live ones (see :class:`LocalBus`);
    ends when the bus is closed."""

    def __init__(self, bus: LocalBus, execution_id: str, log: _Log, after: int) -> None:
        self._bus = bus
        self._execution_id = execution_id
        self._entry = log
        self._next = max(after, 0) + 1

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SequencedEvent:
        entry = self._entry
        while True:
            events = entry.events
            if events and events[-1].seq >= self._next:
                first = events[0].seq
                if first > self._next:  # fell behind what is kept
                    missed = first - self._next
                    self._next = first
                    marker = EventsTruncated(execution_id=self._execution_id, missed=missed)
                    return SequencedEvent(first - 1, marker)
                item = events[self._next - first]
                if item.seq != self._next:  # not contiguous: look for it
                    item = next(e for e in events if e.seq >= self._next)
                self._next = item.seq + 1
                return item
            if not self._bus._open:
                raise StopAsyncIteration
            await entry.changed.wait()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None
