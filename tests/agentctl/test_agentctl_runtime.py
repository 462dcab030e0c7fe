"""The Runtime over the real agentctl (v0.95.1) running the reference agent: the core life.

launch → prompt with streamed chunks → steer → cancel → stop → relaunch resumed with
session/load; and an attachment materialized through agentctl's multipart upload. Each under
trio and asyncio.
"""

from __future__ import annotations

import base64
from pathlib import Path

import anyio
import pytest

from acpfsm.adapters.agentctl.executor import AgentctlExecutor
from acpfsm.adapters.events import (
    MessageChunk,
    PermissionRequest,
    Plan,
    SessionStatus,
    TurnStarted,
)
from acpfsm.adapters.transport import Attachment
from acpfsm.runtime import PromptResult, SteerNotDispatched
from acpfsm.runtime import events as le

from .agentctl_server import AgentctlServer
from .helpers import (
    TEST_CONFIG,
    make_runtime,
    published,
    session_of,
    spec,
    wait_turn_started,
    wait_turn_streaming,
    wait_until,
    workspace,
)

pytestmark = [pytest.mark.both_backends, pytest.mark.integration]

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


async def test_launch_prompt_steer_cancel_stop_relaunch(
    agentctl: AgentctlServer, tmp_path: Path
) -> None:
    ws = workspace(tmp_path)
    executor = AgentctlExecutor(url=agentctl.url, nonce=agentctl.nonce, config=TEST_CONFIG)
    async with make_runtime({"agentctl": executor}) as rt:
        with anyio.fail_after(30):
            ref = await rt.launch(spec(ws, prompt="hello agentctl"))
            agentctl.adopt_token(executor.token)  # the executor traded the nonce
            assert executor.token
            assert [i["id"] for i in agentctl.instances()] == [ref.id]
            s = session_of(rt, ref.id)
            # the instance's own URL (its port), not agentctl's control URL
            assert s.transport is not None
            assert ref.agentctl_url == s.transport.endpoint != agentctl.url
            assert ref.agentctl_url.startswith("http://127.0.0.1:")

            # a prompt streams its reply in chunks, then completes (after the initial turn)
            first = await rt.resume(ref.id, "a follow-up of several words")
            assert first.stop_reason == "end_turn"
            assert first.generation == 2
            chunks = [
                e
                for e in s.hub._backlog
                if isinstance(e, MessageChunk) and e.prompt_generation == 2
            ]
            assert len(chunks) >= 2
            assert "".join(c.text for c in chunks) == first.agent_message
            assert "a follow-up of several words" in first.agent_message
            assert published(rt, ref.id, TurnStarted)  # v0.95.1's own event, passed through
            snap = rt.get_execution(ref.id)
            assert snap.status == "READY"
            acp_id = snap.acp_session_id
            assert acp_id

            # steer into a running turn: one completion, for the steered generation
            with pytest.raises(SteerNotDispatched):
                await rt.steer(ref.id, "nothing is running")
            results: list[PromptResult] = []
            async with anyio.create_task_group() as tg:

                async def long_turn() -> None:
                    results.append(await rt.prompt(ref.id, "a long one [[delay:0.2]]"))

                tg.start_soon(long_turn)
                await wait_turn_started(rt, ref.id, 3)
                steer = await rt.steer(ref.id, "change of plan")
                assert steer.generation == 3
            assert results[0].generation == 3
            assert results[0].stop_reason == "end_turn"
            assert "change of plan" in results[0].agent_message

            # cancel a turn the agent honours: it ends "cancelled"
            async with anyio.create_task_group() as tg:
                results.clear()

                async def stalled_turn() -> None:
                    results.append(await rt.prompt(ref.id, "[[fault:stall]] wait for me"))

                tg.start_soon(stalled_turn)
                await wait_turn_streaming(rt, ref.id, 4)
                await rt.cancel(ref.id)
            assert results[0].stop_reason == "cancelled"
            assert rt.get_execution(ref.id).status == "READY"

            final = await rt.stop(ref.id, "done")
            assert final.status == "STOPPED"
            assert agentctl.instances() == []
            await wait_until(lambda: agentctl.agents() == [])

            # relaunch resumed with session/load: same ACP session, the replayed plan is history
            ref2 = await rt.launch(spec(ws, prior=acp_id))
            s2 = session_of(rt, ref2.id)
            await s2.init.admission.wait()
            await wait_until(lambda: bool(published(rt, ref2.id, SessionStatus)))
            assert [p.replayed for p in published(rt, ref2.id, Plan)] == [True]
            assert rt.get_execution(ref2.id).status == "READY"
            again = await rt.resume(ref2.id, "are you back?")
            assert again.stop_reason == "end_turn"
            snap2 = rt.get_execution(ref2.id)
            assert snap2.acp_session_id == acp_id
            assert snap2.charts["session_init"] == "ready"
            init_events = [
                r.event for r in rt.trace.for_execution(ref2.id) if r.chart == "session_init"
            ]
            assert "load_succeeded" in init_events
            await rt.stop(ref2.id, "done")
    assert agentctl.instances() == []


async def test_attachment_is_materialized(agentctl: AgentctlServer, tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    image = tmp_path / "pixel.png"
    image.write_bytes(PNG)
    executor = AgentctlExecutor(url=agentctl.url, token=agentctl.token(), config=TEST_CONFIG)
    async with make_runtime({"agentctl": executor}) as rt:
        with anyio.fail_after(30):
            ref = await rt.launch(spec(ws))
            result = await rt.prompt(
                ref.id,
                "what is in this picture?",
                attachments=[Attachment(name="pixel.png", path=str(image), mime_type="image/png")],
            )
            # the agent received the image inline (agentctl read the uploaded file)
            assert "Received an image (image/png, about" in result.agent_message
            acp_id = rt.get_execution(ref.id).acp_session_id
            stored = ws / ".kandev" / "attachments" / acp_id / "pixel.png"
            assert stored.read_bytes() == PNG
            # an in-memory attachment with the same name is stored beside it, renamed
            await rt.prompt(
                ref.id,
                "and this one?",
                attachments=[Attachment(name="pixel.png", data=PNG, mime_type="image/png")],
            )
            assert (stored.parent / "pixel-2.png").read_bytes() == PNG
            await rt.stop(ref.id, "done")


async def test_permission_requests_are_answered(agentctl: AgentctlServer, tmp_path: Path) -> None:
    """agentctl relays the agent's permission request; the execution's policy answers it
    with ``agent.permissions.respond`` (the reference profile's ``allow_once``; a spec's
    ``reject``, which picks the reject option)."""
    executor = AgentctlExecutor(url=agentctl.url, token=agentctl.token(), config=TEST_CONFIG)
    async with make_runtime({"agentctl": executor}) as rt:
        with anyio.fail_after(30):
            a = await rt.launch(spec(workspace(tmp_path, "a")))
            b = await rt.launch(spec(workspace(tmp_path, "b"), permission_policy="reject"))
            allowed = await rt.prompt(a.id, "list files [[permission]]")
            assert "Ran `echo list files`." in allowed.agent_message
            assert published(rt, a.id, PermissionRequest)
            denied = await rt.prompt(b.id, "list files [[permission]]")
            assert "Permission denied for Run `echo list files`." in denied.agent_message
            (resolved,) = published(rt, b.id, le.PermissionResolved)
            assert (resolved.option_id, resolved.decided_by) == ("reject_once", "policy")
            await rt.stop(a.id, "done")
            await rt.stop(b.id, "done")
