"""The Crash chart: whether the execution's own code failed. The first report crashes the
execution (``contain_crash``, with the crash to record), a later one changes nothing; the
question ``crash_checked`` answers ``raise_crash`` once it crashed, nothing before. The
runtime reads no flag: it asks this chart (runtime/session/crash.py)."""

from __future__ import annotations

from acpfsm.statecharts import Crash, EngineName, peek

from .recipes import CRASH_RECIPES, walk


def _answer(machine_state: str, engine: EngineName) -> tuple[list[str], list[str]]:
    crash = walk(Crash.start(engine=engine), CRASH_RECIPES[machine_state])
    asked = peek(crash, "crash_checked")
    assert asked is not None
    fired = crash.fire("crash_checked")
    assert fired.targetless and crash.state == machine_state
    return [e.name for e in asked.effects], [e.name for e in fired.effects]


def test_an_intact_execution_has_no_crash_to_raise(engine: EngineName) -> None:
    assert _answer("intact", engine) == ([], [])


def test_a_crashed_execution_says_raise_the_crash(engine: EngineName) -> None:
    assert _answer("crashed", engine) == (["raise_crash"], ["raise_crash"])


def test_the_first_report_crashes_the_execution_and_a_later_one_changes_nothing(
    engine: EngineName,
) -> None:
    crash = Crash.start(engine=engine)
    first = crash.fire("crash_reported", error="boom")
    assert (first.source, first.target, first.targetless) == ("intact", "crashed", False)
    assert [(e.name, dict(e.args)) for e in first.effects] == [("contain_crash", {"error": "boom"})]
    again = crash.fire("crash_reported", error="boom again")
    assert again.targetless and again.effects == () and crash.state == "crashed"
    assert not crash.ended  # it rests there, still answering
