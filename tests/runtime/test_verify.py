"""``acpfsm verify``: the properties hold on the shipped charts and flows; each property
catches a bug seeded into a copy of a chart, of the coordination table or of the flow table,
with a shortest counterexample that replays in ``acpfsm check-trace`` and draws with
``acpfsm diagrams --trace``; and a bug seeded into each flow (prompt, steer, cancel, redial,
session init, stop, the agent's completion) is caught the same way, because ``acpfsm
verify`` runs the runtime's own flow table.

The bounds here are small (the run at the default bounds is ``make verify``, part of
``make test``); the state counts and times are printed, never asserted.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from acpfsm.runtime.session import interpreter
from acpfsm.statecharts import (
    ALL_CHARTS,
    Chart,
    ConfigSettlement,
    Execution,
    PromptGeneration,
    SessionInit,
    StartModelPolicy,
    StartupRecovery,
)
from acpfsm.statecharts import flows as F
from acpfsm.statecharts.coordination import COORDINATION, Rule
from acpfsm.tools import check_trace, cli, verify, verify_model
from acpfsm.tools.races import RACES, race
from acpfsm.tools.verify import (
    PROPERTIES,
    Bounds,
    VerifyResult,
    seeded_copy,
    seeded_flows,
    write_counterexamples,
)

from .test_verify_bug_classes import BUG_CLASSES

PG = PromptGeneration


def _pg(*edits: tuple[str, str]) -> dict[str, Any]:
    return {"charts": {PG.chart_name: seeded_copy(PG, *edits)}}


def _without(event: str) -> dict[str, Any]:
    """The coordination table without the rules that send ``event``."""
    table: tuple[Rule, ...] = tuple(r for r in COORDINATION if r.event != event)
    return {"table": table}


STDIO_2 = Bounds(generations=2, depth=8, carriers=("stdio",))
STDIO_1 = Bounds(generations=1, depth=8, carriers=("stdio",))
#: the execution's own code crashing at any point (off at the default bounds)
CRASHES = Bounds(generations=1, depth=8, carriers=("stdio",), crashes=True)
AGENTCTL_2 = Bounds(generations=2, depth=7, carriers=("agentctl",))

#: One bug seeded into each flow of the table (a step of the order, not a chart), and the
#: property that catches it: what a plausible wrong change to the drivers' order would be.
FLOW_SEEDS: dict[str, tuple[str, dict[str, Any], Bounds]] = {
    # sendPrompt without its barrier: the successor does not wait for the dispatch-only turn
    "prompt": (
        "dispatch_only_barrier_holds",
        {
            "flows": seeded_flows(
                "prompt",
                barrier=F.Fire(
                    F.On.PREDECESSOR, "successor_admitting", then="status", absent="status"
                ),
            )
        },
        STDIO_2,
    ),
    # the steer target chosen before the attachments' upload is not asked again under the
    # lifecycle lock (R1)
    "steer": BUG_CLASSES["steer_target_not_rechecked"],
    # session/cancel sent at once for a prompt whose request is in flight
    "cancel": (
        "cancel_waits_for_its_prompt",
        {
            "flows": seeded_flows(
                "cancel",
                request=F.Fire(
                    F.On.CURRENT,
                    "cancel_requested",
                    locked=True,
                    bind=True,
                    branch=(("await_dispatch", "send"), ("send_cancel", "send")),
                    then="done",
                    absent="send_idle",
                ),
            )
        },
        AGENTCTL_2,
    ),
    # a dial that succeeded is reported as failed
    "redial": (
        "no_illegal_event",
        {
            "flows": seeded_flows(
                "redial",
                dial=F.Do(
                    F.Op.DIAL,
                    {
                        "ok": F.go(F.NEXT, fatal=False),
                        "failed": F.go(F.NEXT, fatal=False),
                        "refused": F.go(F.NEXT, fatal=True),
                    },
                ),
            )
        },
        AGENTCTL_2,
    ),
    # the stream wait, expired, waits again instead of failing the init
    "session_init": (
        "the_init_comes_to_rest",
        {
            "flows": seeded_flows(
                "session_init",
                await_stream=F.Do(
                    F.Op.AWAIT_STREAM,
                    {"ok": F.go("await_stream.ok"), "expired": F.go("await_stream")},
                    bound="stream_connect",
                ),
            )
        },
        STDIO_2,
    ),
    # the stop forgets to end the execution's tasks
    "stop": (
        "no_caller_waits_forever",
        {"flows": seeded_flows("stop", end=F.Choose("graceful", yes="finished", no="finished"))},
        STDIO_2,
    ),
    # a claimed generation-0 end also ends a wakeup turn
    "completion": BUG_CLASSES["generation_0_end_also_ends_a_wakeup"],
}

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
        _pg(('            effect("release_waiter", result="completed"),\n', "")),
        STDIO_2,
    ),
    # H6: a handed-off (or any live) turn accepts a steer
    "steer_only_into_a_live_dispatched_turn": (
        _pg(
            (
                '        "steer_requested: live": ["steer_refused"],',
                '        "steer_requested: live": ["dispatch_steer"],',
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
                '        "completion_received: dispatched": ["unclaimed"],',
                (
                    '        "completion_received: dispatched": ["unclaimed"],\n'
                    '        "completion_received: dispatched -> completed": ["unclaimed"],'
                ),
            )
        ),
        STDIO_2,
    ),
    # R14: the dispatch-only turn holds no barrier
    "dispatch_only_barrier_holds": (
        _pg(('        "successor_admitting: unawaited": ["hold_barrier"],\n', "")),
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
    "cancel_waits_for_its_prompt": FLOW_SEEDS["cancel"][1:],
    # the bug classes of issue 36 (test_verify_bug_classes): one seed per new property
    "an_escalation_ends_the_turn": BUG_CLASSES["escalation_leaves_failed"][1:],
    "a_cancel_is_done_only_once_its_turn_is_over": BUG_CLASSES["no_escalation_from_sending"][1:],
    "a_left_turn_is_cancelled": BUG_CLASSES["caller_leaves_without_a_cancel"][1:],
    "lost_for_good_ends_the_turn": BUG_CLASSES["lost_carrier_never_lost_for_good"][1:],
    "dispatched_at_most_once": BUG_CLASSES["resent_after_a_redial"][1:],
    "the_init_comes_to_rest": FLOW_SEEDS["session_init"][1:],
    # what acpfsm verify found in the shipped runtime (test_a_crash_admits_no_prompt): a
    # turn admitted before the crash is left to its dispatch, whose request goes out on the
    # carrier being closed
    "nothing_dispatched_after_a_crash": (
        _pg(('        | live.admitted.to(ended.undelivered, cond="crashed")\n', "")),
        CRASHES,
    ),
    # the prompt's wait for the carrier without its bound: after a crash (the carrier
    # closed) its caller waits forever
    "a_crash_releases_every_caller": (
        {"flows": seeded_flows("prompt", carrier_wait=F.Wait(F.Cond.CARRIER, happened=F.NEXT))},
        Bounds(generations=1, depth=8, carriers=("agentctl",), crashes=True),
    ),
    # R9: an older attempt's "agent gone" makes the current attempt lost
    "an_older_startup_signal_changes_nothing": (
        {
            "charts": {
                StartupRecovery.chart_name: seeded_copy(
                    StartupRecovery,
                    (
                        (
                            'agent_gone = attempt.probing.to(attempt.lost, cond="current") | '
                            'attempt.to(None, cond="stale")'
                        ),
                        "agent_gone = attempt.probing.to(attempt.lost)",
                    ),
                )
            }
        },
        STDIO_1,
    ),
    # a stream recovery that does not announce agent.boot_ready
    "a_recovered_execution_is_ready": (
        {
            "charts": {
                Execution.chart_name: seeded_copy(
                    Execution,
                    (
                        (
                            '            "recovered: failed -> ready": [\n'
                            '                effect("publish_agent_boot_ready", '
                            "resume_context_pending=False)\n"
                            "            ],\n"
                        ),
                        "",
                    ),
                )
            }
        },
        STDIO_1,
    ),
    # the start model applied, and no decision said so
    "the_start_model_policy_comes_to_rest": (
        {
            "charts": {
                StartModelPolicy.chart_name: seeded_copy(
                    StartModelPolicy,
                    ('                _decided("applied", "", set_called=True)\n', ""),
                )
            }
        },
        STDIO_1,
    ),
    # R29: any update publishes a deferred settlement, not only its answer
    "the_config_settles_once_on_its_answer": (
        {
            "charts": {
                ConfigSettlement.chart_name: seeded_copy(
                    ConfigSettlement,
                    ('deferred.to(published, cond="settles")', "deferred.to(published)"),
                )
            }
        },
        STDIO_1,
    ),
    # the init's settle step does something else (the settlement is never requested)
    "the_settlement_is_requested_before_any_prompt": (
        {
            "flows": seeded_flows(
                "session_init",
                settle=F.Do(F.Op.PUBLISH_ORIGINAL_SNAPSHOT, {"ok": F.go("settle.ok")}),
            )
        },
        STDIO_1,
    ),
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


def _caught(name: str, seed: dict[str, Any], bounds: Bounds) -> None:
    """``seed`` breaks property ``name``: caught within ``bounds``, with a shortest
    counterexample that replays cleanly in check-trace."""
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
    shorter = verify.verify(dataclasses.replace(bounds, depth=actions - 1), **seed)
    assert shorter.property(name).holds


@pytest.mark.parametrize("name", list(SEEDS))
def test_a_seeded_bug_is_caught_with_a_shortest_counterexample(name: str) -> None:
    _caught(name, *SEEDS[name])


@pytest.mark.parametrize("flow", list(FLOW_SEEDS))
def test_a_bug_seeded_in_a_flow_step_is_caught(flow: str) -> None:
    """One model: the order of each flow is the runtime's own table, so a wrong step of the
    order (not of a chart) fails a property, with a counterexample."""
    prop, seed, bounds = FLOW_SEEDS[flow]
    _caught(prop, seed, bounds)


def test_the_runtime_and_the_checker_run_the_same_table() -> None:
    """No second copy of the flows can come back: the runtime's interpreter and the model
    read the one table, and the model has no step order of its own (it knows the flows only
    through the table's step kinds)."""
    assert verify_model.Flows().table is F.FLOWS
    assert interpreter.F.FLOWS is F.FLOWS
    assert verify_model.F is F
    source = Path(verify_model.__file__).read_text(encoding="utf-8")
    for event in (
        "cancel_requested",
        "dispatch_started",
        "successor_admitting",
        "waiter_abandoned",
    ):
        assert f'"{event}"' not in source, event  # what a flow fires is the table's
    assert "class World" in source  # the model's world (the environment), not the flows


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
    assert report["bounds"] == {
        "generations": 1,
        "depth": 6,
        "carriers": ["stdio"],
        "startup_attempts": 3,
        "crashes": False,
    }
    assert {c["chart"] for c in report["coverage"]} == {
        "execution",
        "first_activity",
        "agent_stream",
        "session_init",
        "prompt_generation",
        "start_model_policy",
        "config_settlement",
        "startup_recovery",
    }
    assert [p["name"] for p in report["properties"]] == [p.name for p in PROPERTIES]
    assert list(tmp_path.iterdir()) == []  # nothing violated, nothing written
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    assert "explored" in text and "unreached" in text and "OK: every property holds" in text
    assert cli.main(["verify", "--depth", "-1"]) == 2


def test_every_path_of_the_session_init_is_explored() -> None:
    """The init's steps are answered at once, every declared answer over its values: every
    declared transition of the SessionInit chart is taken at small bounds (but its question,
    which the runtime asks in place and never fires)."""
    result = verify.verify(Bounds(generations=1, depth=6))
    (init,) = (c for c in result.coverage if c.chart == SessionInit.chart_name)
    fired = [t for t in init.unreached if t[1] != "stream_recovery_requested"]
    assert fired == [], init.unreached


def test_the_catalogue_is_in_the_diagrams_index() -> None:
    """``acpfsm diagrams`` writes the catalogue into diagrams/README.md (so it survives
    regeneration, and ``--check`` keeps it current), each id with the properties citing it."""
    index = (Path(__file__).resolve().parents[2] / "diagrams" / "README.md").read_text()
    assert "## kandev's races and anomalies" in index
    for entry in RACES:
        row = next(line for line in index.splitlines() if line.startswith(f"| {entry.id} |"))
        for p in PROPERTIES:
            assert (f"`{p.name}`" in row) == (entry.id in p.ids), (entry.id, p.name)


def test_a_crash_admits_no_prompt() -> None:
    """What ``acpfsm verify --crashes`` found in the shipped runtime, fixed: a prompt that
    passed its status check while the execution was READY was admitted after the execution
    crashed (``prompt_began`` takes FAILED to RUNNING) and its request went out on the
    carrier being closed. Now its admission asks the Crash chart and is refused
    (``TurnDriver.admit``: NotReadyForPrompts, the caller gets the crash), and a turn
    admitted before the crash ends undelivered (the PromptGeneration chart's ``stream_lost``
    of a crash): every property holds with crashes explored."""
    result = verify.verify(CRASHES)
    assert [p.name for p in result.properties if not p.holds] == []
    assert result.property("nothing_dispatched_after_a_crash").holds


def test_a_crash_after_a_redial_loss_leaves_no_cancel_done_over_a_live_turn() -> None:
    """The second finding of ``acpfsm verify --crashes``: after a redial loss the prompt waits
    for the carrier (``live.reconnecting``); the execution crashes, and a cancel was told done
    while that turn was still live. A crash now ends such a turn undelivered (its request was
    never written): without that row the property fails, with it every property holds."""
    bounds = Bounds(generations=2, depth=11, carriers=("agentctl",), crashes=True)
    row = '        | live.reconnecting.to(ended.undelivered, cond="crashed")\n'
    seeded = verify.verify(bounds, **_pg((row, "")))
    assert [p.name for p in seeded.properties if not p.holds] == [
        "a_cancel_is_done_only_once_its_turn_is_over"
    ]
    assert verify.verify(bounds).ok
