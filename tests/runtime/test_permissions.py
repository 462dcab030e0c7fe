"""The permission API over the in-memory transport: a policy per execution (``reject`` by
default, ``allow_once``, ``ask``), the app's answers through ``Runtime.respond_permission``,
the bound, the end of the turn, and what a hostile agent or a careless app tries (unknown
options, floods, late and second answers)."""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

import anyio
import pytest

from acpfsm.adapters.events import PermissionOption, PermissionRequest, ProtocolErrorEvent
from acpfsm.adapters.memory import MemoryTransport
from acpfsm.runtime import (
    AgentProfile,
    ExecutionNotFound,
    LaunchSpecError,
    PermissionAlreadyResolved,
    PermissionAnswerError,
    PermissionOptionNotOffered,
    PermissionRequestNotFound,
    Runtime,
    reference_profile,
)
from acpfsm.runtime import events as le
from acpfsm.runtime.session.permissions import MAX_PENDING, REMEMBERED
from acpfsm.runtime.store import SqliteStore

from .durable_helpers import stored, write_rows
from .memory_runtime import (
    PROFILE,
    MemoryExecutor,
    launch_session,
    make_runtime,
    memory_agent,
    session_of,
    spec,
    wait_until,
)
from .prompt_helpers import prompting

pytestmark = pytest.mark.both_backends

# "rm -rf /" offering the dangerous option first
OPTIONS = [
    PermissionOption(option_id="always", name="Always allow", kind="allow_always"),
    PermissionOption(option_id="once", name="Allow once", kind="allow_once"),
    PermissionOption(option_id="no", name="Reject", kind="reject_once"),
    PermissionOption(option_id="never", name="Always reject", kind="reject_always"),
]


def ask(rid: str, generation: int = 0, options: list[PermissionOption] = OPTIONS) -> Any:
    return PermissionRequest(
        request_id=rid,
        prompt_generation=generation,
        tool_call_id=f"call-{rid}",
        permission_title="Run `rm -rf /`",
        options=options,
        tool_kind="execute",
        raw_input={"command": ["rm", "-rf", "/"]},
    )


def events_of(rt: Runtime, execution_id: str, kind: type[Any]) -> list[Any]:
    return [e for e in session_of(rt, execution_id).hub._backlog if isinstance(e, kind)]


def resolved(rt: Runtime, execution_id: str) -> dict[str, le.PermissionResolved]:
    return {e.request_id: e for e in events_of(rt, execution_id, le.PermissionResolved)}


async def answered(transport: MemoryTransport, count: int) -> None:
    await wait_until(lambda: len(transport.permission_answers) >= count)


def runtime(time_scale: float, **kw: Any) -> tuple[MemoryExecutor, Runtime]:
    ex = MemoryExecutor()
    return ex, make_runtime(ex, time_scale=time_scale, **kw)


async def test_every_profile_but_the_reference_agent_rejects_by_default(
    time_scale: float,
) -> None:
    """A profile's default is ``reject``: the reject option is chosen even when an allow
    option is listed first, ``cancelled`` when no reject option is offered; each automatic
    answer is published with who decided and why."""
    assert PROFILE.permission_policy == "reject"
    assert reference_profile().permission_policy == "allow_once"
    ex, rt = runtime(time_scale)
    async with rt, anyio.create_task_group() as tg:
        ref = await rt.launch(spec())
        await rt.wait_ready(ref.id)
        tg.start_soon(ex.last.request_permission, ask("r1"))
        await answered(ex.last, 1)
        tg.start_soon(ex.last.request_permission, ask("r2", options=OPTIONS[:2]))
        await answered(ex.last, 2)
        assert ex.last.permission_answers == [("r1", "no"), ("r2", None)]
        (requested, _) = events_of(rt, ref.id, le.PermissionRequested)
        assert requested.execution_id == ref.id and requested.policy == "reject"
        assert requested.tool_call == le.PermissionToolCall(
            tool_call_id="call-r1",
            title="Run `rm -rf /`",
            kind="execute",
            raw_input={"command": ["rm", "-rf", "/"]},
        )
        assert [o.option_id for o in requested.options] == ["always", "once", "no", "never"]
        r1, r2 = resolved(rt, ref.id)["r1"], resolved(rt, ref.id)["r2"]
        assert (r1.outcome, r1.option_id, r1.option_kind, r1.decided_by) == (
            "selected",
            "no",
            "reject_once",
            "policy",
        )
        assert (r2.outcome, r2.option_id, r2.decided_by) == ("cancelled", "", "policy")
        assert "reject" in r1.reason
        await rt.stop(ref.id, "done")


