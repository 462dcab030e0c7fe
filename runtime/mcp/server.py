"""The tool server: the app's tools served to one execution's agent over MCP (streamable HTTP).

Built on the official MCP SDK's low-level :class:`mcp.server.lowlevel.Server` (one per
execution, so each execution has its own tool set and mode) and its streamable-HTTP ASGI app,
served by hypercorn under trio or asyncio, whichever runs the Runtime:

* bound to 127.0.0.1 on a port the kernel picks (read back from the socket);
* every request needs ``Authorization: Bearer <secret>``, a secret made for this execution
  (the SDK's bearer middleware answers 401 otherwise); the secret reaches the agent only in
  the ``headers`` of the ``McpServerHttp`` its sessions are offered, and is masked in the
  agent output acpfsm keeps;
* ``tools/list`` lists the current mode's tools; ``tools/call`` runs one: its arguments are
  checked against the tool's schema, the call is bounded by the tool's ``timeout``, the
  result by its ``max_result_bytes``, and whatever goes wrong (bad arguments, the tool
  raising, timing out, returning too much, a tool this mode does not have) is an MCP tool
  error (``isError``) to the agent, never an exception in the Runtime. Each call and its
  outcome are events (``McpCallStarted``, ``McpCallEnded``);
* a mode switch is announced as ``notifications/tools/list_changed``: on the standalone
  stream of each handshake-era session, and on the ``subscriptions/listen`` streams of
  2026-era clients.

Importing this module imports the MCP SDK and hypercorn (the ``acpfsm[mcp]`` extra).
"""

from __future__ import annotations

import collections
import contextlib
import hmac
import logging
import secrets
import socket
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import anyio
import anyio.abc
import jsonschema
import mcp_types as types
import pydantic
import pydantic_core
from hypercorn.config import Config
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.mcpserver.exceptions import InvalidSignature
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata, func_metadata
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged

from acpfsm.adapters.errors import TransportError
from acpfsm.adapters.mcp_servers import McpServerHttp

from ._http import ConnectionGate, serve_gated
from .execution import TOOL_SERVER_NAME, ExecutionMcp
from .tools import ErrorExposure, Tool, ToolDeclarationError, ToolSet, describe_failure

__all__ = ["CompiledTool", "CompiledTools", "serve_tools"]

log = logging.getLogger("acpfsm.runtime.mcp")

MAX_CONNECTIONS = 64
"""Connections one tool server holds at once; past it a new one takes the place of the oldest
unauthenticated one, or is refused (``503``) when all have authenticated."""
MAX_CONCURRENT_CALLS = 16
"""Tool calls one execution runs at once; more wait for a slot (within their bound)."""
_SESSIONS_REMEMBERED = 64
"""Handshake-era sessions remembered per execution, to announce mode switches to."""
_GRACEFUL_SHUTDOWN = 1.0


