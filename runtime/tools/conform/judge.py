"""The schema check of a conform run: every message recorded on the wire, both directions,
judged against the official ACP schema of the protocol version the agent negotiated
(:mod:`.schema`), each distinct violation a failed check of its own."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .report import UNKNOWN_METHOD, CheckResult, Status, _short
from .schema import BUNDLED, Direction, MessageSchema, Violation

__all__ = ["DELIBERATE", "Recorded", "SchemaJudge", "SchemaOptions"]

SCHEMA_CHECK = "schema"
#: What the battery sends outside ACP on purpose: its probe (an unknown method) and the legacy
#: session/set_model (removed from the spec; older agents still implement it). Not judged.
DELIBERATE = frozenset({UNKNOWN_METHOD, "session/set_model"})
MAX_VIOLATION_CHECKS = 40
"""Distinct violations reported as checks of their own; the rest are counted in the summary."""


@dataclass(slots=True)
class Recorded:
    """One JSON message that crossed the pipe."""

    direction: Direction
    message: Any
    answered: str | None
    """For a response: the method of the request it answers (None when no request had its
    id)."""
    line: int
    """Its transcript index."""
    deliberate: bool = False


@dataclass(frozen=True, slots=True)
class SchemaOptions:
    """Which schema the messages are judged against: by default the official one of the
    protocol version the agent negotiated; ``version`` forces a bundled version, ``path`` a
    schema file; ``enabled=False`` turns the check off."""

    enabled: bool = True
    version: int | None = None
    path: str | None = None


@dataclass(slots=True)
class Batch:
    """The messages of one agent process, with its transcript (the evidence)."""

    label: str
    messages: list[Recorded]
    transcript: list[str]


@dataclass(slots=True)
class _Group:
    first: Violation
    batch: Batch
    line: int
    count: int = 0
    pointers: set[str] = field(default_factory=set)


def _initialize_request(item: Recorded) -> dict[str, Any] | None:
    """The params of the client's own (not deliberate) initialize request, else None."""
    message = item.message
    if item.direction is not Direction.CLIENT_TO_AGENT or item.deliberate:
        return None
    if not isinstance(message, dict) or message.get("method") != "initialize":
        return None
    params = message.get("params")
    return params if isinstance(params, dict) else None


