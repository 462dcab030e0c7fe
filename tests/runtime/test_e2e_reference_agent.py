"""End to end: the Runtime over stdio against the reference agent as a real subprocess.

launch → prompt → steer → cancel → stop → relaunch resumed with session/load, and each
session/load failure shape the reference agent can produce leads to the seed's outcome:
fallback to session/new, or failure with the ACP session id preserved (seed D1, KANDEV.md).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from acpfsm.adapters.acp.process import ShutdownPolicy
from acpfsm.adapters.acp.stdio import StdioConfig
from acpfsm.adapters.events import MessageChunk, SessionStatus
from acpfsm.runtime import (
    CancelEscalated,
    LaunchSpec,
    NotReadyForPrompts,
    Runtime,
    StdioExecutor,
    SteerNotDispatched,
    Timeouts,
    WorkspaceRef,
    reference_profile,
)
from acpfsm.runtime import events as le

from .real_agent_scenarios import check_turns

pytestmark = [pytest.mark.both_backends, pytest.mark.integration]

FAST_SHUTDOWN = ShutdownPolicy(stdin_close_wait=1.0, term_wait=1.0, kill_wait=1.0)


def make_runtime(*profile_args: str, trace_path: Path | None = None) -> Runtime:
    return Runtime(
        profiles=[reference_profile(*profile_args, "--delay", "0.001")],
        executors={
            "stdio": StdioExecutor(config=StdioConfig(cancel_timeout=0.5), shutdown=FAST_SHUTDOWN)
        },
        timeouts=Timeouts(cancel_wait=2.0, cancel_escalation=0.5),
        trace_path=trace_path,
    )


def launch_spec(ws: Path, prompt: str = "", prior: str = "") -> LaunchSpec:
    return LaunchSpec(
        agent_profile_id="reference",
        executor_id="stdio",
        workspace=WorkspaceRef(path=str(ws)),
        prompt=prompt,
        prior_acp_session=prior,
    )


async def test_turns_stream_their_own_updates_and_leaving_early_cancels(tmp_path: Path) -> None:
    async with make_runtime() as rt:
        ref = await rt.launch(launch_spec(tmp_path))
        await check_turns(rt, ref.id, session_generation=1)
        await rt.stop(ref.id, "done")


async def test_full_life_launch_prompt_steer_cancel_stop_relaunch(tmp_path: Path) -> None:
    trace_file = tmp_path / "trace.jsonl"
    async with make_runtime(trace_path=trace_file) as rt:
        ref = await rt.launch(launch_spec(tmp_path, "hello reference"))
        # the caller's prompt queues behind the initial turn
        first = await rt.resume(ref.id, "a follow-up")
        assert first.stop_reason == "end_turn"
        assert first.generation == 2
        assert "a follow-up" in first.agent_message
        snap = rt.get_execution(ref.id)
        assert snap.status == "READY"
        assert snap.agent_name == "acpfsm-reference-agent"
        transport = rt._session(ref.id).transport
        assert transport is not None
        caps = transport.capabilities
        assert caps is not None
        assert caps.meta["agentCapabilities"] == {"claudeCode": {"promptQueueing": True}}
        assert caps.meta["acpfsmReference"]["pid"] > 0  # the agent's own _meta, kept
        acp_id = snap.acp_session_id
        assert acp_id

        # steer into a running turn: one completion, for the steered generation
        with pytest.raises(SteerNotDispatched):
            await rt.steer(ref.id, "nothing is running")
        results = []
        async with anyio.create_task_group() as tg:

            async def long_turn() -> None:
                results.append(await rt.prompt(ref.id, "a long one [[delay:0.05]]"))

            tg.start_soon(long_turn)
            s = rt._session(ref.id)
            with anyio.fail_after(10):
                while (
                    s.current is None
                    or s.current.generation != 3
                    or not s.current.machine.is_in("dispatched")
                ):
                    await anyio.sleep(0.01)
            steer = await rt.steer(ref.id, "change of plan")
            assert steer.generation == 3
        assert results[0].generation == 3
        assert results[0].stop_reason == "end_turn"
        assert "change of plan" in results[0].agent_message

        # cancel a turn the agent ignores: escalation releases it
        errors: list[BaseException] = []
        async with anyio.create_task_group() as tg:

            async def hung_turn() -> None:
                try:
                    await rt.prompt(ref.id, "[[fault:hang]] wait forever")
                except CancelEscalated as exc:
                    errors.append(exc)

            tg.start_soon(hung_turn)
            with anyio.fail_after(10):
                while (
                    s.current is None
                    or s.current.generation != 4
                    or not s.current.machine.is_in("dispatched")
                ):
                    await anyio.sleep(0.01)
                while not any(  # the agent has started (and hangs inside) its turn
                    isinstance(e, MessageChunk) and e.prompt_generation == 4 for e in s.hub._backlog
                ):
                    await anyio.sleep(0.01)
            with pytest.raises(CancelEscalated):
                await rt.cancel(ref.id)
        assert errors
        assert rt.get_execution(ref.id).status == "READY"
        assert s.current.leaf == "cancel_escalated"

        final = await rt.stop(ref.id, "done")
        assert final.status == "STOPPED"

        # relaunch resumed with session/load: same ACP session, history replayed by the agent
        ref2 = await rt.launch(launch_spec(tmp_path, prior=acp_id))
        s2 = rt._session(ref2.id)
        with anyio.fail_after(10):
            await s2.init.admission.wait()
            while not any(isinstance(e, SessionStatus) for e in s2.hub._backlog):
                await anyio.sleep(0.01)
        # the plan re-emitted after the load is history: no wakeup turn, still READY
        assert rt.get_execution(ref2.id).status == "READY"
        again = await rt.resume(ref2.id, "are you back?")
        assert again.stop_reason == "end_turn"
        snap2 = rt.get_execution(ref2.id)
        assert snap2.acp_session_id == acp_id
        assert snap2.charts["session_init"] == "ready"
        init_events = [
            r.event for r in rt.trace.for_execution(ref2.id) if r.chart == "session_init"
        ]
        assert "load_succeeded" in init_events
        await rt.stop(ref2.id, "done")
    lines = trace_file.read_text().splitlines()
    assert len(lines) == len(rt.trace.records) > 30


async def _first_session(tmp_path: Path) -> str:
    async with make_runtime() as rt:
        ref = await rt.launch(launch_spec(tmp_path))
        await rt.resume(ref.id, "remember me")
        acp_id = rt.get_execution(ref.id).acp_session_id
        await rt.stop(ref.id, "done")
    return acp_id


@pytest.mark.parametrize(
    ("fault", "falls_back"),
    [
        ("load_method_not_found", True),
        ("load_not_found", True),
        ("load_rollout_missing", True),
        ("no_load", True),
        ("load_rollout_other", False),
        ("load_internal", False),
        ("load_auth", False),
    ],
)
async def test_session_load_failure_shapes(tmp_path: Path, fault: str, falls_back: bool) -> None:
    acp_id = await _first_session(tmp_path)
    async with make_runtime("--fault", fault) as rt:
        ref = await rt.launch(launch_spec(tmp_path, prior=acp_id))
        s = rt._session(ref.id)
        with anyio.fail_after(10):
            await s.init.admission.wait()
        snap = rt.get_execution(ref.id)
        init_events = [r.event for r in rt.trace.for_execution(ref.id) if r.chart == "session_init"]
        assert "load_failed" in init_events
        if falls_back:
            assert snap.status == "READY"
            assert snap.charts["session_init"] == "ready"
            assert snap.acp_session_id != acp_id  # only the ACP id changes
            assert "new_session_succeeded" in init_events
        else:
            assert snap.status == "FAILED"
            assert snap.charts["session_init"] == "failed"
            assert snap.acp_session_id == acp_id  # identity preserved for a later retry
            assert "session/load failed" in snap.error_message
            assert "new_session_succeeded" not in init_events
            with pytest.raises(NotReadyForPrompts):
                await rt.prompt(ref.id, "x")
        await rt.stop(ref.id, "done")


async def test_agent_crash_mid_turn_fails_cleanly(tmp_path: Path) -> None:
    async with make_runtime() as rt:
        ref = await rt.launch(launch_spec(tmp_path))
        seen: list[object] = []
        with anyio.fail_after(15):
            with pytest.raises(Exception) as info:
                await rt.prompt(ref.id, "[[fault:crash]] die now")
            async with rt.subscribe_events(ref.id) as events:
                async for event in events:
                    seen.append(event)
        assert "agent" in str(info.value)
        snap = rt.get_execution(ref.id)
        assert snap.status == "FAILED"
        assert snap.exit_code == 3
        assert any(isinstance(e, le.AgentFailed | le.AgentctlError) for e in seen)
        await rt.stop(ref.id, "done")


async def test_a_hung_turn_escalates_to_ready_and_a_stop_race_says_so(tmp_path: Path) -> None:
    """A real agent that ignores the cancel (``[[fault:hang]]``): the cancel escalates and,
    as kandev's escalateStuckCancel, the execution is READY with ``agent.ready`` published, so
    the next prompt goes out at once; then a prompt and a cancel racing the app's own stop
    each say the app stopped the execution (ExecutionStopped), never an escalation or an
    agent error."""
    from acpfsm.runtime import AgentReportedError, ExecutionStopped, PromptError

    async with make_runtime() as rt:
        ref = await rt.launch(launch_spec(tmp_path))
        await rt.wait_ready(ref.id)
        errors: list[BaseException] = []

        async def prompt(text: str) -> None:
            try:
                await rt.prompt(ref.id, text)
            except PromptError as exc:
                errors.append(exc)

        with anyio.fail_after(60):
            async with rt.subscribe_events(ref.id, replay=False) as events:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(prompt, "[[fault:hang]] go")
                    async for event in events:
                        if isinstance(event, MessageChunk):
                            break  # the turn runs at the agent
                    with pytest.raises(CancelEscalated):
                        await rt.cancel(ref.id)
                readies = []
                with anyio.move_on_after(5):
                    async for event in events:
                        if isinstance(event, le.AgentReady):
                            readies.append(event)
                            break
            assert readies and rt.get_execution(ref.id).status == "READY"
            assert isinstance(errors.pop(), CancelEscalated)
            # the next prompt goes out at once (the hung agent may queue it), then the app's
            # stop races a cancel
            async with anyio.create_task_group() as tg:
                tg.start_soon(prompt, "again")
                while rt.get_execution(ref.id).prompt_generation != 2:
                    await anyio.sleep(0.01)

                async def cancel() -> None:
                    try:
                        await rt.cancel(ref.id)
                    except PromptError as exc:
                        errors.append(exc)

                tg.start_soon(cancel)
                await rt.stop(ref.id, "the app shuts down")
        assert errors, "the prompt ended by the stop raised nothing"
        for error in errors:
            assert isinstance(error, ExecutionStopped), repr(error)
            assert not isinstance(error, (CancelEscalated, AgentReportedError))
            assert error.reason == "the app shuts down"
