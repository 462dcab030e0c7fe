"""What an ACP agent asks the client: permission, fs and terminal requests and their answers. Part
of :mod:`acpfsm.adapters.acp.messages` (import them from there)."""

from __future__ import annotations

from typing import TypeAlias

from .messages_base import (
    _Wire,
)
from .messages_session import (
    EnvVariable,
)
from .messages_update import (
    ToolCallRef,
)

# --------------------------------------------------------------------------------------------
# Agent → client requests


class PermissionOption(_Wire, frozen=True, kw_only=True):
    """``kind``: allow_once, allow_always, reject_once, reject_always."""

    option_id: str
    name: str = ""
    kind: str = ""


class RequestPermissionRequest(_Wire, frozen=True, kw_only=True):
    session_id: str
    tool_call: ToolCallRef = ToolCallRef()
    options: list[PermissionOption] = []


class SelectedOutcome(_Wire, frozen=True, kw_only=True, tag_field="outcome", tag="selected"):
    option_id: str


class DeniedOutcome(_Wire, frozen=True, kw_only=True, tag_field="outcome", tag="cancelled"):
    pass


PermissionOutcome: TypeAlias = SelectedOutcome | DeniedOutcome


class RequestPermissionResponse(_Wire, frozen=True, kw_only=True):
    outcome: PermissionOutcome


class ReadTextFileRequest(_Wire, frozen=True, kw_only=True):
    """``line`` is 1-based; ``limit`` is a number of lines."""

    session_id: str
    path: str
    line: int | None = None
    limit: int | None = None


class ReadTextFileResponse(_Wire, frozen=True, kw_only=True):
    content: str


class WriteTextFileRequest(_Wire, frozen=True, kw_only=True):
    session_id: str
    path: str
    content: str


class CreateTerminalRequest(_Wire, frozen=True, kw_only=True):
    session_id: str
    command: str
    args: list[str] = []
    env: list[EnvVariable] = []
    cwd: str | None = None
    output_byte_limit: int | None = None


class CreateTerminalResponse(_Wire, frozen=True, kw_only=True):
    terminal_id: str


class _TerminalRef(_Wire, frozen=True, kw_only=True):
    """The params of every ``terminal/*`` request but ``terminal/create``."""

    session_id: str
    terminal_id: str


class TerminalOutputRequest(_TerminalRef, frozen=True, kw_only=True):
    pass


class TerminalExitStatus(_Wire, frozen=True, kw_only=True):
    exit_code: int | None = None
    signal: str | None = None


class TerminalOutputResponse(_Wire, frozen=True, kw_only=True):
    output: str
    truncated: bool
    exit_status: TerminalExitStatus | None = None


class ReleaseTerminalRequest(_TerminalRef, frozen=True, kw_only=True):
    pass


class WaitForTerminalExitRequest(_TerminalRef, frozen=True, kw_only=True):
    pass


class WaitForTerminalExitResponse(TerminalExitStatus, frozen=True, kw_only=True):
    """The exit status itself (``exitCode``, ``signal``)."""


class KillTerminalCommandRequest(_TerminalRef, frozen=True, kw_only=True):
    pass
