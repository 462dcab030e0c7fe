"""Scenarios S2 (the start-model policy, kandev lifecycle/start_model.go) and S3 (profile
layer, runtime layer, snapshots: lifecycle/session.go ``applyProfileSessionLayers``,
``applyRuntimeSessionLayers``, ``publishSettledConfigOptions``) driven through the real runtime:
``Runtime`` + ``MemoryTransport``.

Each test is named after its scenario id (tests/runtime/README.md). The decision table itself
is walked row by row in ``tests/statecharts/test_session_init_and_policy.py``; here every row a
scenario names is checked end to end: the SetModel calls the agent received, the events
published (the warning with its decision id, the legacy fallback event, the original and
settled snapshots, the failures event), the execution status and error message, and the policy
chart's final state in the trace.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, TypeVar

import anyio
import msgspec
import pytest

from acpfsm.adapters.errors import AgentRequestError
from acpfsm.adapters.events import ConfigOption, ModelInfo, SessionModels
from acpfsm.adapters.memory import MemoryTransport
from acpfsm.adapters.transport import SessionResult
from acpfsm.runtime import AgentProfile, Runtime
from acpfsm.runtime import events as le
from acpfsm.runtime.events import RuntimeEvent
from acpfsm.runtime.session import ExecutionSession
from acpfsm.runtime.session.context import ModelState as _ModelState

from .memory_runtime import (
    MemoryExecutor,
    launch_session,
    make_runtime,
    memory_agent,
    raiser,
    settle,
    wait_until,
)

pytestmark = pytest.mark.both_backends

E = TypeVar("E")

METHOD_NOT_FOUND = AgentRequestError(-32601, "Method not found")
REJECTED = AgentRequestError(-32603, "rejected")


# --- helpers -----------------------------------------------------------------------------------


def profile(**kw: Any) -> AgentProfile:
    return AgentProfile(id="mem", command=("unused",), **kw)


def runtime(
    ex: MemoryExecutor, time_scale: float, prof: AgentProfile | None = None, **timeouts: float
) -> Runtime:
    return make_runtime(ex, profiles=(prof or profile(),), time_scale=time_scale, timeouts=timeouts)


def models(*ids: str) -> list[ModelInfo]:
    return [ModelInfo(model_id=i) for i in ids]


def option(config_id: str, value: str = "", category: str = "") -> ConfigOption:
    return ConfigOption(id=config_id, current_value=value, category=category)


def events(s: ExecutionSession) -> list[RuntimeEvent]:
    return list(s.hub._backlog)


def of_type(s: ExecutionSession, cls: type[E]) -> list[E]:
    return [e for e in events(s) if isinstance(e, cls)]


def original(s: ExecutionSession) -> list[SessionModels]:
    return [e for e in of_type(s, SessionModels) if e.data.get("original_config_settled")]


def settled(s: ExecutionSession) -> list[SessionModels]:
    return [e for e in of_type(s, SessionModels) if e.data.get("config_options_settled")]


def values(options: Sequence[ConfigOption] | None) -> dict[str, str]:
    return {o.id: o.current_value for o in options or ()}


def calls(t: MemoryTransport, method: str) -> list[Any]:
    return [args for m, args in t.calls if m == method]


def set_models(t: MemoryTransport) -> list[str]:
    return [args[0] for args in calls(t, "set_model")]


def set_options(t: MemoryTransport) -> list[tuple[str, str]]:
    return [(args[0], args[1]) for args in calls(t, "set_config_option")]


def policy_state(rt: Runtime, execution_id: str) -> str:
    records = [r for r in rt.trace.for_execution(execution_id) if r.chart == "start_model_policy"]
    return records[-1].target if records else ""


def settlement_path(s: ExecutionSession) -> list[str]:
    """The states the ConfigSettlement chart moved to (targetless steps left out)."""
    return [r.target for r in s.transitions("config_settlement") if r.target != r.source]


def init_events(s: ExecutionSession) -> list[str]:
    """The session init's facts after its start (``init_started``, when its task runs)."""
    events = [r.event for r in s.transitions("session_init")]
    assert events[:1] == ["init_started"] or not events
    return events[1:]


def the_session(rt: Runtime) -> ExecutionSession:
    (s,) = rt._sessions.values()
    return s


async def processed(rt: Runtime, event: SessionModels) -> None:
    """Wait until the runtime's event pump has handled (and republished) ``event``."""
    await wait_until(lambda: any(e is event for e in events(the_session(rt))))


async def launched(rt: Runtime, **kw: Any) -> tuple[str, ExecutionSession]:
    ref, s = await launch_session(rt, **kw)
    await wait_until(lambda: not s.init.machine.is_in("pending", "initializing"), limit=60)
    return ref.id, s


def response(config_id: str, *opts: ConfigOption, model: str = "") -> SessionModels:
    return SessionModels(
        current_model_id=model,
        config_options=list(opts),
        data={"config_options_source": "provider_response", "config_options_config_id": config_id},
    )


def update(*opts: ConfigOption, model: str = "", model_list: Sequence[str] = ()) -> SessionModels:
    return SessionModels(
        current_model_id=model,
        session_models=models(*model_list),
        config_options=list(opts),
        data={"config_options_source": "provider_update"},
    )


# --- S2: the start-model policy ---------------------------------------------------------------


@pytest.mark.parametrize("current", ["executor-default", ""])
async def test_s28_requested_model_not_advertised(time_scale: float, current: str) -> None:
    """Row 6: no SetModel, provider_default/requested_not_advertised, a warning whose effective
    model is the cached current model (empty when none) and whose decision id is the hex
    sha256 of ``execution|acp session|requested|reason|effective``."""
    ex = memory_agent(models=models("executor-default"), current_model=current)
    async with runtime(ex, time_scale, profile(model="host-only-model")) as rt:
        eid, s = await launched(rt)
        assert s.execution.status == "READY"
        assert set_models(ex.last) == []
        assert policy_state(rt, eid) == "requested_not_advertised"
        (warning,) = of_type(s, le.ModelSelectionWarning)
        assert warning.reason == "requested_not_advertised"
        assert warning.requested_model == "host-only-model"
        assert warning.effective_model == current
        assert warning.fallback_model == ""
        raw = f"{eid}|mem-session-1|host-only-model|requested_not_advertised|{current}"
        assert warning.decision_id == hashlib.sha256(raw.encode()).hexdigest()
        assert (warning.agent_id, warning.executor_type) == ("mem", "memory")
        assert of_type(s, le.ModelFallback) == []
        await rt.stop(eid, "done")


