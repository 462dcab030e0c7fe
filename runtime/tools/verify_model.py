"""The model ``acpfsm verify`` explores: one execution's charts, composed through the
coordination table, driven the way the drivers drive them, with every answer of the world
chosen by the explorer.

Theory of operation
-------------------
A state of the model is the leaf of each chart of one execution (Execution, AgentStream,
SessionInit, one PromptGeneration per admitted generation; FirstActivity is left out, see
:meth:`World.freeze`) plus the little data the drivers keep: each generation's ``done`` /
``sent`` / ``returned`` / ``turn_over`` events and its waiter's result, the callers' flows
under way and where they wait, the armed timers, a dial in flight, whether admission is open,
the wakeup watch, whether the runtime is shutting down, and what the agent owes (the turns it
received and has not ended; it ends them in the order received).

Each *action* is one atomic step of a driver (a fire, what the coordination table makes
follow, and the effects the model cares about): steps separated by a lock or a request in the
runtime are separate actions. The decisions between steps are the drivers' own functions
(:mod:`acpfsm.runtime.session.flows`): which flow effect a cancel acts on next, what an answer
is for the chart, whether a prompt is admitted, which generation a completion goes to, what
a loss tells the charts. What the model writes itself is only the *shape* of each flow (which
wait follows which step, as the drivers' ``await`` sequence has it) and the environment (what
the agent, the carrier and the clock may answer, and when).

Actions (:meth:`Explorer.enabled`):

* callers: a prompt (ordinary or dispatch-only; one at a time, the prompt lock), a steer, a
  cancel, a stop, ``recover_stream``, a caller leaving its prompt (``waiter_abandoned``);
* the agent, through the event pump (one event at a time; not while a steer holds the
  lifecycle lock): the end of the oldest turn it owes (success, error, cancel-release), a
  handoff, a duplicate error for a turn it ended, a generation-0 end (unstamped, or a wakeup
  turn's), activity and turn content;
* the carrier: a loss (agentctl: redialled, clean, final; stdio: final, the process exiting
  0 or 1), the dials' answers, the give-up's error events and final loss;
* the answers to the runtime's requests (an agentctl prompt request in flight: accepted /
  not connected / lost while waiting / failed / released on a cancel; a stdio prompt, and any
  request on a carrier that is gone or down, comes back at once, as the transports answer it
  without a checkpoint; a cancel: acknowledged / unacknowledged / disconnected / failed; a
  steer: ok / failed), and the end of a stop's graceful phase (the execution's task group is
  cancelled);
* every armed timer (the bounds of :data:`~acpfsm.runtime.session.flows.FLOW`, the stall tick,
  the stream wait, the redial budget). Timers are untimed: any armed timer may fire at any
  point, so orders a clock would forbid are explored on purpose.

The runtime closing is not an action of its own: a fact whose meaning depends on it (an error
end, a process exit) is taken both ways; when the runtime closing changed what it did (the
execution STOPPED for it), the runtime stays closing (no caller acts any more but the stop),
otherwise the state is the one the other reading leads to. The session init's working steps move no other chart: its
path from the handshake to a rest state (ready, resume context pending, an initial prompt,
failed) is one action per outcome, every declared path explored once (:class:`InitPaths`);
the stream wait before it is explored on its own. The start-model policy and the config
settlement are not part of the model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from acpfsm.runtime.session.flows import (
    ADMISSION,
    CANCEL_ANSWERS,
    FLOW,
    accepts_prompts,
    admits,
    after_unreachable,
    cancel_answer,
    cancel_next,
    completion_route,
    ends_wakeup,
    loss_data,
    loss_followup,
    recovery,
    trigger_fact,
    wakeup_fact,
    wants,
)
from acpfsm.statecharts import (
    ChartError,
    ErrorClass,
    Machine,
    PromptGeneration,
    Step,
)
from acpfsm.statecharts.coordination import Fired, Rule, fire

__all__ = ["CALLER_ACTIONS", "Explorer", "InitPaths", "Label", "Violated", "World"]

EXECUTION_ID = "verify"

Label = tuple[Any, ...]
"""An action: its name, then its arguments (``("complete", 2, "error", False)``)."""

# a generation's record: [dispatch_only, leaf, done, sent, returned, turn_over, result,
# agent, outcome, claimed]
DO, LEAF, DONE, SENT, RET, OVER, RESULT, AGENT, OUT, CLAIMED = range(10)
# what the agent knows of a generation's turn
NOT_RECEIVED, OWES, ENDED, ENDED_TWICE = range(4)
# positions in a frozen state (World.freeze)
S_STOP, S_EXE, S_GENS, S_PROMPT, S_STEER, S_CANCEL = 2, 9, 12, 13, 14, 15

SUPERSEDED = "superseded"
_KINDS = ("ok", "error", "cancel_release")
_LOSSES = {
    "agentctl": ("redial", "clean", "final"),
    "stdio": ("final", "exit0", "exit1"),
}
_LOSS_EVENT: Mapping[str, tuple[bool, int | None, bool]] = {
    # kind: (the transport redials, exit code, clean close)
    "redial": (True, None, False),
    "clean": (True, None, True),
    "final": (False, None, False),
    "exit0": (False, 0, False),
    "exit1": (False, 1, False),
}
_FINAL_LOSSES = frozenset({"final", "exit0", "exit1"})
# the PromptGeneration leaves where the agent accepted the turn and nobody claimed it yet
OWED_LEAVES = frozenset(
    {"awaited", "stall_reported", "unawaited", "handed_off", "abandoned", "releasing"}
    | {"escalating", "escalated"}
)
# prompt flow stages after admission (a caller leaving then abandons its turn)
_ADMITTED = frozenset({"dispatch", "sending", "resending", "carrier", "wait", "released"})
# the flow effects of a cancel that wait on one of the generation's events
_WAIT_INDEX = {"sent": SENT, "returned": RET, "turn_over": OVER, "done": DONE}

#: The actions of callers: they never count as the environment releasing a caller.
CALLER_ACTIONS = frozenset({"prompt", "steer", "cancel", "stop", "recover", "leave"})


class Violated(Exception):
    """A step the drivers would crash on (the property ``no_illegal_event``): the explorer
    catches it and reports it, it never leaves ``acpfsm verify``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# --- the session init's paths ------------------------------------------------------------

