"""Error classification: one error plus the call it came from → an :class:`ErrorClass`.

The charts never look at exceptions or strings; they branch on the :class:`Classification`
this module returns (the SessionInit chart's ``load_failed``, the PromptGeneration chart's
dispatch and completion facts). The rules reproduce the classification functions at the end
of kandev's lifecycle/session.go (``isSessionLoadFallbackErr``, ``isTransportDeadErr``,
``isCancelReleaseError`` …, as of the seed that introduced the three-way session/load
outcome); where this module says "seed" it means those functions.

Inputs
    * a structured :class:`~acpfsm.adapters.errors.AgentRequestError` (in-process stdio);
    * a string, the agentctl projection after the WebSocket hop, e.g.
      ``load session failed: failed to load session: {"code":-32002,…}``;
    * any other exception (our transport errors, cancellation, a wrapper raised ``from`` one).

kandev classifies agentctl's session/load failure as a *string*, in which a structured code
no longer exists (seed ``isSessionLoadFallbackErr``: "Errors from the agentctl WebSocket
boundary are message-only"), so its ``…: {"code":-32002,…}`` is inconclusive (the init fails,
the stored ACP session id is kept) where the same error over stdio is ``session_unknown``
(fall back to session/new). acpfsm does the same: the agentctl adapter hands a session/load
failure over as text (:func:`acpfsm.adapters.agentctl.error_from_text`), and only the
canonical phrases and the Codex rollout object read from the text authorize the fallback. For
the other calls the adapter rebuilds the JSON-RPC error closing agentctl's text as the
structured :class:`~acpfsm.adapters.errors.AgentRequestError`, so they classify as over stdio.
A bare string given to :func:`classify_error` is judged by its text alone, as the seed does.

Matching model (the Python reading of Go's ``errors.Is``/``errors.As`` and ``err.Error()``)
    * *Structural* checks (type, JSON-RPC code) search the whole error tree: the
      ``__cause__`` chain and the members of exception groups, depth first.
    * *Text* checks read one effective message: ``str(err)``, followed by ``": " + str(cause)``
      for each explicit ``__cause__`` whose text is not already part of it — what Go's
      ``fmt.Errorf("…: %w", cause)`` would have printed. A string input is used as is.

The canonical rule (seed ``hasCanonicalSessionLoadMessage``, D2): trim (Go's
``strings.TrimSpace``) and lower-case both the message and the phrase; the phrase matches when
the message equals it or ends with ``": " + phrase``. A phrase in the middle, or one followed
by anything (a JSON object, ``: abc``), does not match. Consequently the *string*
``…: {"code":-32002,"message":"Resource not found",…}`` is **inconclusive**, exactly as the
seed code decides (and what acpfsm decides over agentctl: see above), while a structured
−32002 is ``session_unknown``.

The Codex missing-rollout check (D3) decodes a JSON object the way the seed's Go decoder
does: ``code`` must be a JSON integer −32603, ``message`` exactly ``Internal error``,
``data.details`` exactly ``no rollout found for thread id <loading_session_id>``
(case-sensitive, untrimmed values; unknown fields ignored; a non-object ``data`` or a
non-string ``details`` fails). Like Go's ``encoding/json``, object *keys* match the field names
case-insensitively (``"Code"`` fills ``code``). From a string, the text from each ``{`` to the
end of the message is tried, so the object must close the message.

The table (:data:`RULES`) is ordered data; the first row whose call scope includes the call
and whose test holds gives the kind, otherwise ``inconclusive``. For session/load the order is
the seed's: transport-dead first, then the fallback-authorizing rows (in the order of
``isSessionLoadFallbackErr``), and everything else is non-authorizing. The diagnostic booleans
are computed independently of the kind.
"""

from __future__ import annotations

import enum
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from ..statecharts.vocab import FALLBACK_AUTHORIZING, ErrorClass
from .errors import AgentRequestError, StreamNotConnected, TransportClosed, TransportTimeout