async def test_s29_empty_catalog(time_scale: float) -> None:
    """Row 2: a model state with no models (config options only, so no catalog wait): no
    calls, provider_default/catalog_empty, a warning, even with a fallback configured."""
    ex = memory_agent(models=(), current_model="", config_options=[option("effort", "low")])
    prof = profile(model="wanted", fallback_model="fallback")
    async with runtime(ex, time_scale, prof) as rt:
        eid, s = await launched(rt)
        assert s.execution.status == "READY"
        assert set_models(ex.last) == []
        assert "catalog_checked" in init_events(s)
        assert "catalog_wait_timed_out" not in init_events(s)
        assert policy_state(rt, eid) == "catalog_empty"
        (warning,) = of_type(s, le.ModelSelectionWarning)
        assert (warning.reason, warning.effective_model) == ("catalog_empty", "")
        assert of_type(s, le.ModelFallback) == []  # only an explicit fallback has one
        await rt.stop(eid, "done")


async def test_s31_fallback_selection_unsupported(time_scale: float) -> None:
    """Row 4: the advertised fallback's SetModel answers -32601: calls ``[fallback]``,
    provider_default/selection_unsupported, a warning, no error."""

    def setup(t: MemoryTransport) -> None:
        t.handlers["set_model"] = raiser(METHOD_NOT_FOUND)

    ex = memory_agent(setup, models=models("fallback"), current_model="fallback")
    prof = profile(model="requested", fallback_model="fallback")
    async with runtime(ex, time_scale, prof) as rt:
        eid, s = await launched(rt)
        assert s.execution.status == "READY"
        assert set_models(ex.last) == ["fallback"]
        assert policy_state(rt, eid) == "selection_unsupported"
        (warning,) = of_type(s, le.ModelSelectionWarning)
        assert (warning.reason, warning.fallback_model) == ("selection_unsupported", "")
        assert of_type(s, le.ModelFallback) == []
        assert rt.get_execution(eid).error_message == ""
        await rt.stop(eid, "done")


async def test_s31_explicit_fallback_publishes_the_legacy_event(time_scale: float) -> None:
    """Row 3 (the successful neighbour of s31): the warning names the fallback and the legacy
    ``session_model_fallback`` event follows it."""
    ex = memory_agent(models=models("fallback"), current_model="fallback")
    prof = profile(model="requested", fallback_model="fallback")
    async with runtime(ex, time_scale, prof) as rt:
        eid, s = await launched(rt)
        assert set_models(ex.last) == ["fallback"]
        assert policy_state(rt, eid) == "explicit_fallback"
        kinds = [type(e) for e in events(s)]
        warning_at = kinds.index(le.ModelSelectionWarning)
        assert kinds[warning_at + 1] is le.ModelFallback
        (warning,) = of_type(s, le.ModelSelectionWarning)
        assert (warning.reason, warning.effective_model, warning.fallback_model) == (
            "requested_not_advertised",
            "fallback",
            "fallback",
        )
        (legacy,) = of_type(s, le.ModelFallback)
        assert legacy.fallback_model == "fallback"
        await rt.stop(eid, "done")


@pytest.mark.parametrize("auto_fallback", [False, True])
@pytest.mark.parametrize("code", [-32603, -32600])
async def test_s32_fallback_rejected_fails_the_launch(
    time_scale: float, auto_fallback: bool, code: int
) -> None:
    """Row 5: a non--32601 failure of the fallback's SetModel (a code on either side of it)
    fails the launch with ``failed to set fallback model "fallback": …`` whatever
    AutoFallback says."""
    rejected = AgentRequestError(code, "rejected")
    ex = memory_agent(
        lambda t: t.handlers.update(set_model=raiser(rejected)), models=models("fallback")
    )
    prof = profile(model="requested", fallback_model="fallback", auto_fallback=auto_fallback)
    async with runtime(ex, time_scale, prof) as rt:
        eid, s = await launched(rt)
        snap = rt.get_execution(eid)
        assert snap.status == "FAILED"
        assert snap.error_message == (
            f'failed to initialize ACP: failed to set fallback model "fallback": {rejected}'
        )
        assert set_models(ex.last) == ["fallback"]
        assert policy_state(rt, eid) == "failed"
        assert init_events(s)[-1] == "start_model_failed"
        assert of_type(s, le.ModelSelectionWarning) == []
        assert of_type(s, le.AcpSessionCreated) == []
        await rt.stop(eid, "done")


async def test_s34_requested_model_applied(time_scale: float) -> None:
    """Row 8: calls ``[requested]``, outcome applied, effective model requested (the original
    snapshot reports it), no warning."""
    ex = memory_agent(models=models("requested"), current_model="other")
    async with runtime(ex, time_scale, profile(model="requested")) as rt:
        eid, s = await launched(rt)
        assert s.execution.status == "READY"
        assert set_models(ex.last) == ["requested"]
        assert policy_state(rt, eid) == "applied"
        assert of_type(s, le.ModelSelectionWarning) == []
        (snapshot,) = original(s)
        assert snapshot.current_model_id == "requested"
        await rt.stop(eid, "done")


async def test_s34_the_applied_model_is_the_cached_current_model(time_scale: float) -> None:
    """Row 8 again: once applied, the requested model is the session's current model in the
    cache, so the settled snapshot names it even when the agent's answer to the model option
    does not repeat it."""
    ex = memory_agent(models=models("requested"), current_model="other")
    async with runtime(ex, time_scale, profile(model="requested")) as rt:
        eid, s = await launched(rt)
        ex.last.emit(
            SessionModels(
                config_options=[option("model", "requested", category="model")],
                data={
                    "config_options_source": "provider_response",
                    "config_options_config_id": "model",
                },
            )
        )
        await wait_until(lambda: len(settled(s)) == 1)
        (event,) = settled(s)
        assert event.current_model_id == "requested"
        await rt.stop(eid, "done")


