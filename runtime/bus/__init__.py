"""The event bus seam (see :mod:`acpfsm.runtime.bus.base`): :class:`LocalBus` in this
process, :class:`NatsBus` on NATS JetStream across processes and hosts (the ``acpfsm[nats]``
extra; nats-py is imported only when :class:`NatsBus` is used)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import (
    SUBJECT_PREFIX,
    BusClosed,
    BusError,
    BusSubscription,
    BusUnavailable,
    EventBus,
    bus_feed,
    check_execution_id,
    decode_event,
    encode_event,
    event_subject,
    event_type,
    execution_subjects,
    numbered_feed,
)
from .local import LocalBus, LocalSubscription

if TYPE_CHECKING:
    from .nats_bus import NatsBus, NatsSubscription

__all__ = [
    "SUBJECT_PREFIX",
    "BusClosed",
    "BusError",
    "BusSubscription",
    "BusUnavailable",
    "EventBus",
    "LocalBus",
    "LocalSubscription",
    "NatsBus",
    "NatsSubscription",
    "bus_feed",
    "check_execution_id",
    "decode_event",
    "encode_event",
    "event_subject",
    "event_type",
    "execution_subjects",
    "numbered_feed",
]


def __getattr__(name: str) -> Any:
    if name in ("NatsBus", "NatsSubscription"):
        from . import nats_bus

        return getattr(nats_bus, name)
    raise AttributeError(name)
