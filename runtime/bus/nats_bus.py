"""The NATS event bus: every event of an execution published on
``acpfsm.exec.<execution id>.<event type>`` and kept by a JetStream stream, so a subscriber in
any process, started late or restarted, replays from a ``seq`` and then follows live.

nats-py (the official client) is asyncio-only: its connection lives on one asyncio loop, the
caller's own under asyncio, a dedicated loop thread under trio
(:mod:`acpfsm.runtime._aioloop`); every call here goes through that runner.

* **Publishing** never blocks the execution: :meth:`NatsBus.publish` queues the events (at
  most ``max_pending``; beyond that the newest are dropped, counted in :attr:`NatsBus.dropped`
  and logged) and one task sends them in batches as JetStream publishes, in order, each with
  the message id ``<execution id>.<seq>``: a batch that is retried after a failure (server
  restarted, timeout) is stored once (JetStream's duplicate window). An event larger than the
  server takes (``max_payload``) is sent as an ``Unknown`` event of kind
  ``event too large for the bus`` with its ``seq``, so subscribers see no gap.
* **Subscribing** (:meth:`NatsBus.subscribe`) opens an ephemeral pull consumer on the
  execution's subjects and fetches at most ``batch`` events at a time: a slow subscriber
  holds one batch in memory, however far behind it is (JetStream keeps the rest). Events at
  or before the last ``seq`` delivered are skipped (a replay, a forged copy), a message that
  is not an acpfsm event (undecodable, not JSON, too deep) is skipped and counted
  (``rejected``), and events dropped by the stream's limits before the subscriber read them
  become one :class:`~acpfsm.runtime.events.EventsTruncated` marker. A server out of reach
  for longer than ``unavailable_after`` seconds is :class:`~.base.BusUnavailable` (nothing
  hangs): subscribe again with the last ``seq`` seen.

The stream (``stream``, default ``ACPFSM_EXEC``) is created when missing, file-backed,
keeping events ``max_age`` seconds (default 7 days) and at most ``max_bytes`` in all.
Credentials and TLS (``user``/``password``, ``token``, ``nkeys_seed``, ``tls``) are passed to
nats-py as they are, never logged.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Self

import anyio
import anyio.abc
import msgspec
import nats
import nats.errors
import nats.js
import nats.js.api
import nats.js.errors

from acpfsm.adapters.events import Unknown
from acpfsm.adapters.sync import Wakeup

from .._aioloop import AsyncioLoopThread, DirectRunner, asyncio_runner
from ..events import EventsTruncated, SequencedEvent
from .base import (
    SUBJECT_PREFIX,
    BusClosed,
    BusError,
    BusUnavailable,
    check_execution_id,
    decode_event,
    encode_event,
    event_subject,
    execution_subjects,
)

__all__ = ["NatsBus", "NatsSubscription"]

log = logging.getLogger("acpfsm.bus")

_HEADROOM = 512  # the headers and the subject beside a message's body


class NatsBus:
    """An :class:`~.base.EventBus` on NATS JetStream (see the module docstring).

    ``servers``: one URL or several (``nats://127.0.0.1:4222``); ``connect`` passes further
    options to :func:`nats.connect` as they are (``user``, ``password``, ``token``,
    ``nkeys_seed``, ``tls``, ``tls_hostname`` …)."""

    def __init__(
        self,
        servers: str | Sequence[str],
        *,
        stream: str = "ACPFSM_EXEC",
        prefix: str = SUBJECT_PREFIX,
        max_age: float = 7 * 24 * 3600.0,
        max_bytes: int = -1,
        batch: int = 256,
        max_pending: int = 100_000,
        request_timeout: float = 5.0,
        unavailable_after: float = 5.0,
        linger: float = 0.005,
        connect: Mapping[str, Any] | None = None,
    ) -> None:
        self.servers = [servers] if isinstance(servers, str) else list(servers)
        self.stream = stream
        self.prefix = prefix
        self.max_age = max_age
        self.max_bytes = max_bytes
        self.batch = batch
        self.max_pending = max_pending
        self.request_timeout = request_timeout
        self.unavailable_after = unavailable_after
        self.linger = linger
        """How long events gather before a batch is sent (fewer, larger batches: a burst of
        an agent's chunks costs one trip to the loop and to the server, not one each)."""
        self._connect = dict(connect or {})
        self.dropped = 0
        """Events not published because more than ``max_pending`` were waiting."""
        self.published = 0
        self._pending: collections.deque[tuple[str, SequencedEvent]] = collections.deque()
        self._work = Wakeup()
        self._idle = Wakeup()
        self._runner: AsyncioLoopThread | DirectRunner | None = None
        self._nc: Any = None
        self._js: Any = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._closing = False
        self._disconnected_at: float | None = None
        self.max_payload = 1 << 20

    # --- open and close ------------------------------------------------------------------

    @property
    def runner(self) -> AsyncioLoopThread | DirectRunner:
        if self._runner is None:
            raise BusClosed("NatsBus used outside its `async with` block")
        return self._runner

    @property
    def connected(self) -> bool:
        return self._nc is not None and bool(self._nc.is_connected)

    def unavailable_for(self) -> float:
        """Seconds the connection has been down (0 while connected)."""
        since = self._disconnected_at
        if self._nc is None or self._nc.is_closed:
            return float("inf")
        return 0.0 if since is None else time.monotonic() - since

    async def __aenter__(self) -> Self:
        runner = asyncio_runner("acpfsm-nats")
        await runner.__aenter__()
        self._runner = runner
        try:
            self._nc = await runner.run(self._open)
        except BaseException:
            self._runner = None
            with anyio.CancelScope(shield=True):
                await runner.__aexit__(None, None, None)
            raise
        self.max_payload = int(self._nc.max_payload)
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._publisher)
        return self

    async def _open(self) -> Any:
        """On the asyncio loop: connect, and create the stream when it is missing."""

        async def disconnected() -> None:
            if self._disconnected_at is None:
                self._disconnected_at = time.monotonic()
            _forget_unwritten(self._nc)

        async def reconnected() -> None:
            self._disconnected_at = None

        async def error(exc: Exception) -> None:
            log.debug("nats: %s", type(exc).__name__)  # never the options (credentials)

        options: dict[str, Any] = {
            "connect_timeout": max(1, int(self.request_timeout)),
            "reconnect_time_wait": 0.2,
            "max_reconnect_attempts": -1,
            "allow_reconnect": True,
            "error_cb": error,
            "disconnected_cb": disconnected,
            "reconnected_cb": reconnected,
            "pending_size": 0,  # nothing is queued while disconnected (see _forget_unwritten)
        }
        options.update(self._connect)
        try:
            async with asyncio.timeout(self.request_timeout):  # nats-py retries forever
                nc = await nats.connect(self.servers, **options)
        except (TimeoutError, OSError, nats.errors.Error) as exc:
            raise BusUnavailable(
                f"NATS at {', '.join(self.servers)} could not be reached: {type(exc).__name__}"
            ) from None
        try:
            js = nc.jetstream(timeout=self.request_timeout)
            config = nats.js.api.StreamConfig(
                name=self.stream,
                subjects=[f"{self.prefix}.>"],
                storage=nats.js.api.StorageType.FILE,
                max_age=self.max_age,
                max_bytes=self.max_bytes,
            )
            try:
                await js.stream_info(self.stream)
            except nats.js.errors.NotFoundError:
                await js.add_stream(config)
        except (TimeoutError, nats.errors.Error) as exc:
            await nc.close()
            raise BusError(f"the JetStream stream {self.stream} is not available: {exc}") from None
        self._js = js
        return nc

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._closing = True
        self._work.wake()
        tg, self._tg = self._tg, None
        if tg is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self.request_timeout):
                while self._pending and self.connected:
                    await self._idle.wait()
            if self._pending:
                log.warning("nats bus: %d events not published at close", len(self._pending))
            tg.cancel_scope.cancel()
            await tg.__aexit__(None, None, None)
        runner, self._runner = self._runner, None
        if runner is not None:
            with anyio.CancelScope(shield=True):
                with contextlib.suppress(Exception):
                    await runner.run(_close, self._nc)
                await runner.__aexit__(None, None, None)

    # --- publishing ----------------------------------------------------------------------

    def publish(self, execution_id: str, events: Sequence[SequencedEvent]) -> None:
        if self._runner is None:
            raise BusClosed("NatsBus.publish outside its `async with` block")
        check_execution_id(execution_id)
        room = self.max_pending - len(self._pending)
        if room < len(events):
            if self.dropped == 0 or room > 0:
                log.warning("nats bus: more than %d events waiting; dropping", self.max_pending)
            self.dropped += len(events) - max(room, 0)
            events = events[: max(room, 0)]
        self._pending.extend((execution_id, item) for item in events)
        self._work.wake()

    def _message(self, execution_id: str, item: SequencedEvent) -> tuple[str, bytes, str]:
        subject = event_subject(execution_id, item.event, self.prefix)
        try:
            body = encode_event(item)
        except (msgspec.EncodeError, TypeError, ValueError, OverflowError, RecursionError):
            body = b""
        if not body or len(body) + len(subject) + _HEADROOM > self.max_payload:
            kind = "event too large for the bus" if body else "unencodable event"
            stand_in = Unknown(kind=kind, payload={"type": subject.rsplit(".", 1)[-1]})
            item = SequencedEvent(item.seq, stand_in)
            subject = event_subject(execution_id, stand_in, self.prefix)
            body = encode_event(item)
        return subject, body, f"{execution_id}.{item.seq}"

    async def _publisher(self) -> None:
        pause = 0.0
        while True:
            if not self._pending:
                self._idle.wake()
                await self._work.wait()
                if self.linger and not self._closing:
                    await anyio.sleep(self.linger)
                continue
            taken = [self._pending[i] for i in range(min(self.batch, len(self._pending)))]
            messages = [self._message(execution_id, item) for execution_id, item in taken]
            try:
                await self.runner.run(
                    _publish_batch, self._nc, messages, self.stream, self.request_timeout
                )
            except Exception as exc:  # noqa: BLE001 retried: message ids make a retry store once
                pause = min(max(pause * 2, 0.05), 1.0)
                log.debug("nats bus: publish failed (%s); retrying", type(exc).__name__)
                await anyio.sleep(pause)
                continue
            pause = 0.0
            for _ in taken:
                self._pending.popleft()
            self.published += len(taken)

    # --- subscribing ---------------------------------------------------------------------

    def subscribe(self, execution_id: str, *, after: int = 0) -> NatsSubscription:
        if self._runner is None:
            raise BusClosed("NatsBus.subscribe outside its `async with` block")
        return NatsSubscription(self, check_execution_id(execution_id), after)


