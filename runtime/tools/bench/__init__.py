"""``make bench``: what the runtime costs beside the bare transport, measured side by side in one
run, each figure with its goal.

``python -m acpfsm.tools.bench [--quick] [--backend both|trio|asyncio] [--no-sdk]
[--prompts N] [--rounds R] [...]`` (``--help`` lists every count) prints a summary of the goals
first (the figure, the backend, the chart engine, what was measured, the goal, met or not),
then each section's detail:

1. **Prompt round trip** against the reference agent (``python -m
   acpfsm.adapters.reference_agent --delay 0``, one process per path), under each backend: the
   bare :class:`~acpfsm.adapters.acp.stdio.StdioTransport` (``prompt(text, [], g)``, then the
   ``Complete`` of generation ``g`` read from ``events()``), :meth:`acpfsm.runtime.Runtime.prompt`
   (the same transport under the charts, the event pump, the hub and the trace), and, under
   asyncio only (the SDK is asyncio-only), the official ACP Python SDK's client
   (``agent-client-protocol``, ``ClientSideConnection`` from ``acp.spawn_agent_process``), on
   the same event loop. The paths run in interleaved rounds (A B C, then C B A …) so a change in
   the machine's load falls on all of them alike. Per path: median, p95 and p99 latency; client
   CPU per prompt (this process's ``time.process_time``: only one path runs at a time); agent
   CPU per prompt (``/proc/<pid>/stat``, clock ticks); the longest garbage-collector pause and
   the number of collections while the path ran (``gc.callbacks``).

2. **CPU per streamed notification**, with no process and no pipe: the stdio transport over
   memory byte streams to an in-process agent (:mod:`.peer`) that answers each prompt
   with ``--chunks`` ``agent_message_chunk`` notifications. Bare: the transport's ``events()``
   read until the turn's ``Complete``; runtime: the same transport under a Runtime, the
   notifications read as :meth:`Runtime.turn <acpfsm.runtime.Runtime.turn>` yields them.
   Process CPU divided by the notifications, interleaved turn by turn.

3. **Launch to READY**: client CPU (and wall time) from spawning the reference agent to a
   session ready for prompts: ``open_stdio_transport`` + ``initialize`` + ``session/new`` by
   hand, against ``Runtime.launch`` + ``wait_ready`` (the session init chart, the start-model
   policy, the config layers), interleaved.

4. **Heap growth per prompt**: a Runtime over the in-memory agent is prompted until its
   bounded stores are full (the trace ring dropped records and a late subscriber is told
   events were dropped), then ``tracemalloc`` measures what the next ``--heap-prompts``
   prompts leave allocated (after ``gc.collect()``).

5. **Import time** of ``import acpfsm.runtime`` (a stdio-only user: the agentctl stack is not
   loaded) in fresh processes, the median; the slowest packages of one ``-X importtime`` run
   say where it goes.

6. **anyio's primitives**, CPU per call under each backend, inside as many cancel scopes as
   the runtime's tasks run in: what the prompt path and the event pump use (a cancellation
   check, a cancel scope, an uncontended lock, an event, a scheduler pass). The runtime runs
   the same code on both backends; where a row is met under trio and not under asyncio, this
   section shows what anyio's asyncio backend costs for the same primitives (the floor).

7. **Chart transitions per second** (both engines, against raw python-statemachine charts of
   the same shape), **lifecycle CPU per prompt** over the in-memory transport
   (:class:`~acpfsm.testing.memory.MemoryExecutor`; ``Runtime(engine="reference")`` against
   ``engine="compiled"``) and **memory per idle execution** (``tracemalloc`` per execution
   brought to READY, and the agents' RSS).

8. **Where the runtime's extra CPU per prompt goes**: the bare and the runtime paths of
   section 1 again, fresh, each sampled for ``--profile-prompts`` prompts: at every tick of
   the process's CPU (``ITIMER_PROF``) the running Python code's module is counted into a
   component (the chart engine, the session drivers, the hub and trace, the Runtime facade,
   the ACP transport, anyio, the event loop, the rest; C code counts for its Python caller),
   and each path's CPU per prompt is split as its samples were. The table gives each
   component's microseconds per prompt on both paths and its part of the difference: why a
   prompt row misses. (A tracing profiler would not do: its cost per call inflates the code
   that makes many small calls.)

9. **Durable executions** (:mod:`.durable`): the prompt round trip with an
   ``SqliteStore`` and a ``PostgresStore`` against none, the recovery of stored executions
   at start-up, the store's size per execution.

10. **Scale** (:mod:`.scale`): a thousand executions in one Runtime prompting at once
    (CPU per prompt against one execution's, p99), ten thousand idle ones (memory each, launch
    rate), a hundred over real reference agents (the Runtime's share of the CPU).

11. **Across processes** (:mod:`.nats`): ``RemoteRuntime.prompt`` through an ``acpfsm
    serve`` process against ``Runtime.prompt`` in process, events per second from the NATS
    bus to 1 and to 10 subscribers, and the take-over of ``--nats-takeover`` executions by a
    pool's survivor after their owner is killed (``SIGKILL``).

12. **Soak memory** (:mod:`.soak`): ``make soak``'s trio run (200 executions × 20
    prompts, random faults): what the runtime keeps (Python's blocks in use, end against
    after the warm-up) and what the allocator keeps (the RSS ``malloc_trim`` gives back).

Nothing here is asserted anywhere: the numbers are for reading, ratios more than absolutes.

The package: :mod:`.rows` (rows, goals, options), :mod:`.proc` (processes, CPU, the garbage
collector), :mod:`.paths` (sections 1-3 and 8), :mod:`.engine` (4-7), :mod:`.conform`,
:mod:`.durable`, :mod:`.scale`, :mod:`.nats`, :mod:`.soak` (the others), :mod:`.table` (the
summary and the tables), :mod:`.run` (the run and its command line).
"""

from __future__ import annotations

from .engine import PRIMITIVE_DEPTH, PRIMITIVES
from .paths import component
from .proc import child_pids, rss_kib, zombie_pids
from .rows import (
    AGENT_ARGS,
    BenchOptions,
    BenchReport,
    Goal,
    LatencyRow,
    MemoryRow,
    PrimitiveRow,
    RateRow,
    ShareRow,
    percentile,
)
from .run import build_parser, main, options_from, run_bench
from .table import format_report

__all__ = [
    "AGENT_ARGS",
    "PRIMITIVES",
    "PRIMITIVE_DEPTH",
    "BenchOptions",
    "BenchReport",
    "Goal",
    "LatencyRow",
    "MemoryRow",
    "PrimitiveRow",
    "RateRow",
    "ShareRow",
    "build_parser",
    "child_pids",
    "component",
    "format_report",
    "main",
    "options_from",
    "percentile",
    "rss_kib",
    "run_bench",
    "zombie_pids",
]