_LOAD = {"native_session_resume": True, "prior_session_id": "s"}
#: The answers to each working step of the init, by the effect that names the step (the keys
#: of the init driver's step table): the facts its requests and checks can come back as.
INIT_ANSWERS: Mapping[str, tuple[tuple[str, Mapping[str, Any]], ...]] = {
    "initialize": (
        ("initialize_failed", {}),
        ("initialize_succeeded", {}),
        ("initialize_succeeded", {"auth_method": "m"}),
        ("initialize_succeeded", _LOAD),
    ),
    "authenticate": (
        ("authentication_failed", {}),
        ("authenticated", {}),
        ("authenticated", _LOAD),
    ),
    "load_session": (
        ("load_succeeded", {}),
        *(("load_failed", {"error_class": c}) for c in ErrorClass),
    ),
    "new_session": (
        ("new_session_succeeded", {}),
        ("new_session_failed", {"error_class": ErrorClass.AUTH_REQUIRED}),
        ("new_session_failed", {"error_class": ErrorClass.INCONCLUSIVE}),
    ),
    "check_catalog": (("catalog_checked", {}), ("catalog_checked", {"model_requested": True})),
    "wait_for_catalog": (("catalog_arrived", {}), ("catalog_wait_timed_out", {})),
    "apply_start_model": (("start_model_settled", {}), ("start_model_failed", {})),
    "apply_profile_layer": (("profile_layer_applied", {}),),
    "publish_original_snapshot": (("original_snapshot_published", {}),),
    "apply_runtime_mode": (
        ("runtime_mode_applied", {}),
        ("runtime_mode_applied", {"catalog_known": True}),
    ),
    "apply_runtime_options": (("runtime_options_applied", {}),),
    "settle": (("settlement_requested", {}),),
    "announce": (
        ("session_announced", {}),
        ("session_announced", {"has_initial_prompt": True}),
        ("session_announced", {"resume_context_pending": True}),
    ),
}


class InitPaths:
    """Every path of the SessionInit chart from the handshake to where it rests, explored once
    on a scratch machine: the rest states reachable (one representative path each) and the
    transitions the paths take."""

    def __init__(self, chart: Any) -> None:
        self.paths: dict[str, tuple[tuple[str, Mapping[str, Any]], ...]] = {}
        self.taken: set[tuple[str, str, str, str]] = set()
        self.failure = ""
        machine = cast(Machine, chart.start(engine="compiled", observed=False))
        start = machine.fire("stream_ready", error="")
        try:
            self._walk(machine, start.state, (), frozenset())
        except ChartError as exc:
            self.failure = f"{type(exc).__name__}: {exc}"

    def _walk(
        self,
        machine: Machine,
        leaf: str,
        path: tuple[tuple[str, Mapping[str, Any]], ...],
        seen: frozenset[str],
    ) -> None:
        machine.restore(leaf)
        todo = [e.name for e in _entry_effects(machine, leaf) if e.name in INIT_ANSWERS]
        if not todo or leaf in seen:
            self.paths.setdefault(leaf, path)
            return
        for event, data in INIT_ANSWERS[todo[0]]:
            machine.restore(leaf)
            step = machine.fire(event, error="", **data)
            self.taken.add((step.chart, step.source, step.event, step.target))
            self._walk(machine, step.state, (*path, (event, data)), seen | {leaf})


def _entry_effects(machine: Machine, leaf: str) -> tuple[Any, ...]:
    return machine.compiled.entry_effects.get(leaf, ())


# --- the world -------------------------------------------------------------------------------


