"""The system side of :mod:`~.workspace`: ``openat2`` through ``ctypes``, the worker threads a
caller may abandon, private files and directories, and the chunked reads and atomic writes
beneath an open directory. Re-exported by :mod:`~.workspace`, which the rest of acpfsm uses."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import sys
import threading
from collections.abc import Callable
from typing import Final, TypeVar

import anyio
import anyio.to_thread

from .errors import (
    ExceptionMapping,
    FileTooLarge,
    NotRegularFile,
    WorkspaceError,
    map_exceptions,
)

CHUNK_BYTES: Final = 64 * 1024
"""Reads and writes move this many bytes per system call."""

_T = TypeVar("_T")

# -- openat2 through ctypes ----------------------------------------------------------------

_RESOLVE_NO_MAGICLINKS: Final = 0x02
_RESOLVE_NO_SYMLINKS: Final = 0x04
_RESOLVE_BENEATH: Final = 0x08
_AT_FDCWD: Final = -100

# openat2 has number 437 in the unified syscall table of every architecture added or
# converted since Linux 5.1 (x86, arm, arm64, riscv, powerpc, s390, loongarch …); the few
# with their own numbering (alpha, ia64, mips) use the walk.
_SYS_OPENAT2: Final = {
    "x86_64": 437,
    "amd64": 437,
    "i386": 437,
    "i686": 437,
    "aarch64": 437,
    "arm64": 437,
    "armv7l": 437,
    "armv6l": 437,
    "riscv64": 437,
    "ppc64": 437,
    "ppc64le": 437,
    "s390x": 437,
    "loongarch64": 437,
}


class _OpenHow(ctypes.Structure):
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


_Openat2 = Callable[[int, bytes, int, int, int], int]


def _load_openat2() -> _Openat2 | None:
    """``openat2(dirfd, path, flags, mode, resolve) -> fd`` (``OSError`` on failure), or None
    when this platform has no such system call."""
    number = _SYS_OPENAT2.get(platform.machine().lower())
    if not sys.platform.startswith("linux") or number is None:
        return None
    try:
        syscall = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):  # a libc without syscall(), or none to load
        return None
    syscall.restype = ctypes.c_long
    syscall.argtypes = (
        ctypes.c_long,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_void_p,
        ctypes.c_size_t,
    )

    def openat2(dirfd: int, path: bytes, flags: int, mode: int, resolve: int) -> int:
        how = _OpenHow(flags, mode, resolve)
        fd = int(syscall(number, dirfd, path, ctypes.byref(how), ctypes.sizeof(how)))
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return fd

    # Probe once: ENOSYS (old kernel), EPERM (seccomp), E2BIG/EINVAL (no such flags).
    try:
        os.close(openat2(_AT_FDCWD, b"/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, 0, 0))
    except OSError:
        return None
    return openat2


_OPENAT2: Final = _load_openat2()


def openat2_available() -> bool:
    """Whether this kernel offers ``openat2`` (the ``auto`` resolver then uses it)."""
    return _OPENAT2 is not None


# -- threads ---------------------------------------------------------------------------------


async def run_in_thread(
    func: Callable[[threading.Event], _T],
    *,
    bound: float,
    limiter: anyio.CapacityLimiter | None = None,
    what: str = "file operation",
) -> _T:
    """Run ``func(cancelled)`` in a worker thread the caller may abandon: when the caller is
    cancelled, or after ``bound`` seconds (:class:`~.errors.WorkspaceError`), this returns
    at once and ``cancelled`` is set, which the worker checks between chunks."""
    cancelled = threading.Event()
    late: ExceptionMapping = {
        TimeoutError: lambda exc: WorkspaceError(f"{what} timed out after {bound:g}s")
    }
    try:
        with map_exceptions(late), anyio.fail_after(bound):
            return await anyio.to_thread.run_sync(
                func, cancelled, abandon_on_cancel=True, limiter=limiter
            )
    finally:
        cancelled.set()


def _check_cancelled(cancelled: threading.Event | None) -> None:
    if cancelled is not None and cancelled.is_set():
        raise WorkspaceError("file operation abandoned")


# -- private files ---------------------------------------------------------------------------


def make_private_dirs(path: str | os.PathLike[str]) -> None:
    """Create ``path`` and its missing parents, each new one mode ``0700`` whatever the umask
    (directories that already exist are left as they are)."""
    target = os.path.abspath(os.fspath(path))
    missing: list[str] = []
    while not os.path.isdir(target):
        missing.append(target)
        parent = os.path.dirname(target)
        if parent == target:
            break
        target = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            continue
        os.chmod(directory, 0o700)


def open_private(path: str | os.PathLike[str], flags: int) -> int:
    """``os.open`` that creates a missing file mode ``0600`` whatever the umask (an existing
    file keeps its mode). ``flags`` are the access flags (``O_WRONLY | O_APPEND`` …)."""
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return os.open(path, flags | os.O_CLOEXEC)
    try:
        os.fchmod(fd, 0o600)
    except OSError:
        os.close(fd)
        raise
    return fd


def safe_component(name: str, default: str) -> str:
    """``name`` made into one harmless path component: separators become ``_``; at most 200
    bytes; an empty name, ``.``, ``..``, or one holding NUL or not encodable, is ``default``."""
    name = name.replace("/", "_").replace("\\", "_")
    try:
        raw = name.encode("utf-8")
    except UnicodeError:
        return default
    if len(raw) > 200:
        name = raw[:200].decode("utf-8", "ignore")
    if name in ("", ".", "..") or "\x00" in name:
        return default
    return name


def _failed(path: str) -> ExceptionMapping:
    """An I/O failure on ``path``: a :class:`WorkspaceError` saying why (no space …)."""
    return {OSError: lambda exc: WorkspaceError(exc.strerror or str(exc), path=path)}


def _chmod_dir(parent: int, name: str) -> None:
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    try:
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def _read_lines(
    fd: int,
    line: int | None,
    limit: int | None,
    max_bytes: int,
    cancelled: threading.Event | None,
    read: Callable[[int, int], bytes],
    path: str,
) -> bytes:
    """Bytes of lines ``line``… (1-based) for ``limit`` lines, streamed chunk by chunk."""
    skip = max((line or 1) - 1, 0)
    wanted = None if limit is None else max(limit, 0)
    out = bytearray()
    while wanted != 0:
        _check_cancelled(cancelled)
        chunk = read(fd, CHUNK_BYTES)
        if not chunk:
            break
        start = 0
        if skip:
            newlines = chunk.count(b"\n")
            if newlines < skip:
                skip -= newlines
                continue
            while skip:
                start = chunk.index(b"\n", start) + 1
                skip -= 1
        end = len(chunk)
        if wanted is not None:
            position = start
            while wanted:
                found = chunk.find(b"\n", position)
                if found < 0:
                    break
                position = found + 1
                wanted -= 1
            if not wanted:
                end = position
        if len(out) + end - start > max_bytes:
            raise FileTooLarge(
                f"the text is over the {max_bytes}-byte read limit; read it in parts "
                "with line and limit",
                path=path,
                limit=max_bytes,
            )
        out += chunk[start:end]
    return bytes(out)


def _replace(
    directory: int,
    name: str,
    data: bytes,
    mode: int | None,
    path: str,
    cancelled: threading.Event | None,
) -> None:
    """Atomically replace ``name`` in ``directory`` with ``data`` (temp file, fsync,
    renameat); the temporary file is removed on any failure."""
    # os.urandom as secrets.token_hex does (secrets would add hmac and hashlib to the import)
    temporary = f".acpfsm-{os.urandom(8).hex()}.tmp"
    with map_exceptions(_failed(path)):
        fd = os.open(
            temporary,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o666 if mode is None else 0o600,
            dir_fd=directory,
        )
    try:
        try:
            if mode is not None:  # the old file's bits (0600 for private files, exactly)
                os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                _check_cancelled(cancelled)
                written = os.write(fd, view[:CHUNK_BYTES])
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        _check_cancelled(cancelled)
        os.rename(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException as exc:
        with _suppress_os_error():
            os.unlink(temporary, dir_fd=directory)
        if isinstance(exc, OSError):
            if exc.errno in (errno.EISDIR, errno.ENOTDIR, errno.ENOTEMPTY):
                raise NotRegularFile("not a regular file", path=path) from None
            raise WorkspaceError(exc.strerror or str(exc), path=path) from None
        raise


class _suppress_os_error:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> bool:
        return kind is not None and issubclass(kind, OSError)
