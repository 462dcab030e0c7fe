"""The legibility check: every drawing loaded in headless Chromium and measured from the
boxes the browser rendered.

For every Graphviz drawing in a page (a committed ``.svg``, or each drawing inlined in a run
report) it reports, naming the drawing and the two things involved:

* ``label/label``: two labels overlap (an arc's label lines, a composite's notes, a
  composite's or the drawing's title);
* ``label/node``: a label overlaps a state box;
* ``text outside``: a text of a state box reaches outside the box (a composite's title
  outside its frame);
* ``edge through``: an edge passes through a state box other than its own ends, or through a
  label that is not its own.

An explorer page (:mod:`.explorer`) is measured again in each of its highlights (the
classes its script sets when a state is clicked, an event chosen, a search typed or the
timeline stepped: :data:`HIGHLIGHTS`), every element at once: a highlight that widens a text
(a bold face) spills it out of a box laid out for the regular one.

Boxes are the rendered bounding boxes (``getBoundingClientRect``), a state's shape shrunk by
:data:`SLACK_PX` for its rounded corners and stroke; an edge is sampled every
:data:`STEP_PX` along its path. Before measuring, :func:`check_pages` asks Chromium which font
it drew the text with (:func:`~.browser.drawing_font`): the boxes were sized for DejaVu Sans.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .browser import drawing_font, new_page, open_browser
from .dot import FONT

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

__all__ = ["Finding", "check_files", "check_pages", "measure_page"]

SLACK_PX = 2.0
STEP_PX = 2.0

HIGHLIGHTS: tuple[tuple[str, str, str], ...] = (
    ("hl", "hl", "selected"),
    ("step", "step", "current"),
    ("match", "match", "match"),
)
"""The explorer's highlights: ``(name, class of a text and an edge, class of a state)``."""

MARKS: frozenset[str] = frozenset({"end"})
"""Classes the explorer sets on a state that only keep it undimmed (no change of shape or
text): cleared with the highlights, not measured on their own."""

HIGHLIGHT_CLASSES: frozenset[str] = frozenset(c for _, t, s in HIGHLIGHTS for c in (t, s)) | MARKS
"""Every class the explorer sets on a text, an edge or a state to highlight it."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One legibility fault of one drawing."""

    where: str
    """The file, and the drawing in it (its Graphviz title)."""
    kind: str
    first: str
    second: str

    def __str__(self) -> str:
        return f"{self.where}: {self.kind}: {self.first!r} and {self.second!r}"


_MEASURE_JS = r"""
([slack, step]) => {
  const out = [];
  const rect = (el) => { const r = el.getBoundingClientRect();
    return {l: r.left, t: r.top, r: r.right, b: r.bottom}; };
  const union = (rs) => rs.reduce((a, r) => a ? {l: Math.min(a.l, r.l), t: Math.min(a.t, r.t),
    r: Math.max(a.r, r.r), b: Math.max(a.b, r.b)} : r, null);
  const shrink = (r, d) => ({l: r.l + d, t: r.t + d, r: r.r - d, b: r.b - d});
  const meets = (a, b) => Math.min(a.r, b.r) - Math.max(a.l, b.l) > 0.5 &&
    Math.min(a.b, b.b) - Math.max(a.t, b.t) > 0.5;
  const inside = (p, r) => p.x > r.l && p.x < r.r && p.y > r.t && p.y < r.b;
  const within = (a, b) => a.l >= b.l - 0.5 && a.r <= b.r + 0.5 && a.t >= b.t - 0.5 &&
    a.b <= b.b + 0.5;
  const name = (g) => { const t = g.querySelector(':scope > title');
    return t ? t.textContent : g.id; };
  const texts = (g) => [...g.querySelectorAll('text')].filter(t => t.textContent.trim());
  const words = (g) => texts(g).map(t => t.textContent.trim()).join(' ').slice(0, 60);
  for (const svg of document.querySelectorAll('svg')) {
    const graph = svg.querySelector('g.graph');
    if (!graph) continue;
    const where = name(graph);
    const states = [], labels = [];
    const plain = ['arc-label', 'notes', 'title', 'table', 'initial'];
    for (const g of svg.querySelectorAll('g.node')) {
      if (plain.some(c => g.classList.contains(c))) continue;
      const shapes = [...g.querySelectorAll(':scope > path, :scope > polygon, :scope > ellipse')];
      if (!shapes.length) continue;
      const box = union(shapes.map(rect));
      states.push({name: name(g), box: shrink(box, slack)});
      for (const t of texts(g)) {
        if (!within(rect(t), box)) out.push([where, 'text outside', t.textContent.trim(), name(g)]);
      }
    }
    for (const g of svg.querySelectorAll('g.node.arc-label, g.node.notes, g.node.title')) {
      const ts = texts(g); if (!ts.length) continue;
      labels.push({name: words(g), node: name(g), box: union(ts.map(rect))});
    }
    for (const g of svg.querySelectorAll('g.edge')) {  // Graphviz's own edge labels
      const ts = [...g.querySelectorAll(':scope > text')]; if (!ts.length) continue;
      labels.push({name: words(g), node: '', edge: g, box: union(ts.map(rect))});
    }
    for (const g of svg.querySelectorAll('g.cluster')) {
      const frame = g.querySelector(':scope > path, :scope > polygon');
      for (const t of [...g.querySelectorAll(':scope > text')]) {
        labels.push({name: 'composite ' + t.textContent, node: '', box: rect(t)});
        if (frame && !within(rect(t), rect(frame)))
          out.push([where, 'text outside', t.textContent, 'its frame']);
      }
    }
    for (const t of graph.querySelectorAll(':scope > text')) {
      labels.push({name: 'title ' + t.textContent, node: '', box: rect(t)});
    }
    for (let i = 0; i < labels.length; i++) {
      for (let j = i + 1; j < labels.length; j++) {
        if (meets(labels[i].box, labels[j].box))
          out.push([where, 'label/label', labels[i].name, labels[j].name]);
      }
      for (const s of states) {
        if (meets(labels[i].box, s.box)) out.push([where, 'label/node', labels[i].name, s.name]);
      }
    }
    for (const g of svg.querySelectorAll('g.edge')) {
      const path = g.querySelector('path'); if (!path) continue;
      const ends = name(g).split('->');
      const m = path.getScreenCTM(); const total = path.getTotalLength();
      const pts = [];
      for (let d = 0; d <= total; d += step) {
        const p = path.getPointAtLength(d);
        pts.push(new DOMPoint(p.x, p.y).matrixTransform(m));
      }
      const label = ends.find(e => /^a[0-9]+$/.test(e));
      const what = label ? words(svg.getElementById(label) || g) : name(g);
      for (const s of states) {
        if (ends.includes(s.name)) continue;
        if (pts.some(p => inside(p, s.box))) out.push([where, 'edge through', what, s.name]);
      }
      for (const l of labels) {
        if ((l.node && ends.includes(l.node)) || l.edge === g) continue;
        if (pts.some(p => inside(p, shrink(l.box, 1)))) out.push([where, 'edge through', what, l.name]);
      }
    }
  }
  return out;
}
"""


