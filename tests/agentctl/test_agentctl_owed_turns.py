"""Which turns an agentctl carrier still owes an end: when the socket drops around a prompt,
and when agentctl gives a turn up on a cancel.

A prompt whose socket dropped *after* its request was written may have reached agentctl
(``StreamNotConnected(while_waiting=True)``: delivery is ambiguous, kandev H2): its turn
stays owed, so the agent's content for it after a redial is stamped with its generation and,
should the carrier be given up, the turn gets its ``ErrorEvent`` like every owed turn (the
runtime waits for that end). A prompt that found no socket was never written: it owes
nothing.

The real agentctl acknowledges ``agent.prompt`` at once, so the window between the write and
the ack cannot be hit on purpose against it: a small in-process agentctl plays the agent
stream here (:mod:`.fake_stream`), withholding the ack of ``agent.prompt``.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from acpfsm.adapters.agentctl.transport import AgentctlTransport
from acpfsm.adapters.errors import StreamNotConnected
from acpfsm.adapters.events import ErrorEvent, MessageChunk, StreamReconnected

from .fake_stream import FakeAgentStream, carrier

pytestmark = pytest.mark.both_backends


async def until(predicate: Any, limit: float = 10.0) -> None:
    with anyio.fail_after(limit):
        while not predicate():
            await anyio.sleep(0.005)


async def prompt_dropped_after_the_write(
    transport: AgentctlTransport, fake: FakeAgentStream
) -> None:
    """``agent.prompt`` for generation 1 is written, then the socket drops before the ack."""
    async with anyio.create_task_group() as tg:
        errors: list[StreamNotConnected] = []

        async def prompt() -> None:
            try:
                await transport.prompt("hello", [], 1)
            except StreamNotConnected as exc:
                errors.append(exc)

        tg.start_soon(prompt)
        await until(lambda: fake.asked("agent.prompt"))
        await transport.drop_stream()
    assert len(errors) == 1 and errors[0].while_waiting  # the agent may have it


async def test_a_prompt_dropped_after_its_write_stays_owed_through_a_redial() -> None:
    """After the redial agentctl delivers the turn it had: its content, which carries no
    generation, is the owed turn's (generation 1), not a turn of the agent's own (0)."""
    fake = FakeAgentStream()
    async with carrier(fake) as (transport, events):
        await prompt_dropped_after_the_write(transport, fake)
        await transport.redial()
        await until(lambda: any(isinstance(e, StreamReconnected) for e in events))
        await fake.send({"type": "message_chunk", "text": "the answer"})
        await until(lambda: any(isinstance(e, MessageChunk) for e in events))
        (chunk,) = [e for e in events if isinstance(e, MessageChunk)]
        assert (chunk.text, chunk.prompt_generation) == ("the answer", 1)


async def test_a_prompt_dropped_after_its_write_ends_when_the_carrier_is_given_up() -> None:
    """The carrier is given up (no redial): the owed turn gets its ErrorEvent, so whoever
    waits for its end is told."""
    fake = FakeAgentStream()
    async with carrier(fake) as (transport, events):
        await prompt_dropped_after_the_write(transport, fake)
        transport.give_up("redial refused")
        await until(lambda: any(isinstance(e, ErrorEvent) for e in events))
        (end,) = [e for e in events if isinstance(e, ErrorEvent)]
        assert end.prompt_generation == 1
        assert "agent stream lost and not redialled" in end.error


async def test_a_prompt_that_found_no_socket_owes_nothing() -> None:
    """The socket was already gone: nothing was written, the agent cannot have the prompt,
    and the turn owes no end (a give-up ends no turn)."""
    fake = FakeAgentStream()
    async with carrier(fake) as (transport, events):
        await transport.drop_stream()
        with pytest.raises(StreamNotConnected) as refused:
            await transport.prompt("hello", [], 1)
        assert not refused.value.while_waiting
        assert not fake.asked("agent.prompt")
        transport.give_up("redial refused")
        await anyio.sleep(0.05)
        assert not any(isinstance(e, ErrorEvent) for e in events)


async def test_a_turn_whose_cancel_was_not_acknowledged_owes_nothing() -> None:
    """agentctl gave the turn up (``not_acknowledged``: it suppresses the turn's late end):
    the carrier no longer waits for it: what the agent says next is its own (generation 0),
    and a give-up ends no turn."""
    fake = FakeAgentStream(ack_prompts=True)
    async with carrier(fake) as (transport, events):
        await transport.prompt("hello", [], 1)
        assert not (await transport.cancel()).acknowledged
        await fake.send({"type": "message_chunk", "text": "on my own"})
        await until(lambda: any(isinstance(e, MessageChunk) for e in events))
        (chunk,) = [e for e in events if isinstance(e, MessageChunk)]
        assert chunk.prompt_generation == 0
        transport.give_up("redial refused")
        await anyio.sleep(0.05)
        assert not any(isinstance(e, ErrorEvent) for e in events)


async def test_a_turn_acknowledged_as_cancelled_without_an_end_is_over_at_the_next_prompt() -> None:
    """agentctl v0.95.1 may answer ``success`` to the cancel of a turn it gave up (its 3 s
    cancel join races its own release of the prompt gate) and suppress the turn's end: the
    runtime escalates it after its cancel wait and, READY, sends the next prompt. That turn
    is over then: the agent's unstamped content is the new turn's, and a death ends only the
    new turn."""
    fake = FakeAgentStream(ack_prompts=True, ack_cancels=True)
    async with carrier(fake) as (transport, events):
        await transport.prompt("hang", [], 1)
        assert (await transport.cancel()).acknowledged  # and no end ever comes for 1
        await transport.prompt("next", [], 2)
        await fake.send({"type": "message_chunk", "text": "the next answer"})
        await until(lambda: any(isinstance(e, MessageChunk) for e in events))
        (chunk,) = [e for e in events if isinstance(e, MessageChunk)]
        assert chunk.prompt_generation == 2
        transport.give_up("redial refused")
        await until(lambda: any(isinstance(e, ErrorEvent) for e in events))
        await anyio.sleep(0.05)
        assert [e.prompt_generation for e in events if isinstance(e, ErrorEvent)] == [2]
