"""SessionInit: from a started agent process to a session that is prompting or ready.

Theory of operation
-------------------
This is kandev's ``InitializeAndPromptWithLayers`` / ``initializeACPConnection``
(lifecycle/session.go) with the seed's three-way session/load outcome (seed D1-D5). Each working
state's entry effect names the one thing the runtime must do next; the runtime does it and
reports the fact.

1. ``connecting_stream`` - stream connect, bounded by 10 s. The dial attempt
   finishing (success *or* refusal) is ``stream_ready``; a refused dial then fails at the
   handshake, as in kandev. ``stream_connect_timed_out`` fails the init. A *reattach* (the
   app restarted and its agent survived, see :mod:`.startup_recovery`; ``reattach``) has
   nothing to initialize: the agent process and its ACP session are the ones the app had, so
   the init goes straight to ``booted.ready`` and publishes ``agent.recovered``
   (``publish_agent_recovered``) ahead of the execution's ``agent.boot_ready``.
2. ``handshaking`` - ``initialize``. On success, when the launch names an ACP auth method
   (``auth_method``, not in kandev) → ``authenticating``: ACP ``authenticate`` with it before
   any session (``authenticated``, or ``authentication_failed`` → ``failed``). Then (or at
   once without one) the load/new decision is taken from the event data: NativeSessionResume
   and a prior ACP session id → ``loading``; otherwise ``creating`` (a prior id is ignored
   without NativeSessionResume).
3. ``loading`` - session/load. ``load_failed`` carries the classification
   (:class:`~acpfsm.statecharts.vocab.ErrorClass`, computed by the adapters' table):

   * fallback-authorizing (method not found, session unknown, load capability false, provider
     rollout missing for *this* id) → ``creating``;
   * authentication required (not in kandev) → ``failed`` with ``require_authentication``:
     the init's failure says so, with the agent's auth methods;
   * anything else → ``failed``: transport-dead (no session/new fallback: the seed tests it
     first, and it authorizes none) and inconclusive alike, and the stored ACP session id is
     preserved (the runtime only records an id when the session is established).
4. ``creating`` - session/new. ``new_session_failed`` carries the classification too: an
   agent that needs authentication first fails the init with ``require_authentication``.
5. ``awaiting_catalog`` - the runtime reports whether the synchronous catalog snapshot arrived
   and whether a model is requested; only "no snapshot and a model requested" waits
   (``waiting_for_catalog``, 10 ms polls ≤ 2 s, R30). Expiry is not a failure.
6. ``applying_start_model`` - the StartModelPolicy chart runs; an error fails the init.
7. ``applying_profile_layer`` → ``original_snapshot`` → ``applying_runtime_mode`` →
   ``applying_runtime_options`` → ``settling`` (``applyProfileSessionLayers``,
   ``publishOriginalConfigOptionsWithProfile``, ``applyRuntimeSessionLayers``,
   ``publishSettledConfigOptions``). The runtime mode is always applied; the runtime config
   options only when the catalog is known (the catalog-known fail-safe); otherwise they are
   withheld and nothing is reported as failed. The settlement itself is the ConfigSettlement
   chart's (it may be deferred until the agent's answer arrives).
8. ``announcing`` - publish failures and ``acp_session_created``, then dispatch
   (``InitializeAndPrompt``): an initial prompt → ``prompting``; no prompt but resume context
   to inject → ``booted.resume_context_pending``, which the first prompt leaves on
   ``prompt_composed`` (the context goes into that prompt once); otherwise ``ready``.

``init_abandoned`` (the launch was stopped or cancelled) leaves any working state.

``stream_recovery_requested`` is a question, asked without firing (``statecharts.peek``): a
stream recovery (``RecoverAgentPromptStream``) proceeds only when the init is over
(``recover_stream``: prompting or booted); before, the startup owns the stream (R34).
"""

from __future__ import annotations

from typing import ClassVar

from statemachine import State

from ._base import Chart
from ._compile import Effects
from .vocab import FALLBACK_AUTHORIZING, ErrorClass

__all__ = ["SessionInit"]


