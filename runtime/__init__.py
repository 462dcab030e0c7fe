"""The anyio runtime that drives the charts, and the :class:`Runtime` facade.

:class:`AgentctlExecutor` is imported on first use: a program that only runs agents over stdio
never loads the agentctl stack (httpx, httpx-ws, httpcore).
"""

import logging as _logging
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

# a library logs but never prints: the application decides where records go
_logging.getLogger("acpfsm").addHandler(_logging.NullHandler())


from acpfsm.adapters.acp.executor import StdioExecutor as StdioExecutor
from acpfsm.adapters.errors import AgentctlError as AgentctlError
from acpfsm.adapters.errors import AgentRequestError as AgentRequestError
from acpfsm.adapters.errors import AuthenticationFailed as AuthenticationFailed
from acpfsm.adapters.errors import DialFailed as DialFailed
from acpfsm.adapters.errors import DialRefused as DialRefused
from acpfsm.adapters.errors import ProtocolError as ProtocolError
from acpfsm.adapters.errors import RemoteProtocolError as RemoteProtocolError
from acpfsm.adapters.errors import SteerUnsupported as SteerUnsupported
from acpfsm.adapters.errors import StreamNotConnected as StreamNotConnected
from acpfsm.adapters.errors import TransportClosed as TransportClosed
from acpfsm.adapters.errors import TransportError as TransportError
from acpfsm.adapters.errors import TransportTimeout as TransportTimeout
from acpfsm.adapters.executor import AgentLaunch as AgentLaunch
from acpfsm.adapters.executor import Executor as Executor
from acpfsm.adapters.mcp_servers import McpServer as McpServer
from acpfsm.adapters.mcp_servers import McpServerHttp as McpServerHttp
from acpfsm.adapters.mcp_servers import McpServerSse as McpServerSse
from acpfsm.adapters.mcp_servers import McpServerStdio as McpServerStdio

from . import events as events
from .errors import AcpfsmError as AcpfsmError
from .errors import AgentReportedError as AgentReportedError
from .errors import AttachmentError as AttachmentError
from .errors import AuthenticationRequired as AuthenticationRequired
from .errors import CancelEscalated as CancelEscalated
from .errors import CancelEscalatedAgentError as CancelEscalatedAgentError
from .errors import CancelFailed as CancelFailed
from .errors import ExecutionAlreadyExists as ExecutionAlreadyExists
from .errors import ExecutionCrashed as ExecutionCrashed
from .errors import ExecutionIdRequired as ExecutionIdRequired
from .errors import ExecutionLost as ExecutionLost
from .errors import ExecutionNotFound as ExecutionNotFound
from .errors import ExecutionStopped as ExecutionStopped
from .errors import ExecutorError as ExecutorError
from .errors import ExecutorNotFound as ExecutorNotFound
from .errors import InvalidPrompt as InvalidPrompt
from .errors import InvalidWorkspace as InvalidWorkspace
from .errors import LaunchSpecError as LaunchSpecError
from .errors import NotReadyForPrompts as NotReadyForPrompts
from .errors import PendingDispatchedPromptTimeout as PendingDispatchedPromptTimeout
from .errors import PermissionAlreadyResolved as PermissionAlreadyResolved
from .errors import PermissionAnswerError as PermissionAnswerError
from .errors import PermissionOptionNotOffered as PermissionOptionNotOffered
from .errors import PermissionRequestNotFound as PermissionRequestNotFound
from .errors import ProfileNotFound as ProfileNotFound
from .errors import PromptAuthenticationRequired as PromptAuthenticationRequired
from .errors import PromptDispatchError as PromptDispatchError
from .errors import PromptError as PromptError
from .errors import PromptTimeout as PromptTimeout
from .errors import SessionInitError as SessionInitError
from .errors import SteerAttachmentMaterializationError as SteerAttachmentMaterializationError
from .errors import SteerDispatchTimeout as SteerDispatchTimeout
from .errors import SteerNotDispatched as SteerNotDispatched
from .errors import Unsupported as Unsupported
from .hub import SubscriberOverflow as SubscriberOverflow
from .hub import Subscription as Subscription
from .mcp.tools import ErrorExposure as ErrorExposure
from .mcp.tools import Tool as Tool
from .mcp.tools import ToolDeclarationError as ToolDeclarationError
from .mcp.tools import ToolSet as ToolSet
from .mcp.tools import tool as tool
from .runtime import BUILTIN_PROFILES as BUILTIN_PROFILES
from .runtime import Runtime as Runtime
from .runtime import reference_profile as reference_profile
from .trace import Trace as Trace
from .trace import TraceRecord as TraceRecord
from .turn import Turn as Turn
from .types import AgentProfile as AgentProfile
from .types import Attachment as Attachment
from .types import Execution as Execution
from .types import ExecutionRef as ExecutionRef
from .types import ExecutionStatus as ExecutionStatus
from .types import LaunchSpec as LaunchSpec
from .types import PermissionPolicyName as PermissionPolicyName
from .types import PromptResult as PromptResult
from .types import Retention as Retention
from .types import StopReason as StopReason
from .types import Timeouts as Timeouts
from .types import WorkspaceRef as WorkspaceRef