class World:
    """One state of the model, thawed into machines and plain fields (see the module
    docstring). :meth:`freeze` gives the hashable state, :meth:`thaw` restores one."""

    carrier: str
    init_stage: int
    """0 not started, 1 waiting for the stream, 2 the init's steps, 3 at rest (or never)."""
    stop_stage: int
    """0 running, 1 stopping (the graceful stop under way), 2 closed."""
    pump: int
    """0 the agent's events flow, 1 the carrier gave up (its last events), 2 ended."""
    shutting: bool
    admission: bool
    watch: bool
    dial: int
    """0 no dial, 1 a dial in flight, 2 a dial whose cancel (``stop_redialling``) raced its
    answer: a failure may still be reported, a success still arrive as the carrier's event."""
    budget: bool
    gens: list[list[Any]]
    machines: list[Machine]
    prompt: tuple[str, int, str, int] | None
    """(kind, generation or 0 before admission, stage, what the agent knew before the send)"""
    steer: int
    """The generation a steer request is in flight for (under the lifecycle lock), or 0."""
    cancel: tuple[str, int] | None
    """The caller's cancel: (the flow effect it acts on, generation)."""
    bg: list[tuple[int, str]]
    """The background cancels of abandoned turns: (generation, flow effect)."""

    def __init__(self, explorer: Explorer, *, replaying: bool = False) -> None:
        self.x = explorer
        self.replaying = replaying
        """Replaying a counterexample: the FirstActivity chart is tracked (see freeze)."""
        self.violations: list[tuple[str, str]] = []
        self.fired: list[Fired] = []
        self.event_claims = 0
        self._ended_before = False

    def reset(self, carrier: str) -> None:
        """The initial state: nothing started yet."""
        x = self.x
        for m in (x.exe, x.fa, x.stream, x.init):
            m.restore(m.compiled.initial)
        self.carrier = carrier
        self.init_stage = self.stop_stage = self.pump = self.steer = 0
        self.shutting = self.admission = self.watch = self.budget = False
        self.dial = 0
        self.gens, self.machines, self.bg = [], [], []
        self.prompt = self.cancel = None
        x.current = None

    # --- state ------------------------------------------------------------------------

    def thaw(self, state: tuple[Any, ...]) -> None:
        (
            self.carrier,
            self.init_stage,
            self.stop_stage,
            self.pump,
            self.shutting,
            self.admission,
            self.watch,
            self.dial,
            self.budget,
            exe,
            stream,
            init,
            gens,
            self.prompt,
            self.steer,
            self.cancel,
            bg,
        ) = state
        x = self.x
        x.exe.restore(exe)
        if not self.replaying:  # see freeze
            x.fa.restore(x.fa.compiled.initial)
        x.stream.restore(stream)
        x.init.restore(init)
        self.gens = [list(g) for g in gens]
        self.bg = list(bg)
        self.machines = []
        for number, g in enumerate(self.gens, 1):
            m = x.generation(number, g[DO])
            m.restore(g[LEAF])
            self.machines.append(m)
        x.current = self.machines[-1] if self.machines else None
        self.violations = []
        self.fired = []

    def freeze(self) -> tuple[Any, ...]:
        """The hashable state. Two projections keep it small without changing what can
        happen: the FirstActivity chart is left out (nothing reads it but its own
        announcement, so an exploration restarts it quiet in every state, and a replay tracks
        it), and a superseded generation no flow refers to keeps only what the agent owes."""
        x = self.x
        gens = []
        refs = {g for g, _ in self.bg}
        if self.cancel is not None:
            refs.add(self.cancel[1])
        for number, (g, m) in enumerate(zip(self.gens, self.machines, strict=True), 1):
            leaf = g[LEAF] = m.snapshot()
            if leaf == SUPERSEDED and number not in refs and not self.replaying:
                # the agent's end of a superseded turn is ignored: it matters only while
                # owed (the agent ends its turns in order)
                owes = OWES if g[AGENT] == OWES else NOT_RECEIVED
                gens.append((False, leaf, False, False, False, False, "", owes, 1, False))
            else:
                gens.append(tuple(g))
        # outside READY the wakeup watch only decides whether turn content fires an ignored
        # event: it is set again whenever READY is entered
        watch = self.watch or (not self.replaying and not x.exe.is_in("ready"))
        return (
            self.carrier,
            self.init_stage,
            self.stop_stage,
            self.pump,
            self.shutting,
            self.admission,
            watch,
            self.dial,
            self.budget,
            x.exe.snapshot(),
            x.stream.snapshot(),
            x.init.snapshot(),
            tuple(gens),
            self.prompt,
            self.steer,
            self.cancel,
            tuple(sorted(self.bg)),
        )

    # --- views ------------------------------------------------------------------------

    @property
    def current(self) -> int:
        """The current generation's number (0: none admitted yet)."""
        return len(self.gens)

    @property
    def locked(self) -> bool:
        """A steer holds the lifecycle lock across its request."""
        return self.steer != 0

    def leaf(self, g: int) -> str:
        return self.machines[g - 1].snapshot()

    def is_in(self, g: int, state: str) -> bool:
        return self.machines[g - 1].is_in(state)

    @property
    def exe_ended(self) -> bool:
        return self.x.exe.ended

    @property
    def transport_open(self) -> bool:
        """Requests can still reach the agent: not closed by a stop, the carrier not gone."""
        return self.stop_stage < 2 and self.pump != 2

    @property
    def connected(self) -> bool:
        return self.x.stream.is_in("connected")

    @property
    def session(self) -> bool:
        """The init established an ACP session (prompts can reach the agent)."""
        return self.x.init.is_in("prompting", "booted")

    def flag(self, prop: str, message: str) -> None:
        self.violations.append((prop, message))

    # --- firing: the runtime's ctx.fire + perform ----------------------------------------

    def fire(self, machine: Machine, event: str, **data: Any) -> list[Fired]:
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
        return fired

    def status_fire(self, event: str, **data: Any) -> list[Fired]:
        """StatusDriver.fire: a fact for the Execution chart, moot once it ended."""
        if self.exe_ended:
            return []
        return self.fire(self.x.exe, event, **data)

    def stream_fire(self, event: str, **data: Any) -> list[Fired]:
        """StreamDriver._fire: the carrier's facts are moot once the stream was closed."""
        if self.x.stream.ended:
            return []
        return self.fire(self.x.stream, event, **data)

    def _check(self, machine: Machine, step: Step) -> None:
        x = self.x
        x.covered.add((step.chart, step.source, step.event, step.target))
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
        if step.event == "steered" and "dispatched" not in config:
            self.flag(
                "steer_only_into_a_live_dispatched_turn",
                f"steered fired for generation {g} in {x.pg.path(before)}",
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
                if name == "release_waiter":
                    record[DONE] = True
                    record[RESULT] = str(effect["result"])
                elif name == "end_cancel":
                    record[OVER] = True
                elif name == "claim_outcome":
                    self.event_claims += 1
                    if record[CLAIMED]:
                        self.flag(
                            "completion_claimed_at_most_once",
                            f"generation {machine.constant('generation')} claims a second "
                            f"completion ({step.event}: {step.source} -> {step.target})",
                        )
                    record[CLAIMED] = True
            elif chart == x.exe_name:
                if name == "watch_for_wakeup":
                    self.watch = True
                elif name == "unwatch_wakeup":
                    self.watch = False
                elif name == "announce_first_activity":
                    if not x.fa.ended:
                        self.fire(x.fa, "activity_seen")
                elif name == "end_wakeup_turn":
                    self.event_claims += 1
            elif chart == x.stream_name:
                if name == "redial":
                    self.dial = 1
                elif name == "stop_redialling":
                    self.dial = 2 if self.dial else 0
                elif name == "arm_reconnect_budget":
                    self.budget = True
                elif name == "disarm_reconnect_budget":
                    self.budget = False
                elif name == "give_up" and self.pump == 0:
                    self.pump = 1
            elif chart == x.init_name:
                if name == "open_admission":
                    self.admission = True
                elif name == "send_initial_prompt":
                    if self.prompt is not None:
                        raise Violated("the initial prompt found the prompt lock taken")
                    self.prompt = ("initial", 0, "admit", 0)

    # --- the prompt flow (PromptDriver.prompt) --------------------------------------------

    def end_prompt(self) -> None:
        """The prompt call returns (``finally``: its send attempt and its call are over)."""
        assert self.prompt is not None
        kind, g, _, _ = self.prompt
        if g:
            self.gens[g - 1][SENT] = True
            self.gens[g - 1][RET] = True
        if kind == "initial":
            self.admission = True
        self.prompt = None

    def prompt_stage(self, stage: str, prev: int = 0) -> None:
        assert self.prompt is not None
        self.prompt = (self.prompt[0], self.prompt[1], stage, prev)

    def after_barrier(self, kind: str, *, timed_out: bool = False) -> None:
        """``_pass_barrier`` returned: the status check, then the admission (locked)."""
        if self.gens and not timed_out:
            pred = self.gens[-1]
            if pred[DO] and self.is_in(self.current, "dispatched"):
                self.flag(
                    "dispatch_only_barrier_holds",
                    f"a prompt passed the barrier while dispatch-only generation "
                    f"{self.current} is {self.x.pg.path(self.leaf(self.current))}",
                )
        if kind != "initial" and not accepts_prompts(self.status_fire("prompt_requested")):
            self.prompt = None  # NotReadyForPrompts
            return
        self.prompt = (kind, 0, "admit", 0)

    def admit(self) -> None:
        """TurnDriver.admit, under the lifecycle lock."""
        assert self.prompt is not None
        kind = self.prompt[0]
        if not admits(self.exe_ended):
            self.end_prompt()  # NotReadyForPrompts (R24)
            return
        supersede, begin = ADMISSION
        if self.gens:
            self.fire(self.machines[-1], supersede)
        number = len(self.gens) + 1
        dispatch_only = kind == "dispatch_only"
        machine = self.x.generation(number, dispatch_only)
        machine.restore(self.x.pg.initial)
        self.gens.append(
            [dispatch_only, machine.snapshot(), False, False, False, False, "", 0, 0, False]
        )
        self.machines.append(machine)
        self.x.current = machine
        self.fire(self.x.exe, begin)
        if kind == "initial":
            self.admission = True
        self.prompt = (kind, number, "dispatch", 0)

    def compose(self) -> None:
        """``_compose``: the init's chart hears of each prompt composed."""
        init = self.x.init
        if self.init_stage == 3 and not init.ended:
            self.fire(init, "prompt_composed")

    def dispatch_started(self, g: int, stage: str) -> None:
        """A send begins (``dispatch_started``), unless the chart says not to (withdrawn)."""
        fired = self.fire(self.machines[g - 1], "dispatch_started")
        if wants(fired, "skip_dispatch"):
            self.end_prompt()
            return
        if self.exe_ended:
            self.flag(
                "nothing_dispatched_after_stop",
                f"the prompt request of generation {g} is sent after the execution stopped",
            )
        record = self.gens[g - 1]
        prev = record[AGENT]
        record[AGENT] = OWES  # the request is written: the agent may run it (again, H2)
        record[SENT] = False  # a cancel now waits for this send's answer
        self.prompt_stage(stage, prev)

    def prompt_answer(self, answer: str) -> None:
        """The prompt request's answer: ``_dispatch`` or the retry's resend."""
        assert self.prompt is not None
        kind, g, stage, prev = self.prompt
        record = self.gens[g - 1]
        machine = self.machines[g - 1]
        base = "failed" if answer == "cancel_release" else answer
        fact = trigger_fact(base, retrying=stage == "resending")
        if base in ("not_connected", "failed"):
            record[AGENT] = prev  # the request never reached the agent, or it refused it
        record[SENT] = True
        if fact == "dispatch_accepted":
            self.fire(machine, fact)
            if kind == "dispatch_only":
                self.end_prompt()
            else:
                self.prompt_stage("wait")
        elif fact == "dispatch_failed":
            self.fire(machine, fact, cancel_release=answer == "cancel_release", error="failed")
            self.end_prompt()
        elif stage == "resending":
            self.fire(machine, fact, reconnectable=True, error="not connected")
            self.prompt_stage("carrier")
        else:
            reconnectable = self.carrier == "agentctl"
            fired = self.fire(machine, fact, reconnectable=reconnectable, error="not connected")
            then = after_unreachable(fired, record[RESULT])
            if then == "wait_for_carrier":
                self.prompt_stage("carrier")
            elif then == "undelivered":
                self.end_prompt()
            else:
                self.prompt_stage("released")

    def abandon(self, g: int, *, spawn: bool) -> None:
        """``_abandon``: the caller left after its generation was admitted."""
        fired = self.fire(self.machines[g - 1], "waiter_abandoned")
        if wants(fired, "send_cancel") and spawn and all(b[0] != g for b in self.bg):
            self.bg.append((g, "send_cancel"))

    # --- the cancel flows (Canceller._run): "caller", or a generation number for the
    # background cancel of an abandoned turn -----------------------------------------------

    def set_cancel(self, who: Any, g: int, effect: str | None) -> None:
        if who == "caller":
            self.cancel = None if effect is None else (effect, g)
        else:
            self.bg = [b for b in self.bg if b[0] != g]
            if effect is not None:
                self.bg.append((g, effect))

    def cancel_after(self, who: Any, g: int, fired: list[Fired], previous: str | None) -> None:
        """Act on the flow effect the cancel gets next (:func:`cancel_next`)."""
        effect = cancel_next(fired, previous)
        if effect == "escalate_idle":
            self.status_fire(FLOW[effect].then, generation=g)
            effect = None  # CancelEscalated
        elif effect == "report_escalation":
            effect = None  # CancelEscalated
        self.set_cancel(who, g, effect)

    def cancel_waited(self, who: Any, g: int, effect: str, happened: bool) -> None:
        """A cancel's bounded wait is over: ``happened``, or its bound expired."""
        flow = FLOW[effect]
        fact = flow.after(happened)
        if not fact:  # the turn ended: the acknowledged cancel is done
            self.set_cancel(who, g, None)
            return
        fired = self.fire(self.machines[g - 1], fact)
        if effect == "await_waiter":  # the escalation's wait: CancelEscalated follows
            self.set_cancel(who, g, None)
        else:
            self.cancel_after(who, g, fired, effect)

    def cancel_answered(self, who: Any, g: int, answer: str) -> None:
        """session/cancel's answer."""
        if answer == "failed":  # CancelFailed (or the background cancel's own bound)
            self.set_cancel(who, g, None)
            return
        if answer == "unacknowledged":  # the carrier gave the turn up: no end will come
            for record in self.gens:
                if record[AGENT] == OWES:
                    record[AGENT] = ENDED_TWICE
        flow = FLOW["send_cancel"]
        fired = self.fire(self.machines[g - 1], flow.then, **cancel_answer(*CANCEL_ANSWERS[answer]))
        self.cancel_after(who, g, fired, "send_cancel")

    # --- the agent's facts (TurnDriver.completion, ExecutionSession._stream_lost) ---------

    def completion(self, g: int, kind: str, shutting: bool, *, error: str = "agent error") -> None:
        """TurnDriver.completion."""
        is_error = kind != "ok"
        closing = self.closing(shutting)
        message = error if is_error else ""
        self.event_claims = 0
        target = completion_route(g, self.current or None, range(1, self.current + 1))
        claimed = False
        if target is not None:
            fired = self.fire(
                self.machines[target - 1],
                "completion_received",
                is_error=is_error,
                cancel_release=kind == "cancel_release",
                error=message,
                stop_reason="end_turn",
                shutting_down=self.shutting,
            )
            claimed = wants(fired, "unclaimed") is None
        if ends_wakeup(g, claimed):
            fact, data = wakeup_fact(
                is_error=is_error,
                error=message,
                stop_reason="end_turn",
                shutting_down=self.shutting,
            )
            self.status_fire(fact, **data)
        if self.event_claims > 1:
            self.flag(
                "completion_claimed_at_most_once",
                f"one terminal event (generation {g}) was claimed {self.event_claims} times",
            )
        if g:
            record = self.gens[g - 1]
            record[AGENT] = ENDED if record[AGENT] == OWES else ENDED_TWICE
        self.closed(closing)

    def closing(self, shutting: bool) -> bool:
        """A fact taken while the runtime closes (``shutting``): True when that is new."""
        closing = shutting and not self.shutting
        self.shutting = self.shutting or shutting
        self._ended_before = self.exe_ended
        return closing

    def closed(self, closing: bool) -> None:
        """After a fact taken while the runtime newly closes: the runtime stays closing only
        when that changed what the fact did (the execution STOPPED for it); otherwise the
        state is the one the fact leads to anyway (so it is explored once)."""
        if closing and (self._ended_before or not self.exe_ended):
            self.shutting = False

    def loss(self, kind: str, shutting: bool = False) -> None:
        """``ExecutionSession._stream_lost`` for a StreamDisconnected of ``kind``."""
        reconnecting, exit_code, clean = _LOSS_EVENT[kind]
        closing = self.closing(shutting)
        if kind in _FINAL_LOSSES:
            self.pump = 2  # the carrier's event stream ends with it
        fired = self.stream_fire(
            "connection_lost",
            **loss_data(reconnecting=reconnecting, exit_code=exit_code, clean=clean, error=kind),
        )
        if wants(fired, "announce_loss"):
            self._announced_loss(exit_code)
        self.closed(closing)

    def _announced_loss(self, exit_code: int | None) -> None:
        final = not self.x.stream.is_in("reconnecting")
        claimed = False
        if self.gens:
            fired = self.fire(self.machines[-1], "stream_lost", error="stream lost", final=final)
            claimed = wants(fired, "claim_disconnect") is not None
        follow = loss_followup(
            exit_code=exit_code, claimed=claimed, error="stream lost", shutting_down=self.shutting
        )
        if follow is not None:
            self.status_fire(follow[0], **follow[1])

    # --- the stop (ExecutionSession._stop and the end of run) ------------------------------

    def close(self) -> None:
        """The stop's graceful phase is over: the execution's task group is cancelled (the
        pump, the init, the dials and timers, the initial prompt, the background cancels)."""
        self.stop_stage = 2
        self.pump = 2
        self.dial = 0
        self.budget = False
        init = self.x.init
        if self.init_stage in (1, 2):
            if not init.ended:
                self.fire(init, "init_abandoned")
            self.admission = True
            self.init_stage = 3
        if self.prompt is not None and self.prompt[0] == "initial":
            if self.prompt[2] in _ADMITTED:
                self.abandon(self.prompt[1], spawn=False)  # its cancel never runs: tg gone
            self.end_prompt()
        for g, effect in list(self.bg):
            if effect == "await_waiter":  # R17: the escalation's cleanup is shielded
                self.fire(self.machines[g - 1], FLOW[effect].after(self.gens[g - 1][RET]))
        self.bg = []


# --- the explorer's view of the charts ----------------------------------------------------------


class Explorer:
    """The machines the model runs on, and the actions (see the module docstring)."""

    def __init__(
        self,
        charts: Mapping[str, Any],
        table: tuple[Rule, ...] | None,
        generations: int,
    ) -> None:
        self.charts = charts
        self.table = table
        self.generations = generations
        start = _starter(charts)
        self.exe = start("execution")
        self.fa = start("first_activity")
        self.stream = start("agent_stream")
        self.init = start("session_init")
        self.init_paths = InitPaths(charts["session_init"])
        self.pg_chart = charts["prompt_generation"]
        self.pg = self.pg_chart.compiled()
        self.pg_name = self.pg.name
        self.exe_name = self.exe.compiled.name
        self.fa_name = self.fa.compiled.name
        self.stream_name = self.stream.compiled.name
        self.init_name = self.init.compiled.name
        # the terminal outcomes are the shipped chart's (what the property protects), so a
        # chart that lets one be left again is caught, not redefined
        self.outcomes = PromptGeneration.compiled().absorbing_states(SUPERSEDED)
        self.live = frozenset(leaf for leaf in self.pg.table if "live" in self.pg.ancestors[leaf])
        self._generations: dict[tuple[int, bool], Machine] = {}
        self.current: Machine | None = None
        self.covered: set[tuple[str, str, str, str]] = set()
        self._machines: dict[str, Machine] = {
            self.exe_name: self.exe,
            self.fa_name: self.fa,
            self.stream_name: self.stream,
            self.init_name: self.init,
        }

    def generation(self, number: int, dispatch_only: bool) -> Machine:
        key = (number, dispatch_only)
        machine = self._generations.get(key)
        if machine is None:
            machine = cast(
                Machine,
                self.pg_chart.start(
                    engine="compiled",
                    observed=False,
                    tags={"execution_id": EXECUTION_ID, "generation": number},
                    generation=number,
                    dispatch_only=dispatch_only,
                ),
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
        stream = self.stream.snapshot()
        locked = w.locked
        closing = (False, True) if not w.shutting else (True,)
        # boot
        if w.init_stage == 0:
            add(("run",))
            add(("start_failed",))
            return out
        if w.init_stage == 1:
            if stream == "connecting":
                add(("stream_up",))
            add(("stream_wait_timed_out",))
        elif w.init_stage == 2:
            for outcome in self.init_paths.paths:
                add(("init", outcome))
        # the agent, through the pump: it runs turns only in a session (before the init
        # ends, an unclaimed generation-0 end is still possible, R10)
        turns = w.init_stage < 3 or w.session
        if w.stop_stage < 2 and w.pump == 0:
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
            if w.dial:
                add(("dial", "ok"))  # the transport's StreamReconnected, through the pump
        if w.stop_stage < 2 and w.pump == 1 and not locked:
            owed = _oldest_owed(w)
            add(("give_up_error", owed) if owed else ("give_up_loss",))
            if w.dial == 2:
                add(("dial", "ok"))  # a dial that won the race with the give-up
        if w.stop_stage < 2:
            if w.dial:
                add(("dial", "failed"))
                add(("dial", "refused"))
            if w.budget:
                add(("budget_expired",))
            if w.stop_stage == 1:
                add(("stop_done",))
        # callers (none acts once the runtime is closing, but the stop)
        if w.stop_stage < 2:
            if not w.shutting:
                if w.admission and w.prompt is None and w.current < self.generations:
                    add(("prompt", "ordinary"))
                    add(("prompt", "dispatch_only"))
                if w.admission and not w.steer:
                    add(("steer",))
                if w.cancel is None and w.gens and not locked:
                    add(("cancel",))
                revived = recovery(
                    established=w.session, failed=self.exe.is_in("failed"), carrier_up=w.connected
                )
                if revived == "recovered":
                    add(("recover",))
            if w.stop_stage == 0 and not locked:
                add(("stop",))
        # the prompt flow
        if w.prompt is not None:
            self._prompt_actions(w, add, stream, locked)
        # the steer: its request, under the lifecycle lock
        if w.steer:
            if w.transport_open and w.connected and w.session:
                add(("steer_answer", "ok"))
            add(("steer_answer", "failed"))
        # the cancel flows
        flows: list[tuple[Any, tuple[str, int]]] = [(g, (e, g)) for g, e in w.bg]
        if w.cancel is not None:
            flows.append(("caller", w.cancel))
        for who, (effect, g) in flows:
            waits_for = FLOW[effect].waits_for
            if effect == "send_cancel":
                for answer in _cancel_answers(w):
                    if answer == "failed" or not locked:
                        add(("cancel_answer", who, answer))
                continue
            happened = bool(w.gens[g - 1][_WAIT_INDEX[waits_for]])
            if happened and (not locked or not FLOW[effect].then):
                add(("cancel_wait", who, True))
            if not locked:
                add(("cancel_wait", who, False))
        return out

    def _prompt_actions(
        self, w: World, add: Callable[[Label], None], stream: str, locked: bool
    ) -> None:
        assert w.prompt is not None
        kind, g, stage, _ = w.prompt
        if kind != "initial" and (stage not in _ADMITTED or not locked):
            add(("leave",))
        if stage == "barrier":
            if w.gens[-1][DONE]:
                add(("barrier_passed",))
            add(("barrier_timer",))
        elif stage == "admit":
            if not locked:
                add(("admit",))
        elif stage == "dispatch":
            for answer in _send_outcomes(w):
                add(("dispatch", answer))
            add(("materialization_failed",))
        elif stage in ("sending", "resending"):
            for answer in _prompt_answers(w, g):
                add(("prompt_answer", answer))
        elif stage == "carrier":
            if stream == "connected" and not w.gens[g - 1][DONE]:
                for answer in _send_outcomes(w):
                    add(("redispatch", answer))
            add(("retry_over",))
        elif stage == "wait":
            if w.gens[g - 1][DONE]:
                add(("return",))
            else:
                add(("stall",))
        elif stage == "released" and w.gens[g - 1][DONE]:
            add(("return",))

    # --- applying one action ------------------------------------------------------------

    def apply(self, w: World, label: Label) -> None:
        HANDLERS[label[0]](self, w, label)
        self.settle(w)

    def settle(self, w: World) -> None:
        """A cancel flow whose generation was superseded can only be ignored from then on
        (the chart ignores every event there): it is run to its end at once, the ignored
        events fired in the order the canceller would fire them, so its waits do not
        multiply the states of the generations after it."""
        for _ in range(16):
            flows: list[tuple[Any, tuple[str, int]]] = [(g, (e, g)) for g, e in w.bg]
            if w.cancel is not None:
                flows.append(("caller", w.cancel))
            pending = [(who, f) for who, f in flows if w.leaf(f[1]) == SUPERSEDED]
            if not pending:
                return
            who, (effect, g) = pending[0]
            if effect == "send_cancel":
                w.cancel_answered(who, g, "acknowledged")
            else:
                happened = bool(w.gens[g - 1][_WAIT_INDEX[FLOW[effect].waits_for]])
                w.cancel_waited(who, g, effect, happened)
        raise Violated("a cancel flow of a superseded generation does not end")


def _oldest_owed(w: World) -> int:
    for number, g in enumerate(w.gens, 1):
        if g[AGENT] == OWES:
            return number
    return 0


def _send_outcomes(w: World) -> tuple[str | None, ...]:
    """How a prompt request comes back: at once, without a checkpoint (the answers), or
    later (None: in flight). A transport that is gone refuses at once, a stdio agent queues
    the turn at once, agentctl refuses at once while its socket is down."""
    if not w.transport_open or not w.session:
        return ("failed",)
    if w.carrier == "stdio":
        return ("accepted",)
    return (None,) if w.connected else ("not_connected",)


def _prompt_answers(w: World, g: int) -> tuple[str, ...]:
    """The answers to an agentctl prompt request in flight."""
    if w.gens[g - 1][AGENT] >= ENDED:  # the agent ended the turn: it had the request
        return ("accepted",)
    if not w.transport_open:  # the carrier ended while it waited
        return ("lost_while_waiting", "failed")
    if w.connected:
        return ("accepted", "not_connected", "lost_while_waiting", "failed", "cancel_release")
    return ("not_connected", "lost_while_waiting")


def _cancel_answers(w: World) -> tuple[str, ...]:
    if not w.transport_open:
        return ("disconnected",)
    if w.connected:
        return ("acknowledged", "unacknowledged", "disconnected", "failed")
    return ("disconnected", "failed")


def _starter(charts: Mapping[str, Any]) -> Callable[[str], Machine]:
    def start(name: str) -> Machine:
        return cast(
            Machine,
            charts[name].start(
                engine="compiled", observed=False, tags={"execution_id": EXECUTION_ID}
            ),
        )

    return start


# --- the handlers of each action ------------------------------------------------------------

Handler = Callable[[Explorer, World, Label], None]
HANDLERS: dict[str, Handler] = {}


def _action(name: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        HANDLERS[name] = fn
        return fn

    return register


@_action("run")
def _run(x: Explorer, w: World, label: Label) -> None:
    w.status_fire("start_requested")
    w.stream_fire("connect_started")
    w.init_stage = 1


@_action("start_failed")
def _start_failed(x: Explorer, w: World, label: Label) -> None:
    w.status_fire("start_requested")
    w.stream_fire("connect_started")
    w.stream_fire("connect_failed")
    w.status_fire("agent_start_failed")
    w.status_fire("stop_requested", reason="agent not started", error="")
    w.init_stage = 3
    w.stop_stage = 2
    w.pump = 2


@_action("stream_up")
def _stream_up(x: Explorer, w: World, label: Label) -> None:
    w.stream_fire("connect_succeeded")
    w.fire(x.init, "stream_ready", error="")
    w.init_stage = 2


@_action("stream_wait_timed_out")
def _stream_wait_timed_out(x: Explorer, w: World, label: Label) -> None:
    w.stream_fire("connect_timed_out")
    if not x.init.ended:
        w.fire(x.init, "stream_connect_timed_out", error="stream wait timed out")
    w.init_stage = 3


@_action("init")
def _init(x: Explorer, w: World, label: Label) -> None:
    w.init_stage = 3
    if x.init.ended:  # abandoned meanwhile
        return
    if x.init_paths.failure:
        raise Violated(x.init_paths.failure)
    x.covered |= x.init_paths.taken
    for event, data in x.init_paths.paths[label[1]]:
        w.fire(x.init, event, error="", **data)


@_action("activity")
def _activity(x: Explorer, w: World, label: Label) -> None:
    if not x.fa.ended:
        w.status_fire("activity_recorded")


@_action("content")
def _content(x: Explorer, w: World, label: Label) -> None:
    _activity(x, w, label)
    if w.watch:
        w.watch = False
        w.status_fire("wakeup_content_arrived")


@_action("complete")
def _complete(x: Explorer, w: World, label: Label) -> None:
    w.completion(label[1], label[2], label[3])


@_action("give_up_error")
def _give_up_error(x: Explorer, w: World, label: Label) -> None:
    w.completion(label[1], "error", w.shutting, error="peer disconnected before response")


@_action("give_up_loss")
def _give_up_loss(x: Explorer, w: World, label: Label) -> None:
    w.loss("final", w.shutting)


@_action("handoff")
def _handoff(x: Explorer, w: World, label: Label) -> None:
    w.fire(w.machines[label[1] - 1], "handoff_received")


@_action("loss")
def _loss(x: Explorer, w: World, label: Label) -> None:
    w.loss(label[1], label[2])


@_action("dial")
def _dial(x: Explorer, w: World, label: Label) -> None:
    w.dial = 0
    if label[1] == "ok":
        w.stream_fire("redial_succeeded", session_id="s", attempts=1)
    else:
        w.stream_fire("redial_failed", fatal=label[1] == "refused", error="dial", failures=1)


@_action("budget_expired")
def _budget_expired(x: Explorer, w: World, label: Label) -> None:
    w.budget = False
    w.stream_fire(FLOW["arm_reconnect_budget"].expired, error="not redialled")


@_action("prompt")
def _prompt(x: Explorer, w: World, label: Label) -> None:
    kind = label[1]
    if w.gens:
        fired = w.fire(w.machines[-1], "successor_admitting")
        if wants(fired, "hold_barrier"):
            w.prompt = (kind, 0, "barrier", 0)
            return
    w.after_barrier(kind)


@_action("barrier_passed")
def _barrier_passed(x: Explorer, w: World, label: Label) -> None:
    assert w.prompt is not None
    w.after_barrier(w.prompt[0])


@_action("barrier_timer")
def _barrier_timer(x: Explorer, w: World, label: Label) -> None:
    assert w.prompt is not None
    fired = w.fire(w.machines[-1], FLOW["hold_barrier"].expired)
    if wants(fired, "barrier_failed"):
        w.prompt = None  # PendingDispatchedPromptTimeout
        return
    w.after_barrier(w.prompt[0], timed_out=True)


@_action("admit")
def _admit(x: Explorer, w: World, label: Label) -> None:
    w.admit()


@_action("dispatch")
def _dispatch(x: Explorer, w: World, label: Label) -> None:
    assert w.prompt is not None
    w.compose()
    _send(w, "sending", label[1])


def _send(w: World, stage: str, answer: str | None) -> None:
    """``dispatch_started``, the request, and its answer when it comes back at once."""
    assert w.prompt is not None
    w.dispatch_started(w.prompt[1], stage)
    if answer is not None and w.prompt is not None and w.prompt[2] == stage:
        w.prompt_answer(answer)


@_action("materialization_failed")
def _materialization_failed(x: Explorer, w: World, label: Label) -> None:
    assert w.prompt is not None
    w.compose()
    w.fire(w.machines[w.prompt[1] - 1], "materialization_failed", error="attachment")
    w.end_prompt()


@_action("prompt_answer")
def _prompt_answer(x: Explorer, w: World, label: Label) -> None:
    w.prompt_answer(label[1])


@_action("redispatch")
def _redispatch(x: Explorer, w: World, label: Label) -> None:
    _send(w, "resending", label[1])


@_action("retry_over")
def _retry_over(x: Explorer, w: World, label: Label) -> None:
    assert w.prompt is not None
    g = w.prompt[1]
    if w.gens[g - 1][RESULT] != "withdrawn":
        w.fire(w.machines[g - 1], FLOW["wait_for_carrier"].expired, error="not redialled")
    w.end_prompt()


@_action("stall")
def _stall(x: Explorer, w: World, label: Label) -> None:
    assert w.prompt is not None
    w.fire(w.machines[w.prompt[1] - 1], "stall_detected", stalled_for=1.0)


@_action("return")
def _return(x: Explorer, w: World, label: Label) -> None:
    w.end_prompt()


@_action("leave")
def _leave(x: Explorer, w: World, label: Label) -> None:
    assert w.prompt is not None
    _, g, stage, _ = w.prompt
    if stage in _ADMITTED:
        w.abandon(g, spawn=w.stop_stage < 2)
    w.end_prompt()


@_action("steer")
def _steer(x: Explorer, w: World, label: Label) -> None:
    """SendPromptSteerWithDispatchCallback: the status check, the unlocked pre-check (an
    optimisation), then the locked selection that decides, and the request."""
    if not accepts_prompts(w.status_fire("prompt_requested")):
        return  # NotReadyForPrompts
    for _ in range(2):  # the pre-check, then the selection under the lifecycle lock
        if not w.gens or not wants(w.fire(w.machines[-1], "steer_requested"), "dispatch_steer"):
            return  # SteerNotDispatched
    g = w.current
    w.compose()
    if not w.is_in(g, "dispatched"):
        w.flag(
            "steer_only_into_a_live_dispatched_turn",
            f"a steer request is sent to generation {g} in {x.pg.path(w.leaf(g))}",
        )
    w.steer = g


@_action("steer_answer")
def _steer_answer(x: Explorer, w: World, label: Label) -> None:
    g, w.steer = w.steer, 0
    if label[1] == "ok":
        w.fire(w.machines[g - 1], FLOW["dispatch_steer"].then)


@_action("cancel")
def _cancel(x: Explorer, w: World, label: Label) -> None:
    g = w.current
    w.cancel_after("caller", g, w.fire(w.machines[-1], "cancel_requested"), None)


def _who(w: World, who: Any) -> tuple[int, str]:
    """The generation and the flow effect of the cancel ``who``."""
    if who == "caller":
        assert w.cancel is not None
        return w.cancel[1], w.cancel[0]
    return int(who), next(e for g, e in w.bg if g == who)


@_action("cancel_wait")
def _cancel_wait(x: Explorer, w: World, label: Label) -> None:
    g, effect = _who(w, label[1])
    w.cancel_waited(label[1], g, effect, label[2])


@_action("cancel_answer")
def _cancel_answer(x: Explorer, w: World, label: Label) -> None:
    g, _ = _who(w, label[1])
    w.cancel_answered(label[1], g, label[2])


@_action("stop")
def _stop(x: Explorer, w: World, label: Label) -> None:
    if not w.exe_ended:
        w.status_fire("stop_requested", reason="verify", error="agent stream disconnected: stopped")
    else:  # already STOPPED (R32): close the stream too
        w.stream_fire("close_requested")
    w.stop_stage = 1


@_action("stop_done")
def _stop_done(x: Explorer, w: World, label: Label) -> None:
    w.close()


@_action("recover")
def _recover(x: Explorer, w: World, label: Label) -> None:
    w.status_fire("recovered")
