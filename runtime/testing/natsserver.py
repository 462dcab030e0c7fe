"""A throwaway NATS server with JetStream for tests and benchmarks: Debian's ``nats-server``
started with ``-js`` on a free loopback port, its store in a temporary folder, removed at the
end.

::

    with throwaway_nats() as server:
        async with NatsBus(server.url) as bus:
            ...
        server.kill(); server.start()   # killed mid-stream, then back (same store)

Anything missing or failing raises :class:`NatsUnavailable` with the reason (a test that
needs the server then fails with it: it never skips).
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from acpfsm.adapters.errors import AcpfsmError

__all__ = ["NatsServer", "NatsUnavailable", "free_port", "throwaway_nats"]


class NatsUnavailable(AcpfsmError):
    """The throwaway NATS server could not be started (the message says why)."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def find_binary() -> str:
    for candidate in ("nats-server", "/usr/bin/nats-server", "/usr/sbin/nats-server"):
        found = shutil.which(candidate)
        if found:
            return found
    raise NatsUnavailable(
        "nats-server is not installed: install Debian's nats-server package "
        "(`make test` does, when run as root)"
    )


class NatsServer:
    """One server on ``127.0.0.1:port`` with its JetStream store in ``folder``."""

    def __init__(self, folder: Path, *, user: str = "", password: str = "") -> None:
        self.folder = folder
        self.binary = find_binary()
        self.port = free_port()
        self.user = user
        self.password = password
        self.log = folder / "server.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> None:
        argv = [self.binary, "-js", "-a", "127.0.0.1", "-p", str(self.port)]
        argv += ["-sd", str(self.folder / "js"), "-l", str(self.log)]
        if self.user:
            argv += ["--user", self.user, "--pass", self.password]
        try:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
        except OSError as exc:
            raise NatsUnavailable(f"nats-server could not run: {exc}") from None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = (
                    self.process.stderr.read().decode(errors="replace")
                    if self.process.stderr
                    else ""
                )
                raise NatsUnavailable(f"nats-server exited ({self.process.returncode}): {err}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5),
            ):
                if "Server is ready" in self._log_text():
                    return
            time.sleep(0.02)
        self.kill()
        raise NatsUnavailable(
            f"nats-server did not start in {timeout} s: {self._log_text()[-2000:]}"
        )

    def _log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill(self) -> None:
        """SIGKILL: the server dies mid-stream."""
        self._end(signal.SIGKILL)

    def stop(self) -> None:
        self._end(signal.SIGTERM)

    def _end(self, sig: int) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(sig)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        if process.stderr is not None:
            process.stderr.close()


@contextlib.contextmanager
def throwaway_nats(*, user: str = "", password: str = "") -> Iterator[NatsServer]:
    """A started server in a new temporary folder; stopped and removed on leaving."""
    folder = Path(tempfile.mkdtemp(prefix="acpfsm-nats-"))
    try:
        server = NatsServer(folder, user=user, password=password)
        server.start()
        try:
            yield server
        finally:
            server.kill()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
