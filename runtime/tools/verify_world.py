"""``acpfsm verify``'s model, its state: the constants that name a frozen state's parts, a
flow under way in the model (:class:`Run`), and :class:`WorldState` (thawing and freezing a
state, and the views the interpreter and the environment read). The model as a whole is
:mod:`.verify_model`'s."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from acpfsm.statecharts import Machine
from acpfsm.statecharts import flows as F
from acpfsm.statecharts.coordination import Fired

if TYPE_CHECKING:
    from .verify_model import Explorer

EXECUTION_ID = "verify"


def model_machine(chart: Any, tags: Mapping[str, Any] | None = None, **data: Any) -> Machine:
    """A machine of ``chart`` as the model runs it: on the compiled engine, unobserved,
    tagged with the model's execution (and ``tags``), started with ``data``."""
    tagged = {"execution_id": EXECUTION_ID, **(tags or {})}
    return cast(Machine, chart.start(engine="compiled", observed=False, tags=tagged, **data))


Label = tuple[Any, ...]
"""An action: its name, then its arguments (``("complete", 2, "error", False)``); the answers
taken at once on the way end it as ``("+", choice, …)``."""

# a generation's record: [dispatch_only, leaf, done, sent, returned, turn_over, result,
# agent, outcome, claimed]
DO, LEAF, DONE, SENT, RET, OVER, RESULT, AGENT, OUT, CLAIMED = range(10)
# what the agent knows of a generation's turn
NOT_RECEIVED, OWES, ENDED, ENDED_TWICE = range(4)
# positions in a frozen state (World.freeze)
S_CARRIER, S_CLOSED, S_PUMP, S_SHUTTING, S_ADMISSION, S_WATCH = range(6)
S_EXE, S_STREAM, S_INIT, S_GENS, S_FLOWS = range(6, 11)
# positions in a frozen flow
R_OWNER, R_NAME, R_LABEL, R_GEN, R_PRED, R_VALUES, R_LOCKS, R_ON_CANCEL, R_ENDED = range(9)

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
    | {"escalating"}
)
_COND_INDEX = {F.Cond.DONE: DONE, F.Cond.SENT: SENT, F.Cond.RETURNED: RET, F.Cond.TURN_OVER: OVER}
_SIGNAL_INDEX = {F.Cond.SENT: SENT, F.Cond.RETURNED: RET}

#: The actions of callers: they never count as the environment releasing a caller.
CALLER_ACTIONS = frozenset({"prompt", "steer", "cancel", "stop", "recover", "leave"})
#: Where a frozen state says the execution crashed (runtime/session/crash.py), and whether
#: the config settlement was requested (:class:`~.verify_init.Settlement`).
S_CRASHED, S_SETTLEMENT = 12, 13
#: The flows whose caller waits (the liveness property's callers), by owner.
CALLER, TASK = "caller", "task"

# ops answered without a checkpoint (a local chore, the init's steps) and their answers
_LOCAL = frozenset(
    {
        F.Op.APPEND_USER,
        F.Op.INJECT_RESUME_CONTEXT,
        F.Op.DISPATCHED,
        F.Op.FLUSH_PARTIAL,
        F.Op.CLOSE_PERMISSIONS,
        F.Op.END_TASKS,
    }
)
_INIT_OPS = frozenset(
    {
        F.Op.INITIALIZE,
        F.Op.AUTHENTICATE,
        F.Op.LOAD_SESSION,
        F.Op.NEW_SESSION,
        F.Op.CHECK_CATALOG,
        F.Op.WAIT_FOR_CATALOG,
        F.Op.APPLY_START_MODEL,
        F.Op.APPLY_PROFILE_LAYER,
        F.Op.PUBLISH_ORIGINAL_SNAPSHOT,
        F.Op.APPLY_RUNTIME_MODE,
        F.Op.APPLY_RUNTIME_OPTIONS,
        F.Op.SETTLE,
        F.Op.ANNOUNCE,
    }
)
_SETTLE_LIMIT = 400


