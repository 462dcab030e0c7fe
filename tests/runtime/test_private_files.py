"""Files the runtime writes are private to the user, whatever the umask: the history (it holds
prompt text) and the trace are created ``0600`` in folders created ``0700``. (Saved
attachments: ``tests/adapters/test_stdio_fs.py``.)"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from acpfsm.runtime.history import HistoryStore
from acpfsm.runtime.trace import Trace


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=[0o000, 0o022, 0o277], ids=["umask-000", "umask-022", "umask-277"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield int(request.param)
    finally:
        os.umask(old)


def test_history_files_are_private(tmp_path: Path, umask: int) -> None:
    store = HistoryStore(tmp_path / "state" / "history")
    store.append_user("session-1", "a prompt with private text")
    store.append_assistant("session-1", "an answer")
    os.umask(0o022)
    assert mode(tmp_path / "state") == mode(tmp_path / "state" / "history") == 0o700
    assert mode(store.path_for("session-1")) == 0o600
    assert [getattr(e, "text", None) for e in store.read("session-1")] == [
        "a prompt with private text",
        "an answer",
    ]


def test_trace_files_are_private(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "traces" / "run" / "trace.jsonl"
    Trace(path).close()
    os.umask(0o022)
    assert mode(tmp_path / "traces") == mode(tmp_path / "traces" / "run") == 0o700
    assert mode(path) == 0o600


def test_existing_folders_and_files_keep_their_modes(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    Trace(shared / "trace.jsonl").close()
    assert mode(shared) == 0o755  # not ours to change
    assert mode(shared / "trace.jsonl") == 0o600
    (shared / "trace.jsonl").chmod(0o640)
    Trace(shared / "trace.jsonl").close()  # appending to an existing file keeps its mode
    assert mode(shared / "trace.jsonl") == 0o640
