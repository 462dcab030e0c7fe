"""The real agentctl binary as a test peer (agentctl-protocol.md §6).

:func:`ensure_agentctl_binary` fetches the pinned npm package ``@kdlbs/runtime-linux-x64@0.95.1``
once into ``<repo>/.cache/agentctl/`` (``npm pack`` + extraction of only the static
``agentctl-linux-amd64``, checked against its SHA-256); without npm or the registry it raises
:class:`AgentctlUnavailable` with the reason (the tests then *fail*, they never skip).

:class:`AgentctlServer` runs one agentctl on loopback: a fresh bootstrap nonce, free ports,
``HOME``/``TMPDIR``/``AGENTCTL_WORKDIR`` in the test's tmp dir, ``AGENTCTL_LISTEN_HOST=127.0.0.1``.
Every process it starts inherits a marker variable, so :meth:`AgentctlServer.stop` finds and
kills agentctl *and every agent it started*, even agents orphaned by a killed agentctl.
"""

from __future__ import annotations

import contextlib
import os
import platform
import secrets
import shutil
import signal
import socket
import subprocess
import tarfile
import time
import uuid
from pathlib import Path

import httpx

from tests.fetch_cache import locked, sha256, two_attempts

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "agentctl"
PACKAGE = "@kdlbs/runtime-linux-x64"
VERSION = "0.95.1"
MEMBER = "package/bin/agentctl-linux-amd64"
SHA256 = "604234559349517fd4fb818a8f8d898c05e9c9d89df93cdae212c8a86cbcd27e"
BINARY = CACHE / f"agentctl-linux-amd64-{VERSION}"
NPM_TIMEOUT = 150.0
MARKER = "ACPFSM_AGENTCTL_TEST_RUN"


class AgentctlUnavailable(RuntimeError):
    """The agentctl binary could not be obtained (the reason says why)."""


def _fetch_once(npm: str, workdir: Path) -> None:
    """``npm pack`` the package into ``workdir`` and install the binary into the cache."""
    result = subprocess.run(
        [
            npm,
            "pack",
            f"{PACKAGE}@{VERSION}",
            "--pack-destination",
            str(workdir),
            "--cache",
            str(workdir / "npm-cache"),
            "--no-audit",
            "--no-fund",
        ],
        capture_output=True,
        text=True,
        timeout=NPM_TIMEOUT,
        check=False,
        cwd=workdir,
    )
    if result.returncode != 0:
        raise AgentctlUnavailable(
            f"`npm pack {PACKAGE}@{VERSION}` failed (exit {result.returncode}): "
            f"{(result.stderr or result.stdout).strip()[-800:]}"
        )
    tarballs = sorted(workdir.glob("*.tgz"))
    if not tarballs:
        raise AgentctlUnavailable(f"`npm pack` produced no tarball in {workdir}")
    target = workdir / "agentctl"
    with tarfile.open(tarballs[0], "r:gz") as archive:
        try:
            member = archive.getmember(MEMBER)
        except KeyError:
            raise AgentctlUnavailable(f"{tarballs[0].name} has no {MEMBER}") from None
        source = archive.extractfile(member)
        if source is None:
            raise AgentctlUnavailable(f"{MEMBER} in {tarballs[0].name} is not a file")
        with source, target.open("wb") as sink:
            shutil.copyfileobj(source, sink, 1 << 20)
    digest = sha256(target)
    if digest != SHA256:
        raise AgentctlUnavailable(f"{MEMBER} has SHA-256 {digest}, expected {SHA256}")
    target.chmod(0o755)
    os.replace(target, BINARY)


def ensure_agentctl_binary() -> Path:
    """The pinned agentctl binary, fetched on first use (retried once, bounded in time)."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise AgentctlUnavailable(
            f"the pinned agentctl is linux/amd64; this machine is "
            f"{platform.system()}/{platform.machine()}"
        )
    with locked(CACHE):
        if BINARY.is_file() and os.access(BINARY, os.X_OK):
            return BINARY
        npm = shutil.which("npm")
        if npm is None:
            raise AgentctlUnavailable(
                f"npm is not installed: it is needed once to fetch {PACKAGE}@{VERSION} into "
                f"{CACHE} (install Node.js/npm, or put the binary at {BINARY})"
            )
        errors = two_attempts(
            CACHE,
            lambda workdir: _fetch_once(npm, workdir),
            (AgentctlUnavailable, OSError, tarfile.TarError),
            f"npm pack took more than {NPM_TIMEOUT:g}s",
        )
        if not errors:
            return BINARY
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
    raise RuntimeError("no block of free loopback ports found")


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


class AgentctlServer:
    """One agentctl process on loopback (see the module docstring)."""

    def __init__(self, binary: Path, root: Path, *, instance_ports: int = 10) -> None:
        self.binary = binary
        self.root = root
        self.home = root / "home"
        self.temp = root / "tmp"
        self.workdir = root / "workdir"
        for folder in (self.home, self.temp, self.workdir):
            folder.mkdir(parents=True, exist_ok=True)
        base = free_port_block(instance_ports + 1)
        self.port = base
        self.instance_base = base + 1
        self.instance_max = base + instance_ports
        self.nonce = secrets.token_hex(16)
        self.run_id = uuid.uuid4().hex
        self.log_path = root / "agentctl.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._token = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, ready_timeout: float = 15.0) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTCTL_")}
        env.update(
            {
                "HOME": str(self.home),
                "TMPDIR": str(self.temp),
                "AGENTCTL_PORT": str(self.port),
                "AGENTCTL_INSTANCE_PORT_BASE": str(self.instance_base),
                "AGENTCTL_INSTANCE_PORT_MAX": str(self.instance_max),
                "AGENTCTL_WORKDIR": str(self.workdir),
                "AGENTCTL_BOOTSTRAP_NONCE": self.nonce,
                "AGENTCTL_LISTEN_HOST": "127.0.0.1",
                "AGENTCTL_LOG_LEVEL": "debug",
                "AGENTCTL_SHELL_ENABLED": "false",
                MARKER: self.run_id,
            }
        )
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [str(self.binary)],
                env=env,
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

    def token(self) -> str:
        """Trade the nonce for the token (once; a second handshake is refused)."""
        if not self._token:
            response = httpx.post(
                self.url + "/auth/handshake", json={"nonce": self.nonce}, timeout=10.0
            )
            response.raise_for_status()
            self._token = str(response.json()["token"])
        return self._token

    def adopt_token(self, token: str) -> None:
        """Record a token someone else obtained with our nonce (an executor's handshake)."""
        self._token = token

    def instances(self) -> list[dict[str, object]]:
        response = httpx.get(
            self.url + "/api/v1/instances",
            headers={"Authorization": f"Bearer {self.token()}"},
            timeout=10.0,
        )
        response.raise_for_status()
        data = response.json()  # v0.95.1: {"instances": [...]}; HEAD: a bare list
        items = data.get("instances") if isinstance(data, dict) else data
        return [dict(i) for i in items or [] if isinstance(i, dict)]

    def processes(self) -> list[int]:
        """Every live process carrying this server's marker: agentctl and its agents."""
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

    def stop(self, *, grace: float = 3.0) -> list[int]:
        """Stop agentctl (SIGTERM, then SIGKILL) and kill every process it started. Returns
        the pids that were still alive after all that (empty when clean)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        deadline = time.monotonic() + 5.0
        while True:
            left = self.processes()
            if not left or time.monotonic() > deadline:
                return left
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
