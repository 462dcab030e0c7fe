"""``acpfsm verify``: the properties hold on the shipped charts; each property catches a bug
seeded into a copy of a chart or of the coordination table, with a shortest counterexample
that replays in ``acpfsm check-trace`` and draws with ``acpfsm diagrams --trace``.

The bounds here are small (the run at the default bounds is ``make verify``, part of
``make test``); the state counts and times are printed, never asserted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from acpfsm.statecharts import ALL_CHARTS, Chart, PromptGeneration, SessionInit
from acpfsm.statecharts.coordination import COORDINATION, Rule
from acpfsm.tools import check_trace, cli, verify
from acpfsm.tools.races import RACES, race
from acpfsm.tools.verify import (
    PROPERTIES,
    Bounds,
    VerifyResult,
    seeded_copy,
    write_counterexamples,
)
from acpfsm.tools.verify_model import InitPaths

PG = PromptGeneration


def _pg(*edits: tuple[str, str]) -> dict[str, Any]:
    return {"charts": {PG.chart_name: seeded_copy(PG, *edits)}}


def _without(event: str) -> dict[str, Any]:
    """The coordination table without the rules that send ``event``."""
    table: tuple[Rule, ...] = tuple(r for r in COORDINATION if r.event != event)
    return {"table": table}


STDIO_2 = Bounds(generations=2, depth=8, carriers=("stdio",))

#: One bug per property: where it is seeded, and the bounds that find it.
SEEDS: dict[str, tuple[dict[str, Any], Bounds]] = {
    # R7: a completed turn takes a duplicate error as a second outcome
    "one_outcome_per_generation": (
        _pg(
            (
                '        | ended.disconnected.to(ended.failed, cond="is_error")',
                (
                    '        | ended.completed.to(ended.failed, cond="is_error")\n'
                    '        | ended.disconnected.to(ended.failed, cond="is_error")'
                ),
            )
        ),
        STDIO_2,
    ),
    # a completed turn does not release its waiter
    "no_caller_waits_forever": (
        _pg(('                effect("release_waiter", result="completed"),\n', "")),
        STDIO_2,
    ),
    # H6: a handed-off (or any live) turn accepts a steer
    "steer_only_into_a_live_dispatched_turn": (
        _pg(
            (
                '            "steer_requested: live": ["steer_refused"],',
                '            "steer_requested: live": ["dispatch_steer"],',
            )
        ),
        STDIO_2,
    ),
    # what acpfsm verify found: a turn dispatched while READY left the execution READY
    "never_ready_under_a_live_turn": (_without("turn_dispatched"), STDIO_2),
    # R22: a late handoff for a superseded turn is acted upon
    "superseded_stays_superseded": (
        _pg(
            (
                "            superseded.to(None)  # R22\n",
                "            superseded.to(live.handed_off)  # R22 broken\n",
            )
        ),
        Bounds(generations=2, depth=11, carriers=("stdio",)),
    ),
    # a claimed generation-0 end also ends a wakeup turn
    "completion_claimed_at_most_once": (
        _pg(
            (
                '            "completion_received: dispatched": ["unclaimed"],',
                (
                    '            "completion_received: dispatched": ["unclaimed"],\n'
                    '            "completion_received: dispatched -> completed": ["unclaimed"],'
                ),
            )
        ),
        STDIO_2,
    ),
    # R14: the dispatch-only turn holds no barrier
    "dispatch_only_barrier_holds": (
        _pg(('            "successor_admitting: unawaited": ["hold_barrier"],\n', "")),
        STDIO_2,
    ),
    # what acpfsm verify found: a stop ignored a prompt admitted but not yet sent
    "nothing_dispatched_after_stop": (
        _pg(
            (
                (
                    "    execution_stopped = (\n"
                    "        live.admitted.to(ended.withdrawn)\n"
                    "        | live.reconnecting.to(ended.withdrawn)\n"
                ),
                (
                    "    execution_stopped = (\n"
                    "        live.admitted.to(None)\n"
                    "        | live.reconnecting.to(None)\n"
                ),
            )
        ),
        STDIO_2,
    ),
    # a stop no longer ends the live turn
    "stopped_leaves_no_live_generation": (_without("execution_stopped"), STDIO_2),
    # an event an ended turn ignores is no longer declared
    "no_illegal_event": (
        _pg(
            (
                (
                    "        | live.dispatched.stall_reported.to(live.abandoned)\n"
                    "        | live.to(None)\n"
                    "        | ended.to(None)\n"
                ),
                (
                    "        | live.dispatched.stall_reported.to(live.abandoned)\n"
                    "        | live.to(None)\n"
                ),
            )
        ),
        STDIO_2,
    ),
}

_WELL_FORMED = {"sequence", "unknown_chart", "unknown_event", "unknown_state", "source_mismatch"}


def _charts_of(seed: dict[str, Any]) -> list[type[Chart]]:
    """Every chart, the seeded ones in place of the shipped ones."""
    seeded: dict[str, type[Chart]] = seed.get("charts", {})
    return [seeded.get(c.chart_name, c) for c in ALL_CHARTS]


def test_the_properties_hold_on_the_shipped_charts() -> None:
    result = verify.verify(Bounds(generations=2, depth=10))
    print(f"\n{result.states} states in {result.seconds:.1f} s")  # reported, never asserted
    assert result.ok, verify.render_text(result)
    assert result.states > 1000 and result.truncated
    covered = {c.chart: c.covered for c in result.coverage}
    assert all(covered.values()), covered


def test_every_property_cites_the_catalogue_and_has_a_seeded_bug() -> None:
    names = [p.name for p in PROPERTIES]
    assert len(set(names)) == len(names)
    assert set(SEEDS) == set(names)
    for p in PROPERTIES:
        for race_id in p.ids:
            assert race(race_id).id == race_id
    assert len({r.id for r in RACES}) == len(RACES) == 48


@pytest.mark.parametrize("name", list(SEEDS))
def test_a_seeded_bug_is_caught_with_a_shortest_counterexample(name: str) -> None:
    seed, bounds = SEEDS[name]
    result = verify.verify(bounds, **seed)
    found = result.property(name)
    assert not found.holds, verify.render_text(result)
    assert found.violations > 0 and found.message
    assert found.steps[0].startswith("start (") and len(found.steps) > 2
    assert found.trace and [r.seq for r in found.trace] == list(range(1, len(found.trace) + 1))
    assert {r.execution_id for r in found.trace} == {"verify"}
    # the counterexample is a run of the (broken) charts: check-trace replays it cleanly
    replay = check_trace.check_records(
        found.trace,
        unfinished=True,
        charts=check_trace.compiled_charts(_charts_of(seed)),
    )
    bad = [v for v in replay.violations if v.kind in _WELL_FORMED | {"illegal_transition"}]
    assert bad == [], bad
    # a shortest one: explored one step less deep, the violation is not reached
    actions = len(found.steps) - 1  # the first step is the start
    shorter = verify.verify(Bounds(bounds.generations, actions - 1, bounds.carriers), **seed)
    assert shorter.property(name).holds


def _seeded_result(name: str) -> VerifyResult:
    seed, bounds = SEEDS[name]
    return verify.verify(bounds, **seed)


def test_a_counterexample_replays_in_check_trace_and_draws(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A coordination-table bug leaves every transition a declared one: its counterexample
    replays cleanly against the shipped charts (``--unfinished``: it stops before the
    execution is stopped), and ``acpfsm diagrams --trace`` draws it."""
    result = _seeded_result("never_ready_under_a_live_turn")
    (path,) = write_counterexamples(result, tmp_path / "cex")
    assert path.name == "never_ready_under_a_live_turn.jsonl"
    assert cli.main(["check-trace", str(path), "--unfinished"]) == 0
    assert "OK" in capsys.readouterr().out
    assert cli.main(["check-trace", str(path)]) == 1  # not stopped: an end_state violation
    assert "end_state" in capsys.readouterr().out
    out = tmp_path / "drawn"
    assert cli.main(["diagrams", "--trace", str(path), "--out", str(out)]) == 0
    assert "never_ready_under_a_live_turn.jsonl" in (out / "README.md").read_text()
    highlighted = [
        line for line in (out / "execution.mmd").read_text().splitlines() if "acpfsm_hl" in line
    ]
    assert any(
        "ready" in line.split()[1].split(",")
        for line in highlighted
        if line.strip().startswith("class ")
    ), highlighted  # READY, where it went wrong


