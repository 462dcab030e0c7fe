"""Diagrams of one recorded run: every chart with the states an execution was in and the
transitions it fired highlighted (``acpfsm diagrams --trace``), and an explorer per chart that
steps through the run."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acpfsm.statecharts import Chart

from .explorer import render_explorer
from .files import default_charts, validate
from .mermaid import render_mermaid
from .model import (
    ChartRef,
    Triple,
    ancestors,
    children,
    initial_of,
    one_line,
    states_by_id,
    top_states,
    xml_comment,
)
from .render import GraphvizNotFound, find_graphviz, render_scene_svg
from .scene import full_scene

__all__ = ["RUN_INDEX", "RunHighlights", "render_run_svg", "run_highlights", "write_run"]

RUN_INDEX = "README.md"


@dataclass(frozen=True, slots=True)
class RunHighlights:
    """What one execution did in one chart, from its trace records (every instance of the
    chart in that execution together: all prompt generations, a re-run SessionInit)."""

    chart: str
    states: frozenset[str]
    """Every state an instance was in (initial configurations included) and its ancestors."""
    transitions: frozenset[Triple]
    """Every fired ``(source, event, target)``."""
    records: int
    instances: int


def _entered(state: Any) -> set[str]:
    """``state``, its ancestors and the initial children that entering it enters."""
    out = {str(state.id), *ancestors(state)}
    child = initial_of(children(state)) if children(state) else None
    while child is not None:
        out.add(str(child.id))
        child = initial_of(children(child)) if children(child) else None
    return out


def run_highlights(
    records: Iterable[Any], execution_id: str, charts: Sequence[type[Chart]] | None = None
) -> list[RunHighlights]:
    """The highlights of every chart for ``execution_id`` (records are
    :class:`~acpfsm.runtime.trace.TraceRecord`-like: ``execution_id``, ``chart``,
    ``generation``, ``instance``, ``event``, ``source``, ``target``)."""
    chosen = tuple(default_charts() if charts is None else charts)
    by_name = {c.chart_name: c for c in chosen}
    visited: dict[str, set[str]] = {name: set() for name in by_name}
    entered: dict[str, set[str]] = {name: set() for name in by_name}
    fired: dict[str, set[Triple]] = {name: set() for name in by_name}
    counts: dict[str, int] = dict.fromkeys(by_name, 0)
    instances: dict[str, set[tuple[int, int]]] = {name: set() for name in by_name}
    for rec in records:
        if rec.execution_id != execution_id or rec.chart not in by_name:
            continue
        visited[rec.chart].add(rec.source)
        entered[rec.chart].add(rec.target)
        fired[rec.chart].add((rec.source, rec.event, rec.target))
        counts[rec.chart] += 1
        instances[rec.chart].add((rec.generation, rec.instance))
    out: list[RunHighlights] = []
    for name, chart in by_name.items():
        states = states_by_id(chart)
        marked: set[str] = set()
        if counts[name]:  # every instance started in the initial configuration
            top = initial_of(top_states(chart))
            if top is not None:
                marked |= _entered(top)
        for sid in visited[name]:
            state = states.get(sid)
            if state is not None:
                marked.add(sid)
                marked.update(ancestors(state))
        for sid in entered[name]:
            state = states.get(sid)
            if state is not None:
                marked |= _entered(state)
        out.append(
            RunHighlights(
                chart=name,
                states=frozenset(marked),
                transitions=frozenset(fired[name]),
                records=counts[name],
                instances=len(instances[name]),
            )
        )
    return out


def render_run_svg(chart: ChartRef, highlights: RunHighlights, *, binary: Path) -> str:
    """The SVG of ``chart`` with what a run did (:func:`run_highlights`) highlighted, without
    the generated-file header."""
    scene = full_scene(
        chart, highlight_states=highlights.states, highlight_transitions=highlights.transitions
    )
    return render_scene_svg(scene, binary=binary, header=False)


def chart_records(records: Iterable[Any], execution_id: str, chart: str) -> list[Any]:
    """The records of ``chart`` in ``execution_id``, in firing order."""
    mine = [r for r in records if r.execution_id == execution_id and r.chart == chart]
    return sorted(mine, key=lambda r: r.seq)


def write_explorer(
    path: Path,
    chart: type[Chart],
    records: Sequence[Any],
    execution_id: str,
    hl: RunHighlights,
    *,
    binary: Path,
    source: str = "",
) -> None:
    """The explorer of ``chart`` with the timeline of what ``execution_id`` did in it."""
    mine = chart_records(records, execution_id, chart.chart_name)
    origin = f" of {source}" if source else ""
    page = render_explorer(
        chart,
        binary=binary,
        records=mine,
        trace_label=f"execution {execution_id}{origin}",
        highlight_states=sorted(hl.states),
        highlight_transitions=sorted(hl.transitions),
    )
    path.write_text(page, encoding="utf-8")


def write_run(
    out_dir: Path | str,
    records: Sequence[Any],
    execution_id: str,
    *,
    charts: Sequence[type[Chart]] | None = None,
    binary: Path | None = None,
    source: str = "",
) -> list[Path]:
    """Write ``<chart>.mmd``, ``<chart>.svg`` and the explorer ``<chart>.html`` (with the
    run's timeline) for every chart, highlighting what ``execution_id`` did, and an index
    ``README.md``; returns the written paths. Without the
    ``graphviz-pure`` binary only the Mermaid files and the index are written. The files do
    not carry :data:`HEADER`, so ``acpfsm diagrams`` never mistakes them for its own; what
    comes from the trace (the execution id, ``source``) is written as inert text."""
    chosen = tuple(default_charts() if charts is None else charts)
    validate(chosen)
    by_name = {c.chart_name: c for c in chosen}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    try:
        exe: Path | None = binary if binary is not None else find_graphviz()
    except GraphvizNotFound:
        exe = None
    origin = f" of {source}" if source else ""
    note = f"acpfsm diagrams (trace): execution {execution_id}{origin}"
    shown = one_line(f"{execution_id}")
    written: list[Path] = []
    index = [
        f"# Execution {shown}",
        "",
        (
            f"Generated by `acpfsm diagrams --trace`{one_line(origin)}: every chart with the "
            "states this execution was in filled and the transitions it fired marked (✔ in "
            "Mermaid, red in the SVG)."
        ),
        "",
        "| chart | records | instances | transitions fired | states visited | files |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    sections: list[str] = []
    for hl in run_highlights(records, execution_id, chosen):
        chart = by_name[hl.chart]
        mermaid = render_mermaid(
            chart,
            highlight_states=hl.states,
            highlight_transitions=hl.transitions,
            header=False,
        )
        path = out / f"{hl.chart}.mmd"
        path.write_text(f"%% {one_line(note)}\n{mermaid}")
        written.append(path)
        files = f"[mermaid]({hl.chart}.mmd)"
        if exe is not None:
            svg = render_run_svg(chart, hl, binary=exe)
            path = out / f"{hl.chart}.svg"
            path.write_text(f"{xml_comment(note)}\n{svg}")
            written.append(path)
            path = out / f"{hl.chart}.html"
            write_explorer(path, chart, records, execution_id, hl, binary=exe, source=source)
            written.append(path)
            files = f"[svg]({hl.chart}.svg) · [explorer]({hl.chart}.html) · {files}"
        index.append(
            f"| [{hl.chart}](#{hl.chart}) | {hl.records} | {hl.instances} "
            f"| {len(hl.transitions)} | {len(hl.states)} | {files} |"
        )
        sections += [f"## {hl.chart}", "", "```mermaid", mermaid.rstrip("\n"), "```", ""]
    path = out / RUN_INDEX
    path.write_text("\n".join([*index, "", *sections]))
    written.append(path)
    return written