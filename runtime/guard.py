"""The app's executor, guarded: what it raises at start becomes the launch's typed error, and its
close is bounded.

An :class:`~acpfsm.adapters.executor.Executor` may be the app's own code. The Runtime wraps each
execution's executor (:class:`GuardedExecutor`) so that

* an ``open()`` that raises (a wrong signature, any error) or a context manager that fails on
  enter (or is none) fails the launch with :class:`~acpfsm.runtime.errors.ExecutorError`, its
  ``__cause__`` the executor's own exception (an acpfsm error passes as it is);
* leaving the context manager (the agent's stop) is bounded by ``Timeouts.executor_close``:
  past the bound it is abandoned, the rest of the execution is released (its tool server, its
  subscriptions), and the failure is reported (logged, and raised by ``Runtime.stop``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any

import anyio

from acpfsm.adapters.errors import AcpfsmError
from acpfsm.adapters.executor import AgentLaunch, Executor
from acpfsm.adapters.transport import AgentTransport

from .errors import ExecutorError

__all__ = ["GuardedExecutor"]

log = logging.getLogger("acpfsm.runtime")


class GuardedExecutor:
    """``executor`` (named ``name``), guarded as the module docstring says; ``stuck`` is told
    the :class:`ExecutorError` of a close abandoned after ``close_bound`` seconds."""

    def __init__(
        self,
        executor: Executor,
        name: str,
        *,
        close_bound: float,
        stuck: Callable[[ExecutorError], None],
    ) -> None:
        self.executor = executor
        self.name = name
        self.close_bound = close_bound
        self.stuck = stuck

    def open(self, launch: AgentLaunch) -> AbstractAsyncContextManager[AgentTransport]:
        return _Guarded(self, launch)


class _Guarded:
    """The executor's context manager inside a cancel scope of its own, entered before it and
    left after it (so that whatever task group the executor opens nests inside): when the
    execution leaves it, the scope is shielded and given the close bound."""

    def __init__(self, guard: GuardedExecutor, launch: AgentLaunch) -> None:
        self._guard = guard
        self._launch = launch
        self._opened: Any = None
        self._bound = anyio.CancelScope()

    async def __aenter__(self) -> AgentTransport:
        guard, launch = self._guard, self._launch
        self._bound.__enter__()
        try:
            opened = guard.executor.open(launch)
            enter = type(opened).__aenter__
            transport: AgentTransport = await enter(opened)
        except BaseException as exc:
            self._bound.__exit__(type(exc), exc, exc.__traceback__)
            if isinstance(exc, AcpfsmError) or not isinstance(exc, Exception):
                raise
            raise ExecutorError(
                f"executor {guard.name!r} could not start the agent: {type(exc).__name__}: {exc}",
                execution_id=launch.execution_id,
            ) from exc
        self._opened = opened
        return transport

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        guard, opened, bound = self._guard, self._opened, self._bound
        bound.shield = True
        bound.deadline = anyio.current_time() + guard.close_bound
        suppressed: bool | None = None
        try:
            suppressed = await type(opened).__aexit__(opened, kind, value, traceback)
        except BaseException as exc:
            if not bound.__exit__(type(exc), exc, exc.__traceback__):
                raise
        else:
            bound.__exit__(None, None, None)
        if not bound.cancelled_caught:
            return suppressed
        error = ExecutorError(
            f"executor {guard.name!r} did not close within {guard.close_bound:g}s: abandoned "
            "(the rest of the execution was released)",
            execution_id=self._launch.execution_id,
        )
        log.warning("%s", error)
        guard.stuck(error)
        return None