def _version(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _asked(messages: Sequence[Recorded]) -> int | None:
    """The protocol version the client asked for in its initialize request."""
    for item in messages:
        params = _initialize_request(item)
        if params is not None:
            return _version(params.get("protocolVersion"))
    return None


def _negotiated(messages: Sequence[Recorded]) -> tuple[int | None, str]:
    """The protocol version of a process: what the agent answered to initialize, else what
    the client asked for; and how it was found."""
    for item in messages:
        if item.answered == "initialize" and isinstance(item.message, dict):
            result = item.message.get("result")
            version = _version(result.get("protocolVersion")) if isinstance(result, dict) else None
            if version is not None:
                return version, "negotiated"
    asked = _asked(messages)
    if asked is not None:
        return asked, "asked for (no answer)"
    return None, "version unknown"


class SchemaJudge:
    """Loads each schema once per run and turns recorded messages into checks."""

    def __init__(self, options: SchemaOptions) -> None:
        self.options = options
        self._schemas: dict[int | str, MessageSchema] = {}

    def preload(self) -> None:
        """Load a forced schema now: a bad ``--schema``/``--schema-version`` is a
        :class:`ConformUsageError` before any agent runs."""
        if not self.options.enabled:
            return
        if self.options.path is not None:
            self._load(self.options.path)
        elif self.options.version is not None:
            self._load(self.options.version)
        else:
            self._load(min(BUNDLED))

    def _load(self, key: int | str) -> MessageSchema:
        schema = self._schemas.get(key)
        if schema is None:
            if isinstance(key, str):
                schema = MessageSchema.from_file(Path(key))
            else:
                schema = MessageSchema.bundled(key)
            self._schemas[key] = schema
        return schema

    def schema_for(self, version: int | None) -> tuple[MessageSchema | None, str]:
        """The schema a process that negotiated ``version`` is judged against (None: no
        official schema of that version exists, its messages are not judged), and a note
        when it is not that version's own."""
        if self.options.path is not None:
            return self._load(self.options.path), " (--schema)"
        if self.options.version is not None:
            return self._load(self.options.version), " (--schema-version)"
        if version is not None and version in BUNDLED:
            return self._load(version), ""
        return None, ""

    def _opening(
        self, messages: Sequence[Recorded], negotiated: int | None
    ) -> tuple[MessageSchema | None, str]:
        """The schema the client's initialize request is judged against when it is not the
        negotiated version's: the request is sent before any version is agreed, in the
        version it asks for (an agent answering v2 to a client asking v1 does not make the
        request a v2 one). None (and no note) when it is the same schema, forced, or the
        version asked for has no official schema."""
        asked = _asked(messages)
        forced = self.options.path is not None or self.options.version is not None
        if forced or asked is None or asked == negotiated or asked not in BUNDLED:
            return None, ""
        opening = self._load(asked)
        return opening, f"; its initialize request against the v{asked} schema it asked for"

    def judge(self, batches: Sequence[Batch]) -> list[CheckResult]:
        """The summary check, then one failed check per distinct violation."""
        title = "messages against the official ACP schema"
        if not self.options.enabled:
            return [_result(SCHEMA_CHECK, title, Status.NA, "turned off (--no-schema)")]
        total = judged = deliberate = 0
        sent = {Direction.AGENT_TO_CLIENT: 0, Direction.CLIENT_TO_AGENT: 0}
        groups: dict[tuple[str, ...], _Group] = {}
        bad_messages = 0
        used: list[str] = []
        for batch in batches:
            version, how = _negotiated(batch.messages)
            schema, note = self.schema_for(version)
            if schema is None:
                unjudged = sum(not item.deliberate for item in batch.messages)
                total += len(batch.messages)
                deliberate += len(batch.messages) - unjudged
                used.append(
                    f"{batch.label}: {_how(how, version)}, a protocol version with no official "
                    f"schema: its {unjudged} message(s) not judged"
                )
                continue
            opening, said = self._opening(batch.messages, version)
            used.append(f"{batch.label}: {_how(how, version)}, {schema.describe()}{note}{said}")
            for item in batch.messages:
                total += 1
                if item.deliberate:
                    deliberate += 1
                    continue
                judged += 1
                sent[item.direction] += 1
                by = opening if opening is not None and _initialize_request(item) else schema
                found = _check(by, item)
                bad_messages += bool(found)
                for violation in found:
                    group = groups.get(violation.group)
                    if group is None:
                        group = groups[violation.group] = _Group(violation, batch, item.line)
                    group.count += 1
                    group.pointers.add(violation.pointer)
        if not total:
            return [_result(SCHEMA_CHECK, title, Status.NA, "no message was exchanged")]
        counts = (
            f"{judged} message(s): {sent[Direction.AGENT_TO_CLIENT]} agent → client, "
            f"{sent[Direction.CLIENT_TO_AGENT]} client → agent"
        )
        if deliberate:
            counts += f"; {deliberate} sent outside ACP on purpose, not judged"
        schemas = "; ".join(used)
        if not groups:
            return [_result(SCHEMA_CHECK, title, Status.PASS, f"{counts}; all valid ({schemas})")]
        shown = list(groups.values())[:MAX_VIOLATION_CHECKS]
        more = len(groups) - len(shown)
        detail = (
            f"{len(groups)} distinct violation(s) in {bad_messages} of {counts}; each is a "
            f"check below ({schemas})"
        )
        if more:
            detail += f"; {more} more distinct violation(s) not listed"
        out = [_result(SCHEMA_CHECK, title, Status.FAIL, detail)]
        seen_ids: dict[str, int] = {}
        for group in shown:
            out.append(_violation_check(group, seen_ids))
        return out


def _how(how: str, version: int | None) -> str:
    return how if version is None else f"{how} v{version}"


def _check(schema: MessageSchema, item: Recorded) -> list[Violation]:
    try:
        return schema.check(item.direction, item.message, item.answered)
    except RecursionError:
        return [
            Violation(item.direction, "", "message", "", "a message nested shallow enough to "
                      "validate", "(too deeply nested)")
        ]  # fmt: skip


def _result(
    check_id: str, title: str, status: Status, detail: str, evidence: list[str] | None = None
) -> CheckResult:
    return CheckResult(
        id=check_id, title=title, status=status, detail=detail, evidence=evidence or []
    )


def _violation_check(group: _Group, seen_ids: dict[str, int]) -> CheckResult:
    first = group.first
    side = first.direction.sender
    check_id = f"{SCHEMA_CHECK}:{side}:{first.method or '?'}:{first.group[3] or '/'}"
    seen_ids[check_id] = seen_ids.get(check_id, 0) + 1
    if seen_ids[check_id] > 1:
        check_id += f"#{seen_ids[check_id]}"
    times = f"{group.count} time(s)" if group.count > 1 else "once"
    detail = f"{first.describe()} ({times}, {group.batch.label})"
    transcript = group.batch.transcript
    evidence = [transcript[group.line]] if 0 <= group.line < len(transcript) else []
    others = sorted(group.pointers - {first.pointer})
    if others:
        evidence.append(_short(f"also at {', '.join(others)}", 400))
    title = f"{first.method or '(no method)'} {first.kind} ({first.direction.value})"
    return _result(check_id, title, Status.FAIL, detail, evidence)
