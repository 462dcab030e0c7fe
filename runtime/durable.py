"""Durable executions (``Runtime(store=...)``): the rows and event logs of a Runtime's
executions, written to its :class:`~acpfsm.runtime.store.ExecutionStore` off the event loop,
and what an app reads back (the health flag, :meth:`Runtime.subscribe
<acpfsm.runtime.Runtime.subscribe>`).

Theory of operation
-------------------
*When* a row is written is the :class:`~acpfsm.statecharts.DurableRecord` chart's decision
(each execution has one; the coordination table moves it). Its effects are performed here:
``persist_execution`` refreshes the execution's row from the execution's data and queues it
(``flush``: the caller waits until it is committed, bounded by ``flush_timeout``),
``reserve_generation`` makes sure the prompt generation about to be sent is covered by the
stored reservation (blocks of :data:`GENERATION_BLOCK`, flushed: a recovered execution numbers
its prompts past it), ``delete_execution`` queues the row's deletion with its log.

Every event an execution publishes is numbered (``seq``, from 1, continuing across restarts)
and queued by the hub's sink; nothing is written per event. One writer task takes everything
queued, the newest row of each execution and its events, and writes it as one transaction
(:class:`~acpfsm.runtime.store.StoreBatch`), after letting changes gather for
``group_commit`` seconds (5 ms) unless someone waits for a flush. A durable subscriber is handed an event only once
it is committed: what it saw before a crash is in the store, and ``after=`` continues it
without a gap or a double.

A failing write (disk full, read-only, the database gone: a
:class:`~acpfsm.runtime.store.StoreError`) loses nothing: what was queued stays queued, the
writer retries with a growing pause (≤ 2 s), the executions go on. The first failure turns
:attr:`Durability.health` to failing and publishes ``store.write_failed`` to every live
execution; the first success after it publishes ``store.write_resumed``.
"""

from __future__ import annotations

import collections
import datetime as dt
import logging
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import anyio
import anyio.abc
import msgspec

from acpfsm.adapters.events import Unknown
from acpfsm.adapters.executor import RecoverableExecutor
from acpfsm.adapters.sync import Wakeup
from acpfsm.statecharts import ChartMachine, Effect
from acpfsm.statecharts.charts import DURABLE_RECORD
from acpfsm.statecharts.names import DurableRecordEffect

from . import events as le
from .store import ExecutionStore, StoreBatch, StoredEvent, StoredExecution, StoredRow, StoreError

if TYPE_CHECKING:
    from .hub import EventHub
    from .session import ExecutionSession

__all__ = ["GENERATION_BLOCK", "Durability", "DurableSubscription", "ExecutionLog", "StoreHealth"]

log = logging.getLogger("acpfsm.runtime")

GENERATION_BLOCK = 64
"""Prompt generations reserved in the row at once (one flushed write per block)."""
_MAX_BATCH_EVENTS = 4096
_RECENT = 2048
_READ_PAGE = 512

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(le.RuntimeEvent).decode


class StoreHealth(msgspec.Struct, frozen=True, kw_only=True):
    """Whether the execution store is being written (``Runtime.store_health``)."""

    ok: bool = True
    error: str = ""
    """The last failure's message ("" while ok)."""
    kind: str = ""
    """Its type (``StoreUnavailable``, ``StoreReadOnly``, ``StoreFull`` …)."""
    failing_since: dt.datetime | None = None
    failures: int = 0
    """Failed attempts since the last success."""
    pending: int = 0
    """Events and rows waiting to be written."""


class ExecutionLog:
    """One execution's row and event log, as far as this process knows them."""

    def __init__(self, record: StoredExecution) -> None:
        self.record = record
        self.next_seq = record.last_seq + 1
        self.committed = record.last_seq
        self.pending: list[tuple[StoredEvent, le.RuntimeEvent]] = []
        self.recent: collections.deque[le.SequencedEvent] = collections.deque(maxlen=_RECENT)
        self.row_version = 0
        self.row_written = 0
        self.deleted = False
        self.delete_written = False
        self.open = False
        """A live execution appends to it (subscriptions follow it until it closes)."""
        self.changed = Wakeup()
        self.transport_handle: dict[str, Any] = dict(record.handle)

    def append(self, events: Sequence[le.RuntimeEvent]) -> None:
        for event in events:
            try:
                body = _encode(event)
            except (msgspec.EncodeError, TypeError, ValueError, OverflowError, RecursionError):
                event = Unknown(kind=f"unencodable {type(event).__name__}")
                body = _encode(event)
            self.pending.append((StoredEvent(self.next_seq, body), event))
            self.next_seq += 1


