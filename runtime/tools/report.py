"""``acpfsm report``: one self-contained HTML page per execution of a recorded trace.

Theory of operation
-------------------
A reviewer who has a trace (``Runtime(trace_path=...)``, or the one ``acpfsm demo`` writes)
wants to see what one execution did without reading JSONL. :func:`write_report` writes, for
every execution of the trace (or the one chosen), ``<execution>.html`` holding:

* check-trace's verdict on the trace (:mod:`acpfsm.tools.check_trace`), with the
  violations of this execution listed;
* every chart drawn with the states the execution was in filled and the transitions it fired
  in red (:func:`acpfsm.tools.diagrams.run_highlights` and
  :func:`~acpfsm.tools.diagrams.render_chart_svg`, the drawing of ``acpfsm diagrams
  --trace``), each followed by the timeline of that chart's transitions and a link to the
  chart's explorer (``<page>.<chart>.html``, :mod:`acpfsm.tools.diagrams.explorer`: the one
  page with a script, which steps through the run);
* the timeline of all the execution's events in firing order: one lane per chart instance,
  then a table.

The page is self-contained: inline SVG and CSS, no script, and a Content-Security-Policy
that forbids fetching anything. It is also well-formed XML (polyglot XHTML), so Python's XML
parser reads it. Everything that comes from the trace (ids, chart, event and state names,
the trace's path) is escaped as text: a hostile trace cannot inject markup. The drawings
themselves are made from the chart declarations; the trace only chooses which of their
states and transitions are highlighted. Without the ``graphviz-pure`` renderer (acpfsm's
``[diagrams]`` extra) each chart is shown as its Mermaid source and the page says so.

``write_report`` also writes ``index.html``, a list of the pages.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from acpfsm.adapters.errors import AcpfsmError
from acpfsm.runtime.trace import TraceRecord
from acpfsm.statecharts._base import Chart

from .check_trace import CheckResult, TraceFormatError, Violation, check_records, read_trace
from .diagrams import (
    INSTALL_HINT,
    DiagramError,
    GraphvizNotFound,
    default_charts,
    find_graphviz,
    render_mermaid,
    render_run_svg,
    run_highlights,
    transition_rows,
    xml_safe,
)
from .diagrams.run import write_explorer

__all__ = [
    "DESCRIPTION",
    "ExecutionChoiceError",
    "Report",
    "add_arguments",
    "choose_execution",
    "execution_ids",
    "page_name",
    "render_page",
    "run",
    "write_report",
]

DESCRIPTION = (
    "Write one self-contained HTML page per execution of a recorded trace: every chart with "
    "the states and transitions the run took highlighted, the timeline of each chart's "
    "transitions and of all events, and check-trace's verdict."
)

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_SVG_START = re.compile(r"<svg\b")
_SVG_ID = re.compile(r'\bid="')

_CSS = """
body { font-family: Helvetica, Arial, sans-serif; margin: 1.5em auto; max-width: 1100px;
  padding: 0 1em; color: #222; background: #fff; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 2em; border-bottom: 1px solid #ccc; }
code { font-family: monospace; background: #f3f3f3; padding: 0 .2em; overflow-wrap: anywhere; }
.verdict { padding: .5em .8em; border-radius: 4px; }
.verdict.ok { background: #e3f4e3; border: 1px solid #5a9e5a; }
.verdict.bad { background: #fbe3e3; border: 1px solid #b04040; }
.chart { overflow-x: auto; margin: .5em 0; }
.chart svg { max-width: 100%; height: auto; }
table { border-collapse: collapse; font-size: .85em; margin: .5em 0; }
th, td { border: 1px solid #ccc; padding: .15em .5em; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.violation td { background: #fbe3e3; }
details { margin: .3em 0; }
pre { background: #f6f6f6; padding: .5em; overflow-x: auto; }
.muted { color: #666; }
"""

_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


class ExecutionChoiceError(AcpfsmError):
    """The execution asked for is not in the trace, or is ambiguous (exit status 2)."""


def execution_ids(records: Sequence[TraceRecord]) -> list[str]:
    """The executions of a trace, in order of first appearance."""
    return list(dict.fromkeys(r.execution_id for r in records))


def choose_execution(ids: Sequence[str], wanted: str) -> str:
    """The execution ``wanted`` names: an exact id, else a unique prefix."""
    matches = [i for i in ids if i == wanted] or [i for i in ids if i.startswith(wanted)]
    if len(matches) != 1:
        what = "no" if not matches else "more than one"
        raise ExecutionChoiceError(f"{what} execution {wanted!r} in the trace")
    return matches[0]


def page_name(execution_id: str) -> str:
    """A file name for ``execution_id``'s page: the id itself when it is made of letters,
    digits, ``_``, ``.`` and ``-`` (a UUID is), else a cleaned prefix and a hash of it."""
    clean = _UNSAFE.sub("_", execution_id)[:64]
    if clean != execution_id or not clean or clean.startswith(".") or clean == "index":
        digest = hashlib.sha256(execution_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        clean = f"{clean.strip('.')[:40]}-{digest}".lstrip("-")
    return f"{clean}.html"


def _t(text: object) -> str:
    """Any text as inert, XML-valid HTML text (and attribute value)."""
    return html.escape(xml_safe(str(text)), quote=True)


def _inline_svg(svg: str, prefix: str) -> str:
    """Graphviz's SVG without its prolog (doctype, comments before the root), its ids
    prefixed so that several drawings on one page keep distinct ids."""
    match = _SVG_START.search(svg)
    body = svg[match.start() :] if match else svg
    return _SVG_ID.sub(f'id="{prefix}-', body)


@dataclass(frozen=True, slots=True)
class Report:
    pages: tuple[Path, ...]
    """One page per execution, in trace order."""
    index: Path
    verdict: CheckResult
    svg_skipped: str = ""
    """Why the charts are shown as Mermaid source ("" when they are drawn)."""
    explorers: tuple[Path, ...] = ()
    """The explorer of every chart an execution fired transitions in (with its timeline)."""


def explorer_name(page: str, chart: str) -> str:
    """The file of the explorer of ``chart`` beside the page ``page`` of an execution."""
    return f"{page.removesuffix('.html')}.{chart}.html"


def _write_explorers(
    out: Path, records: Sequence[TraceRecord], execution_id: str, source: str, exe: Path
) -> list[Path]:
    written: list[Path] = []
    charts = {c.chart_name: c for c in default_charts()}
    for hl in run_highlights(records, execution_id, tuple(charts.values())):
        if not hl.records:
            continue
        path = out / explorer_name(page_name(execution_id), hl.chart)
        write_explorer(path, charts[hl.chart], records, execution_id, hl, binary=exe,
                       source=source)  # fmt: skip
        written.append(path)
    return written


def _fmt_time(seconds: float) -> str:
    return f"{seconds:.3f}"


def _instance_label(rec: TraceRecord) -> str:
    label = rec.chart
    if rec.generation:
        label += f" #{rec.generation}"
    if rec.instance:
        label += f" ({rec.instance})"
    return label


def _violations_by_seq(violations: Sequence[Violation]) -> set[int]:
    return {v.seq for v in violations if v.seq}


def _verdict_html(result: CheckResult, mine: Sequence[Violation], partial: bool) -> list[str]:
    others = len(result.violations) - len(mine)
    mode = " (--partial)" if partial else ""
    if result.ok:
        text = (
            f"check-trace{mode}: OK, no violations in {result.records} records of "
            f"{result.executions} execution(s)."
        )
        return [f'<p class="verdict ok" id="verdict">{_t(text)}</p>']
    text = (
        f"check-trace{mode}: {len(mine)} violation(s) in this execution"
        + (f", {others} in other executions" if others else "")
        + f" ({result.records} records, {result.executions} execution(s))."
    )
    out = [f'<p class="verdict bad" id="verdict">{_t(text)}</p>']
    if mine:
        out += [
            "<table>",
            "<tr><th>line</th><th>seq</th><th>kind</th><th>what</th></tr>",
            *(
                f'<tr><td class="num">{v.line}</td><td class="num">{v.seq}</td>'
                f"<td>{_t(v.kind)}</td><td>{_t(v.message)}</td></tr>"
                for v in mine
            ),
            "</table>",
        ]
    return out


def _records_table(records: Sequence[TraceRecord], t0: float, bad: set[int]) -> list[str]:
    rows = [
        "<table>",
        ("<tr><th>seq</th><th>t (s)</th><th>chart</th><th>event</th><th>source → target</th></tr>"),
    ]
    for rec in records:
        css = ' class="violation"' if rec.seq in bad else ""
        arrow = "↺" if rec.source == rec.target else "→"
        rows.append(
            f'<tr{css}><td class="num">{rec.seq}</td>'
            f'<td class="num">{_fmt_time(rec.time - t0)}</td>'
            f"<td>{_t(_instance_label(rec))}</td><td><code>{_t(rec.event)}</code></td>"
            f"<td><code>{_t(rec.source)}</code> {arrow} <code>{_t(rec.target)}</code></td></tr>"
        )
    rows.append("</table>")
    return rows


def _lanes_svg(records: Sequence[TraceRecord], bad: set[int]) -> list[str]:
    """The events in firing order, one lane per chart instance (hover a dot for the record)."""
    lanes = list(dict.fromkeys((r.chart, r.generation, r.instance) for r in records))
    if not records:
        return []
    left, right, lane_h, top = 170, 980, 18, 10
    width = right + 10
    height = top * 2 + lane_h * len(lanes)
    step = (right - left) / max(len(records) - 1, 1)
    out = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" class="lanes" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" role="img">'
        ),
    ]
    row = {lane: i for i, lane in enumerate(lanes)}
    for i, (chart, generation, instance) in enumerate(lanes):
        y = top + lane_h * i + lane_h / 2
        name = (
            chart
            + (f" #{generation}" if generation else "")
            + (f" ({instance})" if instance else "")
        )
        out.append(
            f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end" font-size="11" '
            f'font-family="Helvetica, Arial, sans-serif">{_t(name[:28])}</text>'
        )
        out.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#ddd" '
            f'stroke-width="1"/>'
        )
    for i, rec in enumerate(records):
        x = left + step * i
        y = top + lane_h * row[(rec.chart, rec.generation, rec.instance)] + lane_h / 2
        colour = "#b04040" if rec.seq in bad else "#3a6ea5"
        tip = f"seq {rec.seq}: {rec.event}: {rec.source} → {rec.target}"
        out.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{colour}">'
            f"<title>{_t(tip)}</title></circle>"
        )
    out.append("</svg>")
    return out


def render_page(
    records: Sequence[TraceRecord],
    execution_id: str,
    verdict: CheckResult,
    *,
    source: str = "",
    partial: bool = False,
    charts: Sequence[type[Chart]] | None = None,
    binary: Path | None = None,
) -> str:
    """The HTML page of ``execution_id`` (``records`` may hold other executions too).
    ``binary`` is the graphviz-pure renderer; without one the charts are shown as Mermaid
    source."""
    chosen = tuple(default_charts() if charts is None else charts)
    by_name = {c.chart_name: c for c in chosen}
    mine = [r for r in records if r.execution_id == execution_id]
    t0 = mine[0].time if mine else 0.0
    span = (mine[-1].time - t0) if mine else 0.0
    violations = [v for v in verdict.violations if v.execution_id == execution_id]
    bad = _violations_by_seq(violations)
    head = [
        "<!DOCTYPE html>",
        '<html xmlns="http://www.w3.org/1999/xhtml" lang="en">',
        "<head>",
        '<meta charset="utf-8"/>',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}"/>',
        '<meta name="viewport" content="width=device-width, initial-scale=1"/>',
        f"<title>acpfsm run report: execution {_t(execution_id)}</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
        f"<h1>Execution <code>{_t(execution_id)}</code></h1>",
        (
            f'<p class="muted">{len(mine)} transitions over {_fmt_time(span)} s'
            + (f" from <code>{_t(source)}</code>" if source else "")
            + " · written by <code>acpfsm report</code></p>"
        ),
        *_verdict_html(verdict, violations, partial),
    ]
    nav = ['<p class="muted">Charts:']
    body: list[str] = []
    highlights = run_highlights(records, execution_id, chosen)
    for n, hl in enumerate(highlights):
        chart = by_name[hl.chart]
        anchor = f"chart-{n}"
        nav.append(f' <a href="#{anchor}">{_t(hl.chart)}</a>')
        declared = len(transition_rows(chart))
        body += [
            f'<h2 id="{anchor}">{_t(hl.chart)}</h2>',
            (
                f'<p class="muted">{hl.records} transition(s) in {hl.instances} instance(s); '
                f"{len(hl.transitions)} distinct of {declared} declared fired; states visited "
                f"filled, transitions fired in red.</p>"
            ),
        ]
        if binary is not None:
            svg = render_run_svg(chart, hl, binary=binary)
            body.append(f'<div class="chart">{_inline_svg(svg, anchor)}</div>')
            if hl.records:
                link = explorer_name(page_name(execution_id), hl.chart)
                body.append(
                    f'<p class="muted"><a href="{_t(link)}">Step through this run in the '
                    "explorer</a> (a page with a script: click a state, filter by event, ← and "
                    "→ step).</p>"
                )
        else:
            mermaid = render_mermaid(
                chart,
                highlight_states=hl.states,
                highlight_transitions=hl.transitions,
                header=False,
            )
            body += [
                (
                    f'<p class="muted">Not drawn: {_t(INSTALL_HINT)} installs the renderer. '
                    "The Mermaid source (✔ marks a fired transition):</p>"
                ),
                f"<pre>{_t(mermaid)}</pre>",
            ]
        chart_records = [r for r in mine if r.chart == hl.chart]
        if chart_records:
            body += [
                (
                    f"<details><summary>timeline of {_t(hl.chart)} "
                    f"({len(chart_records)} transitions)</summary>"
                ),
                *_records_table(chart_records, t0, bad),
                "</details>",
            ]
    nav.append(' <a href="#events">events</a></p>')
    unknown = sorted({r.chart for r in mine if r.chart not in by_name})
    events = [
        '<h2 id="events">Events</h2>',
        (
            '<p class="muted">Every transition of this execution in firing order, one lane '
            "per chart instance (hover a dot for the record; red: a violation).</p>"
        ),
        *_lanes_svg(mine, bad),
    ]
    if unknown:
        events.append(
            '<p class="muted">Records of charts acpfsm does not declare: '
            + ", ".join(f"<code>{_t(name)}</code>" for name in unknown)
            + "</p>"
        )
    events += _records_table(mine, t0, bad)
    return "\n".join([*head, "".join(nav), *body, *events, "</body>", "</html>", ""])


def _index_page(entries: Sequence[tuple[str, str, int]], source: str, verdict: str) -> str:
    rows = "\n".join(
        f'<tr><td><a href="{_t(name)}"><code>{_t(eid)}</code></a></td>'
        f'<td class="num">{count}</td></tr>'
        for eid, name, count in entries
    )
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html xmlns="http://www.w3.org/1999/xhtml" lang="en">',
            "<head>",
            '<meta charset="utf-8"/>',
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}"/>',
            f"<title>acpfsm run report: {_t(source)}</title>",
            f"<style>{_CSS}</style>",
            "</head>",
            "<body>",
            f"<h1>Run report of <code>{_t(source)}</code></h1>",
            f"<p>{_t(verdict)}</p>",
            "<table>",
            "<tr><th>execution</th><th>transitions</th></tr>",
            rows,
            "</table>",
            "</body>",
            "</html>",
            "",
        ]
    )


def write_report(
    trace: Path | str,
    out_dir: Path | str,
    *,
    execution: str | None = None,
    partial: bool = False,
    records: Sequence[TraceRecord] | None = None,
    lines: Sequence[int] | None = None,
) -> Report:
    """Write the page of every execution of ``trace`` (or only of ``execution``, an id or a
    unique prefix) and ``index.html`` into ``out_dir``. ``records`` (with their ``lines``)
    spare reading the file again. Raises :class:`TraceFormatError` for an unreadable trace
    and :class:`ExecutionChoiceError` for an execution it does not hold."""
    source = str(trace)
    if records is None:
        records, lines = read_trace(trace)
    ids = execution_ids(records)
    chosen = [choose_execution(ids, execution)] if execution is not None else ids
    verdict = check_records(records, partial=partial, lines=lines)
    skipped = ""
    try:
        exe: Path | None = find_graphviz()
    except GraphvizNotFound as exc:
        exe, skipped = None, str(exc)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pages: list[Path] = []
    explorers: list[Path] = []
    entries: list[tuple[str, str, int]] = []
    for execution_id in chosen:
        page = render_page(
            records, execution_id, verdict, source=source, partial=partial, binary=exe
        )
        path = out / page_name(execution_id)
        path.write_text(page, encoding="utf-8")
        pages.append(path)
        if exe is not None:
            explorers += _write_explorers(out, records, execution_id, source, exe)
        count = sum(r.execution_id == execution_id for r in records)
        entries.append((execution_id, path.name, count))
    summary = (
        f"check-trace: OK, {verdict.records} records, {verdict.executions} execution(s)"
        if verdict.ok
        else f"check-trace: {len(verdict.violations)} violation(s) in {verdict.records} records"
    )
    index = out / "index.html"
    index.write_text(_index_page(entries, source, summary), encoding="utf-8")
    return Report(tuple(pages), index, verdict, skipped, tuple(explorers))


# --------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", metavar="TRACE.jsonl", help="the recorded trace")
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="output directory (default: TRACE-report next to the trace)",
    )
    parser.add_argument(
        "--execution",
        metavar="ID",
        help="only this execution (a unique prefix is enough; default: every execution)",
    )
    parser.add_argument(
        "--partial",
        action="store_true",
        help="check the trace as cut out of a longer one (see check-trace --partial)",
    )


def run(args: argparse.Namespace) -> int:
    """Exit status: 0 written (whatever the verdict), 2 unreadable trace or unknown
    execution."""
    trace = Path(args.trace)
    out = Path(args.out) if args.out else trace.with_name(f"{trace.stem}-report")
    try:
        report = write_report(trace, out, execution=args.execution, partial=args.partial)
    except (TraceFormatError, ExecutionChoiceError, DiagramError, OSError) as exc:
        print(f"acpfsm report: {exc}", file=sys.stderr)
        return 2
    for path in report.pages:
        print(f"wrote {path}")
    print(f"wrote {report.index}")
    if report.svg_skipped:
        print(f"acpfsm report: charts shown as Mermaid source: {report.svg_skipped}",
              file=sys.stderr)  # fmt: skip
    state = "OK" if report.verdict.ok else f"{len(report.verdict.violations)} violation(s)"
    print(f"acpfsm report: {len(report.pages)} execution(s) in {out} (check-trace: {state})")
    return 0
