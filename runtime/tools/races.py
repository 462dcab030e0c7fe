"""kandev's guarded races (R…) and its unguarded anomalies (H…), one line each, in our words.

The chart docstrings, the tests and ``acpfsm verify``'s properties cite these ids;
``acpfsm diagrams`` writes the catalogue into ``diagrams/README.md``. The facts come from
kandev's session manager (lifecycle/session.go, manager_events.go, manager_interaction.go,
execution_store.go, streams.go) and its agentctl client (agent.go, client_stream.go).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RACES", "Race", "race"]


@dataclass(frozen=True, slots=True)
class Race:
    """One entry: ``id`` (``R7``, ``H3``), what can go wrong, and how kandev guards it (for
    an anomaly: what it leaves open)."""

    id: str
    hazard: str
    guard: str


RACES: tuple[Race, ...] = (
    Race(
        "R1",
        "a steer picks the live turn, which completes before the steer request goes out",
        "the selection and the request happen under the lifecycle lock; a miss refuses the steer",
    ),
    Race(
        "R2",
        "a steer reaches a turn that was admitted but not yet dispatched",
        "only a dispatched turn is steerable; the caller re-admits the text as a prompt",
    ),
    Race("R3", "a steer attaches to a turn that already ended", "an ended turn is not steerable"),
    Race(
        "R4",
        "an unanswered steer holds the lifecycle lock",
        "the steer request is bounded (5 s) and so is the socket write",
    ),
    Race(
        "R5",
        "the lock held across a request deadlocks with the completion handler",
        "answers are read by the transport, events handled by a separate worker",
    ),
    Race(
        "R6",
        "a late completion of turn g arrives after turn g+1 began",
        "only the newest generation claims; a superseded one ignores it",
    ),
    Race(
        "R7",
        "two terminal events for the same turn (error and error, error and exit)",
        "the first claim wins; the rest are ignored",
    ),
    Race(
        "R8",
        "an error completion interleaves with the next prompt's admission",
        "the error's status change finishes under the lifecycle lock",
    ),
    Race(
        "R9",
        "events of an old stream arrive after a startup recovery replaced it",
        "events carry the startup generation; stale ones are dropped",
    ),
    Race(
        "R10",
        "a loss or a generation-0 end arrives before the session is initialized",
        "ignored: the startup owns that failure",
    ),
    Race(
        "R11",
        "a synchronous ready subscriber starts the next prompt, which takes the first "
        "waiter's signal",
        "the waiter is released before ready is published",
    ),
    Race(
        "R12",
        "a stale signal of an earlier dispatch-only prompt releases the next waiter",
        "drained at prompt start, and filtered by generation",
    ),
    Race(
        "R13",
        "two concurrent prompts share the buffers and the completion signal",
        "one prompt at a time, through its completion (the prompt lock)",
    ),
    Race(
        "R14",
        "a prompt after a dispatch-only one resets its buffers or takes its completion",
        "the successor waits behind a barrier until the predecessor's turn ends",
    ),
    Race(
        "R15",
        "a follow-up prompt and a cancel both wait on the same completion",
        "the cancel waits for the prompt call to finish",
    ),
    Race(
        "R16",
        "a cancel escalation publishes ready while the next prompt already began",
        "the ready payload names its generation; a stale one is rejected",
    ),
    Race(
        "R17",
        "the caller leaves in the middle of an escalation: RUNNING and a stale signal remain",
        "the escalation's cleanup always runs, detached from the caller",
    ),
    Race(
        "R18",
        "the cancel's answer is stuck behind an event handler waiting for the cancel",
        "an unbounded event queue; pending requests are failed before the worker drains",
    ),
    Race(
        "R19",
        "an escalation clears the dispatch gate a successor already relies on",
        "the gate is cleared before the waiter is released",
    ),
    Race(
        "R20",
        "partial reply text is lost or doubled between a disconnect and the next prompt",
        "detach and reset are one step; whoever detached persists it",
    ),
    Race(
        "R21",
        "a delayed disconnect of a superseded turn fails its replacement",
        "the disconnect claim requires the newest generation",
    ),
    Race(
        "R22",
        "a stale handoff releases the replacement's waiter",
        "the handoff requires the newest generation",
    ),
    Race(
        "R23",
        "the dispatch is recorded after the turn completed or was superseded",
        "ignored then",
    ),
    Race(
        "R24",
        "a prompt is admitted into an execution that was removed or replaced",
        "the admission re-checks the execution under the lock",
    ),
    Race(
        "R25",
        "a stale stall notice becomes a terminal 'never started' failure",
        "the notice carries generation and activity epoch, re-checked by its consumer",
    ),
    Race(
        "R26",
        "metadata events after boot make the execution RUNNING again",
        "only turn content leaves READY",
    ),
    Race(
        "R27",
        "an empty wakeup turn publishes no ready",
        "it shows RUNNING, then READY",
    ),
    Race(
        "R28",
        "the model is set twice (policy and layer) and the second failure goes unseen",
        "the layer records the model the policy applied",
    ),
    Race(
        "R29",
        "the config settlement races the stream's late delivery",
        "the authoritative answer is keyed by config id and applied once",
    ),
    Race(
        "R30",
        "the model catalog is read, still empty, right after session/new",
        "the response's own snapshot, or a bounded wait",
    ),
    Race(
        "R31",
        "a second execution for the same session orphans the first one's process",
        "the second is refused",
    ),
    Race(
        "R32",
        "errors caused by the shutdown are shown as failures",
        "STOPPED instead of FAILED while shutting down",
    ),
    Race("R33", "ready is published twice", "READY again publishes nothing"),
    Race(
        "R34",
        "a stream recovery competes with the stream the session init owns",
        "no recovery before the session is initialized",
    ),
    Race(
        "R35",
        "a large steer attachment upload holds the lifecycle lock",
        "attachments are uploaded before the lock is taken",
    ),
    Race(
        "R36",
        "a successor waits forever behind a dispatch-only turn that never completes",
        "the barrier is bounded (10 s); the gate stays until a cancel releases the turn",
    ),
    Race(
        "H1",
        "a steer whose connection dropped after the write may reach the agent twice",
        "the steer is refused and the caller re-admits it: the ambiguity stays with the caller",
    ),
    Race(
        "H2",
        "the reconnect retry re-sends a prompt the agent may already have",
        "not guarded (acpfsm: never, on the first send or a resend)",
    ),
    Race(
        "H3",
        "the completion signal holds one value and drops the newest: a real completion is lost",
        "only the drain at prompt start mitigates it",
    ),
    Race(
        "H4",
        "the dispatch-only barrier accepts any generation's signal",
        "bounded since, still unfiltered (acpfsm: the barrier is the predecessor's own state)",
    ),
    Race(
        "H5",
        "the escalation's final drain can swallow a successor's signal",
        "not guarded",
    ),
    Race(
        "H6",
        "after a handoff, escalation or disconnect the turn stays steerable",
        "not guarded (acpfsm: only a dispatched turn is steerable)",
    ),
    Race(
        "H7",
        "a failed trigger leaves the execution RUNNING with an admitted turn and no waiter",
        "not guarded (acpfsm: the turn is undelivered, the execution READY again)",
    ),
    Race(
        "H8",
        "steer attachments are sent without being uploaded",
        "fixed in the seed: uploaded before the lock",
    ),
    Race(
        "H9",
        "a normal close of the stream releases no waiter",
        "not guarded: the waiter hangs until its context ends or a cancel",
    ),
    Race(
        "H10",
        "the initial prompt's failure hook is not wired",
        "the seed reports it; its production wiring is outside the seeds",
    ),
    Race(
        "H11",
        "the facade maps a missing execution inconsistently and shares the caller's metadata",
        "not guarded",
    ),
    Race(
        "H12",
        "the prompt result's reply is always empty",
        "the buffer is flushed before the completion signal",
    ),
)

_BY_ID = {r.id: r for r in RACES}


def race(race_id: str) -> Race:
    """The catalogue entry ``race_id``; KeyError for an unknown id."""
    return _BY_ID[race_id]