class Durability:
    """A Runtime's store, its writer and its executions' logs (see the module docstring)."""

    def __init__(
        self,
        store: ExecutionStore,
        *,
        keep_events: int = 10_000,
        flush_timeout: float = 5.0,
        group_commit: float = 0.005,
    ) -> None:
        self.store = store
        self.keep_events = keep_events
        self.flush_timeout = flush_timeout
        self.group_commit = group_commit
        """How long the writer lets changes gather before a batch nobody waits for (a
        flush is written at once): fewer, larger transactions."""
        self._flushing = 0
        self.logs: dict[str, ExecutionLog] = {}
        self.health = StoreHealth()
        self._hubs: dict[str, EventHub] = {}
        self._version = 0
        self._written = 0
        self._work = Wakeup()
        self._written_changed = Wakeup()
        self._closing = False
        self._scope = anyio.CancelScope()
        self.on_logged: Callable[[str, Sequence[le.SequencedEvent]], None] | None = None
        """Receives each execution's events once they are committed (``Runtime(bus=...)``):
        a process that takes the executions over after a crash numbers its events after the
        last committed one, so nothing on the bus ever has a number given twice."""

    # --- the log of each execution -------------------------------------------------------------

    def log_of(self, record: StoredExecution) -> ExecutionLog:
        entry = self.logs.get(record.id)
        if entry is None:
            entry = self.logs[record.id] = ExecutionLog(record)
        return entry

    def _changed(self) -> None:
        self._version += 1
        self._work.wake()

    def persist(self, entry: ExecutionLog) -> None:
        """Queue the row as it is now."""
        entry.row_version += 1
        self._changed()

    def append(self, entry: ExecutionLog, events: Sequence[le.RuntimeEvent]) -> None:
        if entry.deleted:
            return
        entry.append(events)
        self._changed()

    def publish(self, execution_id: str, event: le.RuntimeEvent) -> None:
        """To the execution's live subscribers and its log (only its log when no session
        runs it)."""
        hub = self._hubs.get(execution_id)
        if hub is not None:
            hub.publish(event)
        elif execution_id in self.logs:
            self.append(self.logs[execution_id], (event,))

    def delete(self, entry: ExecutionLog) -> None:
        """Queue the deletion of the row and its log (the execution was stopped). The events
        it logged last (``agent.stopped``) are written in the same batch, just before, so they
        reach the bus (``on_logged``) like every other: a subscriber in another process sees
        the execution end."""
        entry.deleted = True
        entry.open = False
        entry.changed.wake()
        self._hubs.pop(entry.record.id, None)
        self._changed()

    async def flush(self, bound: float | None = None) -> bool:
        """Wait until everything queued so far is committed (at most ``bound`` seconds, default
        ``flush_timeout``); False when the store did not take it in time."""
        target = self._version
        self._flushing += 1
        self._work.wake()  # the writer may be gathering: write now
        try:
            with anyio.move_on_after(self.flush_timeout if bound is None else bound):
                while self._written < target:
                    await self._written_changed.wait()
        finally:
            self._flushing -= 1
        return self._written >= target

    # --- a live execution -----------------------------------------------------------------------

    def attach(
        self, session: ExecutionSession, entry: ExecutionLog, executor: object
    ) -> ChartMachine:
        """Bind ``session`` to its log: its DurableRecord machine (started in the session's
        context, so the coordination table reaches it), the record's effects, the hub's
        sink. Returns the machine."""
        ctx = session.ctx
        entry.open = True
        entry.deleted = entry.delete_written = False
        recoverable = executor if isinstance(executor, RecoverableExecutor) else None

        def refresh() -> StoredExecution:
            record = entry.record
            record.status = session.status.status
            record.acp_session_id = ctx.acp_session_id or record.acp_session_id
            transport = ctx.transport
            if transport is not None:
                if recoverable is not None and not entry.transport_handle:
                    entry.transport_handle = recoverable.handle_of(transport)
                record.handle = entry.transport_handle
                record.capabilities = transport.capabilities or record.capabilities
            current = session.turns.current
            if current is not None:
                record.prompt_generation = current.number
            record.metadata = dict(ctx.metadata)
            record.exit_code = ctx.exit_code
            record.error_message = ctx.error_message
            return record

        async def persist(effect: Effect, machine: ChartMachine) -> None:
            refresh()
            self.persist(entry)
            if effect.get("flush"):
                await self.flush()

        async def reserve(effect: Effect, machine: ChartMachine) -> None:
            generation = int(effect["generation"])
            record = refresh()
            if generation > record.generation_reserved:
                record.generation_reserved = generation + GENERATION_BLOCK - 1
                self.persist(entry)
                await self.flush()

        def delete(effect: Effect, machine: ChartMachine) -> None:
            self.delete(entry)

        ctx.handle(
            DURABLE_RECORD.chart_name,
            {
                DurableRecordEffect.persist_execution: persist,
                DurableRecordEffect.reserve_generation: reserve,
                DurableRecordEffect.delete_execution: delete,
            },
        )
        ctx.check_handlers((DURABLE_RECORD,))
        self._hubs[ctx.id] = ctx.hub
        ctx.hub.sink = lambda events: self.append(entry, events)
        return ctx.start(DURABLE_RECORD)

    def detach(self, execution_id: str) -> None:
        """The session's hub no longer feeds the log (the Runtime left it running)."""
        hub = self._hubs.pop(execution_id, None)
        if hub is not None:
            hub.sink = None
        entry = self.logs.get(execution_id)
        if entry is not None:
            entry.open = False
            entry.changed.wake()

    def ended(self, execution_id: str) -> None:
        """The session finished: its log takes no more live events."""
        self.detach(execution_id)

    # --- the writer -----------------------------------------------------------------------------

    def _take(self) -> tuple[StoreBatch, list[tuple[ExecutionLog, int, int, bool]], bool]:
        """The next batch, what it took of each log (rows version, events, deletion) and
        whether it took everything queued."""
        batch = StoreBatch(keep_events=self.keep_events)
        taken: list[tuple[ExecutionLog, int, int, bool]] = []
        room = _MAX_BATCH_EVENTS
        complete = True
        for entry in self.logs.values():
            if entry.deleted:
                if not entry.delete_written:
                    if entry.pending:  # inserted before the deletion in the same batch
                        batch.events[entry.record.id] = [e for e, _ in entry.pending]
                    batch.deletes.append(entry.record.id)
                    taken.append((entry, 0, len(entry.pending), True))
                continue
            version = entry.row_version if entry.row_version != entry.row_written else 0
            if version:
                batch.upserts.append(StoredRow.of(entry.record))
            n = min(len(entry.pending), room)
            if n < len(entry.pending):
                complete = False
            if n:
                batch.events[entry.record.id] = [e for e, _ in entry.pending[:n]]
                room -= n
            if version or n:
                taken.append((entry, version, n, False))
        return batch, taken, complete

    def _committed(self, taken: list[tuple[ExecutionLog, int, int, bool]]) -> None:
        for entry, version, n, deleted in taken:
            if n:  # committed: to the bus, in order (also those of a stopped execution)
                done, entry.pending[:n] = entry.pending[:n], []
                entry.committed = done[-1][0].seq
                items = [le.SequencedEvent(e.seq, event) for e, event in done]
                entry.recent.extend(items)
                if self.on_logged is not None:
                    self.on_logged(entry.record.id, items)
            if deleted:
                entry.delete_written = True
                continue
            if entry.deleted:  # stopped while this batch was written: its deletion follows
                continue
            if version:
                entry.row_written = version
            entry.changed.wake()
        for execution_id in [i for i, e in self.logs.items() if e.deleted and e.delete_written]:
            del self.logs[execution_id]

    def _pending(self) -> int:
        return sum(
            len(e.pending) + (e.row_version != e.row_written) + (e.deleted and not e.delete_written)
            for e in self.logs.values()
        )

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """The writer (one task in the Runtime's task group) until :meth:`close`."""
        pause = 0.0
        with self._scope:
            task_status.started()
            while True:
                if self._written >= self._version:
                    if self._closing:
                        return
                    await self._work.wait()
                    continue
                if not (self._flushing or self._closing):
                    with anyio.move_on_after(self.group_commit):  # let changes gather
                        while not (self._flushing or self._closing):
                            await self._work.wait()
                version = self._version
                batch, taken, complete = self._take()
                try:
                    await self.store.write(batch)
                except Exception as exc:
                    if not isinstance(exc, StoreError):
                        log.exception("execution store write raised")
                        exc = StoreError(f"the execution store {self.store.name} failed: {exc!r}")
                    self._failed(exc)
                    pause = min(max(pause * 2, 0.05), 2.0)
                    await anyio.sleep(pause)
                    continue
                pause = 0.0
                self._committed(taken)
                if complete:
                    self._written = version
                    self._written_changed.wake()
                self._succeeded()

    def _failed(self, exc: StoreError) -> None:
        was = self.health
        now = dt.datetime.now(dt.UTC)
        self.health = StoreHealth(
            ok=False,
            error=str(exc),
            kind=type(exc).__name__,
            failing_since=was.failing_since or now,
            failures=was.failures + 1,
            pending=self._pending(),
        )
        if was.ok:
            log.warning("execution store write failed (retrying): %s", exc)
            for execution_id in list(self._hubs):
                self.publish(
                    execution_id,
                    le.StoreWriteFailed(
                        execution_id=execution_id, error=str(exc), kind=type(exc).__name__
                    ),
                )

    def _succeeded(self) -> None:
        was = self.health
        if was.ok:
            return
        since = was.failing_since or dt.datetime.now(dt.UTC)
        failed_for = (dt.datetime.now(dt.UTC) - since).total_seconds()
        self.health = StoreHealth()
        log.warning("execution store written again after %.1f s", failed_for)
        for execution_id in list(self._hubs):
            self.publish(
                execution_id,
                le.StoreWriteResumed(execution_id=execution_id, failed_for=failed_for),
            )

    async def close(self, bound: float) -> None:
        """Write what is queued (at most ``bound`` seconds), stop the writer, close the store."""
        self._closing = True
        self._work.wake()
        with anyio.CancelScope(shield=True):
            if not await self.flush(bound):
                log.warning(
                    "execution store: %d writes not committed at close: %s",
                    self._pending(),
                    self.health.error,
                )
            self._scope.cancel()
            for entry in self.logs.values():
                entry.open = False
                entry.changed.wake()
            try:
                await self.store.close()
            except StoreError as exc:
                log.warning("execution store did not close cleanly: %s", exc)

    def health_now(self) -> StoreHealth:
        return msgspec.structs.replace(self.health, pending=self._pending())

    # --- durable subscriptions ---------------------------------------------------------------

    def subscribe(self, execution_id: str, after: int) -> DurableSubscription:
        return DurableSubscription(self, self.logs[execution_id], after)


