"""Smoke test of ``make bench`` (acpfsm.runtime.tools.bench): a tiny run prints every row of the
table with numbers in it and leaves no agent process behind. Nothing about timing is asserted:
the bench reports ratios, it does not judge them."""

from __future__ import annotations

import re

import pytest

from acpfsm.runtime.tools.bench import child_pids, main, percentile

# the bench drives charts in loops through a Trace: those are not lifecycle traces
pytestmark = [pytest.mark.integration, pytest.mark.acpfsm_unchecked_trace]

LATENCY_ROWS = ("bare StdioTransport", "Runtime.prompt", "ACP SDK client (asyncio thread)")
RATE_ROWS = (
    "raw psm: 2-state cycle [transitions]",
    "Execution, reference engine: prompt_began/turn_completed [transitions]",
    "Execution chart: prompt_began/turn_completed [transitions]",
    "raw psm: new 5-state chart [charts]",
    "new PromptGeneration, reference engine (traced) [charts]",
    "new PromptGeneration chart (traced) [charts]",
    "raw psm: new chart + 6 transitions [transitions]",
    "prompt cycle, reference engine: new + 6, traced [transitions]",
    "prompt cycle: new PromptGeneration + 6, traced [transitions]",
)
#: rows with a goal, and what their ratio is to
GOALS = {
    "Execution chart: prompt_began/turn_completed [transitions]": (
        "<=0.05x",
        "(vs Execution, reference engine)",
    ),
    "prompt cycle: new PromptGeneration + 6, traced [transitions]": ("<=0.20x", "(vs raw psm)"),
}
LIFECYCLE_ROWS = (
    "Runtime.prompt over MemoryTransport, reference engine",
    "Runtime.prompt over MemoryTransport, compiled engine",
)
MEMORY_ROWS = (
    "bare StdioTransport, session open (tracemalloc)",
    "Runtime over stdio, READY (tracemalloc)",
    "reference agent process: RSS",
    "reference agent process: private (USS)",
    "Runtime over MemoryTransport (tracemalloc)",
)
NUMBER = re.compile(r"^-?[\d,]+(\.\d+)?x?$")


def _line(out: str, name: str) -> str:
    for line in out.splitlines():
        if line.startswith(f"  {name} "):
            return line
    raise AssertionError(f"row {name!r} missing from:\n{out}")


def _cells(out: str, name: str) -> list[str]:
    """The row's cells, without the note in parentheses after them."""
    return _line(out, name)[len(name) + 2 :].split("  (")[0].split()


def test_tiny_bench_prints_every_row(capsys: pytest.CaptureFixture[str]) -> None:
    before = child_pids()
    argv = ["--prompts", "3", "--warmup", "1", "--cycles", "5", "--idle", "2", "--idle-stdio", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out

    for header in (
        "prompt round trip",
        "chart transitions (5 cycles)",
        "lifecycle CPU per prompt, in-memory transport (3 prompts)",
        "memory per idle",
    ):
        assert header in out
    for name in LATENCY_ROWS:
        cells = _cells(out, name)
        # median, p95, client CPU, agent CPU (n/a only where /proc is missing), two ratios
        assert len(cells) == 6, (name, cells)
        for cell in (cells[0], cells[1], cells[2], cells[4], cells[5]):
            assert NUMBER.match(cell), (name, cells)
    assert _cells(out, LATENCY_ROWS[0])[4:] == ["1.00x", "1.00x"]
    for name in RATE_ROWS:
        cells = _cells(out, name)
        assert len(cells) == 4 and all(NUMBER.match(c) for c in cells[:3]), (name, cells)
        goal, versus = GOALS.get(name, ("-", ""))
        assert cells[3] == goal, (name, cells)
        assert _line(out, name).endswith(versus), name
    for name in LIFECYCLE_ROWS:  # median, CPU, ratio to the reference engine, goal
        cells = _cells(out, name)
        assert len(cells) == 4 and all(NUMBER.match(c) for c in cells[:3]), (name, cells)
    assert _cells(out, LIFECYCLE_ROWS[0])[2:] == ["1.00x", "-"]
    assert _cells(out, LIFECYCLE_ROWS[1])[3] == "<=0.25x"
    assert _line(out, LIFECYCLE_ROWS[1]).endswith("(vs the reference engine)")
    for name in MEMORY_ROWS:
        cells = _cells(out, name)
        assert len(cells) >= 3, (name, cells)
    assert _cells(out, MEMORY_ROWS[0])[1:3] == ["1", "1.00x"]
    assert _cells(out, MEMORY_ROWS[-1])[1] == "2"
    assert "total " in out
    # every agent the bench started is gone
    assert child_pids() <= before


def test_no_sdk_row_is_marked_skipped(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--prompts", "1", "--warmup", "0", "--cycles", "1", "--idle", "1", "--idle-stdio"]
    assert main([*argv, "0", "--no-sdk"]) == 0
    out = capsys.readouterr().out
    assert _line(out, LATENCY_ROWS[2]).endswith("(skipped (--no-sdk))")
    assert "bare StdioTransport, session open" not in out  # --idle-stdio 0 skips stdio idling
    assert _cells(out, MEMORY_ROWS[-1])[1:] == ["1", "1.00x"]


def test_percentile_is_nearest_rank() -> None:
    samples = [float(i) for i in range(1, 21)]
    assert percentile(samples, 95) == 19.0
    assert percentile(samples, 50) == 10.0
    assert percentile([7.0], 95) == 7.0
