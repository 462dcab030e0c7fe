"""``acpfsm agentctl``: kandev's agentctl on this machine, for ``AgentctlExecutor`` and
``acpfsm conform --agentctl``.

It fetches the pinned agentctl into the user cache folder (once; SHA-256 checked), runs it on
loopback with a fresh bootstrap nonce, prints the URL and the nonce and how to use them, and
stays in the foreground: Ctrl-C (or SIGTERM) stops agentctl and every agent it started (see
:mod:`acpfsm.adapters.agentctl.local`). The nonce is one-shot: the first client trades it for
agentctl's bearer token, and later clients need that token.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

from acpfsm.adapters.acp.process import DEFAULT_INHERITED_ENV
from acpfsm.adapters.agentctl.local import (
    PACKAGE,
    VERSION,
    AgentctlUnavailable,
    LocalAgentctl,
    binary_path,
    default_cache_dir,
    ensure_agentctl,
)

__all__ = ["DESCRIPTION", "add_arguments", "local_agentctl", "run", "usage"]

DESCRIPTION = (
    f"Run kandev's agentctl ({PACKAGE}@{VERSION}, linux/amd64, fetched once with npm into "
    f"the user cache folder and checked against its SHA-256) on 127.0.0.1 with a fresh "
    f"bootstrap nonce; print the URL and the nonce for AgentctlExecutor and acpfsm conform. "
    f"Ctrl-C stops agentctl and every agent it started."
)


@contextlib.contextmanager
def local_agentctl(
    *,
    cache: Path | None = None,
    root: Path | None = None,
    port: int | None = None,
    inherit_all: bool = False,
    log_level: str = "info",
    echo: Callable[[str], None] = lambda text: None,
) -> Iterator[LocalAgentctl]:
    """A started :class:`LocalAgentctl`; leaving the block stops it and every agent it
    started. ``root`` (default: a temporary folder, removed after) holds its working
    directory and log; ``inherit_all`` gives agentctl (and so its agents) our whole
    environment instead of ``PATH``, ``HOME`` and ``LANG``."""
    if not binary_path(cache).is_file():
        echo(f"fetching {PACKAGE}@{VERSION} with npm into {cache or default_cache_dir()} …")
    binary = ensure_agentctl(cache)
    own = root is None
    folder = Path(tempfile.mkdtemp(prefix="acpfsm-agentctl-")) if root is None else root
    inherit = tuple(os.environ) if inherit_all else DEFAULT_INHERITED_ENV
    server = LocalAgentctl(binary, folder, port=port, log_level=log_level, inherit_env=inherit)
    try:
        server.start()
        yield server
    finally:
        left = server.stop()
        if left:
            echo(f"processes of agentctl still alive after SIGKILL: {left}")
        if own:
            shutil.rmtree(folder, ignore_errors=True)


def usage(url: str, nonce: str) -> str:
    """How to use a running agentctl (what ``acpfsm agentctl`` prints)."""
    return "\n".join(
        [
            f"url:   {url}",
            f"nonce: {nonce}",
            "",
            "The nonce is one-shot: the first client trades it for agentctl's bearer token.",
            "From Python:",
            "    from acpfsm.runtime import AgentctlExecutor, Runtime",
            (
                f'    rt = Runtime(executors={{"agentctl": AgentctlExecutor(url="{url}", '
                f'nonce="{nonce}")}})'
            ),
            '    # LaunchSpec(executor_id="agentctl", ...); the executor\'s .token holds the token',
            "Check an agent through it:",
            f"    acpfsm conform --agentctl {url} --nonce {nonce} -- AGENT_COMMAND [ARGS...]",
            "    (it saves the token it got to a private file and says where: run it again",
            "    with --token-file FILE)",
            "Ctrl-C stops agentctl and every agent it started.",
        ]
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--port",
        type=int,
        metavar="N",
        help="control port (default: a free one); the next ten ports are the instances'",
    )
    parser.add_argument(
        "--cache",
        metavar="DIR",
        help=f"where the binary is kept (default: {default_cache_dir()})",
    )
    parser.add_argument(
        "--root",
        metavar="DIR",
        help="agentctl's working directory and log (default: a temporary folder, removed "
        "when it stops)",
    )
    parser.add_argument(
        "--inherit-env",
        action="store_true",
        help="give agentctl, and so every agent it starts, this whole environment (default: "
        "PATH, HOME and LANG; credentials come with each launch)",
    )
    parser.add_argument(
        "--log-level", default="info", choices=("debug", "info", "warn", "error"),
        help="agentctl's log level (default info)",
    )  # fmt: skip


class _Stop(Exception):
    """SIGTERM: stop as on Ctrl-C."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Stop


def run(args: argparse.Namespace) -> int:
    """Exit status: 0 stopped by Ctrl-C/SIGTERM, 1 agentctl died, 2 it could not start."""

    def echo(text: str) -> None:
        print(f"acpfsm agentctl: {text}", file=sys.stderr, flush=True)

    # Ctrl-C and SIGTERM stop it even when it was started with them ignored or blocked (a
    # background job of a non-interactive shell starts with SIGINT ignored)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        with local_agentctl(
            cache=Path(args.cache) if args.cache else None,
            root=Path(args.root) if args.root else None,
            port=args.port,
            inherit_all=args.inherit_env,
            log_level=args.log_level,
            echo=echo,
        ) as server:
            assert server.process is not None
            try:  # a stop right after the announcement is a stop, not an interrupted start
                print(
                    f"agentctl {VERSION} running (pid {server.process.pid}, log "
                    f"{server.log_path})\n{usage(server.url, server.nonce)}",
                    flush=True,
                )
                while server.running():
                    time.sleep(0.2)
            except (KeyboardInterrupt, _Stop):
                echo("stopping agentctl and every agent it started")
                code = 0
            else:
                echo(f"agentctl exited with {server.process.returncode}:\n{server.log_tail()}")
                code = 1
    except AgentctlUnavailable as exc:
        echo(str(exc))
        return 2
    except (KeyboardInterrupt, _Stop):  # while fetching or starting
        echo("interrupted")
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    echo("stopped")
    return code
