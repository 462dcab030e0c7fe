"""What a user imports and type-checks: one events module, the exports of ``acpfsm.runtime``,
``Literal`` statuses and stop reasons that mypy --strict holds a program to, a live-only
subscription, and an import that leaves the agentctl stack unloaded for a stdio-only user."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import typing
from pathlib import Path

import pytest
from mypy import api as mypy_api

import acpfsm.runtime
from acpfsm.adapters import errors as adapter_errors
from acpfsm.adapters import events as agent_events
from acpfsm.runtime import events
from acpfsm.runtime.events import MessageChunk, PromptCompleted

from .memory_runtime import make_runtime, memory_agent, session_of, spec

AGENTCTL_STACK = ("httpx", "httpx_ws", "httpcore")


# --------------------------------------------------------------------- one events module --


def test_every_event_type_is_importable_from_acpfsm_runtime_events() -> None:
    every = set(typing.get_args(events.RuntimeEvent))
    assert len(every) == len(typing.get_args(agent_events.AgentEvent)) + len(
        typing.get_args(events.LifecycleEvent)
    )
    for cls in every:
        assert getattr(events, cls.__name__) is cls
        assert cls.__name__ in events.__all__
    for name in ("AgentEvent", "LifecycleEvent", "RuntimeEvent", "TurnUpdate", "PlanEntry"):
        assert name in events.__all__
    assert set(events.__all__) <= set(dir(events))
    # the agent stream's whole public vocabulary (its types: the codec functions stay there)
    types = {n for n in agent_events.__all__ if n[0].isupper()}
    assert types <= set(events.__all__)


def test_subscription_and_the_transport_errors_are_exported() -> None:
    from acpfsm.runtime import Subscription
    from acpfsm.runtime.hub import Subscription as HubSubscription

    assert Subscription is HubSubscription
    for name in (
        "TransportError",
        "StreamNotConnected",
        "TransportClosed",
        "TransportTimeout",
        "AuthenticationFailed",
        "DialFailed",
        "DialRefused",
        "ProtocolError",
        "RemoteProtocolError",
        "AgentRequestError",
        "SteerUnsupported",
    ):
        assert getattr(acpfsm.runtime, name) is getattr(adapter_errors, name)
        assert name in acpfsm.runtime.__all__
    assert set(acpfsm.runtime.__all__) <= set(dir(acpfsm.runtime)) | {"AgentctlExecutor"}


@pytest.mark.both_backends
async def test_a_live_only_subscription_starts_with_the_next_event(time_scale: float) -> None:
    executor = memory_agent(auto_complete=True)
    async with make_runtime(executor, time_scale=time_scale) as rt:
        ref = await rt.launch(spec())
        await rt.wait_ready(ref.id)
        backlog = session_of(rt, ref.id).hub._backlog
        async with rt.subscribe_events(ref.id) as replayed:  # the default replays the life
            assert await replayed.__anext__() == backlog[0]
        before = len(backlog)
        async with rt.subscribe_events(ref.id, replay=False) as live:
            result = await rt.prompt(ref.id, "hi")
            got: list[events.RuntimeEvent] = []
            async for event in live:
                got.append(event)
                if isinstance(event, PromptCompleted):
                    break
        assert before > 0
        assert got == list(backlog)[before : before + len(got)]  # exactly what came since
        assert [e.text for e in got if isinstance(e, MessageChunk)] == ["Hello", " world"]
        assert result.generation == 1


# ------------------------------------------------------------------------ typed for mypy --

USER_PROGRAM = """
from acpfsm.runtime import AgentctlExecutor, Execution, PromptResult, Runtime


def report(execution: Execution, result: PromptResult) -> str:
    if execution.status == {status!r}:
        return "ready"
    if result.stop_reason == {stop_reason!r}:
        return "done"
    return "other"


def executor() -> AgentctlExecutor:
    return AgentctlExecutor(url="http://127.0.0.1:1", {nonce}="n")


async def stream(rt: Runtime, execution_id: str) -> None:
    async with rt.turn(execution_id, "hi") as turn:
        async for update in turn:
            print(update.prompt_generation)
    print(turn.result.stop_reason)
"""


def _mypy(tmp_path: Path, **words: str) -> tuple[str, int]:
    program = tmp_path / "user_program.py"
    program.write_text(textwrap.dedent(USER_PROGRAM.format(**words)))
    out, err, status = mypy_api.run(
        [
            "--strict",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--config-file",
            "",
            str(program),
        ]
    )
    return out + err, status


def test_mypy_strict_catches_a_typo_in_a_status_or_a_stop_reason(tmp_path: Path) -> None:
    out, status = _mypy(tmp_path, status="READY", stop_reason="end_turn", nonce="nonce")
    assert status == 0, out
    out, status = _mypy(tmp_path, status="REDY", stop_reason="end_trun", nonce="nonce")
    assert status == 1
    assert 'Non-overlapping equality check (left operand type: "Literal[' in out
    assert out.count("[comparison-overlap]") == 2, out


def test_the_lazy_agentctl_executor_is_still_typed(tmp_path: Path) -> None:
    out, status = _mypy(tmp_path, status="READY", stop_reason="end_turn", nonce="nonse")
    assert status == 1
    assert 'Unexpected keyword argument "nonse" for "AgentctlExecutor"' in out, out


# ------------------------------------------------------------------------- the lazy import --

LAZY_PROBE = """
import sys
import anyio

