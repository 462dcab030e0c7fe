"""``RecoverAgentPromptStream`` asks the SessionInit chart, in place, whether the init is over
(``recover_stream``: prompting or booted), and the Execution chart whether there is anything
to recover (``recover_stream``: only FAILED), instead of reading their state names."""

from __future__ import annotations

import pytest

from acpfsm.statecharts import (
    ChartMachine,
    EngineName,
    Execution,
    SessionInit,
    peek,
)

from .recipes import EXECUTION_RECIPES, SESSION_INIT_RECIPES, walk


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


@pytest.mark.parametrize(
    ("state", "answer"),
    [
        ("pending", []),
        ("handshaking", []),  # the init is not over: the startup owns the stream (R34)
        ("sending", ["recover_stream"]),
        ("admitted", ["recover_stream"]),
        ("ready", ["recover_stream"]),
        ("resume_context_pending", ["recover_stream"]),
    ],
)
def test_only_an_init_that_is_over_lets_a_stream_be_recovered(
    engine: EngineName, state: str, answer: list[str]
) -> None:
    init = walk(SessionInit.start(engine=engine), SESSION_INIT_RECIPES[state])
    asked = peek(init, "stream_recovery_requested")
    assert asked is not None and [e.name for e in asked.effects] == answer
    assert _answer(init, state) == answer


@pytest.mark.parametrize("end", ["failed", "abandoned"])
def test_an_ended_init_has_no_stream_to_recover(engine: EngineName, end: str) -> None:
    recipe = SESSION_INIT_RECIPES["connecting_stream"]
    last = ("stream_connect_timed_out", {}) if end == "failed" else ("init_abandoned", {})
    init = walk(SessionInit.start(engine=engine), [*recipe, last])
    assert init.state == end and init.ended
    assert peek(init, "stream_recovery_requested") is None
