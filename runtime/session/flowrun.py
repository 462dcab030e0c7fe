"""One flow under way in the runtime (:class:`FlowRun`), what an op answers
(:data:`Answer`), and the check of the flow table against the charts, done once per process
(:func:`check_table`). The interpreter is :mod:`.interpreter`'s."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from acpfsm.adapters.errors import AcpfsmError
from acpfsm.statecharts import flows as F
from acpfsm.statecharts.charts import ALL_CHARTS

if TYPE_CHECKING:
    from .turns import Generation

__all__ = ["Answer", "FlowRun", "Later", "OpHandler", "check_table"]

Answer = str | tuple[str, Mapping[str, Any]]
"""An op's answer: its name, and the values it carries."""
OpHandler = Callable[["FlowRun"], Awaitable[Answer]]

_checked = False


def check_table() -> None:
    """The flow table against the charts, once per process (loud: a bug in the table)."""
    global _checked
    if not _checked:
        problems = F.validate({c.chart_name: c.compiled() for c in ALL_CHARTS})
        if problems:
            raise AcpfsmError("the flow table does not match the charts: " + "; ".join(problems))
        _checked = True


class Later:
    """A flow value computed when a step sends it (an error message that names what
    happened last)."""

    __slots__ = ("compute",)

    def __init__(self, compute: Callable[[], Any]) -> None:
        self.compute = compute


class FlowRun:
    """One flow under way (see the module docstring)."""

    __slots__ = (
        "flow",
        "generation",
        "label",
        "locks",
        "on_cancel",
        "outcome",
        "predecessor",
        "values",
    )

    def __init__(
        self, flow: F.Flow, label: str, generation: Generation | None, values: dict[str, Any]
    ) -> None:
        self.flow = flow
        self.label = label
        self.generation = generation
        self.predecessor: Generation | None = None
        self.values = values
        self.locks: list[F.Lock] = []
        self.on_cancel = flow.cancelled
        self.outcome = F.Outcome.DONE

    @property
    def number(self) -> int:
        """The flow's generation's number (0: none)."""
        return self.generation.number if self.generation is not None else 0

    def __repr__(self) -> str:
        return f"<FlowRun {self.flow.name}.{self.label} g={self.number}>"
