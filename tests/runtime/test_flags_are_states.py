"""Flags become states (issue 28): the drivers of one execution read no flag and no state name
to decide; they ask the charts. Whether an execution crashed is the Crash chart's answer
(a seeded chart that never says ``raise_crash`` makes the same crash raise nothing), whether
the carrier is up is the AgentStream chart's, whether a stream may be recovered is the
SessionInit and Execution charts'."""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar

import pytest
from statemachine import State

from acpfsm.runtime import ExecutionCrashed, NotReadyForPrompts
from acpfsm.statecharts import Chart, Effects, effect

from .memory_runtime import session_of
from .test_containment import a_bug, launched, make_runtime

SESSION = Path(__file__).resolve().parents[2] / "runtime" / "session"


class SilentCrash(Chart):
    """The Crash chart with one seeded change: ``crash_checked`` never says ``raise_crash``."""

    chart_name: ClassVar[str] = "crash"
    validate_final_reachability: ClassVar[bool] = False

    intact = State("intact", initial=True)
    crashed = State("crashed")

    crash_reported = intact.to(crashed) | crashed.to(None)
    crash_checked = intact.to(None) | crashed.to(None)

    effects: ClassVar[Effects] = Effects(
        transitions={"crash_reported: intact -> crashed": [effect("contain_crash", "error")]}
    )


def test_no_driver_reads_a_state_name_or_the_crash_to_decide() -> None:
    """No ``is_in(…)`` in the drivers, no ``ctx.crashed`` flag, and the crash's record
    (``ctx.crash``, the exception callers raise) touched only by the crash guard."""
    for path in sorted(SESSION.glob("*.py")):
        text = path.read_text()
        assert "is_in(" not in text, path.name
        assert not re.search(r"\.crashed\b(?!\()", text), path.name  # no flag, only the method
        if path.name != "crash.py":
            assert not re.search(r"\bctx\.crash\b", text), path.name


@pytest.mark.both_backends
@pytest.mark.parametrize("seeded", [False, True], ids=["chart", "seeded_chart"])
async def test_whether_a_caller_raises_the_crash_is_the_crash_charts_answer(
    time_scale: float, seeded: bool
) -> None:
    async with make_runtime(time_scale) as rt:
        ref, transport = await launched(rt)
        session = session_of(rt, ref.id)
        if seeded:  # the same handlers, a chart that never answers raise_crash
            session.crash.machine = session.ctx.start(SilentCrash)
        transport.handlers["prompt"] = a_bug
        with pytest.raises(ExecutionCrashed):  # the crash itself is contained either way
            await rt.prompt(ref.id, "boom")
        assert rt.get_execution(ref.id).status == "FAILED"
        assert session.ctx.crash is not None  # recorded by the chart's contain_crash
        expected = NotReadyForPrompts if seeded else ExecutionCrashed
        with pytest.raises(expected):
            await rt.wait_ready(ref.id)
        await rt.stop(ref.id, "done")


@pytest.mark.both_backends
async def test_a_second_crash_is_the_same_one_because_the_chart_says_so(
    time_scale: float,
) -> None:
    """The second report finds the chart crashed (no ``contain_crash``): the first crash is
    what every caller raises, with its own cause."""
    async with make_runtime(time_scale) as rt:
        ref, transport = await launched(rt)
        session = session_of(rt, ref.id)
        transport.handlers["prompt"] = a_bug
        with pytest.raises(ExecutionCrashed):
            await rt.prompt(ref.id, "boom")
        first = session.ctx.crash
        again = await session.crash.crashed(ValueError("later"), "later")
        assert again is first and session.crash.machine.state == "crashed"
        assert isinstance(first.__cause__, KeyError)
        await rt.stop(ref.id, "done")
