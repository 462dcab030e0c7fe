"""``acpfsm check-trace``: replay a recorded trace against the declared charts.

Theory of operation
-------------------
A trace (:mod:`acpfsm.runtime.trace`) is the list of transitions every chart instance fired.
The checker replays it without python-statemachine (whose engine costs ~300 µs per event):
each chart class is *compiled* once into plain dicts, and the replay is one dict lookup per
record, so a trace of a million records checks in a few seconds.

Compilation (:func:`compile_chart`). The charts have compound states but no parallel
regions, so a chart's configuration is fully described by its innermost active state (its
*leaf*): the configuration is the leaf and its ancestors. For every leaf ``L`` and every
declared transition ``(S, e, T)`` whose source ``S`` is ``L`` or an ancestor of it, the
compiler stores ``step[(L, e, S, T)] = L'`` (the leaf after the transition: ``T`` entered
through its initial children, or ``L`` unchanged for a targetless or internal
self-transition). A transition that can never be selected from ``L`` is left out: one whose
event is taken, unguarded, by a state nearer the leaf, or by an earlier unguarded transition
of ``S`` (SCXML's selection order, which python-statemachine follows). Guards are not
evaluated: a record says which branch was taken, the checker verifies the branch existed.

Replay. Chart instances are keyed by ``(execution_id, chart, generation, instance)`` and
start in their chart's initial configuration (an instance fires no record when created).
A record is legal when ``step`` has ``(leaf, event, source, target)``; otherwise the checker
names what is wrong, then adopts the record's target (when it is a state of the chart) so a
bad record costs a violation or two, not one for every later record of that instance.

Violations (``Violation.kind``)
    ``sequence``
        ``seq`` is not the previous ``seq`` + 1 (nor, after a step back, the highest ``seq``
        so far + 1, nor a restart at 1: a new :class:`Trace` appending to the same file): a
        record was dropped, duplicated or moved.
    ``unknown_chart`` / ``unknown_event`` / ``unknown_state``
        a name the charts do not declare.
    ``source_mismatch``
        the record leaves a state the instance is not in (the previous records reached
        another one): typically a dropped or reordered record.
    ``illegal_transition``
        the chart declares no such transition from the current configuration (or declares
        it but it can never be selected there).
    ``second_outcome``
        a prompt generation entered a terminal outcome (a state it can only leave to
        ``superseded``: completed, failed, undelivered, cancel_escalated, withdrawn) although
        it had one already.
    ``steer_not_live``
        ``steered`` for a generation that is not in ``dispatched`` (dispatched and live).
    ``completion_before_dispatch``
        a completion claim (``completion_received``, ``handoff_received``) for a generation
        that the trace has not admitted yet (see below).
    ``generation_not_admitted``
        any other ``prompt_generation`` record for a generation not admitted yet.
    ``not_superseded``
        generation *n* was admitted while generation *n* − 1 was not ``superseded``.
    ``superseded_changed``
        a record for a superseded generation that is not a self-transition (the chart
        declares only self-transitions there: late events are ignored, never acted upon).
    ``end_state``
        at the end of the trace an execution's ``execution`` chart is not in a final state
        (``STOPPED``), or an ended execution left its ``session_init`` chart in a working
        state or its ``agent_stream`` live (connecting, connected, reconnecting). An
        execution the Runtime left running on purpose (its ``durable_record`` chart
        ``detached``: the app exited with a store, the next start recovers it) need not
        have ended; one recovered from a store (a ``startup_recovery`` record, whose
        ``generation`` is the stored reservation) numbers its generations past it.

The completion-before-dispatch rule. The PromptGeneration chart *declares* a completion
claimed before dispatch (``sending --completion_received--> completed``, lifecycle race R23:
the agent answered before MarkPromptDispatched ran; the late ``dispatch_accepted`` is then an
ignored self-transition), so that shape alone is legal and a correct runtime produces it.
What a correct runtime can never produce is a claim for a generation that does not exist
yet. A generation is *admitted* by BeginPrompt, which the trace shows as the Execution
chart's ``prompt_began`` record (fired once per admission, right after the predecessor's
``superseded_by_successor``, before any record of the new generation): the *n*-th
``prompt_began`` of an execution admits generation *n*. A completion claim recorded for a
generation *g* before the *g*-th ``prompt_began`` of its execution is the violation.

End states. An execution *ends* when its ``execution`` chart enters a final state. A
complete trace (the Runtime was closed: it stops every execution) must end every execution;
an ended execution must have left ``session_init``'s working states (``init_abandoned``
exists for a stop during init) and its ``agent_stream`` must not be live (``closed``, or
``disconnected`` when the carrier was lost before the stop). Charts whose runs may be
cut short by a stop without a declared way out (``start_model_policy`` during its one
SetModel call, ``prompt_generation``) carry no end condition; ``unfinished=True``
(``--unfinished``) accepts an execution that was not stopped (an ``acpfsm verify``
counterexample stops where the property failed). ``partial=True``
(``--partial``) checks a trace cut out of a longer or still running one: ``seq`` may start
anywhere, an instance's first record sets its state, and the admission and end-state rules
are skipped.

``time`` is informational and not checked (it is the event loop's clock, which a test's
virtual clock may move freely).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from acpfsm.adapters.errors import UNDECODABLE_JSON, AcpfsmError
from acpfsm.runtime.trace import TraceRecord
from acpfsm.statecharts import Chart, ChartDefinitionError, CompiledChart

__all__ = [
    "CheckResult",
    "CompiledChart",
    "LifecycleRules",
    "TraceFormatError",
    "Violation",
    "check_file",
    "check_records",
    "compile_chart",
    "compiled_charts",
    "iter_trace",
    "main",
    "read_trace",
]

Key = tuple[str, str, int, int]
"""``(execution_id, chart, generation, instance)``: one chart instance."""


class TraceFormatError(AcpfsmError):
    """The trace file cannot be read or a line is not a trace record (exit status 2)."""

    def __init__(self, message: str, *, path: str = "", line: int = 0) -> None:
        where = f"{path}:{line}: " if line else (f"{path}: " if path else "")
        super().__init__(f"{where}{message}")
        self.path = path
        self.line = line
        self.reason = message


class Violation(msgspec.Struct, frozen=True, kw_only=True):
    """One violation: the 1-based line (record number for in-memory records), what, where."""

    line: int
    kind: str
    message: str
    seq: int = 0
    execution_id: str = ""
    chart: str = ""
    generation: int = 0
    instance: int = 0
    event: str = ""
    source: str = ""
    target: str = ""


@dataclass(frozen=True, slots=True)
class CheckResult:
    records: int
    executions: int
    violations: tuple[Violation, ...]

    @property
    def ok(self) -> bool:
        return not self.violations


# --------------------------------------------------------------------------- compilation

ChartCompileError = ChartDefinitionError
"""A chart uses a feature the compiled engine does not model (raised when it compiles)."""


def compile_chart(chart: type[Chart]) -> CompiledChart:
    """The chart's compiled tables: the same compiler the engine runs on
    (:mod:`acpfsm.statecharts._compile`); ``step`` is what the replay looks up."""
    return chart.compiled()


def compiled_charts(charts: Iterable[type[Chart]] | None = None) -> dict[str, CompiledChart]:
    """Compile ``charts`` (default: ``acpfsm.statecharts.ALL_CHARTS``) by chart name."""
    if charts is None:
        from acpfsm.statecharts import ALL_CHARTS

        charts = ALL_CHARTS
    return {c.chart_name: compile_chart(c) for c in charts}


@dataclass(frozen=True, slots=True)
class LifecycleRules:
    """The names the lifecycle-specific rules read (see the module docstring)."""

    generation_chart: str = "prompt_generation"
    execution_chart: str = "execution"
    admission_event: str = "prompt_began"
    superseded_state: str = "superseded"
    live_state: str = "dispatched"
    steer_event: str = "steered"
    claim_events: frozenset[str] = frozenset({"completion_received", "handoff_received"})
    end_states: tuple[tuple[str, frozenset[str]], ...] = (
        ("execution", frozenset()),
        ("session_init", frozenset({"admitted", "ready", "resume_context_pending"})),
        ("agent_stream", frozenset({"disconnected"})),
    )
    """Charts whose instances must be at rest once their execution ended: in a final state
    of the chart or one of the states listed (a lost stream that was never closed is
    ``disconnected``: nothing is live, so that is at rest too)."""
    detached: tuple[str, str] = ("durable_record", "detached")
    """The chart and state of an execution left running on purpose (need not have ended)."""
    recovery_chart: str = "startup_recovery"
    """A record of it (its ``generation``: the stored reservation) says the execution was
    recovered from a store: its prompts are numbered past the reservation."""


DEFAULT_RULES = LifecycleRules()


# --------------------------------------------------------------------------- replay


@dataclass(slots=True)
class _Replay:
    charts: dict[str, CompiledChart]
    rules: LifecycleRules
    partial: bool
    unfinished: bool = False
    leaf: dict[Key, str] = field(default_factory=dict)
    admitted: dict[str, int] = field(default_factory=dict)
    base: dict[str, int] = field(default_factory=dict)
    """A recovered execution's first generation, less one (its stored reservation)."""
    outcome_line: dict[Key, int] = field(default_factory=dict)
    ended: dict[str, int] = field(default_factory=dict)
    executions: set[str] = field(default_factory=set)
    violations: list[Violation] = field(default_factory=list)
    top_seq: int = 0
    """The highest ``seq`` since the last restart at 1 (-1: not known yet, partial)."""
    prev_seq: int = 0
    """The previous record's ``seq``."""
    count: int = 0
    outcomes: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.partial:
            self.top_seq = self.prev_seq = -1
        gen = self.charts.get(self.rules.generation_chart)
        self.outcomes = (
            gen.absorbing_states(self.rules.superseded_state) if gen is not None else frozenset()
        )

    def _flag(self, line: int, kind: str, message: str, rec: TraceRecord) -> None:
        self.violations.append(
            Violation(
                line=line,
                kind=kind,
                message=message,
                seq=rec.seq,
                execution_id=rec.execution_id,
                chart=rec.chart,
                generation=rec.generation,
                instance=rec.instance,
                event=rec.event,
                source=rec.source,
                target=rec.target,
            )
        )

    @staticmethod
    def _who(rec: TraceRecord) -> str:
        gen = f" #{rec.generation}" if rec.generation else ""
        inst = f" (instance {rec.instance})" if rec.instance else ""
        return f"{rec.chart}{gen}{inst} of execution {rec.execution_id}"

    def feed(self, lines: Iterable[int], records: Iterable[TraceRecord]) -> None:
        """Replay ``records`` (``lines`` are their line numbers). The loop is the hot path:
        a record of a chart without lifecycle rules that the step table accepts costs a few
        dict lookups; everything else goes through :meth:`_slow`."""
        charts_get = self.charts.get
        leaves = self.leaf
        leaf_get = leaves.get
        executions = self.executions
        generation_chart = self.rules.generation_chart
        execution_chart = self.rules.execution_chart
        recovery_chart = self.rules.recovery_chart
        top = self.top_seq
        prev = self.prev_seq
        count = 0
        for line, rec in zip(lines, records, strict=True):
            count += 1
            seq = rec.seq
            if seq == top + 1 and prev == top:
                prev = top = seq
            else:
                prev, top = self._sequence(rec, line, prev, top)
            name = rec.chart
            executions.add(rec.execution_id)
            chart = charts_get(name)
            if chart is None:
                self._flag(line, "unknown_chart", f"unknown chart {name!r}", rec)
                continue
            key = (rec.execution_id, name, rec.generation, rec.instance)
            leaf = leaf_get(key)
            if leaf is None:
                leaf = chart.initial
                if self.partial and rec.source in chart.states:
                    leaf = chart.default_leaf[rec.source]
            after = chart.step.get((leaf, rec.event, rec.source, rec.target))
            if after is None or name in (generation_chart, execution_chart, recovery_chart):
                self._slow(rec, line, chart, key, leaf, after)
            else:
                leaves[key] = after
        self.top_seq = top
        self.prev_seq = prev
        self.count += count

    def _sequence(self, rec: TraceRecord, line: int, prev: int, top: int) -> tuple[int, int]:
        """A ``seq`` that is not the plain next one; returns the new ``(prev, top)``. After a
        step back (a swap, a duplicate) both ``prev + 1`` and ``top + 1`` continue cleanly."""
        seq = rec.seq
        if top < 0:  # partial: the first record sets it
            return seq, seq
        if seq == prev + 1 or seq == top + 1:
            return seq, max(seq, top)
        if top == 0:
            self._flag(line, "sequence", f"the first record has seq {seq}, not 1", rec)
        elif seq == 1:
            return 1, 1  # a new Trace appended to the same file
        elif seq > top:
            missing = (
                f"record {top + 1} is missing"
                if seq == top + 2
                else f"records {top + 1}..{seq - 1} are missing"
            )
            self._flag(line, "sequence", f"seq {seq} follows seq {prev}: {missing}", rec)
        else:
            self._flag(
                line,
                "sequence",
                f"seq {seq} after seq {prev}: a record is duplicated or out of order",
                rec,
            )
        return seq, max(seq, top)

    def _slow(
        self,
        rec: TraceRecord,
        line: int,
        chart: CompiledChart,
        key: Key,
        leaf: str,
        after: str | None,
    ) -> None:
        rules = self.rules
        flagged = False
        if rec.chart == rules.generation_chart:
            flagged = self._generation_rules(rec, line, chart, key, leaf, after)
        elif rec.chart == rules.execution_chart and rec.event == rules.admission_event:
            self._admission(rec, line)
        elif rec.chart == rules.recovery_chart and rec.generation:
            base = max(self.admitted.get(rec.execution_id, 0), rec.generation)
            self.admitted[rec.execution_id] = self.base[rec.execution_id] = base
        if after is None:
            if not flagged:
                self._diagnose(rec, line, chart, leaf)
            after = chart.default_leaf[rec.target] if rec.target in chart.states else leaf
        self.leaf[key] = after
        if (
            rec.chart == rules.execution_chart
            and after in chart.final
            and rec.execution_id not in self.ended
        ):
            self.ended[rec.execution_id] = line

    def _admission(self, rec: TraceRecord, line: int) -> None:
        n = self.admitted.get(rec.execution_id, 0) + 1
        self.admitted[rec.execution_id] = n
        if self.partial or n < 2 or n - 1 <= self.base.get(rec.execution_id, 0):
            return
        rules = self.rules
        gen = self.charts.get(rules.generation_chart)
        if gen is None:
            return
        prev_key = (rec.execution_id, rules.generation_chart, n - 1, 0)
        prev_leaf = self.leaf.get(prev_key, gen.initial)
        if rules.superseded_state not in gen.configuration(prev_leaf):
            self._flag(
                line,
                "not_superseded",
                f"generation {n} of execution {rec.execution_id} was admitted while "
                f"generation {n - 1} is in {gen.path(prev_leaf)}, not "
                f"{rules.superseded_state} (no superseded_by_successor before the admission)",
                rec,
            )

    def _generation_rules(
        self,
        rec: TraceRecord,
        line: int,
        chart: CompiledChart,
        key: Key,
        leaf: str,
        after: str | None,
    ) -> bool:
        """The prompt-generation rules; True when a violation was reported for ``rec``."""
        rules = self.rules
        if not self.partial and rec.generation > self.admitted.get(rec.execution_id, 0):
            admitted = self.admitted.get(rec.execution_id, 0)
            if rec.event in rules.claim_events:
                self._flag(
                    line,
                    "completion_before_dispatch",
                    f"{rec.event} claimed for generation {rec.generation} of execution "
                    f"{rec.execution_id}, which was never admitted (only {admitted} "
                    f"{rules.admission_event} so far)",
                    rec,
                )
            else:
                self._flag(
                    line,
                    "generation_not_admitted",
                    f"{rec.event} for generation {rec.generation} of execution "
                    f"{rec.execution_id} before its admission (only {admitted} "
                    f"{rules.admission_event} so far)",
                    rec,
                )
            return True
        config = chart.configuration(leaf)
        if rules.superseded_state in config and rec.source != rec.target:
            self._flag(
                line,
                "superseded_changed",
                f"{rec.event} changed {self._who(rec)} ({rec.source} → {rec.target}) after it "
                f"was superseded: a late event may only be ignored",
                rec,
            )
            return True
        if rec.event == rules.steer_event and rules.live_state not in config:
            self._flag(
                line,
                "steer_not_live",
                f"steer into {self._who(rec)} while it is {chart.path(leaf)}, "
                f"not {rules.live_state} and live",
                rec,
            )
            return True
        if rec.target in self.outcomes and rec.source != rec.target:
            first = self.outcome_line.get(key)
            if first is not None:
                self._flag(
                    line,
                    "second_outcome",
                    f"{self._who(rec)} enters a second terminal outcome ({rec.target}); "
                    f"its first outcome was recorded on line {first}",
                    rec,
                )
                return True
            if after is not None or rec.target in chart.states:
                self.outcome_line[key] = line
        return False

    def _diagnose(self, rec: TraceRecord, line: int, chart: CompiledChart, leaf: str) -> None:
        who = self._who(rec)
        if rec.event not in chart.events:
            self._flag(line, "unknown_event", f"{rec.chart} declares no event {rec.event!r}", rec)
            return
        for name in (rec.source, rec.target):
            if name not in chart.states:
                self._flag(line, "unknown_state", f"{rec.chart} has no state {name!r}", rec)
                return
        if rec.source not in chart.configuration(leaf):
            self._flag(
                line,
                "source_mismatch",
                f"{rec.event} leaves {rec.source}, but the previous records left {who} in "
                f"{chart.path(leaf)}",
                rec,
            )
            return
        if (rec.source, rec.event, rec.target) in chart.declared:
            why = "is declared but can never be selected there (an earlier transition takes it)"
        else:
            why = "is not declared"
        self._flag(
            line,
            "illegal_transition",
            f"{who} in {chart.path(leaf)}: {rec.source} --{rec.event}--> {rec.target} {why}",
            rec,
        )

    def result(self, last_line: int) -> CheckResult:
        self._finish(last_line)
        ordered = sorted(self.violations, key=lambda v: v.line)
        return CheckResult(self.count, len(self.executions), tuple(ordered))

    def _finish(self, last_line: int) -> None:
        if self.partial:
            return
        rules = self.rules
        at_rest = {
            name: extra | self.charts[name].final
            for name, extra in rules.end_states
            if name in self.charts
        }
        left_running = {
            key[0] for key, leaf in self.leaf.items() if (key[1], leaf) == rules.detached
        }
        for (execution_id, name, generation, instance), leaf in self.leaf.items():
            allowed = at_rest.get(name)
            if allowed is None or leaf in allowed or execution_id in left_running:
                continue
            if name != rules.execution_chart and execution_id not in self.ended:
                continue  # reported once, for the execution chart
            if name == rules.execution_chart and self.unfinished:
                continue  # the trace stops before its executions were stopped
            chart = self.charts[name]
            finals = ", ".join(sorted(allowed))
            if name == rules.execution_chart:
                message = (
                    f"execution {execution_id} ends in {chart.path(leaf)}, not a final state "
                    f"of chart {name} ({finals}): the trace ends before it was stopped"
                )
            else:
                which = f" (instance {instance})" if instance else ""
                message = (
                    f"execution {execution_id} ended (line {self.ended[execution_id]}) but its "
                    f"{name} chart{which} is still in {chart.path(leaf)}, not at rest "
                    f"({finals})"
                )
            self.violations.append(
                Violation(
                    line=last_line,
                    kind="end_state",
                    message=message,
                    execution_id=execution_id,
                    chart=name,
                    generation=generation,
                    instance=instance,
                    source=leaf,
                    target=leaf,
                )
            )


