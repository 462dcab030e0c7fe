"""Finding a stdio agent again after the app that started it died, and ending it.

A stdio agent cannot outlive its parent's pipes in any useful way: nobody can write to its
stdin or read its stdout again. Most agents exit on stdin EOF; one that does not (codex-acp's
wrapper, an agent stuck in a tool) is left running with no owner. The stdio executor stores
the agent's process group id, its leader's start time (``/proc/<pid>/stat`` field 22, with
the boot id, so a reused pid or a reboot is never taken for it) and its command; at the next
start :func:`probe_group` says whether that very process still runs that command, and
:func:`end_group` ends its whole group (``SIGTERM``, then ``SIGKILL``), so nothing is
orphaned. Linux only (``/proc``); elsewhere the agent is reported gone.

The app may die after starting an agent and before its row records the process (a few
milliseconds). Every agent therefore carries its execution id in its environment
(:data:`EXECUTION_ENV`); when the stored process is not running, the processes carrying the
id are looked for (:func:`marked`) and ended too.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio

__all__ = [
    "EXECUTION_ENV",
    "boot_id",
    "end_group",
    "group_handle",
    "marked",
    "probe_group",
    "start_ticks",
]

_PROC = Path("/proc")
EXECUTION_ENV = "ACPFSM_EXECUTION_ID"
"""Set in every stdio agent's environment to its execution id."""


def marked(execution_id: str) -> list[int]:
    """Live processes whose environment carries ``execution_id`` (:data:`EXECUTION_ENV`)."""
    needle = f"{EXECUTION_ENV}={execution_id}".encode()
    out: list[int] = []
    try:
        entries = list(_PROC.iterdir())
    except OSError:
        return out
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and _state(int(entry.name)) not in ("", "Z", "X"):
            out.append(int(entry.name))
    return out


def boot_id() -> str:
    try:
        return (_PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot; None when it is gone."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    try:
        return int(fields[19])  # field 22 (starttime), after pid and (comm)
    except (IndexError, ValueError):
        return None


def _state(pid: int) -> str:
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return ""
    return stat[stat.rfind(")") + 2 :][:1]


def _cmdline(pid: int) -> list[str] | None:
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode("utf-8", "surrogateescape") for part in raw.split(b"\0")[:-1]]


def group_handle(pid: int, pgid: int, argv: Sequence[str]) -> dict[str, Any]:
    """What the store keeps to find the agent again."""
    return {
        "pid": pid,
        "pgid": pgid,
        "argv": list(argv),
        "start_ticks": start_ticks(pid),
        "boot_id": boot_id(),
    }


def probe_group(handle: Mapping[str, Any], execution_id: str = "") -> tuple[bool, str]:
    """``(running, reason)``: whether the stored leader still runs the stored command, or
    else (``execution_id`` given) a process carrying the execution id does."""
    running, reason = _probe_leader(handle)
    if running or not execution_id:
        return running, reason
    found = marked(execution_id)
    if found:
        return True, (
            f"agent processes {', '.join(map(str, found))} of this execution still run with "
            "nobody at their pipes (started before their row recorded them)"
        )
    return False, reason


def _probe_leader(handle: Mapping[str, Any]) -> tuple[bool, str]:
    pid, argv = handle.get("pid"), handle.get("argv")
    if not isinstance(pid, int) or pid <= 0 or not isinstance(argv, list):
        return False, "no agent process was recorded (the app died before it started)"
    if handle.get("boot_id") and handle.get("boot_id") != boot_id():
        return False, "the machine restarted since the agent was started"
    state = _state(pid)
    if state in ("", "Z", "X"):
        return False, f"the agent process {pid} ended with the app (its pipes closed)"
    if handle.get("start_ticks") is not None and start_ticks(pid) != handle.get("start_ticks"):
        return False, f"pid {pid} now belongs to another process (the agent ended)"
    if _cmdline(pid) != argv:
        return False, f"pid {pid} runs another command (the agent ended)"
    return True, f"the agent process {pid} still runs with nobody at its pipes"


def _signal(pgid: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


async def end_group(
    handle: Mapping[str, Any], execution_id: str = "", *, grace: float = 2.0
) -> str:
    """End the stored agent's process group, and the groups of the processes carrying the
    execution id: ``SIGTERM``, then ``SIGKILL`` after ``grace`` seconds; checked again
    first (a process that is no longer the agent is never signalled). Returns what was
    done."""
    groups: dict[int, int] = {}  # pgid → a member to watch
    if _probe_leader(handle)[0]:
        groups[int(handle.get("pgid") or handle["pid"])] = int(handle["pid"])
    for pid in marked(execution_id) if execution_id else ():
        with contextlib.suppress(OSError):
            groups.setdefault(os.getpgid(pid), pid)
    if not groups:
        return "its processes had ended meanwhile"
    for pgid in groups:
        _signal(pgid, signal.SIGTERM)
    with anyio.move_on_after(grace):
        while any(_state(pid) not in ("", "Z", "X") for pid in groups.values()):  # noqa: ASYNC110
            await anyio.sleep(0.02)  # a process of another parent: no wait() to be woken by
    how = "SIGTERM"
    if any(_state(pid) not in ("", "Z", "X") for pid in groups.values()):
        how = "SIGKILL"
    for pgid in groups:
        _signal(pgid, signal.SIGKILL)  # helpers left in the group
    names = ", ".join(map(str, groups))
    return f"ended the orphaned agent process group{'s' if len(groups) > 1 else ''} {names} ({how})"
