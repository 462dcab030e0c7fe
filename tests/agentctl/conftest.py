"""Fixtures for the tests against the real agentctl (see :mod:`.agentctl_server`).

``agentctl_binary`` (session): the pinned binary, fetched once into ``.cache/agentctl/``;
unavailable → the test *fails* with the reason. ``agentctl`` (function): a fresh agentctl
on loopback, stopped at the end together with every agent it started (the teardown fails
the test if any survived).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .agentctl_server import AgentctlServer, AgentctlUnavailable, ensure_agentctl_binary


@pytest.fixture(scope="session")
def agentctl_binary() -> Path:
    try:
        return ensure_agentctl_binary()
    except AgentctlUnavailable as exc:
        pytest.fail(f"the real agentctl is needed for tests/agentctl: {exc}", pytrace=False)


def _start(binary: Path, root: Path) -> AgentctlServer:
    server = AgentctlServer(binary, root)
    try:
        server.start()
    except AgentctlUnavailable as exc:
        pytest.fail(f"agentctl did not start: {exc}", pytrace=False)
    return server


@pytest.fixture
def agentctl(agentctl_binary: Path, tmp_path: Path) -> Iterator[AgentctlServer]:
    server = _start(agentctl_binary, tmp_path / "agentctl")
    try:
        yield server
    finally:
        left = server.stop()
    assert not left, f"processes of agentctl survived the test: {left}"


@pytest.fixture
def agentctl_factory(agentctl_binary: Path, tmp_path: Path) -> Iterator[_Factory]:
    factory = _Factory(agentctl_binary, tmp_path)
    try:
        yield factory
    finally:
        left = [pid for server in factory.servers for pid in server.stop()]
    assert not left, f"processes of agentctl survived the test: {left}"


class _Factory:
    """Starts more agentctl servers (each stopped at the end of the test)."""

    def __init__(self, binary: Path, root: Path) -> None:
        self.binary = binary
        self.root = root
        self.servers: list[AgentctlServer] = []

    def __call__(self) -> AgentctlServer:
        server = _start(self.binary, self.root / f"agentctl-{len(self.servers)}")
        self.servers.append(server)
        return server