async def test_the_original_snapshot_sets_the_catalog_model_option_to_the_applied_model(
    time_scale: float,
) -> None:
    """``publishOriginalConfigOptionsWithProfile``: the catalog's own model option (here
    ``model_picker``, category model) carries the applied model, whatever is listed before it
    (``thinking``); no second ``model`` option is added beside it."""
    catalog = (
        option("thinking", "low", category="thought_level"),
        option("model_picker", "fast", category="model"),
    )
    ex = memory_agent(config_options=catalog, models=models("fast", "smart"))
    async with runtime(ex, time_scale, profile(model="smart")) as rt:
        eid, s = await launched(rt)
        (snapshot,) = original(s)
        assert values(snapshot.original_config_candidate) == {
            "thinking": "low",
            "model_picker": "smart",
        }
        await rt.stop(eid, "done")


async def test_s35_requested_selection_unsupported(time_scale: float) -> None:
    """Row 9: SetModel(requested) answers -32601: provider_default/selection_unsupported,
    a warning, no error."""
    ex = memory_agent(
        lambda t: t.handlers.update(set_model=raiser(METHOD_NOT_FOUND)),
        models=models("requested"),
        current_model="requested",
    )
    async with runtime(ex, time_scale, profile(model="requested")) as rt:
        eid, s = await launched(rt)
        assert s.execution.status == "READY"
        assert set_models(ex.last) == ["requested"]
        assert policy_state(rt, eid) == "selection_unsupported"
        (warning,) = of_type(s, le.ModelSelectionWarning)
        assert warning.reason == "selection_unsupported"
        await rt.stop(eid, "done")


async def test_s37_auto_fallback(time_scale: float) -> None:
    """Row 10: SetModel(requested) is rejected and AutoFallback is on:
    provider_default/selection_failed_auto_fallback, a warning, no error."""
    ex = memory_agent(
        lambda t: t.handlers.update(set_model=raiser(REJECTED)),
        models=models("requested"),
        current_model="provider-default",
    )
    prof = profile(model="requested", auto_fallback=True)
    async with runtime(ex, time_scale, prof) as rt:
        eid, s = await launched(rt)
        assert s.execution.status == "READY"
        assert policy_state(rt, eid) == "selection_failed_auto_fallback"
        (warning,) = of_type(s, le.ModelSelectionWarning)
        assert (warning.reason, warning.effective_model) == (
            "selection_failed_auto_fallback",
            "provider-default",
        )
        await rt.stop(eid, "done")


@pytest.mark.parametrize(
    ("prof", "metadata"),
    [
        (profile(model="claude-gone"), {}),
        (profile(model="gpt-5"), {"runtime_model": "claude-gone"}),
    ],
    ids=["profile_model", "runtime_model"],
)
async def test_s38_unadvertised_profile_or_runtime_model_does_not_fail_launch(
    time_scale: float, prof: AgentProfile, metadata: dict[str, Any]
) -> None:
    """Only ``gpt-5`` is advertised; the effective model ``claude-gone`` (from the profile, or
    the persisted runtime override) is not: init succeeds, SetModel is never sent, and the
    warning names ``claude-gone``."""
    ex = memory_agent(models=models("gpt-5"), current_model="gpt-5")
    async with runtime(ex, time_scale, prof) as rt:
        eid, s = await launched(rt, metadata=metadata)
        assert s.execution.status == "READY"
        assert calls(ex.last, "set_model") == []
        (warning,) = of_type(s, le.ModelSelectionWarning)
        assert warning.requested_model == "claude-gone"
        assert warning.effective_model == "gpt-5"
        await rt.stop(eid, "done")


async def test_s40_auto_fallback_failure_is_not_retried(time_scale: float) -> None:
    """SetModel fails once under AutoFallback; the profile layer does not try again, and the
    original snapshot reports the provider's current model."""
    ex = memory_agent(
        lambda t: t.handlers.update(set_model=raiser(REJECTED)),
        models=models("gpt-5"),
        current_model="provider-default",
    )
    async with runtime(ex, time_scale, profile(model="gpt-5", auto_fallback=True)) as rt:
        eid, s = await launched(rt)
        assert s.execution.status == "READY"
        assert set_models(ex.last) == ["gpt-5"]
        (snapshot,) = original(s)
        assert snapshot.current_model_id == "provider-default"
        assert values(snapshot.original_config_candidate)["model"] == "provider-default"
        await rt.stop(eid, "done")


async def test_s41_runtime_override_wins(time_scale: float) -> None:
    """Profile model A, runtime model B, both advertised: the policy runs once with B and
    SetModel(B) is the only model call (the runtime layer does not repeat it)."""
    ex = memory_agent(models=models("A", "B"), current_model="A")
    async with runtime(ex, time_scale, profile(model="A")) as rt:
        eid, s = await launched(rt, metadata={"runtime_model": "B"})
        assert set_models(ex.last) == ["B"]
        records = [r for r in rt.trace.for_execution(eid) if r.chart == "start_model_policy"]
        assert [r.event for r in records] == ["policy_evaluated", "set_model_succeeded"]
        (snapshot,) = original(s)
        assert snapshot.current_model_id == "B"
        await rt.stop(eid, "done")


async def test_s43_catalog_wait_ends_when_the_models_arrive(time_scale: float) -> None:
    """session/new carried no catalog; the cache only has a current model id (from a stream
    update) when the wait starts; models arrive ~20 ms later: the wait ends with
    ``catalog_arrived`` and the policy applies the requested model."""

    holder: list[Runtime] = []

    def setup(t: MemoryTransport) -> None:
        async def new_session(_cwd: str) -> SessionResult:
            current_only = update(model="cur")  # a current model id, no models
            t.emit(current_only)
            await processed(holder[0], current_only)  # cached before the response returns
            return SessionResult(session_id="s-1")  # no synchronous catalog

        t.handlers["session/new"] = new_session

    ex = memory_agent(setup, models=(), current_model="")
    async with runtime(ex, time_scale, profile(model="wanted"), catalog_wait=2.0) as rt:
        holder.append(rt)
        ref, s = await launch_session(rt)
        await wait_until(lambda: s.init.machine.state == "waiting_for_catalog")
        assert s.ctx.models.state is not None
        assert s.ctx.models.state.current_model_id == "cur"
        assert s.ctx.models.state.models == []
        await anyio.sleep(0.02 * time_scale)
        ex.last.emit(update(model="cur", model_list=["wanted", "other"]))
        await wait_until(lambda: not s.init.machine.is_in("pending", "initializing"))
        assert "catalog_arrived" in init_events(s)
        assert set_models(ex.last) == ["wanted"]
        assert policy_state(rt, ref.id) == "applied"
        await rt.stop(ref.id, "done")


