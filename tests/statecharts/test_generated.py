"""The chart declarations generated ahead of time (statecharts/_generated.py): the file is what
the chart classes give now, the tables the runtime compiles from it are the classes' own, stale
tables are refused, and ``import acpfsm.runtime`` loads neither python-statemachine nor asyncio
(behaviour, not timing: the import's cost is a ``make bench`` row)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, ClassVar

import pytest
from statemachine import State

from acpfsm.statecharts import ALL_CHARTS, Chart, ChartDefinitionError, CompiledChart, charts
from acpfsm.statecharts._compile import compile_chart, compile_declaration
from acpfsm.statecharts._declare import check_current, declaration_of
from acpfsm.statecharts._generated import DECLARATIONS
from acpfsm.tools import chart_tables

REPO = Path(__file__).resolve().parent.parent.parent


def test_the_generated_module_is_what_the_chart_classes_give() -> None:
    """Drift: a chart edited without ``make diagrams`` fails here (and in diagrams-check)."""
    path = REPO / chart_tables.DEFAULT_PATH
    assert path.read_text(encoding="utf-8") == chart_tables.render()
    assert chart_tables.check(path)


@pytest.mark.parametrize("chart", ALL_CHARTS, ids=lambda c: c.chart_name)
def test_each_generated_declaration_is_its_class_declaration(chart: type[Chart]) -> None:
    found, _ = declaration_of(chart)
    generated = DECLARATIONS[chart.chart_name]
    assert generated == found
    # the copied guards are the class's guards: same names, same parameters and defaults
    assert set(generated.functions) == set(found.functions)
    for name, fn in generated.functions.items():
        original = found.functions[name]
        assert fn is not original
        assert fn.__name__ == original.__name__ == name
        assert fn.__defaults__ == original.__defaults__
        assert fn.__code__.co_code == original.__code__.co_code


def _shape(compiled: CompiledChart) -> Any:
    """The tables with each guard named instead of its function (the generated copies are
    other function objects)."""
    table = {
        leaf: {
            event: tuple(
                (
                    c.index,
                    c.source,
                    c.target,
                    tuple((fn.__name__, params, expected) for fn, params, expected in c.guards),
                    c.state,
                    c.entered,
                    c.effects,
                    c.plans,
                    c.step,
                    c.ends,
                )
                for c in cands
            )
            for event, cands in by_event.items()
        }
        for leaf, by_event in compiled.table.items()
    }
    fields = {f.name: getattr(compiled, f.name) for f in dataclasses.fields(compiled)}
    del fields["lazy"]
    fields["table"] = table
    return fields


@pytest.mark.parametrize("chart", ALL_CHARTS, ids=lambda c: c.chart_name)
def test_the_runtime_tables_are_the_class_tables(chart: type[Chart]) -> None:
    """What a ChartRef runs (compiled from the generated declaration) is what compiling the
    class gives, and the class and its ChartRef share one table."""
    ref = charts.registered(chart)
    assert ref is not None and ref.chart_name == chart.chart_name
    assert ref in charts.ALL_CHARTS
    assert _shape(compile_declaration(DECLARATIONS[chart.chart_name])) == _shape(
        compile_chart(chart)
    )
    assert ref.compiled() is chart.compiled()
    assert ref.cls is chart


def test_a_chart_declared_elsewhere_is_compiled_from_its_class() -> None:
    class Door(Chart):
        chart_name: ClassVar[str] = "execution"  # a name the package uses: not the same chart
        shut = State("shut", initial=True)
        open = State("open", final=True)
        opened = shut.to(open)

    assert charts.registered(Door) is None
    assert Door.compiled().events == frozenset({"opened"})
    assert Door.start().fire("opened").state == "open"


def test_stale_tables_are_refused() -> None:
    """A class whose declaration is not the generated one (an edit without ``make
    diagrams``) is refused as soon as the class meets the tables, with what to do."""
    generated = DECLARATIONS["first_activity"]
    found, _ = declaration_of(charts.FIRST_ACTIVITY.cls)
    check_current(found, generated)
    edited = dataclasses.replace(found, transitions=found.transitions[:0])
    with pytest.raises(ChartDefinitionError, match="regenerate them with `make diagrams`"):
        check_current(edited, generated)


def test_the_generator_refuses_a_guard_reading_a_name_of_the_chart_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = tmp_path / "toy_local_chart.py"
    module.write_text(
        textwrap.dedent(
            """
            from typing import ClassVar

            from statemachine import State

            from acpfsm.statecharts import Chart

            LIMIT = 3


            class Toy(Chart):
                chart_name: ClassVar[str] = "toy"
                a = State("a", initial=True)
                b = State("b", final=True)
                went = a.to(b, cond="small")

                def small(self, n: int = 0) -> bool:
                    return n < LIMIT
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import toy_local_chart

    with pytest.raises(ChartDefinitionError, match="reads 'LIMIT'"):
        chart_tables.render((toy_local_chart.Toy,))


def test_the_command_checks_and_writes(tmp_path: Path) -> None:
    out = tmp_path / "_generated.py"
    cli = [sys.executable, "-m", "acpfsm.tools.cli", "chart-tables", "--out", str(out)]
    stale = subprocess.run([*cli, "--check"], capture_output=True, text=True, check=False)
    assert stale.returncode == 1 and "out of date" in stale.stderr
    written = subprocess.run(cli, capture_output=True, text=True, check=False)
    assert written.returncode == 0 and "written" in written.stdout
    assert out.read_text(encoding="utf-8") == chart_tables.render()
    fresh = subprocess.run([*cli, "--check"], capture_output=True, text=True, check=False)
    assert fresh.returncode == 0, fresh.stderr


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_import_runtime_loads_no_statemachine_and_no_asyncio(backend: str) -> None:
    """``import acpfsm.runtime`` (and a prompt's charts, started from the generated tables)
    loads python-statemachine nowhere, and asyncio only in an asyncio program."""
    code = textwrap.dedent(
        f"""
        import sys
        import acpfsm.runtime
        from acpfsm.statecharts import charts
        assert "statemachine" not in sys.modules, "import"
        assert "asyncio" not in sys.modules, "asyncio at import"
        import {backend}
        for ref in charts.ALL_CHARTS:
            ref.compiled()
        machine = charts.EXECUTION.start()
        machine.fire("start_requested")
        assert "statemachine" not in sys.modules, "a compiled chart"
        print("asyncio" in sys.modules)
        """
    )
    env = {"PATH": "/usr/bin:/bin", "ACPFSM_ENGINE": "compiled"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(backend == "asyncio")


def test_the_reference_engine_imports_the_declaration_class() -> None:
    code = textwrap.dedent(
        """
        import sys
        from acpfsm.statecharts import charts
        machine = charts.EXECUTION.start(engine="reference")
        assert "statemachine" in sys.modules
        print(machine.fire("start_requested").state)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == charts.EXECUTION.start().fire("start_requested").state
