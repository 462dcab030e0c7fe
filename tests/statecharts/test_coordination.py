"""The coordination between charts: ``fire``/``coordinate`` on small test tables, and the
shipped ``COORDINATION`` table checked against the charts it names."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from statemachine import State

from acpfsm.statecharts import (
    ALL_CHARTS,
    Chart,
    ChartMachine,
    CoordinationError,
    EngineName,
    Execution,
    IllegalTransition,
    PromptGeneration,
    SessionInit,
)
from acpfsm.statecharts._compile import Effects, effect
from acpfsm.statecharts.coordination import COORDINATION, Rule, coordinate, fire, rules_from

from .recipes import PROMPT_RECIPES, walk


class Lead(Chart):
    chart_name = "lead"
    constants: ClassVar[dict[str, object]] = {"label": "lead-label"}

    idle = State(initial=True)
    busy = State()
    done = State(final=True)

    went = idle.to(busy)
    rested = busy.to(idle)
    ended_it = idle.to(done) | busy.to(done)

    effects = Effects(on_enter={"busy": [effect("lead_busy", "why")]})


class Follow(Chart):
    chart_name = "follow"
    constants: ClassVar[dict[str, object]] = {"label": "follow-label"}

    off = State(initial=True)
    on = State()
    gone = State(final=True)

    switched = off.to(on) | on.to(None)
    flipped = off.to(on) | on.to.itself()
    cut = off.to(gone) | on.to(gone)

    effects = Effects(transitions={"switched: off -> on": [effect("follow_on", "why", "label")]})


class Tail(Chart):
    chart_name = "tail"

    quiet = State(initial=True)
    loud = State()

    poked = quiet.to(loud) | loud.to(loud)
    hushed = loud.to(quiet)

    effects = Effects(transitions={"poked: quiet -> loud": [effect("tail_poked", "why")]})


def _machines(engine: EngineName, **constants: Any) -> dict[str, ChartMachine]:
    return {
        "lead": Lead.start(engine=engine, **constants),
        "follow": Follow.start(engine=engine),
        "tail": Tail.start(engine=engine),
    }


def _trail(fired: list[tuple[ChartMachine, Any]]) -> list[tuple[str, str, str]]:
    return [(step.chart, step.event, step.state) for _, step in fired]


def test_rules_apply_depth_first_in_table_order(engine: EngineName) -> None:
    table = (
        Rule("lead", "busy", "follow", "switched", ("why",)),
        Rule("follow", "on", "tail", "poked", ("why",)),
        Rule("lead", "busy", "tail", "poked", ("why",)),
    )
    machines = _machines(engine)
    fired = fire(machines, machines["lead"], "went", {"why": "w"}, table=table)
    assert _trail(fired) == [
        ("lead", "went", "busy"),
        ("follow", "switched", "on"),  # the first rule, then what *it* coordinates
        ("tail", "poked", "loud"),
        ("tail", "poked", "loud"),  # only then the second rule of lead's step
    ]
    assert [m for m, _ in fired] == [
        machines["lead"],
        machines["follow"],
        machines["tail"],
        machines["tail"],
    ]
    effects = [str(e) for _, step in fired for e in step.effects]
    assert effects == [
        "lead_busy(why='w')",
        "follow_on(why='w', label='follow-label')",
        "tail_poked(why='w')",
    ]


def test_a_step_that_enters_nothing_coordinates_nothing(engine: EngineName) -> None:
    table = (Rule("follow", "on", "tail", "poked"),)
    machines = _machines(engine)
    machines["follow"].fire("switched", why="x", label="y")
    fired = fire(machines, machines["follow"], "switched", {}, table=table)  # targetless
    assert _trail(fired) == [("follow", "switched", "on")]
    assert machines["tail"].state == "quiet"


def test_forwarded_fields_take_the_event_data_first_then_the_constants(
    engine: EngineName,
) -> None:
    table = (Rule("lead", "busy", "follow", "switched", ("why", "label", "absent")),)
    machines = _machines(engine, label="from-lead-constants")
    fired = fire(machines, machines["lead"], "went", {"why": "w"}, table=table)
    assert str(fired[1][1].effects[0]) == "follow_on(why='w', label='from-lead-constants')"
    machines = _machines(engine)
    fired = fire(machines, machines["lead"], "went", {"why": "w", "label": "data"}, table=table)
    assert str(fired[1][1].effects[0]) == "follow_on(why='w', label='data')"


def test_coordinate_starts_from_a_step_already_taken(engine: EngineName) -> None:
    table = (Rule("lead", "busy", "tail", "poked", ("why",)),)
    machines = _machines(engine)
    step = machines["lead"].fire("went", why="w")
    fired = coordinate(
        lambda name: machines.get(name), machines["lead"], step, {"why": "w"}, table=table
    )
    assert _trail(fired) == [("lead", "went", "busy"), ("tail", "poked", "loud")]


def test_an_ended_or_missing_target_receives_nothing(engine: EngineName) -> None:
    table = (
        Rule("lead", "busy", "follow", "switched", ("why",)),
        Rule("lead", "busy", "nobody", "switched"),
        Rule("lead", "busy", "tail", "poked", ("why",)),
    )
    machines = _machines(engine)
    machines["follow"].fire("cut")
    assert machines["follow"].ended
    fired = fire(machines, machines["lead"], "went", {"why": "w"}, table=table)
    assert _trail(fired) == [("lead", "went", "busy"), ("tail", "poked", "loud")]


def test_an_illegal_coordinated_event_raises(engine: EngineName) -> None:
    table = (Rule("lead", "busy", "tail", "hushed"),)  # tail is quiet: hushed is illegal
    machines = _machines(engine)
    with pytest.raises(IllegalTransition) as info:
        fire(machines, machines["lead"], "went", {"why": "w"}, table=table)
    assert (info.value.chart, info.value.event_name) == ("tail", "hushed")
    assert machines["tail"].state == "quiet"


def test_a_chain_deeper_than_the_limit_is_a_coordination_error(engine: EngineName) -> None:
    table = (
        Rule("tail", "loud", "follow", "flipped"),
        Rule("follow", "on", "tail", "poked", ("why",)),
    )  # each re-enters its state (to.itself): tail loud → follow on → tail loud → ...
    machines = _machines(engine)
    with pytest.raises(CoordinationError, match="deeper than 3 steps") as info:
        fire(machines, machines["tail"], "poked", {"why": "w"}, table=table, limit=3)
    assert "a cycle in the table?" in str(info.value)
    # the same chain stops by itself when the cycle is cut
    again = _machines(engine)
    fired = fire(again, again["tail"], "poked", {"why": "w"}, table=table[:1], limit=1)
    assert _trail(fired) == [("tail", "poked", "loud"), ("follow", "flipped", "on")]


def test_rules_from_keeps_table_order() -> None:
    a = Rule("lead", "busy", "follow", "switched")
    b = Rule("lead", "busy", "tail", "poked")
    c = Rule("follow", "on", "tail", "poked")
    assert rules_from((a, c, b)) == {("lead", "busy"): (a, b), ("follow", "on"): (c,)}
    assert str(a) == "lead enters busy → follow.switched"


# --------------------------------------------------------------------------- the shipped table

CHARTS = {c.chart_name: c.compiled() for c in ALL_CHARTS}

#: (rule, target leaf) where the coordinated event is not accepted, and why that combination
#: cannot arise. A new gap fails the test below; so does one that was closed.
UNREACHABLE: dict[tuple[str, str, str], str] = {
    ("session_init.booted", "execution", "completed"): (
        "the init runs while the execution is STARTING, which ignores a process exit (R10)"
    ),
    ("session_init.booted", "execution", "failed"): (
        "the init runs while the execution is STARTING, which ignores a lost stream (R10)"
    ),
    ("session_init.failed", "execution", "completed"): (
        "the init runs while the execution is STARTING, which ignores a process exit (R10)"
    ),
    ("prompt_generation.completed", "execution", "completed"): (
        "a process exit reaches the runtime after the stream loss that ends the live "
        "generation (the pump handles both in order), so no generation can complete later"
    ),
}


def test_every_rule_names_states_and_events_the_charts_declare() -> None:
    for rule in COORDINATION:
        assert rule.chart in CHARTS and rule.target in CHARTS, rule
        assert rule.enters in CHARTS[rule.chart].states, rule
        assert rule.event in CHARTS[rule.target].events, rule
        assert rule.chart != rule.target, rule


def test_the_forwarded_fields_are_what_the_target_reads() -> None:
    """Every forwarded field is read by a guard or an effect of the target's transitions for
    that event (a misspelt field would silently forward nothing)."""
    for rule in COORDINATION:
        target = CHARTS[rule.target]
        read: set[str] = set()
        for by_event in target.table.values():
            for cand in by_event.get(rule.event, ()):
                read.update(p for _, params, _ in cand.guards for p in params)
                read.update(f for spec in cand.effects for f in spec.fields)
        assert set(rule.forward) <= read, (str(rule), set(rule.forward) - read)


def test_every_coordinated_event_is_accepted_wherever_the_target_can_be() -> None:
    """Statically: the target accepts the event, whatever the data, in every non-final
    state (the last candidate is unguarded), except the combinations listed above."""
    gaps: set[tuple[str, str, str]] = set()
    for rule in COORDINATION:
        target = CHARTS[rule.target]
        for leaf in sorted(target.table):
            if leaf in target.final:
                continue
            cands = target.table[leaf].get(rule.event, ())
            if not cands or cands[-1].guards:
                gaps.add((f"{rule.chart}.{rule.enters}", rule.target, leaf))
    assert gaps == set(UNREACHABLE)


def test_a_generation_outcome_moves_the_execution(engine: EngineName) -> None:
    """The shipped table: a generation's claim moves the execution's status and carries the
    generation and stop reason into its effects."""
    gen = walk(PromptGeneration.start(engine=engine, generation=4), PROMPT_RECIPES["awaited"])
    ex = walk(Execution.start(engine=engine), [("prompt_began", {})])
    machines = {"prompt_generation": gen, "execution": ex}
    fired = fire(machines, gen, "completion_received", {"stop_reason": "end_turn"})
    assert _trail(fired) == [
        ("prompt_generation", "completion_received", "completed"),
        ("execution", "turn_completed", "ready"),
    ]
    assert [str(e) for e in fired[1][1].effects] == [
        "announce_first_activity",
        "publish_agent_ready(generation=4, stop_reason='end_turn')",
        "watch_for_wakeup",
    ]


#: the execution's effects when a turn ended without a reply of the agent's
READY_AGAIN = ["publish_agent_ready(generation=4, stop_reason='')", "watch_for_wakeup"]

#: (walk of the generation, event, its data, the generation's outcome, the execution's
#: event and status afterwards, the execution's effects)
OUTCOMES: list[tuple[str, str, dict[str, Any], str, str, str, list[str]]] = [
    (
        "awaited",
        "completion_received",
        {"is_error": True, "error": "boom"},
        "failed",
        "turn_failed",
        "failed",
        ["record_failure(error='boom')", "publish_agent_failed(error='boom', generation=4, phase='prompt_send')"],
    ),
    (
        "awaited",
        "completion_received",
        {"is_error": True, "cancel_release": True, "error": "released"},
        "failed",  # the waiter learns a cancel escalation, the execution fails
        "turn_failed",
        "failed",
        ["record_failure(error='released')", "publish_agent_failed(error='released', generation=4, phase='prompt_send')"],
    ),
    (
        "awaited",
        "completion_received",
        {"is_error": True, "error": "boom", "shutting_down": True},
        "failed",
        "turn_failed",
        "stopped",  # R32
        ["record_finish", "publish_agent_stopped(reason='shutdown')"],
    ),
    (
        "releasing",
        "waiter_returned",
        {},
        "cancel_escalated",
        "cancel_escalated",
        "ready",
        READY_AGAIN,
    ),
    (  # a hung agent: READY and agent.ready all the same (kandev escalateStuckCancel)
        "escalating",
        "waiter_returned",
        {},
        "cancel_escalated",
        "cancel_escalated",
        "ready",
        READY_AGAIN,
    ),
    (
        "escalating",
        "escalation_wait_timed_out",
        {},
        "cancel_escalated",
        "cancel_escalated",
        "ready",
        READY_AGAIN,
    ),
    (
        "sending",
        "dispatch_failed",
        {"cancel_release": True, "error": "released"},
        "cancel_escalated",
        "cancel_escalated",
        "ready",
        READY_AGAIN,
    ),
    (
        "sending",
        "dispatch_failed",
        {"error": "no route"},
        "undelivered",
        "turn_undelivered",
        "ready",
        READY_AGAIN,
    ),
    (
        "admitted",
        "cancel_requested",
        {},
        "withdrawn",
        "turn_undelivered",
        "ready",
        READY_AGAIN,
    ),
    (
        "awaited",
        "stream_lost",
        {"error": "gone"},
        "disconnected",
        "stream_lost",
        "failed",
        ["record_failure(error='gone')"],  # the generation published the stream error
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("recipe", "event", "data", "outcome", "follows", "status", "effects"),
    OUTCOMES,
    ids=[f"{o[3]}-{o[1]}" for o in OUTCOMES],
)
def test_every_outcome_of_a_generation_moves_the_execution(
    engine: EngineName,
    recipe: str,
    event: str,
    data: dict[str, Any],
    outcome: str,
    follows: str,
    status: str,
    effects: list[str],
) -> None:
    gen = walk(PromptGeneration.start(engine=engine, generation=4), PROMPT_RECIPES[recipe])
    ex = walk(Execution.start(engine=engine), [("prompt_began", {})])
    machines = {"prompt_generation": gen, "execution": ex}
    fired = fire(machines, gen, event, data)
    # a stop comes back to the generation, which has ended already: nothing changes
    back = [("prompt_generation", "execution_stopped", outcome)] if status == "stopped" else []
    assert _trail(fired) == [
        ("prompt_generation", event, outcome),
        ("execution", follows, status),
        *back,
    ]
    assert [str(e) for e in fired[1][1].effects] == effects


@pytest.mark.parametrize(
    ("recipe", "event", "data", "state"),
    [
        ("awaited", "cancel_answered", {"stream_disconnected": True}, "escalating"),
        ("awaited", "cancel_answered", {"acknowledged": False}, "releasing"),
        ("awaited", "waiter_abandoned", {}, "abandoned"),
        ("awaited", "handoff_received", {}, "handed_off"),
        ("sending", "dispatch_unreachable", {"reconnectable": True, "error": "x"}, "reconnecting"),
    ],
)
def test_a_turn_still_owed_leaves_the_execution_running(
    engine: EngineName, recipe: str, event: str, data: dict[str, Any], state: str
) -> None:
    """A turn being escalated, released, abandoned or handed off may still end at the agent:
    the execution stays RUNNING until it does, or the escalation ends (READY), or the carrier
    gives it up, or a stop."""
    gen = walk(PromptGeneration.start(engine=engine, generation=4), PROMPT_RECIPES[recipe])
    ex = walk(Execution.start(engine=engine), [("prompt_began", {})])
    fired = fire({"prompt_generation": gen, "execution": ex}, gen, event, data)
    # entering abandoned or escalating says the turn went to the agent: RUNNING it stays
    kept = [("execution", "turn_dispatched", "running")] if state in _AT_AGENT else []
    assert _trail(fired) == [("prompt_generation", event, state), *kept]
    assert ex.state == "running"


_AT_AGENT = ("escalating", "abandoned")


def test_a_stop_ends_the_live_generation_and_closes_the_stream(engine: EngineName) -> None:
    from acpfsm.statecharts import AgentStream

    gen = walk(PromptGeneration.start(engine=engine, generation=2), PROMPT_RECIPES["awaited"])
    ex = walk(Execution.start(engine=engine), [("prompt_began", {})])
    stream = walk(
        AgentStream.start(engine=engine), [("connect_started", {}), ("connect_succeeded", {})]
    )
    machines = {"prompt_generation": gen, "execution": ex, "agent_stream": stream}
    fired = fire(machines, ex, "stop_requested", {"reason": "bye", "error": "stopped"})
    assert _trail(fired) == [
        ("execution", "stop_requested", "stopped"),
        ("prompt_generation", "execution_stopped", "stopped"),
        ("agent_stream", "close_requested", "closed"),
    ]
    assert fired[1][1].effects[0].get("error") == "stopped"


def test_init_outcomes_move_the_execution(engine: EngineName) -> None:
    from .recipes import SESSION_INIT_RECIPES

    init = walk(SessionInit.start(engine=engine), SESSION_INIT_RECIPES["announcing"])
    ex = walk(Execution.start(engine=engine), [("start_requested", {})])
    fired = fire({"session_init": init, "execution": ex}, init, "session_announced", {})
    assert _trail(fired) == [
        ("session_init", "session_announced", "ready"),
        ("execution", "booted", "ready"),
    ]
    failing = walk(SessionInit.start(engine=engine), [("init_started", {})])
    ex2 = walk(Execution.start(engine=engine), [("start_requested", {})])
    fired = fire(
        {"session_init": failing, "execution": ex2},
        failing,
        "stream_connect_timed_out",
        {"error": "no stream"},
    )
    assert _trail(fired)[1] == ("execution", "init_failed", "failed")
    assert fired[1][1].effects[0].get("error") == "no stream"
