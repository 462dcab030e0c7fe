"""`acpfsm report`: one self-contained HTML page per execution of a trace, inert whatever the
trace holds, and drawn in a real browser."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import tempfile
import xml.etree.ElementTree as ET
import zlib
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest

from acpfsm.statecharts import ALL_CHARTS
from acpfsm.tools import diagrams, report
from acpfsm.tools.check_trace import read_trace
from acpfsm.tools.cli import main

from .traces import record_two_executions

XHTML = "{http://www.w3.org/1999/xhtml}"
SVG = "{http://www.w3.org/2000/svg}"
#: Every element a report page may hold (HTML and the SVG Graphviz and the lanes use).
_HTML_TAGS = "html head meta title style body h1 h2 p a code table tr th td details summary pre div"
_SVG_TAGS = "svg g title polygon path ellipse text line circle polyline"
ALLOWED = {*(XHTML + t for t in _HTML_TAGS.split()), *(SVG + t for t in _SVG_TAGS.split())}


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record_two_executions(tmp_path_factory.mktemp("report") / "run.jsonl")


def _ids(path: Path) -> list[str]:
    records, _ = read_trace(path)
    return report.execution_ids(records)


class _Tags(HTMLParser):
    """Every start tag and attribute name as a browser's HTML tokenizer sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attributes: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes.update(name for name, _ in attrs)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)


def assert_inert(page: Path) -> ET.Element:
    """The page parses as XML and as HTML, with only the elements a report has, no event
    handler attribute, no script, nothing fetched."""
    text = page.read_text(encoding="utf-8")
    root = ET.fromstring(text)
    tags = {e.tag for e in root.iter()}
    assert tags <= ALLOWED, tags - ALLOWED
    for element in root.iter():
        for name, value in element.attrib.items():
            assert not name.lower().startswith("on"), (element.tag, name)
            if name in ("href", "{http://www.w3.org/1999/xlink}href"):
                assert not value.lower().startswith(("javascript:", "http:", "https:", "//"))
    tokens = _Tags()
    tokens.feed(text)
    tokens.close()
    assert not {"script", "img", "iframe", "object", "embed", "link", "base"} & set(tokens.tags)
    assert not [a for a in tokens.attributes if a.startswith("on")]
    assert "Content-Security-Policy" in text and "default-src 'none'" in text
    return root


def test_a_page_per_execution_with_charts_timelines_and_verdict(
    trace: Path, tmp_path: Path
) -> None:
    first, second = _ids(trace)
    result = report.write_report(trace, tmp_path / "out")
    assert [p.name for p in result.pages] == [f"{first}.html", f"{second}.html"]
    assert result.verdict.ok and not result.svg_skipped
    root = assert_inert(result.pages[0])
    text = result.pages[0].read_text()
    assert f"Execution <code>{first}</code>" in text
    assert "check-trace: OK, no violations in" in text
    # every chart drawn inline, highlighted (filled states, red transitions)
    drawings = [e for e in root.iter(SVG + "svg") if e.get("class") != "lanes"]
    assert len(drawings) == len(ALL_CHARTS)
    assert 'fill="#fff3b0"' in text and 'stroke="#c0392b"' in text
    headings = [h.text for h in root.iter(XHTML + "h2")]
    assert headings == [*(c.chart_name for c in ALL_CHARTS), "Events"]
    # the events' timeline: one dot and one row per record of this execution
    records, _ = read_trace(trace)
    mine = [r for r in records if r.execution_id == first]
    lanes = next(e for e in root.iter(SVG + "svg") if e.get("class") == "lanes")
    assert len(list(lanes.iter(SVG + "circle"))) == len(mine)
    assert "prompt_generation #2" in text
    # ids of several drawings on one page stay distinct
    ids = [e.get("id") for e in root.iter() if e.get("id")]
    assert len(ids) == len(set(ids))
    index = assert_inert(result.index)
    assert [a.get("href") for a in index.iter(XHTML + "a")] == [p.name for p in result.pages]


def test_cli_report(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    second = _ids(trace)[1]
    assert main(["report", str(trace), "--execution", second[:8]]) == 0
    out = capsys.readouterr().out
    default = trace.with_name("run-report")
    assert f"wrote {default / (second + '.html')}" in out
    assert "1 execution(s)" in out and "(check-trace: OK)" in out
    assert main(["report", str(trace), "--execution", "nope"]) == 2
    assert "no execution 'nope'" in capsys.readouterr().err
    bad = trace.with_name("bad.jsonl")
    bad.write_text("{not json\n")
    assert main(["report", str(bad)]) == 2
    assert "bad.jsonl:1" in capsys.readouterr().err


def test_violations_are_reported(trace: Path, tmp_path: Path) -> None:
    lines = trace.read_text().splitlines()
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines[:5] + lines[6:]) + "\n")  # a record dropped
    result = report.write_report(cut, tmp_path / "out")
    assert not result.verdict.ok
    page = result.pages[0].read_text()
    assert 'class="verdict bad"' in page and "sequence" in page
    assert '<tr class="violation">' in page
    assert_inert(result.pages[0])


