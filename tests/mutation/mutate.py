"""``make mutate``: mutation testing of the decision code with cosmic-ray.

How it works
------------
cosmic-ray mutates a source file *in place*, runs a test command, and restores the file. Our
package is installed as a strict editable link tree (``build/``, links to the source folders),
so mutating the checkout would put every mutant in front of anything else running there (a
``make test`` beside it). Instead each target gets its own copy of the sources under
``.cache/mutate/<target>/tree`` and an import folder whose ``acpfsm/statecharts``,
``acpfsm/adapters``, ``acpfsm/runtime`` and ``acpfsm/testing`` link into that copy; the test
command runs there with ``PYTHONPATH`` naming the import folder first, so ``acpfsm.*`` (and the
pytest plugin, and every agent subprocess a test starts) is the mutated copy, never the
checkout. The canary proves it: before anything else, one known mutant (the first
request error in a chain no longer decides, ``adapters/classify.py``) must be killed.

Each mutant runs only the tests that execute the statement it changed (:mod:`.selection`):
cosmic-ray's test command is ``python -m tests.mutation.selection <target folder>``, which
compares the mutated copy with the pristine modules kept there and reads the map a record
run made (coverage.py, one context per test; :func:`record`, redone per test file that
changed).

Targets (:data:`TARGETS`): the error classification, the fs confinement, the permission
broker and the transport's permission policies, the lifecycle timeouts and the runtime drivers; each names the modules
mutated (optionally only some of their top-level definitions) and the tests that pin them.

Incremental and sharded: each target's cosmic-ray session (``session.sqlite``) is kept and
re-initialized only when a mutated module or the settings changed (then the killed mutants of
the target's modules that did not change, and their listed equivalents, are carried over); when only the tests changed, the
survivors are queued again, the killed stay killed; a run does the pending work items only (``--limit N`` stops after N), so an interrupted run continues where it stopped.
``--shard i/n`` takes the pending items whose job id (a hex number) is i − 1 modulo n (each shard in its own
copy, so shards run side by side, started together or not). Operators that only make noise here (bitwise and shift operators, exotic numeric
replacements) are filtered out (:data:`EXCLUDED_OPERATORS`).

Usage: ``python -m tests.mutation.mutate [--target NAME]… [--shard i/n] [--limit N]
[--report] [--no-canary]`` (``make mutate ARGS=…``). The score is (killed + listed equivalent) / run, over the items run; a survivor
no test can kill is listed, with the reason, in ``tests/mutation/equivalent_mutants.toml``.

A mutant is killed only by a selected test that ran and failed (pytest's exit status 1) or
hung. A run whose tests could not run (a collection error: a test module that reads the
mutated source when it is collected fails to import; a usage or internal error) says nothing
of the mutant: cosmic-ray would count its failing exit as a kill, so it is stored as
``incompetent`` and reported apart ("not judged", with the reason), and run again when the
tests change (:func:`.selection.outcome_of`).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.mutation import selection

REPO = Path(__file__).resolve().parents[2]
WORK = REPO / ".cache" / "mutate"
PACKAGES = {
    "statecharts": "statecharts",
    "adapters": "adapters",
    "runtime": "runtime",
    "testing": "runtime/testing",
}
EXCLUDED_OPERATORS = (
    r"core/ReplaceBinaryOperator_.*_(BitOr|BitAnd|BitXor|LShift|RShift|Pow|FloorDiv|Mod)",
    r"core/ReplaceBinaryOperator_(BitOr|BitAnd|BitXor|LShift|RShift|Pow|FloorDiv|Mod)_.*",
    r"core/NumberReplacer",  # number literals: only where they are the decision (timeouts)
)
EQUIVALENT_FILE = Path(__file__).with_name("equivalent_mutants.toml")


@dataclass(frozen=True)
class Target:
    name: str
    modules: tuple[str, ...]
    tests: tuple[str, ...]
    only: tuple[str, ...] = ()
    """Top-level definitions to mutate (all when empty)."""
    timeout: float = 300.0
    numbers: bool = False
    """Mutate number literals too (the timeouts are numbers)."""

    @property
    def excluded_operators(self) -> tuple[str, ...]:
        return EXCLUDED_OPERATORS if not self.numbers else EXCLUDED_OPERATORS[:-1]


TARGETS: tuple[Target, ...] = (
    Target("classify", ("adapters/classify.py",), ("tests/adapters/test_classify.py",)),
    Target(
        "fs",
        ("adapters/workspace.py", "adapters/_fileops.py"),
        ("tests/adapters/test_workspace.py", "tests/adapters/test_stdio_fs.py"),
    ),
    Target(
        "permissions",
        ("runtime/session/permissions.py",),
        (
            "tests/runtime/test_permissions.py",
            "tests/runtime/test_permissions_stdio.py",
            "tests/agentctl/test_agentctl_permissions.py",
        ),
    ),
    Target(
        "policies",
        ("adapters/transport.py",),
        (
            "tests/runtime/test_permissions.py",
            "tests/runtime/test_permissions_stdio.py",
            "tests/adapters/test_acp_stdio.py",
            "tests/adapters/test_sync_primitives.py",
        ),
        only=(
            "reject_option",
            "allow_once_option",
            "reject_permission_policy",
            "allow_once_permission_policy",
            "PermissionPrompts",
        ),
    ),
    Target(
        "timeouts",
        ("runtime/types.py",),
        (
            "tests/runtime/test_scenarios_s4_steer_cancel.py",
            "tests/runtime/test_scenarios_s4_prompt.py",
            "tests/runtime/test_scenarios_s1_init.py",
            "tests/runtime/test_scenarios_s2_s3_model.py",
            "tests/runtime/test_cancellation.py",
            "tests/runtime/test_permissions.py",
            # kandev's values themselves: a bound is measured relative to the others in the
            # scenarios (scaled), so only this pins a changed one
            "tests/runtime/test_runtime_basics.py",
        ),
        only=("Timeouts",),
        numbers=True,
    ),
    Target(
        "drivers",
        tuple(
            f"runtime/session/{name}.py"
            for name in (
                "cancelling",
                "config",
                "context",
                "crash",
                "flowrun",
                "init",
                "interpreter",
                "prompting",
                "pump",
                "session",
                "status",
                "steering",
                "stall",
                "stream",
                "turns",
            )
        ),
        (
            "tests/runtime/test_scenarios_s1_init.py",
            "tests/runtime/test_scenarios_s2_s3_model.py",
            "tests/runtime/test_scenarios_s4_prompt.py",
            "tests/runtime/test_scenarios_s4_steer_cancel.py",
            "tests/runtime/test_scenarios_s5_facade.py",
            "tests/runtime/test_anomalies.py",
            "tests/runtime/test_cancellation.py",
            "tests/runtime/test_stream_redial.py",
            "tests/runtime/test_containment.py",
            "tests/runtime/test_seed_behaviours.py",
            "tests/runtime/test_soak_findings.py",
            "tests/runtime/test_runtime_basics.py",
            "tests/runtime/test_turn.py",
            "tests/runtime/test_history.py",
            "tests/runtime/test_hub.py",
            "tests/runtime/test_authentication.py",
            "tests/runtime/test_snapshot_capabilities.py",
            "tests/runtime/test_verify_findings.py",
            "tests/runtime/test_permissions.py",
            "tests/runtime/test_e2e_reference_agent.py",
            "tests/runtime/test_mcp_runtime.py",
            "tests/runtime/test_retention.py",
            "tests/runtime/test_bounds.py",
            "tests/runtime/test_agent_text_and_stamps.py",
            "tests/agentctl/test_agentctl_runtime.py",
            "tests/agentctl/test_agentctl_turn.py",
            "tests/agentctl/test_agentctl_faults.py",
        ),
        timeout=600.0,
    ),
)


# --------------------------------------------------------------------------- the copy


def _copy_tree(tree: Path) -> Path:
    """Sync the sources into ``tree``; return the import folder to put on PYTHONPATH."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("statecharts", "adapters", "runtime", "tests"):
        dest = tree / folder
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(REPO / folder, dest, ignore=ignore)
    shutil.copy2(REPO / "pyproject.toml", tree / "pyproject.toml")
    cache = tree / ".cache"
    if not cache.exists():
        cache.mkdir()
        for entry in (REPO / ".cache").iterdir():  # the fetched peers (agentctl, the SDK)
            if entry.name != "mutate" and entry.name != "mutate-charts":
                (cache / entry.name).symlink_to(entry)
    imports = tree / "_import" / "acpfsm"
    if imports.exists():
        shutil.rmtree(imports.parent)
    imports.mkdir(parents=True)
    for name, folder in PACKAGES.items():
        (imports / name).symlink_to(tree / folder, target_is_directory=True)
    return imports.parent


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(str(path).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _keys(target: Target) -> dict[str, str]:
    """What a session's results depend on: the mutated modules and settings, and the tests
    (the target's test files and the helpers)."""
    settings = json.dumps([target.excluded_operators, target.only])
    return {
        "modules": _digest([REPO / m for m in target.modules]) + settings,
        "tests": _digest([REPO / t for t in target.tests] + _helpers()),
    }


def _helpers() -> list[Path]:
    """The test files every target's tests may lean on: the conftests and helper modules
    (not tests/mutation's own)."""
    return [
        p
        for p in (REPO / "tests").rglob("*.py")
        if not p.name.startswith("test_") and "mutation" not in p.relative_to(REPO).parts
    ]


def _lines_outside(module: Path, only: tuple[str, ...]) -> list[tuple[int, int]]:
    """Line ranges of ``module`` holding none of the definitions ``only`` names."""
    tree = ast.parse(module.read_text())
    keep = [
        (node.lineno, node.end_lineno or node.lineno)
        for node in tree.body
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name in only
    ]
    out: list[tuple[int, int]] = []
    start = 1
    for a, b in sorted(keep):
        if start < a:
            out.append((start, a - 1))
        start = b + 1
    out.append((start, 10**9))
    return out


def _env(imports: Path, tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(imports), str(tree)])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("ACPFSM_CHART_MUTANT", None)
    return env


