"""Every event an execution publishes, importable from this one module.

A subscriber of one execution receives, in order, the agent's events (defined in
:mod:`acpfsm.adapters.events` and re-exported here: ``MessageChunk``, ``ToolCall``,
``Complete`` …) interleaved with the lifecycle events defined here (kandev's ``agent.*`` bus
events: ``AgentReady``, ``PromptCompleted`` …). All are frozen tagged msgspec Structs, not
tracked by the garbage collector (acyclic data: never put an event inside itself); match them
by type::

    from acpfsm.runtime.events import AgentReady, MessageChunk

    async for event in events:
        match event:
            case MessageChunk(text=text): print(text, end="")
            case AgentReady(): break

:data:`RuntimeEvent` is the union of all of them, :data:`AgentEvent` the agent's,
:data:`LifecycleEvent` the lifecycle's, :data:`TurnUpdate` the turn content that
:meth:`Runtime.turn <acpfsm.runtime.Runtime.turn>` yields.
"""

from __future__ import annotations

from typing import Any

import msgspec

from acpfsm.adapters.events import (
    AgentCapabilities,
    AgentEvent,
    AuthRequired,
    AvailableCommands,
    Complete,
    ConfigOption,
    ContextWindow,
    ErrorEvent,
    ForegroundIdle,
    MessageChunk,
    ModeInfo,
    ModelInfo,
    PermissionCancelled,
    PermissionOption,
    PermissionRequest,
    Plan,
    PlanEntry,
    ProtocolErrorEvent,
    Reasoning,
    SessionInfo,
    SessionMode,
    SessionModels,
    SessionStatus,
    StreamDisconnected,
    StreamReconnected,
    ToolCall,
    ToolUpdate,
    TurnStarted,
    TurnUpdate,
    Unknown,
)

__all__ = [  # the agent's events (re-exported) and the lifecycle's
    "AcpSessionCreated",
    "AgentBootReady",
    "AgentCapabilities",
    "AgentCompleted",
    "AgentEvent",
    "AgentFailed",
    "AgentLost",
    "AgentReady",
    "AgentRecovered",
    "AgentRunning",
    "AgentStalled",
    "AgentStopped",
    "AgentctlError",
    "AuthRequired",
    "AvailableCommands",
    "Complete",
    "ConfigFailures",
    "ConfigOption",
    "ContextWindow",
    "ErrorEvent",
    "EventsTruncated",
    "ForegroundIdle",
    "InitialPromptFailed",
    "LifecycleEvent",
    "McpCallEnded",
    "McpCallStarted",
    "McpModeChanged",
    "McpServerDropped",
    "MessageChunk",
    "ModeInfo",
    "ModelFallback",
    "ModelInfo",
    "ModelSelectionWarning",
    "PermissionCancelled",
    "PermissionOption",
    "PermissionRequest",
    "PermissionRequested",
    "PermissionResolved",
    "PermissionToolCall",
    "Plan",
    "PlanEntry",
    "PromptCompleted",
    "PromptFailed",
    "PromptInterrupted",
    "ProtocolErrorEvent",
    "Reasoning",
    "RuntimeEvent",
    "SequencedEvent",
    "SessionInfo",
    "SessionMode",
    "SessionModels",
    "SessionStatus",
    "StoreWriteFailed",
    "StoreWriteResumed",
    "StreamDisconnected",
    "StreamReconnected",
    "ToolCall",
    "ToolUpdate",
    "TurnStarted",
    "TurnUpdate",
    "Unknown",
]


