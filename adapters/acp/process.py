"""Agent processes: spawned in their own process group, shut down without leaving anything behind.

* **Spawn** (:func:`open_agent_process`): ``anyio.open_process`` with an explicit argv (never
  a shell), ``start_new_session=True`` (the agent leads a new process group, so one signal
  reaches its helpers), the workspace as ``cwd`` and a controlled environment: by default
  only ``PATH``, ``HOME`` and ``LANG`` are taken from our own environment
  (:data:`DEFAULT_INHERITED_ENV`), then the caller's ``env`` is laid over them. Pass
  ``inherit_env=()`` for an environment made only of ``env``.
* **stderr** is drained by a task into a :class:`StderrRing` (last 64 KiB and 200 lines by
  default) that errors quote; an agent that logs a lot never blocks on a full pipe. The values
  of the agent's secret-looking environment variables are masked in what the ring gives back
  (:mod:`acpfsm.adapters.redaction`), so an agent that prints its credentials does not get
  them into our errors, events or logs.
* **Shutdown** (:meth:`AgentProcess.aclose`) escalates with bounded waits
  (:class:`ShutdownPolicy`): close stdin → wait → ``SIGTERM`` to the whole group → wait →
  ``SIGKILL`` to the group → wait. Once the direct child has exited, the group gets a final
  ``SIGKILL`` so no helper survives as an orphan (codex-acp's node wrapper leaves its Rust
  binary behind when only the wrapper is signalled), and the child is reaped (no zombie).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Final

import anyio
import anyio.abc
import msgspec

from ..errors import ExceptionMapping, TransportError, map_exceptions
from ..redaction import NO_REDACTION, Redactor, secret_values

__all__ = [
    "DEFAULT_INHERITED_ENV",
    "DEFAULT_SHUTDOWN",
    "AgentProcess",
    "ShutdownPolicy",
    "StderrRing",
    "build_agent_env",
    "open_agent_process",
]

log = logging.getLogger(__name__)

DEFAULT_INHERITED_ENV: Final = ("PATH", "HOME", "LANG")


def build_agent_env(
    env: Mapping[str, str] | None = None,
    *,
    inherit_env: Sequence[str] = DEFAULT_INHERITED_ENV,
) -> dict[str, str]:
    """The agent's environment: ``inherit_env`` names copied from ours (when set), then ``env``."""
    result = {name: os.environ[name] for name in inherit_env if name in os.environ}
    if env:
        result.update(env)
    return result


class ShutdownPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """Bounds (seconds) of each shutdown step; tests pass small ones."""

    stdin_close_wait: float = 2.0
    term_wait: float = 2.0
    kill_wait: float = 2.0
    stderr_drain_wait: float = 0.5


DEFAULT_SHUTDOWN: Final = ShutdownPolicy()


class StderrRing:
    """The last ``max_bytes`` / ``max_lines`` of a byte stream, split into lines."""

    def __init__(
        self, max_bytes: int = 64 * 1024, max_lines: int = 200, *, redact: Redactor = NO_REDACTION
    ) -> None:
        self.max_bytes: Final = max_bytes
        self.max_lines: Final = max_lines
        self._redact = redact
        self._lines: deque[bytes] = deque()
        self._size = 0
        self._partial = bytearray()
        self.total_bytes = 0

    def feed(self, data: bytes) -> None:
        self.total_bytes += len(data)
        self._partial += data
        *complete, rest = bytes(self._partial).split(b"\n")
        self._partial = bytearray(rest[-self.max_bytes :])
        for line in complete:
            self._push(line)

    def close(self) -> None:
        """Flush an unterminated last line."""
        if self._partial:
            self._push(bytes(self._partial))
            self._partial.clear()

    def _push(self, line: bytes) -> None:
        keep = max(self.max_bytes - 1, 0)  # the newest line always fits, newline included
        line = line.rstrip(b"\r")[-keep:] if keep else b""
        self._lines.append(line)
        self._size += len(line) + 1
        while self._lines and (len(self._lines) > self.max_lines or self._size > self.max_bytes):
            self._size -= len(self._lines.popleft()) + 1

    def lines(self) -> list[str]:
        """The kept lines, decoded, with the agent's secrets masked (:mod:`..redaction`)."""
        out = [line.decode("utf-8", "replace") for line in self._lines]
        if self._partial:
            out.append(self._partial.decode("utf-8", "replace"))
        return [self._redact(line) for line in out] if self._redact else out

    def tail(self, max_lines: int | None = None) -> str:
        lines = [line for line in self.lines() if line.strip()]
        if max_lines is not None:
            lines = lines[-max_lines:] if max_lines > 0 else []
        return "\n".join(lines)


