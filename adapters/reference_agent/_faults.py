"""The fault vocabulary: names, arguments, scopes and parsing.

A fault is ``NAME`` or ``NAME=ARG``. Run faults are chosen per process (``--fault`` flags or
``ACPFSM_REFERENCE_FAULTS``). Turn faults can also be chosen per prompt with a
``[[fault:NAME]]`` or ``[[fault:NAME=ARG]]`` directive in the prompt text; given per process
they apply to every turn.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "DEFAULT_OVERSIZED_BYTES",
    "FAULTS",
    "FaultError",
    "FaultScope",
    "FaultSpec",
    "Faults",
    "other_rollout_id",
    "parse_fault",
    "parse_fault_list",
]

DEFAULT_OVERSIZED_BYTES = 17 * 1024 * 1024
"""Default size of the ``oversized`` line: 17 MiB, just over a 16 MiB client limit."""


class FaultScope(enum.Enum):
    TURN = "turn"
    """Per prompt (directive) or for every turn (flag/env)."""
    RUN = "run"
    """Per process only (flag/env); a directive naming it is ignored with a warning."""


class FaultError(ValueError):
    """A fault name or argument that is not in the vocabulary."""


@dataclass(frozen=True)
class FaultSpec:
    name: str
    scope: FaultScope
    arg: str
    """Argument kind: ``""`` (none), ``"int"`` or ``"float"``."""
    default: float
    """Default argument value (unused when ``arg`` is empty)."""
    effect: str
    """What a client observes, for the docs table."""


def _spec(
    name: str, scope: FaultScope, effect: str, arg: str = "", default: float = 0
) -> FaultSpec:
    return FaultSpec(name=name, scope=scope, arg=arg, default=default, effect=effect)


_T = FaultScope.TURN
_R = FaultScope.RUN

FAULTS: Mapping[str, FaultSpec] = {
    s.name: s
    for s in (
        _spec(
            "crash",
            _T,
            "after the first agent_message_chunk the process exits with status CODE "
            "(default 3); the prompt is never answered",
            "int",
            3,
        ),
        _spec(
            "hang",
            _T,
            "after the first agent_message_chunk the turn never ends: session/cancel, "
            "$/cancel_request and steers are ignored (only stdin EOF or a signal ends it)",
        ),
        _spec(
            "stall",
            _T,
            "after the first agent_message_chunk the turn waits until session/cancel "
            "(stopReason cancelled) or a steer (stopReason end_turn)",
        ),
        _spec(
            "ignore_cancel",
            _T,
            "session/cancel and $/cancel_request are ignored; the turn ends on its own "
            "with end_turn (with stall: never, unless steered)",
        ),
        _spec(
            "prompt_error",
            _T,
            'after the first chunk session/prompt is answered with {"code":-32603,'
            '"message":"Internal error","data":{"details":"reference agent fault: '
            'prompt_error"}}',
        ),
        _spec(
            "garbage",
            _T,
            "after the first chunk one non-JSON line is written to stdout; the turn then "
            "completes normally",
        ),
        _spec(
            "oversized",
            _T,
            "after the first chunk one valid session/update line longer than BYTES "
            "(default 17 MiB) is written; the turn then completes normally",
            "int",
            DEFAULT_OVERSIZED_BYTES,
        ),
        _spec(
            "flood",
            _T,
            "after the first chunk N agent_thought_chunk notifications (default 5000) are "
            "written back to back; the turn then completes normally",
            "int",
            5000,
        ),
        _spec(
            "close_stdout",
            _T,
            "after the first chunk stdout is closed (the client reads EOF) while the "
            "process keeps running; it exits 0 on stdin EOF",
        ),
        _spec(
            "close_stdin",
            _T,
            "after the first chunk stdin is closed (the client's writes fail: broken pipe) "
            "while the process keeps running; the turn never ends",
        ),
        _spec(
            "non_utf8",
            _T,
            "after the first chunk one session/update line whose text holds bytes that are "
            "not UTF-8 is written; the turn then completes normally",
        ),
        _spec(
            "permission_reject_first",
            _T,
            "permission requests list their options reject first: reject_once, "
            "reject_always, allow_once, allow_always",
        ),
        _spec(
            "permission_other_session",
            _T,
            "session/request_permission names another session id (the turn's own id with "
            "'-other' appended); a refusal or an error is taken as a rejection",
        ),
        _spec(
            "fs_traversal",
            _T,
            "after the first chunk fs/read_text_file and fs/write_text_file are asked for "
            "paths outside the workspace (.., an absolute path, the sibling <cwd>-evil, "
            "planted links to outside); the result is reported (rawOutput of a tool call "
            "and a sentence of the reply: requests, answered, refused, escaped)",
        ),
        _spec(
            "fs_symlink_race",
            _T,
            "after the first chunk a workspace directory is swapped back to back with a "
            "link to outside while the client is asked to read and write through it for "
            "SECONDS (default 1); reported like fs_traversal",
            "float",
            1.0,
        ),
        _spec(
            "fs_fifo",
            _T,
            "after the first chunk a FIFO planted in the workspace is read and written "
            "through the client (a blocking open would hang the client); reported",
        ),
        _spec(
            "fs_huge_read",
            _T,
            "after the first chunk a sparse file of MIB MiB (default 200) is read with "
            "limit 1, then whole; reported (rawOutput first_line, whole_characters)",
            "int",
            200,
        ),
        _spec(
            "fs_bad_paths",
            _T,
            "after the first chunk a path with a NUL byte, a relative path and one over "
            "4096 bytes are read and written through the client; reported",
        ),
        _spec(
            "undecodable_requests",
            _T,
            "after the first chunk two fs/read_text_file requests whose params do not decode "
            "(a lone-surrogate escape, arrays nested 100000 deep) are sent, each answer "
            "awaited 5 s; reported (answered, refused by code, unanswered)",
        ),
        _spec(
            "exit_at_startup",
            _R,
            "writes one line to stderr and exits with status CODE (default 1) before reading stdin",
            "int",
            1,
        ),
        _spec(
            "leak_env",
            _R,
            "at startup writes NAME=VALUE to stderr for each environment variable whose "
            "name looks secret (KEY, TOKEN, SECRET, PASSWORD, NONCE …), as a careless "
            "agent's debug output would",
        ),
        _spec(
            "no_initialize",
            _R,
            "initialize is read and never answered (every other request is)",
        ),
        _spec(
            "slow_start",
            _R,
            "sleeps SECONDS (default 2) before reading stdin or writing anything",
            "float",
            2.0,
        ),
        _spec(
            "auth_required",
            _R,
            'advertises authMethods [{"id":"reference-login"}]; session/new, session/load '
            'and session/prompt answer {"code":-32000,"message":"Authentication required"} '
            "until authenticate {methodId:reference-login}",
        ),
        _spec(
            "no_load",
            _R,
            'advertises loadSession:false; session/load answers {"code":-32601,'
            '"message":"Method not found","data":{"method":"session/load"}}',
        ),
        _spec(
            "load_method_not_found",
            _R,
            'loadSession stays true but session/load answers {"code":-32601,'
            '"message":"Method not found","data":{"method":"session/load"}}',
        ),
        _spec(
            "load_not_found",
            _R,
            'session/load answers {"code":-32002,"message":"Resource not found",'
            '"data":{"sessionId":ID}} even for a stored session',
        ),
        _spec(
            "load_rollout_missing",
            _R,
            'session/load answers Codex\'s {"code":-32603,"message":"Internal error",'
            '"data":{"details":"no rollout found for thread id ID"}} naming the loaded id',
        ),
        _spec(
            "load_rollout_other",
            _R,
            "as load_rollout_missing but naming another id (uuid5 of the loaded id)",
        ),
        _spec(
            "load_internal",
            _R,
            'session/load answers {"code":-32603,"message":"Internal error",'
            '"data":{"details":"Session not found"}} (claude-code-acp; inconclusive)',
        ),
        _spec(
            "load_auth",
            _R,
            'session/load answers {"code":-32000,"message":"Authentication required"} '
            "(codex-acp, gemini-cli without login)",
        ),
        _spec(
            "no_queueing",
            _R,
            "promptQueueing is not advertised; a second session/prompt waits for the "
            "running turn to end, and each gets its own end_turn",
        ),
        _spec(
            "no_mcp_http",
            _R,
            "mcpCapabilities.http is not advertised (only stdio MCP servers are taken; by "
            "default the agent takes stdio and http ones, never sse)",
        ),
        _spec(
            "ignore_eof",
            _R,
            "stdin EOF does not end the process; it runs until SIGTERM/SIGKILL (codex-acp)",
        ),
        _spec(
            "echo_version",
            _R,
            "initialize answers the protocolVersion the client asked for, whatever it is "
            "(999 included), instead of the latest it speaks (1)",
        ),
        _spec(
            "spawn_child",
            _R,
            "starts a sleeping child in the agent's process group (pid in initialize "
            "_meta.acpfsmReference.childPid); killing only the agent pid orphans it",
        ),
    )
}


def parse_fault(text: str) -> tuple[str, float | None]:
    """Parse ``NAME`` or ``NAME=ARG``; raise :class:`FaultError` when it is not in the table."""
    name, sep, raw = text.strip().partition("=")
    name = name.strip().lower().replace("-", "_")
    spec = FAULTS.get(name)
    if spec is None:
        raise FaultError(f"unknown fault {name!r}; known: {', '.join(sorted(FAULTS))}")
    if not sep:
        return name, None
    if not spec.arg:
        raise FaultError(f"fault {name!r} takes no argument")
    try:
        value = float(raw) if spec.arg == "float" else float(int(raw.strip()))
    except ValueError:
        raise FaultError(f"fault {name!r} needs an {spec.arg} argument, got {raw!r}") from None
    if value < 0:
        raise FaultError(f"fault {name!r} needs a non-negative argument, got {raw!r}")
    return name, value


def parse_fault_list(text: str) -> list[tuple[str, float | None]]:
    """Parse a comma-separated list (the ``ACPFSM_REFERENCE_FAULTS`` format)."""
    return [parse_fault(part) for part in text.split(",") if part.strip()]


class Faults:
    """An immutable set of active faults with their arguments."""

    __slots__ = ("_active",)

    def __init__(self, items: Iterable[tuple[str, float | None]] = ()) -> None:
        self._active: dict[str, float | None] = {}
        for name, value in items:
            if name not in FAULTS:
                raise FaultError(f"unknown fault {name!r}")
            self._active[name] = value

    def __contains__(self, name: object) -> bool:
        return name in self._active

    def __bool__(self) -> bool:
        return bool(self._active)

    def __repr__(self) -> str:
        return f"Faults({self.names()!r})"

    def names(self) -> list[str]:
        return sorted(self._active)

    def describe(self) -> list[str]:
        """``NAME`` or ``NAME=ARG`` for each active fault, sorted."""
        out = []
        for name in self.names():
            value = self._active[name]
            out.append(name if value is None else f"{name}={value:g}")
        return out

    def number(self, name: str) -> float:
        """The fault's argument, or its default."""
        value = self._active.get(name)
        return FAULTS[name].default if value is None else value

    def merged(self, other: Faults) -> Faults:
        """These faults overlaid with ``other`` (other's arguments win)."""
        return Faults([*self._active.items(), *other._active.items()])

    def turn_only(self) -> Faults:
        return Faults((n, v) for n, v in self._active.items() if FAULTS[n].scope is FaultScope.TURN)


def other_rollout_id(session_id: str) -> str:
    """A deterministic id different from ``session_id`` (for ``load_rollout_other``)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "acpfsm-reference-other:" + session_id))
