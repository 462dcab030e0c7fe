"""agentctl on a laptop: ``acpfsm agentctl`` (fetch, run on loopback, Ctrl-C stops it and every
agent it started), ``acpfsm conform --agentctl auto``, and the one-shot nonce's token reused."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import anyio
import pytest

from acpfsm.adapters.agentctl import local
from acpfsm.adapters.agentctl.executor import AgentctlExecutor
from acpfsm.adapters.executor import AgentLaunch
from acpfsm.tools import agentctl as agentctl_cli
from acpfsm.tools import conform

from .agentctl_server import CACHE, AgentctlServer
from .helpers import TEST_CONFIG

pytestmark = pytest.mark.integration

REFERENCE = [sys.executable, "-m", "acpfsm.adapters.reference_agent", "--delay", "0.01"]


def marked(run_id: str) -> list[int]:
    """Live processes carrying a LocalAgentctl's marker."""
    pids = [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]
    return [
        pid
        for pid in pids
        if local._environ(pid).get(local.MARKER) == run_id and not local._is_zombie(pid)
    ]


def found(pattern: str, text: str) -> str:
    match = re.search(pattern, text, re.MULTILINE)
    assert match is not None, (pattern, text)
    return match.group(1)


def read_until(stream: IO[str] | None, pattern: str, limit: float = 60.0) -> list[str]:
    """Lines of a text stream up to the first matching ``pattern``."""
    assert stream is not None
    lines: list[str] = []
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if re.search(pattern, line):
            return lines
    raise AssertionError(f"no {pattern!r} in {lines}")


#: Execs the rest of its arguments with SIGINT ignored and SIGINT, SIGTERM blocked (both
#: survive exec), as a background job of a non-interactive shell, or a careless parent, would.
IGNORING_CTRL_C = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM}); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def start_cli(*, ignoring_ctrl_c: bool = False) -> tuple[subprocess.Popen[str], str, str, int]:
    """``acpfsm agentctl`` in a subprocess: (process, url, nonce, agentctl's pid)."""
    argv = [sys.executable, "-m", "acpfsm.tools.cli", "agentctl", "--cache", str(CACHE)]
    if ignoring_ctrl_c:
        argv = [sys.executable, "-c", IGNORING_CTRL_C, *argv]
    cli = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},  # SIGABRT dumps its stacks: see ended()
    )  # fmt: skip
    try:
        text = "\n".join(read_until(cli.stdout, r"^Ctrl-C stops"))
    except BaseException:
        cli.kill()
        cli.communicate()
        raise
    url, nonce = found(r"^url:\s+(\S+)$", text), found(r"^nonce:\s+(\S+)$", text)
    assert url.startswith("http://127.0.0.1:")
    assert f'AgentctlExecutor(url="{url}", nonce="{nonce}")' in text
    assert f"acpfsm conform --agentctl {url} --nonce {nonce} --" in text
    return cli, url, nonce, int(found(r"running \(pid (\d+)", text))


def ended(cli: subprocess.Popen[str], within: float) -> tuple[int | None, str]:
    """The CLI's exit status (None when it did not exit ``within`` seconds) and its stderr;
    one that hangs is made to dump its threads' stacks into that stderr, then killed."""
    try:
        code: int | None = cli.wait(within)
    except subprocess.TimeoutExpired:
        code = None
        cli.send_signal(signal.SIGABRT)
        try:
            cli.wait(10)
        except subprocess.TimeoutExpired:
            cli.kill()
    return code, cli.communicate()[1]


def left_behind(run_id: str) -> list[int]:
    """The processes of that agentctl still alive (it and its agents), then killed so that a
    failed test leaves nothing running."""
    left = marked(run_id)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return left


def test_the_cli_runs_agentctl_and_ctrl_c_stops_it_and_its_agents(
    agentctl_binary: Path, tmp_path: Path
) -> None:
    cli, url, nonce, pid = start_cli()
    run_id = local._environ(pid)[local.MARKER]
    (tmp_path / "ws").mkdir()
    launch = AgentLaunch(
        execution_id="laptop-1", session_id="laptop-1", agent_id="reference",
        command=tuple(REFERENCE), workspace=str(tmp_path / "ws"),
    )  # fmt: skip

    async def connect_then_ctrl_c() -> tuple[int | None, str]:
        executor = AgentctlExecutor(url=url, nonce=nonce, config=TEST_CONFIG)
        with anyio.fail_after(150):  # the connection, then the exit (and a hang's stacks)
            async with executor.open(launch) as transport:
                await transport.initialize()
                assert executor.token
                assert [p for p in marked(run_id) if p != pid], "the agent is running"
                masks.append(signals_of(cli.pid))
                cli.send_signal(signal.SIGINT)  # Ctrl-C
                return await anyio.to_thread.run_sync(ended, cli, 60.0)

    masks: list[str] = []
    try:
        code, err = anyio.run(connect_then_ctrl_c, backend="trio")
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
        left = left_behind(run_id)
    assert code == 0, f"{masks}\n{err}"
    assert left == []  # agentctl and the agent it started are gone
    assert "stopped" in err, err


def signals_of(pid: int) -> str:
    """The ignored, blocked and caught signal masks of process ``pid``."""
    status = Path(f"/proc/{pid}/status").read_text()
    return " ".join(re.findall(r"^Sig(?:Ign|Blk|Cgt):\s+\S+", status, re.MULTILINE))


