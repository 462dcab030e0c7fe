"""Scenarios S1, session initialization (kandev lifecycle/session.go ``InitializeSession``,
``InitializeAndPrompt``, ``dispatchInitialPrompt``, with seed D1-D5, D10), driven through the
real runtime: ``Runtime`` + ``MemoryTransport``.

Each test is named after its scenario id (tests/runtime/README.md). Pure-function tables that
already have their own tests are referenced in comments (``tests/adapters/test_classify.py``
for the error classification, ``tests/runtime/test_history.py`` for history rendering); the
tests here check the same behaviour end to end: what the runtime sends, publishes and records.
"""

from __future__ import annotations

import logging
import pathlib
from typing import Any, TypeVar

import anyio
import pytest

from acpfsm.adapters.errors import (
    AcpfsmError,
    AgentRequestError,
    StreamNotConnected,
    TransportClosed,
)
from acpfsm.adapters.events import Complete, ToolCall, ToolUpdate
from acpfsm.adapters.memory import MemoryTransport
from acpfsm.adapters.transport import AgentInfo, InitializeResult, SessionResult
from acpfsm.runtime import AgentProfile, ExecutionRef, NotReadyForPrompts, Runtime, Timeouts
from acpfsm.runtime import events as le
from acpfsm.runtime.events import RuntimeEvent
from acpfsm.runtime.history import HistoryReadError, HistoryStore, truncate_for_context
from acpfsm.runtime.session import ExecutionSession

from .memory_runtime import (
    MemoryExecutor,
    launch_session,
    make_runtime,
    memory_agent,
    raiser,
    session_of,
    settle,
    spec,
    wait_until,
)

pytestmark = pytest.mark.both_backends

E = TypeVar("E")


# --- helpers -----------------------------------------------------------------------------------


def profile(**kw: Any) -> AgentProfile:
    return AgentProfile(id="mem", command=("unused",), **kw)


def runtime(
    ex: MemoryExecutor,
    time_scale: float,
    prof: AgentProfile | None = None,
    *,
    history_root: pathlib.Path | None = None,
    **timeouts: float,
) -> Runtime:
    return make_runtime(
        ex,
        profiles=(prof or profile(),),
        time_scale=time_scale,
        timeouts=timeouts,
        history_root=history_root,
    )


def events(s: ExecutionSession) -> list[RuntimeEvent]:
    return list(s.hub._backlog)


def of_type(s: ExecutionSession, cls: type[E]) -> list[E]:
    return [e for e in events(s) if isinstance(e, cls)]


def methods(t: MemoryTransport) -> list[str]:
    return [m for m, _ in t.calls if m != "aclose"]


def prompts_sent(t: MemoryTransport) -> list[str]:
    return [str(args[0]) for m, args in t.calls if m == "prompt"]


def init_events(s: ExecutionSession) -> list[str]:
    """The session init's facts after its start (``init_started``, when its task runs)."""
    events = [r.event for r in s.transitions("session_init")]
    assert events[:1] == ["init_started"] or not events
    return events[1:]


async def init_finished(s: ExecutionSession, *, limit: float = 30.0) -> None:
    await wait_until(lambda: not s.init.machine.is_in("pending", "initializing"), limit=limit)


async def turn_settled(s: ExecutionSession, generation: int) -> None:
    """Wait until the event pump has finished the turn's completion (its history appends run in
    a worker thread) and published ``agent.ready``: stopping earlier would cancel the pump
    mid-event (see the report on ``_pump`` and ``aclosing``)."""
    await wait_until(
        lambda: any(
            isinstance(e, le.AgentReady) and e.prompt_generation == generation for e in events(s)
        )
    )


# --- stream connect, handshake, load/new ------------------------------------------------------


