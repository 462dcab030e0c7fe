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

Recovery (:class:`~acpfsm.adapters.executor.RecoverableExecutor`): the reattach handle of an
execution is its instance (control URL, instance id = the execution id, instance port). After
the app restarts, :meth:`AgentctlExecutor.probe` finds the instance in agentctl's list and
asks it whether its agent runs (``GET /api/v1/status``, kandev client.go ``IsAgentRunning``):
``alive``, or ``orphaned`` (listed, agent ended: the instance is deleted) or ``gone``.
:meth:`AgentctlExecutor.reattach` dials a new agent stream to the same instance and adopts the
stored ACP session (no ``agent.initialize``, no session/new). :meth:`AgentctlExecutor.detach`
makes leaving the transport keep the instance (the app is exiting; it reattaches after its
restart).

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
from ..executor import AgentLaunch, Probe
from ..mcp_servers import mcp_server_secrets
from ..redaction import Redactor, secret_values
from ..transport import AgentTransport, InitializeResult
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
        self._detached: set[str] = set()

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
        async with httpx.AsyncClient() as client:
            token = await self._ensure_token(client)
            control = ControlClient(self.url, client, token=token, config=self.config)
            env = {**self.env, **launch.env}
            info = await control.create_instance(self._create_request(launch, env))
            try:
                instance = self._instance(control, client, token, info.id, info.port)
                await instance.wait_ready()
                await instance.configure(list(launch.command))
                await instance.start()
                async with self._transport(launch, instance, env, token) as transport:
                    yield transport
            finally:
                await self._release(control, info.id, launch.execution_id)

    def _instance(
        self,
        control: ControlClient,
        client: httpx.AsyncClient,
        token: str,
        instance_id: str,
        port: int,
    ) -> InstanceClient:
        return InstanceClient(
            control.instance_url(port),
            client,
            token=token,
            instance_id=instance_id,
            config=self.config,
        )

    @contextlib.asynccontextmanager
    async def _transport(
        self, launch: AgentLaunch, instance: InstanceClient, env: Mapping[str, str], token: str
    ) -> AsyncIterator[AgentctlTransport]:
        async with open_agentctl_transport(
            instance,
            config=self.config,
            permission_policy=launch.permission_policy,
            mcp_handler=launch.mcp_handler or self.mcp_handler,
            redact=Redactor(
                [*secret_values(env), *mcp_server_secrets(launch.mcp_servers), self._nonce, token]
            ),
            auto_redial=self.auto_redial,
        ) as transport:
            self.transports[launch.execution_id] = transport
            try:
                yield transport
            finally:
                self.transports.pop(launch.execution_id, None)

    async def _release(self, control: ControlClient, instance_id: str, execution_id: str) -> None:
        """Delete the instance (which stops its agent), unless the execution was detached."""
        if execution_id in self._detached:
            self._detached.discard(execution_id)
            return
        with anyio.CancelScope(shield=True):
            try:
                await control.delete_instance(instance_id)
            except AcpfsmError as exc:
                log.warning("agentctl instance %s not deleted: %s", instance_id, exc)

    # --- recovery (RecoverableExecutor) ---------------------------------------------------

    def handle_of(self, transport: AgentTransport) -> dict[str, Any]:
        instance = getattr(transport, "instance", None)
        if not isinstance(instance, InstanceClient):
            return {}
        port = httpx.URL(instance.base_url).port
        return {"control_url": self.url, "instance_id": instance.instance_id, "port": port}

    async def probe(self, execution_id: str, handle: Mapping[str, Any]) -> Probe:
        """kandev ``RecoverInstances``: the instance (named by the execution id, as created)
        in agentctl's list, and whether its agent runs (``IsAgentRunning``: running or
        starting)."""
        instance_id = str(handle.get("instance_id") or execution_id)
        try:
            async with httpx.AsyncClient() as client:
                token = await self._ensure_token(client)
                control = ControlClient(self.url, client, token=token, config=self.config)
                listed = {str(i.get("id", "")): i for i in await control.list_instances()}
                info = listed.get(instance_id)
                if info is None:
                    return Probe(
                        found="gone",
                        reason=f"the agent instance ended while the app was down (agentctl at "
                        f"{self.url} has no instance {instance_id!r})",
                    )
                port = int(info.get("port") or handle.get("port") or 0)
                status = await self._instance(control, client, token, instance_id, port).status()
        except AcpfsmError as exc:
            return Probe(found="gone", reason=f"agentctl could not be asked: {exc}")
        agent = str(status.get("agent_status", ""))
        if agent in ("running", "starting"):
            return Probe(found="alive", reason=f"agentctl instance {instance_id!r} runs")
        return Probe(
            found="orphaned",
            reason=f"the agent process ended while the app was down (agentctl instance "
            f"{instance_id!r} reports {agent or 'no agent'})",
        )

    def reattach(
        self,
        launch: AgentLaunch,
        handle: Mapping[str, Any],
        acp_session_id: str,
        capabilities: InitializeResult | None,
    ) -> AbstractAsyncContextManager[AgentTransport]:
        return self._reattach(launch, handle, acp_session_id, capabilities)

    @contextlib.asynccontextmanager
    async def _reattach(
        self,
        launch: AgentLaunch,
        handle: Mapping[str, Any],
        acp_session_id: str,
        capabilities: InitializeResult | None,
    ) -> AsyncIterator[AgentTransport]:
        instance_id = str(handle.get("instance_id") or launch.execution_id)
        async with httpx.AsyncClient() as client:
            token = await self._ensure_token(client)
            control = ControlClient(self.url, client, token=token, config=self.config)
            try:
                port = int(handle.get("port") or 0)
                instance = self._instance(control, client, token, instance_id, port)
                env = {**self.env, **launch.env}
                async with self._transport(launch, instance, env, token) as transport:
                    transport.adopt_session(acp_session_id, capabilities)
                    yield transport
            finally:
                await self._release(control, instance_id, launch.execution_id)

    async def end_orphan(self, execution_id: str, handle: Mapping[str, Any]) -> str:
        instance_id = str(handle.get("instance_id") or execution_id)
        async with httpx.AsyncClient() as client:
            token = await self._ensure_token(client)
            control = ControlClient(self.url, client, token=token, config=self.config)
            try:
                await control.delete_instance(instance_id)
            except AcpfsmError as exc:
                return f"agentctl instance {instance_id!r} not deleted: {exc}"
        return f"deleted agentctl instance {instance_id!r}"

    def detach(self, execution_id: str) -> None:
        self._detached.add(execution_id)


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
