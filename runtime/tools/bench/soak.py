"""``make bench``, the soak's memory (issue 35): a trio soak (:mod:`.soak`: ``--soak-executions``
executions × ``--soak-prompts`` prompts, ``--soak-concurrency`` at a time, random faults
against real reference agents), this process's RSS at the start, after the soak's warm-up
and at the end (the Runtime closed), split into

* what **the runtime keeps**: Python's allocated blocks (``sys.getallocatedblocks`` after a
  full collection) at the end against after the warm-up (goal: flat, ≤ 1.05×);
* what **the allocator keeps**: the end's RSS less the RSS once glibc's ``malloc_trim(0)``
  handed back the free memory it held (reported: memory the process may reuse, not a leak),
  and what Python's small-object allocator still holds then (its 1 MiB arenas, from
  ``sys._debugmallocstats``: an arena goes back to the system only once every block in it
  is free, so a few live blocks keep a whole arena).

Nothing here is asserted anywhere.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any

import anyio

__all__ = ["GOAL_FLAT", "SoakMemory", "format_into", "goals", "run"]

GOAL_FLAT = 1.05  # Python blocks in use at the end vs after the warm-up
_ARENAS = re.compile(r"(\d+) arenas \* (\d+) bytes/arena")


def arena_kib() -> int | None:
    """What Python's small-object allocator holds in arenas now (KiB; None: not CPython's
    pymalloc). ``sys._debugmallocstats`` writes to the C stderr: read through a file."""
    stats = getattr(sys, "_debugmallocstats", None)
    if stats is None:
        return None
    with tempfile.TemporaryFile() as out:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(out.fileno(), 2)
        try:
            stats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        found = _ARENAS.search(out.read().decode(errors="replace"))
    return int(found[1]) * int(found[2]) // 1024 if found else None


@dataclass
class SoakMemory:
    executions: int
    prompts: int
    concurrency: int
    rss_kib: list[int] = field(default_factory=list)
    """RSS at the start, after the warm-up, at the end (KiB; -1: unknown)."""
    trimmed_rss_kib: int = -1
    """The end's RSS after ``malloc_trim(0)`` (-1: not glibc)."""
    blocks: list[int] = field(default_factory=list)
    """Python's blocks in use at the start, after the warm-up, at the end."""
    arena_kib: int | None = None
    """Python's small-object arenas at the end, after the trim."""
    clean: bool = True
    seconds: float = 0.0

    @property
    def flat(self) -> float | None:
        """The runtime's part: blocks at the end over blocks after the warm-up."""
        if len(self.blocks) < 3 or self.blocks[1] <= 0:
            return None
        return self.blocks[2] / self.blocks[1]

    @property
    def allocator_kib(self) -> int | None:
        """What the allocator kept free at the end (the end's RSS less the trimmed one)."""
        if len(self.rss_kib) < 3 or self.rss_kib[2] < 0 or self.trimmed_rss_kib < 0:
            return None
        return self.rss_kib[2] - self.trimmed_rss_kib


def run(executions: int, prompts: int, concurrency: int) -> SoakMemory:
    """One trio soak (see the module docstring); nothing is printed."""
    from ..soak import SoakOptions, run_soak  # the soak imports the bench's helpers

    options = SoakOptions(
        executions=executions, prompts=prompts, concurrency=max(1, concurrency), backend="trio"
    )
    report = anyio.run(run_soak, options, backend="trio")
    return SoakMemory(
        executions,
        prompts,
        options.concurrency,
        list(report.rss_kib),
        report.trimmed_rss_kib,
        list(report.blocks),
        arena_kib(),
        report.clean,
        report.seconds,
    )


def _mib(kib: int | None) -> str:
    return "?" if kib is None or kib < 0 else f"{kib / 1024:.0f}"


def _detail(row: SoakMemory) -> str:
    rss = " / ".join(_mib(k) for k in row.rss_kib)
    blocks = " / ".join(f"{b:,}" for b in row.blocks)
    return (
        f"blocks start / warm / end {blocks}; RSS {rss} MiB, {_mib(row.trimmed_rss_kib)} MiB "
        f"after malloc_trim: the allocator kept {_mib(row.allocator_kib)} MiB free; Python's "
        f"arenas then {_mib(row.arena_kib)} MiB"
        + ("" if row.clean else "; the soak was NOT CLEAN (make soak says why)")
    )


def goals(row: SoakMemory | None, goal: type[Any]) -> list[Any]:
    """The summary line (``goal``: bench's ``Goal``)."""
    if row is None:
        return []
    figure = f"soak, {row.executions} x {row.prompts}: Python blocks kept, end vs after the warm-up"
    return [goal(figure, "trio", "compiled", row.flat, GOAL_FLAT, "x", detail=_detail(row))]


def format_into(table: Any, row: SoakMemory | None) -> None:
    """The section's detail lines (``table``: bench's table)."""
    if row is None:
        return
    title = (
        f"soak memory: {row.executions} executions x {row.prompts} prompts, "
        f"{row.concurrency} at a time (trio, faults)"
    )
    table.section(title, ["start", "warm", "end", "trimmed"])
    rss = [_mib(k) for k in row.rss_kib]
    table.row("RSS MiB", [*rss, _mib(row.trimmed_rss_kib)], "trimmed: after malloc_trim(0)")
    table.row(
        "Python blocks in use",
        [f"{b:,}" for b in row.blocks] + ["-"],
        "after gc.collect(): what the runtime keeps",
    )
    table.row(
        "  the allocator's free memory at the end",
        ["", "", f"{_mib(row.allocator_kib)} MiB", ""],
        f"end RSS less trimmed; the soak took {row.seconds:.0f} s",
    )
    table.row(
        "  Python's small-object arenas at the end, trimmed",
        ["", "", "", f"{_mib(row.arena_kib)} MiB"],
        "1 MiB each, held while any block in them lives",
    )
