"""The permission API over stdio, against the reference agent as a real subprocess: its
``[[permission]]`` directive asks before "running" a command, ``permission_reject_first``
lists the reject options first. Every agent but the reference agent's profile is refused by
default; ``ask`` lets the app decide; a late or second answer, an unknown option, a cancel
and a short bound end well."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from acpfsm.adapters.acp.process import ShutdownPolicy
from acpfsm.adapters.acp.stdio import StdioConfig
from acpfsm.adapters.events import PermissionCancelled, PermissionRequest
from acpfsm.runtime import (
    AgentProfile,
    LaunchSpec,
    PermissionAlreadyResolved,
    PermissionOptionNotOffered,
    PromptResult,
    Runtime,
    StdioExecutor,
    Timeouts,
    WorkspaceRef,
    reference_profile,
)
from acpfsm.runtime import events as le
from acpfsm.runtime.session.permissions import MAX_PENDING

pytestmark = [pytest.mark.both_backends, pytest.mark.integration]

FAST_SHUTDOWN = ShutdownPolicy(stdin_close_wait=1.0, term_wait=1.0, kill_wait=1.0)
REFERENCE = reference_profile("--delay", "0.001")
# the same agent under a profile of one's own: no permission_policy given
OTHER = AgentProfile(id="other-agent", command=REFERENCE.command)
FAKE_AGENT = Path(__file__).parents[1] / "adapters" / "fake_agents" / "fake_acp_agent.py"
FLOODER = AgentProfile(id="flooder", command=(sys.executable, str(FAKE_AGENT)))
DENIED = "Permission denied for Run `echo list files`."
RAN = "Ran `echo list files`."


def make_runtime(permission_wait: float = 300.0) -> Runtime:
    return Runtime(
        profiles=[REFERENCE, OTHER, FLOODER],
        executors={
            "stdio": StdioExecutor(config=StdioConfig(cancel_timeout=2.0), shutdown=FAST_SHUTDOWN)
        },
        timeouts=Timeouts(cancel_wait=5.0, cancel_escalation=1.0, permission_wait=permission_wait),
    )


def spec(ws: Path, profile: str = "reference", **kw: Any) -> LaunchSpec:
    return LaunchSpec(
        agent_profile_id=profile, executor_id="stdio", workspace=WorkspaceRef(path=str(ws)), **kw
    )


def backlog(rt: Runtime, execution_id: str, kind: type[Any]) -> list[Any]:
    return [e for e in rt._session(execution_id).hub._backlog if isinstance(e, kind)]


async def next_request(rt: Runtime, execution_id: str, seen: int = 0) -> le.PermissionRequested:
    with anyio.fail_after(20):
        while len(requests := backlog(rt, execution_id, le.PermissionRequested)) <= seen:
            await anyio.sleep(0.01)
    request: le.PermissionRequested = requests[seen]
    return request


async def asking(
    rt: Runtime, tg: anyio.abc.TaskGroup, ws: Path, profile: str, text: str
) -> tuple[str, list[PromptResult]]:
    """A ``profile`` execution under the ``ask`` policy, ready, prompted ``text`` in ``tg``:
    its id and the list the prompt's result lands in."""
    ref = await rt.launch(spec(ws, profile, permission_policy="ask"))
    await rt.wait_ready(ref.id)
    results: list[PromptResult] = []

    async def prompt() -> None:
        results.append(await rt.prompt(ref.id, text))

    tg.start_soon(prompt)
    return ref.id, results


async def test_by_default_only_the_reference_agent_may_act(tmp_path: Path) -> None:
    async with make_runtime() as rt:
        with anyio.fail_after(30):
            mine = await rt.launch(spec(tmp_path, "reference"))
            other = await rt.launch(spec(tmp_path, "other-agent"))
            assert RAN in (await rt.prompt(mine.id, "list files [[permission]]")).agent_message
            refused = await rt.prompt(other.id, "list files [[permission]]")
            assert DENIED in refused.agent_message
            (resolved,) = backlog(rt, other.id, le.PermissionResolved)
            assert (resolved.option_id, resolved.option_kind, resolved.decided_by) == (
                "reject_once",
                "reject_once",
                "policy",
            )
            # options listed reject first: allow_once still picks allow_once, reject reject_once
            prompt = "list files [[fault:permission_reject_first]] [[permission]]"
            assert RAN in (await rt.prompt(mine.id, prompt)).agent_message
            assert DENIED in (await rt.prompt(other.id, prompt)).agent_message
            kinds = [o.kind for o in backlog(rt, other.id, PermissionRequest)[-1].options]
            assert kinds == ["reject_once", "reject_always", "allow_once", "allow_always"]
            chosen = [r.option_id for r in backlog(rt, mine.id, le.PermissionResolved)]
            assert chosen == ["allow_once", "allow_once"]  # never allow_always
            await rt.stop(mine.id, "done")
            await rt.stop(other.id, "done")


