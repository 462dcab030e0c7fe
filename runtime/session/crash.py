"""One execution's failure stays in that execution.

An execution's tasks (its event pump, session init, initial prompt, redials, cancels, and
its transport's own tasks) run inside :meth:`~.session.ExecutionSession.run`, itself one task
of the Runtime's task group. Anything they raise once the agent is started (the executor's
teardown failing, the transport unable to encode what it was given, a bug, an
:class:`~acpfsm.statecharts.IllegalTransition`) would cancel every other execution and leave
the Runtime. :class:`CrashGuard` catches it at the edge of the execution instead, and so does
every facade call on the execution for what is not a typed error of ours (a ``ChartError``
is a bug, so it counts).

Whether the execution crashed is the Crash chart's (:class:`~acpfsm.statecharts.Crash`): the
first ``crash_reported`` answers ``contain_crash`` (a later one nothing: the same execution
failing again), and a caller asks ``crash_checked`` in place (``raise_crash``: raise the
crash). The runtime keeps the crash's exception to raise (data), never a flag to decide on.

A crash is a fact for the Execution chart (``execution_crashed``: FAILED, ``agent.failed``
phase ``crash``); the live turn is released as on a lost stream, the AgentStream chart is
closed, pending permission requests are cancelled, and the execution's tasks end (its
transport is closed). Callers waiting on it get :class:`~acpfsm.runtime.errors.ExecutionCrashed`
(``__cause__``: the failure). Other executions are not touched; the execution stays listed
(FAILED) until it is stopped. Cancellation from outside, ``KeyboardInterrupt`` and
``SystemExit`` are not failures of the execution: they propagate.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import anyio
import anyio.lowlevel

from acpfsm.adapters.errors import AcpfsmError
from acpfsm.statecharts import ChartError, ChartMachine, Effect, says
from acpfsm.statecharts.charts import CRASH
from acpfsm.statecharts.names import CrashEffect, CrashEvent, ExecutionEvent, SessionInitEvent

from ..errors import ExecutionCrashed
from .context import ExecutionContext, nothing

if TYPE_CHECKING:
    from .session import ExecutionSession

__all__ = ["CrashGuard", "crash_of", "first_failure"]

log = logging.getLogger("acpfsm.runtime")

_T = TypeVar("_T")

_RELEASE_BOUND = 10.0
"""How long releasing a crashed execution's waiters may take (the locks it needs)."""


def first_failure(exc: BaseException) -> BaseException:
    """The first leaf of a (nested) exception group, else ``exc`` itself."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _split(exc: BaseException) -> tuple[BaseException | None, BaseException | None]:
    """``(failure, rest)``: the failures of the execution (any ``Exception``) and what must
    propagate (cancellation, ``KeyboardInterrupt``, ``SystemExit``)."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(Exception)
    if isinstance(exc, Exception):
        return exc, None
    return None, exc


def copy_of(crash: ExecutionCrashed) -> ExecutionCrashed:
    """The crash as one caller raises it: its message, execution and cause, in a fresh
    exception. The execution's record of the crash (``ctx.crash``) is never raised itself:
    each raise would add that caller's frames to it, and link it into the caller's chain."""
    copy = ExecutionCrashed(str(crash), execution_id=crash.execution_id)
    copy.__cause__ = crash.__cause__
    return copy


def crash_of(ctx: ExecutionContext) -> ExecutionCrashed | None:
    """The crash a caller raises (a copy of it), when the Crash chart says the execution
    crashed: its answer to ``crash_checked``, asked without firing; ``None`` otherwise."""
    if not says(ctx.machines[CRASH.chart_name], CrashEvent.crash_checked, CrashEffect.raise_crash):
        return None
    assert ctx.crash is not None  # recorded before the chart took the crash
    return copy_of(ctx.crash)


