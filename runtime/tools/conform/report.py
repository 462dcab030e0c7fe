"""What a conform run produces: the checks and their titles, a check's verdict, the report, and
the bounds of the evidence quoted in it."""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgspec

from acpfsm.adapters.errors import (
    AcpfsmError,
)

from .quoting import quote, safe_text

DESCRIPTION = (
    "Run the ACP conformance battery against an agent started as AGENT_COMMAND [ARGS...] "
    "(put it after --), over stdio or, with --agentctl URL, in an instance of kandev's "
    "agentctl. Each check passes, fails (with evidence) or is not applicable. "
    "Exit 0 when nothing failed, 1 otherwise, 2 on a usage error."
)

DEFAULT_TIMEOUT = 30.0
AGENTCTL_AUTO = "auto"
"""``--agentctl auto``: start an agentctl on this machine for the run."""
DEFAULT_PROMPT = "acpfsm conformance check: please answer with one short sentence."
DEFAULT_LONG_PROMPT = (
    "acpfsm conformance check: this turn will be cancelled by the client, so please hang on "
    "and take your time. Write a detailed, numbered list of one hundred distinct facts about "
    "finite state machines, statecharts and their use in software engineering, with one full "
    "sentence for each fact, and do not stop early or summarize."
)
UNKNOWN_METHOD = "acpfsm/no_such_method"
STOP_REASONS = frozenset({"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"})
_EVIDENCE_LINES = 14
_EVIDENCE_CHARS = 400
_MAX_LINE = 64 * 1024 * 1024
_SETTLE = 1.0
"""Through agentctl: how long to wait for the events that follow an answer (agentctl's
``session_mode``/``session_models`` convergence, ``session_status``)."""
_IN_FLIGHT = 0.5
"""What reaches the battery within this long after it sent session/cancel may have been on its
way before the agent could read the cancel (a line crosses a pipe or a loopback WebSocket in
milliseconds; the margin absorbs a loaded machine). A turn answered later went on after it."""
_TRIES = 3
"""How many turns the cancel and steer checks start before they give up on winning the race."""
NONEXISTENT_VERSION = 999
"""The protocolVersion the negotiation check asks for: no ACP release is anywhere near it, so
an agent that answers it claims a version that does not exist."""

#: Every check, in report order: ``(id, title)``.
CHECKS: tuple[tuple[str, str], ...] = (
    ("initialize", "initialize (protocol v1)"),
    ("capabilities", "advertised capabilities"),
    ("session_new", "session/new"),
    ("unknown_method", "unknown method → -32601"),
    ("load_unknown", "session/load of an unknown session"),
    ("prompt_turn", "prompt turn and stopReason"),
    ("load_known", "session/load of a known session"),
    ("cancel", "session/cancel → stopReason cancelled"),
    ("steer", "prompt queueing for steer"),
    ("set_mode", "mode selection (session/set_mode)"),
    ("config_mode", "mode selection (config option)"),
    ("config_model", "model selection (config option)"),
    ("legacy_set_model", "legacy session/set_model"),
    ("malformed_input", "malformed input survived"),
    ("stdout_clean", "only JSON-RPC on stdout"),
    ("stdin_close", "exit on stdin close"),
    ("version_negotiation", "protocol version negotiation"),
    ("schema", "messages against the official ACP schema"),
)
_TITLES = dict(CHECKS)

NOT_OBSERVABLE_THROUGH_AGENTCTL = "not observable through agentctl"
#: The stdio-only checks and why agentctl hides what they look at (the n/a detail).
AGENTCTL_NOT_OBSERVABLE: dict[str, str] = {
    "unknown_method": "agentctl sends the agent only the ACP methods it knows, and answers an "
    "unknown action (UNKNOWN_ACTION) itself",
    "malformed_input": "only agentctl writes to the agent's stdin",
    "stdout_clean": "agentctl reads the agent's stdout and forwards decoded events only",
    "stdin_close": "agentctl owns the agent's stdin and stops the agent itself",
    "version_negotiation": "agentctl always asks for protocolVersion 1",
    "schema": "agentctl decodes the agent's JSON-RPC itself and forwards events, not the messages",
}