class DurableSubscription:
    """An execution's committed events after ``after``, in order (see the module
    docstring); ends when the execution no longer runs here and every event is delivered.
    A gap (events trimmed from the bounded log) is an :class:`EventsTruncated` marker whose
    ``seq`` is the last one missed. A store that cannot be read raises its
    :class:`~acpfsm.runtime.store.StoreError`: subscribe again with the last ``seq`` seen."""

    def __init__(self, durability: Durability, entry: ExecutionLog, after: int) -> None:
        self._durability = durability
        self._entry = entry
        self._next = max(after, 0) + 1
        self._buffer: collections.deque[le.SequencedEvent] = collections.deque()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> le.SequencedEvent:
        entry = self._entry
        while True:
            if self._buffer:
                item = self._buffer.popleft()
                self._next = item.seq + 1
                return item
            if self._next <= entry.committed:
                await self._fill()
                continue
            if entry.deleted or (not entry.open and self._next >= entry.next_seq):
                raise StopAsyncIteration  # nothing more will be logged here, all delivered
            await entry.changed.wait()

    async def _fill(self) -> None:
        entry = self._entry
        recent = entry.recent
        if recent and recent[0].seq <= self._next:
            self._buffer.extend(item for item in recent if item.seq >= self._next)
            return
        execution_id = entry.record.id
        _, rows = await self._durability.store.read_events(execution_id, self._next - 1, _READ_PAGE)
        if rows and rows[0].seq > self._next:
            missed = rows[0].seq - self._next
            marker = le.EventsTruncated(execution_id=execution_id, missed=missed)
            self._buffer.append(le.SequencedEvent(rows[0].seq - 1, marker))
        for row in rows:
            self._buffer.append(le.SequencedEvent(row.seq, _decode(row.body)))
        if not rows:  # trimmed beyond what was committed: only the marker
            missed = entry.committed - self._next + 1
            marker = le.EventsTruncated(execution_id=execution_id, missed=missed)
            self._buffer.append(le.SequencedEvent(entry.committed, marker))

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None
