"""``make mutate-charts``: chart mutation testing through the compiled engine.

Theory of operation
-------------------
Transition coverage says every declared transition was taken; chart mutation testing says a
test would notice if one were wrong. For every declared transition of every chart (by its
index in the compiled tables, :mod:`acpfsm.statecharts._compile`) the tool makes the mutants
that matter:

``delete``        the transition is gone (the next candidate, or nothing, takes the event);
``retarget:S``    it goes to ``S``, each other state of its target's parent (a targetless
                  transition: each state of its source's parent, the source included, which
                  turns "ignored" into "re-entered");
``drop_guard``    its guards are gone (it is taken whenever it is reached);
``negate_guard``  every guard expects the opposite;
``swap``          it trades places with the next transition of the same state and event.

No source is edited: a mutant is applied by the compiler (``compile_chart(chart, mutant)``;
the environment variable ``ACPFSM_CHART_MUTANT`` names it to a whole process), so the engine,
the trace checker of ``--acpfsm-check-traces`` and the coverage all see the mutated tables. A
mutant whose tables equal the original's in every leaf (a shadowed transition deleted, …) is
*equivalent by construction* and not run.

Steps:

1. **Record** (once per tests and chart sources): the whole suite runs once with a plugin that
   notes, per test, every ``(chart, event)`` it fired (also the illegal ones, which a mutant
   may make legal), its duration and whether it passed. Only a test that fires the mutated
   event on the mutated chart can behave differently, so a mutant runs those tests only,
   fastest first, and stops at the first failure (killed).
2. **Mutants**: one pytest process (per shard) collects the tests it needs once and, for each
   mutant, installs it (the chart is recompiled), runs its tests in process and records the
   outcome. A test that fails in the record run is never used. A mutant no test killed
   within ``--budget`` seconds of tests (default 120) counts as survived: the report says
   how many of its tests ran. Only a test that ran and failed kills a mutant: a planned
   test that did not collect (its module fails to import; the runs go on past collection
   errors) or a run that broke with no test failing leaves the mutant *not judged*,
   reported apart with the reason; a test file that did not collect in the record run is
   named (its tests are never planned).
3. **Report**: per chart, the mutants killed, equivalent by construction, listed as
   equivalent in ``tests/mutation/equivalent_chart_mutants.toml`` (each with its reason) and
   the survivors and the mutants not judged, each naming the transition. Exit status 1 when
   a mutant survived or was not judged that the
   file does not list, or the file lists one that is now killed or gone.

Tests that kill every mutant whatever it does do not count and are never run against a
mutant (:data:`EXCLUDED`): the definitions sweep, the engine-agreement property test and every
test on python-statemachine's reference engine (it runs the unmutated declaration), the
compiler's own tests, the diagram drift and the walks that compare the declared set itself.

Incremental: results are cached in ``.cache/mutate-charts/`` per mutant, keyed by the hash of
the chart's module and the engine (``statecharts/_*.py``) and of the tests; when only tests
changed, a killed mutant stays killed while its killing test's file is unchanged. ``--chart
NAME`` (repeatable) and ``--shard i/n`` select mutants; ``--jobs N`` runs N shards at once.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from acpfsm.statecharts import ALL_CHARTS, Chart, CompiledChart
from acpfsm.statecharts._compile import MUTANT_ENV, Mutant, compile_chart

__all__ = ["EXCLUDED", "MutantPlan", "enumerate_mutants", "label", "main"]

#: Tests never run against a mutant: they kill every mutant whatever its behaviour.
EXCLUDED: tuple[tuple[str, str], ...] = (
    ("tests/statecharts/test_definitions.py", "the definitions sweep fires every declaration"),
    ("tests/statecharts/test_engines.py", "engine agreement: the reference is unmutated"),
    ("tests/statecharts/test_compile.py", "the compiler's own tests read the tables' shape"),
    ("tests/runtime/test_diagrams.py", "diagram drift compares the declarations"),
    ("tests/runtime/test_engines_trace.py", "one trace on both engines: the reference"),
    (
        "tests/statecharts/test_agent_stream.py::test_every_declared_transition_is_walked",
        "compares the walked set with the declared set",
    ),
    ("[reference", "a walk on python-statemachine's engine runs the unmutated declaration"),
    ("-reference", "a walk on python-statemachine's engine runs the unmutated declaration"),
)

CACHE = Path(".cache/mutate-charts")
EQUIVALENT_FILE = Path("tests/mutation/equivalent_chart_mutants.toml")
_PLUGIN = "acpfsm.tools.mutate_charts"
_RECORD_ENV = "ACPFSM_MUTATE_RECORD"
_RUN_ENV = "ACPFSM_MUTATE_RUN"


def excluded(nodeid: str) -> bool:
    return any(
        nodeid.startswith(pattern) if pattern.startswith("tests/") else pattern in nodeid
        for pattern, _ in EXCLUDED
    )


# --------------------------------------------------------------------------- mutants


def _guards(compiled: CompiledChart, index: int) -> tuple[str, ...]:
    for by_event in compiled.table.values():
        for cands in by_event.values():
            for cand in cands:
                if cand.index == index:
                    return tuple(
                        ("" if expected else "not ") + fn.__name__
                        for fn, _, expected in cand.guards
                    )
    return ()


def _declared_guards(chart: type[Chart], index: int) -> tuple[str, ...]:
    """The guard names of transition ``index`` from the declaration (also where the tables
    never select it)."""
    n = 0
    for state in chart.states_map.values():
        for transition in state.transitions:
            if transition.initial:
                continue
            for _ in transition.events:
                if n == index:
                    return tuple(
                        ("not " if spec.expected_value is False else "") + str(spec.func)
                        for spec in transition._specs
                        if not spec.is_convention and spec.group.name == "COND"
                    )
                n += 1
    return ()


def label(chart: type[Chart], mutant: Mutant) -> str:
    """``chart | event: source -> target [guards] | mutation`` (stable across reorderings)."""
    event, source, target = chart.compiled().transitions[mutant.index]
    guards = _declared_guards(chart, mutant.index)
    where = f"{event}: {source} -> {target}" if target is not None else f"{event}: {source}"
    if guards:
        where += f" [{', '.join(guards)}]"
    what = mutant.mutation + (f":{mutant.target}" if mutant.target else "")
    return f"{chart.chart_name} | {where} | {what}"


def _signature(compiled: CompiledChart, loose: bool = False) -> Any:
    """The tables as behaviour sees them (indices left out; ``loose``: nor whether a
    transition was targetless and what it entered, only what it did)."""
    return {
        leaf: {
            event: tuple(
                (
                    c.source,
                    None if loose else c.target,
                    tuple((fn, expected) for fn, _, expected in c.guards),
                    c.state,
                    () if loose else c.entered,
                    c.effects,
                    c.ends,
                )
                for c in cands
            )
            for event, cands in by_event.items()
        }
        for leaf, by_event in compiled.table.items()
    }


def enumerate_mutants(chart: type[Chart]) -> list[Mutant]:
    """Every mutant of every declared transition of ``chart``, in declaration order."""
    compiled = chart.compiled()
    name = chart.chart_name
    out: list[Mutant] = []
    for index, (event, source, target) in enumerate(compiled.transitions):
        out.append(Mutant(name, index, "delete"))
        home = compiled.parent[target] if target is not None else compiled.parent[source]
        for state in sorted(compiled.states):
            if compiled.parent[state] == home and state != target:
                out.append(Mutant(name, index, "retarget", state))
        if _declared_guards(chart, index):
            out.append(Mutant(name, index, "drop_guard"))
            out.append(Mutant(name, index, "negate_guard"))
        if any(
            compiled.transitions[j][:2] == (event, source)
            for j in range(index + 1, len(compiled.transitions))
        ):
            out.append(Mutant(name, index, "swap"))
    return out


#: ``(chart, event)`` whose ``Step.targetless`` the runtime reads (runtime/session/config.py:
#: a provider response the settlement ignored is remembered).
TARGETLESS_READ = frozenset({("config_settlement", "models_updated")})


def equivalent_by_construction(chart: type[Chart], mutant: Mutant) -> bool:
    """The mutant's tables behave like the declared ones in every leaf: the same candidates,
    guards, leaf afterwards and effects. A targetless transition retargeted to its own leaf
    source differs only in ``Step.targetless``/``entered``, which nothing reads but
    :data:`TARGETLESS_READ`."""
    event, source, target = chart.compiled().transitions[mutant.index]
    loose = (
        mutant.mutation == "retarget"
        and target is None
        and mutant.target == source
        and (chart.chart_name, event) not in TARGETLESS_READ
    )
    mutated = _signature(compile_chart(chart, mutant), loose)
    return bool(mutated == _signature(chart.compiled(), loose))


# --------------------------------------------------------------------------- hashing


def _digest(paths: Sequence[Path]) -> str:
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(str(path).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _chart_file(chart: type[Chart]) -> Path:
    module = sys.modules[chart.__module__]
    return Path(str(module.__file__))


def chart_hash(chart: type[Chart]) -> str:
    engine = sorted(Path("statecharts").glob("_*.py"))
    return _digest([Path("statecharts") / _chart_file(chart).name, *engine])


def test_file_hashes() -> dict[str, str]:
    """The test sources a chart mutant can meet (the mutation tooling's own are not)."""
    return {
        str(p): _digest([p])
        for p in sorted(Path("tests").rglob("*.py"))
        if p.parent != Path("tests/mutation")
    }


def tests_hash(files: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- pytest plugin


class _Recorder:
    """Record mode: per test, the ``(chart, event)`` pairs it fired, legal or not."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.current: set[tuple[str, str]] | None = None
        self.tests: dict[str, dict[str, Any]] = {}
        self.uncollected: list[str] = []

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        from acpfsm.statecharts import _machine

        recorder = self
        original = _machine.Machine.fire

        def fire(machine: _machine.Machine, event: str, **data: Any) -> Any:
            if recorder.current is not None:
                recorder.current.add((machine.compiled.name, event))
            return original(machine, event, **data)

        setattr(_machine.Machine, "fire", fire)  # noqa: B010

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        self.current = set()
        self.tests[item.nodeid] = {"events": [], "seconds": 0.0, "passed": True}
        started = time.perf_counter()
        try:
            return (yield)
        finally:
            entry = self.tests[item.nodeid]
            entry["seconds"] = round(time.perf_counter() - started, 4)
            entry["events"] = sorted(self.current)
            self.current = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed and report.nodeid in self.tests:
            self.tests[report.nodeid]["passed"] = False

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:  # its tests are never recorded, so never run against a mutant
            self.uncollected.append(report.nodeid)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.out.write_text(json.dumps(self.tests, indent=0, sort_keys=True))
        uncollected = self.out.with_name(self.out.name + ".uncollected")
        uncollected.write_text(json.dumps(sorted(self.uncollected)))


class _Runner:
    """Mutant mode: for each planned mutant, install it and run its tests until one fails."""

    def __init__(self, plan: Path, out: Path, budget: float) -> None:
        self.budget = budget
        self.plan: list[dict[str, Any]] = json.loads(plan.read_text())
        self.out = out
        self.failed = False
        self.wanted = {t for entry in self.plan for t in entry["tests"]}

    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        keep = [i for i in items if i.nodeid in self.wanted]
        config.hook.pytest_deselected(items=[i for i in items if i.nodeid not in self.wanted])
        items[:] = keep

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.failed = True

    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        from acpfsm.statecharts import _base

        by_id = {item.nodeid: item for item in session.items}
        charts = {c.chart_name: c for c in ALL_CHARTS}
        with self.out.open("a") as sink:
            for entry in self.plan:
                mutant = Mutant.parse(entry["mutant"])
                chart = charts[mutant.chart]
                started = time.perf_counter()
                killer = ""
                broken = False
                error = ""
                missing: list[str] = []
                ran = 0
                _install(_base, chart, mutant)
                try:
                    for nodeid in entry["tests"]:
                        if time.perf_counter() - started > self.budget:
                            break  # survived within the budget
                        ran += 1
                        item = by_id.get(nodeid)
                        if item is None:  # its module did not collect: it cannot judge
                            missing.append(nodeid)
                            continue
                        self.failed = False
                        if hasattr(item, "_initrequest"):
                            item._initrequest()
                        try:
                            item.ihook.pytest_runtest_protocol(item=item, nextitem=None)
                        except Exception as exc:  # noqa: BLE001 - a plugin broke
                            broken = True
                            if not self.failed:  # no test failed: the run itself broke
                                error = f"the run of {nodeid} broke: {exc!r}"
                                break
                        if self.failed:
                            killer = nodeid
                            break
                finally:
                    _install(_base, chart, None)
                if not killer and missing and not error:
                    error = f"{len(missing)} of its tests were not collected (first: {missing[0]})"
                result = {
                    "mutant": entry["mutant"],
                    "killed": bool(killer),
                    "killer": killer,
                    "error": "" if killer else error,
                    "seconds": round(time.perf_counter() - started, 3),
                    "tests_run": ran,
                }
                sink.write(json.dumps(result) + "\n")
                sink.flush()
                if broken:  # the session may be damaged: the driver starts a fresh one
                    break
        session.testsfailed = 0
        return True


def _install(base: Any, chart: type[Chart], mutant: Mutant | None) -> None:
    """Make ``chart`` run on ``mutant``'s tables (None: the declared ones) from now on."""
    from acpfsm.statecharts import charts
    from acpfsm.tools import check_trace

    if mutant is None:
        os.environ.pop(MUTANT_ENV, None)
    else:
        os.environ[MUTANT_ENV] = str(mutant)
    base._compiled.pop(chart, None)
    charts._entries.pop(chart.chart_name, None)  # the runtime's ChartRef shares the tables
    chart.compiled()
    check_trace._CHARTS = None


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get(_RECORD_ENV):
        config.pluginmanager.register(_Recorder(Path(os.environ[_RECORD_ENV])), "acpfsm-mutate")
    elif os.environ.get(_RUN_ENV):
        plan, out, budget = os.environ[_RUN_ENV].split(os.pathsep)
        runner = _Runner(Path(plan), Path(out), float(budget))
        config.pluginmanager.register(runner, "acpfsm-mutate")


# --------------------------------------------------------------------------- the driver


@dataclass(frozen=True, slots=True)
class MutantPlan:
    mutant: Mutant
    label: str
    tests: tuple[str, ...]


def _pytest(extra_env: dict[str, str], args: Sequence[str], log: Path) -> subprocess.Popen[bytes]:
    """A pytest process with this module as a plugin (``extra_env`` says what it does), its
    output in ``log``; the declared charts, whatever this process had."""
    env = {**os.environ, **extra_env}
    env.pop(MUTANT_ENV, None)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        _PLUGIN,
        "-p",
        "no:cacheprovider",
        "--acpfsm-check-traces",
        *args,
    ]
    with log.open("w") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)


