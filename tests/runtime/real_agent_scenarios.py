"""Checks against the real reference agent, whatever carries it (stdio in tests/runtime, the
real agentctl in tests/agentctl): written once, run over both."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from acpfsm.adapters.reference_agent._script import reply_for
from acpfsm.runtime import AuthenticationRequired, LaunchSpec, Runtime, Turn, WorkspaceRef
from acpfsm.runtime.events import (
    MessageChunk,
    PermissionRequest,
    Plan,
    Reasoning,
    ToolCall,
    ToolUpdate,
    TurnUpdate,
)

__all__ = ["check_authentication", "check_turns"]


async def _stream(turn: Turn) -> list[TurnUpdate]:
    async with turn:
        return [update async for update in turn]


def _reply(updates: list[TurnUpdate]) -> str:
    return "".join(u.text for u in updates if isinstance(u, MessageChunk) and u.role != "user")


async def check_turns(rt: Runtime, execution_id: str, *, session_generation: int) -> None:
    """Two consecutive turns, each yielding only its own typed updates; a turn left early
    cancelled at the agent; the next turn unaffected. ``session_generation`` is the
    generation the first turn gets (after an initial prompt, 2)."""
    g = session_generation
    with anyio.fail_after(60):
        first_turn = rt.turn(execution_id, "first question here [[permission]]")
        first = await _stream(first_turn)
        second_turn = rt.turn(execution_id, "and now the second one")
        second = await _stream(second_turn)

    assert first_turn.result.generation == g and second_turn.result.generation == g + 1
    for updates, turn in ((first, first_turn), (second, second_turn)):
        assert {u.prompt_generation for u in updates} == {turn.generation}
        kinds = {type(u) for u in updates}
        assert {Reasoning, Plan, ToolCall, ToolUpdate, MessageChunk} <= kinds, kinds
        assert turn.result.stop_reason == "end_turn"
        assert _reply(updates) == turn.result.agent_message
    assert any(isinstance(u, PermissionRequest) for u in first)
    assert not any(isinstance(u, PermissionRequest) for u in second)
    assert _reply(first).startswith(reply_for("first question here"))
    assert _reply(second).startswith(reply_for("and now the second one"))
    assert "second" not in _reply(first) and "first" not in _reply(second)

    # leaving the block after the first chunk: the agent (stalled after it) gets session/cancel
    with anyio.fail_after(60):
        async with rt.turn(execution_id, "a stalled turn [[fault:stall]]") as stalled:
            async for update in stalled:
                if isinstance(update, MessageChunk):
                    break
        assert stalled.generation == g + 2
        third_turn = rt.turn(execution_id, "the third turn")
        third = await _stream(third_turn)
    assert third_turn.result.stop_reason == "end_turn"
    assert {u.prompt_generation for u in third} == {g + 3}
    assert _reply(third).startswith(reply_for("the third turn"))
    assert "stalled" not in _reply(third)
    cancelled = [
        e
        for e in rt._session(execution_id).hub._backlog
        if getattr(e, "prompt_generation", None) == g + 2 and type(e).__name__ == "Complete"
    ]
    assert [getattr(e, "stop_reason", "") for e in cancelled] == ["cancelled"]


async def check_authentication(rt: Runtime, ws: Path, executor_id: str) -> None:
    """The reference agent with its ``auth_required`` fault: launched without an auth method
    its init fails with AuthenticationRequired naming its method; launched with it, it
    authenticates first and works."""

    def spec(**kw: str) -> LaunchSpec:
        return LaunchSpec(
            agent_profile_id="reference",
            executor_id=executor_id,
            workspace=WorkspaceRef(path=str(ws)),
            **kw,
        )

    ref = await rt.launch(spec())
    with pytest.raises(AuthenticationRequired) as info:
        await rt.wait_ready(ref.id)
    assert info.value.method_ids == ["reference-login"]
    assert "Authentication required" in str(info.value.__cause__)
    await rt.stop(ref.id, "done")

    ref = await rt.launch(spec(auth_method="reference-login"))
    await rt.wait_ready(ref.id)
    result = await rt.prompt(ref.id, "hello after login")
    assert result.stop_reason == "end_turn" and "hello after login" in result.agent_message
    await rt.stop(ref.id, "done")
