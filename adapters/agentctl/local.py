"""kandev's agentctl on this machine: fetch the pinned binary, run it on loopback, stop it and
every agent it started.

Theory of operation
-------------------
**The binary.** kandev publishes agentctl inside the npm package
``@kdlbs/runtime-linux-x64`` (a static linux/amd64 executable). :func:`ensure_agentctl`
fetches the pinned version once with ``npm pack`` (no install, no package scripts), extracts
only ``package/bin/agentctl-linux-amd64``, checks its SHA-256 against :data:`SHA256` and
keeps it in a cache folder (:func:`default_cache_dir`: ``$XDG_CACHE_HOME/acpfsm/agentctl``,
else ``~/.cache/acpfsm/agentctl``). The digest is checked again every time the cached file is
used, so a damaged or replaced file is refused, not run. A file lock makes parallel
processes fetch once. Offline, put the binary at :func:`binary_path` yourself.

**The process.** :class:`LocalAgentctl` runs one agentctl: bound to ``127.0.0.1``, a fresh
random bootstrap nonce (``AGENTCTL_BOOTSTRAP_NONCE``; agentctl trades it once for its bearer
token), a control port and a block of instance ports (free ones unless given), its own
working directory, and in its own process group. Its environment is the caller's
``PATH``, ``HOME`` and ``LANG`` (``inherit_env``) plus ``env``: agentctl passes its
environment on to every agent, so credentials reach an agent only through the launch (the
runtime's profile ``inherit_env``), as with the stdio executor. Every process started gets a
marker variable, so :meth:`LocalAgentctl.stop` finds and kills agentctl, its process group
and every agent it started, even agents in process groups of their own (agentctl gives each
agent one) or orphaned by a crashed agentctl. The marker is read from ``/proc``, which the
pinned binary's platform (Linux) has.

Every failure (no npm, no registry, a wrong digest, a port taken, an agentctl that exits or
never becomes healthy) raises :class:`AgentctlUnavailable` with the reason.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import platform
import secrets
import shutil
import signal
import socket
import subprocess
import tarfile
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import httpx

from ..acp.process import DEFAULT_INHERITED_ENV
from ..errors import AcpfsmError, ExceptionMapping, map_exceptions

__all__ = [
    "MARKER",
    "PACKAGE",
    "SHA256",
    "VERSION",
    "AgentctlUnavailable",
    "LocalAgentctl",
    "binary_path",
    "default_cache_dir",
    "ensure_agentctl",
    "free_port_block",
]

PACKAGE = "@kdlbs/runtime-linux-x64"
VERSION = "0.95.1"
MEMBER = "package/bin/agentctl-linux-amd64"
SHA256 = "604234559349517fd4fb818a8f8d898c05e9c9d89df93cdae212c8a86cbcd27e"
"""SHA-256 of ``agentctl-linux-amd64`` in ``@kdlbs/runtime-linux-x64@0.95.1``."""
MARKER = "ACPFSM_AGENTCTL_RUN"
"""The variable every process a :class:`LocalAgentctl` starts carries (its run id)."""
NPM_TIMEOUT = 150.0


class AgentctlUnavailable(AcpfsmError):
    """agentctl could not be fetched, started or kept running (the message says why)."""


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/acpfsm/agentctl``, else ``~/.cache/acpfsm/agentctl``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "acpfsm" / "agentctl"


def binary_path(cache: Path | None = None) -> Path:
    """Where the pinned binary is kept in ``cache`` (default :func:`default_cache_dir`)."""
    return (cache or default_cache_dir()) / f"agentctl-linux-amd64-{VERSION}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_platform() -> None:
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise AgentctlUnavailable(
            f"the pinned agentctl is linux/amd64; this machine is "
            f"{platform.system()}/{platform.machine()}"
        )


def _fetch_once(npm: str, workdir: Path, target: Path) -> None:
    """``npm pack`` the package into ``workdir`` and install the checked binary at
    ``target``."""
    slow: ExceptionMapping = {
        subprocess.TimeoutExpired: lambda exc: AgentctlUnavailable(
            f"npm pack took more than {NPM_TIMEOUT:g}s"
        )
    }
    with map_exceptions(slow):
        result = subprocess.run(
            [npm, "pack", f"{PACKAGE}@{VERSION}", "--pack-destination", str(workdir),
             "--cache", str(workdir / "npm-cache"), "--no-audit", "--no-fund"],
            capture_output=True, text=True, timeout=NPM_TIMEOUT, check=False, cwd=workdir,
        )  # fmt: skip
    if result.returncode != 0:
        raise AgentctlUnavailable(
            f"`npm pack {PACKAGE}@{VERSION}` failed (exit {result.returncode}): "
            f"{(result.stderr or result.stdout).strip()[-800:]}"
        )
    tarballs = sorted(workdir.glob("*.tgz"))
    if not tarballs:
        raise AgentctlUnavailable(f"`npm pack` produced no tarball in {workdir}")
    unpacked = workdir / "agentctl"
    with tarfile.open(tarballs[0], "r:gz") as archive:
        missing: ExceptionMapping = {
            KeyError: lambda exc: AgentctlUnavailable(f"{tarballs[0].name} has no {MEMBER}")
        }
        with map_exceptions(missing):
            member = archive.getmember(MEMBER)
        source = archive.extractfile(member)
        if source is None:
            raise AgentctlUnavailable(f"{MEMBER} in {tarballs[0].name} is not a file")
        with source, unpacked.open("wb") as sink:
            shutil.copyfileobj(source, sink, 1 << 20)
    digest = _sha256(unpacked)
    if digest != SHA256:
        raise AgentctlUnavailable(f"{MEMBER} has SHA-256 {digest}, expected {SHA256}")
    unpacked.chmod(0o755)
    os.replace(unpacked, target)


def _checked(binary: Path) -> bool:
    """The cached binary is there, executable and the pinned one."""
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        return False
    digest = _sha256(binary)
    if digest != SHA256:
        raise AgentctlUnavailable(
            f"{binary} has SHA-256 {digest}, not the pinned {SHA256}: remove it to fetch "
            f"{PACKAGE}@{VERSION} again"
        )
    return True


def ensure_agentctl(cache: Path | None = None) -> Path:
    """The pinned agentctl binary in ``cache`` (default :func:`default_cache_dir`), fetched
    with npm on first use (retried once, bounded in time), its digest checked."""
    _check_platform()
    folder = cache or default_cache_dir()
    binary = binary_path(folder)
    unusable: ExceptionMapping = {
        OSError: lambda exc: AgentctlUnavailable(f"cannot use the cache folder {folder}: {exc}")
    }
    with map_exceptions(unusable):
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / ".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one download even with parallel processes
            if _checked(binary):
                return binary
            npm = shutil.which("npm")
            if npm is None:
                raise AgentctlUnavailable(
                    f"npm is not installed: it is needed once to fetch {PACKAGE}@{VERSION} "
                    f"into {folder} (install Node.js/npm, or put the binary at {binary})"
                )
            errors: list[str] = []
            for attempt in (1, 2):
                with tempfile.TemporaryDirectory(dir=folder, prefix="fetch-") as tmp:
                    try:
                        _fetch_once(npm, Path(tmp), binary)
                        return binary
                    except (AgentctlUnavailable, OSError, tarfile.TarError) as exc:
                        errors.append(f"attempt {attempt}: {exc}")
    raise AgentctlUnavailable(
        f"could not fetch {PACKAGE}@{VERSION} from the npm registry: " + " | ".join(errors)
    )


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_block(size: int) -> int:
    """The first port of ``size`` consecutive free loopback ports."""
    for _ in range(200):
        base = 20000 + secrets.randbelow(40000)
        if all(_port_free(base + i) for i in range(size)):
            return base
    raise AgentctlUnavailable("no block of free loopback ports found")


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    out: dict[str, str] = {}
    for entry in raw.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


class LocalAgentctl:
    """One agentctl process on loopback (see the module docstring). ``root`` holds its
    working directory and log; ``port`` is its control port (default: the first of a free
    block), followed by ``instance_ports`` instance ports."""

    def __init__(
        self,
        binary: Path,
        root: Path,
        *,
        port: int | None = None,
        instance_ports: int = 10,
        inherit_env: Sequence[str] = DEFAULT_INHERITED_ENV,
        env: Mapping[str, str] | None = None,
        log_level: str = "info",
    ) -> None:
        self.binary = binary
        self.root = root
        self.workdir = root / "workdir"
        base = port if port is not None else free_port_block(instance_ports + 1)
        self.port = base
        self.instance_base = base + 1
        self.instance_max = base + instance_ports
        self.nonce = secrets.token_hex(16)
        self.run_id = uuid.uuid4().hex
        self.log_path = root / "agentctl.log"
        self.inherit_env = tuple(inherit_env)
        self.env = dict(env or {})
        self.log_level = log_level
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _environment(self) -> dict[str, str]:
        env = {
            name: os.environ[name]
            for name in self.inherit_env
            if name in os.environ and not name.startswith("AGENTCTL_")
        }
        env.update(self.env)
        env.update(
            {
                "AGENTCTL_PORT": str(self.port),
                "AGENTCTL_INSTANCE_PORT_BASE": str(self.instance_base),
                "AGENTCTL_INSTANCE_PORT_MAX": str(self.instance_max),
                "AGENTCTL_WORKDIR": str(self.workdir),
                "AGENTCTL_BOOTSTRAP_NONCE": self.nonce,
                "AGENTCTL_LISTEN_HOST": "127.0.0.1",
                "AGENTCTL_LOG_LEVEL": self.log_level,
                "AGENTCTL_SHELL_ENABLED": "false",
                MARKER: self.run_id,
            }
        )
        return env

    def start(self, *, ready_timeout: float = 15.0) -> None:
        """Start agentctl and wait until ``/health`` answers."""
        if not _port_free(self.port):
            raise AgentctlUnavailable(f"port {self.port} on 127.0.0.1 is taken")
        cannot_start: ExceptionMapping = {
            OSError: lambda exc: AgentctlUnavailable(f"cannot start {self.binary}: {exc}")
        }
        with map_exceptions(cannot_start):
            self.workdir.mkdir(parents=True, exist_ok=True)
            with self.log_path.open("ab") as log:
                self.process = subprocess.Popen(
                    [str(self.binary)],
                    env=self._environment(),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    cwd=self.workdir,
                )
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AgentctlUnavailable(
                    f"agentctl exited at start with {self.process.returncode}: {self.log_tail()}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/health", timeout=1.0).status_code == 200:
                    return
            time.sleep(0.05)
        self.stop()
        raise AgentctlUnavailable(
            f"agentctl not healthy within {ready_timeout}s: {self.log_tail()}"
        )

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def processes(self) -> list[int]:
        """Every live process carrying this agentctl's marker: agentctl and its agents."""
        out: list[int] = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            if _environ(pid).get(MARKER) == self.run_id and not _is_zombie(pid):
                out.append(pid)
        return out

    def agents(self) -> list[int]:
        """The live agent processes (the marker without agentctl itself)."""
        own = self.process.pid if self.process is not None else -1
        return [pid for pid in self.processes() if pid != own]

    def kill(self) -> None:
        """SIGKILL agentctl alone (a crash): its agents are left for :meth:`stop`."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def _signal_group(self, sig: signal.Signals) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, sig)

    def stop(self, *, grace: float = 3.0) -> list[int]:
        """Stop agentctl (SIGTERM to its process group, SIGKILL after ``grace``) and kill
        every process it started. Returns the pids still alive after all that (empty when
        clean)."""
        if self.process is not None:
            if self.process.poll() is None:
                self._signal_group(signal.SIGTERM)
                try:
                    self.process.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    self._signal_group(signal.SIGKILL)
                    self.process.wait(timeout=10)
            self._signal_group(signal.SIGKILL)  # what is left of its group
        deadline = time.monotonic() + 5.0
        while True:
            left = self.processes()
            if not left or time.monotonic() > deadline:
                return left
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
