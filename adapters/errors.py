"""Typed errors raised by acpfsm, rooted at :class:`AcpfsmError`.

Adapters translate every foreign exception (anyio, httpx, msgspec, OS) into one of
these at the boundary, with :func:`map_exceptions` around each I/O call; callers never see a
foreign exception type.

    AcpfsmError                      every error this library raises (acpfsm.statecharts.errors)
    ├── ChartError                   a chart declared or driven wrongly (acpfsm.statecharts.errors)
    ├── TransportError               the carrier (pipe, WebSocket, HTTP) failed
    │   ├── StreamNotConnected       no live stream; a request was not (or may not have been) delivered
    │   ├── TransportClosed          the peer went away (EOF, broken pipe, process exit)
    │   │   └── EventConsumerStalled the transport's event consumer fell behind past its bound
    │   ├── TransportTimeout         a bounded wait on the carrier expired
    │   ├── AuthenticationFailed     the carrier refused our credentials (agentctl token, instance id)
    │   ├── DialFailed               one redial of a lost carrier failed; a later one may succeed
    │   └── DialRefused              no redial of this carrier can succeed (refused upgrade, pipes, closed)
    ├── ProtocolError                a message could not be understood
    │   ├── RemoteProtocolError      the agent/peer sent something invalid (bad JSON, oversize line, unknown id)
    │   └── LocalProtocolError       we asked for something the protocol does not allow here
    ├── AgentRequestError            the agent answered a request with a JSON-RPC error object
    ├── AgentctlError                agentctl refused or failed an operation on its own account
    ├── SteerUnsupported             the transport cannot deliver a steer into a running turn
    ├── WorkspaceError               a file operation on the agent's behalf failed (``path`` names it)
    │   ├── PathRefused              malformed (NUL, relative, too long) or outside the workspace
    │   │   └── SymlinkRefused       crosses a symbolic link where none may be followed
    │   ├── NotRegularFile           a FIFO, device, socket or directory where a file is needed
    │   ├── FileTooLarge             the text exceeds the configured size cap
    │   ├── InvalidText              text that cannot be written as UTF-8 (a lone surrogate)
    │   └── MissingFile              no such file (or a path component is not a directory)
    └── (runtime errors: see acpfsm.runtime.errors)

Every error may carry ``execution_id`` (filled in by the runtime) so that a caller juggling
several executions knows which one failed.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import msgspec

from acpfsm.statecharts.errors import AcpfsmError

__all__ = [
    "UNDECODABLE_JSON",
    "AcpfsmError",
    "AgentRequestError",
    "AgentctlError",
    "AuthenticationFailed",
    "DialFailed",
    "DialRefused",
    "EventConsumerStalled",
    "ExceptionMapping",
    "FileTooLarge",
    "InvalidText",
    "LaunchSpecError",
    "LocalProtocolError",
    "MissingFile",
    "NotRegularFile",
    "PathRefused",
    "ProtocolError",
    "RemoteProtocolError",
    "SteerUnsupported",
    "StreamNotConnected",
    "SymlinkRefused",
    "TransportClosed",
    "TransportError",
    "TransportTimeout",
    "WorkspaceError",
    "map_exceptions",
]

ExceptionMapping = Mapping[
    type[Exception] | tuple[type[Exception], ...], Callable[[Any], BaseException]
]
"""Foreign exception types → what each becomes: a function of the foreign exception (or an
exception class, called with its text)."""


@contextlib.contextmanager
def map_exceptions(mapping: ExceptionMapping) -> Iterator[None]:
    """Translate the foreign exceptions of one I/O call at the boundary (httpcore's
    ``map_exceptions``)::

        with map_exceptions({OSError: lambda exc: TransportError(f"cannot start: {exc}")}):
            process = await anyio.open_process(argv)

    An exception raised in the block that is an instance of a key is replaced by what the
    key's value makes of it, with the foreign exception as its ``__cause__``; the first key
    that matches wins (the mapping's order). Anything else, cancellation included, passes
    through unchanged. The mapping may hold one function with side effects (a socket marked
    lost); it runs once, when its exception is translated."""
    try:
        yield
    except Exception as exc:
        for foreign, ours in mapping.items():
            if isinstance(exc, foreign):
                raise (ours(str(exc)) if isinstance(ours, type) else ours(exc)) from exc
        raise


UNDECODABLE_JSON: tuple[type[Exception], ...] = (msgspec.DecodeError, RecursionError)
"""What decoding a peer's JSON raises when it is malformed: invalid JSON, or nested deeper
than the interpreter's recursion limit (msgspec then raises RecursionError). Every decode of
what an agent or agentctl sent catches these and reports a malformed message."""


class LaunchSpecError(AcpfsmError):
    """The launch cannot be honoured (unknown profile or executor, no workspace …)."""


class TransportError(AcpfsmError):
    """The carrier between us and the agent failed."""


class StreamNotConnected(TransportError):
    """No live stream to the agent (the seed's ``agent stream not connected``).

    ``while_waiting`` is true when the request was written and the stream dropped before
    the answer arrived: delivery is then ambiguous (kandev H1)."""

    while_waiting: bool

    def __init__(
        self,
        message: str = "agent stream not connected",
        *,
        while_waiting: bool = False,
        execution_id: str | None = None,
    ) -> None:
        super().__init__(message, execution_id=execution_id)
        self.while_waiting = while_waiting


class TransportClosed(TransportError):
    """The peer went away: EOF, broken pipe, process exit (``peer disconnected``)."""

    stderr_tail: str

    def __init__(
        self, message: str, *, stderr_tail: str = "", execution_id: str | None = None
    ) -> None:
        super().__init__(message, execution_id=execution_id)
        self.stderr_tail = stderr_tail


class EventConsumerStalled(TransportClosed):
    """The transport stopped reading the agent because its events were not consumed (the
    backpressure of a flood), and the consumer did not catch up within the bound: it is gone
    or stuck. The transport is closed for it (``notification queue overflow: …``)."""


class TransportTimeout(TransportError):
    """A bounded wait on the carrier expired (``context deadline exceeded``)."""


class AuthenticationFailed(TransportError):
    """The carrier refused our credentials."""


class DialFailed(TransportError):
    """One redial of a lost carrier failed, and a later one may succeed (network error,
    timeout, peer unreachable): retryable. ``__cause__`` is the dial's own error."""


class DialRefused(TransportError):
    """No redial of this carrier can succeed: the peer refused the dial for good (agentctl's
    upgrade answered 401, 403 or 404: wrong token, instance gone), or the carrier cannot be
    redialled at all (stdio pipes, a closed or given-up transport): fatal."""


class ProtocolError(AcpfsmError):
    """A message could not be understood or is not allowed."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something invalid: malformed JSON, an oversize line, an unknown id."""


class LocalProtocolError(ProtocolError):
    """We tried something the protocol does not allow in the current state."""


class SteerUnsupported(AcpfsmError):
    """The agent does not queue prompts, so a steer cannot be delivered into a running turn."""


class AgentRequestError(AcpfsmError):
    """The agent answered a JSON-RPC request with an error object.

    ``code``/``error_message``/``data`` are the structured error; ``method`` is the request
    that failed. ``str()`` is the compact JSON projection agentctl uses on the wire (its
    HTTP error bodies), optionally behind a ``prefix``."""

    code: int
    error_message: str
    data: Any
    method: str

    def __init__(
        self,
        code: int,
        message: str,
        data: Any = None,
        *,
        method: str = "",
        prefix: str = "",
        execution_id: str | None = None,
    ) -> None:
        self.code = code
        self.error_message = message
        self.data = data
        self.method = method
        projection = self.json_projection()
        super().__init__(
            f"{prefix}: {projection}" if prefix else projection, execution_id=execution_id
        )

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.error_message}
        if self.data is not None:
            out["data"] = self.data
        return out

    def json_projection(self) -> str:
        return json.dumps(self.as_dict(), separators=(",", ":"), ensure_ascii=False)


class AgentctlError(AcpfsmError):
    """agentctl refused or failed an operation on its own account: an HTTP error status, or a
    WebSocket error frame that carries no agent JSON-RPC error (``no active session - call
    new_session first``, ``agent not running``, an attachment rejected, …).

    ``code`` is the envelope code (``BAD_REQUEST``, ``INTERNAL_ERROR``, ``UNKNOWN_ACTION`` …)
    or ``HTTP <status>``; ``status`` the HTTP status when there was one; ``action`` the
    WebSocket action or HTTP route."""

    code: str
    status: int | None
    action: str

    def __init__(
        self,
        message: str,
        *,
        code: str = "",
        status: int | None = None,
        action: str = "",
        execution_id: str | None = None,
    ) -> None:
        super().__init__(message, execution_id=execution_id)
        self.code = code
        self.status = status
        self.action = action


class WorkspaceError(AcpfsmError):
    """A file operation made on the agent's behalf (``fs/*``, a saved attachment) was refused
    or failed. ``path`` is the path as it was asked for; ``reason`` says why in a few words
    (``str()`` is ``"<reason>: <path>"``). The base class itself is an I/O failure (no
    space, permission denied, timed out …)."""

    path: str
    reason: str

    def __init__(self, reason: str, *, path: str = "", execution_id: str | None = None) -> None:
        super().__init__(f"{reason}: {path!r}" if path else reason, execution_id=execution_id)
        self.path = path
        self.reason = reason


class PathRefused(WorkspaceError):
    """The path is malformed (NUL byte, relative, too long) or leads outside the workspace
    (``..``, an absolute path elsewhere, a symbolic link whose target escapes)."""


class SymlinkRefused(PathRefused):
    """The path crosses a symbolic link where none may be followed (the resolver without
    ``openat2``, saved attachments). ``link`` is the absolute path of the link."""

    link: str

    def __init__(
        self, reason: str, *, path: str = "", link: str = "", execution_id: str | None = None
    ) -> None:
        super().__init__(reason, path=path, execution_id=execution_id)
        self.link = link


class NotRegularFile(WorkspaceError):
    """The path names a FIFO, a device, a socket or a directory: only regular files are read
    or replaced (so nothing can block on them)."""


class FileTooLarge(WorkspaceError):
    """The text to read or write exceeds the configured cap (``limit`` bytes)."""

    limit: int

    def __init__(
        self, reason: str, *, path: str = "", limit: int = 0, execution_id: str | None = None
    ) -> None:
        super().__init__(reason, path=path, execution_id=execution_id)
        self.limit = limit


class InvalidText(WorkspaceError):
    """Text that cannot be encoded as UTF-8 (it holds a lone surrogate)."""


class MissingFile(WorkspaceError):
    """No such file, or a component of the path is not a directory."""
