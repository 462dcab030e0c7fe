"""The transition-coverage pytest plugin, exercised through inner pytest sessions."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from statemachine import State

from acpfsm.statecharts import (
    Chart,
    TransitionRecord,
    _machine,
    add_transition_observer,
    declared_transitions,
    remove_transition_observer,
)
from acpfsm.testing.coverage_plugin import compute_coverage

pytest_plugins = ["pytester"]

TOY_CHARTS = textwrap.dedent(
    """
    from statemachine import State
    from acpfsm.statecharts._base import Chart

    class Lamp(Chart):
        chart_name = "toy_lamp"
        off = State(initial=True)
        on = State()
        broken = State(final=True)
        switched_on = off.to(on)
        switched_off = on.to(off)
        burnt_out = on.to(broken)
        flickered = on.to(None)

    class Empty(Chart):
        chart_name = "toy_empty"
        only = State(initial=True, final=True)

    CHARTS = (Lamp, Empty)
    """
)

# Fires off->on, on->on (flickered, targetless) and on->off: 3 of Lamp's 4 transitions.
TOY_TESTS = textwrap.dedent(
    """
    from toycharts import Lamp

    def test_switch_on_and_flicker():
        lamp = Lamp.start()
        lamp.fire("switched_on")
        lamp.fire("flickered")

    def test_switch_on_and_off():
        lamp = Lamp.start()
        lamp.fire("switched_on")
        lamp.fire("switched_off")
    """
)

TOY_ALL = TOY_TESTS + textwrap.dedent(
    """
    def test_burn_out():
        lamp = Lamp.start()
        lamp.fire("switched_on")
        lamp.fire("burnt_out")
    """
)

CHARTS_OPTION = ("-o", "acpfsm_transition_charts=toycharts:CHARTS", "-p", "no:cacheprovider")


@pytest.fixture
def toy(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(toycharts=TOY_CHARTS)
    pytester.syspathinsert()
    return pytester


def test_below_threshold_fails_and_lists_never_exercised(toy: pytest.Pytester) -> None:
    toy.makepyfile(test_lamp=TOY_TESTS)
    result = toy.runpytest(*CHARTS_OPTION, "--acpfsm-transition-coverage=100")
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.re_match_lines([r"=+ acpfsm transition coverage =+"])
    result.stdout.fnmatch_lines(
        [
            "toy_lamp: 3/4 transitions (75.0%)",
            "  never exercised:",
            "    on --burnt_out--> broken",
            "toy_empty: 0/0 transitions (100.0%)",
            "TOTAL: 3/4 transitions (75.0%)",
            "FAIL: transition coverage 75.0% is below the required 100%",
        ]
    )
    result.stdout.no_fnmatch_line("*--switched_on-->*")


def test_at_threshold_passes(toy: pytest.Pytester) -> None:
    toy.makepyfile(test_lamp=TOY_TESTS)
    result = toy.runpytest(*CHARTS_OPTION, "--acpfsm-transition-coverage=75")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["TOTAL: 3/4 transitions (75.0%)"])
    result.stdout.no_fnmatch_line("FAIL:*")


def test_full_coverage_passes_at_100(toy: pytest.Pytester) -> None:
    toy.makepyfile(test_lamp=TOY_ALL)
    result = toy.runpytest(*CHARTS_OPTION, "--acpfsm-transition-coverage=100")
    result.assert_outcomes(passed=3)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["toy_lamp: 4/4 transitions (100.0%)", "TOTAL: 4/4*"])
    result.stdout.no_fnmatch_line("*never exercised*")


def test_without_the_option_nothing_is_printed(toy: pytest.Pytester) -> None:
    """Every project with acpfsm installed has the plugin: it stays silent unless asked."""
    toy.makepyfile(test_lamp=TOY_TESTS)
    result = toy.runpytest(*CHARTS_OPTION)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.no_fnmatch_line("*acpfsm transition coverage*")
    result.stdout.no_fnmatch_line("*transitions (*")
    result.stdout.no_fnmatch_line("TOTAL:*")


def test_a_zero_threshold_is_an_informational_report(toy: pytest.Pytester) -> None:
    toy.makepyfile(test_lamp=TOY_TESTS)
    result = toy.runpytest(*CHARTS_OPTION, "--acpfsm-transition-coverage=0")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["toy_lamp: 3/4 transitions (75.0%)", "TOTAL: 3/4*"])
    result.stdout.fnmatch_lines(["  never exercised:", "    on --burnt_out--> broken"])
    result.stdout.no_fnmatch_line("FAIL:*")


def test_another_project_sees_no_coverage_section(tmp_path: Path) -> None:
    """A project of its own (own rootdir, no acpfsm configuration) run in a subprocess: the
    installed plugin prints nothing (it used to print "TOTAL: 0/206")."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "test_app.py").write_text("def test_app():\n    assert 1 + 1 == 2\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(project)],
        cwd=project, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    assert "acpfsm transition coverage" not in done.stdout
    assert "TOTAL:" not in done.stdout
    assert (
        "acpfsm"
        in subprocess.run(
            [sys.executable, "-m", "pytest", "--help"],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        ).stdout
    )  # fmt: skip  (the plugin is installed and loaded, only silent)


