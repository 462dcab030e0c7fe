"""AgentStream: every declared transition walked, with the effects its step asks for, on both
engines (the compiled one and python-statemachine's own)."""

from __future__ import annotations

from typing import Any

import pytest

from acpfsm.statecharts import (
    AgentStream,
    ChartMachine,
    EngineName,
    IllegalTransition,
    TransitionRecord,
)
from acpfsm.statecharts._compile import Effect

Walk = list[tuple[str, dict[str, Any]]]

UP: Walk = [("connect_started", {}), ("connect_succeeded", {})]
LOST: dict[str, Any] = {"redialable": True, "error": "websocket: close 1006"}
ANNOUNCED: Walk = [*UP, ("connection_lost", LOST)]
SILENT: Walk = [*UP, ("connection_lost", {**LOST, "clean": True})]
GIVING_UP: Walk = [*ANNOUNCED, ("reconnect_timed_out", {"error": "not redialled within 30s"})]

REDIAL_0 = Effect("redial", (("failures", 0),))
ANNOUNCED_LOSS = Effect("announce_loss", (("final", False),))  # the carrier may come back
LOST_FOR_GOOD = Effect("announce_loss", (("final", True),))
STOP = (Effect("stop_redialling"), Effect("disarm_reconnect_budget"))


def e(name: str, **args: Any) -> Effect:
    return Effect(name, tuple(args.items()))


#: (walk to the source, event, data, source, target (None: targetless), leaf after, effects)
CASES: list[tuple[Walk, str, dict[str, Any], str, str | None, str, tuple[Effect, ...]]] = [
    # the first connection
    ([], "connect_started", {}, "disconnected", "connecting", "connecting", ()),
    (
        [("connect_started", {})],
        "connect_succeeded",
        {},
        "connecting",
        "connected",
        "connected",
        (),
    ),
    (
        [("connect_started", {})],
        "connect_failed",
        {},
        "connecting",
        "disconnected",
        "disconnected",
        (),
    ),
    (
        [("connect_started", {})],
        "connect_timed_out",
        {},
        "connecting",
        "disconnected",
        "disconnected",
        (),
    ),
    ([], "connect_timed_out", {}, "disconnected", None, "disconnected", ()),
    # losses: announced, silent (kandev H9), final
    (
        UP,
        "connection_lost",
        LOST,
        "connected",
        "announced",
        "announced",
        (ANNOUNCED_LOSS, Effect("arm_reconnect_budget"), REDIAL_0),
    ),
    (
        UP,
        "connection_lost",
        {**LOST, "clean": True},
        "connected",
        "silent",
        "silent",
        (Effect("arm_reconnect_budget"), REDIAL_0),
    ),
    (
        UP,
        "connection_lost",
        {"clean": True},
        "connected",
        "disconnected",
        "disconnected",
        (LOST_FOR_GOOD,),
    ),
    (
        [("connect_started", {})],
        "connection_lost",
        LOST,
        "connecting",
        "disconnected",
        "disconnected",
        (LOST_FOR_GOOD,),
    ),
    (SILENT, "connection_lost", LOST, "reconnecting", None, "silent", ()),
    (
        SILENT,
        "connection_lost",
        {},
        "reconnecting",
        "disconnected",
        "disconnected",
        (*STOP, LOST_FOR_GOOD),
    ),
    (
        GIVING_UP,
        "connection_lost",
        {},
        "giving_up",
        "disconnected",
        "disconnected",
        (LOST_FOR_GOOD,),
    ),
    ([], "connection_lost", {}, "disconnected", None, "disconnected", ()),
    # the redial's results
    (
        ANNOUNCED,
        "redial_succeeded",
        {"session_id": "s-1", "attempts": 3},
        "announced",
        "connected",
        "connected",
        (Effect("disarm_reconnect_budget"), e("publish_reconnected", session_id="s-1", attempts=3)),
    ),
    (
        SILENT,
        "redial_succeeded",
        {"session_id": "s-1", "attempts": 1},
        "silent",
        "connected",
        "connected",
        (Effect("disarm_reconnect_budget"),),
    ),
    (GIVING_UP, "redial_succeeded", {}, "giving_up", None, "giving_up", ()),
    (
        SILENT,
        "redial_failed",
        {"failures": 2, "error": "redial failed: unreachable"},
        "reconnecting",
        None,
        "silent",
        (e("redial", failures=2),),
    ),
    (
        ANNOUNCED,
        "redial_failed",
        {"fatal": True, "failures": 1, "error": "redial failed: 401"},
        "reconnecting",
        "giving_up",
        "giving_up",
        (*STOP, e("give_up", error="redial failed: 401")),
    ),
    (GIVING_UP, "redial_failed", {"failures": 1, "error": "x"}, "giving_up", None, "giving_up", ()),
    # a dial result that raced the carrier's own end (a final loss): nothing changes
    ([], "redial_failed", {"failures": 1, "error": "x"}, "disconnected", None, "disconnected", ()),
    ([], "redial_succeeded", {}, "disconnected", None, "disconnected", ()),
    (
        SILENT,
        "reconnect_timed_out",
        {"error": "not redialled within 30s"},
        "reconnecting",
        "giving_up",
        "giving_up",
        (*STOP, e("give_up", error="not redialled within 30s")),
    ),
    (GIVING_UP, "reconnect_timed_out", {"error": "x"}, "giving_up", None, "giving_up", ()),
    # questions, asked in place (statecharts.peek): is the carrier up, on its way, or gone?
    (UP, "carrier_awaited", {}, "connected", None, "connected", (e("report_connected"),)),
    (ANNOUNCED, "carrier_awaited", {}, "reconnecting", None, "announced", ()),
    ([], "carrier_awaited", {}, "disconnected", None, "disconnected", (e("report_not_connected"),)),
    (
        [("connect_started", {})],
        "carrier_awaited",
        {},
        "connecting",
        None,
        "connecting",
        (e("report_not_connected"),),
    ),
    (
        GIVING_UP,
        "carrier_awaited",
        {},
        "giving_up",
        None,
        "giving_up",
        (e("report_not_connected"),),
    ),
    # … and is an event stream that ended without saying why a loss?
    (
        [("connect_started", {})],
        "event_stream_ended",
        {},
        "connecting",
        None,
        "connecting",
        (e("report_loss"),),
    ),
    (UP, "event_stream_ended", {}, "connected", None, "connected", (e("report_loss"),)),
    (SILENT, "event_stream_ended", {}, "reconnecting", None, "silent", (e("report_loss"),)),
    (GIVING_UP, "event_stream_ended", {}, "giving_up", None, "giving_up", (e("report_loss"),)),
    ([], "event_stream_ended", {}, "disconnected", None, "disconnected", ()),
    # closed on purpose
    ([], "close_requested", {}, "disconnected", "closed", "closed", ()),
    ([("connect_started", {})], "close_requested", {}, "connecting", "closed", "closed", ()),
    (UP, "close_requested", {}, "connected", "closed", "closed", ()),
    (ANNOUNCED, "close_requested", {}, "reconnecting", "closed", "closed", STOP),
    (GIVING_UP, "close_requested", {}, "giving_up", "closed", "closed", ()),
]

