"""Per-session JSONL history and the resume-context prompt built from it (kandev
lifecycle/session_history.go; its use: lifecycle/session.go ``buildEffectivePrompt``).

Theory of operation
-------------------
Agents that cannot reload a session (no ``session/load``) lose their conversation when the
process is replaced. The runtime therefore keeps a small on-disk history per *task session*:
one JSON object per line in ``<root>/<safe session id>.jsonl``. When a new agent process takes
over a session that has history, the first prompt it receives is wrapped in a fixed
"RESUME CONTEXT" template that replays the history as text (:meth:`HistoryStore.generate_resume_context`).

Entries are frozen msgspec Structs tagged by ``type``. The on-disk field names follow kandev's
``HistoryEntry`` JSON so that files are interchangeable; the Python attribute names are ours:

    ======================  ==================  =========================================
    class                   ``type`` on disk    fields (disk name when it differs)
    ======================  ==================  =========================================
    :class:`UserEntry`      ``user_message``    ``text`` (``content``)
    :class:`AssistantEntry` ``agent_message``   ``text`` (``content``)
    :class:`ToolCallEntry`  ``tool_call``       ``name`` (``tool_name``), ``tool_call_id``,
                                                ``status`` (``tool_status``), ``input``
    :class:`ToolResultEntry` ``tool_result``    ``name`` (``tool_name``), ``tool_call_id``,
                                                ``status`` (``tool_status``), ``output``
                                                (``content``)
    ======================  ==================  =========================================

Every entry carries a ``timestamp`` (timezone-aware; written as RFC 3339). Unknown fields
(kandev also writes ``role`` and ``session_id``) are ignored when reading.

Rendering (``GenerateResumeContext``) — each entry becomes one block ``"\\n<line>\\n"``:

- ``[USER]: <text ≤ 2000>``
- ``[ASSISTANT]: <text ≤ 2000>``
- ``[TOOL CALL: <name>]``
- ``[TOOL RESULT: <name>] <output ≤ 500>``

Text longer than the limit keeps its first ``limit`` characters followed by
``... [truncated]``. Limits count Unicode code points (kandev's ``truncateForContext``
counts UTF-8 bytes and may split a code point, which we do not reproduce). The blocks
are placed into :data:`RESUME_TEMPLATE`. With no entries, or nothing rendered, the prompt is
returned unchanged; when the file cannot be read the prompt is returned *together with* the
:class:`HistoryReadError` (the caller logs it and sends the plain prompt).

Reading is tolerant: blank lines, a torn last line (a crash mid-append), lines that are not
JSON and entries of an unknown ``type`` are skipped (logged), never fatal — as in kandev,
which skips every line it cannot parse. Only failing to read the file itself is an error; a
missing file is simply "no history". Appending first terminates a torn last line, so a crash
never glues the next entry onto a fragment.

Privacy: history holds prompt text, so the files are created mode ``0600`` and the folders
the store creates ``0700``, whatever the umask.

File names: the session id with ``/`` and ``\\`` replaced by ``_`` (kandev's rule), plus
``.jsonl``. Without separators, ``..`` is only part of a file name, so every path is a direct
child of ``root`` (``../../etc/passwd`` → ``.._.._etc_passwd.jsonl``). An empty id, or one
containing NUL, is refused with a typed error. Two ids differing only in ``/`` vs ``_`` share a
file (as in kandev).

Threading: every method is synchronous, small and cheap (one ``stat``, one read, or one
append). The runtime calls them through ``anyio.to_thread.run_sync`` so that the event loop
never blocks on the disk; a :class:`threading.Lock` serialises appends and reads of one store
across worker threads.

A surprising detail of kandev's is the caller's business, not the store's: the runtime appends
the prompt it was handed, and the initial prompt after a resume *is* the resume-context string,
so the first user entry after a resume holds the whole injected context (and a later resume
renders it truncated to 2000 characters like any user text).
"""

from __future__ import annotations

import functools
import logging
import os
import pathlib
import stat
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final, assert_never

import msgspec

