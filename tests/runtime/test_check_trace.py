"""`acpfsm check-trace`: traces the runtime produces pass; corrupted ones are rejected by line."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from statemachine import State

from acpfsm.adapters.events import MessageChunk
from acpfsm.adapters.memory import MemoryTransport
from acpfsm.runtime import AcpfsmError, Runtime, TraceRecord
from acpfsm.statecharts import ALL_CHARTS
from acpfsm.statecharts._base import Chart
from acpfsm.tools.check_trace import (
    TraceFormatError,
    check_file,
    check_records,
    compile_chart,
    compiled_charts,
    main,
    read_trace,
)

from .memory_runtime import MemoryExecutor, make_runtime, session_of, wait_until

# --------------------------------------------------------------------------- helpers


def rec(seq: int, chart: str, event: str, source: str, target: str, gen: int = 0, **kw: Any) -> TraceRecord:  # fmt: skip
    return TraceRecord(
        seq=seq,
        time=float(seq),
        execution_id=kw.pop("execution_id", "e1"),
        chart=chart,
        generation=gen,
        instance=kw.pop("instance", 0),
        event=event,
        source=source,
        target=target,
    )


# (chart, event, source, target, generation): one execution, two prompts, stopped. The
# records a Runtime writes (a run over the memory transport, its session_init and
# config_settlement records left out): a source is the state that declares the transition
# (``dispatched`` for the generation's leaf ``awaited``), a targetless transition records its
# source as its target.
LIFE: list[tuple[str, str, str, str, int]] = [
    ("execution", "start_requested", "running", "starting", 0),
    ("agent_stream", "connect_started", "disconnected", "connecting", 0),
    ("agent_stream", "connect_succeeded", "connecting", "connected", 0),
    ("execution", "booted", "starting", "ready", 0),
    ("execution", "prompt_began", "ready", "running", 0),
    ("prompt_generation", "dispatch_started", "admitted", "sending", 1),
    ("prompt_generation", "dispatch_accepted", "sending", "awaited", 1),
    ("prompt_generation", "steered", "dispatched", "dispatched", 1),
    ("prompt_generation", "completion_received", "dispatched", "completed", 1),
    ("execution", "turn_completed", "running", "ready", 0),
    ("prompt_generation", "superseded_by_successor", "ended", "superseded", 1),
    ("execution", "prompt_began", "ready", "running", 0),
    ("prompt_generation", "dispatch_started", "admitted", "sending", 2),
    ("prompt_generation", "dispatch_accepted", "sending", "awaited", 2),
    ("prompt_generation", "completion_received", "dispatched", "completed", 2),
    ("execution", "turn_completed", "running", "ready", 0),
    ("execution", "stop_requested", "active", "stopped", 0),
    ("agent_stream", "close_requested", "connected", "closed", 0),
]


def life(rows: list[tuple[str, str, str, str, int]] | None = None) -> list[TraceRecord]:
    return [rec(i, c, e, s, t, g) for i, (c, e, s, t, g) in enumerate(rows or LIFE, 1)]


def renumber(records: list[TraceRecord]) -> list[TraceRecord]:
    return [msgspec.structs.replace(r, seq=i) for i, r in enumerate(records, 1)]


def kinds(records: list[TraceRecord], **kw: Any) -> list[tuple[int, str]]:
    return [(v.line, v.kind) for v in check_records(records, **kw).violations]


def write_jsonl(path: Path, records: list[TraceRecord]) -> Path:
    path.write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in records))
    return path


# --------------------------------------------------------------------------- the rules


def test_a_correct_life_is_clean() -> None:
    result = check_records(life())
    assert result.ok, result.violations
    assert (result.records, result.executions) == (len(LIFE), 1)


def test_the_declared_race_completion_before_dispatch_is_legal() -> None:
    """R23: the agent answers before MarkPromptDispatched; the late ack is ignored."""
    rows = [
        *LIFE[:5],
        ("prompt_generation", "dispatch_started", "admitted", "sending", 1),
        ("prompt_generation", "completion_received", "sending", "completed", 1),
        ("execution", "turn_completed", "running", "ready", 0),
        ("prompt_generation", "dispatch_accepted", "ended", "ended", 1),
        ("execution", "stop_requested", "active", "stopped", 0),
        ("agent_stream", "close_requested", "connected", "closed", 0),
    ]
    assert kinds(life(rows)) == []


def test_a_completion_for_a_generation_never_admitted() -> None:
    rows = [*LIFE[:4], ("prompt_generation", "completion_received", "sending", "completed", 1)]
    records = life(rows)
    assert kinds(records, partial=True) == []  # partial traces skip admission
    assert kinds(records) == [(5, "completion_before_dispatch"), (5, "end_state")]
    rows = [*LIFE[:4], ("prompt_generation", "dispatch_started", "admitted", "sending", 1)]
    assert (5, "generation_not_admitted") in kinds(life(rows))


def test_a_second_terminal_outcome() -> None:
    records = life()
    extra = rec(0, "prompt_generation", "completion_received", "completed", "failed", 2)
    bad = renumber([*records[:15], extra, *records[15:]])
    result = check_records(bad)
    assert [(v.line, v.kind) for v in result.violations] == [(16, "second_outcome")]
    assert "line 15" in result.violations[0].message
    # the declared R7 duplicate (targetless, declared on ended) is not a second outcome
    dup = rec(0, "prompt_generation", "completion_received", "ended", "ended", 2)
    assert kinds(renumber([*records[:15], dup, *records[15:]])) == []


def test_steer_into_a_generation_that_is_not_live() -> None:
    records = life()
    steer = rec(0, "prompt_generation", "steered", "completed", "completed", 1)
    assert kinds(renumber([*records[:9], steer, *records[9:]])) == [(10, "steer_not_live")]


def test_a_superseded_generation_may_only_ignore_events() -> None:
    records = life()
    late = rec(0, "prompt_generation", "completion_received", "superseded", "completed", 1)
    assert kinds(renumber([*records[:12], late, *records[12:]])) == [(13, "superseded_changed")]
    ignored = rec(0, "prompt_generation", "completion_received", "superseded", "superseded", 1)
    assert kinds(renumber([*records[:12], ignored, *records[12:]])) == []


def test_admission_while_the_predecessor_is_not_superseded() -> None:
    records = life()
    del records[10]  # superseded_by_successor of generation 1
    assert kinds(renumber(records)) == [(11, "not_superseded")]


def test_dropped_swapped_and_duplicated_records_name_their_line() -> None:
    records = life()
    dropped = records[:6] + records[7:]  # dispatch_accepted of generation 1
    assert kinds(dropped) == [(7, "sequence"), (7, "steer_not_live")]
    swapped = [*records[:6], records[7], records[6], *records[8:]]
    assert kinds(swapped) == [
        (7, "sequence"),
        (7, "steer_not_live"),
        (8, "sequence"),
        (8, "source_mismatch"),
    ]
    again = [*records[:9], records[8], *records[9:]]
    assert kinds(again) == [(10, "sequence"), (10, "second_outcome")]


def test_names_the_charts_do_not_declare() -> None:
    records = life()
    bad = [
        msgspec.structs.replace(records[1], chart="no_such_chart"),
        msgspec.structs.replace(records[2], event="teleported"),
        msgspec.structs.replace(records[3], target="nowhere"),
    ]
    result = check_records([records[0], *bad, *records[4:]], partial=True)
    assert [(v.line, v.kind) for v in result.violations][:3] == [
        (2, "unknown_chart"),
        (3, "unknown_event"),
        (4, "unknown_state"),
    ]


def test_an_undeclared_transition() -> None:
    records = life()
    bad = msgspec.structs.replace(records[3], event="recovered")
    result = check_records([*records[:3], bad], partial=True)
    assert [(v.line, v.kind) for v in result.violations] == [(4, "illegal_transition")]
    assert "starting --recovered--> ready is not declared" in result.violations[0].message


def test_end_states() -> None:
    records = life()
    assert kinds(records[:-2]) == [(16, "end_state")]  # never stopped
    assert kinds(records[:-2], partial=True) == []
    # stopped, but the stream still claims to be connected
    found = check_records(records[:-1]).violations
    assert [(v.line, v.kind, v.chart) for v in found] == [(17, "end_state", "agent_stream")]
    # a lost stream that was never closed is at rest
    lost = rec(0, "agent_stream", "connection_lost", "connected", "disconnected")
    assert kinds(renumber([*records[:-1], lost])) == []


def test_seq_restarts_when_a_second_trace_is_appended() -> None:
    first = life()
    second = [msgspec.structs.replace(r, execution_id="e2") for r in life()]
    assert kinds(first + second) == []
    # the second trace lost its first record (start_requested): one gap, then booted is
    # taken from RUNNING instead of STARTING
    assert kinds(first + second[1:]) == [(19, "sequence"), (21, "source_mismatch")]


class Gate(Chart):
    """A toy with a compound state, guards and an unreachable (pre-empted) transition."""

    chart_name = "toy_gate"
    closed = State(initial=True)

    class open(State.Compound):
        opening = State(initial=True)
        opened = State()
        moved = opening.to(opened)
        shoved = opening.to(opened)

    jammed = State(final=True)
    pushed = closed.to(open)
    shoved = open.to(jammed)  # pre-empted while opening: opening takes `shoved` itself
    slammed = open.to(closed, cond="hard") | open.to(jammed)

    def hard(self, hard: bool = False) -> bool:
        return hard


def test_compilation_follows_the_engine() -> None:
    """Every transition the engine fires is in the step table, with the leaf it lands on."""
    gate = compile_chart(Gate)
    assert gate.initial == "closed"
    assert gate.step[("closed", "pushed", "closed", "open")] == "opening"
    assert ("opening", "shoved", "open", "jammed") not in gate.step
    assert gate.step[("opened", "shoved", "open", "jammed")] == "jammed"
    assert gate.step[("opening", "slammed", "open", "closed")] == "closed"
    charts = {"toy_gate": gate}
    walk = [
        rec(1, "toy_gate", "pushed", "closed", "open"),
        rec(2, "toy_gate", "shoved", "open", "jammed"),
    ]
    found = check_records(walk, charts=charts, partial=True).violations
    assert [(v.line, v.kind) for v in found] == [(2, "illegal_transition")]
    assert "can never be selected" in found[0].message
    # and the engine agrees: what it fires replays cleanly
    fired: list[TraceRecord] = []

    def observe(r: Any) -> None:
        fired.append(rec(len(fired) + 1, r.chart, r.event, r.source, r.target))

    g = Gate.start(observers=(observe,))
    for event in ("pushed", "shoved", "slammed"):
        g.fire(event)
    assert g.ended
    assert check_records(fired, charts=charts, partial=True).ok


def test_every_chart_compiles_with_every_declared_transition_reachable_somewhere() -> None:
    charts = compiled_charts()
    assert set(charts) == {c.chart_name for c in ALL_CHARTS}
    for chart in charts.values():
        steps = {(s, e, t) for (_, e, s, t) in chart.step}
        assert steps == set(chart.declared), chart.name


# --------------------------------------------------------------------------- real runtime traces


async def _scenarios(rt: Runtime, ex: MemoryExecutor) -> None:
    """A few lives: prompts, a steer, a cooperative cancel, an error turn, a stop mid-turn."""
    ref = await rt.launch(make_spec("initial prompt"))
    s = session_of(rt, ref.id)
    await wait_until(lambda: s.execution.status == "READY", limit=5)
    assert (await rt.resume(ref.id, "again")).stop_reason == "end_turn"

    other = await rt.launch(make_spec())
    so = session_of(rt, other.id)
    await wait_until(lambda: so.execution.status == "READY", limit=5)
    transport = ex.transports[1]
    async with anyio.create_task_group() as tg:
        tg.start_soon(_prompt_ignoring, rt, other.id, "long task")
        await wait_until(
            lambda: so.current is not None and so.current.machine.is_in("dispatched"), limit=5
        )
        await rt.steer(other.id, "also this")
        transport.emit(MessageChunk(text="done", prompt_generation=1))
        transport.complete(1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_prompt_ignoring, rt, other.id, "to be cancelled")
        await wait_until(
            lambda: so.current is not None and so.current.machine.is_in("dispatched"), limit=5
        )
        await rt.cancel(other.id)
    async with anyio.create_task_group() as tg:  # stopped while a turn runs
        tg.start_soon(_prompt_ignoring, rt, other.id, "interrupted")
        await wait_until(
            lambda: so.current is not None and so.current.machine.is_in("dispatched"), limit=5
        )
        await rt.stop(other.id, "enough")

    third = await rt.launch(make_spec())  # an error turn; the runtime's close stops it
    st = session_of(rt, third.id)
    await wait_until(lambda: st.execution.status == "READY", limit=5)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_prompt_ignoring, rt, third.id, "fails")
        await wait_until(
            lambda: st.current is not None and st.current.machine.is_in("dispatched"), limit=5
        )
        ex.transports[2].fail(1, "boom")


async def _prompt_ignoring(rt: Runtime, execution_id: str, text: str) -> None:
    with contextlib.suppress(AcpfsmError):  # an error turn, a cancel, a stop
        await rt.prompt(execution_id, text)


def make_spec(prompt: str = "") -> Any:
    from .memory_runtime import spec

    return spec(prompt)


def _first_auto(ex: MemoryExecutor) -> Callable[[], MemoryTransport]:
    def make() -> MemoryTransport:
        return MemoryTransport(auto_complete=not ex.transports)

    return make


@pytest.mark.both_backends
async def test_runtime_traces_pass(tmp_path: Path, time_scale: float) -> None:
    trace_file = tmp_path / "trace.jsonl"
    ex = MemoryExecutor()
    ex.make = _first_auto(ex)
    async with make_runtime(ex, time_scale=time_scale, trace_path=trace_file) as rt:
        await _scenarios(rt, ex)
    events = {(r.chart, r.event) for r in rt.trace.records}
    for wanted in (
        "steered",
        "completion_received",
        "superseded_by_successor",
        "execution_stopped",
    ):
        assert ("prompt_generation", wanted) in events
    assert ("execution", "stop_requested") in events
    assert check_records(rt.trace.records).ok, check_records(rt.trace.records).violations
    result = check_file(trace_file)
    assert result.ok, result.violations
    assert result.records == len(rt.trace.records) and result.executions == 3


@pytest.fixture
def real_trace(tmp_path: Path) -> Path:
    """A trace written by a Runtime over the memory transport (made under trio)."""
    trace_file = tmp_path / "trace.jsonl"

    async def produce() -> None:
        ex = MemoryExecutor()
        ex.make = _first_auto(ex)
        async with make_runtime(ex, time_scale=0.002, trace_path=trace_file) as rt:
            await _scenarios(rt, ex)

    anyio.run(produce, backend="trio")
    assert check_file(trace_file).ok
    return trace_file


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _index(rows: list[dict[str, Any]], event: str, generation: int = 1) -> int:
    return next(
        i
        for i, r in enumerate(rows)
        if r["chart"] == "prompt_generation"
        and r["event"] == event
        and r["generation"] == generation
    )


def test_hand_corrupted_runtime_traces_are_rejected_naming_the_line(
    real_trace: Path, tmp_path: Path
) -> None:
    rows = _lines(real_trace)
    dispatch = _index(rows, "dispatch_accepted")
    completion = _index(rows, "completion_received")

    dropped = _write(tmp_path / "dropped.jsonl", rows[:dispatch] + rows[dispatch + 1 :])
    found = check_file(dropped).violations
    assert (dispatch + 1, "sequence") in [(v.line, v.kind) for v in found]
    assert any(v.line > dispatch and v.kind == "source_mismatch" for v in found)

    swapped_rows = list(rows)
    swapped_rows[dispatch], swapped_rows[completion] = rows[completion], rows[dispatch]
    swapped = _write(tmp_path / "swapped.jsonl", swapped_rows)
    lines = {v.line for v in check_file(swapped).violations}
    assert dispatch + 1 in lines

    second = dict(rows[completion])
    second_rows = [
        {**row, "seq": i}
        for i, row in enumerate([*rows[: completion + 1], second, *rows[completion + 1 :]], 1)
    ]
    doubled = _write(tmp_path / "doubled.jsonl", second_rows)
    found = check_file(doubled).violations
    assert [(v.line, v.kind) for v in found] == [(completion + 2, "second_outcome")]

    # the CLI names the line too
    out = subprocess.run(
        [sys.executable, "-m", "acpfsm.tools.cli", "check-trace", str(doubled)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 1
    assert f"doubled.jsonl:{completion + 2}: second_outcome:" in out.stdout


def test_cli_exit_status_and_json_shape(
    real_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(real_trace)]) == 0
    assert "OK:" in capsys.readouterr().out
    assert main(["--json", str(real_trace)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and report["violations"] == []
    assert report["file"] == str(real_trace) and report["executions"] == 3

    rows = _lines(real_trace)
    rows[3]["event"] = "teleported"
    bad = _write(tmp_path / "bad.jsonl", rows)
    assert main(["--json", str(bad)]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    (v,) = report["violations"]
    assert v["line"] == 4 and v["kind"] == "unknown_event"
    assert set(v) >= {"seq", "execution_id", "chart", "generation", "instance", "event", "message"}


def test_malformed_or_unreadable_files_exit_2_with_the_line(
    real_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = real_trace.read_text().splitlines()
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join([text[0], "", text[1], '{"seq": 3, "chart": "x"}', *text[2:]]))
    with pytest.raises(TraceFormatError) as caught:
        read_trace(broken)
    assert caught.value.line == 4
    assert main([str(broken)]) == 2
    assert "broken.jsonl:4:" in capsys.readouterr().err
    assert main(["--json", str(broken)]) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["error"]["line"] == 4
    truncated = tmp_path / "truncated.jsonl"
    truncated.write_text(real_trace.read_text()[:-40])
    assert main([str(truncated)]) == 2
    assert main([str(tmp_path / "missing.jsonl")]) == 2
    # blank lines are skipped and line numbers still point at the file's lines
    spaced = tmp_path / "spaced.jsonl"
    spaced.write_text("\n\n".join(text) + "\n")
    rows = [json.loads(t) for t in text]
    records, numbers = read_trace(spaced)
    assert len(records) == len(rows) and numbers[:3] == [1, 3, 5]


def test_a_large_trace_streams_through(tmp_path: Path) -> None:
    """Not a timing assertion: 45 000 records in chunks, with one violation near the end."""
    records: list[TraceRecord] = []
    for n in range(2500):
        for r in life():
            records.append(msgspec.structs.replace(r, execution_id=f"e{n}"))
    records = renumber(records)
    records[-2] = msgspec.structs.replace(records[-2], source="running")
    path = write_jsonl(tmp_path / "large.jsonl", records)
    assert path.stat().st_size > 2 * (1 << 20)  # several read chunks
    result = check_file(path)
    assert result.records == 45_000 and result.executions == 2500
    assert [(v.line, v.kind) for v in result.violations] == [(44_999, "source_mismatch")]


def test_a_line_nested_too_deep_is_a_format_error_naming_it(
    real_trace: Path, tmp_path: Path
) -> None:
    """JSON nested past the interpreter's recursion limit makes the decoder recurse too far:
    a malformed line like any other, named by its number (an unknown field is skipped, but
    skipping still descends)."""
    depth = sys.getrecursionlimit() + 1000
    deep = '{"unknown": ' + "[" * depth + "]" * depth + ', "seq": 2}'
    text = real_trace.read_text().splitlines()
    broken = tmp_path / "deep.jsonl"
    broken.write_text("\n".join([text[0], deep, *text[1:]]) + "\n")
    with pytest.raises(TraceFormatError) as caught:
        read_trace(broken)
    assert caught.value.line == 2