class CrashGuard:
    """Contains the failures of one execution (see the module docstring)."""

    def __init__(self, session: ExecutionSession) -> None:
        self.session = session
        ctx = session.ctx
        self.machine: ChartMachine = ctx.start(CRASH)
        ctx.handle(
            CRASH.chart_name,
            {CrashEffect.contain_crash: self._record, CrashEffect.raise_crash: nothing},
        )  # raise_crash: crash_of()'s answer, asked without firing

    def _record(self, effect: Effect, machine: ChartMachine) -> None:
        """The first crash: what the execution's callers raise from now on (data)."""
        self.session.ctx.crash = effect["error"]

    async def contain(self, exc: BaseException, where: str) -> BaseException | None:
        """``exc`` left the execution's tasks: its failures crash the execution; returns
        what must still propagate (``None`` when nothing)."""
        failure, rest = _split(exc)
        if failure is not None:
            await self.crashed(failure, where)
        return rest

    async def call(self, where: str, operation: Callable[[], Awaitable[_T]]) -> _T:
        """Run a facade operation on the execution: a typed error of ours propagates as it
        is, unless the execution crashed while the operation ran (then the crash, the reason,
        rather than what it left behind, e.g. a request failed by the closed carrier);
        anything else (and a ``ChartError``, a bug) crashes the execution and raises
        :class:`ExecutionCrashed` from it. Each caller gets its own copy of the crash, so
        that one caller's traceback and context never show in another's, nor a later
        failure replace the crash's cause. A caller already cancelled runs nothing (the
        lifecycle lock an operation takes checks no cancellation)."""
        await anyio.lowlevel.checkpoint_if_cancelled()
        ctx = self.session.ctx
        before = crash_of(ctx)
        try:
            return await operation()
        except AcpfsmError as exc:
            if isinstance(exc, ChartError):
                raise copy_of(await self.crashed(exc, where)) from exc
            crash = crash_of(ctx)
            if before is None and crash is not None:
                raise crash from crash.__cause__  # exc stays its context
            raise
        except Exception as exc:
            raise copy_of(await self.crashed(exc, where)) from exc

    async def crashed(self, failure: BaseException, where: str) -> ExecutionCrashed:
        """Make the execution FAILED, release whoever waits on it, end its tasks."""
        session = self.session
        ctx = session.ctx
        leaf = first_failure(failure)
        message = f"execution crashed ({where}): {type(leaf).__name__}: {leaf}"
        error = ExecutionCrashed(message, execution_id=ctx.id)
        error.__cause__ = failure
        fired = await ctx.step(self.machine, CrashEvent.crash_reported, error=error)
        if not any(e.name == CrashEffect.contain_crash for _, step in fired for e in step.effects):
            log.error("execution %s failed again in %s", ctx.id, where, exc_info=failure)
            assert ctx.crash is not None  # the first report recorded it (contain_crash)
            return ctx.crash
        log.error("execution %s crashed in %s", ctx.id, where, exc_info=failure)
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(_RELEASE_BOUND):
                try:
                    await self._fail(message)
                except Exception as second:  # the charts themselves are broken: a bug
                    log.error("execution %s: releasing its waiters failed", ctx.id, exc_info=second)
            self._release(message)
        session.stop_tasks()
        return error

    async def _fail(self, message: str) -> None:
        session = self.session
        ctx = session.ctx
        session.permissions.close("the execution crashed")
        await session.status.fire(ExecutionEvent.execution_crashed, error=message)
        async with ctx.lifecycle_lock:
            await session.turns.stream_lost(message)
        await session.stream.close()
        if not session.init.machine.ended:  # its admission opens: nobody waits for it
            await ctx.step(session.init.machine, SessionInitEvent.init_abandoned)

    def _release(self, message: str) -> None:
        """Whatever the charts could not release is released here, so nobody waits on a
        crashed execution forever (its waiters raise the crash)."""
        session = self.session
        ctx = session.ctx
        if not ctx.error_message:  # e.g. a teardown that failed after STOPPED
            ctx.set_failed(message)
        session.init.admission.set()  # the charts' own release failed (a bug): the last resort
        for generation in session.turns.generations.values():
            generation.sent.set()
            generation.done.set()
            generation.turn_over.set()
