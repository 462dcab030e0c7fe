"""SessionInit: from a started agent process to a session that is prompting or ready.

Theory of operation
-------------------
This is ``InitializeAndPromptWithLayers`` / ``initializeACPConnection`` (lifecycle.md §2.1, the
drawing in §7.1) with the seed's three-way session/load outcome (seed D1-D5). Each working state
names the one thing the runtime must do next; the runtime does it and reports the fact.

1. ``connecting_stream`` - stream connect, bounded by 10 s (§2.1 step 2). The dial attempt
   finishing (success *or* refusal) is ``stream_ready``; a refused dial then fails at the
   handshake, as in kandev. ``stream_connect_timed_out`` fails the init.
2. ``handshaking`` - ``initialize`` (§2.1 step 3). On success the load/new decision is taken
   from the event data (§2.1 step 4 table): NativeSessionResume and a prior ACP session id →
   ``loading``; otherwise ``creating`` (a prior id is ignored without NativeSessionResume).
3. ``loading`` - session/load. ``load_failed`` carries the classification
   (:class:`~acpfsm.statecharts.vocab.ErrorClass`, computed by the adapters' table):

   * transport-dead → ``failed``; no session/new fallback;
   * fallback-authorizing (method not found, session unknown, load capability false, provider
     rollout missing for *this* id) → ``creating``;
   * anything else is inconclusive → ``failed``, and the stored ACP session id is preserved
     (the runtime only records an id when the session is established).
4. ``creating`` - session/new.
5. ``awaiting_catalog`` - the runtime reports whether the synchronous catalog snapshot arrived
   and whether a model is requested; only "no snapshot and a model requested" waits
   (``waiting_for_catalog``, 10 ms polls ≤ 2 s, §2.1 step 6, R30). Expiry is not a failure.
6. ``applying_start_model`` - the StartModelPolicy chart runs (§3); an error fails the init.
7. ``applying_profile_layer`` → ``original_snapshot`` → ``applying_runtime_mode`` →
   ``applying_runtime_options`` → ``settling`` (§4.1-§4.4). The runtime mode is always applied;
   the runtime config options only when the catalog is known (the catalog-known fail-safe,
   §4.3); otherwise they are withheld and nothing is reported as failed.
8. ``announcing`` - publish failures and ``acp_session_created`` (§4.5, §2.1 step 12), then
   dispatch (§2.3): an initial prompt → ``prompting``; no prompt but resume context to inject
   → ``ready_resume_context_pending``; otherwise ``ready``.

``init_abandoned`` (the launch was stopped or cancelled) leaves any working state.
"""

from __future__ import annotations

from typing import ClassVar

from statemachine import State

from ._base import Chart
from .vocab import FALLBACK_AUTHORIZING, ErrorClass

__all__ = ["SessionInit"]


class SessionInit(Chart):
    """Stream connect → initialize → load/new → catalog → policy → layers → announce."""

    chart_name: ClassVar[str] = "session_init"

    class initializing(State.Compound):
        connecting_stream = State("connecting_stream", initial=True)
        handshaking = State("handshaking")
        loading = State("loading")
        creating = State("creating")
        awaiting_catalog = State("awaiting_catalog")
        waiting_for_catalog = State("waiting_for_catalog")
        applying_start_model = State("applying_start_model")
        applying_profile_layer = State("applying_profile_layer")
        original_snapshot = State("original_snapshot")
        applying_runtime_mode = State("applying_runtime_mode")
        applying_runtime_options = State("applying_runtime_options")
        settling = State("settling")
        announcing = State("announcing")

    prompting = State("prompting", final=True)
    ready_resume_context_pending = State("ready_resume_context_pending", final=True)
    ready = State("ready", final=True)
    failed = State("failed", final=True)
    abandoned = State("abandoned", final=True)

    # 1. stream connect (§2.1 step 2)
    stream_ready = initializing.connecting_stream.to(initializing.handshaking)
    stream_connect_timed_out = initializing.connecting_stream.to(failed)
    # 2. initialize (§2.1 step 3) and the load/new decision (step 4)
    initialize_succeeded = initializing.handshaking.to(
        initializing.loading, cond="should_load"
    ) | initializing.handshaking.to(initializing.creating)
    initialize_failed = initializing.handshaking.to(failed)
    # 3. session/load, seed D1: three outcomes
    load_succeeded = initializing.loading.to(initializing.awaiting_catalog)
    load_failed = (
        initializing.loading.to(failed, cond="is_transport_dead")
        | initializing.loading.to(initializing.creating, cond="authorizes_fallback")
        | initializing.loading.to(failed)  # inconclusive: identity preserved
    )
    # 4. session/new
    new_session_succeeded = initializing.creating.to(initializing.awaiting_catalog)
    new_session_failed = initializing.creating.to(failed)
    # 5. fresh model catalog (§2.1 step 6)
    catalog_checked = initializing.awaiting_catalog.to(
        initializing.waiting_for_catalog, cond="needs_catalog_wait"
    ) | initializing.awaiting_catalog.to(initializing.applying_start_model)
    catalog_arrived = initializing.waiting_for_catalog.to(initializing.applying_start_model)
    catalog_wait_timed_out = initializing.waiting_for_catalog.to(initializing.applying_start_model)
    # 6. start-model policy (§3)
    start_model_settled = initializing.applying_start_model.to(initializing.applying_profile_layer)
    start_model_failed = initializing.applying_start_model.to(failed)
    # 7. layers and snapshots (§4)
    profile_layer_applied = initializing.applying_profile_layer.to(initializing.original_snapshot)
    original_snapshot_published = initializing.original_snapshot.to(
        initializing.applying_runtime_mode
    )
    runtime_mode_applied = initializing.applying_runtime_mode.to(
        initializing.applying_runtime_options, cond="catalog_known"
    ) | initializing.applying_runtime_mode.to(initializing.settling)  # fail-safe: withheld
    runtime_options_applied = initializing.applying_runtime_options.to(initializing.settling)
    settlement_published = initializing.settling.to(initializing.announcing)
    settlement_deferred = initializing.settling.to(initializing.announcing)
    # 8. announce and dispatch (§2.1 step 12-13, §2.3)
    session_announced = (
        initializing.announcing.to(prompting, cond="has_initial_prompt")
        | initializing.announcing.to(ready_resume_context_pending, cond="needs_resume_context")
        | initializing.announcing.to(ready)
    )
    init_abandoned = initializing.to(abandoned)

    # --- guards: pure functions of event data ------------------------------------------

    def should_load(self, native_session_resume: bool = False, prior_session_id: str = "") -> bool:
        return native_session_resume and prior_session_id.strip() != ""

    def is_transport_dead(self, error_class: ErrorClass = ErrorClass.INCONCLUSIVE) -> bool:
        return error_class is ErrorClass.TRANSPORT_DEAD

    def authorizes_fallback(self, error_class: ErrorClass = ErrorClass.INCONCLUSIVE) -> bool:
        return error_class in FALLBACK_AUTHORIZING

    def needs_catalog_wait(
        self, snapshot_available: bool = False, model_requested: bool = False
    ) -> bool:
        return model_requested and not snapshot_available

    def catalog_known(self, catalog_known: bool = False) -> bool:
        return catalog_known

    def has_initial_prompt(self, has_initial_prompt: bool = False) -> bool:
        return has_initial_prompt

    def needs_resume_context(self, resume_context: bool = False) -> bool:
        return resume_context

    @property
    def succeeded(self) -> bool:
        return self.leaf in ("prompting", "ready_resume_context_pending", "ready")
