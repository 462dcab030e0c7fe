"""Fixtures of the adapter tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace ``<tmp>/ws`` holding ``inside.txt`` ("inside"), next to ``<tmp>/outside.txt``
    ("OUTSIDE"): what a confined file operation may and may not reach."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "inside.txt").write_text("inside\n")
    (tmp_path / "outside.txt").write_text("OUTSIDE\n")
    return root
