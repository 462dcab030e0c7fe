"""Broken copies for ``acpfsm verify``'s tests: a flow table with a step replaced, a chart
with its declaration edited; neither touches the shipped ones."""

from __future__ import annotations

import dataclasses
import importlib.abc
import importlib.util
import inspect
import itertools
import sys
from pathlib import Path
from typing import cast

from acpfsm.statecharts import Chart
from acpfsm.statecharts.flows import FLOWS, Flow, Step

__all__ = ["seeded_copy", "seeded_flows"]


_copies = itertools.count()


def seeded_flows(name: str, **steps: Step) -> dict[str, Flow]:
    """A copy of the flow table with flow ``name``'s steps replaced (label → step): a flow
    with a seeded bug, for showing that ``acpfsm verify`` catches it (pass it in
    ``verify(flows=…)``). The table itself is not touched."""
    flow = FLOWS[name]
    unknown = set(steps) - set(flow.steps)
    if unknown:
        raise ValueError(f"flow {name} has no steps {sorted(unknown)}")
    copy = dataclasses.replace(flow, steps={**flow.steps, **steps})
    return {**FLOWS, name: copy}


def seeded_copy(chart: type[Chart], *edits: tuple[str, str]) -> type[Chart]:
    """A copy of ``chart``'s declaration with ``edits`` applied to its source (each
    ``(old, new)``: ``old`` must occur exactly once), loaded as a module of its own: a chart
    with a seeded bug, for showing that ``acpfsm verify`` catches it (pass it in
    ``verify(charts=…)``). The chart itself is not touched."""
    module = sys.modules[chart.__module__]
    path = inspect.getsourcefile(module)
    if path is None:  # pragma: no cover - a chart always has its source
        raise ValueError(f"{chart.__qualname__}: no source to copy")
    source = Path(path).read_text(encoding="utf-8")
    for old, new in edits:
        if source.count(old) != 1:
            raise ValueError(f"{chart.__qualname__}: {old!r} occurs {source.count(old)} times")
        source = source.replace(old, new)
    name = f"{module.__name__}_seeded{next(_copies)}"
    spec = importlib.util.spec_from_loader(name, _Source(path, source), origin=path)
    assert spec is not None and spec.loader is not None
    copy = importlib.util.module_from_spec(spec)
    sys.modules[name] = copy  # the chart's class machinery looks its module up
    spec.loader.exec_module(copy)
    return cast(type[Chart], getattr(copy, chart.__name__))


class _Source(importlib.abc.SourceLoader):
    """Loads a module from source text held in memory (a seeded copy of a chart)."""

    def __init__(self, path: str, source: str) -> None:
        self.path = path
        self.source = source

    def get_filename(self, fullname: str) -> str:
        return self.path

    def get_data(self, path: str) -> bytes:
        return self.source.encode()
