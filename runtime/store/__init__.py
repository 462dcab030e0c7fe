"""Durable executions: the store an app's :class:`~acpfsm.runtime.Runtime` keeps its
executions in, so that a restart of the app loses nothing (``Runtime(store=...)``).

* :class:`ExecutionStore`: the protocol (:mod:`.base`);
* :class:`SqliteStore`: one process, one file, the standard library's sqlite3 (:mod:`.sqlite`);
* :class:`PostgresStore`: several processes and hosts, psycopg 3 (:mod:`.postgres`; the
  ``acpfsm[postgres]`` extra);
* :class:`StoredExecution`, :class:`StoredEvent`: what a store keeps (:mod:`.records`);
* the errors (:mod:`.errors`), rooted at ``AcpfsmError``.

The backends are imported on first use: ``from acpfsm.runtime.store import SqliteStore`` loads
neither psycopg nor the PostgreSQL store, and a Runtime without a store loads none of this
package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import ExecutionStore
from .errors import (
    StoreCorrupt,
    StoreError,
    StoreFull,
    StoreLocked,
    StoreReadOnly,
    StoreSchemaError,
    StoreUnavailable,
)
from .records import StoreBatch, StoredEvent, StoredExecution, StoredRow

if TYPE_CHECKING:
    from .postgres import PostgresStore
    from .sqlite import SqliteStore

__all__ = [
    "ExecutionStore",
    "PostgresStore",
    "SqliteStore",
    "StoreBatch",
    "StoreCorrupt",
    "StoreError",
    "StoreFull",
    "StoreLocked",
    "StoreReadOnly",
    "StoreSchemaError",
    "StoreUnavailable",
    "StoredEvent",
    "StoredExecution",
    "StoredRow",
]

_LAZY = {"SqliteStore": ".sqlite", "PostgresStore": ".postgres"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