HOSTILE = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "]]><x/>",
    "-- --> <!--",
    "</style><style>*{display:none}</style>",
    "&amp;&lt;&#x3c;",
    "\x00\x07\x1b[31m\ufffe",  # (a lone surrogate is refused by the trace reader)
    "javascript:alert(1)",
    "../../etc/passwd",
    "index",
]


def test_a_hostile_trace_cannot_inject_markup(tmp_path: Path) -> None:
    """Ids, chart, event and state names full of markup: every page parses, holds only the
    report's own elements, shows the text as text, and stays in the output directory."""
    records = []
    for i, evil in enumerate(HOSTILE):
        for chart, event, source, target in [
            ("agent_stream", "connect_started", "idle", "connecting"),  # a real transition
            ("agent_stream", evil, evil, evil),
            (evil, evil, "idle", evil),
            ("prompt_generation", evil, "admitted", "completed"),
        ]:
            records.append(
                {"seq": len(records) + 1, "time": float(i), "execution_id": evil, "chart": chart,
                 "generation": i, "instance": 0, "event": event, "source": source,
                 "target": target}
            )  # fmt: skip
    trace = tmp_path / "evil.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "out"
    result = report.write_report(trace, out)
    assert not result.verdict.ok
    assert len(result.pages) == len(HOSTILE)
    assert {p.parent for p in result.pages} == {out}
    assert len({p.name for p in result.pages} | {"index.html"}) == len(HOSTILE) + 1
    for evil, page in zip(HOSTILE, result.pages, strict=True):
        root = assert_inert(page)
        assert f"Execution {diagrams.xml_safe(evil)}" in "".join(root.itertext())  # as text
    index = "".join(assert_inert(result.index).itertext())
    assert "<script>alert(1)</script>" in index
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [*(p.name for p in result.pages), *(p.name for p in result.explorers), "index.html"]
    )


def test_without_the_renderer_charts_are_mermaid_source(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(diagrams.render, "GRAPHVIZ_BINARY", "graphviz-pure-not-installed")
    result = report.write_report(trace, tmp_path / "out", execution=_ids(trace)[0])
    assert "[diagrams]" in result.svg_skipped
    page = result.pages[0].read_text()
    assert "pip install &#x27;acpfsm[diagrams]&#x27; installs the renderer" in page
    assert "stateDiagram-v2" in page
    assert_inert(result.pages[0])


# --------------------------------------------------------------------------- in a browser


def chromium() -> str:
    """Headless Chromium: $ACPFSM_CHROMIUM, /usr/bin/chromium or on PATH. Missing, the test
    fails (`make test` and .ci/run install Debian's package where they can)."""
    for candidate in (os.environ.get("ACPFSM_CHROMIUM"), "/usr/bin/chromium"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail(
            "headless Chromium is needed for the run report's browser test: run "
            ".ci/install-chromium as root (Debian's package `chromium`) or set ACPFSM_CHROMIUM",
            pytrace=False,
        )
    return found


def screenshot(page: Path, png: Path, size: tuple[int, int]) -> str:
    """Load ``page`` in headless Chromium and save a screenshot; returns Chromium's version."""
    exe = chromium()
    version = subprocess.run(
        [exe, "--version"], capture_output=True, text=True, timeout=60, check=True
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="acpfsm-chromium-") as profile:
        done = subprocess.run(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--hide-scrollbars", f"--user-data-dir={profile}",
             f"--screenshot={png}", f"--window-size={size[0]},{size[1]}", page.as_uri()],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert done.returncode == 0 and png.is_file(), done.stderr[-2000:]
    return version


def read_png(path: Path) -> tuple[int, int, list[bytes], int]:
    """``(width, height, rows, bytes per pixel)`` of an 8-bit RGB/RGBA, non-interlaced PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif kind == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prev, strict=True))
        elif kind == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif kind == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, rows, bpp


@pytest.mark.integration
def test_the_page_draws_its_charts_in_a_real_browser(trace: Path, tmp_path: Path) -> None:
    """Headless Chromium loads the page (nothing fetched: file:// and a CSP) and the
    screenshot shows the diagrams drawn: many colours, the highlight fill and the red of the
    fired transitions."""
    result = report.write_report(trace, tmp_path / "out", execution=_ids(trace)[0])
    png = tmp_path / "page.png"
    version = screenshot(result.pages[0], png, (1100, 1000))
    assert version.startswith("Chromium"), version
    width, height, rows, bpp = read_png(png)
    assert (width, height) == (1100, 1000)
    colours: Counter[tuple[int, int, int]] = Counter()
    for row in rows[150:]:  # below the heading: the first chart
        for x in range(0, width * bpp, bpp):
            colours[(row[x], row[x + 1], row[x + 2])] += 1
    assert len(colours) > 100, len(colours)
    fill = colours[(0xFF, 0xF3, 0xB0)]  # a visited state
    red = sum(n for (r, g, b), n in colours.items() if r > 150 and g < 90 and b < 80)
    dark = sum(n for (r, g, b), n in colours.items() if r + g + b < 150)
    assert fill > 2000, fill
    assert red > 200, red
    assert dark > 500, dark  # outlines and text
