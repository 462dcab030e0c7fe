"""The client side of :class:`~.stdio.StdioTransport`: the agent's requests (permission,
``fs/*`` confined to the workspace, ``terminal/*``) and the JSON-RPC errors it gets."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from typing import Any, Final, TypeVar

import anyio
import anyio.abc
import anyio.lowlevel
import msgspec
from msgspec import Raw

from ..errors import (
    UNDECODABLE_JSON,
    ExceptionMapping,
    FileTooLarge,
    InvalidText,
    MissingFile,
    NotRegularFile,
    PathRefused,
    RemoteProtocolError,
    SymlinkRefused,
    WorkspaceError,
    map_exceptions,
)
from ..events import (
    PermissionCancelled,
    PermissionOption,
    PermissionRequest,
)
from ..workspace import run_in_thread
from . import messages as acp
from ._stdio_base import _StdioBase
from .jsonrpc import (
    JsonRpcErrorReply,
    method_not_found,
)

log = logging.getLogger("acpfsm.adapters.acp.stdio")
_T = TypeVar("_T")

MAX_PERMISSION_ID_CHARS: Final = 256
"""The longest app-facing permission request id: the app keeps ids (events, history, the
answers it remembers), so an agent's megabyte id is refused rather than kept."""

_NUMBER_LIKE: Final = re.compile(r"-?[0-9]+", re.ASCII)


def permission_request_id(request_id: acp.RequestId) -> str:
    """The app-facing id of the agent's JSON-RPC request ``request_id``, one string per
    distinct id (JSON-RPC ids ``1`` and ``"1"`` are two requests): a number is its decimal
    (``7`` → ``"7"``); a string is itself, unless it could be taken for a number or for one
    given this way (it is empty, all digits after an optional ``-``, or starts with ``"``):
    then it is its JSON text (``"1"`` → ``'"1"'``)."""
    if isinstance(request_id, int):
        return str(request_id)
    if not request_id or request_id[0] == '"' or _NUMBER_LIKE.fullmatch(request_id):
        return msgspec.json.encode(request_id).decode()
    return request_id


