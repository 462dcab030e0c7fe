"""The model ``acpfsm verify`` explores: one execution's charts, composed through the
coordination table, driven by the runtime's own flow table (:mod:`acpfsm.statecharts.flows`)
through a synchronous interpreter, with every answer of the world chosen by the explorer.

Theory of operation
-------------------
A state of the model is the leaf of each chart of one execution (Execution, AgentStream,
SessionInit, one PromptGeneration per admitted generation; FirstActivity is left out, see
:meth:`World.freeze`), each generation's signals and its waiter's result, the *flows* under
way (each one's name, the label of the step it is at, its generation, its values and the
locks it holds: the same :class:`~acpfsm.statecharts.flows.Flow` tables the runtime's
interpreter runs), whether admission is open, the wakeup watch, whether the runtime is
shutting down and its task group closed, and what the agent owes (the turns it received
and has not ended; it ends them in the order received).

The flows are interpreted here as the runtime interprets them: a ``Fire`` fires through the
coordination table, the first named effect decides the next step, a ``Choose`` reads a
value, an ``Admit`` admits a generation. What differs is only the world: a ``Do`` is
answered by the environment (:meth:`World.answers`: each of the answers the runtime's op
can give in that state; a local chore, the init's steps and a request the transport answers
without a checkpoint are answered *at once*, the others are in flight and answered by an
action of their own), a ``Wait`` ends by an action (its signal set, or its bound, untimed:
any armed bound may expire at any point, so orders a clock would forbid are explored on
purpose), and a lock held by another flow makes a step wait.

Each *action* (:meth:`Explorer.enabled`) is one step of the world or of one flow, followed
by every step that needs no answer (:meth:`World.settle`); answers given at once branch
there, each branch a successor of its own (the label records the choices, so a
counterexample replays). The actions:

* callers: a prompt (ordinary or dispatch-only; one at a time, the prompt lock), a steer, a
  cancel, a stop, ``recover_stream``, a caller leaving its prompt (its flow's ``cancelled``
  step runs);
* the agent, through the event pump (one event at a time; not while another flow holds the
  lifecycle lock): the end of the oldest turn it owes (success, error, cancel-release), a
  handoff, a duplicate error for a turn it ended, a generation-0 end, activity and turn
  content: each runs its fact flow (COMPLETION, HANDOFF, LOSS, REDIALLED) to its end;
* the carrier: a loss (agentctl: redialled, clean, final; stdio: final, the process exiting
  0 or 1), the give-up's error events and final loss;
* a flow's step: an in-flight request's answer, a wait's end or expiry, a lock taken, a
  stall tick while a prompt waits, the admission of a prompt;
* with ``Bounds.crashes``, the execution's own code crashing (``CrashGuard``).

The session init's start-model policy and config settlement run inside its steps
(:mod:`.verify_init`); startup recovery is explored on its own (:mod:`.verify_startup`).

The runtime closing is not an action of its own: a fact whose meaning depends on it (an error
end, a process exit) is taken both ways; when the runtime closing changed what it did (the
execution STOPPED for it), the runtime stays closing (no caller acts any more but the stop),
otherwise the state is the one the other reading leads to.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from acpfsm.statecharts import Machine, PromptGeneration
from acpfsm.statecharts import flows as F
from acpfsm.statecharts.coordination import Rule

from .verify_actions import HANDLERS
from .verify_flows import FlowSteps
from .verify_init import Policy, Settlement, policy_answers, settlement_requested
from .verify_world import (
    _FINAL_LOSSES,
    _INIT_OPS,
    _KINDS,
    _LOCAL,
    _LOSS_EVENT,
    _LOSSES,
    AGENT,
    CALLER,
    CALLER_ACTIONS,
    DONE,
    ENDED,
    ENDED_TWICE,
    EXECUTION_ID,
    LEAF,
    NOT_RECEIVED,
    OWED_LEAVES,
    OWES,
    R_NAME,
    R_OWNER,
    S_CRASHED,
    S_EXE,
    S_FLOWS,
    S_GENS,
    SENT,
    SUPERSEDED,
    TASK,
    Branch,
    Label,
    Run,
    Violated,
    model_machine,
)

__all__ = [
    "CALLER",
    "CALLER_ACTIONS",
    "EXECUTION_ID",
    "LEAF",
    "OWED_LEAVES",
    "R_NAME",
    "R_OWNER",
    "S_CRASHED",
    "S_EXE",
    "S_FLOWS",
    "S_GENS",
    "Explorer",
    "Label",
    "Violated",
    "World",
]


class World(FlowSteps):
    """One state of the model: its flows run by :class:`~.verify_flows.FlowSteps`, the world
    they meet (the agent, the carrier, the answers) here."""

    # --- the environment ---------------------------------------------------------------

    def answers(self, run: Run, step: F.Do, *, at_once: bool) -> list[tuple[str, dict[str, Any]]]:
        """The answers ``step``'s op can give now: at once (``at_once``: answered without a
        checkpoint; empty when the request is in flight instead), or later (an action)."""
        op = step.op
        if op in _LOCAL or op in _INIT_OPS:
            if not at_once:
                return []
            if op is F.Op.END_TASKS:
                return [("ok", {"_close": True})]
            if op is F.Op.APPLY_START_MODEL and self.x.policy is not None:
                return policy_answers(self, self.x.policy)
            return list(_declared(step))
        if op is F.Op.MATERIALIZE:  # uploads (a steer's attachments) are in flight
            if bool(run.values.get("attachments")) == at_once:
                return []
            return [("ok", {}), ("failed", {})]
        if op is F.Op.SEND_PROMPT:
            if at_once:
                if not self.transport_open or not self.session:
                    return [("failed", {})]
                if self.carrier == "stdio":
                    return [("accepted", {})]
                return [] if self.connected else [("not_connected", _UNREACHABLE[self.carrier])]
            return [(a, _UNREACHABLE[self.carrier]) for a in self._prompt_answers(run.gen)]
        if at_once:
            return []
        if op is F.Op.SEND_CANCEL:
            out: list[tuple[str, dict[str, Any]]] = [(a, {}) for a in self._cancel_answers()]
            return [*out, ("expired", {})] if "expired" in step.answers else out
        if op is F.Op.SEND_STEER:
            ok = self.transport_open and self.connected and self.session
            return [(a, {}) for a in (("ok", "failed") if ok else ("failed",))]
        if op is F.Op.DIAL:
            if self.closed:
                return []
            out = [("failed", {"fatal": False}), ("refused", {"fatal": True})]
            if self.pump == 0 or (self.pump == 1 and run.ended):
                out.insert(0, ("ok", {}))
            return out
        if op is F.Op.STOP_AGENT:
            return [("ok", {})]
        if op is F.Op.AWAIT_STREAM:
            out = [("expired", {})]
            if self.x.stream.snapshot() == "connecting":
                # a fresh agent, or one that survived the app's restart (its session kept)
                out[:0] = _declared(step, only="ok")
            return out
        raise Violated(f"the model has no answers for {op}")  # pragma: no cover

    def _prompt_answers(self, g: int) -> tuple[str, ...]:
        """The answers to an agentctl prompt request in flight."""
        if self.gens[g - 1][AGENT] >= ENDED:  # the agent ended the turn: it had the request
            return ("accepted",)
        if not self.transport_open:  # the carrier ended while it waited
            return ("lost_while_waiting", "failed")
        if self.connected:
            return ("accepted", "not_connected", "lost_while_waiting", "failed", "cancel_release")
        return ("not_connected", "lost_while_waiting")

    def _cancel_answers(self) -> tuple[str, ...]:
        if not self.transport_open:
            return ("disconnected",)
        if self.connected:
            return ("acknowledged", "unacknowledged", "disconnected", "failed")
        return ("disconnected", "failed")

    def environment_reached(self, run: Run, op: F.Op) -> None:
        """What the world learns when a request is made (the agent receives a prompt)."""
        if (
            op is F.Op.SEND_CANCEL
            and run.gen > 0
            and self.leaf(run.gen) == "sending"
            and not run.values.get("_overdue")
        ):
            self.flag(
                "cancel_waits_for_its_prompt",
                f"session/cancel is sent for generation {run.gen} while its prompt request "
                "is still unanswered",
            )
        if op is F.Op.SEND_STEER and run.gen > 0 and not self.is_in(run.gen, "dispatched"):
            self.flag(
                "steer_only_into_a_live_dispatched_turn",
                f"a steer request is sent to generation {run.gen} in "
                f"{self.x.pg.path(self.leaf(run.gen))}",
            )
        if op is F.Op.SEND_PROMPT:
            if not self.settlement and self.x.settling is not None:
                self.flag(
                    "the_settlement_is_requested_before_any_prompt",
                    f"the prompt request of generation {run.gen} is sent before the session "
                    "init requested the config settlement",
                )
            if self.crashed:
                self.flag(
                    "nothing_dispatched_after_a_crash",
                    f"the prompt request of generation {run.gen} is sent after the execution "
                    "crashed",
                )
            if self.exe_ended:
                self.flag(
                    "nothing_dispatched_after_stop",
                    f"the prompt request of generation {run.gen} is sent after the execution "
                    "stopped",
                )
            record = self.gens[run.gen - 1]
            if record[AGENT] != NOT_RECEIVED:
                self.flag(
                    "dispatched_at_most_once",
                    f"the prompt request of generation {run.gen} is sent again after a send "
                    "that may have reached the agent",
                )
            run.values["_prev"] = record[AGENT]
            record[AGENT] = OWES  # the request is written: the agent may run it (again, H2)
            record[SENT] = False  # a cancel now waits for this send's answer

    def environment_answered(
        self, run: Run, op: F.Op, answer: str, values: Mapping[str, Any]
    ) -> None:
        if op is F.Op.SETTLE and self.x.settling is not None:
            settlement_requested(self, self.x.settling)
        elif op is F.Op.SEND_PROMPT:
            if answer in ("not_connected", "failed", "cancel_release"):
                # the request never reached the agent, or it refused it
                self.gens[run.gen - 1][AGENT] = run.values.get("_prev", NOT_RECEIVED)
            run.values.pop("_prev", None)
        elif op is F.Op.SEND_CANCEL and answer == "unacknowledged":
            for record in self.gens:  # the carrier gave the turn up: no end will come
                if record[AGENT] == OWES:
                    record[AGENT] = ENDED_TWICE
        elif op is F.Op.END_TASKS:
            self.close()
        elif op is F.Op.DIAL and answer == "ok":
            self.run_fact("redialled", session_id="s", attempts=1)

    # --- what a flow's end says (the properties checked there) ---------------------------

    def escalation_over(self, g: int) -> None:
        """A cancel escalation of generation ``g`` is over: the turn is over for the
        execution, which accepts prompts again (READY), unless the agent is gone or a later
        prompt began (the execution is that prompt's)."""
        x = self.x
        if g != self.current or x.exe.ended or x.exe.is_in("ready", "completed"):
            return
        if self.leaf(g) in _ENDED_OTHERWISE:
            return
        self.flag(
            "an_escalation_ends_the_turn",
            f"the cancel escalation of generation {g} is over and the execution is "
            f"{x.exe.snapshot().upper()}",
        )

    def action_over(self) -> None:
        """An action and every step that followed it are over: an idle escalation the
        chart decided on the way (``escalate_idle``: the turn had ended, the cancel was not
        answered) is over too (the flows take no answer on its way)."""
        for g in sorted(self.idle_escalations):
            self.escalation_over(g)

    def flow_over(self, run: Run, outcome: F.Outcome) -> None:
        if (
            outcome is F.Outcome.DONE
            and run.owner == CALLER
            and run.name == F.CANCEL.name
            and run.gen > 0
            and self.leaf(run.gen) in self.x.live - _ESCALATING
        ):
            self.flag(
                "a_cancel_is_done_only_once_its_turn_is_over",
                f"the cancel of generation {run.gen} is done while it is "
                f"{self.x.pg.path(self.leaf(run.gen))}",
            )

    def leave(self, run: Run) -> None:
        """The caller of ``run`` (a prompt) leaves: its flow's ``cancelled`` step runs. A
        turn the agent has, whose waiter was not released, gets a cancel (its flow for that
        generation under way: the background one, or the caller's own)."""
        g = run.gen
        owed = g > 0 and self.gens[g - 1][AGENT] == OWES and not self.gens[g - 1][DONE]
        self.cancel(run)
        if owed and not any(r.name == F.CANCEL.name and r.gen == g for r in self.runs):
            self.flag(
                "a_left_turn_is_cancelled",
                f"the caller of generation {g} left while the agent has its turn "
                f"({self.x.pg.path(self.leaf(g))}) and no cancel is on its way",
            )

    # --- the agent's facts -----------------------------------------------------------

    def run_fact(self, name: str, **values: Any) -> None:
        """A fact flow (the pump's) run to its end, atomically."""
        run = self.start(TASK, name, **values)
        for _ in range(64):
            if run not in self.runs:
                return
            if not self.advance(run):
                raise Violated(f"{run}: the pump's flow waits")
        raise Violated(f"{run}: the pump's flow does not end")  # pragma: no cover

    def completion(self, g: int, kind: str, shutting: bool, *, error: str = "agent error") -> None:
        """A terminal event stamped ``g`` (the COMPLETION flow)."""
        is_error = kind != "ok"
        closing = self.closing(shutting)
        self.event_claims = 0
        self.run_fact(
            "completion",
            stamped=g,
            unstamped=g == 0,
            is_error=is_error,
            cancel_release=kind == "cancel_release",
            error=error if is_error else "",
            stop_reason="end_turn",
            shutting_down=self.shutting,
        )
        if self.event_claims > 1:
            self.flag(
                "completion_claimed_at_most_once",
                f"one terminal event (generation {g}) was claimed {self.event_claims} times",
            )
        if g:
            record = self.gens[g - 1]
            record[AGENT] = ENDED if record[AGENT] == OWES else ENDED_TWICE
        self.closed_again(closing)

    def loss(self, kind: str, shutting: bool = False) -> None:
        """A StreamDisconnected of ``kind`` (the LOSS flow)."""
        reconnecting, exit_code, clean = _LOSS_EVENT[kind]
        closing = self.closing(shutting)
        if kind in _FINAL_LOSSES:
            self.pump = 2  # the carrier's event stream ends with it
        self.run_fact(
            "loss",
            redialable=reconnecting and exit_code is None,
            clean=clean,
            raw_error=kind,
            error="stream lost",
            exited=exit_code is not None,
            exit_code=exit_code,
            exit_error="exited",
            shutting_down=self.shutting,
        )
        if kind in _FINAL_LOSSES and self.gens and self.leaf(self.current) in _AT_THE_AGENT:
            self.flag(
                "lost_for_good_ends_the_turn",
                f"the carrier is gone for good ({kind}) and generation {self.current} is "
                f"still {self.x.pg.path(self.leaf(self.current))}",
            )
        self.closed_again(closing)

    def closing(self, shutting: bool) -> bool:
        """A fact taken while the runtime closes (``shutting``): True when that is new."""
        closing = shutting and not self.shutting
        self.shutting = self.shutting or shutting
        self._ended_before = self.exe_ended
        return closing

    def closed_again(self, closing: bool) -> None:
        """After a fact taken while the runtime newly closes: the runtime stays closing only
        when that changed what the fact did (the execution STOPPED for it); otherwise the
        state is the one the fact leads to anyway (so it is explored once)."""
        if closing and (self._ended_before or not self.exe_ended):
            self.shutting = False


#: the live leaves a cancel may be done in: escalated by another cancel, or handed off by the
#: agent (nothing waits on that turn: its waiter was released and the cancel sent)
_ESCALATING = frozenset({"escalating", "releasing", "handed_off"})
#: a turn that ended otherwise while its cancel escalated (its carrier lost, the app's stop):
#: the execution follows that end, not the escalation
_ENDED_OTHERWISE = frozenset({"disconnected", "stopped"})
#: the live leaves where the agent has (or may have) the turn: a loss for good ends them
_AT_THE_AGENT = OWED_LEAVES | {"sending"}

_UNREACHABLE = {
    "agentctl": {"reconnectable": True, "error": "not connected"},
    "stdio": {"reconnectable": False, "error": "not connected"},
}


def _declared(step: F.Do, only: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every answer the table declares for ``step`` (or its answer ``only``), over its value
    domains."""
    domains = [[(name, v) for v in domain] for name, domain in step.domains]
    for answer in step.answers:
        if only and answer != only:
            continue
        if answer in ("expired",) and step.op not in (F.Op.WAIT_FOR_CATALOG,):
            continue
        if answer == "ok":
            for combo in itertools.product(*[d for d in domains if d[0][0] != "error_class"]):
                yield answer, dict(combo)
        elif answer == "failed" and any(d[0][0] == "error_class" for d in domains):
            for _, cls in next(d for d in domains if d[0][0] == "error_class"):
                yield answer, {"error_class": cls}
        else:
            yield answer, {}


# --- the explorer's view of the charts ----------------------------------------------------------


class Flows:
    """The flow table the model runs: the runtime's own (:data:`~.flows.FLOWS`), unless a
    test passes a modified copy (a seeded bug)."""

    def __init__(self, table: Mapping[str, F.Flow] | None = None) -> None:
        self.table: Mapping[str, F.Flow] = F.FLOWS if table is None else table
        self.effect_flows = F.EFFECT_FLOWS


class Explorer:
    """The machines the model runs on, and the actions (see the module docstring)."""

    def __init__(
        self,
        charts: Mapping[str, Any],
        table: tuple[Rule, ...] | None,
        generations: int,
        flows: Mapping[str, F.Flow] | None = None,
        *,
        crashes: bool = False,
    ) -> None:
        self.charts = charts
        self.table = table
        self.flows = Flows(flows)
        self.generations = generations
        self.crashes = crashes
        start = _starter(charts)
        self.exe = start("execution")
        self.fa = start("first_activity")
        self.stream = start("agent_stream")
        self.init = start("session_init")
        self.pg_chart = charts["prompt_generation"]
        self.pg = self.pg_chart.compiled()
        self.pg_name = self.pg.name
        self.exe_name = self.exe.compiled.name
        self.fa_name = self.fa.compiled.name
        self.stream_name = self.stream.compiled.name
        self.init_name = self.init.compiled.name
        self.policy = (
            Policy(charts["start_model_policy"]) if "start_model_policy" in charts else None
        )
        self.settling = (
            Settlement(charts["config_settlement"]) if "config_settlement" in charts else None
        )
        # the terminal outcomes are the shipped chart's (what the property protects), so a
        # chart that lets one be left again is caught, not redefined
        self.outcomes = PromptGeneration.compiled().absorbing_states(SUPERSEDED)
        self.live = frozenset(leaf for leaf in self.pg.table if "live" in self.pg.ancestors[leaf])
        self._generations: dict[tuple[int, bool, bool], Machine] = {}
        self.current: Machine | None = None
        self.covered: set[tuple[str, str, str, str]] = set()
        self.steps: set[tuple[str, str]] = set()
        """``(flow, label)`` of every flow step the exploration took."""
        self._machines: dict[str, Machine] = {
            self.exe_name: self.exe,
            self.fa_name: self.fa,
            self.stream_name: self.stream,
            self.init_name: self.init,
        }

    def generation(self, number: int, dispatch_only: bool, waited_before: bool) -> Machine:
        key = (number, dispatch_only, waited_before)
        machine = self._generations.get(key)
        if machine is None:
            machine = model_machine(
                self.pg_chart,
                {"generation": number},
                generation=number,
                dispatch_only=dispatch_only,
                waited_before=waited_before,
            )
            self._generations[key] = machine
        return machine

    def lookup(self, chart: str) -> Machine | None:
        """The execution's current machine of ``chart`` (what coordination reaches)."""
        if chart == self.pg_name:
            return self.current
        return self._machines.get(chart)

    def initial(self, carrier: str) -> tuple[Any, ...]:
        w = World(self)
        w.reset(carrier)
        return w.freeze()

    # --- enabled actions ----------------------------------------------------------------

    def enabled(self, w: World) -> list[Label]:
        out: list[Label] = []
        add = out.append
        if not w.started:
            add(("run",))
            add(("start_failed",))
            return out
        closing = (False, True) if not w.shutting else (True,)
        locked = w.holder(F.Lock.LIFECYCLE) is not None
        # the agent, through the pump: it runs turns only in a session (before the init
        # ends, an unclaimed generation-0 end is still possible, R10)
        init_over = not self.init.is_in("pending", "initializing")
        turns = not init_over or w.session
        if not w.closed and w.pump == 0:
            if self.stream.is_in("connecting", "connected"):
                add(("activity",))
                if turns:
                    add(("content",))
                if not locked and turns:
                    for kind in _KINDS:
                        for shutting in closing if kind != "ok" else (w.shutting,):
                            add(("complete", 0, kind, shutting))
                    owed = _oldest_owed(w)
                    if owed:
                        for kind in _KINDS:
                            for shutting in closing if kind != "ok" else (w.shutting,):
                                add(("complete", owed, kind, shutting))
                        add(("handoff", owed))
                    for number, record in enumerate(w.gens, 1):
                        if record[AGENT] == ENDED:
                            add(("complete", number, "error", w.shutting))
                if not locked:
                    for kind in _LOSSES[w.carrier]:
                        for shutting in closing if kind == "exit1" else (w.shutting,):
                            add(("loss", kind, shutting))
            elif self.stream.is_in("reconnecting") and not locked:
                add(("loss", "redial", w.shutting))
                add(("loss", "final", w.shutting))
        if not w.closed and w.pump == 1 and not locked:
            owed = _oldest_owed(w)
            add(("give_up_error", owed) if owed else ("give_up_loss",))
        # callers (none acts once the runtime is closing, but the stop)
        names = [r.name for r in w.runs if r.owner == CALLER]
        if not w.closed:
            if not w.shutting:
                prompting = any(r.name == "prompt" for r in w.runs)
                if w.admission and not prompting and w.current < self.generations:
                    add(("prompt", "ordinary"))
                    add(("prompt", "dispatch_only"))
                if w.admission and "steer" not in names:
                    add(("steer",))
                if "cancel" not in names and w.gens and not locked:
                    add(("cancel",))
                if w.session and self.exe.is_in("failed") and w.connected:
                    add(("recover",))
            if "stop" not in names and not locked:
                add(("stop",))
        # the execution's own code failing, at any point once it runs (runtime/session/crash.py;
        # while a flow holds the lifecycle lock its release waits for it, see _crash)
        if w.started and not w.closed and not w.crashed and not locked and self.crashes:
            add(("crash",))
        # the flows' steps
        for i, run in enumerate(w.runs):
            self._flow_actions(w, i, run, add)
        return out

    def _flow_actions(self, w: World, i: int, run: Run, add: Callable[[Label], None]) -> None:
        step = self.flows.table[run.name][run.label]
        leaves = run.owner == CALLER and run.name == "prompt" and not run.values.get("initial")
        if leaves and (not run.on_cancel or w.lock_free_for(run)):
            add(("leave", i))
        if isinstance(step, F.Do):
            for k, (answer, _) in enumerate(w.answers(run, step, at_once=False)):
                add(("answer", i, answer, k))  # k: which of its values
            if run.ended:
                add(("drop", i))
        elif isinstance(step, F.Wait):
            if step.until not in (F.Cond.ADMISSION, F.Cond.FINISHED):
                if w.signal(run, step.until):
                    add(("wait", i, True))
                if step.bound:
                    add(("wait", i, False))
                if step.ticks and not w.gens[run.gen - 1][DONE]:
                    add(("tick", i))
        elif isinstance(step, F.Admit):
            if w.lock_free_for(run):
                add(("admit", i))
        elif isinstance(step, F.Take | F.Fire) and w.lock_free_for(run):
            add(("go", i))  # a lock released meanwhile: the step goes on

    # --- applying one action ------------------------------------------------------------

    def successors(
        self, w: World, state: tuple[Any, ...], label: Label
    ) -> list[tuple[Label, tuple[Any, ...] | None, list[tuple[str, str]], str]]:
        """Every state ``label`` leads to from ``state``, one per way of answering what is
        answered at once on the way (each a search over the intermediate states, so two
        answer sequences that meet are followed once): ``(full label, state or None when a
        step crashed, the violations, the crash's message)``."""
        out: list[tuple[Label, tuple[Any, ...] | None, list[tuple[str, str]], str]] = []
        # (intermediate state, the run at its branch point, choices so far, violations so
        # far, the number of answers, the idle escalations decided so far)
        todo: list[
            tuple[tuple[Any, ...], tuple[Any, ...], tuple[int, ...], list[Any], int, set[int]]
        ] = []
        seen: set[tuple[Any, ...]] = set()

        def settled(
            choices: tuple[int, ...], before: list[Any], step: Callable[[], object]
        ) -> None:
            full = (*label, "+", *choices) if choices else label
            try:
                step()
                w.settle()
                w.action_over()
            except Branch as b:
                middle = w.freeze()
                key = (middle, b.run)
                if key not in seen:
                    seen.add(key)
                    idle = set(w.idle_escalations)
                    todo.append((middle, b.run, choices, before + w.violations, b.count, idle))
                return
            except Violated as exc:
                out.append((full, None, before + w.violations, exc.message))
                return
            for run in w.runs:
                self.steps.add((run.name, run.label))
            out.append((full, w.freeze(), before + w.violations, ""))

        w.thaw(state)
        w.choices, w.chosen = [], 0
        settled((), [], lambda: HANDLERS[label[0]](self, w, label))
        while todo:
            middle, frozen, choices, before, count, idle = todo.pop()
            for choice in range(count):
                w.thaw(middle)
                w.idle_escalations = set(idle)
                w.choices, w.chosen = [choice], 0
                run = next(r for r in w.runs if r.freeze() == frozen)
                settled((*choices, choice), before, functools.partial(w.advance, run))
        return out

    def apply(self, w: World, label: Label) -> None:
        if label and "+" in label:  # a replay: the answers given at once were chosen
            at = label.index("+")
            w.choices, w.chosen = list(label[at + 1 :]), 0
            label = label[:at]
        HANDLERS[label[0]](self, w, label)
        w.settle()
        w.action_over()
        for run in w.runs:
            self.steps.add((run.name, run.label))


def _oldest_owed(w: World) -> int:
    for number, g in enumerate(w.gens, 1):
        if g[AGENT] == OWES:
            return number
    return 0


def _starter(charts: Mapping[str, Any]) -> Callable[[str], Machine]:
    def start(name: str) -> Machine:
        return model_machine(charts[name])

    return start
