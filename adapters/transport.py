"""The one seam the runtime drives, whatever carries it (stdio pipes now, agentctl next).

A transport is connected to one agent process and at most one ACP session. Requests are
awaited; the agent's activity arrives on :meth:`AgentTransport.events` as an ordered stream of
:mod:`acpfsm.adapters.events`. ``prompt`` and ``steer`` are acknowledged at once: the turn's
end arrives later as a ``Complete``/``ErrorEvent`` stamped with the prompt generation.

Errors are always :class:`acpfsm.adapters.errors.AcpfsmError` subclasses; the runtime turns
them into chart events through :func:`acpfsm.adapters.classify.classify_error`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import anyio
import anyio.lowlevel
import msgspec

from .errors import ExceptionMapping, LocalProtocolError, map_exceptions
from .events import (
    AgentEvent,
    ConfigOption,
    ModeInfo,
    ModelInfo,
    PermissionOption,
    PermissionRequest,
)
from .mcp_servers import McpServer, McpServerHttp, McpServerSse, McpServerStdio

__all__ = [
    "REJECT_KINDS",
    "AgentInfo",
    "AgentTransport",
    "Attachment",
    "CancelResult",
    "InitializeResult",
    "McpServer",
    "McpServerHttp",
    "McpServerSse",
    "McpServerStdio",
    "PermissionPolicy",
    "PermissionPrompts",
    "RedialPolicy",
    "SessionResult",
    "SupportsMcpMode",
    "allow_once_option",
    "allow_once_permission_policy",
    "attachment_content",
    "reject_option",
    "reject_permission_policy",
]


class AgentInfo(msgspec.Struct, frozen=True, kw_only=True):
    name: str = "unknown"
    version: str = "unknown"


class InitializeResult(msgspec.Struct, frozen=True, kw_only=True):
    protocol_version: int
    agent: AgentInfo = AgentInfo()
    load_session: bool = False
    prompt_queueing: bool = False
    supports_image: bool = False
    supports_audio: bool = False
    supports_embedded_context: bool = False
    auth_methods: list[dict[str, Any]] = []
    session_capabilities: list[str] = []
    """The ``agentCapabilities.sessionCapabilities`` advertised (``close``, ``fork``, ``list``,
    ``resume`` …), by wire name."""
    meta: dict[str, Any] = {}
    """The agent's ``_meta`` extensions (initialize response and its capabilities), as sent."""
    unmodelled: dict[str, Any] = {}
    """The fields of the agent's initialize answer acpfsm does not model, as sent and nested
    where they were (e.g. ``{"agentCapabilities": {"auth": {"logout": {}}}}``); empty when the
    carrier does not forward the answer (agentctl). See :func:`acpfsm.adapters.acp.messages.unmodelled`."""
    mcp_http: bool | None = None
    """Whether the agent takes HTTP MCP servers (``mcpCapabilities.http``); ``None`` when the
    carrier does not report it (agentctl, which filters the servers on its side)."""
    mcp_sse: bool | None = None
    """Likewise for SSE MCP servers (``mcpCapabilities.sse``)."""


class SessionResult(msgspec.Struct, frozen=True, kw_only=True):
    """What session/new or session/load returned synchronously (the catalog snapshot, R30).

    ``has_model_state`` is false when the response carried no models and no config options
    (the catalog is then unknown until a ``session_models`` event arrives)."""

    session_id: str
    current_model_id: str = ""
    models: list[ModelInfo] = []
    config_options: list[ConfigOption] = []
    current_mode_id: str = ""
    modes: list[ModeInfo] = []
    has_model_state: bool = False


class Attachment(msgspec.Struct, frozen=True, kw_only=True):
    """A prompt attachment. ``path`` (a local file) or ``data`` (bytes) is the source;
    ``delivery_mode`` is ``"prompt"`` (inline content block) or ``"path"``."""

    name: str
    mime_type: str = "application/octet-stream"
    path: str = ""
    data: bytes = b""
    attachment_id: str = ""
    delivery_mode: str = "prompt"
    size: int = 0


