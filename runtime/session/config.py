"""Models and config options: the start-model policy, the profile and runtime layers, the
original and settled snapshots (kandev lifecycle/session.go ``applyStartModelPolicy…``,
``applyProfileSessionLayers``, ``publishOriginalConfigOptionsWithProfile``,
``applyRuntimeSessionLayers``, ``publishSettledConfigOptions``).

The decisions are the charts': :class:`~acpfsm.statecharts.StartModelPolicy` says which
SetModel call to make and what was decided, :class:`~acpfsm.statecharts.ConfigSettlement`
when the settled snapshot is published. This module performs their effects and the layers'
RPCs; a failing layer call is data (logged, or listed as a config failure), never a state.
"""

from __future__ import annotations

import functools
import logging

from acpfsm.adapters import events as ev
from acpfsm.adapters.errors import AgentRequestError
from acpfsm.adapters.transport import SessionResult
from acpfsm.statecharts import ChartMachine, Effect, model_decision
from acpfsm.statecharts.charts import CONFIG_SETTLEMENT, START_MODEL_POLICY
from acpfsm.statecharts.names import (
    ConfigSettlementEffect,
    ConfigSettlementEvent,
    StartModelPolicyEffect,
    StartModelPolicyEvent,
)

from .. import events as le
from .context import ExecutionContext, Failed, ModelState, bounded, decision_id

__all__ = ["ConfigDriver"]

log = logging.getLogger("acpfsm.runtime")
_RESERVED_OPTION_KEYS = ("model", "mode")


