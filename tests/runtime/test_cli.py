"""The ``acpfsm`` command line: ``--version`` and a description for every subcommand."""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys

import pytest

from acpfsm.tools import cli


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"acpfsm {importlib.metadata.version('acpfsm')}"


def test_every_subcommand_is_described() -> None:
    parser = cli._parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    names = set(commands.choices)
    assert names == {
        "diagrams",
        "chart-tables",
        "check-trace",
        "report",
        "conform",
        "verify",
        "agentctl",
        "serve",
        "demo",
    }
    helps = {action.dest: action.help for action in commands._choices_actions}
    for name, sub in commands.choices.items():
        assert sub.description and len(sub.description) > 40, name
        assert helps[name], name


def test_help_lists_each_subcommand_with_its_help() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "acpfsm.tools.cli", "--help"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    listed = [text.split()[0] for text in done.stdout.splitlines() if text.startswith("    ")]
    names = ("diagrams", "check-trace", "report", "conform", "verify", "agentctl", "serve", "demo")
    for name in names:
        assert name in listed, name
    assert "--version" in done.stdout