class ConformUsageError(AcpfsmError):
    """The battery cannot run with these arguments (the CLI exits 2)."""


class Status(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    NA = "n/a"


class CheckResult(msgspec.Struct, kw_only=True):
    id: str
    title: str
    status: Status
    detail: str
    evidence: list[str] = []
    seconds: float = 0.0


class ConformReport(msgspec.Struct, kw_only=True):
    command: list[str]
    agent: str = ""
    """``name version`` from ``agentInfo`` ("" when initialize failed)."""
    agentctl: str = ""
    """The agentctl control URL the battery ran through ("" over stdio)."""
    agentctl_token: str = ""
    """The bearer token the battery got for agentctl's bootstrap nonce (the nonce is one-shot:
    run again with this token); "" when it was given a token or ran over stdio. A secret: it
    is shown on the terminal (stderr), never written into the JSON or JUnit report."""
    checks: list[CheckResult] = []
    seconds: float = 0.0
    unmodelled: dict[str, Any] = {}
    """The fields of the agent's initialize answer acpfsm does not model, as sent, nested
    where they were (:func:`acpfsm.adapters.acp.messages.unmodelled`; empty through agentctl,
    which does not forward the answer)."""
    causes: list[str] = []
    """What made checks fail or not apply, found in the agent's answers and named for the user
    (e.g. an agent that refuses to run as root); printed above the table."""

    @property
    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status is Status.FAIL]

    @property
    def ok(self) -> bool:
        return not self.failed

    def counts(self) -> dict[str, int]:
        return {s.value: sum(c.status is s for c in self.checks) for s in Status}


@dataclass(frozen=True, slots=True)
class _Verdict:
    status: Status
    detail: str
    evidence: list[str] | None = None


ROOT_REFUSAL = re.compile(
    r"root/sudo|root privileges|run(?:ning)? as root|dangerously-skip-permissions", re.IGNORECASE
)
ROOT_CAUSE = (
    "the agent refuses to run as root (Claude Code will not skip its permission prompts with "
    "root/sudo privileges): run conform as an unprivileged user, or, inside a sandbox, set "
    "IS_SANDBOX=1 (conform passes it through to the agent)"
)


def refusal_cause(text: str) -> str:
    """The cause an agent's error names, when it is one conform knows ("" otherwise)."""
    return ROOT_CAUSE if ROOT_REFUSAL.search(text) else ""


def _pass(detail: str) -> _Verdict:
    return _Verdict(Status.PASS, detail)


def _fail(detail: str, evidence: list[str] | None = None) -> _Verdict:
    return _Verdict(Status.FAIL, detail, evidence)


def _na(detail: str, evidence: list[str] | None = None) -> _Verdict:
    return _Verdict(Status.NA, detail, evidence)


def _excerpt(lines: list[str]) -> list[str]:
    """The first and last lines of a check's exchange (the middle elided)."""
    if len(lines) <= _EVIDENCE_LINES:
        return list(lines)
    head, tail = 4, _EVIDENCE_LINES - 5
    return [*lines[:head], f"… {len(lines) - head - tail} more line(s) …", *lines[-tail:]]


def _short(value: Any, limit: int = _EVIDENCE_CHARS) -> str:
    """``value`` for a report: a string as it is, anything else (bytes too) as JSON; every
    character that could hide or rewrite text on a terminal escaped; cut to ``limit``. Never
    raises, whatever an agent sent."""
    if not isinstance(value, str):
        return quote(value, limit)
    text = safe_text(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _reject_option(options: Iterable[tuple[Any, Any]]) -> Any:
    """The option the battery answers a permission request with, from ``(kind, optionId)``
    pairs: the ``reject_once`` one, else any ``reject*`` one, else None."""
    pairs = list(options)
    return next((oid for kind, oid in pairs if kind == "reject_once"), None) or next(
        (oid for kind, oid in pairs if str(kind).startswith("reject")), None
    )
