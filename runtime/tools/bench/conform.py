"""``make bench``'s conform row: a conform run on the reference agent with the official ACP
schema check and without it, interleaved, the goal beside it (the check must not double the
run). Printed, never asserted."""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass

import anyio

from ..conform import run_battery
from ..conform.judge import SchemaOptions

__all__ = ["CONFORM_FIGURE", "CONFORM_GOAL", "ConformRow", "bench_conform"]

CONFORM_FIGURE = "conform run with the schema check vs without (reference agent)"
CONFORM_GOAL = 2.0
"""The check must not double a conform run (``<``)."""
REFERENCE = (sys.executable, "-m", "acpfsm.adapters.reference_agent")


@dataclass(frozen=True)
class ConformRow:
    runs: int
    with_ms: tuple[float, ...]
    without_ms: tuple[float, ...]
    with_cpu_ms: tuple[float, ...]
    without_cpu_ms: tuple[float, ...]
    messages: str = ""
    """The schema summary of the last run with the check (what it judged)."""

    @property
    def ratio(self) -> float | None:
        if not self.with_ms or not self.without_ms:
            return None
        base = statistics.median(self.without_ms)
        return statistics.median(self.with_ms) / base if base > 0 else None

    @property
    def cpu_ratio(self) -> float | None:
        if not self.with_cpu_ms or not self.without_cpu_ms:
            return None
        base = statistics.median(self.without_cpu_ms)
        return statistics.median(self.with_cpu_ms) / base if base > 0 else None


async def _one(schema: SchemaOptions) -> tuple[float, float, str]:
    wall, cpu = time.perf_counter(), time.process_time()
    report = await run_battery(REFERENCE, check_timeout=10, schema=schema)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    summary = next((c.detail for c in report.checks if c.id == "schema"), "")
    return wall * 1000, cpu * 1000, summary


def bench_conform(runs: int) -> ConformRow:
    """``runs`` conform runs each way, alternating (the first of each untimed)."""
    on, off = SchemaOptions(), SchemaOptions(enabled=False)
    walls: dict[bool, list[float]] = {True: [], False: []}
    cpus: dict[bool, list[float]] = {True: [], False: []}
    summary = ""
    for index in range(runs + 1):
        for checked in (index % 2 == 0, index % 2 != 0):
            wall, cpu, text = anyio.run(_one, on if checked else off, backend="trio")
            if index:
                walls[checked].append(wall)
                cpus[checked].append(cpu)
            if checked:
                summary = text
    return ConformRow(
        runs=runs,
        with_ms=tuple(walls[True]),
        without_ms=tuple(walls[False]),
        with_cpu_ms=tuple(cpus[True]),
        without_cpu_ms=tuple(cpus[False]),
        messages=summary.split(";", 1)[0],
    )