async def test_s1_stream_connects_before_initialize(
    time_scale: float, autojump_clock: object
) -> None:
    """The dial completes first; only then is ``initialize`` sent, then session/new; the ACP
    session id is the one session/new returned."""
    holder: list[ExecutionSession] = []
    stream_state_at_initialize: list[str] = []

    def setup(t: MemoryTransport) -> None:
        t.connected = False  # the dial is still in flight

        def initialize() -> InitializeResult:
            stream_state_at_initialize.append(holder[0].stream.machine.state)
            return InitializeResult(protocol_version=1, agent=AgentInfo(name="test-agent"))

        t.handlers["initialize"] = initialize
        t.handlers["session/new"] = lambda _cwd: SessionResult(session_id="test-session-123")

    ex = memory_agent(setup)
    # the stream wait's own bound is not this test's: kept whole, so a slow scheduler between
    # the dial's start and ``connected`` below cannot end the init first
    connect = Timeouts().stream_connect
    async with runtime(
        ex, time_scale, profile(native_session_resume=False), stream_connect=connect
    ) as rt:
        ref, s = await launch_session(rt)
        holder.append(s)
        await wait_until(lambda: s.init.machine.state == "connecting_stream")
        await anyio.sleep(0.05 * time_scale)
        assert methods(ex.last) == []  # nothing is sent before the stream is up
        ex.last.connected = True
        await init_finished(s)

        assert methods(ex.last)[:2] == ["initialize", "session/new"]
        assert stream_state_at_initialize == ["connected"]
        records = rt.trace.for_execution(ref.id)
        connected = next(r.seq for r in records if r.event == "connect_succeeded")
        handshake = next(r.seq for r in records if r.event == "initialize_succeeded")
        assert connected < handshake
        assert init_events(s)[:2] == ["stream_ready", "initialize_succeeded"]
        assert rt.get_execution(ref.id).acp_session_id == "test-session-123"
        (created,) = of_type(s, le.AcpSessionCreated)
        assert created.acp_session_id == "test-session-123"
        await rt.stop(ref.id, "done")


async def test_s2_unreachable_agent_fails_init_after_the_stream_wait(
    backend: str, time_scale: float, autojump_clock: object
) -> None:
    """A carrier that never connects fails the init with the stream-wait error after the
    10 s bound, without hanging and without sending anything."""
    ex = memory_agent(lambda t: setattr(t, "connected", False))
    async with runtime(ex, time_scale) as rt:
        start = anyio.current_time()
        ref, s = await launch_session(rt, "never delivered")
        await wait_until(lambda: s.execution.status == "FAILED")
        elapsed = anyio.current_time() - start

        assert elapsed >= 10 * time_scale
        if backend == "trio":  # virtual clock: exact
            assert elapsed < 10.5
        snap = rt.get_execution(ref.id)
        assert snap.error_message == (
            "failed to initialize ACP: timeout waiting for agent stream to connect"
        )
        assert snap.charts["session_init"] == "failed"
        assert s.stream.machine.state != "connected"
        assert init_events(s) == ["stream_connect_timed_out"]
        assert methods(ex.last) == []
        (failed,) = of_type(s, le.AgentFailed)
        assert failed.phase == "session_init"
        await rt.stop(ref.id, "done")


async def test_s2_refused_dial_fails_at_initialize(time_scale: float) -> None:
    """The other outcome s2 allows: the dial attempt ends (refused) at once, so the wait ends and
    the handshake fails with ``initialize failed: … agent stream not connected``."""
    ex = memory_agent(lambda t: t.handlers.update(initialize=raiser(StreamNotConnected())))
    async with runtime(ex, time_scale) as rt:
        ref, s = await launch_session(rt)
        await init_finished(s)
        snap = rt.get_execution(ref.id)
        assert snap.status == "FAILED"
        assert snap.error_message == (
            "failed to initialize ACP: initialize failed: agent stream not connected"
        )
        assert methods(ex.last) == ["initialize"]
        await rt.stop(ref.id, "done")


async def test_s4_no_stream_fails_init_without_crashing(time_scale: float) -> None:
    """Go: a SessionManager with no StreamManager and a client with no stream returns an error
    and does not crash. Python has no StreamManager; the closest is a transport whose stream is
    not connected when ``initialize`` is sent (StreamNotConnected). The launch fails with the
    typed init error, and the runtime stays usable: the failed execution can still be read and
    stopped, and a second launch on a healthy transport works."""
    broken = MemoryTransport()
    broken.handlers["initialize"] = raiser(StreamNotConnected())
    transports = iter([broken, MemoryTransport()])
    ex = MemoryExecutor(lambda: next(transports))
    async with runtime(ex, time_scale) as rt:
        bad = await rt.launch(spec(metadata={"session_id": "a"}))
        s = session_of(rt, bad.id)
        await init_finished(s)
        assert rt.get_execution(bad.id).status == "FAILED"
        assert "agent stream not connected" in rt.get_execution(bad.id).error_message
        with pytest.raises(NotReadyForPrompts):
            await rt.prompt(bad.id, "x")

        good = await rt.launch(spec(metadata={"session_id": "b"}))
        g = session_of(rt, good.id)
        await wait_until(lambda: g.execution.status == "READY")
        assert (await rt.stop(bad.id, "done")).status == "STOPPED"
        await rt.stop(good.id, "done")


