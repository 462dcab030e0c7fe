"""agentctl's HTTP surface (kandev internal/agentctl/server/api/: control_server.go, server.go,
attachments.go): the control port (handshake, instances) and one instance's port (configure,
start, status, health, attachments).

Every call is bounded (:class:`AgentctlConfig`) and every failure is an acpfsm error:

* no answer at all (refused, reset, DNS) → :class:`TransportClosed` (``agentctl unreachable``);
* a bound expired → :class:`TransportTimeout`;
* 401 (token), 403 (nonce), or the instance guard's 404 (``X-Instance-ID`` names another
  instance) → :class:`AuthenticationFailed`, with agentctl's own words;
* any other non-2xx, or ``success: false`` → :class:`AgentctlError` (kandev's texts:
  ``configure failed: …``, ``<op> request failed with status N: <body>``);
* a body that is not the JSON expected → :class:`RemoteProtocolError`.
"""

from __future__ import annotations

import os
import uuid
from typing import Any, Final

import anyio
import httpx
import msgspec

from ..errors import (
    UNDECODABLE_JSON,
    AgentctlError,
    AuthenticationFailed,
    ExceptionMapping,
    LocalProtocolError,
    RemoteProtocolError,
    TransportClosed,
    TransportTimeout,
    map_exceptions,
)
from ..transport import Attachment, attachment_content

__all__ = [
    "MAX_ATTACHMENT_BYTES",
    "AgentctlConfig",
    "ControlClient",
    "InstanceClient",
    "InstanceInfo",
]

MAX_ATTACHMENT_BYTES: Final = 100 * 1024 * 1024
"""agentctl's attachment limit (``messageconstraints``)."""


class AgentctlConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Bounds and tunables of the agentctl client (seconds)."""

    http_timeout: float = 60.0
    """Every ordinary HTTP call (kandev's client: 60 s)."""
    connect_timeout: float = 5.0
    """Establishing a TCP connection (HTTP or the WebSocket dial)."""
    upload_timeout: float = 300.0
    """Attachment upload (kandev's long-running client: 5 min)."""
    ready_timeout: float = 10.0
    """Health polling of a new instance (WaitForReady) gives up after this."""
    ready_poll: float = 0.5
    """Health polling interval (kandev: 500 ms)."""
    request_timeout: float = 150.0
    """A WebSocket request's answer (agentctl's own bounds: 180 s initialize, 2 min
    session/new|load, 30 s cancel); the runtime applies its own tighter bounds on top."""
    prompt_ack_timeout: float = 30.0
    """``agent.prompt`` is acknowledged before the turn runs; no ack within this is a failure."""
    cancel_timeout: float = 35.0
    """``agent.cancel`` (agentctl waits 3 s for the turn, 30 s overall)."""
    write_timeout: float = 10.0
    """Writing one frame to the WebSocket."""
    capabilities_wait: float = 2.0
    """After ``initialize``: how long to wait for the ``agent_capabilities`` event."""
    convergence_wait: float = 0.5
    """After set_model / set_config_option: how long to wait for agentctl's
    ``session_models`` convergence event, so that it precedes the call's return as on stdio."""
    exit_grace: float = 0.5
    """A v0.95.1 prompt error ``Internal error`` may be the agent dying: wait this long for
    agentctl's process-exit event before taking it as an agent error."""
    reconnect_initial_delay: float = 0.1
    reconnect_max_delay: float = 1.0
    reconnect_budget: float = 30.0
    """How long a dropped WebSocket is redialled before the carrier is given up."""
    keepalive_interval: float | None = 20.0
    keepalive_timeout: float | None = 20.0
    client_name: str = "acpfsm"
    client_version: str = "1.0.0"


class InstanceInfo(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    port: int


def _short(body: str, limit: int = 200) -> str:
    body = body.strip()
    return body if len(body) <= limit else body[:limit] + "…"


def _error_field(body: str) -> str:
    try:
        data = msgspec.json.decode(body)
    except UNDECODABLE_JSON:
        return ""
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        return str(data["error"])
    return ""


class _Http:
    """Shared request plumbing: one place maps httpx's failures and agentctl's statuses."""

    def __init__(
        self,
        base_url: str,
        client: httpx.AsyncClient,
        config: AgentctlConfig,
        headers: dict[str, str],
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.client = client
        self.config = config
        self.headers = headers

    def timeout(self, total: float) -> httpx.Timeout:
        return httpx.Timeout(total, connect=min(total, self.config.connect_timeout))

    async def call(
        self,
        method: str,
        path: str,
        op: str,
        *,
        ok: tuple[int, ...] = (200,),
        bound: float | None = None,
        **kwargs: Any,
    ) -> Any:
        """Send, check the status, decode the JSON body (``None`` for an empty body)."""
        url = self.base_url + path
        total = self.config.http_timeout if bound is None else bound
        failed: ExceptionMapping = {
            (httpx.TimeoutException, TimeoutError): lambda exc: TransportTimeout(
                f"{op} request to agentctl at {self.base_url} timed out after {total:g}s: "
                "context deadline exceeded"
            ),
            httpx.InvalidURL: lambda exc: LocalProtocolError(
                f"{op}: invalid agentctl URL {url!r}: {exc}"
            ),
            httpx.HTTPError: lambda exc: TransportClosed(
                f"{op} request failed: agentctl unreachable at {self.base_url}: "
                f"{exc or type(exc).__name__}"
            ),
        }
        # httpx's own bounds are per phase: the whole call is bounded too
        with map_exceptions(failed), anyio.fail_after(total + 1.0):
            response = await self.client.request(
                method, url, headers=self.headers, timeout=self.timeout(total), **kwargs
            )
        body = response.text
        status = response.status_code
        if status not in ok:
            raise _status_error(op, status, body)
        if not body.strip():
            return None
        unparsable: ExceptionMapping = {
            UNDECODABLE_JSON: lambda exc: RemoteProtocolError(
                f"failed to parse {op} response (status {status}, body: {_short(body)})"
            )
        }
        with map_exceptions(unparsable):
            return msgspec.json.decode(body)


def _status_error(op: str, status: int, body: str) -> Exception:
    said = _error_field(body) or _short(body)
    if status == 401:
        return AuthenticationFailed(
            f"{op} request failed with status 401: agentctl refused the auth token ({said})"
        )
    if status == 403:
        return AuthenticationFailed(f"{op} request failed with status 403: {said}")
    if status == 404 and "instance no longer exists" in body:
        return AuthenticationFailed(
            f"{op} request failed with status 404: {said}: the X-Instance-ID does not name the "
            f"instance at this port ({_short(body, 400)})"
        )
    return AgentctlError(
        f"{op} request failed with status {status}: {said}",
        code=f"HTTP {status}",
        status=status,
        action=op,
    )


def _require_success(op: str, data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise RemoteProtocolError(f"failed to parse {op} response: not a JSON object")
    if data.get("success") is False:
        raise AgentctlError(f"{op} failed: {data.get('error', '')}", code="FAILED", action=op)
    return data


class ControlClient:
    """The control port: ``POST /auth/handshake``, ``/api/v1/instances``, ``GET /health``."""

    def __init__(
        self,
        url: str,
        client: httpx.AsyncClient,
        *,
        token: str = "",
        config: AgentctlConfig | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.config = config or AgentctlConfig()
        self._http = _Http(self.url, client, self.config, {})
        self.token = token

    @property
    def token(self) -> str:
        return self._token

    @token.setter
    def token(self, value: str) -> None:
        self._token = value
        self._http.headers = {"Authorization": f"Bearer {value}"} if value else {}

    async def handshake(self, nonce: str) -> str:
        """Trade the bootstrap nonce for agentctl's token (once per agentctl process)."""
        data = await self._http.call("POST", "/auth/handshake", "handshake", json={"nonce": nonce})
        token = data.get("token") if isinstance(data, dict) else None
        if not isinstance(token, str) or not token:
            raise RemoteProtocolError("failed to parse handshake response: no token")
        self.token = token
        return token

    async def health(self) -> None:
        await self._http.call("GET", "/health", "health")

    async def create_instance(self, request: dict[str, Any]) -> InstanceInfo:
        data = await self._http.call(
            "POST", "/api/v1/instances", "create instance", ok=(200, 201), json=request
        )
        unparsable: ExceptionMapping = {
            msgspec.ValidationError: lambda exc: RemoteProtocolError(
                f"failed to parse create instance response: {exc}"
            )
        }
        with map_exceptions(unparsable):
            return msgspec.convert(data, InstanceInfo)

    async def delete_instance(self, instance_id: str) -> None:
        await self._http.call("DELETE", f"/api/v1/instances/{instance_id}", "delete instance")

    async def list_instances(self) -> list[dict[str, Any]]:
        data = await self._http.call("GET", "/api/v1/instances", "list instances")
        if isinstance(data, dict):  # v0.95.1 wraps the list: {"instances": [...]}
            data = data.get("instances")
        return [d for d in data or () if isinstance(d, dict)]

    def instance_url(self, port: int) -> str:
        """The base URL of an instance port on agentctl's host."""
        parsed = httpx.URL(self.url)
        return str(parsed.copy_with(port=port, path="", query=None, fragment=None)).rstrip("/")


class InstanceClient:
    """One instance's port, with ``Authorization: Bearer`` and ``X-Instance-ID`` on every
    request (and on the WebSocket upgrade, see :attr:`headers`)."""

    def __init__(
        self,
        base_url: str,
        client: httpx.AsyncClient,
        *,
        token: str,
        instance_id: str,
        config: AgentctlConfig | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.client = client
        self.instance_id = instance_id
        self.config = config or AgentctlConfig()
        headers = {"X-Instance-ID": instance_id}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.headers: dict[str, str] = headers
        self._http = _Http(self.base_url, client, self.config, headers)

    @property
    def stream_url(self) -> str:
        return self.base_url + "/api/v1/agent/stream"

    async def health(self) -> None:
        await self._http.call("GET", "/health", "health check")

    async def wait_ready(self) -> None:
        """WaitForReady: ``GET /health`` every ``ready_poll`` until 200, ≤ ``ready_timeout``."""
        last: Exception | None = None
        with anyio.move_on_after(self.config.ready_timeout):
            while True:
                try:
                    await self.health()
                    return
                except (TransportClosed, TransportTimeout, AgentctlError) as exc:
                    last = exc
                await anyio.sleep(self.config.ready_poll)
        raise TransportTimeout(f"timeout waiting for agentctl to be ready: {last}")

    async def status(self) -> dict[str, Any]:
        data = await self._http.call("GET", "/api/v1/status", "status")
        return data if isinstance(data, dict) else {}

    async def configure(self, argv: list[str], *, env: dict[str, str] | None = None) -> None:
        """``POST /api/v1/agent/configure`` with the exact argv (``agent_args`` wins over
        parsing ``command``)."""
        if not argv:
            raise LocalProtocolError("configure: the agent command is empty")
        body: dict[str, Any] = {"command": " ".join(argv), "agent_args": list(argv)}
        if env:
            body["env"] = dict(env)
        data = await self._http.call(
            "POST", "/api/v1/agent/configure", "configure", ok=(200, 400, 500), json=body
        )
        _require_success("configure", data)

    async def start(self) -> dict[str, Any]:
        data = await self._http.call("POST", "/api/v1/start", "start", ok=(200, 500))
        return _require_success("start", data)

    async def stop(self) -> None:
        data = await self._http.call("POST", "/api/v1/stop", "stop", ok=(200, 500))
        _require_success("stop", data)

    async def set_mcp_mode(self, mode: str) -> None:
        """``PUT /api/v1/mcp/mode``: which of kandev's tools agentctl's embedded MCP server
        offers (kandev ``client.go`` ``SetMcpMode``)."""
        await self._http.call("PUT", "/api/v1/mcp/mode", "set MCP mode", json={"mode": mode})

    async def materialize(self, acp_session_id: str, attachment: Attachment) -> Attachment:
        """Upload one attachment (multipart, never base64) into
        ``<workdir>/.kandev/attachments/<acp session>/``; returns it as a descriptor (no
        data, agentctl's stored name, ``attachment_id`` set)."""
        data, mime = await attachment_content(attachment)
        if not acp_session_id or not data:
            raise AgentctlError(
                "attachment session, id, and content are required", action="materialize"
            )
        if len(data) > MAX_ATTACHMENT_BYTES:
            raise AgentctlError("attachment size exceeds maximum", action="materialize")
        attachment_id = attachment.attachment_id or f"att-{uuid.uuid4()}"
        name = os.path.basename(attachment.name or attachment.path) or attachment_id
        fields = {
            "session_id": acp_session_id,
            "attachment_id": attachment_id,
            "name": name,
            "mime_type": mime,
            "size_bytes": str(len(data)),
        }
        result = await self._http.call(
            "POST",
            "/api/v1/attachments/materialize",
            "materialize attachment",
            ok=(201,),
            bound=self.config.upload_timeout,
            data=fields,
            files={"file": (name, data, mime)},
        )
        stored = result.get("name") if isinstance(result, dict) else None
        size = result.get("size_bytes") if isinstance(result, dict) else None
        if not isinstance(stored, str) or not stored or size != len(data):
            raise RemoteProtocolError("materialize attachment returned invalid metadata")
        return Attachment(
            name=stored,
            mime_type=mime,
            attachment_id=attachment_id,
            delivery_mode=attachment.delivery_mode,
            size=len(data),
        )
