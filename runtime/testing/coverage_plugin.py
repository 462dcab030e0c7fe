"""Placeholder; replaced by the transition-coverage plugin."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--acpfsm-transition-coverage", type=float, default=None)