async def test_ask_lets_the_app_decide(tmp_path: Path) -> None:
    async with make_runtime() as rt, anyio.create_task_group() as tg:
        with anyio.fail_after(30):
            ref = await rt.launch(spec(tmp_path, "other-agent", permission_policy="ask"))
            await rt.wait_ready(ref.id)
            results: list[PromptResult] = []

            async def prompt(text: str) -> None:
                results.append(await rt.prompt(ref.id, text))

            tg.start_soon(prompt, "list files [[permission]]")
            request = await next_request(rt, ref.id)
            assert request.tool_call.title == "Run `echo list files`"
            assert request.tool_call.kind == "execute"
            assert request.tool_call.raw_input == {"command": ["echo", "list", "files"]}
            assert request.prompt_generation == 1
            with pytest.raises(PermissionOptionNotOffered):
                await rt.respond_permission(ref.id, request.request_id, "allow_everything")
            await rt.respond_permission(ref.id, request.request_id, "allow_once")
            with pytest.raises(PermissionAlreadyResolved):  # answering twice
                await rt.respond_permission(ref.id, request.request_id, "reject_once")
            await wait_for(lambda: len(results) == 1)
            assert RAN in results[0].agent_message
            # reject_always: the agent remembers it and asks no more for this kind
            tg.start_soon(prompt, "list files [[permission]]")
            request = await next_request(rt, ref.id, seen=1)
            await rt.respond_permission(ref.id, request.request_id, "reject_always")
            await wait_for(lambda: len(results) == 2)
            assert DENIED in results[1].agent_message
            third = await rt.prompt(ref.id, "list files [[permission]]")
            assert DENIED in third.agent_message
            assert len(backlog(rt, ref.id, le.PermissionRequested)) == 2
            await rt.stop(ref.id, "done")


async def test_a_cancel_withdraws_the_question_and_a_late_answer_is_refused(
    tmp_path: Path,
) -> None:
    async with make_runtime() as rt, anyio.create_task_group() as tg:
        with anyio.fail_after(30):
            eid, results = await asking(
                rt, tg, tmp_path, "other-agent", "list files [[permission]]"
            )
            request = await next_request(rt, eid)
            await rt.cancel(eid)
            await wait_for(lambda: len(results) == 1)
            assert results[0].stop_reason == "cancelled"
            (resolved,) = backlog(rt, eid, le.PermissionResolved)
            assert (resolved.outcome, resolved.decided_by) == ("cancelled", "withdrawn")
            assert backlog(rt, eid, PermissionCancelled)
            with pytest.raises(PermissionAlreadyResolved, match="withdrawn"):
                await rt.respond_permission(eid, request.request_id, "allow_once")
            # the execution goes on
            assert "Reference reply" in (await rt.prompt(eid, "hello")).agent_message
            await rt.stop(eid, "done")


async def test_an_unanswered_question_is_refused_at_the_bound(tmp_path: Path) -> None:
    async with make_runtime(permission_wait=0.5) as rt:
        with anyio.fail_after(30):
            ref = await rt.launch(spec(tmp_path, "other-agent", permission_policy="ask"))
            result = await rt.prompt(ref.id, "list files [[permission]]")
            assert DENIED in result.agent_message
            (resolved,) = backlog(rt, ref.id, le.PermissionResolved)
            assert (resolved.option_id, resolved.decided_by) == ("reject_once", "timeout")
            await rt.stop(ref.id, "done")


async def wait_for(predicate: Any) -> None:
    while not predicate():
        await anyio.sleep(0.01)


