"""Where an agent runs: the :class:`Executor` seam and what it is given to start one agent.

An executor starts the agent somewhere (a local child process, an agentctl instance, a test's
in-memory peer) and hands back an :class:`~acpfsm.adapters.transport.AgentTransport` to it, as
an async context manager whose exit stops the agent and releases everything it started. The
runtime builds one :class:`AgentLaunch` per execution from the agent profile and the launch
spec; executors never see the runtime's own types, so the adapters import nothing of the
runtime.

Built in: :class:`~acpfsm.adapters.acp.executor.StdioExecutor` (``stdio``) and
:class:`~acpfsm.adapters.agentctl.executor.AgentctlExecutor`.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Protocol

from .mcp_servers import McpRequestHandler, McpServer
from .transport import AgentTransport, PermissionPolicy, reject_permission_policy

__all__ = ["AgentLaunch", "Executor"]


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentLaunch:
    """Everything an executor needs to start one agent for one execution.

    ``command`` and ``env`` come from the agent profile (``env`` already holds what the
    runtime decided the agent may see); ``workspace`` is the agent's working directory and the
    root its file-system requests are confined to. ``mcp_servers`` are the MCP servers the
    runtime will offer the agent's sessions (an executor masks their credentials in what it
    records, and may rewrite nothing); ``mcp_handler`` answers the carrier's own MCP
    requests for this execution (agentctl's ``mcp.*``). ``permission_policy`` answers the
    agent's permission requests: the executor hands it to the transport it opens (the runtime gives
    each execution its own; the default refuses every request)."""

    execution_id: str
    session_id: str
    agent_id: str
    command: tuple[str, ...]
    workspace: str
    env: dict[str, str] = field(default_factory=dict)
    task_id: str = ""
    mcp_mode: str = ""
    mcp_servers: tuple[McpServer, ...] = ()
    mcp_handler: McpRequestHandler | None = None
    permission_policy: PermissionPolicy = reject_permission_policy


class Executor(Protocol):
    """Starts an agent somewhere and hands back a transport to it."""

    def open(self, launch: AgentLaunch) -> AbstractAsyncContextManager[AgentTransport]:
        """The transport to a freshly started agent; leaving the block stops the agent."""
        ...
