"""Pure declarations of acpfsm's lifecycle statecharts: no I/O, no await, no clock.

The charts (each module opens with its theory of operation), declared with
python-statemachine and run on acpfsm's compiled engine (:mod:`._compile`, :mod:`._machine`;
``engine="reference"`` runs python-statemachine's own); how they move each other is
:mod:`.coordination`:

* :class:`SessionInit` - stream connect → initialize → load/new → catalog → policy → layers.
* :class:`StartModelPolicy` - the eleven rows of the start-model decision table.
* :class:`ConfigSettlement` - when the settled config-options snapshot is published.
* :class:`PromptGeneration` - one prompt generation, admitted → dispatched → one outcome.
* :class:`Execution` - the execution's status (STARTING … STOPPED).
* :class:`FirstActivity` - the one ``agent.running`` of the first activity.
* :class:`AgentStream` - the transport connection (pipes or WebSocket).
* :class:`DurableRecord` - when an execution's stored row is written (with a store).
* :class:`StartupRecovery` - one stored execution at start-up: recovered, or lost.
"""

from ._base import Chart as Chart
from ._base import declared_transitions as declared_transitions
from ._compile import MUTANT_ENV as _MUTANT_ENV
from ._compile import CompiledChart as CompiledChart
from ._compile import Effect as Effect
from ._compile import Effects as Effects
from ._compile import EffectSpec as EffectSpec
from ._compile import Step as Step
from ._compile import effect as effect
from ._compile import mutant_from_env as _mutant_from_env
from ._machine import ENGINE_ENV as ENGINE_ENV
from ._machine import ChartMachine as ChartMachine
from ._machine import EngineName as EngineName
from ._machine import Machine as Machine
from ._machine import TransitionObserver as TransitionObserver
from ._machine import TransitionRecord as TransitionRecord
from ._machine import add_transition_observer as add_transition_observer
from ._machine import default_engine as default_engine
from ._machine import peek as peek
from ._machine import remove_transition_observer as remove_transition_observer
from .agent_stream import AgentStream as AgentStream
from .config_settlement import ConfigSettlement as ConfigSettlement
from .durable_record import DurableRecord as DurableRecord
from .errors import AcpfsmError as AcpfsmError
from .errors import ChartDefinitionError as ChartDefinitionError
from .errors import ChartError as ChartError
from .errors import CoordinationError as CoordinationError
from .errors import IllegalTransition as IllegalTransition
from .execution import Execution as Execution
from .first_activity import FirstActivity as FirstActivity
from .prompt_generation import PromptGeneration as PromptGeneration
from .session_init import SessionInit as SessionInit
from .start_model import ModelSelectionDecision as ModelSelectionDecision
from .start_model import StartModelPolicy as StartModelPolicy
from .start_model import decision as model_decision
from .startup_recovery import StartupRecovery as StartupRecovery
from .vocab import FALLBACK_AUTHORIZING as FALLBACK_AUTHORIZING
from .vocab import ErrorClass as ErrorClass

#: The charts an execution's session runs (a store adds DurableRecord; StartupRecovery runs
#: once per stored execution at a Runtime's start).
SESSION_CHARTS: tuple[type[Chart], ...] = (
    SessionInit,
    StartModelPolicy,
    ConfigSettlement,
    PromptGeneration,
    Execution,
    FirstActivity,
    AgentStream,
)
#: Every chart, in the order diagrams and coverage list them.
ALL_CHARTS: tuple[type[Chart], ...] = (*SESSION_CHARTS, DurableRecord, StartupRecovery)

# The charts compile on first use (Chart.start / Chart.compiled), not here: compiling all
# seven at import was a fifth of acpfsm's own import time, paid by every program that imports
# the runtime. python-statemachine still validates each declaration when its class is
# defined; the test suite compiles every chart at its start, so a declaration the engine
# cannot run still fails loudly before any test.

# a mutant named for a chart that does not exist would mutate nothing: loud, not inert
_mutant = _mutant_from_env()
if _mutant is not None and _mutant.chart not in {c.chart_name for c in ALL_CHARTS}:
    raise ChartDefinitionError(f"{_MUTANT_ENV}={_mutant}: no chart named {_mutant.chart!r}")
del _mutant

__all__ = [
    "ALL_CHARTS",
    "FALLBACK_AUTHORIZING",
    "SESSION_CHARTS",
    "AgentStream",
    "Chart",
    "ConfigSettlement",
    "DurableRecord",
    "ErrorClass",
    "Execution",
    "FirstActivity",
    "IllegalTransition",
    "Machine",
    "ModelSelectionDecision",
    "PromptGeneration",
    "SessionInit",
    "StartModelPolicy",
    "StartupRecovery",
    "TransitionObserver",
    "TransitionRecord",
    "add_transition_observer",
    "declared_transitions",
    "model_decision",
    "peek",
    "remove_transition_observer",
]
