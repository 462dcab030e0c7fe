"""The runtime's interpreter of the flow table (:mod:`acpfsm.statecharts.flows`): it runs
one flow's steps in order, performing each with anyio and the transports.

Theory of operation
-------------------
A :class:`FlowRun` is one flow under way: where it is (``label``), the generation it acts
on, the predecessor a prompt waits behind, the locks it holds and its *values* (what its
caller passed, what the answers carried). :meth:`Interpreter.run` takes one step after the
other until an ``End``:

* ``Fire`` goes through :meth:`ExecutionContext.step <.context.ExecutionContext.step>`
  (fire, coordinate, perform); the first ``branch`` effect found decides the next step, and
  its arguments become values;
* ``Do`` calls the op's handler, which returns the answer's name (and values); the
  handlers are the only code that touches the transports, and translate their typed errors
  into answers there. A bound makes expiry the answer ``expired``: this is the one bounded
  request in the drivers;
* ``Wait``/``Check`` read the signals (:meth:`Interpreter.signal`), ``Take``/``Give`` the
  locks, ``Admit`` is BeginPrompt (:meth:`TurnDriver.admit <.turns.TurnDriver.admit>`),
  ``Spawn`` starts a flow in the execution's task group.

Every op every flow names has a handler, checked when the execution is built
(:meth:`Interpreter.check`), as the table itself is checked against the charts. A caller
that leaves (a cancellation) runs the flow's ``cancelled`` step, shielded, before its
cancellation goes on; a flow's ``on_exit`` signals are set however it ends.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

import anyio

from acpfsm.adapters.errors import AcpfsmError
from acpfsm.adapters.sync import Flag, Mutex
from acpfsm.statecharts import ChartMachine
from acpfsm.statecharts import flows as F
from acpfsm.statecharts.coordination import Fired

from ..errors import NotReadyForPrompts
from .context import ExecutionContext
from .flowrun import Answer, FlowRun, Later, OpHandler, check_table

if TYPE_CHECKING:
    from .status import StatusDriver
    from .stream import StreamDriver
    from .turns import Generation, TurnDriver

__all__ = ["Answer", "FlowRun", "Interpreter", "Later", "OpHandler"]

log = logging.getLogger("acpfsm.runtime")


class Interpreter:
    """Runs the flows of one execution (see the module docstring)."""

    def __init__(
        self,
        ctx: ExecutionContext,
        *,
        turns: TurnDriver,
        status: StatusDriver,
        stream: StreamDriver,
        locks: Mapping[F.Lock, Mutex],
        admission: Flag,
        finished: Callable[[], Awaitable[object]],
        spawn: Callable[[Callable[[], Coroutine[Any, Any, None]]], None],
    ) -> None:
        check_table()
        self.ctx = ctx
        self.turns = turns
        self.status = status
        self.stream = stream
        self.locks = locks
        self.admission = admission
        self._finished = finished
        self._spawn = spawn
        self.ops: dict[F.Op, OpHandler] = {}
        self.outcomes: dict[str, Callable[[FlowRun], None]] = {}
        """What a spawned flow's outcome means, by flow name (logged, never raised)."""
        self._background: dict[str, anyio.CancelScope] = {}
        self.stall_watch: Callable[[Generation], None] = _ignore
        self.stall_unwatch: Callable[[Generation], None] = _ignore

    def register(self, ops: Mapping[F.Op, OpHandler]) -> None:
        self.ops.update(ops)

    def check(self) -> None:
        """Every op a flow names has a handler (when the execution is built)."""
        missing = sorted(
            {
                f"{f.name}.{label}: {step.op}"
                for f in F.FLOWS.values()
                for label, step in f.steps.items()
                if isinstance(step, F.Do) and step.op not in self.ops
            }
        )
        if missing:
            raise AcpfsmError(f"no handler for the ops {', '.join(missing)}")

    # --- running -------------------------------------------------------------------------

    async def run(
        self,
        name: str,
        entry: str = "",
        *,
        generation: Generation | None = None,
        **values: Any,
    ) -> FlowRun:
        """Run flow ``name`` from ``entry`` to its end; returns the run (its ``outcome``)."""
        flow = F.FLOWS[name]
        run = FlowRun(flow, flow.start(entry), generation, values)
        try:
            await self._go(run)
        except anyio.get_cancelled_exc_class():
            if run.on_cancel:
                with anyio.CancelScope(shield=True):
                    run.label = run.on_cancel
                    await self._go(run)
            raise
        finally:
            for lock in reversed(run.locks):
                self.locks[lock].release()
            run.locks.clear()
            if run.generation is not None:
                for cond in flow.on_exit:
                    self.signal(run, cond).set()
        return run

    async def _go(self, run: FlowRun) -> None:
        flow = run.flow
        while True:
            step = flow.steps[run.label]
            nxt = await self._step(run, step)
            if nxt is None:
                return
            run.label = flow.after(run.label, nxt)

    def start(self, name: str, entry: str = "", **values: Any) -> None:
        """Start flow ``name`` in the background, ending the one of that name under way."""
        self.stop(name)
        scope = self._background[name] = anyio.CancelScope()

        async def body() -> None:
            with scope:
                await self.run(name, entry, **values)

        self._spawn(body)

    def stop(self, name: str) -> None:
        """End the background flow ``name`` (if one runs)."""
        scope = self._background.pop(name, None)
        if scope is not None:
            scope.cancel()

    # --- one step ------------------------------------------------------------------------

    async def _step(self, run: FlowRun, step: F.Step) -> str | None:
        if type(step) is F.Fire:
            return await self._fire(run, step)
        if type(step) is F.Do:
            return await self._do(run, step)
        if type(step) is F.Wait:
            return await self._wait(run, step)
        if type(step) is F.Check:
            return step.yes if self.signal(run, step.cond).is_set() else step.no
        if type(step) is F.Choose:
            return step.yes if run.values.get(step.value) else step.no
        if type(step) is F.Released:
            assert run.generation is not None
            result = run.generation.result
            return step.returned if result in F.RETURNED_RESULTS else step.raised
        if type(step) is F.Admit:
            return await self._admit(run, step)
        if type(step) is F.Take:
            await self.locks[step.lock].acquire()
            run.locks.append(step.lock)
            return F.NEXT
        if type(step) is F.Give:
            run.locks.remove(step.lock)
            self.locks[step.lock].release()
            return F.NEXT
        if type(step) is F.Signal:
            self.signal(run, step.cond).set()
            return F.NEXT
        if type(step) is F.Spawn:
            self._spawn_flow(run, step)
            return F.NEXT
        assert type(step) is F.End
        run.outcome = step.outcome
        return None

    def _machine(self, run: FlowRun, on: F.On) -> ChartMachine | None:
        turns = self.turns
        if on is F.On.GENERATION:
            return run.generation.machine if run.generation is not None else None
        if on is F.On.CURRENT:
            return turns.current.machine if turns.current is not None else None
        if on is F.On.PREDECESSOR:
            if run.predecessor is None:
                run.predecessor = turns.current
            return run.predecessor.machine if run.predecessor is not None else None
        if on is F.On.STAMPED:
            target = turns.route(int(run.values["stamped"]))
            return target.machine if target is not None else None
        return self.ctx.machines.get(on)

    async def _fire(self, run: FlowRun, step: F.Fire) -> str:
        machine = self._machine(run, step.on)
        if machine is None or machine.ended:
            return step.absent
        values = run.values
        data: dict[str, Any] = dict(step.fixed)
        for item in step.data:
            key, name = F.data_key(item)
            if name in values:
                value = values[name]
                data[key] = value.compute() if type(value) is Later else value
            elif name == "generation":
                data[key] = run.number
        fired: list[Fired]
        if step.locked and F.Lock.LIFECYCLE not in run.locks:
            async with self.locks[F.Lock.LIFECYCLE]:
                fired = await self.ctx.step(machine, step.event, **data)
        else:
            fired = await self.ctx.step(machine, step.event, **data)
        if step.bind:
            run.generation = self.turns.of(machine)
        for effect_name, to in step.branch:
            for _, fired_step in fired:
                for effect in fired_step.effects:
                    if effect.name == effect_name:
                        values.update(effect.args)
                        return to
        return step.then

    async def _do(self, run: FlowRun, step: F.Do) -> str:
        handler = self.ops[step.op]
        signal = step.signal
        if signal is not None and run.generation is not None:
            run.generation.renew(signal)
        try:
            if step.bound:
                answer: Answer = "expired"
                with anyio.move_on_after(self.bound(run, step.bound)):
                    answer = await handler(run)
            else:
                answer = await handler(run)
        finally:
            if signal is not None and run.generation is not None:
                self.signal(run, signal).set()
        if isinstance(answer, tuple):
            name, carried = answer
            run.values.update(carried)
        else:
            name = answer
        go = step.answers.get(name)
        if go is None:
            raise AcpfsmError(
                f"flow {run.flow.name}.{run.label}: {step.op} answered {name!r}, which the "
                "table does not declare",
                execution_id=self.ctx.id,
            )
        run.values.update(go.values)
        return go.to

    async def _wait(self, run: FlowRun, step: F.Wait) -> str:
        before = run.on_cancel
        if step.cancelled:  # for this wait only (a cancellation leaves it set for run())
            run.on_cancel = step.cancelled
        generation = run.generation
        if step.ticks and generation is not None:
            self.stall_watch(generation)
        try:
            nxt = await self._wait_for(run, step)
        finally:
            if step.ticks and generation is not None:
                self.stall_unwatch(generation)
        run.on_cancel = before
        return nxt

    async def _wait_for(self, run: FlowRun, step: F.Wait) -> str:
        if step.until is F.Cond.CARRIER:
            return await self._wait_carrier(run, step)
        if step.until is F.Cond.TIMER:
            await anyio.sleep(self.bound(run, step.bound))
            return step.expired
        if step.until is F.Cond.FINISHED:
            with anyio.CancelScope(shield=True):
                await self._finished()
            return step.happened
        flag = self.signal(run, step.until)
        if not step.bound:
            await flag.wait()
            return step.happened
        with anyio.move_on_after(self.bound(run, step.bound)):
            await flag.wait()
        return step.happened if flag.is_set() else step.expired

    async def _wait_carrier(self, run: FlowRun, step: F.Wait) -> str:
        """retryPromptAfterReconnect's wait: the carrier up within the bound (one deadline
        for all the attempts of the flow), polled as kandev polls (100 ms); it fails once
        the generation is released or nothing redials any more."""
        deadline = run.values.get("carrier_deadline")
        again = deadline is not None  # an attempt failed: the next poll first
        if deadline is None:
            deadline = run.values["carrier_deadline"] = anyio.current_time() + self.bound(
                run, step.bound
            )
        generation = run.generation
        assert generation is not None
        poll = self.ctx.timeouts.reconnect_poll
        with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
            if again:
                await anyio.sleep(poll)
            while not generation.done.is_set():
                carrier = self.stream.carrier()  # the AgentStream chart's answer
                if carrier:
                    return step.happened
                if carrier is not None:
                    break  # closed on purpose (stop) or given up: nothing will redial
                await anyio.sleep(poll)
        last = run.values.get("cause", "")
        run.values["error"] = (
            f"failed to trigger prompt: timed out waiting for updates stream reconnect: {last}"
        )
        return step.expired

    async def _admit(self, run: FlowRun, step: F.Admit) -> str:
        """BeginPrompt under the lifecycle lock (see :meth:`TurnDriver.admit`)."""
        ctx = self.ctx
        async with self.locks[F.Lock.LIFECYCLE]:
            try:
                generation, fired = self.turns.admit(bool(run.values.get("dispatch_only")))
            except NotReadyForPrompts:
                return step.refused
            on_admitted = run.values.get("on_admitted")
            if on_admitted is not None:
                on_admitted(generation.number)
            # resetStreamingStateWithHistory (R20): detach the unclaimed partial text and
            # reset the buffer in one step; a chunk arriving meanwhile is the new turn's
            partial = ctx.take_message()
            ctx.activity.active_tool_id = ctx.activity.active_tool_title = ""
            run.generation = generation
            if step.cancelled:
                run.on_cancel = step.cancelled
            await ctx.perform(fired)
        await ctx.persist_assistant(partial)
        return F.NEXT

    def _spawn_flow(self, run: FlowRun, step: F.Spawn) -> None:
        generation = run.generation
        done = self.outcomes.get(step.flow, _ignore_run)

        async def body() -> None:
            done(await self.run(step.flow, step.entry, generation=generation))

        self._spawn(body)

    # --- signals and bounds --------------------------------------------------------------

    def signal(self, run: FlowRun, cond: F.Cond) -> Flag:
        """The flag ``cond`` names for ``run``."""
        if cond is F.Cond.ADMISSION:
            return self.admission
        if cond is F.Cond.PREDECESSOR_DONE:
            assert run.predecessor is not None
            return run.predecessor.done
        generation = run.generation
        assert generation is not None, f"{run}: {cond} needs a generation"
        return generation.signal(cond)

    def bound(self, run: FlowRun, name: str) -> float:
        """A bound the table names: a ``Timeouts`` field, or the transport's redial policy."""
        if name == "redial_backoff":
            policy = self.ctx.transport_or_raise().redial_policy
            return policy.delay(int(run.values.get("failures", 0)))
        if name == "redial_budget":
            return self.ctx.transport_or_raise().redial_policy.budget
        value = float(getattr(self.ctx.timeouts, name))
        return value if value >= 0 else math.inf


def _ignore(generation: Generation) -> None:
    """No stall watchdog (a flow run outside an execution's task group)."""


def _ignore_run(run: FlowRun) -> None:
    """A spawned flow whose outcome nobody reads."""
