"""``make mutate``'s list of reviewed equivalent mutants (tests/mutation/equivalent_mutants.toml):
which survivor an entry names, including a line said more than once in a module."""

from __future__ import annotations

import tomllib
from pathlib import Path
from types import SimpleNamespace

from tests.mutation.mutate import EQUIVALENT_FILE, _listed, line_keys, load_equivalent

SOURCE = """\
def first(fired):
    fired = step("a")
    if wants(fired, "skip"):
        return False
    return True


def second(fired):
    fired = step("b")
    if wants(fired, "skip"):
        return False
    return True
"""


def _mutant(path: Path, row: int, operator: str = "core/ReplaceFalseWithTrue") -> SimpleNamespace:
    return SimpleNamespace(module_path=path, start_pos=(row, 15), operator_name=operator)


def _entry(path: Path, line: str, operator: str = "core/ReplaceFalseWithTrue") -> str:
    return (
        f'[[mutant]]\nmodule = "{path}"\nline = \'{line}\'\noperator = "{operator}"\nreason = "r"\n'
    )


def test_a_line_and_its_previous_said_twice_are_told_apart_by_the_line_before(
    tmp_path: Path,
) -> None:
    """``if …: / return False`` is said in both functions: the entry naming the line before
    the pair too lists the second one's survivor only, and a listing by the pair lists both."""
    module = tmp_path / "m.py"
    module.write_text(SOURCE)
    listing = tmp_path / "equivalent.toml"
    listing.write_text(
        _entry(module, 'fired = step("b") / if wants(fired, "skip"): / return False')
    )
    equivalent = load_equivalent(listing)
    assert _listed(_mutant(module, 11), equivalent) is None
    assert _listed(_mutant(module, 4), equivalent) == "return False"
    assert _listed(_mutant(module, 11, "core/AddNot"), equivalent) == "return False"
    listing.write_text(_entry(module, 'if wants(fired, "skip"): / return False'))
    both = load_equivalent(listing)
    assert _listed(_mutant(module, 4), both) is None
    assert _listed(_mutant(module, 11), both) is None


def test_an_unreachable_line_is_listed_for_every_operator(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(SOURCE)
    listing = tmp_path / "equivalent.toml"
    listing.write_text(_entry(module, 'fired = step("b")', operator="*"))
    equivalent = load_equivalent(listing)
    assert (
        _listed(_mutant(module, 9, "core/ReplaceComparisonOperator_Eq_NotEq"), equivalent) is None
    )
    assert _listed(_mutant(module, 2), equivalent) == 'fired = step("a")'


def test_every_listed_mutant_names_one_line_of_its_module() -> None:
    """An entry whose line is no longer in its module (the code moved on) is stale: it lists
    nothing and hides nothing, so it is caught here rather than left to rot. An entry that
    names a line said in several places would hide the mutants of all of them: it must name
    one, unless it says (``repeated = true``) that its reason holds for every place."""
    repo = Path(__file__).resolve().parents[2]
    entries = tomllib.loads(EQUIVALENT_FILE.read_text())["mutant"]
    rows: dict[str, dict[str, int]] = {}
    for entry in entries:
        module, line = entry["module"], entry["line"].strip()
        if module not in rows:
            source = (repo / module).read_text()
            counts: dict[str, int] = {}
            for row in range(1, len(source.splitlines()) + 1):
                for key in set(line_keys(source, row)):
                    counts[key] = counts.get(key, 0) + 1
            rows[module] = counts
        places = rows[module].get(line, 0)
        assert places >= 1, f"stale: {module}: {line}"
        assert places == 1 or entry.get("repeated"), f"{places} places: {module}: {line}"


def test_a_line_is_named_with_the_line_after_it(tmp_path: Path) -> None:
    """Decorators said alike: ``line // next`` names the one above a given definition."""
    module = tmp_path / "m.py"
    module.write_text("@dataclass\nclass A:\n    x: int\n\n\n@dataclass\nclass B:\n    y: int\n")
    listing = tmp_path / "equivalent.toml"
    listing.write_text(_entry(module, "@dataclass // class B:", operator="core/RemoveDecorator"))
    equivalent = load_equivalent(listing)
    assert _listed(_mutant(module, 6, "core/RemoveDecorator"), equivalent) is None
    assert _listed(_mutant(module, 1, "core/RemoveDecorator"), equivalent) == "@dataclass"


def test_every_target_names_modules_and_tests_that_exist() -> None:
    """A module renamed or a test file moved would leave a target mutating nothing there, or
    its mutants judged without the tests that pin them; and every module of the session
    drivers is a target's."""
    from tests.mutation.mutate import REPO, TARGETS

    missing = [
        (target.name, path)
        for target in TARGETS
        for path in (*target.modules, *target.tests)
        if not (REPO / path).is_file()
    ]
    assert missing == []
    mutated = {m for target in TARGETS for m in target.modules}
    drivers = {
        p.relative_to(REPO).as_posix()
        for p in (REPO / "runtime" / "session").glob("*.py")
        if p.name not in ("__init__.py", "views.py")  # views: read-only snapshots, no decision
    }
    assert drivers - mutated == set()
