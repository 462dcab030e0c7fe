"""The transport's ``fs/*`` handlers and attachment saving under attack, through the real
handlers: the test plays the agent over in-memory streams (``MemoryAgent``) and sends the
requests a hostile agent would (``ws``: see ``conftest.py``). The symlink-swap race runs against a flipper in another
process (no shared GIL), once with ``openat2`` and once with the forced walk; no read may
return and no write may land outside the workspace."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import resource
import signal
import stat
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from urllib.request import url2pathname

import anyio
import anyio.abc
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from acpfsm.adapters.acp.stdio import (
    DEFAULT_CONFIG,
    StdioConfig,
    StdioTransport,
    connect_stdio_transport,
)
from acpfsm.adapters.events import AgentEvent, ErrorEvent
from acpfsm.adapters.transport import Attachment
from acpfsm.adapters.workspace import Workspace, openat2_available

from .test_acp_stdio import PipeReader, PipeWriter

MiB = 1024 * 1024
BOUND = 10.0
needs_openat2 = pytest.mark.skipif(not openat2_available(), reason="kernel without openat2")
RESOLVERS = [pytest.param("auto", marks=needs_openat2, id="openat2"), "walk"]

Msg = dict[str, Any]


class MemoryAgent:
    """The agent end of a transport: answers initialize/session/new/session/prompt (keeping
    each prompt's blocks in ``prompts``) and sends requests of its own with :meth:`call`."""

    def __init__(
        self, inbox: MemoryObjectReceiveStream[bytes], outbox: MemoryObjectSendStream[bytes]
    ) -> None:
        self._inbox = inbox
        self._outbox = outbox
        self._next = 0
        self._waiting: dict[int, tuple[anyio.Event, list[Msg]]] = {}
        self.session_id = "mem-session"
        self.prompts: list[list[Msg]] = []

    async def _send(self, message: Msg) -> None:
        await self._outbox.send(json.dumps(message).encode() + b"\n")

    async def run(self) -> None:
        buffer = b""
        while True:
            while b"\n" not in buffer:
                try:
                    buffer += await self._inbox.receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError):
                    return
            line, buffer = buffer.split(b"\n", 1)
            message = json.loads(line)
            if "method" not in message:
                event, slot = self._waiting.pop(message["id"])
                slot.append(message)
                event.set()
            elif "id" in message:
                result = {
                    "initialize": {"protocolVersion": 1},
                    "session/new": {"sessionId": self.session_id},
                    "session/prompt": {"stopReason": "end_turn"},
                }[message["method"]]
                if message["method"] == "session/prompt":
                    self.prompts.append(message["params"]["prompt"])
                await self._send({"jsonrpc": "2.0", "id": message["id"], "result": result})

    async def call(self, method: str, params: Msg) -> Msg:
        """Send a request to the client; its whole answer (``result`` or ``error``)."""
        self._next += 1
        event, slot = anyio.Event(), []
        self._waiting[self._next] = (event, slot)
        await self._send({"jsonrpc": "2.0", "id": self._next, "method": method, "params": params})
        await event.wait()
        return slot[0]

    async def read(self, path: str, **extra: Any) -> Msg:
        return await self.call(
            "fs/read_text_file", {"sessionId": self.session_id, "path": path, **extra}
        )

    async def write(self, path: str, content: str) -> Msg:
        return await self.call(
            "fs/write_text_file",
            {"sessionId": self.session_id, "path": path, "content": content},
        )


@contextlib.asynccontextmanager
async def wired(
    workspace: Path, config: StdioConfig = DEFAULT_CONFIG, *, session: bool = False
) -> AsyncIterator[tuple[StdioTransport, MemoryAgent]]:
    to_agent_send, to_agent_receive = anyio.create_memory_object_stream[bytes](1000)
    to_client_send, to_client_receive = anyio.create_memory_object_stream[bytes](1000)
    agent = MemoryAgent(to_agent_receive, to_client_send)
    with to_agent_send, to_agent_receive, to_client_send, to_client_receive:
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent.run)
            async with connect_stdio_transport(
                PipeReader(to_client_receive),
                PipeWriter(to_agent_send),
                workspace=workspace,
                config=config,
            ) as transport:
                if session:
                    with anyio.fail_after(BOUND):
                        await transport.initialize()
                        await transport.new_session(str(workspace))
                yield transport, agent
            tg.cancel_scope.cancel()


def error_of(answer: Msg) -> tuple[int, str]:
    assert "error" in answer, answer
    return answer["error"]["code"], answer["error"]["message"]


# ------------------------------------------------------------------------------ the race

FLIPPER = (
    "import sys; from acpfsm.adapters.reference_agent._hostile import swap_forever; "
    "swap_forever(sys.argv[1], sys.argv[2])"
)


