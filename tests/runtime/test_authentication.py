"""Authentication: an agent that wants it before a session fails the init with a typed
AuthenticationRequired carrying its authMethods (and the agent's answer as the cause); an
``auth_method`` on the profile or the launch spec authenticates first; a turn refused for
want of authentication is a PromptAuthenticationRequired; a prompt refused because the init
failed has that failure as its cause. Over the in-memory agent (every shape), the reference
agent over stdio and behind the real agentctl (its ``auth_required`` fault)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from acpfsm.adapters.errors import AgentRequestError
from acpfsm.adapters.memory import MemoryTransport
from acpfsm.adapters.transport import AgentInfo, InitializeResult
from acpfsm.runtime import (
    AgentProfile,
    AgentReportedError,
    AuthenticationRequired,
    NotReadyForPrompts,
    PromptAuthenticationRequired,
    Runtime,
    SessionInitError,
    reference_profile,
)

from .memory_runtime import MemoryExecutor, make_runtime, session_of, spec
from .real_agent_scenarios import check_authentication

pytestmark = pytest.mark.both_backends

#: codex-acp 0.16.0's methods, as it advertises them
CODEX_METHODS: list[dict[str, Any]] = [
    {"id": "chatgpt", "name": "Login with ChatGPT", "description": "Use your ChatGPT login"},
    {
        "type": "env_var",
        "id": "codex-api-key",
        "name": "Use CODEX_API_KEY",
        "vars": [{"name": "CODEX_API_KEY"}],
    },
    {"type": "env_var", "id": "openai-api-key", "name": "Use OPENAI_API_KEY"},
]
AUTH_REQUIRED = AgentRequestError(-32000, "Authentication required", method="session/new")


def codex_like(**handlers: Any) -> MemoryTransport:
    """A memory agent that advertises codex's methods and wants authentication."""
    agent = MemoryTransport()
    authenticated: list[str] = []

    def initialize() -> InitializeResult:
        return InitializeResult(
            protocol_version=1, agent=AgentInfo(name="codex-acp"), auth_methods=CODEX_METHODS
        )

    def authenticate(method_id: str) -> None:
        if method_id not in {m["id"] for m in CODEX_METHODS}:
            raise AgentRequestError(-32602, "Invalid params", "unsupported authentication method")
        authenticated.append(method_id)

    def new_session(cwd: str) -> Any:
        if not authenticated:
            raise AUTH_REQUIRED
        return agent._session_result("mem-session-1")

    agent.handlers.update(
        {"initialize": initialize, "authenticate": authenticate, "session/new": new_session}
    )
    agent.handlers.update(handlers)
    return agent


async def test_session_new_needing_authentication_is_authentication_required(
    time_scale: float,
) -> None:
    async with make_runtime(MemoryExecutor(codex_like), time_scale=time_scale) as rt:
        ref = await rt.launch(spec())
        with pytest.raises(AuthenticationRequired) as info:
            await rt.wait_ready(ref.id)
        err = info.value
        assert isinstance(err, SessionInitError)
        assert err.auth_methods == CODEX_METHODS
        assert err.method_ids == ["chatgpt", "codex-api-key", "openai-api-key"]
        assert "auth methods: chatgpt, codex-api-key, openai-api-key" in str(err)
        assert err.__cause__ is AUTH_REQUIRED  # the agent's own answer
        assert err.execution_id == ref.id
        init = session_of(rt, ref.id).transitions("session_init")
        assert [r.event for r in init][-1] == "new_session_failed"
        # a prompt is refused, and says why: the init's failure is its cause
        with pytest.raises(NotReadyForPrompts) as refused:
            await rt.prompt(ref.id, "hi")
        assert refused.value.__cause__ is err


@pytest.mark.parametrize("where", ["profile", "spec", "both"])
async def test_an_auth_method_authenticates_before_the_session(
    time_scale: float, where: str
) -> None:
    executor = MemoryExecutor(codex_like)
    profile_method = {"profile": "codex-api-key", "spec": "", "both": "chatgpt"}[where]
    profile = AgentProfile(id="mem", command=("unused",), auth_method=profile_method)
    launch = spec() if where == "profile" else spec(auth_method="codex-api-key")
    async with make_runtime(executor, profiles=(profile,), time_scale=time_scale) as rt:
        ref = await rt.launch(launch)
        snapshot = await rt.wait_ready(ref.id)
        assert snapshot.status == "READY"
        methods = [m for m, _ in executor.last.calls]
        assert methods[:3] == ["initialize", "authenticate", "session/new"]
        # the spec's method wins over the profile's
        assert ("authenticate", ("codex-api-key",)) in executor.last.calls
        init = [r.event for r in session_of(rt, ref.id).transitions("session_init")]
        assert init[2:5] == ["initialize_succeeded", "authenticated", "new_session_succeeded"]


