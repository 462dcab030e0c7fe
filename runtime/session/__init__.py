"""One execution's drivers: the chart decides, the drivers do.

Theory of operation
-------------------
An execution runs the lifecycle charts of :mod:`acpfsm.statecharts`. Each chart has one small
driver over a shared :class:`~.context.ExecutionContext` (the execution's identity and data,
and the one place where charts are fired, coordinated and their effects performed):

* :class:`~.status.StatusDriver` - the Execution chart: the status and the ``agent.*`` events;
* :class:`~.stream.StreamDriver` - the AgentStream chart: the carrier's facts, its redials
  and give-up;
* :class:`~.init.InitDriver` - the SessionInit chart: a table from the effect each working
  state names to the step that performs it; with :class:`~.config.ConfigDriver` (the
  StartModelPolicy and ConfigSettlement charts, the config layers);
* :class:`~.turns.TurnDriver`, :class:`~.prompting.PromptDriver`,
  :class:`~.steering.SteerDriver` and :class:`~.cancelling.Canceller` - the PromptGeneration
  charts: each admitted prompt is a :class:`~.turns.Generation` with its own chart, outcome
  and events; the agent's facts claim it, the callers' flows (prompt, steer, cancel) act on
  the effects its chart returns.

A driver fires the facts it observes and performs the effects the charts return; where one
chart's move is a fact for another, the coordination table says so and
:meth:`~.context.ExecutionContext.fire` applies it. What a driver decides between two steps
(which flow effect comes next, what an answer means for the chart, whether a prompt is
admitted, where a completion goes) is a function of :mod:`.flows`, which ``acpfsm verify``
calls too. :class:`~.session.ExecutionSession` is the thin anyio shell: the transport, the
execution's task group, the facade's operations; :class:`~.pump.EventPump` turns the
transport's events into the drivers' facts, :class:`~.views.SessionViews` is what the
execution shows. Beside the drivers: :class:`~.permissions.PermissionBroker` (the agent's
permission requests, the execution's policy, the app's answers) and
:class:`~.crash.CrashGuard` (what the execution's own code raises stays in it: the Execution
chart's ``execution_crashed``), :class:`~.stall.StallWatchdog` (the waits' stall ticks, one
task per execution). No module here is over 400 lines (``tests/test_layering.py``).

Concurrency (kandev lifecycle/types.go): ``PromptDriver.prompt_lock`` is ``promptMu`` (one
ordinary prompt at a time, held through its completion wait); ``ExecutionContext.lifecycle_lock``
is ``promptLifecycleMu`` (generation ownership: begin, completion claim, disconnect claim,
handoff, steer selection + dispatch). Agent events are handled one at a time, in order, by the
pump; a steer holding the lifecycle lock across its RPC cannot deadlock it because the RPC's
answer is read by the transport, not by the pump (R5).
"""

from .session import ExecutionSession as ExecutionSession

__all__ = ["ExecutionSession"]
