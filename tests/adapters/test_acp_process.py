"""Agent processes: own process group, controlled environment, stderr ring, escalating shutdown."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest

from acpfsm.adapters.acp.process import (
    AgentProcess,
    ShutdownPolicy,
    StderrRing,
    build_agent_env,
    open_agent_process,
)
from acpfsm.adapters.errors import TransportError

pytestmark = pytest.mark.both_backends

FAST = ShutdownPolicy(stdin_close_wait=0.3, term_wait=0.3, kill_wait=3.0, stderr_drain_wait=0.5)


def script(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def exists(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


async def wait_gone(pid: int, seconds: float = 5) -> None:
    """The group SIGKILL is delivered at once, but the orphan is reaped by whoever adopted it."""
    for _ in range(int(seconds / 0.02)):
        if not running(pid):
            return
        await anyio.sleep(0.02)
    raise AssertionError(f"process {pid} still running")


async def read_line(agent: AgentProcess) -> str:
    data = b""
    with anyio.fail_after(10):
        while not data.endswith(b"\n"):
            data += await agent.stdout.receive(1)
    return data.decode().strip()


async def test_spawn_in_own_group_with_controlled_env_and_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACPFSM_TEST_SECRET", "do-not-leak")
    code = """
        import json, os, sys
        line = sys.stdin.readline()
        print(json.dumps({"line": line.strip(), "cwd": os.getcwd(), "env": dict(os.environ),
                          "pgid": os.getpgid(0), "pid": os.getpid()}), flush=True)
    """
    async with open_agent_process(script(code), cwd=tmp_path, env={"EXTRA": "1"}) as agent:
        await agent.stdin.send(b"hello\n")
        import json

        info = json.loads(await read_line(agent))
        assert info["line"] == "hello"
        assert info["cwd"] == str(await anyio.Path(tmp_path).resolve())
        assert info["pid"] == agent.pid
        assert info["pgid"] == agent.pid == agent.pgid
        assert info["pgid"] != os.getpgid(0)
        env = info["env"]
        assert env["EXTRA"] == "1"
        assert "ACPFSM_TEST_SECRET" not in env
        assert set(env) - {"EXTRA", "PATH", "HOME", "LANG", "LC_CTYPE"} == set()
        assert env.get("PATH") == os.environ.get("PATH")
    assert agent.returncode == 0
    assert not exists(agent.pid)


def test_build_agent_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/bin")
    monkeypatch.setenv("HOME", "/home/x")
    monkeypatch.delenv("LANG", raising=False)
    monkeypatch.setenv("OTHER", "no")
    assert build_agent_env() == {"PATH": "/bin", "HOME": "/home/x"}
    assert build_agent_env({"A": "1", "HOME": "/w"}) == {"PATH": "/bin", "HOME": "/w", "A": "1"}
    assert build_agent_env({"A": "1"}, inherit_env=()) == {"A": "1"}
    assert build_agent_env(inherit_env=("OTHER",)) == {"OTHER": "no"}


def test_stderr_ring_keeps_the_tail_within_bounds() -> None:
    ring = StderrRing(max_bytes=50, max_lines=3)
    ring.feed(b"one\ntwo\nthr")
    assert ring.lines() == ["one", "two", "thr"]
    ring.feed(b"ee\nfour\nfive\n")
    assert ring.lines() == ["three", "four", "five"]
    ring.feed(b"x" * 200 + b"\n")
    assert ring.lines() == ["x" * 49]  # an overlong line keeps its end, within the byte bound
    ring.feed(b"tail without newline")
    ring.close()
    assert ring.lines()[-1] == "tail without newline"
    assert ring.tail(1) == "tail without newline"
    assert ring.tail(0) == ""
    assert ring.total_bytes == len(b"one\ntwo\nthree\nfour\nfive\n") + 201 + 20
    crlf = StderrRing()
    crlf.feed(b"a\r\n\r\nb\xff\n")
    assert crlf.lines() == ["a", "", "b\ufffd"]
    assert crlf.tail() == "a\nb\ufffd"


async def test_stderr_is_drained_into_the_ring(tmp_path: Path) -> None:
    code = """
        import sys
        for i in range(5000):
            sys.stderr.write(f"log line {i} " + "." * 40 + "\\n")
        sys.stderr.flush()
        print("done", flush=True)
        sys.stdin.read()
    """
    async with open_agent_process(script(code), cwd=tmp_path, shutdown=FAST) as agent:
        # 5000 lines (~280 KB) would fill a pipe: the drain task keeps the child unblocked
        assert await read_line(agent) == "done"
        await agent.aclose()
        lines = agent.stderr.lines()
        assert len(lines) == 200
        assert lines[-1].startswith("log line 4999 ")
        assert agent.stderr.total_bytes > 64 * 1024
        assert agent.returncode == 0


async def test_graceful_exit_on_stdin_eof(tmp_path: Path) -> None:
    code = """
        import sys
        sys.stdin.read()
        sys.stderr.write("bye\\n")
    """
    started = time.monotonic()
    async with open_agent_process(script(code), cwd=tmp_path, shutdown=FAST) as agent:
        pass
    assert agent.returncode == 0
    assert agent.describe_exit() == "agent process exited with code 0"
    assert agent.stderr.tail() == "bye"
    assert time.monotonic() - started < 2.5  # no escalation waits were needed
    assert not exists(agent.pid)


async def test_escalates_to_sigterm_for_the_group(tmp_path: Path) -> None:
    code = """
        import time
        print("ready", flush=True)
        while True:
            time.sleep(1)   # ignores stdin EOF (like codex-acp)
    """
    async with open_agent_process(script(code), cwd=tmp_path, shutdown=FAST) as agent:
        assert await read_line(agent) == "ready"
        code_ = await agent.aclose()
    assert code_ == -signal.SIGTERM
    assert agent.describe_exit() == "agent process killed by SIGTERM"
    assert not exists(agent.pid)


async def test_escalates_to_sigkill_when_sigterm_is_ignored(tmp_path: Path) -> None:
    code = """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ready", flush=True)
        while True:
            time.sleep(1)
    """
    started = time.monotonic()
    async with open_agent_process(script(code), cwd=tmp_path, shutdown=FAST) as agent:
        assert await read_line(agent) == "ready"
    assert agent.returncode == -signal.SIGKILL
    assert agent.describe_exit() == "agent process killed by SIGKILL"
    assert time.monotonic() - started < 5
    assert not exists(agent.pid)


async def test_no_orphan_survives_when_the_wrapper_exits(tmp_path: Path) -> None:
    # the wrapper exits on stdin EOF but leaves a helper that ignores SIGTERM
    code = """
        import subprocess, sys
        helper = subprocess.Popen([sys.executable, "-c",
            "import signal, time\\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
            "print('helper up', flush=True)\\n"
            "while True: time.sleep(1)"], stdout=subprocess.PIPE)
        helper.stdout.readline()
        print(helper.pid, flush=True)
        sys.stdin.read()
    """
    async with open_agent_process(script(code), cwd=tmp_path, shutdown=FAST) as agent:
        helper = int(await read_line(agent))
        assert running(helper)
    assert agent.returncode == 0
    await wait_gone(helper)


async def test_group_sigterm_reaches_a_helper_left_behind_by_the_wrapper(tmp_path: Path) -> None:
    # like codex-acp: the wrapper ignores stdin EOF; signalling only it would orphan the helper
    code = """
        import subprocess, sys, time
        helper = subprocess.Popen([sys.executable, "-c",
            "import time\\nprint('up', flush=True)\\nwhile True: time.sleep(1)"],
            stdout=subprocess.PIPE)
        helper.stdout.readline()
        print(helper.pid, flush=True)
        while True:
            time.sleep(1)
    """
    async with open_agent_process(script(code), cwd=tmp_path, shutdown=FAST) as agent:
        helper = int(await read_line(agent))
    assert agent.returncode == -signal.SIGTERM
    await wait_gone(helper)


async def test_shutdown_completes_when_the_caller_is_cancelled(tmp_path: Path) -> None:
    code = """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ready", flush=True)
        while True:
            time.sleep(1)
    """
    pid = 0
    with anyio.CancelScope() as scope:
        async with open_agent_process(script(code), cwd=tmp_path, shutdown=FAST) as agent:
            pid = agent.pid
            assert await read_line(agent) == "ready"
            scope.cancel()
            await anyio.sleep(10)
    assert scope.cancelled_caught
    assert agent.returncode == -signal.SIGKILL
    assert not exists(pid)


async def test_exit_details_after_a_crash(tmp_path: Path) -> None:
    code = """
        import sys
        sys.stderr.write("fatal: boom\\nsecond line\\n")
        sys.exit(3)
    """
    async with open_agent_process(script(code), cwd=tmp_path, shutdown=FAST) as agent:
        description, tail = await agent.wait_exit_details(5)
        assert description == "agent process exited with code 3"
        assert tail == "fatal: boom\nsecond line"
        assert agent.returncode == 3
    # concurrent and repeated close calls all return the same code
    assert await agent.aclose() == 3


async def test_spawn_failures_are_transport_errors(tmp_path: Path) -> None:
    with pytest.raises(TransportError, match="cannot start agent '/nonexistent/agent'"):
        async with open_agent_process(["/nonexistent/agent"], cwd=tmp_path):
            pass
    with pytest.raises(TypeError):
        async with open_agent_process("python -c pass", cwd=tmp_path):  # type: ignore[arg-type]
            pass
