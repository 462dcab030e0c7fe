"""The layers import downwards only: statecharts ← adapters ← runtime core ← runtime tools.

* ``acpfsm.statecharts`` imports nothing of the adapters, the runtime or the tools;
* ``acpfsm.adapters`` imports nothing of the runtime (executors get an ``AgentLaunch``);
* the runtime core (``runtime/`` outside ``runtime/tools`` and ``runtime/testing``) imports
  nothing of the tools (``acpfsm.tools``, in runtime/tools), nor of the pytest plugin.

Read from the source (every ``import``/``from … import``, relative ones resolved), so an import
hidden inside a function counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = {
    "statecharts": "acpfsm.statecharts",
    "adapters": "acpfsm.adapters",
    "runtime": "acpfsm.runtime",
}


def _module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[0] == "tests":
        pass
    elif parts[:2] in (["runtime", "testing"], ["runtime", "tools"]):
        parts = ["acpfsm", parts[1], *parts[2:]]
    else:
        parts = [PACKAGES[parts[0]].split(".")[1], *parts[1:]]
        parts.insert(0, "acpfsm")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, tree: ast.AST | None = None) -> set[str]:
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out: set[str] = set()
    if tree is None:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            out.add(name)
            out.update(f"{name}.{alias.name}" for alias in node.names)
    return out


def _files(folder: str) -> list[Path]:
    return sorted((REPO / folder).rglob("*.py"))


def _violations(files: list[Path], forbidden: tuple[str, ...]) -> list[str]:
    bad = []
    for path in files:
        for name in sorted(_imports(path)):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                bad.append(f"{path.relative_to(REPO)} imports {name}")
    return bad


def test_statecharts_import_nothing_above_them() -> None:
    forbidden = ("acpfsm.adapters", "acpfsm.runtime", "acpfsm.testing")
    assert _violations(_files("statecharts"), forbidden) == []


def test_adapters_import_nothing_of_the_runtime() -> None:
    assert _violations(_files("adapters"), ("acpfsm.runtime", "acpfsm.testing")) == []


def test_runtime_core_imports_no_tool() -> None:
    core = [
        p
        for p in _files("runtime")
        if not p.relative_to(REPO / "runtime").parts[0] in ("tools", "testing")
    ]
    assert core, "no runtime core modules found"
    assert _violations(core, ("acpfsm.tools", "acpfsm.testing")) == []


def test_nothing_imports_the_tools_through_the_runtime() -> None:
    """The tools are ``acpfsm.tools`` (runtime/tools), not a subpackage of the runtime: the
    old name ``acpfsm.runtime.tools`` must not come back anywhere."""
    files = _files("runtime") + _files("adapters") + _files("statecharts") + _files("tests")
    assert _violations(files, ("acpfsm.runtime.tools",)) == []


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("runtime/tools/cli.py", "acpfsm.tools.cli"),
        ("runtime/testing/plugin.py", "acpfsm.testing.plugin"),
        ("adapters/acp/__init__.py", "acpfsm.adapters.acp"),
    ],
)
def test_module_names_are_resolved(path: str, expected: str) -> None:
    """The checker itself: files map to the module names the package installs."""
    assert _module_name(REPO / path) == expected


def test_relative_imports_are_resolved() -> None:
    """``from ..errors import X`` inside adapters/acp/ is acpfsm.adapters.errors."""
    names = _imports(REPO / "adapters/acp/executor.py")
    assert "acpfsm.adapters.errors.LaunchSpecError" in names
    assert "acpfsm.adapters.acp.process" in names


DRIVER_LIMIT = 400
"""No driver module in runtime/session/ grows past this many lines: split it by
responsibility instead (one chart, one flow, one side of the shell per module)."""


def test_no_session_driver_is_over_the_limit() -> None:
    sizes = {
        str(p.relative_to(REPO)): len(p.read_text(encoding="utf-8").splitlines())
        for p in _files("runtime/session")
    }
    assert sizes, "no session modules found"
    over = {path: n for path, n in sizes.items() if n > DRIVER_LIMIT}
    assert over == {}, f"split these by responsibility (limit {DRIVER_LIMIT} lines): {over}"


def _runtime_imports(path: Path) -> set[str]:
    """The modules ``path`` imports when it runs: those of ``if TYPE_CHECKING:`` blocks
    (annotations only) are left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        for field in ("body", "orelse"):
            block = getattr(node, field, None)
            if isinstance(block, list):
                setattr(node, field, [n for n in block if not _type_checking(n)])
    return _imports(path, tree)


def _type_checking(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
    )


def test_session_modules_import_no_cycle() -> None:
    """Within runtime/session/ the modules import each other without a cycle (a split must
    not tie them back together; annotation-only imports do not count)."""
    package = "acpfsm.runtime.session"
    graph: dict[str, set[str]] = {}
    for path in _files("runtime/session"):
        name = _module_name(path)
        graph[name] = {
            i for i in _runtime_imports(path) if i.startswith(package + ".") and i.count(".") == 3
        } - {name}
    state: dict[str, int] = {}

    def visit(node: str, trail: tuple[str, ...]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                raise AssertionError(" -> ".join((*trail, node, nxt)))
            if nxt not in state:
                visit(nxt, (*trail, node))
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, ())


MODULE_LIMIT = 700
CLASS_LIMIT = 400
SIZED = ("adapters", "statecharts")
"""The folders held to the module and class limits (the others are being split meanwhile)."""
OVERSIZED_FOR_NOW: dict[str, str] = {}
"""Modules allowed over the limit until their split lands; an entry within the limit fails
(remove it)."""
GENERATED = ("statecharts/_generated.py",)
"""Generated modules (the chart declarations as data): their size is the charts'."""


def _sizes(folders: tuple[str, ...]) -> tuple[dict[str, int], dict[str, int]]:
    modules: dict[str, int] = {}
    classes: dict[str, int] = {}
    for folder in folders:
        for path in _files(folder):
            text = path.read_text(encoding="utf-8")
            rel = str(path.relative_to(REPO))
            if rel in GENERATED:
                continue
            modules[rel] = len(text.splitlines())
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.ClassDef):
                    assert node.end_lineno is not None
                    classes[f"{rel}:{node.name}"] = node.end_lineno - node.lineno + 1
    return modules, classes


def test_no_module_over_700_lines_and_no_class_over_400() -> None:
    """Split by responsibility (a transport's sides as mixins over one declared state, a
    module's system calls apart from its policy …) rather than let a module or a class grow."""
    modules, classes = _sizes(SIZED)
    assert modules and classes
    over = {p: n for p, n in modules.items() if n > MODULE_LIMIT and p not in OVERSIZED_FOR_NOW}
    assert over == {}, f"split these modules (limit {MODULE_LIMIT} lines): {over}"
    big = {c: n for c, n in classes.items() if n > CLASS_LIMIT}
    assert big == {}, f"split these classes (limit {CLASS_LIMIT} lines): {big}"
    settled = [p for p in OVERSIZED_FOR_NOW if modules.get(p, 0) <= MODULE_LIMIT]
    assert settled == [], f"within the limit now: remove from OVERSIZED_FOR_NOW: {settled}"


def test_the_size_check_counts_lines_and_classes() -> None:
    """The checker itself, on a module it did not write."""
    module = REPO / "adapters" / "errors.py"
    modules, classes = _sizes(("adapters",))
    assert modules["adapters/errors.py"] == len(module.read_text().splitlines())
    assert classes["adapters/errors.py:AgentRequestError"] > 10
