"""Plain data the charts consume as event data. No I/O, no clock.

:class:`ErrorClass` is what :func:`acpfsm.adapters.classify.classify_error` returns and what
the SessionInit and PromptGeneration charts branch on (kandev lifecycle/session.go
``createOrLoadSession``, ``sendPrompt``; manager_interaction.go ``CancelAgent``).
"""

from __future__ import annotations

import enum

__all__ = ["FALLBACK_AUTHORIZING", "ErrorClass"]


class ErrorClass(enum.StrEnum):
    TRANSPORT_DEAD = "transport_dead"
    METHOD_NOT_FOUND = "method_not_found"
    SESSION_UNKNOWN = "session_unknown"
    LOAD_UNSUPPORTED = "load_unsupported"
    PROVIDER_ROLLOUT_MISSING = "provider_rollout_missing"
    AUTH_REQUIRED = "auth_required"
    CANCEL_RELEASED = "cancel_released"
    STREAM_NOT_CONNECTED = "stream_not_connected"
    INCONCLUSIVE = "inconclusive"


#: session/load errors that authorize the fallback to session/new (seed D1–D3).
FALLBACK_AUTHORIZING: frozenset[ErrorClass] = frozenset(
    {
        ErrorClass.METHOD_NOT_FOUND,
        ErrorClass.SESSION_UNKNOWN,
        ErrorClass.LOAD_UNSUPPORTED,
        ErrorClass.PROVIDER_ROLLOUT_MISSING,
    }
)
