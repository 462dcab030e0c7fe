"""The drawings and the explorer in headless Chromium: the legibility check on a run report of
the demo, the check failing where it should, the explorer clicked, stepped and fed a hostile
trace."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from acpfsm.statecharts import ALL_CHARTS, Chart, PromptGeneration, declared_transitions
from acpfsm.tools import cli, demo, report
from acpfsm.tools.check_trace import read_trace
from acpfsm.tools.diagrams import FONT, render_explorer
from acpfsm.tools.diagrams.browser import drawing_font, new_page, open_browser
from acpfsm.tools.diagrams.explorer import CSP
from acpfsm.tools.diagrams.legibility import check_files
from acpfsm.tools.diagrams.screenshots import check_screenshots, compare_png, screenshot_plan

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with open_browser() as opened:
        yield opened


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, report.Report]:
    """The demo's trace and its run report (pages and explorers)."""
    base = tmp_path_factory.mktemp("demo")
    trace = base / "demo.jsonl"
    assert demo.main(["--workspace", str(base / "ws"), "--trace", str(trace)]) == 0
    return trace, report.write_report(trace, base / "report")


def test_the_run_report_of_the_demo_is_legible(
    demo_run: tuple[Path, report.Report], browser: Any
) -> None:
    """The report's pages and explorers, and the drawings and explorers the demo wrote of each
    execution (``acpfsm diagrams --trace``: ``<trace>/<n>-<id>/``)."""
    trace, result = demo_run
    assert result.explorers and not result.svg_skipped
    runs = sorted(p for p in trace.with_suffix("").glob("*/*") if p.suffix in (".svg", ".html"))
    assert {p.suffix for p in runs} == {".svg", ".html"}
    assert len({p.parent for p in runs}) >= 2
    findings = check_files([*result.pages, *result.explorers, *runs], browser)
    assert findings == []


BROKEN = """<svg xmlns="http://www.w3.org/2000/svg" width="400" height="200" viewBox="0 0 400 200">
<g class="graph"><title>broken</title>
<g class="node state"><title>alpha</title><polygon points="10,10 90,10 90,50 10,50"/>
<text x="15" y="35" font-size="11">alpha_with_a_far_too_long_name</text></g>
<g class="node state"><title>beta</title><polygon points="200,10 280,10 280,50 200,50"/>
<text x="210" y="35" font-size="11">beta</text></g>
<g class="node arc-label"><title>a0</title><text x="205" y="45" font-size="9">waiter_abandoned</text></g>
<g class="node arc-label"><title>a1</title><text x="215" y="47" font-size="9">stall_reported</text></g>
<g class="edge"><title>alpha-&gt;gamma</title><path d="M50,30 L380,30" fill="none" stroke="black"/></g>
</g></svg>"""


def test_the_legibility_check_names_the_drawing_and_both_labels(
    tmp_path: Path, browser: Any
) -> None:
    path = tmp_path / "broken.svg"
    path.write_text(BROKEN)
    found = {(f.kind, f.first, f.second) for f in check_files([path], browser)}
    assert ("label/label", "waiter_abandoned", "stall_reported") in found
    assert ("label/node", "waiter_abandoned", "beta") in found
    assert ("text outside", "alpha_with_a_far_too_long_name", "alpha") in found
    assert ("edge through", "alpha->gamma", "beta") in found
    assert str(check_files([path], browser)[0]).startswith("broken.svg (broken): ")


