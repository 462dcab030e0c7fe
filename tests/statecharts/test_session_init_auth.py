"""SessionInit's authentication (not in kandev): ``authenticate`` first when the launch names
an auth method, and an init failed because the agent wants authentication says so."""

from __future__ import annotations

import pytest

from acpfsm.statecharts import EngineName, ErrorClass, IllegalTransition, SessionInit, Step

from .recipes import SESSION_INIT_RECIPES, walk


def _walked(step: Step) -> tuple[str, str, str, list[str]]:
    return (step.source, step.event, step.state, [e.name for e in step.effects])


def test_an_auth_method_authenticates_before_the_session(engine: EngineName) -> None:
    init = walk(SessionInit.start(engine=engine), SESSION_INIT_RECIPES["handshaking"])
    assert _walked(init.fire("initialize_succeeded", auth_method="codex-api-key")) == (
        "handshaking",
        "initialize_succeeded",
        "authenticating",
        ["authenticate"],
    )
    # the load/new decision comes after, from the same data as without authentication
    assert _walked(init.fire("authenticated")) == (
        "authenticating",
        "authenticated",
        "creating",
        ["new_session"],
    )


def test_authenticated_then_load(engine: EngineName) -> None:
    init = walk(SessionInit.start(engine=engine), SESSION_INIT_RECIPES["authenticating"])
    step = init.fire("authenticated", native_session_resume=True, prior_session_id="acp-1")
    assert _walked(step)[2:] == ("loading", ["load_session"])


def test_a_resumed_session_is_authenticated_before_it_is_loaded(engine: EngineName) -> None:
    """Authentication comes first even when the launch also resumes a session."""
    init = walk(SessionInit.start(engine=engine), SESSION_INIT_RECIPES["handshaking"])
    resume = {"native_session_resume": True, "prior_session_id": "acp-1"}
    step = init.fire("initialize_succeeded", auth_method="codex-api-key", **resume)
    assert _walked(step)[2:] == ("authenticating", ["authenticate"])
    assert _walked(init.fire("authenticated", **resume))[2:] == ("loading", ["load_session"])


@pytest.mark.parametrize("method", ["", "   "])
def test_no_auth_method_goes_straight_to_the_session(engine: EngineName, method: str) -> None:
    init = walk(SessionInit.start(engine=engine), SESSION_INIT_RECIPES["handshaking"])
    assert init.fire("initialize_succeeded", auth_method=method).state == "creating"


def test_a_refused_authenticate_fails_the_init(engine: EngineName) -> None:
    init = walk(SessionInit.start(engine=engine), SESSION_INIT_RECIPES["authenticating"])
    step = init.fire("authentication_failed", error="failed to initialize ACP: authenticate")
    assert _walked(step)[2:] == ("failed", ["fail_init", "open_admission"])
    assert init.ended
    with pytest.raises(IllegalTransition):
        init.fire("authenticated")


@pytest.mark.parametrize("towards", ["creating", "loading"])
def test_a_session_that_needs_authentication_fails_saying_so(
    engine: EngineName, towards: str
) -> None:
    event = "new_session_failed" if towards == "creating" else "load_failed"
    needs = walk(SessionInit.start(engine=engine), SESSION_INIT_RECIPES[towards])
    step = needs.fire(event, error_class=ErrorClass.AUTH_REQUIRED, error="e")
    assert _walked(step)[2:] == (
        "failed",
        ["require_authentication", "fail_init", "open_admission"],
    )
    other = walk(SessionInit.start(engine=engine), SESSION_INIT_RECIPES[towards])
    step = other.fire(event, error_class=ErrorClass.INCONCLUSIVE, error="e")
    assert _walked(step)[2:] == ("failed", ["fail_init", "open_admission"])
