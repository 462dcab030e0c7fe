"""A small soak inside ``make test``: 20 executions × 5 prompts over stdio against the
reference agent, random faults (fixed seed), a generous bound. Counts only, never timings:
nothing lost, duplicated, crossed or left over, every failure typed, the trace legal."""

from __future__ import annotations

import pytest

from acpfsm.tools.soak import FAULTS, SoakOptions, format_report, run_soak

pytestmark = [pytest.mark.both_backends, pytest.mark.integration]


async def test_a_small_soak_loses_nothing(backend: str) -> None:
    options = SoakOptions(
        executions=20,
        prompts=5,
        concurrency=10,
        seed=7,
        backend="asyncio" if backend == "asyncio" else "trio",
        fault_rate=0.5,
        bound=120.0,
        deadline=600.0,
        warmup=False,
    )
    report = await run_soak(options)
    text = format_report(report)
    assert report.prompts_sent == 100, text
    assert report.unfinished == 0, text
    assert report.lost == [] and report.lost_after_cancel == [], text
    assert report.duplicated == [] and report.cross_talk == [], text
    assert report.missing_token == [] and report.fs_escapes == 0, text
    assert not report.untyped_errors, text
    assert report.leftover == [] and report.zombies == [], text
    assert report.violations == [] and report.trace_records > 0, text
    answered = sum(report.results.values()) + sum(report.typed_errors.values())
    assert answered == report.prompts_sent, text
    # the seed exercises most of the vocabulary, and a crash moves its slot to a new execution
    assert len(set(report.by_fault) - {"plain"}) >= len(FAULTS) - 3, text
    assert report.executions_launched > options.executions, text
    assert report.clean, text
