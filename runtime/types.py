"""The facade's value types, mirroring kandev's runtime/runtime.go in Python names."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any, Literal, cast, get_args

import msgspec

from acpfsm.adapters.mcp_servers import McpServer
from acpfsm.adapters.transport import Attachment, InitializeResult

__all__ = [
    "AgentProfile",
    "Attachment",
    "Execution",
    "ExecutionRef",
    "ExecutionStatus",
    "LaunchSpec",
    "PermissionPolicyName",
    "PromptResult",
    "Retention",
    "StopReason",
    "Timeouts",
    "WorkspaceRef",
    "stop_reason_of",
]

ExecutionStatus = Literal["STARTING", "RUNNING", "READY", "COMPLETED", "FAILED", "STOPPED"]
"""An execution's status (the Execution chart's states, by kandev's names)."""

StopReason = Literal[
    "end_turn",
    "max_tokens",
    "max_turn_requests",
    "refusal",
    "cancelled",
    "dispatched",
    "foreground_idle",
]
"""Why a turn ended: ACP's five stopReasons, ``"dispatched"`` (a dispatch-only prompt or a
steer returns once sent) and ``"foreground_idle"`` (the agent handed the turn off)."""

_STOP_REASONS: frozenset[str] = frozenset(get_args(StopReason))


def stop_reason_of(value: str) -> StopReason:
    """``value`` as a :data:`StopReason`; a stopReason outside ACP's vocabulary (an agent's
    invention) is reported as ``"end_turn"``, the turn having ended normally (the verbatim
    value stays in the turn's ``Complete`` event)."""
    return cast(StopReason, value) if value in _STOP_REASONS else "end_turn"


PermissionPolicyName = Literal["reject", "allow_once", "ask"]
"""How an execution answers the agent's permission requests (``session/request_permission``;
agentctl's ``permission_request``):

* ``"reject"``: refuse every one (the ``reject_once`` option, else ``reject_always``, else
  ``cancelled``): the agent cannot run a tool that needs permission. The default of every
  profile but the embedded reference agent's.
* ``"allow_once"``: allow each one once (never ``allow_always``); refused when the request
  offers no ``allow_once`` option.
* ``"ask"``: the app decides: each request is published as a ``permission.requested`` event
  and answered with :meth:`~acpfsm.runtime.Runtime.respond_permission`; unanswered, it is
  refused after ``Timeouts.permission_wait`` and cancelled when its turn ends.

Every request, and how it was answered and why, is published (``permission.requested``,
``permission.resolved``)."""

PERMISSION_POLICIES: tuple[PermissionPolicyName, ...] = ("reject", "allow_once", "ask")


class WorkspaceRef(msgspec.Struct, frozen=True, kw_only=True):
    """Where the agent works. ``path`` is its cwd and the root its fs requests are confined to."""

    path: str
    repository_id: str = ""
    is_ephemeral: bool = False


class LaunchSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What to launch. ``prior_acp_session`` asks for session/load (with NativeSessionResume).

    Recognised ``metadata`` keys (all optional): ``session_id`` (the task session id; defaults
    to the execution id), ``task_id``, ``runtime_model``, ``session_mode``,
    ``runtime_config_options`` (a dict), ``executor_profile_id``, ``resume_attempt_id`` (carried
    by ``agent.acp_session_created``). Other keys are kept.

    ``mcp_servers`` are offered to the execution's sessions after the profile's (and before
    the Runtime's tool server); ``mcp_mode`` picks the tool set (see ``Runtime.set_mcp_mode``)."""

    agent_profile_id: str
    executor_id: str = ""
    """The executor to launch on; ``""`` (unset): the base request's
    (``metadata["launch_request"]``), else ``"stdio"``."""
    workspace: WorkspaceRef
    prompt: str = ""
    prior_acp_session: str = ""
    mcp_mode: str = ""
    attachments: tuple[Attachment, ...] = ()
    metadata: dict[str, Any] = {}
    auth_method: str = ""
    """An ACP auth method id (one of the agent's ``authMethods``): the session init calls
    ``authenticate`` with it before session/new or session/load. Overrides the profile's."""
    mcp_servers: tuple[McpServer, ...] = ()
    permission_policy: PermissionPolicyName | None = None
    """How this execution answers permission requests; ``None``: the profile's."""


class ExecutionRef(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    session_id: str
    agentctl_url: str = ""
    started_at: dt.datetime


class Execution(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of one execution, including the current state of each of its charts."""

    id: str
    session_id: str
    task_id: str
    agent_profile_id: str
    workspace_path: str
    agentctl_url: str
    status: ExecutionStatus
    started_at: dt.datetime
    finished_at: dt.datetime | None
    exit_code: int | None
    error_message: str
    acp_session_id: str
    agent_name: str
    agent_version: str
    charts: dict[str, str]
    prompt_generation: int
    metadata: dict[str, Any]
    accepts_prompts: bool = False
    """Whether a prompt sent now would be admitted (RUNNING or READY: a prompt while RUNNING
    takes the next turn): the Execution chart's own decision, asked without sending one, for
    a UI's send button or a scheduler."""
    agent_capabilities: InitializeResult | None = None
    """What the agent's initialize answered (capabilities, auth methods, ``_meta`` and the
    fields acpfsm does not model, ``unmodelled``); ``None`` before initialize."""


class PromptResult(msgspec.Struct, frozen=True, kw_only=True):
    """The end of a turn: ``stop_reason`` is the ACP stopReason, ``"dispatched"`` for a
    dispatch-only prompt or a steer, ``"foreground_idle"`` after a handoff. ``agent_message``
    is the assistant text streamed during this wait (unlike kandev's, which is always empty,
    H12)."""

    stop_reason: StopReason
    generation: int = 0
    agent_message: str = ""


class AgentProfile(msgspec.Struct, frozen=True, kw_only=True):
    """An agent and how to start a session on it (kandev's profile fields that the start-model
    policy and the profile layer read: lifecycle/start_model.go, lifecycle/session.go
    ``applyProfileSessionLayers``).

    The agent's environment is built per launch (:meth:`launch_env`): the variables named in
    ``inherit_env`` copied from the caller's environment when set there (the credentials and
    settings the agent reads, e.g. ``ANTHROPIC_API_KEY``), then ``env`` laid over them. The
    executor adds its own base (the stdio executor: ``PATH``, ``HOME``, ``LANG``); nothing
    else of the caller's environment reaches the agent."""

    id: str
    command: tuple[str, ...]
    env: dict[str, str] = {}
    inherit_env: tuple[str, ...] = ()
    native_session_resume: bool = True
    history_context_injection: bool = False
    model: str = ""
    fallback_model: str = ""
    auto_fallback: bool = False
    mode: str = ""
    config_options: dict[str, str] = {}
    auth_method: str = ""
    """An ACP auth method id the agent advertises: every launch authenticates with it before
    opening a session (a launch spec's ``auth_method`` overrides it)."""
    mcp_servers: tuple[McpServer, ...] = ()
    """MCP servers offered to every session of this agent (those it cannot take are dropped,
    with an ``McpServerDropped`` event)."""
    permission_policy: PermissionPolicyName = "reject"
    """How its executions answer permission requests unless the launch spec says otherwise
    (:data:`PermissionPolicyName`)."""

    def launch_env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The environment this profile gives its agent when launched from ``environ``."""
        out = {name: environ[name] for name in self.inherit_env if name in environ}
        out.update(self.env)
        return out


class Timeouts(msgspec.Struct, frozen=True, kw_only=True):
    """Every lifecycle bound, in seconds: kandev's values (``steerDispatchTimeout``,
    ``cancelWaitTimeout`` … in lifecycle/session.go and manager_interaction.go; the seed's
    10 s dispatch-only barrier, D8). Tests shorten them."""

    stream_connect: float = 10.0
    catalog_wait: float = 2.0
    catalog_poll: float = 0.01
    reconnect_retry: float = 5.0
    reconnect_poll: float = 0.1
    steer_dispatch: float = 5.0
    pending_dispatched_prompt: float = 10.0
    stall_tick: float = 60.0
    stall_threshold: float = 300.0
    cancel_wait: float = 10.0
    cancel_escalation: float = 2.0
    request: float = 120.0  # session/new, session/load and other RPCs (agentctl: 2 min)
    tool_call: float = 60.0  # one call of an app tool (unless the tool says) or mcp.* action
    permission_wait: float = 300.0
    """How long an ``ask`` permission request waits for the app's answer before it is
    refused (its turn's end cancels it sooner)."""
    executor_close: float = 30.0
    """How long an executor's close (the agent's stop) may take before it is abandoned."""
    tool_server_idle: float = 5.0
    """How long a connection to an execution's tool server may stay open without an
    authenticated request (any local process can connect; only the agent has the secret)."""

    def scaled(self, factor: float) -> Timeouts:
        return Timeouts(**{f: getattr(self, f) * factor for f in self.__struct_fields__})


class Retention(msgspec.Struct, frozen=True, kw_only=True):
    """How much a :class:`~acpfsm.runtime.Runtime` keeps in memory: every bound is fixed, so a
    service that runs for days holds the same memory on its last day as on its first.

    Sizes in bytes are estimates: an event's text (its JSON for any other event) plus a
    fixed overhead per event.

    * ``trace_records``: the last records of ``Runtime.trace.records`` (a ring; 0 keeps
      none). The trace file (``trace_path``) and the ``Trace.listeners`` get every record.
    * ``backlog_events``, ``backlog_bytes``: the events an execution retains for a late
      subscriber (``subscribe_events`` replays them); the oldest are dropped first and such a
      subscriber first receives an ``EventsTruncated`` marker saying how many it missed.
    * ``buffer_events``, ``buffer_bytes``: what one subscriber may fall behind the execution
      (beside its replay). Publishing never waits for a subscriber: one that falls further
      behind receives what it was buffered, then :class:`~acpfsm.runtime.SubscriberOverflow`
      naming how many events it missed, and its iteration ends.

    Beside these, an execution keeps the outcome text of its current prompt generation only
    (a reply is dropped once the next prompt is admitted; the caller already has it in its
    ``PromptResult``) and at most 64 generations."""

    trace_records: int = 10_000
    backlog_events: int = 10_000
    backlog_bytes: int = 1 << 20
    buffer_events: int = 10_000
    buffer_bytes: int = 16 << 20

    def __post_init__(self) -> None:
        for name in self.__struct_fields__:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"Retention.{name} must be a non-negative int, not {value!r}")
