"""Smoke test of ``make bench`` (acpfsm.tools.bench): a tiny run prints every goal and
every row of every section with numbers in it, and leaves no agent process behind. Nothing
about timing is asserted: the bench reports ratios beside their goals, it does not judge
them."""

from __future__ import annotations

import re
from typing import Any

import pytest

from acpfsm.tools.bench import (
    PRIMITIVE_DEPTH,
    PRIMITIVES,
    BenchOptions,
    Goal,
    build_parser,
    child_pids,
    component,
    main,
    options_from,
    percentile,
)

# the bench drives charts in loops through a Trace: those are not lifecycle traces
pytestmark = [pytest.mark.integration, pytest.mark.acpfsm_unchecked_trace]

TINY = [
    "--quick", "--prompts", "4", "--rounds", "2", "--warmup", "1", "--chunks", "20",
    "--stream-turns", "1", "--launches", "1", "--heap-prompts", "20", "--imports", "1",
    "--lifecycle-prompts", "3", "--cycles", "5", "--idle", "2", "--idle-stdio", "1",
    "--primitives", "20", "--profile-prompts", "20", "--conform-runs", "1",
    "--primitives", "20", "--profile-prompts", "20", "--durable-prompts", "5",
    "--recover-executions", "10", "--nats-prompts", "5", "--nats-events", "50",
    "--nats-takeover", "2", "--nats-lease", "3",
    "--scale-executions", "3", "--scale-prompts", "2",
    "--scale-idle", "4", "--scale-stdio", "2", "--scale-stdio-prompts", "2",
    "--soak-executions", "2", "--soak-prompts", "2", "--soak-concurrency", "2",
]  # fmt: skip

#: (figure, backend, engine, goal) of every summary line of a run on both backends
GOALS = [
    ("Runtime.prompt median vs bare StdioTransport", "trio", "compiled", "<= 1.15x"),
    ("client CPU per prompt vs bare", "trio", "compiled", "<= 1.25x"),
    ("Runtime.prompt p99 vs median", "trio", "compiled", "<= 2.00x"),
    ("longest GC pause during Runtime.prompt", "trio", "compiled", "<= 10.0 ms"),
    ("Runtime.prompt median vs bare StdioTransport", "asyncio", "compiled", "<= 1.15x"),
    ("Runtime.prompt median vs official ACP SDK client", "asyncio", "compiled", "<= 0.85x"),
    ("client CPU per prompt vs bare", "asyncio", "compiled", "<= 1.25x"),
    ("Runtime.prompt p99 vs median", "asyncio", "compiled", "<= 2.00x"),
    ("longest GC pause during Runtime.prompt", "asyncio", "compiled", "<= 10.0 ms"),
    ("CPU per streamed notification vs bare (in-memory)", "trio", "compiled", "<= 1.10x"),
    ("CPU per streamed notification vs bare (in-memory)", "asyncio", "compiled", "<= 1.10x"),
    (
        "launch -> READY client CPU vs initialize + session/new by hand",
        "trio",
        "compiled",
        "<= 2.00x",
    ),
    (
        "launch -> READY client CPU vs initialize + session/new by hand",
        "asyncio",
        "compiled",
        "<= 2.00x",
    ),
    ("heap growth per prompt, bounded stores full", "trio", "compiled", "< 512 B"),
    ("import acpfsm.runtime (stdio-only), CPU median", "-", "compiled", "<= 60.0 ms"),
    (
        "import acpfsm.runtime: acpfsm's own part (beyond the floor)",
        "-",
        "compiled",
        "<= 30.0 ms",
    ),
    (
        "conform run with the schema check vs without (reference agent)",
        "trio",
        "compiled",
        "< 2.00x",
    ),
    ("lifecycle CPU per prompt, compiled vs reference engine", "trio", "both", "<= 0.25x"),
    ("Runtime.prompt median with PostgresStore vs without", "asyncio", "compiled", "<= 1.30x"),
    ("Runtime.prompt median with SqliteStore vs without", "asyncio", "compiled", "<= 1.10x"),
    ("Runtime.prompt median with PostgresStore vs without", "trio", "compiled", "<= 1.30x"),
    ("Runtime.prompt median with SqliteStore vs without", "trio", "compiled", "<= 1.10x"),
    ("recovery of 10 stored executions (PostgresStore)", "trio", "compiled", "< 2.0 s"),
    ("recovery of 10 stored executions (SqliteStore)", "trio", "compiled", "< 2.0 s"),
    ("RemoteRuntime.prompt median vs Runtime.prompt", "trio", "compiled", "<= 1.50x"),
    ("take-over of 2 executions after the owner's SIGKILL", "trio", "compiled", "<= 8.0 s"),
    ("CPU per prompt, 3 executions at once vs one alone", "trio", "compiled", "<= 1.20x"),
    ("latency p99, 3 executions prompting at once", "trio", "compiled", "-"),
    ("RSS per idle execution, 4 READY (in-memory agent)", "trio", "compiled", "<= 64 KiB"),
    ("launch rate, 4 executions to READY (in-memory agent)", "trio", "compiled", "-"),
    ("Runtime's CPU share, 2 reference agents x 2 prompts", "trio", "compiled", "-"),
    (
        "soak, 2 x 2: Python blocks kept, end vs after the warm-up",
        "trio",
        "compiled",
        "<= 1.05x",
    ),
]
SECTIONS = (
    "prompt round trip (reference agent over stdio)",
    "CPU per streamed notification, in-memory (20 per turn)",
    "launch -> READY (reference agent over stdio)",
    "heap growth per prompt (tracemalloc)",
    "import acpfsm.runtime (fresh processes)",
    "chart transitions (5 cycles)",
    "lifecycle CPU per prompt, in-memory transport (3 prompts)",
    "memory per idle execution",
    f"anyio's primitives, CPU per call inside {PRIMITIVE_DEPTH} cancel scopes (the floor)",
    "the runtime's extra CPU per prompt by component (CPU profile, 20 prompts per path)",
    "durable executions (5 prompts per path)",
    "across processes over NATS (5 prompts per path)",
    "scale: many executions in one Runtime (trio)",
    "soak memory: 2 executions x 2 prompts, 2 at a time (trio, faults)",
)
NUMBER = re.compile(r"^-?[\d,]+(\.\d+)?(x| ms| s| B| KiB|%|/s)?$")


