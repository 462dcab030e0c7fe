"""The ``acpfsm`` command line.

* ``acpfsm diagrams [--check] [--out DIR] [--names FILE]`` writes (or, with ``--check``,
  verifies) the review diagrams of every chart (see :mod:`acpfsm.tools.diagrams`) and the
  charts' typed vocabulary (:mod:`acpfsm.tools.diagrams.names`);
  ``acpfsm diagrams --trace TRACE.jsonl [--execution ID] [--out DIR]`` draws every chart with
  what one execution of a recorded trace did highlighted; ``--check --browser`` also measures
  every drawing's legibility in headless Chromium and checks the screenshots.
* ``acpfsm chart-tables [--check] [--out PATH]`` writes (or checks) the chart declarations
  the runtime runs from, generated ahead of time (:mod:`acpfsm.tools.chart_tables`).
* ``acpfsm check-trace TRACE.jsonl [--json] [--partial]`` replays a trace against the charts
  (:mod:`acpfsm.tools.check_trace`): exit 0 clean, 1 violations, 2 unreadable/malformed.
* ``acpfsm conform [--json] [--junit-xml FILE] [--timeout S] -- AGENT_COMMAND [ARGS…]`` runs
  the agent conformance battery over stdio (:mod:`acpfsm.tools.conform`); with
  ``--agentctl URL (--nonce N | --token T) [--workspace DIR]`` it runs the agent in an
  instance of kandev's agentctl and checks it through agentctl: exit 1 when a check fails.
* ``acpfsm report TRACE.jsonl [--out DIR] [--execution ID]`` writes one HTML page per
  execution (:mod:`acpfsm.tools.report`).
* ``acpfsm verify [--generations N] [--depth D] [--carrier K] [--json] [--out DIR]`` explores
  every interleaving of one execution's life and checks kandev's races as properties
  (:mod:`acpfsm.tools.verify`): exit 1 with a shortest counterexample (a check-trace
  JSONL trace) per violated property.
* ``acpfsm agentctl [--port N]`` runs kandev's agentctl on loopback until Ctrl-C
  (:mod:`acpfsm.tools.agentctl`).
* ``acpfsm serve --nats URL --store PATH|DSN [--config FILE]`` runs a Runtime as a service
  over NATS (:mod:`acpfsm.tools.serve`).
* ``acpfsm demo [ARGS…]`` runs ``acpfsm.tools.demo.main(ARGS)``.
* ``acpfsm --version``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

__all__ = ["main"]

DEMO_MODULE = "acpfsm.tools.demo"


def _run_diagrams(args: argparse.Namespace) -> int:
    from .check_trace import TraceFormatError, read_trace
    from .diagrams import GRAPHVIZ_BINARY, INSTALL_HINT, DiagramError, write_run
    from .report import ExecutionChoiceError, choose_execution, execution_ids, page_name

    trace = Path(args.trace)
    try:
        records, _ = read_trace(trace)
    except TraceFormatError as exc:
        print(f"acpfsm diagrams: {exc}", file=sys.stderr)
        return 2
    ids = execution_ids(records)
    wanted = args.execution
    if wanted is None:
        if len(ids) != 1:
            listing = "".join(f"\n  {i!r}" for i in ids) or " (none)"
            print(
                f"acpfsm diagrams: {trace} has {len(ids)} executions; choose one with "
                f"--execution ID:{listing}",
                file=sys.stderr,
            )
            return 2
        wanted = ids[0]
    try:
        execution_id = choose_execution(ids, wanted)
    except ExecutionChoiceError as exc:
        print(f"acpfsm diagrams: {exc} {trace}", file=sys.stderr)
        return 2
    short = page_name(execution_id)[:8]
    out = Path(args.out) if args.out else trace.with_name(f"{trace.stem}-{short}")
    try:
        written = write_run(out, records, execution_id, source=str(trace))
    except DiagramError as exc:
        print(f"acpfsm diagrams: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    if not any(p.suffix == ".svg" for p in written):
        print(
            f"acpfsm diagrams: {GRAPHVIZ_BINARY} not found, so no SVG: Mermaid only "
            f"(`{INSTALL_HINT}` draws the SVGs)",
            file=sys.stderr,
        )
    print(f"acpfsm diagrams: execution {execution_id} drawn in {out}")
    return 0


def _diagrams(args: argparse.Namespace) -> int:
    from .diagrams import DiagramError, Drift, check, write
    from .diagrams.names import check_names, write_names

    if args.trace is not None:
        if args.check:
            print("acpfsm diagrams: --check and --trace cannot be combined", file=sys.stderr)
            return 2
        return _run_diagrams(args)
    if args.execution is not None:
        print("acpfsm diagrams: --execution needs --trace", file=sys.stderr)
        return 2
    if args.browser and not args.check:
        print("acpfsm diagrams: --browser needs --check", file=sys.stderr)
        return 2
    out = Path(args.out or "diagrams")
    try:
        if args.check:
            drifts = check(out)
            if args.names is not None and not check_names(args.names):
                print(f"drifted: {args.names}", file=sys.stderr)
                drifts.append(Drift(Path(args.names), "drifted"))
            for drift in drifts:
                print(drift, file=sys.stderr)
            if drifts:
                print(
                    f"acpfsm diagrams: {len(drifts)} file(s) out of date in {out}; "
                    f"regenerate with `acpfsm diagrams --out {out}`",
                    file=sys.stderr,
                )
                return 1
            print(f"acpfsm diagrams: {out} is up to date")
            return _check_in_browser(out) if args.browser else 0
        result = write(out)
        if args.names is not None and write_names(args.names):
            print(f"wrote {args.names}")
    except DiagramError as exc:
        print(f"acpfsm diagrams: {exc}", file=sys.stderr)
        return 2
    for path in result.written:
        print(f"wrote {path}")
    for path in result.removed:
        print(f"removed {path}")
    if result.svg_skipped:
        print(
            f"acpfsm diagrams: no SVG written (the Mermaid files, tables and index are): "
            f"{result.svg_skipped}",
            file=sys.stderr,
        )
    print(
        f"acpfsm diagrams: {len(result.written)} written, {len(result.unchanged)} unchanged, "
        f"{len(result.removed)} removed in {out}"
    )
    if not result.svg_skipped:
        _write_screenshots(out)
    return 0


def _write_screenshots(out: Path) -> None:
    from .diagrams import DiagramError, default_charts
    from .diagrams.screenshots import write_screenshots

    try:
        written, unchanged = write_screenshots(out, default_charts())
    except DiagramError as exc:
        print(f"acpfsm diagrams: screenshots not taken: {exc}", file=sys.stderr)
        return
    for path in written:
        print(f"wrote {path}")
    print(
        f"acpfsm diagrams: screenshots: {len(written)} written, {len(unchanged)} within tolerance"
    )


def _check_in_browser(out: Path) -> int:
    """The legibility of every drawing in ``out`` and its screenshots, in headless Chromium."""
    from .diagrams import default_charts
    from .diagrams.browser import open_browser
    from .diagrams.legibility import check_files
    from .diagrams.screenshots import check_screenshots

    pages = sorted([*out.glob("*.svg"), *out.glob("*.html")])
    with open_browser() as browser:
        findings = check_files(pages, browser)
        shots = check_screenshots(out, default_charts(), browser)
    for finding in findings:
        print(f"illegible: {finding}", file=sys.stderr)
    for drift, how in shots:
        print(f"{drift} ({how})", file=sys.stderr)
    if findings or shots:
        print(
            f"acpfsm diagrams: {len(findings)} legibility fault(s), {len(shots)} screenshot(s) "
            f"out of date in {out}",
            file=sys.stderr,
        )
        return 1
    print(f"acpfsm diagrams: {len(pages)} drawing(s) legible, screenshots within tolerance")
    return 0


def _demo(demo_args: list[str]) -> int:
    try:
        module = importlib.import_module(DEMO_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name != DEMO_MODULE:
            raise
        print("acpfsm demo: not built yet (the runtime issue)", file=sys.stderr)
        return 2
    demo_main = cast(Callable[[list[str]], int | None], module.main)
    return demo_main(demo_args) or 0


def _version() -> str:
    try:
        return importlib.metadata.version("acpfsm")
    except importlib.metadata.PackageNotFoundError:  # a source tree that is not installed
        return "unknown"


def _parser() -> argparse.ArgumentParser:
    from .diagrams import INSTALL_HINT

    parser = argparse.ArgumentParser(
        prog="acpfsm",
        description="Drive ACP coding agents with declared statecharts: draw the charts, "
        "check and report recorded traces, verify the composed charts, check agents for "
        "conformance, run agentctl locally, and a demo.",
    )
    parser.add_argument("--version", action="version", version=f"acpfsm {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    diagrams = commands.add_parser(
        "diagrams",
        help="write the chart diagrams (.mmd, .md, .svg and README.md)",
        description="Write the review diagrams of every chart (Mermaid, transition table, "
        "SVG, an index) or, with --check, verify them; with --trace, draw every chart with "
        "what one execution of a recorded trace did highlighted. The SVGs need the "
        f"graphviz-pure renderer (`{INSTALL_HINT}`); without it the rest is written.",
    )
    diagrams.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if any generated file is drifted, missing or extra",
    )
    diagrams.add_argument(
        "--browser",
        action="store_true",
        help="with --check: also load every drawing in headless Chromium, fail on overlapping "
        "labels, text outside its box, edges through boxes, and on screenshots out of tolerance",
    )
    diagrams.add_argument(
        "--names",
        default=None,
        metavar="FILE",
        help="also write (with --check: verify) the charts' typed vocabulary, "
        "statecharts/names.py in the repository",
    )
    diagrams.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="output directory (default: diagrams; with --trace: TRACE-<execution> next to "
        "the trace)",
    )
    diagrams.add_argument(
        "--trace",
        metavar="TRACE.jsonl",
        help="draw what one execution of this trace did (states and transitions highlighted)",
    )
    diagrams.add_argument(
        "--execution",
        metavar="ID",
        help="the execution to draw (a unique prefix is enough; optional when the trace has one)",
    )
    diagrams.set_defaults(handler=_diagrams)

    from . import agentctl, chart_tables, check_trace, conform, report, serve, verify

    tools = (
        (
            "chart-tables",
            chart_tables,
            "write the chart declarations the runtime runs from (statecharts/_generated.py)",
            chart_tables.DESCRIPTION,
        ),
        (
            "check-trace",
            check_trace,
            "replay a recorded trace against the charts (exit 1 on violations)",
            (
                "Replay a recorded trace against the charts and report every violation with its "
                "line. Exit 0 clean, 1 violations, 2 unreadable or malformed file."
            ),
        ),
        (
            "report",
            report,
            "write an HTML page per execution of a trace (charts, timelines, verdict)",
            report.DESCRIPTION,
        ),
        (
            "conform",
            conform,
            (
                "run the conformance battery against an ACP agent, over stdio or through "
                "agentctl (exit 1 on failures)"
            ),
            conform.DESCRIPTION,
        ),
        (
            "verify",
            verify,
            (
                "explore every interleaving of one execution's life and check kandev's races "
                "as properties (exit 1 with a counterexample)"
            ),
            verify.DESCRIPTION,
        ),
        (
            "agentctl",
            agentctl,
            "run kandev's agentctl on this machine (fetched once) until Ctrl-C",
            agentctl.DESCRIPTION,
        ),
        (
            "serve",
            serve,
            "run a Runtime as a service over NATS (request/reply, events on JetStream)",
            serve.DESCRIPTION,
        ),
    )
    for name, module, help_text, description in tools:
        tool = commands.add_parser(name, help=help_text, description=description)
        module.add_arguments(tool)
        tool.set_defaults(handler=module.run)

    # Listed for --help only: main() hands everything after `demo` to the demo untouched.
    demo = commands.add_parser(
        "demo",
        help="run a full life of an execution on the embedded reference agent",
        description="Run a full life of an agent execution on the embedded reference agent "
        "(launch, follow-up, steer, an escalated cancel, stop, relaunch with session/load), "
        "narrating every chart transition; writes the trace, the run's diagrams and its "
        "report. `acpfsm demo --help` lists its options.",
    )
    demo.add_argument("demo_args", nargs=argparse.REMAINDER, metavar="ARGS")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["demo"]:
        return _demo(arguments[1:])
    args = _parser().parse_args(arguments)
    handler = cast(Callable[[argparse.Namespace], int], args.handler)
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
