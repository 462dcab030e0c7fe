"""Every lifecycle bound is the one kandev uses at that place: each bound of the timeouts
table gets a value no other bound has (:data:`DISTINCT`), so a wait that uses the wrong
bound is seen on the virtual clock, even where kandev's own values coincide (three 10 s
bounds: stream connect, cancel wait, the dispatch-only barrier; two 5 s: reconnect retry,
steer dispatch; two 2 s: the catalog wait, the cancel escalation's post-wait).

kandev: lifecycle/session.go (stream connect 10 s, ``retryPromptAfterReconnect`` 5 s,
``steerDispatchTimeout`` 5 s, ``waitForPromptDone``'s stall tick 1 min / threshold 5 min,
the seed's ``pendingDispatchedPromptWaitTimeout`` 10 s), manager_interaction.go
(``cancelWaitTimeout`` 10 s, ``cancelEscalationTimeout`` 2 s, the fresh catalog wait 2 s).
``request``, ``tool_call`` and ``permission_wait`` are acpfsm's own (agentctl bounds its
session/new and session/load at 2 min).

Written against the facade and the memory transport only: what is timed is what a caller or
the agent sees (a call raising, a request reaching the agent or being given up, an event
published). The times are asserted on trio's virtual clock; the asyncio run (bounds shrunk by
``time_scale``) checks the outcomes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc
import pytest

from acpfsm.adapters.events import ConfigOption, PermissionOption, PermissionRequest
from acpfsm.adapters.memory import MemoryTransport
from acpfsm.adapters.transport import Attachment, CancelResult
from acpfsm.runtime import (
    AgentProfile,
    CancelEscalated,
    PendingDispatchedPromptTimeout,
    PromptDispatchError,
    Runtime,
    SessionInitError,
    SteerDispatchTimeout,
    Timeouts,
)
from acpfsm.runtime import events as le
from acpfsm.testing.memory import MemoryExecutor

from .memory_runtime import spec

pytestmark = pytest.mark.both_backends

#: kandev's bounds made pairwise distinct (and no sum of two equal to a third one used
#: beside them), so a wait on the wrong bound takes a time no right one does.
DISTINCT = Timeouts(
    stream_connect=19.0,
    catalog_wait=3.0,
    catalog_poll=0.01,
    reconnect_retry=7.0,
    reconnect_poll=0.1,
    steer_dispatch=5.0,
    pending_dispatched_prompt=17.0,
    stall_tick=70.0,
    stall_threshold=300.0,
    cancel_wait=11.0,
    cancel_escalation=2.0,
    request=29.0,
    tool_call=37.0,
    permission_wait=43.0,
    executor_close=47.0,
    tool_server_idle=53.0,
)
# the polls only set how soon a wait notices; they are left small
_BOUNDS = [f for f in DISTINCT.__struct_fields__ if not f.endswith("_poll")]
assert len({getattr(DISTINCT, f) for f in _BOUNDS}) == len(_BOUNDS)

SLACK = 0.5
"""What a wait may overrun its bound by on the virtual clock (polls, scheduler passes)."""


def runtime(ex: MemoryExecutor, time_scale: float, *profiles: AgentProfile, **kw: Any) -> Runtime:
    return Runtime(
        profiles=profiles or (AgentProfile(id="mem", command=("unused",)),),
        executors={"memory": ex},
        timeouts=DISTINCT.scaled(time_scale),
        **kw,
    )


def took(backend: str, elapsed: float, bound: float) -> None:
    """``elapsed`` is ``bound`` (on trio's virtual clock; asyncio's real one is not exact)."""
    if backend == "trio":
        assert bound <= elapsed < bound + SLACK, (elapsed, bound)


async def until(predicate: Callable[[], bool], limit: float = 3600.0) -> None:
    with anyio.fail_after(limit):
        while not predicate():
            await anyio.sleep(0.005)


def called(tr: MemoryTransport, method: str) -> bool:
    return any(m == method for m, _ in tr.calls)


async def ready(rt: Runtime, ex: MemoryExecutor, **kw: Any) -> tuple[str, MemoryTransport]:
    ref = await rt.launch(spec(**kw))
    await rt.wait_ready(ref.id)
    return ref.id, ex.last


class Hanging:
    """A transport handler that never answers: when it was called and when given up."""

    def __init__(self) -> None:
        self.called: list[float] = []
        self.given_up: list[float] = []

    async def __call__(self, *_: Any) -> Any:
        self.called.append(anyio.current_time())
        try:
            await anyio.sleep_forever()
        finally:
            self.given_up.append(anyio.current_time())

    def lasted(self) -> float:
        return self.given_up[0] - self.called[0]


def stuck_prompt(tr: MemoryTransport, ack: anyio.Event) -> None:
    """session/prompt is acknowledged only once ``ack`` is set (the turn then runs)."""

    async def prompt(text: str, atts: tuple[Attachment, ...], g: int) -> None:
        await ack.wait()
        tr.running.append(g)

    tr.handlers["prompt"] = prompt


class Caught:
    """An operation run in the background: the acpfsm error it raised, and when."""

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self.result: Any = None
        self.at: float | None = None

    def run(self, tg: anyio.abc.TaskGroup, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        async def go() -> None:
            try:
                self.result = await fn(*args)
            except Exception as exc:  # noqa: BLE001 - kept for the test to look at
                self.error = exc
            self.at = anyio.current_time()

        tg.start_soon(go)


# --------------------------------------------------------------------------- cancel


async def test_the_escalation_waits_the_escalation_bound_for_the_released_prompt(
    time_scale: float, autojump_clock: object, backend: str
) -> None:
    """escalateStuckCancel: once the cancel escalates, the released prompt call is given
    ``cancelEscalationTimeout`` (2 s) to return, not the cancel wait (10 s). The prompt here
    cannot return (its request is never answered), so the whole post-wait is seen: the
    cancel waits ``cancel_wait`` for the request (it never overtakes the prompt it cancels),
    sends session/cancel, which is acknowledged but the turn never ends: ``cancel_wait``
    again, then the escalation, then ``cancel_escalation`` before CancelEscalated."""
    ex = MemoryExecutor(lambda: MemoryTransport(cancel_completes=False))
    async with runtime(ex, time_scale) as rt, anyio.create_task_group() as tg:
        eid, tr = await ready(rt, ex)
        ack = anyio.Event()
        stuck_prompt(tr, ack)
        sent_at: list[float] = []

        def cancel() -> CancelResult:
            sent_at.append(anyio.current_time())
            return CancelResult(acknowledged=True)

        tr.handlers["cancel"] = cancel
        prompt = Caught()
        prompt.run(tg, rt.prompt, eid, "stuck")
        await until(lambda: called(tr, "prompt"))
        start = anyio.current_time()
        with pytest.raises(CancelEscalated):
            await rt.cancel(eid)
        t = DISTINCT.scaled(time_scale)
        took(backend, sent_at[0] - start, t.cancel_wait)  # the request's wait
        took(backend, anyio.current_time() - sent_at[0], t.cancel_wait + t.cancel_escalation)
        ack.set()
        await until(lambda: prompt.at is not None)
        assert isinstance(prompt.error, CancelEscalated)
        await rt.stop(eid, "done")


async def test_an_acknowledged_cancel_waits_the_cancel_bound_for_the_turn(
    time_scale: float, autojump_clock: object, backend: str
) -> None:
    """CancelAgent: an acknowledged cancel waits ``cancelWaitTimeout`` for the turn to end,
    then escalates; the prompt released by the escalation returns at once."""
    ex = MemoryExecutor(lambda: MemoryTransport(cancel_completes=False))
    async with runtime(ex, time_scale) as rt, anyio.create_task_group() as tg:
        eid, _ = await ready(rt, ex)
        dispatched = anyio.Event()
        prompt = Caught()

        async def go() -> Any:
            return await rt.prompt(eid, "long", on_dispatched=dispatched.set)

        prompt.run(tg, go)
        await dispatched.wait()
        start = anyio.current_time()
        with pytest.raises(CancelEscalated):
            await rt.cancel(eid)
        took(backend, anyio.current_time() - start, DISTINCT.scaled(time_scale).cancel_wait)
        await until(lambda: prompt.at is not None)
        assert isinstance(prompt.error, CancelEscalated)
        await rt.stop(eid, "done")


async def test_an_abandoned_turns_cancel_request_is_given_up_after_the_cancel_bound(
    time_scale: float, autojump_clock: object, backend: str
) -> None:
    """The caller left its prompt: the turn is cancelled at the agent in the background,
    that session/cancel bounded by the cancel wait (nobody waits for it)."""
    ex = MemoryExecutor(lambda: MemoryTransport(cancel_completes=False))
    async with runtime(ex, time_scale) as rt:
        eid, tr = await ready(rt, ex)
        hang = tr.handlers["cancel"] = Hanging()
        dispatched = anyio.Event()
        async with anyio.create_task_group() as tg:

            async def leaving() -> None:
                with anyio.CancelScope() as scope:
                    tg.start_soon(lambda: _cancel_when(dispatched, scope))
                    await rt.prompt(eid, "long", on_dispatched=dispatched.set)

            tg.start_soon(leaving)
        await until(lambda: bool(hang.given_up))
        took(backend, hang.lasted(), DISTINCT.scaled(time_scale).cancel_wait)
        await rt.stop(eid, "done", force=True)


async def _cancel_when(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def test_the_graceful_stop_is_given_up_after_the_cancel_bound(
    time_scale: float, autojump_clock: object, backend: str
) -> None:
    """A graceful agent stop that never answers is given up after the cancel wait, and the
    execution is stopped all the same."""
    ex = MemoryExecutor()
    async with runtime(ex, time_scale) as rt:
        eid, tr = await ready(rt, ex)
        hang = tr.handlers["stop_agent"] = Hanging()
        final = await rt.stop(eid, "done")
        assert final.status == "STOPPED"
        took(backend, hang.lasted(), DISTINCT.scaled(time_scale).cancel_wait)


# --------------------------------------------------------------------------- prompts


async def test_the_dispatch_only_barrier_waits_its_own_bound(
    time_scale: float, autojump_clock: object, backend: str
) -> None:
    """seed D8: a prompt behind a dispatch-only one whose turn never ends waits
    ``pendingDispatchedPromptWaitTimeout``, then PendingDispatchedPromptTimeout."""
    ex = MemoryExecutor()
    async with runtime(ex, time_scale) as rt:
        eid, _ = await ready(rt, ex)
        first = await rt.prompt(eid, "one", dispatch_only=True)
        assert first.stop_reason == "dispatched"
        start = anyio.current_time()
        with pytest.raises(PendingDispatchedPromptTimeout):
            await rt.prompt(eid, "two")
        took(
            backend,
            anyio.current_time() - start,
            DISTINCT.scaled(time_scale).pending_dispatched_prompt,
        )
        await rt.stop(eid, "done", force=True)


async def test_a_prompt_waits_the_reconnect_budget_for_a_lost_carrier(
    time_scale: float, autojump_clock: object, backend: str
) -> None:
    """retryPromptAfterReconnect: a prompt finding the stream down waits 5 s for the carrier
    to come back, then fails with the dispatch error."""
    ex = MemoryExecutor(lambda: MemoryTransport(reconnectable=True))
    async with runtime(ex, time_scale) as rt:
        eid, tr = await ready(rt, ex)
        tr.drop(clean=True)  # a clean close: the execution stays READY, the carrier redials
        await anyio.sleep(0.01 * time_scale)  # the runtime has heard of it
        start = anyio.current_time()
        with pytest.raises(PromptDispatchError, match="timed out waiting for updates stream"):
            await rt.prompt(eid, "hello")
        took(backend, anyio.current_time() - start, DISTINCT.scaled(time_scale).reconnect_retry)
        await rt.stop(eid, "done", force=True)


async def test_a_steer_waits_the_steer_dispatch_bound(
    time_scale: float, autojump_clock: object, backend: str
) -> None:
    """tryDispatchSteer: the steer request is bounded by ``steerDispatchTimeout``."""
    ex = MemoryExecutor()
    async with runtime(ex, time_scale) as rt, anyio.create_task_group() as tg:
        eid, tr = await ready(rt, ex)
        tr.handlers["steer"] = Hanging()
        dispatched = anyio.Event()
        prompt = Caught()

        async def go() -> Any:
            return await rt.prompt(eid, "long", on_dispatched=dispatched.set)

        prompt.run(tg, go)
        await dispatched.wait()
        start = anyio.current_time()
        with pytest.raises(SteerDispatchTimeout):
            await rt.steer(eid, "more")
        took(backend, anyio.current_time() - start, DISTINCT.scaled(time_scale).steer_dispatch)
        tr.complete(1)
        await until(lambda: prompt.at is not None)
        await rt.stop(eid, "done")


async def test_a_silent_turn_is_reported_stalled_on_the_first_tick_past_the_threshold(
    time_scale: float, autojump_clock: object, backend: str
) -> None:
    """waitForPromptDone: a tick every ``stall_tick`` while the caller waits; the first one
    that finds the turn quiet for ``stall_threshold`` reports it (here at the fifth tick:
    5 × 70 s is the first multiple past 300 s)."""
    ex = MemoryExecutor()
    async with runtime(ex, time_scale) as rt, anyio.create_task_group() as tg:
        eid, tr = await ready(rt, ex)
        stalled: list[tuple[float, le.AgentStalled]] = []

        async def watch() -> None:
            async with rt.subscribe_events(eid, replay=False) as events:
                async for event in events:
                    if isinstance(event, le.AgentStalled):
                        stalled.append((anyio.current_time(), event))

        tg.start_soon(watch)
        dispatched = anyio.Event()
        prompt = Caught()

        async def go() -> Any:
            return await rt.prompt(eid, "quiet", on_dispatched=dispatched.set)

        prompt.run(tg, go)
        await dispatched.wait()
        start = anyio.current_time()
        await until(lambda: bool(stalled))
        t = DISTINCT.scaled(time_scale)
        took(backend, stalled[0][0] - start, 5 * t.stall_tick)
        tr.complete(1)
        await until(lambda: prompt.at is not None)
        await rt.stop(eid, "done")


async def test_an_unanswered_permission_request_is_refused_after_its_bound(
    time_scale: float, autojump_clock: object, backend: str
) -> None:
    """An ``ask`` permission request the app never answers is refused after
    ``permission_wait``."""
    ex = MemoryExecutor()
    async with runtime(ex, time_scale) as rt:
        eid, tr = await ready(rt, ex, permission_policy="ask")
        async with anyio.create_task_group() as tg:
            dispatched = anyio.Event()
            prompt = Caught()

            async def go() -> Any:
                return await rt.prompt(eid, "act", on_dispatched=dispatched.set)

            prompt.run(tg, go)
            await dispatched.wait()
            request = PermissionRequest(
                prompt_generation=1,
                request_id="perm-1",
                tool_call_id="t1",
                permission_title="Run `ls`",
                options=[
                    PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
                    PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
                ],
            )
            start = anyio.current_time()
            answer = await tr.request_permission(request)
            assert answer == "reject"
            took(
                backend,
                anyio.current_time() - start,
                DISTINCT.scaled(time_scale).permission_wait,
            )
            tr.complete(1)
        await rt.stop(eid, "done")


# --------------------------------------------------------------------------- the init


async def test_the_stream_connect_wait_has_its_own_bound(
    time_scale: float, autojump_clock: object, backend: str
) -> None:
    """The session init waits 10 s for the agent stream to connect (lifecycle/session.go),
    then fails: ``timeout waiting for agent stream to connect``."""

    def never_connected() -> MemoryTransport:
        t = MemoryTransport()
        t.connected = False
        return t

    ex = MemoryExecutor(never_connected)
    async with runtime(ex, time_scale) as rt:
        start = anyio.current_time()
        ref = await rt.launch(spec())
        with pytest.raises(SessionInitError) as failed:
            await rt.wait_ready(ref.id)
        assert "timeout waiting for agent stream to connect" in str(failed.value)
        took(backend, anyio.current_time() - start, DISTINCT.scaled(time_scale).stream_connect)
        await rt.stop(ref.id, "done", force=True)


async def test_a_requested_model_waits_the_catalog_bound(
    time_scale: float, autojump_clock: object, backend: str
) -> None:
    """waitForFreshSessionModelState: a start model is requested and the session gave no
    catalog: the init polls for one for 2 s, then goes on without it (READY)."""
    ex = MemoryExecutor(lambda: MemoryTransport(models=(), current_model=""))
    profile = AgentProfile(id="mem", command=("unused",), model="smart")
    async with runtime(ex, time_scale, profile) as rt:
        start = anyio.current_time()
        ref = await rt.launch(spec())
        await rt.wait_ready(ref.id)
        took(backend, anyio.current_time() - start, DISTINCT.scaled(time_scale).catalog_wait)
        await rt.stop(ref.id, "done")


def _hang(method: str) -> Callable[[MemoryTransport], None]:
    def setup(t: MemoryTransport) -> None:
        t.handlers[method] = Hanging()

    return setup


@pytest.mark.parametrize(
    ("method", "launch", "profile"),
    [
        ("initialize", {}, {}),
        ("authenticate", {"auth_method": "token"}, {}),
        ("session/load", {"prior_acp_session": "earlier"}, {}),
        ("session/new", {}, {}),
    ],
)
async def test_each_init_request_is_bounded_by_the_request_bound(
    method: str,
    launch: dict[str, Any],
    profile: dict[str, Any],
    time_scale: float,
    autojump_clock: object,
    backend: str,
) -> None:
    """An init request the agent never answers fails the init after ``request`` (agentctl
    bounds session/new and session/load at 2 min)."""
    setup = _hang(method)

    def make() -> MemoryTransport:
        t = MemoryTransport()
        setup(t)
        return t

    ex = MemoryExecutor(make)
    async with runtime(
        ex, time_scale, AgentProfile(id="mem", command=("unused",), **profile)
    ) as rt:
        start = anyio.current_time()
        ref = await rt.launch(spec(**launch))
        with pytest.raises(SessionInitError):
            await rt.wait_ready(ref.id)
        took(backend, anyio.current_time() - start, DISTINCT.scaled(time_scale).request)
        await rt.stop(ref.id, "done", force=True)


@pytest.mark.parametrize(
    ("method", "profile", "metadata", "fails"),
    [
        # a start model that cannot be set fails the start (no fallback)
        ("set_model", {"model": "smart"}, {}, True),
        ("set_mode", {"mode": "plan"}, {}, False),
        ("set_config_option", {"config_options": {"effort": "high"}}, {}, False),
        ("set_mode", {}, {"session_mode": "plan"}, False),
        ("set_config_option", {}, {"runtime_config_options": {"effort": "high"}}, False),
    ],
)
async def test_each_config_request_of_the_init_is_bounded_by_the_request_bound(
    method: str,
    profile: dict[str, Any],
    metadata: dict[str, Any],
    fails: bool,
    time_scale: float,
    autojump_clock: object,
    backend: str,
) -> None:
    """A start model, profile mode or option, persisted session mode or runtime option the
    agent never answers is given up after ``request`` (only the start model fails the
    start)."""
    setup = _hang(method)
    effort = ConfigOption(id="effort", name="Effort", current_value="low")

    def make() -> MemoryTransport:
        t = MemoryTransport(config_options=(effort,))  # in the catalog: it is sent
        setup(t)
        return t

    ex = MemoryExecutor(make)
    async with runtime(
        ex, time_scale, AgentProfile(id="mem", command=("unused",), **profile)
    ) as rt:
        start = anyio.current_time()
        ref = await rt.launch(spec(metadata=metadata))
        if fails:
            with pytest.raises(SessionInitError):
                await rt.wait_ready(ref.id)
        else:
            await rt.wait_ready(ref.id)
        took(backend, anyio.current_time() - start, DISTINCT.scaled(time_scale).request)
        await rt.stop(ref.id, "done")