def _lines(out: str, name: str) -> list[str]:
    found = [line for line in out.splitlines() if line.startswith(f"  {name} ")]
    assert found, f"row {name!r} missing from:\n{out}"
    return found


def _cells(line: str, name: str) -> list[str]:
    """The row's cells (split on runs of 2+ spaces), without the note in parentheses."""
    body = line[len(name) + 2 :].split("  (")[0]
    return [c for c in re.split(r"\s{2,}", body.strip()) if c]


def test_tiny_bench_prints_every_goal_and_every_row(capsys: pytest.CaptureFixture[str]) -> None:
    before = child_pids()
    assert main(TINY) == 0
    out = capsys.readouterr().out

    for header in ("goals", *SECTIONS):
        assert any(line.startswith(header) for line in out.splitlines()), (header, out)
    seen = []
    for figure, backend, engine, goal in GOALS:
        rows = [_cells(line, figure) for line in _lines(out, figure)]
        row = next(r for r in rows if r[0] == backend)
        assert row[1] == engine, (figure, row)
        assert NUMBER.match(row[2]), (figure, row)  # measured
        assert row[3] == goal, (figure, row)
        # a figure the issue asks only to report has no goal
        assert row[4] in (("reported",) if goal == "-" else ("yes", "no")), (figure, row)
        seen.append((figure, backend))
    summary = out.split("\ngoals")[1].split("\n\n")[0].splitlines()[2:]  # past the header
    assert len(summary) == len(GOALS), summary

    for name, backends in (
        ("bare StdioTransport", ("trio", "asyncio")),
        ("Runtime.prompt", ("trio", "asyncio")),
        ("ACP SDK client", ("asyncio",)),
    ):
        rows = {(r := _cells(line, name))[0]: r for line in _lines(out, name)}
        for backend in backends:
            # backend, median, p95, p99, client CPU, agent CPU, GC max, two ratios
            cells = rows[backend]
            assert len(cells) == 9, (name, cells)
            assert all(NUMBER.match(c) for c in (*cells[1:5], *cells[6:])), (name, cells)
    assert _cells(_lines(out, "ACP SDK client")[0], "ACP SDK client")[0] == "trio"
    assert _lines(out, "ACP SDK client")[0].endswith("(asyncio only)")
    for name in ("bare StdioTransport: events()", "Runtime.turn: its updates"):
        assert len(_lines(out, name)) == 2
    for name in PRIMITIVES:  # the floor: each primitive under each backend, beside trio's
        rows = {(r := _cells(line, name))[0]: r for line in _lines(out, name)}
        assert sorted(rows) == ["asyncio", "trio"], (name, rows)
        assert all(NUMBER.match(c) for r in rows.values() for c in r[1:]), (name, rows)
        assert rows["trio"][3] == "1.00x"
    # the prompt CPU of one backend names the same code's on the other
    cpu = _lines(out, "client CPU per prompt vs bare")
    assert [line.count("; on trio ") for line in cpu] == [0, 1], cpu
    assert [line.count("; on asyncio ") for line in cpu] == [1, 0], cpu
    # why a prompt row misses: the runtime's own components, beside the bare transport's
    for name in ("chart engine (fire, coordination)", "ACP transport (stdio, JSON-RPC, mapping)"):
        rows = {(r := _cells(line, name))[0]: r for line in _lines(out, name)}
        assert sorted(rows) == ["asyncio", "trio"], (name, rows)
        assert all(NUMBER.match(c) for r in rows.values() for c in r[1:4]), (name, rows)
        # a share of the extra, or n/a when a tiny sample shows no extra at all
        assert all(r[4].endswith("%") or r[4] == "n/a" for r in rows.values()), (name, rows)
    name = "chart engine (fire, coordination)"
    engine = [_cells(line, name) for line in _lines(out, name)]
    assert [r[1] for r in engine] == ["0", "0"], engine  # the bare transport fires no chart
    assert "Runtime over the in-memory agent, after the bounded stores filled" in out
    assert "httpx not loaded" in out  # a stdio-only user never loads the agentctl stack
    for which in ("the first", "all 2"):  # the take-over's detail rows
        name = f"take-over: {which} answering after SIGKILL"
        assert NUMBER.match(_cells(_lines(out, name)[0], name)[0]), name
    for path in ("no store", "SqliteStore", "PostgresStore"):  # the CPU beside the ratio
        for line in _lines(out, f"Runtime.prompt, {path} [trio]"):
            assert re.search(r"\(CPU [\d.]+ ms per prompt, every thread\)$", line), line
    assert "Where the time goes (cProfile)" in out
    assert "total " in out
    assert child_pids() <= before  # every agent the bench started is gone


