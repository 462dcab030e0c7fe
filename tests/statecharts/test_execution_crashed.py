"""The Execution chart's ``execution_crashed``: the execution's own code failed outside the
protocol (its executor, the transport, a bug). A live execution becomes FAILED with
``agent.failed`` phase ``crash``; a terminal status stays as it is; STOPPED has ended. And
the PromptGeneration chart's ``stream_lost`` of a crash: a turn not yet at the agent is
undelivered, and its request is never sent."""

from __future__ import annotations

import pytest

from acpfsm.statecharts import EngineName, Execution, IllegalTransition, PromptGeneration, Step

from .recipes import walk


def _trail(step: Step) -> tuple[str, str, bool, list[str]]:
    return (step.source, step.target, step.targetless, [e.name for e in step.effects])


@pytest.mark.parametrize(
    "recipe",
    [
        [("start_requested", {})],  # STARTING
        [("start_requested", {}), ("booted", {})],  # READY
        [("start_requested", {}), ("booted", {}), ("prompt_began", {})],  # RUNNING
    ],
)
def test_a_live_execution_that_crashes_is_failed(engine: EngineName, recipe: list) -> None:
    ex = walk(Execution.start(engine=engine), recipe)
    step = ex.fire("execution_crashed", error="execution crashed: boom")
    assert _trail(step) == ("active", "failed", False, ["record_failure", "publish_agent_failed"])
    (failed,) = [dict(e.args) for e in step.effects if e.name == "publish_agent_failed"]
    assert failed == {"error": "execution crashed: boom", "generation": 0, "phase": "crash"}
    assert ex.state == "failed" and not ex.ended
    # it can still be stopped (and removed)
    assert ex.fire("stop_requested", reason="done").state == "stopped"


@pytest.mark.parametrize(
    ("exit_code", "state"), [(0, "completed"), (3, "failed")], ids=["completed", "failed"]
)
def test_a_terminal_status_stays(engine: EngineName, exit_code: int, state: str) -> None:
    ex = walk(
        Execution.start(engine=engine),
        [("start_requested", {}), ("booted", {}), ("process_exited", {"exit_code": exit_code})],
    )
    step = ex.fire("execution_crashed", error="late crash")
    assert _trail(step) == (state, state, True, [])
    assert ex.state == state


def test_a_stopped_execution_has_ended(engine: EngineName) -> None:
    ex = walk(Execution.start(engine=engine), [("stop_requested", {"reason": "bye"})])
    with pytest.raises(IllegalTransition):
        ex.fire("execution_crashed", error="too late")


_UNREACHABLE = ("dispatch_unreachable", {"reconnectable": True, "error": "not connected"})


@pytest.mark.parametrize(
    ("recipe", "leaf"),
    [([], "admitted"), ([("dispatch_started", {}), _UNREACHABLE], "reconnecting")],
    ids=["admitted", "reconnecting"],
)
def test_a_crash_leaves_a_turn_not_yet_at_the_agent_undelivered(
    engine: EngineName, recipe: list, leaf: str
) -> None:
    """The crash's ``stream_lost`` (final, ``crashed``): a turn admitted or waiting for the
    carrier never reaches the agent (the carrier is being closed), so it is undelivered at
    once, its waiter told, and its dispatch skipped (found by ``acpfsm verify --crashes``:
    before, the request went out after the crash). A final loss that is no crash leaves it
    to its dispatch, which reports its own failure."""
    lost = {"error": "execution crashed: boom", "final": True}
    gen = walk(PromptGeneration.start(engine=engine, generation=1), recipe)
    assert gen.state == leaf
    assert _trail(gen.fire("stream_lost", **lost))[2] is True  # no crash: nothing yet
    step = gen.fire("stream_lost", **lost, crashed=True)
    assert (step.source, step.target) == (leaf, "undelivered")
    names = [e.name for e in step.effects]
    assert "publish_prompt_failed" in names and "release_waiter" in names
    assert [e.name for e in gen.fire("dispatch_started").effects] == ["skip_dispatch"]
    assert gen.state == "undelivered"
