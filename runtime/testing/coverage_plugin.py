"""Transition coverage: a pytest plugin (entry point ``acpfsm_coverage``).

Theory of operation
-------------------
At session start the plugin registers a transition observer
(:func:`acpfsm.statecharts.add_transition_observer`) that records every fired
``(chart, source, event, target)``. After the test loop it compares the record with
:func:`~acpfsm.statecharts.declared_transitions` of every chart in
``acpfsm.statecharts.ALL_CHARTS`` (a chart that declares nothing has nothing to cover) and
prints, in the terminal summary, the percentage per chart and overall and every declared
transition never exercised.

The plugin is installed with acpfsm, so it is active in every project that has acpfsm in its
environment: it records and prints nothing unless ``--acpfsm-transition-coverage=PCT`` is
given, which also makes the session fail (exit status 1) when the overall coverage is below
``PCT`` (``=0`` for an informational report). The ini option
``acpfsm_transition_charts`` (lines of ``module:attribute``, the attribute a chart class or a
sequence of them) replaces ``ALL_CHARTS``; the plugin's own tests use it for toy charts.

This module is imported when pytest starts, before any test: it imports nothing from acpfsm at
module level (the charts are imported lazily when the session starts), and never test code.

Under pytest-xdist each worker records what its tests fired and hands it to the controller
with its ``workeroutput``; the controller joins them and reports (and fails) once.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from acpfsm.statecharts import Chart, TransitionRecord

__all__ = [
    "ChartCoverage",
    "CoverageReport",
    "TransitionRecorder",
    "compute_coverage",
]

OPTION = "--acpfsm-transition-coverage"
INI_CHARTS = "acpfsm_transition_charts"
_PLUGIN_NAME = "acpfsm-transition-coverage"
_WORKER_KEY = "acpfsm_transitions_fired"

Fired = tuple[str, str, str, str]
"""``(chart_name, source, event, target)``."""


@dataclass(frozen=True, slots=True)
class ChartCoverage:
    chart: str
    declared: int
    missed: tuple[tuple[str, str, str], ...]
    """Never-exercised ``(source, event, target)``, sorted."""

    @property
    def covered(self) -> int:
        return self.declared - len(self.missed)


@dataclass(frozen=True, slots=True)
class CoverageReport:
    charts: tuple[ChartCoverage, ...]

    @property
    def declared(self) -> int:
        return sum(c.declared for c in self.charts)

    @property
    def covered(self) -> int:
        return sum(c.covered for c in self.charts)

    @property
    def percent(self) -> float:
        """Covered share of all declared transitions (100 when nothing is declared)."""
        return 100.0 if self.declared == 0 else 100.0 * self.covered / self.declared

    def below(self, threshold: float) -> bool:
        # Exact comparison: 99.99 % must not pass a 100 % threshold through rounding.
        return self.covered * 100 < threshold * self.declared


def compute_coverage(charts: Iterable[type[Chart]], fired: Iterable[Fired]) -> CoverageReport:
    """Coverage of every declared transition of ``charts`` by the ``fired`` records (matched by
    ``chart_name``; a targetless transition is ``(source, event, source)`` in both). Fired
    transitions of other charts are ignored."""
    from acpfsm.statecharts import declared_transitions

    seen: dict[str, set[tuple[str, str, str]]] = {}
    for chart, source, event, target in fired:
        seen.setdefault(chart, set()).add((source, event, target))
    out: list[ChartCoverage] = []
    for chart_cls in charts:
        wanted = set(declared_transitions(chart_cls))
        hit = seen.get(chart_cls.chart_name, set())
        out.append(ChartCoverage(chart_cls.chart_name, len(wanted), tuple(sorted(wanted - hit))))
    return CoverageReport(tuple(out))


def _floor1(value: float) -> str:
    return f"{math.floor(value * 10) / 10:.1f}"


def _resolve_charts(specs: Sequence[str]) -> tuple[type[Chart], ...]:
    charts: list[type[Chart]] = []
    for spec in specs:
        module_name, _, attr = spec.partition(":")
        if not attr:
            raise pytest.UsageError(f"{INI_CHARTS}: expected module:attribute, got {spec!r}")
        value: Any = getattr(importlib.import_module(module_name), attr)
        charts.extend(value if isinstance(value, list | tuple) else [value])
    return tuple(charts)


class TransitionRecorder:
    """The per-session plugin object: records fired transitions and reports coverage."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.threshold: float | None = config.getoption(OPTION)
        self.fired: set[Fired] = set()
        self.report: CoverageReport | None = None
        self.failed = False
        self._registered = False
        self.worker = hasattr(config, "workerinput")
        """An xdist worker: it records and hands its record over; the controller reports."""

    def _observe(self, record: TransitionRecord) -> None:
        self.fired.add((record.chart, record.source, record.event, record.target))

    def charts(self) -> tuple[type[Chart], ...]:
        specs: list[str] = self.config.getini(INI_CHARTS)
        if specs:
            return _resolve_charts(specs)
        from acpfsm import statecharts

        return tuple(getattr(statecharts, "ALL_CHARTS", ()))

    def start(self) -> None:
        from acpfsm.statecharts import add_transition_observer

        add_transition_observer(self._observe)
        self._registered = True

    def stop(self) -> None:
        if self._registered:
            from acpfsm.statecharts import remove_transition_observer

            remove_transition_observer(self._observe)
            self._registered = False

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.start()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Any:
        result = yield
        if self.config.option.collectonly or self.worker:
            return result
        self.report = compute_coverage(self.charts(), self.fired)
        if self.threshold is not None and self.report.below(self.threshold):
            self.failed = True
            session.testsfailed += 1
        return result

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.stop()
        if self.worker:
            output: dict[str, Any] = getattr(self.config, "workeroutput")  # noqa: B009
            output[_WORKER_KEY] = [list(f) for f in sorted(self.fired)]

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """xdist (controller): a worker finished; add what its tests fired."""
        fired = getattr(node, "workeroutput", {}).get(_WORKER_KEY, ())
        self.fired.update((str(c), str(s), str(e), str(t)) for c, s, e, t in fired)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        report = self.report
        if report is None:
            return
        tr = terminalreporter
        tr.write_sep("=", "acpfsm transition coverage")
        for chart in report.charts:
            pct = 100.0 if chart.declared == 0 else 100.0 * chart.covered / chart.declared
            tr.write_line(
                f"{chart.chart}: {chart.covered}/{chart.declared} transitions ({_floor1(pct)}%)"
            )
            if chart.missed:
                tr.write_line("  never exercised:")
                for source, event, target in chart.missed:
                    tr.write_line(f"    {source} --{event}--> {target}")
        tr.write_line(
            f"TOTAL: {report.covered}/{report.declared} transitions ({_floor1(report.percent)}%)"
        )
        if self.failed:
            tr.write_line(
                f"FAIL: transition coverage {_floor1(report.percent)}% is below the required "
                f"{self.threshold:g}%",
                red=True,
                bold=True,
            )


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("acpfsm", "acpfsm transition coverage")
    group.addoption(
        OPTION,
        type=float,
        default=None,
        metavar="PCT",
        help="report the transition coverage of the declared charts and fail the session "
        "when less than PCT %% of them fired (0: report only; without it: nothing)",
    )
    parser.addini(
        INI_CHARTS,
        type="linelist",
        default=[],
        help="charts to cover as module:attribute lines (default: acpfsm.statecharts.ALL_CHARTS)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption(OPTION) is None:  # not asked for: silent (other projects load us too)
        return
    config.pluginmanager.register(TransitionRecorder(config), _PLUGIN_NAME)


def pytest_unconfigure(config: pytest.Config) -> None:
    recorder = config.pluginmanager.get_plugin(_PLUGIN_NAME)
    if isinstance(recorder, TransitionRecorder):
        recorder.stop()
        config.pluginmanager.unregister(recorder, _PLUGIN_NAME)
