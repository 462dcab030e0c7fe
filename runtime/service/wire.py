"""What ``acpfsm serve`` and :class:`~acpfsm.runtime.service.RemoteRuntime` say to each other
over NATS request/reply: msgspec JSON, one request per message on ``acpfsm.rpc.<op>``, one
:class:`Reply` back.

A request is one of the tagged structs below (``{"op": "prompt", "execution_id": …}``). A
reply holds the operation's result (``result``: the JSON of an ``ExecutionRef``,
``PromptResult``, ``Execution``, a list of them, or ``null``) or the error it raised
(``error``: its class, message, execution id, simple attributes and cause), which the client
raises again as the same class (:func:`raise_error`); only classes of acpfsm's own error tree
are ever made from a reply, anything else is :class:`RemoteError`.
"""

from __future__ import annotations

import importlib
from typing import Any

import msgspec

from acpfsm.adapters.errors import AcpfsmError
from acpfsm.adapters.transport import Attachment

from ..errors import ExecutionNotFound
from ..types import LaunchSpec

__all__ = [
    "OPERATIONS",
    "CancelRequest",
    "ExecutionUnreachable",
    "GetRequest",
    "LaunchRequest",
    "ListRequest",
    "PingRequest",
    "PromptRequest",
    "RemoteError",
    "Reply",
    "Request",
    "RequestInvalid",
    "ServiceBusy",
    "ServiceError",
    "ServiceTimeout",
    "ServiceUnavailable",
    "SetMcpModeRequest",
    "SteerRequest",
    "StopRequest",
    "WireError",
    "error_reply",
    "raise_error",
]


class ServiceError(AcpfsmError):
    """Talking to ``acpfsm serve`` failed (the subclasses say how)."""

    retryable = False


class ServiceUnavailable(ServiceError):
    """No ``acpfsm serve`` process answers on the subject (none running, or NATS is out of
    reach): retry later."""

    retryable = True


class ExecutionUnreachable(ServiceUnavailable, ExecutionNotFound):
    """No serve process answers for this execution: it does not exist (or was stopped), or
    its owner died and no pool member has taken it over yet (retry within the lease). An
    :class:`~acpfsm.runtime.ExecutionNotFound` too, as the in-process Runtime raises for an
    id it does not hold, so code written against one catches it from the other."""

    def __init__(self, message: str, *, execution_id: str | None = None) -> None:
        AcpfsmError.__init__(self, message, execution_id=execution_id)


class ServiceTimeout(ServiceError):
    """No reply within the bound: the serve process may have died mid-request (its
    executions are taken over) or be overloaded. Retry; ``get`` says where it stands."""

    retryable = True


class ServiceBusy(ServiceError):
    """The serve process has too many requests in flight: retry later."""

    retryable = True


class RequestInvalid(ServiceError):
    """The serve process could not read the request (not JSON, a wrong shape, too large)."""


class RemoteError(ServiceError):
    """The serve process raised an error that is not of acpfsm's tree (its type and message
    are in the message)."""


class _Request(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="op", forbid_unknown_fields=True
):
    pass


class LaunchRequest(_Request, frozen=True, tag="launch"):
    spec: LaunchSpec


class PromptRequest(_Request, frozen=True, tag="prompt"):
    execution_id: str
    text: str
    attachments: tuple[Attachment, ...] = ()
    dispatch_only: bool = False
    timeout: float | None = None


class SteerRequest(_Request, frozen=True, tag="steer"):
    execution_id: str
    text: str
    attachments: tuple[Attachment, ...] = ()


class CancelRequest(_Request, frozen=True, tag="cancel"):
    execution_id: str


class StopRequest(_Request, frozen=True, tag="stop"):
    execution_id: str
    reason: str
    force: bool = False


class GetRequest(_Request, frozen=True, tag="get"):
    execution_id: str


class ListRequest(_Request, frozen=True, tag="list"):
    pass


class SetMcpModeRequest(_Request, frozen=True, tag="set_mcp_mode"):
    execution_id: str
    mode: str