from acpfsm.adapters.errors import AcpfsmError
from acpfsm.adapters.workspace import make_private_dirs, open_private

__all__ = [
    "RESUME_TEMPLATE",
    "TOOL_RESULT_LIMIT",
    "TRUNCATION_SUFFIX",
    "USER_TEXT_LIMIT",
    "AssistantEntry",
    "Entry",
    "HistoryError",
    "HistoryReadError",
    "HistoryStore",
    "HistoryWriteError",
    "ToolCallEntry",
    "ToolResultEntry",
    "UserEntry",
    "render_entry",
    "render_history",
    "render_resume_context",
    "safe_file_name",
    "truncate_for_context",
]

log = logging.getLogger(__name__)

USER_TEXT_LIMIT: Final = 2000
"""Characters of user or assistant text kept in the resume context."""

TOOL_RESULT_LIMIT: Final = 500
"""Characters of tool output kept in the resume context."""

TRUNCATION_SUFFIX: Final = "... [truncated]"
"""Appended after the kept prefix of a truncated text."""

RESUME_TEMPLATE: Final = (
    "RESUME CONTEXT FOR CONTINUING TASK\n"
    "\n"
    "=== EXECUTION HISTORY ===\n"
    "The following is a summary of the previous conversation in this session:\n"
    "{history}\n"
    "\n"
    "=== CURRENT REQUEST ===\n"
    "{prompt}\n"
    "\n"
    "=== INSTRUCTIONS ===\n"
    "You are continuing work on the above task. This is a continuation of a previous session.\n"
    "Please continue from where the previous execution left off, taking into account all the "
    "context provided above.\n"
    "Do not repeat work that was already completed. Build on the existing progress.\n"
)
"""The fixed resume-context wording (kandev ``GenerateResumeContext``); ``{history}`` is the
concatenated rendered blocks, ``{prompt}`` the current request. Filled with ``str.replace``
so braces in either never matter."""


# --------------------------------------------------------------------------------------------
# Errors


class HistoryError(AcpfsmError):
    """The session history store failed (root of the history errors)."""

    session_id: str

    def __init__(self, message: str, *, session_id: str = "") -> None:
        super().__init__(message)
        self.session_id = session_id


class HistoryReadError(HistoryError):
    """The history file exists but could not be read (or the session id is unusable)."""


class HistoryWriteError(HistoryError):
    """An entry could not be appended (or the session id is unusable)."""


# --------------------------------------------------------------------------------------------
# Entries