__all__ = [
    "RULES",
    "Call",
    "Classification",
    "Rule",
    "authorizes_load_fallback",
    "classify_error",
    "has_canonical_message",
    "is_benign_teardown",
    "is_cancel_release",
    "is_missing_provider_rollout",
    "is_stream_not_connected",
    "is_transport_dead",
]

ErrorInput = BaseException | str | None


class Call(enum.StrEnum):
    """The request an error came from; scopes some rows of :data:`RULES`."""

    INITIALIZE = "initialize"
    SESSION_NEW = "session_new"
    SESSION_LOAD = "session_load"
    PROMPT = "prompt"
    STEER = "steer"
    CANCEL = "cancel"
    SET_MODEL = "set_model"
    SET_MODE = "set_mode"
    SET_CONFIG_OPTION = "set_config_option"
    AUTHENTICATE = "authenticate"
    OTHER = "other"


class Classification(msgspec.Struct, frozen=True, kw_only=True):
    """What the charts consume. ``kind`` decides; the booleans are the seed's diagnostics.

    ``method_not_found`` is the seed's *structured* −32601 test only (a canonical
    ``Method not found`` text still gives ``kind == METHOD_NOT_FOUND``); ``session_unknown``
    is structured −32002 or canonical ``Resource not found``; ``capability_mismatch`` is the
    canonical LoadSession-capability phrase; ``provider_session_missing`` is the Codex rollout
    check for ``loading_session_id``. ``stream_not_connected`` is an addition to the brief.
    ``message`` is the effective message the text rules read ("" for no error).
    """

    kind: ErrorClass
    call: Call
    method_not_found: bool = False
    capability_mismatch: bool = False
    session_unknown: bool = False
    provider_session_missing: bool = False
    transport_dead: bool = False
    benign_teardown: bool = False
    cancel_release: bool = False
    stream_not_connected: bool = False
    message: str = ""


# --------------------------------------------------------------------------- constants

METHOD_NOT_FOUND_CODE = -32601
RESOURCE_NOT_FOUND_CODE = -32002
INTERNAL_ERROR_CODE = -32603
AUTH_REQUIRED_CODE = -32000

PHRASE_METHOD_NOT_FOUND = "Method not found"
PHRASE_RESOURCE_NOT_FOUND = "Resource not found"
PHRASE_LOAD_UNSUPPORTED = "agent does not support session loading (LoadSession capability is false)"
PHRASE_AUTH_REQUIRED = "Authentication required"
ROLLOUT_PREFIX = "no rollout found for thread id "

#: Substrings that make an error transport-dead (seed ``isTransportDeadErr``, D5).
TRANSPORT_DEAD_PHRASES = (
    "peer disconnected",
    "connection closed",
    "notification queue overflow",
    "context deadline exceeded",
)
#: Substrings of a benign prompt teardown (seed ``isBenignPromptTeardown``): not the deadline.
BENIGN_TEARDOWN_PHRASES = (
    "peer disconnected",
    "connection closed",
    "notification queue overflow",
    "context canceled",
)
STREAM_NOT_CONNECTED_PHRASE = "agent stream not connected"
CANCEL_ESCALATED_PREFIX = "cancel escalated"
PROMPT_ABANDONED_PHRASE = "prompt abandoned after cancel"

# Go's unicode.IsSpace set (strings.TrimSpace); Python's str.strip() also strips \x1c-\x1f.
_GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


# --------------------------------------------------------------------------- error tree


def _walk(err: BaseException) -> Iterator[BaseException]:
    """Depth-first over the error tree (``errors.Is``/``As``): groups and explicit causes."""
    stack = [err]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        children: list[BaseException] = []
        if isinstance(node, BaseExceptionGroup):
            children.extend(node.exceptions)
        if node.__cause__ is not None:
            children.append(node.__cause__)
        stack.extend(reversed(children))


def _message(err: ErrorInput) -> str:
    """The effective message the text rules read (Go's ``err.Error()`` of the wrap chain)."""
    if err is None:
        return ""
    if isinstance(err, str):
        return err
    text = str(err)
    seen = {id(err)}
    cause = err.__cause__
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        part = str(cause)
        if part and part not in text:
            text = f"{text}: {part}" if text else part
        cause = cause.__cause__
    return text


