"""The stall watchdog: kandev's stall ticker (lifecycle/session.go ``waitForPromptDone``),
one per execution.

kandev starts a ticker for every wait: every ``stall_tick`` (1 minute) from the moment a
caller starts waiting for its prompt's turn, it compares the agent's quiet with
``stall_threshold`` (5 minutes). The same ticks here come from one task per execution that
sleeps in a cancel scope whose deadline the waiter moves (:meth:`StallWatchdog.watch` when
it starts waiting; :meth:`~StallWatchdog.unwatch` when it stops): a wait costs moving a
deadline, not entering and leaving a cancel scope. A tick fires
``stall_detected`` at the waited generation once the quiet lasted the threshold; its chart
reports a stall once per wait and ignores the fact where it does not apply. Each tick comes
one ``stall_tick`` after the one before fired, as each of the per-wait scopes this replaced
did (Go's ticker keeps to its first tick's grid instead: the two differ only by how late the
ticks wake).
"""

from __future__ import annotations

import math

import anyio

from acpfsm.statecharts.names import PromptGenerationEvent

from .context import ExecutionContext
from .turns import Generation

__all__ = ["StallWatchdog"]


SHORTEST_TICK = 0.001
"""A positive ``stall_tick`` shorter than this ticks this often (a shorter one would spin)."""


class StallWatchdog:
    """Ticks for the generation a caller waits for (see the module docstring)."""

    def __init__(self, ctx: ExecutionContext) -> None:
        self.ctx = ctx
        self._waited: Generation | None = None
        self._deadline = math.inf  # the next tick
        self._armed = 0  # counts the waits' armings: a tick armed again meanwhile is not due
        self._scope: anyio.CancelScope | None = None

    def _period(self) -> float:
        """The ticks' period: ``stall_tick``, at least :data:`SHORTEST_TICK`."""
        return max(self.ctx.timeouts.stall_tick, SHORTEST_TICK)

    def watch(self, generation: Generation) -> None:
        """A caller waits for ``generation`` from now: its ticks start, one ``stall_tick``
        apart, the first one tick from now, until :meth:`unwatch` (none at all when
        ``stall_tick`` is not positive)."""
        if self.ctx.timeouts.stall_tick > 0:
            self._waited = generation
            self._armed += 1
            self._deadline = anyio.current_time() + self._period()
            if self._scope is not None:
                self._scope.deadline = self._deadline

    def unwatch(self, generation: Generation) -> None:
        """The caller no longer waits for ``generation`` (released, or it left): no more
        ticks for it (the deadline is left as it is: the next wait moves it, and a tick
        that finds no wait turns it off)."""
        if self._waited is generation:
            self._waited = None

    async def run(self) -> None:
        """Tick until the execution ends."""
        ctx = self.ctx
        while True:
            armed = self._armed
            with anyio.CancelScope(deadline=self._deadline) as self._scope:
                await anyio.sleep_forever()
            self._scope = None
            if self._armed != armed:
                continue  # a wait armed it again meanwhile, for a later tick
            generation = self._waited
            if generation is None:  # nobody waits: off until the next wait
                self._deadline = math.inf
                continue
            now = anyio.current_time()  # the scope's clock, which says this tick is due
            self._deadline = now + self._period()  # the next one, a tick from this one
            quiet = now - ctx.activity.last_at
            if quiet >= ctx.timeouts.stall_threshold:
                await ctx.step(
                    generation.machine, PromptGenerationEvent.stall_detected, stalled_for=quiet
                )
