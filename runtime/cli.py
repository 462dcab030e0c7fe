"""The ``acpfsm`` command line.

``acpfsm diagrams [--check] [--out DIR]`` writes (or, with ``--check``, verifies) the review
diagrams of every chart (see :mod:`acpfsm.runtime.diagrams`). ``acpfsm demo [ARGS…]`` runs
``acpfsm.runtime.demo.main(ARGS)`` once that module exists.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

__all__ = ["main"]

DEMO_MODULE = "acpfsm.runtime.demo"


def _diagrams(args: argparse.Namespace) -> int:
    from .diagrams import DiagramError, check, write

    out = Path(args.out)
    try:
        if args.check:
            drifts = check(out)
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
            return 0
        result = write(out)
    except DiagramError as exc:
        print(f"acpfsm diagrams: {exc}", file=sys.stderr)
        return 2
    for path in result.written:
        print(f"wrote {path}")
    for path in result.removed:
        print(f"removed {path}")
    print(
        f"acpfsm diagrams: {len(result.written)} written, {len(result.unchanged)} unchanged, "
        f"{len(result.removed)} removed in {out}"
    )
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="acpfsm", description="Drive ACP coding agents with declared statecharts."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    diagrams = commands.add_parser(
        "diagrams", help="write the chart diagrams (.mmd, .md, .svg and README.md)"
    )
    diagrams.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if any generated file is drifted, missing or extra",
    )
    diagrams.add_argument(
        "--out", default="diagrams", metavar="DIR", help="output directory (default: diagrams)"
    )
    diagrams.set_defaults(handler=_diagrams)

    # Listed for --help only: main() hands everything after `demo` to the demo untouched.
    demo = commands.add_parser("demo", help="run the demo (arguments go to the demo)")
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
