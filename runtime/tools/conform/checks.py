"""The battery's bookkeeping and every check that means the same on both carriers."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import anyio
import anyio.abc

from .carrier import (
    AgentGone,
    _Answer,
    _Cancelled,
    _Caps,
    _Carrier,
    _lifecycle_after_load_error,
    _SessionView,
)
from .report import (
    _EVIDENCE_LINES,
    _IN_FLIGHT,
    _SETTLE,
    _TRIES,
    STOP_REASONS,
    CheckResult,
    ConformReport,
    Status,
    _excerpt,
    _fail,
    _na,
    _pass,
    _short,
    _Verdict,
    refusal_cause,
)

# --------------------------------------------------------------------------- the checks


def _judge_cancel(seen: _Cancelled, in_flight_clause: str) -> _Verdict:
    """The cancel check's verdict on what the battery saw of one cancelled turn (the
    carrier's errors aside). ``cancelled`` passes. Any other stopReason fails when the agent
    demonstrably had the cancel and went on: it answered a request sent after the cancel
    before it answered the prompt (stdio), or the turn went on more than :data:`_IN_FLIGHT`
    after the cancel. Otherwise the answer may have been on its way before the cancel could
    reach the agent: n/a, the race was lost (the caller tries another turn)."""
    end = seen.end
    took = end.at - seen.sent
    if end.stop == "cancelled":
        return _pass(f"stopReason cancelled {took:.2f} s after session/cancel")
    what = (
        f"stopReason {end.stop!r} {took:.2f} s after session/cancel "
        f"({seen.updates} update(s) in between)"
    )
    if not isinstance(end.stop, str) or end.stop not in STOP_REASONS:
        return _fail(f"{what}: not a stopReason")
    if seen.read_by is not None:
        return _fail(
            f"{what}: the agent had read the cancel, it answered a request sent after it "
            f"{seen.read_by - seen.sent:.2f} s after the cancel, and then still ended the turn "
            f"{end.stop} ({seen.updates_after_read} update(s) after that answer)"
        )
    if took > _IN_FLIGHT:
        return _fail(f"{what}: the turn went on more than {_IN_FLIGHT:g} s after the cancel")
    return _na(f"{what}: the turn ended before the cancel could act; {in_flight_clause}")


_Body = Callable[[], Awaitable[_Verdict]]


class _Suite:
    """The battery's bookkeeping and every check that is the same on both carriers."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        prompt: str,
        long_prompt: str,
        workspace: Path,
        echo: Callable[[CheckResult], None] | None,
    ) -> None:
        self.argv = list(argv)
        self.timeout = timeout
        self.prompt = prompt
        self.long_prompt = long_prompt
        self.workspace = workspace
        self.echo = echo
        self.report = ConformReport(command=self.argv)
        self.carrier: _Carrier | None = None
        self.caps: _Caps | None = None
        self.session: _SessionView | None = None
        self.session_blocked = "no session"
        self.turn_ok = False
        self.turn_blocked = "no prompt turn"

    # -- plumbing
    def _record(self, result: CheckResult) -> None:
        self.report.checks.append(result)
        if self.echo is not None:
            self.echo(result)

    async def check(self, check_id: str, title: str, body: _Body) -> CheckResult:
        carrier = self.carrier
        mark = len(carrier.transcript) if carrier is not None else 0
        started = time.monotonic()
        verdict: _Verdict | None = None
        with anyio.move_on_after(self.timeout) as scope:
            try:
                verdict = await body()
            except AgentGone as exc:
                assert carrier is not None
                verdict = _fail(f"the agent is gone: {await carrier.gone_text(exc)}")
            except Exception as exc:  # noqa: BLE001 - whatever an agent sent, a report
                verdict = _fail(
                    f"conform could not judge what the agent sent: {type(exc).__name__}: "
                    f"{_short(str(exc), 300)}"
                )
        if verdict is None or scope.cancelled_caught:
            verdict = _fail(f"timed out after {self.timeout:g} s: the agent did not answer")
        evidence = verdict.evidence
        if evidence is None and verdict.status is Status.FAIL and carrier is not None:
            evidence = _excerpt(carrier.transcript[mark:])
        result = CheckResult(
            id=check_id,
            title=title,
            status=verdict.status,
            detail=verdict.detail,
            evidence=list(evidence or []),
            seconds=round(time.monotonic() - started, 3),
        )
        self._record(result)
        return result

    def skip(self, check_id: str, title: str, status: Status, reason: str) -> None:
        self._record(CheckResult(id=check_id, title=title, status=status, detail=reason))

    def _carrier(self) -> _Carrier:
        assert self.carrier is not None
        return self.carrier

    def _caps(self) -> _Caps:
        assert self.caps is not None
        return self.caps

    def _shared(self) -> dict[str, _Body]:
        return {
            "capabilities": self._capabilities,
            "session_new": self._session_new,
            "load_unknown": self._load_unknown,
            "prompt_turn": self._prompt_turn,
            "load_known": self._load_known,
            "cancel": self._cancel,
            "steer": self._steer,
            "set_mode": self._set_mode,
            "config_mode": self._config_mode,
            "config_model": self._config_model,
            "legacy_set_model": self._legacy_set_model,
        }

    # -- shared checks
    async def _capabilities(self) -> _Verdict:
        caps = self._caps()
        load = (
            f"loadSession {json.dumps(caps.load_session)}"
            if caps.load_session is not None
            else f"loadSession not reported by {self._carrier().name}"
        )
        parts = [
            load,
            f"prompt {'+'.join(caps.media) or 'text only'}",
            f"promptQueueing {json.dumps(caps.prompt_queueing)}",
            f"authMethods [{', '.join(caps.auth_ids)}]",
        ]
        if caps.session_caps:
            parts.append(f"session {'/'.join(caps.session_caps)}")
        return _pass("; ".join(parts))

    def _cause(self, answer: _Answer) -> str:
        """The cause an error answer names (see :func:`refusal_cause`), recorded once in the
        report's causes; "" when it names none."""
        cause = refusal_cause(answer.text)
        if cause and cause not in self.report.causes:
            self.report.causes.append(cause)
        return cause

    def _auth_reason(self, answer: _Answer, what: str) -> str:
        ids = ", ".join(self._caps().auth_ids) or "none"
        return (
            f"{what} needs authentication ({answer.text}; authMethods: {ids}); "
            f"run with credentials to check it"
        )

    async def _session_new(self) -> _Verdict:
        carrier = self._carrier()
        answer, view = await carrier.new_session(str(self.workspace))
        if answer.code == -32000:
            self.session_blocked = "session/new needs authentication"
            return _na(self._auth_reason(answer, "session/new"))
        if answer.error is not None:
            cause = self._cause(answer)
            if cause:
                self.session_blocked = "session/new refused: the agent refuses to run as root"
                return _fail(f"session/new refused: {cause} ({answer.text})")
            self.session_blocked = "session/new failed"
            return _fail(f"session/new answered an error: {answer.text}")
        if view is None:
            self.session_blocked = "session/new answered no usable session"
            return _fail(
                f"the session/new result does not fit ACP v1: {answer.problem or 'no sessionId'}"
            )
        self.session = view
        parts = [f"sessionId {view.session_id}"]
        if view.modes:
            parts.append(f"modes [{', '.join(view.modes)}]")
        if view.options:
            parts.append(f"configOptions [{', '.join(o.id for o in view.options)}]")
        if view.models:
            parts.append(f"{carrier.models_label} [{', '.join(view.models)}]")
        return _pass("; ".join(parts))

    async def _load_unknown(self) -> _Verdict:
        unknown = str(uuid.uuid4())
        if self._caps().load_session is False:
            from acpfsm.adapters.acp.stdio import LOAD_UNSUPPORTED_MESSAGE
            from acpfsm.adapters.errors import LocalProtocolError

            kind, what = _lifecycle_after_load_error(
                LocalProtocolError(LOAD_UNSUPPORTED_MESSAGE), unknown
            )
            return _na(
                f"loadSession not advertised: acpfsm never sends session/load ({kind}: {what})"
            )
        answer, _ = await self._carrier().load_session(unknown, str(self.workspace))
        if answer.error is None:
            return _fail(
                f"session/load of the unknown id {unknown} succeeded: {_short(answer.result, 200)}"
            )
        kind, what = _lifecycle_after_load_error(answer.error, unknown)
        detail = f"{answer.text} → {kind}: {what}"
        cause = self._cause(answer)
        if cause:  # a refusal says nothing about unknown sessions: never a pass
            return _fail(f"session/load refused: {cause} ({detail})")
        if answer.code == -32000:
            return _na(f"needs authentication: {detail}")
        if kind == "load_unsupported":
            return _na(f"loadSession not supported: {detail}")
        return _pass(detail)

    async def _prompt_turn(self) -> _Verdict:
        if self.session is None:
            self.turn_blocked = self.session_blocked
            return _na(self.session_blocked)
        carrier = self._carrier()
        turn = await carrier.start_turn(self.session.session_id, self.prompt)
        end = await carrier.finish(turn)
        kinds = carrier.updates(turn, turn.started, end.at)
        if end.answer.code == -32000:
            self.turn_blocked = "the prompt needs authentication"
            return _na(self._auth_reason(end.answer, "session/prompt"))
        if end.answer.error is not None:
            self.turn_blocked = "the prompt turn failed"
            return _fail(f"session/prompt answered an error: {end.answer.text}")
        stop = end.stop
        if not isinstance(stop, str) or stop not in STOP_REASONS:
            self.turn_blocked = "the prompt turn failed"
            return _fail(f"stopReason {stop!r} is not one of {', '.join(sorted(STOP_REASONS))}")
        bad = carrier.bad_updates(turn, turn.started, end.at)
        if bad:
            return _fail(f"{len(bad)} session/update(s) do not fit ACP v1", bad[:_EVIDENCE_LINES])
        self.turn_ok = True
        return _pass(
            f"stopReason {stop} in {end.at - turn.started:.2f} s after {len(kinds)} update(s) "
            f"({', '.join(sorted(set(kinds))) or 'none'})"
        )

    async def _load_known(self) -> _Verdict:
        if self.session is None:
            return _na(self.session_blocked)
        if self._caps().load_session is False:
            return _na("loadSession not advertised")
        carrier = self._carrier()
        session_id = self.session.session_id
        answer, replayed = await carrier.load_session(session_id, str(self.workspace))
        if answer.error is not None:
            kind, what = _lifecycle_after_load_error(answer.error, session_id)
            detail = f"{answer.text} → {kind}: {what}"
            cause = self._cause(answer)
            if cause:
                return _fail(f"session/load refused: {cause} ({detail})")
            if answer.code == -32000:
                return _na(f"needs authentication: {detail}")
            if kind == "load_unsupported":
                return _na(f"loadSession not supported: {detail}")
            if not self.turn_ok:
                return _na(
                    f"the session never completed a turn ({self.turn_blocked}), so the agent "
                    f"may not have stored it: {detail}"
                )
            return _fail(f"session/load of the session just used failed: {detail}")
        if answer.problem:
            return _fail(f"the session/load result does not fit ACP v1: {answer.problem}")
        kinds = ", ".join(sorted(set(replayed))) or "none"
        if not carrier.replay_observable:
            return _pass(
                f"answered; {carrier.name} does not forward the replayed history "
                f"({len(replayed)} event(s) of it came through: {kinds})"
            )
        if self.turn_ok and not replayed:
            return _fail("the session had a completed turn but session/load replayed nothing")
        return _pass(f"answered after replaying {len(replayed)} update(s) ({kinds})")

    async def _cancel(self) -> _Verdict:
        if not self.turn_ok:
            return _na(self.turn_blocked)
        carrier = self._carrier()
        assert self.session is not None
        lost: _Verdict | None = None
        for _ in range(_TRIES):
            mark = len(carrier.transcript)
            turn = await carrier.start_turn(self.session.session_id, self.long_prompt)
            if not await carrier.first_activity(turn):
                await carrier.finish(turn)
                continue
            seen = await carrier.cancel_turn(turn)
            end = seen.end
            if end.problem:
                return _fail(end.problem)
            if end.answer.error is not None:
                return _fail(f"the cancelled prompt answered an error: {end.answer.text}")
            verdict = _judge_cancel(seen, carrier.in_flight_clause)
            evidence = carrier.evidence(mark, seen.last_line)
            if verdict.status is not Status.NA:
                return _Verdict(verdict.status, verdict.detail, evidence)
            lost = _na(verdict.detail, evidence)
        if lost is not None:
            return _na(f"{lost.detail} ({_TRIES} tries)", lost.evidence)
        return _na("every turn ended before its first update, so no cancel could be sent")

    async def _steer(self) -> _Verdict:
        if not self.turn_ok:
            return _na(self.turn_blocked)
        if not self._caps().prompt_queueing:
            return _na(
                "promptQueueing not advertised (_meta.claudeCode): acpfsm does not steer this "
                "agent (SteerUnsupported); a second prompt waits for the first"
            )
        carrier = self._carrier()
        assert self.session is not None
        sent = False
        for _ in range(_TRIES):
            first = await carrier.start_turn(self.session.session_id, self.long_prompt)
            if not await carrier.first_activity(first):
                await carrier.finish(first)
                continue
            sent = True
            ends = await carrier.steer(first, self.prompt)
            if ends is None:
                await carrier.finish(first)
                continue
            for label, end in ends:
                if end.answer.error is not None:
                    return _fail(f"the {label} prompt answered an error: {end.answer.text}")
                if not isinstance(end.stop, str) or end.stop not in STOP_REASONS:
                    return _fail(f"the {label} prompt answered stopReason {end.stop!r}")
            if len(ends) == 1:
                return _pass(
                    f"the steer was accepted into the running turn, which then ended once "
                    f"with {ends[0][1].stop} (the queued prompt took the turn over)"
                )
            a, b = ends[0][1], ends[1][1]
            if b.at < a.at:
                return _fail("the second prompt was answered before the first")
            return _pass(f"the first turn answered {a.stop}, then the queued one {b.stop}")
        if sent:
            return _na(
                f"every turn ended before the agent took the second prompt in, so nothing was "
                f"queued ({_TRIES} tries)"
            )
        return _na("every turn ended before its first update, so no steer could be sent")

    async def _set_mode(self) -> _Verdict:
        if self.session is None:
            return _na(self.session_blocked)
        session = self.session
        if not session.modes:
            return _na("no modes advertised by session/new")
        current = session.current_mode
        others = [m for m in session.modes if m != current]
        if not others:
            return _na(f"only one mode advertised ({current})")
        target = others[0]
        carrier = self._carrier()
        answer, told = await carrier.set_mode(session.session_id, target)
        if answer.error is not None:
            return _fail(f"set_mode {target!r} (advertised) answered {answer.text}")
        note = f" with a {carrier.mode_update}" if told else f" (no {carrier.mode_update})"
        if current is not None:
            await carrier.set_mode(session.session_id, current)
        return _pass(f"{current} → {target} accepted{note}")

    async def _config_option(self, category: str) -> _Verdict:
        if self.session is None:
            return _na(self.session_blocked)
        options = [o for o in self.session.options if o.category == category and o.type == "select"]
        if not options:
            return _na(f"no select config option of category {category!r} advertised")
        option = options[0]
        current = option.current
        others = [v for v in option.values if v != current]
        if not others:
            return _na(f"config option {option.id!r} offers no other value than {current!r}")
        target = others[0]
        carrier = self._carrier()
        session_id = self.session.session_id
        answer, now = await carrier.set_config_option(session_id, option, target)
        if answer.error is not None:
            return _fail(
                f"set_config_option {option.id}={target!r} (advertised) answered {answer.text}"
            )
        if answer.problem:
            return _fail(f"the set_config_option result does not fit ACP v1: {answer.problem}")
        if now is None and not carrier.reflection_in_answer:
            return _na(
                f"set_config_option {option.id}={target!r} was accepted, but "
                f"{carrier.reflection_source} did not report the option within {_SETTLE:g} s, "
                f"so its new value was not observed"
            )
        if now != target:
            return _fail(
                f"set_config_option {option.id}={target!r} was accepted, but "
                f"{carrier.reflection_source} says currentValue {now!r}"
            )
        await carrier.set_config_option(session_id, option, current)
        return _pass(f"{option.id}: {current} → {target}, reflected in {carrier.reflection_source}")

    async def _config_mode(self) -> _Verdict:
        return await self._config_option("mode")

    async def _config_model(self) -> _Verdict:
        return await self._config_option("model")

    async def _legacy_set_model(self) -> _Verdict:
        if self.session is None:
            return _na(self.session_blocked)
        carrier = self._carrier()
        session = self.session
        if not session.models:
            answer = await carrier.set_model(session.session_id, "acpfsm-conform")
            said = answer.text if answer.error is not None else "a result"
            return _na(
                f"no legacy models advertised (session/set_model answered {said}); model "
                f"selection goes through config options"
            )
        current = session.current_model
        target = next((m for m in session.models if m != current), session.models[0])
        answer = await carrier.set_model(session.session_id, target)
        if answer.error is not None:
            return _fail(f"set_model {target!r} (advertised) answered {answer.text}")
        return _pass(f"{current} → {target} accepted{carrier.set_model_note}")
