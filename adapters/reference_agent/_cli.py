"""Command line: ``python -m acpfsm.adapters.reference_agent [options]``."""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path

import anyio

from ._agent import AgentConfig, serve
from ._faults import FAULTS, FaultError, Faults, parse_fault, parse_fault_list
from ._mcp import CONNECT_SECONDS

__all__ = ["build_parser", "config_from_args", "main"]

ENV_FAULTS = "ACPFSM_REFERENCE_FAULTS"
ENV_DELAY = "ACPFSM_REFERENCE_DELAY"
ENV_SESSIONS_DIR = "ACPFSM_REFERENCE_SESSIONS_DIR"
ENV_BACKEND = "ACPFSM_REFERENCE_BACKEND"
ENV_LOG = "ACPFSM_REFERENCE_LOG"

log = logging.getLogger("acpfsm.reference_agent")

# The child of the spawn_child fault sleeps at most this long, so even a leaked one goes away.
_CHILD_SECONDS = 300


def _version() -> str:
    try:
        return metadata.version("acpfsm")
    except metadata.PackageNotFoundError:
        return "0.0.0"


def _fault_arg(text: str) -> tuple[str, float | None]:
    try:
        return parse_fault(text)
    except FaultError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _nonneg_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


def _positive_float(text: str) -> float:
    """A bound: a finite number of seconds above zero (nothing waits forever)."""
    value = _nonneg_float(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number above zero: {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    faults = "\n".join(
        f"  {name:22} {spec.scope.value:4}  {spec.effect}" for name, spec in FAULTS.items()
    )
    parser = argparse.ArgumentParser(
        prog="python -m acpfsm.adapters.reference_agent",
        description="A deterministic ACP v1 agent over stdio (no model, no credentials).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"faults (NAME or NAME=ARG; scope turn = also as a [[fault:NAME]] prompt "
        f"directive):\n{faults}\n\nenvironment: {ENV_FAULTS} (comma list), {ENV_DELAY}, "
        f"{ENV_SESSIONS_DIR}, {ENV_BACKEND}, {ENV_LOG}",
    )
    parser.add_argument(
        "--fault",
        action="append",
        type=_fault_arg,
        default=[],
        metavar="NAME[=ARG]",
        help="inject a fault (repeatable)",
    )
    parser.add_argument(
        "--delay",
        type=_nonneg_float,
        default=None,
        metavar="SECONDS",
        help="pause before each streamed update (default 0.002)",
    )
    parser.add_argument(
        "--sessions-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="where sessions are stored (default ./.acpfsm-reference/sessions)",
    )
    parser.add_argument(
        "--backend", choices=("trio", "asyncio"), default=None, help="event loop (default trio)"
    )
    parser.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default=None,
        help="stderr log level (default info)",
    )
    parser.add_argument(
        "--mcp-connect-seconds",
        type=_positive_float,
        default=CONNECT_SECONDS,
        metavar="SECONDS",
        help=f"how long an MCP server may take to connect (default {CONNECT_SECONDS:g})",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    return parser


def config_from_args(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> tuple[AgentConfig, str, str]:
    """Parse flags and environment into (config, backend, log level). Flags win over env."""
    env = os.environ if environ is None else environ
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        env_faults = parse_fault_list(env.get(ENV_FAULTS, ""))
    except FaultError as exc:
        parser.error(f"{ENV_FAULTS}: {exc}")
    faults = Faults([*env_faults, *args.fault])
    delay = args.delay
    if delay is None:
        raw = env.get(ENV_DELAY, "")
        try:
            delay = _nonneg_float(raw) if raw.strip() else 0.002
        except argparse.ArgumentTypeError as exc:
            parser.error(f"{ENV_DELAY}: {exc}")
    sessions_dir = args.sessions_dir
    if sessions_dir is None:
        raw_dir = env.get(ENV_SESSIONS_DIR, "").strip()
        sessions_dir = Path(raw_dir) if raw_dir else Path(".acpfsm-reference", "sessions")
    backend = args.backend or env.get(ENV_BACKEND, "").strip() or "trio"
    if backend not in ("trio", "asyncio"):
        parser.error(f"{ENV_BACKEND}: expected trio or asyncio, got {backend!r}")
    level = args.log_level or env.get(ENV_LOG, "").strip().lower() or "info"
    if level not in ("debug", "info", "warning", "error"):
        parser.error(f"{ENV_LOG}: expected debug, info, warning or error, got {level!r}")
    config = AgentConfig(
        faults=faults,
        delay=delay,
        sessions_dir=sessions_dir.absolute(),
        version=_version(),
        mcp_connect_seconds=args.mcp_connect_seconds,
    )
    return config, backend, level


def main(argv: Sequence[str] | None = None) -> int:
    config, backend, level = config_from_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter(f"reference-agent[{os.getpid()}] %(levelname)s %(message)s")
    )
    log.addHandler(handler)
    log.setLevel(level.upper())
    log.propagate = False
    # Nothing but ACP may reach fd 1: route stray prints to stderr.
    sys.stdout = sys.stderr
    child: subprocess.Popen[bytes] | None = None
    if "spawn_child" in config.faults:
        child = subprocess.Popen(
            [sys.executable, "-c", f"import time; time.sleep({_CHILD_SECONDS})"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        log.info("spawned child %d (fault spawn_child)", child.pid)
        config = AgentConfig(
            faults=config.faults,
            delay=config.delay,
            sessions_dir=config.sessions_dir,
            max_line=config.max_line,
            version=config.version,
            child_pid=child.pid,
        )
    log.info(
        "starting (backend %s, faults: %s, sessions in %s)",
        backend,
        ", ".join(config.faults.describe()) or "none",
        config.sessions_dir,
    )
    try:
        return anyio.run(serve, config, backend=backend)
    except KeyboardInterrupt:
        return 130
    finally:
        if child is not None:
            child.kill()
            child.wait()
