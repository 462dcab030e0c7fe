"""A steer through the Runtime whose session/prompt cannot be written until the steer dispatch
bound, while the running turn ends in the meantime, over the real StdioTransport (memory pipes
to a hand-driven ACP agent that advertises prompt queueing). kandev lifecycle/session.go
``SendPromptSteerWithDispatchCallback`` bounds the dispatch; agentctl's ACP adapter
(adapter_prompt.go ``beginSteerHandoff``) hands the prompt gate to the steer. The steer fails
with SteerDispatchTimeout, the running prompt still returns its own end, and the next prompt
completes: no turn is left holding the gate."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from acpfsm.adapters.acp.stdio import connect_stdio_transport
from acpfsm.adapters.executor import AgentLaunch
from acpfsm.adapters.transport import AgentTransport
from acpfsm.runtime import (
    AgentProfile,
    LaunchSpec,
    PromptResult,
    Runtime,
    SteerDispatchTimeout,
    Timeouts,
    WorkspaceRef,
)

from ..adapters.pipes import HandPeer, hand_peer

pytestmark = pytest.mark.both_backends

PROFILE = AgentProfile(id="hand", command=("unused",))


class HandExecutor:
    """Each launch: a StdioTransport over memory pipes to a fresh :func:`hand_peer`."""

    def __init__(self) -> None:
        self.peers: list[HandPeer] = []

    @contextlib.asynccontextmanager
    async def open(self, launch: AgentLaunch) -> AsyncIterator[AgentTransport]:
        async with (
            hand_peer() as peer,
            connect_stdio_transport(
                peer.reader,
                peer.writer,
                workspace=launch.workspace,
                permission_policy=launch.permission_policy,
            ) as transport,
        ):
            self.peers.append(peer)
            yield transport


async def test_steer_timing_out_after_the_turn_ended_leaves_the_next_prompt_free(
    tmp_path: Path, time_scale: float, autojump_clock: object
) -> None:
    ex = HandExecutor()
    rt = Runtime(
        profiles=[PROFILE],
        executors={"hand": ex},
        timeouts=Timeouts().scaled(time_scale),
    )
    spec = LaunchSpec(
        agent_profile_id="hand", executor_id="hand", workspace=WorkspaceRef(path=str(tmp_path))
    )
    results_send, results = anyio.create_memory_object_stream[PromptResult](2)
    async with rt, anyio.create_task_group() as tg, results_send, results:
        with anyio.fail_after(60):
            ref = await rt.launch(spec)
            await rt.wait_ready(ref.id)
            (peer,) = ex.peers

            async def prompt(text: str) -> None:
                await results_send.send(await rt.prompt(ref.id, text))

            tg.start_soon(prompt, "first")
            first = await peer.next_prompt()
            peer.writer.hold()  # the agent's stdin is full: the steer cannot be written

            async def end_first_turn_meanwhile() -> None:
                await peer.writer.blocked.wait()
                await peer.end_turn(first)

            tg.start_soon(end_first_turn_meanwhile)
            with pytest.raises(SteerDispatchTimeout):
                await rt.steer(ref.id, "more")
            peer.writer.release()
            tg.start_soon(prompt, "next")
            with anyio.fail_after(10):  # the gate is free: the next prompt reaches the agent
                second = await peer.next_prompt()
            with anyio.fail_after(10):  # the first prompt returns its own end
                done = await results.receive()
            assert (done.stop_reason, done.generation) == ("end_turn", 1)
            await peer.end_turn(second)
            done = await results.receive()
            assert (done.stop_reason, done.generation) == ("end_turn", 2)
            await rt.stop(ref.id, "done")
