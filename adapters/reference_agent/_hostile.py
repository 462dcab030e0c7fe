"""Hostile ``fs/*`` requests: what a malicious agent asks of its client, and what got through.

The faults ``fs_traversal``, ``fs_symlink_race``, ``fs_fifo``, ``fs_huge_read`` and
``fs_bad_paths`` each run one probe at the turn's fault point. A probe plants what it needs
(files outside the workspace in a fresh temporary directory, a sibling ``<cwd>-evil``
directory, links, a FIFO, a sparse file), makes its requests through the client's
``fs/read_text_file``/``fs/write_text_file``, counts the answers that reached outside the
workspace (``escaped``), removes what it planted and returns a :class:`ProbeResult`: the agent
reports it as a tool call's ``rawOutput`` and as a sentence of its reply.

:func:`swap_forever` is the race's flipper (also run on its own by tests: ``python -c``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread
import msgspec

from . import _wire as w

__all__ = [
    "HOSTILE_FS_FAULTS",
    "ProbeResult",
    "run_probe",
    "swap_forever",
    "undecodable_requests",
]

Call = Callable[[str, object], Awaitable[msgspec.Raw]]
"""Sends one request to the client and returns its result (raises ``RpcError``)."""

HOSTILE_FS_FAULTS = ("fs_traversal", "fs_symlink_race", "fs_fifo", "fs_huge_read", "fs_bad_paths")

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


@dataclass
class ProbeResult:
    """What one probe did: requests made, how each was answered, how many escaped."""

    fault: str
    requests: int = 0
    escaped: int = 0
    answered: int = 0
    """Requests answered with a result (not an error)."""
    errors: dict[str, int] = field(default_factory=dict)
    """JSON-RPC error ``"<code> <message>"`` → how many requests got it."""
    details: dict[str, Any] = field(default_factory=dict)

    def error(self, exc: w.RpcError) -> None:
        key = f"{exc.code} {exc.message}"
        self.errors[key] = self.errors.get(key, 0) + 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "fault": self.fault,
            "requests": self.requests,
            "answered": self.answered,
            "escaped": self.escaped,
            "errors": dict(sorted(self.errors.items())),
            **self.details,
        }

    def sentence(self) -> str:
        refused = sum(self.errors.values())
        codes = ", ".join(f"{key} ×{n}" for key, n in sorted(self.errors.items())) or "none"
        return (
            f"{self.fault}: {self.requests} requests, {self.answered} answered, "
            f"{refused} refused ({codes}), {self.escaped} escaped."
        )


class _Probe:
    def __init__(self, call: Call, session_id: str, result: ProbeResult) -> None:
        self._call = call
        self._sid = session_id
        self.result = result

    async def read(self, path: str, **extra: Any) -> str | None:
        """The content the client returned, or None when it refused."""
        self.result.requests += 1
        try:
            raw = await self._call(
                "fs/read_text_file", {"sessionId": self._sid, "path": path, **extra}
            )
        except w.RpcError as exc:
            self.result.error(exc)
            return None
        self.result.answered += 1
        try:
            return msgspec.json.decode(raw, type=w.ReadTextFileResult).content
        except msgspec.DecodeError:
            return ""

    async def write(self, path: str, content: str) -> bool:
        self.result.requests += 1
        try:
            await self._call(
                "fs/write_text_file", {"sessionId": self._sid, "path": path, "content": content}
            )
        except w.RpcError as exc:
            self.result.error(exc)
            return False
        self.result.answered += 1
        return True


@contextlib.contextmanager
def _outside() -> Iterator[str]:
    """A fresh directory outside the workspace, removed afterwards."""
    directory = tempfile.mkdtemp(prefix="acpfsm-outside-")
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _put(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def _get(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        if os.path.islink(path) or not os.path.isdir(path):
            os.unlink(path)
        else:
            shutil.rmtree(path, ignore_errors=True)


@dataclass
class _Plan:
    """The traversal probe's planted files and its requests."""

    token: str
    secret: str
    sibling: str
    planted_sibling: bool
    links: list[str]
    reads: list[str]
    writes: list[str]


