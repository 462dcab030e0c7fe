"""The start-model policy's decision (kandev's ``ModelSelectionDecision``), built from the
``decided`` effect of the :class:`~acpfsm.statecharts.StartModelPolicy` chart: plain data,
importable without the chart (the runtime's config driver builds it)."""

from __future__ import annotations

from dataclasses import dataclass

from ._compile import Effect

__all__ = ["ModelSelectionDecision", "decision"]


@dataclass(frozen=True, slots=True)
class ModelSelectionDecision:
    """The outcome of the policy (kandev's ``ModelSelectionDecision``)."""

    requested_model: str
    fallback_model: str
    effective_model: str
    outcome: str  # "" | "applied" | "explicit_fallback" | "provider_default"
    reason: str
    warning: bool
    set_model_called: bool
    error: str = ""


def decision(
    decided: Effect, *, requested: str, fallback: str, current: str, error: str = ""
) -> ModelSelectionDecision:
    """The policy's decision from its ``decided`` effect and the inputs (``current`` is the
    session's model before the policy; ``error`` the failed SetModel call's)."""
    outcome, reason = decided["outcome"], decided["reason"]
    if decided["failed"]:
        what = (
            f'failed to set fallback model "{fallback}"'
            if decided["failed"] == "fallback"
            else f'failed to set start model "{requested}"'
        )
        return ModelSelectionDecision(
            requested, fallback, "", "", "", False, True, f"{what}: {error}"
        )
    if outcome == "":
        return ModelSelectionDecision(requested, fallback, "", "", "", False, False)
    if outcome == "applied":
        effective = requested
    elif outcome == "explicit_fallback":
        effective = fallback
    else:
        effective = current
    return ModelSelectionDecision(
        requested_model=requested,
        fallback_model=fallback,
        effective_model=effective,
        outcome=outcome,
        reason=reason,
        warning=outcome in ("provider_default", "explicit_fallback"),
        set_model_called=bool(decided["set_called"]),
    )
