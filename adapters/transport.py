"""The one seam the runtime drives, whatever carries it (stdio pipes now, agentctl next).

A transport is connected to one agent process and at most one ACP session. Requests are
awaited; the agent's activity arrives on :meth:`AgentTransport.events` as an ordered stream of
:mod:`acpfsm.adapters.events`. ``prompt`` and ``steer`` are acknowledged at once: the turn's
end arrives later as a ``Complete``/``ErrorEvent`` stamped with the prompt generation.

Errors are always :class:`acpfsm.adapters.errors.AcpfsmError` subclasses; the runtime turns
them into chart events through :func:`acpfsm.adapters.classify.classify_error`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import anyio
import anyio.lowlevel
import msgspec
import sniffio

from .errors import LocalProtocolError
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
    "EventQueue",
    "Flag",
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
    "cancellation_check",
    "reject_option",
    "reject_permission_policy",
]

_T = TypeVar("_T")


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
        try:
            data = await anyio.Path(attachment.path).read_bytes()
        except OSError as exc:
            raise LocalProtocolError(
                f"cannot read attachment {attachment.name!r} at {attachment.path}: "
                f"{exc.strerror or exc}"
            ) from None
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
    return reject_option(request.permission_options)


async def allow_once_permission_policy(request: PermissionRequest) -> str | None:
    """Allow this one request (:func:`allow_once_option`); refuse it when it offers no
    ``allow_once`` option. Only for agents you trust with the workspace (the reference
    agent, tests, sandboxes)."""
    options = request.permission_options
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


def _library() -> str:
    """The running async library's name ("" outside one)."""
    try:
        return sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return ""


def cancellation_check() -> Callable[[], Awaitable[None]]:
    """The running backend's ``checkpoint_if_cancelled`` as a plain function (what
    :func:`anyio.lowlevel.checkpoint_if_cancelled` calls after looking the backend up on every
    call): for a loop that checks at every item of a stream."""
    if _library() == "trio":
        import trio.lowlevel

        return trio.lowlevel.checkpoint_if_cancelled
    return anyio.lowlevel.checkpoint_if_cancelled


class _Event(Protocol):
    """What :class:`Flag`, :class:`Wakeup` and :class:`Mutex` need of an event."""

    def set(self) -> object: ...

    def is_set(self) -> bool: ...

    async def wait(self) -> object: ...


def _event_class() -> Callable[[], _Event]:
    """The running backend's own event class (``trio.Event``, ``asyncio.Event``): what
    :class:`anyio.Event` wraps, without the backend lookup it makes for every instance.
    Waiting on it is cancelled by anyio's cancel scopes as waiting on anyio's is."""
    library = _library()
    if library == "trio":
        import trio

        return trio.Event
    if library == "asyncio":
        import asyncio

        return asyncio.Event
    return anyio.Event


class Flag:
    """A one-shot event like :class:`anyio.Event` (``set``, ``is_set``, ``wait``) that
    allocates nothing until someone waits: most of the runtime's per-prompt flags are set
    before anyone waits on them, or never waited on at all."""

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: _Event | None = None

    def set(self) -> None:
        if not self._set:
            self._set = True
            if self._event is not None:
                self._event.set()

    def is_set(self) -> bool:
        return self._set

    async def wait(self) -> None:
        """Return once set (a checkpoint, as :meth:`anyio.Event.wait` is)."""
        if self._set:
            await anyio.lowlevel.checkpoint()
            return
        if self._event is None:
            self._event = _event_class()()
        await self._event.wait()

    def __repr__(self) -> str:
        return f"<Flag {'set' if self._set else 'unset'}>"