def _is_test_file(name: str) -> bool:
    return Path(name).name.startswith("test_")


def record(files: dict[str, str], charts_key: str) -> dict[str, Any]:
    """The per-test map: recorded again for the test files that changed (all of them when a
    chart or a helper module changed), the rest from the cache."""
    path = CACHE / "map.json"
    saved: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    known: dict[str, Any] = saved.get("files", {}) if saved.get("charts") == charts_key else {}
    helpers = {f: h for f, h in files.items() if not _is_test_file(f)}
    if saved.get("helpers") != helpers:
        known = {}
    stale = [f for f, h in files.items() if _is_test_file(f) and known.get(f, {}).get("hash") != h]
    if stale:
        whole = not known
        print(
            "mutate-charts: recording which test fires which event "
            + ("(the whole suite)" if whole else f"({len(stale)} changed test files)")
            + " …"
        )
        started = time.perf_counter()
        tmp = CACHE / "map.partial.json"
        tmp.unlink(missing_ok=True)
        args = ["--continue-on-collection-errors", *([] if whole else stale)]
        _pytest({_RECORD_ENV: str(tmp)}, args, CACHE / "record.log").wait()
        if not tmp.exists():
            raise SystemExit(f"mutate-charts: the record run failed; see {CACHE / 'record.log'}")
        fresh: dict[str, Any] = json.loads(tmp.read_text())
        tmp.unlink()
        errors = tmp.with_name(tmp.name + ".uncollected")
        uncollected = set(json.loads(errors.read_text())) if errors.exists() else set()
        errors.unlink(missing_ok=True)
        for f in stale:
            known[f] = {"hash": files[f], "tests": {}}
            if f in uncollected:  # recorded again once the file changes
                known[f]["uncollected"] = True
        for nodeid, info in fresh.items():
            f = nodeid.split("::", 1)[0]
            if f in known:
                known[f]["tests"][nodeid] = info
        print(f"mutate-charts: recorded in {time.perf_counter() - started:.0f} s")
    known = {f: v for f, v in known.items() if f in files}
    path.write_text(json.dumps({"charts": charts_key, "helpers": helpers, "files": known}))
    broken = sorted(f for f, v in known.items() if v.get("uncollected"))
    if broken:
        print(
            f"mutate-charts: {len(broken)} test file(s) did not collect in the record run; "
            f"their tests are never run against a mutant (see {CACHE / 'record.log'}): "
            + ", ".join(broken)
        )
    return {nodeid: info for v in known.values() for nodeid, info in v["tests"].items()}


