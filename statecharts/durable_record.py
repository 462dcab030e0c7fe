"""DurableRecord: when an execution's stored row is written (``Runtime(store=...)``).

Theory of operation
-------------------
kandev keeps one ``executors_running`` row per execution in lockstep with its in-memory store
(lifecycle/persistence.go ``persistExecutorRunning`` at each decision point,
``deleteExecutorRunning`` when the execution is removed). Here the decision points are the
other charts' states, and the coordination table (:mod:`.coordination`) tells this chart
when one of them is entered; this chart says what is written then. An execution run without
a store has no DurableRecord machine: the coordination reaches nothing, nothing is written.

What recovery needs changes at these facts, each a ``persist_execution`` (the whole row):

* ``launch_accepted`` (the Execution enters STARTING), ``agent_reachable`` (the session init
  saw the stream: the executor's reattach handle is known), ``session_established`` (the
  session init is booted or prompting: the ACP session id is known) are *flushed*: the
  runtime goes on once the row is committed (bounded; a store that does not answer is a
  health failure, and the execution goes on);
* ``status_changed`` (READY, RUNNING, FAILED, COMPLETED entered) and ``overrides_changed``
  (the app changed the runtime model or mode) are queued and committed with the next batch;
* ``turn_sending`` (a prompt generation is about to be sent: ``reserve_generation``): the
  generation must be covered by the stored reservation before the agent may see it, so a
  recovered execution never reuses its number (the runtime reserves a block and flushes when
  the block runs out);
* ``execution_stopped`` (STOPPED: the execution is removed) deletes the row and its events:
  ``removed``, final.

Event-log appends are not decisions: every published event is queued with its sequence
number and committed in batches, never one write per message chunk.

``runtime_detached``: the Runtime is leaving with the execution still running (a graceful
exit of the app). Its agent may outlive it (agentctl), so what the teardown looks like from
inside (a stream closed on purpose) must not overwrite what the next start recovers from:
``detached`` ignores every later fact.
"""

from __future__ import annotations

from typing import ClassVar

from statemachine import State

from ._base import Chart
from ._compile import Effects, effect

__all__ = ["DurableRecord"]

_FLUSH = effect("persist_execution", flush=True)
_QUEUE = effect("persist_execution", flush=False)


class DurableRecord(Chart):
    """kept → removed (stopped) or detached (the Runtime left it running)."""

    chart_name: ClassVar[str] = "durable_record"
    validate_final_reachability: ClassVar[bool] = False

    kept = State("kept", initial=True)
    detached = State("detached")
    removed = State("removed", final=True)

    launch_accepted = kept.to(None) | detached.to(None)
    agent_reachable = kept.to(None) | detached.to(None)
    session_established = kept.to(None) | detached.to(None)
    status_changed = kept.to(None) | detached.to(None)
    overrides_changed = kept.to(None) | detached.to(None)
    turn_sending = kept.to(None) | detached.to(None)
    execution_stopped = kept.to(removed) | detached.to(None)
    runtime_detached = kept.to(detached) | detached.to(None)

    effects: ClassVar[Effects] = Effects(
        transitions={
            "launch_accepted: kept": [_FLUSH],
            "agent_reachable: kept": [_FLUSH],
            "session_established: kept": [_FLUSH],
            "status_changed: kept": [_QUEUE],
            "overrides_changed: kept": [_QUEUE],
            "turn_sending: kept": [effect("reserve_generation", "generation")],
            "execution_stopped: kept -> removed": ["delete_execution"],
        },
    )
