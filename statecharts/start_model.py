"""StartModelPolicy: which model a new ACP session starts on.

Theory of operation
-------------------
This is ``applyStartModelPolicy`` (lifecycle.md §3.2 decision table, drawn in §3.4). The runtime
sends ``policy_evaluated`` once with the policy and the advertised catalog; the chart moves to a
final outcome or to ``setting_requested`` / ``setting_fallback``, where the runtime performs the
one SetModel call the state names and reports ``set_model_succeeded`` or ``set_model_failed``.

"Advertised" means the ids of the catalog's models only; config options are not consulted
(§3.2). "Method not found" is a structured -32601 (event data ``method_not_found``).

Each of the eleven rows of §3.2 is one transition into a final state:

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

The decision (:meth:`StartModelPolicy.decision`) is derived from the final state and the inputs;
its ``warning`` flag is data of the outcome (true for every provider_default and for
explicit_fallback).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from statemachine import State

from ._base import Chart, TransitionObserver

__all__ = ["ModelSelectionDecision", "StartModelPolicy"]


@dataclass(frozen=True, slots=True)
class ModelSelectionDecision:
    """The outcome of the policy (``ModelSelectionDecision`` of lifecycle.md §3.1)."""

    requested_model: str
    fallback_model: str
    effective_model: str
    outcome: str  # "" | "applied" | "explicit_fallback" | "provider_default"
    reason: str
    warning: bool
    set_model_called: bool
    error: str = ""


# final state → (outcome, reason)
_OUTCOMES: dict[str, tuple[str, str]] = {
    "none": ("", ""),
    "catalog_empty": ("provider_default", "catalog_empty"),
    "requested_not_advertised": ("provider_default", "requested_not_advertised"),
    "fallback_not_advertised": ("provider_default", "fallback_not_advertised"),
    "applied": ("applied", ""),
    "explicit_fallback": ("explicit_fallback", "requested_not_advertised"),
    "selection_unsupported": ("provider_default", "selection_unsupported"),
    "selection_failed_auto_fallback": ("provider_default", "selection_failed_auto_fallback"),
    "failed": ("", ""),
}


class StartModelPolicy(Chart):
    """The start-model decision table as a chart (lifecycle.md §3.2, §3.4)."""

    chart_name: ClassVar[str] = "start_model_policy"

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
        | setting_requested.to(selection_failed_auto_fallback, cond="auto_fallback")  # row 10
        | setting_requested.to(failed)  # row 11
        | setting_fallback.to(selection_unsupported, cond="method_not_found")  # row 4
        | setting_fallback.to(failed)  # row 5 (AutoFallback is ignored here)
    )

    def __init__(
        self,
        *,
        model: str,
        fallback_model: str = "",
        auto_fallback: bool = False,
        tags: dict[str, Any] | None = None,
        observers: tuple[TransitionObserver, ...] = (),
    ) -> None:
        self.requested_model = model
        self.fallback_model = fallback_model
        self.auto_fallback_enabled = auto_fallback
        self.advertised: tuple[str, ...] = ()
        self.current_model = ""
        self.error = ""
        super().__init__(tags=tags, observers=observers)

    # --- actions: record event data (no I/O) ---------------------------------------------

    def on_policy_evaluated(self, advertised: Sequence[str] = (), current_model: str = "") -> None:
        self.advertised = tuple(advertised)
        self.current_model = current_model

    def on_set_model_failed(self, error: str = "") -> None:
        self.error = error

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

    def auto_fallback(self) -> bool:
        return self.auto_fallback_enabled

    # --- the decision ----------------------------------------------------------------------

    @property
    def model_to_set(self) -> str:
        """The model the runtime must SetModel now ("" when no call is due)."""
        if self.leaf == "setting_requested":
            return self.requested_model
        if self.leaf == "setting_fallback":
            return self.fallback_model
        return ""

    def decision(self) -> ModelSelectionDecision:
        """The decision of a finished policy (raises if still running)."""
        state = self.leaf
        if state not in _OUTCOMES:
            raise ValueError(f"start-model policy not finished (state {state!r})")
        outcome, reason = _OUTCOMES[state]
        set_called = any(
            r.source in ("setting_requested", "setting_fallback") for r in self.history
        )
        if state == "failed":
            tried_fallback = any(r.source == "setting_fallback" for r in self.history)
            what = (
                f'failed to set fallback model "{self.fallback_model}"'
                if tried_fallback
                else f'failed to set start model "{self.requested_model}"'
            )
            error = f"{what}: {self.error}"
            return ModelSelectionDecision(
                self.requested_model, self.fallback_model, "", "", "", False, set_called, error
            )
        if outcome == "":
            return ModelSelectionDecision(
                self.requested_model, self.fallback_model, "", "", "", False, False
            )
        if outcome == "applied":
            effective = self.requested_model
        elif outcome == "explicit_fallback":
            effective = self.fallback_model
        else:
            effective = self.current_model
        return ModelSelectionDecision(
            requested_model=self.requested_model,
            fallback_model=self.fallback_model,
            effective_model=effective,
            outcome=outcome,
            reason=reason,
            warning=outcome in ("provider_default", "explicit_fallback"),
            set_model_called=set_called,
        )
