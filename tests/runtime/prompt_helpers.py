"""Helpers for the prompt-lifecycle scenario and anomaly tests (over the memory transport)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.abc

from acpfsm.adapters.errors import AcpfsmError
from acpfsm.runtime import AgentProfile, PromptResult, Runtime
from acpfsm.runtime.events import RuntimeEvent
from acpfsm.runtime.history import AssistantEntry, HistoryStore, ToolResultEntry, UserEntry
from acpfsm.runtime.session import ExecutionSession
from acpfsm.testing.memory import MemoryExecutor

from .memory_runtime import make_runtime, session_of, wait_until

T = TypeVar("T")

#: the memory profile with the history store switched on (resume-context injection)
HISTORY_PROFILE = AgentProfile(id="mem", command=("unused",), history_context_injection=True)


class Pending:
    """A prompt/steer/cancel call running in the background: its result or its error."""

    def __init__(self) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = anyio.Event()

    async def wait(self, limit: float = 30.0) -> None:
        with anyio.fail_after(limit):
            await self.done.wait()

    @property
    def prompt_result(self) -> PromptResult:
        assert isinstance(self.result, PromptResult), (self.result, self.error)
        return self.result


def start(
    tg: anyio.abc.TaskGroup, fn: Callable[..., Awaitable[Any]], *args: Any, **kw: Any
) -> Pending:
    """Run ``fn(*args, **kw)`` in ``tg``; its acpfsm error (if any) is kept, not raised."""
    pending = Pending()

    async def run() -> None:
        try:
            pending.result = await fn(*args, **kw)
        except AcpfsmError as exc:
            pending.error = exc
        finally:
            pending.done.set()

    tg.start_soon(run)
    return pending


def leaving(
    tg: anyio.abc.TaskGroup, fn: Callable[..., Awaitable[Any]], *args: Any
) -> anyio.CancelScope:
    """Run ``fn(*args)`` in ``tg`` inside the returned cancel scope: cancelling it is its
    caller leaving the call."""
    scope = anyio.CancelScope()

    async def run() -> None:
        with scope:
            await fn(*args)

    tg.start_soon(run)
    return scope


async def prompting(
    tg: anyio.abc.TaskGroup,
    rt: Runtime,
    execution_id: str,
    text: str,
    *,
    generation: int = 1,
    **kw: Any,
) -> Pending:
    """``rt.prompt(execution_id, text, **kw)`` in the background, once its turn (generation
    ``generation``) is live at the agent."""
    pending = start(tg, rt.prompt, execution_id, text, **kw)
    s = session_of(rt, execution_id)
    await wait_until(lambda: live(s, generation))
    return pending


def published(s: ExecutionSession) -> list[RuntimeEvent]:
    """Every event the execution published so far, in order (what a subscriber replays)."""
    return list(s.hub._backlog)


def of_type(s: ExecutionSession, cls: type[T]) -> list[T]:
    return [e for e in published(s) if isinstance(e, cls)]


def names(s: ExecutionSession) -> list[str]:
    return [type(e).__name__ for e in published(s)]


def live(s: ExecutionSession, g: int) -> bool:
    """Generation ``g`` is current and dispatched (kandev's ActivePromptGeneration == g)."""
    return (
        s.current is not None
        and s.current.generation == g
        and s.current.machine.is_in("dispatched")
    )


def steps(s: ExecutionSession, g: int) -> list[tuple[str, str, str]]:
    """The transitions of generation ``g``'s chart: (event, source, target)."""
    return [(r.event, r.source, r.target) for r in s.transitions("prompt_generation", g)]


def execution_steps(s: ExecutionSession) -> list[tuple[str, str, str]]:
    return [(r.event, r.source, r.target) for r in s.transitions("execution")]


def sent(transport: Any, method: str) -> list[Any]:
    """The arguments of every ``method`` request the memory agent received."""
    return [args for m, args in transport.calls if m == method]


def history(rt: Runtime, s: ExecutionSession) -> list[tuple[str, str]]:
    """The session's history as (kandev entry type, text)."""
    assert rt.history is not None
    out: list[tuple[str, str]] = []
    for entry in rt.history.read(s.session_id):
        if isinstance(entry, AssistantEntry):
            out.append(("agent_message", entry.text))
        elif isinstance(entry, UserEntry):
            out.append(("user_message", entry.text))
    return out


def tool_results(rt: Runtime, s: ExecutionSession) -> list[ToolResultEntry]:
    """The tool results written to the execution's history so far."""
    assert rt.history is not None
    return [e for e in rt.history.read(s.session_id) if isinstance(e, ToolResultEntry)]


def history_root(tmp_path: Path) -> Path:
    root = tmp_path / "history"
    root.mkdir(exist_ok=True)
    return root


def history_runtime(executor: MemoryExecutor, tmp_path: Path, **kw: Any) -> Runtime:
    """A runtime over ``executor`` whose profile keeps the session history, under
    ``tmp_path``."""
    return make_runtime(
        executor, profiles=(HISTORY_PROFILE,), history_root=history_root(tmp_path), **kw
    )


__all__ = [
    "HISTORY_PROFILE",
    "HistoryStore",
    "Pending",
    "execution_steps",
    "history",
    "history_root",
    "history_runtime",
    "live",
    "names",
    "of_type",
    "prompting",
    "published",
    "sent",
    "start",
    "steps",
    "tool_results",
]