class CompiledTool:
    """A tool ready to serve: its MCP definition, argument check and result conversion."""

    def __init__(self, tool: Tool, expose_errors: ErrorExposure = False) -> None:
        self.tool = tool
        self.expose_errors = expose_errors if tool.expose_errors is None else tool.expose_errors
        try:
            # unstructured output: the result becomes text (or content blocks) for the agent
            self.meta: FuncMetadata = func_metadata(tool.fn, structured_output=False)
        except (
            InvalidSignature,
            pydantic.PydanticUserError,
            pydantic.PydanticSchemaGenerationError,
        ) as exc:
            raise ToolDeclarationError(f"tool {tool.name!r} cannot be served: {exc}") from None
        if tool.input_schema is not None:
            schema = dict(tool.input_schema)
            try:
                jsonschema.Draft202012Validator.check_schema(schema)
            except jsonschema.SchemaError as exc:
                raise ToolDeclarationError(
                    f"tool {tool.name!r}: input_schema is not a JSON schema: {exc.message}"
                ) from None
            self.validator: jsonschema.protocols.Validator | None = jsonschema.Draft202012Validator(
                schema
            )
        else:
            try:
                schema = self.meta.arg_model.model_json_schema(by_alias=True)
            except pydantic.PydanticUserError as exc:  # pragma: no cover - caught above
                raise ToolDeclarationError(f"tool {tool.name!r}: {exc}") from None
            self.validator = None
        if schema.get("type") != "object":
            raise ToolDeclarationError(f"tool {tool.name!r}: the input schema must be an object")
        self.definition = types.Tool(
            name=tool.name, description=tool.description or None, input_schema=schema
        )

    def check(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The keyword arguments of the call; raises ``ValueError`` naming what is wrong."""
        if self.validator is not None:
            error = jsonschema.exceptions.best_match(self.validator.iter_errors(arguments))
            if error is not None:
                where = "/".join(str(p) for p in error.absolute_path) or "arguments"
                raise ValueError(f"{where}: {error.message}")
            return arguments
        try:
            return self.meta.validate_arguments(arguments)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors()
            )
            raise ValueError(problems) from None

    def content(self, result: Any) -> types.CallToolResult:
        converted = self.meta.convert_result(result)
        if not isinstance(converted, types.CallToolResult):  # an InputRequiredResult
            raise TypeError("tools answer at once: input_required is not supported")
        return converted


class CompiledTools:
    """Every tool set's tools compiled (at Runtime construction)."""

    def __init__(self, tool_sets: Iterable[ToolSet]) -> None:
        self.by_mode: dict[str, dict[str, CompiledTool]] = {
            s.name: {t.name: CompiledTool(t, s.expose_errors) for t in s.tool_list()}
            for s in tool_sets
        }

    def of(self, mode: str) -> Mapping[str, CompiledTool]:
        return self.by_mode.get(mode, {})


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def _text(result: types.CallToolResult) -> str:
    parts = [b.text if isinstance(b, types.TextContent) else f"[{b.type}]" for b in result.content]
    return "".join(parts)


class _Verifier:
    """The SDK's ``TokenVerifier``: one secret, compared in constant time."""

    def __init__(self, secret: str, client_id: str) -> None:
        self._secret = secret.encode()
        self._client_id = client_id

    async def verify_token(self, token: str) -> AccessToken | None:
        if hmac.compare_digest(token.encode(), self._secret):
            return AccessToken(token=token, client_id=self._client_id, scopes=[])
        return None


class _ToolServer(Server[Any]):
    """The low-level server of one execution (handlers over its :class:`ExecutionMcp`)."""

    def __init__(self, execution: ExecutionMcp, compiled: CompiledTools) -> None:
        self.execution = execution
        self.compiled = compiled
        self.bus = InMemorySubscriptionBus()
        self.sessions: collections.OrderedDict[str, ServerSession] = collections.OrderedDict()
        self.limiter = anyio.CapacityLimiter(MAX_CONCURRENT_CALLS)
        super().__init__(
            TOOL_SERVER_NAME,
            version="1",
            instructions="Tools of the application running this agent (acpfsm).",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_subscriptions_listen=ListenHandler(self.bus),
        )

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        # handshake-era clients learn here that mode switches are announced
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )

    def _remember(self, ctx: ServerRequestContext[Any, Any]) -> None:
        request = ctx.request
        headers = getattr(request, "headers", None)
        session_id = headers.get("mcp-session-id") if headers is not None else None
        if not session_id:
            return
        self.sessions[session_id] = ctx.session
        self.sessions.move_to_end(session_id)
        while len(self.sessions) > _SESSIONS_REMEMBERED:
            self.sessions.popitem(last=False)

    async def announce(self) -> None:
        """``notifications/tools/list_changed`` to every client (best effort)."""
        await self.bus.publish(ToolsListChanged())
        for session in list(self.sessions.values()):
            with contextlib.suppress(Exception):  # a closed stream: the client is gone
                await session.send_tool_list_changed()

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        self._remember(ctx)
        tools = self.compiled.of(self.execution.mode)
        return types.ListToolsResult(tools=[t.definition for t in tools.values()])

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        self._remember(ctx)
        execution = self.execution
        arguments = params.arguments or {}
        call_id = execution.call_started("tool", params.name, arguments)
        compiled = self.compiled.of(execution.mode).get(params.name)
        if compiled is None:
            result = _error(f"no tool {params.name!r} in MCP mode {execution.mode!r}")
        else:
            result = await self._run(compiled, arguments)
        text = _text(result)
        if result.is_error:
            execution.call_ended(call_id, "tool", params.name, error=text)
        else:
            execution.call_ended(call_id, "tool", params.name, output=text)
        return result

    async def _run(self, compiled: CompiledTool, arguments: dict[str, Any]) -> types.CallToolResult:
        tool = compiled.tool
        timeout = tool.timeout if tool.timeout is not None else self.execution.call_timeout
        try:
            kwargs = compiled.check(arguments)
        except ValueError as exc:
            return _error(f"invalid arguments for tool {tool.name!r}: {exc}")
        try:
            with anyio.fail_after(timeout):
                async with self.limiter:
                    value = await tool.fn(**kwargs)
            result = compiled.content(value)
        except TimeoutError:
            return _error(f"tool {tool.name!r} did not finish within {timeout:g}s")
        except Exception as exc:  # noqa: BLE001 - the app's tool: any failure is an answer
            log.info("tool %s of %s raised %r", tool.name, self.execution.execution_id, exc)
            return _error(
                f"tool {tool.name!r} failed: {describe_failure(exc, compiled.expose_errors)}"
            )
        size = len(pydantic_core.to_json(result.content))
        if size > tool.max_result_bytes:
            return _error(
                f"tool {tool.name!r} returned {size} bytes, more than its limit of "
                f"{tool.max_result_bytes}"
            )
        return result


def _loopback_socket() -> socket.socket:
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    except OSError as exc:
        raise TransportError(f"the tool server cannot open a socket: {exc}") from None
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise TransportError(f"the tool server cannot listen on 127.0.0.1: {exc}") from None
    sock.setblocking(False)
    return sock


@contextlib.asynccontextmanager
async def serve_tools(
    execution: ExecutionMcp, compiled: CompiledTools
) -> AsyncIterator[McpServerHttp]:
    """Serve ``execution``'s tools on loopback; yields the server's configuration for the
    agent's sessions (its URL and the bearer secret). Leaving stops it."""
    secret = secrets.token_urlsafe(32)
    server = _ToolServer(execution, compiled)
    app = server.streamable_http_app(
        host="127.0.0.1",
        token_verifier=_Verifier(secret, execution.execution_id),
        auth=AuthSettings(
            issuer_url=pydantic.AnyHttpUrl("http://127.0.0.1"), resource_server_url=None
        ),
    )
    config = Config()
    config.accesslog = None
    config.errorlog = logging.getLogger("acpfsm.runtime.mcp.http")
    config.graceful_timeout = _GRACEFUL_SHUTDOWN
    gate = ConnectionGate(app, secret, max_connections=MAX_CONNECTIONS, idle=execution.idle_timeout)
    sock = _loopback_socket()
    port = sock.getsockname()[1]
    unregister = execution.on_mode_change(server.announce)
    stop = anyio.Event()
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(serve_gated, app, config, sock, gate, stop)
            try:
                yield McpServerHttp(
                    name=TOOL_SERVER_NAME,
                    url=f"http://127.0.0.1:{port}/mcp",
                    headers={"Authorization": f"Bearer {secret}"},
                )
            finally:
                stop.set()
    finally:
        unregister()
        sock.close()
