"""One execution's MCP side: the servers its sessions are offered, its MCP mode, and the calls
the agent makes back into the app.

:class:`RuntimeTools` holds the Runtime's declared tool sets (compiled once, with the MCP SDK,
when any of them has tools). :class:`ExecutionMcp` is made per execution: it starts the
execution's tool server (:mod:`.server`) before the agent and stops it after the agent, so
every session the execution opens (``session/new``, ``session/load``) is offered it beside
the profile's and the launch's servers; it answers agentctl's ``mcp.*`` requests from the
current mode's actions; and it switches the mode (:meth:`ExecutionMcp.set_mode`), after
which the tool server announces ``notifications/tools/list_changed``.

Nothing here imports the MCP SDK: :mod:`.server` is imported when a tool server starts.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import anyio

from acpfsm.adapters.errors import AcpfsmError, AgentctlError
from acpfsm.adapters.executor import AgentLaunch, Executor
from acpfsm.adapters.mcp_servers import McpServer, McpServerHttp
from acpfsm.adapters.transport import AgentTransport

from .. import events as le
from .tools import ToolDeclarationError, ToolSet, describe_failure

if TYPE_CHECKING:
    from .server import CompiledTools

__all__ = [
    "EVENT_TEXT_LIMIT",
    "KANDEV_MCP_MODES",
    "TOOL_SERVER_NAME",
    "ExecutionMcp",
    "RuntimeTools",
    "clip",
]

log = logging.getLogger("acpfsm.runtime.mcp")

KANDEV_MCP_MODES = ("task", "config", "office")
"""The modes of kandev's facade (runtime/runtime.go ``LaunchSpec.McpMode``): agentctl's embedded
MCP server knows them, and ``set_mcp_mode`` forwards them to it."""

TOOL_SERVER_NAME = "acpfsm"
"""The name the app's tool server has in every session's ``mcpServers``."""

EVENT_TEXT_LIMIT = 4096
"""Arguments and results quoted in events are cut at this many characters."""

ModeListener = Callable[[], Awaitable[None]]


def clip(text: str, limit: int = EVENT_TEXT_LIMIT) -> str:
    """``text``, cut at ``limit`` characters with a note of how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):  # a cycle
        return repr(value)


class RuntimeTools:
    """The Runtime's tool sets, by mode. The tools are compiled (their schemas derived, with
    the MCP SDK) when the Runtime is made, so a tool that cannot be served fails there."""

    def __init__(self, tool_sets: Iterable[ToolSet]) -> None:
        self.sets: dict[str, ToolSet] = {}
        for tool_set in tool_sets:
            if tool_set.name in self.sets:
                raise ToolDeclarationError(f"two tool sets named {tool_set.name!r}")
            self.sets[tool_set.name] = tool_set
        self.compiled: CompiledTools | None = None
        if any(s.tools for s in self.sets.values()):
            try:
                from .server import CompiledTools
            except ImportError as exc:
                raise ToolDeclarationError(
                    f"serving tools needs the MCP SDK and hypercorn ({exc}): "
                    "pip install 'acpfsm[mcp]'"
                ) from None
            self.compiled = CompiledTools(self.sets.values())

    @property
    def modes(self) -> tuple[str, ...]:
        """Every mode an execution may be in: the tool sets' and kandev's."""
        return tuple(dict.fromkeys([*self.sets, *KANDEV_MCP_MODES]))

    @property
    def default_mode(self) -> str:
        """The mode of a launch that names none: the first tool set's."""
        return next(iter(self.sets), "")

    @property
    def has_actions(self) -> bool:
        return any(s.actions for s in self.sets.values())


