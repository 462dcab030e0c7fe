"""Where an agent runs: the :class:`Executor` seam and what it is given to start one agent.

An executor starts the agent somewhere (a local child process, an agentctl instance, a test's
in-memory peer) and hands back an :class:`~acpfsm.adapters.transport.AgentTransport` to it, as
an async context manager whose exit stops the agent and releases everything it started. The
runtime builds one :class:`AgentLaunch` per execution from the agent profile and the launch
spec; executors never see the runtime's own types, so the adapters import nothing of the
runtime.

Built in: :class:`~acpfsm.adapters.acp.executor.StdioExecutor` (``stdio``) and
:class:`~acpfsm.adapters.agentctl.executor.AgentctlExecutor`.

An executor whose agents a restarted app can find again is a :class:`RecoverableExecutor`
(both built-in ones are): it names a *reattach handle* for each transport it opened (what the
execution store keeps), says what became of the agent behind a stored handle (:class:`Probe`,
kandev's executor backends' ``RecoverInstances``), reattaches to a surviving one, ends one
left without an owner, and can leave an agent running when the app exits (``detach``).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import msgspec

from .mcp_servers import McpRequestHandler, McpServer
from .transport import AgentTransport, InitializeResult, PermissionPolicy, reject_permission_policy

__all__ = ["AgentLaunch", "Executor", "Probe", "RecoverableExecutor"]


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


class Probe(msgspec.Struct, frozen=True, kw_only=True):
    """What became of an agent the app started before it restarted: ``alive`` (it runs and
    can be reattached), ``orphaned`` (something of it still runs that nobody can use: it must
    be ended, :meth:`RecoverableExecutor.end_orphan`) or ``gone``; ``reason`` says why, in
    words an operator reads."""

    found: Literal["alive", "orphaned", "gone"]
    reason: str = ""


@runtime_checkable
class RecoverableExecutor(Executor, Protocol):
    """An executor whose agents a restarted app can find again (see the module docstring)."""

    def handle_of(self, transport: AgentTransport) -> dict[str, Any]:
        """The reattach handle of a transport this executor opened (JSON-able, no secret)."""
        ...

    async def probe(self, execution_id: str, handle: Mapping[str, Any]) -> Probe:
        """What became of the agent behind ``handle`` (bounded; never raises: an executor
        that cannot tell says ``gone`` and why)."""
        ...

    def reattach(
        self,
        launch: AgentLaunch,
        handle: Mapping[str, Any],
        acp_session_id: str,
        capabilities: InitializeResult | None,
    ) -> AbstractAsyncContextManager[AgentTransport]:
        """A transport to the surviving agent, its ACP session ``acp_session_id`` already
        established (nothing is initialized again); leaving the block stops the agent, as
        :meth:`Executor.open`'s does, unless it was detached."""
        ...

    async def end_orphan(self, execution_id: str, handle: Mapping[str, Any]) -> str:
        """End what :meth:`probe` found orphaned; returns what was done."""
        ...

    def detach(self, execution_id: str) -> None:
        """Leave the execution's agent running when its transport is closed (the app is
        exiting and will reattach after its restart); a no-op where the agent cannot outlive
        the app."""
        ...