async def test_s43_config_options_alone_end_the_catalog_wait(
    time_scale: float, autojump_clock: object
) -> None:
    """A state with only config options already counts as a catalog: the wait ends at once
    (well before its 2 s bound) and the policy sees no models (catalog_empty). A state with
    only a current model does not count (kandev's third way, ``ConfigOptionsSettled``, cannot
    happen here: an execution settles after the wait)."""
    ex = memory_agent(models=(), current_model="")
    async with runtime(ex, time_scale, profile(model="wanted"), catalog_wait=2.0) as rt:
        ref, s = await launch_session(rt)
        await wait_until(lambda: s.init.machine.state == "waiting_for_catalog")
        start = anyio.current_time()
        ex.last.emit(update(option("effort", "low")))
        await wait_until(lambda: not s.init.machine.is_in("pending", "initializing"))
        assert anyio.current_time() - start < 1.0
        assert "catalog_arrived" in init_events(s)
        assert policy_state(rt, ref.id) == "catalog_empty"

        s.ctx.models.state = _ModelState(current_model_id="cur")
        assert not s.ctx.models.present()
        await rt.stop(ref.id, "done")


async def test_s44_catalog_wait_is_bounded(time_scale: float, autojump_clock: object) -> None:
    """No catalog ever arrives: the wait gives up after ~2 s and the launch continues with an
    empty catalog (catalog_empty)."""
    ex = memory_agent(models=(), current_model="")
    async with runtime(ex, time_scale, profile(model="wanted")) as rt:
        eid, s = await launched(rt)
        assert s.execution.status == "READY"
        records = rt.trace.for_execution(eid)
        entered = next(r.time for r in records if r.target == "waiting_for_catalog")
        left = next(r.time for r in records if r.event == "catalog_wait_timed_out")
        assert left - entered >= 2.0 * time_scale
        assert left - entered < 2.0 * time_scale + 0.5
        assert policy_state(rt, eid) == "catalog_empty"
        assert set_models(ex.last) == []
        await rt.stop(eid, "done")


async def test_s46_synchronous_catalog_is_used_without_waiting(time_scale: float) -> None:
    """Go: ResetAgentContext uses the catalog carried synchronously by the reset's session
    response. Python has no context reset; a fresh context is a relaunch, and the closest is a
    relaunch resumed with session/load whose response carries ``[mock-fast, mock-smart]``:
    SetModel(``mock-smart``) is sent right away, with no catalog wait."""
    ex = memory_agent(models=models("mock-fast", "mock-smart"), current_model="mock-fast")
    async with runtime(ex, time_scale, profile(model="mock-smart")) as rt:
        eid, s = await launched(rt, prior_acp_session="acp-prior")
        assert [m for m, _ in ex.last.calls] == [
            "initialize",
            "session/load",
            "set_model",
        ]
        assert set_models(ex.last) == ["mock-smart"]
        assert "catalog_checked" in init_events(s)
        assert "catalog_arrived" not in init_events(s)
        assert "catalog_wait_timed_out" not in init_events(s)
        await rt.stop(eid, "done")


async def test_s47_strict_model_failure_fails_closed(time_scale: float) -> None:
    """Go: a reset whose strict model restore fails is FAILED, its actions stop at set_model and
    nothing announces readiness. Python has no reset; the same strict row (11: advertised model,
    SetModel rejected, no AutoFallback) at launch: FAILED, the agent saw nothing after
    set_model, and neither ``acp_session_created`` nor ``agent.boot_ready`` is published."""
    ex = memory_agent(
        lambda t: t.handlers.update(set_model=raiser(REJECTED)),
        models=models("requested", "fallback"),
    )
    prof = profile(model="requested", fallback_model="fallback", mode="plan")
    async with runtime(ex, time_scale, prof) as rt:
        eid, s = await launched(rt, prompt="never sent")
        await settle()
        assert [m for m, _ in ex.last.calls] == ["initialize", "session/new", "set_model"]
        assert set_models(ex.last) == ["requested"]  # the fallback is not tried
        snap = rt.get_execution(eid)
        assert snap.status == "FAILED"
        assert snap.error_message == (
            f'failed to initialize ACP: failed to set start model "requested": {REJECTED}'
        )
        assert of_type(s, le.AgentBootReady) == []
        assert of_type(s, le.AcpSessionCreated) == []
        await rt.stop(eid, "done")


# --- S3: profile layer, runtime layer, snapshots --------------------------------------------------


async def test_s49_profile_option_sanitizing(time_scale: float) -> None:
    """Blank keys, blank values and the keys ``model``/``mode`` (exact, after trimming) are
    dropped; the rest are applied in ascending key order; a failing option does not stop the
    others and is not reported as a failure."""

    def setup(t: MemoryTransport) -> None:
        def set_option(config_id: str, _value: str) -> None:
            if config_id == "alpha":
                raise REJECTED

        t.handlers["set_config_option"] = set_option

    options = {
        "  ": "x",
        "blank": "   ",
        "model": "m",
        " model ": "m2",
        "mode": "plan",
        " zeta ": " 1 ",
        "alpha": "2",
        "mid": "3",
        "Model": "case-sensitive",
    }
    ex = memory_agent(setup)
    async with runtime(ex, time_scale, profile(config_options=options)) as rt:
        eid, s = await launched(rt)
        assert s.execution.status == "READY"
        assert set_options(ex.last) == [
            ("Model", "case-sensitive"),
            ("alpha", "2"),
            ("mid", "3"),
            ("zeta", "1"),
        ]
        assert calls(ex.last, "set_model") == []
        assert calls(ex.last, "set_mode") == []
        assert of_type(s, le.ConfigFailures) == []
        (snapshot,) = original(s)
        applied = values(snapshot.original_config_candidate)
        assert (applied["mid"], applied["zeta"]) == ("3", "1")
        assert "alpha" not in applied
        await rt.stop(eid, "done")


