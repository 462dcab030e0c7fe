"""What the reference agent says: pure, deterministic functions of the prompt and state.

Tests compute expected output with :func:`reply_for` and :func:`chunk_text`; nothing here
depends on time, randomness or I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ._faults import FAULTS, FaultError, FaultScope, parse_fault

__all__ = [
    "DEFAULT_MODE",
    "DEFAULT_MODEL",
    "DEFAULT_THINKING",
    "HELP_TEXT",
    "MODELS",
    "MODES",
    "THINKING_LEVELS",
    "Directives",
    "chunk_text",
    "parse_directives",
    "reply_for",
    "thoughts_for",
]

MODES: tuple[tuple[str, str, str], ...] = (
    ("default", "Default", "Ask before running commands or editing files"),
    ("plan", "Plan", "Plan only: no tool calls, no changes"),
    ("accept_edits", "Accept edits", "Edit files without asking"),
)
MODELS: tuple[tuple[str, str, str], ...] = (
    ("ref-fast", "Reference Fast", "Quick deterministic replies"),
    ("ref-smart", "Reference Smart", "The same replies, with more visible reasoning"),
)
THINKING_LEVELS: tuple[tuple[str, str, str], ...] = (
    ("off", "Off", "No reasoning shown"),
    ("low", "Low", "One reasoning chunk"),
    ("high", "High", "Three reasoning chunks"),
)
DEFAULT_MODE = "default"
DEFAULT_MODEL = "ref-fast"
DEFAULT_THINKING = "low"

HELP_TEXT = (
    "Reference agent directives (put them anywhere in a prompt): "
    "[[permission]] runs a command after asking permission; "
    "[[write:PATH]] writes the prompt text to PATH through the client (always asks); "
    "[[read:PATH]] reads PATH through the client; "
    "[[delay:SECONDS]] paces this turn; "
    "[[tools]] lists the tools of the session's MCP servers; "
    '[[tool:NAME {"arg": 1}]] calls the MCP tool NAME with those JSON arguments; '
    "[[fault:NAME]] or [[fault:NAME=ARG]] injects a fault into this turn ("
    + ", ".join(sorted(n for n, s in FAULTS.items() if s.scope is FaultScope.TURN))
    + ")."
)

_DIRECTIVE = re.compile(r"\[\[\s*([A-Za-z_]+)\s*(?::\s*([^\]]*?))?\s*\]\]")
_TOOL_CALL = re.compile(r"\[\[\s*tool\s*:\s*([^\s\[\]{}]+)\s*")
_CLOSE = re.compile(r"\s*\]\]")
_JSON = json.JSONDecoder()


@dataclass
class Directives:
    """The directives found in a prompt, and the text with them removed."""

    text: str
    faults: list[tuple[str, float | None]] = field(default_factory=list)
    permission: bool = False
    writes: list[str] = field(default_factory=list)
    reads: list[str] = field(default_factory=list)
    delay: float | None = None
    list_tools: bool = False
    tool_calls: list[tuple[str, str]] = field(default_factory=list)
    """``(name, arguments JSON)`` of each ``[[tool:NAME {json}]]``, in order."""
    warnings: list[str] = field(default_factory=list)


def _take_tool_calls(text: str, out: Directives) -> str:
    """Remove the ``[[tool:NAME {json}]]`` directives (their JSON may hold ``]``) into
    ``out.tool_calls``; the arguments of one whose JSON does not parse are kept as written
    (the call then fails, visibly)."""
    kept: list[str] = []
    pos = 0
    while (match := _TOOL_CALL.search(text, pos)) is not None:
        end = match.end()
        raw = ""
        if text.startswith("{", end):
            try:
                _, stop = _JSON.raw_decode(text, end)
            except json.JSONDecodeError:
                stop = text.find("]]", end)
                stop = len(text) if stop < 0 else stop
            raw, end = text[end:stop], stop
        close = _CLOSE.match(text, end)
        if close is None:
            out.warnings.append(f"unterminated tool directive {text[match.start() : end]!r}")
            kept.append(text[pos : match.end()])
            pos = match.end()
            continue
        kept.append(text[pos : match.start()] + " ")
        out.tool_calls.append((match.group(1), raw))
        pos = close.end()
    kept.append(text[pos:])
    return "".join(kept)


def parse_directives(text: str) -> Directives:
    out = Directives(text="")
    text = _take_tool_calls(text, out)
    for match in _DIRECTIVE.finditer(text):
        name = match.group(1).lower()
        arg = (match.group(2) or "").strip()
        if name == "fault":
            try:
                fault, value = parse_fault(arg)
            except FaultError as exc:
                out.warnings.append(str(exc))
                continue
            if FAULTS[fault].scope is FaultScope.RUN:
                out.warnings.append(f"fault {fault!r} can only be chosen per run (--fault)")
                continue
            out.faults.append((fault, value))
        elif name == "permission":
            out.permission = True
        elif name == "write" and arg:
            out.writes.append(arg)
        elif name == "read" and arg:
            out.reads.append(arg)
        elif name == "tools":
            out.list_tools = True
        elif name == "delay":
            try:
                out.delay = max(0.0, float(arg))
            except ValueError:
                out.warnings.append(f"bad delay {arg!r}")
        else:
            out.warnings.append(f"unknown directive {match.group(0)!r}")
    out.text = " ".join(_DIRECTIVE.sub(" ", text).split())
    return out


def reply_for(text: str) -> str:
    """The agent's reply to a prompt whose text (directives removed) is ``text``.

    Tool outcomes and attachment notes are appended after it as separate sentences.
    """
    words = text.split()
    if not words:
        return "Reference reply: (empty prompt)."
    if words[0] == "/help":
        return HELP_TEXT
    plural = "" if len(words) == 1 else "s"
    return f'Reference reply: "{" ".join(words)}" ({len(words)} word{plural}).'


def chunk_text(text: str, words_per_chunk: int = 3) -> list[str]:
    """Split ``text`` into chunks of a few words; ``"".join(chunks) == text``."""
    pieces = re.findall(r"\s*\S+\s*", text) or ([text] if text else [])
    return [
        "".join(pieces[i : i + words_per_chunk]) for i in range(0, len(pieces), words_per_chunk)
    ]


def thoughts_for(text: str, model_id: str, thinking: str) -> list[str]:
    if thinking == "off":
        return []
    words = len(text.split())
    first = f"Reading the prompt with {model_id}."
    if thinking == "low":
        return [first]
    return [
        first,
        f" It has {words} word{'' if words == 1 else 's'}.",
        " Keeping the answer short.",
    ]
