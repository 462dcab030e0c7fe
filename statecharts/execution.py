"""Execution: the status of one agent execution as a whole.

Theory of operation
-------------------
The states are kandev's ``v1.AgentStatus`` values (apps/backend/pkg/api/v1/agent.go;
``PENDING`` is declared there but never assigned, so it is not a state here). Every
transition below is one row of kandev's status table, named after the fact that causes it;
nothing else may change the status. ``active`` holds the non-terminal statuses.

* An execution is built ``RUNNING`` (built from an executor instance) and goes ``STARTING``
  when the agent process is started (``start_requested``, kandev manager_launch.go
  ``markAgentStartPending``); ``booted`` (``MarkBootReady``) or a completed initial turn make
  it ``READY``.
* ``prompt_began`` (``BeginPrompt``) makes it ``RUNNING`` from any status but STOPPED.
* The outcome of the current prompt generation moves it (the coordination table,
  :mod:`acpfsm.statecharts.coordination`): a claimed success → ``READY``
  (``turn_completed``), an error → ``FAILED`` (or ``STOPPED`` while shutting down, R32), an
  owning stream disconnect → ``FAILED`` without ``agent.failed`` (``stream_lost``), a cancel
  escalation → ``READY`` (``cancel_escalated``), a turn that never reached the agent →
  ``READY`` again (``turn_undelivered``; kandev H7 left it RUNNING with nobody waiting).
* A dispatched turn keeps it ``RUNNING`` (``turn_dispatched``: READY or FAILED entered
  between the admission and the dispatch is left again, so the status never reads READY
  while the agent owes a turn; kandev had no such row).
* A wakeup turn (content while READY, kandev manager_events.go) → ``RUNNING``; its
  generation-0 end → ``READY`` (``wakeup_turn_completed``; an empty one shows it ran).
* Process exit: 0 → ``COMPLETED`` (also during shutdown); non-zero → ``FAILED``, or
  ``STOPPED`` during shutdown.
* ``STOPPED`` (``StopAgentWithReason``) is reachable from every status and is final: the
  execution is removed, the chart has ended.
* ``execution_crashed``: the execution's own code failed outside the protocol (its
  executor, the transport, a bug; no kandev row: Go's goroutines had no such scope) →
  ``FAILED`` with ``agent.failed`` phase ``crash``; a terminal status stays as it is.

Terminal guard (kandev ``isTerminalStatus``, R7, R32): ``COMPLETED`` and ``FAILED`` absorb
duplicate terminal facts as targetless transitions (a FAILED is never downgraded to STOPPED
by a shutdown-time error), while the paths kandev does not guard (BeginPrompt, MarkReady, a
gen-0 success) may still leave them.

Effects: ``publish_agent_ready``/``_running``/``_failed``/``_stopped``/``_completed``/
``_boot_ready``, ``publish_stream_error`` (``agentctl.error`` when no turn owned the lost
stream), ``record_failure`` (the execution's error message and end time),
``record_finish`` (its end time), ``record_exit`` (the exit code), ``watch_for_wakeup``
(the next turn content while READY is a wakeup fact), ``unwatch_wakeup`` (a prompt left
READY: its turn's content is no wakeup, so the runtime stops watching for one and fires no
``wakeup_content_arrived`` for it; and the wakeup fact itself: one per READY),
``report_ready``/``report_not_ready`` (the answers to ``ready_awaited``, asked without firing
by a caller waiting for READY: the runtime reads no status name to decide),
``recover_stream`` (the answer to ``stream_recovery_requested``, asked in place: FAILED, so
``RecoverAgentPromptStream`` checks the carrier and fires ``recovered``).
"""

from __future__ import annotations

from typing import ClassVar

from statemachine import State

from ._base import Chart
from ._compile import EffectDecl, Effects, effect

__all__ = ["Execution"]

