"""`acpfsm diagrams --trace`: every chart with what one execution did highlighted."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from acpfsm.statecharts import ALL_CHARTS
from acpfsm.tools.check_trace import check_file, read_trace
from acpfsm.tools.cli import main
from acpfsm.tools.diagrams import HEADER, run_highlights

from .traces import record_two_executions


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    """Two executions: one with an initial prompt and a follow-up, one that only boots."""
    return record_two_executions(tmp_path / "run.jsonl")


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
    assert ("admitted", "dispatch_started", "sending") in gen.transitions
    assert ("sending", "dispatch_accepted", "awaited") in gen.transitions
    # entering awaited is being in dispatched; the initial state counts as visited
    assert {"admitted", "sending", "dispatched", "awaited", "completed", "superseded"} <= gen.states
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
        ["README.md", *(f"{c}.{x}" for c in charts for x in ("mmd", "svg", "html"))]
    )
    mermaid = (out / "prompt_generation.mmd").read_text()
    assert "admitted --> sending : ✔ dispatch_started" in mermaid
    assert "sending --> awaited : ✔ dispatch_accepted" in mermaid
    assert "sending --> unawaited : dispatch_accepted [is_dispatch_only]" in mermaid  # not taken
    # a fired targetless transition is marked in its state's list, not drawn as a loop
    note = mermaid[mermaid.index("note right of ended") : mermaid.index("end note", mermaid.index("note right of ended"))]  # fmt: skip
    assert "✔ successor_admitting" in note and "ended --> ended" not in mermaid
    hl = next(line for line in mermaid.splitlines() if line.strip().startswith("class "))
    assert "awaited" in hl and "completed" in hl and "reconnecting" not in hl
    svg = (out / "prompt_generation.svg").read_text()
    assert "<svg" in svg and "#c0392b" in svg
    assert svg.startswith(f"<!-- acpfsm diagrams (trace): execution {first} of {trace} -->")
    for path in out.glob("*.svg"):  # each parses as XML (a comment with `--` did not)
        assert ET.parse(path).getroot().tag == "{http://www.w3.org/2000/svg}svg"
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


HOSTILE_ID = "--><svg onload=alert(1)>--]]>\n<!-- ../../x\x00"


def test_run_diagrams_of_a_hostile_execution_id_are_inert(tmp_path: Path) -> None:
    """An execution id from a hostile trace ends up as inert text: the SVG still parses with
    no injected element, the Mermaid note stays one comment line, nothing lands outside."""
    trace = tmp_path / "hostile.jsonl"
    rec = {"seq": 1, "time": 0.0, "execution_id": HOSTILE_ID, "chart": "agent_stream",
           "generation": 0, "instance": 0, "event": "connect_started", "source": "idle",
           "target": "connecting"}  # fmt: skip
    trace.write_text(json.dumps(rec) + "\n")
    assert main(["diagrams", "--trace", str(trace)]) == 0
    (out,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert out.parent == tmp_path and out.name.startswith("hostile-")
    for path in out.glob("*.svg"):
        root = ET.parse(path).getroot()
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
        assert not [e for e in root.iter() if "onload" in e.attrib]
    mermaid = (out / "agent_stream.mmd").read_text().splitlines()
    assert mermaid[0].startswith("%% ") and mermaid[1] == "stateDiagram-v2"
    index = (out / "README.md").read_text()
    assert "<svg" not in index and "&lt;svg onload" in index


@pytest.mark.integration
def test_the_demo_writes_the_diagrams_of_its_run(tmp_path: Path) -> None:
    trace = tmp_path / "demo.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "acpfsm.tools.cli", "demo", "--workspace", str(tmp_path / "ws"),
         "--trace", str(trace)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Diagrams and report of the run" in proc.stdout
    assert "diagram files (.html, .mmd, .svg)" in proc.stdout
    runs = sorted((tmp_path / "demo").iterdir())
    assert [p.name[:2] for p in runs] == ["1-", "2-"]
    for run in runs:
        assert (run / "README.md").is_file() and (run / "prompt_generation.svg").is_file()
        for path in run.glob("*.svg"):
            ET.parse(path)
    written = sorted((tmp_path / "demo-report").glob("*.html"))
    pages = [p for p in written if "." not in p.stem]  # beside them: one explorer per chart
    assert len(pages) == 3  # two executions and the index
    assert len(written) > len(pages)
    for page in pages:
        assert (
            f"report of execution 1: {page}" in proc.stdout
            or page.name == "index.html"
            or (f"report of execution 2: {page}" in proc.stdout)
        )
        ET.parse(page)
    assert "charts drawn, check-trace OK" in proc.stdout
    first = (runs[0] / "prompt_generation.mmd").read_text()
    assert "✔ steered" in first and "✔ cancel_answered" in first
    resumed = (runs[1] / "session_init.mmd").read_text()
    assert "✔ load_succeeded" in resumed
    assert check_file(trace).ok
    check = subprocess.run(
        [sys.executable, "-m", "acpfsm.tools.cli", "check-trace", "--json", str(trace)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert check.returncode == 0 and json.loads(check.stdout)["ok"] is True


@pytest.mark.integration
def test_the_demo_says_what_it_wrote_without_the_renderer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without graphviz-pure the demo writes Mermaid only and says so, naming the extra."""
    from acpfsm.tools import demo, diagrams

    monkeypatch.setattr(diagrams.render, "GRAPHVIZ_BINARY", "graphviz-pure-not-installed")
    trace = tmp_path / "demo.jsonl"
    assert demo.main(["--workspace", str(tmp_path / "ws"), "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "diagram files (.mmd)" in out and ".svg" not in out
    assert "no SVG drawn: the renderer is missing (pip install 'acpfsm[diagrams]')" in out
    assert "charts as Mermaid source, check-trace OK" in out
    assert not list((tmp_path / "demo").rglob("*.svg"))