def check_records(
    records: Iterable[TraceRecord],
    *,
    partial: bool = False,
    unfinished: bool = False,
    charts: dict[str, CompiledChart] | None = None,
    rules: LifecycleRules = DEFAULT_RULES,
    lines: Sequence[int] | None = None,
) -> CheckResult:
    """Replay ``records`` (in order). A violation's ``line`` is ``lines[i]`` for the *i*-th
    record when given, else its 1-based position."""
    replay = _Replay(
        charts if charts is not None else _default_charts(), rules, partial, unfinished
    )
    items = list(records)
    numbers: Sequence[int] = lines if lines is not None else range(1, len(items) + 1)
    replay.feed(numbers, items)
    last = numbers[-1] if len(numbers) else 0
    return replay.result(last)


_CHARTS: dict[str, CompiledChart] | None = None


def _default_charts() -> dict[str, CompiledChart]:
    global _CHARTS
    if _CHARTS is None:
        _CHARTS = compiled_charts()
    return _CHARTS


# --------------------------------------------------------------------------- reading

_list_decoder = msgspec.json.Decoder(list[TraceRecord])
_record_decoder = msgspec.json.Decoder(TraceRecord)


_CHUNK = 1 << 20


def _decode_chunk(chunk: bytes, before: int, name: str) -> tuple[Sequence[int], list[TraceRecord]]:
    """Decode the whole lines in ``chunk`` (``before`` lines precede it in the file)."""
    body = chunk.rstrip(b"\r\n")
    if body and b"\n\n" not in body and not body[:1].isspace():
        # one decoder call for the chunk: no blank line, so record i is on line before + i
        try:
            records = _list_decoder.decode(b"[" + body.replace(b"\n", b",") + b"]")
        except UNDECODABLE_JSON:
            pass
        else:
            if len(records) == body.count(b"\n") + 1:
                return range(before + 1, before + 1 + len(records)), records
    numbers: list[int] = []
    records = []
    for i, line in enumerate(chunk.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            records.append(_record_decoder.decode(line))
        except UNDECODABLE_JSON as exc:
            raise TraceFormatError(
                f"not a trace record: {exc}", path=name, line=before + i
            ) from None
        numbers.append(before + i)
    return numbers, records


def iter_trace(path: str | Path) -> Iterator[tuple[Sequence[int], list[TraceRecord]]]:
    """The records of a JSONL trace in chunks of ``(line numbers, records)``, read 1 MiB at
    a time (blank lines are skipped). Raises :class:`TraceFormatError` naming the first
    malformed line."""
    name = str(path)
    try:
        stream = Path(path).open("rb")  # noqa: SIM115 - closed by the with block below
    except OSError as exc:
        raise TraceFormatError(f"cannot read trace: {exc.strerror or exc}", path=name) from None
    with stream:
        before = 0
        rest = b""
        while True:
            try:
                block = stream.read(_CHUNK)
            except OSError as exc:
                raise TraceFormatError(
                    f"cannot read trace: {exc.strerror or exc}", path=name
                ) from None
            if block:
                data = rest + block
                cut = data.rfind(b"\n") + 1
                if cut == 0:
                    rest = data
                    continue
                chunk, rest = data[:cut], data[cut:]
            else:
                chunk, rest = rest, b""
            if chunk:
                yield _decode_chunk(chunk, before, name)
                before += chunk.count(b"\n")
            if not block:
                return


def read_trace(path: str | Path) -> tuple[list[TraceRecord], list[int]]:
    """All records of a JSONL trace and the line number of each (see :func:`iter_trace`)."""
    records: list[TraceRecord] = []
    numbers: list[int] = []
    for lines, chunk in iter_trace(path):
        records += chunk
        numbers += lines
    return records, numbers


def check_file(path: str | Path, *, partial: bool = False, unfinished: bool = False) -> CheckResult:
    """Check a JSONL trace file, streamed (memory holds one chunk and the replay state)."""
    replay = _Replay(_default_charts(), DEFAULT_RULES, partial, unfinished)
    last = 0
    for lines, records in iter_trace(path):
        replay.feed(lines, records)
        if len(lines):
            last = lines[-1]
    return replay.result(last)


# --------------------------------------------------------------------------- CLI


def render_text(path: str, result: CheckResult) -> str:
    lines = [f"{path}:{v.line}: {v.kind}: {v.message}" for v in result.violations]
    if result.ok:
        lines.append(
            f"{path}: OK: {result.records} records, {result.executions} executions, no violations"
        )
    else:
        lines.append(
            f"{path}: {len(result.violations)} violation(s) in {result.records} records "
            f"({result.executions} executions)"
        )
    return "\n".join(lines)


def render_json(path: str, result: CheckResult) -> dict[str, Any]:
    return {
        "file": path,
        "ok": result.ok,
        "records": result.records,
        "executions": result.executions,
        "violations": [msgspec.to_builtins(v) for v in result.violations],
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", metavar="TRACE.jsonl", help="the trace to check")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--partial",
        action="store_true",
        help="the trace is cut out of a longer or running one: seq may start anywhere, "
        "instances start where their first record says, no admission or end-state rules",
    )
    parser.add_argument(
        "--unfinished",
        action="store_true",
        help="the trace stops before its executions were stopped (an `acpfsm verify` "
        "counterexample): an execution not stopped is no violation",
    )


def run(args: argparse.Namespace) -> int:
    """Exit status: 0 clean, 1 violations, 2 unreadable or malformed."""
    path = str(args.trace)
    try:
        result = check_file(path, partial=bool(args.partial), unfinished=bool(args.unfinished))
    except TraceFormatError as exc:
        if args.json:
            print(
                json.dumps(
                    {"file": path, "ok": False, "error": {"line": exc.line, "message": exc.reason}}
                )
            )
        else:
            print(f"acpfsm check-trace: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(render_json(path, result)))
    else:
        print(render_text(path, result))
    return 0 if result.ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="acpfsm check-trace", description=__doc__.split("\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
