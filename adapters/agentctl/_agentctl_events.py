"""The event side of :class:`~.transport.AgentctlTransport`: agentctl's events, one worker in
order, mapped onto acpfsm's, the owed turns stamped and settled, the agent's death told as
the stdio transport tells it, the permission requests put to the policy."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import anyio.abc
import msgspec

from ..errors import (
    AcpfsmError,
    TransportClosed,
)
from ..events import (
    AgentCapabilities,
    AgentEvent,
    Complete,
    ErrorEvent,
    PermissionCancelled,
    PermissionRequest,
    Plan,
    SessionModels,
    SessionStatus,
    StreamDisconnected,
    StreamReconnected,
    TurnStarted,
)
from . import _wire
from ._agentctl_base import (
    _STAMPED,
    _AgentctlBase,
    _Fatal,
)

log = logging.getLogger("acpfsm.adapters.agentctl.transport")


class _EventSide(_AgentctlBase):
    """agentctl's events in order; the agent's death; permission requests."""

    # ------------------------------------------------------------------ events

    def _emit(self, event: AgentEvent) -> None:
        if not self._events.closed:
            if isinstance(event, StreamDisconnected | StreamReconnected):
                self.carrier_events.append(event)
            self._events.put(event)

    def _finish(self, error: str, *, exit_code: int | None = None, stderr_tail: str = "") -> None:
        if self._events.closed:
            return
        self._emit(
            StreamDisconnected(
                session_id=self._session_id or "",
                error=error,
                exit_code=exit_code,
                stderr_tail=stderr_tail,
            )
        )
        self._events.close()

    def _active_generation(self) -> int:
        return self._owed[0] if self._owed else 0

    def _settle(self, generation: int) -> None:
        if generation in self._owed:
            self._owed.remove(generation)
        elif generation == 0 and self._owed:
            self._owed.pop(0)

    async def _event_worker(self) -> None:
        async for item in self._inbox:  # never closed: the worker ends with the task group
            await self._process(item)

    async def _process(self, item: Any) -> None:
        if isinstance(item, _Fatal):
            self._die(item)
            return
        if not isinstance(item, tuple):  # an event the transport made itself
            self._emit(item)
            return
        wire, raw = item
        if _wire.is_process_exit(wire):
            self._die(self._exit_fatal(wire))
            return
        event = _wire.to_event(wire, raw)
        if (
            isinstance(event, ErrorEvent)
            and self._may_be_death(wire)
            and await self._await_exit_event()
        ):
            return  # the exit event (now processed) settled this turn too
        self._route(event, wire)

    def _may_be_death(self, wire: _wire.WireEvent) -> bool:
        provider = wire.provider_error or {}
        return (
            wire.prompt_generation in self._owed
            and provider.get("rpc_code") == -32603
            and wire.error == "Internal error"
        )

    async def _await_exit_event(self) -> bool:
        """Wait ≤ ``exit_grace`` for agentctl's process-exit event; when it comes, process
        what precedes it, then the death. True when the agent died."""
        with anyio.move_on_after(self.config.exit_grace):
            while True:
                for index, queued in enumerate(self._inbox.items):
                    if isinstance(queued, tuple) and _wire.is_process_exit(queued[0]):
                        before = [self._inbox.items.popleft() for _ in range(index)]
                        exit_item = self._inbox.items.popleft()
                        for other in before:
                            await self._process(other)
                        self._die(self._exit_fatal(exit_item[0]))
                        return True
                await self._inbox.changed()
        return False

    def _exit_fatal(self, wire: _wire.WireEvent) -> _Fatal:
        data = wire.data or {}
        code = data.get("exit_code")
        lines = [self._redact(x) for x in data.get("recent_stderr") or () if isinstance(x, str)]
        description = f"agent process exited with code {code}"
        message = f"peer disconnected before response: {description}"
        if lines:
            message += "; stderr: " + "; ".join(lines[-10:])
        return _Fatal(
            message,
            f"peer disconnected: {description}",
            exit_code=code if type(code) is int else None,
            stderr_tail="\n".join(lines[-20:]),
        )

    def _die(self, fatal: _Fatal) -> None:
        """The agent (or agentctl) is gone: every owed turn ends with the death, then the
        final ``stream_disconnected`` (what the stdio transport emits for a dead pipe)."""
        if self._dead is None:
            self._dead = TransportClosed(fatal.dead_message)
        for generation in self._owed:
            self._emit(
                ErrorEvent(
                    session_id=self._session_id or "",
                    prompt_generation=generation,
                    error=fatal.message,
                    data={
                        "transport_closed": True,
                        "exit_code": fatal.exit_code,
                        "stderr_tail": fatal.stderr_tail,
                    },
                )
            )
        self._owed.clear()
        self._permissions.withdraw_all()
        self._finish(fatal.message, exit_code=fatal.exit_code, stderr_tail=fatal.stderr_tail)
        log.warning("agent carrier ended: %s", fatal.message)

    def _route(self, event: AgentEvent, wire: _wire.WireEvent) -> None:
        if isinstance(event, Complete | ErrorEvent):
            self._settle(event.prompt_generation)
        elif isinstance(event, _STAMPED) and event.prompt_generation == 0:
            if isinstance(event, Plan) and self._loading:
                event = msgspec.structs.replace(event, replayed=True)
            else:
                event = msgspec.structs.replace(event, prompt_generation=self._active_generation())
        if isinstance(event, SessionStatus | TurnStarted):
            self._loading = False
        elif isinstance(event, AgentCapabilities):
            self._wire_caps = event
            self._caps_seen.set()
        elif isinstance(event, SessionModels):
            if event.data.get("config_options_source") == "provider_response":
                self._models_seq += 1
                self._models_changed.set()
                self._models_changed = anyio.Event()
        elif isinstance(event, PermissionRequest):
            self._pending_ids[event.request_id] = wire.pending_id or event.request_id
            assert self._tg is not None
            self._tg.start_soon(self._ask_permission, event)
        elif isinstance(event, PermissionCancelled):
            self._permissions.withdraw(event.request_id)
        self._emit(event)

    async def _ask_permission(self, event: PermissionRequest) -> None:
        pending_id = self._pending_ids.get(event.request_id, event.request_id)
        choice, withdrawn = await self._permissions.ask(event)
        self._pending_ids.pop(event.request_id, None)
        if withdrawn or self._closing:
            return
        payload: dict[str, Any] = {"pending_id": pending_id}
        if choice is None:
            payload["cancelled"] = True
        else:
            payload["option_id"] = choice
        try:
            await self._request("agent.permissions.respond", payload)
        except AcpfsmError as exc:
            log.info("permission answer for %s not delivered: %s", event.request_id, exc)
