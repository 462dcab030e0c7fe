"""``acpfsm verify``: every interleaving of one execution's life, explored; kandev's races
checked as properties.

Theory of operation
-------------------
The lifecycle of one execution is a finite system once its decisions are declared: the
charts (:mod:`acpfsm.statecharts`), the coordination table that moves one chart when another
enters a state, and the drivers' flow table and routing functions
(:mod:`acpfsm.runtime.session.flows`). This module runs exactly those, on the compiled engine,
with every piece of I/O replaced by a nondeterministic answer, and explores every state the
execution can reach (breadth first, deduplicated), so there is one model of the runtime and
no second copy of it.

*What is modelled.* A state is the leaf of each chart (Execution, FirstActivity, AgentStream,
SessionInit, one PromptGeneration per admitted generation) plus the little data the drivers
keep: each generation's ``done`` / ``sent`` / ``returned`` / ``turn_over`` events and its
waiter's result, which callers' flows are under way and where (a prompt — ordinary,
dispatch-only or the initial one —, a steer, a cancel, the background cancel of an abandoned
turn, a stop), the armed timers, a redial in flight, whether admission is open, the wakeup
watch, whether the runtime is shutting down, and what the agent owes (the turns it received
and has not ended, ended in the order received). From each state the explorer takes every
action the environment or a caller can take:

* callers: a prompt (ordinary or dispatch-only, at most one at a time: the prompt lock), a
  steer, a cancel, a stop, ``recover_stream``, the runtime closing, a caller leaving its
  prompt (``waiter_abandoned``);
* the agent, through the event pump (one event at a time, not while a steer holds the
  lifecycle lock across its request): a completion for the turn it runs, a duplicate of one
  it ended, a generation-0 completion (unstamped, or a wakeup turn's end), ok / error /
  cancel-release, a handoff, activity and turn content;
* the carrier: a loss (redialable, clean, final, the process exiting 0 or 1, per carrier
  kind), the dials' answers, the give-up's error events and final loss;
* the answers to the runtime's requests (a prompt: accepted / not connected / lost while
  waiting / failed / released on a cancel; a cancel: acknowledged / unacknowledged /
  disconnected / failed; a steer: ok / failed), and the end of a stop's graceful phase (the
  execution's task group is cancelled: the pump, the dials, the initial prompt and the
  background cancels end as the runtime ends them);
* every armed timer (:data:`~acpfsm.runtime.session.flows.FLOW`'s bounds, the stall tick,
  the init's stream wait). Timers are untimed: any armed timer may fire at any point, so
  orders a clock would forbid are explored on purpose.

The session init is collapsed into its rest outcomes: the SessionInit chart is run, but its
working steps (initialize, session/new, the catalog, the config layers), which move no other
chart, are one atomic step per outcome (ready, resume context pending, an initial prompt,
failed); the stream wait before them is explored on its own. The start-model policy and the
config settlement are not part of the model. Each driver step (a fire, its coordination and
its effects) is atomic; steps separated by a lock or a request are separate actions.

*Bounds.* ``generations`` (default 3: supersession and the barrier interact) bounds how many
prompts are admitted; ``depth`` (default none: exhaustive) bounds the breadth-first depth.
Both carriers (agentctl's redialable WebSocket, a local process's stdio) are explored.

*Properties* (:data:`PROPERTIES`, each citing the race and anomaly ids of
``diagrams/README.md``): safety properties are checked on every step; the liveness ones
("no caller waits forever", "every generation reaches an outcome") ask, for every reachable
state, whether some path of environment actions (agent, carrier, answers, timers and the
flows' own steps; no caller acting) reaches the state where the caller is released. A state
the depth bound left unexpanded counts as releasing (no false alarm from the bound).

*Counterexamples.* The first violation of each property found breadth first is a shortest
one; it is replayed from the initial state into trace records (:class:`TraceRecord`,
``execution_id`` ``verify``), the format ``acpfsm check-trace`` reads (with ``--unfinished``:
a counterexample stops before the execution is stopped) and ``acpfsm diagrams --trace`` and
``acpfsm report`` draw. The explanation names the actions taken, one per line.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import itertools
import json
import sys
import time
from array import array
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

import msgspec

from acpfsm.runtime.session.flows import (
    ADMISSION,
    CANCEL_ANSWERS,
    FLOW,
    accepts_prompts,
    cancel_answer,
    completion_route,
    ends_wakeup,
    loss_data,
    loss_followup,
    trigger_fact,
    wants,
)
from acpfsm.runtime.trace import TraceRecord
from acpfsm.statecharts import (
    AgentStream,
    Chart,
    ChartError,
    Execution,
    FirstActivity,
    Machine,
    PromptGeneration,
    SessionInit,
    Step,
)
from acpfsm.statecharts.coordination import COORDINATION, Fired, Rule, fire

__all__ = [
    "DEFAULT_CHARTS",
    "PROPERTIES",
    "Bounds",
    "Coverage",
    "Property",
    "PropertyResult",
    "VerifyResult",
    "add_arguments",
    "fresh_copy",
    "main",
    "run",
    "verify",
]

EXECUTION_ID = "verify"

#: The charts of one execution the model runs, by chart name.
DEFAULT_CHARTS: Mapping[str, type[Chart]] = MappingProxyType(
    {
        c.chart_name: c
        for c in (Execution, FirstActivity, AgentStream, SessionInit, PromptGeneration)
    }
)


@dataclass(frozen=True, slots=True)
class Property:
    """A property the explorer checks, named after what it protects."""

    name: str
    summary: str
    ids: tuple[str, ...]
    """The race and anomaly ids it protects against (``diagrams/README.md``)."""


PROPERTIES: tuple[Property, ...] = (
    Property(
        "one_outcome",
        "every admitted generation reaches exactly one terminal outcome (superseded counts "
        "as the end of one that had none)",
        ("R7", "R8", "H7"),
    ),
    Property(
        "no_caller_waits_forever",
        "from every reachable state with a waiting caller (prompt, steer, cancel, stop), "
        "some path of the environment (timeouts included) releases it",
        ("R15", "R17", "R36", "H3", "H9"),
    ),
    Property(
        "steer_only_into_live_dispatched",
        "a steer request is sent, and ``steered`` fires, only for the current generation "
        "while it is dispatched",
        ("R1", "R2", "R3", "H6"),
    ),
    Property(
        "not_ready_while_turn_owed",
        "the execution is never READY while a generation the agent accepted is still "
        "unclaimed (dispatched, handed off, abandoned or in a cancel escalation)",
        ("R11", "R16", "R19", "R27"),
    ),
    Property(
        "superseded_never_changes",
        "a superseded generation never changes state (late events are only ignored)",
        ("R6", "R21", "R22", "R23"),
    ),
    Property(
        "completion_claimed_once",
        "a completion is claimed at most once: one claim per generation, one claimant per "
        "terminal event",
        ("R7", "R12", "H3", "H5"),
    ),
    Property(
        "dispatch_only_barrier",
        "a prompt following a dispatch-only one passes its barrier only once the "
        "predecessor left ``dispatched``, or after the bound fired",
        ("R13", "R14", "R36", "H4"),
    ),
    Property(
        "nothing_dispatched_after_stop",
        "once the execution is stopped no prompt request is sent and no generation becomes "
        "dispatched",
        ("R24", "R32"),
    ),
    Property(
        "stopped_has_no_live_generation",
        "every final execution state (STOPPED, nothing left to happen) has no live generation",
        ("R21", "R32"),
    ),
    Property(
        "no_illegal_event",
        "the drivers never fire an event a chart refuses (an IllegalTransition is a crash)",
        (),
    ),
)
_PROPERTY = {p.name: p for p in PROPERTIES}


@dataclass(frozen=True, slots=True)
class Bounds:
    """How much of the life is explored."""

    generations: int = 3
    depth: int | None = None
    carriers: tuple[str, ...] = ("agentctl", "stdio")


# --------------------------------------------------------------------------- the model

# a generation's record: [dispatch_only, leaf, done, sent, returned, turn_over, result,
# agent, outcome, claimed]
_DO, _LEAF, _DONE, _SENT, _RET, _OVER, _RESULT, _AGENT, _OUT, _CLAIMED = range(10)
# what the agent knows of a generation's turn
_NOT_RECEIVED, _OWES, _ENDED, _ENDED_TWICE = range(4)

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
_OWED_LEAVES = frozenset(
    {"awaited", "stall_reported", "unawaited", "handed_off", "abandoned", "releasing"}
    | {"escalating", "escalated"}
)
_SUPERSEDED = "superseded"
# the init's working steps after the stream wait, collapsed (they move no other chart)
_INIT_OK = (
    ("initialize_succeeded", {}),
    ("new_session_succeeded", {}),
    ("catalog_checked", {}),
    ("start_model_settled", {}),
    ("profile_layer_applied", {}),
    ("original_snapshot_published", {}),
    ("runtime_mode_applied", {}),
    ("settlement_requested", {}),
)
_INIT_OUTCOMES: Mapping[str, dict[str, bool]] = {
    "ready": {},
    "resume_context_pending": {"resume_context_pending": True},
    "initial_prompt": {"has_initial_prompt": True},
}
# prompt flow stages after admission (a caller leaving then abandons its turn)
_ADMITTED_STAGES = frozenset({"dispatch", "sending", "resending", "carrier", "wait", "released"})

# action categories: a caller acts, or the environment (agent, carrier, answers, timers) and
# the flows' own steps
CALLER = 0
ENV = 1
_CALLER_ACTIONS = frozenset(
    {"prompt", "steer", "cancel", "stop", "recover", "closing", "leave"}
)

Label = tuple[Any, ...]

# positions in a frozen state (World.freeze)
_S_STOP, _S_EXE, _S_GENS, _S_PROMPT, _S_STEER, _S_CANCEL = 2, 9, 12, 13, 14, 15


class Violated(Exception):
    """A step the drivers would crash on (the property ``no_illegal_event``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class World:
    """One state of the model, thawed into machines and plain fields (see the module
    docstring). :meth:`freeze` gives the hashable state, :meth:`thaw` restores one."""

    carrier: str
    init_stage: int
    """0 not started, 1 waiting for the stream, 2 the init's steps, 3 at rest (or never)."""
    stop_stage: int
    """0 running, 1 stopping (STOPPED, the graceful stop under way), 2 closed."""
    pump: int
    """0 the agent's events flow, 1 the carrier gave up (its last events), 2 ended."""
    shutting: bool
    admission: bool
    watch: bool
    dial: bool
    budget: bool
    gens: list[list[Any]]
    machines: list[Machine]
    prompt: tuple[str, int, str] | None
    """(kind, generation or 0 before admission, stage)"""
    steer: tuple[str, int] | None
    cancel: tuple[str, int] | None
    bg: list[tuple[int, str]]

    def __init__(self, explorer: Explorer, *, replaying: bool = False) -> None:
        self.x = explorer
        self.replaying = replaying
        """Replaying a counterexample: the FirstActivity chart is tracked (see freeze)."""
        self.violations: list[tuple[str, str]] = []
        self.fired: list[Fired] = []
        self.event_claims = 0

    def reset(self, carrier: str) -> None:
        """The initial state: nothing started yet."""
        x = self.x
        for m in (x.exe, x.fa, x.stream, x.init):
            m.restore(m.compiled.initial)
        self.carrier = carrier
        self.init_stage = self.stop_stage = self.pump = 0
        self.shutting = self.admission = self.watch = self.dial = self.budget = False
        self.gens, self.machines, self.bg = [], [], []
        self.prompt = self.steer = self.cancel = None
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
        self.gens: list[list[Any]] = [list(g) for g in gens]
        self.bg: list[tuple[int, str]] = list(bg)
        self.machines: list[Machine] = []
        for number, g in enumerate(self.gens, 1):
            m = x.generation(number, g[_DO])
            m.restore(g[_LEAF])
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
            leaf = g[_LEAF] = m.snapshot()
            if leaf == _SUPERSEDED and number not in refs and not self.replaying:
                # the agent's end of a superseded turn is ignored: it matters only while
                # owed (the agent ends its turns in order)
                owes = _OWES if g[_AGENT] == _OWES else _NOT_RECEIVED
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
        return self.steer is not None and self.steer[0] == "rpc"

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
        before = record[_LEAF]
        after = step.state
        record[_LEAF] = after
        config = x.pg.ancestors[before]
        if _SUPERSEDED in config and step.source != step.target:
            self.flag(
                "superseded_never_changes",
                f"generation {g} left superseded: {step.source} --{step.event}--> "
                f"{step.target}",
            )
        if step.event == "steered" and "dispatched" not in config:
            self.flag(
                "steer_only_into_live_dispatched",
                f"steered fired for generation {g} in {x.pg.path(before)}",
            )
        if "dispatched" in step.entered and self.exe_ended:
            self.flag(
                "nothing_dispatched_after_stop",
                f"generation {g} entered dispatched ({step.event}) after the execution stopped",
            )
        if step.target != step.source:
            if after in x.outcomes:
                if record[_OUT] == 2:
                    self.flag(
                        "one_outcome",
                        f"generation {g} enters a second terminal outcome ({x.pg.path(after)}, "
                        f"{step.event})",
                    )
                record[_OUT] = 2
            elif after == _SUPERSEDED and not record[_OUT]:
                record[_OUT] = 1

    def _perform(self, machine: Machine, step: Step) -> None:
        x = self.x
        chart = step.chart
        for effect in step.effects:
            name = effect.name
            if chart == x.pg_name:
                record = self.gens[int(machine.constant("generation")) - 1]
                if name == "release_waiter":
                    record[_DONE] = True
                    record[_RESULT] = str(effect["result"])
                elif name == "end_cancel":
                    record[_OVER] = True
                elif name == "claim_outcome":
                    self.event_claims += 1
                    if record[_CLAIMED]:
                        self.flag(
                            "completion_claimed_once",
                            f"generation {machine.constant('generation')} claims a second "
                            f"completion ({step.event}: {step.source} -> {step.target})",
                        )
                    record[_CLAIMED] = True
                elif name not in x.pg_effects:
                    raise Violated(f"{chart}: no handler for effect {name!r}")
            elif chart == x.exe_name:
                if name == "watch_for_wakeup":
                    self.watch = True
                elif name == "announce_first_activity":
                    if not x.fa.ended:
                        self.fire(x.fa, "activity_seen")
                elif name == "end_wakeup_turn":
                    self.event_claims += 1
                elif name not in x.exe_effects:
                    raise Violated(f"{chart}: no handler for effect {name!r}")
            elif chart == x.stream_name:
                if name == "redial":
                    self.dial = True
                elif name == "stop_redialling":
                    self.dial = False
                elif name == "arm_reconnect_budget":
                    self.budget = True
                elif name == "disarm_reconnect_budget":
                    self.budget = False
                elif name == "give_up":
                    if self.pump == 0:
                        self.pump = 1
                elif name not in x.stream_effects:
                    raise Violated(f"{chart}: no handler for effect {name!r}")
            elif chart == x.init_name:
                if name == "open_admission":
                    self.admission = True
                elif name == "send_initial_prompt":
                    if self.prompt is not None:
                        raise Violated("the initial prompt found the prompt lock taken")
                    self.prompt = ("initial", 0, "admit")
                elif name not in x.init_effects:
                    raise Violated(f"{chart}: no handler for effect {name!r}")
            elif chart == x.fa_name:
                if name not in x.fa_effects:
                    raise Violated(f"{chart}: no handler for effect {name!r}")

    # --- the driver steps (one per action) ---------------------------------------------------

    def end_prompt(self) -> None:
        """The prompt call returns (``finally``: its send attempt and its call are over)."""
        assert self.prompt is not None
        kind, g, _ = self.prompt
        if g:
            self.gens[g - 1][_SENT] = True
            self.gens[g - 1][_RET] = True
        if kind == "initial":
            self.admission = True
        self.prompt = None

    def prompt_stage(self, stage: str) -> None:
        assert self.prompt is not None
        self.prompt = (self.prompt[0], self.prompt[1], stage)

    def after_barrier(self, kind: str, *, timed_out: bool = False) -> None:
        """``_pass_barrier`` returned: the status check, then the admission (locked)."""
        if self.gens and not timed_out:
            pred = self.gens[-1]
            if pred[_DO] and self.is_in(self.current, "dispatched"):
                self.flag(
                    "dispatch_only_barrier",
                    f"a prompt passed the barrier while dispatch-only generation "
                    f"{self.current} is {self.x.pg.path(self.leaf(self.current))}",
                )
        if kind != "initial":
            if self.exe_ended:
                raise Violated(
                    "prompt_requested on the ended Execution chart (a prompt during the stop)"
                )
            if not accepts_prompts(self.fire(self.x.exe, "prompt_requested")):
                self.prompt = None
                return
        self.prompt = (kind, 0, "admit")

    def admit(self) -> None:
        assert self.prompt is not None
        kind = self.prompt[0]
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
        if self.exe_ended:
            raise Violated(f"{begin} on the ended Execution chart (an admission during the stop)")
        self.fire(self.x.exe, begin)
        if kind == "initial":
            self.admission = True
        self.prompt = (kind, number, "dispatch")

    def compose(self) -> None:
        init = self.x.init
        if self.init_stage == 3 and not init.ended:
            self.fire(init, "prompt_composed")

    def dispatch_started(self, g: int) -> bool:
        """The send begins: False when the chart says not to send (withdrawn)."""
        fired = self.fire(self.machines[g - 1], "dispatch_started")
        if wants(fired, "skip_dispatch"):
            return False
        if self.exe_ended:
            self.flag(
                "nothing_dispatched_after_stop",
                f"the prompt request of generation {g} is sent after the execution stopped",
            )
        record = self.gens[g - 1]
        if record[_AGENT] == _NOT_RECEIVED:
            record[_AGENT] = _OWES
        return True

    def prompt_answer(self, answer: str) -> None:
        assert self.prompt is not None
        kind, g, stage = self.prompt
        retrying = stage == "resending"
        record = self.gens[g - 1]
        machine = self.machines[g - 1]
        base = "failed" if answer == "cancel_release" else answer
        fact = trigger_fact(base, retrying=retrying)
        if base in ("not_connected", "failed") and record[_AGENT] == _OWES:
            record[_AGENT] = _NOT_RECEIVED  # never reached the agent, or it refused it
        if fact == "dispatch_accepted":
            if record[_AGENT] == _NOT_RECEIVED:
                record[_AGENT] = _OWES
            self.fire(machine, fact)
            record[_SENT] = True
            if kind == "dispatch_only":
                self.end_prompt()
            else:
                self.prompt_stage("wait")
        elif fact == "dispatch_failed":
            self.fire(machine, fact, cancel_release=answer == "cancel_release", error="failed")
            self.end_prompt()
        elif retrying:
            self.fire(machine, fact, reconnectable=True, error="not connected")
            self.prompt_stage("carrier")
        else:
            fired = self.fire(
                machine, fact, reconnectable=self.carrier == "agentctl", error="not connected"
            )
            if wants(fired, "wait_for_carrier"):
                record[_SENT] = True
                self.prompt_stage("carrier")
            elif record[_RESULT] == "undelivered":
                self.end_prompt()
            else:
                self.prompt_stage("released")

    def abandon(self, g: int) -> None:
        """``_abandon``: the caller left after its generation was admitted."""
        fired = self.fire(self.machines[g - 1], "waiter_abandoned")
        if wants(fired, "send_cancel") and self.stop_stage < 2:
            if all(b[0] != g for b in self.bg):
                self.bg.append((g, "rpc"))

    # cancel flows: ``who`` is "caller" (Canceller.cancel) or a generation number (the
    # background cancel of an abandoned turn, Canceller.abandoned)

    def set_cancel(self, who: Any, g: int, stage: str | None) -> None:
        if who == "caller":
            self.cancel = None if stage is None else (stage, g)
        else:
            self.bg = [b for b in self.bg if b[0] != g]
            if stage is not None:
                self.bg.append((g, stage))

    def cancel_next(self, who: Any, g: int, fired: list[Fired]) -> None:
        if wants(fired, "await_dispatch"):
            self.set_cancel(who, g, "await_sent")
        elif wants(fired, "send_cancel"):
            self.set_cancel(who, g, "rpc")
        else:
            self.set_cancel(who, g, None)

    def cancel_follow(self, who: Any, g: int, fired: list[Fired]) -> None:
        """``Canceller._follow``."""
        if wants(fired, "escalate_idle"):
            self.status_fire(FLOW["escalate_idle"].then, generation=g)
            self.set_cancel(who, g, None)
        elif wants(fired, "report_escalation"):
            self.set_cancel(who, g, None)
        elif wants(fired, "await_waiter"):
            self.set_cancel(who, g, "await_returned")
        elif wants(fired, "arm_cancel_wait"):
            self.set_cancel(who, g, "await_turn_over")
        else:
            self.set_cancel(who, g, None)

    def completion(self, g: int, kind: str, *, error: str = "agent error") -> None:
        """TurnDriver.completion."""
        is_error = kind != "ok"
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
            if is_error:
                self.status_fire("wakeup_turn_failed", error=message, shutting_down=self.shutting)
            else:
                self.status_fire("wakeup_turn_completed", stop_reason="end_turn")
        if self.event_claims > 1:
            self.flag(
                "completion_claimed_once",
                f"one terminal event (generation {g}) was claimed {self.event_claims} times",
            )
        if g:
            record = self.gens[g - 1]
            record[_AGENT] = _ENDED if record[_AGENT] == _OWES else _ENDED_TWICE

    def loss(self, kind: str) -> None:
        """``ExecutionSession._stream_lost`` for a StreamDisconnected of ``kind``."""
        reconnecting, exit_code, clean = _LOSS_EVENT[kind]
        if kind in _FINAL_LOSSES:
            self.pump = 2  # the carrier's event stream ends with it
        fired = self.stream_fire(
            "connection_lost",
            **loss_data(reconnecting=reconnecting, exit_code=exit_code, clean=clean, error=kind),
        )
        if not wants(fired, "announce_loss"):
            return
        claimed = False
        if self.gens:
            fired = self.fire(self.machines[-1], "stream_lost", error="stream lost")
            claimed = wants(fired, "claim_disconnect") is not None
        follow = loss_followup(
            exit_code=exit_code, claimed=claimed, error="stream lost", shutting_down=self.shutting
        )
        if follow is not None:
            self.status_fire(follow[0], **follow[1])

    def close(self) -> None:
        """The stop's graceful phase is over: the execution's task group is cancelled."""
        self.stop_stage = 2
        self.pump = 2
        self.dial = self.budget = False
        init = self.x.init
        if self.init_stage in (1, 2):
            if not init.ended:
                self.fire(init, "init_abandoned")
            self.admission = True
            self.init_stage = 3
        if self.prompt is not None and self.prompt[0] == "initial":
            if self.prompt[2] in _ADMITTED_STAGES:
                self.abandon(self.prompt[1])  # its background cancel never runs: tg gone
            self.end_prompt()
        for g, stage in list(self.bg):
            if stage == "await_returned":
                self.fire(self.machines[g - 1], FLOW["await_waiter"].after(self.gens[g - 1][_RET]))
        self.bg = []


class Explorer:
    """The machines the model runs on, and the actions (see the module docstring)."""

    def __init__(
        self,
        charts: Mapping[str, type[Chart]],
        table: tuple[Rule, ...] | None,
        bounds: Bounds,
    ) -> None:
        self.charts = charts
        self.table = table
        self.bounds = bounds
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
        self.outcomes = self.pg.absorbing_states(_SUPERSEDED)
        self.live = frozenset(leaf for leaf in self.pg.table if "live" in self.pg.ancestors[leaf])
        self._generations: dict[tuple[int, bool], Machine] = {}
        self.current: Machine | None = None
        self.covered: set[tuple[str, str, str, str]] = set()
        self.pg_effects = _EFFECTS["prompt_generation"]
        self.exe_effects = _EFFECTS["execution"]
        self.stream_effects = _EFFECTS["agent_stream"]
        self.init_effects = _EFFECTS["session_init"]
        self.fa_effects = _EFFECTS["first_activity"]
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
            for outcome in (*_INIT_OUTCOMES, "failed"):
                add(("init", outcome))
        # the agent, through the pump
        # the agent runs turns only in a session (before the init ends, an unclaimed
        # generation-0 end is still possible, R10)
        turns = w.init_stage < 3 or w.session
        if w.stop_stage < 2 and w.pump == 0:
            if self.stream.is_in("connecting", "connected"):
                add(("activity",))
                if turns:
                    add(("content",))
                if not locked and turns:
                    for kind in _KINDS:
                        add(("complete", 0, kind))
                    owed = _oldest_owed(w)
                    if owed:
                        for kind in _KINDS:
                            add(("complete", owed, kind))
                        add(("handoff", owed))
                    for number, g in enumerate(w.gens, 1):
                        if g[_AGENT] == _ENDED:
                            add(("complete", number, "error"))
                if not locked:
                    for kind in _LOSSES[w.carrier]:
                        add(("loss", kind))
            elif self.stream.is_in("reconnecting") and not locked:
                add(("loss", "redial"))
                add(("loss", "final"))
            if w.dial:
                add(("dial", "ok"))
        if w.stop_stage < 2 and w.pump == 1 and not locked:
            owed = _oldest_owed(w)
            add(("give_up_error", owed) if owed else ("give_up_loss",))
        if w.stop_stage < 2:
            if w.dial:
                add(("dial", "failed"))
                add(("dial", "refused"))
            if w.budget:
                add(("budget_expired",))
            if w.stop_stage == 1:
                add(("stop_done",))
        # callers
        if w.stop_stage < 2:
            if (
                w.admission
                and w.prompt is None
                and w.current < self.bounds.generations
                and not w.shutting
            ):
                add(("prompt", "ordinary"))
                add(("prompt", "dispatch_only"))
            if w.admission and w.steer is None and not w.shutting and not locked:
                add(("steer",))
            if w.cancel is None and w.gens and not locked and not w.shutting:
                add(("cancel",))
            if w.stop_stage == 0 and not locked:
                add(("stop",))
            if (
                self.exe.is_in("failed")
                and self.init.is_in("prompting", "booted")
                and stream == "connected"
                and not w.shutting
            ):
                add(("recover",))
            if not w.shutting and w.stop_stage == 0:
                add(("closing",))
        # the prompt flow
        if w.prompt is not None:
            kind, g, stage = w.prompt
            if kind != "initial" and (stage not in _ADMITTED_STAGES or not locked):
                add(("leave",))
            if stage == "barrier":
                if w.gens[-1][_DONE]:
                    add(("barrier_passed",))
                add(("barrier_timer",))
            elif stage == "admit":
                if not locked:
                    add(("admit",))
            elif stage == "dispatch":
                add(("dispatch",))
                add(("materialization_failed",))
            elif stage in ("sending", "resending"):
                for answer in _prompt_answers(w, g):
                    add(("prompt_answer", answer))
            elif stage == "carrier":
                if stream == "connected" and not w.gens[g - 1][_DONE]:
                    add(("redispatch",))
                add(("retry_over",))
            elif stage == "wait":
                if w.gens[g - 1][_DONE]:
                    add(("return",))
                else:
                    add(("stall",))
            elif stage == "released" and w.gens[g - 1][_DONE]:
                add(("return",))
        # the steer flow: its request, under the lifecycle lock
        if w.steer is not None:
            if w.transport_open and w.connected and w.session:
                add(("steer_answer", "ok"))
            add(("steer_answer", "failed"))
        # the cancel flows
        flows: list[tuple[Any, tuple[str, int]]] = [(g, (s, g)) for g, s in w.bg]
        if w.cancel is not None:
            flows.append(("caller", w.cancel))
        for who, (stage, g) in flows:
            record = w.gens[g - 1]
            if stage == "await_sent":
                if not locked:
                    if record[_SENT]:
                        add(("cancel_sent", who))
                    add(("cancel_send_timer", who))
            elif stage == "rpc":
                for answer in _cancel_answers(w):
                    if answer == "failed" or not locked:
                        add(("cancel_answer", who, answer))
            elif stage == "await_returned":
                if not locked:
                    if record[_RET]:
                        add(("cancel_returned", who))
                    add(("cancel_escalation_timer", who))
            elif stage == "await_turn_over":
                if record[_OVER]:
                    add(("cancel_turn_over", who))
                if not locked:
                    add(("cancel_wait_timer", who))
        return out

    # --- applying one action ------------------------------------------------------------

    def apply(self, w: World, label: Label) -> None:
        _HANDLERS[label[0]](self, w, label)
        self.settle(w)

    def settle(self, w: World) -> None:
        """A cancel flow whose generation was superseded can only be ignored from then on
        (the chart ignores every event there): it is run to its end at once, the ignored
        events fired in the order the canceller would fire them, so its waits do not
        multiply the states of the generations after it."""
        for _ in range(16):
            flows = [(g, (stage, g)) for g, stage in w.bg]
            if w.cancel is not None:
                flows.append(("caller", w.cancel))
            pending = [(who, f) for who, f in flows if w.leaf(f[1]) == _SUPERSEDED]
            if not pending:
                return
            who, (stage, g) = pending[0]
            record = w.gens[g - 1]
            if stage == "await_sent":
                label: Label = ("cancel_sent" if record[_SENT] else "cancel_send_timer", who)
            elif stage == "rpc":
                label = ("cancel_answer", who, "acknowledged")
            elif stage == "await_returned":
                label = (
                    "cancel_returned" if record[_RET] else "cancel_escalation_timer",
                    who,
                )
            else:
                label = ("cancel_turn_over" if record[_OVER] else "cancel_wait_timer", who)
            _HANDLERS[label[0]](self, w, label)
        raise Violated("a cancel flow of a superseded generation does not end")


def _oldest_owed(w: World) -> int:
    for number, g in enumerate(w.gens, 1):
        if g[_AGENT] == _OWES:
            return number
    return 0


def _prompt_answers(w: World, g: int) -> tuple[str, ...]:
    if not w.transport_open or not w.session:
        return ("failed",)
    if w.gens[g - 1][_AGENT] >= _ENDED:  # the agent ended the turn: it had the request
        return ("accepted",)
    if w.connected:
        return ("accepted", "not_connected", "lost_while_waiting", "failed", "cancel_release")
    return ("not_connected", "lost_while_waiting")


def _cancel_answers(w: World) -> tuple[str, ...]:
    if not w.transport_open:
        return ("disconnected",)
    if w.connected:
        return ("acknowledged", "unacknowledged", "disconnected", "failed")
    return ("disconnected", "failed")


# --- the handlers of each action ------------------------------------------------------------

Handler = Callable[[Explorer, World, Label], None]
_HANDLERS: dict[str, Handler] = {}


def _action(name: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        _HANDLERS[name] = fn
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
    outcome = label[1]
    w.init_stage = 3
    if x.init.ended:  # abandoned meanwhile
        return
    if outcome == "failed":
        w.fire(x.init, "initialize_failed", error="initialize failed")
        return
    for event, data in _INIT_OK:
        w.fire(x.init, event, error="", **data)
    w.fire(x.init, "session_announced", error="", **_INIT_OUTCOMES[outcome])


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
    w.completion(label[1], label[2])


@_action("give_up_error")
def _give_up_error(x: Explorer, w: World, label: Label) -> None:
    w.completion(label[1], "error", error="peer disconnected before response")


@_action("give_up_loss")
def _give_up_loss(x: Explorer, w: World, label: Label) -> None:
    w.loss("final")


@_action("handoff")
def _handoff(x: Explorer, w: World, label: Label) -> None:
    w.fire(w.machines[label[1] - 1], "handoff_received")


@_action("loss")
def _loss(x: Explorer, w: World, label: Label) -> None:
    w.loss(label[1])


@_action("dial")
def _dial(x: Explorer, w: World, label: Label) -> None:
    w.dial = False
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
            w.prompt = (kind, 0, "barrier")
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
        w.prompt = None
        return
    w.after_barrier(w.prompt[0], timed_out=True)


@_action("admit")
def _admit(x: Explorer, w: World, label: Label) -> None:
    w.admit()


@_action("dispatch")
def _dispatch(x: Explorer, w: World, label: Label) -> None:
    assert w.prompt is not None
    g = w.prompt[1]
    w.compose()
    if w.dispatch_started(g):
        w.prompt_stage("sending")
    else:
        w.end_prompt()


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
    assert w.prompt is not None
    if w.dispatch_started(w.prompt[1]):
        w.prompt_stage("resending")
    else:
        w.end_prompt()


@_action("retry_over")
def _retry_over(x: Explorer, w: World, label: Label) -> None:
    assert w.prompt is not None
    g = w.prompt[1]
    if w.gens[g - 1][_RESULT] != "withdrawn":
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
    _, g, stage = w.prompt
    if stage in _ADMITTED_STAGES:
        w.abandon(g)
    w.end_prompt()


@_action("steer")
def _steer(x: Explorer, w: World, label: Label) -> None:
    """SendPromptSteerWithDispatchCallback: the status check, the unlocked pre-check (an
    optimisation), then the locked selection that decides, and the request."""
    if w.exe_ended:
        raise Violated("prompt_requested on the ended Execution chart (a steer during the stop)")
    if not accepts_prompts(w.fire(x.exe, "prompt_requested")):
        return
    for _ in range(2):  # the pre-check, then the selection under the lifecycle lock
        if not w.gens or not wants(w.fire(w.machines[-1], "steer_requested"), "dispatch_steer"):
            return
    g = w.current
    w.compose()
    if not w.is_in(g, "dispatched"):
        w.flag(
            "steer_only_into_live_dispatched",
            f"a steer request is sent to generation {g} in {x.pg.path(w.leaf(g))}",
        )
    w.steer = ("rpc", g)


@_action("steer_answer")
def _steer_answer(x: Explorer, w: World, label: Label) -> None:
    assert w.steer is not None
    g = w.steer[1]
    w.steer = None
    if label[1] == "ok":
        w.fire(w.machines[g - 1], "steered")


@_action("cancel")
def _cancel(x: Explorer, w: World, label: Label) -> None:
    g = w.current
    w.cancel_next("caller", g, w.fire(w.machines[-1], "cancel_requested"))


def _who(w: World, who: Any) -> int:
    if who == "caller":
        assert w.cancel is not None
        return int(w.cancel[1])
    return int(who)


@_action("cancel_sent")
def _cancel_sent(x: Explorer, w: World, label: Label) -> None:
    g = _who(w, label[1])
    fired = w.fire(w.machines[g - 1], FLOW["await_dispatch"].after(True))
    if wants(fired, "send_cancel"):
        w.set_cancel(label[1], g, "rpc")
    else:
        w.set_cancel(label[1], g, None)


@_action("cancel_send_timer")
def _cancel_send_timer(x: Explorer, w: World, label: Label) -> None:
    g = _who(w, label[1])
    fired = w.fire(w.machines[g - 1], FLOW["await_dispatch"].after(False))
    if wants(fired, "send_cancel"):
        w.set_cancel(label[1], g, "rpc")
    else:
        w.set_cancel(label[1], g, None)


@_action("cancel_answer")
def _cancel_answer(x: Explorer, w: World, label: Label) -> None:
    who, answer = label[1], label[2]
    g = _who(w, who)
    if answer == "failed":  # CancelFailed (or the background cancel's own bound)
        w.set_cancel(who, g, None)
        return
    if answer == "unacknowledged":  # the carrier gave the turn up: no end will come
        for record in w.gens:
            if record[_AGENT] == _OWES:
                record[_AGENT] = _ENDED_TWICE
    fired = w.fire(
        w.machines[g - 1], "cancel_answered", **cancel_answer(*CANCEL_ANSWERS[answer])
    )
    w.cancel_follow(who, g, fired)


@_action("cancel_returned")
def _cancel_returned(x: Explorer, w: World, label: Label) -> None:
    g = _who(w, label[1])
    w.fire(w.machines[g - 1], FLOW["await_waiter"].after(True))
    w.set_cancel(label[1], g, None)


@_action("cancel_escalation_timer")
def _cancel_escalation_timer(x: Explorer, w: World, label: Label) -> None:
    g = _who(w, label[1])
    w.fire(w.machines[g - 1], FLOW["await_waiter"].after(False))
    w.set_cancel(label[1], g, None)


@_action("cancel_turn_over")
def _cancel_turn_over(x: Explorer, w: World, label: Label) -> None:
    w.set_cancel(label[1], _who(w, label[1]), None)


@_action("cancel_wait_timer")
def _cancel_wait_timer(x: Explorer, w: World, label: Label) -> None:
    g = _who(w, label[1])
    fired = w.fire(w.machines[g - 1], FLOW["arm_cancel_wait"].expired)
    w.cancel_follow(label[1], g, fired)


@_action("stop")
def _stop(x: Explorer, w: World, label: Label) -> None:
    if not w.exe_ended:
        w.status_fire(
            "stop_requested", reason="verify", error="agent stream disconnected: stopped"
        )
    else:
        w.stream_fire("close_requested")
    w.stop_stage = 1


@_action("stop_done")
def _stop_done(x: Explorer, w: World, label: Label) -> None:
    w.close()


@_action("recover")
def _recover(x: Explorer, w: World, label: Label) -> None:
    w.status_fire("recovered")


@_action("closing")
def _closing(x: Explorer, w: World, label: Label) -> None:
    w.shutting = True


# the effects each chart's driver performs (a name outside these is a bug: the runtime raises)
_EFFECTS: Mapping[str, frozenset[str]] = {
    "prompt_generation": frozenset(
        {
            "arm_activity",
            "claim_outcome",
            "claim_handoff",
            "claim_disconnect",
            "release_waiter",
            "record_escalation",
            "end_cancel",
            "publish_terminal_event",
            "publish_prompt_completed",
            "publish_prompt_failed",
            "publish_stream_error",
            "report_stall",
        }
        | {name for name, f in FLOW.items() if f.chart == "prompt_generation"}
    ),
    "execution": frozenset(
        {
            "publish_agent_ready",
            "publish_agent_running",
            "publish_agent_failed",
            "publish_agent_stopped",
            "publish_agent_completed",
            "publish_agent_boot_ready",
            "publish_stream_error",
            "record_failure",
            "record_finish",
            "record_exit",
            "watch_for_wakeup",
            "announce_first_activity",
            "end_wakeup_turn",
            "close_subscriptions",
        }
        | {name for name, f in FLOW.items() if f.chart == "execution"}
    ),
    "agent_stream": frozenset(
        {
            "redial",
            "stop_redialling",
            "arm_reconnect_budget",
            "disarm_reconnect_budget",
            "give_up",
            "publish_reconnected",
        }
        | {name for name, f in FLOW.items() if f.chart == "agent_stream"}
    ),
    "session_init": frozenset(
        {
            "await_stream",
            "initialize",
            "authenticate",
            "load_session",
            "new_session",
            "check_catalog",
            "wait_for_catalog",
            "apply_start_model",
            "apply_profile_layer",
            "publish_original_snapshot",
            "apply_runtime_mode",
            "apply_runtime_options",
            "settle",
            "announce",
            "send_initial_prompt",
            "open_admission",
            "fail_init",
            "require_authentication",
            "inject_resume_context",
        }
    ),
    "first_activity": frozenset({"publish_agent_running"}),
}


def _starter(charts: Mapping[str, type[Chart]]) -> Callable[[str], Machine]:
    def start(name: str) -> Machine:
        return cast(
            Machine,
            charts[name].start(
                engine="compiled", observed=False, tags={"execution_id": EXECUTION_ID}
            ),
        )

    return start


# --------------------------------------------------------------------------- exploration


@dataclass(frozen=True, slots=True)
class Coverage:
    """One chart's declared transitions and those the exploration took."""

    chart: str
    declared: int
    covered: int
    unreached: tuple[tuple[str, str, str], ...]
    """``(source, event, target)`` never taken (targetless: target == source)."""


@dataclass(frozen=True, slots=True)
class PropertyResult:
    name: str
    summary: str
    ids: tuple[str, ...]
    holds: bool
    violations: int = 0
    message: str = ""
    steps: tuple[str, ...] = ()
    """The actions of the counterexample, one per step (the last one violates)."""
    trace: tuple[TraceRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class VerifyResult:
    bounds: Bounds
    states: int
    transitions: int
    depth: int
    seconds: float
    coverage: tuple[Coverage, ...]
    properties: tuple[PropertyResult, ...]
    truncated: bool
    """The depth bound left states unexpanded."""

    @property
    def ok(self) -> bool:
        return all(p.holds for p in self.properties)

    def property(self, name: str) -> PropertyResult:
        return next(p for p in self.properties if p.name == name)


@dataclass(slots=True)
class _Found:
    count: int = 0
    state: int = -1
    label: Label = ()
    message: str = ""


@dataclass(slots=True)
class _Graph:
    states: list[tuple[Any, ...]] = field(default_factory=list)
    parent: array[int] = field(default_factory=lambda: array("q"))
    via: list[Label] = field(default_factory=list)
    depth: array[int] = field(default_factory=lambda: array("l"))
    waiting: bytearray = field(default_factory=bytearray)
    live: bytearray = field(default_factory=bytearray)
    rest: bytearray = field(default_factory=bytearray)
    src: array[int] = field(default_factory=lambda: array("l"))
    dst: array[int] = field(default_factory=lambda: array("l"))
    moves: bytearray = field(default_factory=bytearray)
    expanded: bytearray = field(default_factory=bytearray)


# who waits: a caller of each kind (bit) in a state
_WAITERS = ("prompt", "initial prompt", "steer", "cancel", "stop")


def _waiting(state: tuple[Any, ...]) -> int:
    if len(state) == 1:  # the crash
        return 0
    prompt, steer, cancel = state[_S_PROMPT], state[_S_STEER], state[_S_CANCEL]
    stop_stage = state[_S_STOP]
    bits = 0
    if prompt is not None:
        bits |= 2 if prompt[0] == "initial" else 1
    if steer is not None:
        bits |= 4
    if cancel is not None:
        bits |= 8
    if stop_stage == 1:
        bits |= 16
    return bits


def verify(
    bounds: Bounds = Bounds(),
    *,
    charts: Mapping[str, type[Chart]] | None = None,
    table: tuple[Rule, ...] | None = None,
) -> VerifyResult:
    """Explore the life of one execution within ``bounds`` and check :data:`PROPERTIES`.
    ``charts`` replaces some of :data:`DEFAULT_CHARTS` (by chart name), ``table`` the
    coordination table (a modified copy: a seeded bug)."""
    chosen = {**DEFAULT_CHARTS, **(charts or {})}
    x = Explorer(chosen, table if table is not None and table != COORDINATION else None, bounds)
    started = time.perf_counter()
    graph = _Graph()
    index: dict[tuple[Any, ...], int] = {}
    found: dict[str, _Found] = {p.name: _Found() for p in PROPERTIES}
    w = World(x)
    queue: deque[int] = deque()

    def add(state: tuple[Any, ...], parent: int, label: Label, depth: int) -> int:
        n = len(graph.states)
        index[state] = n
        graph.states.append(state)
        graph.parent.append(parent)
        graph.via.append(label)
        graph.depth.append(depth)
        graph.waiting.append(_waiting(state))
        live = 0
        for i, g in enumerate(state[_S_GENS] if len(state) > 1 else ()):
            if g[_LEAF] in x.live:
                live |= 1 << i
        graph.live.append(live)
        graph.rest.append(0)
        graph.moves.append(0)
        graph.expanded.append(0)
        queue.append(n)
        return n

    crash = add(("crash",), -1, ("crash",), 0)  # where a crashing step leads
    queue.clear()
    graph.expanded[crash] = 1
    for carrier in bounds.carriers:
        state = x.initial(carrier)
        if state not in index:
            add(state, -1, ("start", carrier), 0)

    max_depth = 0
    truncated = False
    while queue:
        n = queue.popleft()
        state = graph.states[n]
        depth = graph.depth[n]
        max_depth = max(max_depth, depth)
        if bounds.depth is not None and depth >= bounds.depth:
            truncated = True
            continue
        graph.expanded[n] = 1
        w.thaw(state)
        labels = x.enabled(w)
        env_moves = False
        for label in labels:
            w.thaw(state)
            try:
                x.apply(w, label)
            except Violated as exc:
                # the step raises: reported; whoever waited on it got the exception
                _note(found["no_illegal_event"], n, label, exc.message)
                graph.src.append(n)
                graph.dst.append(crash)
                env_moves = True
                continue
            for prop, message in w.violations:
                _note(found[prop], n, label, message)
            after = w.freeze()
            m = index.get(after)
            if m is None:
                m = add(after, n, label, depth + 1)
                _state_checks(x, w, found, m, after)
            if m != n and label[0] not in _CALLER_ACTIONS:
                graph.src.append(n)
                graph.dst.append(m)
                env_moves = True
        graph.moves[n] = 1 if env_moves else 0
    _liveness(x, graph, found)
    seconds = time.perf_counter() - started
    results = tuple(_result(x, graph, p, found[p.name], bounds) for p in PROPERTIES)
    return VerifyResult(
        bounds=bounds,
        states=len(graph.states),
        transitions=len(graph.src),
        depth=max_depth,
        seconds=seconds,
        coverage=_coverage(x),
        properties=results,
        truncated=truncated,
    )


def _note(found: _Found, state: int, label: Label, message: str) -> None:
    found.count += 1
    if found.state < 0:
        found.state, found.label, found.message = state, label, message


def _state_checks(
    x: Explorer, w: World, found: dict[str, _Found], n: int, state: tuple[Any, ...]
) -> None:
    if state[_S_EXE] == "ready":
        for g, record in enumerate(state[_S_GENS], 1):
            if record[_LEAF] in _OWED_LEAVES:
                _note(
                    found["not_ready_while_turn_owed"],
                    n,
                    (),
                    f"the execution is READY while generation {g} is "
                    f"{x.pg.path(record[_LEAF])}",
                )
                return


def _liveness(x: Explorer, graph: _Graph, found: dict[str, _Found]) -> None:
    """The existential liveness checks (see the module docstring), over the environment's
    moves only."""
    count = len(graph.states)
    order = sorted(range(len(graph.dst)), key=graph.dst.__getitem__)
    starts = array("l", [0]) * (count + 1)
    for i in order:
        starts[graph.dst[i] + 1] += 1
    for i in range(count):
        starts[i + 1] += starts[i]
    preds = array("l", (graph.src[i] for i in order))

    def closure(good: Callable[[int], bool]) -> bytearray:
        seen = bytearray(count)
        todo = [n for n in range(count) if good(n) or not graph.expanded[n]]
        for n in todo:
            seen[n] = 1
        while todo:
            n = todo.pop()
            for i in range(starts[n], starts[n + 1]):
                p = preds[i]
                if not seen[p]:
                    seen[p] = 1
                    todo.append(p)
        return seen

    def first_bad(bad: Callable[[int], bool]) -> int:
        best = -1
        for n in range(count):
            if bad(n) and (best < 0 or graph.depth[n] < graph.depth[best]):
                best = n
        return best

    waiting = graph.waiting
    for bit, who in enumerate(_WAITERS):
        mask = 1 << bit
        if not any(w & mask for w in waiting):
            continue
        released = closure(lambda n, mask=mask: not waiting[n] & mask)
        stuck = [n for n in range(count) if waiting[n] & mask and not released[n]]
        if stuck:
            n = min(stuck, key=graph.depth.__getitem__)
            f = found["no_caller_waits_forever"]
            f.count += len(stuck)
            if f.state < 0 or graph.depth[n] < graph.depth[f.state]:
                f.state, f.label = n, ()
                f.message = (
                    f"the {who} caller waits forever: no environment path releases it "
                    f"({len(stuck)} such states)"
                )
    live = graph.live
    for g in range(x.bounds.generations):
        mask = 1 << g
        if not any(v & mask for v in live):
            continue
        ends = closure(lambda n, mask=mask: not live[n] & mask)
        stuck = [n for n in range(count) if live[n] & mask and not ends[n]]
        if stuck:
            n = min(stuck, key=graph.depth.__getitem__)
            f = found["one_outcome"]
            f.count += len(stuck)
            if f.state < 0 or graph.depth[n] < graph.depth[f.state]:
                f.state, f.label = n, ()
                leaf = graph.states[n][_S_GENS][g][_LEAF]
                f.message = (
                    f"generation {g + 1} stays {x.pg.path(leaf)} forever: no environment "
                    f"path ends it ({len(stuck)} such states)"
                )
    # final execution states: STOPPED and nothing left to happen
    final = [
        n
        for n in range(count)
        if graph.expanded[n]
        and not graph.moves[n]
        and len(graph.states[n]) > 1
        and graph.states[n][_S_EXE] in x.exe.compiled.final
    ]
    bad = [n for n in final if live[n]]
    if bad:
        n = min(bad, key=graph.depth.__getitem__)
        f = found["stopped_has_no_live_generation"]
        f.count += len(bad)
        gens = graph.states[n][_S_GENS]
        names = ", ".join(
            f"{i} {x.pg.path(r[_LEAF])}" for i, r in enumerate(gens, 1) if r[_LEAF] in x.live
        )
        f.state, f.label = n, ()
        f.message = f"the execution is STOPPED, nothing is left to happen, and {names} is live"


def _coverage(x: Explorer) -> tuple[Coverage, ...]:
    out: list[Coverage] = []
    for name, chart in x.charts.items():
        compiled = chart.compiled()
        taken = {(s, e, t) for c, s, e, t in x.covered if c == name}
        declared = compiled.declared
        unreached = tuple(sorted(declared - taken))
        out.append(Coverage(name, len(declared), len(declared & taken), unreached))
    return tuple(out)


def _path(graph: _Graph, n: int) -> list[tuple[int, Label]]:
    """The actions from an initial state to state ``n``: ``(state before, label)``."""
    out: list[tuple[int, Label]] = []
    while graph.parent[n] >= 0:
        out.append((graph.parent[n], graph.via[n]))
        n = graph.parent[n]
    out.append((-1, graph.via[n]))  # the initial state's label: ("start", carrier)
    out.reverse()
    return out


def _result(
    x: Explorer, graph: _Graph, prop: Property, found: _Found, bounds: Bounds
) -> PropertyResult:
    if found.state < 0:
        return PropertyResult(prop.name, prop.summary, prop.ids, True)
    path = _path(graph, found.state)
    if found.label:
        path.append((found.state, found.label))
    steps, trace = _replay(x, path)
    return PropertyResult(
        prop.name,
        prop.summary,
        prop.ids,
        False,
        violations=found.count,
        message=found.message,
        steps=tuple(steps),
        trace=tuple(trace),
    )


def _replay(
    x: Explorer, path: Sequence[tuple[int, Label]]
) -> tuple[list[str], list[TraceRecord]]:
    """Re-run a path from its initial state, recording every fired transition."""
    w = World(x, replaying=True)
    carrier = path[0][1][1]
    state = x.initial(carrier)
    steps = [f"start ({carrier} carrier)"]
    records: list[TraceRecord] = []
    for number, (_, label) in enumerate(path[1:], 1):
        w.thaw(state)
        crashed = ""
        try:
            x.apply(w, label)
        except Violated as exc:
            crashed = f"  ← {exc.message}"
        for machine, step in w.fired:
            records.append(
                TraceRecord(
                    seq=len(records) + 1,
                    time=float(number),
                    execution_id=EXECUTION_ID,
                    chart=step.chart,
                    generation=int(machine.tags.get("generation", 0)),
                    instance=0,
                    event=step.event,
                    source=step.source,
                    target=step.target,
                )
            )
        steps.append(" ".join(str(part) for part in label) + crashed)
        if crashed:
            break
        state = w.freeze()
    return steps, records


# --------------------------------------------------------------------------- broken copies

_copies = itertools.count()


def fresh_copy(chart: type[Chart]) -> type[Chart]:
    """A fresh copy of ``chart``'s declaration (its module loaded again under another name),
    to subclass and change without touching the chart itself: python-statemachine shares a
    chart's states with its subclasses, so a transition added in a subclass of the chart
    would be added to the chart. Used to seed bugs (``acpfsm verify`` must catch them)."""
    module = sys.modules[chart.__module__]
    path = inspect.getsourcefile(module)
    if path is None or module.__package__ is None:  # pragma: no cover - a built-in chart
        raise ValueError(f"{chart.__qualname__}: no source to copy")
    name = f"{module.__package__}._verify_copy{next(_copies)}_{module.__name__.rsplit('.', 1)[1]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # pragma: no cover
        raise ValueError(f"{chart.__qualname__}: cannot load {path}")
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    return cast(type[Chart], getattr(copy, chart.__name__))


# --------------------------------------------------------------------------- output


def render_text(result: VerifyResult) -> str:
    b = result.bounds
    depth = "unbounded" if b.depth is None else str(b.depth)
    lines = [
        f"acpfsm verify: {b.generations} generations, depth {depth}, carriers "
        f"{' + '.join(b.carriers)}",
        f"explored {result.states} states, {result.transitions} environment transitions, "
        f"depth {result.depth}{' (truncated by the bound)' if result.truncated else ''}, "
        f"in {result.seconds:.1f} s",
        "",
        "coverage of the declared transitions:",
    ]
    for c in result.coverage:
        lines.append(f"  {c.chart}: {c.covered}/{c.declared}")
    for c in result.coverage:
        for source, event, target in c.unreached:
            arrow = f"{source} --{event}-->" + ("" if target == source else f" {target}")
            lines.append(f"  unreached {c.chart}: {arrow}")
    lines += ["", "properties:"]
    for p in result.properties:
        ids = f" ({', '.join(p.ids)})" if p.ids else ""
        verdict = "holds" if p.holds else f"VIOLATED ({p.violations})"
        lines.append(f"  {p.name}{ids}: {verdict}")
    for p in result.properties:
        if p.holds:
            continue
        lines += ["", f"counterexample for {p.name}: {p.message}", "  steps:"]
        lines += [f"    {i}. {s}" for i, s in enumerate(p.steps)]
        lines.append("  trace (check-trace JSONL):")
        lines += [f"    {msgspec.json.encode(r).decode()}" for r in p.trace]
    lines.append("")
    lines.append("OK: every property holds" if result.ok else "FAILED: see the counterexamples")
    return "\n".join(lines)


def render_json(result: VerifyResult) -> dict[str, Any]:
    b = result.bounds
    return {
        "ok": result.ok,
        "bounds": {"generations": b.generations, "depth": b.depth, "carriers": list(b.carriers)},
        "states": result.states,
        "transitions": result.transitions,
        "depth": result.depth,
        "truncated": result.truncated,
        "seconds": round(result.seconds, 3),
        "coverage": [
            {
                "chart": c.chart,
                "declared": c.declared,
                "covered": c.covered,
                "unreached": [list(t) for t in c.unreached],
            }
            for c in result.coverage
        ],
        "properties": [
            {
                "name": p.name,
                "summary": p.summary,
                "ids": list(p.ids),
                "holds": p.holds,
                "violations": p.violations,
                "message": p.message,
                "steps": list(p.steps),
                "trace": [msgspec.to_builtins(r) for r in p.trace],
            }
            for p in result.properties
        ],
    }


def write_counterexamples(result: VerifyResult, out: Path) -> list[Path]:
    """Each violated property's counterexample as ``<property>.jsonl`` in ``out``."""
    written: list[Path] = []
    for p in result.properties:
        if p.holds:
            continue
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{p.name}.jsonl"
        path.write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in p.trace))
        written.append(path)
    return written


DESCRIPTION = (
    "Explore every interleaving of one execution's life (the charts, the coordination "
    "table and the drivers' flow table, with every answer the agent, the carrier and the "
    "clock can give) and check kandev's races as properties. Exit 0 when every property "
    "holds, 1 with a shortest counterexample per violated property."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--generations",
        type=int,
        default=Bounds.generations,
        metavar="N",
        help=f"admit at most N prompt generations (default {Bounds.generations})",
    )
    parser.add_argument(
        "--depth", type=int, default=None, metavar="D", help="explore at most D steps deep"
    )
    parser.add_argument(
        "--carrier",
        choices=("agentctl", "stdio", "both"),
        default="both",
        help="the carrier kinds explored (default both)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--out",
        metavar="DIR",
        default=None,
        help="also write each counterexample as DIR/<property>.jsonl",
    )


def run(args: argparse.Namespace) -> int:
    if args.generations < 1 or (args.depth is not None and args.depth < 1):
        print("acpfsm verify: --generations and --depth must be at least 1", file=sys.stderr)
        return 2
    carriers: tuple[str, ...] = (
        ("agentctl", "stdio") if args.carrier == "both" else (str(args.carrier),)
    )
    result = verify(Bounds(generations=args.generations, depth=args.depth, carriers=carriers))
    if args.json:
        print(json.dumps(render_json(result)))
    else:
        print(render_text(result))
    if args.out:
        for path in write_counterexamples(result, Path(args.out)):
            print(f"wrote {path}", file=sys.stderr)
    return 0 if result.ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="acpfsm verify", description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
