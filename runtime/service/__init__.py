"""A Runtime as a service over NATS (``acpfsm serve``, :class:`Service`) and its client
(:class:`RemoteRuntime`). Needs the ``nats`` extra (nats-py); see
docs/guides/across-processes.md."""

from __future__ import annotations

from .client import RemoteRuntime, RuntimeControl
from .server import QUEUE, RPC_PREFIX, Service
from .wire import (
    ExecutionUnreachable,
    RemoteError,
    RequestInvalid,
    ServiceBusy,
    ServiceError,
    ServiceTimeout,
    ServiceUnavailable,
)

__all__ = [
    "QUEUE",
    "RPC_PREFIX",
    "ExecutionUnreachable",
    "RemoteError",
    "RemoteRuntime",
    "RequestInvalid",
    "RuntimeControl",
    "Service",
    "ServiceBusy",
    "ServiceError",
    "ServiceTimeout",
    "ServiceUnavailable",
]