class _Lifecycle(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", gc=False):
    execution_id: str


class AcpSessionCreated(_Lifecycle, frozen=True, tag="agent.acp_session_created"):
    """The ACP session exists. ``resume_attempt_id`` is the launch's resume attempt
    (metadata ``resume_attempt_id``; kandev ``PublishACPSessionCreatedWithAttempt``)."""

    session_id: str
    task_id: str
    acp_session_id: str
    resumed: bool = False
    resume_attempt_id: str = ""


class AgentRunning(_Lifecycle, frozen=True, tag="agent.running"):
    prompt_generation: int = 0


class AgentReady(_Lifecycle, frozen=True, tag="agent.ready"):
    prompt_generation: int = 0
    stop_reason: str = ""


class AgentBootReady(_Lifecycle, frozen=True, tag="agent.boot_ready"):
    resume_context_pending: bool = False


class AgentFailed(_Lifecycle, frozen=True, tag="agent.failed"):
    error: str
    prompt_generation: int = 0
    phase: str = ""  # "session_init" | "prompt_send" | "process" | "crash"


class AgentCompleted(_Lifecycle, frozen=True, tag="agent.completed"):
    exit_code: int = 0


class AgentStopped(_Lifecycle, frozen=True, tag="agent.stopped"):
    reason: str = ""


class AgentctlError(_Lifecycle, frozen=True, tag="agentctl.error"):
    """The owning stream disconnected (no ``agent.failed`` follows; kandev
    lifecycle/manager_events.go ``handleStreamDisconnect``)."""

    error: str
    prompt_generation: int = 0


class AgentStalled(_Lifecycle, frozen=True, tag="agent.stalled"):
    prompt_generation: int
    activity_epoch: int
    stalled_for: float
    never_started: bool
    active_tool_id: str = ""
    active_tool_title: str = ""


class ModelSelectionWarning(_Lifecycle, frozen=True, tag="session_model_selection_warning"):
    decision_id: str
    reason: str
    requested_model: str
    effective_model: str
    fallback_model: str = ""
    agent_id: str = ""
    executor_type: str = ""
    executor_profile_id: str = ""


class ModelFallback(_Lifecycle, frozen=True, tag="session_model_fallback"):
    fallback_model: str


class ConfigFailures(_Lifecycle, frozen=True, tag="workflow_session_config_failures"):
    failures: list[str]


class PromptCompleted(_Lifecycle, frozen=True, tag="prompt.completed"):
    prompt_generation: int
    stop_reason: str


class PromptFailed(_Lifecycle, frozen=True, tag="prompt.failed"):
    prompt_generation: int
    error: str
    outcome: str  # the generation's terminal state: failed, undelivered, cancel_escalated …


class InitialPromptFailed(_Lifecycle, frozen=True, tag="prompt.initial_failed"):
    """The seed's ``InitialPromptFailure`` (D9), published instead of a callback."""

    session_id: str
    prompt_generation: int
    error: str


class AgentRecovered(_Lifecycle, frozen=True, tag="agent.recovered"):
    """The app restarted and found this execution's agent still running: a new stream
    reaches the same agent process and ACP session (``startup_generation``: the recovery
    attempt). ``agent.boot_ready`` follows."""

    startup_generation: int
    acp_session_id: str = ""


class AgentLost(_Lifecycle, frozen=True, tag="agent.lost"):
    """The app restarted and this execution's agent did not survive (``reason`` says what
    was found, and what was ended so nothing is orphaned); the execution is FAILED and its
    ACP session id kept: ``Runtime.relaunch`` starts the agent again and loads it."""

    reason: str
    acp_session_id: str = ""
    startup_generation: int = 0


class PromptInterrupted(_Lifecycle, frozen=True, tag="prompt.interrupted"):
    """The app died while this prompt generation's turn was in flight: its caller is gone,
    and a late completion of it is ignored (a recovered execution numbers its prompts past
    it)."""

    prompt_generation: int
    reason: str = ""


class StoreWriteFailed(_Lifecycle, frozen=True, tag="store.write_failed"):
    """The execution store could not be written (``error``); the execution goes on and the
    writes are retried (``Runtime.store_health`` says so too)."""

    error: str
    kind: str = ""


class StoreWriteResumed(_Lifecycle, frozen=True, tag="store.write_resumed"):
    """The execution store is written again; nothing queued meanwhile was lost."""

    failed_for: float = 0.0


class EventsTruncated(_Lifecycle, frozen=True, tag="events.truncated"):
    """A late subscriber missed ``missed`` early events that were no longer retained."""

    missed: int


class McpServerDropped(_Lifecycle, frozen=True, tag="mcp.server_dropped"):
    """An MCP server of the launch was not offered to the agent's session: ``reason`` says
    why (the agent does not take its ``kind``, or an earlier server has its name)."""

    name: str
    kind: str
    reason: str


class McpModeChanged(_Lifecycle, frozen=True, tag="mcp.mode_changed"):
    """``set_mcp_mode`` switched the execution's tool set (and the ``mcp.*`` actions answered)."""

    mode: str
    previous: str


class McpCallStarted(_Lifecycle, frozen=True, tag="mcp.call_started"):
    """The agent called an app tool (``kind`` ``tool``) or agentctl forwarded one of kandev's
    ``mcp.*`` actions (``kind`` ``action``). ``arguments`` is their JSON, cut at 4 KiB."""

    call_id: str
    kind: str
    name: str
    mode: str
    arguments: str


class McpCallEnded(_Lifecycle, frozen=True, tag="mcp.call_ended"):
    """The call's answer: ``output`` (its text, cut at 4 KiB), or ``error`` when the agent was
    answered with an error (the tool raised, timed out, returned too much, the arguments
    were invalid, or nothing serves it in this mode)."""

    call_id: str
    kind: str
    name: str
    mode: str
    output: str = ""
    error: str = ""


class PermissionToolCall(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The tool call a permission request is about: its id, title, ``kind`` (ACP's
    ``execute``, ``edit``, ``read`` …; agentctl's action type) and ``raw_input`` (what it
    would run or write, as the agent sent it)."""

    tool_call_id: str = ""
    title: str = ""
    kind: str = ""
    raw_input: Any = None


class PermissionRequested(_Lifecycle, frozen=True, tag="permission.requested"):
    """The agent asks permission to run a tool call. Under the ``ask`` policy the app answers
    with ``Runtime.respond_permission(execution_id, request_id, option_id)`` within
    ``expires_in`` seconds; otherwise the execution's ``policy`` answers at once. A
    ``permission.resolved`` for the same ``request_id`` always follows."""

    request_id: str
    tool_call: PermissionToolCall
    options: list[PermissionOption]
    policy: str
    prompt_generation: int = 0
    expires_in: float = 0.0
    session_id: str = ""
    """The ACP session the request is for: always the execution's own (over stdio a request
    naming another session is refused before it is asked; agentctl relays only its own)."""


class PermissionResolved(_Lifecycle, frozen=True, tag="permission.resolved"):
    """How a permission request was answered: ``outcome`` ``selected`` (``option_id`` of
    kind ``option_kind``) or ``cancelled``. ``decided_by``: ``app``
    (``respond_permission``), ``policy`` (``reject`` or ``allow_once``), ``timeout`` (an
    ``ask`` left unanswered past its bound: refused), ``turn_ended`` (its turn ended first:
    cancelled), ``withdrawn`` (a cancel, a new prompt, the carrier's end or the execution's
    stop withdrew it) or ``limit`` (too many requests waiting: refused). ``reason`` says it in
    words. (A request reusing the id of one still waiting is refused without either event: it
    is published as a ``ProtocolErrorEvent``.)"""

    request_id: str
    outcome: str
    decided_by: str
    option_id: str = ""
    option_kind: str = ""
    reason: str = ""


LifecycleEvent = (
    AcpSessionCreated
    | AgentRunning
    | AgentReady
    | AgentBootReady
    | AgentFailed
    | AgentCompleted
    | AgentStopped
    | AgentctlError
    | AgentStalled
    | ModelSelectionWarning
    | ModelFallback
    | ConfigFailures
    | PromptCompleted
    | PromptFailed
    | InitialPromptFailed
    | EventsTruncated
    | AgentRecovered
    | AgentLost
    | PromptInterrupted
    | StoreWriteFailed
    | StoreWriteResumed
    | McpServerDropped
    | McpModeChanged
    | McpCallStarted
    | McpCallEnded
    | PermissionRequested
    | PermissionResolved
)

RuntimeEvent = AgentEvent | LifecycleEvent


class SequencedEvent(msgspec.Struct, frozen=True, gc=False):
    """One event of an execution's durable log (``Runtime.subscribe``): ``seq`` numbers the
    execution's events from 1, in order, across restarts of the app; pass the last one
    seen as ``after=`` to continue."""

    seq: int
    event: RuntimeEvent