_HIGHLIGHT_JS = r"""
([text, state, highlights]) => {
  const svg = document.querySelector('#drawing svg');
  if (!svg || !document.getElementById('data')) return false;
  const every = (sel, cls) => { for (const e of svg.querySelectorAll(sel)) {
    for (const c of [...e.classList]) if (c !== cls && highlights.includes(c))
      e.classList.remove(c);
    if (cls) e.classList.add(cls); } };
  every('text', text); every('g.edge', text); every('g.state, g.cluster', state);
  if (text) svg.classList.add('dim'); else svg.classList.remove('dim');
  return true;
}
"""


def measure_page(page: Page, url: str, where: str) -> list[Finding]:
    """The findings of every drawing at ``url`` (loaded in ``page``); an explorer's drawing
    also in each of its :data:`HIGHLIGHTS`."""
    page.goto(url)
    raw: Any = page.evaluate(_MEASURE_JS, [SLACK_PX, STEP_PX])
    out = [Finding(f"{where} ({drawing})", kind, str(a), str(b)) for drawing, kind, a, b in raw]
    for name, text, state in HIGHLIGHTS:
        if not page.evaluate(_HIGHLIGHT_JS, [text, state, sorted(HIGHLIGHT_CLASSES)]):
            break
        raw = page.evaluate(_MEASURE_JS, [SLACK_PX, STEP_PX])
        out += [Finding(f"{where} ({drawing}, highlighted: {name})", kind, str(a), str(b))
                for drawing, kind, a, b in raw]  # fmt: skip
    return out


def check_pages(urls: Sequence[tuple[str, str]], browser: Browser | None = None) -> list[Finding]:
    """Measure every ``(url, name)`` in one page; text not drawn in DejaVu Sans is a finding
    of its own (the boxes were sized for it)."""
    if browser is None:
        with open_browser() as opened:
            return check_pages(urls, opened)
    out: list[Finding] = []
    page = new_page(browser, 1400, 1000)
    try:
        for n, (url, where) in enumerate(urls):
            out += measure_page(page, url, where)
            font = drawing_font(page) if n == 0 else FONT
            if font != FONT:
                out.append(Finding(where, "font", font, f"{FONT} (install fonts-dejavu-core)"))
    finally:
        page.context.close()
    return out


def check_files(paths: Iterable[Path], browser: Browser | None = None) -> list[Finding]:
    """:func:`check_pages` of local files (SVG or HTML)."""
    return check_pages([(p.resolve().as_uri(), p.name) for p in paths], browser)
