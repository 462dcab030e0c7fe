"""Failures over the real agentctl: each ends cleanly, classified, bounded, nothing left over.

* the agent process killed mid-turn → transport death (classified so), FAILED, no hang;
* the agent ignores a cancel → agentctl's ``not_acknowledged`` → cancel escalation, READY;
* the WebSocket dropped mid-turn → announced, the waiter released, the socket redialled (the
  AgentStream chart decides each dial), the execution recovered; a normal close just before a
  prompt → redialled silently, the seed's retry after reconnect; a refused redial → given up
  at once; agentctl gone → given up when the chart's reconnect budget runs out;
* a wrong token, a consumed nonce, a wrong instance id → authentication errors, nothing runs
  (and a workspace that is no directory → LaunchSpecError before agentctl is asked);
* agentctl itself killed → the execution fails, the runtime stays usable;
* agentctl's own ``mcp.*`` request is refused with an error envelope.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import msgspec
import pytest

from acpfsm.adapters.agentctl import (
    AgentctlConfig,
    ControlClient,
    InstanceClient,
    open_agentctl_transport,
)
from acpfsm.adapters.agentctl.executor import AgentctlExecutor
from acpfsm.adapters.classify import Call, classify_error
from acpfsm.adapters.errors import AuthenticationFailed, TransportClosed
from acpfsm.adapters.events import AgentEvent, Complete, StreamDisconnected, StreamReconnected
from acpfsm.adapters.executor import AgentLaunch
from acpfsm.runtime import (
    AgentReportedError,
    CancelEscalated,
    CancelFailed,
    LaunchSpecError,
    NotReadyForPrompts,
    PromptResult,
    Runtime,
    SteerNotDispatched,
    reference_profile,
)
from acpfsm.runtime import events as le
from acpfsm.statecharts.vocab import ErrorClass

from .agentctl_server import AgentctlServer
from .conftest import _Factory
from .helpers import (
    TEST_CONFIG,
    make_runtime,
    published,
    session_of,
    spec,
    wait_turn_streaming,
    wait_until,
    workspace,
)

pytestmark = pytest.mark.integration


def failing_turn(
    tg: anyio.abc.TaskGroup,
    rt: Runtime,
    execution_id: str,
    text: str,
    expected: type[BaseException] = AgentReportedError,
) -> list[BaseException]:
    """A prompt run in ``tg`` that is to fail with ``expected``: its error lands in the list."""
    errors: list[BaseException] = []

    async def turn() -> None:
        try:
            await rt.prompt(execution_id, text)
        except expected as exc:
            errors.append(exc)

    tg.start_soon(turn)
    return errors


async def test_agent_killed_mid_turn_is_transport_death(
    agentctl: AgentctlServer, tmp_path: Path
) -> None:
    executor = AgentctlExecutor(url=agentctl.url, token=agentctl.token(), config=TEST_CONFIG)
    async with make_runtime({"agentctl": executor}) as rt:
        with anyio.fail_after(30):
            ref = await rt.launch(spec(workspace(tmp_path)))
            async with anyio.create_task_group() as tg:
                errors = failing_turn(tg, rt, ref.id, "[[fault:stall]] keep going")
                await wait_turn_streaming(rt, ref.id, 1)
                [agent] = agentctl.agents()
                os.kill(agent, signal.SIGKILL)
            message = str(errors[0])
            assert "peer disconnected before response: agent process exited with code -1" in message
            cls = classify_error(message, call=Call.PROMPT)
            assert cls.transport_dead
            assert cls.kind is ErrorClass.TRANSPORT_DEAD
            await wait_until(lambda: rt.get_execution(ref.id).exit_code is not None)
            snap = rt.get_execution(ref.id)
            assert snap.status == "FAILED"
            assert snap.exit_code == -1  # agentctl's code for a signalled agent
            assert published(rt, ref.id, le.AgentFailed)
            transport = executor.transports[ref.id]
            [lost] = transport.carrier_events
            assert isinstance(lost, StreamDisconnected)
            assert (lost.exit_code, lost.reconnecting) == (-1, False)
            assert not transport.reconnectable
            with pytest.raises(NotReadyForPrompts):
                await rt.prompt(ref.id, "anyone there?")
            final = await rt.stop(ref.id, "done")
            assert final.status == "STOPPED"
    assert agentctl.agents() == []


async def test_agent_errors_are_agent_errors(agentctl: AgentctlServer, tmp_path: Path) -> None:
    """A JSON-RPC error answering session/prompt (v0.95.1 projects it to ``Internal error``
    plus ``provider_error.rpc_code``) fails the turn with HEAD's JSON projection, after the
    short exit grace, while the agent lives on; a steer to an agent that does not queue
    prompts is not dispatched."""
    executor = AgentctlExecutor(url=agentctl.url, token=agentctl.token(), config=TEST_CONFIG)
    async with make_runtime({"agentctl": executor}, "--fault", "no_queueing") as rt:
        with anyio.fail_after(30):
            ref = await rt.launch(spec(workspace(tmp_path)))
            results: list[PromptResult] = []
            async with anyio.create_task_group() as tg:

                async def turn() -> None:
                    results.append(await rt.prompt(ref.id, "a slow one [[delay:0.05]]"))

                tg.start_soon(turn)
                await wait_turn_streaming(rt, ref.id, 1)
                with pytest.raises(SteerNotDispatched, match="does not advertise prompt queueing"):
                    await rt.steer(ref.id, "change of plan")
            assert results[0].stop_reason == "end_turn"
            with pytest.raises(AgentReportedError) as info:
                await rt.prompt(ref.id, "[[fault:prompt_error]] fail please")
            assert '{"code":-32603,"message":"Internal error"}' in str(info.value)
            assert classify_error(str(info.value), call=Call.PROMPT).kind is ErrorClass.INCONCLUSIVE
            snap = rt.get_execution(ref.id)
            assert (snap.status, snap.exit_code) == ("FAILED", None)
            assert len(agentctl.agents()) == 1  # the agent itself is fine
            transport = executor.transports[ref.id]
            assert transport.capabilities is not None
            assert not transport.capabilities.prompt_queueing
            assert transport.carrier_events == []
            await rt.stop(ref.id, "done")


async def test_unacknowledged_cancel_escalates(agentctl: AgentctlServer, tmp_path: Path) -> None:
    """The agent ignores the cancel: agentctl gives the turn up after its 3 s join and
    suppresses its end. It answers ``not_acknowledged`` (escalated at once), or, when its own
    release of the prompt gate wins the race with that join, ``success`` (escalated after the
    cancel wait, as kandev's CancelAgent does): either way CancelEscalated, and READY."""
    executor = AgentctlExecutor(url=agentctl.url, token=agentctl.token(), config=TEST_CONFIG)
    async with make_runtime({"agentctl": executor}) as rt:
        with anyio.fail_after(30):
            ref = await rt.launch(spec(workspace(tmp_path)))
            async with anyio.create_task_group() as tg:
                errors = failing_turn(
                    tg, rt, ref.id, "[[fault:hang]] wait forever", CancelEscalated
                )
                await wait_turn_streaming(rt, ref.id, 1)
                with pytest.raises(CancelEscalated):
                    await rt.cancel(ref.id)  # agentctl gives up after its 3 s join
            assert errors
            assert rt.get_execution(ref.id).status == "READY"
            current = session_of(rt, ref.id).current
            assert current is not None and current.leaf == "cancel_escalated"
            transport = executor.transports[ref.id]
            events = [r.event for r in rt.trace.for_execution(ref.id)]
            if "cancel_wait_timed_out" not in events:  # agentctl said not_acknowledged
                assert transport._owed == []  # the abandoned turn owes no end any more
            # else agentctl said success and sends no end: the carrier drops the turn at the
            # next prompt (test_agentctl_owed_turns; this agent's hung turn would hold it)
            await rt.stop(ref.id, "done")


async def test_websocket_drop_reconnects_and_retries(
    agentctl: AgentctlServer, tmp_path: Path
) -> None:
    config = msgspec.structs.replace(TEST_CONFIG, reconnect_initial_delay=0.3)
    executor = AgentctlExecutor(url=agentctl.url, token=agentctl.token(), config=config)
    async with make_runtime({"agentctl": executor}) as rt:
        with anyio.fail_after(30):
            ref = await rt.launch(spec(workspace(tmp_path)))
            transport = executor.transports[ref.id]
            assert transport.connections == 1
            async with anyio.create_task_group() as tg:
                errors = failing_turn(tg, rt, ref.id, "a slow turn [[delay:0.05]]")
                await wait_turn_streaming(rt, ref.id, 1)
                await transport.drop_stream()  # the network loses the socket mid-turn
            # the waiter is released at once with the seed's text; the execution FAILED
            assert "agent stream disconnected: websocket: close 1006" in str(errors[0])
            assert rt.get_execution(ref.id).status == "FAILED"
            assert published(rt, ref.id, le.AgentctlError)
            # the socket is redialled; agentctl delivers what it buffered meanwhile
            await wait_until(lambda: bool(published(rt, ref.id, StreamReconnected)))
            lost, back = transport.carrier_events
            assert isinstance(lost, StreamDisconnected) and lost.reconnecting
            assert isinstance(back, StreamReconnected)
            assert transport.connections == 2
            await rt.recover_stream(ref.id)
            assert rt.get_execution(ref.id).status == "READY"
            ok = await rt.prompt(ref.id, "after the reconnect")
            assert ok.stop_reason == "end_turn"

            # a normal close just before a prompt: the prompt finds no socket, waits for the
            # redial (0.3 s) and resends the same generation (retryPromptAfterReconnect)
            await transport.drop_stream(clean=True)
            retried: PromptResult = await rt.prompt(ref.id, "sent while redialling")
            assert retried.stop_reason == "end_turn"
            assert "sent while redialling" in retried.agent_message
            assert transport.connections == 3
            events = [
                r.event
                for r in rt.trace.for_execution(ref.id)
                if r.chart == "prompt_generation" and r.generation == retried.generation
            ]
            # (a 100 ms poll may still see the chart connected before it learns of the loss:
            # that resend finds no socket either, nothing is written)
            sends = [e for e in events if e != "dispatch_started"]
            polls = [e for i, e in enumerate(sends) if i == 0 or e != sends[i - 1]]
            assert polls[:3] == [
                "dispatch_unreachable",
                "dispatch_accepted",
                "completion_received",
            ]
            assert events[0] == "dispatch_started" and events.count("dispatch_started") >= 2
            # the chart redialled the normal close silently: nothing more was published
            stream = [
                (r.event, r.target)
                for r in rt.trace.for_execution(ref.id)
                if r.chart == "agent_stream" and r.target != r.source
            ]
            assert stream[-4:] == [
                ("connection_lost", "announced"),
                ("redial_succeeded", "connected"),
                ("connection_lost", "silent"),
                ("redial_succeeded", "connected"),
            ]
            assert len(published(rt, ref.id, StreamReconnected)) == 1
            clean_loss = transport.carrier_events[2]
            assert isinstance(clean_loss, StreamDisconnected) and clean_loss.clean
            assert rt.get_execution(ref.id).status == "READY"
            await rt.stop(ref.id, "done")


async def test_a_refused_redial_is_given_up_at_once(
    agentctl: AgentctlServer, tmp_path: Path
) -> None:
    """The token is revoked while the socket is down: agentctl refuses the redial's upgrade
    (401), the transport says the dial is refused for good (``DialRefused``) and the
    AgentStream chart gives up at that first dial, within its budget: the owed turn fails
    with the reason, the carrier ends, requests raise TransportClosed."""
    executor = AgentctlExecutor(url=agentctl.url, token=agentctl.token(), config=TEST_CONFIG)
    async with make_runtime({"agentctl": executor}) as rt:
        with anyio.fail_after(30):
            ref = await rt.launch(spec(workspace(tmp_path)))
            transport = executor.transports[ref.id]
            async with anyio.create_task_group() as tg:
                errors = failing_turn(tg, rt, ref.id, "[[fault:stall]] a long turn")
                await wait_turn_streaming(rt, ref.id, 1)
                transport.instance.headers["Authorization"] = "Bearer " + "0" * 64
                await transport.drop_stream(clean=True)  # even a silent redial is refused
            assert "status 401: agentctl refused the auth token" in str(errors[0])
            assert not transport.reconnectable
            await wait_until(lambda: session_of(rt, ref.id).stream.machine.state == "disconnected")
            stream = [
                (r.event, r.target)
                for r in rt.trace.for_execution(ref.id)
                if r.chart == "agent_stream" and r.target != r.source
            ]
            assert stream[-3:] == [
                ("connection_lost", "silent"),
                ("redial_failed", "giving_up"),
                ("connection_lost", "disconnected"),
            ]
            assert transport.connections == 1
            *_, final = transport.carrier_events
            assert isinstance(final, StreamDisconnected) and not final.reconnecting
            with pytest.raises(TransportClosed, match="agentctl unreachable"):
                await transport.cancel()
            assert rt.get_execution(ref.id).status == "FAILED"
            await rt.stop(ref.id, "done")


async def test_without_a_runtime_the_transport_redials_on_its_own(
    agentctl: AgentctlServer, tmp_path: Path
) -> None:
    """``auto_redial=True`` (``acpfsm conform``, or any use without a Runtime): the transport
    follows the same policy by itself: it redials an abnormal drop and a normal close after
    the config's backoff, keeps serving, and gives up on a refused dial."""
    config = msgspec.structs.replace(TEST_CONFIG, reconnect_initial_delay=0.05)
    executor = AgentctlExecutor(
        url=agentctl.url, token=agentctl.token(), config=config, auto_redial=True
    )
    ws = workspace(tmp_path)
    launch = AgentLaunch(
        execution_id="standalone-1",
        session_id="standalone-1",
        agent_id="reference",
        command=reference_profile("--delay", "0.005").command,
        workspace=str(ws),
    )
    events: list[AgentEvent] = []
    with anyio.fail_after(30):
        async with executor.open(launch) as opened, anyio.create_task_group() as tg:
            transport = executor.transports["standalone-1"]
            assert transport is opened

            async def pump() -> None:
                async for event in transport.events():
                    events.append(event)

            tg.start_soon(pump)
            await transport.initialize()
            await transport.new_session(str(ws))
            await transport.drop_stream()
            await wait_until(lambda: transport.connections == 2)
            await transport.drop_stream(clean=True)
            await wait_until(lambda: transport.connections == 3)
            await transport.prompt("still there?", [], 1)
            await wait_until(lambda: any(isinstance(e, Complete) for e in events))
            lost, back, closed, back_again = transport.carrier_events
            assert isinstance(lost, StreamDisconnected) and not lost.clean
            assert isinstance(closed, StreamDisconnected) and closed.clean
            assert isinstance(back, StreamReconnected) and isinstance(back_again, StreamReconnected)

            transport.instance.headers["Authorization"] = "Bearer " + "0" * 64
            await transport.drop_stream()
            await wait_until(lambda: not transport.reconnectable)
            # the drop's own event (still reconnecting) comes first, then the give-up
            await wait_until(
                lambda: isinstance(events[-1], StreamDisconnected) and not events[-1].reconnecting
            )
            final = events[-1]
            assert isinstance(final, StreamDisconnected) and not final.reconnecting
            assert "redial failed: agent stream upgrade refused with status 401" in final.error
            tg.cancel_scope.cancel()


async def test_wrong_credentials_launch_nothing(agentctl: AgentctlServer, tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    async with make_runtime(
        {
            "bad-token": AgentctlExecutor(url=agentctl.url, token="0" * 64, config=TEST_CONFIG),
            "bad-nonce": AgentctlExecutor(url=agentctl.url, nonce="not-it", config=TEST_CONFIG),
        }
    ) as rt:
        with anyio.fail_after(20):
            with pytest.raises(AuthenticationFailed, match="status 401: agentctl refused the auth"):
                await rt.launch(spec(ws, "bad-token"))
            with pytest.raises(
                AuthenticationFailed, match="status 403: invalid or already-consumed nonce"
            ):
                await rt.launch(spec(ws, "bad-nonce"))
            with pytest.raises(LaunchSpecError, match="is not a directory"):
                await rt.launch(spec(tmp_path / "missing", "bad-token"))
            assert rt.list_executions() == []
    token = agentctl.token()
    assert agentctl.instances() == []
    assert agentctl.agents() == []

    # a wrong instance id: agentctl's instance guard refuses every call and the socket
    async with httpx.AsyncClient() as client:
        control = ControlClient(agentctl.url, client, token=token, config=TEST_CONFIG)
        info = await control.create_instance(
            {"id": "inst-a", "workspace_path": str(ws), "agent_command": "true", "protocol": "acp"}
        )
        url = control.instance_url(info.port)
        wrong = InstanceClient(url, client, token=token, instance_id="inst-b", config=TEST_CONFIG)
        with pytest.raises(AuthenticationFailed, match="status 404: instance no longer exists"):
            await wrong.configure(["true"])
        with pytest.raises(AuthenticationFailed, match="status 404: instance no longer exists"):
            await wrong.start()
        with pytest.raises(AuthenticationFailed, match="instance 'inst-b' does not exist"):
            async with open_agentctl_transport(wrong):
                pass  # pragma: no cover - the dial is refused
        # a wrong token on the instance port, too
        bad = InstanceClient(url, client, token="0" * 64, instance_id="inst-a", config=TEST_CONFIG)
        with pytest.raises(AuthenticationFailed, match="status 401"):
            await bad.status()
        right = InstanceClient(url, client, token=token, instance_id="inst-a", config=TEST_CONFIG)
        assert (await right.status())["agent_status"] == "stopped"  # nothing was started
        assert agentctl.agents() == []
        await control.delete_instance("inst-a")


async def test_agentctl_killed_fails_cleanly(
    agentctl: AgentctlServer, agentctl_factory: _Factory, tmp_path: Path
) -> None:
    config = AgentctlConfig(http_timeout=5.0, reconnect_budget=1.0, keepalive_interval=None)
    doomed = AgentctlExecutor(url=agentctl.url, token=agentctl.token(), config=config)
    other = agentctl_factory()
    spare = AgentctlExecutor(url=other.url, token=other.token(), config=TEST_CONFIG)
    async with make_runtime({"agentctl": doomed, "agentctl-b": spare}) as rt:
        with anyio.fail_after(30):
            ref = await rt.launch(spec(workspace(tmp_path)))
            async with anyio.create_task_group() as tg:
                errors = failing_turn(tg, rt, ref.id, "[[fault:stall]] a long turn")
                await wait_turn_streaming(rt, ref.id, 1)
                agentctl.kill()
            assert "agent stream disconnected" in str(errors[0])
            assert rt.get_execution(ref.id).status == "FAILED"
            # the redial budget runs out: the carrier is given up for good
            transport = doomed.transports[ref.id]
            stream = session_of(rt, ref.id).stream
            await wait_until(lambda: stream.machine.state == "disconnected")
            assert not transport.reconnectable
            first, final = transport.carrier_events
            assert isinstance(first, StreamDisconnected) and first.reconnecting
            assert isinstance(final, StreamDisconnected) and not final.reconnecting
            assert "agentctl unreachable" in final.error
            assert "not redialled within 1s" in final.error  # this executor's budget
            # the chart's budget timer gave up, not the transport
            path = [
                (r.event, r.target)
                for r in rt.trace.for_execution(ref.id)
                if r.chart == "agent_stream" and r.target != r.source
            ]
            assert path[-3:] == [
                ("connection_lost", "announced"),
                ("reconnect_timed_out", "giving_up"),
                ("connection_lost", "disconnected"),
            ]
            with pytest.raises(TransportClosed):
                await transport.cancel()
            with pytest.raises(NotReadyForPrompts):
                await rt.prompt(ref.id, "hello?")
            stopped = await rt.stop(ref.id, "agentctl is gone")  # the delete fails quietly
            assert stopped.status == "STOPPED"

            # the runtime goes on: another agentctl serves the next execution
            ref2 = await rt.launch(spec(workspace(tmp_path, "ws2"), "agentctl-b"))
            result = await rt.resume(ref2.id, "still working")
            assert result.stop_reason == "end_turn"
            await rt.stop(ref2.id, "done")
    assert other.instances() == []


async def _call_mcp_tool(base_url: str, name: str, arguments: dict[str, Any]) -> str:
    """One MCP ``tools/call`` against an instance's embedded MCP server (streamable HTTP)."""
    mcp = base_url + "/mcp"
    headers = {"Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(timeout=10.0) as client:
        init = await client.post(
            mcp,
            headers=headers,
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-03-26",
                    "capabilities": {},
                    "clientInfo": {"name": "acpfsm-test", "version": "1"},
                },
            },
        )
        assert init.status_code == 200, init.text
        headers["Mcp-Session-Id"] = init.headers["mcp-session-id"]
        await client.post(
            mcp, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
        )
        call = await client.post(
            mcp,
            headers=headers,
            json={
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": name, "arguments": arguments},
            },
        )
    assert call.status_code == 200, call.text
    return call.text


async def test_agentctl_mcp_requests(agentctl: AgentctlServer, tmp_path: Path) -> None:
    """agentctl's embedded MCP server forwards a tool call to us as an ``mcp.*`` request on
    the agent stream. Without an MCP handler we answer with an error envelope (agentctl tells
    the MCP caller); with one, its result is the answer."""
    asked: list[tuple[str, Any]] = []

    async def handler(action: str, payload: Any) -> Any:
        asked.append((action, payload))
        return {"workspaces": [{"id": "ws-1", "name": "acpfsm-workspace"}]}

    token = agentctl.token()
    plain = AgentctlExecutor(url=agentctl.url, token=token, config=TEST_CONFIG)
    serving = AgentctlExecutor(
        url=agentctl.url, token=token, config=TEST_CONFIG, mcp_handler=handler
    )
    async with make_runtime({"plain": plain, "served": serving}) as rt:
        with anyio.fail_after(30):
            refused = await rt.launch(spec(workspace(tmp_path, "a"), "plain"))
            served = await rt.launch(spec(workspace(tmp_path, "b"), "served"))
            # launch returns before session/new; agentctl resets its MCP backend client at
            # session/new and cancels a call in flight ("MCP request cancelled: session
            # reset"): the calls go once both sessions exist
            await rt.wait_ready(refused.id)
            await rt.wait_ready(served.id)
            plain_url = plain.transports[refused.id].instance.base_url
            served_url = serving.transports[served.id].instance.base_url

            text = await _call_mcp_tool(plain_url, "list_workspaces_kandev", {})
            assert "acpfsm does not serve mcp.list_workspaces" in text, text
            assert (await rt.resume(refused.id, "still fine")).stop_reason == "end_turn"

            text = await _call_mcp_tool(served_url, "list_workspaces_kandev", {})
            assert "acpfsm-workspace" in text, text
            # (the reference agent lists kandev's tools too: agentctl then asks for plugin tools)
            assert [a for a, _ in asked if a != "mcp.list_plugin_tools"] == ["mcp.list_workspaces"]
            await rt.stop(refused.id, "done")
            await rt.stop(served.id, "done")


@pytest.mark.both_backends
async def test_cancel_refused_by_a_closed_stdin_is_cancel_failed(
    agentctl: AgentctlServer, tmp_path: Path
) -> None:
    """The agent closed its stdin: agentctl's ``session/cancel`` write fails (broken pipe)
    and agentctl answers the cancel ``success:false`` with that error. kandev
    (lifecycle/manager_interaction.go ``CancelAgent``) tolerates only stream-not-connected
    and not-acknowledged: anything else is ``failed to cancel agent: …`` (CancelFailed), not
    a lost stream and no escalation; the execution stays RUNNING with its turn."""
    executor = AgentctlExecutor(url=agentctl.url, token=agentctl.token(), config=TEST_CONFIG)
    async with make_runtime({"agentctl": executor}) as rt:
        with anyio.fail_after(30):
            ref = await rt.launch(spec(workspace(tmp_path)))
            async with anyio.create_task_group() as tg:
                errors = failing_turn(tg, rt, ref.id, "[[fault:close_stdin]] go deaf")
                await wait_turn_streaming(rt, ref.id, 1)
                with pytest.raises(CancelFailed, match=r"^failed to cancel agent: cancel failed: "):
                    await rt.cancel(ref.id)
                snap = rt.get_execution(ref.id)
                assert snap.status == "RUNNING"
                current = session_of(rt, ref.id).current
                assert current is not None and current.leaf != "cancel_escalated"
                tg.cancel_scope.cancel()
            assert not errors
            await rt.stop(ref.id, "done")
    assert agentctl.agents() == []
