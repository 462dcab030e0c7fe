"""``acpfsm conform``'s command line."""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import msgspec

from .judge import SchemaOptions
from .render import (
    render_junit,
    render_table,
)
from .report import (
    AGENTCTL_AUTO,
    DEFAULT_LONG_PROMPT,
    DEFAULT_PROMPT,
    DEFAULT_TIMEOUT,
    DESCRIPTION,
    CheckResult,
    ConformReport,
    ConformUsageError,
)
from .schema import BUNDLED, SCHEMA_PACKAGE, SCHEMA_PACKAGE_VERSION
from .stdio import (
    run_battery,
)
from .through_agentctl import (
    run_agentctl_battery,
)

# --------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument("--junit-xml", metavar="FILE", help="also write a JUnit XML report")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help=f"bound of each check in seconds (default {DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument("--prompt", default=DEFAULT_PROMPT, help="the prompt of the turn check")
    parser.add_argument(
        "--long-prompt",
        default=DEFAULT_LONG_PROMPT,
        help="the prompt of the cancel and steer checks (should take the agent a while)",
    )
    parser.add_argument(
        "--cwd",
        metavar="DIR",
        help="over stdio: the agent's working directory and session cwd (default: a new "
        "temporary directory; relative paths in ARGS resolve against it, so give absolute ones)",
    )
    schema = parser.add_argument_group(
        "the official ACP schema",
        "over stdio every JSON-RPC message, both ways, is validated against the official ACP "
        "schema of the protocol version the agent negotiated (bundled: "
        + ", ".join(f"v{v}" for v in BUNDLED)
        + f", from {SCHEMA_PACKAGE} {SCHEMA_PACKAGE_VERSION}); each violation is a failed check",
    )
    which = schema.add_mutually_exclusive_group()
    which.add_argument(
        "--schema-version",
        type=int,
        metavar="N",
        help="validate against the bundled schema of protocol version N, whatever was negotiated",
    )
    which.add_argument(
        "--schema",
        metavar="FILE",
        help="validate against this schema file instead (e.g. a newer SDK's schema/v1/schema.json)",
    )
    which.add_argument("--no-schema", action="store_true", help="no schema validation")
    remote = parser.add_argument_group(
        "through agentctl",
        "run the agent in an instance of kandev's agentctl and check it through agentctl's "
        "WebSocket; the checks that need the agent's raw stdio are n/a",
    )
    remote.add_argument(
        "--agentctl",
        metavar="URL",
        help="agentctl's control URL, e.g. http://127.0.0.1:39429, or `auto`: start one on "
        "this machine for this run (as `acpfsm agentctl` does) and stop it at the end",
    )
    credentials = remote.add_mutually_exclusive_group()
    credentials.add_argument(
        "--nonce", metavar="N", help="agentctl's bootstrap nonce (traded for its token)"
    )
    credentials.add_argument(
        "--token",
        metavar="T",
        help="agentctl's bearer token (the nonce is one-shot: a run given --nonce saves the "
        "token it got to --token-file, for the next run)",
    )
    remote.add_argument(
        "--token-file",
        metavar="FILE",
        help="read agentctl's bearer token from FILE; a run given --nonce writes the token it "
        "got there (default: a private file in the user cache folder, named after the URL)",
    )
    remote.add_argument(
        "--workspace",
        metavar="DIR",
        help="the instance's workspace, a directory on agentctl's machine (default when "
        "agentctl runs on this machine: a new temporary directory)",
    )
    parser.add_argument(
        "--inherit-env",
        action="store_true",
        help="give the agent this whole environment (default: PATH, HOME, LANG and the "
        "credentials and settings the built-in agent profiles pass through)",
    )
    parser.add_argument(
        "agent", nargs=argparse.REMAINDER, metavar="-- AGENT_COMMAND [ARGS...]",
        help="the agent to check, after --",
    )  # fmt: skip


def token_file(url: str) -> Path:
    """The default token file for agentctl at ``url``: in the user cache folder, private."""
    from acpfsm.adapters.agentctl.local import default_cache_dir
    from acpfsm.adapters.workspace import safe_component

    name = safe_component(url.split("://", 1)[-1].replace(":", "-"), "agentctl")
    return default_cache_dir().parent / "tokens" / f"agentctl-{name}"


