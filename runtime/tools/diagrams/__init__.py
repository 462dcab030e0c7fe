"""Review diagrams generated from the chart declarations.

Theory of operation
-------------------
The charts in ``acpfsm.statecharts`` are the single source of truth; the files in ``diagrams/``
are derived from them and committed so that a reviewer sees every lifecycle change as a diagram
diff. For every chart class ``acpfsm diagrams`` writes (:mod:`.files`):

* ``<chart>.mmd``: a Mermaid ``stateDiagram-v2`` (rendered inline by GitHub; :mod:`.mermaid`);
* ``<chart>.md``: the transition table (source | event | target | guard | effects), one row
  per declared ``(source, event, target)`` in declaration order, then the entry effects
  (:mod:`.tables`);
* ``<chart>.svg``: the whole chart, drawn by the ``graphviz-pure`` binary (a dot-compatible
  Graphviz port with the same output on every platform, acpfsm's ``[diagrams]`` extra) from
  DOT text generated here (:mod:`.scene`, :mod:`.dot`, :mod:`.render`);
* for a big chart (:func:`.views.is_big`), views: ``<chart>.overview.svg``,
  ``<chart>.state.<composite>.svg`` and ``<chart>.event.<event>.svg`` (:mod:`.views`);
* ``<chart>.html``: the explorer, one self-contained offline page (:mod:`.explorer`);
* ``README.md``: an index of all charts with each Mermaid diagram inline;
* screenshots (``.png``) of the biggest chart's overview, one view and explorer, taken by
  headless Chromium (:mod:`.screenshots`).

Legible by construction, and measured. Every label of a drawing is a node of its own (an
arc goes from its sources through its label to its target), so Graphviz never puts a label
over a node or another label; text is laid out in DejaVu Sans with Graphviz's widths for it
(:mod:`.dot`). :mod:`.legibility` loads every drawing in headless Chromium and measures the
rendered boxes: label over label, label over node, text outside its box, edges through boxes;
``acpfsm diagrams --check --browser`` (in ``make test``) fails naming the drawing and both.

Everything is generated from the class declarations in declaration order, never from sets or
dicts keyed by identity, so two runs give identical bytes and ``check`` is a plain byte
comparison (the screenshots are compared within a tolerance, in the browser). Every generated
text file carries :data:`HEADER` in that format's comment syntax (the SVG drops Graphviz's
optional ``<?xml …?>`` declaration so the header can come first).

The drawings of a run (``acpfsm diagrams --trace``, :mod:`.run`; ``acpfsm report``) are the
same drawings with the states an execution was in filled and the transitions it fired in red,
and an explorer per chart whose timeline steps through the run.
"""

from __future__ import annotations

from .dot import FONT, LAYOUTS, Layout, render_dot
from .explorer import render_explorer
from .files import Drift, WriteResult, chart_views, check, default_charts, generate, write
from .mermaid import render_mermaid
from .model import (
    HEADER,
    DiagramError,
    Edge,
    edges,
    entry_effects,
    one_line,
    transition_effects,
    transition_rows,
    xml_comment,
    xml_safe,
)
from .render import (
    GRAPHVIZ_BINARY,
    INSTALL_HINT,
    MAX_WIDTH_PT,
    GraphvizNotFound,
    choose_layout,
    find_graphviz,
    render_scene_svg,
    render_svg,
    svg_width,
)
from .run import RunHighlights, render_run_svg, run_highlights, write_run
from .scene import full_scene
from .tables import render_table

__all__ = [
    "FONT",
    "GRAPHVIZ_BINARY",
    "HEADER",
    "INSTALL_HINT",
    "LAYOUTS",
    "MAX_WIDTH_PT",
    "DiagramError",
    "Drift",
    "Edge",
    "GraphvizNotFound",
    "Layout",
    "RunHighlights",
    "WriteResult",
    "chart_views",
    "check",
    "choose_layout",
    "default_charts",
    "edges",
    "entry_effects",
    "find_graphviz",
    "full_scene",
    "generate",
    "one_line",
    "render_dot",
    "render_explorer",
    "render_mermaid",
    "render_run_svg",
    "render_scene_svg",
    "render_svg",
    "render_table",
    "run_highlights",
    "svg_width",
    "transition_effects",
    "transition_rows",
    "write",
    "write_run",
    "xml_comment",
    "xml_safe",
]

