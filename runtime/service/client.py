""":class:`RemoteRuntime`: the Runtime's control calls, answered by ``acpfsm serve`` processes
over NATS, and the executions' events from the bus.

::

    async with RemoteRuntime("nats://127.0.0.1:4222") as rt:   # instead of Runtime(...)
        ref = await rt.launch(spec)
        result = await rt.prompt(ref.id, "hello")
        async with rt.events(ref.id, from_seq=0) as events:
            async for item in events: ...

``launch``, ``prompt``, ``steer``, ``cancel``, ``stop`` and ``set_mcp_mode`` have the
:class:`~acpfsm.runtime.Runtime`'s signatures (:class:`RuntimeControl`, which mypy checks both
against); ``get_execution`` and ``list_executions`` are coroutines here. An error raised in the
serve process is raised again as the same class, with its message, execution id and cause
(:func:`~.wire.raise_error`). No serve process answering is
:class:`~.wire.ServiceUnavailable`; no reply within the bound (``request_timeout``; a prompt's
own ``timeout`` plus it, else ``prompt_timeout``) is :class:`~.wire.ServiceTimeout`: both are
retryable. Nothing waits forever.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar

import msgspec
import nats.errors

from acpfsm.adapters.transport import Attachment

from ..bus.base import BusError, check_execution_id
from ..bus.nats_bus import NatsBus, NatsSubscription
from ..errors import ExecutionIdRequired, ExecutionNotFound
from ..types import Execution, ExecutionRef, LaunchSpec, PromptResult
from .server import RPC_PREFIX, exec_subject
from .wire import (
    CancelRequest,
    ExecutionUnreachable,
    GetRequest,
    LaunchRequest,
    ListRequest,
    PingRequest,
    PromptRequest,
    Reply,
    Request,
    RequestInvalid,
    ServiceTimeout,
    ServiceUnavailable,
    SetMcpModeRequest,
    SteerRequest,
    StopRequest,
    raise_error,
)

if TYPE_CHECKING:
    from ..runtime import Runtime

__all__ = ["RemoteRuntime", "RuntimeControl"]

T = TypeVar("T")
_encode = msgspec.json.Encoder().encode
_decode_reply = msgspec.json.Decoder(Reply).decode


class RuntimeControl(Protocol):
    """The control calls :class:`~acpfsm.runtime.Runtime` and :class:`RemoteRuntime` share."""

    async def launch(self, spec: LaunchSpec) -> ExecutionRef: ...

    async def prompt(
        self,
        execution_id: str,
        text: str,
        *,
        attachments: Sequence[Attachment] = (),
        dispatch_only: bool = False,
        timeout: float | None = None,  # noqa: ASYNC109 - the Runtime's signature
    ) -> PromptResult: ...

    async def resume(self, execution_id: str, prompt: str) -> PromptResult: ...

    async def steer(
        self, execution_id: str, text: str, *, attachments: Sequence[Attachment] = ()
    ) -> PromptResult: ...

    async def cancel(self, execution_id: str) -> None: ...

    async def stop(self, execution_id: str, reason: str, *, force: bool = False) -> Execution: ...

    async def set_mcp_mode(self, execution_id: str, mode: str) -> None: ...


async def _request(nc: Any, subject: str, body: bytes, bound: float) -> bytes:
    msg = await nc.request(subject, body, timeout=bound)
    return bytes(msg.data)


async def _watched(
    nc: Any, subject: str, body: bytes, bound: float, ping: str, ping_body: bytes, every: float
) -> bytes | None:
    """A long request, its owner asked ``ping`` every ``every`` seconds meanwhile: when it
    stops answering, or another process answers instead (it was taken over), the reply will
    never come: None."""
    task = asyncio.ensure_future(nc.request(subject, body, timeout=bound))
    owner = b""
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=every)
            if done:
                return bytes(task.result().data)
            try:
                answer = bytes((await nc.request(ping, ping_body, timeout=every)).data)
            except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                return None
            if owner and answer != owner:
                return None
            owner = answer
    finally:
        task.cancel()


async def _gather(nc: Any, subject: str, body: bytes, bound: float, quiet: float) -> list[bytes]:
    """Every reply to one request: the first within ``bound``, then each within ``quiet``
    of the one before."""
    replies: asyncio.Queue[bytes] = asyncio.Queue()

    async def take(msg: Any) -> None:
        if msg.data:  # not the server's "no responders" status
            replies.put_nowait(bytes(msg.data))

    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, cb=take)
    out: list[bytes] = []
    try:
        await nc.publish(subject, body, reply=inbox)
        wait = bound
        while True:
            try:
                async with asyncio.timeout(wait):
                    out.append(await replies.get())
            except TimeoutError:
                return out
            wait = quiet
    finally:
        await sub.unsubscribe()


class RemoteRuntime:
    """See the module docstring. ``servers`` and ``connect`` as :class:`NatsBus`'s (or an
    open ``bus`` to share)."""

    def __init__(
        self,
        servers: str | Sequence[str] = (),
        *,
        bus: NatsBus | None = None,
        prefix: str = RPC_PREFIX,
        request_timeout: float = 30.0,
        prompt_timeout: float = 3600.0,
        connect: Mapping[str, Any] | None = None,
    ) -> None:
        self._own_bus = bus is None
        self.bus = bus if bus is not None else NatsBus(servers, connect=connect)
        self.prefix = prefix
        self.request_timeout = request_timeout
        self.prompt_timeout = prompt_timeout
        self.watch_every = 2.0
        """A request that may take longer than this (a prompt) asks its execution's owner
        every ``watch_every`` seconds whether it still answers (see :class:`ServiceTimeout`)."""
        self.gather_quiet = 0.25
        """``list_executions`` waits this long after a reply for the next serve process's."""

    async def __aenter__(self) -> Self:
        if self._own_bus:
            await self.bus.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._own_bus:
            await self.bus.__aexit__(exc_type, exc, tb)

    def _subject(self, request: Request) -> str:
        op = str(type(request).__struct_config__.tag)
        execution_id = getattr(request, "execution_id", None)
        if execution_id is None:
            return f"{self.prefix}.{op}"
        if not execution_id:
            raise ExecutionIdRequired  # as the Runtime says it, before anything is sent
        try:
            return exec_subject(self.prefix, check_execution_id(execution_id), op)
        except BusError:
            raise ExecutionUnreachable(
                f"no execution can have the id {execution_id[:80]!r}",
                execution_id=execution_id[:200],
            ) from None

    async def _call(self, request: Request, result: type[T], bound: float | None = None) -> T:
        op = str(type(request).__struct_config__.tag)
        subject = self._subject(request)
        body = _encode(request)
        if len(body) > self.bus.max_payload - 1024:
            raise RequestInvalid(f"the {op} request is too large ({len(body)} bytes)")
        bound = self.request_timeout if bound is None else bound
        execution_id = getattr(request, "execution_id", None)
        try:
            raw: bytes | None
            if execution_id is not None and bound > self.watch_every:
                ping = PingRequest(execution_id=execution_id)
                raw = await self.bus.runner.run(
                    _watched, self.bus._nc, subject, body, bound, self._subject(ping),
                    _encode(ping), self.watch_every,
                )  # fmt: skip
            else:
                raw = await self.bus.runner.run(_request, self.bus._nc, subject, body, bound)
        except nats.errors.NoRespondersError:
            if execution_id is not None:
                raise ExecutionUnreachable(
                    f"{ExecutionNotFound(execution_id)} (no acpfsm serve process answers for "
                    "it: it does not exist, or its owner died and it is not taken over yet)",
                    execution_id=execution_id,
                ) from None
            raise ServiceUnavailable(
                f"no acpfsm serve process answers {op}", execution_id=execution_id
            ) from None
        except (nats.errors.TimeoutError, TimeoutError):
            raise ServiceTimeout(
                f"no reply to {op} within {bound:g} s", execution_id=execution_id
            ) from None
        except (nats.errors.Error, OSError) as exc:
            raise ServiceUnavailable(
                f"{op}: NATS failed ({type(exc).__name__})", execution_id=execution_id
            ) from None
        if raw is None:
            raise ServiceTimeout(
                f"the serve process that owned execution {execution_id} stopped answering "
                f"during {op}: retry (another one takes it over)",
                execution_id=execution_id,
            )
        return _result(op, raw, result)

    # --- the Runtime's calls -------------------------------------------------------------

    async def launch(self, spec: LaunchSpec) -> ExecutionRef:
        return await self._call(LaunchRequest(spec=spec), ExecutionRef)

    async def prompt(
        self,
        execution_id: str,
        text: str,
        *,
        attachments: Sequence[Attachment] = (),
        dispatch_only: bool = False,
        timeout: float | None = None,  # noqa: ASYNC109 - the Runtime's signature
    ) -> PromptResult:
        request = PromptRequest(
            execution_id=execution_id,
            text=text,
            attachments=tuple(attachments),
            dispatch_only=dispatch_only,
            timeout=timeout,
        )
        bound = self.prompt_timeout if timeout is None else timeout + self.request_timeout
        return await self._call(request, PromptResult, bound)

    async def resume(self, execution_id: str, prompt: str) -> PromptResult:
        """Send ``prompt`` and wait for the turn to complete (as :meth:`Runtime.resume`)."""
        return await self.prompt(execution_id, prompt)

    async def steer(
        self, execution_id: str, text: str, *, attachments: Sequence[Attachment] = ()
    ) -> PromptResult:
        request = SteerRequest(execution_id=execution_id, text=text, attachments=tuple(attachments))
        return await self._call(request, PromptResult)

    async def cancel(self, execution_id: str) -> None:
        await self._call(CancelRequest(execution_id=execution_id), type(None))

    async def stop(self, execution_id: str, reason: str, *, force: bool = False) -> Execution:
        request = StopRequest(execution_id=execution_id, reason=reason, force=force)
        return await self._call(request, Execution)

    async def set_mcp_mode(self, execution_id: str, mode: str) -> None:
        await self._call(SetMcpModeRequest(execution_id=execution_id, mode=mode), type(None))

    async def get_execution(self, execution_id: str) -> Execution:
        return await self._call(GetRequest(execution_id=execution_id), Execution)

    async def list_executions(self) -> list[Execution]:
        """Every execution of every serve process (each answers with its own)."""
        try:
            replies = await self.bus.runner.run(
                _gather, self.bus._nc, f"{self.prefix}.list", _encode(ListRequest()),
                self.request_timeout, self.gather_quiet,
            )  # fmt: skip
        except (nats.errors.Error, OSError) as exc:
            raise ServiceUnavailable(f"list: NATS failed ({type(exc).__name__})") from None
        if not replies:
            raise ServiceUnavailable("no acpfsm serve process answered list")
        return [e for raw in replies for e in _result("list", raw, list[Execution])]

    def events(self, execution_id: str, from_seq: int = 0) -> NatsSubscription:
        """The execution's events after ``from_seq``, then the live ones (from the bus)."""
        return self.bus.subscribe(execution_id, after=from_seq)


def _result(op: str, raw: bytes, result: type[T]) -> T:
    try:
        reply = _decode_reply(raw)
        if reply.error is not None:
            raise_error(reply.error)
        return msgspec.json.decode(reply.result, type=result)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise RequestInvalid(f"the reply to {op} is unreadable: {exc}") from None


if TYPE_CHECKING:  # mypy checks that both have the shared calls' signatures

    def _same_calls(local: Runtime, remote: RemoteRuntime) -> tuple[RuntimeControl, ...]:
        return (local, remote)