CATALOG = (option("reasoning", "low"), option("fast", "off"), option("context", "200k"))


async def test_s50_runtime_options_filtered_by_catalog(time_scale: float) -> None:
    """Catalog {reasoning, fast, context}, persisted runtime options {reasoning, fast, effort,
    thinking}: only fast and reasoning are sent (in key order), and nothing is reported."""
    ex = memory_agent(config_options=CATALOG)
    runtime_options = {"reasoning": "high", "fast": "on", "effort": "max", "thinking": "on"}
    async with runtime(ex, time_scale) as rt:
        eid, s = await launched(rt, metadata={"runtime_config_options": runtime_options})
        assert set_options(ex.last) == [("fast", "on"), ("reasoning", "high")]
        assert of_type(s, le.ConfigFailures) == []
        assert "runtime_options_applied" in init_events(s)
        await rt.stop(eid, "done")


async def test_s50_unknown_catalog_sends_no_runtime_options(time_scale: float) -> None:
    """The catalog-known fail-safe (``applyRuntimeSessionLayers``): with no config options and
    nothing settled, the persisted runtime options are withheld, and that is not a failure."""
    ex = memory_agent()  # models but no config options
    async with runtime(ex, time_scale) as rt:
        eid, s = await launched(rt, metadata={"runtime_config_options": {"fast": "on"}})
        assert set_options(ex.last) == []
        assert of_type(s, le.ConfigFailures) == []
        assert "runtime_options_applied" not in init_events(s)
        await rt.stop(eid, "done")


async def test_s50_unknown_catalog_still_applies_the_runtime_mode(time_scale: float) -> None:
    """Only the runtime *config options* are catalog-gated (``applyRuntimeSessionLayers``); the
    persisted session mode is applied whether or not the catalog is known."""
    ex = memory_agent()  # models but no config options: the catalog is unknown
    async with runtime(ex, time_scale) as rt:
        eid, s = await launched(
            rt, metadata={"session_mode": "plan", "runtime_config_options": {"fast": "on"}}
        )
        assert ("set_mode", ("plan",)) in ex.last.calls
        assert set_options(ex.last) == []
        assert "runtime_mode_applied" in init_events(s)
        assert "runtime_options_applied" not in init_events(s)
        await rt.stop(eid, "done")


async def test_s52_real_rejections_are_reported(time_scale: float) -> None:
    """Catalog {reasoning, fast}; the agent rejects ``reasoning``; runtime options {reasoning,
    effort}: the failures event lists exactly ``[reasoning]``."""

    def setup(t: MemoryTransport) -> None:
        def set_option(config_id: str, _value: str) -> None:
            if config_id == "reasoning":
                raise REJECTED

        t.handlers["set_config_option"] = set_option

    ex = memory_agent(setup, config_options=CATALOG[:2])
    async with runtime(ex, time_scale) as rt:
        eid, s = await launched(
            rt, metadata={"runtime_config_options": {"reasoning": "high", "effort": "max"}}
        )
        assert set_options(ex.last) == [("reasoning", "high")]
        (failures,) = of_type(s, le.ConfigFailures)
        assert failures.failures == ["reasoning"]
        assert s.execution.status == "READY"
        await rt.stop(eid, "done")


async def test_s53_runtime_mode_and_model_skipped_when_equal(time_scale: float) -> None:
    """The runtime mode equals the applied profile mode: SetMode is sent once (by the profile
    layer). The same for the model: runtime model == profile model gives one SetModel. (In the
    launch path the policy consumes the runtime model, so the runtime layer's own ``model``
    failure cannot occur there.) The values are compared, not the objects: the persisted ones
    arrive decoded, strings of their own."""
    ex = memory_agent(config_options=CATALOG, models=models("smart"))
    persisted = msgspec.json.decode(b'{"session_mode": "plan", "runtime_model": "smart"}')
    async with runtime(ex, time_scale, profile(mode="plan", model="smart")) as rt:
        eid, s = await launched(rt, metadata=persisted)
        assert [a[0] for a in calls(ex.last, "set_mode")] == ["plan"]
        assert set_models(ex.last) == ["smart"]
        assert of_type(s, le.ConfigFailures) == []
        await rt.stop(eid, "done")


async def test_s53_a_runtime_mode_other_than_the_profile_mode_is_sent_after_it(
    time_scale: float,
) -> None:
    """The persisted runtime mode differs from the applied profile mode: both are sent, the
    profile's first, the runtime's last (it is the one that holds)."""
    ex = memory_agent(config_options=CATALOG, models=models("smart"))
    async with runtime(ex, time_scale, profile(mode="plan")) as rt:
        eid, s = await launched(rt, metadata={"session_mode": "ask"})
        assert [a[0] for a in calls(ex.last, "set_mode")] == ["plan", "ask"]
        assert of_type(s, le.ConfigFailures) == []
        await rt.stop(eid, "done")


async def test_no_original_snapshot_when_the_agent_has_no_current_model_and_no_options(
    time_scale: float,
) -> None:
    """``publishOriginalConfigOptionsWithProfile`` has nothing to publish when the agent
    names no current model and no config options (and nothing was applied): no original
    snapshot at all, rather than an empty one."""
    ex = memory_agent(models=models("a", "b"), current_model="")
    async with runtime(ex, time_scale) as rt:
        eid, s = await launched(rt)
        await wait_until(lambda: s.execution.status == "READY")
        assert s.ctx.models.state is not None
        assert original(s) == []
        await rt.stop(eid, "done")


