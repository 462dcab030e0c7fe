"""Take-over with the real agentctl binary: two ``acpfsm serve --pool`` processes on a real
PostgreSQL and a real NATS server drive the reference agent through agentctl; ``kill -9`` of
the member that owns 10 executions: within the lease plus 5 s the first of them answers
prompts through the survivor, and every one does, on the same agent processes (none orphaned,
none started again), and a subscriber in a third process (this test) sees every event of
each exactly once, in order, across the take-over."""

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

from .agentctl_server import AgentctlServer

pytestmark = pytest.mark.integration

N = 10  # the test agentctl serves at most ten instances (its port range)


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
            assert len(pids) == N
            second = ServeProcess(nats_server, tmp_path, name="b", **common)  # type: ignore[arg-type]
            first.kill()
            killed = time.monotonic()
            answered: list[float] = []
            for ref in refs:
                while True:
                    try:
                        result = await rt.prompt(ref.id, "after", timeout=20)
                        break
                    except (ExecutionUnreachable, ServiceTimeout):
                        assert time.monotonic() - killed < LEASE + 5
                        await anyio.sleep(0.1)
                assert result.stop_reason == "end_turn"
                answered.append(time.monotonic() - killed)
            assert answered[0] < LEASE + 5  # the lease bound plus 5 s
            assert sorted(agentctl.agents()) == pids  # the same agents: none orphaned or new
            for ref in refs:
                async with rt.events(ref.id, from_seq=0) as events:
                    seen: list[le.SequencedEvent] = []
                    completed = 0
                    async for item in events:
                        seen.append(item)
                        if isinstance(item.event, le.PromptCompleted):
                            completed += 1
                            if completed == 2:
                                break
                assert [i.seq for i in seen] == list(range(1, len(seen) + 1))
                kinds = [type(i.event).__name__ for i in seen]
                assert "AgentRecovered" in kinds, kinds
                assert kinds.count("AcpSessionCreated") == 1  # reattached, not started again
            for ref in refs:
                await rt.stop(ref.id, "done")
        assert agentctl.agents() == []

    try:
        anyio.run(scenario, backend=backend)
    finally:
        if first.process.poll() is None:
            first.kill()
        assert second is not None and second.stop() == 0
