"""What every side of :class:`~.transport.AgentctlTransport` shares: its requests' and
sockets' records, the carrier's end as queued, and the state and cross-calls of its sides
(declared for the type checker only): the socket (``_agentctl_socket``), the events
(``_agentctl_events``) and the operations (``_agentctl_ops``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.abc
import msgspec
import wsproto.events
import wsproto.utilities
from httpx_ws import (
    AsyncWebSocketSession,
    HTTPXWSException,
)

from ..errors import (
    UNDECODABLE_JSON,
    AcpfsmError,
    ExceptionMapping,
    RemoteProtocolError,
    map_exceptions,
)
from ..events import (
    AgentCapabilities,
    AgentEvent,
    MessageChunk,
    PermissionRequest,
    Plan,
    Reasoning,
    StreamDisconnected,
    StreamReconnected,
    ToolCall,
    ToolUpdate,
)
from ..mcp_servers import McpRequestHandler
from ..redaction import Redactor
from ..sync import EventQueue
from ..transport import InitializeResult, PermissionPrompts, RedialPolicy
from .control import AgentctlConfig, InstanceClient

_CLEAN_CLOSE_CODES: Final = frozenset({1000, 1001})
_STAMPED = (MessageChunk, Reasoning, ToolCall, ToolUpdate, Plan, PermissionRequest)
_SEND_ERRORS: Final = (
    HTTPXWSException,
    wsproto.utilities.LocalProtocolError,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    OSError,
    TimeoutError,
)


class _Pending:
    __slots__ = ("action", "code", "done", "error", "lost", "payload")

    def __init__(self, action: str) -> None:
        self.action = action
        self.done = anyio.Event()
        self.payload: msgspec.Raw | None = None
        self.error: str | None = None  # the error frame's message
        self.code = ""
        self.lost: AcpfsmError | None = None  # the socket went away first


class _Connection:
    """One WebSocket and the requests waiting on it."""

    def __init__(self, ws: AsyncWebSocketSession, number: int) -> None:
        self.ws = ws
        self.number = number
        self.pending: dict[str, _Pending] = {}
        self.scope = anyio.CancelScope()
        self.drop_reason = ""
        self.drop_clean = False
        self.reported = False  # its loss was reported

    def release(self, error: AcpfsmError) -> None:
        pending, self.pending = self.pending, {}
        for waiter in pending.values():
            waiter.lost = error
            waiter.done.set()


def _decode_payload(raw: msgspec.Raw | None, action: str) -> dict[str, Any]:
    if raw is None:
        return {}
    invalid: ExceptionMapping = {
        UNDECODABLE_JSON: lambda exc: RemoteProtocolError(
            f"invalid {action} response from agentctl: {exc}"
        )
    }
    with map_exceptions(invalid):
        data = msgspec.json.decode(raw)
    return data if isinstance(data, dict) else {}


class _Fatal:
    """The end of the carrier, queued behind the events that precede it."""

    __slots__ = ("dead_message", "exit_code", "message", "stderr_tail")

    def __init__(
        self,
        message: str,
        dead_message: str,
        *,
        exit_code: int | None = None,
        stderr_tail: str = "",
    ) -> None:
        self.message = message
        self.dead_message = dead_message
        self.exit_code = exit_code
        self.stderr_tail = stderr_tail


class _AgentctlBase:
    """The transport's shared state and the methods its sides call on one another."""

    if TYPE_CHECKING:
        instance: InstanceClient
        config: AgentctlConfig
        _redact: Redactor
        _permissions: PermissionPrompts
        _mcp_handler: McpRequestHandler | None
        _auto_redial: bool
        _conn: _Connection | None
        _connections: int
        _dials: int
        _lost_reason: str
        _inbox: EventQueue[Any]
        _events: EventQueue[AgentEvent]
        _owed: list[int]
        _caps: InitializeResult | None
        _caps_seen: anyio.Event
        _wire_caps: AgentCapabilities | None
        _session_id: str | None
        _loading: bool
        _models_seq: int
        _models_changed: anyio.Event
        _pending_ids: dict[str, str]
        _dead: AcpfsmError | None
        _closing: bool
        _closed: anyio.Event
        _tg: anyio.abc.TaskGroup | None
        _run_scope: anyio.CancelScope | None
        start_error: AcpfsmError | None
        carrier_events: list[StreamDisconnected | StreamReconnected]

        def _emit(self, event: AgentEvent) -> None: ...
        def _finish(
            self, error: str, *, exit_code: int | None = None, stderr_tail: str = ""
        ) -> None: ...
        def _lose(self, conn: _Connection) -> None: ...
        def _check_open(self) -> None: ...
        async def _request(
            self, action: str, payload: Any, *, bound: float | None = None
        ) -> dict[str, Any]: ...
        async def redial(self) -> None: ...
        def give_up(self, reason: str) -> None: ...
        def _settle(self, generation: int) -> None: ...
        @property
        def redial_policy(self) -> RedialPolicy: ...
