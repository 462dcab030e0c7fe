"""Mermaid ``stateDiagram-v2`` source of a chart (GitHub draws it inline)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from .model import (
    HEADER,
    ChartRef,
    Edge,
    Triple,
    ancestors,
    chart_class,
    children,
    edges,
    highlights,
    in_place_lines,
    initial_of,
    is_history,
    states_by_id,
    top_states,
)

__all__ = ["HL_FILL", "HL_STROKE", "render_mermaid"]

HL_FILL = "#fff3b0"
HL_STROKE = "#b8860b"


def _text(text: str) -> str:
    # ';' ends a Mermaid statement and '#' starts an entity code.
    return " ".join(text.split()).replace("#", "#35;").replace(";", "#59;")


def render_mermaid(
    chart: ChartRef,
    *,
    highlight_states: Collection[str] | None = None,
    highlight_transitions: Collection[Triple] | None = None,
    header: bool = True,
) -> str:
    """Mermaid ``stateDiagram-v2`` source of ``chart``.

    Highlighted states get the ``acpfsm_hl`` class; a highlighted transition's label is
    prefixed with ``✔`` (Mermaid state diagrams cannot style single arrows). Given a running
    machine, the default highlights its active states. Targetless transitions are listed in
    their state (an atomic state's description lines, a compound's note).
    """
    cls = chart_class(chart)
    hl_states, hl_transitions = highlights(chart, highlight_states, highlight_transitions)
    by_id = states_by_id(cls)
    notes = in_place_lines(cls, hl_transitions)
    scoped: dict[str | None, list[Edge]] = {}
    for edge in edges(cls):
        if edge.targetless:
            continue
        source = ancestors(by_id[edge.source])
        target = ancestors(by_id[edge.target])
        scope: str | None = None
        for a, b in zip(source, target, strict=False):
            if a != b:
                break
            scope = a
        scoped.setdefault(scope, []).append(edge)

    lines: list[str] = []
    if header:
        lines.append(f"%% {HEADER}")
    lines += ["stateDiagram-v2", "    direction LR"]

    def block(states: list[Any], scope: str | None, depth: int) -> None:
        pad = "    " * depth
        initial = initial_of(states)
        if initial is not None:
            lines.append(f"{pad}[*] --> {initial.id}")
        for state in states:
            sid = str(state.id)
            kids = children(state)
            if is_history(state):
                label = "H*" if "deep" in str(getattr(state, "type", "")).lower() else "H"
                lines.append(f'{pad}state "{label}" as {sid}')
            elif kids and state.parallel:
                lines.append(f"{pad}state {sid} {{")
                for i, region in enumerate(kids):
                    if i:
                        lines.append(f"{pad}    --")
                    lines.append(f"{pad}    state {region.id} {{")
                    block(children(region), str(region.id), depth + 2)
                    lines.append(f"{pad}    }}")
                lines.append(f"{pad}}}")
            elif kids:
                lines.append(f"{pad}state {sid} {{")
                block(kids, sid, depth + 1)
                lines.append(f"{pad}}}")
                if sid in notes:
                    lines.append(f"{pad}note right of {sid}")
                    lines.extend(f"{pad}    {_text(t)}" for t in notes[sid])
                    lines.append(f"{pad}end note")
            else:
                lines.append(f"{pad}{sid}")
                lines.extend(f"{pad}{sid} : {_text(t)}" for t in notes.get(sid, ()))
        for state in states:
            if state.final:
                lines.append(f"{pad}{state.id} --> [*]")
        for edge in scoped.get(scope, ()):
            label = _text(edge.label())
            if any(t in hl_transitions for t in edge.triples):
                label = f"✔ {label}"
            lines.append(f"{pad}{edge.source} --> {edge.target} : {label}")

    block(top_states(cls), None, 1)
    marked = [sid for sid in by_id if sid in hl_states]
    if marked:
        lines.append(f"    classDef acpfsm_hl fill:{HL_FILL},stroke:{HL_STROKE},stroke-width:2px")
        lines.append(f"    class {','.join(marked)} acpfsm_hl")
    return "\n".join(lines) + "\n"