def _command(target: Target) -> str:
    """The test command cosmic-ray runs for each mutant, in the target's copy."""
    return f"{sys.executable} -m tests.mutation.selection {WORK / target.name}"


def _config(target: Target, tree: Path, path: Path) -> None:
    command = _command(target)
    modules = ", ".join(json.dumps(m) for m in target.modules)
    excluded = ", ".join(json.dumps(e) for e in target.excluded_operators)
    path.write_text(
        "[cosmic-ray]\n"
        f"module-path = [{modules}]\n"
        f"timeout = {target.timeout}\n"
        "excluded-modules = []\n"
        f"test-command = {json.dumps(command)}\n\n"
        "[cosmic-ray.distributor]\n"
        'name = "local"\n\n'
        "[cosmic-ray.filters.operators-filter]\n"
        f"exclude-operators = [{excluded}]\n"
    )


def _cosmic(args: list[str], tree: Path, env: dict[str, str]) -> None:
    bindir = Path(sys.executable).parent
    subprocess.run([str(bindir / args[0]), *args[1:]], cwd=tree, env=env, check=True)


def prepare(target: Target, shard: str) -> tuple[Path, Path, dict[str, str]]:
    """The target's copy, session and environment; the session is (re)initialized when the
    mutated modules, the tests or the settings changed."""
    base = WORK / target.name
    tree = base / (f"tree-{shard.replace('/', 'of')}" if shard else "tree")
    tree.mkdir(parents=True, exist_ok=True)
    imports = _copy_tree(tree)
    env = _env(imports, tree)
    session = base / "session.sqlite"
    config = base / "config.toml"
    _config(target, tree, config)
    _session(target, base, tree, env, config)
    for module in target.modules:  # what the selection compares each mutant's copy with
        pristine = base / "pristine" / module
        pristine.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(tree / module, pristine)
    (base / "target.json").write_text(json.dumps({"modules": target.modules}))
    record(target, tree, env)
    return tree, session, env


