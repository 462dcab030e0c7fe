"""Screenshots committed beside the drawings, so that a reviewer sees in the repository what a
browser shows: the overview of the biggest chart, one of its views, and its explorer with a
state selected. Taken by headless Chromium (:mod:`.browser`) at a device scale of 1.

Pixels are not promised to be identical across Chromium or FreeType versions (anti-aliasing),
so a screenshot is compared structurally, in the browser: the same size in pixels (the size
is the layout's), and at most :data:`TOLERANCE` of the pixels differing by more than
:data:`CHANNEL_DELTA` in a colour channel. :func:`write_screenshots` rewrites a PNG only when
it is out of tolerance, so regenerating on another machine leaves the committed one alone."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acpfsm.statecharts import Chart

from .browser import new_page, open_browser
from .files import Drift, chart_views
from .model import edges

if TYPE_CHECKING:
    from playwright.sync_api import Browser

__all__ = ["CHANNEL_DELTA", "TOLERANCE", "Shot", "check_screenshots", "compare_png",
           "screenshot_plan", "take", "write_screenshots"]  # fmt: skip

TOLERANCE = 0.005
CHANNEL_DELTA = 64


@dataclass(frozen=True, slots=True)
class Shot:
    name: str
    """The PNG's file name."""
    what: str
    page: str
    """The generated file it shows."""
    select: str = ""
    """A state to click first (the explorer)."""


def _busiest_state(chart: type[Chart]) -> str:
    counts: dict[str, int] = {}
    for edge in edges(chart):
        if edge.targetless:
            continue
        for end in {edge.source, edge.target}:
            counts[end] = counts.get(end, 0) + len(edge.events)
    return max(counts, key=lambda s: counts[s]) if counts else ""


def screenshot_plan(charts: Sequence[type[Chart]]) -> list[Shot]:
    """The screenshots: of the chart with the most declared transitions, its overview (its
    whole drawing if it is small), its first view after the overview, and its explorer with
    its busiest state selected."""
    if not charts:
        return []
    chart = max(charts, key=lambda c: (sum(len(e.events) for e in edges(c)), c.chart_name))
    n = chart.chart_name
    views = [name for name, _, _ in chart_views(chart)]
    shots = []
    if views:
        shots.append(Shot(f"{n}.overview.png", f"the overview of {n}", views[0]))
        if len(views) > 1:
            first = views[1].removesuffix(".svg")
            shots.append(Shot(f"{first}.png", f"a view of {n} ({views[1]})", views[1]))
    else:
        shots.append(Shot(f"{n}.png", f"the drawing of {n}", f"{n}.svg"))
    state = _busiest_state(chart)
    shots.append(
        Shot(f"{n}.explorer.png", f"the explorer of {n}, state {state} selected", f"{n}.html",
             select=state)
    )  # fmt: skip
    return shots


def take(browser: Browser, out_dir: Path, shot: Shot) -> bytes:
    """The PNG of ``shot`` (the page loaded from ``out_dir``)."""
    page = new_page(browser, 1400, 900)
    try:
        if shot.page.endswith(".html"):
            page.goto((out_dir / shot.page).resolve().as_uri())
            if shot.select:
                page.click(f"#s-{shot.select}, #t-{shot.select}")
            png: bytes = page.screenshot(type="png")
        else:  # the drawing alone, at its own size
            svg = (out_dir / shot.page).read_text(encoding="utf-8")
            body = svg[svg.index("<svg") :]
            page.set_content(f'<!DOCTYPE html><html><body style="margin:0">{body}</body></html>')
            png = page.locator("svg").first.screenshot(type="png")
    finally:
        page.context.close()
    return png


_COMPARE_JS = """
async ([a, b, delta]) => {
  const load = (src) => new Promise((ok, bad) => { const i = new Image();
    i.onload = () => ok(i); i.onerror = bad; i.src = src; });
  const [x, y] = await Promise.all([load(a), load(b)]);
  if (x.width !== y.width || x.height !== y.height)
    return [x.width, x.height, y.width, y.height, 1];
  const pixels = (img) => { const c = document.createElement('canvas');
    c.width = img.width; c.height = img.height; const g = c.getContext('2d');
    g.drawImage(img, 0, 0); return g.getImageData(0, 0, img.width, img.height).data; };
  const p = pixels(x), q = pixels(y);
  let off = 0;
  for (let i = 0; i < p.length; i += 4) {
    if (Math.abs(p[i] - q[i]) > delta || Math.abs(p[i+1] - q[i+1]) > delta ||
        Math.abs(p[i+2] - q[i+2]) > delta) off++;
  }
  return [x.width, x.height, y.width, y.height, off / (p.length / 4)];
}
"""


def compare_png(browser: Browser, a: bytes, b: bytes) -> tuple[bool, str]:
    """Whether two PNGs match within the tolerance, and how they differ."""
    urls = [f"data:image/png;base64,{base64.b64encode(x).decode()}" for x in (a, b)]
    page = new_page(browser, 200, 200)
    try:
        w1, h1, w2, h2, off = page.evaluate(_COMPARE_JS, [*urls, CHANNEL_DELTA])
    finally:
        page.context.close()
    if (w1, h1) != (w2, h2):
        return False, f"{w1}x{h1} px, expected {w2}x{h2} px"
    share: Any = off
    return float(share) <= TOLERANCE, f"{float(share):.2%} of the pixels differ"


def write_screenshots(
    out_dir: Path, charts: Sequence[type[Chart]], browser: Browser | None = None
) -> tuple[list[Path], list[Path]]:
    """Take every screenshot; write those missing or out of tolerance. Returns ``(written,
    unchanged)``."""
    if browser is None:
        with open_browser() as opened:
            return write_screenshots(out_dir, charts, opened)
    written, unchanged = [], []
    for shot in screenshot_plan(charts):
        png = take(browser, out_dir, shot)
        path = out_dir / shot.name
        if path.is_file() and compare_png(browser, png, path.read_bytes())[0]:
            unchanged.append(path)
            continue
        path.write_bytes(png)
        written.append(path)
    for path in sorted(out_dir.glob("*.png")):
        if path.name not in {s.name for s in screenshot_plan(charts)}:
            path.unlink()
    return written, unchanged


def check_screenshots(
    out_dir: Path, charts: Sequence[type[Chart]], browser: Browser | None = None
) -> list[tuple[Drift, str]]:
    """Every screenshot missing, out of tolerance (with how) or extra (a ``.png`` no shot
    names)."""
    if browser is None:
        with open_browser() as opened:
            return check_screenshots(out_dir, charts, opened)
    out: list[tuple[Drift, str]] = []
    plan = screenshot_plan(charts)
    for shot in plan:
        path = out_dir / shot.name
        if not path.is_file():
            out.append((Drift(path, "missing"), shot.what))
            continue
        same, how = compare_png(browser, take(browser, out_dir, shot), path.read_bytes())
        if not same:
            out.append((Drift(path, "drifted"), how))
    names = {s.name for s in plan}
    out += [(Drift(p, "extra"), "no screenshot of that name") for p in sorted(out_dir.glob("*.png"))
            if p.name not in names]  # fmt: skip
    return out
