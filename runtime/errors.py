"""Errors of the runtime, rooted (with the adapters' errors) at :class:`AcpfsmError`.

    AcpfsmError                      (acpfsm.statecharts.errors)
    ├── (statecharts: ChartError → IllegalTransition, ChartDefinitionError, CoordinationError)
    ├── (adapters: TransportError, ProtocolError, AgentRequestError, SteerUnsupported …)
    ├── ExecutionNotFound            no execution with that id (runtime: execution not found)
    ├── ExecutionIdRequired          an empty execution id (executionID is required)
    ├── ExecutionAlreadyExists       a second execution for one task session (R31)
    ├── LaunchSpecError              the launch spec cannot be honoured (e.g. no workspace)
    │   ├── ProfileNotFound          no agent profile with that id
    │   ├── ExecutorNotFound         no executor with that id
    │   └── InvalidWorkspace         the workspace path is empty, relative or not encodable
    ├── ExecutionCrashed             the execution's own code failed (an executor, the
    │                                transport, a bug): it is FAILED, no other one is touched
    ├── ExecutorError                the app's executor failed to start the agent, or its close
    │                                hung past its bound (``__cause__``: its own exception)
    ├── PermissionAnswerError        the app's answer to a permission request was not taken
    │   ├── PermissionRequestNotFound    no such request was asked
    │   ├── PermissionAlreadyResolved    it was already answered, refused or cancelled
    │   └── PermissionOptionNotOffered   the request offers no such option (still pending)
    ├── Unsupported                  the operation is not supported (runtime: operation not supported)
    ├── SessionInitError             failed to initialize ACP (the launch failed)
    │   └── AuthenticationRequired   … because the agent wants authentication first (authMethods)
    ├── NotReadyForPrompts           status is not RUNNING or READY
    │   └── ExecutionLost            the app restarted and the execution's agent did not
    │                                survive (its reason; ``Runtime.relaunch`` restarts it)
    ├── PromptError                  a prompt could not be delivered or did not complete
    │   ├── InvalidPrompt            text or attachments refused before anything was sent
    │   ├── PromptDispatchError      the trigger failed (failed to trigger prompt: …)
    │   ├── AttachmentError          an attachment could not be materialized
    │   │   └── SteerAttachmentMaterializationError
    │   ├── PendingDispatchedPromptTimeout   the dispatch-only barrier timed out (10 s, seed D8)
    │   ├── SteerNotDispatched       no live turn to steer into (seed D6)
    │   ├── SteerDispatchTimeout     the steer ack did not arrive within 5 s
    │   ├── PromptTimeout            the caller's timeout= passed; the turn was cancelled
    │   ├── AgentReportedError       the agent ended the turn with an error (agent error: …)
    │   │   ├── CancelEscalatedAgentError  … because a cancel was escalated (also CancelEscalated)
    │   │   └── PromptAuthenticationRequired  … because it wants authentication (also
    │   │                                      AuthenticationRequired)
    │   └── CancelEscalated          a cancel was escalated (cancel escalated: …)
    └── CancelFailed                 the cancel request itself failed

The seed's sentinels map to types: ``ErrPendingDispatchedPromptTimeout`` →
:class:`PendingDispatchedPromptTimeout`, ``ErrCancelEscalated`` → :class:`CancelEscalated`,
``ErrAgentReported`` → :class:`AgentReportedError`, the "not ready for prompts" error →
:class:`NotReadyForPrompts`. Every error carries ``execution_id``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from acpfsm.adapters.errors import (
    AcpfsmError,
    AgentRequestError,
    AuthenticationFailed,
    LaunchSpecError,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
    SteerUnsupported,
    StreamNotConnected,
    TransportClosed,
    TransportError,
    TransportTimeout,
)

__all__ = [
    "AcpfsmError",
    "AgentReportedError",
    "AgentRequestError",
    "AttachmentError",
    "AuthenticationFailed",
    "AuthenticationRequired",
    "CancelEscalated",
    "CancelEscalatedAgentError",
    "CancelFailed",
    "ExecutionAlreadyExists",
    "ExecutionCrashed",
    "ExecutionIdRequired",
    "ExecutionLost",
    "ExecutionNotFound",
    "ExecutionStopped",
    "ExecutorError",
    "ExecutorNotFound",
    "InvalidPrompt",
    "InvalidWorkspace",
    "LaunchSpecError",
    "LocalProtocolError",
    "NotReadyForPrompts",
    "PendingDispatchedPromptTimeout",
    "PermissionAlreadyResolved",
    "PermissionAnswerError",
    "PermissionOptionNotOffered",
    "PermissionRequestNotFound",
    "ProfileNotFound",
    "PromptAuthenticationRequired",
    "PromptDispatchError",
    "PromptError",
    "PromptTimeout",
    "ProtocolError",
    "RemoteProtocolError",
    "SessionInitError",
    "SteerAttachmentMaterializationError",
    "SteerDispatchTimeout",
    "SteerNotDispatched",
    "SteerUnsupported",
    "StreamNotConnected",
    "TransportClosed",
    "TransportError",
    "TransportTimeout",
    "Unsupported",
]

CANCEL_ESCALATED_MESSAGE = "cancel escalated: agent did not acknowledge within timeout"
CANCEL_ESCALATED_SIGNAL = "cancel escalated: agent did not complete turn within timeout"


class ExecutionNotFound(AcpfsmError):
    def __init__(self, execution_id: str) -> None:
        super().__init__(
            f'runtime: execution not found: execution "{execution_id}"',
            execution_id=execution_id,
        )


class ExecutionIdRequired(AcpfsmError):
    """An empty execution id (kandev's facade: ``executionID is required``)."""

    def __init__(self) -> None:
        super().__init__("executionID is required")


class ExecutionAlreadyExists(AcpfsmError):
    """A task session already has an execution (R31)."""


class ProfileNotFound(LaunchSpecError):
    """No agent profile with that id."""


class ExecutorNotFound(LaunchSpecError):
    """No executor with that id."""


class InvalidWorkspace(LaunchSpecError):
    """The workspace path is empty, relative, or holds what no agent can be told (a NUL, text
    that is not Unicode); checked before anything is started."""


class ExecutionCrashed(AcpfsmError):
    """The execution's own code failed outside the protocol (its executor's teardown, the
    transport, a bug in acpfsm, an illegal chart event): the execution is FAILED (its
    ``agent.failed`` has phase ``crash``), its waiters are released with this error, and no
    other execution is touched. ``__cause__`` is the failure."""


class ExecutorError(AcpfsmError):
    """The executor failed outside acpfsm's error tree: its ``open()`` raised or its context
    manager failed on enter (the launch fails with this error; ``__cause__`` is the
    executor's own exception), or its close did not finish within ``Timeouts.executor_close``
    (abandoned: ``Runtime.stop`` raises this once the rest of the execution is released)."""


class PermissionAnswerError(AcpfsmError):
    """The app's answer to a permission request was not taken. ``request_id`` names it."""

    request_id: str

    def __init__(self, message: str, *, execution_id: str, request_id: str) -> None:
        super().__init__(message, execution_id=execution_id)
        self.request_id = request_id


class PermissionRequestNotFound(PermissionAnswerError):
    """The execution was never asked this request."""

    def __init__(self, *, execution_id: str, request_id: str) -> None:
        super().__init__(
            f"no permission request {request_id!r} in execution {execution_id!r}",
            execution_id=execution_id,
            request_id=request_id,
        )


class PermissionAlreadyResolved(PermissionAnswerError):
    """The request was already answered, refused (its bound passed) or cancelled (its turn
    ended): ``resolution`` says how."""

    resolution: str

    def __init__(self, *, execution_id: str, request_id: str, resolution: str) -> None:
        super().__init__(
            f"permission request {request_id!r} is already resolved ({resolution})",
            execution_id=execution_id,
            request_id=request_id,
        )
        self.resolution = resolution


class PermissionOptionNotOffered(PermissionAnswerError):
    """The request does not offer that option; it is still pending (answer it again)."""

    option_id: str

    def __init__(
        self, *, execution_id: str, request_id: str, option_id: str, offered: list[str]
    ) -> None:
        super().__init__(
            f"permission request {request_id!r} offers no option {option_id!r} "
            f"(offered: {', '.join(offered) or 'none'})",
            execution_id=execution_id,
            request_id=request_id,
        )
        self.option_id = option_id


class Unsupported(AcpfsmError):
    def __init__(self, what: str, *, execution_id: str | None = None) -> None:
        super().__init__(f"runtime: operation not supported: {what}", execution_id=execution_id)


class SessionInitError(AcpfsmError):
    """The ACP session could not be initialized (``failed to initialize ACP: …``); its
    ``__cause__`` is the failure (the agent's answer, a timeout, a dead transport)."""


class AuthenticationRequired(SessionInitError):
    """The agent wants authentication before it opens a session: session/new or
    session/load answered "authentication required" (JSON-RPC -32000). ``auth_methods`` are
    the methods the agent advertised at initialize, as it sent them (``id``, ``name``,
    ``description``, codex's ``type``/``vars`` …); launch again with one of their ids as the
    profile's or the launch spec's ``auth_method`` (acpfsm then calls ACP ``authenticate``
    first), or give the agent its credentials (the profile's ``inherit_env``)."""

    auth_methods: list[dict[str, Any]]

    def __init__(
        self,
        message: str,
        *,
        auth_methods: Sequence[dict[str, Any]] = (),
        execution_id: str | None = None,
    ) -> None:
        ids = _method_ids(auth_methods)
        advertised = ", ".join(ids) if ids else "none advertised: set its credentials"
        super().__init__(f"{message} (auth methods: {advertised})", execution_id=execution_id)
        self.auth_methods = [dict(m) for m in auth_methods]

    @property
    def method_ids(self) -> list[str]:
        """The ids of :attr:`auth_methods`, the values ``auth_method`` takes."""
        return _method_ids(self.auth_methods)


def _method_ids(methods: Sequence[dict[str, Any]]) -> list[str]:
    return [str(m["id"]) for m in methods if isinstance(m, dict) and m.get("id")]


class NotReadyForPrompts(AcpfsmError):
    status: str

    def __init__(self, execution_id: str, status: str) -> None:
        super().__init__(
            f'execution "{execution_id}" is not ready for prompts (status: {status})',
            execution_id=execution_id,
        )
        self.status = status


class ExecutionLost(NotReadyForPrompts):
    """The app restarted and this execution's agent did not survive: it is FAILED with
    ``reason`` (e.g. "the agent instance ended while the app was down"), its ACP session id
    kept; ``Runtime.relaunch`` starts the agent again and loads the conversation."""

    reason: str

    def __init__(self, execution_id: str, reason: str) -> None:
        super().__init__(execution_id, "FAILED")
        self.args = (f'execution "{execution_id}" was lost: {reason}',)
        self.reason = reason


class PromptError(AcpfsmError):
    """A prompt could not be delivered or did not complete. ``generation`` is the prompt
    generation it concerned (0 before one was admitted)."""

    generation: int

    def __init__(self, message: str, *, execution_id: str | None = None, generation: int = 0):
        super().__init__(message, execution_id=execution_id)
        self.generation = generation


class InvalidPrompt(PromptError):
    """The prompt was refused before anything was sent (its text is not a ``str`` or cannot
    be encoded, e.g. a lone surrogate from ``os.fsdecode``; an attachment is not an
    :class:`~acpfsm.adapters.transport.Attachment`): the execution is untouched."""


class PromptDispatchError(PromptError):
    """``failed to trigger prompt: …``; the generation ends ``undelivered``."""


class AttachmentError(PromptError):
    """An attachment could not be materialized."""


class SteerAttachmentMaterializationError(AttachmentError):
    """``steer attachment materialization failed: …`` (seed D7)."""


class PendingDispatchedPromptTimeout(PromptError):
    """The dispatch-only barrier did not open within its bound; the gate stays set (seed D8)."""

    timeout: float

    def __init__(self, execution_id: str, timeout: float) -> None:
        super().__init__(
            f'pending dispatched prompt completion timed out for execution "{execution_id}" '
            f"after {timeout:g}s",
            execution_id=execution_id,
        )
        self.timeout = timeout


class SteerNotDispatched(PromptError):
    """``steer was not dispatched``: no live turn; run ordinary admission instead (seed D6)."""

    def __init__(self, reason: str = "", *, execution_id: str | None = None) -> None:
        message = "steer was not dispatched" + (f": {reason}" if reason else "")
        super().__init__(message, execution_id=execution_id)


class SteerDispatchTimeout(PromptError):
    """The steer ack did not arrive within the steer dispatch bound (5 s, R4)."""


class CancelEscalated(PromptError):
    """``cancel escalated: agent did not acknowledge within timeout``."""


class PromptTimeout(PromptError):
    """The caller's ``timeout=`` passed before the turn ended; the turn was cancelled at the
    agent (or never sent)."""


class AgentReportedError(PromptError):
    """``agent error: <message>``: the agent ended the turn with an error."""

    agent_message: str

    def __init__(
        self, agent_message: str, *, execution_id: str | None = None, generation: int = 0
    ) -> None:
        super().__init__(
            f"agent error: {agent_message}", execution_id=execution_id, generation=generation
        )
        self.agent_message = agent_message


class ExecutionStopped(PromptError):
    """The app stopped the execution (``reason``) while this call was in progress: the
    prompt's turn was ended by the stop, or the cancel found nothing left to cancel. Nothing
    the agent did: it is never an :class:`AgentReportedError`."""

    reason: str

    def __init__(
        self, reason: str, what: str, *, execution_id: str | None = None, generation: int = 0
    ) -> None:
        super().__init__(
            f"the execution was stopped by the app{f' ({reason})' if reason else ''}: {what}",
            execution_id=execution_id,
            generation=generation,
        )
        self.reason = reason


class CancelEscalatedAgentError(AgentReportedError, CancelEscalated):
    """The turn was released by a cancel escalation: both AgentReported and CancelEscalated."""

    def __init__(
        self, agent_message: str, *, execution_id: str | None = None, generation: int = 0
    ) -> None:
        AgentReportedError.__init__(
            self, agent_message, execution_id=execution_id, generation=generation
        )
        self.args = (f"agent error: {agent_message}: {CANCEL_ESCALATED_MESSAGE}",)


class PromptAuthenticationRequired(AgentReportedError, AuthenticationRequired):
    """The agent opened the session but refused the turn until authenticated (the Claude
    adapters without credentials answer session/prompt with -32000): both an
    :class:`AgentReportedError` and an :class:`AuthenticationRequired`."""

    def __init__(
        self,
        agent_message: str,
        *,
        auth_methods: Sequence[dict[str, Any]] = (),
        execution_id: str | None = None,
        generation: int = 0,
    ) -> None:
        AuthenticationRequired.__init__(
            self,
            f"agent error: {agent_message}: the agent needs authentication",
            auth_methods=auth_methods,
            execution_id=execution_id,
        )
        self.generation = generation
        self.agent_message = agent_message


class CancelFailed(AcpfsmError):
    """``failed to cancel agent: …``."""
