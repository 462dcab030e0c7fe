"""A turn the stdio transport gave up (its cancel was not acknowledged within
``cancel_timeout``) owes nothing, whatever happens to it afterwards: agentctl's ACP adapter
(adapter_prompt_cancel.go) abandons such a prompt (the agent is sent ``$/cancel_request``
for its ``session/prompt``) and suppresses its late end, an answer or an error (``prompt
abandoned after cancel``).

A turn given up while the agent has its request: the agent is told, and whatever it answers
late is not the turn's end (the next turn's is the only one delivered).

Here the turn is given up while its content is still being prepared: its attachment is a
FIFO, whose read blocks until the test writes to it. Once the read is done, the turn must not
be sent to the agent (it would start work the client has already given up); and when its
preparation fails after all (the attachment cannot be saved), that failure must not be
delivered as the turn's end. Over memory pipes to a hand-driven ACP agent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from acpfsm.adapters.acp.stdio import StdioConfig, StdioTransport, connect_stdio_transport
from acpfsm.adapters.events import AgentEvent, Complete, ErrorEvent
from acpfsm.adapters.transport import Attachment, CancelResult

from .pipes import HandPeer, RecordingWriter, hand_peer

pytestmark = pytest.mark.both_backends


@contextlib.asynccontextmanager
async def session(
    workspace: Path, cancel_timeout: float
) -> AsyncIterator[tuple[StdioTransport, HandPeer, list[AgentEvent]]]:
    """A StdioTransport with a session on a hand-driven agent (no embedded context: an
    attachment is saved in the workspace and linked), its events collected."""
    events: list[AgentEvent] = []
    config = StdioConfig(cancel_timeout=cancel_timeout, exit_grace=0.5)
    async with hand_peer() as hand:
        peer = dataclasses.replace(hand, writer=RecordingWriter(hand.writer.stream))
        async with (
            connect_stdio_transport(
                peer.reader, peer.writer, workspace=workspace, config=config
            ) as t,
            anyio.create_task_group() as tg,
        ):

            async def collect() -> None:
                async for event in t.events():
                    events.append(event)

            tg.start_soon(collect)
            await t.initialize()
            await t.new_session(str(workspace))
            yield t, peer, events
            tg.cancel_scope.cancel()


def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "report.txt"
    os.mkfifo(path)
    return path


async def reader_opened(path: Path) -> int:
    """Wait until the transport opened the FIFO to read it (the turn is being prepared);
    return the writing end, opened without blocking."""
    with anyio.fail_after(10):
        while True:
            try:
                return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # ENXIO: no reader yet
                await anyio.sleep(0.005)


async def give_up_while_prepared(t: StdioTransport, path: Path, *more: Attachment) -> None:
    """Prompt generation 1 with the FIFO attached (its read blocks), and ``more``; cancel it:
    nothing ends the turn within the bound, so the cancel is not acknowledged; then the read
    completes. Generation 2 follows: the transport prepares and sends turns one at a time, so
    its request reaches the agent once generation 1's preparation is over."""
    attachment = Attachment(name="report.txt", path=str(path), mime_type="text/plain")
    await t.prompt("read this", [attachment, *more], 1)
    fd = await reader_opened(path)
    try:
        assert await t.cancel() == CancelResult(acknowledged=False)
    finally:
        os.write(fd, b"the report")
        os.close(fd)
    await t.prompt("next", [], 2)


async def the_next_turn_ends_alone(peer: HandPeer, events: list[AgentEvent]) -> None:
    """The agent's first session/prompt since is generation 2's (ended here), and the only
    turn end delivered is generation 2's."""
    with anyio.fail_after(5):
        await peer.end_turn(await peer.next_prompt())
        while not ends(events):
            await anyio.sleep(0.01)
    await anyio.sleep(0.05)
    assert [(type(e), e.prompt_generation) for e in ends(events)] == [(Complete, 2)]
    with pytest.raises(anyio.WouldBlock):
        peer.prompt_ids.receive_nowait()  # no other session/prompt was sent


def ends(events: list[AgentEvent]) -> list[AgentEvent]:
    return [e for e in events if isinstance(e, Complete | ErrorEvent)]


async def test_a_turn_given_up_while_prepared_is_never_sent(tmp_path: Path, backend: str) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    path = fifo(tmp_path)
    async with session(ws, cancel_timeout=0.5 if backend == "trio" else 0.1) as (t, peer, events):
        await give_up_while_prepared(t, path)
        await the_next_turn_ends_alone(peer, events)


async def test_a_turn_given_up_while_prepared_does_not_end_with_its_late_failure(
    tmp_path: Path, backend: str
) -> None:
    """A second attachment, in memory, is to be saved in the workspace once the FIFO's read
    completes, and its save is refused (the workspace's ``.acpfsm`` is a planted symbolic
    link): the turn was given up, so that failure is not its end; nothing is delivered for
    it."""
    ws = tmp_path / "ws"
    ws.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (ws / ".acpfsm").symlink_to(elsewhere)
    path = fifo(tmp_path)
    async with session(ws, cancel_timeout=0.5 if backend == "trio" else 0.1) as (t, peer, events):
        notes = Attachment(name="notes.bin", data=b"\x00\x01", mime_type="application/x-notes")
        await give_up_while_prepared(t, path, notes)
        await the_next_turn_ends_alone(peer, events)
        assert list(elsewhere.iterdir()) == []  # nothing was saved through the link


LATE_ANSWERS: dict[str, dict[str, Any]] = {
    "end_turn": {"result": {"stopReason": "end_turn"}},
    "cancelled": {"result": {"stopReason": "cancelled"}},
    "request_cancelled_error": {"error": {"code": -32800, "message": "Request cancelled"}},
    "internal_error": {"error": {"code": -32603, "message": "Internal error"}},
}


@pytest.mark.parametrize("late", list(LATE_ANSWERS))
async def test_a_turn_given_up_at_the_agent_is_cancelled_there_and_its_late_end_dropped(
    tmp_path: Path, backend: str, late: str
) -> None:
    async with session(tmp_path, cancel_timeout=0.5 if backend == "trio" else 0.1) as (
        t,
        peer,
        events,
    ):
        await t.prompt("hang", [], 1)
        request_id = await peer.next_prompt()
        assert await t.cancel() == CancelResult(acknowledged=False)
        assert isinstance(peer.writer, RecordingWriter)
        with anyio.fail_after(5):
            while not peer.writer.sent("$/cancel_request"):
                await anyio.sleep(0.01)
        cancels = peer.writer.sent("$/cancel_request")
        assert [c["params"] for c in cancels] == [{"requestId": request_id}]
        answer = {"jsonrpc": "2.0", "id": request_id, **LATE_ANSWERS[late]}
        await peer.answers.send(json.dumps(answer).encode() + b"\n")
        await t.prompt("next", [], 2)
        await the_next_turn_ends_alone(peer, events)
