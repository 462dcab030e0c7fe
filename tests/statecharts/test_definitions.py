"""Every chart is a valid, pure, synchronous declaration, loud on illegal events on both
engines, and every declared transition can be taken with the event data its guard names
(the sweep: mechanical, it pins no behaviour; the walks in the other modules do)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import acpfsm.statecharts as charts_pkg
from acpfsm.statecharts import (
    ALL_CHARTS,
    Chart,
    ChartDefinitionError,
    EngineName,
    IllegalTransition,
    PromptGeneration,
    declared_transitions,
)
from acpfsm.statecharts._machine import Machine, ReferenceMachine

from .recipes import CHARTS, GUARD_DATA, fire, walk

ENGINES: tuple[EngineName, ...] = ("compiled", "reference")

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
def test_chart_starts_on_either_engine(chart: type[Chart]) -> None:
    constants = CHARTS[chart][0][0]
    compiled = chart.start(engine="compiled", **constants)
    reference = chart.start(engine="reference", **constants)
    assert isinstance(compiled, Machine) and isinstance(reference, ReferenceMachine)
    assert type(reference.sm._engine).__name__ == "SyncEngine"  # type: ignore[attr-defined]
    assert compiled.state == reference.state == chart.compiled().initial
    assert chart.allow_event_without_transition is False
    assert chart.catch_errors_as_events is False


def test_the_default_engine_is_compiled_unless_the_environment_says_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ACPFSM_ENGINE", raising=False)
    assert isinstance(PromptGeneration.start(), Machine)
    monkeypatch.setenv("ACPFSM_ENGINE", "reference")
    assert isinstance(PromptGeneration.start(), ReferenceMachine)
    assert isinstance(PromptGeneration.start(engine="compiled"), Machine)
    monkeypatch.setenv("ACPFSM_ENGINE", "fast")
    with pytest.raises(ChartDefinitionError, match="ACPFSM_ENGINE='fast'"):
        PromptGeneration.start()


@pytest.mark.parametrize("path", sorted(STATECHARTS_DIR.glob("*.py")), ids=lambda p: p.name)
def test_statecharts_are_pure(path: Path) -> None:
    """No I/O, no clock, no async in statecharts/ (AGENTS.md rule 2)."""
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


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("chart", ALL_CHARTS, ids=lambda c: c.chart_name)
def test_an_illegal_event_raises_naming_chart_state_and_event(
    chart: type[Chart], engine: EngineName
) -> None:
    instance = chart.start(engine=engine, tags={"execution_id": "e-9"}, **CHARTS[chart][0][0])
    before = instance.configuration
    with pytest.raises(IllegalTransition) as info:
        instance.fire("no_such_event_happened")
    err = info.value
    assert err.chart == chart.chart_name
    assert err.event_name == "no_such_event_happened"
    assert err.states == tuple(reversed(before))  # outermost first
    assert err.execution_id == "e-9"
    assert chart.chart_name in str(err)
    assert before[0] in str(err)
    assert "no_such_event_happened" in str(err)
    assert instance.configuration == before  # nothing moved


@pytest.mark.parametrize("engine", ENGINES)
def test_a_declared_event_in_the_wrong_state_raises(engine: EngineName) -> None:
    gen = PromptGeneration.start(engine=engine, generation=7)
    with pytest.raises(IllegalTransition, match="'steered' is not allowed in state live, admitted"):
        gen.fire("steered")
    assert gen.state == "admitted"


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
    """Bring the chart to ``source`` (or, for a compound, to each state inside it), fire
    ``event`` with each candidate guard data, and require that one of them takes exactly
    ``source --event--> target``."""
    source, event, target = triple
    constants_tried, recipes = CHARTS[chart]
    assert source in recipes, f"no recipe to reach {source!r}"
    inside = chart.compiled().ancestors
    starts = [source, *(s for s in recipes if s != source and source in inside[s])]
    seen: list[tuple[str, str, str]] = []
    tries = [
        (c, s, d) for c in constants_tried for s in starts for d in GUARD_DATA.get(event, [{}])
    ]
    for constants, start, data in tries:
        try:
            instance = walk(chart.start(**constants), recipes[start])
        except IllegalTransition:
            continue
        if not instance.is_in(source):
            continue
        try:
            step = fire(instance, event, **data)
        except IllegalTransition:
            continue
        seen.append((step.source, step.event, step.target))
        if seen[-1] == (source, event, target):
            return
    pytest.fail(f"{chart.chart_name}: {source} --{event}--> {target} never taken; saw {seen}")
