"""The store's schema, as numbered migrations checked and applied when a store opens.

Each :class:`Migration` has the statements of both backends. A store records the version it
reached (``acpfsm_schema``); at open it applies, in order and each in its own transaction,
every migration above that version, and refuses (:class:`~.errors.StoreSchemaError`) a store
whose version is above :data:`LATEST` (a newer acpfsm wrote it: writing to it could lose what
that version keeps).

Tables (the PostgreSQL ones carry a ``namespace`` column: several apps may share a database,
each recovers its own executions):

* ``executions``: one row per execution (the record, and beside it the columns an operator
  reads: executor, status, ACP session id);
* ``events``: the event log, ``(execution, seq) → the event's JSON``, bounded per execution;
* ``holders`` (PostgreSQL): who holds a namespace (pid, host, since): what a second process
  is told when it is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import StoreSchemaError

__all__ = ["LATEST", "MIGRATIONS", "Migration", "pending"]


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    what: str
    sqlite: tuple[str, ...]
    postgres: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "executions and their event logs",
        sqlite=(
            """CREATE TABLE executions (
                id TEXT PRIMARY KEY,
                executor_id TEXT NOT NULL,
                status TEXT NOT NULL,
                acp_session_id TEXT NOT NULL,
                record BLOB NOT NULL,
                updated_at REAL NOT NULL
            )""",
            """CREATE TABLE events (
                execution_id TEXT NOT NULL,
                seq INTEGER NOT NULL,
                body BLOB NOT NULL,
                PRIMARY KEY (execution_id, seq)
            ) WITHOUT ROWID""",
        ),
        postgres=(
            """CREATE TABLE acpfsm_executions (
                namespace TEXT NOT NULL,
                id TEXT NOT NULL,
                executor_id TEXT NOT NULL,
                status TEXT NOT NULL,
                acp_session_id TEXT NOT NULL,
                record BYTEA NOT NULL,
                updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
                PRIMARY KEY (namespace, id)
            )""",
            """CREATE TABLE acpfsm_events (
                namespace TEXT NOT NULL,
                execution_id TEXT NOT NULL,
                seq BIGINT NOT NULL,
                body BYTEA NOT NULL,
                PRIMARY KEY (namespace, execution_id, seq)
            )""",
            """CREATE TABLE acpfsm_holders (
                namespace TEXT PRIMARY KEY,
                pid INTEGER NOT NULL,
                host TEXT NOT NULL,
                since TIMESTAMPTZ NOT NULL
            )""",
        ),
    ),
)

LATEST = MIGRATIONS[-1].version


def pending(current: int, store: str) -> tuple[Migration, ...]:
    """The migrations a store at version ``current`` still needs, in order."""
    if current > LATEST:
        raise StoreSchemaError(
            f"the execution store {store} has schema version {current}; this acpfsm knows "
            f"versions up to {LATEST} (a newer acpfsm wrote it): refusing to open it"
        )
    if current < 0:
        raise StoreSchemaError(f"the execution store {store} has no valid schema version")
    return tuple(m for m in MIGRATIONS if m.version > current)
