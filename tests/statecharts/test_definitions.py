"""Every chart is a valid, pure, synchronous declaration, loud on illegal events, and every
declared transition can be taken with the event data its guard names."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import acpfsm.statecharts as charts_pkg
from acpfsm.statecharts import (
    ALL_CHARTS,
    Chart,
    IllegalTransition,
    declared_transitions,
)

from .recipes import CHARTS, GUARD_DATA, walk

STATECHARTS_DIR = Path(charts_pkg.__file__).resolve().parent
FORBIDDEN_IMPORTS = {
    "anyio",
    "trio",
    "asyncio",
    "httpx",
    "httpx_ws",
    "time",
    "socket",
    "subprocess",
}


def test_every_chart_is_listed_and_has_a_recipe() -> None:
    assert set(CHARTS) == set(ALL_CHARTS)
    assert len({c.chart_name for c in ALL_CHARTS}) == len(ALL_CHARTS)


@pytest.mark.parametrize("chart", ALL_CHARTS, ids=lambda c: c.chart_name)
def test_chart_runs_on_the_sync_engine(chart: type[Chart]) -> None:
    factories, _ = CHARTS[chart]
    instance = factories[0]()
    assert type(instance._engine).__name__ == "SyncEngine"
    assert chart.allow_event_without_transition is False
    assert chart.catch_errors_as_events is False


@pytest.mark.parametrize("path", sorted(STATECHARTS_DIR.glob("*.py")), ids=lambda p: p.name)
def test_statecharts_are_pure(path: Path) -> None:
    """No I/O, no clock, no async in statecharts/ (style.md practice 1-2)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        assert not isinstance(node, ast.AsyncFunctionDef | ast.Await), f"async code in {path}"
        if isinstance(node, ast.keyword):
            assert node.arg not in ("invoke", "delay"), f"{path.name} uses {node.arg}="
        if isinstance(node, ast.Import):
            names = {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = {node.module.split(".")[0]}
        else:
            continue
        assert not names & FORBIDDEN_IMPORTS, f"{path.name} imports {names & FORBIDDEN_IMPORTS}"


@pytest.mark.parametrize("chart", ALL_CHARTS, ids=lambda c: c.chart_name)
def test_no_async_callbacks(chart: type[Chart]) -> None:
    for name, member in inspect.getmembers(chart):
        assert not inspect.iscoroutinefunction(member), f"{chart.__name__}.{name} is async"


@pytest.mark.parametrize("chart", ALL_CHARTS, ids=lambda c: c.chart_name)
def test_an_illegal_event_raises_naming_chart_state_and_event(chart: type[Chart]) -> None:
    factories, _ = CHARTS[chart]
    instance = factories[0]()
    before = instance.state_ids
    with pytest.raises(IllegalTransition) as info:
        instance.fire("no_such_event_happened")
    err = info.value
    assert err.chart == chart.chart_name
    assert err.event_name == "no_such_event_happened"
    assert err.states == before
    assert chart.chart_name in str(err)
    assert before[-1] in str(err)
    assert "no_such_event_happened" in str(err)
    assert instance.state_ids == before  # nothing moved


def test_a_declared_event_in_the_wrong_state_raises() -> None:
    from acpfsm.statecharts import PromptGeneration

    gen = PromptGeneration(7)
    with pytest.raises(IllegalTransition, match="'steered' is not allowed in state admitted"):
        gen.fire("steered")


def _sweep_cases() -> list[tuple[type[Chart], tuple[str, str, str]]]:
    return [
        (chart, triple) for chart in ALL_CHARTS for triple in sorted(declared_transitions(chart))
    ]


@pytest.mark.parametrize(
    ("chart", "triple"),
    _sweep_cases(),
    ids=lambda v: v.chart_name if isinstance(v, type) else "-".join(v),
)
def test_every_declared_transition_is_takeable(
    chart: type[Chart], triple: tuple[str, str, str]
) -> None:
    """Bring the chart to ``source``, fire ``event`` with each candidate guard data, and
    require that one of them lands exactly on ``target``."""
    source, event, target = triple
    factories, recipes = CHARTS[chart]
    assert source in recipes, f"no recipe to reach {source!r}"
    seen: list[tuple[str, ...]] = []
    for factory in factories:
        for data in GUARD_DATA.get(event, [{}]):
            try:
                instance = walk(factory(), recipes[source])
            except IllegalTransition:
                continue
            if source not in instance.state_ids:
                continue
            try:
                instance.fire(event, **data)
            except IllegalTransition:
                continue
            last = instance.history[-1]
            seen.append(instance.state_ids)
            if (last.source, last.event, last.target) == (source, event, target):
                return
    pytest.fail(f"{chart.chart_name}: {source} --{event}--> {target} never taken; saw {seen}")
