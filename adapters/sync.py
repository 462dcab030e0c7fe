"""The runtime's own synchronisation primitives, on anyio's cancel scopes: a one-shot
:class:`Flag` that allocates nothing until waited on, a first-come-first-served
:class:`Mutex` whose free acquisition costs a bool, a re-armable :class:`Wakeup`, and the
unbounded in-order :class:`EventQueue` a carrier hands its events through. Each uses the
running backend's own event class (trio's or asyncio's), looked up once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Generic, Protocol, TypeVar

import anyio
import anyio.lowlevel
import sniffio

__all__ = ["EventQueue", "Flag", "Mutex", "Wakeup", "cancellation_check"]

_T = TypeVar("_T")


def _library() -> str:
    """The running async library's name ("" outside one)."""
    try:
        return sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return ""


def cancellation_check() -> Callable[[], Awaitable[None]]:
    """The running backend's ``checkpoint_if_cancelled`` as a plain function (what
    :func:`anyio.lowlevel.checkpoint_if_cancelled` calls after looking the backend up on every
    call): for a loop that checks at every item of a stream."""
    if _library() == "trio":
        import trio.lowlevel

        return trio.lowlevel.checkpoint_if_cancelled
    return anyio.lowlevel.checkpoint_if_cancelled


class _Event(Protocol):
    """What :class:`Flag`, :class:`Wakeup` and :class:`Mutex` need of an event."""

    def set(self) -> object: ...

    def is_set(self) -> bool: ...

    async def wait(self) -> object: ...


def _event_class() -> Callable[[], _Event]:
    """The running backend's own event class (``trio.Event``, ``asyncio.Event``): what
    :class:`anyio.Event` wraps, without the backend lookup it makes for every instance.
    Waiting on it is cancelled by anyio's cancel scopes as waiting on anyio's is."""
    library = _library()
    if library == "trio":
        import trio

        return trio.Event
    if library == "asyncio":
        import asyncio

        return asyncio.Event
    return anyio.Event


class Flag:
    """A one-shot event like :class:`anyio.Event` (``set``, ``is_set``, ``wait``) that
    allocates nothing until someone waits: most of the runtime's per-prompt flags are set
    before anyone waits on them, or never waited on at all."""

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: _Event | None = None

    def set(self) -> None:
        if not self._set:
            self._set = True
            if self._event is not None:
                self._event.set()

    def is_set(self) -> bool:
        return self._set

    async def wait(self) -> None:
        """Return once set (a checkpoint, as :meth:`anyio.Event.wait` is)."""
        if self._set:
            await anyio.lowlevel.checkpoint()
            return
        if self._event is None:
            self._event = _event_class()()
        await self._event.wait()

    def __repr__(self) -> str:
        return f"<Flag {'set' if self._set else 'unset'}>"


class Mutex:
    """An async mutex for the runtime's own locks: taking a free one costs no scheduler pass
    and no event, only a bool (anyio's ``Lock(fast_acquire=True)`` also takes its backend's
    lock and checks cancellation, which costs more than the runtime's whole step under it).

    With ``check_cancelled`` an acquisition raises in a cancelled caller, as anyio's does;
    without, it takes a free mutex whatever the caller's scopes say (the caller meets its
    cancellation at its next checkpoint). A taken mutex queues its callers first come,
    first served: its release hands it to the first one still waiting (a waiter cancelled
    while it was being handed the mutex hands it on). It is not re-entrant and knows no
    owner: a task that takes it twice waits for itself."""

    __slots__ = ("_check", "_locked", "_waiters")

    def __init__(self, *, check_cancelled: bool = True) -> None:
        self._check = check_cancelled
        self._locked = False
        self._waiters: deque[_Event] = deque()

    def locked(self) -> bool:
        return self._locked

    async def acquire(self) -> None:
        """Take the mutex (held across steps: :meth:`release` gives it back)."""
        await self.__aenter__()

    def release(self) -> None:
        self._release()

    async def __aenter__(self) -> None:
        if self._check:
            await anyio.lowlevel.checkpoint_if_cancelled()
        if not self._locked:  # nobody waits for a free mutex: a release hands it over
            self._locked = True
            return
        handed = _event_class()()
        self._waiters.append(handed)
        try:
            await handed.wait()
        except BaseException:
            if handed.is_set():  # it was ours already: the next one gets it
                self._release()
            else:
                self._waiters.remove(handed)
            raise

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._release()

    def _release(self) -> None:
        if self._waiters:
            self._waiters.popleft().set()  # still locked: the first waiter's now
        else:
            self._locked = False


