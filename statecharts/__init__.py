"""Pure declarations of acpfsm's lifecycle statecharts: no I/O, no await, no clock.

The five charts (each module opens with its theory of operation):

* :class:`SessionInit` - stream connect → initialize → load/new → catalog → policy → layers.
* :class:`StartModelPolicy` - the eleven rows of the start-model decision table.
* :class:`PromptGeneration` - one prompt generation, admitted → dispatched → one outcome.
* :class:`Execution` - the execution's status (STARTING … STOPPED).
* :class:`AgentStream` - the transport connection (pipes or WebSocket).
"""

from ._base import Chart as Chart
from ._base import IllegalTransition as IllegalTransition
from ._base import TransitionObserver as TransitionObserver
from ._base import TransitionRecord as TransitionRecord
from ._base import add_transition_observer as add_transition_observer
from ._base import declared_transitions as declared_transitions
from ._base import remove_transition_observer as remove_transition_observer
from .agent_stream import AgentStream as AgentStream
from .execution import Execution as Execution
from .prompt_generation import PromptGeneration as PromptGeneration
from .session_init import SessionInit as SessionInit
from .start_model import ModelSelectionDecision as ModelSelectionDecision
from .start_model import StartModelPolicy as StartModelPolicy
from .vocab import FALLBACK_AUTHORIZING as FALLBACK_AUTHORIZING
from .vocab import ErrorClass as ErrorClass

#: Every chart, in the order diagrams and coverage list them.
ALL_CHARTS: tuple[type[Chart], ...] = (
    SessionInit,
    StartModelPolicy,
    PromptGeneration,
    Execution,
    AgentStream,
)

__all__ = [
    "ALL_CHARTS",
    "FALLBACK_AUTHORIZING",
    "AgentStream",
    "Chart",
    "ErrorClass",
    "Execution",
    "IllegalTransition",
    "ModelSelectionDecision",
    "PromptGeneration",
    "SessionInit",
    "StartModelPolicy",
    "TransitionObserver",
    "TransitionRecord",
    "add_transition_observer",
    "declared_transitions",
    "remove_transition_observer",
]
