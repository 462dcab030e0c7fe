"""The chart compiler: what it refuses (loudly, when the chart is compiled), and the
python-statemachine semantics it must reproduce where the charts use them, shown on
purpose-built toy charts run on both engines."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Callable
from typing import Any, ClassVar, cast

import pytest
from statemachine import HistoryState, State

from acpfsm.statecharts import (
    ALL_CHARTS,
    Chart,
    ChartDefinitionError,
    ChartError,
    EngineName,
    IllegalTransition,
    Machine,
    PromptGeneration,
    Step,
    TransitionRecord,
    _base,
    add_transition_observer,
    remove_transition_observer,
)
from acpfsm.statecharts._compile import FROM_DEFAULT, Effect, Effects, compile_chart, effect

ENGINES: tuple[EngineName, ...] = ("compiled", "reference")

# --------------------------------------------------------------------------- refusals


def _parallel() -> type[Chart]:
    class Toy(Chart):
        class both(State.Parallel):
            class left(State.Compound):
                a = State(initial=True)
                b = State()
                went = a.to(b)
                back = b.to(a)

            class right(State.Compound):
                c = State(initial=True)
                d = State()
                turned = c.to(d)
                returned = d.to(c)

    return Toy


def _history() -> type[Chart]:
    class Toy(Chart):
        class box(State.Compound):
            a = State(initial=True)
            b = State()
            h = HistoryState()
            went = a.to(b)

        out = State()
        left = box.to(out)
        back = out.to(box.h)

    return Toy


def _final_child() -> type[Chart]:
    class Toy(Chart):
        class box(State.Compound):
            a = State(initial=True)
            b = State(final=True)
            went = a.to(b)

        out = State(final=True)
        done_state_box = box.to(out)

    return Toy


def _eventless() -> type[Chart]:
    class Toy(Chart):
        a = State(initial=True)
        b = State()
        c = State(final=True)
        a.to(b, cond="ok")  # no event: taken as soon as the guard holds
        went = b.to(c)

        def ok(self) -> bool:
            return True

    return Toy


def _internal() -> type[Chart]:
    class Toy(Chart):
        a = State(initial=True)
        b = State(final=True)
        ticked = a.to.itself(internal=True)
        went = a.to(b)

    return Toy


def _multi_target() -> type[Chart]:
    class Toy(Chart):
        validate_disconnected_states = False
        a = State(initial=True)
        b = State(final=True)
        c = State(final=True)
        went = a.to([b, c])
        other = a.to(c)

    return Toy


def _transition_callback(kind: str) -> Callable[[], type[Chart]]:
    def build() -> type[Chart]:
        class Toy(Chart):
            a = State(initial=True)
            b = State(final=True)
            went = a.to(b, **{kind: "act"})

            def act(self) -> bool:
                return True

        return Toy

    return build


def _state_callback(kind: str) -> Callable[[], type[Chart]]:
    def build() -> type[Chart]:
        class Toy(Chart):
            a = State(initial=True, **{kind: "act"})
            b = State(final=True)
            went = a.to(b)

            def act(self) -> None:
                pass

        return Toy

    return build


def _convention(method: str) -> Callable[[], type[Chart]]:
    def build() -> type[Chart]:
        a, b = State(initial=True), State(final=True)
        body: dict[str, Any] = {"a": a, "b": b, "went": a.to(b), method: lambda self: None}
        return type("Toy", (Chart,), body)

    return build


def _guarded(cond: Any, **methods: Any) -> Callable[[], type[Chart]]:
    def build() -> type[Chart]:
        a, b = State(initial=True), State(final=True)
        body: dict[str, Any] = {"a": a, "b": b, "went": a.to(b, cond=cond), **methods}
        return type("Toy", (Chart,), body)

    return build


def _with_effects(effects: Effects) -> Callable[[], type[Chart]]:
    def build() -> type[Chart]:
        class Toy(Chart):
            a = State(initial=True)
            b = State(final=True)
            went = a.to(b)

        Toy.effects = effects
        return Toy

    return build


def _anywhere(*args: Any, **kwargs: Any) -> bool:
    return True


REFUSED: list[tuple[str, Callable[[], type[Chart]], str]] = [
    ("parallel", _parallel, "the parallel state 'both'"),
    ("history", _history, "the history state in 'box'"),
    ("final child", _final_child, "the final state 'b' inside a compound state"),
    ("eventless", _eventless, "the eventless transition from 'a'"),
    ("internal", _internal, "the internal transition 'ticked' from 'a'"),
    ("multi-target", _multi_target, "the multi-target transition 'went' from 'a'"),
    ("validators", _transition_callback("validators"), "the validator callback"),
    ("before", _transition_callback("before"), "the before callback on a transition from 'a'"),
    ("on", _transition_callback("on"), "the on callback on a transition from 'a'"),
    ("after", _transition_callback("after"), "the after callback on a transition from 'a'"),
    ("enter", _state_callback("enter"), "the enter callback of state 'a'"),
    ("exit", _state_callback("exit"), "the exit callback of state 'a'"),
    ("on_<event>", _convention("on_went"), "the naming-convention callback 'on_went'"),
    ("before_<event>", _convention("before_went"), "naming-convention callback 'before_went'"),
    ("after_<event>", _convention("after_went"), "naming-convention callback 'after_went'"),
    ("on_enter_<state>", _convention("on_enter_b"), "naming-convention callback 'on_enter_b'"),
    ("on_exit_<state>", _convention("on_exit_a"), "naming-convention callback 'on_exit_a'"),
    (
        "generic callback",
        _convention("after_transition"),
        "naming-convention callback 'after_transition'",
    ),
    (
        "boolean expression",
        _guarded("ok and ok", ok=lambda self: True),
        "the guard expression 'ok and ok' on a transition from 'a'",
    ),
    ("callable guard", _guarded(_anywhere), "the guard given as the callable _anywhere"),
    (
        "property guard",
        _guarded("ok", ok=property(lambda self: True)),
        "the guard 'ok' on a transition from 'a' (not a plain method)",
    ),
    (
        "guard parameter without default",
        _guarded("ok", ok=lambda self, flag: flag),
        "the guard ok's parameter 'flag' without a default",
    ),
    (
        "guard parameter named event",
        _guarded("ok", ok=lambda self, event=None: True),
        "parameter 'event' (an injected name)",
    ),
    (
        "guard taking **kwargs",
        _guarded("ok", ok=lambda self, **data: True),
        "parameter 'data' (*args/**kwargs)",
    ),
    (
        "effect key without a colon",
        _with_effects(Effects(transitions={"went a -> b": ["x"]})),
        "effect key 'went a -> b' is not 'event: source -> target'",
    ),
    (
        "effect key naming no transition",
        _with_effects(Effects(transitions={"went: b -> a": ["x"]})),
        "effects for 'went: b -> a', which the chart does not declare",
    ),
    (
        "effect key naming a guard it does not have",
        _with_effects(Effects(transitions={"went: a -> b [ok]": ["x"]})),
        "effects for 'went: a -> b [ok]', which the chart does not declare",
    ),
    (
        "entry effects of an unknown state",
        _with_effects(Effects(on_enter={"nowhere": ["x"]})),
        "entry effects for unknown 'nowhere'",
    ),
]


@pytest.mark.parametrize(("what", "build", "message"), REFUSED, ids=[r[0] for r in REFUSED])
def test_the_compiler_refuses_what_it_does_not_support(
    what: str, build: Callable[[], type[Chart]], message: str
) -> None:
    chart = build()  # python-statemachine accepts the declaration
    with pytest.raises(ChartDefinitionError) as info:
        compile_chart(chart)
    assert message in str(info.value)
    assert str(info.value).startswith(f"{chart.__name__}: ")
    with pytest.raises(ChartDefinitionError):  # and so does starting it, on either engine
        chart.start(engine="reference")


def test_importing_the_charts_compiles_none_and_first_use_compiles_one() -> None:
    """``import acpfsm.statecharts`` compiles no chart (a program pays for the charts it
    runs, at their first ``start``); the first ``start`` compiles that chart only."""
    probe = (
        "import acpfsm.statecharts as c, acpfsm.statecharts._base as b; "
        "before = sorted(k.chart_name for k in b._compiled); c.Execution.start(); "
        "print(before, sorted(k.chart_name for k in b._compiled))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[] ['execution']"


def test_the_test_run_compiled_every_chart_before_any_test() -> None:
    """The suite's conftest compiles every chart, so a declaration the compiled engine cannot
    run fails the whole run loudly instead of the first test that starts it."""
    assert {c.chart_name for c in ALL_CHARTS} <= {k.chart_name for k in _base._compiled}


# --------------------------------------------------------------------------- semantics


class Order(Chart):
    """``hit`` is declared on the leaf, its parent and its grandparent, the ancestors'
    transitions written first: selection must still go leaf first, then outwards, and within
    one state in declaration order."""

    chart_name = "toy_order"

    class outer(State.Compound):
        class mid(State.Compound):
            leaf = State(initial=True)

        side = State()
        back_in = side.to(mid)

    x1 = State(final=True)
    x2 = State(final=True)
    x3 = State(final=True)
    x4 = State(final=True)
    x5 = State(final=True)

    hit = (
        outer.to(x3, cond="c")
        | outer.to(x4)
        | outer.mid.to(x2, cond="b")
        | outer.mid.leaf.to(x1, cond="a")
        | outer.mid.leaf.to(x5, cond="a2")
    )
    stray = outer.mid.leaf.to(outer.side)

    def a(self, a: bool = False) -> bool:
        return a

    def a2(self, a2: bool = False) -> bool:
        return a2

    def b(self, b: bool = False) -> bool:
        return b

    def c(self, c: bool = False) -> bool:
        return c


@pytest.mark.parametrize("flags", list(itertools.product([False, True], repeat=4)))
def test_selection_goes_from_the_leaf_outwards_in_declaration_order(
    flags: tuple[bool, bool, bool, bool],
) -> None:
    data = dict(zip(("a", "a2", "b", "c"), flags, strict=True))
    expected = next(
        t
        for t, on in (
            ("x1", data["a"]),
            ("x5", data["a2"]),
            ("x2", data["b"]),
            ("x3", data["c"]),
            ("x4", True),
        )
        if on
    )
    steps = [Order.start(engine=engine).fire("hit", **data) for engine in ENGINES]
    assert steps[0] == steps[1]
    assert steps[0].target == expected


def test_a_pre_empted_transition_is_not_a_candidate() -> None:
    """Within ``outer`` the unguarded ``x4`` comes after ``x3 [c]``: both are candidates;
    nothing after an unguarded candidate is (none here), and the leaf's own come first."""
    table = Order.compiled().table["leaf"]["hit"]
    assert [(c.source, c.target) for c in table] == [
        ("leaf", "x1"),
        ("leaf", "x5"),
        ("mid", "x2"),
        ("outer", "x3"),
        ("outer", "x4"),
    ]
    assert "hit" in Order.compiled().table["side"]
    assert [(c.source, c.target) for c in Order.compiled().table["side"]["hit"]] == [
        ("outer", "x3"),
        ("outer", "x4"),
    ]