class _Entry(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", omit_defaults=True):
    timestamp: datetime
    """When the entry was recorded (timezone-aware)."""


class UserEntry(_Entry, tag="user_message", frozen=True):
    """A prompt the user (or the runtime on the user's behalf) sent."""

    text: str = msgspec.field(default="", name="content")


class AssistantEntry(_Entry, tag="agent_message", frozen=True):
    """Text the agent answered with (kandev's ``agent_message``)."""

    text: str = msgspec.field(default="", name="content")


class ToolCallEntry(_Entry, tag="tool_call", frozen=True):
    """The agent started a tool call."""

    name: str = msgspec.field(default="", name="tool_name")
    tool_call_id: str = ""
    status: str = msgspec.field(default="", name="tool_status")
    input: Any = None
    """The tool's raw input, if recorded (not rendered into the resume context)."""


class ToolResultEntry(_Entry, tag="tool_result", frozen=True):
    """A tool call finished with some output."""

    name: str = msgspec.field(default="", name="tool_name")
    tool_call_id: str = ""
    status: str = msgspec.field(default="", name="tool_status")
    output: str = msgspec.field(default="", name="content")


Entry = UserEntry | AssistantEntry | ToolCallEntry | ToolResultEntry
"""Every entry type the store writes and renders."""

_encoder: Final = msgspec.json.Encoder()


@functools.cache
def _decoder() -> msgspec.json.Decoder[Entry]:
    """Built on the first read of a history file, not by ``import acpfsm.runtime``."""
    return msgspec.json.Decoder(Entry)


# --------------------------------------------------------------------------------------------
# Rendering (pure)


def truncate_for_context(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters, else its first ``limit`` characters
    followed by :data:`TRUNCATION_SUFFIX`."""
    if len(text) <= limit:
        return text
    return text[:limit] + TRUNCATION_SUFFIX


def render_entry(entry: Entry) -> str:
    """One entry as its resume-context block (``"\\n<line>\\n"``)."""
    match entry:
        case UserEntry(text=text):
            line = f"[USER]: {truncate_for_context(text, USER_TEXT_LIMIT)}"
        case AssistantEntry(text=text):
            line = f"[ASSISTANT]: {truncate_for_context(text, USER_TEXT_LIMIT)}"
        case ToolCallEntry(name=name):
            line = f"[TOOL CALL: {name}]"
        case ToolResultEntry(name=name, output=output):
            line = f"[TOOL RESULT: {name}] {truncate_for_context(output, TOOL_RESULT_LIMIT)}"
        case _:
            assert_never(entry)
    return f"\n{line}\n"


def render_history(entries: list[Entry]) -> str:
    """The concatenated blocks of ``entries`` (``""`` when there are none)."""
    return "".join(render_entry(entry) for entry in entries)


def render_resume_context(entries: list[Entry], prompt: str) -> str:
    """``prompt`` wrapped in :data:`RESUME_TEMPLATE` with ``entries`` as the history; ``prompt``
    itself when nothing renders."""
    history = render_history(entries)
    if not history:
        return prompt
    head, _, rest = RESUME_TEMPLATE.partition("{history}")
    middle, _, tail = rest.partition("{prompt}")
    return head + history + middle + prompt + tail


# --------------------------------------------------------------------------------------------
# File names


def _invalid_reason(session_id: str) -> str | None:
    if not session_id:
        return "session ID is required"
    if "\x00" in session_id:
        return "session ID must not contain NUL"
    return None


def safe_file_name(session_id: str) -> str:
    """The history file name of ``session_id``: separators replaced by ``_``, plus ``.jsonl``.

    Raises :class:`HistoryError` for an empty id or one containing NUL."""
    reason = _invalid_reason(session_id)
    if reason is not None:
        raise HistoryError(reason, session_id=session_id)
    return session_id.replace("/", "_").replace("\\", "_") + ".jsonl"


def _utc_now() -> datetime:
    return datetime.now(UTC)


# --------------------------------------------------------------------------------------------
# The store


class HistoryStore:
    """One JSONL history file per task session under ``root``.

    ``root`` is created on the first append. ``clock`` supplies entry timestamps (UTC now by
    default; tests inject a fixed one). All methods are synchronous; see the module docstring.
    """

    def __init__(self, root: pathlib.Path, *, clock: Callable[[], datetime] = _utc_now) -> None:
        self._root = root
        self._clock = clock
        self._lock = threading.Lock()

    @property
    def root(self) -> pathlib.Path:
        return self._root

    def path_for(self, session_id: str) -> pathlib.Path:
        """The history file of ``session_id`` (always a direct child of :attr:`root`)."""
        return self._root / safe_file_name(session_id)

    # -- writing -----------------------------------------------------------------------------

    def append(self, session_id: str, entry: Entry) -> None:
        """Append ``entry`` as one line. Raises :class:`HistoryWriteError`."""
        reason = _invalid_reason(session_id)
        if reason is not None:
            raise HistoryWriteError(reason, session_id=session_id)
        path = self.path_for(session_id)
        try:
            line = _encoder.encode(entry) + b"\n"
        except (TypeError, ValueError, OverflowError, msgspec.MsgspecError) as exc:
            raise HistoryWriteError(
                f"failed to encode history entry: {exc}", session_id=session_id
            ) from exc
        with self._lock:
            try:
                make_private_dirs(self._root)
                with os.fdopen(open_private(path, os.O_RDWR | os.O_APPEND), "a+b") as f:
                    end = f.seek(0, 2)
                    if end > 0:
                        f.seek(end - 1)
                        if f.read(1) != b"\n":
                            # A torn last line: end it so this entry starts on its own line.
                            line = b"\n" + line
                    f.write(line)
            except OSError as exc:
                raise HistoryWriteError(
                    f"failed to write history entry: {exc}", session_id=session_id
                ) from exc

    def append_user(self, session_id: str, text: str) -> UserEntry:
        """Record a user prompt; returns the entry written."""
        entry = UserEntry(timestamp=self._clock(), text=text)
        self.append(session_id, entry)
        return entry

    def append_assistant(self, session_id: str, text: str) -> AssistantEntry:
        """Record agent text; returns the entry written."""
        entry = AssistantEntry(timestamp=self._clock(), text=text)
        self.append(session_id, entry)
        return entry

    def append_tool_call(
        self,
        session_id: str,
        name: str,
        tool_call_id: str,
        *,
        input: Any = None,
        status: str = "",
    ) -> ToolCallEntry:
        """Record the start of a tool call; returns the entry written. ``input`` must be
        JSON-encodable."""
        entry = ToolCallEntry(
            timestamp=self._clock(),
            name=name,
            tool_call_id=tool_call_id,
            status=status,
            input=input,
        )
        self.append(session_id, entry)
        return entry

    def append_tool_result(
        self,
        session_id: str,
        name: str,
        tool_call_id: str,
        output: str,
        *,
        status: str = "",
    ) -> ToolResultEntry:
        """Record a tool call's output; returns the entry written."""
        entry = ToolResultEntry(
            timestamp=self._clock(),
            name=name,
            tool_call_id=tool_call_id,
            status=status,
            output=output,
        )
        self.append(session_id, entry)
        return entry

    def delete(self, session_id: str) -> None:
        """Remove the history of ``session_id`` (no-op when absent). Raises
        :class:`HistoryWriteError`."""
        reason = _invalid_reason(session_id)
        if reason is not None:
            raise HistoryWriteError(reason, session_id=session_id)
        with self._lock:
            try:
                self.path_for(session_id).unlink(missing_ok=True)
            except OSError as exc:
                raise HistoryWriteError(
                    f"failed to delete history file: {exc}", session_id=session_id
                ) from exc

    # -- reading -----------------------------------------------------------------------------

    def has_history(self, session_id: str) -> bool:
        """True when the session's history file exists, is a regular file and is non-empty.
        Never raises (an unusable id or a failing ``stat`` is "no history")."""
        if _invalid_reason(session_id) is not None:
            return False
        try:
            st = self.path_for(session_id).stat()
        except OSError:
            return False
        return stat.S_ISREG(st.st_mode) and st.st_size > 0

    def read(self, session_id: str) -> list[Entry]:
        """Every decodable entry in file order; ``[]`` when there is no file.

        Undecodable lines (a torn last line, garbage, unknown ``type``) are skipped. Raises
        :class:`HistoryReadError` when the id is unusable or the file cannot be read."""
        reason = _invalid_reason(session_id)
        if reason is not None:
            raise HistoryReadError(reason, session_id=session_id)
        path = self.path_for(session_id)
        with self._lock:
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                return []
            except OSError as exc:
                raise HistoryReadError(
                    f"failed to read history file: {exc}", session_id=session_id
                ) from exc
        entries: list[Entry] = []
        decoder = _decoder()
        for number, raw in enumerate(data.split(b"\n"), start=1):
            if not raw.strip():
                continue
            try:
                entries.append(decoder.decode(raw))
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                log.warning(
                    "skipping undecodable history line %d of session %r: %s",
                    number,
                    session_id,
                    exc,
                )
        return entries

    def generate_resume_context(
        self, session_id: str, prompt: str
    ) -> tuple[str, HistoryReadError | None]:
        """``GenerateResumeContext``: ``prompt`` wrapped in the resume template with the
        session's history, or ``prompt`` unchanged when there is no history or nothing
        renders. On a read error: ``(prompt, error)``; otherwise the error is ``None``."""
        try:
            entries = self.read(session_id)
        except HistoryReadError as exc:
            return prompt, exc
        return render_resume_context(entries, prompt), None
