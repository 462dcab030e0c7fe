"""What one drawing shows, before any layout: boxes (states), clusters (composite states drawn
open), and arcs. An arc is one arrow from one or more boxes through a *label node* (its event
lines, a node of its own so that Graphviz never lays a label over a node or another label) to
one target: transitions with the same label lines into the same target share one arc.

:func:`full_scene` is the whole chart; :mod:`.views` builds the overview, the composite views
and the event views from the same parts."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from .model import (
    ChartRef,
    Edge,
    InPlace,
    Triple,
    chart_class,
    children,
    edges,
    highlights,
    in_place,
    initial_of,
    is_history,
    top_states,
    wrap_words,
)

__all__ = ["Arc", "Box", "Cluster", "Line", "Scene", "full_scene"]

NOTE_WRAP = 44
"""Characters per line of the small grey notes inside a box."""


@dataclass(frozen=True, slots=True)
class Line:
    """One line of text: an arc's label line or a note inside a box."""

    text: str
    triples: tuple[Triple, ...] = ()
    """The declared transitions the line stands for (what the explorer highlights)."""
    highlighted: bool = False
    internal: bool = False


@dataclass(slots=True)
class Box:
    id: str
    title: str
    parent: str | None
    notes: list[Line] = field(default_factory=list)
    final: bool = False
    history: bool = False
    highlighted: bool = False
    style: str = "state"
    """``state``, ``collapsed`` (a composite drawn closed), ``outside`` (context of a view)
    or ``muted`` (an event view: the event is illegal there)."""


@dataclass(slots=True)
class Cluster:
    id: str
    title: str
    parent: str | None
    parallel: bool = False
    highlighted: bool = False
    notes: list[Line] = field(default_factory=list)
    initial: str | None = None
    """The box or cluster the initial pseudo-state points to (None: no initial arrow)."""
    dashed: bool = False


@dataclass(slots=True)
class Arc:
    key: str
    sources: list[str]
    target: str
    lines: list[Line]
    dashed: bool = False

    @property
    def highlighted(self) -> bool:
        return any(line.highlighted for line in self.lines)


@dataclass(slots=True)
class Scene:
    name: str
    """The drawing's title (and Graphviz graph name)."""
    boxes: dict[str, Box] = field(default_factory=dict)
    clusters: dict[str, Cluster] = field(default_factory=dict)
    arcs: list[Arc] = field(default_factory=list)
    initial: str | None = None
    """The top-level initial box or cluster."""
    table: list[tuple[str, str, str]] = field(default_factory=list)
    """Rows ``(state, ignores, handles in place)`` drawn as a table under the diagram."""
    caption: str = ""

    def container(self, node: str) -> str | None:
        box = self.boxes.get(node)
        if box is not None:
            return box.parent
        return self.clusters[node].parent

    def chain(self, node: str) -> list[str]:
        """The clusters holding ``node``, outermost first (a cluster is not in its own)."""
        out: list[str] = []
        parent = self.container(node)
        while parent is not None:
            out.append(parent)
            parent = self.clusters[parent].parent
        return out[::-1]


def _wrap_items(kind: str, items: list[InPlace], width: int) -> list[tuple[str, list[InPlace]]]:
    """As :func:`~.model.wrap_words`, keeping which items each line holds."""
    lines: list[tuple[str, list[InPlace]]] = []
    line = kind
    held: list[InPlace] = []
    for i, item in enumerate(items):
        piece = f" {item.label}," if i < len(items) - 1 else f" {item.label}"
        if len(line) + len(piece) > width and held:
            lines.append((line, held))
            line = "  "
            held = []
        line += piece
        held.append(item)
    if held:
        lines.append((line, held))
    return lines


def note_lines(items: Iterable[InPlace], fired: Collection[Triple]) -> list[Line]:
    """``ignores …`` / ``handles in place …`` lines of one state, wrapped; a line holding a
    fired one is highlighted."""
    grouped: dict[str, list[InPlace]] = {}
    for item in items:
        grouped.setdefault(item.kind, []).append(item)
    out: list[Line] = []
    for kind in ("ignores", "handles in place"):
        for text, held in _wrap_items(kind, grouped.get(kind, []), NOTE_WRAP):
            triples = tuple(i.triple for i in held)
            out.append(Line(text, triples, any(t in fired for t in triples)))
    return out


