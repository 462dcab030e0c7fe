"""Every Python block of README.md and docs/ works as printed.

pytest-examples finds the blocks (CONTRIBUTING.md says why that plugin). A block is either a
complete program, run here as its own ``__main__`` module in an empty working directory
(against the embedded reference agent: no model, no credentials, nothing leaves the machine),
or a fragment that says so on its first line and names what it assumes, in backticks::

    # Fragment: inside an async function, given `rt: Runtime` and `ref: ExecutionRef`.

A fragment is not run; its body is wrapped in an ``async def`` whose parameters are those
names, with their types imported from ``acpfsm.runtime`` (or ``acpfsm.runtime.events``), and
type-checked with the complete blocks. Every block, complete or not, passes mypy --strict and
ruff (lint and format) with the project's settings; an error names the Markdown file and line.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest
from pytest_examples import CodeExample, EvalExample, find_examples

import acpfsm.runtime
import acpfsm.runtime.events

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FRAGMENT = re.compile(r"#\s*Fragment\b", re.IGNORECASE)
TEST_FUNCTION = re.compile(r"^(?:async )?def test_", re.MULTILINE)
ASSUMED = re.compile(r"`([A-Za-z_]\w*): ([A-Za-z_][\w\[\], |.]*)`")
#: Where a fragment's assumed types come from, in this order.
TYPE_MODULES = (acpfsm.runtime, acpfsm.runtime.events)


def _examples() -> list[CodeExample]:
    found = [
        example
        for document in DOCUMENTS
        for example in find_examples(document)
        if example.prefix.split()[0] in {"python", "py"}
    ]
    assert found, "no Python block found"
    return found


EXAMPLES = _examples()


def _where(example: CodeExample) -> str:
    return f"{example.path.relative_to(ROOT)}:{example.start_line}"


def is_fragment(example: CodeExample) -> bool:
    first = example.source.lstrip("\n").split("\n", 1)[0]
    return FRAGMENT.match(first) is not None


@dataclass(frozen=True)
class Checked:
    """A block as the type checker and the linter see it, and how its lines map back."""

    module: str
    source: str
    offset: int  # checked line N is the block's line N - offset
    example: CodeExample

    def markdown_line(self, line: int) -> str:
        # the block's first line is the line after its fence
        return (
            f"{self.example.path.relative_to(ROOT)}:{self.example.start_line + line - self.offset}"
        )


def _type_imports(names: set[str]) -> list[str]:
    """``from MODULE import A, B`` lines for the names a fragment's assumptions use."""
    by_module: dict[str, list[str]] = {}
    for name in sorted(names - {"None", "str", "int", "float", "bool", "list", "dict"}):
        module = next((m for m in TYPE_MODULES if hasattr(m, name)), None)
        assert module is not None, f"a fragment assumes a type acpfsm.runtime lacks: {name}"
        by_module.setdefault(module.__name__, []).append(name)
    return [f"from {module} import {', '.join(names)}" for module, names in by_module.items()]


def checked(index: int, example: CodeExample) -> Checked:
    module = f"block_{index:03d}"
    # what a print prints, shown as pytest-examples has it (``#> text``), is a comment that
    # ruff format would write ``# > text``
    source = re.sub(r"(?m)^(\s*)#> ", r"\1# > ", example.source)
    if not is_fragment(example):
        return Checked(module, source, 0, example)
    header = example.source.lstrip("\n").split("\n", 1)[0]
    assumed = ASSUMED.findall(header)
    names = {n for _, kind in assumed for n in re.findall(r"[A-Za-z_]\w*", kind)}
    params = ", ".join(f"{name}: {kind}" for name, kind in assumed)
    lines = [*_type_imports(names), "", "", f"async def _fragment({params}) -> None:"]
    body = [f"    {line}" if line else "" for line in source.split("\n")]
    return Checked(module, "\n".join(lines + body), len(lines), example)


