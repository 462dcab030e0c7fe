"""StartupRecovery: one stored execution, from the app's start to recovered or lost.

Theory of operation
-------------------
kandev's lifecycle ``Manager.Start`` (lifecycle/manager_lifecycle.go) asks every executor
backend which instances survived (executor_registry.go ``RecoverAll`` → each backend's
``RecoverInstances``), rebuilds an execution for each, reconciles its ``executors_running``
row and reconnects its streams; a FAILED execution whose stream comes back with the agent
running is revived to READY with ``agent.boot_ready`` (manager_interaction.go
``RecoverAgentPromptStream``, ``restoreRecoveredFailedExecution``). Each attempt has its own
startup generation (types.go ``beginStartupRecovery``), and a signal stamped with another
one is ignored (``acceptsStartupAttempt``). Here one machine of this chart is one attempt:
the runtime starts it with the attempt's ``startup_generation`` (the stored one plus one,
claimed in the row before anything else), and every fact it feeds back carries the
generation of the attempt that produced it. A fact from another attempt is *stale*: every
state ignores it (declared once, on ``attempt``). A fact of this attempt that the state does
not expect is illegal, loudly.

1. ``recovery_started`` (the runtime read the row at start-up): a row whose agent had already
   ended before the app did (``agent_ended``: the stored status is COMPLETED, or FAILED with
   its exit code) rests in ``finished`` as it was. Otherwise the executor is asked about the
   agent (``probing``: ``probe_agent``). When the row says a turn was in flight
   (``turn_in_flight``: the stored status is RUNNING) its caller is gone: the generation is
   closed as interrupted (``publish_turn_interrupted``), a reattached agent still running it
   is asked to cancel it (``cancel_interrupted_turn``: it takes the next prompt at once), and
   the recovered execution numbers its prompts past the stored reservation, so a late
   completion of that turn is ignored by generation.
2. The executor's answer: ``agent_alive`` (agentctl: the instance is listed and its agent
   runs) → ``reattaching``: a new stream to the same agent process and ACP session, no
   session/new (``reattach_agent``); ``reattached`` once READY (the session init publishes
   ``agent.recovered``, then the execution's ``agent.boot_ready``) → ``recovered``, or
   ``reattach_failed`` → ``lost``. ``orphan_found`` (stdio: the process group the app started
   still runs the stored command, with nobody at its pipes) → ``ending_orphan``: the group is
   ended (``end_orphan``), then ``orphan_ended`` → ``lost``. ``agent_gone`` → ``lost``.
3. ``lost`` is FAILED with the reason (``mark_lost``: the app raises and publishes
   ``ExecutionLost``), its ACP session id kept in the row (``persist_recovery``). It can be
   relaunched: a new attempt, ``relaunch_requested`` → ``relaunching`` (the agent is started
   again and the conversation loaded with session/load, ``relaunch_agent``) →
   ``relaunched`` → ``recovered``, or ``relaunch_failed`` → ``lost``.

Effects: ``claim_attempt`` (the row's startup generation becomes this attempt's, flushed),
``publish_turn_interrupted``, ``cancel_interrupted_turn``, ``probe_agent``, ``reattach_agent``, ``end_orphan``,
``relaunch_agent``, ``mark_lost``, ``mark_finished``, ``mark_recovered`` (what a relaunch
returns: the runtime reads no state name), ``persist_recovery``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from statemachine import State

from ._base import Chart
from ._compile import EffectDecl, Effects, effect

__all__ = ["StartupRecovery"]

_LOST: list[EffectDecl] = [effect("mark_lost", "reason", reason=""), "persist_recovery"]


class StartupRecovery(Chart):
    """stored → probing → reattaching → recovered, or → lost (or finished as it was)."""

    chart_name: ClassVar[str] = "startup_recovery"
    validate_final_reachability: ClassVar[bool] = False
    constants: ClassVar[dict[str, Any]] = {"startup_generation": 0}
    startup_generation: int

    class attempt(State.Compound):
        stored = State("stored", initial=True)
        probing = State("probing")
        ending_orphan = State("ending_orphan")
        reattaching = State("reattaching")
        relaunching = State("relaunching")
        recovered = State("recovered")
        lost = State("lost")
        finished = State("finished")

    # 1. the row, read at start-up; or a relaunch asked for
    recovery_started = (
        attempt.stored.to(attempt.finished, cond="agent_ended")
        | attempt.stored.to(attempt.probing, cond="turn_in_flight")
        | attempt.stored.to(attempt.probing)
    )
    relaunch_requested = attempt.stored.to(attempt.relaunching)
    # 2. the executor's answers, and the reattach's outcome (stale ones: another attempt's)
    agent_alive = attempt.probing.to(attempt.reattaching, cond="current") | attempt.to(
        None, cond="stale"
    )
    agent_gone = attempt.probing.to(attempt.lost, cond="current") | attempt.to(None, cond="stale")
    orphan_found = attempt.probing.to(attempt.ending_orphan, cond="current") | attempt.to(
        None, cond="stale"
    )
    orphan_ended = attempt.ending_orphan.to(attempt.lost, cond="current") | attempt.to(
        None, cond="stale"
    )
    reattached = attempt.reattaching.to(attempt.recovered, cond="current") | attempt.to(
        None, cond="stale"
    )
    reattach_failed = attempt.reattaching.to(attempt.lost, cond="current") | attempt.to(
        None, cond="stale"
    )
    # 3. a relaunch's outcome
    relaunched = attempt.relaunching.to(attempt.recovered, cond="current") | attempt.to(
        None, cond="stale"
    )
    relaunch_failed = attempt.relaunching.to(attempt.lost, cond="current") | attempt.to(
        None, cond="stale"
    )

    effects: ClassVar[Effects] = Effects(
        transitions={
            "recovery_started: stored -> finished": ["claim_attempt"],
            "recovery_started: stored -> probing [turn_in_flight]": [
                "claim_attempt",
                effect("publish_turn_interrupted", "generation"),
                "cancel_interrupted_turn",
            ],
            "recovery_started: stored -> probing []": ["claim_attempt"],
            "relaunch_requested: stored -> relaunching": ["claim_attempt"],
        },
        on_enter={
            "probing": ["probe_agent"],
            "ending_orphan": ["end_orphan"],
            "reattaching": ["reattach_agent"],
            "relaunching": ["relaunch_agent"],
            "lost": _LOST,
            "finished": ["mark_finished", "persist_recovery"],
            "recovered": ["mark_recovered"],
        },
    )

    # --- guards: pure functions of the event's data and the attempt's generation ------------

    def current(self, startup_generation: int = -1) -> bool:
        return startup_generation == self.startup_generation

    def stale(self, startup_generation: int = -1) -> bool:
        return startup_generation != self.startup_generation

    def agent_ended(self, agent_ended: bool = False) -> bool:
        return agent_ended

    def turn_in_flight(self, turn_in_flight: bool = False) -> bool:
        return turn_in_flight
