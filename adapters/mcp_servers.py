"""The MCP servers offered to an agent's sessions, in ACP's ``McpServer`` shapes.

ACP fixes a session's MCP servers when it is created: ``session/new`` and ``session/load``
carry ``mcpServers``, each one a stdio server (a command the agent starts), an HTTP
(streamable HTTP) or an SSE server (a URL the agent connects to, with headers). Every agent
takes stdio servers; it takes HTTP and SSE ones only when its ``initialize`` answer says so
(``agentCapabilities.mcpCapabilities.http`` / ``.sse``). :func:`split_mcp_servers` keeps what
the agent can take and says why each other one is left out.

The three shapes are tagged structs (``type``: ``stdio``, ``http``, ``sse``), so a list of
them decodes from JSON or TOML with ``msgspec.convert(data, list[McpServer])``. The stdio
transport writes them as ACP objects (``env`` and ``headers`` as name/value lists); the
agentctl transport as agentctl's ``McpServer`` JSON (maps).

Header values and the values of secret-looking environment variables are credentials:
:func:`mcp_server_secrets` lists them so that the executors mask them in what they record.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import msgspec

from .redaction import secret_values

if TYPE_CHECKING:
    from .transport import InitializeResult

__all__ = [
    "McpRequestHandler",
    "McpServer",
    "McpServerHttp",
    "McpServerSse",
    "McpServerStdio",
    "mcp_server_kind",
    "mcp_server_secrets",
    "split_mcp_servers",
]


class McpServerStdio(msgspec.Struct, frozen=True, kw_only=True, tag="stdio", tag_field="type"):
    """A server the agent starts itself: ``command`` (an absolute path, ACP says) with
    ``args`` and ``env`` added to its environment."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = {}


class _UrlServer(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    name: str
    url: str
    headers: dict[str, str] = {}


class McpServerHttp(_UrlServer, frozen=True, kw_only=True, tag="http"):
    """A streamable-HTTP server at ``url``; ``headers`` go with every request (a bearer
    token, for instance). Needs ``mcpCapabilities.http``."""


class McpServerSse(_UrlServer, frozen=True, kw_only=True, tag="sse"):
    """A (legacy) SSE server at ``url``, with ``headers``. Needs ``mcpCapabilities.sse``."""


McpServer: TypeAlias = McpServerStdio | McpServerHttp | McpServerSse
"""Any MCP server configuration ACP can carry."""

McpRequestHandler = Callable[[str, Any], Awaitable[Any]]
"""Answers a carrier's own MCP request (agentctl's ``mcp.*`` actions): ``(action, payload)``
→ the response payload. Raising answers with an error (an ``AgentctlError`` keeps its
``code``)."""


def mcp_server_kind(server: McpServer) -> str:
    """``stdio``, ``http`` or ``sse``."""
    tag = type(server).__struct_config__.tag
    assert isinstance(tag, str)
    return tag


def _refusal(server: McpServer, caps: InitializeResult | None) -> str:
    kind = mcp_server_kind(server)
    if kind == "stdio" or caps is None:
        return ""
    supported = caps.mcp_http if kind == "http" else caps.mcp_sse
    if supported is None:  # the carrier does not say; it filters itself (agentctl)
        return ""
    if supported:
        return ""
    return f"the agent does not take {kind} MCP servers (its mcpCapabilities.{kind} is not true)"


def split_mcp_servers(
    servers: Iterable[McpServer], caps: InitializeResult | None
) -> tuple[list[McpServer], list[tuple[McpServer, str]]]:
    """The servers an agent with capabilities ``caps`` can take, in order, and each other
    one with the reason it is left out: a transport the agent does not advertise, or a name
    an earlier server already has (agents key their servers by name). Stdio servers are
    always taken; where ``caps`` does not report MCP support (``None``: agentctl filters on
    its side) HTTP and SSE servers are passed on."""
    kept: list[McpServer] = []
    dropped: list[tuple[McpServer, str]] = []
    names: set[str] = set()
    for server in servers:
        reason = _refusal(server, caps)
        if not reason and server.name in names:
            reason = f"an earlier MCP server is also named {server.name!r}"
        if reason:
            dropped.append((server, reason))
        else:
            names.add(server.name)
            kept.append(server)
    return kept, dropped


def mcp_server_secrets(servers: Sequence[McpServer]) -> list[str]:
    """The credentials in ``servers``: the values of secret-looking headers and environment
    variables (``Authorization``, ``X-Api-Key``, ``GITHUB_TOKEN`` …), and the credential of
    an ``Authorization: <scheme> <credential>`` value on its own."""
    out: list[str] = []
    for server in servers:
        if isinstance(server, McpServerStdio):
            out += secret_values(server.env)
            continue
        for value in secret_values(server.headers):
            out.append(value)
            _, sep, credential = value.partition(" ")
            if sep and credential.strip():
                out.append(credential.strip())
    return out
