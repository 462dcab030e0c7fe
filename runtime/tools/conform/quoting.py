"""Quoting what an agent sent, for a terminal, a JSON report or a JUnit file: as JSON, every
character that could hide or rewrite text escaped, cut to a bound. Never raises."""

from __future__ import annotations

import json
import unicodedata
from typing import Any

__all__ = ["quote", "safe_text"]

_VALUE_CHARS = 160


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _safe_char(char: str) -> str:
    """``char`` unless it could hide or rewrite text on a terminal or in a report: C0/C1
    controls, bidi and other format characters, line/paragraph separators, surrogates and
    unassigned code points come out escaped."""
    if char in "\t":
        return char
    category = unicodedata.category(char)
    if category in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
        return _escape(char)
    return char


def safe_text(text: str) -> str:
    """``text`` with every dangerous character escaped (see :func:`_safe_char`)."""
    if text.isprintable():
        return text
    return "".join(_safe_char(c) for c in text)


def quote(value: Any, limit: int = _VALUE_CHARS) -> str:
    """``value`` as JSON (bytes: decoded, invalid UTF-8 replaced), every dangerous character
    escaped, cut to ``limit`` characters with the count of what was cut."""
    if isinstance(value, bytes | bytearray | memoryview):
        value = bytes(value).decode("utf-8", errors="replace")
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    text = safe_text(text)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 1]}… (+{len(text) - limit + 1} chars)"