class Box(Chart):
    """A compound with entry effects, re-entered by ``to.itself()``; a targetless event; an
    atomic state re-entered; a top-level final."""

    chart_name = "toy_box"
    constants: ClassVar[dict[str, object]] = {"label": "default"}

    class box(State.Compound):
        first = State(initial=True)
        second = State()
        moved = first.to(second)

    idle = State()
    gone = State(final=True)

    reset = box.to.itself()
    nudged = box.to(None)
    rested = box.to(idle)
    poked = idle.to.itself()
    resumed = idle.to(box.second)
    closed = box.to(gone) | idle.to(gone)

    effects = Effects(
        transitions={
            "reset: box -> box": ["resetting"],
            "nudged: box": [effect("noted", "why", "label")],
            "closed: box -> gone": [effect("closing", "reason", reason="none given")],
        },
        on_enter={
            "box": ["enter_box"],
            "first": [effect("enter_first", label="the declared default")],  # a constant too
            "second": ["enter_second"],
            "idle": [effect("enter_idle", "label")],
        },
    )


def _names(step: Step) -> list[str]:
    return [e.name for e in step.effects]


@pytest.mark.parametrize("engine", ENGINES)
def test_to_itself_on_a_compound_resets_its_child(engine: EngineName) -> None:
    box = Box.start(engine=engine)
    assert [e.name for e in box.initial_effects()] == ["enter_box", "enter_first"]
    box.fire("moved")
    assert box.configuration == ("second", "box")
    step = box.fire("reset")
    assert (step.source, step.target, step.targetless) == ("box", "box", False)
    assert step.entered == ("box", "first") and box.state == "first"
    assert _names(step) == ["resetting", "enter_box", "enter_first"]


