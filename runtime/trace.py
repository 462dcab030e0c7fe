"""The trace: every transition of every chart of every execution, as records.

Schema of one record (one JSON object per line in the JSONL file; documented in
``docs/guides/trace.md`` because ``acpfsm check-trace`` reads it):

=============  ======  ==================================================================
field          type    meaning
=============  ======  ==================================================================
seq            int     1, 2, 3 … in the order transitions fired (per Trace)
time           float   monotonic seconds (the event loop's clock, virtual under tests)
execution_id   str     the execution the chart belongs to
chart          str     ``session_init``, ``start_model_policy``, ``prompt_generation``,
                       ``execution``, ``agent_stream``
generation     int     the prompt generation (``prompt_generation`` charts), else 0
instance       int     distinguishes several instances of one chart in one execution
                       (e.g. a re-run SessionInit); 0 for the first
event          str     the event name (a past-tense fact)
source         str     the state the transition left
target         str     the state it entered (== source for a self-transition)
=============  ======  ==================================================================

The file is created mode ``0600`` (its missing folders ``0700``) whatever the umask.

Memory stays bounded: :attr:`Trace.records` is a ring of the last ``keep`` records (10,000 by
default, about 2 MB; ``keep=0`` keeps none), while the file and every listener in
:attr:`Trace.listeners` get every record. A check of the whole trace reads the file, or
listens from the start (as the pytest plugin's ``--acpfsm-check-traces`` does). Records are
flat data without a garbage-collector header (``gc=False``): making one does not count
towards the next young collection (about ten are made per prompt), and each is 16 bytes
smaller.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO

import msgspec

from acpfsm.adapters.workspace import make_private_dirs, open_private
from acpfsm.statecharts import TransitionObserver, TransitionRecord

from .clock import loop_clock

__all__ = ["DEFAULT_KEEP", "Trace", "TraceRecord"]

DEFAULT_KEEP = 10_000
"""How many records :attr:`Trace.records` keeps unless told (``Retention.trace_records``)."""


class TraceRecord(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    seq: int
    time: float
    execution_id: str
    chart: str
    generation: int
    instance: int
    event: str
    source: str
    target: str


class Trace:
    """Keeps the last ``keep`` records in memory (:attr:`records`, a ring) and, when ``path``
    is given, appends every record to a JSONL file."""

    def __init__(self, path: str | Path | None = None, *, keep: int = DEFAULT_KEEP) -> None:
        if isinstance(keep, bool):  # the flag it once was: keep the default ring, or none
            keep = DEFAULT_KEEP if keep else 0
        if keep < 0:
            raise ValueError(f"Trace(keep=...) is a number of records, not {keep!r}")
        self.records: collections.deque[TraceRecord] = collections.deque(maxlen=keep)
        """The last ``keep`` records, oldest first."""
        self.path = Path(path) if path is not None else None
        self._keep = keep > 0
        self._file: IO[bytes] | None = None
        self._encoder = msgspec.json.Encoder()
        self._seq = 0
        #: Called with every record as it is made (e.g. a live progress display).
        self.listeners: list[Callable[[TraceRecord], None]] = []
        if self.path is not None:
            # private to the user: folders created 0700, the file created 0600
            make_private_dirs(self.path.parent)
            self._file = os.fdopen(open_private(self.path, os.O_WRONLY | os.O_APPEND), "ab")

    def observer(self, execution_id: str, *, instance: int = 0) -> TransitionObserver:
        """The transition observer of one execution's charts: it stamps each record with the
        clock of the event loop it was made in (monotonic seconds outside one)."""
        clock = loop_clock()
        records = self.records

        def observe(record: TransitionRecord) -> None:
            now = clock()  # the loop's clock answers after the loop has ended too
            self._seq += 1
            rec = TraceRecord(
                seq=self._seq,
                time=now,
                execution_id=execution_id,
                chart=record.chart,
                generation=int(record.tags.get("generation", 0)),
                instance=instance,
                event=record.event,
                source=record.source,
                target=record.target,
            )
            if self._keep:
                records.append(rec)
            if self._file is not None:
                self._file.write(self._encoder.encode(rec) + b"\n")
            for listener in self.listeners:
                listener(rec)

        return observe

    @property
    def count(self) -> int:
        """Records made so far (the ``seq`` of the last one)."""
        return self._seq

    @property
    def dropped(self) -> int:
        """Records no longer in :attr:`records` (the ring's oldest, or all with ``keep=0``)."""
        return self._seq - len(self.records)

    def for_execution(self, execution_id: str) -> list[TraceRecord]:
        """The records of ``execution_id`` still in :attr:`records`."""
        return [r for r in self.records if r.execution_id == execution_id]

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