class Violated(Exception):
    """A step the drivers would crash on (the property ``no_illegal_event``): the explorer
    catches it and reports it, it never leaves ``acpfsm verify``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Branch(Exception):
    """A flow reached answers given at once while settling and no choice was recorded for
    it: the explorer tries each (:meth:`Explorer.successors`)."""

    def __init__(self, count: int, run: tuple[Any, ...]) -> None:
        super().__init__(count)
        self.count = count
        self.run = run


class Run:
    """One flow under way in the model (frozen as a tuple, see :meth:`freeze`)."""

    __slots__ = ("ended", "gen", "label", "locks", "name", "on_cancel", "owner", "pred", "values")

    def __init__(
        self,
        owner: str,
        name: str,
        label: str,
        gen: int,
        values: dict[str, Any],
        on_cancel: str,
        pred: int = -1,
        locks: tuple[str, ...] = (),
        ended: bool = False,
    ) -> None:
        self.owner = owner
        self.name = name
        self.label = label
        self.gen = gen
        self.pred = pred
        self.values = values
        self.locks = list(locks)
        self.on_cancel = on_cancel
        self.ended = ended
        """Ended from outside (``stop_redialling``) while its request was in flight: the
        answer may still come back."""

    def freeze(self) -> tuple[Any, ...]:
        values = tuple(sorted(self.values.items()))
        return (
            self.owner,
            self.name,
            self.label,
            self.gen,
            self.pred,
            values,
            tuple(self.locks),
            self.on_cancel,
            self.ended,
        )

    @classmethod
    def thaw(cls, t: tuple[Any, ...]) -> Run:
        return cls(
            t[R_OWNER],
            t[R_NAME],
            t[R_LABEL],
            t[R_GEN],
            dict(t[R_VALUES]),
            t[R_ON_CANCEL],
            t[R_PRED],
            t[R_LOCKS],
            t[R_ENDED],
        )

    def __repr__(self) -> str:
        return f"{self.name}.{self.label}(g{self.gen})"


def _sort_key(t: tuple[Any, ...]) -> str:
    return repr(t)


class WorldState:
    """One state of the model, thawed into machines and plain fields (see
    :mod:`.verify_model`). :meth:`freeze` gives the hashable state, :meth:`thaw` restores one."""

    carrier: str
    closed: bool
    """The execution's task group ended (a stop got through)."""
    pump: int
    """0 the agent's events flow, 1 the carrier gave up (its last events), 2 ended."""
    shutting: bool
    admission: bool
    watch: bool
    gens: list[list[Any]]
    machines: list[Machine]
    runs: list[Run]
    started: bool
    crashed: bool
    """The execution crashed (its ``CrashGuard``): its tasks ended, its waiters released."""
    settlement: bool
    """The session init requested the config settlement (or reattached a session)."""

    def __init__(self, explorer: Explorer, *, replaying: bool = False) -> None:
        self.x = explorer
        self.flows = explorer.flows
        self.replaying = replaying
        self.violations: list[tuple[str, str]] = []
        self.fired: list[Fired] = []
        self.event_claims = 0
        self.idle_escalations: set[int] = set()
        """The generations whose idle escalation the chart decided in this action."""
        self.choices: list[int] = []
        self.chosen = 0
        self._ended_before = False
        self._running: Run | None = None

    def reset(self, carrier: str) -> None:
        """The initial state: the execution built, nothing started yet."""
        x = self.x
        for m in (x.exe, x.fa, x.stream, x.init):
            m.restore(m.compiled.initial)
        self.carrier = carrier
        self.closed = False
        self.pump = 0
        self.shutting = self.admission = self.watch = False
        self.gens, self.machines, self.runs = [], [], []
        x.current = None
        self.started = False
        self.crashed = False
        self.settlement = False

    # --- state ------------------------------------------------------------------------

    def thaw(self, state: tuple[Any, ...]) -> None:
        (
            self.carrier,
            self.closed,
            self.pump,
            self.shutting,
            self.admission,
            self.watch,
            exe,
            stream,
            init,
            gens,
            runs,
            self.started,
            self.crashed,
            self.settlement,
        ) = state
        x = self.x
        x.exe.restore(exe)
        if not self.replaying:  # see freeze
            x.fa.restore(x.fa.compiled.initial)
        x.stream.restore(stream)
        x.init.restore(init)
        self.gens = [list(g) for g in gens]
        self.machines = []
        before = False
        for number, g in enumerate(self.gens, 1):
            m = x.generation(number, g[DO], before)
            before = before or not g[DO]
            m.restore(g[LEAF])
            self.machines.append(m)
        x.current = self.machines[-1] if self.machines else None
        self.runs = [Run.thaw(r) for r in runs]
        self.violations = []
        self.fired = []
        self.event_claims = 0
        self.idle_escalations = set()

    def freeze(self) -> tuple[Any, ...]:
        """The hashable state. Two projections keep it small without changing what can
        happen: the FirstActivity chart is left out (nothing reads it but its own
        announcement, so an exploration restarts it quiet in every state, and a replay tracks
        it), and a superseded generation no flow refers to keeps only what the agent owes."""
        x = self.x
        refs = {r.gen for r in self.runs} | {r.pred for r in self.runs}
        gens = []
        for number, (g, m) in enumerate(zip(self.gens, self.machines, strict=True), 1):
            leaf = g[LEAF] = m.snapshot()
            if leaf == SUPERSEDED and number not in refs and not self.replaying:
                owes = OWES if g[AGENT] == OWES else NOT_RECEIVED
                gens.append((False, leaf, False, False, False, False, "", owes, 1, False))
            else:
                gens.append(tuple(g))
        # outside READY the wakeup watch only decides whether turn content fires an ignored
        # event: it is set again whenever READY is entered
        watch = self.watch or (not self.replaying and not x.exe.is_in("ready"))
        runs = tuple(sorted((r.freeze() for r in self.runs), key=_sort_key))
        return (
            self.carrier,
            self.closed,
            self.pump,
            self.shutting,
            self.admission,
            watch,
            x.exe.snapshot(),
            x.stream.snapshot(),
            x.init.snapshot(),
            tuple(gens),
            runs,
            self.started,
            self.crashed,
            self.settlement,
        )

    # --- views ------------------------------------------------------------------------

    @property
    def current(self) -> int:
        """The current generation's number (0: none admitted yet)."""
        return len(self.gens)

    def holder(self, lock: str) -> Run | None:
        for r in self.runs:
            if lock in r.locks:
                return r
        return None

    def lock_free_for(self, run: Run | None, lock: str = F.Lock.LIFECYCLE) -> bool:
        holder = self.holder(lock)
        return holder is None or holder is run

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
        return not self.closed and self.pump != 2

    @property
    def connected(self) -> bool:
        return self.x.stream.is_in("connected")

    @property
    def session(self) -> bool:
        """The init established an ACP session (prompts can reach the agent)."""
        return self.x.init.is_in("prompting", "booted")

    def flag(self, prop: str, message: str) -> None:
        self.violations.append((prop, message))
