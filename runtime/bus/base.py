"""The event bus seam: what a Runtime publishes its executions' events to, and what a
subscriber in any process reads them from.

Every event of an execution is a :class:`~acpfsm.runtime.events.SequencedEvent`: ``seq``
numbers the execution's events from 1, in order (with an execution store, the same numbers as
its durable log, continuing across restarts). A bus keeps them, so a subscriber started late,
or restarted, asks for the events after the last ``seq`` it saw and then follows the live
ones, each once and in order.

On the wire (:class:`~acpfsm.runtime.bus.NatsBus`) an event is published on the subject
``acpfsm.exec.<execution id>.<event type>`` (``acpfsm.exec.3f2….agent.ready``) as the msgspec
JSON of its :class:`SequencedEvent` (``{"seq": 7, "event": {"type": "agent.ready", …}}``).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import AsyncIterator, Callable, Sequence
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

import msgspec

from acpfsm.adapters.errors import AcpfsmError

from ..events import RuntimeEvent, SequencedEvent

__all__ = [
    "SUBJECT_PREFIX",
    "BusClosed",
    "BusError",
    "BusSubscription",
    "BusUnavailable",
    "EventBus",
    "bus_feed",
    "check_execution_id",
    "decode_event",
    "encode_event",
    "event_subject",
    "event_type",
    "execution_subjects",
    "numbered_feed",
]

SUBJECT_PREFIX = "acpfsm.exec"

_ID = re.compile(r"[A-Za-z0-9_-]{1,200}")
_encode = msgspec.json.Encoder().encode


@functools.cache
def _decoder() -> msgspec.json.Decoder[SequencedEvent]:
    """The decoder of the event union, built on first use: building it resolves every event
    type's annotations (~4 ms at import for a program that never reads a bus)."""
    return msgspec.json.Decoder(SequencedEvent)


class BusError(AcpfsmError):
    """The event bus could not do what was asked (the message says why)."""


class BusUnavailable(BusError):
    """The bus's server could not be reached within the bound (not connected, or the
    connection was lost and did not come back in time): subscribe again with the last
    ``seq`` seen once it is back."""


class BusClosed(BusError):
    """The bus was used outside its ``async with`` block."""


def event_type(event: RuntimeEvent) -> str:
    """The event's type tag (``agent.ready``, ``message_chunk`` …)."""
    return str(type(event).__struct_config__.tag)


def check_execution_id(execution_id: str) -> str:
    """``execution_id`` when it can name a subject (letters, digits, ``-``, ``_``);
    :class:`BusError` otherwise."""
    if not _ID.fullmatch(execution_id):
        raise BusError(
            f"execution id {execution_id[:80]!r} cannot name a bus subject "
            "(letters, digits, '-' and '_' only)",
            execution_id=execution_id[:80],
        )
    return execution_id


def event_subject(execution_id: str, event: RuntimeEvent, prefix: str = SUBJECT_PREFIX) -> str:
    """``<prefix>.<execution id>.<event type>``."""
    return f"{prefix}.{check_execution_id(execution_id)}.{event_type(event)}"


def execution_subjects(execution_id: str, prefix: str = SUBJECT_PREFIX) -> str:
    """The wildcard subject of every event of one execution."""
    return f"{prefix}.{check_execution_id(execution_id)}.>"


def encode_event(item: SequencedEvent) -> bytes:
    return _encode(item)


def decode_event(body: bytes) -> SequencedEvent:
    """The event in ``body``; :class:`msgspec.DecodeError` (a ValueError) when it is none."""
    return _decoder().decode(body)


@runtime_checkable
class BusSubscription(Protocol):
    """One execution's events after a ``seq``, then the live ones, each once and in order;
    an async iterator, used in ``async with`` (leaving it releases what it holds). It
    follows until it is closed: the caller ends it (``break``, leaving the block)."""

    def __aiter__(self) -> AsyncIterator[SequencedEvent]: ...

    async def __anext__(self) -> SequencedEvent: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


@runtime_checkable
class EventBus(Protocol):
    """Where a Runtime publishes its executions' events (``Runtime(bus=...)``), and where
    any process subscribes to them. Used in ``async with`` (by the app, around the
    Runtime)."""

    def publish(self, execution_id: str, events: Sequence[SequencedEvent]) -> None:
        """Hand ``events`` (in ``seq`` order) to the bus; never blocks the caller."""
        ...

    def subscribe(self, execution_id: str, *, after: int = 0) -> BusSubscription:
        """The execution's events with ``seq > after``, then the live ones."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


_log = logging.getLogger("acpfsm.bus")


def bus_feed(bus: EventBus) -> Callable[[str, Sequence[SequencedEvent]], None]:
    """``bus.publish``, never raising into the execution that publishes: a bus that refuses
    events (closed) is logged once."""
    failed = False

    def feed(execution_id: str, events: Sequence[SequencedEvent]) -> None:
        nonlocal failed
        try:
            bus.publish(execution_id, events)
        except BusError as exc:
            if not failed:
                failed = True
                _log.warning("the event bus refused events of %s: %s", execution_id, exc)

    return feed


def numbered_feed(
    bus: EventBus, execution_id: str, last_seq: int = 0
) -> Callable[[Sequence[RuntimeEvent]], None]:
    """A hub's tap (a Runtime without a store): numbers the execution's events from
    ``last_seq + 1`` and feeds them to ``bus``."""
    feed = bus_feed(bus)
    seq = last_seq

    def tap(events: Sequence[RuntimeEvent]) -> None:
        nonlocal seq
        first = seq + 1
        seq += len(events)
        feed(execution_id, [SequencedEvent(first + i, event) for i, event in enumerate(events)])

    return tap