def _request_errors(err: ErrorInput) -> Iterator[AgentRequestError]:
    if isinstance(err, BaseException):
        for node in _walk(err):
            if isinstance(node, AgentRequestError):
                yield node


def _first_request_error(err: ErrorInput) -> AgentRequestError | None:
    return next(_request_errors(err), None)


def _has_code(err: ErrorInput, code: int) -> bool:
    """Seed ``errors.As(err, &reqErr) && reqErr.Code == code``: the *first* one decides."""
    first = _first_request_error(err)
    return first is not None and first.code == code


def _is_cancellation(node: BaseException) -> bool:
    # a backend's cancellation can only exist once it is imported (and importing asyncio
    # here would cost a trio program a tenth of acpfsm's import time)
    asyncio = sys.modules.get("asyncio")
    if asyncio is not None and isinstance(node, asyncio.CancelledError):
        return True
    trio = sys.modules.get("trio")
    return trio is not None and isinstance(node, trio.Cancelled)


def _any_node(err: ErrorInput, test: Callable[[BaseException], bool]) -> bool:
    return isinstance(err, BaseException) and any(test(node) for node in _walk(err))


# --------------------------------------------------------------------------- text rules


def _go_lower(text: str) -> str:
    # Go's strings.ToLower uses simple case mapping; Python's full mapping turns U+0130 into
    # two code points. Only that one character differs in length.
    return text.replace("\u0130", "i").lower()


def has_canonical_message(err: ErrorInput, phrase: str) -> bool:
    """Seed ``hasCanonicalSessionLoadMessage``: equal, or ends with ``": " + phrase``."""
    if err is None:
        return False
    message = _go_lower(_message(err)).strip(_GO_SPACE)
    want = _go_lower(phrase).strip(_GO_SPACE)
    return message == want or message.endswith(": " + want)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # Go's decoder refuses NaN/Infinity


def _json_tails(message: str) -> Iterator[dict[str, Any]]:
    """Each object decoded from a ``{`` to the end of the message (trailing whitespace ok):
    JSON text that starts with ``{`` decodes to an object or not at all."""
    offset = message.find("{")
    while offset >= 0:
        try:
            yield json.loads(message[offset:], parse_constant=_reject_constant)
        except ValueError:
            pass
        offset = message.find("{", offset + 1)


_MISSING = object()


def _go_field(obj: dict[str, Any], name: str) -> Any:
    """Go ``encoding/json`` field lookup of the lower-case field ``name``: keys fold case;
    the last matching key wins."""
    found: Any = _MISSING
    for key, value in obj.items():
        if _go_lower(key) == name:
            found = value
    return found


def _go_int(value: Any) -> int | None:
    return value if type(value) is int else None


def _matches_rollout(obj: dict[str, Any], session_id: str) -> bool:
    """Seed ``matchesMissingProviderRollout`` on an already-decoded JSON object. Go decodes
    into ``struct{Code int; Message string; Data struct{Details string}}`` and fails on a
    field of another type; absent and null fields are zero values. Every such failure and
    every zero value is a mismatch here (the values matched are non-zero), so the test is
    the comparison of each field, a JSON integer ``code`` (not -32603.0) and an object
    ``data``."""
    data = _go_field(obj, "data")
    return (
        _go_int(_go_field(obj, "code")) == INTERNAL_ERROR_CODE
        and _go_field(obj, "message") == "Internal error"
        and isinstance(data, dict)
        and _go_field(data, "details") == ROLLOUT_PREFIX + session_id
    )


def is_missing_provider_rollout(err: ErrorInput, loading_session_id: str) -> bool:
    """Seed ``isMissingProviderRolloutErr``: the Codex −32603 rollout shape for *this* id."""
    if err is None or not loading_session_id.strip(_GO_SPACE):
        return False
    first = _first_request_error(err)
    if first is not None:
        try:
            encoded = json.loads(json.dumps(first.as_dict()))
        except (TypeError, ValueError):
            encoded = None
        if encoded is not None and _matches_rollout(encoded, loading_session_id):
            return True
    return any(_matches_rollout(obj, loading_session_id) for obj in _json_tails(_message(err)))