def load_equivalent(path: Path = EQUIVALENT_FILE) -> dict[str, str]:
    if not path.exists():
        return {}
    data = tomllib.loads(path.read_text())
    return {str(m["mutant"]): str(m["reason"]) for m in data.get("mutant", [])}


def _load_results() -> dict[str, dict[str, Any]]:
    path = CACHE / "results.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _usable(
    cached: dict[str, Any] | None, chart_key: str, tkey: str, files: dict[str, str]
) -> bool:
    if cached is None or cached.get("chart") != chart_key:
        return False
    if cached.get("tests") == tkey:
        return True
    killer = str(cached.get("killer", ""))
    if not cached.get("killed") or not killer:
        return False
    file = killer.split("::", 1)[0]
    return files.get(file) is not None and cached.get("killer_file") == files.get(file)


def _shard(items: list[MutantPlan], shard: tuple[int, int]) -> list[MutantPlan]:
    i, n = shard
    return [p for k, p in enumerate(items) if k % n == i - 1]


def _run_plans(
    plans: list[MutantPlan], jobs: int, budget: float, merge: Merge
) -> dict[str, dict[str, Any]]:
    """Run ``plans`` in ``jobs`` pytest processes; the outcome of each mutant, by its str."""
    if not plans:
        return {}
    procs: list[subprocess.Popen[bytes]] = []
    results: list[Path] = []
    stamp = f"{os.getpid()}-{time.monotonic_ns()}"
    for j in range(1, jobs + 1):
        part = _shard(plans, (j, jobs))
        if not part:
            continue
        plan_file = CACHE / f"plan-{j}.json"
        result_file = CACHE / f"results-{stamp}-{j}.jsonl"
        plan_file.write_text(
            json.dumps([{"mutant": str(p.mutant), "tests": list(p.tests)} for p in part])
        )
        run = os.pathsep.join([str(plan_file), str(result_file), str(budget)])
        # a module that does not collect leaves its planned tests missing (not judged),
        # instead of stopping the whole run
        args = ["-o", "timeout=60", "--continue-on-collection-errors"]
        procs.append(_pytest({_RUN_ENV: run}, args, CACHE / f"run-{j}.log"))
        results.append(result_file)
    for proc in procs:
        proc.wait()
    return _absorb(results, merge)


