"""The reference agent as an MCP client: the servers a session was given, their tools, calls.

At ``session/new`` and ``session/load`` the agent connects to each MCP server of the request
(``mcpServers``: stdio, and http since it advertises ``mcpCapabilities.http``) in the
background, with the official MCP SDK's client, and lists its tools. A prompt's
``[[tools]]`` directive lists them again (so a switched tool set shows), ``[[tool:NAME
{json}]]`` calls one. Every wait is bounded: a server that does not answer is reported, never
waited on forever. Headers (credentials) are never logged.

The SDK is imported here only once a session has MCP servers.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread
import msgspec
from anyio.abc import TaskGroup

__all__ = [
    "CallOutcome",
    "McpLink",
    "ServerConfig",
    "SessionMcp",
    "clip",
    "decode_arguments",
    "describe",
    "parse_servers",
]

log = logging.getLogger("acpfsm.reference_agent")

CONNECT_SECONDS = 20.0
"""How long a server may take to connect and list its tools, by default
(``--mcp-connect-seconds``: a loaded machine starting a stdio server may need longer)."""
CALL_SECONDS = 120.0
"""How long one tool call may take."""
TEXT_LIMIT = 4000
"""Characters of a tool result quoted in the reply."""


@dataclass(frozen=True)
class ServerConfig:
    """One entry of ``mcpServers`` (ACP's shapes), decoded tolerantly."""

    name: str
    kind: str  # "stdio" | "http" | "sse" | what the client sent
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


def _pairs(raw: Any) -> dict[str, str]:
    if isinstance(raw, dict):
        return {str(k): str(v) for k, v in raw.items()}
    if isinstance(raw, list):
        return {
            str(p.get("name", "")): str(p.get("value", ""))
            for p in raw
            if isinstance(p, dict) and p.get("name")
        }
    return {}


def parse_servers(raw: Iterable[Any]) -> list[ServerConfig]:
    """The ``mcpServers`` of a request; entries that are not objects with a name are skipped."""
    out: list[ServerConfig] = []
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            log.warning("ignoring an mcpServers entry that is not a named object")
            continue
        kind = str(item.get("type") or ("stdio" if "command" in item else "unknown"))
        args = item.get("args")
        out.append(
            ServerConfig(
                name=item["name"],
                kind=kind,
                url=str(item.get("url") or ""),
                headers=_pairs(item.get("headers")),
                command=str(item.get("command") or ""),
                args=tuple(str(a) for a in args) if isinstance(args, list) else (),
                env=_pairs(item.get("env")),
            )
        )
    return out


@dataclass
class CallOutcome:
    server: str
    is_error: bool
    text: str


class McpLink:
    """One server of one session: connected in its own task, which holds the client open
    until the session's links are closed."""

    def __init__(self, config: ServerConfig, connect_seconds: float = CONNECT_SECONDS) -> None:
        self.config = config
        self.connect_seconds = connect_seconds
        self.client: Any = None
        self.tools: list[str] = []
        self.error = ""
        self.deadline = math.inf
        """When an unconnected server counts as unavailable (the loop's clock)."""
        self.settled = anyio.Event()
        self.closed = anyio.Event()

    def describe(self) -> str:
        if not self.error and self.client is None and anyio.current_time() >= self.deadline:
            # past its bound, still closing (the SDK waits for a stdio server to exit)
            self.error = f"not connected within {self.connect_seconds:g}s"
        if self.error:
            return f"{self.config.name} ({self.config.kind}): unavailable ({self.error})"
        if self.client is None:
            return f"{self.config.name} ({self.config.kind}): connecting"
        return f"{self.config.name} ({self.config.kind}): {', '.join(self.tools) or 'no tools'}"

    def _transport(self) -> Any:
        config = self.config
        if config.kind == "http":
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            http = create_mcp_http_client(headers=config.headers)
            return http, streamable_http_client(config.url, http_client=http)
        if config.kind == "stdio":
            from mcp import StdioServerParameters

            return None, StdioServerParameters(
                command=config.command, args=list(config.args), env=config.env or None
            )
        raise ValueError(f"this agent does not take {config.kind} MCP servers")

    async def run(self) -> None:
        try:
            # the connection is bounded, importing the SDK included (a loaded machine is
            # slow at both; the listing waits as long); once up, it lasts until the session
            # closes
            bound = self.connect_seconds
            self.deadline = anyio.current_time() + bound
            with anyio.CancelScope(deadline=self.deadline) as scope:
                # importing the SDK takes a while: off the event loop, which goes on answering
                await anyio.to_thread.run_sync(_import_sdk)
                from mcp import Client

                http, target = self._transport()
                async with (
                    http if http is not None else _NoClient(),
                    Client(target, cache=None, read_timeout_seconds=CALL_SECONDS) as c,
                ):
                    self.client = c
                    await self.relist()
                    self.settled.set()
                    scope.deadline = self.deadline = math.inf
                    await self.closed.wait()
            if scope.cancelled_caught:
                self.error = f"not connected within {bound:g}s"
                log.warning("MCP server %r: %s", self.config.name, self.error)
        except Exception as exc:  # noqa: BLE001 - any failure of a server is reported, not fatal
            self.error = describe(exc)
            log.warning("MCP server %r: %s", self.config.name, self.error)
        finally:
            self.client = None
            self.settled.set()

    async def relist(self) -> None:
        if self.client is None:
            return
        with anyio.fail_after(self.connect_seconds):
            result = await self.client.list_tools()
        self.tools = sorted(t.name for t in result.tools)


def _import_sdk() -> None:
    import mcp.client.streamable_http
    import mcp.shared._httpx_utils  # noqa: F401


class _NoClient:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


class SessionMcp:
    """The MCP servers of one session."""

    def __init__(
        self,
        configs: list[ServerConfig],
        task_group: TaskGroup,
        connect_seconds: float = CONNECT_SECONDS,
    ) -> None:
        self.connect_seconds = connect_seconds
        self.links = [McpLink(c, connect_seconds) for c in configs]
        for link in self.links:
            task_group.start_soon(link.run)

    def close(self) -> None:
        for link in self.links:
            link.closed.set()

    async def _settled(self) -> None:
        with anyio.move_on_after(self.connect_seconds):
            for link in self.links:
                await link.settled.wait()

    async def listing(self) -> str:
        """One line per server: its tools now (listed again), or why it is unavailable."""
        await self._settled()
        for link in self.links:
            try:
                await link.relist()
            except Exception as exc:  # noqa: BLE001 - reported in the listing
                link.error = describe(exc)
        if not self.links:
            return "MCP tools: no MCP servers."
        return "MCP tools: " + "; ".join(link.describe() for link in self.links) + "."

    async def call(self, name: str, arguments: dict[str, Any]) -> CallOutcome:
        """Call the tool ``name`` on the first server that lists it (listed again first)."""
        await self._settled()
        for link in self.links:
            if link.client is None:
                continue
            try:
                await link.relist()
            except Exception as exc:  # noqa: BLE001 - that server is skipped
                link.error = describe(exc)
                continue
            if name not in link.tools:
                continue
            try:
                with anyio.fail_after(CALL_SECONDS):
                    result = await link.client.call_tool(name, arguments)
            except Exception as exc:  # noqa: BLE001 - an MCP error is the call's outcome
                return CallOutcome(link.config.name, True, describe(exc))
            return CallOutcome(link.config.name, bool(result.is_error), _text(result.content))
        return CallOutcome("", True, f"no MCP server offers a tool named {name!r}")


def _text(content: list[Any]) -> str:
    parts = []
    for block in content:
        text = getattr(block, "text", None)
        parts.append(text if isinstance(text, str) else f"[{getattr(block, 'type', 'content')}]")
    return "".join(parts)


def clip(text: str) -> str:
    return text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT] + f"… ({len(text)} characters)"


def describe(exc: BaseException) -> str:
    """What went wrong, with the first failure inside an exception group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def decode_arguments(raw: str) -> tuple[dict[str, Any], str]:
    """A directive's JSON arguments (an object), or what is wrong with them."""
    if not raw.strip():
        return {}, ""
    try:
        value = msgspec.json.decode(raw.encode())
    except msgspec.DecodeError as exc:
        return {}, f"arguments are not JSON: {exc}"
    if not isinstance(value, dict):
        return {}, "arguments must be a JSON object"
    return value, ""