def _forget_unwritten(nc: Any) -> None:
    """On a lost connection: drop what the client had queued and not yet written.

    nats-py keeps such commands and writes them on the next connection, while those written
    to the dead socket are gone: of one batch, the tail would be stored and the head (sent
    again by the publisher's retry) after it, out of order, and a subscriber would take the
    head for events the stream dropped. Dropped here (and with ``pending_size=0`` nothing is
    queued while disconnected), whatever was sent before the loss is either stored or gone,
    and the publisher's retry sends the rest in order. A request or reply lost this way is a
    request lost in the socket: its caller's bound and retry cover it."""
    if nc is not None and isinstance(getattr(nc, "_pending", None), list):
        nc._pending = []
        nc._pending_data_size = 0


async def _close(nc: Any) -> None:
    if nc is not None and not nc.is_closed:
        await asyncio.wait_for(nc.close(), 5.0)


async def _publish_batch(
    nc: Any, messages: list[tuple[str, bytes, str]], stream: str, bound: float
) -> None:
    """On the asyncio loop: publish in order, then wait for every acknowledgement (those
    not come within ``bound`` seconds are abandoned: the batch is retried).

    JetStream publishes by hand: each message is a core publish with the headers JetStream
    reads (``Nats-Msg-Id``, ``Nats-Expected-Stream``) and a reply subject in one inbox of the
    batch, whose acknowledgements are counted as they come (an error, or the server's "no
    responders" status, fails the batch). nats-py's ``publish_async`` costs about four times
    the CPU per message (a future, a token and a parsed acknowledgement each)."""
    loop = asyncio.get_running_loop()
    acked = loop.create_future()
    left = len(messages)
    inbox = nc.new_inbox()

    async def ack(msg: Any) -> None:
        nonlocal left
        data = msg.data
        if acked.done():
            return
        if not _stored(data):  # no stream took it, or JetStream refused it
            acked.set_exception(BusError(f"JetStream did not store an event: {data[:200]!r}"))
            return
        left -= 1
        if left == 0:
            acked.set_result(None)

    sub = await nc.subscribe(f"{inbox}.*", cb=ack)
    try:
        async with asyncio.timeout(bound):
            for i, (subject, body, msg_id) in enumerate(messages):
                headers = {"Nats-Msg-Id": msg_id, "Nats-Expected-Stream": stream}
                await nc.publish(subject, body, reply=f"{inbox}.{i}", headers=headers)
            if messages:
                await acked
    finally:
        if not acked.done():
            acked.cancel()
        elif not acked.cancelled():
            acked.exception()  # retrieved, whether or not it was awaited
        with contextlib.suppress(nats.errors.Error, OSError):
            await sub.unsubscribe()


