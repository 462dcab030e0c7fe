"""The in-process event bus: each execution's latest events kept in memory (bounded), for
subscribers in this process. Same contract as :class:`~acpfsm.runtime.bus.NatsBus` (replay
after a ``seq``, then live; a subscriber that fell behind what is kept gets an
:class:`~acpfsm.runtime.events.EventsTruncated` marker), without a server.

Memory is bounded by ``retain`` events per execution, whatever the number or speed of the
subscribers: they all read the one kept log, none has a queue of its own; and by
``executions`` logs in all: past that, the log of the execution published to least recently
is forgotten (a subscriber still reading it is told what it missed, with an
:class:`~acpfsm.runtime.events.EventsTruncated` marker, and follows whatever comes next). A
long-lived process that runs many executions one after another keeps the latest ones.
"""

from __future__ import annotations

import collections
import weakref
from collections.abc import Sequence
from types import TracebackType
from typing import Self

from acpfsm.adapters.sync import Wakeup

from ..events import EventsTruncated, SequencedEvent
from .base import BusClosed, check_execution_id

__all__ = ["LocalBus", "LocalSubscription"]


class _Log:
    __slots__ = ("__weakref__", "changed", "events", "last", "successor")

    def __init__(self, retain: int) -> None:
        self.events: collections.deque[SequencedEvent] = collections.deque(maxlen=retain)
        self.last = 0
        self.changed = Wakeup()
        self.successor: _Log | None = None
        """The execution's next log, once this one was forgotten and it published again."""


class LocalBus:
    """The in-process bus (see the module docstring)."""

    def __init__(self, *, retain: int = 10_000, executions: int = 1_000) -> None:
        if retain < 1 or executions < 1:
            raise ValueError("LocalBus keeps at least one event of at least one execution")
        self.retain = retain
        self.executions = executions
        self.forgotten = 0
        """Executions whose log was forgotten to stay within ``executions``."""
        self._logs: collections.OrderedDict[str, _Log] = collections.OrderedDict()
        self._forgotten: weakref.WeakValueDictionary[str, _Log] = weakref.WeakValueDictionary()
        """Forgotten logs a subscriber still reads (and waits on for the next one)."""
        self._open = False

    @property
    def kept(self) -> int:
        """How many executions' logs are kept now (at most ``executions``)."""
        return len(self._logs)

    def _log(self, execution_id: str) -> _Log:
        entry = self._logs.get(execution_id)
        if entry is None:
            entry = self._logs[check_execution_id(execution_id)] = _Log(self.retain)
            before = self._forgotten.pop(execution_id, None)
            if before is not None:  # its subscribers go on in this one
                before.successor = entry
                before.changed.wake()
            while len(self._logs) > self.executions:
                old_id, old = self._logs.popitem(last=False)
                self._forgotten[old_id] = old
                self.forgotten += 1
        return entry

    def publish(self, execution_id: str, events: Sequence[SequencedEvent]) -> None:
        if not self._open:
            raise BusClosed("LocalBus.publish outside its `async with` block")
        entry = self._log(execution_id)
        self._logs.move_to_end(execution_id)
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
        for entry in [*self._logs.values(), *self._forgotten.values()]:
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
        while True:
            entry = self._entry
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
            if entry.successor is not None:  # forgotten (the bus's bound) and published again
                self._entry = entry.successor  # a marker tells what went in between
                continue
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