Merge = Callable[[dict[str, dict[str, Any]]], None]


def _absorb(paths: list[Path], merge: Merge) -> dict[str, dict[str, Any]]:
    """The outcomes in ``paths`` (shards' result files), merged into the cache, then gone."""
    out: dict[str, dict[str, Any]] = {}
    for path in paths:
        if path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    entry = json.loads(line)
                    out[entry["mutant"]] = entry
    merge(out)
    for path in paths:
        path.unlink(missing_ok=True)
    return out


def _leftovers(merge: Merge) -> dict[str, dict[str, Any]]:
    """Outcomes an interrupted run wrote but never merged."""
    return _absorb(sorted(CACHE.glob("results-*.jsonl")), merge)


def _parse_shard(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+)/(\d+)", text)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise argparse.ArgumentTypeError("expected i/n with 1 <= i <= n")
    return int(m.group(1)), int(m.group(2))


def _rank(nodeid: str) -> int:
    """Chart walks first, then the in-memory runtime (virtual clock), then real processes
    and asyncio runs (real time): most mutants die in the first group."""
    if nodeid.startswith("tests/statecharts/"):
        return 0
    if "[asyncio" in nodeid or "-asyncio" in nodeid:
        return 3
    if nodeid.startswith("tests/runtime/"):
        return 1
    return 2


