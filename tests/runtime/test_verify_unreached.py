"""What ``acpfsm verify`` leaves unreached is listed with its reason
(:mod:`acpfsm.tools.verify_unreached`): each listed transition is a declared one, the report
prints the reason beside it, and a result with an unreached transition no reason covers (or
a reason whose transition was reached) is refused. The run at the default bounds that
checks the listing against the exploration is ``make verify`` (part of ``make test``)."""

from __future__ import annotations

import pytest

from acpfsm.statecharts import ALL_CHARTS
from acpfsm.tools import cli, verify
from acpfsm.tools.verify import Bounds, Coverage, VerifyResult
from acpfsm.tools.verify_unreached import UNREACHED, reason


def test_every_listed_transition_is_declared_with_a_reason() -> None:
    declared = {c.chart_name: c.compiled().declared for c in ALL_CHARTS}
    for (chart, source, event, target), why in UNREACHED.items():
        assert (source, event, target) in declared[chart], (chart, source, event, target)
        assert len(why) > 30, why


def test_the_report_gives_the_reason_beside_each_unreached_transition(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = verify.verify(Bounds(generations=1, depth=4, carriers=("stdio",)))
    (execution,) = (c for c in result.coverage if c.chart == "execution")
    crash = ("active", "execution_crashed", "failed")
    assert crash in execution.unreached
    why = execution.reasons[execution.unreached.index(crash)]
    assert why == reason("execution", crash) and "--crashes" in why
    # outside the default bounds much more stays unreached: reported, not refused
    assert cli.main(["verify", "--generations", "1", "--depth", "4", "--carrier", "stdio"]) == 0
    text = capsys.readouterr().out
    assert "unreached execution: active --execution_crashed--> failed\n      (explored with" in text
    # with the crashes explored the crash is reached
    crashes = verify.verify(Bounds(generations=1, depth=4, carriers=("stdio",), crashes=True))
    (execution,) = (c for c in crashes.coverage if c.chart == "execution")
    assert crash not in execution.unreached


def _result(*coverage: Coverage) -> VerifyResult:
    return VerifyResult(Bounds(), 0, 0, 0, 0.0, coverage, (), False)


def test_an_unreached_transition_without_a_reason_or_a_stale_reason_is_refused() -> None:
    listed = [k for k in UNREACHED if k[0] == "agent_stream"]
    unreached = tuple(k[1:] for k in listed)
    explained = Coverage(
        "agent_stream", 28, 28 - len(listed), unreached, tuple(UNREACHED[k] for k in listed)
    )
    assert _result(explained).unexplained() == []
    new = ("connected", "connection_lost", "connected")
    unexplained = Coverage(
        "agent_stream",
        28,
        27 - len(listed),
        (*unreached, new),
        (*explained.reasons, ""),
    )
    assert _result(unexplained).unexplained() == [
        "no reason listed: agent_stream connected --connection_lost--> connected"
    ]
    reached = Coverage("agent_stream", 28, 29 - len(listed), unreached[1:], explained.reasons[1:])
    (stale,) = _result(reached).unexplained()
    assert stale.startswith("listed as unreached, but reached") and " ".join(listed[0]) in stale
