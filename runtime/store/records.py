"""What the store keeps: one :class:`StoredExecution` per execution, and its event log.

A record holds what recovery needs and nothing it does not (kandev keeps the same in its
``executors_running`` row, lifecycle/persistence.go ``buildRunningFromExecution``): the ids,
the executor's reattach handle (agentctl: control URL, instance id and port; stdio: process
group id, start time and command), the workspace, the ACP session id, the status, the prompt
generations, the runtime model and mode overrides (in ``metadata``), the agent's
capabilities (a reattached agent is not initialized again), the start time. Never an
environment, a prompt, an attachment or an MCP server of the launch spec: those may hold
credentials and recovery does not need them.

Events are stored as :class:`StoredEvent`: the execution's sequence number and the event's
JSON (msgspec, tagged: :data:`~acpfsm.runtime.events.RuntimeEvent` decodes it).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec

from acpfsm.adapters.transport import InitializeResult

__all__ = [
    "StoreBatch",
    "StoredEvent",
    "StoredExecution",
    "StoredRow",
    "decode_record",
    "encode_record",
]


class StoredExecution(msgspec.Struct, kw_only=True):
    """One execution's row (see the module docstring)."""

    id: str
    session_id: str
    agent_profile_id: str
    executor_id: str
    workspace_path: str
    status: str = "STARTING"
    handle: dict[str, Any] = {}
    """The executor's reattach handle (:meth:`RecoverableExecutor.handle_of`)."""
    acp_session_id: str = ""
    prompt_generation: int = 0
    """The newest prompt generation admitted when the row was written."""
    generation_reserved: int = 0
    """Every generation up to this one may have been sent to the agent: a recovered
    execution numbers its prompts from the next one, so a late completion of an earlier one
    is never taken for a new prompt's."""
    startup_generation: int = 0
    """The last recovery attempt claimed (each attempt takes the next; kandev types.go
    ``beginStartupAttempt``)."""
    mcp_mode: str = ""
    auth_method: str = ""
    permission_policy: str = ""
    metadata: dict[str, Any] = {}
    capabilities: InitializeResult | None = None
    started_at: dt.datetime
    exit_code: int | None = None
    error_message: str = ""
    last_seq: int = 0
    """The sequence number of the newest event logged: read from the log when the store is
    opened (not stored in the row)."""


class StoredEvent(msgspec.Struct, frozen=True):
    """One logged event: its sequence number and its JSON."""

    seq: int
    body: bytes


class StoredRow(msgspec.Struct, frozen=True, kw_only=True):
    """A record as written: encoded when the write was decided (the record itself goes on
    changing), with the columns beside it."""

    id: str
    executor_id: str
    status: str
    acp_session_id: str
    record: bytes

    @classmethod
    def of(cls, record: StoredExecution) -> StoredRow:
        return cls(
            id=record.id,
            executor_id=record.executor_id,
            status=record.status,
            acp_session_id=record.acp_session_id,
            record=encode_record(record),
        )


class StoreBatch(msgspec.Struct, kw_only=True):
    """What one transaction writes: rows upserted, rows deleted (with their event logs), and
    events appended (each execution's log then trimmed to its newest ``keep_events``)."""

    upserts: list[StoredRow] = []
    deletes: list[str] = []
    events: dict[str, list[StoredEvent]] = {}
    keep_events: int = 10_000

    def empty(self) -> bool:
        return not (self.upserts or self.deletes or self.events)


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(StoredExecution)


def encode_record(record: StoredExecution) -> bytes:
    return _encoder.encode(record)


def decode_record(data: bytes | str) -> StoredExecution:
    """The record in ``data``; raises ``msgspec.DecodeError`` / ``ValidationError`` (the
    backends turn them into :class:`~.errors.StoreCorrupt`)."""
    return _decoder.decode(data)