async def test_allow_once_never_allows_always(time_scale: float) -> None:
    ex, rt = runtime(time_scale)
    async with rt, anyio.create_task_group() as tg:
        ref = await rt.launch(spec(permission_policy="allow_once"))
        await rt.wait_ready(ref.id)
        tg.start_soon(ex.last.request_permission, ask("r1"))
        await answered(ex.last, 1)
        only_always = [OPTIONS[0], OPTIONS[3]]
        tg.start_soon(ex.last.request_permission, ask("r2", options=only_always))
        await answered(ex.last, 2)
        assert ex.last.permission_answers == [("r1", "once"), ("r2", "never")]
        assert resolved(rt, ref.id)["r2"].decided_by == "policy"
        await rt.stop(ref.id, "done")


@pytest.mark.parametrize("policy", ["allow_once", "reject"])
async def test_a_request_the_policy_answers_does_not_expire(time_scale: float, policy: str) -> None:
    """Only ``ask`` leaves a request waiting: a policy's answer is immediate (no deadline)."""
    ex, rt = runtime(time_scale)
    async with rt, anyio.create_task_group() as tg:
        ref = await rt.launch(spec(permission_policy=policy))
        await rt.wait_ready(ref.id)
        tg.start_soon(ex.last.request_permission, ask("r1"))
        await answered(ex.last, 1)
        (event,) = events_of(rt, ref.id, le.PermissionRequested)
        assert (event.policy, event.expires_in) == (policy, 0.0)
        await rt.stop(ref.id, "done")


async def test_a_turns_end_cancels_only_its_own_requests(time_scale: float) -> None:
    """Requests of another generation (0: none, outside a turn; an older or a newer turn)
    outlive a turn's end."""
    ex, rt = runtime(time_scale)
    async with rt, anyio.create_task_group() as tg:
        ref = await rt.launch(spec(permission_policy="ask"))
        await rt.wait_ready(ref.id)
        broker = session_of(rt, ref.id).permissions
        tg.start_soon(ex.last.request_permission, ask("idle", generation=0))
        tg.start_soon(ex.last.request_permission, ask("older", generation=1001))
        tg.start_soon(ex.last.request_permission, ask("own", generation=1002))
        tg.start_soon(ex.last.request_permission, ask("newer", generation=1003))
        await wait_until(lambda: len(broker.pending) == 4)
        # a long-lived execution's numbers: equal, not the same int object
        broker.turn_ended(int("1002"))
        await answered(ex.last, 1)
        assert sorted(broker.pending) == ["idle", "newer", "older"]
        await rt.stop(ref.id, "done")


async def test_only_the_latest_resolutions_are_remembered(time_scale: float) -> None:
    """A late answer to a resolved request says how it was resolved, for the last REMEMBERED
    requests; older ones are forgotten (bounded memory under a flood)."""
    ex, rt = runtime(time_scale)
    async with rt:
        ref = await rt.launch(spec(permission_policy="reject"))
        await rt.wait_ready(ref.id)
        for n in range(REMEMBERED + 1):  # one after the other: r0 is the oldest
            await ex.last.request_permission(ask(f"r{n}"))
        await answered(ex.last, REMEMBERED + 1)
        with pytest.raises(PermissionRequestNotFound):
            await rt.respond_permission(ref.id, "r0", "once")
        with pytest.raises(PermissionAlreadyResolved):
            await rt.respond_permission(ref.id, "r1", "once")
        await rt.stop(ref.id, "done")


