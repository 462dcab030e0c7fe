"""``make mutate``'s per-mutant test selection: which tests run which lines, and the test
command cosmic-ray runs for each mutant.

Recording (once per target, again when its modules or the tests change): the target's test
files run in one pytest with this module as a plugin (``ACPFSM_MUTATE_RECORD`` names the
output); coverage.py measures the target's modules with one dynamic context per test (its
node id), and each test's duration and outcome are kept. The map is
``{"tests": {nodeid: {"duration": s, "passed": bool}}, "lines": {module: {line: [nodeid]}}}``.

The test command (``python -m tests.mutation.selection <state folder>``, run by cosmic-ray
in the target's copy with one mutant applied): it compares each target module of the copy
with the pristine one kept in the state folder, finds the statements the mutant changed, and
runs only the tests that executed them, fastest first, stopping at the first failure. A
statement outside any function body (module and class level, a ``def`` line with its
decorators and defaults) runs at import, before any test: every test of the target is
selected for it, and so for a statement in a function body that ran outside every test (a
function called at import, such as the probe that picks the resolver: its result is every
test's, so the map lists :data:`AT_IMPORT` for that line). A statement in a function body
that no passing test executed is reported at
once (exit 0: the mutant survived, nothing to run). A test that failed in the record run is
never selected (it would kill every mutant); a test run on both backends is selected on trio
only (:func:`one_backend`).
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import sys
import time
from collections.abc import Generator, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

RECORD_ENV = "ACPFSM_MUTATE_RECORD"
ORDER_ENV = "ACPFSM_MUTATE_ORDER"
AT_IMPORT = "<import>"
"""In the map, a line that ran outside every test (at import): every test depends on it."""
PYTEST_ARGS = ("-q", "-p", "no:cacheprovider", "-o", "timeout=120", "--acpfsm-check-traces")
#: A selected test may take this many times its recorded duration (recorded under coverage,
#: on a machine that may be busy) before it counts as hung, at least MIN_TIMEOUT seconds: a
#: mutant that hangs a test is killed in seconds rather than at the record's 120 s (hanging a
#: test is what many of the drivers' mutants do: this bound is most of their run time).
TIMEOUT_FACTOR = 4.0
MIN_TIMEOUT = 15.0
MIN_TIMEOUT_PROCESSES = 60.0
RECORD_ARGS = (*PYTEST_ARGS, "-p", "tests.mutation.selection")


# --------------------------------------------------------------------------- recording


class Recorder:
    """Coverage with one context per test, and each test's duration and outcome."""

    def __init__(self, out: Path, modules: Sequence[str]) -> None:
        import coverage

        self.out = out
        self.modules = tuple(modules)
        self.cov = coverage.Coverage(
            data_file=str(out.with_suffix(".coverage")),
            include=[f"*/{m}" for m in self.modules],
            config_file=False,
        )
        self.tests: dict[str, dict[str, Any]] = {}
        self.cov.start()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        self.cov.switch_context(item.nodeid)
        try:
            return (yield)
        finally:
            self.cov.switch_context("")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        entry = self.tests.setdefault(report.nodeid, {"duration": 0.0, "passed": True})
        entry["duration"] += report.duration
        if report.failed or (report.when == "call" and report.skipped):
            entry["passed"] = False  # a skipped test kills nothing: never selected

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.cov.stop()
        self.cov.save()
        data = self.cov.get_data()
        lines: dict[str, dict[str, list[str]]] = {}
        for measured in data.measured_files():
            module = next((m for m in self.modules if measured.endswith("/" + m)), None)
            if module is None:
                continue
            by_line = lines.setdefault(module, {})
            for line, contexts in data.contexts_by_lineno(measured).items():
                named = sorted(c for c in contexts if c)
                if "" in contexts:  # ran outside every test: at import
                    named.append(AT_IMPORT)
                if named:
                    by_line.setdefault(str(line), []).extend(named)
        self.out.write_text(json.dumps({"tests": self.tests, "lines": lines}))


def merge(kept: dict[str, Any], fresh: dict[str, Any], keep: set[str]) -> dict[str, Any]:
    """A map of the tests of the files in ``keep`` from ``kept``, and everything ``fresh``
    recorded (the files recorded again)."""

    def kept_test(nodeid: str) -> bool:
        return nodeid == AT_IMPORT or nodeid.split("::", 1)[0] in keep

    tests = {n: t for n, t in kept.get("tests", {}).items() if kept_test(n)}
    tests.update(fresh["tests"])
    lines: dict[str, dict[str, list[str]]] = {}
    for part, only_kept in ((kept.get("lines", {}), True), (fresh["lines"], False)):
        for module, by_line in part.items():
            into = lines.setdefault(module, {})
            for line, nodeids in by_line.items():
                chosen = [n for n in nodeids if kept_test(n)] if only_kept else nodeids
                if chosen:
                    into[line] = sorted({*into.get(line, ()), *chosen})
    return {"tests": tests, "lines": lines}