async def test_a_flood_of_questions_is_bounded_and_each_is_answered_once(tmp_path: Path) -> None:
    """An agent that asks 100 questions at once: MAX_PENDING wait for the app, the rest are
    refused at once (visibly); the app answers the waiting ones; the agent gets exactly one
    answer per question."""
    flood = MAX_PENDING + 36
    async with make_runtime() as rt, anyio.create_task_group() as tg:
        with anyio.fail_after(30):
            eid, results = await asking(rt, tg, tmp_path, "flooder", f"permission-flood {flood}")
            await wait_for(lambda: len(backlog(rt, eid, le.PermissionRequested)) == flood)
            broker = rt._session(eid).permissions
            await wait_for(lambda: len(broker.pending) == MAX_PENDING)
            for rid in broker.pending:
                await rt.respond_permission(eid, rid, "allow")
            await wait_for(lambda: len(results) == 1)
            assert results[0].agent_message == (
                f"permission-flood: {flood} answered, allow {MAX_PENDING}, reject {flood - MAX_PENDING}"
            )
            by = [r.decided_by for r in backlog(rt, eid, le.PermissionResolved)]
            assert sorted(set(by)) == ["app", "limit"] and len(by) == flood
            await rt.stop(eid, "done")


async def test_ids_one_and_quoted_one_are_two_questions(tmp_path: Path) -> None:
    """The agent asks under JSON-RPC id 1 and "1" at once: two requests, not one reused id.
    The app sees two questions ("1" and '"1"'), answers each its own way, and the agent gets
    each answer under exactly its own id (a number stays a number); nothing is refused."""
    async with make_runtime() as rt, anyio.create_task_group() as tg:
        with anyio.fail_after(30):
            eid, results = await asking(rt, tg, tmp_path, "flooder", 'permission-ids 1 "1" 7')
            await wait_for(lambda: len(rt._session(eid).permissions.pending) == 3)
            asked = backlog(rt, eid, le.PermissionRequested)
            assert sorted((r.request_id, r.tool_call.tool_call_id) for r in asked) == [
                ('"1"', "t-1"),
                ("1", "t-0"),
                ("7", "t-2"),
            ]
            await rt.respond_permission(eid, '"1"', "allow")
            await rt.respond_permission(eid, "1", "reject")
            await rt.respond_permission(eid, "7", "allow")
            await wait_for(lambda: len(results) == 1)
            assert results[0].agent_message == 'permission-ids: 1 reject; "1" allow; 7 allow'
            assert backlog(rt, eid, le.ProtocolErrorEvent) == []
            await rt.stop(eid, "done")


async def test_a_reused_id_is_still_refused_and_reported(tmp_path: Path) -> None:
    """The same JSON-RPC id twice while the first waits: the app sees one question, the
    second is refused at once and reported as the agent's protocol error; each gets one
    answer."""
    async with make_runtime() as rt, anyio.create_task_group() as tg:
        with anyio.fail_after(30):
            eid, results = await asking(rt, tg, tmp_path, "flooder", "permission-ids 5 5")
            await wait_for(lambda: len(backlog(rt, eid, le.ProtocolErrorEvent)) == 1)
            (told,) = backlog(rt, eid, le.ProtocolErrorEvent)
            assert (
                told.error == "permission request '5' reuses the id of one still waiting: refused"
            )
            assert [r.request_id for r in backlog(rt, eid, le.PermissionRequested)] == ["5"]
            await rt.respond_permission(eid, "5", "allow")
            await wait_for(lambda: len(results) == 1)
            assert results[0].agent_message == "permission-ids: 5 reject,allow"
            await rt.stop(eid, "done")


async def test_a_request_for_another_session_is_refused_whatever_the_policy(
    tmp_path: Path,
) -> None:
    """Under ``allow_once`` (the reference profile's policy), a permission request naming an
    ACP session the execution does not own is refused at the transport (``-32602``, a protocol
    error for the app), never put to the policy: the agent runs nothing. A request for its own
    session is asked, and ``permission.requested`` names that session."""
    async with make_runtime() as rt:
        with anyio.fail_after(30):
            ref = await rt.launch(spec(tmp_path))
            foreign = await rt.prompt(
                ref.id, "[[fault:permission_other_session]] [[permission]] list files"
            )
            assert DENIED in foreign.agent_message and RAN not in foreign.agent_message
            acp_id = rt.get_execution(ref.id).acp_session_id
            [error] = backlog(rt, ref.id, le.ProtocolErrorEvent)
            assert f"names ACP session '{acp_id}-other', not this client's" in error.error
            assert backlog(rt, ref.id, le.PermissionRequested) == []
            assert backlog(rt, ref.id, le.PermissionResolved) == []
            own = await rt.prompt(ref.id, "[[permission]] list files")
            assert RAN in own.agent_message
            [asked] = backlog(rt, ref.id, le.PermissionRequested)
            assert asked.session_id == acp_id
            await rt.stop(ref.id, "done")
