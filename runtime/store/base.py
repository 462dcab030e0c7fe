"""The :class:`ExecutionStore` protocol: what the runtime asks of a store backend.

A store is opened once by the :class:`~acpfsm.runtime.Runtime` that uses it (``async with
Runtime(store=...)``) and closed when it leaves. Every method is a coroutine that never
blocks the event loop; every failure is a :class:`~.errors.StoreError`.

* :meth:`~ExecutionStore.open` takes the store for this process (a second process is refused
  with :class:`~.errors.StoreLocked` naming the holder), checks and applies the schema's
  migrations, and returns every stored execution (each with the sequence number of its newest
  event).
* :meth:`~ExecutionStore.write` applies one :class:`~.records.StoreBatch` in one transaction:
  all of it or none of it.
* :meth:`~ExecutionStore.read_events` reads an execution's logged events after a sequence
  number, in order, and the oldest sequence number still kept.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .records import StoreBatch, StoredEvent, StoredExecution

__all__ = ["ExecutionStore"]


@runtime_checkable
class ExecutionStore(Protocol):
    """See the module docstring."""

    @property
    def name(self) -> str:
        """What the store is, for messages (``sqlite:/path/executions.db`` …)."""
        ...

    async def open(self) -> list[StoredExecution]: ...

    async def write(self, batch: StoreBatch) -> None: ...

    async def read_events(
        self, execution_id: str, after: int, limit: int
    ) -> tuple[int, list[StoredEvent]]:
        """Up to ``limit`` events with ``seq > after``, oldest first, and the oldest ``seq``
        kept for the execution (0 when it has none)."""
        ...

    async def close(self) -> None: ...