class ExecutionMcp:
    """See the module docstring. ``publish`` is set by the execution's session."""

    def __init__(
        self,
        *,
        execution_id: str,
        servers: Iterable[McpServer],
        tools: RuntimeTools | None,
        mode: str,
        call_timeout: float,
        idle_timeout: float = 5.0,
    ) -> None:
        self.execution_id = execution_id
        self.static_servers = tuple(servers)
        self.tools = tools
        self.mode = mode
        self.call_timeout = call_timeout
        self.idle_timeout = idle_timeout
        """How long a tool server connection may go without an authenticated request."""
        self.tool_server: McpServerHttp | None = None
        """The running tool server's configuration (its URL and bearer secret)."""
        self.publish: Callable[[le.RuntimeEvent], None] = lambda event: None
        self._listeners: list[ModeListener] = []

    # ------------------------------------------------------------------ servers --

    def servers(self) -> tuple[McpServer, ...]:
        """What the execution's sessions are offered: the profile's and the launch's servers,
        then the tool server (once it runs)."""
        if self.tool_server is None:
            return self.static_servers
        return (*self.static_servers, self.tool_server)

    @property
    def action_handler(self) -> Callable[[str, Any], Awaitable[Any]] | None:
        """Answers agentctl's ``mcp.*`` requests, when any tool set declares actions."""
        if self.tools is None or not self.tools.has_actions:
            return None
        return self.handle_action

    @contextlib.asynccontextmanager
    async def open_transport(
        self, executor: Executor, launch: AgentLaunch
    ) -> AsyncIterator[AgentTransport]:
        """Start the tool server (when there are tools), then the agent; leaving stops the
        agent, then the tool server."""
        async with contextlib.AsyncExitStack() as stack:
            if self.tools is not None and self.tools.compiled is not None:
                from .server import serve_tools

                self.tool_server = await stack.enter_async_context(
                    serve_tools(self, self.tools.compiled)
                )
            launch = replace(launch, mcp_servers=self.servers(), mcp_handler=self.action_handler)
            try:
                async with executor.open(launch) as transport:
                    yield transport
            finally:
                self.tool_server = None

    # ------------------------------------------------------------------ mode --

    def current_set(self) -> ToolSet | None:
        return self.tools.sets.get(self.mode) if self.tools is not None else None

    def on_mode_change(self, listener: ModeListener) -> Callable[[], None]:
        """Call ``listener`` after each mode switch; returns the unregistering function."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    async def set_mode(self, mode: str) -> None:
        """Switch to ``mode`` (already validated): the tools listed and the actions answered
        from now on; the tool server announces the change (bounded, best effort)."""
        previous, self.mode = self.mode, mode
        self.publish(
            le.McpModeChanged(execution_id=self.execution_id, mode=mode, previous=previous)
        )
        for listener in list(self._listeners):
            with anyio.move_on_after(self.call_timeout):
                await listener()

    # ------------------------------------------------------------------ calls --

    def call_started(self, kind: str, name: str, arguments: Any) -> str:
        call_id = uuid.uuid4().hex[:12]
        self.publish(
            le.McpCallStarted(
                execution_id=self.execution_id,
                call_id=call_id,
                kind=kind,
                name=name,
                mode=self.mode,
                arguments=clip(_json(arguments)),
            )
        )
        return call_id

    def call_ended(
        self, call_id: str, kind: str, name: str, *, output: str = "", error: str = ""
    ) -> None:
        self.publish(
            le.McpCallEnded(
                execution_id=self.execution_id,
                call_id=call_id,
                kind=kind,
                name=name,
                mode=self.mode,
                output=clip(output),
                error=clip(error),
            )
        )

    async def handle_action(self, action: str, payload: Any) -> Any:
        """agentctl's ``mcp.*`` request: answered by the current mode's handler for
        ``action``, bounded by ``call_timeout``; an action the mode does not serve is refused
        (``UNKNOWN_ACTION``), a failing or hanging handler answers with an error."""
        call_id = self.call_started("action", action, payload)
        tool_set = self.current_set()
        handlers: Mapping[str, Callable[[Any], Awaitable[Any]]] = (
            tool_set.actions if tool_set is not None else {}
        )
        handler = handlers.get(action)
        if handler is None:
            error = f"acpfsm does not serve {action} in MCP mode {self.mode!r}"
            raise self._refused(call_id, action, error, "UNKNOWN_ACTION")
        try:
            with anyio.fail_after(self.call_timeout):
                result = await handler(payload)
        except TimeoutError:
            error = f"{action} did not answer within {self.call_timeout:g}s"
            raise self._refused(call_id, action, error, "INTERNAL_ERROR") from None
        except AcpfsmError as exc:
            self.call_ended(call_id, "action", action, error=str(exc))
            raise
        except Exception as exc:
            log.warning("mcp action %s of %s failed", action, self.execution_id, exc_info=True)
            assert tool_set is not None  # it has the handler
            error = f"{action} failed: {describe_failure(exc, tool_set.expose_errors)}"
            raise self._refused(call_id, action, error, "INTERNAL_ERROR") from None
        self.call_ended(call_id, "action", action, output=_json(result))
        return result

    def _refused(self, call_id: str, action: str, error: str, code: str) -> AgentctlError:
        """The error answering ``action`` (agentctl tells the agent), once its end is published."""
        self.call_ended(call_id, "action", action, error=error)
        return AgentctlError(error, code=code, action=action)
