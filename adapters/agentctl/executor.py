"""``AgentctlExecutor``: runs each execution's agent in its own agentctl instance.

::

    rt = Runtime(executors={
        "agentctl": AgentctlExecutor(url="http://127.0.0.1:39429", nonce=os.environ["NONCE"]),
        "agentctl-b": AgentctlExecutor(url="http://10.0.0.7:39429", token=token_b),
    })
    ref = await rt.launch(LaunchSpec(agent_profile_id="reference", executor_id="agentctl", ...))

For each execution it creates an instance (``POST /api/v1/instances``, id = the execution id,
workspace = the launch's workspace, agent = the profile's command), waits for the instance's
health (0.5 s polls, bounded), configures and starts the agent, and yields an
:class:`~acpfsm.adapters.agentctl.AgentctlTransport` on the instance's agent WebSocket.
Leaving the block closes the transport and deletes the instance (which stops the agent);
a failing delete is logged, never raised, so that a vanished agentctl cannot break the
runtime.

The workspace must be a directory; when agentctl runs on this machine (a loopback URL, or
``check_workspace=True``) that is checked here, before anything is created, and a bad one
raises :class:`~acpfsm.adapters.errors.LaunchSpecError` as with the stdio executor (agentctl itself
would start the agent anyway).

A lost agent WebSocket is redialled when the runtime's AgentStream chart says so; an
executor used without a Runtime (``acpfsm conform``) passes ``auto_redial=True`` so that its
transports redial on their own (see :mod:`.transport`).

agentctl's own ``mcp.*`` requests (kandev's tools, called by the agent on agentctl's embedded
MCP server) are answered by the launch's ``mcp_handler`` (a Runtime with tool sets gives one
per execution), else by the executor's ``mcp_handler``, else refused.

Credentials: ``token`` is agentctl's bearer token; ``nonce`` is its bootstrap nonce
(``AGENTCTL_BOOTSTRAP_NONCE``), traded once for the token on first use (``POST
/auth/handshake``) and kept in :attr:`AgentctlExecutor.token`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import shlex
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import httpx

from ..errors import AcpfsmError, LaunchSpecError
from ..executor import AgentLaunch
from ..mcp_servers import mcp_server_secrets
from ..redaction import Redactor, secret_values
from ..transport import AgentTransport
from .control import AgentctlConfig, ControlClient, InstanceClient
from .transport import AgentctlTransport, McpHandler, open_agentctl_transport

__all__ = ["AgentctlExecutor"]

log = logging.getLogger("acpfsm.adapters.agentctl")


class AgentctlExecutor:
    """An :class:`~acpfsm.adapters.executor.Executor` backed by one agentctl control endpoint."""

    def __init__(
        self,
        *,
        url: str,
        nonce: str = "",
        token: str = "",
        config: AgentctlConfig | None = None,
        env: Mapping[str, str] | None = None,
        mcp_handler: McpHandler | None = None,
        check_workspace: bool | None = None,
        auto_redial: bool = False,
    ) -> None:
        self.url = url.rstrip("/")
        self.check_workspace = (
            _is_loopback(self.url) if check_workspace is None else check_workspace
        )
        self.config = config or AgentctlConfig()
        self.env = dict(env or {})
        self.mcp_handler = mcp_handler
        self.auto_redial = auto_redial
        self._nonce = nonce
        self._token = token
        self._handshake_lock: anyio.Lock | None = None
        self.transports: dict[str, AgentctlTransport] = {}
        """The live transport of each open execution (by execution id)."""

    @property
    def token(self) -> str:
        """agentctl's bearer token ("" until a nonce has been traded for it)."""
        return self._token

    async def _ensure_token(self, client: httpx.AsyncClient) -> str:
        if self._token or not self._nonce:
            return self._token
        if self._handshake_lock is None:
            self._handshake_lock = anyio.Lock()
        async with self._handshake_lock:
            if not self._token:
                control = ControlClient(self.url, client, config=self.config)
                self._token = await control.handshake(self._nonce)
        return self._token

    def open(self, launch: AgentLaunch) -> AbstractAsyncContextManager[AgentTransport]:
        if self.check_workspace and not Path(launch.workspace).is_dir():
            raise LaunchSpecError(
                f"workspace {launch.workspace!r} is not a directory",
                execution_id=launch.execution_id,
            )
        return self._open(launch)

    def _create_request(self, launch: AgentLaunch, env: dict[str, str]) -> dict[str, Any]:
        request: dict[str, Any] = {
            "id": launch.execution_id,
            "workspace_path": launch.workspace,
            "agent_command": shlex.join(launch.command),
            "protocol": "acp",
            "agent_type": launch.agent_id,
            "session_id": launch.session_id or launch.execution_id,
        }
        if launch.task_id:
            request["task_id"] = launch.task_id
        if env:
            request["env"] = env
        if launch.mcp_mode:
            request["mcp_mode"] = launch.mcp_mode
        return request

    @contextlib.asynccontextmanager
    async def _open(self, launch: AgentLaunch) -> AsyncIterator[AgentTransport]:
        execution_id = launch.execution_id
        async with httpx.AsyncClient() as client:
            token = await self._ensure_token(client)
            control = ControlClient(self.url, client, token=token, config=self.config)
            env = {**self.env, **launch.env}
            info = await control.create_instance(self._create_request(launch, env))
            try:
                instance = InstanceClient(
                    control.instance_url(info.port),
                    client,
                    token=token,
                    instance_id=info.id,
                    config=self.config,
                )
                await instance.wait_ready()
                await instance.configure(list(launch.command))
                await instance.start()
                async with open_agentctl_transport(
                    instance,
                    config=self.config,
                    permission_policy=launch.permission_policy,
                    mcp_handler=launch.mcp_handler or self.mcp_handler,
                    redact=Redactor(
                        [
                            *secret_values(env),
                            *mcp_server_secrets(launch.mcp_servers),
                            self._nonce,
                            token,
                        ]
                    ),
                    auto_redial=self.auto_redial,
                ) as transport:
                    self.transports[execution_id] = transport
                    try:
                        yield transport
                    finally:
                        self.transports.pop(execution_id, None)
            finally:
                with anyio.CancelScope(shield=True):
                    try:
                        await control.delete_instance(info.id)
                    except AcpfsmError as exc:
                        log.warning("agentctl instance %s not deleted: %s", info.id, exc)


def _is_loopback(url: str) -> bool:
    try:
        host = httpx.URL(url).host
    except httpx.InvalidURL:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