async def test_s5_fresh_session_without_resume(time_scale: float) -> None:
    """NativeSessionResume=false, no existing id: a new session; the agent name reported by the
    handshake (``test-agent``) and the session id (``test-session-123``) are what the runtime
    ends up with. ``AgentInfo`` defaults the name to ``unknown`` when the agent sends none."""

    def setup(t: MemoryTransport) -> None:
        t.handlers["initialize"] = lambda: InitializeResult(
            protocol_version=1, agent=AgentInfo(name="test-agent", version="1.0")
        )
        t.handlers["session/new"] = lambda _cwd: SessionResult(session_id="test-session-123")

    ex = memory_agent(setup)
    async with runtime(ex, time_scale, profile(native_session_resume=False)) as rt:
        ref, s = await launch_session(rt)
        await init_finished(s)
        caps = ex.last.capabilities
        assert caps is not None
        assert caps.agent.name == "test-agent"
        assert rt.get_execution(ref.id).acp_session_id == "test-session-123"
        assert methods(ex.last) == ["initialize", "session/new"]
        assert AgentInfo().name == "unknown"
        await rt.stop(ref.id, "done")


async def test_s6_native_resume_loads_the_existing_session_and_says_resumed(
    time_scale: float,
) -> None:
    """NativeSessionResume with an existing id: session/load, the id kept, and the
    AcpSessionCreated event says the session was resumed (the load-or-new table's first row,
    kandev lifecycle/session.go ``createOrLoadSession``)."""
    ex = MemoryExecutor()
    async with runtime(ex, time_scale, profile(native_session_resume=True)) as rt:
        ref, s = await launch_session(rt, prior_acp_session="existing-session")
        await init_finished(s)
        assert methods(ex.last) == ["initialize", "session/load"]
        assert rt.get_execution(ref.id).acp_session_id == "existing-session"
        (created,) = of_type(s, le.AcpSessionCreated)
        assert (created.acp_session_id, created.resumed) == ("existing-session", True)
        assert "load_succeeded" in init_events(s)
        await rt.stop(ref.id, "done")


@pytest.mark.parametrize(
    ("native", "prior"),
    [(False, "existing-session"), (True, "")],
    ids=["no_native_resume_ignores_the_id", "native_resume_without_an_id"],
)
async def test_s7_other_rows_of_the_load_or_new_table(
    time_scale: float, native: bool, prior: str
) -> None:
    """Only session/new is sent; an existing id is ignored without NativeSessionResume."""
    ex = MemoryExecutor()
    async with runtime(ex, time_scale, profile(native_session_resume=native)) as rt:
        ref, s = await launch_session(rt, prior_acp_session=prior)
        await init_finished(s)
        assert methods(ex.last) == ["initialize", "session/new"]
        assert rt.get_execution(ref.id).acp_session_id == "mem-session-1"
        (created,) = of_type(s, le.AcpSessionCreated)
        assert created.acp_session_id == "mem-session-1"
        assert created.resumed is False
        assert "load_succeeded" not in init_events(s)
        await rt.stop(ref.id, "done")


PRIOR = "prior-1"
ROLLOUT = '{"code":-32603,"message":"Internal error","data":{"details":"no rollout found for thread id %s"}}'

FALLBACK_ERRORS: list[tuple[str, BaseException]] = [
    ("structured_-32601", AgentRequestError(-32601, "Method not found")),
    ("structured_-32002", AgentRequestError(-32002, "Resource not found")),
    ("canonical_method_not_found", AcpfsmError("load session failed: Method not found")),
    ("canonical_resource_not_found", AcpfsmError("load session failed: Resource not found")),
    ("canonical_case_and_space", AcpfsmError("  LOAD SESSION FAILED: resource NOT found \n")),
    ("bare_phrase", AcpfsmError("Method not found")),
    (
        "capability_false",
        AcpfsmError(
            "load session failed: agent does not support session loading "
            "(LoadSession capability is false)"
        ),
    ),
    ("codex_rollout_text", AcpfsmError("load session failed: " + ROLLOUT % PRIOR)),
    (
        "codex_rollout_structured",
        AgentRequestError(
            -32603, "Internal error", {"details": f"no rollout found for thread id {PRIOR}"}
        ),
    ),
]

INCONCLUSIVE_ERRORS: list[tuple[str, BaseException]] = [
    ("internal_error", AcpfsmError("Internal error")),
    ("auth_required", AgentRequestError(-32000, "Authentication required")),
    ("phrase_followed_by_text", AcpfsmError("load session failed: Resource not found: abc")),
    (
        "agentctl_json_projection_-32002",
        AcpfsmError(
            'load session failed: failed to load session: {"code":-32002,"message":"Resource not found"}'
        ),
    ),
    ("rollout_for_another_id", AcpfsmError("load session failed: " + ROLLOUT % "other-id")),
]


