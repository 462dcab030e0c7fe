"""The repository stands alone: nothing in it cites notes kept outside it.

Citations name kandev's Go files and functions or the repository's own documents. The short ids
the code and the tests use are defined here: D1-D13 in docs/concepts/kandev.md (KANDEV.md
points there), R1-R36 and H1-H12 in diagrams/README.md, the scenario ids (``test_s73_…``) in
tests/runtime/README.md.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()

#: Names of notes that live outside the repository, and the section mark they were cited by.
PRIVATE = re.compile(
    r"lifecycle\.md|agentctl-protocol|acp-and-agents|scenarios\.md|seed-vs-mirror|style\.md"
    r"|session_manager\.go|runtime_facade\.go|shared/reference|§"
)
#: Where a checkout has no git: the folders .gitignore names, never tracked.
UNTRACKED_DIRS = {
    ".git",
    ".venv",
    "build",
    "__pycache__",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
    "traces",
    ".cache",
    ".acpfsm-reference",
}
KANDEV_ID = re.compile(r"\b([DRH])([0-9]{1,2})\b")
SCENARIO_TEST = re.compile(r"\bdef test_s([0-9]+)_")
SCENARIO_DOC = re.compile(r'(?:"""|\bscenarios? )s([0-9]+)\b')


def repo_files() -> list[str]:
    """Every file git tracks (or would: untracked but not ignored); without git, a walk."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        found = []
        for top, dirs, files in os.walk(ROOT):
            dirs[:] = [d for d in dirs if d not in UNTRACKED_DIRS and not d.endswith(".egg-info")]
            found += [(Path(top) / f).relative_to(ROOT).as_posix() for f in files]
        return sorted(found)
    return sorted(p for p in out.decode().split("\0") if p and (ROOT / p).is_file())


def text(path: str) -> str:
    return (ROOT / path).read_bytes().decode("utf-8", errors="replace")


def test_no_file_cites_notes_kept_outside_the_repo() -> None:
    hits = [
        f"{path}:{n}: {line.strip()}"
        for path in repo_files()
        if path != THIS and not path.endswith(".png")  # screenshots: pictures, not text
        for n, line in enumerate(text(path).splitlines(), 1)
        if PRIVATE.search(line)
    ]
    assert hits == [], "cite kandev's Go code or our own docs instead:\n" + "\n".join(hits)


def _defined(document: str, pattern: str) -> set[str]:
    """The ids a Markdown table defines: the first cell of each row."""
    return set(re.findall(rf"^\| ({pattern}) \|", text(document), re.MULTILINE))


KANDEV_PAGE = "docs/concepts/kandev.md"


def test_every_kandev_id_is_defined() -> None:
    """D ids on the kandev page, the races and hazards (R, H) in diagrams/README.md's
    catalogue."""
    defined = _defined(KANDEV_PAGE, r"D[0-9]{1,2}") | _defined(
        "diagrams/README.md", r"[RH][0-9]{1,2}"
    )
    assert {f"D{i}" for i in range(1, 14)} | {f"R{i}" for i in range(1, 37)} | {
        f"H{i}" for i in range(1, 13)
    } <= defined
    used = {
        f"{path}: {kind}{number}"
        for path in repo_files()
        if path.endswith((".py", ".md")) and path not in {THIS, KANDEV_PAGE, "diagrams/README.md"}
        for kind, number in KANDEV_ID.findall(text(path))
        if f"{kind}{number}" not in defined
    }
    assert used == set(), f"define these ids ({KANDEV_PAGE}, races.py) or say what they stand for"


def test_every_scenario_id_is_defined_in_the_scenario_table() -> None:
    defined = {int(i[1:]) for i in _defined("tests/runtime/README.md", r"s[0-9]+")}
    assert len(defined) > 90  # the table is there
    undefined = {
        f"{path}: s{number}"
        for path in repo_files()
        if path.endswith(".py") and path.startswith(("tests/runtime/", "runtime/"))
        for pattern in (SCENARIO_TEST, SCENARIO_DOC)
        for number in pattern.findall(text(path))
        if int(number) not in defined
    }
    assert undefined == set(), "add these scenarios to tests/runtime/README.md"