@pytest.mark.parametrize("engine", ENGINES)
def test_to_itself_on_an_atomic_state_re_runs_its_entry(engine: EngineName) -> None:
    box = Box.start(engine=engine, label="L")
    box.fire("rested")
    step = box.fire("poked")
    assert step.entered == ("idle",) and not step.targetless
    assert [str(e) for e in step.effects] == ["enter_idle(label='L')"]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_targetless_transition_changes_nothing(engine: EngineName) -> None:
    box = Box.start(engine=engine)
    box.fire("moved")
    step = box.fire("nudged", why="late")
    assert (step.source, step.target, step.targetless, step.state, step.entered) == (
        "box",
        "box",
        True,
        "second",
        (),
    )
    assert [str(e) for e in step.effects] == ["noted(why='late', label='default')"]  # no entry
    assert box.configuration == ("second", "box")


@pytest.mark.parametrize("engine", ENGINES)
def test_entering_a_child_from_outside_enters_its_parent_first(engine: EngineName) -> None:
    box = Box.start(engine=engine)
    box.fire("rested")
    step = box.fire("resumed")
    assert step.entered == ("box", "second") and _names(step) == ["enter_box", "enter_second"]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_top_level_final_ends_the_machine(engine: EngineName) -> None:
    box = Box.start(engine=engine)
    step = box.fire("closed")
    assert step.state == "gone" and box.ended and box.configuration == ("gone",)
    assert [str(e) for e in step.effects] == ["closing(reason='none given')"]
    for event in ("reset", "nudged", "closed", "no_such_event"):
        with pytest.raises(IllegalTransition) as info:
            box.fire(event)
        assert info.value.states == () and "(ended)" in str(info.value)
    assert box.state == "gone"


