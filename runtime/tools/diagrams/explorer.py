"""The explorer: one self-contained HTML page per chart, offline.

The page holds the whole chart's drawing (:func:`~.scene.full_scene`), the chart's declared
transitions as JSON (each with the drawing's elements that show it: its label line, its
edges, or its line inside a state box), and one script (:data:`~.explorer_js.SCRIPT`). Its
content security policy fetches nothing and runs only that script (by hash). Click a state (or
Tab to it, Enter) to highlight its declared incoming and outgoing transitions and list them
with their guards; choose an event to see only its transitions; search states and events.
Given a trace (:func:`render_explorer` ``records``), a timeline steps through the run, forward
and back (buttons, ``→``/``←``, ``Home``/``End``), highlighting the current state and the
transition just taken. Whatever the trace holds is data: it reaches the page as JSON and the
script only ever sets text."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .explorer_js import CSS, SCRIPT
from .model import (
    ChartRef,
    Triple,
    chart_class,
    edges,
    in_place,
    states_by_id,
    xml_safe,
)
from .render import render_scene_svg
from .scene import Scene, full_scene

__all__ = ["CSP", "explorer_data", "render_explorer"]

_SCRIPT_HASH = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    f"script-src 'sha256-{_SCRIPT_HASH}'"
)
"""Nothing fetched, only the explorer's own script runs."""

Part = tuple[str, int | None]


def _parts(scene: Scene) -> dict[Triple, list[Part]]:
    """For every declared transition the drawing shows, the elements that show it: ``(element
    id, index of its text line)`` or ``(edge id, None)``."""
    out: dict[Triple, list[Part]] = {}
    for box in scene.boxes.values():
        for i, line in enumerate(box.notes, 1):  # text 0 is the state's name
            for t in line.triples:
                out.setdefault(t, []).append((f"s-{box.id}", i))
    for cluster in scene.clusters.values():
        for i, line in enumerate(cluster.notes):
            for t in line.triples:
                out.setdefault(t, []).append((f"n-{cluster.id}", i))
    for arc in scene.arcs:
        for i, line in enumerate(arc.lines):
            for t in line.triples:
                parts = out.setdefault(t, [])
                parts.append((arc.key, i))
                if t[0] in arc.sources:
                    parts.append((f"{arc.key}-s{arc.sources.index(t[0])}", None))
                parts.append((f"{arc.key}-t", None))
    return out


def explorer_data(chart: ChartRef, scene: Scene) -> dict[str, Any]:
    """The JSON the explorer's script reads: states, transitions (with the elements that
    show each), events."""
    cls = chart_class(chart)
    by_id = states_by_id(cls)
    parts = _parts(scene)
    kinds = {i.triple: i.kind for i in in_place(cls)}
    states = []
    for sid, state in by_id.items():
        element = f"c-{sid}" if sid in scene.clusters else f"s-{sid}"
        entry: dict[str, Any] = {
            "id": sid,
            "parent": str(state.parent.id) if state.parent is not None else "",
            "el": element,
        }
        if sid in scene.clusters:
            entry["title"] = f"t-{sid}"
        states.append(entry)
    transitions = []
    events: list[str] = []
    for edge in edges(cls):
        for event in edge.events:
            triple = (edge.source, event, edge.target)
            if event not in events:
                events.append(event)
            transitions.append(
                {
                    "source": edge.source,
                    "event": event,
                    "target": edge.target,
                    "guard": edge.guard_text,
                    "targetless": edge.targetless,
                    "kind": kinds.get(triple, ""),
                    "parts": [list(p) for p in dict.fromkeys(parts.get(triple, []))],
                }
            )
    return {"chart": cls.chart_name, "states": states, "transitions": transitions,
            "events": events}  # fmt: skip


def _json(data: Any) -> str:
    """JSON safe inside a ``<script type="application/json">`` element."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), sort_keys=False)
    return (
        xml_safe(text).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    )


_SVG_START = re.compile(r"<svg\b")


def _inline(svg: str) -> str:
    match = _SVG_START.search(svg)
    return svg[match.start() :] if match else svg


def _t(text: object) -> str:
    return html.escape(xml_safe(str(text)), quote=True)


def render_explorer(
    chart: ChartRef,
    *,
    binary: Path | None = None,
    records: Sequence[Any] = (),
    trace_label: str = "",
    highlight_states: Sequence[str] | None = None,
    highlight_transitions: Sequence[Triple] | None = None,
) -> str:
    """The explorer page of ``chart``; with ``records`` (trace records of this chart, in
    order: ``seq``, ``event``, ``source``, ``target``, ``generation``, ``instance``) a
    timeline of that run."""
    cls = chart_class(chart)
    scene = full_scene(
        cls, highlight_states=highlight_states, highlight_transitions=highlight_transitions
    )
    svg = _inline(render_scene_svg(scene, binary=binary, header=False))
    data = explorer_data(cls, scene)
    if records:
        data["trace"] = {
            "label": trace_label,
            "records": [
                {
                    "seq": r.seq,
                    "instance": f"#{r.generation}" + (f".{r.instance}" if r.instance else ""),
                    "event": r.event,
                    "source": r.source,
                    "target": r.target,
                }
                for r in records
            ],
        }
    name = cls.chart_name
    options = "".join(f'<option value="{_t(e)}">{_t(e)}</option>' for e in data["events"])
    timeline = ""
    if records:
        timeline = (
            '<section id="timeline" aria-label="timeline of the run">'
            f"<strong>Run</strong> <span class=\"muted\">{_t(trace_label)}</span> "
            '<button id="prev" type="button" title="back (←)">◀ back</button> '
            '<button id="next" type="button" title="forward (→)">forward ▶</button> '
            '<span id="position" aria-live="polite"></span>'
            '<ol id="steps"></ol></section>'
        )
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8"/>',
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}"/>',
            '<meta name="viewport" content="width=device-width, initial-scale=1"/>',
            f"<title>acpfsm explorer: {_t(name)}</title>",
            f"<style>{CSS}</style>",
            "</head>",
            "<body>",
            "<header>",
            f"<h1>{_t(name)}</h1>",
            '<label>search <input id="search" type="search" placeholder="state or event (/)"/>'
            "</label>",
            f'<label>event <select id="event"><option value="">all</option>{options}</select>'
            "</label>",
            '<button id="clear" type="button" title="Esc">clear</button>',
            "</header>",
            "<main>",
            f'<div id="drawing">{svg}</div>',
            '<aside id="panel" aria-live="polite"></aside>',
            "</main>",
            timeline,
            f'<script type="application/json" id="data">{_json(data)}</script>',
            f"<script>{SCRIPT}</script>",
            "</body>",
            "</html>",
            "",
        ]
    )
