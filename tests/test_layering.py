"""The layers import downwards only: statecharts ← adapters ← runtime core ← runtime tools.

* ``acpfsm.statecharts`` imports nothing of the adapters, the runtime or the tools;
* ``acpfsm.adapters`` imports nothing of the runtime (executors get an ``AgentLaunch``);
* the runtime core (``runtime/`` outside ``runtime/tools`` and ``runtime/testing``) imports
  nothing of the tools, nor of the pytest plugin.

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
    if parts[:2] == ["runtime", "testing"]:
        parts = ["acpfsm", "testing", *parts[2:]]
    else:
        parts = [PACKAGES[parts[0]].split(".")[1], *parts[1:]]
        parts.insert(0, "acpfsm")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
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
    assert _violations(core, ("acpfsm.runtime.tools", "acpfsm.testing")) == []


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("runtime/tools/cli.py", "acpfsm.runtime.tools.cli"),
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