class PingRequest(_Request, frozen=True, tag="ping"):
    """Who answers for the execution now (the serve process's member name): a client
    waiting on a long request asks it, to learn that the owner died meanwhile."""

    execution_id: str


Request = (
    LaunchRequest
    | PromptRequest
    | SteerRequest
    | CancelRequest
    | StopRequest
    | GetRequest
    | ListRequest
    | SetMcpModeRequest
    | PingRequest
)
OPERATIONS: frozenset[str] = frozenset(
    str(t.__struct_config__.tag)
    for t in (
        LaunchRequest, PromptRequest, SteerRequest, CancelRequest, StopRequest, GetRequest,
        ListRequest, SetMcpModeRequest, PingRequest,
    )
)  # fmt: skip


class WireCause(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    message: str


class WireError(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    """The class, ``module.QualifiedName``."""
    message: str
    execution_id: str | None = None
    attrs: dict[str, Any] = {}
    cause: WireCause | None = None


class Reply(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    result: msgspec.Raw = msgspec.Raw(b"null")
    error: WireError | None = None


class _Op(msgspec.Struct):
    op: str = ""


_encode = msgspec.json.Encoder().encode
_decode_request = msgspec.json.Decoder(Request).decode
_decode_op = msgspec.json.Decoder(_Op).decode
_SIMPLE = (str, int, float, bool, type(None))


def decode_request(body: bytes) -> Request:
    """The request in ``body``: :class:`RequestInvalid`, or ``Unsupported`` for an unknown
    operation."""
    from ..errors import Unsupported

    try:
        op = _decode_op(body).op
    except (msgspec.DecodeError, RecursionError) as exc:
        raise RequestInvalid(f"the request is not a JSON object with an op: {exc}") from None
    if op not in OPERATIONS:
        raise Unsupported(f"operation {op[:80]!r}")
    try:
        return _decode_request(body)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise RequestInvalid(f"the {op} request is malformed: {exc}") from None


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def error_reply(exc: BaseException) -> bytes:
    """The reply carrying ``exc`` (an acpfsm error, or any other as :class:`RemoteError`)."""
    if isinstance(exc, AcpfsmError):
        attrs = {
            k: v
            for k, v in vars(exc).items()
            if k != "execution_id" and not k.startswith("_") and isinstance(v, _SIMPLE)
        }
        wire = WireError(
            type=_name(type(exc)), message=exc.message, execution_id=exc.execution_id, attrs=attrs
        )
    else:
        wire = WireError(type=_name(RemoteError), message=f"{type(exc).__name__}: {exc}")
    cause = exc.__cause__
    if cause is not None:
        wire = msgspec.structs.replace(
            wire, cause=WireCause(type=_name(type(cause)), message=str(cause)[:2000])
        )
    return _encode(Reply(error=wire))


def result_reply(result: object) -> bytes:
    return _encode(Reply(result=msgspec.Raw(_encode(result))))


def _error_class(name: str) -> type[AcpfsmError] | None:
    """The class ``name`` names when it is one of acpfsm's errors; else None."""
    module, _, qualname = name.rpartition(".")
    if not module.startswith("acpfsm.") or "." in qualname:
        return None
    try:
        cls = getattr(importlib.import_module(module), qualname, None)
    except ImportError:
        return None
    if isinstance(cls, type) and issubclass(cls, AcpfsmError):
        return cls
    return None


def _make(name: str, message: str, execution_id: str | None = None) -> AcpfsmError:
    cls = _error_class(name)
    if cls is None:
        return RemoteError(f"{name.rpartition('.')[2]}: {message}", execution_id=execution_id)
    exc = cls.__new__(cls)
    AcpfsmError.__init__(exc, message, execution_id=execution_id)
    return exc


def raise_error(wire: WireError) -> None:
    """Raise the error a reply carries, as its own class (with its message, execution id,
    simple attributes and cause)."""
    exc = _make(wire.type, wire.message, wire.execution_id)
    for key, value in wire.attrs.items():
        try:
            setattr(exc, key, value)
        except (AttributeError, TypeError):
            pass
    cause: BaseException | None = None
    if wire.cause is not None:
        cause = _make(wire.cause.type, wire.cause.message)
    raise exc from cause