@pytest.mark.integration
@pytest.mark.parametrize("resolver", RESOLVERS)
async def test_symlink_swap_race_has_no_escape(tmp_path: Path, resolver: str) -> None:
    """A directory of the workspace swapped back to back (renameat2 RENAME_EXCHANGE) with a
    link to a directory outside, while reads and writes go through it for two seconds, and
    longer (bounded) until the race was seen both ways: on a loaded machine the flipper
    process may take most of two seconds to start."""
    ws = tmp_path / "ws"
    directory = ws / "d"
    directory.mkdir(parents=True)
    (directory / "f").write_text("inside")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_text("OUTSIDE")
    (ws / "d.link").symlink_to(outside)
    flipper = subprocess.Popen(  # noqa: ASYNC220 - started once, killed in finally
        [sys.executable, "-c", FLIPPER, str(directory), str(ws / "d.link")]
    )
    reads = writes = read_escapes = answered = refused = 0
    try:
        async with wired(ws, StdioConfig(fs_resolver=resolver)) as (_, agent):  # type: ignore[arg-type]
            with anyio.fail_after(60):
                deadline = time.monotonic() + 2.0
                while time.monotonic() < deadline or not (answered and refused):
                    answer = await agent.read(str(directory / "f"))
                    reads += 1
                    content = answer.get("result", {}).get("content")
                    read_escapes += content == "OUTSIDE"
                    answered += content == "inside"
                    refused += "error" in answer
                    await agent.write(str(directory / f"w{writes}"), "x")
                    writes += 1
    finally:
        flipper.kill()
        flipper.wait()
    write_escapes = len([n for n in os.listdir(outside) if n.startswith("w")])
    print(f"{resolver}: {reads} reads, {writes} writes, {read_escapes + write_escapes} escaped")
    assert (read_escapes, write_escapes) == (0, 0)
    assert (outside / "f").read_text() == "OUTSIDE"
    assert reads > 50 and answered > 0 and refused > 0  # the race was on


# ------------------------------------------------------------------------------ bad paths