async def test_an_original_snapshot_of_options_alone_when_no_model_is_named(
    time_scale: float,
) -> None:
    """The agent names no current model but lists config options: the original snapshot is
    published with its options (only a snapshot with neither is skipped)."""
    ex = memory_agent(
        models=models("a"), current_model="", config_options=(option("effort", "low"),)
    )
    async with runtime(ex, time_scale) as rt:
        eid, s = await launched(rt)
        await wait_until(lambda: s.execution.status == "READY")
        (snapshot,) = original(s)
        assert values(snapshot.original_config_candidate) == {"effort": "low"}
        await rt.stop(eid, "done")


async def test_s55_an_option_the_catalog_lacks_does_not_stop_the_ones_after_it(
    time_scale: float,
) -> None:
    """Persisted runtime options are filtered one by one: one the catalog does not list,
    one with a blank value and a reserved one, listed first, are dropped and the valid one
    after them is still sent."""
    ex = memory_agent(config_options=(option("effort", "low"),))
    requested = {"unknown": "x", "effort": " ", "MODEL": "m", "effort ": "high"}
    async with runtime(ex, time_scale) as rt:
        eid, _ = await launched(rt, metadata={"runtime_config_options": requested})
        assert set_options(ex.last) == [("effort", "high")]
        await rt.stop(eid, "done")


async def test_s53_runtime_mode_retried_when_the_profile_mode_failed(time_scale: float) -> None:
    """The comparison is against the *applied* profile mode: the profile's ``plan`` failed, so
    the runtime layer sends ``plan`` again; its failure appends ``mode``."""
    ex = memory_agent(
        lambda t: t.handlers.update(set_mode=raiser(REJECTED)), config_options=CATALOG
    )
    async with runtime(ex, time_scale, profile(mode="plan")) as rt:
        eid, s = await launched(rt, metadata={"session_mode": "plan"})
        assert [a[0] for a in calls(ex.last, "set_mode")] == ["plan", "plan"]
        (failures,) = of_type(s, le.ConfigFailures)
        assert failures.failures == ["mode"]
        await rt.stop(eid, "done")


async def test_s55_reading_selected_options_filters_invalid_entries(time_scale: float) -> None:
    """Go's ``selectedRuntimeConfigOptions`` reads restorable options from a state; Python keeps
    no such reader, and the same filter is applied where persisted runtime options are replayed
    (``isRestorableRuntimeConfigOption``): ids ``model``/``mode`` in any case, options whose
    catalog category is model or mode, and blank values are dropped; duplicate ids (after
    trimming) keep the last value (``effort:max``); an option dropped does not stop the ones
    after it (``verbosity``); an empty result sends nothing."""
    catalog = (
        option("effort", "low"),
        option("model_picker", "a", category="model"),
        option("persona", "x", category="Mode"),
        option("fast", "off"),
        option("MODEL", "b"),
        option("verbosity", "low"),
    )
    ex = memory_agent(config_options=catalog)
    requested = {
        "effort": "high",
        " effort ": "max",
        "model_picker": "b",
        "persona": "y",
        "MODEL": "c",
        "fast": "   ",
        "verbosity": "high",
    }
    async with runtime(ex, time_scale) as rt:
        eid, s = await launched(rt, metadata={"runtime_config_options": requested})
        assert set_options(ex.last) == [("effort", "max"), ("verbosity", "high")]
        assert of_type(s, le.ConfigFailures) == []
        await rt.stop(eid, "done")

    ex2 = memory_agent(config_options=catalog)
    only_invalid = {"model_picker": "b", "fast": " "}
    async with runtime(ex2, time_scale) as rt:
        eid, s = await launched(rt, metadata={"runtime_config_options": only_invalid})
        assert set_options(ex2.last) == []
        assert of_type(s, le.ConfigFailures) == []
        await rt.stop(eid, "done")


async def test_s56_failure_event(time_scale: float) -> None:
    """Failures ``[mode, reasoning_effort]`` give exactly one failures event carrying that list,
    published after the snapshots and before ``acp_session_created`` (kandev's order in
    ``InitializeAndPromptWithLayers``)."""

    def setup(t: MemoryTransport) -> None:
        t.handlers["set_mode"] = raiser(REJECTED)

        def set_option(config_id: str, _value: str) -> None:
            if config_id == "reasoning_effort":
                raise REJECTED

        t.handlers["set_config_option"] = set_option

    ex = memory_agent(setup, config_options=[option("reasoning_effort", "low")])
    async with runtime(ex, time_scale) as rt:
        eid, s = await launched(
            rt,
            metadata={
                "session_mode": "plan",
                "runtime_config_options": {"reasoning_effort": "max"},
            },
        )
        (failures,) = of_type(s, le.ConfigFailures)
        assert failures.failures == ["mode", "reasoning_effort"]
        kinds = [type(e) for e in events(s)]
        assert kinds.index(le.ConfigFailures) < kinds.index(le.AcpSessionCreated)
        await rt.stop(eid, "done")


async def test_s58_original_snapshot_overlays_profile_values(time_scale: float) -> None:
    """Cached state: ``provider-default``, reasoning_effort=medium, fast_mode=off (the stream
    still reports these). The profile applied model ``gpt-5.6-sol`` and reasoning_effort=max:
    the original snapshot says gpt-5.6-sol / max / off, before the runtime layer runs."""
    ex = memory_agent(
        models=models("provider-default", "gpt-5.6-sol"),
        current_model="provider-default",
        config_options=[option("reasoning_effort", "medium"), option("fast_mode", "off")],
    )
    prof = profile(model="gpt-5.6-sol", config_options={"reasoning_effort": "max"})
    async with runtime(ex, time_scale, prof) as rt:
        eid, s = await launched(rt, metadata={"runtime_config_options": {"fast_mode": "on"}})
        (snapshot,) = original(s)
        assert snapshot.current_model_id == "gpt-5.6-sol"
        assert snapshot.original_config_candidate == snapshot.config_options
        assert values(snapshot.original_config_candidate) == {
            "reasoning_effort": "max",
            "fast_mode": "off",  # the runtime layer's fast_mode=on is not in the original
            "model": "gpt-5.6-sol",
        }
        assert set_options(ex.last) == [("reasoning_effort", "max"), ("fast_mode", "on")]
        kinds = [type(e) for e in events(s)]
        assert kinds.index(le.AcpSessionCreated) > events(s).index(snapshot)
        await rt.stop(eid, "done")


