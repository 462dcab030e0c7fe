"""``acpfsm serve`` as a real process (the stdio reference agent, a SQLite store, a real NATS
server with JetStream) driven by :class:`RemoteRuntime` on trio and asyncio: the Runtime's
calls over request/reply, the serve process's errors raised again as their own classes, the
events from JetStream, bad input over the wire answered with typed errors while the process
stays up, and the refusal to start without credentials."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import msgspec
import pytest

from acpfsm.runtime import (
    ExecutionNotFound,
    LaunchSpec,
    ProfileNotFound,
    SteerNotDispatched,
    Unsupported,
    WorkspaceRef,
)
from acpfsm.runtime import events as le
from acpfsm.runtime.bus import BusUnavailable, NatsBus
from acpfsm.runtime.service import (
    ExecutionUnreachable,
    RemoteRuntime,
    RequestInvalid,
    ServiceError,
    ServiceTimeout,
    ServiceUnavailable,
)
from acpfsm.runtime.service.wire import Reply, raise_error
from acpfsm.testing.natsserver import NatsServer, throwaway_nats
from acpfsm.tools import serve as serve_tool

from .serve_helpers import ServeProcess


@pytest.fixture
def serve(nats_server: NatsServer, tmp_path: Path, backend: str) -> Iterator[ServeProcess]:
    process = ServeProcess(nats_server, tmp_path, backend=backend)
    yield process
    assert process.stop() == 0


def spec(tmp_path: Path, profile: str = "reference") -> LaunchSpec:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    return LaunchSpec(
        agent_profile_id=profile, executor_id="stdio", workspace=WorkspaceRef(path=str(workspace))
    )


@pytest.mark.both_backends
async def test_the_runtimes_calls_over_nats(
    serve: ServeProcess, nats_server: NatsServer, tmp_path: Path
) -> None:
    with anyio.fail_after(120):
        async with RemoteRuntime(nats_server.url) as rt:
            ref = await rt.launch(spec(tmp_path))
            result = await rt.prompt(ref.id, "hello")
            assert result.stop_reason == "end_turn"
            assert "hello" in result.agent_message
            snapshot = await rt.get_execution(ref.id)
            assert (snapshot.id, snapshot.status) == (ref.id, "READY")
            assert [e.id for e in await rt.list_executions()] == [ref.id]
            with pytest.raises(SteerNotDispatched) as steered:  # no live turn: the serve's error
                await rt.steer(ref.id, "more")
            assert steered.value.execution_id == ref.id
            await rt.cancel(ref.id)  # nothing to cancel: answered
            with pytest.raises(Unsupported):
                await rt.set_mcp_mode(ref.id, "no-such-mode")
            async with rt.events(ref.id, from_seq=0) as events:
                seen: list[le.SequencedEvent] = []
                async for item in events:
                    seen.append(item)
                    if isinstance(item.event, le.PromptCompleted):
                        break
            assert [i.seq for i in seen] == list(range(1, len(seen) + 1))
            assert any(isinstance(i.event, le.AcpSessionCreated) for i in seen)
            assert any(isinstance(i.event, le.MessageChunk) for i in seen)
            final = await rt.stop(ref.id, "done")
            assert final.id == ref.id
            with pytest.raises(ExecutionUnreachable) as missing:  # nobody answers for it now
                await rt.get_execution(ref.id)
            assert missing.value.execution_id == ref.id and missing.value.retryable


@pytest.mark.both_backends
async def test_errors_come_back_as_their_own_class(
    serve: ServeProcess, nats_server: NatsServer, tmp_path: Path
) -> None:
    with anyio.fail_after(60):
        async with RemoteRuntime(nats_server.url) as rt:
            with pytest.raises(ExecutionUnreachable) as missing:
                await rt.prompt("no-such-execution", "hello")
            assert missing.value.execution_id == "no-such-execution"
            with pytest.raises(ExecutionUnreachable):  # not even a subject
                await rt.get_execution("a.b")
            with pytest.raises(ProfileNotFound, match="unknown agent profile 'nope'"):
                await rt.launch(spec(tmp_path, profile="nope"))
            with pytest.raises(RequestInvalid, match="too large"):
                await rt.prompt("x", "y" * (rt.bus.max_payload + 1))


@pytest.mark.both_backends
async def test_bad_input_over_the_wire_is_a_typed_reply(
    serve: ServeProcess, nats_server: NatsServer
) -> None:
    async def ask(nc: object, subject: str, body: bytes) -> bytes:
        msg = await nc.request(subject, body, timeout=10)  # type: ignore[attr-defined]
        return bytes(msg.data)

    cases = {
        b"\xff not json": RequestInvalid,
        b"[" * 50_000: RequestInvalid,
        b'{"op": "explode"}': Unsupported,
        b'{"op": "prompt", "execution_id": 3}': RequestInvalid,
        b'{"op": "get", "execution_id": "x", "extra": 1}': RequestInvalid,
        b'{"op": "get", "execution_id": "x"}': ExecutionNotFound,
    }
    with anyio.fail_after(60):
        async with RemoteRuntime(nats_server.url) as rt:
            for body, error in cases.items():
                raw = await rt.bus.runner.run(ask, rt.bus._nc, "acpfsm.rpc.launch", body)
                reply = msgspec.json.decode(raw, type=Reply)
                assert reply.error is not None, body
                with pytest.raises(error):
                    raise_error(reply.error)
            assert await rt.list_executions() == []  # still serving
    assert serve.process.poll() is None


@pytest.mark.both_backends
async def test_no_serve_process_is_a_retryable_error(nats_server: NatsServer) -> None:
    with anyio.fail_after(30):
        async with RemoteRuntime(nats_server.url, request_timeout=2) as rt:
            with pytest.raises(ServiceUnavailable) as unavailable:
                await rt.list_executions()
            assert unavailable.value.retryable


@pytest.mark.both_backends
async def test_a_serve_process_that_never_answers_is_a_timeout(nats_server: NatsServer) -> None:
    async def mute(nc: object) -> object:  # takes requests and never answers
        return await nc.subscribe("acpfsm.rpc.>")  # type: ignore[attr-defined]

    with anyio.fail_after(30):
        async with NatsBus(nats_server.url) as bus, RemoteRuntime(bus=bus, request_timeout=1) as rt:
            await bus.runner.run(mute, bus._nc)
            with pytest.raises(ServiceTimeout) as late:
                await rt.get_execution("e")
            assert late.value.retryable and late.value.execution_id == "e"
            with pytest.raises(ServiceTimeout):
                await rt.launch(LaunchSpec(agent_profile_id="p", workspace=WorkspaceRef(path="/")))


def test_serve_refuses_to_start_without_credentials(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "acpfsm.tools.cli", "serve", "--nats", nats_server.url,
         "--store", str(tmp_path / "s.db")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "refusing to serve without them" in done.stderr


def test_the_guides_config_file_is_read(tmp_path: Path) -> None:
    guide = Path(__file__).resolve().parents[2] / "docs/guides/across-processes.md"
    text = guide.read_text()
    block = text.split("```toml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "serve.toml"
    path.write_text(block)
    profiles, executors, timeouts = serve_tool._runtime_parts(serve_tool._load_config(str(path)))
    assert {p.id for p in profiles} == {"claude", "reference"}
    assert set(executors) == {"agentctl"} and timeouts.steer_dispatch == 10.0
    path.write_text("reference_agent = []\nunknown = 1\n")
    with pytest.raises(serve_tool.ServeRefused, match="not valid"):
        serve_tool._load_config(str(path))


def test_wrong_credentials_are_refused_without_hanging(tmp_path: Path) -> None:
    with throwaway_nats(user="acpfsm", password="right") as server:
        done = subprocess.run(
            [sys.executable, "-m", "acpfsm.tools.cli", "serve", "--nats", server.url,
             "--store", str(tmp_path / "s.db")],
            capture_output=True, text=True, timeout=60, check=False,
            env={**os.environ, "ACPFSM_NATS_USER": "acpfsm", "ACPFSM_NATS_PASSWORD": "wrong"},
        )  # fmt: skip
        assert done.returncode == 2
        assert "BusUnavailable" in done.stderr and "wrong" not in done.stderr  # never logged

        async def client() -> None:
            with anyio.fail_after(30), pytest.raises(BusUnavailable):
                async with RemoteRuntime(server.url, connect={"user": "acpfsm", "password": "x"}):
                    pass

        anyio.run(client)


@pytest.mark.both_backends
async def test_nats_restarted_under_load(
    serve: ServeProcess, nats_server: NatsServer, tmp_path: Path
) -> None:
    """The server killed and started again while a client prompts: every call during the
    outage ends with a typed, retryable error within its bound, the serve process and the
    client reconnect, and the execution's events are all on the bus afterwards, once each."""
    with anyio.fail_after(120):
        async with RemoteRuntime(nats_server.url, request_timeout=3) as rt:
            ref = await rt.launch(spec(tmp_path))
            await rt.prompt(ref.id, "before", timeout=10)
            nats_server.kill()
            started = time.monotonic()
            with pytest.raises(ServiceError) as down:
                await rt.prompt(ref.id, "during", timeout=1)
            assert down.value.retryable and time.monotonic() - started < 10
            nats_server.start()
            while True:  # both reconnect on their own
                failure: ServiceError | None = None
                try:
                    result = await rt.prompt(ref.id, "after", timeout=10)
                except ServiceError as exc:
                    failure = exc
                if failure is None:
                    break
                assert failure.retryable and time.monotonic() - started < 60
                await anyio.sleep(0.2)
            assert result.stop_reason == "end_turn"
            async with rt.events(ref.id, from_seq=0) as events:
                seen: list[le.SequencedEvent] = []
                completed = 0
                async for item in events:
                    seen.append(item)
                    completed += isinstance(item.event, le.PromptCompleted)
                    if completed == 2:  # the first two turns, whichever ran
                        break
            assert [i.seq for i in seen] == list(range(1, len(seen) + 1))
            await rt.stop(ref.id, "done")