class Wakeup:
    """Wakes whoever waits at that moment (an event of the running backend, re-armed after
    each wake), allocating an event only while someone waits: most wakes find nobody
    waiting."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event: _Event | None = None

    def wake(self) -> None:
        event = self._event
        if event is not None:
            self._event = None
            event.set()

    async def wait(self) -> None:
        """Return at the next :meth:`wake`."""
        if self._event is None:
            self._event = _event_class()()
        await self._event.wait()


class EventQueue(Generic[_T]):
    """Unbounded single-consumer FIFO; ``close()`` ends iteration after what is queued.

    The consumer drains what is already buffered before it yields: after a wait (which
    yielded) it takes the items that are there one by one, seeing cancellation at every item,
    and yields to the other tasks once every ``batch`` items. A burst of thousands of events
    (an agent's flood) is thus consumed in a few scheduling rounds, not in one round per event,
    which with many executions sharing the event loop made each event wait for all of them.
    A ``put`` wakes the consumer only when it waits: no event is set, nor allocated, per item."""

    def __init__(self, *, batch: int = 64) -> None:
        self.items: deque[_T] = deque()
        self._wakeup = Wakeup()
        self.closed = False
        self._batch = batch
        self._taken = 0
        self._check: Callable[[], Awaitable[None]] | None = None
        self._room: _Event | None = None  # a producer waits for the queue to drain …
        self._low = 0  # … to this many items

    async def wait_for_room(self, low: int, bound: float) -> bool:
        """Wait (at most ``bound`` seconds) until the consumer has taken the queue down to
        ``low`` items, or it is closed: a producer's backpressure. False when the bound
        expired first. One producer waits at a time; the consumer's cost is one attribute
        test per item while nobody waits."""
        if self.closed or len(self.items) <= low:
            return True
        self._low = low
        room = self._room = _event_class()()
        with anyio.move_on_after(bound):
            await room.wait()
        self._room = None
        return room.is_set()

    def _drained(self) -> None:
        room = self._room
        if room is not None and (len(self.items) <= self._low or self.closed):
            self._room = None
            room.set()

    def __len__(self) -> int:
        return len(self.items)

    def put(self, item: _T) -> None:
        self.items.append(item)
        self._wakeup.wake()

    def close(self) -> None:
        self.closed = True
        self._wakeup.wake()
        self._drained()

    async def changed(self) -> None:
        """Wait for the next ``put`` or ``close``."""
        await self._wakeup.wait()

    def take(self) -> _T | None:
        """The next item already queued, without waiting and without a checkpoint; ``None``
        when the queue is empty or ``batch`` items were taken since the consumer last
        yielded (then :meth:`__anext__` waits or yields). A consumer that handles an item
        without yielding takes the next one this way: a burst costs no coroutine per item,
        and it still yields once per ``batch``. It sees no cancellation: after an item whose
        handling yielded, go back to :meth:`__anext__`, which does."""
        if self.items and self._taken < self._batch:
            self._taken += 1
            item = self.items.popleft()
            if self._room is not None:
                self._drained()
            return item
        return None

    def __aiter__(self) -> EventQueue[_T]:
        return self

    async def __anext__(self) -> _T:
        if not self.items:
            while not self.items:
                if self.closed:
                    raise StopAsyncIteration
                await self.changed()
            self._taken = 0  # waiting has yielded
        elif self._taken >= self._batch:
            self._taken = 0
            await anyio.lowlevel.checkpoint()  # a long backlog: let the others run
            if not self.items:  # another consumer took it meanwhile
                return await self.__anext__()
        else:
            check = self._check
            if check is None:
                check = self._check = cancellation_check()
            await check()
        self._taken += 1
        item = self.items.popleft()
        if self._room is not None:
            self._drained()
        return item
