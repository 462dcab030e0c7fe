"""``make mutate`` counts a mutant killed only when a selected test ran and failed: a test
module that cannot be collected under the mutant (it reads the mutated source when it is
collected, as tests/runtime/test_verify.py's seeded charts do) says nothing of the mutant
and is reported apart, never as a kill. Shown on a tiny synthetic module, through the very
test command cosmic-ray runs for each mutant (``python -m tests.mutation.selection``)."""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.mutation import mutate
from tests.mutation.selection import NOT_RUN, outcome_of

REPO = Path(__file__).resolve().parents[2]

MODULE = """\
def double(x):
    return 2 * x


def name():
    return "m"
"""

TESTS = """\
from pathlib import Path

import m

# read when the module is collected, as test_verify.py seeds its charts from their source
SEED = Path(m.__file__).read_text().index('return "m"')


def test_double():
    assert m.double(2) == 4


def test_name():
    assert m.name() == "m"
"""


def judge(tmp_path: Path, mutated: str) -> tuple[str, str]:
    """Run the test command on ``MODULE`` mutated as ``mutated``: (outcome, output)."""
    tree, state = tmp_path / "tree", tmp_path / "state"
    (state / "pristine").mkdir(parents=True)
    tree.mkdir()
    (state / "pristine" / "m.py").write_text(MODULE)
    (tree / "m.py").write_text(mutated)
    (tree / "test_m.py").write_text(TESTS)
    tests = {
        "test_m.py::test_double": {"duration": 0.01, "passed": True},
        "test_m.py::test_name": {"duration": 0.01, "passed": True},
    }
    lines = {"m.py": {"2": ["test_m.py::test_double"], "6": ["test_m.py::test_name"]}}
    (state / "map.json").write_text(json.dumps({"tests": tests, "lines": lines}))
    (state / "target.json").write_text(json.dumps({"modules": ["m.py"]}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(REPO)])}
    done = subprocess.run(
        [sys.executable, "-m", "tests.mutation.selection", str(state)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # cosmic-ray's verdict: any failing exit is "killed", exit 0 "survived"
    cosmic = "survived" if done.returncode == 0 else "killed"
    return outcome_of(cosmic, done.stdout), done.stdout


def test_a_failing_assertion_kills_a_collection_error_does_not(tmp_path: Path) -> None:
    killed, _ = judge(tmp_path / "a", MODULE.replace("2 * x", "3 * x"))
    assert killed == "killed"
    survived, _ = judge(tmp_path / "b", MODULE.replace("2 * x", "x * 2"))
    assert survived == "survived"
    # test_name would fail on this mutant, but its module no longer collects
    error, output = judge(tmp_path / "c", MODULE.replace('return "m"', 'return "n"'))
    assert error == "error"
    assert f"{NOT_RUN}: a collection" in output


def test_cosmic_rays_other_verdicts() -> None:
    assert outcome_of("killed", "timeout") == "killed"  # its own bound: the mutant hung
    assert outcome_of("killed", "Traceback …") == "error"  # the command failed before pytest
    assert outcome_of("incompetent", "") == "error"
    assert outcome_of("survived", "pytest exit 0 in 1.0 s") == "survived"


class Outcome(enum.StrEnum):  # cosmic-ray's TestOutcome
    SURVIVED = "survived"
    KILLED = "killed"
    INCOMPETENT = "incompetent"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Result:  # cosmic-ray's WorkResult, as the runner reads and makes it
    output: str
    test_outcome: Outcome | None
    worker_outcome: str = "normal"
    diff: str = ""


def test_a_collection_error_is_stored_and_reported_apart() -> None:
    """The runner stores such a run as ``incompetent`` (cosmic-ray would count it killed);
    a real kill and a survivor are stored as they are."""
    error = mutate.judged(Result(output="pytest exit 2 in 0.1 s", test_outcome=Outcome.KILLED))
    assert error.test_outcome is Outcome.INCOMPETENT and mutate.outcome(error) == "error"
    kill = mutate.judged(Result(output="pytest exit 1 in 0.1 s", test_outcome=Outcome.KILLED))
    assert kill.test_outcome is Outcome.KILLED and mutate.outcome(kill) == "killed"
    alive = mutate.judged(Result(output="pytest exit 0 in 0.1 s", test_outcome=Outcome.SURVIVED))
    assert alive.test_outcome is Outcome.SURVIVED and mutate.outcome(alive) == "survived"
    skipped = Result(output="outside", test_outcome=None, worker_outcome="skipped")
    assert mutate.outcome(skipped) == "skipped"
