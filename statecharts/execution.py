"""Execution: the status of one agent execution as a whole.

Theory of operation
-------------------
The states are kandev's ``v1.AgentStatus`` values (lifecycle.md §5.11; ``PENDING`` is declared
there but never assigned, so it is not a state here). Every transition below is one row of the
§5.11 table, named after the fact that causes it; nothing else may change the status.

* An execution is built ``running`` (built from an executor instance) and goes ``starting`` when
  the agent process is started (``start_requested``); ``booted`` / a completed initial turn make
  it ``ready``.
* ``prompt_began`` (BeginPrompt) makes it ``running`` from any live status.
* A claimed successful completion makes it ``ready``; an error completion makes it ``failed``
  (or ``stopped`` while shutting down, R32); an owning stream disconnect makes it ``failed``
  without ``agent.failed``.
* Cancel escalation and context reset make it ``ready`` from any live status.
* Process exit: 0 → ``completed`` (also during shutdown); non-zero → ``failed``, or
  ``stopped`` during shutdown.
* ``stopped`` (StopAgentWithReason) is reachable from every status and is final.

Terminal guard (§5.11, R7, R32): ``completed`` and ``failed`` absorb duplicate terminal facts as
self-transitions (a FAILED is never downgraded to STOPPED by a shutdown-time error), while the
paths kandev does not guard (BeginPrompt, MarkReady, a gen-0 success) may still leave them.
"""

from __future__ import annotations

from typing import ClassVar

from statemachine import State

from ._base import Chart

__all__ = ["Execution"]


class Execution(Chart):
    """STARTING, RUNNING, READY, COMPLETED, FAILED, STOPPED and the §5.11 transitions."""

    chart_name: ClassVar[str] = "execution"

    running = State("RUNNING", initial=True)
    starting = State("STARTING")
    ready = State("READY")
    completed = State("COMPLETED")
    failed = State("FAILED")
    stopped = State("STOPPED", final=True)

    # any → STARTING (markAgentStartPending, restart reset, managed-runtime retry reset)
    start_requested = (
        running.to(starting)
        | ready.to(starting)
        | failed.to(starting)
        | completed.to(starting)
        | starting.to.itself()
    )
    # any → RUNNING (BeginPrompt, every prompt, any prior status)
    prompt_began = (
        starting.to(running)
        | ready.to(running)
        | running.to.itself()
        | failed.to(running)
        | completed.to(running)
    )
    # READY → RUNNING: turn content while READY (a wakeup turn, R26/R27)
    wakeup_content_arrived = ready.to(running) | running.to.itself()
    # not READY → READY: a claimed successful completion (generation-bearing or gen 0)
    turn_completed = (
        running.to(ready) | starting.to(ready) | failed.to(ready) | ready.to.itself()  # R33
    )
    # ≠READY → READY (+boot_ready): MarkBootReady, no initial prompt
    booted = starting.to(ready) | running.to(ready) | ready.to.itself()  # R33: no-op
    # FAILED → READY: stream recovered with a running agent process
    recovered = failed.to(ready)
    # any → READY: cancel escalation, context reset
    cancel_escalated = running.to(ready) | starting.to(ready) | failed.to(ready) | ready.to.itself()
    context_reset = running.to(ready) | starting.to(ready) | failed.to(ready) | ready.to.itself()
    # non-terminal → FAILED (+agent.failed), or STOPPED during shutdown (R32)
    turn_failed = (
        running.to(stopped, cond="shutting_down")
        | ready.to(stopped, cond="shutting_down")
        | starting.to(stopped, cond="shutting_down")
        | running.to(failed)
        | ready.to(failed)
        | starting.to(failed)
        | failed.to.itself()  # terminal guard: duplicate terminal event publishes nothing
        | completed.to.itself()
    )
    # any → FAILED, no agent.failed (agentctl.error instead): owning stream disconnect
    stream_lost = running.to(failed) | ready.to(failed) | starting.to(failed) | failed.to.itself()
    # any → FAILED: UpdateError (startup, restart and reset-restore failures)
    init_failed = starting.to(failed) | running.to(failed) | ready.to(failed) | failed.to.itself()
    # non-terminal → COMPLETED / FAILED / STOPPED: the agent process exited; a clean exit is
    # COMPLETED even during shutdown, only a failing one becomes STOPPED (§5.11, R32)
    process_exited = (
        running.to(completed, cond="clean_exit")
        | ready.to(completed, cond="clean_exit")
        | starting.to(completed, cond="clean_exit")
        | running.to(stopped, cond="shutting_down")
        | ready.to(stopped, cond="shutting_down")
        | starting.to(stopped, cond="shutting_down")
        | running.to(failed)
        | ready.to(failed)
        | starting.to(failed)
        | failed.to.itself()  # a FAILED is never downgraded
        | completed.to.itself()
    )
    # any → STOPPED (+agent.stopped): StopAgentWithReason; the execution is removed
    stop_requested = (
        running.to(stopped)
        | starting.to(stopped)
        | ready.to(stopped)
        | completed.to(stopped)
        | failed.to(stopped)
    )

    # --- guards --------------------------------------------------------------------------

    def shutting_down(self, shutting_down: bool = False) -> bool:
        return shutting_down

    def clean_exit(self, exit_code: int | None = None) -> bool:
        return exit_code == 0

    # --- derived views -------------------------------------------------------------------

    @property
    def status(self) -> str:
        """The kandev status name (``READY`` …)."""
        return str(self.states_map[self.leaf].name)

    @property
    def is_terminal(self) -> bool:
        return self.leaf in ("completed", "failed", "stopped")

    @property
    def accepts_prompts(self) -> bool:
        """§5.3 step 6a: RUNNING or READY (``validateStatus``)."""
        return self.leaf in ("running", "ready")