BROKER_LOG = "acpfsm.runtime"


def broker_log(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == BROKER_LOG and r.getMessage().startswith("permission request")
    ]


async def test_ask_publishes_the_request_and_takes_the_apps_answer(
    time_scale: float, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=BROKER_LOG)
    ex, rt = runtime(time_scale)
    async with rt, anyio.create_task_group() as tg:
        ref = await rt.launch(spec(permission_policy="ask"))
        await rt.wait_ready(ref.id)
        async with rt.subscribe_events(ref.id) as events:
            tg.start_soon(ex.last.request_permission, ask("r1"))
            async for event in events:
                if isinstance(event, le.PermissionRequested):
                    break
        assert event.request_id == "r1" and event.policy == "ask"
        assert event.expires_in == Runtime().timeouts.permission_wait * time_scale
        assert session_of(rt, ref.id).permissions.pending == ["r1"]
        # an option the request does not offer: refused, the request still waits
        with pytest.raises(PermissionOptionNotOffered) as info:
            await rt.respond_permission(ref.id, "r1", "yes-please")
        assert isinstance(info.value, PermissionAnswerError)
        assert (info.value.execution_id, info.value.request_id) == (ref.id, "r1")
        assert info.value.option_id == "yes-please"
        assert "offered: always, once, no, never" in str(info.value)
        with pytest.raises(PermissionOptionNotOffered) as not_text:
            await rt.respond_permission(ref.id, "r1", None)  # type: ignore[arg-type]
        assert not_text.value.option_id == "None"  # what was given, shown
        assert not ex.last.permission_answers
        # the app's answer is text built at run time (from JSON, a form), equal to the
        # offered option id but not the same object
        await rt.respond_permission(ref.id, "r1", "ONCE".lower())
        await answered(ex.last, 1)
        assert ex.last.permission_answers == [("r1", "once")]
        r1 = resolved(rt, ref.id)["r1"]
        assert (r1.option_id, r1.option_kind, r1.decided_by) == ("once", "allow_once", "app")
        assert not broker_log(caplog)  # the app knows its own answers: no log line
        # answering twice, a request never asked, an unknown execution
        with pytest.raises(PermissionAlreadyResolved) as again:
            await rt.respond_permission(ref.id, "r1", "no")
        assert again.value.resolution == "app: answered by the app; selected once"
        with pytest.raises(PermissionRequestNotFound):
            await rt.respond_permission(ref.id, "r-never", "no")
        with pytest.raises(ExecutionNotFound):
            await rt.respond_permission("nope", "r1", "no")
        assert ex.last.permission_answers == [("r1", "once")]
        await rt.stop(ref.id, "done")


async def test_an_unanswered_request_is_refused_at_its_bound(
    time_scale: float, autojump_clock: object, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=BROKER_LOG)
    ex, rt = runtime(time_scale)
    async with rt, anyio.create_task_group() as tg:
        ref = await rt.launch(spec(permission_policy="ask"))
        await rt.wait_ready(ref.id)
        tg.start_soon(ex.last.request_permission, ask("r1"))
        await anyio.sleep(301 * time_scale)  # Timeouts.permission_wait is 300 s
        await answered(ex.last, 1)
        assert ex.last.permission_answers == [("r1", "no")]
        r1 = resolved(rt, ref.id)["r1"]
        assert (r1.outcome, r1.option_id, r1.decided_by) == ("selected", "no", "timeout")
        # an answer the app did not give is logged, with who decided
        (line,) = broker_log(caplog)
        assert "permission request r1" in line and "answered no (timeout" in line
        with pytest.raises(PermissionAlreadyResolved, match="timeout"):
            await rt.respond_permission(ref.id, "r1", "once")
        await rt.stop(ref.id, "done")