def _session(target: Target, base: Path, tree: Path, env: dict[str, str], config: Path) -> None:
    """(Re)initialize the target's session when its modules or settings changed, queue the
    survivors again when its tests did; one shard at a time (shards may start together)."""
    import fcntl

    session = base / "session.sqlite"
    stamp = base / "session.json"
    requeued = base / "requeued.json"
    with open(base / "session.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        keys = _keys(target)
        saved = json.loads(stamp.read_text()) if stamp.exists() else {}
        if not session.exists() or saved.get("modules") != keys["modules"]:
            kept = _killed_in_unchanged(target, base, session) if session.exists() else {}
            session.unlink(missing_ok=True)
            requeued.unlink(missing_ok=True)
            _cosmic(["cosmic-ray", "init", str(config), str(session)], tree, env)
            _cosmic(["cr-filter-operators", str(session), str(config)], tree, env)
            if target.only:
                _skip_outside(target, tree, session)
            if kept:
                print(f"mutate: {target.name}: {_carry(session, kept)} result(s) kept")
        elif saved.get("tests") != keys["tests"]:
            _requeue_survivors(session, requeued)  # the killed stay killed
        _skip_markers(tree, session)
        stamp.write_text(json.dumps(keys))


def record_key(target: Target) -> dict[str, Any]:
    """What the map depends on: the mutated modules (its line numbers), the helpers, and each
    test file (a changed file is recorded again on its own)."""
    return {
        "modules": _digest([REPO / m for m in target.modules]),
        "helpers": _digest(_helpers()),
        "files": {t: _digest([REPO / t]) for t in target.tests},
    }


def record(target: Target, tree: Path, env: dict[str, str]) -> None:
    """Which test runs which line of the target's modules (see :mod:`.selection`): the test
    files that changed since the last record are recorded again (all of them when a mutated
    module or a helper changed); shards wait for one another's record."""
    import fcntl

    base = WORK / target.name
    out = base / "map.json"
    stamp = base / "map.key"
    key = record_key(target)
    with open(base / "record.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            saved = json.loads(stamp.read_text()) if out.exists() else {}
        except (OSError, ValueError):
            saved = {}
        whole = {k: saved.get(k) for k in ("modules", "helpers")} != {
            k: key[k] for k in ("modules", "helpers")
        }
        files = [t for t in target.tests if whole or saved["files"].get(t) != key["files"][t]]
        kept = {} if whole else json.loads(out.read_text())
        if not files and set(saved.get("files", ())) == set(key["files"]):
            return
        print(
            f"mutate: {target.name}: recording which test runs which line: {len(files)} "
            "test file(s)",
            flush=True,
        )
        started = time.perf_counter()
        log = base / "record.log"
        part = base / "map.part.json"
        part.unlink(missing_ok=True)
        if files:
            with log.open("w") as sink:
                subprocess.run(
                    [sys.executable, "-m", "pytest", *selection.RECORD_ARGS, *files],
                    cwd=tree,
                    env={
                        **env,
                        selection.RECORD_ENV: str(part),
                        "ACPFSM_MUTATE_MODULES": json.dumps(target.modules),
                    },
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    check=False,
                )
            if not part.exists():
                raise SystemExit(f"mutate: {target.name}: the record run failed; see {log}")
        fresh = json.loads(part.read_text()) if files else {"tests": {}, "lines": {}}
        merged = selection.merge(kept, fresh, keep=set(target.tests) - set(files))
        out.write_text(json.dumps(merged))
        part.unlink(missing_ok=True)
        failed = sorted(n for n, t in fresh["tests"].items() if not t["passed"])
        print(
            f"mutate: {target.name}: recorded {len(fresh['tests'])} test(s) in "
            f"{time.perf_counter() - started:.0f} s"
            + (f"; {len(failed)} failed or skipped, never selected (see {log})" if failed else "")
        )
        for nodeid in failed:
            print(f"  not selected: {nodeid}")
        stamp.write_text(json.dumps(key))


def _requeue_survivors(session: Path, note: Path) -> None:
    """The tests changed: the survivors are run again (their results are dropped), except
    those listed as equivalent, and so are the mutants the tests could not judge (a
    collection error may be gone); ``note`` keeps their job ids, so a run does them first."""
    import sqlite3

    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome

    equivalent = load_equivalent()
    with use_db(str(session), WorkDB.Mode.open) as work:
        again = [
            item.job_id
            for item, result in work.completed_work_items
            if (
                result.test_outcome == TestOutcome.SURVIVED
                and _listed(item.mutations[0], equivalent) is not None
            )
            or (result.test_outcome is not None and outcome(result) == "error")
        ]
    with sqlite3.connect(session) as db:
        db.executemany("DELETE FROM work_results WHERE job_id = ?", [(j,) for j in again])
    earlier = set(json.loads(note.read_text())) if note.exists() else set()
    note.write_text(json.dumps(sorted(earlier | set(again))))


def _mutant_key(m: Any) -> tuple[str, str, int, tuple[int, int], tuple[int, int]]:
    return (
        str(m.module_path),
        m.operator_name,
        m.occurrence,
        tuple(m.start_pos),
        tuple(m.end_pos),
    )


def _killed_in_unchanged(target: Target, base: Path, session: Path) -> dict[Any, Any]:
    """The killed and the listed equivalent mutants of the modules that did not change since
    ``session`` was made (the pristine copy kept beside it is the version it was made from):
    one module's change re-initializes the target's session, but a mutant of an unchanged
    module is the same mutant; killed, it stays killed (as when only the tests changed; the
    other survivors run again). An approximation: a mutant whose killing test failed only
    through a changed module could survive now; for a clean run, delete the session."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome

    unchanged = {
        m
        for m in target.modules
        if (base / "pristine" / m).exists()
        and (base / "pristine" / m).read_bytes() == (REPO / m).read_bytes()
    }
    equivalent = load_equivalent()
    with use_db(str(session), WorkDB.Mode.open) as db:
        return {
            _mutant_key(item.mutations[0]): result
            for item, result in db.completed_work_items
            if len(item.mutations) == 1
            and str(item.mutations[0].module_path) in unchanged
            and (
                (result.test_outcome == TestOutcome.KILLED and outcome(result) == "killed")
                or (  # a listed equivalent stays listed: no test can kill it
                    result.test_outcome == TestOutcome.SURVIVED
                    and _listed(item.mutations[0], equivalent) is None
                )
            )
        }


def _carry(session: Path, kept: dict[Any, Any]) -> int:
    """Set the kept results on the fresh session's matching items; how many matched."""
    from cosmic_ray.work_db import WorkDB, use_db

    n = 0
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item in list(db.pending_work_items):
            result = kept.get(_mutant_key(item.mutations[0])) if len(item.mutations) == 1 else None
            if result is not None:
                db.set_result(item.job_id, result)
                n += 1
    return n


def _skip_markers(tree: Path, session: Path) -> None:
    """Skip the "mutants" of a keyword-only marker: cosmic-ray's grammar takes the ``*`` of
    ``def f(self, *, x)`` for a multiplication, and ``/`` there (positional-only) either
    changes nothing for callers passing keywords or, where a parameter without a default
    follows one with a default, does not compile: no mutant worth a full selected-test run."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    lines: dict[str, list[str]] = {}
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item in list(db.pending_work_items):
            m = item.mutations[0]
            if not m.operator_name.startswith("core/ReplaceBinaryOperator_Mul_"):
                continue
            module = str(m.module_path)
            if module not in lines:
                lines[module] = (tree / module).read_text().splitlines()
            row, col = m.start_pos
            text = lines[module][row - 1][col:] if row <= len(lines[module]) else ""
            if re.match(r"\*\s*[,)]", text):
                db.set_result(
                    item.job_id,
                    WorkResult(output="keyword-only marker", worker_outcome=WorkerOutcome.SKIPPED),
                )


def _skip_outside(target: Target, tree: Path, session: Path) -> None:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    ranges = {m: _lines_outside(tree / m, target.only) for m in target.modules}
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item in list(db.pending_work_items):
            for mutation in item.mutations:
                line = mutation.start_pos[0]
                if any(a <= line <= b for a, b in ranges[str(mutation.module_path)]):
                    db.set_result(
                        item.job_id,
                        WorkResult(output="outside", worker_outcome=WorkerOutcome.SKIPPED),
                    )
                    break


# --------------------------------------------------------------------------- running


def canary() -> None:
    """One known mutant, run through cosmic-ray and the per-mutant test selection in the
    classification target's copy: it must be killed."""
    from cosmic_ray.ast import ast_nodes, get_ast_from_path
    from cosmic_ray.mutating import mutate_and_test
    from cosmic_ray.plugins import get_operator
    from cosmic_ray.work_item import MutationSpec

    target = TARGETS[0]
    tree, _, env = prepare(target, "")
    module = tree / "adapters/classify.py"
    source = module.read_text()
    line = "    return first is not None and first.code == code\n"
    lineno = source[: source.index(line)].count("\n") + 1
    col = line.index("==")
    # the occurrence of ReplaceComparisonOperator_Eq_NotEq at that line
    operator = get_operator("core/ReplaceComparisonOperator_Eq_NotEq")()
    positions = [
        pos
        for node in ast_nodes(get_ast_from_path(module))
        for pos in operator.mutation_positions(node)
    ]
    occurrence = next(
        i for i, (start, _) in enumerate(positions) if start[0] == lineno and start[1] >= col - 1
    )
    spec = MutationSpec(
        module_path=Path("adapters/classify.py"),
        operator_name="core/ReplaceComparisonOperator_Eq_NotEq",
        occurrence=occurrence,
        start_pos=positions[occurrence][0],
        end_pos=positions[occurrence][1],
    )
    saved = dict(os.environ)
    os.environ.update(env)
    cwd = Path.cwd()
    os.chdir(tree)
    try:
        result = mutate_and_test([spec], _command(target), 300)
    finally:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(saved)
    ok = outcome(result) == "killed"
    print(f"mutate: canary (_has_code: == → != at classify.py:{lineno}): {outcome(result)}")
    if not ok:
        raise SystemExit(
            "mutate: the canary survived: the tests do not import the mutated copy, "
            f"or the selection missed the test that kills it\n{result.output}"
        )
    if module.read_text() != source:
        raise SystemExit("mutate: cosmic-ray left the canary's file mutated")


def _has_result(session: Path, job_id: str) -> bool:
    import sqlite3

    with sqlite3.connect(session) as db:
        found = db.execute("SELECT 1 FROM work_results WHERE job_id = ?", (job_id,)).fetchone()
    return found is not None


def outcome(result: Any) -> str:
    """``killed``, ``survived``, ``error`` (the tests could not run: not a kill) or, for a
    mutant never tested, cosmic-ray's worker outcome (see :func:`.selection.outcome_of`)."""
    if result.test_outcome is None:
        return str(getattr(result.worker_outcome, "value", result.worker_outcome))
    test_outcome = getattr(result.test_outcome, "value", result.test_outcome)
    return selection.outcome_of(str(test_outcome), result.output or "")


def judged(result: Any) -> Any:
    """``result`` (a cosmic-ray ``WorkResult``), with a run that could not test the mutant
    (a collection error …) marked ``incompetent`` rather than ``killed`` (cosmic-ray counts
    any failing exit as a kill)."""
    if result.test_outcome == "killed" and outcome(result) == "error":
        return type(result)(
            output=result.output,
            test_outcome=type(result.test_outcome)("incompetent"),
            worker_outcome=result.worker_outcome,
            diff=result.diff,
        )
    return result


def run(target: Target, shard: str, limit: int | None) -> None:
    from cosmic_ray.mutating import mutate_and_test
    from cosmic_ray.work_db import WorkDB, use_db

    tree, session, env = prepare(target, shard)
    command = _command(target)
    note = WORK / target.name / "requeued.json"
    requeued = set(json.loads(note.read_text())) if note.exists() else set()
    with use_db(str(session), WorkDB.Mode.open) as db:  # survivors run again first
        pending = sorted(db.pending_work_items, key=lambda w: (w.job_id not in requeued, w.job_id))
    if shard:  # by job id, not by place in the list: shards started at different times
        i, n = (int(x) for x in shard.split("/"))  # (one has done items) stay disjoint
        pending = [w for w in pending if int(w.job_id, 16) % n == i - 1]
    if limit is not None:
        pending = pending[:limit]
    print(f"mutate: {target.name}: {len(pending)} pending item(s) to run")
    saved = dict(os.environ)
    cwd = Path.cwd()
    os.environ.update(env)
    os.chdir(tree)
    try:
        for n, item in enumerate(pending, 1):
            if _has_result(session, item.job_id):
                continue  # done meanwhile (skipped, or by an earlier run of this shard)
            started = time.perf_counter()
            result = judged(mutate_and_test(item.mutations, command, target.timeout))
            with use_db(str(session), WorkDB.Mode.open) as db:
                db.set_result(item.job_id, result)
            m = item.mutations[0]
            print(
                f"  [{n}/{len(pending)}] {outcome(result)} "
                f"{m.module_path}:{m.start_pos[0]} {m.operator_name} "
                f"({time.perf_counter() - started:.1f} s)",
                flush=True,
            )
    finally:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(saved)


def load_equivalent(path: Path = EQUIVALENT_FILE) -> dict[tuple[str, str, str], str]:
    """The reviewed equivalent mutants: (module, source line stripped, operator) → reason; a
    line said more than once is named by the lines around it (:func:`line_keys`)."""
    import tomllib

    if not path.exists():
        return {}
    data = tomllib.loads(path.read_text())
    return {
        (str(m["module"]), str(m["line"]).strip(), str(m["operator"])): str(m["reason"])
        for m in data.get("mutant", [])
    }


def line_keys(source: str, row: int) -> tuple[str, str, str, str]:
    """How a listing may name line ``row`` (1-based) of ``source``: the line, stripped; with
    the line before it (a line said more than once); with the two before it (a pair said
    more than once); with the line after it, ``line // next`` (a decorator)."""
    lines = ["", *source.splitlines(), ""]
    row = min(row, len(lines) - 2)
    text = lines[row].strip()
    both = f"{lines[row - 1].strip()} / {text}".strip()
    three = f"{lines[max(row - 2, 0)].strip()} / {both}".strip()
    return text, both, three, f"{text} // {lines[row + 1].strip()}"


def _listed(m: Any, equivalent: dict[tuple[str, str, str], str]) -> str | None:
    """None when the mutation ``m`` is listed as equivalent, else its source line."""
    keys = line_keys((REPO / m.module_path).read_text(), m.start_pos[0])
    if any(
        (str(m.module_path), t, op) in equivalent
        for t in keys
        for op in (m.operator_name, "*")  # "*": an unreachable line, every mutant of it
    ):
        return None
    return keys[0]


def report(target: Target) -> tuple[int, int, int, int, int]:
    """Print the target's outcome; (killed, equivalent, survived, errors, pending). An error
    (the tests could not run: a collection error …) is no kill and no survivor: it is
    listed apart, to be run again once the tests collect."""
    from cosmic_ray.work_db import WorkDB, use_db

    session = WORK / target.name / "session.sqlite"
    if not session.exists():
        print(f"{target.name}: not started")
        return 0, 0, 0, 0, 0
    equivalent = load_equivalent()
    killed = survived = listed = pending = 0
    survivors: list[str] = []
    errors: list[str] = []
    with use_db(str(session), WorkDB.Mode.open) as db:
        pending = db.num_work_items - db.num_results
        for item, result in db.completed_work_items:
            kind = outcome(result) if result.test_outcome is not None else "skipped"
            m = item.mutations[0]
            if kind == "killed":
                killed += 1
            elif kind == "error":
                reason = next(
                    (
                        line
                        for line in (result.output or "").splitlines()
                        if line.startswith(selection.NOT_RUN)
                    ),
                    "the test command failed",
                )
                errors.append(f"{m.module_path}:{m.start_pos[0]} {m.operator_name}  {reason}")
            elif kind == "survived":
                text = _listed(m, equivalent)
                if text is None:
                    listed += 1
                    continue
                survived += 1
                survivors.append(f"{m.module_path}:{m.start_pos[0]} {m.operator_name}  {text}")
    ran = killed + survived + listed
    score = f"{100 * (killed + listed) / ran:.1f} %" if ran else "-"
    print(
        f"{target.name}: {ran} run, {killed} killed, {listed} listed equivalent, "
        f"{survived} survived (score {score}), {len(errors)} not judged (collection "
        f"errors …), {pending} pending"
    )
    for line in sorted(survivors):
        print(f"  SURVIVED {line}")
    for line in sorted(errors):
        print(f"  NOT JUDGED {line}")
    return killed, listed, survived, len(errors), pending


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutation.mutate")
    parser.add_argument("--target", action="append", default=[], help="only this target")
    parser.add_argument("--shard", default="", help="i/n of the pending items")
    parser.add_argument("--limit", type=int, default=None, help="stop after N items")
    parser.add_argument("--report", action="store_true", help="only report")
    parser.add_argument("--no-canary", action="store_true", help="skip the canary")
    args = parser.parse_args(argv)
    if args.shard and not re.fullmatch(r"\d+/\d+", args.shard):
        parser.error("--shard i/n")
    names = {t.name for t in TARGETS}
    if set(args.target) - names:
        parser.error(f"targets: {sorted(names)}")
    targets = [t for t in TARGETS if not args.target or t.name in args.target]
    started = time.perf_counter()
    if not args.report:
        if not args.no_canary:
            canary()
        for target in targets:
            run(target, args.shard, args.limit)
    totals = [0, 0, 0, 0, 0]
    for target in targets:
        for i, value in enumerate(report(target)):
            totals[i] += value
    killed, listed, survived, errors, pending = totals
    ran = killed + listed + survived
    score = f"{100 * (killed + listed) / ran:.1f} %" if ran else "-"
    print(
        f"TOTAL: {ran} run, {killed} killed, {listed} listed equivalent, {survived} survived "
        f"(score {score}), {errors} not judged, {pending} pending "
        f"({time.perf_counter() - started:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
