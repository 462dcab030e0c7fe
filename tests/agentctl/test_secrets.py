"""No secret leaks: credentials given to agents through their environment, agentctl's bootstrap
nonce and its token never appear in the trace file, the history folder, our log records, the
published events or ``acpfsm conform``'s reports.

Two scenarios with real processes: the reference agent over stdio, and the same agent in an
instance of the real agentctl (authenticated by its nonce); then ``acpfsm conform`` through
agentctl with ``--token`` and, on a second agentctl, with ``--nonce``. Each run greps every
sink for every secret's value.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from acpfsm.adapters.agentctl.control import ControlClient
from acpfsm.adapters.errors import AcpfsmError
from acpfsm.runtime import (
    AgentctlExecutor,
    Executor,
    LaunchSpec,
    Runtime,
    StdioExecutor,
    WorkspaceRef,
    reference_profile,
)
from acpfsm.tools.conform import main as conform

from .agentctl_server import AgentctlServer
from .helpers import FAST_SHUTDOWN, TEST_CONFIG, TIMEOUTS

pytestmark = pytest.mark.integration

REFERENCE = [sys.executable, "-m", "acpfsm.adapters.reference_agent", "--delay", "0.005"]


def credential(label: str) -> str:
    return f"sk-{label}-" + secrets.token_hex(16)


def leaks(found_in: dict[str, bytes | str], values: dict[str, str]) -> list[tuple[str, str]]:
    """``(secret name, sink)`` for every secret value found in a sink."""
    out = []
    for where, blob in found_in.items():
        data = blob.encode("utf-8", "replace") if isinstance(blob, str) else blob
        out += [(name, where) for name, value in values.items() if value.encode() in data]
    return out


def assert_masked_stderr_quoted(sinks: dict[str, bytes | str]) -> None:
    """The agent printed its credential to stderr and the crash quoted that stderr: masked."""
    quoted = [
        where
        for where, blob in sinks.items()
        if "reference-agent env: ACPFSM_TEST_API_KEY=***" in str(blob)
    ]
    assert any(where.startswith("event") for where in quoted), quoted


def files_under(*roots: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for root in roots:
        for path in [root] if root.is_file() else sorted(root.rglob("*")):
            if path.is_file():
                out[str(path)] = path.read_bytes()
    return out


def log_records(caplog: pytest.LogCaptureFixture) -> dict[str, bytes | str]:
    return {
        f"log {i} {r.name}": r.getMessage() + repr(r.args) + (r.exc_text or "")
        for i, r in enumerate(caplog.records)
    }


@contextlib.asynccontextmanager
async def collected_events(rt: Runtime, execution_id: str) -> AsyncIterator[list[Any]]:
    """Every event published for the execution, through a subscription (which ends when the
    execution does)."""
    seen: list[Any] = []
    ended = anyio.Event()
    async with anyio.create_task_group() as tg:

        async def collect() -> None:
            with contextlib.suppress(AcpfsmError):
                async for event in rt.subscribe_events(execution_id):
                    seen.append(event)
            ended.set()

        tg.start_soon(collect)
        yield seen
        with anyio.fail_after(10):
            await ended.wait()


async def a_life(rt: Runtime, ws: Path, executor_id: str) -> list[Any]:
    """Launch, a prompt that writes a file, one whose read fails, then a crash (so the agent's
    stderr, where it printed its credentials, is quoted); the events."""
    ref = await rt.launch(
        LaunchSpec(
            agent_profile_id="reference",
            executor_id=executor_id,
            workspace=WorkspaceRef(path=str(ws)),
            prompt="hello",
        )
    )
    async with collected_events(rt, ref.id) as events:
        with anyio.fail_after(30):
            await rt.prompt(ref.id, "write it [[write:notes.txt]]")
            await rt.prompt(ref.id, "[[read:missing.txt]] and read")
            with contextlib.suppress(AcpfsmError):
                await rt.prompt(ref.id, "[[fault:crash]] and die")
            with contextlib.suppress(AcpfsmError):
                await rt.stop(ref.id, "done")
    return events


def runtime(tmp_path: Path, executor: Executor, env_secret: str, name: str) -> Runtime:
    return Runtime(
        profiles=[
            reference_profile(
                "--delay",
                "0.001",
                "--log-level",
                "warning",
                "--fault",
                "leak_env",
                env={"ACPFSM_TEST_API_KEY": env_secret},
                history_context_injection=True,
            )
        ],
        executors={name: executor},
        timeouts=TIMEOUTS,
        trace_path=tmp_path / "trace" / "trace.jsonl",
        history_root=tmp_path / "history",
    )


async def test_no_secret_leaks_over_stdio(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    values = {"profile env": credential("profile"), "executor env": credential("executor")}
    executor = StdioExecutor(
        env={"ANTHROPIC_API_KEY": values["executor env"]}, shutdown=FAST_SHUTDOWN
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    async with runtime(tmp_path, executor, values["profile env"], "stdio") as rt:
        events = await a_life(rt, ws, "stdio")
    assert len(events) > 5
    assert (tmp_path / "history").is_dir() and (tmp_path / "trace" / "trace.jsonl").is_file()
    sinks = {
        **files_under(tmp_path / "trace", tmp_path / "history", ws),
        **log_records(caplog),
        **{f"event {i}": repr(e) for i, e in enumerate(events)},
    }
    assert leaks(sinks, values) == []
    assert_masked_stderr_quoted(sinks)


async def test_no_secret_leaks_through_agentctl(
    tmp_path: Path, agentctl: AgentctlServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    values = {"nonce": agentctl.nonce, "profile env": credential("profile")}
    executor = AgentctlExecutor(url=agentctl.url, nonce=agentctl.nonce, config=TEST_CONFIG)
    ws = tmp_path / "ws"
    ws.mkdir()
    async with runtime(tmp_path, executor, values["profile env"], "agentctl") as rt:
        events = await a_life(rt, ws, "agentctl")
    values["token"] = executor.token
    assert values["token"]
    agentctl.adopt_token(executor.token)
    assert len(events) > 5
    sinks = {
        **files_under(tmp_path / "trace", tmp_path / "history", ws),
        **log_records(caplog),
        **{f"event {i}": repr(e) for i, e in enumerate(events)},
    }
    assert leaks(sinks, values) == []
    assert_masked_stderr_quoted(sinks)


@pytest.mark.parametrize("credential_kind", ["token", "nonce"])
def test_conform_reports_carry_no_credentials(
    tmp_path: Path,
    agentctl: AgentctlServer,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    credential_kind: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    traded: list[str] = []
    handshake = ControlClient.handshake

    async def recording(self: ControlClient, nonce: str) -> str:
        traded.append(await handshake(self, nonce))
        return traded[-1]

    monkeypatch.setattr(ControlClient, "handshake", recording)
    junit = tmp_path / "conform.xml"
    given = agentctl.token() if credential_kind == "token" else agentctl.nonce
    code = conform(
        [
            "--json",
            "--junit-xml",
            str(junit),
            "--timeout",
            "10",
            "--agentctl",
            agentctl.url,
            f"--{credential_kind}",
            given,
            "--",
            *REFERENCE,
            "--fault",
            "leak_env",  # prints agentctl's environment's secrets, if it passes them on
        ]
    )
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert code == 0, report
    values = {credential_kind: given}
    if credential_kind == "nonce":  # conform traded the nonce for the token
        [values["token"]] = traded
        agentctl.adopt_token(traded[0])
    sinks = {
        "json report": captured.out,
        "stderr": captured.err,
        **files_under(junit),
        **log_records(caplog),
    }
    assert leaks(sinks, values) == []
