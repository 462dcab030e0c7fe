"""Views of a big chart (:func:`is_big`): smaller drawings, each answering one question.

* The **overview** (:func:`overview_scene`): the composite states on the chart's initial path
  (where every run starts) drawn open, every other composite collapsed to one box that names
  the states inside it, transitions between the boxes summarised (event names, one arc per
  source and target); the targetless transitions (what each state ignores or handles in
  place) in a table under the drawing instead of inside the boxes.
* One **composite view** per composite state (:func:`composite_scene`): its inside drawn in
  full, and its boundary: every transition that enters or leaves it, to the outside states
  drawn as dashed grey boxes.
* One **event view** per important event (:func:`event_scene`, :func:`important_events`):
  every state, and only that event's transitions; a state where the event is declared
  targetless says so in its box, one where it is not declared at all (the chart raises) is
  drawn grey and dashed.

Everything is computed from the declaration: which charts are big, which composites are open,
which events are important."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from .model import (
    ChartRef,
    Edge,
    InPlace,
    Triple,
    chart_class,
    children,
    edges,
    in_place,
    initial_of,
    states_by_id,
    top_states,
    walk,
    wrap_words,
)
from .scene import Box, Line, Scene, add_structure, arc_lines, merge_arcs

__all__ = [
    "BIG_CHART_TRANSITIONS",
    "IMPORTANT_EVENT_STATES",
    "composite_scene",
    "composites",
    "event_scene",
    "important_events",
    "is_big",
    "overview_scene",
]

BIG_CHART_TRANSITIONS = 50
"""A chart with at least this many declared transitions (rows of its table) gets views."""

IMPORTANT_EVENT_STATES = 4
"""An event that has an effect (a transition, or in-place handling) in at least this many
simple states gets an event view."""


def is_big(chart: ChartRef) -> bool:
    return sum(len(e.events) for e in edges(chart)) >= BIG_CHART_TRANSITIONS


def composites(chart: ChartRef) -> list[str]:
    """Every composite state (compound or parallel), in document order."""
    return [str(s.id) for s in walk(top_states(chart_class(chart))) if children(s)]


def _leaves(state: Any) -> list[str]:
    kids = [k for k in children(state) if not getattr(k, "is_history", False)]
    if not kids:
        return [str(state.id)]
    return [leaf for k in kids for leaf in _leaves(k)]


def important_events(chart: ChartRef) -> list[str]:
    """Events with an effect in at least :data:`IMPORTANT_EVENT_STATES` simple states (a
    transition declared on a composite counts for every simple state inside it), most
    widespread first (ties in declaration order)."""
    cls = chart_class(chart)
    by_id = states_by_id(cls)
    reach: dict[str, set[str]] = {}
    order: list[str] = []
    ignored = {(i.state, i.event) for i in in_place(cls) if i.kind == "ignores"}
    for edge in edges(cls):
        for event in edge.events:
            if event not in order:
                order.append(event)
            if edge.targetless and (edge.source, event) in ignored:
                continue
            reach.setdefault(event, set()).update(_leaves(by_id[edge.source]))
    chosen = [e for e in order if len(reach.get(e, ())) >= IMPORTANT_EVENT_STATES]
    return sorted(chosen, key=lambda e: (-len(reach[e]), order.index(e)))


def _table(items: Collection[InPlace], states: list[str]) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    for sid in states:
        mine = [i for i in items if i.state == sid]
        if not mine:
            continue
        ignores = ", ".join(i.label for i in mine if i.kind == "ignores")
        handles = ", ".join(i.label for i in mine if i.kind != "ignores")
        rows.append((sid, ignores, handles))
    return rows


def _initial_path(chart: Any) -> set[str]:
    out: set[str] = set()
    state = initial_of(top_states(chart))
    while state is not None and children(state):
        out.add(str(state.id))
        state = initial_of(children(state))
    return out


def overview_scene(chart: ChartRef) -> Scene:
    """The overview of a big chart (see the module docstring)."""
    cls = chart_class(chart)
    by_id = states_by_id(cls)
    open_ = _initial_path(cls)
    scene = Scene(f"{cls.chart_name}.overview")
    scene.caption = f"{cls.chart_name}: overview"
    add_structure(scene, top_states(cls), None, open_=lambda s: str(s.id) in open_, hl_states=())
    first = initial_of(top_states(cls))
    scene.initial = str(first.id) if first is not None else None

    def shown(sid: str) -> str:
        state = by_id[sid]
        for anc in [*reversed(list(state.ancestors()))]:
            if str(anc.id) in scene.boxes:
                return str(anc.id)
        return sid

    groups: dict[tuple[str, str], list[str]] = {}
    triples: dict[tuple[str, str], list[Triple]] = {}
    for edge in edges(cls):
        if edge.targetless:
            continue
        source, target = shown(edge.source), shown(edge.target)
        if source == target and source in scene.boxes:
            if edge.source == edge.target == source:  # a simple state's self-transition
                note = Line(f"re-enters on {edge.label()}", edge.triples)
                scene.boxes[source].notes.append(note)
            continue  # else inside a collapsed composite: its own view draws it
        key = (source, target)
        for event in edge.events:
            if event not in groups.setdefault(key, []):
                groups[key].append(event)
        triples.setdefault(key, []).extend(edge.triples)
    lines: dict[tuple[str, str], list[Line]] = {}
    for key, events in groups.items():
        texts = [t.strip() for t in wrap_words("", events, 38)]
        lines[key] = [Line(t, tuple(triples[key])) for t in texts]
    scene.arcs = merge_arcs(lines)
    scene.table = _table(in_place(cls), list(by_id))
    return scene


def composite_scene(chart: ChartRef, composite: str) -> Scene:
    """The view of one composite state: its inside in full, its boundary transitions."""
    cls = chart_class(chart)
    by_id = states_by_id(cls)
    state = by_id[composite]
    inside = {str(s.id) for s in walk([state])}
    scene = Scene(f"{cls.chart_name}.state.{composite}")
    scene.caption = f"{cls.chart_name}: inside {composite}"
    add_structure(scene, [state], None, open_=lambda s: True, hl_states=())
    groups: dict[tuple[str, str], list[Line]] = {}
    for edge in edges(cls):
        if edge.targetless:
            continue
        source_in, target_in = edge.source in inside, edge.target in inside
        if not (source_in or target_in):
            continue
        for end in (edge.source, edge.target):
            if end not in inside and end not in scene.boxes:
                box = Box(end, end, None, style="outside")
                parent = by_id[end].parent
                if parent is not None:
                    box.notes = [Line(f"in {parent.id}")]
                scene.boxes[end] = box
        if edge.source == edge.target and edge.source in scene.boxes:
            scene.boxes[edge.source].notes.append(Line(f"re-enters on {edge.label()}", edge.triples))
            continue
        groups.setdefault((edge.source, edge.target), []).extend(arc_lines([edge], (), Edge.label))
    scene.arcs = merge_arcs(groups)
    scene.table = _table(in_place(cls), [s for s in by_id if s in inside])
    return scene


def event_scene(chart: ChartRef, event: str) -> Scene:
    """Where ``event`` goes from every state."""
    cls = chart_class(chart)
    by_id = states_by_id(cls)
    scene = Scene(f"{cls.chart_name}.event.{event}")
    scene.caption = f"{cls.chart_name}: on {event}"
    add_structure(scene, top_states(cls), None, open_=lambda s: True, hl_states=())
    declared: set[str] = set()
    groups: dict[tuple[str, str], list[Line]] = {}
    for item in in_place(cls):
        if item.event == event:
            declared.add(item.state)
            text = f"{item.kind} {item.label}" if item.guard else item.kind
            line = Line(text, (item.triple,))
            holder = scene.boxes.get(item.state) or scene.clusters[item.state]
            holder.notes.append(line)
    for edge in edges(cls):
        if event not in edge.events or edge.targetless:
            continue
        declared.add(edge.source)
        guard = f" [{edge.guard_text}]" if edge.guards else ""
        line = Line(f"{event}{guard}", ((edge.source, event, edge.target),), internal=edge.internal)
        if edge.source == edge.target and edge.source in scene.boxes:
            scene.boxes[edge.source].notes.append(Line(f"re-enters{guard}", line.triples))
            continue
        groups.setdefault((edge.source, edge.target), []).append(line)
    for sid, box in scene.boxes.items():
        covered = {sid, *(str(a.id) for a in by_id[sid].ancestors())}
        if not covered & declared:
            box.style = "muted"
            box.notes.append(Line("illegal here"))
    scene.arcs = merge_arcs(groups)
    return scene
