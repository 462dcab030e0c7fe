"""mkdocs hooks for the documentation site (mkdocs.yml names this file).

The chart diagrams are generated into ``diagrams/`` at the top of the repository (``make
diagrams``) and checked for drift there; the site serves that folder as it is, under
``diagrams/``, instead of keeping a copy in ``docs/`` that could drift.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files, InclusionLevel

ROOT = Path(__file__).resolve().parents[1]
DIAGRAMS = ROOT / "diagrams"


def on_files(files: Files, config: Any) -> Files:
    for path in sorted(DIAGRAMS.iterdir()):
        if path.is_file():
            file = File(
                f"diagrams/{path.name}",
                src_dir=str(ROOT),
                dest_dir=config["site_dir"],
                use_directory_urls=config["use_directory_urls"],
            )
            if path.name != "README.md":  # the index is in the nav, each chart's table is not
                file.inclusion = InclusionLevel.NOT_IN_NAV
            files.append(file)
    return files


def on_serve(server: Any, config: Any, builder: Any) -> Any:
    server.watch(str(DIAGRAMS))  # `mkdocs serve` rebuilds when `make diagrams` rewrites them
    return server
