"""The ``acpfsm`` command line."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("acpfsm: not built yet", file=sys.stderr)
    return 2
