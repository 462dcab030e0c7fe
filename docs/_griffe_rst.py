"""A griffe extension for the API reference: our docstrings use reStructuredText's roles
(``:class:`~acpfsm.runtime.Runtime```) and literal blocks (``::``); the site renders
docstrings as Markdown, where those read as noise. Each role becomes inline code (its text,
or the last dotted part after ``~``), and a paragraph's closing ``::`` a colon (the indented
block after it is already a Markdown code block).
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

ROLE = re.compile(r":(?:py:)?[a-z]+:`(~?)([^`<]*?)(?:\s*<([^>`]+)>)?`")
LITERAL = re.compile(r"(?m)(\S)::$")
BARE_LITERAL = re.compile(r"(?m)^(\s*)::$")


def _role(match: re.Match[str]) -> str:
    short, text, target = match.groups()
    if target is not None:  # :meth:`the prompt <Runtime.prompt>`
        return f"`{text.strip()}`"
    if short:
        text = text.rsplit(".", 1)[-1]
    return f"`{text}`"


def markdown(text: str) -> str:
    text = ROLE.sub(_role, text)
    text = LITERAL.sub(r"\1:", text)
    return BARE_LITERAL.sub("", text)


class RestructuredTextRoles(Extension):
    def on_instance(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
