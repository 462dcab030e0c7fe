"""What ``make bench`` reads of processes: ``/proc``, CPU, the garbage collector, the agent's command."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
from pathlib import Path
from typing import Any, Self

from acpfsm.runtime.types import AgentProfile, LaunchSpec, WorkspaceRef

from .rows import AGENT_ARGS, AGENT_MODULE, LatencyRow

# ---------------------------------------------------------------- /proc helpers --

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name may contain spaces and parentheses: fields start after the last ')'
    return raw[raw.rfind(")") + 2 :].split()


def child_pids(parent: int | None = None) -> set[int]:
    """The live child processes of ``parent`` (default: this process), from ``/proc``;
    empty where ``/proc`` is unavailable."""
    parent = os.getpid() if parent is None else parent
    out: set[int] = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit():
            continue
        fields = _proc_stat_fields(int(entry))
        # fields[0] is the state, fields[1] the ppid; a zombie is not live
        if fields is not None and len(fields) > 1 and fields[0] != "Z" and int(fields[1]) == parent:
            out.add(int(entry))
    return out


def zombie_pids(parent: int | None = None) -> set[int]:
    """The children of ``parent`` (default: this process) that exited and were never
    reaped, from ``/proc``."""
    parent = os.getpid() if parent is None else parent
    out: set[int] = set()
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                fields = _proc_stat_fields(int(entry))
                if fields and len(fields) > 1 and fields[0] == "Z" and int(fields[1]) == parent:
                    out.add(int(entry))
    return out


def rss_kib(pid: int | None = None) -> int | None:
    """The resident set of ``pid`` (default: this process) in KiB, from ``/proc``."""
    return _memory_kib(os.getpid() if pid is None else pid)[0]


def _cpu_seconds(pids: set[int]) -> float | None:
    """utime + stime of ``pids`` (seconds), or ``None`` if any cannot be read."""
    total = 0.0
    for pid in pids:
        fields = _proc_stat_fields(pid)
        if fields is None or len(fields) < 13:
            return None
        total += (int(fields[11]) + int(fields[12])) / _CLK_TCK
    return total if pids else None


def _memory_kib(pid: int) -> tuple[int | None, int | None]:
    """(RSS, private = Private_Clean + Private_Dirty) of ``pid`` in KiB."""
    rss: int | None = None
    private: int | None = None
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    with contextlib.suppress(OSError, ValueError):
        parts = [
            int(line.split()[1])
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
            if line.startswith(("Private_Clean:", "Private_Dirty:"))
        ]
        private = sum(parts) if parts else None
    return rss, private


class _CpuMeter:
    """Client (this process) and agent (``pids``) CPU over a timed loop."""

    def __init__(self, agent_pids: set[int]) -> None:
        self.agent_pids = agent_pids
        self.client0 = time.process_time()
        self.agent0 = _cpu_seconds(agent_pids)

    def per_op_ms(self, ops: int) -> tuple[float, float | None]:
        client = (time.process_time() - self.client0) * 1000.0 / ops
        agent1 = _cpu_seconds(self.agent_pids)
        if self.agent0 is None or agent1 is None:
            return client, None
        return client, (agent1 - self.agent0) * 1000.0 / ops


class _GcWatch:
    """Times every garbage collection (``gc.callbacks``) and charges it to the row that is
    running (:attr:`row`), if any."""

    def __init__(self) -> None:
        self.row: LatencyRow | None = None
        self._start = 0.0
        self._start_cpu = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
            self._start_cpu = time.thread_time()
            return
        row = self.row
        if row is not None:
            pause = (time.perf_counter() - self._start) * 1000.0
            generation = int(info.get("generation", 0))
            row.gc_count += 1
            row.gc_by_generation[min(generation, 2)] += 1
            if pause > row.gc_max_ms:
                row.gc_max_ms = pause
                row.gc_max_cpu_ms = (time.thread_time() - self._start_cpu) * 1000.0
                row.gc_max_generation = generation

    def __enter__(self) -> Self:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.row = None
        if self in gc.callbacks:
            gc.callbacks.remove(self)


def _agent_argv(sessions_dir: Path) -> list[str]:
    return [sys.executable, "-m", AGENT_MODULE, *AGENT_ARGS, "--sessions-dir", str(sessions_dir)]


def _prompt_text(i: int) -> str:
    return f"bench prompt number {i}: say something short."


def _spec(executor_id: str, path: Path, profile_id: str) -> LaunchSpec:
    return LaunchSpec(
        agent_profile_id=profile_id,
        executor_id=executor_id,
        workspace=WorkspaceRef(path=str(path)),
    )


MEMORY_AGENT = AgentProfile(id="memory-agent", command=("unused",))
