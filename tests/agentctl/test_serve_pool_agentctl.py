"""Take-over with the real agentctl binary: two ``acpfsm serve --pool`` processes on a real
PostgreSQL and a real NATS server drive 20 reference agents through agentctl; ``kill -9`` of
the member that owns them all while every one is mid-turn: within the lease plus 5 s every
execution answers prompts through the survivor (all asked at once), on the same agent
processes (none orphaned, none started again), the turn in flight at the kill closed, and a
subscriber in a third process (this test) sees every event of each exactly once, in order,
across the take-over."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from acpfsm.runtime import LaunchSpec, WorkspaceRef
from acpfsm.runtime import events as le
from acpfsm.runtime.service import ExecutionUnreachable, RemoteRuntime, ServiceTimeout
from acpfsm.testing.natsserver import NatsServer
from acpfsm.testing.postgres import PostgresCluster
from tests.runtime.serve_helpers import ServeProcess
from tests.runtime.test_serve_pool import LEASE, fresh_database

from .agentctl_server import INSTANCE_PORTS, AgentctlServer

pytestmark = pytest.mark.integration

N = 20  # the test agentctl's port range has room for them (agentctl_server.INSTANCE_PORTS)


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_kill_9_the_survivor_takes_over_agentctl_executions(
    nats_server: NatsServer,
    postgres_cluster: PostgresCluster,
    agentctl: AgentctlServer,
    tmp_path: Path,
    backend: str,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    config = {
        "reference_agent": ["--delay", "0.001"],
        "executors": {
            "agentctl": {"kind": "agentctl", "url": agentctl.url, "token_env": "AGENTCTL_TOKEN"}
        },
    }
    common = {
        "store": fresh_database(postgres_cluster),
        "extra": ("--pool", "--lease", str(LEASE)),
        "config_data": config,
        "env": {"AGENTCTL_TOKEN": agentctl.token()},
        "backend": backend,
    }
    spec = LaunchSpec(
        agent_profile_id="reference", executor_id="agentctl",
        workspace=WorkspaceRef(path=str(workspace)),
    )  # fmt: skip
    first = ServeProcess(nats_server, tmp_path, name="a", **common)  # type: ignore[arg-type]
    second: ServeProcess | None = None  # b joins later: a owns every execution

    async def scenario() -> None:
        nonlocal second
        async with RemoteRuntime(nats_server.url, request_timeout=10) as rt:
            refs = [await rt.launch(spec) for _ in range(N)]
            for ref in refs:
                await rt.prompt(ref.id, "before")
            pids = sorted(agentctl.agents())
            assert len(pids) == N <= INSTANCE_PORTS
            second = ServeProcess(nats_server, tmp_path, name="b", **common)  # type: ignore[arg-type]
            for ref in refs:  # every execution mid-turn at the kill
                await rt.prompt(ref.id, "[[delay:0.5]] a slow turn", dispatch_only=True)
            first.kill()
            killed = time.monotonic()
            answered: dict[str, float] = {}
            last_generation: dict[str, int] = {}

            async def after(execution_id: str) -> None:
                while True:
                    try:
                        result = await rt.prompt(execution_id, "after", timeout=20)
                        break
                    except (ExecutionUnreachable, ServiceTimeout):
                        assert time.monotonic() - killed < LEASE + 5
                        await anyio.sleep(0.1)
                assert result.stop_reason == "end_turn"
                answered[execution_id] = time.monotonic() - killed
                last_generation[execution_id] = result.generation

            async with anyio.create_task_group() as tg:
                for ref in refs:
                    tg.start_soon(after, ref.id)
            assert len(answered) == N
            assert max(answered.values()) < LEASE + 5  # every one within the bound plus 5 s
            assert sorted(agentctl.agents()) == pids  # the same agents: none orphaned or new
            for ref in refs:
                async with rt.events(ref.id, from_seq=0) as events:
                    seen: list[le.SequencedEvent] = []
                    async for item in events:
                        seen.append(item)
                        if (
                            isinstance(item.event, le.PromptCompleted)
                            and item.event.prompt_generation == last_generation[ref.id]
                        ):
                            break
                assert [i.seq for i in seen] == list(range(1, len(seen) + 1))
                kinds = [type(i.event).__name__ for i in seen]
                assert "AgentRecovered" in kinds, kinds
                assert kinds.count("AcpSessionCreated") == 1  # reattached, not started again
                ended = [
                    (type(i.event).__name__, i.event.prompt_generation)
                    for i in seen
                    if isinstance(i.event, le.PromptCompleted | le.PromptInterrupted)
                ]  # before; the turn in flight at the kill, closed; after (a new generation)
                assert ended == [
                    ("PromptCompleted", 1),
                    ("PromptInterrupted", 2),
                    ("PromptCompleted", last_generation[ref.id]),
                ], kinds
            for ref in refs:
                await rt.stop(ref.id, "done")
        assert agentctl.agents() == []

    try:
        anyio.run(scenario, backend=backend)
    finally:
        if first.process.poll() is None:
            first.kill()
        assert second is not None and second.stop() == 0
