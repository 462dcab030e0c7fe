"""The chart walks run on both engines: the compiled one and python-statemachine's own."""

from __future__ import annotations

import pytest

from acpfsm.statecharts import EngineName


@pytest.fixture(params=["compiled", "reference"])
def engine(request: pytest.FixtureRequest) -> EngineName:
    """The engine a walk's machines run on (every walk runs on both)."""
    value: EngineName = request.param
    return value
