"""The chart-mutation machinery: the compiler's mutant hook and the tool's enumeration."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import ClassVar

import pytest
from statemachine import State

from acpfsm.runtime.trace import TraceRecord
from acpfsm.statecharts import (
    ALL_CHARTS,
    Chart,
    ChartDefinitionError,
    Execution,
    IllegalTransition,
    _base,
)
from acpfsm.statecharts._compile import MUTANT_ENV, Mutant, compile_chart, mutant_from_env
from acpfsm.statecharts._machine import machine_class
from acpfsm.tools import mutate_charts
from acpfsm.tools.check_trace import check_records

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]


class Door(Chart):
    chart_name: ClassVar[str] = "door"

    class shut(State.Compound):
        closed = State("closed", initial=True)
        locked = State("locked")

    opened = State("opened")

    # declaration order (by state: shut, closed, locked, opened): 0 slammed shut (ignored),
    # 1 pushed closed -> opened [unlocked], 2 pushed closed (ignored), 3 lock closed -> locked,
    # 4 slammed opened -> shut
    pushed = shut.closed.to(opened, cond="unlocked") | shut.closed.to(None)
    lock = shut.closed.to(shut.locked)
    slammed = opened.to(shut) | shut.to(None)

    def unlocked(self, key: bool = True) -> bool:
        return key


class Shadow(Chart):
    chart_name: ClassVar[str] = "shadow"
    idle = State("idle", initial=True)
    busy = State("busy")
    knocked = idle.to(None) | idle.to(busy) | busy.to(idle)  # the second is never selected


def run(mutant: Mutant | None, *events: tuple[str, dict[str, object]]) -> str:
    machine = machine_class(compile_chart(Door, mutant))()
    for event, data in events:
        machine.fire(event, **data)
    return machine.state


PUSH = ("pushed", {})
LOCKED_OUT = ("pushed", {"key": False})


def test_each_mutation_changes_what_fires() -> None:
    assert run(None, PUSH) == "opened" and run(None, LOCKED_OUT) == "closed"
    assert run(Mutant("door", 1, "delete"), PUSH) == "closed"  # the ignoring one takes it
    assert run(Mutant("door", 1, "retarget", "shut"), PUSH) == "closed"
    assert run(Mutant("door", 1, "negate_guard"), PUSH) == "closed"
    assert run(Mutant("door", 1, "negate_guard"), LOCKED_OUT) == "opened"
    assert run(Mutant("door", 1, "drop_guard"), LOCKED_OUT) == "opened"
    assert run(Mutant("door", 1, "swap"), PUSH) == "closed"  # the unguarded one first
    with pytest.raises(IllegalTransition):
        run(Mutant("door", 3, "delete"), ("lock", {}))
    assert run(Mutant("door", 2, "retarget", "locked"), LOCKED_OUT) == "locked"


def test_a_mutant_of_another_chart_changes_nothing() -> None:
    compiled = compile_chart(Door, Mutant("execution", 0, "delete"))
    assert compiled.table == Door.compiled().table


def test_a_deleted_transition_is_no_longer_declared() -> None:
    compiled = compile_chart(Door, Mutant("door", 3, "delete"))
    assert ("closed", "lock", "locked") not in compiled.declared
    assert ("closed", "lock", "locked") in Door.compiled().declared
    retargeted = compile_chart(Door, Mutant("door", 3, "retarget", "closed"))
    assert ("closed", "lock", "closed") in retargeted.declared


def test_mutant_names_round_trip_and_bad_ones_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for mutant in (Mutant("door", 3, "retarget", "closed"), Mutant("door", 0, "swap")):
        assert Mutant.parse(str(mutant)) == mutant
    for bad in ("door", "door:x:delete", "door:1:explode"):
        with pytest.raises(ChartDefinitionError):
            Mutant.parse(bad)
    with pytest.raises(ChartDefinitionError):
        compile_chart(Door, Mutant("door", 99, "delete"))
    with pytest.raises(ChartDefinitionError):
        compile_chart(Door, Mutant("door", 3, "swap"))  # no next transition of `lock`
    monkeypatch.delenv(MUTANT_ENV, raising=False)
    assert mutant_from_env() is None
    monkeypatch.setenv(MUTANT_ENV, "door:2:delete")
    assert mutant_from_env() == Mutant("door", 2, "delete")


def test_the_tool_enumerates_every_mutant_and_labels_it() -> None:
    mutants = [str(m) for m in mutate_charts.enumerate_mutants(Door)]
    assert mutants == [
        "door:0:delete",
        "door:0:retarget:opened",  # targetless: each state of its source's parent
        "door:0:retarget:shut",
        "door:1:delete",
        "door:1:retarget:shut",  # each other state of its target's parent
        "door:1:drop_guard",
        "door:1:negate_guard",
        "door:1:swap",
        "door:2:delete",
        "door:2:retarget:closed",
        "door:2:retarget:locked",
        "door:3:delete",
        "door:3:retarget:closed",
        "door:4:delete",
        "door:4:retarget:opened",
    ]
    assert mutate_charts.label(Door, Mutant("door", 1, "swap")) == (
        "door | pushed: closed -> opened [unlocked] | swap"
    )
    assert mutate_charts.label(Door, Mutant("door", 2, "retarget", "locked")) == (
        "door | pushed: closed | retarget:locked"
    )


def test_a_mutant_that_changes_no_table_is_equivalent_by_construction() -> None:
    assert mutate_charts.equivalent_by_construction(Shadow, Mutant("shadow", 1, "delete"))
    assert not mutate_charts.equivalent_by_construction(Shadow, Mutant("shadow", 0, "delete"))
    assert not mutate_charts.equivalent_by_construction(Door, Mutant("door", 1, "delete"))
    # an ignored event turned into a re-entry of a leaf without entry effects does the same
    assert mutate_charts.equivalent_by_construction(Door, Mutant("door", 2, "retarget", "closed"))
    # re-entering a compound resets its child: not the same
    assert not mutate_charts.equivalent_by_construction(Door, Mutant("door", 0, "retarget", "shut"))
    # the ignoring `slammed` of `shut` comes after nothing it could shadow: deleting it
    # makes `slammed` illegal in `closed` and `locked`
    assert not mutate_charts.equivalent_by_construction(Door, Mutant("door", 0, "delete"))


def test_tests_that_kill_every_mutant_are_excluded() -> None:
    assert mutate_charts.excluded("tests/statecharts/test_definitions.py::test_x[a]")
    assert mutate_charts.excluded("tests/statecharts/test_x.py::test_walk[reference]")
    assert mutate_charts.excluded("tests/statecharts/test_x.py::test_walk[reference-a]")
    assert not mutate_charts.excluded("tests/statecharts/test_x.py::test_walk[compiled]")
    assert not mutate_charts.excluded("tests/runtime/test_scenarios_s4_prompt.py::test_a[trio]")


def test_trace_checks_and_new_machines_read_the_mutated_tables() -> None:
    """What the mutant run installs reaches the engine and ``--acpfsm-check-traces`` alike."""
    record = TraceRecord(
        seq=1,
        time=0.0,
        execution_id="e",
        chart="execution",
        generation=0,
        instance=0,
        event="start_requested",
        source="running",
        target="ready",
    )
    index = Execution.compiled().transitions.index(("start_requested", "running", "starting"))
    assert not check_records([record], partial=True).ok
    mutate_charts._install(_base, Execution, Mutant("execution", index, "retarget", "ready"))
    try:
        assert check_records([record], partial=True).ok
        assert Execution.start().fire("start_requested").state == "ready"
    finally:
        mutate_charts._install(_base, Execution, None)
    assert not check_records([record], partial=True).ok
    assert Execution.start().fire("start_requested").state == "starting"


def test_a_mutant_naming_no_chart_fails_the_import() -> None:
    import subprocess
    import sys

    env = {**os.environ, MUTANT_ENV: "nochart:0:delete"}
    done = subprocess.run(
        [sys.executable, "-c", "import acpfsm.statecharts"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "no chart named 'nochart'" in done.stderr
    env[MUTANT_ENV] = "execution:0:delete"
    ok = subprocess.run(
        [sys.executable, "-c", "import acpfsm.statecharts"], env=env, timeout=60, check=False
    )
    assert ok.returncode == 0


def test_a_chart_mutant_is_killed_only_by_a_test_that_ran_and_failed(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """The mutant runner (one pytest, tests collected once): a planned test whose module did
    not collect cannot judge the mutant (not judged, with the reason); a failing test kills
    it; passing tests leave it alive. The run goes on past the collection error."""
    pytester.makepyfile(
        test_fine="""
        def test_passes():
            pass

        def test_fails():
            assert False
        """,
        test_broken="""
        raise ValueError("the seeded source no longer matches")

        def test_never():
            pass
        """,
    )
    plan = tmp_path / "plan.json"
    out = tmp_path / "out.jsonl"
    mutant = "execution:0:delete"
    plan.write_text(
        json.dumps(
            [
                {"mutant": mutant, "tests": ["test_broken.py::test_never"]},
                {"mutant": mutant, "tests": ["test_fine.py::test_passes"]},
                {
                    "mutant": mutant,
                    "tests": ["test_broken.py::test_never", "test_fine.py::test_fails"],
                },
            ]
        )
    )
    runner = mutate_charts._Runner(plan, out, budget=60.0)
    pytester.runpytest_inprocess(
        "-p",
        "no:cacheprovider",
        "-p",
        "no:anyio",
        "--continue-on-collection-errors",
        plugins=[runner],
    )
    broken, alive, killed = [json.loads(line) for line in out.read_text().splitlines()]
    assert (broken["killed"], broken["error"]) == (
        False,
        "1 of its tests were not collected (first: test_broken.py::test_never)",
    )
    assert (alive["killed"], alive["error"]) == (False, "")
    assert (killed["killed"], killed["killer"], killed["error"]) == (
        True,
        "test_fine.py::test_fails",
        "",
    )
    assert Execution.start().fire("start_requested").state == "starting"  # restored


def test_every_listed_chart_mutant_is_one_the_tool_makes() -> None:
    """A listed equivalent whose transition was removed or changed lists nothing: stale,
    caught here rather than at the next (slow) run."""
    made = {
        mutate_charts.label(chart, mutant)
        for chart in ALL_CHARTS
        for mutant in mutate_charts.enumerate_mutants(chart)
    }
    listed = set(mutate_charts.load_equivalent(REPO / mutate_charts.EQUIVALENT_FILE))
    assert listed and listed <= made, sorted(listed - made)
