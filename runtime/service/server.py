"""``acpfsm serve``: a :class:`~acpfsm.runtime.Runtime` answering requests over NATS.

:class:`Service` answers on the connection of the Runtime's
:class:`~acpfsm.runtime.bus.NatsBus`: ``acpfsm.rpc.launch`` in the queue group
``acpfsm-serve`` (the serve processes of a pool share the new launches),
``acpfsm.rpc.list`` (every process answers with its own executions) and
``acpfsm.rpc.exec.<execution id>.<op>`` for each execution it owns (a request about an
execution reaches the one process that owns it; none: NATS says no responders at once). Each
request (:mod:`.wire`) is answered with the Runtime's result or the error it raised. Every request runs in a task of its own, at most
``max_in_flight`` at once (beyond: :class:`~.wire.ServiceBusy`); a request that cannot be
read is :class:`~.wire.RequestInvalid`, an unknown operation ``Unsupported``; the service
stays up whatever a request holds. A request is handed from the NATS client's callback to
the service's loop as it arrives (nothing polls); at most ``pending`` are on their way at
once (beyond: answered :class:`~.wire.ServiceBusy` at once). A reply is handed to the NATS
client and not waited for (a failure to send it is logged).
"""

from __future__ import annotations

import contextlib
import logging
import math
import uuid
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
import nats.errors

from acpfsm.adapters.errors import AcpfsmError