class ConfigDriver:
    """The start-model policy and settlement machines, and the layers between them."""

    def __init__(self, ctx: ExecutionContext) -> None:
        self.ctx = ctx
        self.policy: ChartMachine | None = None
        self.settlement: ChartMachine | None = None
        self._decided: Effect | None = None
        self._set_model_error = ""
        ctx.handle(
            START_MODEL_POLICY.chart_name,
            {
                StartModelPolicyEffect.set_model: self._noop,
                StartModelPolicyEffect.decided: self._on_decided,
            },
        )
        ctx.handle(
            CONFIG_SETTLEMENT.chart_name,
            {ConfigSettlementEffect.publish_settled: self._on_publish_settled},
        )

    @staticmethod
    def _noop(effect: Effect, machine: ChartMachine) -> None:
        """``set_model`` is performed by :meth:`start_model`'s loop, which reads the step."""

    def _on_decided(self, effect: Effect, machine: ChartMachine) -> None:
        self._decided = effect

    # --- the synchronous catalog snapshot of session/new|load ----------------------------

    def establish(self, acp_session_id: str, result: SessionResult) -> bool:
        """Record the session; cache the response's catalog snapshot, if it carried one
        (``cacheFreshSessionModelState``). Returns whether it did. Without a snapshot the
        cache keeps what ``session_models`` updates already put there (scenario s43)."""
        self.ctx.acp_session_id = acp_session_id
        if not result.has_model_state:
            return False
        self.ctx.models.state = ModelState(
            current_model_id=result.current_model_id,
            models=list(result.models),
            config_options=list(result.config_options),
        )
        return True

    # --- the start-model policy ----------------------------------------------------------

    async def _set_model(self, model: str) -> None:
        await self.ctx.transport_or_raise().set_model(model)

    async def start_model(self) -> tuple[str, str]:
        """``applyStartModelPolicyToEffectiveModel``: ``(applied_model, error)``."""
        ctx = self.ctx
        state = ctx.models.state
        ctx.models.provider_default = state.copy() if state is not None else None
        model = str(ctx.metadata.get("runtime_model", "")) or ctx.profile.model
        if not model:
            return "", ""
        policy = self.policy = ctx.start(
            START_MODEL_POLICY,
            requested_model=model,
            fallback_model=ctx.profile.fallback_model,
            auto_fallback=ctx.profile.auto_fallback,
        )
        current = state.current_model_id if state is not None else ""
        fired = await ctx.step(
            policy,
            StartModelPolicyEvent.policy_evaluated,
            advertised=[m.model_id for m in state.models] if state is not None else [],
        )
        while True:
            calls = [
                e for _, s in fired for e in s.effects if e.name == StartModelPolicyEffect.set_model
            ]
            if not calls:
                break
            to_set = str(policy.constant(calls[0]["model_field"]))
            got = await bounded(ctx.timeouts.request, functools.partial(self._set_model, to_set))
            if isinstance(got, Failed):
                exc = got.error
                self._set_model_error = str(exc)
                fired = await ctx.step(
                    policy,
                    StartModelPolicyEvent.set_model_failed,
                    method_not_found=isinstance(exc, AgentRequestError) and exc.code == -32601,
                )
            else:
                fired = await ctx.step(policy, StartModelPolicyEvent.set_model_succeeded)
        assert self._decided is not None, "the start-model policy decided nothing"
        decision = model_decision(
            self._decided,
            requested=model,
            fallback=ctx.profile.fallback_model,
            current=current,
            error=self._set_model_error,
        )
        if decision.error:
            log.warning("start model unavailable, failing session start: %s", decision.error)
            return "", decision.error
        if decision.warning:
            ctx.publish(
                le.ModelSelectionWarning(
                    execution_id=ctx.id,
                    decision_id=decision_id(
                        ctx.id,
                        ctx.acp_session_id,
                        decision.requested_model,
                        decision.reason,
                        decision.effective_model,
                    ),
                    reason=decision.reason,
                    requested_model=decision.requested_model,
                    effective_model=decision.effective_model,
                    fallback_model=decision.fallback_model
                    if decision.outcome == "explicit_fallback"
                    else "",
                    agent_id=ctx.profile.id,
                    executor_type=ctx.spec.executor_id,
                    executor_profile_id=str(ctx.metadata.get("executor_profile_id", "")),
                )
            )
            if decision.outcome == "explicit_fallback":
                # the legacy event follows only a warning that names a fallback (kandev
                # publishModelSelectionWarningEvent: warning.FallbackModel != "")
                ctx.publish(
                    le.ModelFallback(execution_id=ctx.id, fallback_model=decision.fallback_model)
                )
        applied = (
            decision.effective_model if decision.outcome in ("applied", "explicit_fallback") else ""
        )
        if applied and ctx.models.state is not None:
            ctx.models.state.current_model_id = applied
        return applied, ""

    # --- layers ----------------------------------------------------------------------------

    def _model_config_id(self) -> str:
        state = self.ctx.models.state
        if state is not None:
            for option in state.config_options:
                if option.id == "model" or option.category == "model":
                    return option.id
        return "model"

    async def profile_layer(self, applied_model: str) -> tuple[str, dict[str, str]]:
        """``applyProfileSessionLayers``: ``(final_config_id, applied)`` where ``applied`` maps
        ``model``, ``mode`` and config ids to the values that took effect. The profile's
        model is the start-model policy's business; only the model it applied is recorded."""
        ctx = self.ctx
        transport = ctx.transport_or_raise()
        applied: dict[str, str] = {}
        final_config_id = ""
        if applied_model:
            applied["model"] = applied_model
            final_config_id = self._model_config_id()
        if ctx.profile.mode:
            mode = ctx.profile.mode
            got = await bounded(ctx.timeouts.request, lambda: transport.set_mode(mode))
            if isinstance(got, Failed):
                log.warning("profile mode %s not applied: %s", mode, got.error)
            else:
                applied["mode"] = mode
        options = {
            k.strip(): v.strip()
            for k, v in ctx.profile.config_options.items()
            if k.strip() and v.strip() and k.strip() not in _RESERVED_OPTION_KEYS
        }
        for key, value in sorted(options.items()):
            got = await bounded(
                ctx.timeouts.request, functools.partial(transport.set_config_option, key, value)
            )
            if isinstance(got, Failed):
                log.warning("profile config option %s not applied: %s", key, got.error)
            else:
                applied[key] = value
                final_config_id = key
        return final_config_id, applied

    def publish_original_snapshot(self, applied_model: str, applied: dict[str, str]) -> None:
        """``publishOriginalConfigOptionsWithProfile``: the immutable "original" snapshot."""
        state = self.ctx.models.state
        if state is None:
            return
        options = list(state.config_options)
        current = applied_model or state.current_model_id
        if current:
            for i, option in enumerate(options):
                if option.id == "model" or option.category == "model":
                    options[i] = _with_value(option, current)
                    break
            else:
                options.append(ev.ConfigOption(id="model", category="model", current_value=current))
        for key, value in applied.items():
            if key in _RESERVED_OPTION_KEYS:
                continue
            for i, option in enumerate(options):
                if option.id == key:
                    options[i] = _with_value(option, value)
                    break
            else:
                options.append(ev.ConfigOption(id=key, current_value=value))
        if not current and not options:
            return
        self.ctx.publish(
            ev.SessionModels(
                current_model_id=current,
                session_models=list(state.models),
                config_options=options,
                original_config_candidate=options,
                data={"original_config_settled": True},
            )
        )

    async def runtime_mode(self, profile_applied: dict[str, str]) -> list[str]:
        """The persisted session mode, unless the profile already applied it (the runtime
        model was consumed by the start-model policy at launch)."""
        ctx = self.ctx
        mode = str(ctx.metadata.get("session_mode", ""))
        if not mode or mode == profile_applied.get("mode", ""):
            return []
        got = await bounded(ctx.timeouts.request, lambda: ctx.transport_or_raise().set_mode(mode))
        return ["mode"] if isinstance(got, Failed) else []

    def catalog_known(self) -> bool:
        state = self.ctx.models.state
        return state is not None and state.catalog_known

    async def runtime_options(self, final_config_id: str) -> tuple[str, list[str]]:
        """Runtime config options, sanitized against the known catalog (the SessionInit
        chart withholds them when the catalog is unknown)."""
        ctx = self.ctx
        transport = ctx.transport_or_raise()
        failures: list[str] = []
        state = ctx.models.state
        requested = ctx.metadata.get("runtime_config_options") or {}
        catalog = {o.id: o for o in state.config_options} if state is not None else {}
        clean: dict[str, str] = {}
        if isinstance(requested, dict):
            for raw_key, raw_value in requested.items():
                key, value = str(raw_key).strip(), str(raw_value).strip()
                option = catalog.get(key)
                if option is None or not value or key.lower() in _RESERVED_OPTION_KEYS:
                    continue
                if option.category.lower() in _RESERVED_OPTION_KEYS:
                    continue
                clean[key] = value
        for key, value in sorted(clean.items()):
            got = await bounded(
                ctx.timeouts.request, functools.partial(transport.set_config_option, key, value)
            )
            if isinstance(got, Failed):
                failures.append(key)
            else:
                final_config_id = key
        return final_config_id, failures

    # --- settlement ------------------------------------------------------------------------

    async def settle(self, final_config_id: str) -> None:
        """Start the settlement for ``final_config_id`` (the chart publishes now or later)."""
        ctx = self.ctx
        models = ctx.models
        self.settlement = ctx.start(CONFIG_SETTLEMENT, config_id=final_config_id)
        await ctx.step(
            self.settlement,
            ConfigSettlementEvent.settle_requested,
            catalog_cached=models.state is not None,
            response_applied=final_config_id in models.responses_applied,
        )
        models.responses_applied.discard(final_config_id)

    async def models_updated(self, event: ev.SessionModels) -> None:
        """A ``session_models`` update: into the cache, then a fact for the settlement."""
        ctx = self.ctx
        data = event.data
        provider_response = data.get("config_options_source") == "provider_response"
        config_id = str(data.get("config_options_config_id", "")) if provider_response else ""
        ctx.models.apply(event)
        if self.settlement is None:
            if provider_response:
                ctx.models.responses_applied.add(config_id)
            return
        # (responses_applied is read by settle() alone, which ran before this settlement)
        await ctx.step(
            self.settlement,
            ConfigSettlementEvent.models_updated,
            provider_response=provider_response,
            response_config_id=config_id,
        )

    def _on_publish_settled(self, effect: Effect, machine: ChartMachine) -> None:
        """Publish the cache as settled; its config baseline is the provider default (the
        state captured before the start-model policy, else the first cached state with
        config options), else the cache itself."""
        live = self.ctx.models.state
        assert live is not None
        baseline = self.ctx.models.provider_default or live
        self.ctx.publish(
            ev.SessionModels(
                current_model_id=live.current_model_id,
                session_models=list(live.models),
                config_options=list(live.config_options),
                config_baseline_candidate=list(baseline.config_options),
                data={"config_options_settled": True},
            )
        )


def _with_value(option: ev.ConfigOption, value: str) -> ev.ConfigOption:
    return ev.ConfigOption(
        id=option.id,
        name=option.name,
        type=option.type,
        category=option.category,
        current_value=value,
        options=option.options,
    )