def _save_token(args: argparse.Namespace, token: str) -> Path:
    """Write ``token`` to ``--token-file`` (or the default one), mode 0600 in a 0700 folder:
    a secret, kept off the terminal, the logs and the reports."""
    from acpfsm.adapters.workspace import make_private_dirs, open_private

    path = Path(args.token_file) if args.token_file else token_file(args.agentctl)
    make_private_dirs(path.parent)
    fd = open_private(path, os.O_WRONLY | os.O_TRUNC)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(token + "\n")
    return path


def _usage_error(args: argparse.Namespace) -> str:
    """Why these arguments cannot run ("" when they can)."""
    if args.timeout <= 0:
        return "--timeout must be positive"
    if args.agentctl is None:
        given = [
            f"--{n.replace('_', '-')}"
            for n in ("nonce", "token", "token_file", "workspace")
            if getattr(args, n)
        ]
        return f"{' and '.join(given)} need --agentctl URL" if given else ""
    if args.agentctl == AGENTCTL_AUTO:
        if args.nonce or args.token or args.token_file:
            return "--agentctl auto starts its own agentctl: give no --nonce or --token"
    elif not args.nonce and not args.token:
        if not args.token_file:
            return (
                "--agentctl needs agentctl's bootstrap --nonce N, its --token T or a "
                "--token-file FILE (or: auto)"
            )
        try:
            args.token = Path(args.token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            return f"cannot read --token-file {args.token_file}: {exc.strerror or exc}"
        if not args.token:
            return f"--token-file {args.token_file} is empty"
    if args.cwd:
        return "with --agentctl, give the agent's directory as --workspace DIR"
    return ""


def run(args: argparse.Namespace) -> int:
    argv = list(args.agent)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("acpfsm conform: give the agent command after --", file=sys.stderr)
        return 2
    problem = _usage_error(args)
    if problem:
        print(f"acpfsm conform: {problem}", file=sys.stderr)
        return 2
    if args.agentctl != AGENTCTL_AUTO:
        return _run(args, argv)
    from acpfsm.adapters.agentctl.local import AgentctlUnavailable

    from ..agentctl import local_agentctl

    def note(text: str) -> None:
        print(f"acpfsm conform: {text}", file=sys.stderr, flush=True)

    try:
        with local_agentctl(echo=note) as server:
            note(f"started agentctl at {server.url} (stopped at the end)")
            args.agentctl, args.nonce = server.url, server.nonce
            return _run(args, argv, token_hint=False)
    except AgentctlUnavailable as exc:
        note(f"cannot start agentctl: {exc}")
        return 2


def _run(args: argparse.Namespace, argv: list[str], *, token_hint: bool = True) -> int:
    def echo(result: CheckResult) -> None:
        if not args.json:
            print(
                f"  {result.status.value:<4} {result.id} ({result.seconds:.2f}s)", file=sys.stderr
            )

    common: dict[str, Any] = {
        "check_timeout": args.timeout,
        "prompt": args.prompt,
        "long_prompt": args.long_prompt,
        "echo": echo,
        "inherit_env": tuple(os.environ) if args.inherit_env else None,
    }
    schema = SchemaOptions(
        enabled=not args.no_schema, version=args.schema_version, path=args.schema
    )
    battery: Callable[[], Awaitable[ConformReport]]
    if args.agentctl is not None:
        battery = functools.partial(
            run_agentctl_battery,
            argv,
            url=args.agentctl,
            nonce=args.nonce or "",
            token=args.token or "",
            workspace=args.workspace,
            **common,
        )
    else:
        battery = functools.partial(run_battery, argv, workspace=args.cwd, schema=schema, **common)
    try:
        report = anyio.run(battery)
    except ConformUsageError as exc:
        print(f"acpfsm conform: {exc}", file=sys.stderr)
        return 2
    if args.junit_xml:
        Path(args.junit_xml).write_bytes(render_junit(report))
    if args.json:
        data = msgspec.to_builtins(report)
        del data["agentctl_token"]  # a secret: never in a report
        data["ok"] = report.ok
        data["summary"] = report.counts()
        # ASCII: whatever an agent sent (a lone surrogate, a terminal escape) prints safely
        print(json.dumps(data, ensure_ascii=True))
    else:
        print(render_table(report))
    if report.agentctl_token and token_hint:
        path = _save_token(args, report.agentctl_token)
        print(
            f"acpfsm conform: the nonce is spent; agentctl's token was saved to {path}: "
            f"run again with --token-file {path}",
            file=sys.stderr,
        )
    return 0 if report.ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="acpfsm conform", description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv))
