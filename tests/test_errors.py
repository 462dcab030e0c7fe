"""One error tree: every exception class acpfsm defines is an ``AcpfsmError``, rooted at the
bottom layer (acpfsm.statecharts.errors), unless it is listed below as not an error of ours."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import acpfsm
import acpfsm.adapters.errors
import acpfsm.runtime
import acpfsm.runtime.errors
import acpfsm.statecharts
import acpfsm.statecharts.errors
from acpfsm.statecharts import Execution, IllegalTransition

#: Exception classes that are deliberately not AcpfsmErrors, and why (the errors guide,
#: docs/guides/errors.md, says the same).
NOT_OURS: dict[str, str] = {
    "acpfsm.adapters.acp._jsonrpc_peer.JsonRpcErrorReply": (
        "raised by a request handler to answer the peer with a JSON-RPC error object; the "
        "connection catches it, it never reaches a caller"
    ),
    "acpfsm.adapters.reference_agent._io.PeerGone": (
        "the reference agent is a separate program (an ACP agent); its errors stay in it"
    ),
    "acpfsm.adapters.reference_agent._wire.RpcError": "the reference agent's, as above",
    "acpfsm.adapters.reference_agent._faults.FaultError": "the reference agent's, as above",
    "acpfsm.runtime.service.pool._Unreachable": (
        "private control flow of the pool: a lease query that failed, caught where it is "
        "raised and fed to the PoolMember chart as a fact; it never reaches a caller"
    ),
    "acpfsm.tools.verify_world.Violated": (
        "private control flow of acpfsm verify's model: a step the drivers would crash on, "
        "caught by the explorer and reported as the property no_illegal_event"
    ),
    "acpfsm.tools.verify_world.Branch": (
        "private control flow of acpfsm verify's model: answers given at once branch, and the "
        "explorer follows each"
    ),
    "acpfsm.tools.agentctl._Stop": (
        "private control flow: `acpfsm agentctl`'s SIGTERM handler stops it as Ctrl-C does"
    ),
    "acpfsm.testing.reference.TraceViolationError": (
        "a test assertion (an AssertionError), raised by assert_trace_conforms in tests"
    ),
}


def _modules() -> list[str]:
    names = ["acpfsm"]
    for info in pkgutil.walk_packages(acpfsm.__path__, "acpfsm."):
        if info.name.rsplit(".", 1)[-1] != "__main__":  # importing one runs the program
            names.append(info.name)
    return names


def _exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for name in _modules():
        module = importlib.import_module(name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if value.__module__ == name and issubclass(value, BaseException):
                found[f"{name}.{value.__qualname__}"] = value
    return found


def test_every_exception_class_of_the_package_is_an_acpfsm_error() -> None:
    classes = _exception_classes()
    assert len(classes) > 40  # the walk found the package's modules
    strays = {
        name
        for name, cls in classes.items()
        if not issubclass(cls, acpfsm.statecharts.errors.AcpfsmError) and name not in NOT_OURS
    }
    assert not strays, f"not in the AcpfsmError tree (nor listed in NOT_OURS): {sorted(strays)}"
    assert set(NOT_OURS) <= set(classes), "NOT_OURS names a class that no longer exists"
    for name in NOT_OURS:
        assert not issubclass(classes[name], acpfsm.statecharts.errors.AcpfsmError), name


@pytest.mark.parametrize(
    "name",
    [
        "acpfsm.runtime.hub.SubscriberOverflow",
        "acpfsm.runtime.history.HistoryError",
        "acpfsm.runtime.history.HistoryReadError",
        "acpfsm.tools.diagrams.model.DiagramError",
        "acpfsm.tools.diagrams.render.GraphvizNotFound",
        "acpfsm.tools.check_trace.TraceFormatError",
        "acpfsm.tools.conform.report.ConformUsageError",
        "acpfsm.tools.conform.carrier.AgentGone",
        "acpfsm.runtime.errors.SessionInitError",
        "acpfsm.adapters.errors.TransportError",
        "acpfsm.statecharts.errors.IllegalTransition",
    ],
)
def test_the_scattered_errors_are_in_the_tree(name: str) -> None:
    assert issubclass(_exception_classes()[name], acpfsm.statecharts.errors.AcpfsmError)


def test_the_root_is_defined_once_at_the_bottom_layer() -> None:
    root = acpfsm.statecharts.errors.AcpfsmError
    assert acpfsm.statecharts.AcpfsmError is root
    assert acpfsm.adapters.errors.AcpfsmError is root
    assert acpfsm.runtime.errors.AcpfsmError is root
    assert acpfsm.runtime.AcpfsmError is root
    assert "class AcpfsmError" not in inspect.getsource(acpfsm.adapters.errors)


def test_an_illegal_event_is_caught_as_an_acpfsm_error() -> None:
    chart = Execution.start()
    chart.fire("stop_requested", reason="done")
    with pytest.raises(acpfsm.runtime.AcpfsmError) as info:
        chart.fire("prompt_began")
    assert isinstance(info.value, IllegalTransition)
    assert isinstance(info.value, acpfsm.statecharts.errors.ChartError)
    assert not isinstance(info.value, ValueError)


def test_a_usage_error_of_conform_is_no_longer_a_value_error() -> None:
    from acpfsm.tools.conform import ConformUsageError

    assert not issubclass(ConformUsageError, ValueError)
    assert ConformUsageError("no agent command").message == "no agent command"


def test_the_errors_guide_draws_every_error_of_the_tree() -> None:
    from pathlib import Path

    guide = (Path(__file__).resolve().parent.parent / "docs/guides/errors.md").read_text()
    section = guide[guide.index("## The tree") :]
    tree = section[section.index("```") : section.index("```", section.index("```") + 3)]
    names = {
        cls.__name__
        for name, cls in _exception_classes().items()
        if issubclass(cls, acpfsm.statecharts.errors.AcpfsmError)
    }
    missing = sorted(n for n in names if n not in tree)
    assert not missing, f"the errors guide's tree does not name {missing}"