@pytest.mark.parametrize("example", [e for e in EXAMPLES if not is_fragment(e)], ids=_where)
def test_block_runs(
    example: CodeExample, eval_example: EvalExample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A complete block runs to its end, in an empty working directory; where it shows what
    a ``print`` prints (``#>`` lines after it), it prints exactly that."""
    monkeypatch.chdir(tmp_path)
    if TEST_FUNCTION.search(example.source):  # a test module: pytest runs it, as a user's
        run_as_test_module(example, tmp_path)
        return
    eval_example.set_config(line_length=100)  # as ruff's
    if "#>" in example.source:
        eval_example.run_print_check(example)
    else:
        eval_example.run(example)


def run_as_test_module(example: CodeExample, folder: Path) -> None:
    """Run a block that is a test module with pytest, in a folder of its own (no
    configuration of ours: as in a user's project), with every trace checked."""
    (folder / "test_example.py").write_text(example.source, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error",
         "--acpfsm-check-traces", "test_example.py"],
        cwd=folder, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{_where(example)}\n{done.stdout}{done.stderr}"
    assert re.search(r"\b[1-9]\d* passed\b", done.stdout), done.stdout


def test_fragments_say_what_they_assume() -> None:
    """A fragment names what it assumes (else its free names fail the type check)."""
    fragments = [e for e in EXAMPLES if is_fragment(e)]
    assert fragments, "the fragment rule has nothing to check: drop it or this test"
    for example in fragments:
        header = example.source.lstrip("\n").split("\n", 1)[0]
        assert ASSUMED.search(header) or "assumes nothing" in header, _where(example)


def _tool(argv: list[str], cwd: Path, blocks: list[Checked]) -> list[str]:
    """Run a checker; its findings, each with the Markdown file and line it is about."""
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode == 0:
        return []
    by_module = {block.module: block for block in blocks}

    def located(match: re.Match[str]) -> str:
        block = by_module.get(match.group(1))
        if block is None:
            return match.group(0)
        return block.markdown_line(int(match.group(2) or block.offset + 1))

    text = re.sub(r"(block_\d{3})\.py(?::(\d+))?", located, done.stdout + done.stderr)
    return [text.strip() or f"{argv[0]} exited {done.returncode}"]


def test_every_block_type_checks_and_is_clean(tmp_path: Path) -> None:
    """mypy --strict, ruff check and ruff format over every block (fragments wrapped)."""
    blocks = [checked(i, example) for i, example in enumerate(EXAMPLES)]
    for block in blocks:
        (tmp_path / f"{block.module}.py").write_text(block.source, encoding="utf-8")
    files = sorted(p.name for p in tmp_path.glob("block_*.py"))
    config = str(ROOT / "pyproject.toml")
    ruff = [sys.executable, "-m", "ruff"]
    findings = [
        *_tool([*ruff, "check", "--config", config, "--no-cache", *files], tmp_path, blocks),
        *_tool(
            [*ruff, "format", "--config", config, "--no-cache", "--diff", *files], tmp_path, blocks
        ),
        *_tool(
            [
                sys.executable, "-m", "mypy", "--config-file", config,
                "--cache-dir", str(ROOT / ".mypy_cache"), "--no-error-summary", *files,
            ],
            tmp_path,
            blocks,
        ),
    ]  # fmt: skip
    assert findings == [], "\n\n".join(findings)


def test_the_reference_agent_guide_names_every_fault() -> None:
    """Its fault table is what users read: a fault added to the agent is added there."""
    from acpfsm.adapters.reference_agent import FAULTS

    page = (ROOT / "docs/guides/reference-agent.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `([a-z0-9_]+)(?:\[=[A-Z]+\])?` \|", page, re.MULTILINE))
    assert rows == set(FAULTS)


def test_the_charts_page_shows_every_chart() -> None:
    """The concepts page has each declared chart: a row of its table, a section and the
    chart's generated diagram (a chart added to the package is added there)."""
    from acpfsm.statecharts.charts import ALL_CHARTS

    page = (ROOT / "docs/concepts/charts.md").read_text(encoding="utf-8")
    sections = re.findall(r"^## ([a-z_]+)$", page, re.MULTILINE)
    assert sections == [ref.chart_name for ref in ALL_CHARTS]
    for name in sections:
        assert f"| [`{name}`](#{name}) |" in page, name
        assert f"![{name}](../diagrams/{name}.svg)" in page, name
        assert (ROOT / "diagrams" / f"{name}.svg").is_file(), name


def _resolve(dotted: str) -> object:
    """What a ``::: dotted.path`` directive of the API reference renders."""
    try:
        return importlib.import_module(dotted)
    except ImportError:
        module, _, name = dotted.rpartition(".")
        return getattr(_resolve(module), name)


@pytest.mark.parametrize("package", ["acpfsm.runtime", "acpfsm.runtime.store"])
def test_the_api_reference_has_every_public_name(package: str) -> None:
    """Each name of a public package's ``__all__`` is rendered by a ``:::`` directive of
    docs/reference/: its own, or that of the module whose ``__all__`` lists it."""
    pages = (ROOT / "docs/reference").glob("*.md")
    directives = {
        d for page in pages for d in re.findall(r"^::: (\S+)$", page.read_text(), re.MULTILINE)
    }
    rendered = [_resolve(d) for d in sorted(directives)]
    modules = [m for m in rendered if isinstance(m, types.ModuleType)]
    public = importlib.import_module(package)
    missing = [
        name
        for name in public.__all__
        if not any(getattr(public, name) is r for r in rendered)
        and not any(name in getattr(m, "__all__", ()) for m in modules)
    ]
    assert missing == [], f"{package}: not in the API reference: {missing}"


def test_readme_names_every_extra_a_user_installs() -> None:
    """Each optional dependency group of pyproject.toml but ours (test, mutation) is named in
    the README's install section, so a guide's feature never fails on a missing import."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    install = readme.split("## Install", 1)[1].split("\n## ", 1)[0]
    missing = [name for name in extras if name not in {"test", "mutation"}]
    missing = [name for name in missing if f"`{name}`" not in install]
    assert missing == []


def test_citations_of_readme_sections_name_its_headings() -> None:
    """A page or a docstring citing a section of the README ("the README's \"X\"", "the
    README, *X*") names a heading it has (the long README's sections moved to docs/)."""
    headings = set(re.findall(r"^#+ (.+)$", (ROOT / "README.md").read_text(), re.MULTILINE))
    cited = re.compile(r"README(?:'s|,)\s+[\"*]([^\"*]+)[\"*]")
    sources = [*DOCUMENTS[1:], ROOT / "CONTRIBUTING.md"]
    for package in ("statecharts", "runtime", "adapters"):
        sources += sorted((ROOT / package).rglob("*.py"))
    stale = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in sources
        for name in cited.findall(path.read_text(encoding="utf-8"))
        if " ".join(name.split()) not in headings
    ]
    assert stale == []


def test_readme_is_a_users_page() -> None:
    """Short, and nothing in it is true of one machine only."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) < 250
    assert re.findall(r"(?<![\w.~])/(?:work|tmp|root|home)/", text) == []