class AgentProcess:
    """A running agent. ``stdin``/``stdout`` are the ACP byte streams; stderr is in :attr:`stderr`."""

    def __init__(
        self,
        process: anyio.abc.Process,
        argv: Sequence[str],
        *,
        stderr: StderrRing,
        shutdown: ShutdownPolicy,
    ) -> None:
        self._process = process
        self.argv: Final = tuple(argv)
        self.pid: Final = process.pid
        self.pgid: Final = process.pid  # start_new_session: the child leads its own group
        self.stderr: Final = stderr
        self.shutdown_policy: Final = shutdown
        self.stderr_drained = anyio.Event()
        self.exited = anyio.Event()
        self._closing = False
        self._shutdown_done = anyio.Event()
        assert process.stdin is not None and process.stdout is not None
        self.stdin: Final[anyio.abc.ByteSendStream] = process.stdin
        self.stdout: Final[anyio.abc.ByteReceiveStream] = process.stdout

    @property
    def returncode(self) -> int | None:
        """The exit code once the child has exited (reading it may reap the child)."""
        code = self._process.returncode
        if code is not None:
            self.exited.set()
        return code

    def describe_exit(self) -> str:
        """``agent process exited with code N`` / ``… killed by SIGTERM`` / ``… still running``."""
        code = self.returncode
        if code is None:
            return "agent process still running"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"agent process killed by {name}"
        return f"agent process exited with code {code}"

    async def wait(self) -> int:
        """Wait for the direct child to exit (cancellable) and reap it."""
        code = await self._process.wait()
        self.exited.set()
        return code

    async def wait_exit_details(self, grace: float) -> tuple[str, str]:
        """After the peer hung up: wait up to ``grace`` seconds for the exit and the stderr
        drain, then return ``(describe_exit(), stderr tail)`` for error messages."""
        with anyio.move_on_after(grace):
            await self.wait()
            await self.stderr_drained.wait()
        return self.describe_exit(), self.stderr.tail(20)

    def _signal_group(self, sig: signal.Signals) -> bool:
        try:
            os.killpg(self.pgid, sig)
        except ProcessLookupError:
            return False
        except PermissionError:  # the group id was reused by someone else's process
            return False
        return True

    async def _wait_for(self, seconds: float) -> bool:
        with anyio.move_on_after(seconds):
            await self.wait()
        return self.returncode is not None

    async def aclose(self) -> int | None:
        """Escalating shutdown (see module docstring); shielded, every wait bounded.
        Returns the exit code (negative: killed by that signal) or ``None`` if the child
        outlived even ``SIGKILL`` within the bound (then it is not reaped)."""
        with anyio.CancelScope(shield=True):
            if self._closing:
                await self._shutdown_done.wait()
            else:
                self._closing = True
                try:
                    await self._shutdown()
                finally:
                    self._shutdown_done.set()
        return self.returncode

    async def _shutdown(self) -> None:
        policy = self.shutdown_policy
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await self.stdin.aclose()
        exited = self.returncode is not None or await self._wait_for(policy.stdin_close_wait)
        if not exited:
            log.debug("agent %s ignored stdin EOF; SIGTERM to group %s", self.pid, self.pgid)
            self._signal_group(signal.SIGTERM)
            exited = await self._wait_for(policy.term_wait)
        if not exited:
            log.warning("agent %s ignored SIGTERM; SIGKILL to group %s", self.pid, self.pgid)
            self._signal_group(signal.SIGKILL)
            exited = await self._wait_for(policy.kill_wait)
        # helpers that outlived the leader (or were left behind by it) die with the group
        self._signal_group(signal.SIGKILL)
        with anyio.move_on_after(policy.stderr_drain_wait):
            await self.stderr_drained.wait()
        for stream in (self.stdout, self._process.stderr):
            if stream is not None:
                with contextlib.suppress(anyio.BrokenResourceError, OSError):
                    await stream.aclose()
        if exited:
            await self._process.aclose()


async def _drain_stderr(process: anyio.abc.Process, ring: StderrRing, done: anyio.Event) -> None:
    stream = process.stderr
    try:
        if stream is None:
            return
        while True:
            try:
                ring.feed(await stream.receive(65536))
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                return
            except OSError:
                return
    finally:
        ring.close()
        done.set()


@contextlib.asynccontextmanager
async def open_agent_process(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    inherit_env: Sequence[str] = DEFAULT_INHERITED_ENV,
    stderr_max_bytes: int = 64 * 1024,
    stderr_max_lines: int = 200,
    shutdown: ShutdownPolicy = DEFAULT_SHUTDOWN,
    secrets: Iterable[str] = (),
) -> AsyncIterator[AgentProcess]:
    """Spawn ``argv`` (no shell) and yield the :class:`AgentProcess`; leaving the block shuts
    it down (:meth:`AgentProcess.aclose`). Raises :class:`TransportError` if it cannot start.
    ``secrets`` are masked in the stderr kept, beside the secret-looking environment values."""
    if isinstance(argv, str | bytes) or not argv:
        raise TypeError("argv must be a non-empty sequence of strings (no shell)")
    agent_env = build_agent_env(env, inherit_env=inherit_env)
    cannot_start: ExceptionMapping = {
        OSError: lambda exc: TransportError(
            f"cannot start agent {argv[0]!r}: {exc.strerror or exc}"
        )
    }
    import subprocess  # at the first launch, not at import (it loads locale, selectors …)

    with map_exceptions(cannot_start):
        process = await anyio.open_process(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=agent_env,
            start_new_session=True,
        )
    redact = Redactor([*secret_values(agent_env), *secrets])
    ring = StderrRing(stderr_max_bytes, stderr_max_lines, redact=redact)
    agent = AgentProcess(process, argv, stderr=ring, shutdown=shutdown)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_drain_stderr, process, ring, agent.stderr_drained)
            try:
                yield agent
            finally:
                await agent.aclose()
                tg.cancel_scope.cancel()
    finally:
        await agent.aclose()
