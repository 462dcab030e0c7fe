"""A throwaway PostgreSQL cluster for tests and benchmarks: ``initdb`` into a temporary folder,
``pg_ctl start`` listening on a unix socket only, removed at the end.

::

    with throwaway_cluster() as cluster:
        store = PostgresStore(cluster.dsn)
        ...
        cluster.stop(); cluster.start()   # a server restart

The server binaries are Debian's (``postgresql``): ``initdb`` and ``pg_ctl`` found on ``PATH``
or under ``/usr/lib/postgresql/<version>/bin`` (the newest). PostgreSQL refuses to run as
root, so when this process is root the cluster belongs to an unprivileged user (``postgres``
when it exists, else ``nobody``): the folder is given to that user and the server programs run
as it. The server listens on no TCP port (``listen_addresses=''``), only on a socket in the
folder; authentication is ``trust`` for the socket's role ``acpfsm``. Durability settings are
those of a throwaway cluster (``fsync=off``): nothing here is meant to survive the machine.

Anything missing or failing raises :class:`ClusterUnavailable` with the reason (a test that
needs the cluster then fails with it: it never skips).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from acpfsm.adapters.errors import AcpfsmError

__all__ = ["ClusterUnavailable", "PostgresCluster", "find_binaries", "throwaway_cluster"]

ROLE = "acpfsm"


class ClusterUnavailable(AcpfsmError):
    """The throwaway PostgreSQL cluster could not be made or started (the message says why)."""


def find_binaries() -> Path:
    """The folder holding ``initdb`` and ``pg_ctl``: Debian's versioned folder (the newest
    version), else wherever ``initdb`` is on ``PATH``."""
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if versions:
        return versions[-1].parent
    initdb = shutil.which("initdb")
    if initdb is not None:
        return Path(initdb).resolve().parent
    raise ClusterUnavailable(
        "PostgreSQL's server programs (initdb, pg_ctl) are not installed: install Debian's "
        "postgresql package (`make test` does, when run as root)"
    )


def _run_as() -> str | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise ClusterUnavailable("running as root and no unprivileged user (postgres, nobody)")


class PostgresCluster:
    """One throwaway cluster in ``folder`` (see the module docstring)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.bin = find_binaries()
        self.user = _run_as()
        self.data = folder / "data"
        self.log = folder / "server.log"

    @property
    def dsn(self) -> str:
        """The libpq connection string: the socket folder, the ``postgres`` database."""
        return f"host={self.folder} port=5432 dbname=postgres user={ROLE}"

    def _run(self, *argv: str, timeout: float = 120.0) -> None:
        try:
            done = subprocess.run(
                [str(self.bin / argv[0]), *argv[1:]],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                user=self.user,
                cwd=self.folder,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise ClusterUnavailable(f"{argv[0]} could not run: {exc}") from None
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise ClusterUnavailable(
                f"{argv[0]} failed ({done.returncode}): {done.stderr.strip()[-2000:]}\n{log}"
            )

    def init(self) -> None:
        if self.user is not None:
            shutil.chown(self.folder, self.user)
        self._run(
            "initdb", "-D", str(self.data), "-U", ROLE, "-A", "trust", "-E", "UTF8", "--no-sync"
        )
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"\nlisten_addresses = ''\nunix_socket_directories = '{self.folder}'\n"
                "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
                "max_connections = 100\n"
            )

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")


@contextlib.contextmanager
def throwaway_cluster() -> Iterator[PostgresCluster]:
    """A started cluster in a new temporary folder; stopped and removed on leaving."""
    folder = Path(tempfile.mkdtemp(prefix="acpfsm-pg-"))
    try:
        cluster = PostgresCluster(folder)
        cluster.init()
        cluster.start()
        try:
            yield cluster
        finally:
            with contextlib.suppress(ClusterUnavailable):
                cluster.stop("immediate")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