@pytest.mark.both_backends
async def test_bad_paths_are_json_rpc_errors_without_traceback(
    ws: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    (ws.parent / "ws-evil").mkdir()
    cases = [
        (f"{ws}/nul\x00byte.txt", "Invalid params: path contains a NUL byte"),
        ("inside.txt", "Invalid params: path must be absolute"),
        (f"{ws}/" + "d/" * 2100 + "x", "Invalid params: path is too long (over 4095 bytes)"),
        (f"{ws}/" + "n" * 300, "Invalid params: path is too long (a name over 255 bytes)"),
        (f"{ws}/../outside.txt", "Invalid params: path is outside the workspace"),
        (str(ws.parent / "outside.txt"), "Invalid params: path is outside the workspace"),
        (f"{ws}-evil/x.txt", "Invalid params: path is outside the workspace"),
    ]
    async with wired(ws) as (_, agent):
        with anyio.fail_after(BOUND):
            for path, message in cases:
                for answer in (await agent.read(path), await agent.write(path, "pwned")):
                    assert error_of(answer) == (-32602, message), path
                    assert answer["error"]["data"] == {"path": path}
            missing = await agent.read(str(ws / "missing.txt"))
            assert error_of(missing) == (-32002, "Resource not found")
            assert missing["error"]["data"] == {"uri": str(ws / "missing.txt")}
    assert not (ws.parent / "ws-evil" / "x.txt").exists()
    assert (ws.parent / "outside.txt").read_text() == "OUTSIDE\n"
    assert not [r for r in caplog.records if r.exc_info is not None]
    assert "Traceback" not in caplog.text
    assert "fs/read_text_file refused: path contains a NUL byte: " in caplog.text


@pytest.mark.both_backends
@pytest.mark.parametrize("resolver", RESOLVERS)
async def test_links_inside_the_workspace(ws: Path, resolver: str) -> None:
    (ws / "real").mkdir()
    (ws / "real" / "a.txt").write_text("a\n")
    (ws / "link").symlink_to("real")
    config = StdioConfig(fs_resolver=resolver)  # type: ignore[arg-type]
    async with wired(ws, config) as (_, agent):
        with anyio.fail_after(BOUND):
            read = await agent.read(str(ws / "link" / "a.txt"))
            write = await agent.write(str(ws / "link" / "b.txt"), "b\n")
    if resolver == "walk":
        message = f"Invalid params: path crosses a symbolic link ({ws / 'link'})"
        for answer in (read, write):
            assert error_of(answer) == (-32602, message)
            assert answer["error"]["data"]["symlink"] == str(ws / "link")
        assert not (ws / "real" / "b.txt").exists()
    else:
        assert read["result"] == {"content": "a\n"}
        assert write["result"] == {}  # the schema's WriteTextFileResponse is an object
        assert (ws / "real" / "b.txt").read_text() == "b\n"


# ------------------------------------------------------------------------------ what may block


@pytest.mark.both_backends
async def test_fifo_and_devices_answer_at_once_and_close_is_prompt(ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    async with wired(ws) as (transport, agent):
        with anyio.fail_after(BOUND):
            for answer in (
                await agent.read(str(ws / "pipe")),
                await agent.write(str(ws / "pipe"), "x"),
            ):
                assert error_of(answer) == (-32602, "Invalid params: not a regular file")
            with anyio.move_on_after(0.2):  # no writer ever comes
                await agent.read(str(ws / "pipe"))
            await transport.aclose()
    async with wired(Path("/dev")) as (_, agent):
        with anyio.fail_after(BOUND):
            answer = await agent.read("/dev/zero")  # else read without end
        assert error_of(answer) == (-32602, "Invalid params: not a regular file")


@pytest.mark.both_backends
async def test_a_blocked_fs_operation_holds_neither_the_agent_nor_close(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read stuck in the kernel (simulated): the agent gets -32603 at ``fs_timeout``, and
    closing the transport does not wait for the stuck worker."""
    release = threading.Event()

    def stuck(self: Workspace, path: str, **_: Any) -> str:
        release.wait(30)
        return "late"

    monkeypatch.setattr(Workspace, "read_text", stuck)
    try:
        async with wired(ws, StdioConfig(fs_timeout=0.3)) as (transport, agent):
            with anyio.fail_after(BOUND):
                answer = await agent.read(str(ws / "inside.txt"))
                assert error_of(answer) == (-32603, "Internal error")
                assert (
                    answer["error"]["data"]["details"] == "fs/read_text_file timed out after 0.3s"
                )
                async with anyio.create_task_group() as tg:
                    tg.start_soon(agent.read, str(ws / "inside.txt"))
                    await anyio.sleep(0.05)
                    await transport.aclose()
                    tg.cancel_scope.cancel()
    finally:
        release.set()


# ------------------------------------------------------------------------------ sizes


async def test_a_sparse_file_read_with_limit_1_stays_small(ws: Path) -> None:
    big = ws / "sparse.txt"
    with big.open("wb") as handle:
        handle.write(b"the first line\n")
        handle.truncate(200 * MiB)
    async with wired(ws) as (_, agent):
        tracemalloc.start()
        try:
            with anyio.fail_after(BOUND):
                answer = await agent.read(str(big), limit=1)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert answer["result"] == {"content": "the first line\n"}
        assert peak < 4 * MiB, f"peak {peak / MiB:.1f} MiB"
        with anyio.fail_after(BOUND):
            whole = await agent.read(str(big))
        assert error_of(whole)[0] == -32602
        assert whole["error"]["data"] == {"path": str(big), "limit": 16 * MiB}


@pytest.mark.both_backends
async def test_read_and_write_caps(ws: Path) -> None:
    (ws / "kb.txt").write_text(("x" * 99 + "\n") * 20)
    config = StdioConfig(fs_max_read_bytes=1000, fs_max_write_bytes=1000)
    async with wired(ws, config) as (_, agent):
        with anyio.fail_after(BOUND):
            too_big = await agent.read(str(ws / "kb.txt"))
            part = await agent.read(str(ws / "kb.txt"), line=3, limit=10)
            over = await agent.write(str(ws / "inside.txt"), "y" * 1001)
            fits = await agent.write(str(ws / "new.txt"), "y" * 1000)
    assert error_of(too_big)[0] == -32602 and "1000-byte read limit" in too_big["error"]["message"]
    assert part["result"] == {"content": ("x" * 99 + "\n") * 10}
    assert error_of(over) == (
        -32602,
        "Invalid params: content is 1001 bytes, over the 1000-byte write limit",
    )
    assert (ws / "inside.txt").read_text() == "inside\n"
    assert fits["result"] == {} and (ws / "new.txt").read_text() == "y" * 1000


async def test_a_write_that_fails_half_way_leaves_the_old_content(ws: Path) -> None:
    """The file system fills up mid-write (RLIMIT_FSIZE): the agent gets -32603, the old
    content stays and no temporary file is left behind."""
    (ws / "keep.txt").write_text("old content\n")
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    async with wired(ws) as (_, agent):
        resource.setrlimit(resource.RLIMIT_FSIZE, (MiB, hard))
        try:
            with anyio.fail_after(BOUND):
                answer = await agent.write(str(ws / "keep.txt"), "new content\n" * MiB)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
            signal.signal(signal.SIGXFSZ, old_handler)
    assert error_of(answer) == (-32603, "Internal error")
    assert answer["error"]["data"]["details"] == "File too large"
    assert (ws / "keep.txt").read_text() == "old content\n"
    assert sorted(os.listdir(ws)) == ["inside.txt", "keep.txt"]


@pytest.mark.both_backends
async def test_fs_writes_are_refused_when_disabled(ws: Path) -> None:
    async with wired(ws, StdioConfig(fs_write=False)) as (_, agent):
        with anyio.fail_after(BOUND):
            write = await agent.write(str(ws / "new.txt"), "should not exist")
            read = await agent.read(str(ws / "inside.txt"))
    assert error_of(write) == (-32601, "Method not found")
    assert write["error"]["data"] == {"method": "fs/write_text_file"}
    assert not (ws / "new.txt").exists()
    assert read["result"] == {"content": "inside\n"}


# ------------------------------------------------------------------------------ attachments


async def _prompt_with_attachment(transport: StdioTransport, gen: int) -> AgentEvent | None:
    note = Attachment(name="notes.bin", data=b"attachment bytes")
    await transport.prompt("see attached", [note], gen)
    with anyio.fail_after(BOUND):
        async for event in transport.events():
            if isinstance(event, ErrorEvent) or getattr(event, "stop_reason", ""):
                return event
    return None


@pytest.mark.both_backends
@pytest.mark.parametrize("resolver", RESOLVERS)
@pytest.mark.parametrize("planted", [".acpfsm", ".acpfsm/attachments/mem-session"])
async def test_attachment_saving_follows_no_planted_link(
    tmp_path: Path, ws: Path, resolver: str, planted: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / planted).parent.mkdir(parents=True, exist_ok=True)
    (ws / planted).symlink_to(outside)
    config = StdioConfig(fs_resolver=resolver)  # type: ignore[arg-type]
    async with wired(ws, config, session=True) as (transport, agent):
        end = await _prompt_with_attachment(transport, 1)
    assert isinstance(end, ErrorEvent)
    assert f"path crosses a symbolic link ({ws / planted})" in end.error
    assert agent.prompts == []  # nothing was sent
    assert list(outside.rglob("*")) == []


@pytest.mark.both_backends
async def test_attachments_are_saved_privately_under_a_safe_session_folder(ws: Path) -> None:
    old = os.umask(0)
    try:
        async with wired(ws, session=False) as (transport, agent):
            agent.session_id = "../../escaped"  # the agent names the session: hostile
            with anyio.fail_after(BOUND):
                await transport.initialize()
                await transport.new_session(str(ws))
            end = await _prompt_with_attachment(transport, 1)
    finally:
        os.umask(old)
    assert end is not None and not isinstance(end, ErrorEvent)
    folder = ws / ".acpfsm" / "attachments" / ".._.._escaped"
    [saved] = folder.glob("*/notes.bin")
    assert saved.read_bytes() == b"attachment bytes"
    link = agent.prompts[0][1]
    assert (link["type"], link["uri"]) == ("resource_link", saved.as_uri())
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    for directory in (ws / ".acpfsm", ws / ".acpfsm" / "attachments", folder, saved.parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert not (ws.parent / "escaped").exists()


def _linked(uri: str) -> bytes:
    return Path(url2pathname(urlsplit(uri).path)).read_bytes()


@pytest.mark.both_backends
async def test_attachments_of_one_name_are_saved_as_files_of_their_own(ws: Path) -> None:
    """Two ``report.txt`` from different folders, two names that fall back to the same
    default, and the same again in a later prompt: each is its own file, and each link
    names the file holding that attachment's bytes."""
    same = [
        Attachment(name="a/report.txt", data=b"first report"),
        Attachment(name="b/report.txt", data=b"second report"),
        Attachment(name="", data=b"nameless one"),
        Attachment(name="..", data=b"nameless two"),
    ]
    async with wired(ws, session=True) as (transport, agent):
        for generation in (1, 2):
            await transport.prompt("see attached", same, generation)
            with anyio.fail_after(BOUND):
                async for event in transport.events():
                    if getattr(event, "stop_reason", ""):
                        break
    links = [block for prompt in agent.prompts for block in prompt[1:]]
    assert len(links) == 8 and len({link["uri"] for link in links}) == 8
    for link, attachment in zip(links, same * 2, strict=True):
        assert link["type"] == "resource_link"
        assert _linked(link["uri"]) == attachment.data
    names = sorted(p.name for p in (ws / ".acpfsm/attachments/mem-session").glob("*/*"))
    assert names == ["attachment"] * 4 + ["report.txt"] * 4