def arc_lines(edges_: Iterable[Edge], fired: Collection[Triple], text: Callable[[Edge], str]) -> list[Line]:
    return [
        Line(text(e), e.triples, any(t in fired for t in e.triples), e.internal) for e in edges_
    ]


def merge_arcs(groups: dict[tuple[str, str], list[Line]], prefix: str = "a") -> list[Arc]:
    """One arc per ``(source, target)`` group, then arcs into the same target with the same
    label lines merged into one arc with several sources."""
    arcs: list[Arc] = []
    by_label: dict[tuple[str, tuple[str, ...]], Arc] = {}
    for (source, target), lines in groups.items():
        texts = tuple(line.text for line in lines)
        key = (target, texts)
        arc = by_label.get(key)
        if arc is not None and source not in arc.sources:
            arc.sources.append(source)
            arc.lines = [
                Line(a.text, a.triples + b.triples, a.highlighted or b.highlighted, a.internal)
                for a, b in zip(arc.lines, lines, strict=True)
            ]
            continue
        arc = Arc(f"{prefix}{len(arcs)}", [source], target, list(lines))
        arc.dashed = all(line.internal for line in lines)
        by_label[key] = arc
        arcs.append(arc)
    return arcs


def add_structure(
    scene: Scene,
    states: list[Any],
    parent: str | None,
    *,
    open_: Callable[[Any], bool],
    hl_states: Collection[str],
) -> None:
    """Boxes and clusters for ``states`` (recursively): a composite for which ``open_`` is
    true becomes a cluster, any other state a box."""
    for state in states:
        sid = str(state.id)
        kids = children(state)
        if kids and open_(state):
            initial = None if state.parallel else initial_of(kids)
            scene.clusters[sid] = Cluster(
                sid,
                sid,
                parent,
                parallel=bool(state.parallel),
                highlighted=sid in hl_states,
                initial=str(initial.id) if initial is not None else None,
            )
            add_structure(scene, kids, sid, open_=open_, hl_states=hl_states)
            continue
        box = Box(sid, "H" if is_history(state) else sid, parent)
        box.final = bool(state.final)
        box.history = is_history(state)
        box.highlighted = sid in hl_states
        if kids:
            box.style = "collapsed"
            names = [str(k.id) for k in kids if not is_history(k)]
            box.notes = [Line(t) for t in wrap_words(f"{len(names)} states:", names, NOTE_WRAP)]
        scene.boxes[sid] = box


def full_scene(
    chart: ChartRef,
    *,
    highlight_states: Collection[str] | None = None,
    highlight_transitions: Collection[Triple] | None = None,
) -> Scene:
    """The whole chart: every composite open, every targetless transition listed inside its
    state (a composite's in a note node of its cluster), a simple state's self-transitions
    listed in its box (``re-enters on …``), every other transition an arc."""
    cls = chart_class(chart)
    hl_states, fired = highlights(chart, highlight_states, highlight_transitions)
    scene = Scene(cls.chart_name)
    tops = top_states(cls)
    add_structure(scene, tops, None, open_=lambda s: True, hl_states=hl_states)
    first = initial_of(tops)
    scene.initial = str(first.id) if first is not None else None
    per_state: dict[str, list[InPlace]] = {}
    for item in in_place(cls):
        per_state.setdefault(item.state, []).append(item)
    for sid, items in per_state.items():
        holder = scene.boxes.get(sid) or scene.clusters[sid]
        holder.notes = note_lines(items, fired)
    groups: dict[tuple[str, str], list[Line]] = {}
    for edge in edges(cls):
        if edge.targetless:
            continue
        if edge.source == edge.target and edge.source in scene.boxes:
            box = scene.boxes[edge.source]
            hl = any(t in fired for t in edge.triples)
            box.notes.append(Line(f"re-enters on {edge.label()}", edge.triples, hl))
            continue
        lines = arc_lines([edge], fired, Edge.label)
        groups.setdefault((edge.source, edge.target), []).extend(lines)
    scene.arcs = merge_arcs(groups)
    return scene
