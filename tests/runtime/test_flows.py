"""The drivers' decisions between two chart steps (runtime/session/flows.py), each a pure
function checked here as its whole table."""

from __future__ import annotations

import dataclasses

import pytest

from acpfsm.runtime.session.flows import FLOW, TRIGGER_ANSWERS, trigger_fact

#: (answer, retrying) → the PromptGeneration fact (kandev triggerPrompt / dispatchPrompt and
#: retryPromptAfterReconnect).
TRIGGER_TABLE = {
    ("accepted", False): "dispatch_accepted",
    ("accepted", True): "dispatch_accepted",
    # the request was not written: wait for the carrier and send it
    ("not_connected", False): "dispatch_unreachable",
    ("not_connected", True): "dispatch_unreachable",
    # written, then the stream dropped: the agent may have it, never sent twice (kandev H2),
    # but the retry's own send treats it as not connected
    ("lost_while_waiting", False): "dispatch_failed",
    ("lost_while_waiting", True): "dispatch_unreachable",
    # any other error fails the prompt, the first send or the retry's
    ("failed", False): "dispatch_failed",
    ("failed", True): "dispatch_failed",
}


@pytest.mark.parametrize(("answer", "retrying"), sorted(TRIGGER_TABLE))
def test_each_prompt_request_answer_is_its_chart_fact(answer: str, retrying: bool) -> None:
    assert trigger_fact(answer, retrying=retrying) == TRIGGER_TABLE[answer, retrying]


def test_the_table_covers_every_answer() -> None:
    assert {a for a, _ in TRIGGER_TABLE} == set(TRIGGER_ANSWERS)


def test_the_flow_table_is_read_only() -> None:
    """FLOW is one module-level table shared by every execution's drivers: none of them can
    change an entry under another."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        FLOW["wait_for_carrier"].then = "dispatch_accepted"  # type: ignore[misc]