@pytest.mark.parametrize(
    "error", [e for _, e in FALLBACK_ERRORS], ids=[n for n, _ in FALLBACK_ERRORS]
)
async def test_s8_recognized_load_errors_fall_back_to_session_new(
    time_scale: float, error: BaseException
) -> None:
    """seed D1-D3: a fallback-authorizing session/load error → session/new; its id replaces the
    ACP session id and no error surfaces. (Classification table: test_classify.py.)"""
    ex = memory_agent(lambda t: t.handlers.update({"session/load": raiser(error)}))
    async with runtime(ex, time_scale) as rt:
        ref, s = await launch_session(rt, prior_acp_session=PRIOR, ready=True)
        assert methods(ex.last) == ["initialize", "session/load", "session/new"]
        snap = rt.get_execution(ref.id)
        assert snap.acp_session_id == "mem-session-1"
        assert snap.error_message == ""
        assert init_events(s)[2:4] == ["load_failed", "new_session_succeeded"]
        (created,) = of_type(s, le.AcpSessionCreated)
        assert (created.acp_session_id, created.resumed) == ("mem-session-1", False)
        await rt.stop(ref.id, "done")


@pytest.mark.parametrize(
    "error", [e for _, e in INCONCLUSIVE_ERRORS], ids=[n for n, _ in INCONCLUSIVE_ERRORS]
)
async def test_s8_other_load_errors_fail_and_preserve_the_session_id(
    time_scale: float, error: BaseException
) -> None:
    """seed D1: any other non-transport error is inconclusive: ``session/load failed: …``, no
    session/new, and the stored ACP session id is untouched."""
    ex = memory_agent(lambda t: t.handlers.update({"session/load": raiser(error)}))
    async with runtime(ex, time_scale) as rt:
        ref, s = await launch_session(rt, prior_acp_session=PRIOR)
        await init_finished(s)
        assert methods(ex.last) == ["initialize", "session/load"]
        snap = rt.get_execution(ref.id)
        assert snap.status == "FAILED"
        assert snap.error_message == f"failed to initialize ACP: session/load failed: {error}"
        assert snap.acp_session_id == PRIOR
        assert of_type(s, le.AcpSessionCreated) == []
        assert init_events(s)[-1] == "load_failed"
        assert s.init.machine.state == "failed"
        await rt.stop(ref.id, "done")


async def test_s10_expired_load_deadline_stops_the_fallback(
    time_scale: float, autojump_clock: object
) -> None:
    """The load request's deadline passes (Go: DeadlineExceeded in the chain; here the request
    bound raises TimeoutError): transport-dead, so no session/new fallback."""

    async def never_answers(*_: Any) -> SessionResult:
        await anyio.sleep_forever()
        raise AssertionError  # pragma: no cover

    ex = memory_agent(lambda t: t.handlers.update({"session/load": never_answers}))
    async with runtime(ex, time_scale) as rt:
        ref, s = await launch_session(rt, prior_acp_session=PRIOR)
        start = anyio.current_time()
        await init_finished(s, limit=200)
        assert anyio.current_time() - start >= Timeouts().request * time_scale
        assert methods(ex.last) == ["initialize", "session/load"]
        snap = rt.get_execution(ref.id)
        assert snap.status == "FAILED"
        assert snap.error_message.startswith("failed to initialize ACP: session/load failed")
        assert snap.acp_session_id == PRIOR
        await rt.stop(ref.id, "done")


async def test_s10_cancelled_launch_stops_the_fallback(time_scale: float) -> None:
    """The launch context is cancelled while session/load is in flight (Go: context.Canceled):
    the init is abandoned and no session/new is attempted."""
    loading = anyio.Event()

    async def blocks(*_: Any) -> SessionResult:
        loading.set()
        await anyio.sleep_forever()
        raise AssertionError  # pragma: no cover

    ex = memory_agent(lambda t: t.handlers.update({"session/load": blocks}))
    async with runtime(ex, time_scale) as rt:
        ref, s = await launch_session(rt, prior_acp_session=PRIOR)
        await loading.wait()
        snap = await rt.stop(ref.id, "user cancelled the launch")
        assert s.init.machine.state == "abandoned"
        assert "session/new" not in methods(ex.last)
        assert snap.acp_session_id == PRIOR
        assert snap.status == "STOPPED"


