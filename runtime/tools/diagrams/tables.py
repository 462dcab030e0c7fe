"""The Markdown outputs: a chart's transition table and the index of ``diagrams/``."""

from __future__ import annotations

from collections.abc import Sequence

from acpfsm.statecharts import Chart

from .model import (
    HEADER,
    ChartRef,
    chart_class,
    edges,
    effect_text,
    entry_effects,
    first_doc_line,
    transition_effects,
    transition_rows,
)

__all__ = ["render_readme", "render_table"]


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_table(chart: ChartRef) -> str:
    """The Markdown transition table of ``chart`` (with the generated-file header)."""
    cls = chart_class(chart)
    name = cls.chart_name
    lines = [f"<!-- {HEADER} -->", "", f"# {name}: transitions", ""]
    doc = first_doc_line(cls)
    if doc:
        lines += [doc, ""]
    lines += [
        (
            f"Declared by `{cls.__module__}.{cls.__qualname__}`. "
            f"Diagram: [{name}.svg]({name}.svg), Mermaid source: [{name}.mmd]({name}.mmd)."
        ),
        "",
    ]
    lines += _effects_tables(cls)
    return "\n".join(lines) + "\n"


def _effects_tables(chart: type[Chart]) -> list[str]:
    """The transition table with each transition's own effects (a targetless one stays in
    its source: *stays*), then the entry effects of each state, which every transition that
    enters the state adds after its own."""
    effects = transition_effects(chart)
    lines = [
        "| source | event | target | guard | effects |",
        "| --- | --- | --- | --- | --- |",
    ]
    for edge in edges(chart):
        for event in edge.events:
            guard_cell = f"`{_md_cell(edge.guard_text)}`" if edge.guards else ""
            target = "*stays*" if edge.targetless else f"`{edge.target}`"
            specs = effects.get((edge.source, event, edge.target, edge.guards), ())
            cells = "<br>".join(f"`{_md_cell(effect_text(e))}`" for e in specs)
            lines.append(f"| `{edge.source}` | `{event}` | {target} | {guard_cell} | {cells} |")
    entries = entry_effects(chart)
    if entries:
        lines += [
            "",
            (
                "Entry effects: performed, outermost state first, after the transition's own "
                "whenever a transition enters the state (also when it re-enters it)."
            ),
            "",
            "| state | entry effects |",
            "| --- | --- |",
        ]
        for state, specs in entries:
            cells = "<br>".join(f"`{_md_cell(effect_text(e))}`" for e in specs)
            lines.append(f"| `{state}` | {cells} |")
    return lines


# --- the whole directory ------------------------------------------------------------------


def render_readme(
    charts: Sequence[type[Chart]],
    mermaid: dict[str, str],
    views: dict[str, list[tuple[str, str]]],
    shots: Sequence[tuple[str, str]] = (),
) -> str:
    """The index of ``diagrams/``: every chart with its files, its views (``views``: file
    and what it shows, per chart), its Mermaid source inline; the screenshots (``shots``)."""
    lines = [
        f"<!-- {HEADER} -->",
        "",
        "# acpfsm statecharts",
        "",
        (
            "Generated from the chart declarations in `statecharts/` by `acpfsm diagrams`. "
            "`acpfsm diagrams --check` (part of `make test`) fails when a file here no longer "
            "matches the declarations; regenerate with `make diagrams`. Each chart also has an "
            "explorer (`<chart>.html`, one self-contained page, offline): click a state to see "
            "its transitions, filter by event, search; `acpfsm report` and `acpfsm diagrams "
            "--trace` write one per chart that steps through a recorded run."
        ),
        "",
    ]
    if not charts:
        lines += ["No charts are declared yet.", ""]
        return "\n".join(lines)
    lines += [
        "| chart | class | transitions | files |",
        "| --- | --- | --- | --- |",
    ]
    for chart in charts:
        n = chart.chart_name
        lines.append(
            f"| [{n}](#{n.lower()}) | `{chart.__qualname__}` "
            f"| {len(transition_rows(chart))} "
            f"| [svg]({n}.svg) · [table]({n}.md) · [mermaid]({n}.mmd) · [explorer]({n}.html) |"
        )
    lines.append("")
    for chart in charts:
        n = chart.chart_name
        lines += [f"## {n}", ""]
        doc = first_doc_line(chart)
        if doc:
            lines += [doc, ""]
        lines += [
            (
                f"Rendered: [{n}.svg]({n}.svg) · transition table: [{n}.md]({n}.md) · "
                f"Mermaid source: [{n}.mmd]({n}.mmd) · explorer: [{n}.html]({n}.html)"
            ),
            "",
            *_view_lines(views.get(n, [])),
            "```mermaid",
            mermaid[n].rstrip("\n"),
            "```",
            "",
        ]
    if shots:
        lines += ["## Screenshots", "", "Headless Chromium's rendering of:", ""]
        lines += [f"- {what}: [{name}]({name})" for name, what in shots]
        lines.append("")
    lines += _race_catalogue()
    return "\n".join(lines)


def _view_lines(views: Sequence[tuple[str, str]]) -> list[str]:
    if not views:
        return []
    out = ["Views (the chart is big):", ""]
    out += [f"- [{name}]({name}): {what}" for name, what in views]
    return [*out, ""]


def _race_catalogue() -> list[str]:
    """kandev's races and anomalies (:mod:`.races`), with the ``acpfsm verify`` properties
    that check each one."""
    from ..races import RACES
    from ..verify import PROPERTIES

    checked: dict[str, list[str]] = {}
    for prop in PROPERTIES:
        for race_id in prop.ids:
            checked.setdefault(race_id, []).append(f"`{prop.name}`")
    lines = [
        "## kandev's races and anomalies",
        "",
        (
            "The ids the chart docstrings, the tests and `acpfsm verify` cite: the races kandev's "
            "session manager guards (R…) and the anomalies it leaves open (H…), in our words. "
            "The last column names the `acpfsm verify` properties that check each one (see the "
            "*Verify* guide, `docs/guides/verify.md`)."
        ),
        "",
        "| id | what can go wrong | kandev's guard | checked by |",
        "| --- | --- | --- | --- |",
    ]
    for race in RACES:
        by = ", ".join(checked.get(race.id, ())) or "—"
        lines.append(f"| {race.id} | {race.hazard} | {race.guard} | {by} |")
    lines.append("")
    return lines


