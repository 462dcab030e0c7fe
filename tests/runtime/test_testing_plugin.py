"""The `acpfsm.testing` pytest plugin, exercised through inner pytest sessions (pytester).

The outer tests are marked ``acpfsm_unchecked_trace``: the inner sessions run in this
process, so the outer trace check would also see the traces the inner tests fabricate.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from acpfsm.runtime import Trace
from acpfsm.statecharts import TransitionRecord
from acpfsm.testing import ReferenceAgent, TraceViolationError, assert_trace_conforms

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.acpfsm_unchecked_trace

# Inner sessions run in this process; like the project's addopts, they leave anyio's own
# pytest plugin out (pytester would unload the modules it imports, and anyio's exception
# classes imported afterwards would no longer be the ones already caught elsewhere).
INNER = ("-p", "no:cacheprovider", "-p", "no:anyio")

BAD_TRACE = textwrap.dedent(
    """
    import pytest
    from acpfsm.runtime import Trace
    from acpfsm.statecharts import TransitionRecord

    def fabricate():
        trace = Trace(keep=False)  # observed through its listeners, kept or not
        observe = trace.observer("exec-1")
        observe(TransitionRecord("execution", "running", "start_requested", "starting", {}))
        observe(TransitionRecord("execution", "running", "booted", "ready", {}))

    def test_bad():
        fabricate()

    @pytest.mark.acpfsm_unchecked_trace
    def test_bad_but_unchecked():
        fabricate()

    @pytest.mark.acpfsm_partial_trace
    def test_unfinished_but_partial():
        trace = Trace()
        observe = trace.observer("exec-2")
        observe(TransitionRecord("execution", "running", "start_requested", "starting", {}))
    """
)

REFERENCE_TESTS = textwrap.dedent(
    """
    import pytest
    from acpfsm.runtime import NotReadyForPrompts

    @pytest.mark.trio
    async def test_prompt_and_stop(acpfsm_reference):
        async with acpfsm_reference.runtime() as rt:
            ref = await rt.launch(acpfsm_reference.spec("hello"))
            result = await rt.resume(ref.id, "and again")
            assert result.stop_reason == "end_turn" and result.generation == 2
            await rt.stop(ref.id, "done")
        assert any(r.event == "steered" or r.chart == "execution" for r in rt.trace.records)

    @pytest.mark.trio
    async def test_a_run_fault(acpfsm_reference):
        async with acpfsm_reference.runtime("no_load") as rt:
            first = await rt.launch(acpfsm_reference.spec("remember me"))
            await rt.resume(first.id, "ok")
            acp_session = rt.get_execution(first.id).acp_session_id
            await rt.stop(first.id, "relaunch")
            again = await rt.launch(acpfsm_reference.spec(prior_acp_session=acp_session))
            await rt.resume(again.id, "back?")
            assert rt.get_execution(again.id).acp_session_id != acp_session  # fell back
        assert ("session_init", "creating") in {(r.chart, r.target) for r in rt.trace.records}

    def test_vocabulary_and_bad_names(acpfsm_reference, acpfsm_reference_factory):
        assert {"hang", "crash", "no_load", "auth_required"} <= set(acpfsm_reference.faults)
        with pytest.raises(ValueError, match="no_such_fault"):
            acpfsm_reference.runtime("no_such_fault")
        other = acpfsm_reference_factory(delay=0.05)
        assert other.workspace != acpfsm_reference.workspace
        assert "0.05" in other.command()
    """
)


def test_check_traces_fails_a_test_whose_trace_violates_the_charts(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_inner=BAD_TRACE)
    result = pytester.runpytest("--acpfsm-check-traces", *INNER)
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_bad*",
            "*a trace this test produced does not follow the charts*",
            "*record 2: source_mismatch: booted leaves running*",
            "*seq 2 execution running --booted--> ready (execution exec-1)*",
        ]
    )
    result.stdout.no_fnmatch_line("*teardown of test_bad_but_unchecked*")
    result.stdout.no_fnmatch_line("*teardown of test_unfinished_but_partial*")


def test_without_the_option_nothing_is_checked(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_inner=BAD_TRACE)
    result = pytester.runpytest(*INNER)
    result.assert_outcomes(passed=3)


def test_reference_fixtures_run_real_agents_and_their_traces_pass(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_inner=REFERENCE_TESTS)
    result = pytester.runpytest("--acpfsm-check-traces", *INNER)
    result.assert_outcomes(passed=3)


def test_the_trace_patch_is_undone_after_each_test(pytester: pytest.Pytester) -> None:
    original = Trace.__init__
    pytester.makepyfile(test_inner=BAD_TRACE)
    pytester.runpytest("--acpfsm-check-traces", *INNER)
    assert Trace.__init__ is original


def test_assert_trace_conforms() -> None:
    trace = Trace()
    observe = trace.observer("exec-3")
    observe(TransitionRecord("execution", "running", "start_requested", "starting", {}))
    assert_trace_conforms(trace, partial=True)
    with pytest.raises(TraceViolationError, match=r"record 1: end_state"):
        assert_trace_conforms(trace)
    observe(TransitionRecord("execution", "active", "stop_requested", "stopped", {}))
    assert_trace_conforms(trace.records)


def test_reference_agent_helpers(tmp_path: Path) -> None:
    agent = ReferenceAgent(tmp_path / "ws", delay=0.01)
    argv = agent.command("crash=3", "no_load")
    assert argv[1:] == [
        "-m",
        "acpfsm.adapters.reference_agent",
        "--fault",
        "crash=3",
        "--fault",
        "no_load",
        "--delay",
        "0.01",
    ]
    profile = agent.profile("hang", id="ref-hang")
    assert profile.id == "ref-hang" and "hang" in profile.command
    assert agent.spec("hi").workspace.path == str(tmp_path / "ws")