async def attachment_content(attachment: Attachment) -> tuple[bytes, str]:
    """The attachment's bytes (``data``, else the file at ``path``) and its MIME type (guessed
    from the name when it is the generic default). An unreadable file is a
    :class:`LocalProtocolError` naming it."""
    data = attachment.data
    if not data and attachment.path:
        unreadable: ExceptionMapping = {
            OSError: lambda exc: LocalProtocolError(
                f"cannot read attachment {attachment.name!r} at {attachment.path}: "
                f"{exc.strerror or exc}"
            )
        }
        with map_exceptions(unreadable):
            data = await anyio.Path(attachment.path).read_bytes()
    mime = attachment.mime_type
    if mime == "application/octet-stream":
        import mimetypes  # rare path (and reads the system's MIME tables): imported here

        guessed, _ = mimetypes.guess_type(attachment.path or attachment.name)
        mime = guessed or mime
    return data, mime


class CancelResult(msgspec.Struct, frozen=True, kw_only=True):
    """``acknowledged`` is false when the agent did not end its turn within the transport's
    bound (agentctl's ``not_acknowledged``); the lifecycle then escalates at once."""

    acknowledged: bool = True


class RedialPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """The timing of a lost carrier's redials (seconds). The transport only states it: the
    runtime's AgentStream chart decides whether and when to dial and when to give up, and the
    runtime waits :meth:`delay` before each dial and gives up after ``budget``."""

    initial_delay: float = 0.1
    """The wait before the first dial after a loss."""
    max_delay: float = 1.0
    """The longest wait between two dials (the wait doubles after each failed dial)."""
    budget: float = 30.0
    """How long after the loss the carrier is given up if no dial succeeded."""

    def delay(self, failures: int) -> float:
        """The wait before the next dial when ``failures`` dials have failed since the loss."""
        return min(self.initial_delay * 2.0 ** min(failures, 32), self.max_delay)

    def scaled(self, factor: float) -> RedialPolicy:
        return RedialPolicy(
            initial_delay=self.initial_delay * factor,
            max_delay=self.max_delay * factor,
            budget=self.budget * factor,
        )


PermissionPolicy = Callable[[PermissionRequest], Awaitable[str | None]]
"""Decides a permission request: the chosen ``option_id``, or ``None`` to answer ``cancelled``.
A transport puts every ``session/request_permission`` (agentctl: ``permission_request``) to
the policy it was given; the runtime gives each execution its own (see
:class:`~acpfsm.adapters.executor.AgentLaunch`)."""

REJECT_KINDS: tuple[str, ...] = ("reject_once", "reject_always")
"""The option kinds that refuse, in order of preference (ACP ``PermissionOptionKind``)."""


def reject_option(options: Sequence[PermissionOption]) -> str | None:
    """The option that refuses: the ``reject_once`` one, else the ``reject_always`` one,
    else ``None`` (the request is then answered ``cancelled``). Never an allow option,
    whatever the order the agent listed them in."""
    for kind in REJECT_KINDS:
        for option in options:
            if option.kind == kind:
                return option.option_id
    return None


def allow_once_option(options: Sequence[PermissionOption]) -> str | None:
    """The ``allow_once`` option, else ``None``: never ``allow_always``, which would allow
    every later request of the kind without asking."""
    return next((o.option_id for o in options if o.kind == "allow_once"), None)


async def reject_permission_policy(request: PermissionRequest) -> str | None:
    """The default policy: refuse (:func:`reject_option`; ``cancelled`` when the request
    offers no reject option). An agent with it cannot run a tool that needs permission."""
    return reject_option(request.options)


async def allow_once_permission_policy(request: PermissionRequest) -> str | None:
    """Allow this one request (:func:`allow_once_option`); refuse it when it offers no
    ``allow_once`` option. Only for agents you trust with the workspace (the reference
    agent, tests, sandboxes)."""
    options = request.options
    return allow_once_option(options) or reject_option(options)