class _PubAck(msgspec.Struct):
    """What JetStream answers a publish (the fields read here)."""

    error: dict[str, Any] | None = None


_decode_ack = msgspec.json.Decoder(_PubAck).decode


def _stored(data: bytes) -> bool:
    """Whether an acknowledgement says the stream stored the message (an empty one is the
    server's "no responders": no stream took it)."""
    try:
        return bool(data) and _decode_ack(data).error is None
    except msgspec.DecodeError:
        return False


async def _start_of(js: Any, stream: str, subject: str, wanted: int, bound: float) -> int:
    """On the asyncio loop: the stream sequence to read an execution's events from so that
    the first is its event ``wanted`` (or the first after it the stream still has); 0 to read
    them all. A binary search over the stream, one message lookup a step (an execution's
    events are stored in ``seq`` order), so a subscriber that resumes late in a long
    execution does not read its whole history again. Anything unexpected (a message that is
    not an event, a lookup that fails): 0, the full replay, which skips what was seen."""

    async def seq_at(position: int | None) -> tuple[int, int]:
        if position is None:
            found = await js.get_msg(stream, subject=subject)  # the execution's last
        else:
            found = await js.get_msg(stream, seq=position, subject=subject, next=True)
        return int(found.seq), decode_event(found.data or b"").seq

    try:
        async with asyncio.timeout(bound):
            last_position, last_seq = await seq_at(None)
            if last_seq < wanted:
                return last_position + 1  # all it has is older: what comes next
            low, high = 1, last_position  # the answer is in [low, high]
            while low < high:
                middle = (low + high) // 2
                position, seq = await seq_at(middle)
                if seq >= wanted:
                    high = min(middle, position)
                else:
                    low = position + 1
            return low
    except (TimeoutError, nats.errors.Error, msgspec.DecodeError, RecursionError):
        return 0


