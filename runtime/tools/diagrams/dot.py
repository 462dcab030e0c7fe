"""Graphviz DOT text of a :class:`~.scene.Scene`.

Every text is set in :data:`FONT` (DejaVu Sans, Debian's default font: ``fonts-dejavu-core``),
whose character widths Graphviz knows, so the boxes it sizes fit the text a browser draws
with that font; a machine without it falls back to a narrower sans-serif face
(:data:`FONT_FALLBACK`), which still fits. Every label is a node of its own (see
:mod:`.scene`), so no label can lie over a node or another label; the SVG elements carry ids
and classes that the explorer and the legibility check read:

* a state box: ``id="s-<state>"``, class ``state`` (and ``collapsed``, ``outside``,
  ``muted``, ``highlighted``);
* a composite drawn open: ``id="c-<state>"``, class ``composite``;
* an arc's label node: ``id="<arc>"`` (``a0``, ``a1`` …), class ``arc-label``, one text
  element per line; its edges ``<arc>-s<i>`` (from the i-th source) and ``<arc>-t`` (into the
  target), class ``arc``;
* a composite's notes: class ``notes``; initial pseudo-states: class ``initial``.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from .scene import Arc, Box, Line, Scene

__all__ = [
    "FONT",
    "FONT_FALLBACK",
    "HL_CLUSTER_FILL",
    "HL_EDGE",
    "HL_FILL",
    "HL_STROKE",
    "LAYOUTS",
    "Layout",
    "render_dot",
    "render_table_dot",
]

FONT = "DejaVu Sans"
"""The face every text is measured in (Graphviz's DejaVu Sans widths) and drawn with."""
FONT_FALLBACK = "DejaVu Sans,Bitstream Vera Sans,Arial,Helvetica,sans-serif"
"""What the SVGs ask for: DejaVu Sans, else faces narrower than it (the boxes still fit)."""

HL_FILL = "#fff3b0"
HL_STROKE = "#b8860b"
HL_CLUSTER_FILL = "#fffbe6"
HL_EDGE = "#c0392b"
NOTE_COLOUR = "#555555"
COLLAPSED_FILL = "#eaf1fb"
OUTSIDE_FILL = "#f2f2f2"
MUTED = "#9a9a9a"

TITLE_SIZE = 11
NOTE_SIZE = 8
LABEL_SIZE = 9


@dataclass(frozen=True, slots=True)
class Layout:
    """How Graphviz lays a drawing out: the direction of its ranks."""

    rankdir: Literal["LR", "TB"] = "LR"


LAYOUTS: tuple[Layout, ...] = (Layout("LR"), Layout("TB"))
"""The layouts tried, in order of preference (the first that fits a README's width)."""


def q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def esc(text: str) -> str:
    """Text for a Graphviz HTML-like label."""
    return html.escape(text, quote=True)


def _run(line: Line, size: int, colour: str | None) -> str:
    text = esc(line.text)
    if line.highlighted:
        colour = HL_EDGE
    attrs = f' POINT-SIZE="{size}"' if size else ""
    if colour:
        attrs += f' COLOR="{colour}"'
    return f"<FONT{attrs}>{text}</FONT>" if attrs else text


def _box_label(box: Box) -> str:
    colour = MUTED if box.style == "muted" else None
    title = f'<FONT COLOR="{MUTED}">{esc(box.title)}</FONT>' if colour else esc(box.title)
    notes = "<BR/>".join(_run(n, NOTE_SIZE, colour or NOTE_COLOUR) for n in box.notes)
    return f"<{title}<BR/>{notes}>" if notes else f"<{title}>"


def _lines_label(lines: Sequence[Line], size: int, colour: str | None = None) -> str:
    body = "".join(_run(line, 0, colour) + '<BR ALIGN="LEFT"/>' for line in lines)
    return f'<<FONT POINT-SIZE="{size}">{body}</FONT>>'


def _anchor(cluster: str) -> str:
    """The pseudo-node inside a composite's cluster that edges to/from it attach to (its
    initial pseudo-state). ``@`` cannot occur in a state id."""
    return f"@initial:{cluster}"


def render_dot(scene: Scene, layout: Layout = LAYOUTS[0]) -> str:
    """DOT text of ``scene`` laid out as ``layout``."""
    lines = [
        f"digraph {q(scene.name)} {{",
        (
            f"    graph [rankdir={layout.rankdir}, compound=true, fontname={q(FONT)}, "
            f"fontsize=14, label={q(scene.caption or scene.name)}, labelloc=t, "
            'nodesep=0.3, ranksep=0.3, id="graph", class="chart"];'
        ),
        (
            f'    node [shape=box, style="rounded,filled", fillcolor=white, fontname={q(FONT)}, '
            f"fontsize={TITLE_SIZE}, height=0.35, margin=\"0.12,0.05\"];"
        ),
        f"    edge [fontname={q(FONT)}, fontsize={LABEL_SIZE}, arrowsize=0.7];",
    ]
    members: dict[str | None, list[str]] = {}

    def put(container: str | None, text: str) -> None:
        members.setdefault(container, []).append(text)

    def endpoint(node: str) -> str:
        return q(_anchor(node)) if node in scene.clusters else q(node)

    # initial pseudo-states
    def initial(container: str | None, target: str | None, parallel: bool = False) -> None:
        point = _anchor(container) if container is not None else "@initial"
        pid = f"i-{container}" if container is not None else "i-top"
        if parallel:
            put(container, f'{q(point)} [shape=point, width=0.01, style=invis, label="", id={q(pid)}];')
            return
        put(
            container,
            f'{q(point)} [shape=point, style=filled, fillcolor=black, width=0.11, label="", '
            f'id={q(pid)}, class="initial"];',
        )
        if target is not None:
            head = f" [lhead={q('cluster_' + target)}]" if target in scene.clusters else ""
            put(container, f"{q(point)} -> {endpoint(target)}{head};")

    initial(None, scene.initial)
    for cluster in scene.clusters.values():
        # the composite's name is a node of the cluster (ranked before its initial
        # pseudo-state), so that no edge is routed across it as across a cluster label
        title = q("@title:" + cluster.id)
        put(
            cluster.id,
            f'{title} [shape=plaintext, margin=0, height=0, fontsize=12, label={q(cluster.title)}, '
            f"id={q('t-' + cluster.id)}, class=\"title\"];",
        )
        put(cluster.id, f"{title} -> {q(_anchor(cluster.id))} [style=invis];")
        initial(cluster.id, cluster.initial, cluster.parallel)
        if cluster.notes:
            put(
                cluster.id,
                f"{q('@notes:' + cluster.id)} [shape=plaintext, margin=0, "
                f"id={q('n-' + cluster.id)}, class=\"notes\", "
                f"label={_lines_label(cluster.notes, NOTE_SIZE, NOTE_COLOUR)}];",
            )
    for box in scene.boxes.values():
        attrs = [f"id={q('s-' + box.id)}", f"label={_box_label(box)}"]
        classes = ["state"] + ([box.style] if box.style != "state" else [])
        if box.final:
            attrs.append("peripheries=2")
        if box.history:
            attrs.append("shape=circle")
        if box.style == "collapsed":
            attrs.append(f'fillcolor="{COLLAPSED_FILL}"')
        elif box.style == "outside":
            attrs += [f'fillcolor="{OUTSIDE_FILL}"', 'style="rounded,filled,dashed"']
        elif box.style == "muted":
            attrs += [f'color="{MUTED}"', 'style="rounded,filled,dashed"']
        if box.highlighted:
            attrs += [f'fillcolor="{HL_FILL}"', f'color="{HL_STROKE}"', "penwidth=2"]
            classes.append("highlighted")
        attrs.append(f"class={q(' '.join(classes))}")
        put(box.parent, f"{q(box.id)} [{', '.join(attrs)}];")
    for arc in scene.arcs:
        put(_arc_container(scene, arc), _label_node(arc))

    def block(container: str | None, pad: str) -> None:
        for text in members.get(container, ()):
            lines.append(pad + text)
        for cluster in scene.clusters.values():
            if cluster.parent != container:
                continue
            lines.append(f"{pad}subgraph {q('cluster_' + cluster.id)} {{")
            style = "rounded,dashed" if (cluster.parallel or cluster.dashed) else "rounded"
            attrs = ['label=""', f"id={q('c-' + cluster.id)}", 'class="composite"']
            if cluster.highlighted:
                attrs += [
                    f'style="{style},filled"',
                    f'fillcolor="{HL_CLUSTER_FILL}"',
                    f'color="{HL_STROKE}"',
                    "penwidth=2",
                ]
            else:
                attrs.append(f'style="{style}"')
            lines.append(f"{pad}    graph [{', '.join(attrs)}];")
            block(cluster.id, pad + "    ")
            lines.append(f"{pad}}}")

    block(None, "    ")
    for arc in scene.arcs:
        lines += _arc_edges(scene, arc, endpoint)
    lines.append("}")
    return "\n".join(lines) + "\n"


def _arc_container(scene: Scene, arc: Arc) -> str | None:
    """The innermost cluster holding every end of ``arc`` (a composite end's own cluster
    excluded: the label goes outside it)."""
    chains = [scene.chain(n) for n in (*arc.sources, arc.target)]
    common: str | None = None
    for level in zip(*chains, strict=False):
        if len(set(level)) != 1:
            break
        common = level[0]
    return common


def _label_node(arc: Arc) -> str:
    return (
        f"{q(arc.key)} [shape=plaintext, margin=\"0.02,0.01\", height=0, width=0, "
        f"id={q(arc.key)}, class=\"arc-label\", label={_lines_label(arc.lines, LABEL_SIZE)}];"
    )


def _arc_edges(scene: Scene, arc: Arc, endpoint: object) -> list[str]:
    assert callable(endpoint)
    style: list[str] = []
    if arc.dashed:
        style.append("style=dashed")
    out: list[str] = []
    for i, source in enumerate(arc.sources):
        attrs = [f"id={q(f'{arc.key}-s{i}')}", 'class="arc"', "arrowhead=none", *style]
        if source in scene.clusters:
            attrs.append(f"ltail={q('cluster_' + source)}")
        if any(line.highlighted and line_from(line, source) for line in arc.lines):
            attrs += [f'color="{HL_EDGE}"', "penwidth=2"]
        out.append(f"    {endpoint(source)} -> {q(arc.key)} [{', '.join(attrs)}];")
    attrs = [f"id={q(f'{arc.key}-t')}", 'class="arc"', *style]
    if arc.target in scene.clusters:
        attrs.append(f"lhead={q('cluster_' + arc.target)}")
    if arc.highlighted:
        attrs += [f'color="{HL_EDGE}"', "penwidth=2"]
    out.append(f"    {q(arc.key)} -> {endpoint(arc.target)} [{', '.join(attrs)}];")
    return out


def line_from(line: Line, source: str) -> bool:
    """Whether ``line`` stands for a transition declared on ``source``."""
    return any(t[0] == source for t in line.triples)


def render_table_dot(name: str, rows: Sequence[tuple[str, str, str]], caption: str) -> str:
    """A table under a view: one row per state, the events it ignores and those it handles
    in place (targetless transitions: the state stays)."""
    from .model import wrap_words

    def cell(text: str, *, head: bool = False) -> str:
        attrs = ' ALIGN="LEFT" BALIGN="LEFT"' + (' BGCOLOR="#eeeeee"' if head else "")
        body = "<BR/>".join(esc(t) for t in text.split("\n")) if text else " "
        return f"<TD{attrs}>{body}</TD>"

    def wrapped(text: str) -> str:
        if not text:
            return ""
        return "\n".join(t.strip() for t in wrap_words("", text.split(", "), 56))

    body = [
        '<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="0" CELLPADDING="3" COLOR="#bbbbbb">',
        f'<TR><TD COLSPAN="3" ALIGN="LEFT">{esc(caption)}</TD></TR>',
        "<TR>" + "".join(cell(h, head=True) for h in ("state", "ignores", "handles in place")) + "</TR>",
    ]
    for state, ignores, handles in rows:
        body.append("<TR>" + cell(state) + cell(wrapped(ignores)) + cell(wrapped(handles)) + "</TR>")
    body.append("</TABLE>")
    return (
        f"digraph {q(name + '-table')} {{\n"
        f'    graph [id="table", class="table"];\n'
        f"    node [shape=plaintext, fontname={q(FONT)}, fontsize={LABEL_SIZE}];\n"
        f'    "table" [id="tbl", class="table", label=<{"".join(body)}>];\n'
        "}\n"
    )