def test_sigterm_stops_it_too(agentctl_binary: Path) -> None:
    cli, _, _, pid = start_cli()
    run_id = local._environ(pid)[local.MARKER]
    try:
        cli.terminate()
        code, err = ended(cli, 60.0)
    finally:
        left = left_behind(run_id)
    assert code == 0, err
    assert left == []


def test_ctrl_c_stops_it_when_started_with_ctrl_c_ignored_and_blocked(
    agentctl_binary: Path,
) -> None:
    """A background job of a non-interactive shell starts with SIGINT ignored; a parent may
    leave signals blocked: Ctrl-C (and SIGTERM) still stop it."""
    cli, _, _, pid = start_cli(ignoring_ctrl_c=True)
    run_id = local._environ(pid)[local.MARKER]
    try:
        masks = signals_of(cli.pid)
        cli.send_signal(signal.SIGINT)
        code, err = ended(cli, 60.0)
    finally:
        left_behind(run_id)
    assert code == 0, f"{masks}\n{err}"
    assert "stopped" in err, err


def test_conform_saves_the_token_its_nonce_got_for_the_next_run(
    agentctl: AgentctlServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The nonce is one-shot: the first run trades it and saves the token to a private file
    (never on the terminal, in a log or in a report); a second run with the nonce fails, one
    with the token file (or the token) passes."""
    base = ["--timeout", "10", "--agentctl", agentctl.url]
    saved = tmp_path / "private" / "token"
    args = [*base, "--nonce", agentctl.nonce, "--token-file", str(saved), "--", *REFERENCE]
    assert conform.main(args) == 0
    captured = capsys.readouterr()
    assert f"run again with --token-file {saved}" in captured.err
    token = saved.read_text().strip()
    assert token and token not in captured.out + captured.err
    assert saved.stat().st_mode & 0o777 == 0o600
    assert saved.parent.stat().st_mode & 0o777 == 0o700
    agentctl.adopt_token(token)
    assert agentctl.instances() == []

    assert conform.main([*base, "--nonce", agentctl.nonce, "--", *REFERENCE]) == 1
    assert "403" in capsys.readouterr().out  # the nonce is spent

    assert conform.main(["--json", *base, "--token-file", str(saved), "--", *REFERENCE]) == 0
    assert "agentctl_token" not in capsys.readouterr().out  # a secret is never in a report


def test_conform_agentctl_auto_starts_and_stops_its_own(
    agentctl_binary: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cache = tmp_path / "xdg" / "acpfsm" / "agentctl"
    cache.mkdir(parents=True)
    (cache / agentctl_binary.name).symlink_to(agentctl_binary)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    started: list[local.LocalAgentctl] = []

    class Recorded(local.LocalAgentctl):
        def start(self, *, ready_timeout: float = 15.0) -> None:
            started.append(self)
            super().start(ready_timeout=ready_timeout)

    monkeypatch.setattr(agentctl_cli, "LocalAgentctl", Recorded)
    assert conform.main(["--timeout", "10", "--agentctl", "auto", "--", *REFERENCE]) == 0
    captured = capsys.readouterr()
    (server,) = started
    assert f"started agentctl at {server.url}" in captured.err
    assert f"via agentctl {server.url}" in captured.out
    assert "agentctl token" not in captured.out  # that agentctl is gone
    assert server.processes() == []
    assert not server.root.exists()  # its temporary folder is removed

    assert conform.main(["--agentctl", "auto", "--token", "t", "--", *REFERENCE]) == 2
    assert "starts its own agentctl" in capsys.readouterr().err


def test_the_cache_refuses_a_binary_that_is_not_the_pinned_one(
    agentctl_binary: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    fake = local.binary_path(cache)
    shutil.copyfile(agentctl_binary, fake)
    with fake.open("r+b") as handle:
        handle.seek(1000)
        handle.write(b"\x00tampered")
    fake.chmod(0o755)
    with pytest.raises(local.AgentctlUnavailable, match="not the pinned"):
        local.ensure_agentctl(cache)
    shutil.copyfile(agentctl_binary, fake)
    assert local.ensure_agentctl(cache) == fake


def test_without_npm_the_reason_is_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(local.AgentctlUnavailable, match="npm is not installed"):
        local.ensure_agentctl(tmp_path / "empty-cache")


def test_the_default_cache_is_the_user_cache_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere/cache")
    assert local.default_cache_dir() == Path("/somewhere/cache/acpfsm/agentctl")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert local.default_cache_dir() == Path.home() / ".cache" / "acpfsm" / "agentctl"
    assert local.binary_path(Path("/c")) == Path(f"/c/agentctl-linux-amd64-{local.VERSION}")


def test_agentctl_gets_a_minimal_environment(
    agentctl_binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """agentctl hands its environment to every agent: by default it gets PATH, HOME, LANG."""
    monkeypatch.setenv("ACPFSM_TEST_UNLISTED_SECRET", "x")
    monkeypatch.setenv("AGENTCTL_PORT", "1")  # never ours to pass on
    with local.LocalAgentctl(agentctl_binary, tmp_path / "a") as server:
        assert server.process is not None
        seen = local._environ(server.process.pid)
    assert "ACPFSM_TEST_UNLISTED_SECRET" not in seen
    assert seen["AGENTCTL_PORT"] == str(server.port)
    assert seen["AGENTCTL_LISTEN_HOST"] == "127.0.0.1"
    assert seen["PATH"] == os.environ["PATH"]
