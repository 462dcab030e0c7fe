"""The stall watchdog: kandev's stall ticker (lifecycle/session.go ``waitForPromptDone``),
one per execution.

kandev starts a ticker for every wait: every ``stall_tick`` (1 minute) from the moment a
caller starts waiting for its prompt's turn, it compares the agent's quiet with
``stall_threshold`` (5 minutes). The same ticks here come from one task per execution that
sleeps in a cancel scope whose deadline the waiter moves (:meth:`StallWatchdog.watch` when
it starts waiting; :meth:`~StallWatchdog.unwatch` when it stops): a wait costs moving a
deadline, not entering and leaving a cancel scope. A tick fires
``stall_detected`` at the waited generation once the quiet lasted the threshold; its chart
reports a stall once per wait and ignores the fact where it does not apply.
"""

from __future__ import annotations

import math

import anyio

from ..clock import loop_clock
from .context import ExecutionContext
from .turns import Generation

__all__ = ["StallWatchdog"]


class StallWatchdog:
    """Ticks for the generation a caller waits for (see the module docstring)."""

    def __init__(self, ctx: ExecutionContext) -> None:
        self.ctx = ctx
        self._waited: Generation | None = None
        self._deadline = math.inf  # the next tick
        self._scope: anyio.CancelScope | None = None

    def watch(self, generation: Generation) -> None:
        """A caller waits for ``generation`` from now: its ticks start, one ``stall_tick``
        apart, the first one tick from now, until :meth:`unwatch`."""
        tick = self.ctx.timeouts.stall_tick
        if tick > 0:
            self._waited = generation
            self._arm(anyio.current_time() + tick)

    def unwatch(self, generation: Generation) -> None:
        """The caller no longer waits for ``generation`` (released, or it left): no more
        ticks for it (the deadline is left as it is: the next wait moves it, and a tick
        that finds no wait turns it off)."""
        if self._waited is generation:
            self._waited = None

    def _arm(self, deadline: float) -> None:
        self._deadline = deadline
        if self._scope is not None:
            self._scope.deadline = deadline

    async def run(self) -> None:
        """Tick until the execution ends (with a ``stall_tick`` that is not positive, no
        wait arms it: its ticks would spin)."""
        ctx = self.ctx
        tick = ctx.timeouts.stall_tick
        clock = loop_clock()
        while True:
            with anyio.CancelScope(deadline=self._deadline) as self._scope:
                await anyio.sleep_forever()
            self._scope = None
            now = clock()
            if now < self._deadline:
                continue  # armed again meanwhile, for a later tick
            generation = self._waited
            if generation is None:  # nobody waits: off until the next wait
                self._deadline = math.inf
                continue
            # the next tick of this wait; ticks a late wake missed are dropped, as Go's are
            self._deadline += tick * (math.floor((now - self._deadline) / tick) + 1)
            quiet = now - ctx.activity.last_at
            if quiet >= ctx.timeouts.stall_threshold:
                await ctx.step(generation.machine, "stall_detected", stalled_for=quiet)
