"""What the facade checks before anything is sent or started.

A careless caller's input is refused with a typed error here, and the execution is left as it
was: no generation is admitted, no chart moves, nothing reaches the agent. Text must be a
``str`` that UTF-8 can carry (``os.fsdecode`` of a file name that is not UTF-8 gives lone
surrogates, which no JSON encoder can send), attachments must be
:class:`~acpfsm.adapters.transport.Attachment` values, the workspace an absolute path that an
agent can be told.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from acpfsm.adapters.transport import Attachment

from .errors import InvalidPrompt, InvalidWorkspace, LaunchSpecError
from .types import LaunchSpec

__all__ = ["check_launch_spec", "check_prompt"]

_ATTACHMENT_TEXT = ("name", "mime_type", "path", "attachment_id", "delivery_mode")


def _unencodable(text: str) -> str:
    """Why ``text`` cannot be sent ("" when it can)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"it is not valid Unicode (character {exc.start}: {text[exc.start]!r})"
    return ""


def check_prompt(
    text: Any, attachments: Any, *, execution_id: str | None = None, what: str = "prompt"
) -> tuple[Attachment, ...]:
    """Refuse a prompt (or steer) that cannot be sent: :class:`InvalidPrompt`. Returns the
    attachments as a tuple."""
    if not isinstance(text, str):
        raise InvalidPrompt(
            f"{what} text must be a str, not {type(text).__name__}", execution_id=execution_id
        )
    why = _unencodable(text)
    if why:
        raise InvalidPrompt(f"{what} text cannot be sent: {why}", execution_id=execution_id)
    if isinstance(attachments, str | bytes) or not isinstance(attachments, Sequence):
        raise InvalidPrompt(
            f"{what} attachments must be a sequence of Attachment, not "
            f"{type(attachments).__name__}",
            execution_id=execution_id,
        )
    for index, attachment in enumerate(attachments):
        if not isinstance(attachment, Attachment):
            raise InvalidPrompt(
                f"{what} attachment {index} is a {type(attachment).__name__}, not an Attachment",
                execution_id=execution_id,
            )
        for field in _ATTACHMENT_TEXT:
            value = getattr(attachment, field)
            why = _unencodable(value) if isinstance(value, str) else "it is not a str"
            if why:
                raise InvalidPrompt(
                    f"{what} attachment {index} {field} cannot be sent: {why}",
                    execution_id=execution_id,
                )
        if not isinstance(attachment.data, bytes):
            raise InvalidPrompt(
                f"{what} attachment {index} data must be bytes, not "
                f"{type(attachment.data).__name__}",
                execution_id=execution_id,
            )
    return tuple(attachments)


def check_launch_spec(spec: Any) -> None:
    """Refuse a launch spec that cannot be honoured before anything is started."""
    if not isinstance(spec, LaunchSpec):
        raise LaunchSpecError(f"a LaunchSpec is needed, not {type(spec).__name__}")
    path = getattr(spec.workspace, "path", None)
    if not isinstance(path, str) or not path:
        raise InvalidWorkspace("the workspace path is empty: give the agent's directory")
    if "\0" in path:
        raise InvalidWorkspace(f"the workspace path {path!r} holds a NUL byte")
    why = _unencodable(path)
    if why:
        raise InvalidWorkspace(f"the workspace path {path!r} cannot be sent to an agent: {why}")
    if not os.path.isabs(path):
        raise InvalidWorkspace(
            f"the workspace path {path!r} is relative: give an absolute path (the agent's "
            "working directory and the root its file requests are confined to)"
        )
    check_prompt(spec.prompt, spec.attachments, what="initial prompt")