@pytest.mark.parametrize("engine", ENGINES)
def test_effect_fields_come_from_the_data_then_the_constants_then_the_defaults(
    engine: EngineName,
) -> None:
    box = Box.start(engine=engine, label="const")
    assert str(box.fire("nudged", why="w", label="data").effects[0]) == (
        "noted(why='w', label='data')"
    )
    assert str(box.fire("nudged", why="w").effects[0]) == "noted(why='w', label='const')"
    assert str(box.fire("closed", reason="r").effects[0]) == "closing(reason='r')"


@pytest.mark.parametrize("engine", ENGINES)
def test_a_field_that_is_a_constant_and_has_a_default_takes_the_constant(
    engine: EngineName,
) -> None:
    """Entering the initial configuration and firing fill effects the same way: the data,
    else the chart's constant, and only then the declared default."""

    def entered_first(effects: tuple[Effect, ...]) -> list[str]:
        return [str(e) for e in effects if e.name == "enter_first"]

    box = Box.start(engine=engine, label="const")
    assert entered_first(box.initial_effects()) == ["enter_first(label='const')"]
    assert entered_first(box.fire("reset").effects) == ["enter_first(label='const')"]
    assert entered_first(box.fire("reset", label="data").effects) == ["enter_first(label='data')"]
    assert entered_first(Box.start(engine=engine).initial_effects()) == [
        "enter_first(label='default')"  # the constant's own default, not the effect's
    ]


@pytest.mark.parametrize("engine", ENGINES)
def test_an_effect_field_nobody_gives_is_an_error_and_changes_nothing(
    engine: EngineName,
) -> None:
    seen: list[TransitionRecord] = []
    box = Box.start(engine=engine, observers=(seen.append,))
    with pytest.raises(ChartDefinitionError, match="effect noted needs 'why'"):
        box.fire("nudged")
    box.fire("moved")
    with pytest.raises(ChartDefinitionError, match="effect noted needs 'why'"):
        box.fire("nudged")
    assert box.configuration == ("second", "box")
    assert [(r.source, r.event, r.target) for r in seen] == [("first", "moved", "second")]


@pytest.mark.parametrize("engine", ENGINES)
def test_unknown_constants_are_refused(engine: EngineName) -> None:
    with pytest.raises(TypeError, match=r"unknown constants \['colour'\]"):
        Box.start(engine=engine, colour="red")


