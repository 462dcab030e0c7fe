"""Test-suite wiring.

Async tests run under pytest-trio (``trio_mode = true``). A test or module marked
``both_backends`` runs twice: once under pytest-trio (virtual clock available through
``autojump_clock``) and once under asyncio through ``anyio.run``. The asyncio run takes no
async fixtures (pytest-trio's fixtures are trio-only), so such tests open their resources
inside the test body. Timeouts that the trio run skips with the virtual clock are shrunk on
asyncio through the ``time_scale`` fixture, so nothing sleeps for real for seconds.

``postgres_cluster`` (session): a throwaway PostgreSQL cluster (``initdb`` into a temporary
folder, a unix socket only; see :mod:`acpfsm.testing.postgres`); unavailable → the test
*fails*.

``nats_server``: a throwaway NATS server with JetStream (Debian's ``nats-server`` on a free
loopback port, its store in a temporary folder; see :mod:`acpfsm.testing.natsserver`), one per
test (a test may kill and restart it); unavailable → the test *fails*.

``sdk_corpus`` (session): the official ACP SDK's golden messages and example agents, fetched
once into ``.cache/`` (see ``tests/peers/sdk_corpus.py``); unavailable → the test *fails*.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from acpfsm.statecharts import ALL_CHARTS
from acpfsm.testing.natsserver import NatsServer, NatsUnavailable, throwaway_nats
from acpfsm.testing.postgres import ClusterUnavailable, PostgresCluster, throwaway_cluster
from tests.peers.sdk_corpus import SdkCorpus, SdkCorpusUnavailable, ensure_sdk_corpus

# The charts compile on first use; compile them all here, before any test: a declaration the
# compiled engine cannot run fails the whole run loudly, and the compiler's statements run
# outside every test (per-mutant test selection then picks all tests for them).
for _chart in ALL_CHARTS:
    _chart.compiled()
del _chart


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "both_backends: run the async test under trio and again under asyncio"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker("both_backends") is None:
        return
    if "backend" not in metafunc.fixturenames:
        metafunc.fixturenames.append("backend")
    metafunc.parametrize("backend", ["trio", "asyncio"], indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """The async backend this test runs on (``trio`` unless parametrized)."""
    return str(getattr(request, "param", "trio"))


@pytest.fixture(scope="session")
def sdk_corpus() -> SdkCorpus:
    try:
        return ensure_sdk_corpus()
    except SdkCorpusUnavailable as exc:
        pytest.fail(f"the official ACP SDK's corpus is needed: {exc}", pytrace=False)


@pytest.fixture
def time_scale(backend: str) -> float:
    """Multiply lifecycle timeouts by this: 1 under trio (virtual clock), tiny under asyncio."""
    return 1.0 if backend == "trio" else 0.002


def _is_asyncio_item(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("backend") == "asyncio"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _is_asyncio_item(item):
            item.own_markers = [m for m in item.own_markers if m.name != "trio"]


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not _is_asyncio_item(pyfuncitem) or not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    kwargs: dict[str, Any] = {name: pyfuncitem.funcargs[name] for name in names}
    anyio.run(functools.partial(pyfuncitem.obj, **kwargs), backend="asyncio")
    return True


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """A throwaway PostgreSQL cluster for this test process (one per xdist worker): started
    on first use, removed at the end; unavailable → the test *fails* with the reason."""
    try:
        with throwaway_cluster() as cluster:
            yield cluster
    except ClusterUnavailable as exc:
        pytest.fail(f"PostgreSQL is needed for the PostgresStore tests: {exc}", pytrace=False)


@pytest.fixture
def nats_server() -> Iterator[NatsServer]:
    """A throwaway NATS server with JetStream for this test: started, killed at the end;
    unavailable → the test *fails* with the reason."""
    try:
        with throwaway_nats() as server:
            yield server
    except NatsUnavailable as exc:
        pytest.fail(f"nats-server is needed for the event bus tests: {exc}", pytrace=False)