class SessionInit(Chart):
    """Stream connect → initialize (→ authenticate) → load/new → catalog → policy → layers →
    announce."""

    chart_name: ClassVar[str] = "session_init"
    # a session that is prompting or booted is at rest, not ended: it still takes
    # ``prompt_composed``, so only failed and abandoned are final
    validate_final_reachability: ClassVar[bool] = False

    pending = State("pending", initial=True)

    class initializing(State.Compound):
        connecting_stream = State("connecting_stream", initial=True)
        handshaking = State("handshaking")
        authenticating = State("authenticating")
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

    class prompting(State.Compound):
        sending = State("sending", initial=True)
        admitted = State("admitted")

    class booted(State.Compound):
        ready = State("ready", initial=True)
        resume_context_pending = State("resume_context_pending")

    failed = State("failed", final=True)
    abandoned = State("abandoned", final=True)

    # 0. the init task starts (the machine exists from the execution's start, so a stop
    # before the init ran still reaches it)
    init_started = pending.to(initializing)
    # 1. stream connect (a reattach to a surviving agent: its session is established already)
    stream_ready = initializing.connecting_stream.to(
        booted.ready, cond="reattach"
    ) | initializing.connecting_stream.to(initializing.handshaking)
    stream_connect_timed_out = initializing.connecting_stream.to(failed)
    # 2. initialize, authenticate when the launch names a method, and the load/new decision
    initialize_succeeded = (
        initializing.handshaking.to(initializing.authenticating, cond="should_authenticate")
        | initializing.handshaking.to(initializing.loading, cond="should_load")
        | initializing.handshaking.to(initializing.creating)
    )
    initialize_failed = initializing.handshaking.to(failed)
    authenticated = initializing.authenticating.to(
        initializing.loading, cond="should_load"
    ) | initializing.authenticating.to(initializing.creating)
    authentication_failed = initializing.authenticating.to(failed)
    # 3. session/load, seed D1: three outcomes
    load_succeeded = initializing.loading.to(initializing.awaiting_catalog)
    load_failed = (
        initializing.loading.to(initializing.creating, cond="authorizes_fallback")
        | initializing.loading.to(failed, cond="needs_authentication")
        | initializing.loading.to(failed)  # transport-dead or inconclusive: identity preserved
    )
    # 4. session/new
    new_session_succeeded = initializing.creating.to(initializing.awaiting_catalog)
    new_session_failed = initializing.creating.to(
        failed, cond="needs_authentication"
    ) | initializing.creating.to(failed)
    # 5. fresh model catalog
    catalog_checked = initializing.awaiting_catalog.to(
        initializing.waiting_for_catalog, cond="needs_catalog_wait"
    ) | initializing.awaiting_catalog.to(initializing.applying_start_model)
    catalog_arrived = initializing.waiting_for_catalog.to(initializing.applying_start_model)
    catalog_wait_timed_out = initializing.waiting_for_catalog.to(initializing.applying_start_model)
    # 6. start-model policy
    start_model_settled = initializing.applying_start_model.to(initializing.applying_profile_layer)
    start_model_failed = initializing.applying_start_model.to(failed)
    # 7. layers and snapshots
    profile_layer_applied = initializing.applying_profile_layer.to(initializing.original_snapshot)
    original_snapshot_published = initializing.original_snapshot.to(
        initializing.applying_runtime_mode
    )
    runtime_mode_applied = initializing.applying_runtime_mode.to(
        initializing.applying_runtime_options, cond="catalog_known"
    ) | initializing.applying_runtime_mode.to(initializing.settling)  # fail-safe: withheld
    runtime_options_applied = initializing.applying_runtime_options.to(initializing.settling)
    settlement_requested = initializing.settling.to(initializing.announcing)
    # 8. announce and dispatch
    session_announced = (
        initializing.announcing.to(prompting, cond="has_initial_prompt")
        | initializing.announcing.to(booted.resume_context_pending, cond="needs_resume_context")
        | initializing.announcing.to(booted.ready)
    )
    # the initial prompt's generation was admitted: callers' prompts queue behind it
    initial_prompt_admitted = prompting.sending.to(prompting.admitted)
    # the launch was stopped or cancelled (or the execution stopped): a working state is left;
    # an initial prompt that never got admitted opens the admission all the same
    init_abandoned = (
        pending.to(abandoned)
        | initializing.to(abandoned)
        | prompting.sending.to(prompting.admitted)
        | prompting.to(None)
        | booted.to(None)
    )
    # every later prompt's text is composed (buildEffectivePrompt): the deferred resume
    # context goes into the first one, once
    prompt_composed = (
        booted.resume_context_pending.to(booted.ready) | booted.ready.to(None) | prompting.to(None)
    )

    # RecoverAgentPromptStream asks, in place, whether the init is over (``recover_stream``:
    # prompting or booted); before that the startup owns the stream (R34), after a failed or
    # abandoned init (the chart has ended) there is no session to recover
    stream_recovery_requested = (
        pending.to(None) | initializing.to(None) | prompting.to(None) | booted.to(None)
    )

    effects: ClassVar[Effects] = Effects(
        on_enter={
            "connecting_stream": ["await_stream"],
            "handshaking": ["initialize"],
            "authenticating": ["authenticate"],
            "loading": ["load_session"],
            "creating": ["new_session"],
            "awaiting_catalog": ["check_catalog"],
            "waiting_for_catalog": ["wait_for_catalog"],
            "applying_start_model": ["apply_start_model"],
            "applying_profile_layer": ["apply_profile_layer"],
            "original_snapshot": ["publish_original_snapshot"],
            "applying_runtime_mode": ["apply_runtime_mode"],
            "applying_runtime_options": ["apply_runtime_options"],
            "settling": ["settle"],
            "announcing": ["announce"],
            "prompting": ["send_initial_prompt"],
            "admitted": ["open_admission"],
            "booted": ["open_admission"],
            "failed": ["fail_init", "open_admission"],
            "abandoned": ["open_admission"],
        },
        transitions={
            "stream_ready: connecting_stream -> ready": ["publish_agent_recovered"],
            "prompt_composed: resume_context_pending -> ready": ["inject_resume_context"],
            "load_failed: loading -> failed [needs_authentication]": ["require_authentication"],
            "new_session_failed: creating -> failed [needs_authentication]": [
                "require_authentication"
            ],
            "stream_recovery_requested: prompting": ["recover_stream"],
            "stream_recovery_requested: booted": ["recover_stream"],
        },
    )

    # --- guards: pure functions of event data ------------------------------------------

    def reattach(self, reattach: bool = False) -> bool:
        return reattach

    def should_authenticate(self, auth_method: str = "") -> bool:
        return auth_method.strip() != ""

    def needs_authentication(self, error_class: ErrorClass = ErrorClass.INCONCLUSIVE) -> bool:
        return error_class is ErrorClass.AUTH_REQUIRED

    def should_load(self, native_session_resume: bool = False, prior_session_id: str = "") -> bool:
        return native_session_resume and prior_session_id.strip() != ""

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

    def needs_resume_context(self, resume_context_pending: bool = False) -> bool:
        return resume_context_pending
