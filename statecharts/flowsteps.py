"""The step kinds of the drivers' flow table, and the table's grammar: plain frozen data,
one step of a flow each (what each kind does: :mod:`acpfsm.statecharts.flows`).

The steps are frozen :class:`msgspec.Struct` classes rather than dataclasses: the same plain
data (positional and keyword construction, equality, ``repr``, ``__match_args__``), built in
C when the module loads: thirteen frozen dataclasses cost ~9 ms of ``import acpfsm.runtime``,
these ~0.3 ms."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from .names import EffectName, EventName, Result, ResultName

__all__ = [
    "NEXT",
    "RETURNED_RESULTS",
    "Admit",
    "Check",
    "Choose",
    "Cond",
    "Do",
    "End",
    "Fire",
    "Flow",
    "Give",
    "Go",
    "Lock",
    "On",
    "Op",
    "Outcome",
    "Released",
    "Signal",
    "Spawn",
    "Step",
    "Take",
    "Wait",
    "chart_of",
    "data_key",
    "flow",
    "go",
    "targets",
]

NEXT = ""
"""A step's default successor: the step declared after it."""


class On(enum.StrEnum):
    """The chart a :class:`Fire` step fires at."""

    GENERATION = "generation"
    """The flow's own generation (bound at its start, by its admission, or by ``bind``)."""
    PREDECESSOR = "predecessor"
    """The generation a prompt found current when it began (its barrier's owner)."""
    CURRENT = "current"
    """The execution's current generation at the moment of the step."""
    STAMPED = "stamped"
    """The generation the agent's event is stamped with (the current one for generation 0),
    while it is kept (kandev ``handleCompleteEvent``'s routing, R6/R7)."""
    EXECUTION = "execution"
    STREAM = "agent_stream"
    INIT = "session_init"


class Cond(enum.StrEnum):
    """A signal a :class:`Wait` or :class:`Check` reads."""

    DONE = "done"
    """The flow's generation released its waiter (its ``release_waiter`` effect)."""
    SENT = "sent"
    """The flow's generation's send attempt is over (answered, failed, never made)."""
    RETURNED = "returned"
    """The prompt call that owns the flow's generation has returned."""
    TURN_OVER = "turn_over"
    """The agent no longer owes the flow's generation's turn (its ``end_cancel`` effect)."""
    PREDECESSOR_DONE = "predecessor_done"
    """The predecessor's waiter was released."""
    ADMISSION = "admission"
    """Callers' prompts may be admitted (the session init's ``open_admission`` effect)."""
    CARRIER = "carrier"
    """The carrier is up (the stream chart says so); it *fails* (the wait's ``expired``)
    once the flow's generation is released or nothing redials any more."""
    TIMER = "timer"
    """Only the bound: a backoff, a budget."""
    FINISHED = "finished"
    """The execution's tasks have ended."""


#: The signals a flow may set (:class:`Signal`; a :class:`Do` with ``signal``).
SETTABLE = frozenset({Cond.SENT, Cond.RETURNED})


class Lock(enum.StrEnum):
    """kandev's two locks (lifecycle/types.go): ``promptMu`` and ``promptLifecycleMu``."""

    PROMPT = "prompt"
    LIFECYCLE = "lifecycle"


class Op(enum.StrEnum):
    """The operations a :class:`Do` performs: each has one handler in the runtime and one
    set of possible answers in ``acpfsm verify``'s environment."""

    # the caller's requests to the agent
    SEND_PROMPT = "send_prompt"
    SEND_STEER = "send_steer"
    SEND_CANCEL = "send_cancel"
    STOP_AGENT = "stop_agent"
    # the carrier
    DIAL = "dial"
    AWAIT_STREAM = "await_stream"
    # the session init's steps (the SessionInit chart's working states)
    INITIALIZE = "initialize"
    AUTHENTICATE = "authenticate"
    LOAD_SESSION = "load_session"
    NEW_SESSION = "new_session"
    CHECK_CATALOG = "check_catalog"
    WAIT_FOR_CATALOG = "wait_for_catalog"
    APPLY_START_MODEL = "apply_start_model"
    APPLY_PROFILE_LAYER = "apply_profile_layer"
    PUBLISH_ORIGINAL_SNAPSHOT = "publish_original_snapshot"
    APPLY_RUNTIME_MODE = "apply_runtime_mode"
    APPLY_RUNTIME_OPTIONS = "apply_runtime_options"
    SETTLE = "settle"
    ANNOUNCE = "announce"
    # local chores (no answer but ``ok``; the model takes them at once)
    APPEND_USER = "append_user"
    INJECT_RESUME_CONTEXT = "inject_resume_context"
    MATERIALIZE = "materialize"
    DISPATCHED = "dispatched"
    FLUSH_PARTIAL = "flush_partial"
    CLOSE_PERMISSIONS = "close_permissions"
    END_TASKS = "end_tasks"


