"""``acpfsm verify``'s output (text, JSON, the counterexamples as check-trace JSONL) and its
command line; the exploration is :mod:`.verify`'s."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from .verify import DEFAULT_DEPTH, DEFAULT_GENERATIONS, Bounds, VerifyResult, verify

# --------------------------------------------------------------------------- output


def render_text(result: VerifyResult) -> str:
    b = result.bounds
    depth = "unbounded" if b.depth is None else str(b.depth)
    bound = " (the depth bound left states unexpanded)" if result.truncated else ""
    carriers = " + ".join(b.carriers)
    lines = [
        f"acpfsm verify: {b.generations} generations, depth {depth}, carriers {carriers}"
        + (", crashes" if b.crashes else ""),
        (
            f"explored {result.states} states, {result.transitions} environment transitions, "
            f"depth {result.depth}{bound}, in {result.seconds:.1f} s"
        ),
        "",
        "coverage of the declared transitions:",
    ]
    for c in result.coverage:
        lines.append(f"  {c.chart}: {c.covered}/{c.declared}")
    for c in result.coverage:
        for (source, event, target), why in zip(c.unreached, c.reasons, strict=True):
            arrow = f"{source} --{event}-->" + ("" if target == source else f" {target}")
            lines.append(f"  unreached {c.chart}: {arrow}")
            if why:
                lines.append(f"      ({why})")
    lines += ["", "properties:"]
    for p in result.properties:
        ids = f" ({', '.join(p.ids)})" if p.ids else ""
        verdict = "holds" if p.holds else f"VIOLATED ({p.violations})"
        lines.append(f"  {p.name}{ids}: {verdict}")
    for p in result.properties:
        if p.holds:
            continue
        lines += ["", f"counterexample for {p.name}: {p.message}", "  steps:"]
        lines += [f"    {i}. {s}" for i, s in enumerate(p.steps)]
        lines.append("  trace (check-trace JSONL):")
        lines += [f"    {msgspec.json.encode(r).decode()}" for r in p.trace]
    lines.append("")
    lines.append("OK: every property holds" if result.ok else "FAILED: see the counterexamples")
    return "\n".join(lines)


def render_json(result: VerifyResult) -> dict[str, Any]:
    b = result.bounds
    return {
        "ok": result.ok,
        "bounds": {
            "generations": b.generations,
            "depth": b.depth,
            "carriers": list(b.carriers),
            "startup_attempts": b.startup_attempts,
            "crashes": b.crashes,
        },
        "states": result.states,
        "transitions": result.transitions,
        "depth": result.depth,
        "truncated": result.truncated,
        "seconds": round(result.seconds, 3),
        "coverage": [
            {
                "chart": c.chart,
                "declared": c.declared,
                "covered": c.covered,
                "unreached": [list(t) for t in c.unreached],
                "reasons": list(c.reasons),
            }
            for c in result.coverage
        ],
        "properties": [
            {
                "name": p.name,
                "summary": p.summary,
                "ids": list(p.ids),
                "holds": p.holds,
                "violations": p.violations,
                "message": p.message,
                "steps": list(p.steps),
                "trace": [msgspec.to_builtins(r) for r in p.trace],
            }
            for p in result.properties
        ],
    }


def write_counterexamples(result: VerifyResult, out: Path) -> list[Path]:
    """Each violated property's counterexample as ``<property>.jsonl`` in ``out``."""
    written: list[Path] = []
    for p in result.properties:
        if p.holds:
            continue
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{p.name}.jsonl"
        path.write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in p.trace))
        written.append(path)
    return written


DESCRIPTION = (
    "Explore every interleaving of one execution's life (the charts, the coordination "
    "table and the drivers' flow table and decisions, with every answer the agent, the "
    "carrier and the clock can give) and check kandev's races as properties. Exit 0 when "
    "every property holds, 1 with a shortest counterexample per violated property (at the "
    "default bounds also when a declared transition stays unreached with no reason listed, "
    "or a listed one is reached)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--generations",
        type=int,
        default=DEFAULT_GENERATIONS,
        metavar="N",
        help=f"admit at most N prompt generations (default {DEFAULT_GENERATIONS})",
    )
    parser.add_argument(
        "--depth",
        type=int,
        default=DEFAULT_DEPTH,
        metavar="D",
        help=f"explore at most D steps deep; 0: no bound (default {DEFAULT_DEPTH})",
    )
    parser.add_argument(
        "--carrier",
        choices=("agentctl", "stdio", "both"),
        default="both",
        help="the carrier kinds explored (default both)",
    )
    parser.add_argument(
        "--crashes",
        action="store_true",
        help="also explore the execution's own code crashing at any point",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--out",
        metavar="DIR",
        default=None,
        help="also write each counterexample as DIR/<property>.jsonl",
    )


def run(args: argparse.Namespace) -> int:
    if args.generations < 1 or args.depth < 0:
        print(
            "acpfsm verify: --generations must be at least 1 and --depth at least 0",
            file=sys.stderr,
        )
        return 2
    carriers: tuple[str, ...] = (
        ("agentctl", "stdio") if args.carrier == "both" else (str(args.carrier),)
    )
    depth = args.depth or None
    bounds = Bounds(
        generations=args.generations, depth=depth, carriers=carriers, crashes=args.crashes
    )
    result = verify(bounds)
    if args.json:
        print(json.dumps(render_json(result)))
    else:
        print(render_text(result))
    if args.out:
        for path in write_counterexamples(result, Path(args.out)):
            print(f"wrote {path}", file=sys.stderr)
    # at the default bounds what stays unreached is listed with its reason
    unexplained = result.unexplained() if result.bounds == Bounds() else []
    for line in unexplained:
        print(f"acpfsm verify: {line} (runtime/tools/verify_unreached.py)", file=sys.stderr)
    return 0 if result.ok and not unexplained else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="acpfsm verify", description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