async def test_the_end_of_its_turn_cancels_a_request(time_scale: float) -> None:
    """A request still waiting when its turn ends is answered ``cancelled``; one that comes
    after its turn ended is cancelled at once; a late answer is told so."""
    ex, rt = runtime(time_scale)
    async with rt, anyio.create_task_group() as tg:
        ref = await rt.launch(spec(permission_policy="ask"))
        await rt.wait_ready(ref.id)
        await rt.prompt(ref.id, "go", dispatch_only=True)  # generation 1 runs
        tg.start_soon(ex.last.request_permission, ask("r1", generation=1))
        await wait_until(lambda: session_of(rt, ref.id).permissions.pending == ["r1"])
        ex.last.complete(1)
        await answered(ex.last, 1)
        assert ex.last.permission_answers == [("r1", None)]
        r1 = resolved(rt, ref.id)["r1"]
        assert (r1.outcome, r1.decided_by) == ("cancelled", "turn_ended")
        with pytest.raises(PermissionAlreadyResolved, match="turn_ended"):
            await rt.respond_permission(ref.id, "r1", "once")
        # the agent asks again for a turn that is over
        tg.start_soon(ex.last.request_permission, ask("r2", generation=1))
        await answered(ex.last, 2)
        assert ex.last.permission_answers[1] == ("r2", None)
        assert resolved(rt, ref.id)["r2"].decided_by == "turn_ended"
        await rt.stop(ref.id, "done")


async def test_a_cancel_and_a_stop_withdraw_waiting_requests(time_scale: float) -> None:
    ex, rt = runtime(time_scale)
    async with rt, anyio.create_task_group() as tg:
        ref = await rt.launch(spec(permission_policy="ask"))
        await rt.wait_ready(ref.id)
        async with anyio.create_task_group() as turn:
            turn.start_soon(rt.prompt, ref.id, "go")
            await wait_until(lambda: 1 in ex.last.running)
            tg.start_soon(ex.last.request_permission, ask("r1", generation=1))
            await wait_until(lambda: session_of(rt, ref.id).permissions.pending == ["r1"])
            await rt.cancel(ref.id)
        await answered(ex.last, 1)
        assert ex.last.permission_answers == [("r1", None)]
        assert resolved(rt, ref.id)["r1"].decided_by == "withdrawn"
        tg.start_soon(ex.last.request_permission, ask("r2"))
        await wait_until(lambda: session_of(rt, ref.id).permissions.pending == ["r2"])
        async with rt.subscribe_events(ref.id) as events:
            await rt.stop(ref.id, "done")
            seen = [e async for e in events]
        (r2,) = [e for e in seen if isinstance(e, le.PermissionResolved) and e.request_id == "r2"]
        assert (r2.outcome, r2.decided_by, r2.reason) == (
            "cancelled",
            "withdrawn",
            "the execution stopped",
        )
        await answered(ex.last, 2)


async def test_a_duplicate_id_neither_hides_nor_ends_the_first_request(
    time_scale: float,
) -> None:
    """An agent reusing the id of a request still waiting gets the duplicate refused; the
    first stays reachable: a cancel (an agent that waits for that answer before it ends
    its turn) withdraws it, as it would without the duplicate."""
    ex = memory_agent(cancel_completes=False)
    rt = make_runtime(ex, time_scale=time_scale)
    async with rt, anyio.create_task_group() as tg:
        ref, s = await launch_session(rt, permission_policy="ask", ready=True)
        await prompting(tg, rt, ref.id, "go")
        tg.start_soon(ex.last.request_permission, ask("r1", generation=1))
        await wait_until(lambda: s.permissions.pending == ["r1"])
        tg.start_soon(ex.last.request_permission, ask("r1", generation=1))  # the same id
        await answered(ex.last, 1)
        assert ex.last.permission_answers == [("r1", "no")]
        tg.start_soon(rt.cancel, ref.id)
        await answered(ex.last, 2)
        assert ex.last.permission_answers[1] == ("r1", None)
        assert resolved(rt, ref.id)["r1"].decided_by == "withdrawn"
        assert s.permissions.pending == []
        tg.cancel_scope.cancel()