from .._aioloop import caller_soon
from ..bus.nats_bus import NatsBus
from ..errors import ExecutionNotFound
from ..runtime import Runtime
from .wire import (
    CancelRequest,
    GetRequest,
    LaunchRequest,
    ListRequest,
    PingRequest,
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

__all__ = ["QUEUE", "RPC_PREFIX", "Service", "exec_subject"]

log = logging.getLogger("acpfsm.serve")

RPC_PREFIX = "acpfsm.rpc"
READ_ONLY = (GetRequest, ListRequest, PingRequest)
"""The requests that change nothing (answered without waiting for the store)."""
QUEUE = "acpfsm-serve"


async def _subscribe(
    nc: Any, subject: str, queue: str, take: Callable[[bytes, str], bool], busy: bytes
) -> Any:
    async def received(msg: Any) -> None:  # on the asyncio loop: never blocks nats-py's reader
        if msg.reply and not take(msg.data, msg.reply):
            await nc.publish(msg.reply, busy)

    return await nc.subscribe(subject, queue=queue, cb=received)


async def _respond(nc: Any, reply: str, body: bytes) -> None:
    try:
        await nc.publish(reply, body)
    except (nats.errors.Error, OSError) as exc:
        log.warning("serve: a reply could not be sent: %s", type(exc).__name__)


async def _unsubscribe(sub: Any) -> None:
    await sub.unsubscribe()


def exec_subject(prefix: str, execution_id: str, op: str) -> str:
    """Where a request about one execution goes: ``<prefix>.exec.<execution id>.<op>``."""
    return f"{prefix}.exec.{execution_id}.{op}"


class Service:
    """Runtimes answering requests on ``bus``'s connection (see the module docstring):
    ``runtime`` takes the new launches; :meth:`host` adds one taken over from another
    process."""

    def __init__(
        self,
        runtime: Runtime,
        bus: NatsBus,
        *,
        prefix: str = RPC_PREFIX,
        queue: str = QUEUE,
        max_in_flight: int = 1000,
        pending: int = 10_000,
        member: str = "",
    ) -> None:
        self.member = member or uuid.uuid4().hex
        """This process's name in the pool (answered to ``ping``)."""
        self.runtime = runtime
        self.runtimes: list[Runtime] = [runtime]
        self.bus = bus
        self.prefix = prefix
        self.queue = queue
        self.max_in_flight = max_in_flight
        self.pending = pending
        self.in_flight = 0
        self.answered = 0
        self._take: Callable[[bytes, str], bool] | None = None
        self._subs: dict[str, Any] = {}
        self._busy = error_reply(ServiceBusy("too many requests waiting"))

    async def _subscribe(self, key: str, subject: str, queue: str = "") -> None:
        if key not in self._subs:
            self._subs[key] = await self.bus.runner.run(
                _subscribe, self.bus._nc, subject, queue, self._take, self._busy
            )

    async def _unsubscribe(self, key: str) -> None:
        sub = self._subs.pop(key, None)
        if sub is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                await self.bus.runner.run(_unsubscribe, sub)

    async def own(self, execution_id: str) -> None:
        """Answer the requests about ``execution_id`` here."""
        await self._subscribe(execution_id, exec_subject(self.prefix, execution_id, "*"))

    async def host(self, runtime: Runtime) -> None:
        """Answer for every execution of ``runtime`` too (taken over from another process)."""
        self.runtimes.append(runtime)
        for execution in runtime.list_executions():
            await self.own(execution.id)

    async def forget(self, runtime: Runtime) -> None:
        if runtime in self.runtimes and runtime is not self.runtime:
            self.runtimes.remove(runtime)

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Answer requests until cancelled."""
        send, receive = anyio.create_memory_object_stream[tuple[bytes, str]](math.inf)
        soon = caller_soon(self.bus.runner)
        counts = [0, 0]  # handed over (the NATS loop's), taken (this loop's): one writer each

        def hand(item: tuple[bytes, str]) -> None:  # on this loop; must not raise
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                send.send_nowait(item)  # unbounded: `take` bounds it

        def take(body: bytes, reply: str) -> bool:  # on the NATS client's loop
            if counts[0] - counts[1] >= self.pending:
                return False
            try:
                soon(hand, (body, reply))
            except Exception:  # noqa: BLE001 - this loop has ended: answered busy
                return False
            counts[0] += 1
            return True

        self._take = take
        try:
            await self._subscribe("launch", f"{self.prefix}.launch", self.queue)
            await self._subscribe("list", f"{self.prefix}.list")
            for execution in self.runtime.list_executions():
                await self.own(execution.id)
            async with anyio.create_task_group() as tg, receive:
                task_status.started()
                async for body, reply in receive:
                    counts[1] += 1
                    if self.in_flight >= self.max_in_flight:
                        self._send(reply, self._busy)
                        continue
                    self.in_flight += 1
                    tg.start_soon(self._handle, body, reply)
        finally:
            for key in list(self._subs):
                await self._unsubscribe(key)
            send.close()

    async def _handle(self, body: bytes, reply: str) -> None:
        try:
            try:
                request = decode_request(body)
                try:
                    out = result_reply(await self._dispatch(request))
                finally:
                    if not isinstance(request, READ_ONLY):
                        await self._committed()
            except AcpfsmError as exc:
                out = error_reply(exc)
            except Exception as exc:  # a bug: told to the caller, logged, contained
                log.exception("serve: a request failed")
                out = error_reply(exc)
            if len(out) > self.bus.max_payload - 1024:
                out = error_reply(AcpfsmError(f"the reply is too large ({len(out)} bytes)"))
            self._send(reply, out)
            self.answered += 1
        finally:
            self.in_flight -= 1

    async def _committed(self) -> None:
        """Wait until what the request changed is in the store (bounded by its flush
        timeout): a caller told that its prompt was dispatched (or an execution launched,
        stopped) finds it there after a take-over, however soon this process dies."""
        for rt in list(self.runtimes):
            with anyio.CancelScope(shield=True):
                await rt.flush()

    def _send(self, reply: str, body: bytes) -> None:
        """Hand ``body`` to the NATS client (not waited for: a failure is logged there)."""
        try:
            self.bus.runner.post(_respond, self.bus._nc, reply, body)
        except RuntimeError:  # the bus is closing: nobody hears the reply
            log.warning("serve: a reply could not be sent: the bus is closed")

    def _owner(self, execution_id: str) -> Runtime:
        """The runtime that holds ``execution_id`` (ExecutionNotFound: none here)."""
        for rt in self.runtimes:
            try:
                rt.get_execution(execution_id)
            except ExecutionNotFound:
                continue
            except AcpfsmError:
                return rt  # it holds it (lost, …): its call raises the reason
            return rt
        raise ExecutionNotFound(execution_id)

    async def _dispatch(self, request: Request) -> object:
        if isinstance(request, LaunchRequest):
            ref = await self.runtime.launch(request.spec)
            await self.own(ref.id)
            return ref
        if isinstance(request, ListRequest):
            return [e for rt in self.runtimes for e in rt.list_executions()]
        rt = self._owner(request.execution_id)
        if isinstance(request, PingRequest):
            return self.member
        match request:
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
                final = await rt.stop(request.execution_id, request.reason, force=request.force)
                await self._unsubscribe(request.execution_id)
                return final
            case GetRequest(execution_id=execution_id):
                return rt.get_execution(execution_id)
            case SetMcpModeRequest(execution_id=execution_id, mode=mode):
                await rt.set_mcp_mode(execution_id, mode)
                return None
        raise AssertionError(request)  # pragma: no cover - every request type is matched
