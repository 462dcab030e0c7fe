"""An in-memory :class:`~acpfsm.adapters.transport.AgentTransport` for tests.

:class:`MemoryTransport` plays a scriptable agent without any process: every request is
recorded in :attr:`MemoryTransport.calls`; a test shapes behaviour with :attr:`handlers`
(``method → callable`` that may raise, return a value, or be async and block) and pushes agent
activity with :meth:`emit`, :meth:`complete`, :meth:`fail` and :meth:`disconnect`. By default
each prompt is acknowledged and left running until the test completes it
(``auto_complete=False``); with ``auto_complete=True`` it streams ``reply`` and ends with
``end_turn`` right away.

A carrier that can redial (agentctl's WebSocket) is played with ``reconnectable=True``:
:meth:`drop` loses the connection (requests fail with ``StreamNotConnected``; abnormally, or
as a clean close) and reports the loss; :meth:`restore` brings the network back, after which
the next :meth:`redial` succeeds (until then each fails with ``DialFailed``; a ``redial``
handler may raise ``DialRefused``), on the same event stream. Like agentctl's transport it
never redials on its own: the runtime decides when. :meth:`give_up` ends it as agentctl's
does. :meth:`disconnect` remains the final loss of a carrier that cannot redial (stdio pipes,
process exit).

The agent's permission requests are played with :meth:`request_permission`: as the real
transports do, the request is emitted as an event and put to ``permission_policy`` (its
executor sets the launch's), a cancel, steer, new prompt or close withdraws it, and the
answer is returned (and kept in :attr:`permission_answers`).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from .errors import DialFailed, DialRefused, SteerUnsupported, StreamNotConnected
from .events import (
    AgentEvent,
    Complete,
    ConfigOption,
    ErrorEvent,
    MessageChunk,
    ModelInfo,
    PermissionCancelled,
    PermissionRequest,
    SessionModels,
    StreamDisconnected,
    StreamReconnected,
)
from .sync import EventQueue
from .transport import (
    AgentInfo,
    Attachment,
    CancelResult,
    InitializeResult,
    McpServer,
    PermissionPolicy,
    PermissionPrompts,
    RedialPolicy,
    SessionResult,
    reject_permission_policy,
)

__all__ = ["MemoryTransport"]

Handler = Callable[..., Any]

_REDIAL = RedialPolicy()

DEFAULT_MODELS = (
    ModelInfo(model_id="fast", name="Fast"),
    ModelInfo(model_id="smart", name="Smart"),
)


class MemoryTransport:
    """A scriptable in-process agent (see the module docstring)."""

    def __init__(
        self,
        *,
        load_session: bool = True,
        prompt_queueing: bool = True,
        models: Sequence[ModelInfo] = DEFAULT_MODELS,
        current_model: str = "fast",
        config_options: Sequence[ConfigOption] = (),
        auto_complete: bool = False,
        reply: Sequence[str] = ("Hello", " world"),
        cancel_completes: bool = True,
        reconnectable: bool = False,
        redial_policy: RedialPolicy = _REDIAL,
        endpoint: str = "",
        mcp_http: bool | None = True,
        mcp_sse: bool | None = False,
        permission_policy: PermissionPolicy = reject_permission_policy,
    ) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.mcp_servers: list[tuple[str, tuple[McpServer, ...]]] = []
        """The MCP servers each session/new and session/load was given, in order."""
        self.permission_policy = permission_policy
        self.permission_answers: list[tuple[str, str | None]] = []
        """``(request_id, answer)`` of every permission request, in the order answered
        (``None``: answered ``cancelled``)."""
        self._permissions = PermissionPrompts(lambda request: self.permission_policy(request))
        self.reconnectable = reconnectable
        self.redial_policy = redial_policy
        self.endpoint = endpoint
        self.handlers: dict[str, Handler] = {}
        self.auto_complete = auto_complete
        self.reply = tuple(reply)
        self.cancel_completes = cancel_completes
        self._caps = InitializeResult(
            protocol_version=1,
            agent=AgentInfo(name="memory-agent", version="1"),
            load_session=load_session,
            prompt_queueing=prompt_queueing,
            mcp_http=mcp_http,
            mcp_sse=mcp_sse,
        )
        self.models = list(models)
        self.current_model = current_model
        self.config_options = list(config_options)
        self.session_id = ""
        self.connected = True
        self.reachable = True  # drop() … restore(): whether a redial would succeed
        self.running: list[int] = []  # generations whose turn is running
        self._initialized: InitializeResult | None = None
        self._events: EventQueue[AgentEvent] = EventQueue()
        self._counter = 0
        self._dials = 0  # since the last drop
        self._gone = False  # disconnect(), give_up() or aclose(): the carrier is gone for good

    # --- test controls -----------------------------------------------------------------

    def adopt_session(self, session_id: str, capabilities: InitializeResult | None) -> None:
        """Reattached to an agent that survived the app: its session and capabilities are
        the stored ones (nothing is initialized again)."""
        self.session_id = session_id
        self._initialized = capabilities or self._caps

    def emit(self, event: AgentEvent) -> None:
        if not self.connected:
            raise RuntimeError("MemoryTransport is disconnected")
        self._events.put(event)

    def complete(self, generation: int, stop_reason: str = "end_turn") -> None:
        if generation in self.running:
            self.running.remove(generation)
        self.emit(Complete(prompt_generation=generation, stop_reason=stop_reason))

    def fail(self, generation: int, error: str) -> None:
        if generation in self.running:
            self.running.remove(generation)
        self.emit(ErrorEvent(prompt_generation=generation, error=error))

    async def request_permission(self, request: PermissionRequest) -> str | None:
        """The agent asks permission: ``request`` is emitted, then put to the policy; returns
        the answer (``None``: ``cancelled``, also when the request was withdrawn meanwhile,
        which emits ``permission_cancelled``)."""
        self.emit(request)
        choice, withdrawn = await self._permissions.ask(request)
        if withdrawn and self.connected:
            self.emit(PermissionCancelled(request_id=request.request_id))
        self.permission_answers.append((request.request_id, choice))
        return choice

    def disconnect(self, error: str = "peer disconnected", *, exit_code: int | None = None) -> None:
        """The agent went away: the stream ends with ``StreamDisconnected``."""
        if self._gone:
            return
        self._permissions.withdraw_all()
        self._events.put(StreamDisconnected(error=error, exit_code=exit_code))
        self.connected = False
        self._gone = True
        self._events.close()

    def drop(self, error: str = "agent stream not connected", *, clean: bool = False) -> None:
        """A reconnectable carrier lost its connection (a WebSocket drop; with ``clean``, a
        normal close). Requests fail with ``StreamNotConnected`` and every redial fails until
        :meth:`restore`. The loss is reported as ``StreamDisconnected(error,
        reconnecting=True, clean=clean)``; the event stream stays open: the redialled
        connection's events follow on it."""
        if not self.reconnectable:
            raise RuntimeError("drop() needs reconnectable=True; use disconnect()")
        if not self.connected or self._gone:
            return
        self.connected = self.reachable = False
        self._dials = 0
        self._events.put(StreamDisconnected(error=error, reconnecting=True, clean=clean))

    def restore(self) -> None:
        """The network is back: the next :meth:`redial` succeeds."""
        if not self.reconnectable:
            raise RuntimeError("restore() needs reconnectable=True")
        self.reachable = True

    async def redial(self) -> None:
        """One dial (recorded as ``("redial", ())``): up again once :meth:`restore` was
        called (``StreamReconnected`` is queued first), else ``DialFailed``; a ``redial``
        handler replaces that decision (it may raise ``DialRefused``)."""
        self.calls.append(("redial", ()))
        if self._gone or not self.reconnectable:
            raise DialRefused("agent stream not redialled: the carrier is gone")
        if self.connected:
            return
        self._dials += 1
        handler = self.handlers.get("redial")
        if handler is not None:
            result = handler()
            if inspect.isawaitable(result):
                await result
        elif not self.reachable:
            raise DialFailed("agent stream dial failed: carrier unreachable")
        self.connected = self.reachable = True
        self._events.put(StreamReconnected(session_id=self.session_id, attempts=self._dials))

    def give_up(self, reason: str) -> None:
        """The carrier ends for good, as agentctl's does: an ``ErrorEvent`` for every running
        turn, then the final ``StreamDisconnected``."""
        self.calls.append(("give_up", (reason,)))
        if self._gone:
            return
        self._permissions.withdraw_all()
        message = f"agent stream lost and not redialled: {reason}"
        for generation in self.running:
            self._events.put(
                ErrorEvent(
                    prompt_generation=generation,
                    error=f"peer disconnected before response: {message}",
                    data={"transport_closed": True},
                )
            )
        self.running.clear()
        self._events.put(StreamDisconnected(error=message))
        self.connected = False
        self._gone = True
        self._events.close()

    # --- plumbing ----------------------------------------------------------------------

    async def _call(self, method: str, args: Any, default: Callable[[], Any]) -> Any:
        self.calls.append((method, args))
        if not self.connected:
            raise StreamNotConnected()
        handler = self.handlers.get(method)
        if handler is None:
            return default()
        result = handler(*args) if isinstance(args, tuple) else handler(args)
        if inspect.isawaitable(result):
            result = await result
        return result

    # --- AgentTransport --------------------------------------------------------------------

    @property
    def capabilities(self) -> InitializeResult | None:
        return self._initialized

    async def initialize(self) -> InitializeResult:
        result: InitializeResult = await self._call("initialize", (), lambda: self._caps)
        self._initialized = result
        return result

    async def authenticate(self, method_id: str) -> None:
        await self._call("authenticate", (method_id,), lambda: None)

    def _session_result(self, session_id: str) -> SessionResult:
        return SessionResult(
            session_id=session_id,
            current_model_id=self.current_model,
            models=list(self.models),
            config_options=list(self.config_options),
            has_model_state=bool(self.models or self.config_options),
        )

    async def new_session(self, cwd: str, mcp_servers: Sequence[McpServer] = ()) -> SessionResult:
        def default() -> SessionResult:
            self._counter += 1
            self.session_id = f"mem-session-{self._counter}"
            return self._session_result(self.session_id)

        self.mcp_servers.append(("session/new", tuple(mcp_servers)))
        result: SessionResult = await self._call("session/new", (cwd,), default)
        return result

    async def load_session(
        self, session_id: str, cwd: str, mcp_servers: Sequence[McpServer] = ()
    ) -> SessionResult:
        def default() -> SessionResult:
            self.session_id = session_id
            return self._session_result(session_id)

        self.mcp_servers.append(("session/load", tuple(mcp_servers)))
        result: SessionResult = await self._call("session/load", (session_id, cwd), default)
        return result

    async def prompt(self, text: str, attachments: Sequence[Attachment], generation: int) -> None:
        self._permissions.withdraw_all()  # as agentctl and stdio do before a new prompt

        def default() -> None:
            self.running.append(generation)
            if self.auto_complete:
                for chunk in self.reply:
                    self.emit(MessageChunk(text=chunk, prompt_generation=generation))
                self.complete(generation)

        await self._call("prompt", (text, tuple(attachments), generation), default)

    async def steer(self, text: str, attachments: Sequence[Attachment], generation: int) -> None:
        self._permissions.withdraw_all()

        def default() -> None:
            if not self._caps.prompt_queueing:
                raise SteerUnsupported("agent does not queue prompts")

        await self._call("steer", (text, tuple(attachments), generation), default)

    async def cancel(self) -> CancelResult:
        # as over a real carrier, the turn's end comes after the withdrawn requests were
        # answered (there it is read from the agent, here it would be emitted at once)
        await self._permissions.withdraw_all_and_wait()

        def default() -> CancelResult:
            if self.cancel_completes:
                for generation in list(self.running):
                    self.complete(generation, "cancelled")
            return CancelResult(acknowledged=True)

        result: CancelResult = await self._call("cancel", (), default)
        return result

    async def set_model(self, model_id: str) -> None:
        def default() -> None:
            self.current_model = model_id

        await self._call("set_model", (model_id,), default)

    async def set_mode(self, mode_id: str) -> None:
        await self._call("set_mode", (mode_id,), lambda: None)

    async def set_config_option(self, config_id: str, value: str) -> None:
        def default() -> None:
            self.emit(
                SessionModels(
                    current_model_id=self.current_model,
                    session_models=list(self.models),
                    config_options=list(self.config_options),
                    data={
                        "config_options_source": "provider_response",
                        "config_options_config_id": config_id,
                    },
                )
            )

        await self._call("set_config_option", (config_id, value), default)

    async def materialize_attachment(self, attachment: Attachment) -> Attachment:
        result: Attachment = await self._call("materialize", (attachment,), lambda: attachment)
        return result

    async def stop_agent(self) -> None:
        """The graceful stop a remote carrier offers (agentctl); recorded, then the default."""
        await self._call("stop_agent", (), lambda: None)

    def is_connected(self) -> bool:
        return self.connected

    def events(self) -> AsyncIterator[AgentEvent]:
        return self._events

    async def aclose(self) -> None:
        self.calls.append(("aclose", ()))
        self._permissions.withdraw_all()
        self.connected = False
        self._gone = True
        self._events.close()
