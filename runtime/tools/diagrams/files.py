"""The generated directory (``diagrams/``): what :func:`generate` produces, :func:`write`
writes and :func:`check` compares, byte for byte."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from acpfsm.statecharts import Chart

from .explorer import render_explorer
from .mermaid import render_mermaid
from .model import HEADER, DiagramError
from .render import GraphvizNotFound, find_graphviz, render_scene_svg
from .scene import Scene, full_scene
from .tables import render_readme, render_table
from .views import composite_scene, composites, event_scene, important_events, is_big, overview_scene

__all__ = [
    "Drift",
    "WriteResult",
    "check",
    "chart_views",
    "default_charts",
    "generate",
    "validate",
    "write",
]

GENERATED_SUFFIXES = (".mmd", ".md", ".svg", ".html")
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


@dataclass(frozen=True, slots=True)
class Drift:
    """One generated file that differs from what is on disk."""

    path: Path
    kind: Literal["drifted", "missing", "extra"]

    def __str__(self) -> str:
        return f"{self.kind}: {self.path}"


@dataclass(frozen=True, slots=True)
class WriteResult:
    written: tuple[Path, ...]
    """Files created or changed (unchanged files are not rewritten)."""
    unchanged: tuple[Path, ...]
    removed: tuple[Path, ...]
    """Stale generated files (they carry :data:`HEADER`) of charts that no longer exist."""
    svg_skipped: str = ""
    """Why no SVG was written ("" when they were): the renderer is not installed."""


def default_charts() -> tuple[type[Chart], ...]:
    """``acpfsm.statecharts.ALL_CHARTS`` (empty until the charts are declared)."""
    from acpfsm import statecharts

    charts: tuple[type[Chart], ...] = tuple(getattr(statecharts, "ALL_CHARTS", ()))
    return charts


def validate(charts: Sequence[type[Chart]]) -> None:
    seen: dict[str, type[Chart]] = {}
    for chart in charts:
        name = chart.chart_name
        if not _SAFE_NAME.fullmatch(name) or name.lower() == "readme":
            raise DiagramError(f"{chart.__qualname__}.chart_name {name!r} is not a file name")
        if name in seen:
            raise DiagramError(
                f"chart_name {name!r} is used by both {seen[name].__qualname__} "
                f"and {chart.__qualname__}"
            )
        seen[name] = chart


def chart_views(chart: type[Chart]) -> list[tuple[str, str, Scene]]:
    """``(file name, what it shows, scene)`` of every view of a big chart (none for a small
    one): the overview, one per composite state, one per important event."""
    if not is_big(chart):
        return []
    n = chart.chart_name
    out = [
        (
            f"{n}.overview.svg",
            "overview: composite states off the initial path collapsed, what each state "
            "ignores or handles in place in a table",
            overview_scene(chart),
        )
    ]
    for state in composites(chart):
        out.append(
            (f"{n}.state.{state}.svg", f"inside `{state}` and its boundary transitions",
             composite_scene(chart, state))
        )  # fmt: skip
    for event in important_events(chart):
        out.append(
            (f"{n}.event.{event}.svg", f"where `{event}` goes from every state",
             event_scene(chart, event))
        )  # fmt: skip
    return out


def generate(
    charts: Sequence[type[Chart]] | None = None,
    *,
    binary: Path | None = None,
    svg: bool = True,
) -> dict[str, bytes]:
    """The content of every generated text file, by file name (README.md last); with
    ``svg=False`` the drawings (SVG, explorer) are left out (no renderer is needed)."""
    chosen = tuple(default_charts() if charts is None else charts)
    validate(chosen)
    exe = (binary if binary is not None else find_graphviz()) if svg else None
    files: dict[str, bytes] = {}
    bodies: dict[str, str] = {}
    listed: dict[str, list[tuple[str, str]]] = {}
    for chart in chosen:
        n = chart.chart_name
        bodies[n] = render_mermaid(chart, header=False)
        files[f"{n}.mmd"] = f"%% {HEADER}\n{bodies[n]}".encode()
        files[f"{n}.md"] = render_table(chart).encode()
        views = chart_views(chart)
        listed[n] = [(name, what) for name, what, _ in views]
        if exe is not None:
            files[f"{n}.svg"] = render_scene_svg(full_scene(chart), binary=exe).encode()
            explorer = render_explorer(chart, binary=exe)
            marked = explorer.replace("<!DOCTYPE html>\n", f"<!DOCTYPE html>\n<!-- {HEADER} -->\n", 1)
            files[f"{n}.html"] = marked.encode()
            for name, _, scene in views:
                files[name] = render_scene_svg(scene, binary=exe).encode()
    from .screenshots import screenshot_plan

    shots = [(shot.name, shot.what) for shot in screenshot_plan(chosen)]
    files["README.md"] = render_readme(chosen, bodies, listed, shots).encode()
    return files


def _is_generated(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            head = f.read(512)
    except OSError:
        return False
    return HEADER.encode() in head


def _candidates(out_dir: Path) -> list[Path]:
    if not out_dir.is_dir():
        return []
    return sorted(p for p in out_dir.iterdir() if p.is_file() and p.suffix in GENERATED_SUFFIXES)


def check(
    out_dir: Path | str,
    charts: Sequence[type[Chart]] | None = None,
    *,
    binary: Path | None = None,
) -> list[Drift]:
    """Compare what :func:`write` would write with ``out_dir``; an empty list means no drift.

    An *extra* file is any ``.mmd``/``.md``/``.svg``/``.html`` in ``out_dir`` that would not
    be written. (The screenshots are checked in a browser: :mod:`.screenshots`.)
    """
    out = Path(out_dir)
    expected = generate(charts, binary=binary)
    drifts: list[Drift] = []
    for name in sorted(expected):
        path = out / name
        if not path.is_file():
            drifts.append(Drift(path, "missing"))
        elif path.read_bytes() != expected[name]:
            drifts.append(Drift(path, "drifted"))
    drifts += [Drift(p, "extra") for p in _candidates(out) if p.name not in expected]
    return drifts


def write(
    out_dir: Path | str,
    charts: Sequence[type[Chart]] | None = None,
    *,
    binary: Path | None = None,
) -> WriteResult:
    """Write every generated file into ``out_dir`` (created if needed), rewrite only files whose
    bytes changed, and remove stale generated files (those carrying :data:`HEADER`) that no
    chart produces any more. Files without the header are left alone (``check`` reports them).

    Without the ``graphviz-pure`` renderer (acpfsm's ``[diagrams]`` extra) the Mermaid files,
    the tables and the index are still written, the drawings already there are left as they
    are, and :attr:`WriteResult.svg_skipped` says why."""
    out = Path(out_dir)
    skipped = ""
    try:
        exe = binary if binary is not None else find_graphviz()
    except GraphvizNotFound as exc:
        skipped = str(exc)
        files = generate(charts, svg=False)
    else:
        files = generate(charts, binary=exe)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    unchanged: list[Path] = []
    for name, content in files.items():
        path = out / name
        if path.is_file() and path.read_bytes() == content:
            unchanged.append(path)
            continue
        path.write_bytes(content)
        written.append(path)
    removed: list[Path] = []
    for path in _candidates(out):
        if skipped and path.suffix in (".svg", ".html"):
            continue
        if path.name not in files and _is_generated(path):
            path.unlink()
            removed.append(path)
    return WriteResult(tuple(written), tuple(unchanged), tuple(removed), skipped)
