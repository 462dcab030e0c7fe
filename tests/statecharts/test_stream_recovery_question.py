"""``RecoverAgentPromptStream`` asks the Execution chart, in place, whether there is anything
to recover (``recover_stream``: only FAILED) instead of reading its state name."""

from __future__ import annotations

import pytest

from acpfsm.statecharts import (
    ChartMachine,
    EngineName,
    Execution,
)

from .recipes import EXECUTION_RECIPES, walk


def _answer(machine: ChartMachine, state: str) -> list[str]:
    step = machine.fire("stream_recovery_requested")
    assert step.targetless and machine.state == state
    return [e.name for e in step.effects]


@pytest.mark.parametrize(
    ("state", "answer"),
    [
        ("running", []),
        ("starting", []),
        ("ready", []),
        ("completed", []),
        ("failed", ["recover_stream"]),
    ],
)
def test_only_a_failed_execution_has_a_stream_to_recover(
    engine: EngineName, state: str, answer: list[str]
) -> None:
    ex = walk(Execution.start(engine=engine), EXECUTION_RECIPES[state])
    assert ex.state == state
    assert _answer(ex, state) == answer
    if state == "failed":  # then the runtime checks the carrier and fires the fact
        assert ex.fire("recovered").state == "ready"
