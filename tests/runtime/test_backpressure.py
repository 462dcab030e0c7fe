"""Backpressure through a whole Runtime, against the reference agent as a real subprocess: a
flood of updates far past the transport's limit of undelivered events no longer fails the
execution; the transport pauses reading the agent while the Runtime's event pump is behind,
and the turn ends normally with every update counted. Under trio and asyncio."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from acpfsm.adapters.acp.process import ShutdownPolicy
from acpfsm.adapters.acp.stdio import StdioConfig, StdioTransport
from acpfsm.adapters.events import Reasoning
from acpfsm.runtime import (
    LaunchSpec,
    Retention,
    Runtime,
    StdioExecutor,
    WorkspaceRef,
    reference_profile,
)

pytestmark = [pytest.mark.both_backends, pytest.mark.integration]

FLOOD = 20_000
LIMIT = 4  # small: a read of the flood holds more notifications than that


async def test_a_flood_past_the_limit_is_paused_not_failed(tmp_path: Path) -> None:
    config = StdioConfig(event_queue_limit=LIMIT)
    shutdown = ShutdownPolicy(stdin_close_wait=1.0, term_wait=1.0, kill_wait=1.0)
    async with Runtime(
        profiles=[reference_profile("--delay", "0")],
        executors={"stdio": StdioExecutor(config=config, shutdown=shutdown)},
        retention=Retention(buffer_events=2 * FLOOD),  # the counting subscriber keeps all
    ) as rt:
        with anyio.fail_after(120):
            ref = await rt.launch(
                LaunchSpec(agent_profile_id="reference", workspace=WorkspaceRef(path=str(tmp_path)))
            )
            await rt.wait_ready(ref.id)
            thoughts = 0
            async with (
                rt.subscribe_events(ref.id, replay=False) as events,
                anyio.create_task_group() as tg,
            ):

                async def count() -> None:
                    nonlocal thoughts
                    async for event in events:
                        if isinstance(event, Reasoning) and event.reasoning_text.startswith(
                            "flood "
                        ):
                            thoughts += 1
                            if thoughts == FLOOD:
                                return

                tg.start_soon(count)
                result = await rt.prompt(ref.id, f"[[fault:flood={FLOOD}]] go")
            assert result.stop_reason == "end_turn"
            assert thoughts == FLOOD
            snap = rt.get_execution(ref.id)
            assert snap.status == "READY", snap.error_message
            transport = rt._session(ref.id).ctx.transport
            assert isinstance(transport, StdioTransport) and transport.paused > 0
            await rt.stop(ref.id, "done")