class PermissionPrompts:
    """The permission questions a transport has put to its policy and not had answered yet;
    any of them can be withdrawn (the policy is cancelled, the answer is ``cancelled``)."""

    def __init__(self, policy: PermissionPolicy) -> None:
        self.policy = policy
        # each question's scope and its request id: keyed by the scope, so that an agent
        # reusing the id of a question still open can neither hide nor end the first's
        self._scopes: dict[anyio.CancelScope, str] = {}
        self._none_left: anyio.Event | None = None

    async def ask(self, request: PermissionRequest) -> tuple[str | None, bool]:
        """The policy's choice, and whether the question was withdrawn meanwhile (the
        choice is then ``None``)."""
        choice: str | None = None
        with anyio.CancelScope() as scope:
            self._scopes[scope] = request.request_id
            try:
                choice = await self.policy(request)
            finally:
                del self._scopes[scope]
                if not self._scopes and self._none_left is not None:
                    self._none_left.set()
                    self._none_left = None
        return (None, True) if scope.cancelled_caught else (choice, False)

    def withdraw(self, request_id: str) -> None:
        """Withdraw the open questions with this request id."""
        for scope, rid in list(self._scopes.items()):
            if rid == request_id:
                scope.cancel()

    def withdraw_all(self) -> None:
        for scope in list(self._scopes):
            scope.cancel()

    async def withdraw_all_and_wait(self) -> None:
        """Withdraw every question and return once the policy has returned for each (so
        whatever it does on a withdrawal is done)."""
        self.withdraw_all()
        while self._scopes:
            if self._none_left is None:
                self._none_left = anyio.Event()
            await self._none_left.wait()


@runtime_checkable
class AgentTransport(Protocol):
    """Everything the runtime needs from a carrier. Implementations: ``StdioTransport``
    (acpfsm.adapters.acp) and ``AgentctlTransport`` (acpfsm.adapters.agentctl)."""

    @property
    def capabilities(self) -> InitializeResult | None: ...

    @property
    def reconnectable(self) -> bool:
        """Whether a lost connection can come back (agentctl's WebSocket; never stdio pipes;
        no longer once the carrier was given up or closed)."""
        ...

    @property
    def redial_policy(self) -> RedialPolicy:
        """The timing of this carrier's redials (unused when it is not ``reconnectable``)."""
        ...

    @property
    def endpoint(self) -> str:
        """Where the agent is reached: agentctl's instance URL ("" for a local process)."""
        ...

    async def initialize(self) -> InitializeResult: ...

    async def authenticate(self, method_id: str) -> None:
        """ACP ``authenticate`` with one of the agent's advertised ``authMethods`` (after
        initialize, before any session)."""
        ...

    async def new_session(
        self, cwd: str, mcp_servers: Sequence[McpServer] = ()
    ) -> SessionResult: ...

    async def load_session(
        self, session_id: str, cwd: str, mcp_servers: Sequence[McpServer] = ()
    ) -> SessionResult: ...

    async def prompt(
        self, text: str, attachments: Sequence[Attachment], generation: int
    ) -> None: ...

    async def steer(
        self, text: str, attachments: Sequence[Attachment], generation: int
    ) -> None: ...

    async def cancel(self) -> CancelResult: ...

    async def set_model(self, model_id: str) -> None: ...

    async def set_mode(self, mode_id: str) -> None: ...

    async def set_config_option(self, config_id: str, value: str) -> None: ...

    async def materialize_attachment(self, attachment: Attachment) -> Attachment: ...

    def is_connected(self) -> bool: ...

    async def redial(self) -> None:
        """One dial of a lost carrier (after ``StreamDisconnected(reconnecting=True)``).
        Returns once it is up again, with :class:`~.events.StreamReconnected` queued on
        :meth:`events` ahead of the new connection's events; a no-op while connected. Raises
        :class:`~.errors.DialFailed` when a later dial may succeed, and
        :class:`~.errors.DialRefused` when none can (refused credentials, a carrier that
        cannot redial, a closed or given-up one). The transport never redials on its own
        account: the caller decides when (the runtime's AgentStream chart)."""
        ...

    def give_up(self, reason: str) -> None:
        """End the carrier for good (the caller will not redial it): every turn still owed an
        end gets an ``ErrorEvent``, then the final ``StreamDisconnected`` (``reason`` in its
        error) ends :meth:`events`; requests raise ``TransportClosed`` from now on. A no-op
        once the carrier has ended."""
        ...

    def events(self) -> AsyncIterator[AgentEvent]:
        """The ordered event stream (single consumer); it ends after the final
        ``stream_disconnected`` and needs no closing of its own."""
        ...

    async def stop_agent(self) -> None:
        """Ask the agent to stop gracefully, where the carrier offers it (agentctl's
        ``/api/v1/stop``); a no-op elsewhere."""
        ...

    async def aclose(self) -> None: ...


@runtime_checkable
class SupportsMcpMode(AgentTransport, Protocol):
    """A carrier that serves MCP tools of its own whose set follows the execution's MCP mode
    (agentctl's embedded MCP server: ``AgentctlTransport``)."""

    async def set_mcp_mode(self, mode: str) -> None: ...
