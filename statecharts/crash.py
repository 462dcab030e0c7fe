"""Crash: whether one execution's own code has failed (its executor, the transport, a bug).

Theory of operation
-------------------
No kandev row: Go's goroutines had no such scope. When something the execution's tasks (or a
facade call on it) raise is not a typed error of ours, the runtime reports it here
(``crash_reported``, with the crash, :mod:`acpfsm.runtime.session.crash`). The first report
crashes the execution (``contain_crash``: the crash is recorded for its callers to raise; the Execution chart's ``execution_crashed`` makes it FAILED,
the live turn is released as on a lost stream, the stream is closed, the execution's tasks
end); a later one is the same execution failing again and changes nothing. Whatever the
Execution chart does afterwards (a stop, a late fact), the crash stays: it is a fact about
the execution's code, not one of its statuses.

``crash_checked`` is a question, asked without firing (``statecharts.peek``): a caller about
to wait on the execution, or to use its transport, or whose operation just ended, asks
whether it crashed; ``raise_crash`` says so, and the caller raises the crash (its
``ExecutionCrashed``) instead of what it was doing. The runtime reads no flag to decide.
"""

from __future__ import annotations

from typing import ClassVar

from statemachine import State

from ._base import Chart
from ._compile import Effects, effect

__all__ = ["Crash"]


class Crash(Chart):
    """intact → crashed, once."""

    chart_name: ClassVar[str] = "crash"
    # crashed is where the execution rests until it is removed, not an end: it still answers
    validate_final_reachability: ClassVar[bool] = False

    intact = State("intact", initial=True)
    crashed = State("crashed")

    # the execution's own code failed: the first report crashes it, a later one is moot
    crash_reported = intact.to(crashed) | crashed.to(None)
    # a question: did the execution crash? (``raise_crash``: raise the crash)
    crash_checked = intact.to(None) | crashed.to(None)

    effects: ClassVar[Effects] = Effects(
        transitions={
            "crash_reported: intact -> crashed": [effect("contain_crash", "error")],
            "crash_checked: crashed": ["raise_crash"],
        }
    )
