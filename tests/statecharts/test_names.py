"""The charts' typed vocabulary (``statecharts/names.py``): generated from the compiled charts,
current, complete, and a misspelled name is caught by mypy and where it runs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import acpfsm.statecharts as charts_pkg
from acpfsm.statecharts import ALL_CHARTS, Execution, names
from acpfsm.statecharts.flows import FLOWS, Fire, On
from acpfsm.tools.diagrams.names import render_names, results_of

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_vocabulary_is_current() -> None:
    """What ``make diagrams`` writes is what is committed (``make diagrams-check`` too)."""
    committed = (ROOT / "statecharts" / "names.py").read_text(encoding="utf-8")
    assert committed == render_names(ALL_CHARTS), "regenerate it with `make diagrams`"
    # the installed package is the committed file (no stale copy)
    assert Path(names.__file__).resolve().read_text(encoding="utf-8") == committed


def test_every_event_effect_and_result_is_a_constant() -> None:
    for chart in ALL_CHARTS:
        compiled = chart.compiled()
        events = getattr(names, f"{chart.__name__}Event")
        assert {n for n in vars(events) if not n.startswith("_")} == compiled.events
        assert all(getattr(events, n) == n for n in compiled.events)
        effects = getattr(names, f"{chart.__name__}Effect", None)
        declared = {n for n in vars(effects) if not n.startswith("_")} if effects else set()
        assert declared == compiled.effect_names
    assert {n for n in vars(names.Result) if not n.startswith("_")} == set(results_of(ALL_CHARTS))
    assert "completed" in set(results_of(ALL_CHARTS))


def test_the_flow_table_names_events_only_through_the_vocabulary() -> None:
    """Every event a flow fires is one of its chart's constants (the same string object the
    generated class holds: the table was written with attributes, not retyped literals)."""
    by_chart = {c.chart_name: getattr(names, f"{c.__name__}Event") for c in ALL_CHARTS}
    for f in FLOWS.values():
        for label, step in f.steps.items():
            if isinstance(step, Fire):
                chart = "prompt_generation" if step.on not in _NAMED else str(step.on)
                constant = getattr(by_chart[chart], step.event)
                assert constant is step.event or constant == step.event, (f.name, label)


_NAMED = {On.EXECUTION, On.STREAM, On.INIT}


def test_a_misspelled_event_fails_where_it_runs() -> None:
    with pytest.raises(AttributeError, match="prompt_bgan"):
        _ = names.ExecutionEvent.prompt_bgan  # type: ignore[attr-defined]
    # in the flow table (module-level data) that is at import
    source = "from acpfsm.statecharts.flows import Fire, On\n" + (
        "from acpfsm.statecharts.names import ExecutionEvent\n"
        "STEP = Fire(On.EXECUTION, ExecutionEvent.prompt_bgan)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", source], capture_output=True, text=True, check=False
    )
    assert done.returncode != 0
    assert "AttributeError" in done.stderr
    assert "prompt_bgan" in done.stderr


def test_a_misspelled_event_or_a_plain_string_fails_type_checking(tmp_path: Path) -> None:
    """mypy --strict (the project's settings) rejects a misspelled constant and a plain string
    where an event or an effect is expected, and accepts the constants."""
    snippet = tmp_path / "snippet.py"
    snippet.write_text(
        textwrap.dedent(
            """\
            from acpfsm.runtime.session.context import ExecutionContext, nothing
            from acpfsm.statecharts import ChartMachine
            from acpfsm.statecharts.flows import Fire, On
            from acpfsm.statecharts.names import ExecutionEffect, ExecutionEvent


            async def drive(ctx: ExecutionContext, machine: ChartMachine) -> None:
                await ctx.step(machine, ExecutionEvent.prompt_bgan)
                await ctx.step(machine, "prompt_began")
                ctx.handle("execution", {"record_exit": nothing})
                await ctx.step(machine, ExecutionEvent.prompt_began)
                ctx.handle("execution", {ExecutionEffect.record_exit: nothing})


            STEP = Fire(On.EXECUTION, "stop_requested")
            """
        ),
        encoding="utf-8",
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            "--follow-imports=silent",
            "--no-error-summary",
            "--show-error-codes",
            snippet.name,
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    errors = {
        int(line.split(":")[1]): line
        for line in done.stdout.splitlines()
        if line.startswith(f"{snippet.name}:") and ": error:" in line
    }
    assert sorted(errors) == [8, 9, 10, 15], done.stdout + done.stderr
    assert "prompt_bgan" in errors[8] and "[attr-defined]" in errors[8]
    assert "EventName" in errors[9]
    assert "EffectName" in errors[10]
    assert "EventName" in errors[15]


def test_the_vocabulary_module_is_in_the_package() -> None:
    assert Path(charts_pkg.__file__).resolve().parent == Path(names.__file__).resolve().parent
    assert names.ExecutionEvent.stop_requested in Execution.compiled().events
