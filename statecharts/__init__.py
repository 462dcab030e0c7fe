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
* :class:`Crash` - whether the execution's own code failed (its crash, once).
* :class:`DurableRecord` - when an execution's stored row is written (with a store).
* :class:`StartupRecovery` - one stored execution at start-up: recovered, or lost.
* :class:`PoolMember` - an ``acpfsm serve --pool`` process's lease: renewed, or fenced.
* :class:`NamespaceAdoption` - the take-over of one namespace whose lease ran out.
"""

from typing import TYPE_CHECKING, Any

from ._compile import MUTANT_ENV as _MUTANT_ENV
from ._compile import CompiledChart as CompiledChart
from ._compile import Effect as Effect
from ._compile import Effects as Effects
from ._compile import EffectSpec as EffectSpec
from ._compile import Step as Step
from ._compile import effect as effect
from ._compile import mutant_from_env as _mutant_from_env
from ._generated import DECLARATIONS as _DECLARATIONS
from ._machine import ENGINE_ENV as ENGINE_ENV
from ._machine import ChartMachine as ChartMachine
from ._machine import EngineName as EngineName
from ._machine import Machine as Machine
from ._machine import TransitionObserver as TransitionObserver
from ._machine import TransitionRecord as TransitionRecord
from ._machine import add_transition_observer as add_transition_observer
from ._machine import answer as answer
from ._machine import default_engine as default_engine
from ._machine import peek as peek
from ._machine import remove_transition_observer as remove_transition_observer
from ._machine import says as says
from .charts import declared_transitions as declared_transitions
from .errors import AcpfsmError as AcpfsmError
from .errors import ChartDefinitionError as ChartDefinitionError
from .errors import ChartError as ChartError
from .errors import CoordinationError as CoordinationError
from .errors import IllegalTransition as IllegalTransition
from .model_decision import ModelSelectionDecision as ModelSelectionDecision
from .model_decision import decision as model_decision
from .vocab import FALLBACK_AUTHORIZING as FALLBACK_AUTHORIZING
from .vocab import ErrorClass as ErrorClass

if TYPE_CHECKING:
    from ._base import Chart as Chart
    from .agent_stream import AgentStream as AgentStream
    from .config_settlement import ConfigSettlement as ConfigSettlement
    from .crash import Crash as Crash
    from .durable_record import DurableRecord as DurableRecord
    from .execution import Execution as Execution
    from .first_activity import FirstActivity as FirstActivity
    from .pool_member import NamespaceAdoption as NamespaceAdoption
    from .pool_member import PoolMember as PoolMember
    from .prompt_generation import PromptGeneration as PromptGeneration
    from .session_init import SessionInit as SessionInit
    from .start_model import StartModelPolicy as StartModelPolicy
    from .startup_recovery import StartupRecovery as StartupRecovery

    #: The charts an execution's session runs (a store adds DurableRecord; StartupRecovery
    #: runs once per stored execution at a Runtime's start).
    SESSION_CHARTS: tuple[type[Chart], ...]
    #: Every chart, in the order diagrams and coverage list them.
    ALL_CHARTS: tuple[type[Chart], ...]

# The declaration classes import python-statemachine (and with it asyncio): they load on
# first use (``acpfsm.statecharts.Execution``), never for ``import acpfsm.runtime``, which
# runs the charts from their generated declarations (:mod:`.charts`).
_LAZY = {
    "Chart": "_base",
    "AgentStream": "agent_stream",
    "ConfigSettlement": "config_settlement",
    "Crash": "crash",
    "DurableRecord": "durable_record",
    "Execution": "execution",
    "FirstActivity": "first_activity",
    "NamespaceAdoption": "pool_member",
    "PoolMember": "pool_member",
    "PromptGeneration": "prompt_generation",
    "SessionInit": "session_init",
    "StartModelPolicy": "start_model",
    "StartupRecovery": "startup_recovery",
}
_SESSION = (
    "SessionInit",
    "StartModelPolicy",
    "ConfigSettlement",
    "PromptGeneration",
    "Execution",
    "FirstActivity",
    "AgentStream",
    "Crash",
)


def __getattr__(name: str) -> Any:
    import importlib

    if name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    elif name == "SESSION_CHARTS":
        value = tuple(__getattr__(n) for n in _SESSION)
    elif name == "ALL_CHARTS":
        value = (*__getattr__("SESSION_CHARTS"), __getattr__("DurableRecord"))
        value = (*value, __getattr__("StartupRecovery"))
        value = (*value, __getattr__("PoolMember"), __getattr__("NamespaceAdoption"))
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


# The charts compile on first use (Chart.start / Chart.compiled, ChartRef.start), not here;
# the test suite compiles every chart at its start, so a declaration the engine cannot run
# (or generated tables a chart edit left behind) still fails loudly before any test.

# a mutant named for a chart that does not exist would mutate nothing: loud, not inert
_mutant = _mutant_from_env()
if _mutant is not None and _mutant.chart not in _DECLARATIONS:
    raise ChartDefinitionError(f"{_MUTANT_ENV}={_mutant}: no chart named {_mutant.chart!r}")
del _mutant

__all__ = [
    "ALL_CHARTS",
    "FALLBACK_AUTHORIZING",
    "SESSION_CHARTS",
    "AgentStream",
    "Chart",
    "ConfigSettlement",
    "Crash",
    "DurableRecord",
    "ErrorClass",
    "Execution",
    "FirstActivity",
    "IllegalTransition",
    "Machine",
    "ModelSelectionDecision",
    "NamespaceAdoption",
    "PoolMember",
    "PromptGeneration",
    "SessionInit",
    "StartModelPolicy",
    "StartupRecovery",
    "TransitionObserver",
    "TransitionRecord",
    "add_transition_observer",
    "answer",
    "declared_transitions",
    "model_decision",
    "peek",
    "remove_transition_observer",
    "says",
]
