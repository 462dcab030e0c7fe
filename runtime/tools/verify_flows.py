"""``acpfsm verify``'s interpreter of the flow table: the same steps the runtime's
interpreter takes (:mod:`acpfsm.runtime.session.interpreter`), synchronously, on the model's
machines, each fire through the coordination table, the properties checked on the way. What
the world answers is the environment's (:class:`~.verify_model.World`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from acpfsm.statecharts import ChartError, Machine, Step
from acpfsm.statecharts import flows as F
from acpfsm.statecharts.coordination import Fired, fire
from acpfsm.statecharts.names import (
    AgentStreamEffect,
    EventName,
    ExecutionEffect,
    ExecutionEvent,
    FirstActivityEvent,
    PromptGenerationEffect,
    PromptGenerationEvent,
    SessionInitEffect,
)

from .verify_world import (
    _COND_INDEX,
    _SETTLE_LIMIT,
    _SIGNAL_INDEX,
    CLAIMED,
    DO,
    DONE,
    LEAF,
    OUT,
    OVER,
    RESULT,
    SUPERSEDED,
    TASK,
    Branch,
    Run,
    Violated,
    WorldState,
)

__all__ = ["FlowSteps"]


class FlowSteps(WorldState):
    """The flows' steps, run on the model (see the module docstring)."""

    # --- firing: the runtime's ctx.fire + perform ----------------------------------------

    def machine(self, run: Run | None, on: F.On) -> Machine | None:
        x = self.x
        if on is F.On.GENERATION:
            return self.machines[run.gen - 1] if run is not None and run.gen > 0 else None
        if on is F.On.CURRENT:
            return self.machines[-1] if self.machines else None
        if on is F.On.PREDECESSOR:
            assert run is not None
            if run.pred < 0:
                run.pred = self.current
            return self.machines[run.pred - 1] if run.pred > 0 else None
        if on is F.On.STAMPED:
            assert run is not None
            stamped = int(run.values["stamped"])
            g = self.current if stamped == 0 else stamped
            return self.machines[g - 1] if 0 < g <= self.current else None
        return x.lookup(str(on))

    def fire(self, machine: Machine, event: EventName, **data: Any) -> list[Fired]:
        x = self.x
        try:
            fired = fire(x.lookup, machine, event, data, table=x.table)
        except ChartError as exc:
            raise Violated(f"{type(exc).__name__}: {exc}") from None
        for m, step in fired:
            self._check(cast(Machine, m), step)
            self.fired.append((m, step))
        for m, step in fired:
            self._perform(cast(Machine, m), step)
        for m, step in fired:
            if step.chart == x.pg_name and "cancel_escalated" in step.entered:
                self.escalation_over(int(cast(Machine, m).constant("generation")))
        return fired

    def status_fire(self, event: EventName, **data: Any) -> list[Fired]:
        """A fact for the Execution chart, moot once it ended."""
        if self.exe_ended:
            return []
        return self.fire(self.x.exe, event, **data)

    def _check(self, machine: Machine, step: Step) -> None:
        x = self.x
        x.covered.add((step.chart, step.source, step.event, step.target))
        if step.chart == x.init_name and step.event == "stream_ready" and step.target == "ready":
            self.settlement = True  # a reattached session: its settlement was before the restart
        if step.chart != x.pg_name:
            return
        g = int(machine.constant("generation"))
        record = self.gens[g - 1]
        before = record[LEAF]
        after = step.state
        record[LEAF] = after
        config = x.pg.ancestors[before]
        if SUPERSEDED in config and step.source != step.target:
            self.flag(
                "superseded_stays_superseded",
                f"generation {g} left superseded: {step.source} --{step.event}--> {step.target}",
            )
        if step.event == PromptGenerationEvent.steered and "dispatched" not in config:
            self.flag(
                "steer_only_into_a_live_dispatched_turn",
                f"steered fired for generation {g} in {x.pg.path(before)}",
            )
        if "dispatched" in step.entered and self.crashed:
            self.flag(
                "nothing_dispatched_after_a_crash",
                f"generation {g} entered dispatched ({step.event}) after the execution crashed",
            )
        if "dispatched" in step.entered and self.exe_ended:
            self.flag(
                "nothing_dispatched_after_stop",
                f"generation {g} entered dispatched ({step.event}) after the execution stopped",
            )
        if step.target != step.source:
            if after in x.outcomes:
                if record[OUT] == 2:
                    self.flag(
                        "one_outcome_per_generation",
                        f"generation {g} enters a second terminal outcome ({x.pg.path(after)}, "
                        f"{step.event})",
                    )
                record[OUT] = 2
            elif after == SUPERSEDED and not record[OUT]:
                record[OUT] = 1

    def _perform(self, machine: Machine, step: Step) -> None:
        """The effects the model keeps track of (the others publish, record or log)."""
        x = self.x
        chart = step.chart
        for effect in step.effects:
            name = effect.name
            if chart == x.pg_name:
                record = self.gens[int(machine.constant("generation")) - 1]
                if name == PromptGenerationEffect.release_waiter:
                    record[DONE] = True
                    record[RESULT] = str(effect["result"])
                elif name == PromptGenerationEffect.end_cancel:
                    record[OVER] = True
                elif name == PromptGenerationEffect.escalate_idle:
                    self.idle_escalations.add(int(machine.constant("generation")))
                elif name == PromptGenerationEffect.claim_outcome:
                    self.event_claims += 1
                    if record[CLAIMED]:
                        self.flag(
                            "completion_claimed_at_most_once",
                            f"generation {machine.constant('generation')} claims a second "
                            f"completion ({step.event}: {step.source} -> {step.target})",
                        )
                    record[CLAIMED] = True
            elif chart == x.exe_name:
                if name == ExecutionEffect.watch_for_wakeup:
                    self.watch = True
                elif name == ExecutionEffect.unwatch_wakeup:
                    self.watch = False
                elif name == ExecutionEffect.announce_first_activity:
                    if not x.fa.ended:
                        self.fire(x.fa, FirstActivityEvent.activity_seen)
                elif name == ExecutionEffect.end_wakeup_turn:
                    self.event_claims += 1
            elif chart == x.stream_name:
                started = self.flows.effect_flows.get(name)
                if started is not None:
                    self.background(started[0], started[1], dict(effect.args))
                elif name == AgentStreamEffect.give_up and self.pump == 0:
                    self.pump = 1
            elif chart == x.init_name:
                if name == SessionInitEffect.open_admission:
                    self.admission = True
                elif name == SessionInitEffect.send_initial_prompt and not self.closed:
                    self.start(
                        TASK, "prompt", initial=True, validate_status=False, dispatch_only=False
                    )

    # --- flows --------------------------------------------------------------------------

    def start(self, owner: str, name: str, entry: str = "", gen: int = 0, **values: Any) -> Run:
        flow = self.flows.table[name]
        values.setdefault("error", "verify")  # what a failure says: nothing the charts read
        run = Run(owner, name, flow.start(entry), gen, values, flow.cancelled)
        self.runs.append(run)
        step = flow[run.label]
        if isinstance(step, F.Do):
            self.environment_reached(run, step.op)
        return run

    def background(self, name: str, start: bool, values: dict[str, Any]) -> None:
        """EFFECT_FLOWS: start ``name`` (ending the one under way), or end it. One whose
        request is in flight may still answer (the dial it made)."""
        for run in list(self.runs):
            if run.name == name and not run.ended:
                step = self.flows.table[name][run.label]
                if isinstance(step, F.Do):
                    run.ended = True
                else:
                    self.runs.remove(run)
        if start and not self.closed:
            self.start(TASK, name, **{k: v for k, v in values.items() if k == "failures"})

    def end(self, run: Run) -> None:
        """The flow is over: its locks given back, its ``on_exit`` signals set."""
        if run in self.runs:
            self.runs.remove(run)
        run.locks.clear()
        if run.gen > 0:
            record = self.gens[run.gen - 1]
            for cond in self.flows.table[run.name].on_exit:
                record[_SIGNAL_INDEX[cond]] = True

    def signal(self, run: Run, cond: F.Cond) -> bool:
        if cond is F.Cond.ADMISSION:
            return self.admission
        if cond is F.Cond.FINISHED:
            return self.closed
        if cond is F.Cond.PREDECESSOR_DONE:
            return bool(self.gens[run.pred - 1][DONE])
        if cond is F.Cond.CARRIER:
            return self.connected and not self.gens[run.gen - 1][DONE]
        if cond is F.Cond.TIMER:
            return False
        return bool(self.gens[run.gen - 1][_COND_INDEX[cond]])

    def choose(self, run: Run, count: int) -> int:
        """The next answer given at once: the recorded choice, else a branch."""
        if count == 1:
            return 0
        if self.chosen < len(self.choices):
            choice = self.choices[self.chosen]
            self.chosen += 1
            return choice
        raise Branch(count, run.freeze())

    def settle(self) -> None:
        """Every flow takes the steps that need no answer, until each one waits."""
        for _ in range(_SETTLE_LIMIT):
            moved = False
            for run in list(self.runs):
                if run in self.runs and self.advance(run):
                    moved = True
            self.settle_superseded()
            if not moved:
                return
        raise Violated("the flows do not come to rest")

    def settle_superseded(self) -> None:
        """A cancel whose generation was superseded can only be ignored from then on (the
        chart ignores every event there): it runs to its end at once, each wait taken as
        over, each answer as acknowledged, so its waits do not multiply the states of the
        generations after it."""
        for run in list(self.runs):
            if run.name != "cancel" or run.gen <= 0 or self.leaf(run.gen) != SUPERSEDED:
                continue
            for _ in range(32):
                if run not in self.runs:
                    break
                step = self.flows.table["cancel"][run.label]
                if isinstance(step, F.Do):
                    self.answer(run, step, "acknowledged", {})
                elif isinstance(step, F.Wait):
                    happened = self.signal(run, step.until)
                    self.goto(run, step.happened if happened else step.expired)
                elif not self.advance(run):
                    break

    def goto(self, run: Run, to: str) -> None:
        flow = self.flows.table[run.name]
        run.label = flow.after(run.label, to)
        step = flow[run.label]
        if isinstance(step, F.Do):
            self.environment_reached(run, step.op)

    def advance(self, run: Run) -> bool:
        """Take ``run``'s next step if it needs no answer (or its answer is given at once);
        False when it waits."""
        flow = self.flows.table[run.name]
        step = flow[run.label]
        if isinstance(step, F.Fire):
            if step.locked and not self.lock_free_for(run):
                return False
            self.fire_step(run, step)
        elif isinstance(step, F.Do):
            answers = self.answers(run, step, at_once=True)
            if not answers:
                return False
            answer, values = answers[self.choose(run, len(answers))]
            self.answer(run, step, answer, values)
        elif isinstance(step, F.Wait):
            if (step.until is F.Cond.ADMISSION and self.admission) or (
                step.until is F.Cond.FINISHED and self.closed
            ):
                self.goto(run, step.happened)
            else:
                return False
        elif isinstance(step, F.Check):
            self.goto(run, step.yes if self.signal(run, step.cond) else step.no)
        elif isinstance(step, F.Choose):
            self.goto(run, step.yes if run.values.get(step.value) else step.no)
        elif isinstance(step, F.Released):
            result = self.gens[run.gen - 1][RESULT]
            self.goto(run, step.returned if result in F.RETURNED_RESULTS else step.raised)
        elif isinstance(step, F.Admit):
            return False  # an action of its own (it takes the lifecycle lock)
        elif isinstance(step, F.Take):
            if not self.lock_free_for(run, step.lock):
                return False
            if step.lock not in run.locks:
                run.locks.append(step.lock)
            self.goto(run, F.NEXT)
        elif isinstance(step, F.Give):
            run.locks.remove(step.lock)
            self.goto(run, F.NEXT)
        elif isinstance(step, F.Signal):
            self.gens[run.gen - 1][_SIGNAL_INDEX[step.cond]] = True
            self.goto(run, F.NEXT)
        elif isinstance(step, F.Spawn):
            if not self.closed:  # the execution's task group is gone: it never runs
                self.start(TASK, step.flow, step.entry, gen=run.gen)
            self.goto(run, F.NEXT)
        else:
            assert isinstance(step, F.End)
            self.end(run)
            self.flow_over(run, step.outcome)
        return True

    def fire_step(self, run: Run, step: F.Fire) -> None:
        machine = self.machine(run, step.on)
        if machine is None or machine.ended:
            self.goto(run, step.absent)
            return
        data: dict[str, Any] = dict(step.fixed)
        for item in step.data:
            key, name = F.data_key(item)
            if name in run.values:
                data[key] = run.values[name]
            elif name == "generation":
                data[key] = run.gen
        if step.on is F.On.STREAM and self.x.stream.ended:
            self.goto(run, step.absent)
            return
        fired = self.fire(machine, step.event, **data)
        for key in _TRANSIENT.intersection(step.data):
            run.values.pop(key, None)  # an answer's values, now told to the chart
        if step.bind and step.on in (F.On.CURRENT, F.On.STAMPED):
            run.gen = int(machine.constant("generation"))
        for effect_name, to in step.branch:
            for _, fired_step in fired:
                for effect in fired_step.effects:
                    if effect.name == effect_name:
                        run.values.update((k, v) for k, v in effect.args if k in _KEPT)
                        self.goto(run, to)
                        return
        self.goto(run, step.then)

    def answer(self, run: Run, step: F.Do, answer: str, values: Mapping[str, Any]) -> None:
        """``run``'s request ``step`` answered ``answer``."""
        go = step.answers[answer]
        self.environment_answered(run, step.op, answer, values)
        if step.signal is not None and run.gen > 0:
            self.gens[run.gen - 1][_SIGNAL_INDEX[step.signal]] = True
        run.values.update(values)
        run.values.update(go.values)
        if run.ended:  # ended from outside: a late answer only reports (see background)
            run.ended = False
        self.goto(run, go.to)

    def admit(self, run: Run) -> None:
        """BeginPrompt, under the lifecycle lock (TurnDriver.admit)."""
        step = self.flows.table[run.name][run.label]
        assert isinstance(step, F.Admit)
        if self.gens and not run.values.get("_overdue"):
            pred = self.gens[-1]
            if pred[DO] and self.is_in(self.current, "dispatched"):
                self.flag(
                    "dispatch_only_barrier_holds",
                    f"a prompt passed the barrier while dispatch-only generation "
                    f"{self.current} is {self.x.pg.path(self.leaf(self.current))}",
                )
        if self.exe_ended or self.crashed:
            # NotReadyForPrompts: stopped (R24), or crashed (the Crash chart's crash_checked
            # answers raise_crash; its caller gets the crash)
            self.goto(run, step.refused)
            return
        if self.gens:
            self.fire(self.machines[-1], PromptGenerationEvent.superseded_by_successor)
        number = len(self.gens) + 1
        dispatch_only = bool(run.values.get("dispatch_only"))
        # an earlier prompt waited: kandev's promptFinished barrier (TurnDriver.admit)
        before = any(not gen[DO] for gen in self.gens)
        machine = self.x.generation(number, dispatch_only, before)
        machine.restore(self.x.pg.initial)
        self.gens.append(
            [dispatch_only, machine.snapshot(), False, False, False, False, "", 0, 0, False]
        )
        self.machines.append(machine)
        self.x.current = machine
        run.gen = number
        if step.cancelled:
            run.on_cancel = step.cancelled
        self.fire(self.x.exe, ExecutionEvent.prompt_began)
        self.goto(run, F.NEXT)

    def cancel(self, run: Run) -> None:
        """The flow's caller (or task group) cancels it: its ``cancelled`` step runs to the
        end, shielded (no answer in flight is awaited), then it is gone."""
        if run.on_cancel:
            run.label = run.on_cancel
            for _ in range(64):
                if run not in self.runs:
                    return
                step = self.flows.table[run.name][run.label]
                if isinstance(step, F.Do):
                    answers = self.answers(run, step, at_once=True) or [("ok", {})]
                    self.answer(run, step, *answers[0])
                elif isinstance(step, F.Wait):
                    self.goto(run, step.expired if step.bound else step.happened)
                elif not self.advance(run):
                    self.end(run)
                    return
            raise Violated(f"{run}: its cancellation does not end")
        self.end(run)

    def close(self) -> None:
        """The stop's END_TASKS: the execution's task group is cancelled (the pump, the init,
        the initial prompt, the redials and timers, the background cancels)."""
        self.closed = True
        self.pump = 2
        for run in list(self.runs):
            if run.owner == TASK:
                self.cancel(run)

    # --- what the environment answers (World's) -------------------------------------------

    def answers(self, run: Run, step: F.Do, *, at_once: bool) -> list[tuple[str, dict[str, Any]]]:
        raise NotImplementedError  # pragma: no cover - World's

    def environment_reached(self, run: Run, op: F.Op) -> None:
        raise NotImplementedError  # pragma: no cover - World's

    def environment_answered(
        self, run: Run, op: F.Op, answer: str, values: Mapping[str, Any]
    ) -> None:
        raise NotImplementedError  # pragma: no cover - World's

    def escalation_over(self, g: int) -> None:
        raise NotImplementedError  # pragma: no cover - World's

    def flow_over(self, run: Run, outcome: F.Outcome) -> None:
        raise NotImplementedError  # pragma: no cover - World's


#: the values answers carry that a chart reads once (the init's): dropped once told, so two
#: answers whose facts lead to the same place meet
_TRANSIENT = frozenset(
    name
    for f in F.FLOWS.values()
    for step in f.steps.values()
    if isinstance(step, F.Do)
    for name, _ in step.domains
)
#: the values the model keeps of a branch effect's arguments (what a later step reads)
_KEPT = frozenset({"final"})
