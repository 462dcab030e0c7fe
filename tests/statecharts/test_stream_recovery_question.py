"""``RecoverAgentPromptStream`` asks two charts, in place, instead of reading their state
names: the SessionInit chart whether the init is over (``recovery_allowed``: before that the
startup owns its stream, R34) and the Execution chart whether there is anything to recover
(``recover_stream``: only FAILED)."""

from __future__ import annotations

import pytest

from acpfsm.statecharts import (
    ChartMachine,
    EngineName,
    Execution,
    IllegalTransition,
    SessionInit,
    peek,
)

from .recipes import EXECUTION_RECIPES, SESSION_INIT_RECIPES, walk

_INIT_OVER = ["sending", "admitted", "ready", "resume_context_pending"]
_INIT_WORKING = ["pending", "connecting_stream", "handshaking", "loading", "settling"]
_INIT_WORKING += ["announcing"]


def _answer(machine: ChartMachine, state: str) -> list[str]:
    step = machine.fire("stream_recovery_requested")
    assert step.targetless and machine.state == state
    return [e.name for e in step.effects]


@pytest.mark.parametrize("state", _INIT_OVER)
def test_an_init_that_is_over_allows_the_recovery(engine: EngineName, state: str) -> None:
    init = walk(SessionInit.start(engine=engine), SESSION_INIT_RECIPES[state])
    assert init.state == state
    asked = peek(init, "stream_recovery_requested")
    assert asked is not None and [e.name for e in asked.effects] == ["recovery_allowed"]
    assert _answer(init, state) == ["recovery_allowed"]


@pytest.mark.parametrize("state", _INIT_WORKING)
def test_the_startup_owns_the_stream_until_the_init_is_over(engine: EngineName, state: str) -> None:
    init = walk(SessionInit.start(engine=engine), SESSION_INIT_RECIPES[state])
    assert _answer(init, state) == []


def test_a_failed_init_has_ended(engine: EngineName) -> None:
    init = walk(
        SessionInit.start(engine=engine),
        [*SESSION_INIT_RECIPES["handshaking"], ("initialize_failed", {})],
    )
    assert init.ended and peek(init, "stream_recovery_requested") is None
    with pytest.raises(IllegalTransition):
        init.fire("stream_recovery_requested")


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