async def test_an_applied_profile_option_the_agent_lists_is_overlaid_in_place(
    time_scale: float,
) -> None:
    """kandev ``publishOriginalConfigOptionsWithProfile``: a profile option the agent already
    lists takes the applied value in its own place in the original snapshot; it is not added
    a second time (only an option the agent does not list is appended). The ids are compared
    by value: the profile's key is trimmed, a string of its own."""
    ex = memory_agent(
        config_options=[option("reasoning_effort", "medium"), option("fast_mode", "off")]
    )
    prof = profile(config_options={" reasoning_effort ": "max", "verbosity": "low"})
    async with runtime(ex, time_scale, prof) as rt:
        eid, s = await launched(rt)
        (snapshot,) = original(s)
        assert [(o.id, o.current_value) for o in snapshot.original_config_candidate or ()] == [
            ("reasoning_effort", "max"),
            ("fast_mode", "off"),
            ("model", "fast"),  # the agent's current model
            ("verbosity", "low"),
        ]
        await rt.stop(eid, "done")


async def test_s59_settlement_waits_for_the_delayed_model_state(time_scale: float) -> None:
    """The profile set ``effort`` before any model state existed, so settlement is deferred;
    the later provider response for ``effort`` (model sonnet, effort=high) settles it once."""
    ex = memory_agent(lambda t: t.handlers.update(set_config_option=lambda *_: None), models=())
    async with runtime(ex, time_scale, profile(config_options={"effort": "high"})) as rt:
        eid, s = await launched(rt)
        assert settlement_path(s) == ["deferred"]
        assert settled(s) == []
        ex.last.emit(
            SessionModels(
                current_model_id="sonnet",
                session_models=models("sonnet"),
                config_options=[option("effort", "high")],
                data={
                    "config_options_source": "provider_response",
                    "config_options_config_id": "effort",
                },
            )
        )
        await wait_until(lambda: len(settled(s)) == 1)
        await settle()
        (event,) = settled(s)
        assert event.current_model_id == "sonnet"
        assert values(event.config_options) == {"effort": "high"}
        await rt.stop(eid, "done")


PROVIDER_DEFAULTS = (option("effort", "medium"), option("fast_mode", "off"))


async def test_s61_baseline_keeps_provider_defaults(time_scale: float) -> None:
    """Provider defaults effort=medium, fast_mode=off; the response to the profile's startup
    ``effort`` change reports low/on: one settled event, live low/on, baseline medium/off."""

    def setup(t: MemoryTransport) -> None:
        t.handlers["set_config_option"] = lambda cid, _v: t.emit(
            response(cid, option("effort", "low"), option("fast_mode", "on"))
        )

    ex = memory_agent(setup, config_options=PROVIDER_DEFAULTS)
    async with runtime(ex, time_scale, profile(config_options={"effort": "low"})) as rt:
        eid, s = await launched(rt)
        await wait_until(lambda: len(settled(s)) >= 1)
        await settle()
        (event,) = settled(s)
        assert values(event.config_options) == {"effort": "low", "fast_mode": "on"}
        assert values(event.config_baseline_candidate) == {"effort": "medium", "fast_mode": "off"}
        await rt.stop(eid, "done")


async def test_s62_a_old_update_then_settle_then_response(time_scale: float) -> None:
    """(a) An old provider update, then the settle call, then the matching response: published
    once, with the response's value."""
    holder: list[Runtime] = []

    def setup(t: MemoryTransport) -> None:
        async def set_option(_cid: str, _v: str) -> None:
            old = update(option("effort", "stale"))
            t.emit(old)
            await processed(holder[0], old)

        t.handlers["set_config_option"] = set_option

    ex = memory_agent(setup, config_options=PROVIDER_DEFAULTS)
    async with runtime(ex, time_scale, profile(config_options={"effort": "low"})) as rt:
        holder.append(rt)
        eid, s = await launched(rt)
        assert settlement_path(s) == ["deferred"]
        assert settled(s) == []
        ex.last.emit(response("effort", option("effort", "low"), option("fast_mode", "off")))
        await wait_until(lambda: len(settled(s)) >= 1)
        await settle()
        (event,) = settled(s)
        assert values(event.config_options)["effort"] == "low"
        await rt.stop(eid, "done")


async def test_s62_the_applied_model_settles_on_the_response_of_its_catalog_option(
    time_scale: float,
) -> None:
    """The profile's model was applied and the agent's catalog names its model option
    ``model_picker`` (category model): the settlement waits for the response for that option,
    not for one named ``model``."""
    catalog = (option("model_picker", "fast", category="model"), option("effort", "low"))
    ex = memory_agent(config_options=catalog, models=models("smart"))
    async with runtime(ex, time_scale, profile(model="smart")) as rt:
        eid, s = await launched(rt)
        assert set_models(ex.last) == ["smart"]
        assert settlement_path(s) == ["deferred"]
        ex.last.emit(response("model", option("model_picker", "smart", category="model")))
        ex.last.emit(update(option("effort", "high")))
        await settle()
        assert settled(s) == []
        ex.last.emit(response("model_picker", option("model_picker", "smart", category="model")))
        await wait_until(lambda: len(settled(s)) >= 1)
        await rt.stop(eid, "done")


async def test_s62_the_model_option_is_found_by_its_id_or_category_not_by_its_place(
    time_scale: float,
) -> None:
    """The same with another option listed first (``thinking``, ``effort``: one whose id and
    category sort after ``model``, one before): the settlement still waits for the model
    option's response, not for the first option's."""
    for first, category in (("thinking", "thought_level"), ("effort", "")):
        catalog = (
            option(first, "low", category=category),
            option("model_picker", "fast", category="model"),
        )
        ex = memory_agent(config_options=catalog, models=models("smart"))
        async with runtime(ex, time_scale, profile(model="smart")) as rt:
            eid, s = await launched(rt)
            ex.last.emit(response(first, option(first, "high", category=category)))
            await settle()
            assert settled(s) == []
            picked = option("model_picker", "smart", category="model")
            ex.last.emit(response("model_picker", picked))
            await wait_until(lambda s=s: len(settled(s)) >= 1)  # type: ignore[misc]
            await rt.stop(eid, "done")