class Order:
    """Run the selected tests in the order given (fastest first), each bounded by its own
    recorded duration (:func:`hang_bound`), so a fast test a mutant hangs is stopped early
    even when a slow test was selected beside it."""

    def __init__(self, nodeids: Sequence[str], durations: dict[str, float] | None = None) -> None:
        self.rank = {n: i for i, n in enumerate(nodeids)}
        self.durations = durations or {}

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        items.sort(key=lambda item: self.rank.get(item.nodeid, len(self.rank)))
        for item in items:
            duration = self.durations.get(item.nodeid)
            if duration is not None:  # first, so it is the closest timeout marker
                real = item.get_closest_marker("integration") is not None
                bound = hang_bound(duration, real_processes=real)
                item.add_marker(pytest.mark.timeout(bound), append=False)


def hang_bound(duration: float, *, real_processes: bool = False) -> float:
    """How long a test recorded at ``duration`` seconds may run under a mutant; a test of
    real processes (marked ``integration``: an agent, agentctl, an MCP server started for
    it) gets at least :data:`MIN_TIMEOUT_PROCESSES`, their start-up being what a loaded
    machine slows most (a timeout counts as a kill)."""
    floor = MIN_TIMEOUT_PROCESSES if real_processes else MIN_TIMEOUT
    return max(floor, TIMEOUT_FACTOR * duration)


def pytest_configure(config: pytest.Config) -> None:
    """Registered with ``-p tests.mutation.selection``: records when asked to."""
    out = os.environ.get(RECORD_ENV)
    if out:
        modules = json.loads(os.environ["ACPFSM_MUTATE_MODULES"])
        config.pluginmanager.register(Recorder(Path(out), modules), "acpfsm-mutate-record")


# --------------------------------------------------------------------------- selecting


def changed_lines(pristine: str, mutated: str) -> set[int]:
    """The lines of ``pristine`` (1-based) the mutated text replaced or removed; an insertion
    counts as a change of the line it follows."""
    out: set[int] = set()
    matcher = difflib.SequenceMatcher(a=pristine.splitlines(), b=mutated.splitlines())
    for tag, i1, i2, _, _ in matcher.get_opcodes():
        if tag == "equal":
            continue
        out.update(range(i1 + 1, i2 + 1) if i2 > i1 else {max(i1, 1)})
    return out


def _header(node: ast.stmt) -> range:
    """A statement's own lines: for a compound one, up to its first nested statement."""
    first = node.lineno
    for decorator in getattr(node, "decorator_list", ()):
        first = min(first, decorator.lineno)
    body = getattr(node, "body", None)
    if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
        return range(first, max(node.lineno, body[0].lineno - 1) + 1)
    return range(first, (node.end_lineno or node.lineno) + 1)


def scope(tree: ast.Module, line: int) -> range | None:
    """The lines of the innermost statement holding ``line`` when it runs inside a function
    body (its execution is per test); None when it runs at import (every test)."""
    found: tuple[ast.stmt, bool] | None = None

    def visit(nodes: Iterable[ast.AST], in_function: bool) -> None:
        nonlocal found
        for node in nodes:
            if not isinstance(node, ast.stmt):
                continue
            end = node.end_lineno or node.lineno
            start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
            if not start <= line <= end:
                continue
            found = (node, in_function)
            inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                children = getattr(node, field, None) or []
                for child in children:
                    if isinstance(child, ast.ExceptHandler | ast.match_case):
                        if child.lineno <= line <= (child.end_lineno or child.lineno):
                            found = (node, in_function)
                            visit(child.body, inner)
                    else:
                        visit([child], inner)

    visit(tree.body, False)
    if found is None or not found[1]:
        return None
    return _header(found[0])