STACK = {stack!r}
import acpfsm.runtime
print("after import:", [m for m in STACK if m in sys.modules])

from acpfsm.runtime import LaunchSpec, Runtime, WorkspaceRef


async def main() -> None:
    async with Runtime() as rt:
        ref = await rt.launch(LaunchSpec(agent_profile_id="reference",
                                         workspace=WorkspaceRef(path={ws!r})))
        async with rt.turn(ref.id, "hello") as turn:
            async for update in turn:
                pass
        print("turn:", turn.result.stop_reason)
        await rt.stop(ref.id, "done")


anyio.run(main)
print("after a stdio launch:", [m for m in STACK if m in sys.modules])
from acpfsm.runtime import AgentctlExecutor
print("on first use:", AgentctlExecutor.__name__, [m for m in STACK if m in sys.modules])
"""


def test_import_and_a_stdio_launch_leave_the_agentctl_stack_unloaded(tmp_path: Path) -> None:
    code = LAZY_PROBE.format(stack=AGENTCTL_STACK, ws=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "after import: []",
        "turn: end_turn",
        "after a stdio launch: []",
        f"on first use: AgentctlExecutor {list(AGENTCTL_STACK)}",
    ]


def test_an_unknown_attribute_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        acpfsm.runtime.NoSuchThing  # noqa: B018


def test_import_leaves_importlib_metadata_unloaded() -> None:
    """The client version sent in ``initialize`` is read on the first initialize: importing
    ``importlib.metadata`` (and the email and zipfile packages it loads) was about a tenth of
    ``import acpfsm.runtime``."""
    code = "import sys, acpfsm.runtime; print('importlib.metadata' in sys.modules)"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert (proc.returncode, proc.stdout.strip()) == (0, "False"), proc.stderr


#: What a stdio-only program never needs: the agentctl stack and adapter, the MCP SDK and
#: acpfsm's tool server, the developer tools, the pytest plugin, the reference agent.
NOT_ON_IMPORT = (
    *AGENTCTL_STACK,
    "mcp",
    "acpfsm.adapters.agentctl",
    "acpfsm.adapters.reference_agent",
    "acpfsm.runtime.mcp.server",
    "acpfsm.tools",
    "acpfsm.runtime.testing",
    "acpfsm.testing",
)

#: Standard-library modules acpfsm uses on rare paths only (attachment types): imported where
#: used, not by ``import acpfsm.runtime``.
RARE_STDLIB = ("mimetypes",)

SURFACE_PROBE = """
import sys
import anyio, msgspec, statemachine  # the dependencies: whatever they load is theirs

deps = set(sys.modules)
import acpfsm.runtime
import acpfsm.statecharts._base as base

new = set(sys.modules) - deps
print(sorted(m for m in new if m.split(".")[0] in {top!r} or m.startswith({acpfsm!r})))
print(sorted(m for m in new if m in {rare!r}))
print(sorted(chart.chart_name for chart in base._compiled))
"""


def test_import_loads_nothing_a_stdio_only_program_does_not_use() -> None:
    """A fresh ``import acpfsm.runtime`` loads no agentctl, MCP server, tool or test module,
    none of the standard-library modules acpfsm needs on rare paths only, and compiles no
    chart (each compiles on its first ``start``): what the import costs is the floor of the
    dependencies plus the modules a stdio program runs."""
    code = SURFACE_PROBE.format(
        top={m for m in NOT_ON_IMPORT if not m.startswith("acpfsm")},
        acpfsm=tuple(m for m in NOT_ON_IMPORT if m.startswith("acpfsm")),
        rare=set(RARE_STDLIB),
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["[]", "[]", "[]"], proc.stdout


DECODER_PROBE = """
import msgspec.json

built = []
real_decoder = msgspec.json.Decoder


def recording(type=None, **kw):
    built.append(str(type))
    return real_decoder(type, **kw)


msgspec.json.Decoder = recording
import acpfsm.runtime
from acpfsm.adapters import events
from acpfsm.runtime import history

def union_of(names):
    return sum(all(name in text for name in names) for text in built)

entries = ("UserEntry", "AssistantEntry", "ToolCallEntry", "ToolResultEntry")
print(sum("SequencedEvent" in text for text in built))  # the event bus's
print(union_of(("MessageChunk", "Complete")), union_of(entries))
chunk = events.MessageChunk(text="hi")
assert events.decode_event(events.encode_event(chunk)) == chunk
assert events.decode_event(events.encode_event(chunk)) == chunk
print(union_of(("MessageChunk", "Complete")), union_of(entries))
"""


def test_import_builds_no_decoder_for_events_or_history_it_does_not_read() -> None:
    """The decoders of the whole event union, of the bus's numbered events and of history
    entries are built on their first use (``decode_event``, reading a bus or a history
    file), not by ``import acpfsm.runtime``."""
    proc = subprocess.run(
        [sys.executable, "-c", DECODER_PROBE],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["0", "0 0", "1 0"], proc.stdout