@pytest.mark.parametrize("engine", ENGINES)
def test_guards_read_the_constants(engine: EngineName) -> None:
    def outcome(**constants: Any) -> str:
        gen = PromptGeneration.start(engine=engine, **constants)
        gen.fire("dispatch_started")
        return gen.fire("dispatch_accepted").state

    assert outcome() == "awaited"
    assert outcome(dispatch_only=True) == "unawaited"


@pytest.mark.parametrize("engine", ENGINES)
def test_observers_see_every_step_with_the_machine_tags(engine: EngineName) -> None:
    seen: list[TransitionRecord] = []
    box = Box.start(
        engine=engine, tags={"execution_id": "e1", "generation": 2}, observers=(seen.append,)
    )
    box.fire("moved")
    box.fire("nudged", why="x")
    with pytest.raises(IllegalTransition):
        box.fire("poked")  # not from box: nothing observed
    assert seen == [
        TransitionRecord(
            "toy_box", "first", "moved", "second", {"execution_id": "e1", "generation": 2}
        ),
        TransitionRecord(
            "toy_box", "box", "nudged", "box", {"execution_id": "e1", "generation": 2}
        ),
    ]


@pytest.mark.parametrize("engine", ENGINES)
def test_an_unobserved_machine_reports_to_its_own_observers_only(engine: EngineName) -> None:
    """``observed=False`` (a model checker's machines) keeps the steps from the process-wide
    observers (the transition-coverage recorder), not from the machine's own."""
    everyone: list[TransitionRecord] = []
    own: list[TransitionRecord] = []
    add_transition_observer(everyone.append)
    try:
        Box.start(engine=engine, observed=False, observers=(own.append,)).fire("moved")
        Box.start(engine=engine).fire("moved")
    finally:
        remove_transition_observer(everyone.append)
    assert [r.event for r in own] == ["moved"]
    assert len(everyone) == 1


def test_a_compiled_machine_is_its_leaf() -> None:
    """snapshot() is the whole mutable state of a compiled machine; restore() puts it back,
    and refuses anything that is not a leaf of the chart."""
    box = cast(Machine, Box.start(engine="compiled"))
    first = box.snapshot()
    box.fire("moved")
    assert box.snapshot() == "second" != first
    box.restore(first)
    assert box.state == first and box.fire("moved").target == "second"
    with pytest.raises(ChartError, match="not a leaf"):
        box.restore("box")  # a compound state
    assert box.snapshot() == "second"


def test_the_compiled_tables() -> None:
    compiled = Box.compiled()
    assert compiled.initial == "first"
    assert compiled.final == frozenset({"gone"})
    assert compiled.parent["second"] == "box" and compiled.parent["box"] is None
    assert compiled.ancestors["second"] == ("second", "box")
    assert compiled.path("second") == "box.second"
    assert compiled.default_leaf["box"] == "first"
    assert ("box", "nudged", "box") in compiled.declared
    assert compiled.table["gone"] == {}  # an ended chart takes nothing
    cand = compiled.table["second"]["reset"][0]
    assert (cand.source, cand.target, cand.state, cand.entered) == (
        "box",
        "box",
        "first",
        ("box", "first"),
    )
    assert cand.step is None  # enter_first(label) is built from the data or the constants
    moved = compiled.table["first"]["moved"][0]
    assert moved.step is not None  # no effect carries data: the step is built once
    assert compiled.table["second"]["nudged"][0].step is None  # noted(why, label) is built
    # each effect's plan: the fallback of every field, and the effect built once when only
    # defaults can fill it
    closing = compiled.table["second"]["closed"][0].plans
    assert [(p.name, p.fields) for p in closing] == [
        ("closing", (("reason", FROM_DEFAULT, "none given"),))
    ]
    assert str(closing[0].fixed) == "closing(reason='none given')"
    assert [p.fixed for p in cand.plans] == [Effect("resetting"), Effect("enter_box"), None]


def test_a_generations_terminal_outcomes_are_the_states_it_only_leaves_when_superseded() -> None:
    """check-trace's ``second_outcome`` rule reads these: targetless transitions declared on
    ``ended`` keep a leaf where it is; ``disconnected`` may still claim a completion."""
    outcomes = PromptGeneration.compiled().absorbing_states("superseded")
    assert outcomes == {
        "completed", "failed", "undelivered", "cancel_escalated", "withdrawn", "stopped"
    }  # fmt: skip
    assert Box.compiled().absorbing_states("gone") == frozenset()