class Outcome(enum.StrEnum):
    """How a flow ended: what its caller returns or raises (the runtime's table)."""

    DONE = "done"
    """Nothing to report (a cancel acknowledged and its turn ended, a fact handled)."""
    RESULT = "result"
    """What the flow's generation's ``release_waiter`` effect said."""
    DISPATCHED = "dispatched"
    NOT_READY = "not_ready"
    BARRIER_FAILED = "barrier_failed"
    ATTACHMENT_FAILED = "attachment_failed"
    DISPATCH_FAILED = "dispatch_failed"
    DISPATCH_CANCEL_ESCALATED = "dispatch_cancel_escalated"
    CANCEL_ESCALATED = "cancel_escalated"
    CANCEL_FAILED = "cancel_failed"
    STEER_NOT_DISPATCHED = "steer_not_dispatched"
    STEER_ATTACHMENT_FAILED = "steer_attachment_failed"
    STEER_TIMED_OUT = "steer_timed_out"
    STEER_FAILED = "steer_failed"
    LEFT = "left"
    """The caller left (cancelled): its cancellation propagates."""
    STOPPED = "stopped"


# --- the steps ---------------------------------------------------------------------------


class Go(msgspec.Struct, frozen=True):
    """Where an answer leads (``to``), and the flow values it sets (``values``: fixed data
    the table declares for that answer, e.g. a cancel's ``acknowledged``)."""

    to: str = NEXT
    values: tuple[tuple[str, Any], ...] = ()


def go(to: str = NEXT, **values: Any) -> Go:
    return Go(to, tuple(values.items()))


class Fire(msgspec.Struct, frozen=True):
    """Fire ``event`` at the chart ``on`` (see the module docstring). ``data`` names the flow
    values sent as the event's data, ``fixed`` adds constant data. ``locked``: under the
    lifecycle lock (taken for this step unless the flow holds it). A ``data`` item
    ``"key:value"`` sends the flow value ``value`` as the event's ``key``. ``bind``: the
    generation fired at becomes the flow's (``On.CURRENT``, ``On.STAMPED``). The taken
    branch effect's arguments become flow values."""

    on: On
    event: EventName
    data: tuple[str, ...] = ()
    fixed: tuple[tuple[str, Any], ...] = ()
    branch: tuple[tuple[EffectName, str], ...] = ()
    then: str = NEXT
    absent: str = NEXT
    locked: bool = False
    bind: bool = False


class Do(msgspec.Struct, frozen=True):
    """Perform ``op``; its answer (a key of ``answers``) picks the next step. With
    ``bound``, the answer ``expired`` when the bound runs out. ``signal``: the flow's
    generation's signal is cleared before and set after, whatever the answer (a send
    attempt). ``values`` names what the op's answers carry (``acpfsm verify`` fills them
    from ``domains``: the values the model explores)."""

    op: Op
    answers: Mapping[str, Go] = msgspec.field(default_factory=lambda: {"ok": Go()})
    bound: str = ""
    signal: Cond | None = None
    domains: tuple[tuple[str, tuple[Any, ...]], ...] = ()


class Wait(msgspec.Struct, frozen=True):
    """Wait for ``until`` (bounded by ``bound`` unless empty): ``happened`` or ``expired``.
    ``ticks``: while waiting, the stall watchdog may fire this event at the flow's
    generation. ``cancelled``: the step run (shielded) when the flow's caller leaves during
    this wait, before its cancellation goes on (R17)."""

    until: Cond
    bound: str = ""
    happened: str = NEXT
    expired: str = ""
    ticks: EventName | None = None
    cancelled: str = ""


class Check(msgspec.Struct, frozen=True):
    """``yes`` when the signal is set now, else ``no`` (no waiting)."""

    cond: Cond
    yes: str
    no: str


class Choose(msgspec.Struct, frozen=True):
    """``yes`` when the flow value ``value`` is true, else ``no``."""

    value: str
    yes: str = NEXT
    no: str = NEXT


#: The results a generation's ``release_waiter`` effect names that its caller returns (a
#: value); every other result is raised as a typed error.
RETURNED_RESULTS: frozenset[ResultName] = frozenset(
    {Result.completed, Result.handed_off, Result.withdrawn}
)


