"""SVG from DOT text with the ``graphviz-pure`` binary (a dot-compatible Graphviz port with
the same output on every platform, acpfsm's ``[diagrams]`` extra), and the choice of layout."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from .dot import FONT, FONT_FALLBACK, LAYOUTS, Layout, render_dot, render_table_dot
from .model import HEADER, DiagramError, xml_comment
from .scene import Scene

__all__ = [
    "GRAPHVIZ_BINARY",
    "INSTALL_HINT",
    "MAX_WIDTH_PT",
    "GraphvizNotFound",
    "choose_layout",
    "find_graphviz",
    "render_scene_svg",
    "render_svg",
    "svg_width",
]

GRAPHVIZ_BINARY = "graphviz-pure"
"""The dot-compatible renderer (PyPI ``graphviz-pure``, acpfsm's ``[diagrams]`` extra)."""

INSTALL_HINT = "pip install 'acpfsm[diagrams]'"
"""How to get the renderer (what the CLI says when it is missing)."""

MAX_WIDTH_PT = 1000.0
"""The widest SVG (in points) that still reads when scaled to a README's width."""

_RENDER_TIMEOUT_S = 60.0
_SVG_SIZE = re.compile(r'<svg width="([0-9.]+)pt" height="([0-9.]+)pt"')


class GraphvizNotFound(DiagramError):
    """The ``graphviz-pure`` binary is not installed."""


def find_graphviz() -> Path:
    """The ``graphviz-pure`` binary: next to the running interpreter (a venv's ``bin/``),
    else on ``PATH``."""
    exe = GRAPHVIZ_BINARY + (".exe" if os.name == "nt" else "")
    beside = Path(sys.executable).parent / exe
    if beside.is_file():
        return beside
    found = shutil.which(GRAPHVIZ_BINARY)
    if found is not None:
        return Path(found)
    raise GraphvizNotFound(
        f"{GRAPHVIZ_BINARY} not found next to {sys.executable} nor on PATH: the SVG diagrams "
        f"need acpfsm's [diagrams] extra, `{INSTALL_HINT}`"
    )


def svg_size(svg: str) -> tuple[float, float]:
    """Width and height of a Graphviz SVG in points."""
    match = _SVG_SIZE.search(svg)
    if match is None:
        raise DiagramError("the renderer's SVG has no size in points")
    return float(match.group(1)), float(match.group(2))


def svg_width(svg: str) -> float:
    """The width of a Graphviz SVG in points."""
    return svg_size(svg)[0]


def render_svg(dot_source: str, *, binary: Path | None = None, header: bool = True) -> str:
    """Render DOT text to SVG with ``graphviz-pure -Tsvg``, without Graphviz's optional
    ``<?xml …?>`` declaration (so that a comment may come first) and with the font fallbacks
    (:data:`~.dot.FONT_FALLBACK`); with ``header`` the first line is the generated-file
    comment."""
    exe = binary if binary is not None else find_graphviz()
    try:
        done = subprocess.run(
            [str(exe), "-Tsvg"],
            input=dot_source.encode(),
            capture_output=True,
            timeout=_RENDER_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise DiagramError(f"{exe} did not finish within {_RENDER_TIMEOUT_S:.0f} s") from exc
    except OSError as exc:
        raise DiagramError(f"cannot run {exe}: {exc}") from exc
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip()
        raise DiagramError(f"{exe} -Tsvg failed (exit {done.returncode}): {detail}")
    svg = done.stdout.decode().replace("\r\n", "\n")
    if svg.startswith("<?xml"):
        svg = svg.split("\n", 1)[1]
    svg = svg.replace(f'font-family="{FONT}"', f'font-family="{FONT_FALLBACK}"')
    if header:
        svg = f"{xml_comment(HEADER)}\n{svg}"
    return svg


def choose_layout(scene: Scene, *, binary: Path | None = None) -> Layout:
    """The first of :data:`~.dot.LAYOUTS` whose drawing of ``scene`` is at most
    :data:`MAX_WIDTH_PT` wide, else the narrowest."""
    exe = binary if binary is not None else find_graphviz()
    widths: list[tuple[float, int]] = []
    for i, layout in enumerate(LAYOUTS):
        width = svg_width(render_svg(render_dot(scene, layout), binary=exe, header=False))
        if width <= MAX_WIDTH_PT:
            return layout
        widths.append((width, i))
    return LAYOUTS[min(widths)[1]]


_GRAPH_GROUP = re.compile(r'<g id="graph"[^>]*transform="([^"]*)"[^>]*>')


def _body(svg: str) -> str:
    """The content of the root ``<svg>`` element."""
    start = svg.index(">", svg.index("<svg")) + 1
    return svg[start : svg.rindex("</svg>")]


def stack_table(svg: str, table_svg: str) -> str:
    """``table_svg`` (a table) appended under ``svg`` (a diagram) in one SVG document."""
    width, height = svg_size(svg)
    t_width, t_height = svg_size(table_svg)
    new_w, new_h = max(width, t_width), height + t_height
    head = svg[: svg.index("<svg")]
    fmt = f"{new_w:g}pt", f"{new_h:g}pt"
    root = (
        f'<svg width="{fmt[0]}" height="{fmt[1]}"\n viewBox="0.00 0.00 {new_w:.2f} {new_h:.2f}" '
        'xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">\n'
    )
    background = (
        f'<polygon fill="white" stroke="none" points="0,0 {new_w:.2f},0 {new_w:.2f},'
        f'{new_h:.2f} 0,{new_h:.2f}"/>\n'
    )
    table_body = _body(table_svg)
    return (
        f"{head}{root}{background}{_body(svg)}\n"
        f'<g class="under" transform="translate(0 {height:.2f})">{table_body}</g>\n</svg>\n'
    )


def render_scene_svg(
    scene: Scene,
    *,
    binary: Path | None = None,
    layout: Layout | None = None,
    header: bool = True,
) -> str:
    """The SVG of ``scene`` (in its :func:`choose_layout` layout unless ``layout`` is given),
    with the scene's table, if any, under it."""
    exe = binary if binary is not None else find_graphviz()
    chosen = layout if layout is not None else choose_layout(scene, binary=exe)
    svg = render_svg(render_dot(scene, chosen), binary=exe, header=header)
    if scene.table:
        caption = "Events that leave the state where it is (targetless transitions):"
        table = render_svg(
            render_table_dot(scene.name, scene.table, caption), binary=exe, header=False
        )
        svg = stack_table(svg, table)
    return svg