def test_a_failing_test_still_fails_the_session(toy: pytest.Pytester) -> None:
    toy.makepyfile(test_lamp=TOY_ALL + "\ndef test_broken():\n    assert False\n")
    result = toy.runpytest(*CHARTS_OPTION, "--acpfsm-transition-coverage=100")
    result.assert_outcomes(passed=3, failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.no_fnmatch_line("FAIL: transition coverage*")


def test_default_charts_are_all_charts(pytester: pytest.Pytester) -> None:
    from acpfsm import statecharts

    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--acpfsm-transition-coverage=0")
    assert result.ret == pytest.ExitCode.OK
    charts = getattr(statecharts, "ALL_CHARTS", ())
    result.stdout.fnmatch_lines(
        [*(f"{c.chart_name}: 0/*" for c in charts if declared_transitions(c)), "TOTAL: 0/*"]
    )


def test_the_observer_is_removed_when_the_session_ends(toy: pytest.Pytester) -> None:
    before = list(_machine._observers)
    toy.makepyfile(test_lamp=TOY_TESTS)
    toy.runpytest(*CHARTS_OPTION, "--acpfsm-transition-coverage=0")
    assert _machine._observers == before


def test_bad_chart_spec_is_a_usage_error(toy: pytest.Pytester) -> None:
    toy.makepyfile(test_lamp=TOY_TESTS)
    result = toy.runpytest(
        "-o", "acpfsm_transition_charts=toycharts", "--acpfsm-transition-coverage=0"
    )
    assert result.ret != pytest.ExitCode.OK
    result.stderr.fnmatch_lines(["*expected module:attribute*"])


class Gate(Chart):
    chart_name = "toy_gate"

    closed = State(initial=True)

    class open(State.Compound):
        opening = State(initial=True)
        opened = State()
        moved = opening.to(opened)

    shut = State(final=True)
    pushed = closed.to(open)
    rattled = open.to(None)
    slammed = open.to(shut)


def test_compute_coverage_counts_what_the_observers_see() -> None:
    """A transition declared on a compound is covered from any of its children; a targetless
    one is ``(source, event, source)``; other charts' records do not count."""
    fired: list[tuple[str, str, str, str]] = []

    def observe(record: TransitionRecord) -> None:
        fired.append((record.chart, record.source, record.event, record.target))

    add_transition_observer(observe)
    try:
        gate = Gate.start()
        gate.fire("pushed")
        gate.fire("moved")
        gate.fire("rattled")  # declared on open, fired from opened
    finally:
        remove_transition_observer(observe)
    assert ("toy_gate", "open", "rattled", "open") in fired

    report = compute_coverage([Gate], [*fired, ("toy_other", "a", "went", "b")])
    assert (report.covered, report.declared) == (3, 4)
    assert report.charts[0].missed == (("open", "slammed", "shut"),)
    assert report.below(100) and not report.below(75)

    gate = Gate.start(observers=(lambda r: fired.append((r.chart, r.source, r.event, r.target)),))
    gate.fire("pushed")
    gate.fire("slammed")
    assert compute_coverage([Gate], fired).percent == 100.0


def test_under_xdist_the_workers_records_are_joined(toy: pytest.Pytester) -> None:
    """Two workers each fire part of the chart: the controller reports their union once (a
    worker's record alone would be 3/4 or less)."""
    toy.makepyfile(
        test_lamp_a=TOY_TESTS,
        test_lamp_b=textwrap.dedent(
            """
            from toycharts import Lamp

            def test_burn_out():
                lamp = Lamp.start()
                lamp.fire("switched_on")
                lamp.fire("burnt_out")
            """
        ),
    )
    result = toy.runpytest_subprocess(
        *CHARTS_OPTION, "-n", "2", "--dist", "loadfile", "--acpfsm-transition-coverage=100"
    )
    result.assert_outcomes(passed=3)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["toy_lamp: 4/4 transitions (100.0%)", "TOTAL: 4/4*"])
    assert sum("TOTAL:" in line for line in result.outlines) == 1


def test_under_xdist_a_miss_still_fails(toy: pytest.Pytester) -> None:
    toy.makepyfile(test_lamp=TOY_TESTS)
    result = toy.runpytest_subprocess(*CHARTS_OPTION, "-n", "2", "--acpfsm-transition-coverage=100")
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["    on --burnt_out--> broken", "FAIL: transition coverage*"])