@pytest.mark.both_backends
async def test_the_service_bounds_its_requests(nats_server: NatsServer, tmp_path: Path) -> None:
    """A :class:`Service` in this process: a request beyond ``max_in_flight`` (here one, a
    slow prompt) is answered ServiceBusy at once and the service goes on; one beyond
    ``pending`` (here none may wait) too, whatever it asks."""
    from acpfsm.runtime import Runtime, reference_profile
    from acpfsm.runtime.service import Service
    from acpfsm.runtime.service.wire import ServiceBusy

    with anyio.fail_after(60):
        async with (
            NatsBus(nats_server.url) as bus,
            Runtime(profiles=[reference_profile("--delay", "0")], bus=bus) as runtime,
            RemoteRuntime(bus=bus, request_timeout=10) as rt,
            anyio.create_task_group() as tg,
        ):
            service = Service(runtime, bus, max_in_flight=1)
            await tg.start(service.run)
            ref = await rt.launch(spec(tmp_path))
            assert service.in_flight == 0

            async def slow() -> None:
                await rt.prompt(ref.id, "[[delay:2]] wait")

            tg.start_soon(slow)
            while service.in_flight == 0:
                await anyio.sleep(0.01)
            with pytest.raises(ServiceBusy) as busy:
                await rt.get_execution(ref.id)
            assert busy.value.retryable
            while service.in_flight:  # the slow turn ends: the service answers again
                await anyio.sleep(0.01)
            assert (await rt.get_execution(ref.id)).id == ref.id
            tg.cancel_scope.cancel()

        async with (
            NatsBus(nats_server.url) as bus,
            Runtime(profiles=[], bus=bus) as runtime,
            RemoteRuntime(bus=bus, request_timeout=10) as rt,
            anyio.create_task_group() as tg,
        ):
            await tg.start(Service(runtime, bus, pending=0, prefix="acpfsm.none").run)
            rt.prefix = "acpfsm.none"
            with pytest.raises(ServiceBusy):
                await rt.list_executions()
            with pytest.raises(ServiceBusy):
                await rt.launch(spec(tmp_path))
            tg.cancel_scope.cancel()
