"""Done when: the same end-to-end scenario runs green over ``executor_id="stdio"`` and
``executor_id="agentctl"`` with identical chart traces.

The scenario (one Runtime per carrier, the reference agent behind it): launch with an
initial prompt → a follow-up → steer a running turn → cancel a stalled turn → stop →
relaunch resumed with session/load and a start model (set through the model config option) →
a prompt → stop. The (chart, generation, event, source,
target) sequences of the two runs must be equal, execution by execution.

Excluded: the ``agent_stream`` chart (transport-specific by nature: how the carrier connects
and closes) and the ``config_settlement`` chart, whose ``models_updated`` records follow the
agent's ``session_models`` notifications: the event pump applies them whenever they arrive,
so their number and their place among the init's and the prompts' records depend on how the
carrier interleaves notifications with request answers (compared on their own below). One
record is normalized, not excluded: a cancel's answer (``cancel_answered``, targetless) is
applied after the lifecycle lock is taken again, so it lands on the stalled generation while
it is still ``dispatched`` or just after its cancelled turn ended (``ended``), whichever the
pump reaches first; both change nothing, so it is compared without its states, in its place
right after the generation's ``cancel_requested``. The first activity (the Execution chart's
``activity_recorded`` and the ``first_activity`` chart's records) follows the first agent
event the pump applies, which each carrier delivers at its own moment among the init's
request answers; those records are compared as their own sequence, not by their place.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import anyio
import pytest

from acpfsm.adapters.agentctl.executor import AgentctlExecutor
from acpfsm.adapters.events import SessionModels, SessionStatus
from acpfsm.runtime import PromptResult, Runtime, TraceRecord

from .agentctl_server import AgentctlServer
from .helpers import (
    TEST_CONFIG,
    make_runtime,
    published,
    session_of,
    spec,
    stdio_executor,
    wait_turn_started,
    wait_turn_streaming,
    wait_until,
    workspace,
)

pytestmark = [pytest.mark.both_backends, pytest.mark.integration]

EXCLUDED_CHARTS = frozenset({"agent_stream", "config_settlement"})

Trace = list[tuple[str, int, str, str, str]]


def _normalized(r: TraceRecord) -> tuple[str, int, str, str, str]:
    if r.event == "cancel_answered" and r.source == r.target:
        return (r.chart, r.generation, r.event, "*", "*")
    return (r.chart, r.generation, r.event, r.source, r.target)


async def _scenario(rt: Runtime, executor_id: str, ws: Path) -> list[Trace]:
    """Run the scenario; the chart trace of each execution, in launch order."""
    ids: list[str] = []
    with anyio.fail_after(60):
        ref = await rt.launch(spec(ws, executor_id, prompt="hello over any carrier"))
        ids.append(ref.id)
        follow_up = await rt.resume(ref.id, "a follow-up")
        assert (follow_up.generation, follow_up.stop_reason) == (2, "end_turn")

        results: list[PromptResult] = []
        async with anyio.create_task_group() as tg:

            async def long_turn() -> None:
                results.append(await rt.prompt(ref.id, "a long one [[delay:0.2]]"))

            tg.start_soon(long_turn)
            await wait_turn_started(rt, ref.id, 3)
            await rt.steer(ref.id, "change of plan")
        assert (results[0].generation, results[0].stop_reason) == (3, "end_turn")

        async with anyio.create_task_group() as tg:
            results.clear()

            async def stalled_turn() -> None:
                results.append(await rt.prompt(ref.id, "[[fault:stall]] stop me"))

            tg.start_soon(stalled_turn)
            await wait_turn_streaming(rt, ref.id, 4)
            await rt.cancel(ref.id)
        assert results[0].stop_reason == "cancelled"
        acp_id = rt.get_execution(ref.id).acp_session_id
        await rt.stop(ref.id, "done")

        ref2 = await rt.launch(
            spec(ws, executor_id, prior=acp_id, metadata={"runtime_model": "ref-smart"})
        )
        ids.append(ref2.id)
        await session_of(rt, ref2.id).init.admission.wait()
        await wait_until(lambda: bool(published(rt, ref2.id, SessionStatus)))
        again = await rt.resume(ref2.id, "are you back?")
        assert again.stop_reason == "end_turn"
        assert rt.get_execution(ref2.id).acp_session_id == acp_id
        await rt.stop(ref2.id, "done")
    return [
        _canonical(
            [_normalized(r) for r in rt.trace.for_execution(i) if r.chart not in EXCLUDED_CHARTS]
        )
        for i in ids
    ]


def _is_activity(r: tuple[str, int, str, str, str]) -> bool:
    return r[0] == "first_activity" or (r[0], r[2]) == ("execution", "activity_recorded")


def _canonical(trace: Trace) -> Trace:
    """Each normalized ``cancel_answered`` moved right after its ``cancel_requested``; the
    activity records moved to the end, in their own order."""
    activity = [r for r in trace if _is_activity(r)]
    trace = [r for r in trace if not _is_activity(r)]
    answers = [r for r in trace if r[2] == "cancel_answered" and r[3] == "*"]
    out = [r for r in trace if r not in answers]
    for answer in answers:
        requested = [
            i for i, r in enumerate(out) if r[2] == "cancel_requested" and r[1] == answer[1]
        ]
        out.insert(requested[-1] + 1 if requested else len(out), answer)
    return out + activity


async def test_same_scenario_same_chart_traces(agentctl: AgentctlServer, tmp_path: Path) -> None:
    async with make_runtime({"stdio": stdio_executor()}) as rt:
        over_stdio = await _scenario(rt, "stdio", workspace(tmp_path, "stdio"))
    executor = AgentctlExecutor(url=agentctl.url, token=agentctl.token(), config=TEST_CONFIG)
    async with make_runtime({"agentctl": executor}) as rt:
        over_agentctl = await _scenario(rt, "agentctl", workspace(tmp_path, "agentctl"))
    assert len(over_stdio) == len(over_agentctl) == 2
    for stdio_trace, agentctl_trace in zip(over_stdio, over_agentctl, strict=True):
        assert len(stdio_trace) > 10
        assert agentctl_trace == stdio_trace, "\n".join(
            difflib.unified_diff(
                [repr(r) for r in stdio_trace],
                [repr(r) for r in agentctl_trace],
                "stdio",
                "agentctl",
                lineterm="",
            )
        )
    charts = {record[0] for trace in over_agentctl for record in trace}
    assert {
        "execution",
        "session_init",
        "prompt_generation",
        "start_model_policy",
        "first_activity",
    } <= charts


async def _settled(rt: Runtime, executor_id: str, ws: Path) -> tuple[list[str], bool]:
    """Launch with a start model (set through the model config option), wait for the init
    and one prompt round trip (every notification sent before the turn's end is applied by
    then); the settlement's states and whether the settled snapshot was published."""
    with anyio.fail_after(60):
        ref = await rt.launch(spec(ws, executor_id, metadata={"runtime_model": "ref-smart"}))
        await session_of(rt, ref.id).init.admission.wait()
        assert (await rt.resume(ref.id, "settled?")).stop_reason == "end_turn"
        states = [
            r.target for r in rt.trace.for_execution(ref.id) if r.chart == "config_settlement"
        ]
        settled = any(
            isinstance(e, SessionModels) and e.data.get("config_options_settled")
            for e in published(rt, ref.id, SessionModels)
        )
        await rt.stop(ref.id, "done")
    return states, settled


async def test_both_carriers_publish_the_settled_config_options(
    agentctl: AgentctlServer, tmp_path: Path
) -> None:
    async with make_runtime({"stdio": stdio_executor()}) as rt:
        over_stdio = await _settled(rt, "stdio", workspace(tmp_path, "stdio"))
    executor = AgentctlExecutor(url=agentctl.url, token=agentctl.token(), config=TEST_CONFIG)
    async with make_runtime({"agentctl": executor}) as rt:
        over_agentctl = await _settled(rt, "agentctl", workspace(tmp_path, "agentctl"))
    assert over_agentctl[1] and "published" in over_agentctl[0], over_agentctl
    assert over_stdio[1] and "published" in over_stdio[0], over_stdio
