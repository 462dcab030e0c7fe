"""Scenarios S5 (tests/runtime/README.md): the Runtime facade (kandev runtime/runtime.go,
facade.go) in Python.

Mapping: kandev's ``Backend`` (the lifecycle Manager behind the facade) is our
:class:`~acpfsm.runtime.session.ExecutionSession` set plus the executor that starts the agent;
its ``LaunchRequest`` is the :class:`~acpfsm.runtime.LaunchSpec` the executor receives
(``launch_spec_from_request``). Where Go's facade was inconsistent (Resume and SetMcpMode did
not map not-found, H11; SubscribeEvents was unsupported; the base ``launch_request`` map was
aliased) the documented Python behaviour is asserted instead, as each docstring says.

Each scenario runs twice (the ``facade`` fixture, :mod:`.facades`): on the in-process
:class:`~acpfsm.runtime.Runtime` over a recording memory executor, and through
:class:`~acpfsm.runtime.service.RemoteRuntime` against one real ``acpfsm serve`` process (on a
NATS server of its own, started once for the module) running the reference agent over stdio
under the same profile and executor names. The assertions about the execution (its ref, its
snapshot, the results, the typed errors, raised again as the same classes, its events) are
the same through both. What only exists in process is asserted there alone (``f.agent``):
what the executor was asked to start (``AgentLaunch``) and the ACP calls the memory agent
recorded (the serve's agent is in another process: through the wire the same facts show in
the snapshot and the events instead), an executor that raises a given exception object
(through the wire: a profile whose agent cannot start, the error's class kept), a transport
with an agentctl URL (the serve's stdio executor has none; the agentctl URL through the wire
is in ``tests/agentctl/test_serve_pool_agentctl.py``), and the agent driven by hand (through
the wire the reference agent's directives drive it: ``[[fault:stall]]`` holds a turn open,
``[[fault:crash=0]]`` ends the process with status 0, though only during a turn, so the
execution is FAILED there where the memory agent's exit while idle leaves it COMPLETED).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import pytest

from acpfsm.adapters import events as ev
from acpfsm.adapters.errors import AcpfsmError, TransportClosed, TransportError
from acpfsm.adapters.executor import AgentLaunch
from acpfsm.adapters.memory import MemoryTransport
from acpfsm.adapters.transport import AgentTransport
from acpfsm.runtime import (
    AgentProfile,
    Execution,
    ExecutionIdRequired,
    ExecutionNotFound,
    ExecutorNotFound,
    LaunchSpec,
    LaunchSpecError,
    ProfileNotFound,
    Runtime,
    Timeouts,
    Unsupported,
    WorkspaceRef,
)
from acpfsm.runtime import events as le
from acpfsm.runtime.service import RemoteRuntime

from .facades import BROKEN, Facade, Opener, facade_fixtures
from .memory_runtime import MemoryExecutor, session_of, wait_until

pytestmark = pytest.mark.both_backends

PROFILES = (
    AgentProfile(id="claude-acp-default", command=("unused",)),
    AgentProfile(id="p1", command=("unused",)),
)
EXECUTORS = ("local_pc", "sprites", "stdio")


serve, facade = facade_fixtures(PROFILES, EXECUTORS)


class RecordingExecutor(MemoryExecutor):
    """A memory executor that records what it was asked to start (kandev's fake Backend
    recording the LaunchRequest)."""

    def __init__(self, make: Callable[[], MemoryTransport] | None = None) -> None:
        super().__init__(make)
        self.opened: list[AgentLaunch] = []

    def open(self, launch: AgentLaunch) -> AbstractAsyncContextManager[AgentTransport]:
        self.opened.append(launch)
        return super().open(launch)


def runtime(executor: MemoryExecutor, time_scale: float, name: str = "local_pc") -> Runtime:
    return Runtime(
        profiles=PROFILES,
        executors={name: executor},
        timeouts=Timeouts().scaled(time_scale),
    )


def launch_spec(path: str, **kw: Any) -> LaunchSpec:
    return LaunchSpec(
        agent_profile_id=kw.pop("agent_profile_id", "claude-acp-default"),
        executor_id="local_pc",
        workspace=kw.pop("workspace", WorkspaceRef(path=path)),
        **kw,
    )


async def test_s139_launch_translation(facade: Opener, time_scale: float, tmp_path: Path) -> None:
    """Every spec field reaches the executor (kandev's LaunchRequest): profile, executor,
    workspace path, repository, ephemeral flag, prompt (sent as the initial prompt), prior
    ACP session (session/load), MCP mode (recorded as metadata) and metadata. The returned
    ref carries the execution's id, session id and start time, and an empty agentctl URL
    when the executor has none."""
    ex = RecordingExecutor()
    path = str(tmp_path)
    async with facade(ex) as f:
        ref = await f.rt.launch(
            launch_spec(
                path,
                workspace=WorkspaceRef(path=path, repository_id="repo-1", is_ephemeral=True),
                prompt="do the thing",
                prior_acp_session="acp-prior",
                mcp_mode="config",
                metadata={"source": "engine"},
            )
        )
        if f.local is not None:  # what the executor was asked, and the agent's calls
            launched = ex.opened[0]
            assert launched.agent_id == "claude-acp-default"
            assert launched.workspace == path
            assert launched.mcp_mode == "config"
            assert launched.session_id == ref.session_id
            assert launched.execution_id == ref.id
            sent = session_of(f.local, ref.id).spec
            assert sent.executor_id == "local_pc"
            assert sent.workspace == WorkspaceRef(
                path=path, repository_id="repo-1", is_ephemeral=True
            )
            assert sent.prompt == "do the thing"
            assert sent.prior_acp_session == "acp-prior"
            assert sent.mcp_mode == "config"
            assert sent.metadata == {"source": "engine", "mcp_mode": "config"}
            tr = ex.last
            await wait_until(lambda: bool([c for c in tr.calls if c[0] == "prompt"]))
            assert ("session/load", ("acp-prior", path)) in tr.calls
            assert [c[1][0] for c in tr.calls if c[0] == "prompt"] == ["do the thing"]

        snap = await f.get(ref.id)
        assert (ref.id, ref.session_id, ref.started_at) == (
            snap.id,
            snap.session_id,
            snap.started_at,
        )
        assert ref.agentctl_url == "" == snap.agentctl_url
        assert snap.agent_profile_id == "claude-acp-default"
        assert snap.workspace_path == path
        assert snap.acp_session_id == "acp-prior"
        assert snap.metadata == {"source": "engine", "mcp_mode": "config"}

    if f.local is None:
        return
    # the URL is where the agent is reached (agentctl's instance), as the transport says
    with_url = RecordingExecutor(lambda: MemoryTransport(endpoint="http://127.0.0.1:39001"))
    async with runtime(with_url, time_scale) as rt:
        ref = await rt.launch(launch_spec(path))
        assert ref.agentctl_url == "http://127.0.0.1:39001"
        assert rt.get_execution(ref.id).agentctl_url == "http://127.0.0.1:39001"


async def test_s139_launch_propagates_the_backend_error(facade: Opener, tmp_path: Path) -> None:
    """The executor's failure to start the agent is the launch's error, unchanged (through
    the wire: its class and message), and no execution is left behind; an unknown profile is
    ProfileNotFound, an unknown executor ExecutorNotFound (both LaunchSpecErrors)."""
    failure = TransportClosed("failed to start agent: spawn unused: no such file")

    def cannot_start() -> MemoryTransport:
        raise failure

    ex = RecordingExecutor(cannot_start)
    async with facade(ex) as f:
        profile = "claude-acp-default" if f.local is not None else BROKEN
        with pytest.raises(TransportError) as info:  # the carrier's error
            await f.rt.launch(launch_spec(str(tmp_path), agent_profile_id=profile))
        if f.local is not None:
            assert info.value is failure
        assert "start agent" in str(info.value)
        assert await f.list() == []
        with pytest.raises(ProfileNotFound):
            await f.rt.launch(launch_spec(str(tmp_path), agent_profile_id="nope"))
        with pytest.raises(ExecutorNotFound) as unknown:
            await f.rt.launch(
                LaunchSpec(
                    agent_profile_id="p1", executor_id="nowhere", workspace=WorkspaceRef(path="/")
                )
            )
        assert isinstance(unknown.value, LaunchSpecError)
        assert not isinstance(unknown.value, ProfileNotFound)
        assert "unknown executor 'nowhere'" in str(unknown.value)
        assert await f.list() == []
        if f.local is not None:
            assert len(ex.opened) == 1


async def test_s140_base_launch_request_is_used(facade: Opener, tmp_path: Path) -> None:
    """``metadata["launch_request"]`` is the base request (a mapping here, Go's
    ``*LaunchRequest``): its task id, session id, worktree flag and repositories are kept,
    the spec's profile and prompt override its own, a base field fills a field the spec
    leaves empty, and the ``launch_request`` key is not in the launched metadata."""
    ex = RecordingExecutor()
    base = {
        "task_id": "task-1",
        "session_id": "sess-1",
        "use_worktree": True,
        "repositories": [{"repository_id": "repo-1", "base_branch": "main"}],
        "agent_profile_id": "claude-acp-default",
        "prompt": "base prompt",
        "prior_acp_session": "acp-from-base",
    }
    kept = {
        "task_id": "task-1",
        "session_id": "sess-1",
        "use_worktree": True,
        "repositories": [{"repository_id": "repo-1", "base_branch": "main"}],
    }
    async with facade(ex) as f:
        ref = await f.rt.launch(
            launch_spec(
                str(tmp_path),
                agent_profile_id="p1",
                prompt="hello",
                metadata={"launch_request": base},
            )
        )
        if f.local is not None:
            sent = session_of(f.local, ref.id).spec
            assert ex.opened[0].agent_id == "p1" and sent.agent_profile_id == "p1"
            assert (ex.opened[0].task_id, ex.opened[0].session_id) == ("task-1", "sess-1")
            assert sent.prompt == "hello"
            assert sent.prior_acp_session == "acp-from-base"
            assert sent.metadata == kept
            await wait_until(lambda: any(c[0] == "prompt" for c in ex.last.calls))
            assert [c[1][0] for c in ex.last.calls if c[0] == "prompt"] == ["hello"]
        snap = await f.get(ref.id)
        assert snap.agent_profile_id == "p1"
        assert snap.acp_session_id == "acp-from-base"
        assert (snap.task_id, snap.session_id, ref.session_id) == ("task-1", "sess-1", "sess-1")
        assert snap.metadata == kept
        assert "launch_request" not in snap.metadata


async def test_s140_unset_spec_fields_take_the_base_request(facade: Opener, tmp_path: Path) -> None:
    """An unset spec field does not override the base request (kandev's
    ``launchRequestFromSpec`` overlays only non-zero fields): a spec naming no executor runs
    on the base's, and the base's workspace path, repository and ephemeral flag reach the
    ``WorkspaceRef``; a spec naming neither runs on ``stdio``, and what the spec sets wins."""
    ex, other = RecordingExecutor(), RecordingExecutor()
    path = str(tmp_path)
    base = {
        "executor_id": "sprites",
        "workspace_path": path,
        "repository_id": "repo-9",
        "is_ephemeral": True,
    }
    async with facade(ex, executors={"local_pc": ex, "sprites": other}) as f:
        ref = await f.rt.launch(
            LaunchSpec(
                agent_profile_id="p1",
                workspace=WorkspaceRef(path=""),
                metadata={"launch_request": base, "source": "engine"},
            )
        )
        if f.local is not None:
            assert ex.opened == [] and len(other.opened) == 1
            assert other.opened[0].workspace == path
            sent = session_of(f.local, ref.id).spec
            assert sent.executor_id == "sprites"
            assert sent.workspace == WorkspaceRef(
                path=path, repository_id="repo-9", is_ephemeral=True
            )
            assert sent.metadata == {"source": "engine"}
        snap = await f.get(ref.id)
        assert snap.workspace_path == path
        assert snap.metadata == {"source": "engine"}
        # what the spec sets wins over the base
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        mine = await f.rt.launch(
            LaunchSpec(
                agent_profile_id="p1",
                executor_id="local_pc",
                workspace=WorkspaceRef(path=str(elsewhere), repository_id="repo-1"),
                metadata={"launch_request": base, "session_id": "s-2"},
            )
        )
        if f.local is not None:
            assert len(ex.opened) == 1 and len(other.opened) == 1
            assert session_of(f.local, mine.id).spec.workspace == WorkspaceRef(
                path=str(elsewhere), repository_id="repo-1", is_ephemeral=True
            )
        assert (await f.get(mine.id)).workspace_path == str(elsewhere)
    # no executor named anywhere: stdio
    fallback = RecordingExecutor()
    async with facade(fallback, "stdio") as f:
        ref = await f.rt.launch(
            LaunchSpec(agent_profile_id="p1", workspace=WorkspaceRef(path=path))
        )
        if f.local is not None:
            assert len(fallback.opened) == 1
            assert session_of(f.local, ref.id).spec.executor_id == "stdio"
        assert (await f.get(ref.id)).workspace_path == path


def _in_turn(snapshot: Execution) -> bool:
    return snapshot.status == "RUNNING"


async def test_s142_resume_maps_not_found(facade: Opener, tmp_path: Path) -> None:
    """Go's Resume passed the lifecycle's not-found error through unmapped (H11, pinned by
    the Go scenario). Our facade maps not-found consistently: ``resume`` on an unknown (or
    empty: ExecutionIdRequired) id raises ExecutionNotFound. Resume itself waits for the turn
    (seed Resume)."""
    ex = RecordingExecutor()
    async with facade(ex) as f:
        with pytest.raises(ExecutionNotFound) as info:
            await f.rt.resume("exec-missing", "follow-up")
        assert info.value.execution_id == "exec-missing"
        assert str(info.value).startswith("runtime: execution not found")
        with pytest.raises(ExecutionIdRequired, match=r"^executionID is required$"):
            await f.rt.resume("", "follow-up")
        ref = await f.rt.launch(launch_spec(str(tmp_path)))
        await f.until(ref.id, lambda e: e.status == "READY")
        done: list[str] = []

        async def resume() -> None:
            result = await f.rt.resume(ref.id, "[[fault:stall]] follow-up")
            done.append(result.stop_reason)

        async with anyio.create_task_group() as tg:
            tg.start_soon(resume)
            await f.until(ref.id, _in_turn)
            if f.local is not None:
                s = session_of(f.local, ref.id)
                await wait_until(
                    lambda: s.current is not None and s.current.machine.is_in("dispatched")
                )
                assert done == []  # still waiting for the turn
                ex.last.complete(1)
            else:  # the reference agent holds the turn (after a chunk) until it is steered
                await f.wait_event(ref.id, lambda e: isinstance(e, le.MessageChunk))
                assert done == []  # still waiting for the turn
                await f.rt.steer(ref.id, "that will do")
        assert done == ["end_turn"]


async def _collect(f: Facade, execution_id: str, into: list[Any]) -> None:
    """The execution's events into ``into`` until it stopped (within 30 s)."""
    with anyio.fail_after(30):
        await _follow(f, execution_id, into)


async def _follow(f: Facade, execution_id: str, into: list[Any]) -> None:
    async with f.events(execution_id) as events:
        async for event in events:
            into.append(event)


async def test_s143_stop_delegates_reason_and_force(facade: Opener, tmp_path: Path) -> None:
    """``stop(id, "user_cancelled")`` stops with that reason and ``force=False`` by default
    (the reason reaches ``agent.stopped``); the execution is STOPPED and then unknown. An
    empty id is its own error: ExecutionIdRequired (Go: ``executionID is required``)."""
    assert inspect.signature(Runtime.stop).parameters["force"].default is False
    assert inspect.signature(RemoteRuntime.stop).parameters["force"].default is False
    ex = RecordingExecutor()
    async with facade(ex) as f:
        with pytest.raises(ExecutionIdRequired, match="executionID is required"):
            await f.rt.stop("", "user_cancelled")
        ref = await f.rt.launch(launch_spec(str(tmp_path)))
        await f.until(ref.id, lambda e: e.status == "READY")
        seen: list[Any] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(_collect, f, ref.id, seen)
            await wait_until(lambda: bool(seen))  # subscribed
            final = await f.rt.stop(ref.id, "user_cancelled")
        assert final.status == "STOPPED" and final.id == ref.id
        stopped = [e for e in seen if isinstance(e, le.AgentStopped)]
        assert [e.reason for e in stopped] == ["user_cancelled"]
        if f.local is not None:
            assert ("aclose", ()) in ex.last.calls
        with pytest.raises(ExecutionNotFound):
            await f.get(ref.id)
        with pytest.raises(ExecutionNotFound):
            await f.rt.stop(ref.id, "again")


async def test_s145_get_execution_snapshot(facade: Opener, tmp_path: Path) -> None:
    """Every field of a tracked execution is copied into the snapshot: ids, task id,
    profile, workspace path, status READY (Go's ``ready``), ACP session id, metadata (a
    copy), an empty agentctl URL, and the charts' states; after a clean process exit the
    status is COMPLETED with exit code 0 and a finish time. A missing or empty id gives
    ExecutionNotFound."""
    ex = RecordingExecutor()
    path = str(tmp_path)
    async with facade(ex) as f:
        ref = await f.rt.launch(
            launch_spec(path, metadata={"k": "v", "task_id": "task-9", "session_id": "sess-9"})
        )
        snap = await f.until(ref.id, lambda e: e.status == "READY")
        assert snap.id == ref.id
        assert snap.session_id == "sess-9"
        assert snap.task_id == "task-9"
        assert snap.agent_profile_id == "claude-acp-default"
        assert snap.workspace_path == path
        assert snap.status == "READY"
        assert snap.finished_at is None and snap.exit_code is None
        if f.local is not None:
            assert snap.acp_session_id == "mem-session-1"
        else:  # the reference agent's own
            assert snap.acp_session_id != ""
        assert snap.metadata == {"k": "v", "task_id": "task-9", "session_id": "sess-9"}
        assert snap.agentctl_url == ""
        assert snap.error_message == ""
        assert snap.charts["execution"] == "ready" and snap.charts["agent_stream"] == "connected"
        snap.metadata["k"] = "changed"
        assert (await f.get(ref.id)).metadata["k"] == "v"

        if f.local is not None:  # the agent process exits with status 0 while idle
            ex.last.disconnect("", exit_code=0)
            ended = "COMPLETED"
        else:  # the reference agent can only be told to exit (status 0) during a turn
            with pytest.raises(AcpfsmError, match="exited with code 0"):
                await f.rt.prompt(ref.id, "[[fault:crash=0]] bye")
            ended = "FAILED"  # the turn it left unanswered
        done = await f.until(ref.id, lambda e: e.status == ended)
        assert done.exit_code == 0
        assert done.finished_at is not None and done.finished_at >= done.started_at
        for missing in ("missing", ""):
            with pytest.raises(ExecutionNotFound if missing else ExecutionIdRequired):
                await f.get(missing)


async def test_s146_set_mcp_mode(facade: Opener, tmp_path: Path) -> None:
    """``set_mcp_mode(id, "config")`` records the mode; no ACP request reaches the agent (the
    tool sets it switches are served over MCP, and a carrier without an MCP server of its own,
    unlike agentctl, is not asked). An unknown mode is Unsupported. An empty id is
    ExecutionIdRequired, an unknown one ExecutionNotFound (Go passed the lifecycle's unwrapped ``not found`` / ``has no agentctl
    client`` through; a Python session always has its transport between launch and stop)."""
    ex = RecordingExecutor()
    async with facade(ex) as f:
        ref = await f.rt.launch(launch_spec(str(tmp_path), mcp_mode="task"))
        await f.until(ref.id, lambda e: e.status == "READY")
        assert (await f.get(ref.id)).metadata["mcp_mode"] == "task"
        calls = list(ex.last.calls) if f.local is not None else []
        await f.rt.set_mcp_mode(ref.id, "config")
        assert (await f.get(ref.id)).metadata["mcp_mode"] == "config"
        if f.local is not None:
            assert ex.last.calls == calls
        with pytest.raises(Unsupported, match="operation not supported"):
            await f.rt.set_mcp_mode(ref.id, "everything")
        assert (await f.get(ref.id)).metadata["mcp_mode"] == "config"
        for missing in ("", "missing"):
            with pytest.raises(ExecutionNotFound if missing else ExecutionIdRequired):
                await f.rt.set_mcp_mode(missing, "config")


async def test_s148_base_metadata_is_not_aliased(facade: Opener, tmp_path: Path) -> None:
    """Go's shallow copy wrote the spec's metadata into the caller's base ``launch_request``
    map. Decision for the Python port: it does **not** keep this; the caller's base mapping
    is copied, never written, while the launched metadata holds both."""
    ex = RecordingExecutor()
    base = {"k": "v"}
    spec_metadata: dict[str, Any] = {"source": "x", "launch_request": base}
    async with facade(ex) as f:
        ref = await f.rt.launch(launch_spec(str(tmp_path), metadata=spec_metadata))
        assert base == {"k": "v"}
        assert spec_metadata == {"source": "x", "launch_request": {"k": "v"}}
        assert (await f.get(ref.id)).metadata == {"k": "v", "source": "x"}


async def test_subscribe_events_is_supported(facade: Opener, tmp_path: Path) -> None:
    """kandev's ``SubscribeEvents`` (no scenario id): Go always returned
    ErrUnsupported. Ours is supported (through the wire: from the bus, in another process):
    a subscription opened right after launch sees the execution's events in order from its
    start, and ends when the execution finishes. An unknown id is ExecutionNotFound."""
    ex = RecordingExecutor(lambda: MemoryTransport(auto_complete=True))
    async with facade(ex) as f:
        with pytest.raises(ExecutionNotFound):
            async with f.events("missing"):
                pass
        ref = await f.rt.launch(launch_spec(str(tmp_path), prompt="hi"))
        seen: list[Any] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(_collect, f, ref.id, seen)
            await wait_until(lambda: any(isinstance(e, le.AgentReady) for e in seen))
            await f.rt.stop(ref.id, "done")
        kinds = [type(e) for e in seen]
        assert kinds.index(le.AcpSessionCreated) < kinds.index(ev.MessageChunk)
        assert kinds.index(ev.Complete) < kinds.index(le.AgentReady)
        assert kinds[-1] is le.AgentStopped  # then the subscription ended
