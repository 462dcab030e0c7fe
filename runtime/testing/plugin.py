"""The acpfsm pytest plugin (entry point ``acpfsm``): reference-agent fixtures and trace checks.

Fixtures
    ``acpfsm_reference``
        a :class:`~acpfsm.testing.ReferenceAgent` working in a fresh directory under
        ``tmp_path``: ``async with acpfsm_reference.runtime("no_load") as rt`` gives a
        :class:`~acpfsm.runtime.Runtime` whose ``reference`` profile runs the embedded
        reference agent with those faults; ``acpfsm_reference.spec(prompt)`` is a launch
        spec for it, ``acpfsm_reference.faults`` the fault vocabulary. The fixture is
        synchronous, so it works under pytest-trio, anyio's plugin or pytest-asyncio alike:
        the Runtime is entered inside the (async) test.
    ``acpfsm_reference_factory``
        ``factory(delay=…)`` → another :class:`ReferenceAgent` (own workspace), for tests
        that need two independent agents or a slower pace.

``--acpfsm-check-traces``
    Every :class:`~acpfsm.runtime.Trace` created while a test runs (its setup, call and
    teardown, so Runtimes made by fixtures count) is recorded, and after the test's teardown
    each one is replayed against the charts by :mod:`acpfsm.tools.check_trace`. A violation
    fails the test at teardown (pytest shows ``ERROR at teardown``) with every violation and
    the offending records. Mark a test ``@pytest.mark.acpfsm_unchecked_trace`` to leave its
    traces alone (e.g. it fabricates a bad trace on purpose), or
    ``@pytest.mark.acpfsm_partial_trace`` to check them as cut-out traces (executions that
    are still running at the end are allowed). Traces are observed through
    ``Trace.listeners``, so a Trace created with ``keep=False`` is checked too.

The transition-coverage report is the sibling plugin :mod:`acpfsm.testing.coverage_plugin`
(entry point ``acpfsm_coverage``, option ``--acpfsm-transition-coverage``).

Nothing from acpfsm is imported when pytest starts; the runtime is imported on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .reference import ReferenceAgent, format_violations

if TYPE_CHECKING:
    from acpfsm.runtime.trace import TraceRecord

__all__ = ["OPTION", "TraceCollector"]

OPTION = "--acpfsm-check-traces"
UNCHECKED_MARK = "acpfsm_unchecked_trace"
PARTIAL_MARK = "acpfsm_partial_trace"
_PLUGIN_NAME = "acpfsm-check-traces"


class TraceCollector:
    """Records every Trace created between :meth:`start` and :meth:`stop` (re-entrant: an
    inner pytest session started by ``pytester`` stacks its own collector on top)."""

    def __init__(self) -> None:
        self.traces: list[list[TraceRecord]] = []
        self._original: Callable[..., None] | None = None

    def start(self) -> None:
        from acpfsm.runtime.trace import Trace

        original: Callable[..., None] = Trace.__init__
        traces = self.traces

        def init(trace: Trace, *args: Any, **kwargs: Any) -> None:
            original(trace, *args, **kwargs)
            records: list[TraceRecord] = []
            traces.append(records)
            trace.listeners.append(records.append)

        self._original = original
        setattr(Trace, "__init__", init)  # noqa: B010 - mypy forbids assigning a method

    def stop(self) -> None:
        if self._original is None:
            return
        from acpfsm.runtime.trace import Trace

        setattr(Trace, "__init__", self._original)  # noqa: B010
        self._original = None


class TraceCheckPlugin:
    """Per-session object of ``--acpfsm-check-traces``."""

    def __init__(self) -> None:
        self._collectors: dict[str, TraceCollector] = {}

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if item.get_closest_marker(UNCHECKED_MARK) is not None:
            return
        collector = TraceCollector()
        collector.start()
        self._collectors[item.nodeid] = collector

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, None, None]:
        try:
            yield
        finally:
            collector = self._collectors.pop(item.nodeid, None)
            if collector is not None:
                collector.stop()
        if collector is not None:
            self._check(item, collector)

    @staticmethod
    def _check(item: pytest.Item, collector: TraceCollector) -> None:
        from acpfsm.tools.check_trace import check_records

        partial = item.get_closest_marker(PARTIAL_MARK) is not None
        reports: list[str] = []
        for n, records in enumerate(collector.traces, 1):
            if not records:
                continue
            result = check_records(records, partial=partial)
            if not result.ok:
                title = f"trace {n} of {len(collector.traces)}"
                reports.append(format_violations(result, records, title=title))
        if reports:
            pytest.fail(
                "acpfsm --acpfsm-check-traces: a trace this test produced does not follow "
                "the charts\n" + "\n".join(reports),
                pytrace=False,
            )


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("acpfsm", "acpfsm")
    group.addoption(
        OPTION,
        action="store_true",
        default=False,
        help="replay every acpfsm trace a test produces against the charts; a violation "
        "fails the test (at teardown)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{UNCHECKED_MARK}: do not check the acpfsm traces this test produces"
    )
    config.addinivalue_line(
        "markers",
        f"{PARTIAL_MARK}: check this test's acpfsm traces as partial (runs may be unfinished)",
    )
    if config.getoption(OPTION):
        config.pluginmanager.register(TraceCheckPlugin(), _PLUGIN_NAME)


def pytest_unconfigure(config: pytest.Config) -> None:
    plugin = config.pluginmanager.get_plugin(_PLUGIN_NAME)
    if plugin is not None:
        config.pluginmanager.unregister(plugin, _PLUGIN_NAME)


@pytest.fixture
def acpfsm_reference(tmp_path: Path) -> ReferenceAgent:
    """The reference agent in a Runtime (see :class:`~acpfsm.testing.ReferenceAgent`)."""
    return ReferenceAgent(tmp_path / "acpfsm-reference")


@pytest.fixture
def acpfsm_reference_factory(tmp_path: Path) -> Callable[..., ReferenceAgent]:
    """``factory(delay=0.001)`` → a new :class:`ReferenceAgent` with its own workspace."""
    made: list[ReferenceAgent] = []

    def factory(*, delay: float = 0.001) -> ReferenceAgent:
        agent = ReferenceAgent(tmp_path / f"acpfsm-reference-{len(made) + 1}", delay=delay)
        made.append(agent)
        return agent

    return factory
