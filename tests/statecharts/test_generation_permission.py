"""The PromptGeneration chart answers the permission broker's question in place
(``permission_requested``): a turn that is over (ended in any way, or superseded) has its
agent's permission requests settled at once (``turn_over``); a live one lets them wait. The
runtime reads no state name to decide."""

from __future__ import annotations

import pytest

from acpfsm.statecharts import EngineName, PromptGeneration, peek

from .recipes import PROMPT_RECIPES, walk

_LIVE = ["admitted", "sending", "reconnecting", "awaited", "stall_reported", "handed_off"]
_LIVE += ["abandoned", "releasing", "escalating"]
_OVER = ["completed", "failed", "undelivered", "cancel_escalated", "disconnected"]
_OVER += ["withdrawn", "stopped", "superseded"]


@pytest.mark.parametrize("state", _LIVE)
def test_a_live_turn_lets_the_request_wait(engine: EngineName, state: str) -> None:
    g = walk(PromptGeneration.start(engine=engine, generation=1), PROMPT_RECIPES[state])
    assert g.state == state
    asked = peek(g, "permission_requested")
    assert asked is not None and asked.effects == ()
    step = g.fire("permission_requested")
    assert step.targetless and step.effects == () and g.state == state


@pytest.mark.parametrize("state", _OVER)
def test_a_turn_that_is_over_settles_the_request(engine: EngineName, state: str) -> None:
    g = walk(PromptGeneration.start(engine=engine, generation=1), PROMPT_RECIPES[state])
    assert g.state == state
    asked = peek(g, "permission_requested")
    assert asked is not None and [e.name for e in asked.effects] == ["turn_over"]
    step = g.fire("permission_requested")
    assert step.targetless and [e.name for e in step.effects] == ["turn_over"]
    assert g.state == state