def test_one_backend_and_no_sdk(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*TINY, "--backend", "asyncio", "--no-sdk", "--launches", "0", "--idle-stdio", "0"]
    argv += ["--heap-prompts", "0", "--imports", "0", "--stream-turns", "0"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert _lines(out, "ACP SDK client")[0].endswith("(skipped (--no-sdk))")
    round_trips = out.split("\nprompt round trip")[1].split("\n\n")[0]
    assert " asyncio " in round_trips and " trio " not in round_trips
    assert "heap growth per prompt" not in out
    assert "bare StdioTransport, session open" not in out  # --idle-stdio 0 skips it


def test_sampled_code_falls_into_the_components_by_its_module() -> None:
    import asyncio.base_events
    import functools
    import selectors

    import anyio._core._tasks

    import acpfsm.adapters.acp.stdio
    import acpfsm.runtime.hub
    import acpfsm.runtime.runtime
    import acpfsm.runtime.session.pump
    import acpfsm.statecharts._machine
    import acpfsm.tools.bench

    def of(module: Any) -> str:
        return component(module.__file__)

    assert of(acpfsm.statecharts._machine) == "chart engine (fire, coordination)"
    assert of(acpfsm.runtime.session.pump).startswith("session drivers")
    assert of(acpfsm.runtime.hub) == "hub, trace, lifecycle events"
    assert of(acpfsm.runtime.runtime) == "Runtime facade"
    assert of(acpfsm.tools.bench) == "the bench's own loop"
    assert of(acpfsm.adapters.acp.stdio).startswith("ACP transport")
    assert of(anyio._core._tasks) == "anyio"
    assert of(asyncio.base_events).startswith("event loop")
    assert of(selectors).startswith("event loop")
    assert of(functools) == "other"
    assert component("/elsewhere/acpfsm/statecharts/_machine.py") == "other"  # by module


def test_quick_is_a_smaller_run_and_counts_override_it() -> None:
    parser = build_parser()
    quick = options_from(parser.parse_args(["--quick"]))
    assert quick.quick and quick.prompts < BenchOptions().prompts
    assert BenchOptions().prompts >= 2000  # p99 needs at least 2,000 prompts
    assert options_from(parser.parse_args(["--quick", "--prompts", "7"])).prompts == 7
    assert options_from(parser.parse_args(["--backend", "trio"])).backends == ("trio",)


def test_a_goal_reads_its_limit() -> None:
    assert Goal("f", "trio", "compiled", 1.2, 1.3, "x").met == "yes"
    assert Goal("f", "trio", "compiled", 1.31, 1.3, "x").met == "no"
    assert Goal("f", "-", "compiled", 60.0, 60.0, "ms", strict=True).met == "no"
    assert Goal("f", "-", "compiled", None, 60.0, "ms").met == "n/a"
    assert Goal("f", "trio", "compiled", 511.0, 512.0, "B", strict=True).goal == "< 512 B"
    reported = Goal("f", "trio", "compiled", 0.33, None, "%")
    assert (reported.goal, reported.measured, reported.met) == ("-", "33%", "reported")


def test_percentile_is_nearest_rank() -> None:
    samples = [float(i) for i in range(1, 21)]
    assert percentile(samples, 95) == 19.0
    assert percentile(samples, 50) == 10.0
    assert percentile([7.0], 95) == 7.0