class Mutex:
    """An async mutex for the runtime's own locks: taking a free one costs no scheduler pass
    and no event, only a bool (anyio's ``Lock(fast_acquire=True)`` also takes its backend's
    lock and checks cancellation, which costs more than the runtime's whole step under it).

    With ``check_cancelled`` an acquisition raises in a cancelled caller, as anyio's does;
    without, it takes a free mutex whatever the caller's scopes say (the caller meets its
    cancellation at its next checkpoint). A taken mutex queues its callers first come,
    first served: its release hands it to the first one still waiting (a waiter cancelled
    while it was being handed the mutex hands it on). It is not re-entrant and knows no
    owner: a task that takes it twice waits for itself."""

    __slots__ = ("_check", "_locked", "_waiters")

    def __init__(self, *, check_cancelled: bool = True) -> None:
        self._check = check_cancelled
        self._locked = False
        self._waiters: deque[_Event] = deque()

    def locked(self) -> bool:
        return self._locked

    async def __aenter__(self) -> None:
        if self._check:
            await anyio.lowlevel.checkpoint_if_cancelled()
        if not self._locked:  # nobody waits for a free mutex: a release hands it over
            self._locked = True
            return
        handed = _event_class()()
        self._waiters.append(handed)
        try:
            await handed.wait()
        except BaseException:
            if handed.is_set():  # it was ours already: the next one gets it
                self._release()
            else:
                self._waiters.remove(handed)
            raise

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._release()

    def _release(self) -> None:
        if self._waiters:
            self._waiters.popleft().set()  # still locked: the first waiter's now
        else:
            self._locked = False


class Wakeup:
    """Wakes whoever waits at that moment (an event of the running backend, re-armed after
    each wake), allocating an event only while someone waits: most wakes find nobody
    waiting."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event: _Event | None = None

    def wake(self) -> None:
        event = self._event
        if event is not None:
            self._event = None
            event.set()

    async def wait(self) -> None:
        """Return at the next :meth:`wake`."""
        if self._event is None:
            self._event = _event_class()()
        await self._event.wait()


class EventQueue(Generic[_T]):
    """Unbounded single-consumer FIFO; ``close()`` ends iteration after what is queued.

    The consumer drains what is already buffered before it yields: after a wait (which
    yielded) it takes the items that are there one by one, seeing cancellation at every item,
    and yields to the other tasks once every ``batch`` items. A burst of thousands of events
    (an agent's flood) is thus consumed in a few scheduling rounds, not in one round per event,
    which with many executions sharing the event loop made each event wait for all of them.
    A ``put`` wakes the consumer only when it waits: no event is set, nor allocated, per item."""

    def __init__(self, *, batch: int = 64) -> None:
        self.items: deque[_T] = deque()
        self._wakeup = Wakeup()
        self.closed = False
        self._batch = batch
        self._taken = 0
        self._check: Callable[[], Awaitable[None]] | None = None

    def __len__(self) -> int:
        return len(self.items)

    def put(self, item: _T) -> None:
        self.items.append(item)
        self._wakeup.wake()

    def close(self) -> None:
        self.closed = True
        self._wakeup.wake()

    async def changed(self) -> None:
        """Wait for the next ``put`` or ``close``."""
        await self._wakeup.wait()

    def take(self) -> _T | None:
        """The next item already queued, without waiting and without a checkpoint; ``None``
        when the queue is empty or ``batch`` items were taken since the consumer last
        yielded (then :meth:`__anext__` waits or yields). A consumer that handles an item
        without yielding takes the next one this way: a burst costs no coroutine per item,
        and it still yields once per ``batch``. It sees no cancellation: after an item whose
        handling yielded, go back to :meth:`__anext__`, which does."""
        if self.items and self._taken < self._batch:
            self._taken += 1
            return self.items.popleft()
        return None

    def __aiter__(self) -> EventQueue[_T]:
        return self

    async def __anext__(self) -> _T:
        if not self.items:
            while not self.items:
                if self.closed:
                    raise StopAsyncIteration
                await self.changed()
            self._taken = 0  # waiting has yielded
        elif self._taken >= self._batch:
            self._taken = 0
            await anyio.lowlevel.checkpoint()  # a long backlog: let the others run
            if not self.items:  # another consumer took it meanwhile
                return await self.__anext__()
        else:
            check = self._check
            if check is None:
                check = self._check = cancellation_check()
            await check()
        self._taken += 1
        return self.items.popleft()


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
