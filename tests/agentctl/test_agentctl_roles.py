"""A message chunk's role over agentctl: agentctl marks replayed user chunks ``role: "user"``
(kandev transport/acp/adapter_updates.go ``convertNotification``); whatever else a frame says
(no role, or one acpfsm does not know) is the agent's own text, and reaches its reply. A
role passed through as it came let a runtime that sorts roles decide by an unknown one."""

from __future__ import annotations

import anyio
import pytest

from acpfsm.adapters.events import MessageChunk

from .fake_stream import FakeAgentStream, carrier

pytestmark = pytest.mark.both_backends


async def test_a_chunk_is_the_users_only_when_agentctl_says_so() -> None:
    fake = FakeAgentStream()
    async with carrier(fake) as (_, events):
        for role in ("user", "assistant", "", "system", "zzz", "User"):
            await fake.send({"type": "message_chunk", "text": f"[{role}]", "role": role})
        with anyio.fail_after(10):
            while len([e for e in events if isinstance(e, MessageChunk)]) < 6:
                await anyio.sleep(0.005)
        roles = {e.text: e.role for e in events if isinstance(e, MessageChunk)}
        assert roles == {
            "[user]": "user",
            "[assistant]": "assistant",
            "[]": "assistant",
            "[system]": "assistant",
            "[zzz]": "assistant",
            "[User]": "assistant",
        }
