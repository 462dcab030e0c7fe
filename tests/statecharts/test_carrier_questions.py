"""The AgentStream chart's questions, asked in place so that the runtime reads no state name:
``carrier_awaited`` (a prompt's retry after a reconnect, a stream recovery: is the carrier
up, on its way, or not coming back) and ``event_stream_ended`` (the event pump: is an event
stream that ended without saying why a loss)."""

from __future__ import annotations

import pytest

from acpfsm.statecharts import AgentStream, EngineName, peek

from .recipes import STREAM_RECIPES, walk


def _ask(engine: EngineName, state: str, event: str) -> list[str]:
    stream = walk(AgentStream.start(engine=engine), STREAM_RECIPES[state])
    asked = peek(stream, event)
    assert asked is not None
    before = stream.state
    step = stream.fire(event)
    assert step.targetless and stream.state == before
    assert [e.name for e in asked.effects] == [e.name for e in step.effects]
    return [e.name for e in step.effects]


@pytest.mark.parametrize(
    ("state", "answer"),
    [
        ("connected", ["report_connected"]),
        ("announced", []),  # a redial is under way
        ("silent", []),
        ("disconnected", ["report_not_connected"]),
        ("connecting", ["report_not_connected"]),
        ("giving_up", ["report_not_connected"]),
    ],
)
def test_a_wait_for_the_carrier_asks_the_chart(
    engine: EngineName, state: str, answer: list[str]
) -> None:
    assert _ask(engine, state, "carrier_awaited") == answer


@pytest.mark.parametrize(
    ("state", "answer"),
    [
        ("connecting", ["report_loss"]),
        ("connected", ["report_loss"]),
        ("announced", ["report_loss"]),
        ("giving_up", ["report_loss"]),
        ("disconnected", []),  # the stream rests already: nothing more to end
    ],
)
def test_a_silently_ended_event_stream_is_a_loss_unless_the_stream_rests(
    engine: EngineName, state: str, answer: list[str]
) -> None:
    assert _ask(engine, state, "event_stream_ended") == answer


def test_a_closed_stream_answers_nothing(engine: EngineName) -> None:
    stream = walk(AgentStream.start(engine=engine), [("close_requested", {})])
    assert stream.ended
    assert peek(stream, "carrier_awaited") is None
    assert peek(stream, "event_stream_ended") is None
