"""``make mutate``'s per-mutant test selection (tests/mutation/selection.py): the changed
lines of a mutant, the statement they belong to, and the tests chosen for it."""

from __future__ import annotations

import ast
import json
import time
from pathlib import Path

import pytest

from tests.mutation import selection
from tests.mutation.selection import (
    AT_IMPORT,
    changed_lines,
    merge,
    one_backend,
    scope,
    select,
)

pytest_plugins = ["pytester"]

SOURCE = """\
LIMIT = 3


@decorate(5)
def decide(x: int, y: int = 2) -> bool:
    if x > LIMIT and (
        y < 1
    ):
        return True
    try:
        pass
    except ValueError:
        x += 1
    return False


class C:
    flag = True

    def method(self) -> int:
        return 1
"""


def test_changed_lines_name_the_pristine_lines_a_mutant_rewrote() -> None:
    mutated = SOURCE.replace("y < 1", "y <= 1").replace("return 1", "return 2")
    assert changed_lines(SOURCE, mutated) == {7, 21}
    assert changed_lines(SOURCE, SOURCE) == set()


def test_a_line_in_a_function_body_maps_to_its_statement_and_import_time_lines_to_none() -> None:
    tree = ast.parse(SOURCE)
    assert scope(tree, 7) == range(6, 9)  # a multi-line condition: the if's header lines
    assert scope(tree, 9) == range(9, 10)
    assert scope(tree, 13) == range(13, 14)  # in an except clause
    assert scope(tree, 21) == range(21, 22)  # a method's body
    for import_time in (1, 4, 5, 18):  # a constant, a decorator, a default, a class field
        assert scope(tree, import_time) is None


def test_the_covering_tests_are_chosen_fastest_first_and_a_failed_one_never(
    tmp_path: Path,
) -> None:
    state, tree = tmp_path / "state", tmp_path / "tree"
    for folder in (state / "pristine", tree):
        (folder / "m.py").parent.mkdir(parents=True, exist_ok=True)
        (folder / "m.py").write_text(SOURCE)
    tests = {
        "t::slow": {"duration": 3.0, "passed": True},
        "t::fast": {"duration": 0.1, "passed": True},
        "t::broken": {"duration": 0.0, "passed": False},
        "t::other": {"duration": 0.2, "passed": True},
    }
    lines = {"m.py": {"6": ["t::slow", "t::broken"], "7": ["t::fast"], "21": ["t::other"]}}
    (state / "map.json").write_text(json.dumps({"tests": tests, "lines": lines}))

    (tree / "m.py").write_text(SOURCE.replace("y < 1", "y <= 1"))
    assert select(state, tree, ["m.py"])[:2] == (["t::fast", "t::slow"], ["m.py:7"])

    (tree / "m.py").write_text(SOURCE.replace("x += 1", "x -= 1"))  # no test ran it
    assert select(state, tree, ["m.py"])[0] == []

    (tree / "m.py").write_text(SOURCE.replace("flag = True", "flag = False"))  # import time
    assert select(state, tree, ["m.py"])[0] == ["t::fast", "t::other", "t::slow"]

    # a function body that also ran at import (its result is every test's): all of them
    lines["m.py"]["21"] = [AT_IMPORT, "t::other"]
    (state / "map.json").write_text(json.dumps({"tests": tests, "lines": lines}))
    (tree / "m.py").write_text(SOURCE.replace("return 1", "return 2"))
    assert select(state, tree, ["m.py"])[0] == ["t::fast", "t::other", "t::slow"]


def test_a_test_file_recorded_again_replaces_its_tests_and_lines_only() -> None:
    kept = {
        "tests": {"a.py::t": {"duration": 1.0, "passed": True}, "b.py::t": {"duration": 2.0}},
        "lines": {"m.py": {"3": [AT_IMPORT, "a.py::t", "b.py::t"], "4": ["b.py::t"]}},
    }
    fresh = {"tests": {"b.py::u": {"duration": 0.5}}, "lines": {"m.py": {"3": ["b.py::u"]}}}
    merged = merge(kept, fresh, keep={"a.py"})
    assert sorted(merged["tests"]) == ["a.py::t", "b.py::u"]
    assert merged["lines"] == {"m.py": {"3": [AT_IMPORT, "a.py::t", "b.py::u"]}}


def test_each_selected_test_is_bounded_by_its_own_recorded_duration(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fast test a mutant hangs is stopped at its own bound, not at the slowest selected
    test's (the run order is fastest first, so the hang comes first)."""
    monkeypatch.setattr(selection, "MIN_TIMEOUT", 0.5)
    pytester.makepyfile(
        test_inner="""
        import time

        def test_slow():
            pass

        def test_hangs():
            time.sleep(30)
        """
    )
    order = selection.Order(
        ["test_inner.py::test_hangs", "test_inner.py::test_slow"],
        {"test_inner.py::test_hangs": 0.01, "test_inner.py::test_slow": 20.0},
    )
    started = time.monotonic()
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-p", "no:anyio", "-o", "timeout=80", "-x", plugins=[order]
    )
    result.assert_outcomes(failed=1)
    assert "Timeout" in result.stdout.str()
    assert time.monotonic() - started < 20  # not the slow test's 80 s bound
    assert selection.hang_bound(0.01) == 0.5
    assert selection.hang_bound(20.0) == selection.TIMEOUT_FACTOR * 20.0
    assert selection.hang_bound(0.01, real_processes=True) == selection.MIN_TIMEOUT_PROCESSES


def test_a_test_run_on_both_backends_is_selected_on_trio_only() -> None:
    both = {
        "t.py::a[trio]",
        "t.py::a[asyncio]",
        "t.py::b[asyncio-Models]",
        "t.py::b[trio-Models]",
        "t.py::c[asyncio]",  # its trio run failed in the record: not selectable, so kept
        "t.py::d",
        "t.py::e[asyncio_x]",
    }
    assert one_backend(both) == {
        "t.py::a[trio]",
        "t.py::b[trio-Models]",
        "t.py::c[asyncio]",
        "t.py::d",
        "t.py::e[asyncio_x]",
    }
