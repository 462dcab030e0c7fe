"""Scenarios S5 (tests/runtime/README.md): the Runtime facade (kandev runtime/runtime.go,
facade.go) in Python.

Mapping: kandev's ``Backend`` (the lifecycle Manager behind the facade) is our
:class:`~acpfsm.runtime.session.ExecutionSession` set plus the executor that starts the agent;
its ``LaunchRequest`` is the :class:`~acpfsm.runtime.LaunchSpec` the executor receives
(``launch_spec_from_request``). Where Go's facade was inconsistent (Resume and SetMcpMode did
not map not-found, H11; SubscribeEvents was unsupported; the base ``launch_request`` map was
aliased) the documented Python behaviour is asserted instead, as each docstring says.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import pytest

from acpfsm.adapters import events as ev
from acpfsm.adapters.errors import TransportClosed
from acpfsm.adapters.executor import AgentLaunch
from acpfsm.adapters.memory import MemoryTransport
from acpfsm.adapters.transport import AgentTransport
from acpfsm.runtime import (
    AgentProfile,
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

from .memory_runtime import MemoryExecutor, session_of, wait_until

pytestmark = pytest.mark.both_backends

PROFILES = (
    AgentProfile(id="claude-acp-default", command=("unused",)),
    AgentProfile(id="p1", command=("unused",)),
)


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


async def test_s139_launch_translation(time_scale: float, tmp_path: Path) -> None:
    """Every spec field reaches the executor (kandev's LaunchRequest): profile, executor,
    workspace path, repository, ephemeral flag, prompt (sent as the initial prompt), prior
    ACP session (session/load), MCP mode (recorded as metadata) and metadata. The returned
    ref carries the execution's id, session id and start time, and an empty agentctl URL
    when the executor has none."""
    ex = RecordingExecutor()
    path = str(tmp_path)
    async with runtime(ex, time_scale) as rt:
        ref = await rt.launch(
            launch_spec(
                path,
                workspace=WorkspaceRef(path=path, repository_id="repo-1", is_ephemeral=True),
                prompt="do the thing",
                prior_acp_session="acp-prior",
                mcp_mode="config",
                metadata={"source": "engine"},
            )
        )
        launched = ex.opened[0]
        assert launched.agent_id == "claude-acp-default"
        assert launched.workspace == path
        assert launched.mcp_mode == "config"
        assert launched.session_id == ref.session_id
        assert launched.execution_id == ref.id
        sent = session_of(rt, ref.id).spec
        assert sent.executor_id == "local_pc"
        assert sent.workspace == WorkspaceRef(path=path, repository_id="repo-1", is_ephemeral=True)
        assert sent.prompt == "do the thing"
        assert sent.prior_acp_session == "acp-prior"
        assert sent.mcp_mode == "config"
        assert sent.metadata == {"source": "engine", "mcp_mode": "config"}

        tr = ex.last
        s = session_of(rt, ref.id)
        await wait_until(lambda: bool([c for c in tr.calls if c[0] == "prompt"]))
        assert ("session/load", ("acp-prior", path)) in tr.calls
        assert [c[1][0] for c in tr.calls if c[0] == "prompt"] == ["do the thing"]

        snap = rt.get_execution(ref.id)
        assert (ref.id, ref.session_id, ref.started_at) == (
            snap.id,
            snap.session_id,
            snap.started_at,
        )
        assert ref.agentctl_url == "" == snap.agentctl_url
        assert snap.agent_profile_id == "claude-acp-default"
        assert snap.workspace_path == path
        assert snap.acp_session_id == "acp-prior"
        assert snap.metadata["source"] == "engine"
        assert s.spec == sent

    # the URL is where the agent is reached (agentctl's instance), as the transport says
    with_url = RecordingExecutor(lambda: MemoryTransport(endpoint="http://127.0.0.1:39001"))
    async with runtime(with_url, time_scale) as rt:
        ref = await rt.launch(launch_spec(path))
        assert ref.agentctl_url == "http://127.0.0.1:39001"
        assert rt.get_execution(ref.id).agentctl_url == "http://127.0.0.1:39001"


async def test_s139_launch_propagates_the_backend_error(time_scale: float, tmp_path: Path) -> None:
    """The executor's failure to start the agent is the launch's error, unchanged, and no
    execution is left behind; an unknown profile is ProfileNotFound, an unknown executor
    ExecutorNotFound (both LaunchSpecErrors)."""
    failure = TransportClosed("failed to start agent: spawn unused: no such file")

    def cannot_start() -> MemoryTransport:
        raise failure

    ex = RecordingExecutor(cannot_start)
    async with runtime(ex, time_scale) as rt:
        with pytest.raises(TransportClosed) as info:
            await rt.launch(launch_spec(str(tmp_path)))
        assert info.value is failure
        assert rt.list_executions() == []
        with pytest.raises(ProfileNotFound):
            await rt.launch(launch_spec(str(tmp_path), agent_profile_id="nope"))
        with pytest.raises(ExecutorNotFound) as unknown:
            await rt.launch(
                LaunchSpec(
                    agent_profile_id="p1", executor_id="sprites", workspace=WorkspaceRef(path="/")
                )
            )
        assert isinstance(unknown.value, LaunchSpecError)
        assert not isinstance(unknown.value, ProfileNotFound)
        assert "unknown executor 'sprites'" in str(unknown.value)
        assert len(ex.opened) == 1


async def test_s140_base_launch_request_is_used(time_scale: float, tmp_path: Path) -> None:
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
    async with runtime(ex, time_scale) as rt:
        ref = await rt.launch(
            launch_spec(
                str(tmp_path),
                agent_profile_id="p1",
                prompt="hello",
                metadata={"launch_request": base},
            )
        )
        sent = session_of(rt, ref.id).spec
        assert ex.opened[0].agent_id == "p1" and sent.agent_profile_id == "p1"
        assert (ex.opened[0].task_id, ex.opened[0].session_id) == ("task-1", "sess-1")
        assert sent.prompt == "hello"
        assert sent.prior_acp_session == "acp-from-base"
        assert sent.metadata == {
            "task_id": "task-1",
            "session_id": "sess-1",
            "use_worktree": True,
            "repositories": [{"repository_id": "repo-1", "base_branch": "main"}],
        }
        assert "launch_request" not in sent.metadata
        snap = rt.get_execution(ref.id)
        assert (snap.task_id, snap.session_id, ref.session_id) == ("task-1", "sess-1", "sess-1")
        assert "launch_request" not in snap.metadata
        await wait_until(lambda: any(c[0] == "prompt" for c in ex.last.calls))
        assert [c[1][0] for c in ex.last.calls if c[0] == "prompt"] == ["hello"]


async def test_s140_unset_spec_fields_take_the_base_request(
    time_scale: float, tmp_path: Path
) -> None:
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
    async with Runtime(
        profiles=PROFILES,
        executors={"local_pc": ex, "sprites": other},
        timeouts=Timeouts().scaled(time_scale),
    ) as rt:
        ref = await rt.launch(
            LaunchSpec(
                agent_profile_id="p1",
                workspace=WorkspaceRef(path=""),
                metadata={"launch_request": base, "source": "engine"},
            )
        )
        assert ex.opened == [] and len(other.opened) == 1
        assert other.opened[0].workspace == path
        sent = session_of(rt, ref.id).spec
        assert sent.executor_id == "sprites"
        assert sent.workspace == WorkspaceRef(path=path, repository_id="repo-9", is_ephemeral=True)
        assert sent.metadata == {"source": "engine"}
        assert rt.get_execution(ref.id).workspace_path == path
        # what the spec sets wins over the base
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        mine = await rt.launch(
            LaunchSpec(
                agent_profile_id="p1",
                executor_id="local_pc",
                workspace=WorkspaceRef(path=str(elsewhere), repository_id="repo-1"),
                metadata={"launch_request": base, "session_id": "s-2"},
            )
        )
        assert len(ex.opened) == 1 and len(other.opened) == 1
        assert session_of(rt, mine.id).spec.workspace == WorkspaceRef(
            path=str(elsewhere), repository_id="repo-1", is_ephemeral=True
        )
    # no executor named anywhere: stdio
    fallback = RecordingExecutor()
    async with runtime(fallback, time_scale, name="stdio") as rt:
        ref = await rt.launch(LaunchSpec(agent_profile_id="p1", workspace=WorkspaceRef(path=path)))
        assert len(fallback.opened) == 1
        assert session_of(rt, ref.id).spec.executor_id == "stdio"


async def test_s142_resume_maps_not_found(time_scale: float, tmp_path: Path) -> None:
    """Go's Resume passed the lifecycle's not-found error through unmapped (H11, pinned by
    the Go scenario). Our facade maps not-found consistently: ``resume`` on an unknown (or
    empty: ExecutionIdRequired) id raises ExecutionNotFound. Resume itself waits for the turn
    (seed Resume)."""
    ex = RecordingExecutor()
    async with runtime(ex, time_scale) as rt:
        with pytest.raises(ExecutionNotFound) as info:
            await rt.resume("exec-missing", "follow-up")
        assert info.value.execution_id == "exec-missing"
        assert str(info.value).startswith("runtime: execution not found")
        with pytest.raises(ExecutionIdRequired, match=r"^executionID is required$"):
            await rt.resume("", "follow-up")
        ref = await rt.launch(launch_spec(str(tmp_path)))
        s = session_of(rt, ref.id)
        await wait_until(lambda: s.execution.status == "READY")
        done: list[str] = []

        async def resume() -> None:
            result = await rt.resume(ref.id, "follow-up")
            done.append(result.stop_reason)

        async with anyio.create_task_group() as tg:
            tg.start_soon(resume)
            await wait_until(
                lambda: s.current is not None and s.current.machine.is_in("dispatched")
            )
            assert done == []  # still waiting for the turn
            ex.last.complete(1)
        assert done == ["end_turn"]


async def test_s143_stop_delegates_reason_and_force(time_scale: float, tmp_path: Path) -> None:
    """``stop(id, "user_cancelled")`` stops with that reason and ``force=False`` by default
    (the reason reaches ``agent.stopped``); the execution is STOPPED and then unknown. An
    empty id is its own error: ExecutionIdRequired (Go: ``executionID is required``)."""
    assert inspect.signature(Runtime.stop).parameters["force"].default is False
    ex = RecordingExecutor()
    async with runtime(ex, time_scale) as rt:
        with pytest.raises(ExecutionIdRequired, match="executionID is required"):
            await rt.stop("", "user_cancelled")
        ref = await rt.launch(launch_spec(str(tmp_path)))
        s = session_of(rt, ref.id)
        await wait_until(lambda: s.execution.status == "READY")
        final = await rt.stop(ref.id, "user_cancelled")
        assert final.status == "STOPPED" and final.id == ref.id
        stopped = [e for e in s.hub._backlog if isinstance(e, le.AgentStopped)]
        assert [e.reason for e in stopped] == ["user_cancelled"]
        assert ("aclose", ()) in ex.last.calls
        with pytest.raises(ExecutionNotFound):
            rt.get_execution(ref.id)
        with pytest.raises(ExecutionNotFound):
            await rt.stop(ref.id, "again")


async def test_s145_get_execution_snapshot(time_scale: float, tmp_path: Path) -> None:
    """Every field of a tracked execution is copied into the snapshot: ids, task id,
    profile, workspace path, status READY (Go's ``ready``), ACP session id, metadata (a
    copy), an empty agentctl URL, and the charts' states; after a clean process exit the
    status is COMPLETED with exit code 0 and a finish time. A missing or empty id gives
    ExecutionNotFound."""
    ex = RecordingExecutor()
    path = str(tmp_path)
    async with runtime(ex, time_scale) as rt:
        ref = await rt.launch(
            launch_spec(path, metadata={"k": "v", "task_id": "task-9", "session_id": "sess-9"})
        )
        s = session_of(rt, ref.id)
        await wait_until(lambda: s.execution.status == "READY")
        snap = rt.get_execution(ref.id)
        assert snap.id == ref.id
        assert snap.session_id == "sess-9"
        assert snap.task_id == "task-9"
        assert snap.agent_profile_id == "claude-acp-default"
        assert snap.workspace_path == path
        assert snap.status == "READY"
        assert snap.finished_at is None and snap.exit_code is None
        assert snap.acp_session_id == "mem-session-1"
        assert snap.metadata == {"k": "v", "task_id": "task-9", "session_id": "sess-9"}
        assert snap.agentctl_url == ""
        assert snap.error_message == ""
        assert snap.charts["execution"] == "ready" and snap.charts["agent_stream"] == "connected"
        snap.metadata["k"] = "changed"
        assert rt.get_execution(ref.id).metadata["k"] == "v"

        ex.last.disconnect("", exit_code=0)
        await wait_until(lambda: rt.get_execution(ref.id).status == "COMPLETED")
        done = rt.get_execution(ref.id)
        assert done.exit_code == 0
        assert done.finished_at is not None and done.finished_at >= done.started_at
        for missing in ("missing", ""):
            with pytest.raises(ExecutionNotFound if missing else ExecutionIdRequired):
                rt.get_execution(missing)


async def test_s146_set_mcp_mode(time_scale: float, tmp_path: Path) -> None:
    """``set_mcp_mode(id, "config")`` records the mode; no ACP request reaches the agent (the
    tool sets it switches are served over MCP, and a carrier without an MCP server of its own,
    unlike agentctl, is not asked). An unknown mode is Unsupported. An empty id is
    ExecutionIdRequired, an unknown one ExecutionNotFound (Go passed the lifecycle's unwrapped ``not found`` / ``has no agentctl
    client`` through; a Python session always has its transport between launch and stop)."""
    ex = RecordingExecutor()
    async with runtime(ex, time_scale) as rt:
        ref = await rt.launch(launch_spec(str(tmp_path), mcp_mode="task"))
        s = session_of(rt, ref.id)
        await wait_until(lambda: s.execution.status == "READY")
        assert rt.get_execution(ref.id).metadata["mcp_mode"] == "task"
        calls = list(ex.last.calls)
        await rt.set_mcp_mode(ref.id, "config")
        assert rt.get_execution(ref.id).metadata["mcp_mode"] == "config"
        assert ex.last.calls == calls
        with pytest.raises(Unsupported, match="operation not supported"):
            await rt.set_mcp_mode(ref.id, "everything")
        assert rt.get_execution(ref.id).metadata["mcp_mode"] == "config"
        for missing in ("", "missing"):
            with pytest.raises(ExecutionNotFound if missing else ExecutionIdRequired):
                await rt.set_mcp_mode(missing, "config")


async def test_s148_base_metadata_is_not_aliased(time_scale: float, tmp_path: Path) -> None:
    """Go's shallow copy wrote the spec's metadata into the caller's base ``launch_request``
    map. Decision for the Python port: it does **not** keep this; the caller's base mapping
    is copied, never written, while the launched metadata holds both."""
    ex = RecordingExecutor()
    base = {"k": "v"}
    spec_metadata: dict[str, Any] = {"source": "x", "launch_request": base}
    async with runtime(ex, time_scale) as rt:
        ref = await rt.launch(launch_spec(str(tmp_path), metadata=spec_metadata))
        assert base == {"k": "v"}
        assert spec_metadata == {"source": "x", "launch_request": {"k": "v"}}
        assert rt.get_execution(ref.id).metadata == {"k": "v", "source": "x"}


async def test_subscribe_events_is_supported(time_scale: float, tmp_path: Path) -> None:
    """kandev's ``SubscribeEvents`` (no scenario id): Go always returned
    ErrUnsupported. Ours is supported: a subscription opened right after launch sees the
    execution's events in order from its start, and ends when the execution finishes. An
    unknown id is ExecutionNotFound."""
    ex = RecordingExecutor(lambda: MemoryTransport(auto_complete=True))
    async with runtime(ex, time_scale) as rt:
        with pytest.raises(ExecutionNotFound):
            rt.subscribe_events("missing")
        ref = await rt.launch(launch_spec(str(tmp_path), prompt="hi"))
        seen: list[Any] = []

        async def collect(events: AsyncIterator[Any]) -> None:
            async for event in events:
                seen.append(event)

        async with rt.subscribe_events(ref.id) as events, anyio.create_task_group() as tg:
            tg.start_soon(collect, events)
            await wait_until(lambda: any(isinstance(e, le.AgentReady) for e in seen))
            await rt.stop(ref.id, "done")
        kinds = [type(e) for e in seen]
        assert kinds.index(le.AcpSessionCreated) < kinds.index(ev.MessageChunk)
        assert kinds.index(ev.Complete) < kinds.index(le.AgentReady)
        assert kinds[-1] is le.AgentStopped  # then the subscription ended