async def test_a_flood_of_requests_is_bounded(time_scale: float) -> None:
    """A flood: at most MAX_PENDING requests wait, the others are refused at once (each
    visibly); a duplicate of a waiting id is refused and published as the agent's protocol
    error, not as a second request under the id the app still has to answer; every request
    gets exactly one answer."""
    # the requests held waiting must not reach their own bound meanwhile (scaled, it is
    # 600 ms of real time under asyncio, which a loaded machine spent on the flood)
    ex, rt = runtime(time_scale, timeouts={"permission_wait": 300.0})
    flood = MAX_PENDING + 200
    async with rt, anyio.create_task_group() as tg:
        ref = await rt.launch(spec(permission_policy="ask"))
        await rt.wait_ready(ref.id)
        for n in range(flood):
            tg.start_soon(ex.last.request_permission, ask(f"r{n}"))
        await answered(ex.last, flood - MAX_PENDING)
        broker = session_of(rt, ref.id).permissions
        assert len(broker.pending) == MAX_PENDING
        refused = [r for r in resolved(rt, ref.id).values() if r.decided_by == "limit"]
        assert len(refused) == flood - MAX_PENDING
        assert {r.option_id for r in refused} == {"no"}
        waiting = broker.pending[0]
        announced = len(events_of(rt, ref.id, le.PermissionRequested))
        tg.start_soon(ex.last.request_permission, ask(waiting))  # the same id again
        await answered(ex.last, flood - MAX_PENDING + 1)
        assert ex.last.permission_answers[-1] == (waiting, "no")
        # refused to the agent alone: the app still has one request under that id, unresolved
        assert len(events_of(rt, ref.id, le.PermissionRequested)) == announced
        assert waiting not in resolved(rt, ref.id) and waiting in broker.pending
        (told,) = events_of(rt, ref.id, ProtocolErrorEvent)
        assert (
            told.error
            == f"permission request {waiting!r} reuses the id of one still waiting: refused"
        )
        for rid in list(broker.pending):
            await rt.respond_permission(ref.id, rid, "once")
        await answered(ex.last, flood + 1)
        answers = [rid for rid, _ in ex.last.permission_answers]
        assert sorted(answers) == sorted([*(f"r{n}" for n in range(flood)), waiting])
        assert broker.pending == []
        await rt.stop(ref.id, "done")


async def test_an_unknown_policy_is_refused_at_launch(time_scale: float) -> None:
    bad = AgentProfile(id="bad", command=("unused",), permission_policy="yolo")  # type: ignore[arg-type]
    ex, rt = runtime(time_scale, profiles=(PROFILE, bad))
    async with rt:
        with pytest.raises(LaunchSpecError, match="unknown permission policy 'yolo'"):
            await rt.launch(spec(permission_policy="yolo"))
        with pytest.raises(LaunchSpecError, match="unknown permission policy 'yolo'"):
            await rt.launch(spec(agent_profile_id="bad"))
        assert rt.list_executions() == [] and ex.transports == []


async def test_a_recovered_execution_allows_nothing_by_a_policy_it_does_not_know(
    tmp_path: Path,
) -> None:
    """A launch refuses an unknown policy, but a recovery takes the stored one as it is (a row
    another version wrote, or edited): a policy the broker does not know answers as
    ``reject`` ("allow" sorts just before "allow_once": no order or prefix test lets it by)."""
    ex = memory_agent()
    row = stored(permission_policy="allow")
    make = functools.partial(SqliteStore, tmp_path / "executions.db")
    await write_rows(make, row)
    ex.survivors.add(row.id)
    async with make_runtime(ex, store=make()) as rt:
        await rt.wait_ready(row.id)
        assert await ex.last.request_permission(ask("r1")) == "no"
        assert resolved(rt, row.id)["r1"].decided_by == "policy"
