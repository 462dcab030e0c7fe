"""Finding a stdio agent again after its app died (:mod:`acpfsm.adapters.acp.orphans`), on real
processes: a stored process group is ended only while its leader is the very process that was
stored (its start time) and runs the stored command; a pid that now belongs to another process,
or runs another command, is never signalled. A process carrying the execution id (started
before its row recorded it) is found and ended too."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from acpfsm.adapters.acp.orphans import EXECUTION_ENV, end_group, group_handle, probe_group

pytestmark = pytest.mark.both_backends


@contextmanager
def _group(argv: list[str], env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """A process group of its own, as the stdio executor starts an agent; reaped at the end."""
    proc = subprocess.Popen(argv, start_new_session=True, env={**os.environ, **(env or {})})
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
        proc.wait()


def _alive(proc: subprocess.Popen[bytes]) -> bool:
    return proc.poll() is None


def _members(pgid: int) -> list[int]:
    """The live processes of group ``pgid``."""
    out = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            out.append(int(entry.name))
    return out


def _handle(proc: subprocess.Popen[bytes], argv: list[str]) -> dict[str, Any]:
    return group_handle(proc.pid, os.getpgid(proc.pid), argv)


async def test_the_stored_agent_is_found_and_its_whole_group_ended() -> None:
    argv = ["sh", "-c", "sleep 301 & wait"]  # a leader and a helper in its group
    with _group(argv) as proc:
        handle = _handle(proc, argv)
        running, reason = probe_group(handle)
        assert running, reason
        assert reason == f"the agent process {proc.pid} still runs with nobody at its pipes"
        done = await end_group(handle, grace=5.0)
        assert done.startswith(f"ended the orphaned agent process group {proc.pid} ("), done
        proc.wait(timeout=10)
        assert not probe_group(handle)[0]
        assert _members(proc.pid) == [], "a helper of the group was left running"


async def test_a_process_running_another_command_is_never_signalled() -> None:
    with _group(["sleep", "302"]) as proc:
        handle = _handle(proc, ["the-agent", "--acp"])  # what the store says ran there
        assert probe_group(handle) == (
            False,
            f"pid {proc.pid} runs another command (the agent ended)",
        )
        assert await end_group(handle, grace=0.1) == "its processes had ended meanwhile"
        assert _alive(proc)


async def test_a_pid_that_now_belongs_to_another_process_is_never_signalled() -> None:
    argv = ["sleep", "303"]
    with _group(argv) as proc:
        handle = {**_handle(proc, argv), "start_ticks": _handle(proc, argv)["start_ticks"] - 1}
        assert probe_group(handle) == (
            False,
            f"pid {proc.pid} now belongs to another process (the agent ended)",
        )
        assert await end_group(handle, grace=0.1) == "its processes had ended meanwhile"
        assert _alive(proc)


async def test_an_agent_started_before_its_row_recorded_it_is_found_by_its_id() -> None:
    execution_id = f"orphan-{os.getpid()}"
    with _group(["sleep", "304"], {EXECUTION_ENV: execution_id}) as proc:
        nothing: dict[str, Any] = {}  # the app died before the row recorded the process
        assert probe_group(nothing) == (
            False,
            "no agent process was recorded (the app died before it started)",
        )
        running, reason = probe_group(nothing, execution_id)
        assert running and str(proc.pid) in reason, reason
        done = await end_group(nothing, execution_id, grace=5.0)
        assert done.startswith("ended the orphaned agent process group"), done
        proc.wait(timeout=10)
        assert not probe_group(nothing, execution_id)[0]
