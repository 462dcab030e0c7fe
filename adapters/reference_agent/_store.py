"""Sessions on disk: one JSON-lines file per session, ``<dir>/<sessionId>.jsonl``.

Records (tag ``record``): ``meta`` (first line: id, cwd), ``turn`` (a turn started), ``state`` (mode, model, thinking;
the last one wins) and ``update`` (a ``session/update`` payload exactly as it was sent). A
restarted agent replays the ``update`` records in order on ``session/load``.

File operations are small synchronous appends; a failing disk is logged and the session
carries on in memory. Unreadable lines are skipped on load.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

__all__ = ["SessionState", "SessionStore", "StoredSession", "valid_session_id"]

log = logging.getLogger("acpfsm.reference_agent")

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def valid_session_id(session_id: str) -> bool:
    """Ids that are safe as a file name (no separators, no leading dot)."""
    return _ID.fullmatch(session_id) is not None


class SessionState(msgspec.Struct, rename="camel"):
    mode_id: str
    model_id: str
    thinking: str


class _Meta(msgspec.Struct, tag_field="record", tag="meta", rename="camel"):
    session_id: str
    cwd: str


class _State(msgspec.Struct, tag_field="record", tag="state"):
    state: SessionState


class _Update(msgspec.Struct, tag_field="record", tag="update"):
    update: msgspec.Raw


class _TurnMark(msgspec.Struct, tag_field="record", tag="turn"):
    number: int


_Record = _Meta | _State | _Update | _TurnMark
_decoder = msgspec.json.Decoder(_Record)
_encoder = msgspec.json.Encoder()


@dataclass
class StoredSession:
    session_id: str
    cwd: str
    state: SessionState | None
    updates: list[msgspec.Raw] = field(default_factory=list)
    turns: int = 0


class SessionStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, session_id: str) -> Path:
        return self.directory / f"{session_id}.jsonl"

    def _append(self, session_id: str, record: _Record) -> None:
        line = _encoder.encode(record) + b"\n"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with self._path(session_id).open("ab") as fh:
                fh.write(line)
        except OSError as exc:
            log.warning("cannot persist session %s: %s", session_id, exc)

    def create(self, session_id: str, cwd: str, state: SessionState) -> None:
        self._append(session_id, _Meta(session_id=session_id, cwd=cwd))
        self._append(session_id, _State(state=state))

    def save_state(self, session_id: str, state: SessionState) -> None:
        self._append(session_id, _State(state=state))

    def append_update(self, session_id: str, update: msgspec.Raw) -> None:
        self._append(session_id, _Update(update=update))

    def mark_turn(self, session_id: str, number: int) -> None:
        self._append(session_id, _TurnMark(number=number))

    def load(self, session_id: str) -> StoredSession | None:
        """The stored session, or None when there is none (or the id is not a safe name)."""
        if not valid_session_id(session_id):
            return None
        try:
            data = self._path(session_id).read_bytes()
        except OSError:
            return None
        stored: StoredSession | None = None
        for number, line in enumerate(data.splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = _decoder.decode(line)
            except msgspec.DecodeError as exc:
                log.warning("session %s line %d skipped: %s", session_id, number, exc)
                continue
            if isinstance(record, _Meta):
                stored = StoredSession(session_id=record.session_id, cwd=record.cwd, state=None)
            elif stored is None:
                continue
            elif isinstance(record, _State):
                stored.state = record.state
            elif isinstance(record, _TurnMark):
                stored.turns = max(stored.turns, record.number)
            else:
                stored.updates.append(record.update)
        return stored
