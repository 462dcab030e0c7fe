"""ConfigSettlement: when the settled config-options snapshot is published.

Theory of operation
-------------------
kandev's ``publishSettledConfigOptions`` / ``SettleConfigOptions`` (lifecycle/session.go,
lifecycle/types.go): after the profile and runtime layers, the session's config options are
published once as *settled*. The snapshot must be the agent's answer to the last config call
the layers made (``config_id``, the instance's constant), so it may have to wait for it:

* ``settle_requested`` from ``unsettled``: published at once when no config call was made
  and the cache already holds a catalog, or when the answer to ``config_id`` has already been
  applied to the cache (``response_applied``: the runtime saw it arrive); otherwise the
  settlement is ``deferred``.
* ``models_updated`` (a ``session_models`` update was applied to the cache) while
  ``deferred``: the one it waits for publishes the snapshot - any update when no config call
  was made, else the agent's answer (``provider_response``) to ``config_id``; any other
  update changes nothing.
* ``published`` takes every later update without effect.

No update meets the settlement ``unsettled``: the runtime fires ``settle_requested`` in the
very step that starts it (an update that comes first is remembered by the runtime, and
``response_applied`` says so), so ``models_updated`` there is illegal.

Effects: ``publish_settled`` (the cache as the settled snapshot, against the baseline the
runtime captured before the layers).
"""

from __future__ import annotations

from typing import ClassVar

from statemachine import State

from ._base import Chart
from ._compile import Effects

__all__ = ["ConfigSettlement"]


class ConfigSettlement(Chart):
    """unsettled → (deferred →) published."""

    chart_name: ClassVar[str] = "config_settlement"
    constants: ClassVar[dict[str, object]] = {"config_id": ""}
    config_id: str

    unsettled = State("unsettled", initial=True)
    deferred = State("deferred")
    published = State("published")

    settle_requested = (
        unsettled.to(published, cond="nothing_to_wait_for")
        | unsettled.to(published, cond="response_seen")
        | unsettled.to(deferred)
    )
    models_updated = deferred.to(published, cond="settles") | deferred.to(None) | published.to(None)

    effects: ClassVar[Effects] = Effects(on_enter={"published": ["publish_settled"]})

    def nothing_to_wait_for(self, catalog_cached: bool = False) -> bool:
        return self.config_id == "" and catalog_cached

    def response_seen(self, response_applied: bool = False) -> bool:
        return self.config_id != "" and response_applied

    def settles(self, provider_response: bool = False, response_config_id: str = "") -> bool:
        return self.config_id == "" or (provider_response and response_config_id == self.config_id)
