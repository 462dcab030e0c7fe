"""The store's errors, rooted at :class:`~acpfsm.adapters.errors.AcpfsmError`.

    AcpfsmError
    └── StoreError                   the execution store failed (the message says how)
        ├── StoreLocked              another process holds the store (``holder`` names it)
        ├── StoreCorrupt             the file or the tables are not an acpfsm store
        ├── StoreSchemaError         the schema is newer than this acpfsm, or unknown
        └── StoreUnavailable         the store cannot be written now (retried)
            ├── StoreFull            the disk or the database is full
            └── StoreReadOnly        the file, the file system or the database is read-only

Each backend translates its driver's exceptions (sqlite3's, psycopg's, the OS's) into these
at its boundary; nothing else leaves a store.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from acpfsm.adapters.errors import AcpfsmError

__all__ = [
    "StoreCorrupt",
    "StoreError",
    "StoreFull",
    "StoreLocked",
    "StoreReadOnly",
    "StoreSchemaError",
    "StoreUnavailable",
]


class StoreError(AcpfsmError):
    """The execution store failed."""


class StoreLocked(StoreError):
    """Another process holds the store: ``holder`` is what it wrote about itself (``pid``,
    ``host``, ``since``), empty when it could not be read."""

    holder: dict[str, Any]

    def __init__(self, store: str, holder: Mapping[str, Any]) -> None:
        self.holder = dict(holder)
        who = (
            f"process {holder.get('pid', '?')} on {holder.get('host', '?')} "
            f"(since {holder.get('since', '?')})"
            if holder
            else "another process"
        )
        super().__init__(f"the execution store {store} is held by {who}")


class StoreCorrupt(StoreError):
    """The store's file or tables are damaged or are not an acpfsm store."""


class StoreSchemaError(StoreError):
    """The store's schema version is one this acpfsm does not know (a newer acpfsm wrote it)."""


class StoreUnavailable(StoreError):
    """The store cannot be written now (gone, unreachable, locked for a moment); writes are
    retried until it is back."""


class StoreFull(StoreUnavailable):
    """The disk or the database is full."""


class StoreReadOnly(StoreUnavailable):
    """The store is read-only (the file, its file system, or the database)."""