def select(
    state: Path, tree: Path, modules: Sequence[str]
) -> tuple[list[str] | None, list[str], dict[str, Any]]:
    """(the selected node ids, fastest first, or None for every test; the changed places)."""
    plan = json.loads((state / "map.json").read_text())
    tests: dict[str, dict[str, Any]] = plan["tests"]
    selected: set[str] = set()
    everything = False
    places: list[str] = []
    for module in modules:
        pristine = (state / "pristine" / module).read_text()
        mutated = (tree / module).read_text()
        if pristine == mutated:
            continue
        parsed = ast.parse(pristine)
        covered = plan["lines"].get(module, {})
        for line in sorted(changed_lines(pristine, mutated)):
            places.append(f"{module}:{line}")
            lines = scope(parsed, line)
            if lines is None:
                everything = True
                continue
            for n in lines:
                ran = covered.get(str(n), ())
                everything = everything or AT_IMPORT in ran
                selected.update(ran)
    if not places:
        everything = True  # nothing differs: no evidence, run them all
    usable = {n for n, t in tests.items() if t["passed"]}
    chosen = one_backend(usable if everything else selected & usable)
    ordered = sorted(chosen, key=lambda n: (tests[n]["duration"], n))
    return ordered, places, plan


def one_backend(nodeids: set[str]) -> set[str]:
    """``nodeids`` without the asyncio run of a test whose trio run is there too: the code
    under test is the same anyio code on both backends, and a survivor runs every selected
    test, so this halves a survivor's cost. Conservative: a mutant only the asyncio run would
    kill is reported as a survivor (read, then killed by a test or listed), never as killed."""

    def trio_twin(nodeid: str) -> str | None:
        head, bracket, params = nodeid.partition("[")
        parts = params.removesuffix("]").split("-")
        if not bracket or "asyncio" not in parts:
            return None
        return f"{head}[{'-'.join('trio' if p == 'asyncio' else p for p in parts)}]"

    return {n for n in nodeids if (twin := trio_twin(n)) is None or twin not in nodeids}


def main(argv: Sequence[str] | None = None) -> int:
    """The test command: ``python -m tests.mutation.selection STATE``, cwd the target's copy."""
    args = list(sys.argv[1:] if argv is None else argv)
    state = Path(args[0])
    config = json.loads((state / "target.json").read_text())
    started = time.perf_counter()
    ordered, places, plan = select(state, Path.cwd(), config["modules"])
    print(f"mutant at {', '.join(places) or '(no change)'}: {len(ordered)} test(s) selected")
    if not ordered:
        print("no passing test executes the mutated statement: survived, nothing run")
        return 0
    tests = plan["tests"]
    durations = {n: float(tests[n]["duration"]) for n in ordered}
    limit = hang_bound(max(durations.values()))
    args = [*PYTEST_ARGS, "-o", f"timeout={limit:.0f}", "-x", *ordered]
    code = int(pytest.main(args, plugins=[Order(ordered, durations)]))
    print(f"{EXIT_LINE} {code} in {time.perf_counter() - started:.1f} s")
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        print(f"{NOT_RUN}: {NOT_RUN_REASONS.get(code, 'pytest could not run the tests')}")
    return code


EXIT_LINE = "pytest exit"
"""How the test command reports pytest's exit status (:func:`outcome_of` reads it)."""
NOT_RUN = "mutant not judged"
NOT_RUN_REASONS = {
    pytest.ExitCode.INTERRUPTED: "a collection error (the test modules did not import)",
    pytest.ExitCode.INTERNAL_ERROR: "pytest's internal error",
    # pytest's status when a node id it was given names a module that did not import
    pytest.ExitCode.USAGE_ERROR: "a collection or usage error (a selected test module, a "
    "conftest or a plugin did not load)",
    pytest.ExitCode.NO_TESTS_COLLECTED: "no test was collected",
}


def outcome_of(test_outcome: str, output: str) -> str:
    """What a mutant's test run says: ``killed`` only when a selected test ran and failed
    (pytest's exit status 1; or the run hung past cosmic-ray's bound), ``survived`` when
    they all passed, ``error`` when pytest could not run them (a collection error, exit 2,
    or 4 when the module of a selected node id did not import: a test module that reads the
    mutated source when it is collected, such as tests/runtime/test_verify.py's seeded
    charts; a usage or internal error; no test collected), which says nothing of the
    mutant. ``test_outcome`` is
    cosmic-ray's (``killed``, ``survived``, ``incompetent``), ``output`` the command's."""
    if test_outcome == "killed":
        if output.strip() == "timeout":
            return "killed"  # cosmic-ray's own bound: the mutant hung the tests
        for line in output.splitlines():
            if line.startswith(EXIT_LINE + " "):
                code = int(line.split()[2])
                return "killed" if code == pytest.ExitCode.TESTS_FAILED else "error"
        return "error"  # the command failed before pytest ran
    if test_outcome == "incompetent":
        return "error"
    return str(test_outcome)


if __name__ == "__main__":
    raise SystemExit(main())