def _tail_code(err: ErrorInput, code: int) -> bool:
    """A JSON object closing the message carries this JSON-RPC code (agentctl projection)."""
    for obj in _json_tails(_message(err)):
        if isinstance(obj, dict) and _go_int(_go_field(obj, "code")) == code:
            return True
    return False


# --------------------------------------------------------------------------- predicates


def is_transport_dead(err: ErrorInput) -> bool:
    """Seed ``isTransportDeadErr`` (D5): the connection is gone, so retrying is pointless.

    Structural: :class:`TransportClosed`, :class:`TransportTimeout`, a cancellation
    exception (asyncio/trio; Go's ``context.Canceled``) or :class:`TimeoutError` (Go's
    ``context.DeadlineExceeded``) anywhere in the tree. Text: ``peer disconnected``,
    ``connection closed``, ``notification queue overflow``, ``context deadline exceeded``.
    The *text* ``context canceled`` is not transport-dead (the seed tests it only as a value).
    """
    if err is None:
        return False
    if _any_node(
        err,
        lambda n: (
            isinstance(n, (TransportClosed, TransportTimeout, TimeoutError)) or _is_cancellation(n)
        ),
    ):
        return True
    message = _message(err)
    return any(phrase in message for phrase in TRANSPORT_DEAD_PHRASES)


def is_cancel_release(err: ErrorInput) -> bool:
    """Seed ``isCancelReleaseError``: prefix ``cancel escalated`` or ``prompt abandoned after
    cancel`` anywhere (case-sensitive, untrimmed)."""
    message = _message(err)
    return message.startswith(CANCEL_ESCALATED_PREFIX) or PROMPT_ABANDONED_PHRASE in message


def is_benign_teardown(err: ErrorInput) -> bool:
    """Seed ``isBenignPromptTeardown``: a cancel release, or the transport died (not by a
    deadline). Structural analogues: :class:`TransportClosed` and cancellation exceptions;
    :class:`TransportTimeout` and ``context deadline exceeded`` are *not* benign."""
    message = _message(err)
    if not message and not isinstance(err, BaseException):
        return False
    if is_cancel_release(err):
        return True
    if _any_node(err, lambda n: isinstance(n, TransportClosed) or _is_cancellation(n)):
        return True
    return any(phrase in message for phrase in BENIGN_TEARDOWN_PHRASES)


def is_stream_not_connected(err: ErrorInput) -> bool:
    """Seed ``isAgentStreamNotConnectedErr``: :class:`StreamNotConnected` in the tree, or the
    substring ``agent stream not connected``."""
    if err is None:
        return False
    if _any_node(err, lambda n: isinstance(n, StreamNotConnected)):
        return True
    return STREAM_NOT_CONNECTED_PHRASE in _message(err)


def _session_unknown(err: ErrorInput) -> bool:
    """Seed ``isSessionUnknownErr``: structured −32002, or canonical ``Resource not found``."""
    return _has_code(err, RESOURCE_NOT_FOUND_CODE) or has_canonical_message(
        err, PHRASE_RESOURCE_NOT_FOUND
    )


def _auth_required(err: ErrorInput) -> bool:
    return (
        _has_code(err, AUTH_REQUIRED_CODE)
        or _tail_code(err, AUTH_REQUIRED_CODE)
        or has_canonical_message(err, PHRASE_AUTH_REQUIRED)
    )


# --------------------------------------------------------------------------- the table


class Rule(msgspec.Struct, frozen=True):
    """One row: ``kind`` when ``test(error, loading_session_id)`` holds for a call in scope."""

    name: str
    kind: ErrorClass
    test: Callable[[ErrorInput, str], bool]
    calls: frozenset[Call] | None = None  # None: every call
    source: str = ""

    def applies(self, call: Call) -> bool:
        return self.calls is None or call in self.calls


_DISPATCH = frozenset({Call.PROMPT, Call.STEER, Call.CANCEL})