@pytest.mark.parametrize(
    ("error", "falls_back"),
    [
        (AcpfsmError("send: peer disconnected before response"), False),
        (AcpfsmError("peer disconnected while waiting for pre-response notifications"), False),
        (AcpfsmError("load session failed: connection closed"), False),
        (AcpfsmError("load session failed: notification queue overflow"), False),
        (TransportClosed("peer disconnected"), False),
        (AcpfsmError("load session failed: context deadline exceeded"), False),  # seed D5
        (AgentRequestError(-32601, "Method not found"), True),
        (AgentRequestError(-32002, "Resource not found"), True),
    ],
    ids=[
        "peer_disconnected_wrapped",
        "peer_disconnected_pre_response",
        "connection_closed",
        "queue_overflow",
        "transport_closed",
        "deadline_text_only_seed_D5",
        "-32601_is_not_transport_dead",
        "-32002_is_not_transport_dead",
    ],
)
async def test_s11_transport_dead_load_errors_never_fall_back(
    time_scale: float, caplog: pytest.LogCaptureFixture, error: BaseException, falls_back: bool
) -> None:
    """Representative rows of the ``isTransportDeadErr`` table end to end (the full table,
    nil and context.Canceled included, is ``test_classify.py::test_predicates`` /
    ``test_classify_rows``): a transport-dead load error is logged as such and never followed
    by session/new; the -32601/-32002 rows are not transport-dead and fall back."""
    caplog.set_level(logging.WARNING, logger="acpfsm.runtime")
    ex = memory_agent(lambda t: t.handlers.update({"session/load": raiser(error)}))
    async with runtime(ex, time_scale) as rt:
        ref, s = await launch_session(rt, prior_acp_session=PRIOR)
        await init_finished(s)
        logged_dead = any("(transport_dead)" in r.getMessage() for r in caplog.records)
        assert logged_dead is not falls_back
        assert ("session/new" in methods(ex.last)) is falls_back
        assert rt.get_execution(ref.id).status == ("READY" if falls_back else "FAILED")
        await rt.stop(ref.id, "done")


async def test_s13_session_new_failure_after_a_fallback(time_scale: float) -> None:
    """Load fails with a fallback-authorizing error and session/new fails too: the error is
    ``session/new failed: …`` (the load error is lost)."""
    new_error = AgentRequestError(-32603, "Internal error")

    def setup(t: MemoryTransport) -> None:
        t.handlers["session/load"] = raiser(AcpfsmError("load session failed: Method not found"))
        t.handlers["session/new"] = raiser(new_error)

    ex = memory_agent(setup)
    async with runtime(ex, time_scale) as rt:
        ref, s = await launch_session(rt, prior_acp_session=PRIOR)
        await init_finished(s)
        assert methods(ex.last) == ["initialize", "session/load", "session/new"]
        snap = rt.get_execution(ref.id)
        assert snap.error_message == f"failed to initialize ACP: session/new failed: {new_error}"
        assert "Method not found" not in snap.error_message
        assert snap.acp_session_id == PRIOR
        await rt.stop(ref.id, "done")


async def test_s14_initialized_after_a_provider_default_decision(time_scale: float) -> None:
    """The start model is not advertised, so the policy continues on the provider default; the
    session counts as initialized (sessionInitialized: the SessionInit chart left the policy
    step through ``start_model_settled``), so a later failure is routed as ``prompt_send``."""
    ex = MemoryExecutor()  # advertises fast, smart
    async with runtime(ex, time_scale, profile(model="claude-gone")) as rt:
        ref, s = await launch_session(rt, ready=True)
        assert "start_model_settled" in init_events(s)
        assert rt.get_execution(ref.id).charts["session_init"] == "ready"
        (warning,) = of_type(s, le.ModelSelectionWarning)
        assert warning.reason == "requested_not_advertised"

        async with anyio.create_task_group() as tg:
            tg.start_soon(_expect_agent_error, rt, ref.id)
            await wait_until(
                lambda: s.current is not None and s.current.machine.is_in("dispatched")
            )
            ex.last.fail(1, "boom")
        (failed,) = of_type(s, le.AgentFailed)
        assert failed.phase == "prompt_send"
        await rt.stop(ref.id, "done")


async def _expect_agent_error(rt: Runtime, execution_id: str) -> None:
    with pytest.raises(AcpfsmError):
        await rt.prompt(execution_id, "x")


# --- initial dispatch and resume context ------------------------------------------------------


