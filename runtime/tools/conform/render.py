"""The report as a table, Markdown or JUnit XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from .quoting import safe_text
from .report import (
    ConformReport,
    Status,
    _short,
)

# --------------------------------------------------------------------------- output


def _via(report: ConformReport) -> str:
    return f" via agentctl {report.agentctl}" if report.agentctl else ""


def render_table(report: ConformReport, *, evidence: bool = True) -> str:
    counts = report.counts()
    head = (
        f"acpfsm conform: {' '.join(report.command)}"
        + _via(report)
        + (f" ({report.agent})" if report.agent else "")
        + f": {counts['pass']} pass, {counts['fail']} fail, {counts['n/a']} n/a "
        f"in {report.seconds:.1f} s"
    )
    rows = [("check", "result", "time", "detail")] + [
        (c.id, c.status.value, f"{c.seconds:.2f}s", c.detail) for c in report.checks
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [head, ""]
    for cause in report.causes:
        lines += [f"cause: {_short(cause)}", ""]
    if report.unmodelled:
        lines += [f"not modelled by acpfsm (kept): {_short(report.unmodelled)}", ""]
    for i, row in enumerate(rows):
        lines.append("  ".join(row[j].ljust(widths[j]) for j in range(3)) + "  " + row[3])
        if i == 0:
            lines.append("  ".join("-" * w for w in widths) + "  " + "-" * 6)
    if evidence:
        for c in report.checks:
            if c.evidence and c.status is not Status.PASS:
                lines += ["", f"{c.id}: evidence ({c.status.value})"]
                lines += [f"  {e}" for e in c.evidence]
    # whatever the agent put in a detail (an id, a name) cannot move the cursor or hide text
    return "\n".join(safe_text(line) for line in lines)


def render_markdown(report: ConformReport) -> str:
    """The report as a Markdown table (what ``docs/guides/conform.md`` shows)."""
    counts = report.counts()
    lines = [
        f"`{' '.join(report.command)}`"
        + _via(report)
        + (f" ({report.agent})" if report.agent else "")
        + f": {counts['pass']} pass, {counts['fail']} fail, {counts['n/a']} n/a",
        *(f"\ncause: {cause}" for cause in report.causes),
        "",
        "| check | result | detail |",
        "| --- | --- | --- |",
    ]
    for c in report.checks:
        detail = safe_text(c.detail).replace("|", "\\|")
        lines.append(f"| {c.id} | {c.status.value} | {detail} |")
    return "\n".join(safe_text(line) if "\n" not in line else line for line in lines)


def render_junit(report: ConformReport) -> bytes:
    counts = report.counts()
    suite = ET.Element(
        "testsuite",
        name="acpfsm conform",
        tests=str(len(report.checks)),
        failures=str(counts["fail"]),
        skipped=str(counts["n/a"]),
        errors="0",
        time=f"{report.seconds:.3f}",
    )
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="command", value=safe_text(" ".join(report.command)))
    ET.SubElement(props, "property", name="agent", value=safe_text(report.agent))
    for cause in report.causes:
        ET.SubElement(props, "property", name="cause", value=cause)
    if report.agentctl:
        ET.SubElement(props, "property", name="agentctl", value=report.agentctl)
    for c in report.checks:
        case = ET.SubElement(
            suite,
            "testcase",
            classname="acpfsm.conform",
            name=safe_text(c.id),
            time=f"{c.seconds:.3f}",
        )
        if c.status is Status.FAIL:
            failure = ET.SubElement(case, "failure", message=safe_text(c.detail))
            failure.text = "\n".join(safe_text(e) for e in c.evidence)
        elif c.status is Status.NA:
            ET.SubElement(case, "skipped", message=safe_text(c.detail))
        else:
            ET.SubElement(case, "system-out").text = safe_text(c.detail)
    ET.indent(suite)
    body: bytes = ET.tostring(suite, encoding="utf-8", xml_declaration=True)
    return body + b"\n"
