"""Tools the app declares for its agents: typed async Python functions in named tool sets.

::

    @tool
    async def lookup_ticket(ticket_id: str) -> str:
        \"\"\"The title and status of a ticket.\"\"\"
        return f"{ticket_id}: open"

    rt = Runtime(tool_sets=[ToolSet("task", tools=[lookup_ticket])])

A tool's name is the function's (or ``name=``), its description the docstring (or
``description=``), its JSON input schema derived from the signature when the tool is served
(or given as ``input_schema=``: the arguments are then checked against it and passed as
keywords). Each call is bounded by ``timeout`` (default: the Runtime's
``Timeouts.tool_call``) and its result by ``max_result_bytes``; a tool that raises, runs too
long or returns too much answers the agent with an MCP tool error, never more.

What the agent is told of a tool's exception is the tool's name and the exception's type
(``tool 'lookup' failed: OperationalError``): an exception's message may hold what the agent
must not see (a database URL with its password). The app opts in to more per tool set or per
tool (``expose_errors``): ``True`` adds the message, a function of the exception adds the text
it returns (the app's own redaction). The same holds for the ``actions``' failures.

A :class:`ToolSet` is one MCP mode: the tools the agent sees while the execution is in that
mode, and the ``actions`` that answer kandev's ``mcp.*`` requests (agentctl's embedded MCP
server) in it. ``Runtime.set_mcp_mode`` switches between them while the execution runs.

Declaring tools imports nothing of the MCP SDK; serving them does (the ``acpfsm[mcp]`` extra).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from acpfsm.adapters.errors import AcpfsmError

__all__ = [
    "DEFAULT_MAX_RESULT_BYTES",
    "ErrorExposure",
    "Tool",
    "ToolDeclarationError",
    "ToolFunction",
    "ToolSet",
    "describe_failure",
    "tool",
]

log = logging.getLogger("acpfsm.runtime.mcp")

DEFAULT_MAX_RESULT_BYTES = 1024 * 1024
"""The largest result a tool may return (1 MiB of JSON content); more is a tool error."""

ToolFunction = Callable[..., Awaitable[Any]]

ErrorExposure = bool | Callable[[BaseException], str]
"""What the agent is told of a tool's (or an action's) exception beyond the name and the
exception's type: ``False`` nothing more (the default), ``True`` its message, or a function of
the exception returning the text to tell (the app's redaction)."""


def describe_failure(exc: BaseException, expose: ErrorExposure) -> str:
    """``exc`` as the agent may be told it under ``expose``: its type, and the message or the
    redaction's text when the app opted in. A redaction that raises tells the type alone."""
    kind = type(exc).__name__
    if expose is False:
        return kind
    if expose is True:
        text = str(exc)
    else:
        try:
            text = str(expose(exc))
        except Exception:  # noqa: BLE001 - the app's redaction: its failure hides the message
            log.warning("the error redaction failed on %s; the agent is told its type", kind)
            return kind
    return f"{kind}: {text}" if text else kind


class ToolDeclarationError(AcpfsmError):
    """A tool or tool set that cannot be served as declared (not an ``async def``, two tools
    of one name, an action that is not ``mcp.*``, a signature without a JSON schema …)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Tool:
    """One app-declared tool (see the module docstring); calling it calls the function."""

    fn: ToolFunction
    name: str
    description: str = ""
    input_schema: Mapping[str, Any] | None = None
    """The JSON schema of the arguments; ``None``: derived from the signature."""
    timeout: float | None = None
    """Seconds one call may take; ``None``: the Runtime's ``Timeouts.tool_call``."""
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    expose_errors: ErrorExposure | None = None
    """What the agent is told of this tool's exceptions (:data:`ErrorExposure`); ``None``:
    its tool set's ``expose_errors``."""

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return await self.fn(*args, **kwargs)


def _make(
    fn: ToolFunction,
    name: str | None,
    description: str | None,
    input_schema: Mapping[str, Any] | None,
    timeout: float | None,
    max_result_bytes: int,
    expose_errors: ErrorExposure | None = None,
) -> Tool:
    if not inspect.iscoroutinefunction(fn):
        raise ToolDeclarationError(f"tool {getattr(fn, '__name__', fn)!r} is not an async def")
    tool_name = name or fn.__name__
    if not tool_name or tool_name == "<lambda>":
        raise ToolDeclarationError("a tool needs a name")
    if timeout is not None and timeout <= 0:
        raise ToolDeclarationError(f"tool {tool_name!r}: timeout must be positive")
    if max_result_bytes <= 0:
        raise ToolDeclarationError(f"tool {tool_name!r}: max_result_bytes must be positive")
    return Tool(
        fn=fn,
        name=tool_name,
        description=inspect.cleandoc(description or fn.__doc__ or ""),
        input_schema=dict(input_schema) if input_schema is not None else None,
        timeout=timeout,
        max_result_bytes=max_result_bytes,
        expose_errors=expose_errors,
    )


@overload
def tool(fn: ToolFunction, /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    input_schema: Mapping[str, Any] | None = None,
    timeout: float | None = None,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    expose_errors: ErrorExposure | None = None,
) -> Callable[[ToolFunction], Tool]: ...


def tool(
    fn: ToolFunction | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    input_schema: Mapping[str, Any] | None = None,
    timeout: float | None = None,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    expose_errors: ErrorExposure | None = None,
) -> Tool | Callable[[ToolFunction], Tool]:
    """Declare an async function as a tool: ``@tool`` or ``@tool(name=…, timeout=…)``."""
    if fn is not None:
        return _make(fn, name, description, input_schema, timeout, max_result_bytes, expose_errors)

    def decorate(inner: ToolFunction) -> Tool:
        return _make(
            inner, name, description, input_schema, timeout, max_result_bytes, expose_errors
        )

    return decorate


@dataclass(frozen=True, slots=True)
class ToolSet:
    """One MCP mode: its ``tools`` (functions or :class:`Tool`) and the ``actions`` answering
    kandev's ``mcp.*`` requests (``{"mcp.create_task": handler}``; a handler takes the
    request's payload and returns the answer's). ``expose_errors`` says what the agent is
    told of their exceptions (:data:`ErrorExposure`; a tool's own setting wins)."""

    name: str
    tools: Sequence[Tool | ToolFunction] = ()
    actions: Mapping[str, Callable[[Any], Awaitable[Any]]] = field(default_factory=dict)
    expose_errors: ErrorExposure = False

    def __post_init__(self) -> None:
        if not self.name:
            raise ToolDeclarationError("a tool set needs a name (its MCP mode)")
        tools = tuple(t if isinstance(t, Tool) else tool(t) for t in self.tools)
        seen: set[str] = set()
        for item in tools:
            if item.name in seen:
                raise ToolDeclarationError(f"tool set {self.name!r}: two tools named {item.name!r}")
            seen.add(item.name)
        for action, handler in self.actions.items():
            if not action.startswith("mcp."):
                raise ToolDeclarationError(
                    f"tool set {self.name!r}: action {action!r} is not an mcp.* action"
                )
            if not callable(handler):
                raise ToolDeclarationError(f"tool set {self.name!r}: {action} is not callable")
        if not isinstance(self.expose_errors, bool) and not callable(self.expose_errors):
            raise ToolDeclarationError(
                f"tool set {self.name!r}: expose_errors is a bool or a function of the exception"
            )
        object.__setattr__(self, "tools", tools)
        object.__setattr__(self, "actions", dict(self.actions))

    def tool_list(self) -> tuple[Tool, ...]:
        """The tools, each as a :class:`Tool`."""
        return tuple(t for t in self.tools if isinstance(t, Tool))