async def test_s16_task_description_triggers_an_async_prompt(time_scale: float) -> None:
    """initialize, session/new, prompt in that order; the init finished (and launch returned)
    while the prompt was still running."""
    ex = MemoryExecutor()  # turns stay open until completed
    async with runtime(ex, time_scale) as rt:
        ref, s = await launch_session(rt, "Build a feature")
        await wait_until(lambda: "prompt" in methods(ex.last))
        assert methods(ex.last) == ["initialize", "session/new", "prompt"]
        assert prompts_sent(ex.last) == ["Build a feature"]
        await wait_until(lambda: s.current is not None and s.current.machine.is_in("dispatched"))
        assert s.init.machine.is_in("prompting")
        assert rt.get_execution(ref.id).status == "RUNNING"
        announced = next(r.seq for r in rt.trace.records if r.event == "session_announced")
        ex.last.complete(1)
        await wait_until(lambda: s.execution.status == "READY")
        completed = next(
            r.seq
            for r in rt.trace.records
            if r.chart == "prompt_generation" and r.event == "completion_received"
        )
        assert announced < completed
        assert of_type(s, le.AgentBootReady) == []  # READY came from the completion
        await rt.stop(ref.id, "done")


async def test_s17_no_prompt_and_no_history_means_boot_ready(
    time_scale: float, tmp_path: pathlib.Path
) -> None:
    """markReady (here: the Execution chart's ``booted``) runs exactly once and
    ``agent.boot_ready`` is published once, without resume context."""
    ex = MemoryExecutor()
    prof = profile(history_context_injection=True)
    async with runtime(ex, time_scale, prof, history_root=tmp_path) as rt:
        ref, s = await launch_session(rt, ready=True)
        await settle()
        (boot,) = of_type(s, le.AgentBootReady)
        assert boot.resume_context_pending is False
        assert [r.event for r in s.transitions("execution")].count("booted") == 1
        assert s.init.machine.state == "ready"
        assert "prompt" not in methods(ex.last)
        await rt.stop(ref.id, "done")


def resuming_runtime(ex: MemoryExecutor, time_scale: float, root: pathlib.Path) -> Runtime:
    """A runtime whose profile resumes a session through its history under ``root`` (the
    resume context; no native session/load)."""
    prof = profile(history_context_injection=True, native_session_resume=False)
    return runtime(ex, time_scale, prof, history_root=root)


async def resumed_ready(rt: Runtime) -> tuple[ExecutionRef, ExecutionSession]:
    """An execution resuming kandev session ``task-1``, once READY."""
    return await launch_session(rt, metadata={"session_id": "task-1"}, ready=True)


def _seed_history(root: pathlib.Path, session_id: str) -> HistoryStore:
    store = HistoryStore(root)
    store.append_user(session_id, "earlier question")
    store.append_assistant(session_id, "earlier answer")
    return store


