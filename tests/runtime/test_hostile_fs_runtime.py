"""A hostile agent's fs requests through a whole Runtime (stdio, the reference agent as a real
process): refused with typed JSON-RPC errors, and ``rt.stop`` is never held by an fs
operation, not even one stuck in the kernel."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import anyio
import pytest

from acpfsm.adapters.errors import AcpfsmError
from acpfsm.adapters.workspace import Workspace
from acpfsm.testing import ReferenceAgent

pytestmark = [pytest.mark.both_backends, pytest.mark.integration]

BOUND = 10.0


async def test_a_fifo_read_is_refused_and_stop_is_prompt(tmp_path: Any) -> None:
    reference = ReferenceAgent(tmp_path / "ws")
    async with reference.runtime() as rt:
        ref = await rt.launch(reference.spec())
        with anyio.fail_after(BOUND):  # a blocking open of the FIFO would never return
            result = await rt.prompt(ref.id, "[[fault:fs_fifo]] read the pipe")
        assert result.stop_reason == "end_turn"
        assert "fs_fifo: 2 requests, 0 answered, 2 refused" in result.agent_message
        assert "-32602 Invalid params: not a regular file ×2" in result.agent_message
        with anyio.fail_after(BOUND):
            final = await rt.stop(ref.id, "done")
        assert final.status == "STOPPED"


async def test_an_undecodable_request_is_answered_not_left_waiting(tmp_path: Any) -> None:
    """The agent's requests that do not decode (a lone-surrogate escape, nesting deeper than
    the decoder allows) are answered ``-32700 Parse error`` under their ids: the agent does
    not hang until its own timeout, the turn ends, the execution stays usable."""
    reference = ReferenceAgent(tmp_path / "ws")
    async with reference.runtime() as rt:
        ref = await rt.launch(reference.spec())
        with anyio.fail_after(BOUND):  # the probe waits 5 s per unanswered request
            result = await rt.prompt(ref.id, "[[fault:undecodable_requests]] probe")
        assert result.stop_reason == "end_turn"
        assert "undecodable_requests: 2 requests, 0 answered, 2 refused" in result.agent_message
        assert "-32700 Parse error ×2" in result.agent_message
        assert (await rt.prompt(ref.id, "still there?")).stop_reason == "end_turn"
        await rt.stop(ref.id, "done")


async def test_an_fs_operation_stuck_in_the_kernel_does_not_hold_stop(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that never returns (simulated: a stuck network file system) while the agent
    waits for it: ``rt.stop`` still returns within its bounds."""
    release = threading.Event()
    entered = threading.Event()

    def stuck(self: Workspace, path: str, **_: Any) -> str:
        entered.set()
        release.wait(60)
        return "late"

    monkeypatch.setattr(Workspace, "read_text", stuck)
    reference = ReferenceAgent(tmp_path / "ws")
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "notes.txt").write_text("notes\n")
    try:
        async with reference.runtime() as rt:
            ref = await rt.launch(reference.spec())
            async with anyio.create_task_group() as tg:

                async def reading() -> None:
                    with contextlib.suppress(AcpfsmError):  # however the stop ends the turn
                        await rt.prompt(ref.id, "[[read:notes.txt]] read it")

                tg.start_soon(reading)
                with anyio.fail_after(BOUND):
                    while not entered.is_set():
                        await anyio.sleep(0.01)
                    final = await rt.stop(ref.id, "done")
                assert final.status == "STOPPED"
                tg.cancel_scope.cancel()
    finally:
        release.set()