async def test_s62_b_response_then_newer_update_then_settle(time_scale: float) -> None:
    """(b) The matching response, then a newer provider update, then the settle call: one
    event, live = the newest update, baseline = the provider defaults."""
    holder: list[Runtime] = []

    def setup(t: MemoryTransport) -> None:
        async def set_option(cid: str, _v: str) -> None:
            first = response(cid, option("effort", "low"), option("fast_mode", "off"))
            newer = update(option("effort", "max"), option("fast_mode", "on"))
            t.emit(first)
            t.emit(newer)
            await processed(holder[0], newer)

        t.handlers["set_config_option"] = set_option

    ex = memory_agent(setup, config_options=PROVIDER_DEFAULTS)
    async with runtime(ex, time_scale, profile(config_options={"effort": "low"})) as rt:
        holder.append(rt)
        eid, s = await launched(rt)
        assert settlement_path(s)[0] == "published"
        await settle()
        (event,) = settled(s)
        assert values(event.config_options) == {"effort": "max", "fast_mode": "on"}
        assert values(event.config_baseline_candidate) == {"effort": "medium", "fast_mode": "off"}
        await rt.stop(eid, "done")


async def test_s62_c_unrelated_updates_do_not_settle(time_scale: float) -> None:
    """(c) A pending settlement is not settled by a provider update (even one for the same
    option) nor by another option's response; the matching response settles it once."""
    ex = memory_agent(
        lambda t: t.handlers.update(set_config_option=lambda *_: None),
        config_options=PROVIDER_DEFAULTS,
    )
    async with runtime(ex, time_scale, profile(config_options={"effort": "low"})) as rt:
        eid, s = await launched(rt)
        assert settlement_path(s) == ["deferred"]
        unrelated = [
            update(option("effort", "low")),
            response("fast_mode", option("fast_mode", "on")),
        ]
        for event in unrelated:
            ex.last.emit(event)
            await processed(rt, event)
        assert settled(s) == []
        ex.last.emit(response("effort", option("effort", "low")))
        await wait_until(lambda: len(settled(s)) >= 1)
        await settle()
        assert len(settled(s)) == 1
        await rt.stop(eid, "done")


async def test_s62_d_queued_initial_state_stays_the_baseline(time_scale: float) -> None:
    """(d) No synchronous catalog; the provider's initial state (medium/off) is queued before the
    matching response to the profile's change: it stays the baseline."""
    holder: list[Runtime] = []

    def setup(t: MemoryTransport) -> None:
        async def set_option(_cid: str, _v: str) -> None:
            initial = update(*PROVIDER_DEFAULTS)
            t.emit(initial)
            await processed(holder[0], initial)

        t.handlers["set_config_option"] = set_option

    ex = memory_agent(setup, models=())
    async with runtime(ex, time_scale, profile(config_options={"effort": "low"})) as rt:
        holder.append(rt)
        eid, s = await launched(rt)
        assert settlement_path(s) == ["deferred"]
        ex.last.emit(response("effort", option("effort", "low"), option("fast_mode", "off")))
        await wait_until(lambda: len(settled(s)) >= 1)
        await settle()
        (event,) = settled(s)
        assert values(event.config_options) == {"effort": "low", "fast_mode": "off"}
        assert values(event.config_baseline_candidate) == {"effort": "medium", "fast_mode": "off"}
        await rt.stop(eid, "done")


async def test_s62_e_empty_config_id_settles_on_the_first_update(time_scale: float) -> None:
    """(e) Nothing applied (config id ``""``) and no model state yet: the first provider update
    settles, once."""
    ex = memory_agent(models=())
    async with runtime(ex, time_scale) as rt:
        eid, s = await launched(rt)
        assert settlement_path(s) == ["deferred"]
        first = update(option("effort", "high"), model="m1", model_list=["m1"])
        ex.last.emit(first)
        await processed(rt, first)
        second = update(option("effort", "low"))
        ex.last.emit(second)
        await processed(rt, second)
        (event,) = settled(s)
        assert event.current_model_id == "m1"
        assert values(event.config_options) == {"effort": "high"}
        await rt.stop(eid, "done")


async def test_s62_e_a_first_update_without_options_settles_against_the_cache(
    time_scale: float,
) -> None:
    """(e) again, the first update naming models but no config option: no provider default
    was ever captured (no state before the policy, no options since), so the baseline is the
    cache itself, with no options."""
    ex = memory_agent(models=())
    async with runtime(ex, time_scale) as rt:
        eid, s = await launched(rt)
        assert settlement_path(s) == ["deferred"]
        first = update(model="m1", model_list=["m1"])
        ex.last.emit(first)
        await processed(rt, first)
        assert s.ctx.models.provider_default is None
        (event,) = settled(s)
        assert event.current_model_id == "m1"
        assert event.config_options == []
        assert event.config_baseline_candidate == []
        assert s.execution.status == "READY"
        await rt.stop(eid, "done")


async def test_s62_f_a_matching_response_is_consumed_once(time_scale: float) -> None:
    """(f) The response cached before the settle call is consumed by it, so a second settle call
    for the same id finds nothing to consume: two settle calls, one event."""
    holder: list[Runtime] = []

    def setup(t: MemoryTransport) -> None:
        async def set_option(cid: str, _v: str) -> None:
            answer = response(cid, option("effort", "low"))
            t.emit(answer)
            await processed(holder[0], answer)

        t.handlers["set_config_option"] = set_option

    ex = memory_agent(setup, config_options=PROVIDER_DEFAULTS)
    async with runtime(ex, time_scale, profile(config_options={"effort": "low"})) as rt:
        holder.append(rt)
        eid, s = await launched(rt)
        assert settlement_path(s)[0] == "published"
        assert len(settled(s)) == 1
        # the cached response was consumed by the settlement: nothing is left for another one
        assert "effort" not in s.ctx.models.responses_applied
        await settle()
        assert len(settled(s)) == 1
        await rt.stop(eid, "done")