async def test_s19_resume_context_is_injected_only_once(
    time_scale: float, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No initial prompt but history exists: resume context pending. The first prompt carries
    it (never a ``<kandev-system>`` block); the second is sent unchanged."""
    caplog.set_level(logging.WARNING, logger="acpfsm.runtime")
    _seed_history(tmp_path, "task-1")
    ex = memory_agent(auto_complete=True)
    async with resuming_runtime(ex, time_scale, tmp_path) as rt:
        ref, s = await resumed_ready(rt)
        assert s.init.machine.state == "resume_context_pending"
        (boot,) = of_type(s, le.AgentBootReady)
        assert boot.resume_context_pending is True

        await rt.prompt(ref.id, "first")
        await rt.prompt(ref.id, "second")
        first, second = prompts_sent(ex.last)
        assert first.startswith("RESUME CONTEXT FOR CONTINUING TASK")
        assert "[USER]: earlier question" in first
        assert "=== CURRENT REQUEST ===\nfirst" in first
        assert "<kandev-system>" not in first
        assert second == "second"
        await turn_settled(s, 2)
        await rt.stop(ref.id, "done")
    assert not [r for r in caplog.records if "resume context" in r.getMessage()]


async def test_an_unreadable_history_sends_the_prompt_plain_with_a_warning(
    time_scale: float,
    tmp_path: pathlib.Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The history exists but cannot be read when the resume context is composed: the
    prompt goes out as written (kandev ``GenerateResumeContext`` returns the prompt with the
    error) and the failure is logged, not raised."""
    caplog.set_level(logging.WARNING, logger="acpfsm.runtime")
    _seed_history(tmp_path, "task-1")

    def unreadable(self: HistoryStore, session_id: str, text: str) -> tuple[str, Exception]:
        return text, HistoryReadError("failed to read history file: disk gone")

    monkeypatch.setattr(HistoryStore, "generate_resume_context", unreadable)
    ex = memory_agent(auto_complete=True)
    async with resuming_runtime(ex, time_scale, tmp_path) as rt:
        ref, _ = await resumed_ready(rt)
        await rt.prompt(ref.id, "first")
        assert prompts_sent(ex.last) == ["first"]
        await rt.stop(ref.id, "done")
    (warning,) = [r for r in caplog.records if "resume context" in r.getMessage()]
    assert warning.getMessage().endswith("failed to read history file: disk gone")


async def test_s20_resume_context_rendering(time_scale: float, tmp_path: pathlib.Path) -> None:
    """The initial prompt after a resume renders every known entry kind, skips the unknown one
    and places the history before the current request. (Rendering rules in isolation:
    test_history.py::test_s20_resume_context_renders_every_entry_kind.)"""
    store = HistoryStore(tmp_path)
    store.append_user("task-1", "please refactor the parser")
    store.append_assistant("task-1", "I will start with the lexer")
    store.append_tool_call("task-1", "edit_file", "tc-1")
    store.append_tool_result("task-1", "edit_file", "tc-1", "3 lines changed")
    with store.path_for("task-1").open("a") as f:
        f.write('{"type":"plan","timestamp":"2025-01-02T03:04:05Z","content":"SECRET PLAN"}\n')
    ex = MemoryExecutor()
    async with resuming_runtime(ex, time_scale, tmp_path) as rt:
        ref = await rt.launch(spec("now add tests", metadata={"session_id": "task-1"}))
        await wait_until(lambda: "prompt" in methods(ex.last))
        (sent,) = prompts_sent(ex.last)
        assert "[USER]: please refactor the parser" in sent
        assert "[ASSISTANT]: I will start with the lexer" in sent
        assert "[TOOL CALL: edit_file]" in sent
        assert "[TOOL RESULT: edit_file] 3 lines changed" in sent
        assert "SECRET PLAN" not in sent
        assert "=== CURRENT REQUEST ===\nnow add tests" in sent
        assert sent.index("[TOOL RESULT: edit_file]") < sent.index("=== CURRENT REQUEST ===")
        await rt.stop(ref.id, "done")


async def test_s22_resume_context_truncation(time_scale: float, tmp_path: pathlib.Path) -> None:
    """Long entries reach the agent truncated: user text at 2000 characters, tool output at
    500, each followed by ``... [truncated]``."""
    store = HistoryStore(tmp_path)
    store.append_user("task-1", "u" * 5000)
    store.append_tool_result("task-1", "bash", "tc", "r" * 5000)
    ex = MemoryExecutor()
    async with resuming_runtime(ex, time_scale, tmp_path) as rt:
        ref = await rt.launch(spec("go on", metadata={"session_id": "task-1"}))
        await wait_until(lambda: "prompt" in methods(ex.last))
        (sent,) = prompts_sent(ex.last)
        assert f"[USER]: {'u' * 2000}... [truncated]\n" in sent
        assert "u" * 2001 not in sent
        assert f"[TOOL RESULT: bash] {'r' * 500}... [truncated]\n" in sent
        assert "r" * 501 not in sent
        assert truncate_for_context("0123456789abc", 10) == "0123456789... [truncated]"
        await rt.stop(ref.id, "done")


def _file_names(directory: pathlib.Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


async def test_s23_history_presence_and_file_paths(
    time_scale: float, tmp_path: pathlib.Path
) -> None:
    """A zero-byte history file is no history (boot-ready, nothing pending); after the runtime
    appended to it, a relaunch of the same task session has resume context pending. The
    session id ``../../etc/passwd`` writes ``.._.._etc_passwd.jsonl`` inside the history root.
    (Empty session id: test_history.py::test_s23_history_presence_and_file_paths; the runtime
    never has one, it defaults the task session id to the execution id.)"""
    tmp_path.joinpath("task-1.jsonl").write_bytes(b"")
    ex = memory_agent(auto_complete=True)
    async with resuming_runtime(ex, time_scale, tmp_path) as rt:
        ref, s = await resumed_ready(rt)
        assert s.init.machine.state == "ready"
        await rt.prompt(ref.id, "hello")
        await turn_settled(s, 1)
        assert "[USER]" not in prompts_sent(ex.last)[0]
        await rt.stop(ref.id, "done")

        again = await rt.launch(spec(metadata={"session_id": "task-1"}))
        s2 = session_of(rt, again.id)
        await init_finished(s2)
        assert s2.init.machine.state == "resume_context_pending"
        await rt.stop(again.id, "done")

        evil = await rt.launch(spec("x", metadata={"session_id": "../../etc/passwd"}))
        await turn_settled(session_of(rt, evil.id), 1)
        await wait_until(lambda: (tmp_path / ".._.._etc_passwd.jsonl").is_file())
        assert _file_names(tmp_path) == [
            ".._.._etc_passwd.jsonl",
            "task-1.jsonl",
        ]
        await rt.stop(evil.id, "done")


async def test_s23_tool_activity_is_recorded_for_the_next_resume(
    time_scale: float, tmp_path: pathlib.Path
) -> None:
    """What the runtime records during a turn (prompt, tool call and result, reply) is what the
    next resume renders."""
    ex = MemoryExecutor()
    async with resuming_runtime(ex, time_scale, tmp_path) as rt:
        ref, s = await resumed_ready(rt)
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.prompt, ref.id, "edit it")
            await wait_until(
                lambda: s.current is not None and s.current.machine.is_in("dispatched")
            )
            ex.last.emit(ToolCall(tool_call_id="t1", tool_name="edit_file", prompt_generation=1))
            ex.last.emit(
                ToolUpdate(
                    tool_call_id="t1",
                    tool_status="completed",
                    raw_output="3 lines changed",
                    prompt_generation=1,
                )
            )
            ex.last.emit(Complete(prompt_generation=1))
        await turn_settled(s, 1)
        await rt.stop(ref.id, "done")
    out, err = HistoryStore(tmp_path).generate_resume_context("task-1", "next")
    assert err is None
    assert "[USER]: edit it" in out
    assert "[TOOL CALL: edit_file]" in out
    assert "[TOOL RESULT: edit_file] 3 lines changed" in out


# --- failure handling ---------------------------------------------------------------------------


async def test_s25_acp_init_failure_fails_the_execution(time_scale: float) -> None:
    """The execution becomes FAILED with ``failed to initialize ACP: …`` carrying the cause;
    ``agent.failed`` (phase session_init) says the same; nothing is announced; prompts are
    refused."""
    cause = AgentRequestError(-32603, "Internal error", {"details": "handshake exploded"})
    ex = memory_agent(lambda t: t.handlers.update(initialize=raiser(cause)))
    async with runtime(ex, time_scale) as rt:
        ref, s = await launch_session(rt, "never sent")
        await init_finished(s)
        snap = rt.get_execution(ref.id)
        assert snap.status == "FAILED"
        assert snap.error_message == f"failed to initialize ACP: initialize failed: {cause}"
        assert "handshake exploded" in snap.error_message
        assert snap.finished_at is not None
        (failed,) = of_type(s, le.AgentFailed)
        assert (failed.phase, failed.error) == ("session_init", snap.error_message)
        assert of_type(s, le.AcpSessionCreated) == []
        assert "prompt" not in methods(ex.last)
        with pytest.raises(NotReadyForPrompts):
            await rt.prompt(ref.id, "x")
        await rt.stop(ref.id, "done")


async def test_s26_startup_is_one_shot_and_stale_startup_signals_are_rejected(
    time_scale: float,
) -> None:
    """Go: ``beginStartupRecovery`` advances the startup generation once; signals stamped with
    the old generation are rejected and a second recovery is refused. Python has no
    managed-npm-runtime recovery: a startup is attempted exactly once (a failed init is final,
    one SessionInit instance, one ``initialize``). The rejection half maps to completions that
    arrive during startup: a ``complete`` for generation 1 received while the session is still
    being created is dropped and cannot complete the live generation 1 admitted later."""
    release = anyio.Event()

    async def slow_new(_cwd: str) -> SessionResult:
        await release.wait()
        return SessionResult(session_id="s-1")

    ex = memory_agent(lambda t: t.handlers.update({"session/new": slow_new}))
    async with runtime(ex, time_scale) as rt:
        ref, s = await launch_session(rt)
        await wait_until(lambda: "session/new" in methods(ex.last))
        ex.last.emit(Complete(prompt_generation=1))  # a startup-era signal
        await settle()
        release.set()
        await wait_until(lambda: s.execution.status == "READY")
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.prompt, ref.id, "live")
            await wait_until(
                lambda: s.current is not None and s.current.machine.is_in("dispatched")
            )
            await settle()
            assert s.current is not None
            assert s.current.generation == 1
            assert s.current.machine.is_in("dispatched")  # the stale complete(1) did not end it
            ex.last.complete(1)
        assert rt.get_execution(ref.id).status == "READY"
        await rt.stop(ref.id, "done")

    failing = memory_agent(lambda t: t.handlers.update(initialize=raiser(AcpfsmError("no"))))
    async with runtime(failing, time_scale) as rt:
        ref, s = await launch_session(rt)
        await init_finished(s)
        await settle()
        assert methods(failing.last) == ["initialize"]
        records = rt.trace.for_execution(ref.id)
        assert {r.instance for r in records if r.chart == "session_init"} == {0}
        assert rt.get_execution(ref.id).status == "FAILED"
        await rt.stop(ref.id, "done")