class Released(msgspec.Struct, frozen=True):
    """The flow's generation was released: ``returned`` when its result is one the caller
    returns (:data:`RETURNED_RESULTS`), else ``raised``."""

    returned: str
    raised: str


class Admit(msgspec.Struct, frozen=True):
    """BeginPrompt (under the lifecycle lock): the current generation is superseded and a
    new one admitted, which becomes the flow's; ``refused`` when the execution has ended
    (R24). From here on, a caller that leaves runs ``cancelled`` (shielded)."""

    refused: str
    cancelled: str = ""


class Take(msgspec.Struct, frozen=True):
    lock: Lock


class Give(msgspec.Struct, frozen=True):
    lock: Lock


class Signal(msgspec.Struct, frozen=True):
    cond: Cond


class Spawn(msgspec.Struct, frozen=True):
    """Start ``flow`` (at its ``entry``) in the execution's task group, on the flow's
    generation."""

    flow: str
    entry: str = ""


class End(msgspec.Struct, frozen=True):
    outcome: Outcome


Step = Fire | Do | Wait | Check | Choose | Released | Admit | Take | Give | Signal | Spawn | End


@dataclass(frozen=True)
class Flow:
    """One flow: its steps by label, in declaration order; ``entries`` names where each way
    of starting it begins (the first step for ``""``); ``on_exit`` are the flow's
    generation's signals set whenever the flow is over (its ``finally``)."""

    name: str
    steps: Mapping[str, Step]
    entries: Mapping[str, str]
    following: Mapping[str, str]
    on_exit: tuple[Cond, ...] = ()
    cancelled: str = ""
    """The step run (shielded) when the flow's caller leaves, unless a later step says
    otherwise (:class:`Admit`, :class:`Wait`); none: the cancellation just goes on."""
    meaning: str = ""

    def start(self, entry: str = "") -> str:
        return self.entries[entry]

    def after(self, label: str, to: str) -> str:
        """The label ``to`` names from step ``label`` (``NEXT``: the one declared after)."""
        return self.following[label] if to == NEXT else to

    def __getitem__(self, label: str) -> Step:
        return self.steps[label]


def flow(
    name: str,
    *steps: tuple[str, Step],
    entries: Mapping[str, str] | None = None,
    on_exit: tuple[Cond, ...] = (),
    cancelled: str = "",
    meaning: str = "",
) -> Flow:
    """Build a :class:`Flow` from ``(label, step)`` pairs (declaration order)."""
    labels = [label for label, _ in steps]
    if len(set(labels)) != len(labels):
        raise ValueError(f"flow {name}: a label is declared twice")
    following = {
        label: (labels[i + 1] if i + 1 < len(labels) else "") for i, label in enumerate(labels)
    }
    return Flow(
        name,
        dict(steps),
        {"": labels[0], **(entries or {})},
        following,
        on_exit,
        cancelled,
        meaning,
    )


_GENERATIONS = frozenset({On.GENERATION, On.PREDECESSOR, On.CURRENT, On.STAMPED})


def chart_of(on: On) -> str:
    """The name of the chart a :class:`Fire` at ``on`` fires at."""
    return "prompt_generation" if on in _GENERATIONS else str(on)


def data_key(item: str) -> tuple[str, str]:
    """A :class:`Fire` ``data`` item: ``(event key, flow value)``."""
    key, _, value = item.partition(":")
    return key, value or key


def targets(step: Step, label: str, f: Flow) -> Iterable[str]:
    """The labels ``step`` (at ``label`` of ``f``) can go to."""
    if isinstance(step, Fire):
        yield from (to for _, to in step.branch)
        yield f.after(label, step.then)
        yield f.after(label, step.absent)
    elif isinstance(step, Do):
        yield from (f.after(label, g.to) for g in step.answers.values())
    elif isinstance(step, Wait):
        yield f.after(label, step.happened)
        if step.bound:
            yield f.after(label, step.expired)
        if step.cancelled:
            yield step.cancelled
    elif isinstance(step, Check):
        yield step.yes
        yield step.no
    elif isinstance(step, Choose):
        yield f.after(label, step.yes)
        yield f.after(label, step.no)
    elif isinstance(step, Released):
        yield step.returned
        yield step.raised
    elif isinstance(step, Admit):
        yield step.refused
        yield f.after(label, NEXT)
        if step.cancelled:
            yield step.cancelled
    elif not isinstance(step, End):
        yield f.after(label, NEXT)
