"""The distribution: one import package ``acpfsm`` with its three subpackages, typed, and no
top-level ``runtime``/``adapters``/``statecharts`` module. (The README's and the docs' examples
run in test_docs_examples.py.)"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.integration
def test_wheel_installs_only_the_acpfsm_package(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("acpfsm-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"acpfsm"}
    for sub in ("statecharts", "runtime", "adapters"):
        assert f"acpfsm/{sub}/__init__.py" in names
        assert f"acpfsm/{sub}/py.typed" in names
    assert "acpfsm/adapters/reference_agent/__main__.py" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "acpfsm = acpfsm.tools.cli:main" in text
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA")))
    # the SVG renderer is its own extra: `pip install 'acpfsm[diagrams]'`
    assert "Provides-Extra: diagrams" in metadata.decode()
    assert 'Requires-Dist: graphviz-pure>=0.2.2; extra == "diagrams"' in metadata.decode()
    assert "acpfsm/tools/report.py" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)  # MIT, as declared
    assert "License-Expression: MIT" in metadata.decode()
    assert "acpfsm/adapters/agentctl/local.py" in names
    # conform's official ACP schemas ship with the package, with their licence (never fetched)
    for data in ("v1/schema.json", "v2/schema.json", "LICENSE", "README.md"):
        assert f"acpfsm/tools/conform/acp_schema/{data}" in names
    assert "acpfsm/tools/conform/__init__.py" in names
    assert "Requires-Dist: jsonschema" in metadata.decode()