def _plans(
    chart: type[Chart], tests: dict[str, Any]
) -> Iterator[tuple[Mutant, str, tuple[str, ...] | None]]:
    """Each mutant of ``chart`` with its label and tests (None: equivalent by construction)."""
    for mutant in enumerate_mutants(chart):
        name = label(chart, mutant)
        if equivalent_by_construction(chart, mutant):
            yield mutant, name, None
            continue
        event = chart.compiled().transitions[mutant.index][0]
        chosen = sorted(
            (
                nodeid
                for nodeid, info in tests.items()
                if info["passed"]
                and not excluded(nodeid)
                and [chart.chart_name, event] in info["events"]
            ),
            key=lambda nodeid: (_rank(nodeid), tests[nodeid]["seconds"], nodeid),
        )
        yield mutant, name, tuple(chosen)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m acpfsm.tools.mutate_charts",
        description="Chart mutation testing: every declared transition must be pinned.",
    )
    parser.add_argument("--chart", action="append", default=[], help="only this chart")
    parser.add_argument("--shard", type=_parse_shard, default=(1, 1), help="i/n of the mutants")
    parser.add_argument("--jobs", type=int, default=1, help="pytest processes at once")
    parser.add_argument("--fresh", action="store_true", help="ignore cached results")
    parser.add_argument(
        "--budget",
        type=float,
        default=120.0,
        help="seconds of tests per mutant before it counts as survived (default 120)",
    )
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    args = parser.parse_args(argv)
    if os.environ.get(MUTANT_ENV):
        parser.error(f"{MUTANT_ENV} is set: unset it")
    started = time.perf_counter()
    CACHE.mkdir(parents=True, exist_ok=True)
    charts = [c for c in ALL_CHARTS if not args.chart or c.chart_name in args.chart]
    unknown = set(args.chart) - {c.chart_name for c in ALL_CHARTS}
    if unknown:
        parser.error(f"unknown chart(s) {sorted(unknown)}")
    if args.list:
        for chart in charts:
            for mutant in enumerate_mutants(chart):
                print(f"{mutant}\t{label(chart, mutant)}")
        return 0
    files = test_file_hashes()
    tkey = tests_hash(files)
    all_charts_key = _digest(sorted(Path("statecharts").glob("*.py")))
    tests = record(files, all_charts_key)
    cached = {} if args.fresh else _load_results()
    equivalent = load_equivalent()
    every: list[tuple[type[Chart], Mutant, str, tuple[str, ...] | None]] = [
        (chart, mutant, name, chosen)
        for chart in charts
        for mutant, name, chosen in _plans(chart, tests)
    ]
    selected = every[args.shard[0] - 1 :: args.shard[1]]
    todo: list[MutantPlan] = []
    for chart, mutant, name, chosen in selected:
        if chosen is None or name in equivalent:
            continue
        if not _usable(cached.get(name), chart_hash(chart), tkey, files):
            todo.append(MutantPlan(mutant, name, chosen))
    print(
        f"mutate-charts: {len(selected)} mutants selected, {len(todo)} to run "
        f"({len(selected) - len(todo)} cached or not run), {args.jobs} job(s)"
    )

    def merge(outcomes: dict[str, dict[str, Any]]) -> None:
        """Keep ``outcomes`` in the cache at once (an interrupted run loses nothing)."""
        for plan in todo:
            got = outcomes.get(str(plan.mutant))
            if got is None:
                continue
            killer = str(got["killer"])
            cached[plan.label] = {
                "chart": chart_hash(charts_by_name[plan.mutant.chart]),
                "tests": tkey,
                "killed": got["killed"],
                "error": str(got.get("error", "")),
                "killer": killer,
                "killer_file": files.get(killer.split("::", 1)[0], ""),
                "seconds": got["seconds"],
                "ran": got.get("tests_run", len(plan.tests)),
                "of": len(plan.tests),
            }
        (CACHE / "results.json").write_text(json.dumps(cached, indent=1, sort_keys=True))

    charts_by_name = {c.chart_name: c for c in charts}
    done = _leftovers(merge)  # what an interrupted run left
    to_run = [p for p in todo if str(p.mutant) not in done]
    while to_run:  # a shard that stopped early is started again on what it left
        got = _run_plans(to_run, max(1, args.jobs), args.budget, merge)
        if not got:
            break
        to_run = [p for p in to_run if str(p.mutant) not in got]
    return _report(selected, cached, equivalent, time.perf_counter() - started)