class _ClientSide(_StdioBase):
    """the agent's requests: session/request_permission, fs/*, terminal/*."""

    async def _serve_request(
        self, request_id: acp.RequestId, method: str, params: Raw | None
    ) -> Any:
        if method.startswith("terminal/"):
            if self._terminal_handler is None:
                raise method_not_found(method)
            return await self._terminal_handler(method, self._typed_params(method, params))
        if method == "session/request_permission":
            app_id = permission_request_id(request_id)
            if len(app_id) > MAX_PERMISSION_ID_CHARS:
                error = (
                    f"permission request id longer than {MAX_PERMISSION_ID_CHARS} characters "
                    f"({len(app_id)}): refused"
                )
                self._on_protocol_error(RemoteProtocolError(error))
                raise JsonRpcErrorReply(-32600, "Invalid Request", {"details": error})
            request: acp.RequestPermissionRequest = self._typed_params(method, params)
            if request.session_id != self._session_id:
                # no tool runs for a session this client does not own, whatever the policy
                error = (
                    f"permission request {app_id!r} names ACP session {request.session_id!r}, "
                    f"not this client's ({self._session_id!r}): refused"
                )
                self._on_protocol_error(RemoteProtocolError(error))
                raise JsonRpcErrorReply(
                    -32602, "Invalid params: unknown session", {"sessionId": request.session_id}
                )
            return await self._ask_permission(app_id, request)
        if method == "fs/read_text_file" and self.config.fs_read:
            return await self._read_text_file(self._typed_params(method, params))
        if method == "fs/write_text_file" and self.config.fs_write:
            return await self._write_text_file(self._typed_params(method, params))
        raise method_not_found(method)

    @staticmethod
    def _typed_params(method: str, params: Raw | None) -> Any:
        with map_exceptions(_INVALID_PARAMS):
            return acp.decode_agent_params(method, params)

    async def _ask_permission(
        self, request_id: str, params: acp.RequestPermissionRequest
    ) -> acp.RequestPermissionResponse:
        event = PermissionRequest(
            session_id=params.session_id,
            prompt_generation=self._active_generation(),
            request_id=request_id,
            tool_call_id=params.tool_call.tool_call_id,
            permission_title=params.tool_call.title or "",
            options=[
                PermissionOption(option_id=o.option_id, name=o.name, kind=o.kind)
                for o in params.options
            ],
            tool_kind=params.tool_call.kind or "",
            raw_input=params.tool_call.raw_input,
        )
        self._emit(event)
        choice, withdrawn = await self._permissions.ask(event)
        if withdrawn:
            self._emit(PermissionCancelled(session_id=params.session_id, request_id=request_id))
        outcome: acp.PermissionOutcome = (
            acp.DeniedOutcome() if choice is None else acp.SelectedOutcome(option_id=choice)
        )
        return acp.RequestPermissionResponse(outcome=outcome)

    async def _in_thread(self, func: Callable[[threading.Event], _T], what: str) -> _T:
        """``func(cancelled)`` in a worker thread bounded by ``fs_timeout``, abandoned when
        the caller is cancelled (at most four at a time per transport)."""
        if self._fs_limiter is None:
            self._fs_limiter = anyio.CapacityLimiter(4)
        return await run_in_thread(
            func, bound=self.config.fs_timeout, limiter=self._fs_limiter, what=what
        )

    async def _fs_call(self, method: str, func: Callable[[threading.Event], _T]) -> _T:
        try:
            return await self._in_thread(func, method)
        except WorkspaceError as exc:
            log.info("%s refused: %s: %.200r", method, exc.reason, exc.path)
            raise _fs_error_reply(exc) from None

    async def _read_text_file(self, params: acp.ReadTextFileRequest) -> acp.ReadTextFileResponse:
        config = self.config
        content: str = await self._fs_call(
            "fs/read_text_file",
            lambda cancelled: self._files.read_text(
                params.path,
                line=params.line,
                limit=params.limit,
                max_bytes=config.fs_max_read_bytes,
                cancelled=cancelled,
            ),
        )
        return acp.ReadTextFileResponse(content=content)

    async def _write_text_file(self, params: acp.WriteTextFileRequest) -> acp.EmptyResponse:
        """Write the file; the answer is ``{}`` (the schema's WriteTextFileResponse is an
        object: ``null`` is not one)."""
        config = self.config
        await self._fs_call(
            "fs/write_text_file",
            lambda cancelled: self._files.write_text(
                params.path,
                params.content,
                max_bytes=config.fs_max_write_bytes,
                cancelled=cancelled,
            ),
        )
        return acp.EmptyResponse()


_INVALID_PARAMS: Final[ExceptionMapping] = {
    UNDECODABLE_JSON: lambda exc: JsonRpcErrorReply(-32602, "Invalid params", {"details": str(exc)})
}
"""An agent request whose params do not decode is answered ``-32602``."""


def _fs_error_reply(exc: WorkspaceError) -> JsonRpcErrorReply:
    """The JSON-RPC error an agent gets for a refused or failed fs operation."""
    if isinstance(exc, MissingFile):
        return JsonRpcErrorReply(-32002, "Resource not found", {"uri": exc.path})
    if isinstance(exc, PathRefused | NotRegularFile | FileTooLarge | InvalidText):
        data: dict[str, Any] = {"path": exc.path}
        if isinstance(exc, SymlinkRefused):
            data["symlink"] = exc.link
        if isinstance(exc, FileTooLarge):
            data["limit"] = exc.limit
        return JsonRpcErrorReply(-32602, f"Invalid params: {exc.reason}", data)
    return JsonRpcErrorReply(-32603, "Internal error", {"details": exc.reason, "path": exc.path})