def test_the_browser_check_of_make_test_fails_naming_the_drawing_and_both_labels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``acpfsm diagrams --check --browser`` (make diagrams-check) after its drift check: the
    screenshots' drawings and one overlapping drawing; exit 1, each fault on a line of its
    own naming the drawing and the two labels. (It opens a browser of its own: in a thread of
    its own, beside this module's.)"""

    def run() -> int:
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(cli._check_in_browser, tmp_path).result()

    for shot in screenshot_plan(ALL_CHARTS):
        shutil.copy(REPO / "diagrams" / shot.name, tmp_path)
        shutil.copy(REPO / "diagrams" / shot.page, tmp_path)
    assert run() == 0
    assert "drawing(s) legible" in capsys.readouterr().out
    (tmp_path / "broken.svg").write_text(BROKEN)
    assert run() == 1
    err = capsys.readouterr().err.splitlines()
    assert (
        "illegible: broken.svg (broken): label/label: 'waiter_abandoned' and 'stall_reported'"
        in err
    )
    faults = [line for line in err if line.startswith("illegible: ")]
    assert err[-1].startswith(f"acpfsm diagrams: {len(faults)} legibility fault(s), 0 screenshot")
    assert all(line.startswith("illegible: broken.svg (broken): ") for line in faults)


def test_the_explorer_is_measured_in_every_highlight(tmp_path: Path, browser: Any) -> None:
    """The committed explorers stay legible with every element highlighted at once (each of
    the script's highlights); a highlight that sets its text in bold spills it out of the
    boxes laid out for the regular face, and the check says in which highlight."""
    assert check_files(sorted((REPO / "diagrams").glob("*.html")), browser) == []
    page = (REPO / "diagrams" / "crash.html").read_text(encoding="utf-8")
    bold = page.replace("text.hl { fill: #c0392b;", "text.hl { font-weight: bold; fill: #c0392b;")
    assert bold != page
    path = tmp_path / "crash.html"
    path.write_text(bold, encoding="utf-8")
    found = check_files([path], browser)
    assert found and {f.where for f in found} == {"crash.html (crash, highlighted: hl)"}
    assert {f.kind for f in found} == {"text outside"}


def test_the_drawings_are_drawn_in_the_font_they_were_laid_out_for(
    tmp_path: Path, browser: Any
) -> None:
    """Every drawing names DejaVu Sans and Chromium draws it in DejaVu Sans (the face
    Graphviz measured); a drawing whose text comes out in another face is a finding."""
    for path in sorted((REPO / "diagrams").glob("*.svg")):
        text = path.read_text(encoding="utf-8")
        assert text.count("<text") == text.count(f'font-family="{FONT},'), path.name
    page = new_page(browser, 800, 600)
    page.goto((REPO / "diagrams" / "prompt_generation.overview.svg").as_uri())
    assert drawing_font(page) == FONT
    page.context.close()
    serif = tmp_path / "serif.svg"
    serif.write_text(BROKEN.replace('font-size="11"', 'font-family="DejaVu Serif" font-size="11"'))
    fonts = [f for f in check_files([serif], browser) if f.kind == "font"]
    assert [(f.where, f.first, f.second) for f in fonts] == [
        ("serif.svg", "DejaVu Serif", f"{FONT} (install fonts-dejavu-core)")
    ]


def _selected(page: Any) -> set[tuple[str, str, str]]:
    keys = page.eval_on_selector_all(
        "#panel li[data-t]", "els => els.map(e => e.getAttribute('data-t'))"
    )
    return {tuple(k.split("|")) for k in keys}


def _highlighted_parts(page: Any) -> set[str]:
    return set(
        page.evaluate(
            """() => [...document.querySelectorAll('#drawing .hl')].map(e =>
              e.tagName === 'text' ? e.closest('g').id + ':' +
                [...e.closest('g').querySelectorAll('text')].indexOf(e) : e.id)"""
        )
    )


def _explorer(browser: Any, chart: type[Chart]) -> Any:
    page = new_page(browser, 1400, 900)
    page.goto((REPO / "diagrams" / f"{chart.chart_name}.html").as_uri())
    return page


@pytest.mark.parametrize("chart", ALL_CHARTS, ids=lambda c: c.chart_name)
def test_clicking_a_state_highlights_exactly_its_declared_transitions(
    browser: Any, chart: type[Chart]
) -> None:
    """For every state of every chart: the panel lists the declared transitions that leave,
    enter or stay in it (the chart's declaration), and the drawing highlights exactly the
    elements that show them; every declared transition is drawn somewhere."""
    declared = declared_transitions(chart)
    page = _explorer(browser, chart)
    data = page.evaluate("() => JSON.parse(document.getElementById('data').textContent)")
    parts = {
        (t["source"], t["event"], t["target"]): {
            f"{el}:{line}" if line is not None else el for el, line in t["parts"]
        }
        for t in data["transitions"]
    }
    assert set(parts) == set(declared)
    assert [t for t in declared if not parts[t]] == []
    for state in data["states"]:
        sid = state["id"]
        page.click(f"#{state['el']}" if not state.get("title") else f"#{state['title']}")
        mine = {t for t in declared if sid in (t[0], t[2])}
        assert _selected(page) == mine, sid
        assert _highlighted_parts(page) == {p for t in mine for p in parts[t]}, sid
    page.context.close()


def test_the_explorer_by_keyboard_event_and_search(browser: Any) -> None:
    """Tab to a state and Enter selects it, Escape clears; an event chosen lists exactly its
    declared transitions; ``/`` focuses the search, which finds the states and the declared
    transitions whose name, event or guard contains the text, and highlights them."""
    declared = declared_transitions(PromptGeneration)
    page = _explorer(browser, PromptGeneration)
    page.focus("#s-sending")
    page.keyboard.press("Enter")
    assert _selected(page) == {t for t in declared if "sending" in (t[0], t[2])}
    page.keyboard.press("Escape")
    assert _selected(page) == set() and _highlighted_parts(page) == set()
    for event in ("cancel_requested", "stream_lost"):
        page.select_option("#event", event)
        assert _selected(page) == {t for t in declared if t[1] == event}
    page.keyboard.press("Escape")
    page.focus("body")
    page.keyboard.press("/")
    assert page.evaluate("() => document.activeElement.id") == "search"
    page.keyboard.type("abandon")
    found = page.eval_on_selector_all("#panel ul.found li", "els => els.map(e => e.textContent)")
    data = page.evaluate("() => JSON.parse(document.getElementById('data').textContent)")
    guards = {(t["source"], t["event"], t["target"]): t["guard"] for t in data["transitions"]}
    states = [s["id"] for s in data["states"] if "abandon" in s["id"]]
    matching = [t for t in declared if "abandon" in t[1] or "abandon" in guards[t]]
    assert states and matching
    assert [f for f in found if f.startswith("state ")] == [f"state {s}" for s in states]
    assert len(found) == len(states) + len(matching)
    matched = page.evaluate("() => document.querySelectorAll('#drawing .match').length")
    assert matched >= len(states)
    page.keyboard.press("Escape")
    assert page.evaluate("() => document.querySelectorAll('#drawing .match').length") == 0
    page.context.close()


def test_stepping_through_the_demo_trace_visits_the_recorded_transitions_in_order(
    demo_run: tuple[Path, report.Report], browser: Any
) -> None:
    trace, result = demo_run
    records, _ = read_trace(trace)
    first = records[0].execution_id
    explorer = next(p for p in result.explorers if p.name.endswith(".prompt_generation.html"))
    assert explorer.name.startswith(report.page_name(first).removesuffix(".html"))
    expected = [
        f"{r.source}|{r.event}|{r.target}"
        for r in sorted(records, key=lambda r: r.seq)
        if r.execution_id == first and r.chart == "prompt_generation"
    ]
    assert len(expected) > 5
    page = new_page(browser, 1400, 900)
    page.goto(explorer.as_uri())
    position = page.locator("#position")
    assert position.get_attribute("data-at") == "-1"
    visited = []
    for _ in expected:
        page.keyboard.press("ArrowRight")
        visited.append(position.get_attribute("data-t"))
        stepped = page.evaluate("() => document.querySelectorAll('#drawing .step').length")
        current = page.evaluate("() => document.querySelectorAll('#drawing .current').length")
        assert stepped >= 1 and current == 1  # the transition just taken (its edges or its
        # line in the state's box), the state it is in
    assert visited == expected
    page.keyboard.press("ArrowRight")  # past the end: stays on the last
    assert position.get_attribute("data-t") == expected[-1]
    back = []
    for _ in expected[:-1]:
        page.keyboard.press("ArrowLeft")
        back.append(position.get_attribute("data-t"))
    assert back == expected[-2::-1]
    page.click("#prev")
    assert position.get_attribute("data-at") == "-1"
    page.keyboard.press("End")
    assert position.get_attribute("data-t") == expected[-1]
    page.keyboard.press("Home")
    assert position.get_attribute("data-at") == "-1"
    page.click("#next")
    assert position.get_attribute("data-t") == expected[0]
    page.context.close()


HOSTILE = [
    "<img src=x onerror=alert(1)>",
    "</script><script>alert(2)</script>",
    '"><svg onload=alert(3)>',
    "&lt;b&gt;&amp;",
    "<!-- -->]]>",
]


class _Record:
    def __init__(self, seq: int, evil: str) -> None:
        self.seq, self.generation, self.instance = seq, seq, 0
        self.event, self.source, self.target = evil, evil, "sending"


def test_a_hostile_trace_renders_inert_in_the_explorer(tmp_path: Path, browser: Any) -> None:
    page_path = tmp_path / "hostile.html"
    records = [_Record(i + 1, evil) for i, evil in enumerate(HOSTILE)]
    page_path.write_text(
        render_explorer(PromptGeneration, records=records, trace_label=HOSTILE[1]),
        encoding="utf-8",
    )
    page = new_page(browser, 1200, 800)
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(page_path.as_uri())
    for _ in HOSTILE:
        page.keyboard.press("ArrowRight")
    assert dialogs == [] and errors == []
    assert (
        page.evaluate("() => document.querySelectorAll('img, iframe, object, embed').length") == 0
    )
    assert page.evaluate("() => document.querySelectorAll('script').length") == 2  # data, ours
    steps = page.eval_on_selector_all("#steps li", "els => els.map(e => e.textContent)")
    assert [s.split(" · ", 1)[1] for s in steps] == [f"{e}: {e} → sending" for e in HOSTILE]
    assert HOSTILE[1] in page.inner_text("#timeline")
    page.context.close()


_CSP_PROBE = """async () => {
  const violations = [];
  document.addEventListener('securitypolicyviolation', e => violations.push(e.violatedDirective));
  const fetched = await fetch('http://127.0.0.1:9/x').then(() => 'fetched', () => 'refused');
  const s = document.createElement('script');
  s.textContent = 'window.__injected = 1';
  document.body.appendChild(s);
  const img = document.createElement('img');
  img.src = 'http://127.0.0.1:9/pixel.png';
  document.body.appendChild(img);
  await new Promise(r => setTimeout(r, 200));
  return [fetched, window.__injected === undefined, [...new Set(violations)].sort()];
}"""


def test_the_explorer_fetches_nothing_and_runs_only_its_own_script(
    demo_run: tuple[Path, report.Report], browser: Any
) -> None:
    """The committed explorer and one of the demo report's: the page requests nothing but
    itself while it is used, its content security policy is the strict one (nothing fetched,
    only its own script by hash), and Chromium enforces it: a fetch, an injected inline script
    and a remote image are refused."""
    _, result = demo_run
    ran = next(p for p in result.explorers if p.name.endswith(".prompt_generation.html"))
    pages = [REPO / "diagrams" / "prompt_generation.html", ran]
    for path in pages:
        page = new_page(browser, 1200, 800)
        requests: list[str] = []

        def record(request: Any, requests: list[str] = requests) -> None:
            requests.append(request.url)

        page.on("request", record)
        page.goto(path.as_uri())
        assert page.get_attribute('meta[http-equiv="Content-Security-Policy"]', "content") == CSP
        assert "default-src 'none'" in CSP and "script-src 'sha256-" in CSP
        assert "unsafe-eval" not in CSP and "script-src 'unsafe-inline'" not in CSP
        page.click("#s-sending")
        page.select_option("#event", "stream_lost")
        page.keyboard.press("ArrowRight")
        assert requests == [path.as_uri()]
        fetched, inert, violations = page.evaluate(_CSP_PROBE)
        assert (fetched, inert) == ("refused", True)
        assert violations == ["connect-src", "img-src", "script-src-elem"]
        page.context.close()


def test_screenshots_are_compared_within_a_tolerance(browser: Any) -> None:
    shot = (REPO / "diagrams" / "prompt_generation.overview.png").read_bytes()
    assert compare_png(browser, shot, shot) == (True, "0.00% of the pixels differ")
    other = (REPO / "diagrams" / "prompt_generation.explorer.png").read_bytes()
    same, how = compare_png(browser, shot, other)
    assert not same and "px, expected" in how


def test_the_screenshot_check_reports_drifted_missing_and_extra(
    tmp_path: Path, browser: Any
) -> None:
    """The committed screenshots are within tolerance of what the browser shows now; one
    replaced by another picture drifts, one deleted is missing, a stray PNG is extra."""
    plan = screenshot_plan(ALL_CHARTS)
    assert [s.name for s in plan] == [
        "prompt_generation.overview.png",
        "prompt_generation.state.live.png",
        "prompt_generation.explorer.png",
    ]
    for shot in plan:
        shutil.copy(REPO / "diagrams" / shot.name, tmp_path)
        shutil.copy(REPO / "diagrams" / shot.page, tmp_path)
    assert check_screenshots(tmp_path, ALL_CHARTS, browser) == []
    overview, view, explorer = (tmp_path / s.name for s in plan)
    shutil.copy(explorer, overview)
    view.unlink()
    (tmp_path / "stray.png").write_bytes(explorer.read_bytes())
    found = {(d.path.name, d.kind) for d, _ in check_screenshots(tmp_path, ALL_CHARTS, browser)}
    assert found == {(overview.name, "drifted"), (view.name, "missing"), ("stray.png", "extra")}