if _TYPE_CHECKING:
    from acpfsm.adapters.agentctl.executor import AgentctlExecutor as AgentctlExecutor


def __getattr__(name: str) -> _Any:
    if name == "AgentctlExecutor":  # the agentctl stack loads on first use only
        from acpfsm.adapters.agentctl.executor import AgentctlExecutor

        globals()[name] = AgentctlExecutor
        return AgentctlExecutor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BUILTIN_PROFILES",
    "AcpfsmError",
    "AgentLaunch",
    "AgentProfile",
    "AgentReportedError",
    "AgentRequestError",
    "AgentctlError",
    "AgentctlExecutor",
    "Attachment",
    "AttachmentError",
    "AuthenticationFailed",
    "AuthenticationRequired",
    "CancelEscalated",
    "CancelEscalatedAgentError",
    "CancelFailed",
    "DialFailed",
    "DialRefused",
    "ErrorExposure",
    "Execution",
    "ExecutionAlreadyExists",
    "ExecutionCrashed",
    "ExecutionIdRequired",
    "ExecutionLost",
    "ExecutionNotFound",
    "ExecutionRef",
    "ExecutionStatus",
    "ExecutionStopped",
    "Executor",
    "ExecutorError",
    "ExecutorNotFound",
    "InvalidPrompt",
    "InvalidWorkspace",
    "LaunchSpec",
    "LaunchSpecError",
    "McpServer",
    "McpServerHttp",
    "McpServerSse",
    "McpServerStdio",
    "NotReadyForPrompts",
    "PendingDispatchedPromptTimeout",
    "PermissionAlreadyResolved",
    "PermissionAnswerError",
    "PermissionOptionNotOffered",
    "PermissionPolicyName",
    "PermissionRequestNotFound",
    "ProfileNotFound",
    "PromptAuthenticationRequired",
    "PromptDispatchError",
    "PromptError",
    "PromptResult",
    "PromptTimeout",
    "ProtocolError",
    "RemoteProtocolError",
    "Retention",
    "Runtime",
    "SessionInitError",
    "StdioExecutor",
    "SteerAttachmentMaterializationError",
    "SteerDispatchTimeout",
    "SteerNotDispatched",
    "SteerUnsupported",
    "StopReason",
    "StreamNotConnected",
    "SubscriberOverflow",
    "Subscription",
    "Timeouts",
    "Tool",
    "ToolDeclarationError",
    "ToolSet",
    "Trace",
    "TraceRecord",
    "TransportClosed",
    "TransportError",
    "TransportTimeout",
    "Turn",
    "Unsupported",
    "WorkspaceRef",
    "events",
    "reference_profile",
    "tool",
]
