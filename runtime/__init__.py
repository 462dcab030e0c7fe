"""The anyio runtime that drives the charts, and the :class:`Runtime` facade."""

import logging as _logging

# a library logs but never prints: the application decides where records go
_logging.getLogger("acpfsm").addHandler(_logging.NullHandler())


from acpfsm.adapters.acp.executor import StdioExecutor as StdioExecutor
from acpfsm.adapters.agentctl.executor import AgentctlExecutor as AgentctlExecutor
from acpfsm.adapters.executor import AgentLaunch as AgentLaunch
from acpfsm.adapters.executor import Executor as Executor

from . import events as events
from .errors import AcpfsmError as AcpfsmError
from .errors import AgentReportedError as AgentReportedError
from .errors import AttachmentError as AttachmentError
from .errors import CancelEscalated as CancelEscalated
from .errors import CancelEscalatedAgentError as CancelEscalatedAgentError
from .errors import CancelFailed as CancelFailed
from .errors import ExecutionAlreadyExists as ExecutionAlreadyExists
from .errors import ExecutionCrashed as ExecutionCrashed
from .errors import ExecutionIdRequired as ExecutionIdRequired
from .errors import ExecutionNotFound as ExecutionNotFound
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
from .errors import PromptDispatchError as PromptDispatchError
from .errors import PromptError as PromptError
from .errors import PromptTimeout as PromptTimeout
from .errors import SessionInitError as SessionInitError
from .errors import SteerAttachmentMaterializationError as SteerAttachmentMaterializationError
from .errors import SteerDispatchTimeout as SteerDispatchTimeout
from .errors import SteerNotDispatched as SteerNotDispatched
from .errors import Unsupported as Unsupported
from .hub import SubscriberOverflow as SubscriberOverflow
from .runtime import BUILTIN_PROFILES as BUILTIN_PROFILES
from .runtime import Runtime as Runtime
from .runtime import reference_profile as reference_profile
from .trace import Trace as Trace
from .trace import TraceRecord as TraceRecord
from .types import AgentProfile as AgentProfile
from .types import Attachment as Attachment
from .types import Execution as Execution
from .types import ExecutionRef as ExecutionRef
from .types import LaunchSpec as LaunchSpec
from .types import PermissionPolicyName as PermissionPolicyName
from .types import PromptResult as PromptResult
from .types import Timeouts as Timeouts
from .types import WorkspaceRef as WorkspaceRef

__all__ = [
    "BUILTIN_PROFILES",
    "AcpfsmError",
    "AgentLaunch",
    "AgentProfile",
    "AgentReportedError",
    "AgentctlExecutor",
    "Attachment",
    "AttachmentError",
    "CancelEscalated",
    "CancelEscalatedAgentError",
    "CancelFailed",
    "Execution",
    "ExecutionAlreadyExists",
    "ExecutionCrashed",
    "ExecutionIdRequired",
    "ExecutionNotFound",
    "ExecutionRef",
    "Executor",
    "ExecutorNotFound",
    "InvalidPrompt",
    "InvalidWorkspace",
    "LaunchSpec",
    "LaunchSpecError",
    "NotReadyForPrompts",
    "PendingDispatchedPromptTimeout",
    "PermissionAlreadyResolved",
    "PermissionAnswerError",
    "PermissionOptionNotOffered",
    "PermissionPolicyName",
    "PermissionRequestNotFound",
    "ProfileNotFound",
    "PromptDispatchError",
    "PromptError",
    "PromptResult",
    "PromptTimeout",
    "Runtime",
    "SessionInitError",
    "StdioExecutor",
    "SteerAttachmentMaterializationError",
    "SteerDispatchTimeout",
    "SteerNotDispatched",
    "SubscriberOverflow",
    "Timeouts",
    "Trace",
    "TraceRecord",
    "Unsupported",
    "WorkspaceRef",
    "events",
    "reference_profile",
]