_READY = effect("publish_agent_ready", generation=0, stop_reason="")
_FAILED_TURN: list[EffectDecl] = [
    effect("record_failure", "error"),
    effect("publish_agent_failed", "error", generation=0, phase="prompt_send"),
]
_STOPPED_SHUTDOWN: list[EffectDecl] = [
    "record_finish",
    effect("publish_agent_stopped", reason="shutdown"),
]
_EXIT_FAILED: list[EffectDecl] = [
    effect("record_exit", "exit_code"),
    effect("record_failure", "error"),
    effect("publish_agent_failed", "error", generation=0, phase="process"),
]


class Execution(Chart):
    """STARTING, RUNNING, READY, COMPLETED, FAILED, STOPPED and kandev's status table."""

    chart_name: ClassVar[str] = "execution"

    class active(State.Compound):
        running = State("RUNNING", initial=True)
        starting = State("STARTING")
        ready = State("READY")

    completed = State("COMPLETED")
    failed = State("FAILED")
    stopped = State("STOPPED", final=True)

    # the agent process is being started (markAgentStartPending)
    start_requested = active.running.to(active.starting)
    agent_start_failed = active.starting.to(failed)
    # any → RUNNING (BeginPrompt, every prompt, any prior status)
    prompt_began = (
        active.starting.to(active.running)
        | active.ready.to(active.running)
        | active.running.to(None)
        | failed.to(active.running)
        | completed.to(active.running)
    )
    # agent activity (any event but a claim): the first one while not READY is announced
    # once per execution (the FirstActivity chart; R26: READY takes it silently)
    activity_recorded = (
        active.ready.to(None) | active.to(None) | failed.to(None) | (completed.to(None))
    )
    # READY → RUNNING: turn content while READY (a wakeup turn, R26)
    wakeup_content_arrived = (
        active.ready.to(active.running) | active.to(None) | (failed.to(None)) | completed.to(None)
    )
    # the end of a wakeup turn that no generation claimed (generation 0, R27); before the
    # session is initialized the startup owns the stream and such an event is ignored (R10)
    wakeup_turn_completed = (
        active.ready.to.itself()  # an empty wakeup turn: show it ran
        | active.running.to(active.ready)
        | active.starting.to(None)
        | failed.to(active.ready)
        | completed.to(None)
    )
    wakeup_turn_failed = (
        active.starting.to(None)
        | active.to(stopped, cond="shutting_down")
        | active.to(failed)
        | failed.to(None)
        | completed.to(None)
    )
    # a cancel asks whether the execution still runs (the app's stop ends it: the cancel
    # then says so, kandev has no such row)
    cancel_requested = active.to(None) | failed.to(None) | completed.to(None)
    # a caller waiting for READY asks whether it is READY (``report_ready``), still on its way
    # (nothing), or never will be without another fact (``report_not_ready``); STOPPED has
    # ended the chart, which says the same
    ready_awaited = active.ready.to(None) | active.to(None) | failed.to(None) | completed.to(None)
    # a prompt or steer asks whether prompts are accepted (validateStatus: RUNNING or READY)
    prompt_requested = (
        active.running.to(None)
        | active.ready.to(None)
        | (active.starting.to(None))
        | failed.to(None)
        | completed.to(None)
    )
    # not READY → READY: a claimed successful completion (R33: READY stays READY)
    turn_completed = (
        active.running.to(active.ready)
        | active.starting.to(active.ready)
        | failed.to(active.ready)
        | active.ready.to(None)
    )
    # the turn never reached the agent: nobody waits, so READY again (kandev H7)
    turn_undelivered = (
        active.running.to(active.ready) | active.to(None) | failed.to(None) | (completed.to(None))
    )
    # a turn reached the agent: the execution is RUNNING while the agent owes it, even when
    # READY was entered between its admission and its dispatch (an unclaimed wakeup end, a
    # recovered stream); not in kandev, where the status could read READY under a live turn
    turn_dispatched = (
        active.ready.to(active.running)
        | failed.to(active.running)
        | active.to(None)
        | completed.to(None)
    )
    # ≠READY → READY (+agent.boot_ready): MarkBootReady, no initial prompt
    booted = (
        active.starting.to(active.ready)
        | active.running.to(active.ready)
        | (
            active.ready.to(None)  # R33
        )
    )
    # RecoverAgentPromptStream asks whether there is anything to recover: only FAILED is
    # (``recover_stream``); answered in place, before the carrier is checked
    stream_recovery_requested = failed.to(None) | active.to(None) | completed.to(None)
    # FAILED → READY: stream recovered with a running agent process
    recovered = failed.to(active.ready)
    # any → READY: cancel escalation (escalateStuckCancel)
    cancel_escalated = (
        active.running.to(active.ready)
        | active.starting.to(active.ready)
        | failed.to(active.ready)
        | active.ready.to(None)
        | completed.to(None)  # the agent exited cleanly: nothing to make READY
    )
    # non-terminal → FAILED (+agent.failed), or STOPPED during shutdown (R32)
    turn_failed = (
        active.to(stopped, cond="shutting_down")
        | active.to(failed)
        | failed.to(None)  # terminal guard: a duplicate terminal event publishes nothing
        | completed.to(None)
    )
    # any → FAILED, no agent.failed (agentctl.error instead): the owning stream is lost; before
    # the session is initialized the startup owns that failure (R10)
    stream_lost = (
        active.starting.to(None)
        | active.to(failed, cond="owned_by_turn")  # the turn published the error already
        | active.to(failed)
        | failed.to(None)
        | completed.to(None)
    )
    # any → FAILED: UpdateError (startup failures)
    init_failed = active.to(failed) | failed.to(None)
    # non-terminal → COMPLETED / FAILED / STOPPED: the agent process exited; a clean exit is
    # COMPLETED even during shutdown, only a failing one becomes STOPPED
    process_exited = (
        active.starting.to(None)  # R10: the startup owns it (its requests fail)
        | active.to(completed, cond="clean_exit")
        | active.to(stopped, cond="shutting_down")
        | active.to(failed)
        | failed.to(None)  # a FAILED is never downgraded
        | completed.to(None)
    )
    # non-terminal → FAILED (+agent.failed, phase "crash"): the execution's own code failed
    # (executor, transport, a bug); COMPLETED and FAILED stay
    execution_crashed = active.to(failed) | failed.to(None) | completed.to(None)
    # any → STOPPED (+agent.stopped): StopAgentWithReason; the execution is removed
    stop_requested = active.to(stopped) | completed.to(stopped) | failed.to(stopped)

    effects: ClassVar[Effects] = Effects(
        transitions={
            "prompt_began: ready -> running": ["unwatch_wakeup"],
            "wakeup_content_arrived: ready -> running": ["unwatch_wakeup", "publish_agent_running"],
            "wakeup_content_arrived: active": ["unwatch_wakeup"],
            "wakeup_content_arrived: failed": ["unwatch_wakeup"],
            "wakeup_content_arrived: completed": ["unwatch_wakeup"],
            "ready_awaited: ready": ["report_ready"],
            "stream_recovery_requested: failed": ["recover_stream"],
            "ready_awaited: failed": ["report_not_ready"],
            "ready_awaited: completed": ["report_not_ready"],
            "turn_dispatched: ready -> running": ["publish_agent_running"],
            "wakeup_turn_completed: ready -> ready": [
                "end_wakeup_turn",
                "publish_agent_running",
                effect("publish_agent_ready", "stop_reason", generation=0),
            ],
            "wakeup_turn_completed: running -> ready": [
                "end_wakeup_turn",
                effect("publish_agent_ready", "stop_reason", generation=0),
            ],
            "wakeup_turn_completed: completed": ["end_wakeup_turn"],
            "wakeup_turn_failed: active -> stopped": ["end_wakeup_turn", *_STOPPED_SHUTDOWN],
            "wakeup_turn_failed: active -> failed": ["end_wakeup_turn", *_FAILED_TURN],
            "wakeup_turn_failed: failed": ["end_wakeup_turn"],
            "wakeup_turn_failed: completed": ["end_wakeup_turn"],
            "prompt_requested: starting": ["refuse_prompt"],
            "prompt_requested: failed": ["refuse_prompt"],
            "prompt_requested: completed": ["refuse_prompt"],
            "wakeup_turn_completed: failed -> ready": [
                "end_wakeup_turn",
                effect("publish_agent_ready", "stop_reason", generation=0),
            ],
            "activity_recorded: active": ["announce_first_activity"],
            "activity_recorded: failed": ["announce_first_activity"],
            "activity_recorded: completed": ["announce_first_activity"],
            "turn_completed: running -> ready": [
                "announce_first_activity",
                effect("publish_agent_ready", "generation", "stop_reason"),
            ],
            "turn_completed: starting -> ready": [
                "announce_first_activity",
                effect("publish_agent_ready", "generation", "stop_reason"),
            ],
            "turn_completed: failed -> ready": [
                "announce_first_activity",
                effect("publish_agent_ready", "generation", "stop_reason"),
            ],
            "turn_completed: ready": [effect("publish_agent_ready", "generation", "stop_reason")],
            "turn_undelivered: running -> ready": [
                effect("publish_agent_ready", "generation", stop_reason="")
            ],
            "booted: starting -> ready": [
                effect("publish_agent_boot_ready", resume_context_pending=False)
            ],
            "booted: running -> ready": [
                effect("publish_agent_boot_ready", resume_context_pending=False)
            ],
            "booted: ready": [effect("publish_agent_boot_ready", resume_context_pending=False)],
            "recovered: failed -> ready": [
                effect("publish_agent_boot_ready", resume_context_pending=False)
            ],
            "cancel_escalated: running -> ready": [
                effect("publish_agent_ready", "generation", stop_reason="")
            ],
            "cancel_escalated: starting -> ready": [
                effect("publish_agent_ready", "generation", stop_reason="")
            ],
            "cancel_escalated: failed -> ready": [
                effect("publish_agent_ready", "generation", stop_reason="")
            ],
            "cancel_escalated: ready": [
                effect("publish_agent_ready", "generation", stop_reason="")
            ],
            "turn_failed: active -> stopped": _STOPPED_SHUTDOWN,
            "turn_failed: active -> failed": [
                effect("record_failure", "error"),
                effect("publish_agent_failed", "error", "generation", phase="prompt_send"),
            ],
            "stream_lost: active -> failed [owned_by_turn]": [effect("record_failure", "error")],
            "stream_lost: active -> failed []": [
                effect("record_failure", "error"),
                effect("publish_stream_error", "error", generation=0),
            ],
            "init_failed: active -> failed": [
                effect("record_failure", "error"),
                effect("publish_agent_failed", "error", generation=0, phase="session_init"),
            ],
            "execution_crashed: active -> failed": [
                effect("record_failure", "error"),
                effect("publish_agent_failed", "error", generation=0, phase="crash"),
            ],
            "process_exited: active -> completed": [
                effect("record_exit", "exit_code"),
                "record_finish",
                effect("publish_agent_completed", "exit_code"),
                "close_subscriptions",
            ],
            "process_exited: active -> stopped": [
                effect("record_exit", "exit_code"),
                *_STOPPED_SHUTDOWN,
                "close_subscriptions",
            ],
            "process_exited: active -> failed": [*_EXIT_FAILED, "close_subscriptions"],
            "process_exited: failed": [effect("record_exit", "exit_code"), "close_subscriptions"],
            "process_exited: completed": [
                effect("record_exit", "exit_code"),
                "close_subscriptions",
            ],
            "stop_requested: active -> stopped": [
                "record_finish",
                effect("publish_agent_stopped", "reason"),
            ],
            "stop_requested: completed -> stopped": [
                "record_finish",
                effect("publish_agent_stopped", "reason"),
            ],
            "stop_requested: failed -> stopped": [
                "record_finish",
                effect("publish_agent_stopped", "reason"),
            ],
        },
        on_enter={"ready": ["watch_for_wakeup"]},
    )

    # --- guards --------------------------------------------------------------------------

    def shutting_down(self, shutting_down: bool = False) -> bool:
        return shutting_down

    def clean_exit(self, exit_code: int | None = None) -> bool:
        return exit_code == 0

    def owned_by_turn(self, generation: int = 0) -> bool:
        return generation != 0
