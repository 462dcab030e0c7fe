"""The Execution chart answers what the runtime used to read from state names or keep as its
own flag: ``ready_awaited`` (``wait_ready``'s question: READY, on its way, or never without
another fact) and the end of the wakeup watch (the wakeup fact's ``unwatch_wakeup``: one
wakeup per READY, ended by the chart, not by the runtime)."""

from __future__ import annotations

import pytest

from acpfsm.statecharts import EngineName, Execution, IllegalTransition, peek

from .recipes import walk

_STARTING = [("start_requested", {})]
_READY = [*_STARTING, ("booted", {})]
_RUNNING = [*_READY, ("prompt_began", {})]
_FAILED = [*_READY, ("process_exited", {"exit_code": 3})]
_COMPLETED = [*_READY, ("process_exited", {"exit_code": 0})]


@pytest.mark.parametrize(
    ("recipe", "answer"),
    [
        ([], []),  # built RUNNING: on its way
        (_STARTING, []),
        (_READY, ["report_ready"]),
        (_RUNNING, []),
        (_FAILED, ["report_not_ready"]),
        (_COMPLETED, ["report_not_ready"]),
    ],
    ids=["running-initial", "starting", "ready", "running", "failed", "completed"],
)
def test_ready_awaited_is_answered_in_place(
    engine: EngineName, recipe: list, answer: list[str]
) -> None:
    ex = walk(Execution.start(engine=engine), recipe)
    before = ex.state
    asked = peek(ex, "ready_awaited")
    assert asked is not None and [e.name for e in asked.effects] == answer
    step = ex.fire("ready_awaited")  # the question changes nothing
    assert step.targetless and [e.name for e in step.effects] == answer
    assert ex.state == before


def test_a_stopped_execution_is_never_ready(engine: EngineName) -> None:
    ex = walk(Execution.start(engine=engine), [*_READY, ("stop_requested", {"reason": "bye"})])
    assert peek(ex, "ready_awaited") is None
    with pytest.raises(IllegalTransition):
        ex.fire("ready_awaited")


def test_the_wakeup_fact_ends_the_watch_in_ready(engine: EngineName) -> None:
    ex = walk(Execution.start(engine=engine), _READY)
    step = ex.fire("wakeup_content_arrived")
    assert (step.source, step.target) == ("ready", "running")
    assert [e.name for e in step.effects] == ["unwatch_wakeup", "publish_agent_running"]


@pytest.mark.parametrize(
    ("recipe", "state"),
    [
        ([*_READY, ("turn_dispatched", {})], "running"),  # left READY without a prompt_began
        (_FAILED, "failed"),
        (_COMPLETED, "completed"),
    ],
    ids=["running", "failed", "completed"],
)
def test_a_late_wakeup_fact_still_ends_the_watch(
    engine: EngineName, recipe: list, state: str
) -> None:
    ex = walk(Execution.start(engine=engine), recipe)
    step = ex.fire("wakeup_content_arrived")
    assert step.targetless and ex.state == state
    assert [e.name for e in step.effects] == ["unwatch_wakeup"]
