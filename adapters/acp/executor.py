"""``StdioExecutor``: runs each execution's agent as a local child process and speaks ACP over
its pipes (:func:`~acpfsm.adapters.acp.stdio.open_stdio_transport`).

Recovery (:class:`~acpfsm.adapters.executor.RecoverableExecutor`): a stdio agent cannot be
reattached, its pipes died with the app. Its reattach handle is its process group (leader
pid, start time, command: :mod:`.orphans`), and its environment carries its execution id
(``ACPFSM_EXECUTION_ID``); after a restart :meth:`StdioExecutor.probe` reports a leader still
running that command, or a process carrying the id, as ``orphaned`` (then ended, with its
group), anything else as ``gone``. Either way the execution can be started again and its
conversation loaded (the runtime's ``relaunch``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from ..errors import LaunchSpecError, TransportError
from ..executor import AgentLaunch, Probe
from ..mcp_servers import mcp_server_secrets
from ..transport import AgentTransport, InitializeResult
from .orphans import EXECUTION_ENV, end_group, group_handle, probe_group
from .process import DEFAULT_INHERITED_ENV, DEFAULT_SHUTDOWN, ShutdownPolicy
from .stdio import DEFAULT_CONFIG, StdioConfig, TerminalHandler

__all__ = ["StdioExecutor"]


class StdioExecutor:
    """The built-in ``stdio`` executor. Every option is a typed keyword argument: ``env`` is
    added to every agent's environment (the profile's own ``env`` wins), ``inherit_env`` names
    the variables copied from this process's environment, ``config`` holds the transport's
    bounds and ``shutdown`` the stop escalation (close stdin → SIGTERM → SIGKILL). Permission
    requests go to each launch's ``permission_policy``."""

    def __init__(
        self,
        *,
        env: Mapping[str, str] | None = None,
        inherit_env: Sequence[str] = DEFAULT_INHERITED_ENV,
        terminal_handler: TerminalHandler | None = None,
        config: StdioConfig = DEFAULT_CONFIG,
        shutdown: ShutdownPolicy = DEFAULT_SHUTDOWN,
        stderr_max_bytes: int = 64 * 1024,
        stderr_max_lines: int = 200,
    ) -> None:
        self.env = dict(env or {})
        self.inherit_env = tuple(inherit_env)
        self.terminal_handler = terminal_handler
        self.config = config
        self.shutdown = shutdown
        self.stderr_max_bytes = stderr_max_bytes
        self.stderr_max_lines = stderr_max_lines

    def open(self, launch: AgentLaunch) -> AbstractAsyncContextManager[AgentTransport]:
        from .stdio import open_stdio_transport

        if not Path(launch.workspace).is_dir():
            raise LaunchSpecError(
                f"workspace {launch.workspace!r} is not a directory",
                execution_id=launch.execution_id,
            )
        return open_stdio_transport(
            list(launch.command),
            cwd=launch.workspace,
            env={**self.env, **launch.env, EXECUTION_ENV: launch.execution_id},
            inherit_env=self.inherit_env,
            permission_policy=launch.permission_policy,
            terminal_handler=self.terminal_handler,
            config=self.config,
            shutdown=self.shutdown,
            stderr_max_bytes=self.stderr_max_bytes,
            stderr_max_lines=self.stderr_max_lines,
            secrets=mcp_server_secrets(launch.mcp_servers),
        )

    # --- recovery (RecoverableExecutor) ---------------------------------------------------

    def handle_of(self, transport: AgentTransport) -> dict[str, Any]:
        process = getattr(transport, "process", None)
        if process is None:
            return {}
        return group_handle(process.pid, process.pgid, process.argv)

    async def probe(self, execution_id: str, handle: Mapping[str, Any]) -> Probe:
        running, reason = probe_group(handle, execution_id)
        return Probe(found="orphaned" if running else "gone", reason=reason)

    def reattach(
        self,
        launch: AgentLaunch,
        handle: Mapping[str, Any],
        acp_session_id: str,
        capabilities: InitializeResult | None,
    ) -> AbstractAsyncContextManager[AgentTransport]:
        raise TransportError(
            "a stdio agent cannot be reattached: its pipes ended with the app that started it"
        )

    async def end_orphan(self, execution_id: str, handle: Mapping[str, Any]) -> str:
        return await end_group(handle, execution_id, grace=self.shutdown.term_wait)

    def detach(self, execution_id: str) -> None:
        """A stdio agent cannot outlive the app's pipes: closing its transport ends it."""