async def test_a_refused_authenticate_fails_the_init_with_its_cause(time_scale: float) -> None:
    async with make_runtime(MemoryExecutor(codex_like), time_scale=time_scale) as rt:
        ref = await rt.launch(spec(auth_method="no-such-method"))
        with pytest.raises(SessionInitError, match="authenticate 'no-such-method' failed") as info:
            await rt.wait_ready(ref.id)
        assert not isinstance(info.value, AuthenticationRequired)
        assert isinstance(info.value.__cause__, AgentRequestError)
        assert info.value.__cause__.code == -32602


async def test_session_load_needing_authentication_is_authentication_required(
    time_scale: float,
) -> None:
    def load(session_id: str, cwd: str) -> None:
        raise AgentRequestError(-32000, "Authentication required", method="session/load")

    executor = MemoryExecutor(lambda: codex_like(**{"session/load": load}))
    async with make_runtime(executor, time_scale=time_scale) as rt:
        ref = await rt.launch(spec(prior_acp_session="acp-prior"))
        with pytest.raises(AuthenticationRequired) as info:
            await rt.wait_ready(ref.id)
        assert info.value.method_ids == ["chatgpt", "codex-api-key", "openai-api-key"]
        assert "session/load failed" in str(info.value)
        # the session/load → session/new fallback is not taken for it
        assert "session/new" not in [m for m, _ in executor.last.calls]


async def _turn_failing_with(rt: Runtime, executor: MemoryExecutor, error: str) -> Exception:
    """What a prompt raises on a fresh execution whose agent ends the turn with ``error``."""
    ref = await rt.launch(spec())
    await rt.wait_ready(ref.id)
    agent = executor.last

    async def refuse() -> None:
        while 1 not in agent.running:
            await anyio.sleep(0.001)
        agent.fail(1, error)

    async with anyio.create_task_group() as tg:
        tg.start_soon(refuse)
        with pytest.raises(AgentReportedError) as info:
            await rt.prompt(ref.id, "hi")
    return info.value


async def test_a_turn_refused_for_authentication_is_prompt_authentication_required(
    time_scale: float,
) -> None:
    """claude-agent-acp without credentials: the session opens, the turn answers -32000."""
    executor = MemoryExecutor()
    refusal = '{"code":-32000,"message":"Authentication required"}'
    async with make_runtime(executor, time_scale=time_scale) as rt:
        err = await _turn_failing_with(rt, executor, refusal)
        assert isinstance(err, PromptAuthenticationRequired)
        assert isinstance(err, AuthenticationRequired)
        assert err.generation == 1 and err.auth_methods == []  # claude advertises none
        assert "none advertised: set its credentials" in str(err)
        assert err.agent_message == refusal
        # any other agent error stays a plain AgentReportedError
        other = await _turn_failing_with(rt, executor, '{"code":-32603,"message":"Internal"}')
        assert not isinstance(other, AuthenticationRequired)


async def test_a_lost_stream_that_quotes_an_authentication_refusal_is_a_lost_stream(
    time_scale: float,
) -> None:
    """Only the agent's own end of the turn (its error answer) can say it wants
    authentication: a stream lost mid-turn whose error quotes a -32000 refusal (say, the
    agent's last stderr line) is the loss it is, an AgentReportedError, never a
    PromptAuthenticationRequired."""
    executor = MemoryExecutor()
    refusal = '{"code":-32000,"message":"Authentication required"}'
    async with make_runtime(executor, time_scale=time_scale) as rt:
        ref = await rt.launch(spec())
        await rt.wait_ready(ref.id)
        agent = executor.last

        async def lose() -> None:
            while 1 not in agent.running:
                await anyio.sleep(0.001)
            agent.disconnect(f"agent exited: {refusal}", exit_code=1)

        async with anyio.create_task_group() as tg:
            tg.start_soon(lose)
            with pytest.raises(AgentReportedError) as info:
                await rt.prompt(ref.id, "hi")
        assert not isinstance(info.value, AuthenticationRequired)
        assert refusal in str(info.value)


async def test_a_turn_refused_for_authentication_names_the_advertised_methods(
    time_scale: float,
) -> None:
    """The refusal of a turn carries the auth methods the agent advertised at initialize."""

    def advertising() -> MemoryTransport:
        agent = MemoryTransport()
        agent.handlers["initialize"] = lambda: InitializeResult(
            protocol_version=1, agent=AgentInfo(name="codex-acp"), auth_methods=CODEX_METHODS
        )
        return agent

    executor = MemoryExecutor(advertising)
    refusal = '{"code":-32000,"message":"Authentication required"}'
    async with make_runtime(executor, time_scale=time_scale) as rt:
        err = await _turn_failing_with(rt, executor, refusal)
        assert isinstance(err, PromptAuthenticationRequired)
        assert err.auth_methods == CODEX_METHODS


# ------------------------------------------------------------------ the reference agent --


@pytest.mark.integration
async def test_the_reference_agent_wanting_authentication_over_stdio(tmp_path: Path) -> None:
    profile = reference_profile("--fault", "auth_required", "--delay", "0.001")
    async with Runtime(profiles=[profile]) as rt:
        with anyio.fail_after(30):
            await check_authentication(rt, tmp_path, "stdio")