ENGINES: tuple[EngineName, ...] = ("compiled", "reference")


def walk(machine: ChartMachine, steps: Walk) -> ChartMachine:
    for event, data in steps:
        machine.fire(event, **data)
    return machine


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    ("steps", "event", "data", "source", "target", "leaf", "effects"),
    CASES,
    ids=[f"{c[3]}-{c[1]}-{c[4] or 'ignored'}" for c in CASES],
)
def test_transition(
    engine: EngineName,
    steps: Walk,
    event: str,
    data: dict[str, Any],
    source: str,
    target: str | None,
    leaf: str,
    effects: tuple[Effect, ...],
) -> None:
    machine = walk(AgentStream.start(engine=engine), steps)
    step = machine.fire(event, **data)
    assert (step.source, step.target, step.targetless) == (source, target or source, target is None)
    assert machine.state == leaf == step.state
    assert step.effects == effects


def test_every_declared_transition_is_walked() -> None:
    taken: set[tuple[str, str, str]] = set()

    def observe(record: TransitionRecord) -> None:
        taken.add((record.source, record.event, record.target))

    for steps, event, data, *_ in CASES:
        machine = walk(AgentStream.start(observers=(observe,)), steps)
        machine.fire(event, **data)
    assert taken == set(AgentStream.compiled().declared)


def test_closed_is_final() -> None:
    machine = walk(AgentStream.start(), [*ANNOUNCED, ("close_requested", {})])
    assert machine.ended
    with pytest.raises(IllegalTransition):
        machine.fire("redial_succeeded", session_id="", attempts=1)


def test_an_outage_from_loss_to_redial() -> None:
    """An abnormal drop, two failed dials (the backoff's ``failures`` grow), the redial."""
    machine = walk(AgentStream.start(), UP)
    effects = [machine.fire("connection_lost", **LOST).effects[-1]]
    for failures in (1, 2):
        effects += machine.fire(
            "redial_failed", failures=failures, error="redial failed: unreachable"
        ).effects
    assert effects == [REDIAL_0, e("redial", failures=1), e("redial", failures=2)]
    step = machine.fire("redial_succeeded", session_id="s", attempts=3)
    assert machine.state == "connected" and step.effects[-1].name == "publish_reconnected"


def test_a_stdio_loss_is_final() -> None:
    """Pipes cannot be redialled: the loss (not ``redialable``) is final and announced, and
    nothing redials it: a dial result that raced the carrier's end changes nothing."""
    machine = walk(AgentStream.start(), UP)
    step = machine.fire("connection_lost", error="peer disconnected")
    assert machine.state == "disconnected" and step.effects == (LOST_FOR_GOOD,)
    for event in ("redial_failed", "redial_succeeded"):
        late = machine.fire(event, failures=1, error="x")
        assert late.targetless and late.effects == () and machine.state == "disconnected"