#: The ordered classification table; the first matching row wins, else ``inconclusive``.
RULES: tuple[Rule, ...] = (
    Rule(
        "stream_not_connected_on_dispatch",
        ErrorClass.STREAM_NOT_CONNECTED,
        lambda e, _s: is_stream_not_connected(e),
        _DISPATCH,
        "dispatchPrompt / tryDispatchSteer / CancelAgent test the stream before anything",
    ),
    Rule(
        "cancel_released_on_dispatch",
        ErrorClass.CANCEL_RELEASED,
        lambda e, _s: is_cancel_release(e),
        _DISPATCH,
        "triggerPrompt / waitForPromptDone map the sentinel to ErrCancelEscalated first",
    ),
    Rule(
        "transport_dead",
        ErrorClass.TRANSPORT_DEAD,
        lambda e, _s: is_transport_dead(e),
        None,
        "isTransportDeadErr, checked first for session/load (D1, D5)",
    ),
    Rule(
        "method_not_found_structured",
        ErrorClass.METHOD_NOT_FOUND,
        lambda e, _s: _has_code(e, METHOD_NOT_FOUND_CODE),
        None,
        "isMethodNotFoundErr (−32601)",
    ),
    Rule(
        "session_unknown",
        ErrorClass.SESSION_UNKNOWN,
        lambda e, _s: _session_unknown(e),
        None,
        "isSessionUnknownErr (−32002 or canonical 'Resource not found')",
    ),
    Rule(
        "provider_rollout_missing",
        ErrorClass.PROVIDER_ROLLOUT_MISSING,
        is_missing_provider_rollout,
        None,
        "isMissingProviderRolloutErr (D3)",
    ),
    Rule(
        "method_not_found_canonical",
        ErrorClass.METHOD_NOT_FOUND,
        lambda e, _s: has_canonical_message(e, PHRASE_METHOD_NOT_FOUND),
        None,
        "canonical 'Method not found' (D2)",
    ),
    Rule(
        "load_unsupported",
        ErrorClass.LOAD_UNSUPPORTED,
        lambda e, _s: has_canonical_message(e, PHRASE_LOAD_UNSUPPORTED),
        None,
        "canonical LoadSession-capability-false phrase (D2)",
    ),
    Rule(
        "auth_required",
        ErrorClass.AUTH_REQUIRED,
        lambda e, _s: _auth_required(e),
        None,
        "−32000 structured, as the JSON closing the message, or canonical phrase (not in seed)",
    ),
    Rule(
        "cancel_released",
        ErrorClass.CANCEL_RELEASED,
        lambda e, _s: is_cancel_release(e),
        None,
        "isCancelReleaseError",
    ),
    Rule(
        "stream_not_connected",
        ErrorClass.STREAM_NOT_CONNECTED,
        lambda e, _s: is_stream_not_connected(e),
        None,
        "isAgentStreamNotConnectedErr",
    ),
)


def classify_error(
    error: ErrorInput, *, call: Call, loading_session_id: str = ""
) -> Classification:
    """Classify ``error`` raised by ``call``. ``loading_session_id`` is the id a session/load
    tried to load (only the Codex rollout row uses it). ``None`` or ``""`` gives
    ``inconclusive`` with every boolean false (the seed's nil error)."""
    message = _message(error)
    kind = ErrorClass.INCONCLUSIVE
    for rule in RULES:
        if rule.applies(call) and rule.test(error, loading_session_id):
            kind = rule.kind
            break
    return Classification(
        kind=kind,
        call=call,
        method_not_found=_has_code(error, METHOD_NOT_FOUND_CODE),
        capability_mismatch=has_canonical_message(error, PHRASE_LOAD_UNSUPPORTED),
        session_unknown=_session_unknown(error),
        provider_session_missing=is_missing_provider_rollout(error, loading_session_id),
        transport_dead=is_transport_dead(error),
        benign_teardown=is_benign_teardown(error),
        cancel_release=is_cancel_release(error),
        stream_not_connected=is_stream_not_connected(error),
        message=message,
    )


def authorizes_load_fallback(classification: Classification) -> bool:
    """True when a failed session/load may be replaced by session/new (seed D1–D3)."""
    return classification.kind in FALLBACK_AUTHORIZING
