"""``acpfsm serve``: a :class:`~acpfsm.runtime.Runtime` answering requests over NATS.

:class:`Service` subscribes to ``acpfsm.rpc.>`` in the queue group ``acpfsm-serve`` (several
serve processes share the requests) on the connection of the Runtime's
:class:`~acpfsm.runtime.bus.NatsBus`, and answers each request (:mod:`.wire`) with the
Runtime's result or the error it raised. Every request runs in a task of its own, at most
``max_in_flight`` at once (beyond: :class:`~.wire.ServiceBusy`); a request that cannot be
read is :class:`~.wire.RequestInvalid`, an unknown operation ``Unsupported``; the service
stays up whatever a request holds. The messages are taken from nats-py's subscription one at
a time (at most ``pending`` buffered: a flood is dropped by the client, not kept).
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import anyio.abc
import nats.errors

from acpfsm.adapters.errors import AcpfsmError

from ..bus.nats_bus import NatsBus
from ..runtime import Runtime
from .wire import (
    CancelRequest,
    GetRequest,
    LaunchRequest,
    ListRequest,
    PromptRequest,
    Request,
    ServiceBusy,
    SetMcpModeRequest,
    SteerRequest,
    StopRequest,
    decode_request,
    error_reply,
    result_reply,
)

__all__ = ["QUEUE", "RPC_PREFIX", "Service"]

log = logging.getLogger("acpfsm.serve")

RPC_PREFIX = "acpfsm.rpc"
QUEUE = "acpfsm-serve"


async def _subscribe(nc: Any, subject: str, queue: str, pending: int) -> Any:
    return await nc.subscribe(subject, queue=queue, pending_msgs_limit=pending)


async def _next(sub: Any, wait: float) -> tuple[str, bytes, str] | None:
    try:
        msg = await sub.next_msg(timeout=wait)
    except nats.errors.TimeoutError:
        return None
    return msg.subject, msg.data, msg.reply


async def _respond(nc: Any, reply: str, body: bytes) -> None:
    await nc.publish(reply, body)


async def _unsubscribe(sub: Any) -> None:
    await sub.unsubscribe()


class Service:
    """``runtime`` answering requests on ``bus``'s connection (see the module docstring)."""

    def __init__(
        self,
        runtime: Runtime,
        bus: NatsBus,
        *,
        prefix: str = RPC_PREFIX,
        queue: str = QUEUE,
        max_in_flight: int = 1000,
        pending: int = 10_000,
    ) -> None:
        self.runtime = runtime
        self.bus = bus
        self.prefix = prefix
        self.queue = queue
        self.max_in_flight = max_in_flight
        self.pending = pending
        self.in_flight = 0
        self.answered = 0

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Answer requests until cancelled."""
        bus = self.bus
        sub = await bus.runner.run(
            _subscribe, bus._nc, f"{self.prefix}.>", self.queue, self.pending
        )
        try:
            async with anyio.create_task_group() as tg:
                task_status.started()
                while True:
                    try:
                        msg = await bus.runner.run(_next, sub, 1.0)
                    except nats.errors.Error as exc:  # the connection is being re-established
                        log.debug("serve: %s", type(exc).__name__)
                        await anyio.sleep(0.2)
                        continue
                    if msg is None:
                        continue
                    _, body, reply = msg
                    if not reply:
                        continue  # nobody to answer
                    if self.in_flight >= self.max_in_flight:
                        tg.start_soon(self._send, reply, error_reply(ServiceBusy("busy")))
                        continue
                    self.in_flight += 1
                    tg.start_soon(self._handle, body, reply)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                await bus.runner.run(_unsubscribe, sub)

    async def _handle(self, body: bytes, reply: str) -> None:
        try:
            try:
                out = result_reply(await self._dispatch(decode_request(body)))
            except AcpfsmError as exc:
                out = error_reply(exc)
            except Exception as exc:  # a bug: told to the caller, logged, contained
                log.exception("serve: a request failed")
                out = error_reply(exc)
            if len(out) > self.bus.max_payload - 1024:
                out = error_reply(AcpfsmError(f"the reply is too large ({len(out)} bytes)"))
            await self._send(reply, out)
            self.answered += 1
        finally:
            self.in_flight -= 1

    async def _send(self, reply: str, body: bytes) -> None:
        try:
            await self.bus.runner.run(_respond, self.bus._nc, reply, body)
        except (nats.errors.Error, OSError) as exc:
            log.warning("serve: a reply could not be sent: %s", type(exc).__name__)

    async def _dispatch(self, request: Request) -> object:
        rt = self.runtime
        match request:
            case LaunchRequest(spec=spec):
                return await rt.launch(spec)
            case PromptRequest():
                return await rt.prompt(
                    request.execution_id,
                    request.text,
                    attachments=request.attachments,
                    dispatch_only=request.dispatch_only,
                    timeout=request.timeout,
                )
            case SteerRequest():
                return await rt.steer(
                    request.execution_id, request.text, attachments=request.attachments
                )
            case CancelRequest(execution_id=execution_id):
                await rt.cancel(execution_id)
                return None
            case StopRequest():
                return await rt.stop(request.execution_id, request.reason, force=request.force)
            case GetRequest(execution_id=execution_id):
                return rt.get_execution(execution_id)
            case ListRequest():
                return rt.list_executions()
            case SetMcpModeRequest(execution_id=execution_id, mode=mode):
                await rt.set_mcp_mode(execution_id, mode)
                return None
        raise AssertionError(request)  # pragma: no cover - every request type is matched