def _report(
    selected: list[tuple[type[Chart], Mutant, str, tuple[str, ...] | None]],
    cached: dict[str, dict[str, Any]],
    equivalent: dict[str, str],
    seconds: float,
) -> int:
    status = 0
    by_chart: dict[str, list[tuple[str, str]]] = {}
    for chart, _, name, chosen in selected:
        if chosen is None:
            kind = "construction"
        elif name in equivalent:
            entry = cached.get(name)
            kind = "stale_equivalent" if entry and entry.get("killed") else "equivalent"
        else:
            entry = cached.get(name)
            if entry is None:
                kind = "pending"
            elif entry["killed"]:
                kind = "killed"
            else:
                kind = "error" if entry.get("error") else "survived"
        by_chart.setdefault(chart.chart_name, []).append((kind, name))
    total: dict[str, int] = {}
    for chart_name, rows in by_chart.items():
        counts: dict[str, int] = {}
        for kind, _ in rows:
            counts[kind] = counts.get(kind, 0) + 1
            total[kind] = total.get(kind, 0) + 1
        print(
            f"{chart_name}: {len(rows)} mutants, {counts.get('killed', 0)} killed, "
            f"{counts.get('construction', 0)} equivalent by construction, "
            f"{counts.get('equivalent', 0)} listed equivalent, "
            f"{counts.get('survived', 0)} survived, {counts.get('error', 0)} not judged, "
            f"{counts.get('pending', 0)} not run"
        )
        for kind, name in rows:
            entry = cached.get(name, {})
            if kind == "survived":
                print(
                    f"  SURVIVED  {name}  ({entry.get('ran', '?')} of {entry.get('of', '?')} tests)"
                )
                status = 1
            elif kind == "error":
                print(f"  NOT JUDGED  {name}  ({entry.get('error')})")
                status = 1
    killers: dict[str, int] = {}
    for _, _, name, _ in selected:
        killer = str(cached.get(name, {}).get("killer", ""))
        if killer:
            killers[killer] = killers.get(killer, 0) + 1
    top = sorted(killers.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    if top:
        print("most kills (a test killing nearly everything deserves a look):")
        for killer, count in top:
            print(f"  {count:5d}  {killer}")
    listed = {name for _, _, name, _ in selected}
    for name in equivalent:
        if name in listed and cached.get(name, {}).get("killed"):
            print(f"  LISTED EQUIVALENT BUT KILLED  {name}")
    print(
        f"TOTAL: {sum(total.values())} mutants, {total.get('killed', 0)} killed, "
        f"{total.get('construction', 0)} equivalent by construction, "
        f"{total.get('equivalent', 0)} listed equivalent, {total.get('survived', 0)} survived, "
        f"{total.get('error', 0)} not judged, {total.get('pending', 0)} not run ({seconds:.0f} s)"
    )
    if total.get("pending"):
        status = 1
    return status


if __name__ == "__main__":
    raise SystemExit(main())