def test_the_command_line_reports_states_coverage_and_properties(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["verify", "--generations", "1", "--depth", "6", "--carrier", "stdio"]
    assert cli.main([*argv, "--json", "--out", str(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and report["states"] > 0
    assert report["bounds"] == {"generations": 1, "depth": 6, "carriers": ["stdio"]}
    assert {c["chart"] for c in report["coverage"]} == {
        "execution",
        "first_activity",
        "agent_stream",
        "session_init",
        "prompt_generation",
    }
    assert [p["name"] for p in report["properties"]] == [p.name for p in PROPERTIES]
    assert list(tmp_path.iterdir()) == []  # nothing violated, nothing written
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    assert "explored" in text and "unreached" in text and "OK: every property holds" in text
    assert cli.main(["verify", "--depth", "-1"]) == 2


def test_every_rest_of_the_session_init_is_explored() -> None:
    """The init's working steps are one action per rest state: every declared path from the
    handshake is walked once, and every declared working transition is taken."""
    paths = InitPaths(SessionInit)
    assert paths.failure == ""
    assert set(paths.paths) == {"failed", "ready", "resume_context_pending", "prompting"}
    working = {
        (s, e, t)
        for s, e, t in SessionInit.compiled().declared
        if e not in ("init_abandoned", "prompt_composed") and s != "connecting_stream"
    }
    taken = {(s, e, t) for _, s, e, t in paths.taken}
    assert working - taken == set()


def test_the_catalogue_is_in_the_diagrams_index() -> None:
    """``acpfsm diagrams`` writes the catalogue into diagrams/README.md (so it survives
    regeneration, and ``--check`` keeps it current), each id with the properties citing it."""
    index = (Path(__file__).resolve().parents[2] / "diagrams" / "README.md").read_text()
    assert "## kandev's races and anomalies" in index
    for entry in RACES:
        row = next(line for line in index.splitlines() if line.startswith(f"| {entry.id} |"))
        for p in PROPERTIES:
            assert (f"`{p.name}`" in row) == (entry.id in p.ids), (entry.id, p.name)