async def _pull(js: Any, subject: str, stream: str, inactive: float, start: int) -> Any:
    config = nats.js.api.ConsumerConfig(
        deliver_policy=(
            nats.js.api.DeliverPolicy.BY_START_SEQUENCE if start else nats.js.api.DeliverPolicy.ALL
        ),
        opt_start_seq=start or None,
        ack_policy=nats.js.api.AckPolicy.NONE,
        inactive_threshold=inactive,
        mem_storage=True,
    )
    return await js.pull_subscribe(subject, stream=stream, config=config)


async def _fetch(psub: Any, batch: int, wait: float) -> list[bytes]:
    try:
        messages = await psub.fetch(batch, timeout=wait)
    except nats.errors.TimeoutError:
        return []
    return [m.data for m in messages]


async def _unsubscribe(psub: Any) -> None:
    await asyncio.wait_for(psub.unsubscribe(), 2.0)


class NatsSubscription:
    """One execution's events from the bus (see :class:`NatsBus`); an async iterator used in
    ``async with``. ``rejected`` counts the messages skipped as not acpfsm events."""

    def __init__(self, bus: NatsBus, execution_id: str, after: int) -> None:
        self._bus = bus
        self.execution_id = execution_id
        self._next = max(after, 0) + 1
        self._buffer: collections.deque[bytes] = collections.deque()
        self._psub: Any = None
        self.rejected = 0
        self.skipped = 0
        """Events read and passed over as at or before the last ``seq`` delivered (a replay,
        a forged copy); a subscriber resuming after a ``seq`` starts at it, not before."""

    @property
    def buffered(self) -> int:
        """Messages fetched and not yet delivered (at most the bus's ``batch``)."""
        return len(self._buffer)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SequencedEvent:
        while True:
            while self._buffer:
                body = self._buffer.popleft()
                try:
                    item = decode_event(body)
                except (msgspec.DecodeError, RecursionError):
                    self.rejected += 1
                    log.warning("nats bus: a message on %s is not an event", self.execution_id)
                    continue
                if item.seq < self._next:
                    self.skipped += 1
                    continue  # delivered already
                if item.seq > self._next:  # the stream's limits dropped some
                    missed = item.seq - self._next
                    self._buffer.appendleft(body)
                    self._next = item.seq
                    marker = EventsTruncated(execution_id=self.execution_id, missed=missed)
                    return SequencedEvent(item.seq - 1, marker)
                self._next = item.seq + 1
                return item
            await self._fill()

    async def _fill(self) -> None:
        bus = self._bus
        if bus._closing or bus._runner is None:
            raise StopAsyncIteration
        down = bus.unavailable_for()
        if down > bus.unavailable_after:
            await self._drop()
            raise BusUnavailable(
                f"NATS has been out of reach for {min(down, 1e9):.1f} s "
                f"(subscribe again after seq {self._next - 1})",
                execution_id=self.execution_id,
            )
        wait = max(0.05, min(1.0, bus.unavailable_after / 2))
        try:
            if self._psub is None:
                subject = execution_subjects(self.execution_id, bus.prefix)
                start = 0
                if self._next > 1:
                    start = await bus.runner.run(
                        _start_of, bus._js, bus.stream, subject, self._next, bus.request_timeout
                    )
                self._psub = await bus.runner.run(
                    _pull,
                    bus._js,
                    subject,
                    bus.stream,
                    max(30.0, bus.unavailable_after * 4),
                    start,
                )
            self._buffer.extend(await bus.runner.run(_fetch, self._psub, bus.batch, wait))
        except (TimeoutError, nats.errors.Error, OSError) as exc:
            # the consumer is gone (server restarted, idle too long) or the request failed:
            # a new consumer replays from the start, the seqs delivered are skipped
            log.debug("nats bus: fetch failed (%s)", type(exc).__name__)
            await self._drop()
            await anyio.sleep(wait)

    async def _drop(self) -> None:
        psub, self._psub = self._psub, None
        if psub is not None and self._bus._runner is not None:
            with contextlib.suppress(Exception):
                await self._bus.runner.run(_unsubscribe, psub)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with anyio.CancelScope(shield=True):
            await self._drop()
