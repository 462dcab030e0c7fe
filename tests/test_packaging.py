"""The distribution: one import package ``acpfsm`` with its three subpackages, typed, and no
top-level ``runtime``/``adapters``/``statecharts`` module; the README examples run."""

from __future__ import annotations

import re
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


def test_readme_example_runs(tmp_path: Path) -> None:
    """The API example in README.md, as written, against the reference agent."""
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.DOTALL)
    example = next(b for b in blocks if "Runtime()" in b)
    example = example.replace('WorkspaceRef(path="/tmp")', f"WorkspaceRef(path={str(tmp_path)!r})")
    for backend in ("asyncio", "trio"):
        code = example.replace("anyio.run(main)", f"anyio.run(main, backend={backend!r})")
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
        )
        assert proc.returncode == 0, proc.stderr
        # the turn's reply streamed as it came, its tool call, then its result
        assert 'Reference reply: "hello" (1 word).' in proc.stdout
        assert "[tool: Read the prompt]" in proc.stdout
        assert proc.stdout.splitlines()[-2:] == ["end_turn", "AgentReady"]


def _python_block(containing: str) -> str:
    readme = (ROOT / "README.md").read_text()
    return next(b for b in re.findall(r"```python\n(.*?)```", readme, re.DOTALL) if containing in b)


def test_readme_profile_and_executor_examples_run(tmp_path: Path) -> None:
    """ "Add a profile" and "Write an executor", as written: the executor runs the reference
    agent through a whole turn."""
    code = "\n".join(
        [
            _python_block("my_agent = AgentProfile("),
            "assert rt.profiles['my-agent'].inherit_env[0] == 'MY_AGENT_API_KEY'",
            _python_block("class NiceExecutor"),
            "import anyio",
            "from acpfsm.runtime import LaunchSpec, WorkspaceRef",
            "async def main():",
            "    async with Runtime(executors={'nice': NiceExecutor()}) as rt:",
            (
                "        ref = await rt.launch(LaunchSpec(agent_profile_id='reference', "
                f"executor_id='nice', workspace=WorkspaceRef(path={str(tmp_path)!r})))"
            ),
            "        print((await rt.prompt(ref.id, 'hi')).stop_reason)",
            "        await rt.stop(ref.id, 'done')",
            "anyio.run(main)",
        ]
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "end_turn"


def test_readme_mcp_tools_example_runs(tmp_path: Path) -> None:
    """ "Python tools for any agent (MCP)", as written: the reference agent calls the app's
    tool through the Runtime's MCP server and replies with its result (the example's stdio MCP
    server need not exist: the agent carries on without it)."""
    example = _python_block("lookup_ticket").replace(
        'WorkspaceRef(path="/tmp")', f"WorkspaceRef(path={str(tmp_path)!r})"
    )
    code = f"{example}\nimport anyio\nanyio.run(main)\n"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "Tool lookup_ticket returned: T-7: login fails on Safari (open)." in proc.stdout