def _plant_traversal(cwd: str, outside: str) -> _Plan:
    token = "OUTSIDE " + secrets.token_hex(8)
    secret = os.path.join(outside, "secret.txt")
    _put(secret, token)
    sibling = cwd.rstrip("/") + "-evil"
    planted_sibling = not os.path.exists(sibling)
    if planted_sibling:
        os.mkdir(sibling)
    _put(os.path.join(sibling, "secret.txt"), token)
    file_link, dir_link, relative_link = (
        os.path.join(cwd, name)
        for name in (".acpfsm-escape-file", ".acpfsm-escape-dir", ".acpfsm-escape-rel")
    )
    os.symlink(secret, file_link)
    os.symlink(outside, dir_link)
    os.symlink(os.path.relpath(secret, cwd), relative_link)
    up = os.path.join(cwd, os.path.relpath(outside, cwd))  # <cwd>/../../…/outside
    return _Plan(
        token=token,
        secret=secret,
        sibling=sibling,
        planted_sibling=planted_sibling,
        links=[file_link, dir_link, relative_link],
        reads=[
            os.path.join(up, "secret.txt"),
            secret,
            os.path.join(sibling, "secret.txt"),
            file_link,
            os.path.join(dir_link, "secret.txt"),
            relative_link,
        ],
        writes=[
            os.path.join(up, "written-1.txt"),
            os.path.join(outside, "written-2.txt"),
            os.path.join(sibling, "written-3.txt"),
            os.path.join(dir_link, "written-4.txt"),
            file_link,
            relative_link,
        ],
    )


def _written_outside(plan: _Plan, outside: str) -> int:
    """Files the client wrote outside the workspace (and 1 if the secret was overwritten)."""
    written = [n for n in os.listdir(outside) if n.startswith("written-")]
    written += [n for n in os.listdir(plan.sibling) if n.startswith("written-")]
    return len(written) + (_get(plan.secret) != plan.token)


def _unplant_traversal(plan: _Plan) -> None:
    for link in plan.links:
        _remove(link)
    if plan.planted_sibling:
        _remove(plan.sibling)
        return
    for name in os.listdir(plan.sibling):
        if name.startswith("written-") or name == "secret.txt":
            _remove(os.path.join(plan.sibling, name))


async def _traversal(probe: _Probe, cwd: str) -> None:
    """``..`` out of the workspace, an absolute path elsewhere, the sibling ``<cwd>-evil``,
    links (absolute, relative, to a directory) planted in the workspace pointing outside."""
    with _outside() as outside:
        plan = _plant_traversal(cwd, outside)
        try:
            for path in plan.reads:
                content = await probe.read(path)
                if content is not None and plan.token in content:
                    probe.result.escaped += 1
            for path in plan.writes:
                await probe.write(path, "pwned\n")
            probe.result.escaped += _written_outside(plan, outside)
        finally:
            _unplant_traversal(plan)


