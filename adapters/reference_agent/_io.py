"""Line I/O on raw file descriptors that works under trio and asyncio alike.

Pipes, sockets and terminals are polled (``anyio.wait_readable``/``wait_writable``) and then
read or written without ever blocking: a read after readiness returns what is there, and a
write of at most ``PIPE_BUF`` bytes after writability fits in the pipe. File descriptor flags
are never changed (stdout may share its open file description with stderr or a terminal).
Regular files and character devices that cannot be polled are read and written directly.

All output goes through one :class:`Outbox` task, so a line is never interleaved with another
and a cancelled producer never leaves half a line behind.
"""

from __future__ import annotations

import os
import select
import stat
from collections.abc import AsyncGenerator, Callable

import anyio
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from anyio.lowlevel import checkpoint

__all__ = ["LineReader", "Outbox", "PeerGone"]

_READ_SIZE = 1 << 16
_PIPE_BUF = getattr(select, "PIPE_BUF", 512)


def _pollable(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)


class PeerGone(Exception):
    """stdout is broken (the client closed its end)."""


class LineReader:
    """Newline-delimited input from a file descriptor.

    ``lines()`` yields each line without its newline; a line longer than ``max_line`` is
    yielded as ``None`` (once, after the rest of it has been discarded) so that the caller
    can answer it with a parse error.
    """

    def __init__(self, fd: int, *, max_line: int) -> None:
        self._fd = fd
        self._poll = _pollable(fd)
        self._max_line = max_line

    async def _read(self) -> bytes:
        while True:
            if self._poll:
                await anyio.wait_readable(self._fd)
            else:
                await checkpoint()
            try:
                return os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                continue
            except OSError:
                return b""

    async def lines(self) -> AsyncGenerator[bytes | None, None]:
        buf = bytearray()
        scanned = 0
        discarding = False
        while True:
            chunk = await self._read()
            if not chunk:
                if buf and not discarding:
                    yield bytes(buf)
                elif discarding:
                    yield None
                return
            buf += chunk
            while True:
                nl = buf.find(b"\n", scanned)
                if nl < 0:
                    scanned = len(buf)
                    if len(buf) > self._max_line:
                        discarding = True
                        buf.clear()
                        scanned = 0
                    break
                if discarding:
                    discarding = False
                    del buf[: nl + 1]
                    scanned = 0
                    yield None
                    continue
                line = bytes(buf[:nl])
                del buf[: nl + 1]
                scanned = 0
                if len(line) > self._max_line:
                    yield None
                else:
                    yield line


class _Mark:
    """A queue item that sets ``event`` when the writer reaches it, optionally after
    closing the output."""

    __slots__ = ("close", "event")

    def __init__(self, *, close: bool) -> None:
        self.close = close
        self.event = anyio.Event()


class Outbox:
    """The single writer of stdout.

    Producers ``await send(line)``; the line is queued (bounded, so a flood applies
    backpressure) and written whole by :meth:`run`. :meth:`drain` waits until everything
    queued before it is written; :meth:`close_output` replaces the descriptor with
    ``/dev/null`` (the peer reads EOF) and drops every later line.
    """

    def __init__(self, fd: int, *, on_peer_gone: Callable[[], None], buffer: int = 256) -> None:
        self._fd = fd
        self._poll = _pollable(fd)
        self._closed = False
        self._on_peer_gone = on_peer_gone
        send, recv = anyio.create_memory_object_stream[bytes | _Mark](buffer)
        self._send: ObjectSendStream[bytes | _Mark] = send
        self._recv: ObjectReceiveStream[bytes | _Mark] = recv

    @property
    def closed(self) -> bool:
        return self._closed

    async def send(self, line: bytes) -> None:
        await self._send.send(line)

    async def drain(self) -> None:
        mark = _Mark(close=False)
        await self._send.send(mark)
        await mark.event.wait()

    async def close_output(self) -> None:
        mark = _Mark(close=True)
        await self._send.send(mark)
        await mark.event.wait()

    async def run(self) -> None:
        async with self._recv:
            async for item in self._recv:
                if isinstance(item, _Mark):
                    if item.close:
                        self._close_now()
                    item.event.set()
                    continue
                if self._closed:
                    continue
                try:
                    await self._write_all(item)
                except OSError:  # EPIPE, ECONNRESET, EBADF: nobody reads our output any more
                    self._closed = True
                    self._on_peer_gone()

    def _close_now(self) -> None:
        if self._closed:
            return
        self._closed = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._fd)
        finally:
            os.close(devnull)

    async def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self._poll:
                await anyio.wait_writable(self._fd)
                try:
                    n = os.write(self._fd, view[:_PIPE_BUF])
                except BlockingIOError:
                    continue
            else:
                await checkpoint()
                n = os.write(self._fd, view)
            view = view[n:]
