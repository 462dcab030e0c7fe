"""`acpfsm diagrams --trace`: every chart with what one execution did highlighted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from acpfsm.adapters.memory import MemoryTransport
from acpfsm.runtime.tools.check_trace import check_file, read_trace
from acpfsm.runtime.tools.cli import main
from acpfsm.runtime.tools.diagrams import HEADER, run_highlights
from acpfsm.statecharts import ALL_CHARTS

from .memory_runtime import MemoryExecutor, make_runtime, session_of, wait_until


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    """Two executions: one with an initial prompt and a follow-up, one that only boots."""
    path = tmp_path / "run.jsonl"

    async def produce() -> None:
        ex = MemoryExecutor(lambda: MemoryTransport(auto_complete=True))
        async with make_runtime(ex, trace_path=path) as rt:
            from .memory_runtime import spec

            ref = await rt.launch(spec("first"))
            await rt.resume(ref.id, "second")
            other = await rt.launch(spec())
            so = session_of(rt, other.id)
            await wait_until(lambda: so.execution.status == "READY", limit=5)

    anyio.run(produce, backend="trio")
    return path


def _ids(path: Path) -> list[str]:
    records, _ = read_trace(path)
    return list(dict.fromkeys(r.execution_id for r in records))


def test_highlights_follow_the_records(trace: Path) -> None:
    records, _ = read_trace(trace)
    first = _ids(trace)[0]
    by_chart = {h.chart: h for h in run_highlights(records, first)}
    assert set(by_chart) == {c.chart_name for c in ALL_CHARTS}
    gen = by_chart["prompt_generation"]
    assert gen.instances == 2
    assert ("admitted", "dispatch_accepted", "awaited") in gen.transitions
    # entering awaited is being in dispatched; the initial state counts as visited
    assert {"admitted", "dispatched", "awaited", "completed", "superseded"} <= gen.states
    assert "reconnecting" not in gen.states
    assert by_chart["start_model_policy"].records == 0
    assert not by_chart["start_model_policy"].states


def test_cli_writes_mermaid_svg_and_an_index(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = _ids(trace)[0]
    out = tmp_path / "drawn"
    assert (
        main(["diagrams", "--trace", str(trace), "--execution", first[:8], "--out", str(out)]) == 0
    )
    assert f"execution {first} drawn in {out}" in capsys.readouterr().out
    names = sorted(p.name for p in out.iterdir())
    charts = sorted(c.chart_name for c in ALL_CHARTS)
    assert names == sorted(
        ["README.md", *(f"{c}.mmd" for c in charts), *(f"{c}.svg" for c in charts)]
    )
    mermaid = (out / "prompt_generation.mmd").read_text()
    assert "admitted --> awaited : ✔ dispatch_accepted" in mermaid
    assert "admitted --> unawaited : dispatch_accepted [is_dispatch_only]" in mermaid  # not taken
    # a fired targetless transition is marked in its state's list, not drawn as a loop
    note = mermaid[mermaid.index("note right of ended") : mermaid.index("end note", mermaid.index("note right of ended"))]  # fmt: skip
    assert "✔ successor_admitting" in note and "ended --> ended" not in mermaid
    hl = next(line for line in mermaid.splitlines() if line.strip().startswith("class "))
    assert "awaited" in hl and "completed" in hl and "reconnecting" not in hl
    svg = (out / "prompt_generation.svg").read_text()
    assert "<svg" in svg and "#c0392b" in svg
    assert HEADER not in svg and HEADER not in mermaid  # never mistaken for `acpfsm diagrams`
    index = (out / "README.md").read_text()
    assert f"# Execution {first}" in index and "```mermaid" in index


def test_cli_default_directory_and_choice_of_execution(
    trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = _ids(trace)
    assert main(["diagrams", "--trace", str(trace)]) == 2
    err = capsys.readouterr().err
    assert "has 2 executions" in err and first in err and second in err
    assert main(["diagrams", "--trace", str(trace), "--execution", "nope"]) == 2
    assert main(["diagrams", "--trace", str(trace), "--execution", second]) == 0
    assert (trace.parent / f"run-{second[:8]}" / "execution.svg").is_file()
    assert main(["diagrams", "--check", "--trace", str(trace)]) == 2
    assert main(["diagrams", "--execution", first]) == 2
    bad = trace.with_name("bad.jsonl")
    bad.write_text("{not json\n")
    assert main(["diagrams", "--trace", str(bad)]) == 2


@pytest.mark.integration
def test_the_demo_writes_the_diagrams_of_its_run(tmp_path: Path) -> None:
    trace = tmp_path / "demo.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "acpfsm.runtime.tools.cli", "demo", "--workspace", str(tmp_path / "ws"),
         "--trace", str(trace)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Diagrams of the run" in proc.stdout
    runs = sorted((tmp_path / "demo").iterdir())
    assert [p.name[:2] for p in runs] == ["1-", "2-"]
    for run in runs:
        assert (run / "README.md").is_file() and (run / "prompt_generation.svg").is_file()
    first = (runs[0] / "prompt_generation.mmd").read_text()
    assert "✔ steered" in first and "✔ cancel_answered" in first
    resumed = (runs[1] / "session_init.mmd").read_text()
    assert "✔ load_succeeded" in resumed
    assert check_file(trace).ok
    check = subprocess.run(
        [sys.executable, "-m", "acpfsm.runtime.tools.cli", "check-trace", "--json", str(trace)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert check.returncode == 0 and json.loads(check.stdout)["ok"] is True
