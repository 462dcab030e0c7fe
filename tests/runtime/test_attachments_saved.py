"""In-memory attachments an agent cannot take inline, through a whole Runtime to an agent on the
official ACP SDK as a real process (it takes no embedded context, so each attachment reaches it
as a link to a file the client saved): every attachment gets a file of its own whatever its
name, and a save the workspace refuses (a planted link) is the client's own failure,
``AttachmentError``, with nothing sent. Under trio and asyncio."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

import anyio
import pytest

from acpfsm.adapters.acp.process import ShutdownPolicy
from acpfsm.adapters.transport import Attachment
from acpfsm.runtime import (
    AgentProfile,
    AgentReportedError,
    AttachmentError,
    LaunchSpec,
    Runtime,
    StdioExecutor,
    WorkspaceRef,
)

pytestmark = [pytest.mark.both_backends, pytest.mark.integration]

SDK_AGENT = Path(__file__).resolve().parents[1] / "peers" / "sdk_agent.py"
BOUND = 30.0  # the SDK's first answer imports pydantic: seconds on a busy machine
SHUTDOWN = ShutdownPolicy(stdin_close_wait=2.0, term_wait=0.5, kill_wait=1.0)


def _runtime() -> Runtime:
    return Runtime(
        profiles=[AgentProfile(id="sdk", command=(sys.executable, str(SDK_AGENT)))],
        executors={"stdio": StdioExecutor(shutdown=SHUTDOWN)},
    )


def _spec(ws: Path) -> LaunchSpec:
    return LaunchSpec(agent_profile_id="sdk", workspace=WorkspaceRef(path=str(ws)))


SAME = [
    Attachment(name="a/report.txt", data=b"first report"),
    Attachment(name="b/report.txt", data=b"second report"),
    Attachment(name="", data=b"nameless one"),
    Attachment(name="..", data=b"nameless two"),
]


async def test_attachments_of_one_name_reach_the_agent_as_files_of_their_own(
    tmp_path: Path,
) -> None:
    async with _runtime() as rt:
        with anyio.fail_after(BOUND):
            ref = await rt.launch(_spec(tmp_path))
            first = await rt.prompt(ref.id, "see attached", attachments=SAME)
            again = await rt.prompt(ref.id, "and again", attachments=SAME)
            await rt.stop(ref.id, "done")
    uris = [
        uri
        for result in (first, again)
        for uri in re.findall(r"^link '[^']*' (\S+)$", result.agent_message, re.MULTILINE)
    ]
    assert len(uris) == 8 and len(set(uris)) == 8, (first.agent_message, again.agent_message)
    _each_holds_its_attachment(uris, tmp_path / ".acpfsm" / "attachments")


def _each_holds_its_attachment(uris: list[str], folder: Path) -> None:
    for uri, attachment in zip(uris, SAME * 2, strict=True):
        saved = Path(url2pathname(urlsplit(uri).path))
        assert saved.is_relative_to(folder)
        assert saved.read_bytes() == attachment.data


async def test_a_refused_attachment_save_is_an_attachment_error(tmp_path: Path) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (ws / ".acpfsm").symlink_to(outside)  # planted: saving through it would leave the workspace
    async with _runtime() as rt:
        with anyio.fail_after(BOUND):
            ref = await rt.launch(_spec(ws))
            await rt.wait_ready(ref.id)
            with pytest.raises(AttachmentError) as refused:
                await rt.prompt(ref.id, "see attached", attachments=SAME[:1])
            assert not isinstance(refused.value, AgentReportedError)
            assert "path crosses a symbolic link" in str(refused.value)
            assert refused.value.execution_id == ref.id
            # nothing reached the agent, and the execution goes on
            assert (await rt.prompt(ref.id, "still there?")).agent_message.startswith("echo:")
            await rt.stop(ref.id, "done")
    assert list(outside.iterdir()) == []
