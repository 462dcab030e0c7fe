"""``acpfsm serve``: a Runtime as a service over NATS (:mod:`acpfsm.runtime.service`).

::

    ACPFSM_NATS_USER=acpfsm ACPFSM_NATS_PASSWORD=… acpfsm serve --nats nats://10.0.0.5:4222 \\
        --store postgresql://acpfsm@db/acpfsm --config serve.toml

The config file (TOML, or JSON when it ends in ``.json``) names the agent profiles
(``[[profiles]]``: :class:`~acpfsm.runtime.AgentProfile`'s fields), the embedded reference
agent (``reference_agent = ["--delay", "0.01"]``), the executors (``[executors.NAME]`` with
``kind = "agentctl"``, ``url``, and ``token_env``: the name of the environment variable
holding its token) and the timeouts (``[timeouts]``). Credentials come from the environment
(``ACPFSM_NATS_USER``/``ACPFSM_NATS_PASSWORD``, ``ACPFSM_NATS_TOKEN``) or files
(``--nats-nkey-file``, ``--nats-creds``) and TLS from ``--tls-ca``/``--tls-cert``/``--tls-key``;
none is ever printed or logged. Without credentials the process refuses to start unless it is
told ``--insecure-local``. When it serves it prints one JSON line (``{"serving": …}``) on
stdout; SIGTERM or Ctrl-C stop it (its executions are detached with a store, as a Runtime's
exit does).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import ssl
import sys
import uuid
from pathlib import Path
from typing import Any, Literal

import anyio
import msgspec

from acpfsm.adapters.errors import AcpfsmError

__all__ = ["DESCRIPTION", "ServeConfig", "ServeRefused", "add_arguments", "run"]

DESCRIPTION = (
    "Run a Runtime as a service: answer launch, prompt, steer, cancel, stop, get, list and "
    "set_mcp_mode over NATS request/reply, publish every execution's events to JetStream. "
    "Exit 0 stopped, 2 refused to start (no credentials without --insecure-local, a bad "
    "config, NATS or the store out of reach), 3 lost its lease in a pool."
)


class ExecutorConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    kind: Literal["stdio", "agentctl"]
    url: str = ""
    token_env: str = ""
    nonce_env: str = ""


class ServeConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    profiles: list[Any] = []
    reference_agent: list[str] | None = None
    executors: dict[str, ExecutorConfig] = {}
    timeouts: dict[str, float] = {}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nats", action="append", required=True, metavar="URL",
                        help="a NATS server (repeat for a cluster)")  # fmt: skip
    parser.add_argument("--store", required=True, metavar="PATH|DSN",
                        help="a SQLite file, or a postgresql:// DSN")  # fmt: skip
    parser.add_argument(
        "--namespace",
        help="the PostgreSQL namespace (default: acpfsm; with --pool: a new one per process)",
    )
    parser.add_argument(
        "--pool",
        action="store_true",
        help="join the pool of serve processes on this PostgreSQL store: share launches, "
        "take over the executions of a member whose lease ran out",
    )
    parser.add_argument("--lease", type=float, default=10.0, metavar="SECONDS",
                        help="with --pool: how long a silent member keeps its executions")  # fmt: skip
    parser.add_argument("--member", help="with --pool: this process's name (default: unique)")
    parser.add_argument("--config", metavar="FILE", help="profiles, executors, timeouts")
    parser.add_argument("--backend", choices=("trio", "asyncio"), default="trio")
    parser.add_argument("--nats-nkey-file", metavar="FILE", help="an nkey seed file")
    parser.add_argument("--nats-creds", metavar="FILE", help="a NATS credentials file")
    parser.add_argument("--tls-ca", metavar="FILE")
    parser.add_argument("--tls-cert", metavar="FILE")
    parser.add_argument("--tls-key", metavar="FILE")
    parser.add_argument(
        "--insecure-local",
        action="store_true",
        help="start without NATS credentials (a NATS server on this host, for development)",
    )


class ServeRefused(AcpfsmError):
    """``acpfsm serve`` will not start (no credentials, a bad config): the message says why."""


def _connect_options(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {}
    user, password = os.environ.get("ACPFSM_NATS_USER"), os.environ.get("ACPFSM_NATS_PASSWORD")
    if user:
        options["user"], options["password"] = user, password or ""
    if token := os.environ.get("ACPFSM_NATS_TOKEN"):
        options["token"] = token
    if args.nats_nkey_file:
        options["nkeys_seed"] = args.nats_nkey_file
    if args.nats_creds:
        options["user_credentials"] = args.nats_creds
    if args.tls_ca or args.tls_cert:
        context = ssl.create_default_context(cafile=args.tls_ca)
        if args.tls_cert:
            context.load_cert_chain(args.tls_cert, args.tls_key)
        options["tls"] = context
    if not options and not args.insecure_local:
        raise ServeRefused(
            "no NATS credentials (ACPFSM_NATS_USER/ACPFSM_NATS_PASSWORD, ACPFSM_NATS_TOKEN, "
            "--nats-nkey-file, --nats-creds or TLS): refusing to serve without them; pass "
            "--insecure-local for a NATS server on this host"
        )
    return options


def _load_config(path: str | None) -> ServeConfig:
    if path is None:
        return ServeConfig()
    data = Path(path).read_bytes()
    try:
        if path.endswith(".json"):
            return msgspec.json.decode(data, type=ServeConfig)
        return msgspec.toml.decode(data, type=ServeConfig)
    except msgspec.DecodeError as exc:
        raise ServeRefused(f"the config {path} is not valid: {exc}") from None


def _runtime_parts(config: ServeConfig) -> tuple[list[Any], dict[str, Any], Any]:
    from acpfsm.runtime import AgentctlExecutor, AgentProfile, StdioExecutor, Timeouts
    from acpfsm.runtime import reference_profile as reference

    try:
        profiles = [msgspec.convert(p, AgentProfile) for p in config.profiles]
        timeouts = msgspec.convert(config.timeouts, Timeouts)
    except msgspec.ValidationError as exc:
        raise ServeRefused(f"the config is not valid: {exc}") from None
    if config.reference_agent is not None:
        profiles.append(reference(*config.reference_agent))
    executors: dict[str, Any] = {}
    for name, spec in config.executors.items():
        if spec.kind == "stdio":
            executors[name] = StdioExecutor()
        else:
            executors[name] = AgentctlExecutor(
                url=spec.url,
                token=os.environ.get(spec.token_env, "") if spec.token_env else "",
                nonce=os.environ.get(spec.nonce_env, "") if spec.nonce_env else "",
            )
    return profiles, executors, timeouts


def _is_postgres(store: str) -> bool:
    return store.startswith(("postgresql://", "postgres://")) or "host=" in store


def _store(args: argparse.Namespace, namespace: str) -> Any:
    from acpfsm.runtime.store import PostgresStore, SqliteStore

    if _is_postgres(args.store):
        return PostgresStore(args.store, namespace=namespace)
    return SqliteStore(args.store)


async def _serve(args: argparse.Namespace, options: dict[str, Any], config: ServeConfig) -> None:
    from acpfsm.runtime import Runtime
    from acpfsm.runtime.bus import NatsBus
    from acpfsm.runtime.service import Service
    from acpfsm.runtime.service.pool import Pool

    lost: list[BaseException] = []
    unique = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    namespace = args.namespace or (f"serve-{unique}" if args.pool else "acpfsm")
    async with NatsBus(args.nats, connect=options) as bus:

        def open_runtime(namespace: str) -> Runtime:
            profiles, executors, timeouts = _runtime_parts(config)
            return Runtime(
                profiles=profiles,
                executors=executors,
                timeouts=timeouts,
                store=_store(args, namespace),
                bus=bus,
            )

        async with open_runtime(namespace) as rt, anyio.create_task_group() as tg:
            service = Service(rt, bus, member=args.member or unique)
            await tg.start(service.run)
            if args.pool:
                pool = Pool(
                    service, args.store, member=args.member or unique, namespace=namespace,
                    open_runtime=open_runtime, lease=args.lease,
                )  # fmt: skip
                await tg.start(_fenced, pool, tg.cancel_scope, lost)
            line = {"serving": service.prefix, "pid": os.getpid(), "namespace": namespace}
            print(json.dumps(line), flush=True)
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    break
            tg.cancel_scope.cancel()
    if lost:
        raise lost[0]


async def _fenced(
    pool: Any, scope: anyio.CancelScope, lost: list[BaseException], *, task_status: Any
) -> None:
    """The pool; its LeaseLost stops the whole process (leaving the Runtimes detaches every
    execution: the member that took them over drives them)."""
    from acpfsm.runtime.service.pool import LeaseLost

    try:
        await pool.run(task_status=task_status)
    except LeaseLost as exc:
        lost.append(exc)
        scope.cancel()


def run(args: argparse.Namespace) -> int:
    from acpfsm.runtime.service.pool import LeaseLost

    try:
        options = _connect_options(args)
        config = _load_config(args.config)
        if args.pool and not _is_postgres(args.store):
            raise ServeRefused("--pool needs a PostgreSQL store (--store postgresql://…)")
        anyio.run(_serve, args, options, config, backend=args.backend)
    except LeaseLost as exc:
        print(f"acpfsm serve: LeaseLost: {exc}", file=sys.stderr, flush=True)
        return 3
    except (ServeRefused, OSError) as exc:  # a refusal: its message only
        print(f"acpfsm serve: {exc}", file=sys.stderr, flush=True)
        return 2
    except AcpfsmError as exc:
        print(f"acpfsm serve: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        return 0
    return 0
