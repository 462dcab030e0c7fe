"""StartModelPolicy: which model a new ACP session starts on.

Theory of operation
-------------------
This is kandev's ``applyStartModelPolicy`` (lifecycle/start_model.go, its decision table).
The runtime sends ``policy_evaluated`` once with the advertised catalog; the chart moves to a
final outcome or to ``setting_requested`` / ``setting_fallback``, whose entry effect
``set_model`` names the one SetModel call the runtime performs before it reports
``set_model_succeeded`` or ``set_model_failed``.

"Advertised" means the ids of the catalog's models only; config options are not consulted.
"Method not found" is a structured -32601 (event data ``method_not_found``).

Each of the eleven rows of the decision table is one transition into a final state, whose
``decided`` effect carries the outcome and reason:

====  ==============================================  =========================================
row   transition                                      final state (outcome / reason)
====  ==============================================  =========================================
1     evaluating → none [no_model]                    none (no warning)
2     evaluating → catalog_empty [catalog_is_empty]   provider_default / catalog_empty
3     setting_fallback → explicit_fallback            explicit_fallback / requested_not_advertised
4     setting_fallback → selection_unsupported        provider_default / selection_unsupported
5     setting_fallback → failed                       error ``failed to set fallback model``
6     evaluating → requested_not_advertised           provider_default / requested_not_advertised
7     evaluating → fallback_not_advertised            provider_default / fallback_not_advertised
8     setting_requested → applied                     applied
9     setting_requested → selection_unsupported       provider_default / selection_unsupported
10    setting_requested → selection_failed_auto_fb    provider_default / selection_failed_auto_fallback
11    setting_requested → failed                      error ``failed to set start model`` (the
                                                      fallback is NOT tried, even if advertised)
====  ==============================================  =========================================

The decision (:func:`~.model_decision.decision`) is built from that effect and the inputs;
its ``warning`` flag is data of the outcome (true for every provider_default and for
explicit_fallback).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from statemachine import State

from ._base import Chart
from ._compile import Effects, EffectSpec, effect
from .model_decision import ModelSelectionDecision, decision

__all__ = ["ModelSelectionDecision", "StartModelPolicy", "decision"]


_SET_REQUESTED = effect("set_model", model_field="requested_model")
_SET_FALLBACK = effect("set_model", model_field="fallback_model")


def _decided(outcome: str, reason: str, *, set_called: bool, failed: str = "") -> EffectSpec:
    return effect("decided", outcome=outcome, reason=reason, set_called=set_called, failed=failed)


class StartModelPolicy(Chart):
    """The start-model decision table as a chart (kandev lifecycle/start_model.go)."""

    chart_name: ClassVar[str] = "start_model_policy"
    constants: ClassVar[dict[str, object]] = {
        "requested_model": "",
        "fallback_model": "",
        "auto_fallback": False,
    }
    requested_model: str
    fallback_model: str
    auto_fallback: bool

    evaluating = State("evaluating", initial=True)
    setting_requested = State("setting_requested")
    setting_fallback = State("setting_fallback")

    none = State("none", final=True)
    catalog_empty = State("catalog_empty", final=True)
    requested_not_advertised = State("requested_not_advertised", final=True)
    fallback_not_advertised = State("fallback_not_advertised", final=True)
    applied = State("applied", final=True)
    explicit_fallback = State("explicit_fallback", final=True)
    selection_unsupported = State("selection_unsupported", final=True)
    selection_failed_auto_fallback = State("selection_failed_auto_fallback", final=True)
    failed = State("failed", final=True)

    policy_evaluated = (
        evaluating.to(none, cond="no_model")  # row 1
        | evaluating.to(catalog_empty, cond="catalog_is_empty")  # row 2
        | evaluating.to(setting_requested, cond="requested_advertised")  # rows 8-11
        | evaluating.to(setting_fallback, cond="fallback_advertised")  # rows 3-5
        | evaluating.to(requested_not_advertised, cond="no_fallback")  # row 6
        | evaluating.to(fallback_not_advertised)  # row 7
    )
    set_model_succeeded = (
        setting_requested.to(applied)  # row 8
        | setting_fallback.to(explicit_fallback)  # row 3
    )
    set_model_failed = (
        setting_requested.to(selection_unsupported, cond="method_not_found")  # row 9
        | setting_requested.to(selection_failed_auto_fallback, cond="auto_fallback_on")  # row 10
        | setting_requested.to(failed)  # row 11
        | setting_fallback.to(selection_unsupported, cond="method_not_found")  # row 4
        | setting_fallback.to(failed)  # row 5 (AutoFallback is ignored here)
    )

    effects: ClassVar[Effects] = Effects(
        on_enter={"setting_requested": [_SET_REQUESTED], "setting_fallback": [_SET_FALLBACK]},
        transitions={
            "policy_evaluated: evaluating -> none": [_decided("", "", set_called=False)],
            "policy_evaluated: evaluating -> catalog_empty": [
                _decided("provider_default", "catalog_empty", set_called=False)
            ],
            "policy_evaluated: evaluating -> requested_not_advertised": [
                _decided("provider_default", "requested_not_advertised", set_called=False)
            ],
            "policy_evaluated: evaluating -> fallback_not_advertised": [
                _decided("provider_default", "fallback_not_advertised", set_called=False)
            ],
            "set_model_succeeded: setting_requested -> applied": [
                _decided("applied", "", set_called=True)
            ],
            "set_model_succeeded: setting_fallback -> explicit_fallback": [
                _decided("explicit_fallback", "requested_not_advertised", set_called=True)
            ],
            "set_model_failed: setting_requested -> selection_unsupported": [
                _decided("provider_default", "selection_unsupported", set_called=True)
            ],
            "set_model_failed: setting_requested -> selection_failed_auto_fallback": [
                _decided("provider_default", "selection_failed_auto_fallback", set_called=True)
            ],
            "set_model_failed: setting_requested -> failed": [
                _decided("", "", set_called=True, failed="start")
            ],
            "set_model_failed: setting_fallback -> selection_unsupported": [
                _decided("provider_default", "selection_unsupported", set_called=True)
            ],
            "set_model_failed: setting_fallback -> failed": [
                _decided("", "", set_called=True, failed="fallback")
            ],
        },
    )

    # --- guards --------------------------------------------------------------------------

    def no_model(self) -> bool:
        return self.requested_model == ""

    def catalog_is_empty(self, advertised: Sequence[str] = ()) -> bool:
        return len(advertised) == 0

    def requested_advertised(self, advertised: Sequence[str] = ()) -> bool:
        return self.requested_model in advertised

    def fallback_advertised(self, advertised: Sequence[str] = ()) -> bool:
        return self.fallback_model != "" and self.fallback_model in advertised

    def no_fallback(self) -> bool:
        return self.fallback_model == ""

    def method_not_found(self, method_not_found: bool = False) -> bool:
        return method_not_found

    def auto_fallback_on(self) -> bool:
        return bool(self.auto_fallback)