def _exchange() -> Callable[[str, str], None]:
    """``exchange(a, b)``: swap two names atomically (``renameat2(RENAME_EXCHANGE)``), or,
    where the system has no such call, in four renames (the names briefly go missing)."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
        renameat2.restype = ctypes.c_int
        renameat2.argtypes = (
            ctypes.c_int,
            ctypes.c_char_p,
            ctypes.c_int,
            ctypes.c_char_p,
            ctypes.c_uint,
        )
    except (OSError, AttributeError):
        renameat2 = None

    def by_renames(a: str, b: str) -> None:
        spare = a + ".swap"
        os.rename(a, spare)
        os.rename(b, a)
        os.rename(spare, b)

    if renameat2 is None:
        return by_renames

    def exchange(a: str, b: str) -> None:
        if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE):
            by_renames(a, b)

    return exchange


def swap_forever(a: str, b: str, stop: threading.Event | None = None) -> int:
    """Swap the names ``a`` and ``b`` back to back until ``stop`` is set (forever without
    one); returns how many swaps were made. Errors (a name briefly missing) are skipped."""
    exchange = _exchange()
    swaps = 0
    while stop is None or not stop.is_set():
        try:
            exchange(a, b)
            swaps += 1
        except OSError:
            time.sleep(0)
    return swaps


async def _symlink_race(probe: _Probe, cwd: str, seconds: float) -> None:
    """A directory of the workspace swapped back to back with a link to a directory outside,
    while the client is asked to read and write through it for ``seconds``."""
    token = "OUTSIDE " + secrets.token_hex(8)
    base = os.path.join(cwd, ".acpfsm-race-" + secrets.token_hex(4))
    directory = os.path.join(base, "d")
    link = os.path.join(base, "d.link")
    with _outside() as outside:
        _put(os.path.join(outside, "f"), token)
        os.makedirs(directory)
        _put(os.path.join(directory, "f"), "inside")
        os.symlink(outside, link)
        stop = threading.Event()
        swaps: list[int] = []
        flipper = threading.Thread(
            target=lambda: swaps.append(swap_forever(directory, link, stop)), daemon=True
        )
        flipper.start()
        reads = writes = inside = 0
        try:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                content = await probe.read(os.path.join(directory, "f"))
                reads += 1
                if content == token:
                    probe.result.escaped += 1
                elif content == "inside":
                    inside += 1
                await probe.write(os.path.join(directory, f"w{writes}"), "x")
                writes += 1
        finally:
            stop.set()
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(flipper.join)
            escaped_writes = [n for n in os.listdir(outside) if n.startswith("w")]
            probe.result.escaped += len(escaped_writes)
            _remove(base)
        probe.result.details.update(
            reads=reads, writes=writes, inside_reads=inside, swaps=swaps[0] if swaps else 0
        )


async def _fifo(probe: _Probe, cwd: str) -> None:
    """A FIFO in the workspace, asked for as a text file (a blocking open would hang)."""
    path = os.path.join(cwd, ".acpfsm-fifo-" + secrets.token_hex(4))
    os.mkfifo(path)
    try:
        await probe.read(path)
        await probe.write(path, "into the pipe\n")
    finally:
        _remove(path)


def _sparse(path: str, first_line: str, size: int) -> None:
    with open(path, "wb") as handle:
        handle.write(first_line.encode())
        handle.truncate(size)


async def _huge_read(probe: _Probe, cwd: str, megabytes: float) -> None:
    """A sparse file of ``megabytes`` MiB read with ``limit: 1`` and then whole."""
    path = os.path.join(cwd, ".acpfsm-huge-" + secrets.token_hex(4) + ".txt")
    _sparse(path, "the first line of a sparse file\n", int(megabytes * 1024 * 1024))
    try:
        head = await probe.read(path, limit=1)
        probe.result.details["first_line"] = head
        whole = await probe.read(path)
        probe.result.details["whole_characters"] = None if whole is None else len(whole)
    finally:
        _remove(path)


async def _bad_paths(probe: _Probe, cwd: str) -> None:
    """A NUL byte in the path, a relative path and a path over 4096 bytes, read and written."""
    paths = [
        os.path.join(cwd, "nul\x00byte.txt"),
        "relative.txt",
        os.path.join(cwd, *(["d" * 200] * 25), "long.txt"),
    ]
    for path in paths:
        await probe.read(path)
        await probe.write(path, "bad path\n")


async def run_probe(
    fault: str, call: Call, session_id: str, cwd: str, argument: float
) -> ProbeResult:
    """Run the probe of ``fault`` (one of :data:`HOSTILE_FS_FAULTS`)."""
    probe = _Probe(call, session_id, ProbeResult(fault))
    if fault == "fs_traversal":
        await _traversal(probe, cwd)
    elif fault == "fs_symlink_race":
        await _symlink_race(probe, cwd, argument)
    elif fault == "fs_fifo":
        await _fifo(probe, cwd)
    elif fault == "fs_huge_read":
        await _huge_read(probe, cwd, argument)
    else:
        await _bad_paths(probe, cwd)
    return probe.result


UNDECODABLE_WAIT = 5.0
"""How long the ``undecodable_requests`` probe waits for each answer."""


async def undecodable_requests(call: Call, session_id: str) -> ProbeResult:
    """Two ``fs/read_text_file`` requests whose params do not decode on a strict client (a
    lone-surrogate escape; arrays nested 100000 deep) but whose id and method are plain: a
    client should answer each with a JSON-RPC error rather than leave it unanswered."""
    result = ProbeResult("undecodable_requests", details={"unanswered": 0})
    sid = msgspec.json.encode(session_id)
    deep = b"[" * 100_000 + b"]" * 100_000
    for params in (
        b'{"sessionId":' + sid + b',"path":"/tmp/\\ud800"}',
        b'{"sessionId":' + sid + b',"path":"/tmp/x","_meta":{"deep":' + deep + b"}}",
    ):
        result.requests += 1
        try:
            with anyio.fail_after(UNDECODABLE_WAIT):
                await call("fs/read_text_file", msgspec.Raw(params))
        except w.RpcError as exc:
            result.error(exc)
        except TimeoutError:
            result.details["unanswered"] += 1
        else:
            result.answered += 1
    return result
