"""``acpfsm.adapters.workspace``: paths resolved beneath the workspace's descriptor, with
``openat2`` and with the forced walk, regular files only, streamed reads, atomic bounded
writes, private files. The same operations through the transport's ``fs/*`` handlers (and the
symlink-swap race) are in ``test_stdio_fs.py``; ``ws`` is in ``conftest.py``."""

from __future__ import annotations

import errno
import os
import platform
import re
import resource
import signal
import socket
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from acpfsm.adapters import _fileops as fileops
from acpfsm.adapters import workspace as workspace_module
from acpfsm.adapters.errors import (
    FileTooLarge,
    InvalidText,
    MissingFile,
    NotRegularFile,
    PathRefused,
    SymlinkRefused,
    WorkspaceError,
)
from acpfsm.adapters.workspace import (
    CHUNK_BYTES,
    Workspace,
    make_private_dirs,
    open_private,
    openat2_available,
    run_in_thread,
    safe_component,
)

MiB = 1024 * 1024
CAP = 16 * MiB


def _kernel_has_openat2() -> bool:
    """Linux >= 5.6 has ``openat2``: there a failed probe is a bug, not a reason to skip."""
    found = re.match(r"(\d+)\.(\d+)", platform.release())
    if not sys.platform.startswith("linux") or found is None:
        return False
    return (int(found[1]), int(found[2])) >= (5, 6)


KERNEL_HAS_OPENAT2 = _kernel_has_openat2()
needs_openat2 = pytest.mark.skipif(not KERNEL_HAS_OPENAT2, reason="kernel without openat2")
RESOLVERS = [pytest.param("openat2", marks=needs_openat2), "walk"]


@pytest.fixture(params=RESOLVERS)
def resolver(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def umask() -> Iterator[Callable[[int], None]]:
    old = os.umask(0o022)
    os.umask(old)

    def set_umask(mask: int) -> None:
        os.umask(mask)

    yield set_umask
    os.umask(old)


def read(w: Workspace, path: Path | str, **kw: object) -> str:
    return w.read_text(str(path), max_bytes=kw.pop("max_bytes", CAP), **kw)  # type: ignore[arg-type]


def write(w: Workspace, path: Path | str, content: str, max_bytes: int = CAP) -> None:
    w.write_text(str(path), content, max_bytes=max_bytes)


# ------------------------------------------------------------------------------ resolvers


def test_auto_uses_openat2_where_the_kernel_has_it(ws: Path) -> None:
    assert Workspace(ws).resolver == ("openat2" if openat2_available() else "walk")
    assert Workspace(ws, resolver="walk").resolver == "walk"


@needs_openat2
def test_openat2_is_found_where_the_kernel_has_it() -> None:
    # the openat2 tests are not skipped on a kernel that has it: a probe that fails there
    # (a wrong syscall number, a misread return value) fails here
    assert openat2_available()


def test_openat2_is_not_used_off_linux_on_an_unknown_machine_or_a_refusing_kernel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The loader gives no openat2 where there is none to call: another system, a machine
    without a known syscall number, a kernel whose probe fails (ENOSYS, seccomp's EPERM)."""
    with monkeypatch.context() as m:
        m.setattr(sys, "platform", "darwin")
        assert fileops._load_openat2() is None
    with monkeypatch.context() as m:
        m.setattr(platform, "machine", lambda: "vax")
        assert fileops._load_openat2() is None

    class Refusing:
        restype: object = None
        argtypes: object = None

        def __call__(self, *args: object) -> int:
            return -1

    class Libc:
        def __init__(self, *args: object, **kw: object) -> None:
            self.syscall = Refusing()

    with monkeypatch.context() as m:
        m.setattr(fileops.ctypes, "CDLL", Libc)
        assert fileops._load_openat2() is None

    class NoSyscall:  # a libc that exports no syscall()
        def __init__(self, *args: object, **kw: object) -> None:
            pass

    def no_libc(*args: object, **kw: object) -> None:
        raise OSError("no C library to load")

    for cdll in (NoSyscall, no_libc):
        with monkeypatch.context() as m:
            m.setattr(fileops.ctypes, "CDLL", cdll)
            assert fileops._load_openat2() is None


def test_without_openat2_auto_walks_and_forcing_it_is_refused(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workspace_module, "_OPENAT2", None)
    assert Workspace(ws).resolver == "walk"
    with pytest.raises(WorkspaceError, match="openat2 is not available"):
        Workspace(ws, resolver="openat2")


# ------------------------------------------------------------------------------ paths


@pytest.mark.parametrize(
    ("make_path", "reason"),
    [
        (lambda ws: f"{ws}/a\x00b.txt", "path contains a NUL byte"),
        (lambda ws: "inside.txt", "path must be absolute"),
        (lambda ws: "./inside.txt", "path must be absolute"),
        (lambda ws: f"{ws}/" + "a/" * 2100 + "x", "path is too long"),
        (lambda ws: f"{ws}/../outside.txt", "path is outside the workspace"),
        (lambda ws: f"{ws}/sub/../../outside.txt", "path is outside the workspace"),
        (lambda ws: f"{ws}/../ws/inside.txt", "path is outside the workspace"),
        (lambda ws: f"{ws.parent}/outside.txt", "path is outside the workspace"),
        (lambda ws: f"{ws}-evil/inside.txt", "path is outside the workspace"),
        (lambda ws: "/etc/passwd", "path is outside the workspace"),
    ],
)
def test_bad_paths_are_refused(
    ws: Path, resolver: str, make_path: Callable[[Path], str], reason: str
) -> None:
    (ws / "sub").mkdir()
    (ws.parent / "ws-evil").mkdir()
    (ws.parent / "ws-evil" / "inside.txt").write_text("OUTSIDE\n")
    w = Workspace(ws, resolver=resolver)  # type: ignore[arg-type]
    path = make_path(ws)
    with pytest.raises(PathRefused) as caught:
        read(w, path)
    assert caught.value.reason.startswith(reason) and caught.value.path == path
    with pytest.raises(PathRefused, match=reason.split(" (")[0]):
        write(w, path, "pwned\n")
    assert (ws.parent / "outside.txt").read_text() == "OUTSIDE\n"
    assert (ws.parent / "ws-evil" / "inside.txt").read_text() == "OUTSIDE\n"


def test_a_component_over_255_bytes_is_refused(ws: Path, resolver: str) -> None:
    w = Workspace(ws, resolver=resolver)  # type: ignore[arg-type]
    with pytest.raises(PathRefused, match="too long"):
        read(w, ws / ("n" * 300))


def test_a_path_of_path_max_bytes_is_refused_before_the_kernel_sees_it(ws: Path) -> None:
    """Linux's PATH_MAX counts the terminator: a path of exactly PATH_MAX bytes is one too
    many, refused as such."""
    w = Workspace(ws)
    head = f"{ws}/"
    path = head + "d/" * ((workspace_module.PATH_MAX - len(head)) // 2)
    path += "x" * (workspace_module.PATH_MAX - len(path))
    assert len(path.encode()) == workspace_module.PATH_MAX
    with pytest.raises(PathRefused, match=f"over {workspace_module.PATH_MAX - 1} bytes"):
        read(w, path)


@pytest.mark.parametrize("name", ["alias", "zz-alias"])  # sorting before and after "ws"
def test_paths_under_either_spelling_of_the_workspace(tmp_path: Path, ws: Path, name: str) -> None:
    alias = tmp_path / name
    alias.symlink_to(ws)  # the workspace as the caller named it: through a link
    w = Workspace(alias)
    assert w.root == str(ws)
    assert read(w, alias / "inside.txt") == "inside\n"
    assert read(w, ws / "inside.txt") == "inside\n"
    assert read(w, f"{ws}//./inside.txt") == "inside\n"


def test_missing_files(ws: Path, resolver: str) -> None:
    w = Workspace(ws, resolver=resolver)  # type: ignore[arg-type]
    with pytest.raises(MissingFile):
        read(w, ws / "nope.txt")
    with pytest.raises(MissingFile):
        read(w, ws / "inside.txt" / "below")
    with pytest.raises(MissingFile):
        write(w, ws / "inside.txt" / "below", "x")


# ------------------------------------------------------------------------------ symbolic links


@needs_openat2
def test_links_inside_the_workspace_are_followed_by_openat2(ws: Path) -> None:
    (ws / "real").mkdir()
    (ws / "real" / "a.txt").write_text("a\n")
    (ws / "dir-link").symlink_to("real")  # relative, stays inside
    (ws / "sub").mkdir()
    (ws / "sub" / "up-link").symlink_to("../real/a.txt")  # relative with .., stays inside
    (ws / "abs-link").symlink_to(ws / "inside.txt")  # absolute: the kernel refuses it
    w = Workspace(ws, resolver="openat2")
    assert read(w, ws / "dir-link" / "a.txt") == "a\n"
    assert read(w, ws / "sub" / "up-link") == "a\n"
    with pytest.raises(PathRefused, match="outside"):
        read(w, ws / "abs-link")
    # a write through a link replaces the file it names; the link stays a link
    write(w, ws / "sub" / "up-link", "new a\n")
    assert (ws / "real" / "a.txt").read_text() == "new a\n"
    assert (ws / "sub" / "up-link").is_symlink()
    write(w, ws / "dir-link" / "b.txt", "b\n")
    assert (ws / "real" / "b.txt").read_text() == "b\n"
    # a link two folders down names its target from its own folder
    (ws / "x" / "y").mkdir(parents=True)
    (ws / "x" / "y" / "t.txt").write_text("t\n")
    (ws / "x" / "y" / "deep-link").symlink_to("t.txt")
    write(w, ws / "x" / "y" / "deep-link", "new t\n")
    assert (ws / "x" / "y" / "t.txt").read_text() == "new t\n"
    assert not (ws / "x" / "t.txt").exists()
    (ws / "dash-link").symlink_to("-t.txt")  # a name that sorts before ".."
    write(w, ws / "dash-link", "dash\n")
    assert (ws / "-t.txt").read_text() == "dash\n"
    # a link with an absolute target is refused for a write as for a read
    with pytest.raises(PathRefused, match="outside"):
        write(w, ws / "abs-link", "via absolute link\n")
    assert (ws / "inside.txt").read_text() == "inside\n"


@needs_openat2
def test_a_path_through_a_followed_link_to_a_file_is_missing_not_a_refused_link(
    ws: Path,
) -> None:
    """openat2 follows links inside the workspace: ``flink/x`` with ``flink`` naming a file
    is a missing file (ENOTDIR), and a loop of links is too many levels; neither is blamed on
    a link the resolver was allowed to follow."""
    (ws / "flink").symlink_to("inside.txt")
    (ws / "loop-a").symlink_to("loop-b")
    (ws / "loop-b").symlink_to("loop-a")
    w = Workspace(ws, resolver="openat2")
    with pytest.raises(MissingFile) as missing:
        read(w, ws / "flink" / "x")
    assert not isinstance(missing.value, SymlinkRefused)
    with pytest.raises(PathRefused, match="too many levels") as loop:
        read(w, ws / "loop-a")
    assert not isinstance(loop.value, SymlinkRefused)


@needs_openat2
def test_a_link_swapped_away_before_it_is_read_is_a_workspace_error(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write through a final link whose entry is swapped for a plain file between the
    look and the readlink (EINVAL): a typed error naming the path, nothing written."""
    (ws / "link").symlink_to("inside.txt")
    w = Workspace(ws, resolver="openat2")

    def swapped(*args: object, **kw: object) -> str:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(os, "readlink", swapped)
    with pytest.raises(WorkspaceError, match="Invalid argument") as info:
        write(w, ws / "link", "via a swapped link\n")
    assert info.value.path == str(ws / "link")
    assert (ws / "inside.txt").read_text() == "inside\n"


def test_a_write_whose_temporary_file_cannot_be_made_is_a_workspace_error(
    ws: Path, resolver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The atomic write's temporary file cannot be created (a full or read-only disk): a
    typed error naming the path, the old content kept."""
    real_open = os.open

    def full_disk(name: str, *args: Any, **kw: Any) -> int:
        if str(name).startswith(".acpfsm-") and str(name).endswith(".tmp"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(name, *args, **kw)

    monkeypatch.setattr(os, "open", full_disk)
    w = Workspace(ws, resolver=resolver)  # type: ignore[arg-type]
    with pytest.raises(WorkspaceError) as info:
        write(w, ws / "inside.txt", "new\n")
    assert str(info.value) == f"No space left on device: {str(ws / 'inside.txt')!r}"
    assert info.value.path == str(ws / "inside.txt")
    monkeypatch.undo()
    assert (ws / "inside.txt").read_text() == "inside\n"


@needs_openat2
def test_any_other_kernel_error_is_a_workspace_error_with_its_text(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error the resolver has no word for (ESTALE: a stale NFS handle) is reported with
    the kernel's text, not mistaken for a link loop or a long name."""
    w = Workspace(ws, resolver="openat2")

    def stale(*args: object) -> int:
        raise OSError(errno.ESTALE, os.strerror(errno.ESTALE))

    monkeypatch.setattr(workspace_module, "_OPENAT2", stale)
    with pytest.raises(WorkspaceError) as info:
        read(w, ws / "inside.txt")
    assert type(info.value) is WorkspaceError
    assert str(info.value).startswith(os.strerror(errno.ESTALE))


def test_a_write_into_a_new_folder_of_an_existing_one_closes_only_its_own_descriptors(
    ws: Path, resolver: str, umask: Callable[[int], None]
) -> None:
    """The missing folders are made below the deepest existing one; a new file gets
    0666 less the umask; every descriptor opened on the way is closed, and no other."""
    umask(0o022)
    (ws / "have").mkdir()
    w = Workspace(ws, resolver=resolver)  # type: ignore[arg-type]
    before = set(os.listdir("/proc/self/fd"))
    write(w, ws / "have" / "new" / "f.txt", "f\n")
    assert set(os.listdir("/proc/self/fd")) == before
    assert (ws / "have" / "new" / "f.txt").read_text() == "f\n"
    assert stat.S_IMODE((ws / "have" / "new" / "f.txt").stat().st_mode) == 0o644


def test_a_folder_that_cannot_be_made_or_a_failed_read_is_a_workspace_error(
    ws: Path, resolver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mkdir refused (a full disk) and a read that fails (EIO): typed errors with the
    kernel's text and the path."""
    w = Workspace(ws, resolver=resolver)  # type: ignore[arg-type]

    def failing(*args: Any, **kw: Any) -> Any:
        raise OSError(errno.EIO, "Input/output error")

    with pytest.raises(WorkspaceError) as io_error:
        read(w, ws / "inside.txt", read=failing)
    assert str(io_error.value) == f"Input/output error: {str(ws / 'inside.txt')!r}"

    def full(*args: Any, **kw: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "mkdir", full)
    target = ws / "new" / "f.txt"
    with pytest.raises(WorkspaceError) as no_space:
        write(w, target, "f\n")
    assert str(no_space.value) == f"No space left on device: {str(target)!r}"


def test_deep_paths_and_refused_links_leave_no_descriptor_open(
    ws: Path, resolver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three folders down is read from the right folder; a refused link, and a private file
    whose mode cannot be set, leave no descriptor behind."""
    (ws / "a" / "b" / "c").mkdir(parents=True)
    (ws / "a" / "b" / "c" / "f.txt").write_text("deep\n")
    (ws / "a" / "b" / "link").symlink_to("/")
    w = Workspace(ws, resolver=resolver)  # type: ignore[arg-type]
    before = set(os.listdir("/proc/self/fd"))
    assert read(w, ws / "a" / "b" / "c" / "f.txt") == "deep\n"
    with pytest.raises(PathRefused):
        read(w, ws / "a" / "b" / "link" / "etc" / "passwd")
    assert set(os.listdir("/proc/self/fd")) == before

    def refused(*args: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "fchmod", refused)
    with pytest.raises(PermissionError):
        os.close(open_private(ws / "private.txt", os.O_WRONLY))
    monkeypatch.undo()
    assert set(os.listdir("/proc/self/fd")) == before


@needs_openat2
def test_openat2_leaves_dot_dot_to_the_kernel(ws: Path) -> None:
    """openat2 resolves ``..`` after a followed link physically, as the kernel does: the
    parent of the link's target, not the folder the link sits in."""
    (ws / "real" / "sub").mkdir(parents=True)
    (ws / "real" / "a.txt").write_text("real a\n")
    (ws / "a.txt").write_text("top a\n")
    (ws / "dl").symlink_to("real/sub")
    w = Workspace(ws, resolver="openat2")
    assert read(w, f"{ws}/dl/../a.txt") == "real a\n"


def test_the_walk_refuses_every_link_naming_it(ws: Path) -> None:
    (ws / "real").mkdir()
    (ws / "real" / "a.txt").write_text("a\n")
    (ws / "dir-link").symlink_to("real")
    (ws / "file-link").symlink_to("inside.txt")
    w = Workspace(ws, resolver="walk")
    for path, link in [
        (ws / "dir-link" / "a.txt", ws / "dir-link"),
        (ws / "file-link", ws / "file-link"),
    ]:
        with pytest.raises(SymlinkRefused) as caught:
            read(w, path)
        assert caught.value.link == str(link) and caught.value.path == str(path)
        assert str(link) in caught.value.reason
        with pytest.raises(SymlinkRefused, match="symbolic link"):
            write(w, path, "x")
    assert (ws / "inside.txt").read_text() == "inside\n"
    assert not (ws / "real" / "b.txt").exists()


def test_links_leading_outside_are_refused(tmp_path: Path, ws: Path, resolver: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("OUTSIDE\n")
    (ws / "abs").symlink_to(outside / "secret.txt")
    (ws / "rel").symlink_to("../outside/secret.txt")
    (ws / "dir").symlink_to(outside)
    (ws / "proc").symlink_to("/proc/self/root/etc/passwd")
    w = Workspace(ws, resolver=resolver)  # type: ignore[arg-type]
    for path in (ws / "abs", ws / "rel", ws / "dir" / "secret.txt", ws / "proc"):
        with pytest.raises(PathRefused):
            read(w, path)
        with pytest.raises(PathRefused):
            write(w, path, "pwned\n")
    with pytest.raises(PathRefused):
        write(w, ws / "dir" / "new.txt", "pwned\n")
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "OUTSIDE\n"


# ------------------------------------------------------------------------------ file types


def test_a_fifo_is_refused_at_once(ws: Path, resolver: str) -> None:
    fifo = ws / "pipe"
    os.mkfifo(fifo)
    w = Workspace(ws, resolver=resolver)  # type: ignore[arg-type]
    with pytest.raises(NotRegularFile):
        read(w, fifo)  # a blocking open would wait for a writer forever
    with pytest.raises(NotRegularFile):
        write(w, fifo, "into the pipe")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_sockets_and_directories_are_refused(ws: Path, resolver: str) -> None:
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(ws / "sock"))
        w = Workspace(ws, resolver=resolver)  # type: ignore[arg-type]
        with pytest.raises(NotRegularFile):
            read(w, ws / "sock")
    (ws / "folder").mkdir()
    for path in (ws / "folder", ws):
        with pytest.raises(NotRegularFile):
            read(w, path)
    with pytest.raises(NotRegularFile):
        write(w, ws / "folder", "x")
    with pytest.raises(PathRefused, match="does not name a file"):
        write(w, str(ws), "x")


@pytest.mark.parametrize("device", ["zero", "null", "urandom", "tty"])
def test_devices_are_refused(resolver: str, device: str) -> None:
    if not os.path.exists(f"/dev/{device}"):
        pytest.skip(f"no /dev/{device}")
    w = Workspace("/dev", resolver=resolver)  # type: ignore[arg-type]
    with pytest.raises(NotRegularFile):
        read(w, f"/dev/{device}")  # /dev/zero would otherwise be read without end


# ------------------------------------------------------------------------------ reading


def test_line_and_limit(ws: Path, resolver: str) -> None:
    (ws / "lines.txt").write_text("one\ntwo\nthree\nfour")
    w = Workspace(ws, resolver=resolver)  # type: ignore[arg-type]
    path = ws / "lines.txt"
    assert read(w, path) == "one\ntwo\nthree\nfour"
    assert read(w, path, line=2) == "two\nthree\nfour"
    assert read(w, path, line=2, limit=2) == "two\nthree\n"
    assert read(w, path, limit=1) == "one\n"
    assert read(w, path, line=4, limit=5) == "four"
    assert read(w, path, line=9) == ""
    assert read(w, path, limit=0) == ""
    assert read(w, path, line=0, limit=1) == "one\n"  # line < 1 reads from the start
    (ws / "crlf.txt").write_bytes(b"a\r\nb\r\nc")
    assert read(w, ws / "crlf.txt", line=2, limit=1) == "b\r\n"


def test_lines_across_chunk_boundaries(ws: Path) -> None:
    lines = [f"line {i:06d} " + "x" * (i % 97) + "\n" for i in range(20000)]
    (ws / "big.txt").write_text("".join(lines))
    w = Workspace(ws)
    assert read(w, ws / "big.txt", line=12345, limit=3) == "".join(lines[12344:12347])
    assert read(w, ws / "big.txt", line=19999) == "".join(lines[19998:])
    assert read(w, ws / "big.txt") == "".join(lines)


def test_bytes_that_are_not_utf8_are_replaced(ws: Path) -> None:
    (ws / "latin1.txt").write_bytes(b"caf\xe9\nna\xefve\n\xff\xfe")
    w = Workspace(ws)
    assert read(w, ws / "latin1.txt") == "caf\ufffd\nna\ufffdve\n\ufffd\ufffd"
    assert read(w, ws / "latin1.txt", line=2, limit=1) == "na\ufffdve\n"


def test_a_sparse_file_read_with_limit_1_reads_one_chunk(ws: Path, resolver: str) -> None:
    path = ws / "sparse.txt"
    with path.open("wb") as handle:
        handle.write(b"the first line\n")
        handle.truncate(200 * MiB)
    counted: list[int] = []

    def counting_read(fd: int, size: int) -> bytes:
        data = os.read(fd, size)
        counted.append(len(data))
        return data

    w = Workspace(ws, resolver=resolver)  # type: ignore[arg-type]
    text = w.read_text(str(path), limit=1, max_bytes=CAP, read=counting_read)
    assert text == "the first line\n"
    assert sum(counted) <= CHUNK_BYTES
    counted.clear()
    with pytest.raises(FileTooLarge) as caught:  # the whole file: stops at the cap
        w.read_text(str(path), max_bytes=CAP, read=counting_read)
    assert caught.value.limit == CAP and "line and limit" in caught.value.reason
    assert sum(counted) <= CAP + CHUNK_BYTES


def test_the_read_cap_counts_returned_text_only(ws: Path) -> None:
    (ws / "f.txt").write_text("a" * 100 + "\n" + "b" * 10 + "\n")
    w = Workspace(ws)
    with pytest.raises(FileTooLarge):
        read(w, ws / "f.txt", max_bytes=50)
    assert read(w, ws / "f.txt", line=2, max_bytes=50) == "b" * 10 + "\n"


def test_a_cancelled_read_stops_between_chunks(ws: Path) -> None:
    (ws / "big.txt").write_bytes(b"x" * (4 * CHUNK_BYTES))
    cancelled = threading.Event()
    chunks = 0

    def cancelling_read(fd: int, size: int) -> bytes:
        nonlocal chunks
        chunks += 1
        cancelled.set()
        return os.read(fd, size)

    w = Workspace(ws)
    with pytest.raises(WorkspaceError, match="abandoned"):
        w.read_text(str(ws / "big.txt"), max_bytes=CAP, cancelled=cancelled, read=cancelling_read)
    assert chunks == 1


# ------------------------------------------------------------------------------ writing


def test_writes_create_parents_and_keep_the_old_mode(ws: Path, resolver: str) -> None:
    w = Workspace(ws, resolver=resolver)  # type: ignore[arg-type]
    write(w, ws / "a" / "b" / "new.txt", "new\n")
    assert (ws / "a" / "b" / "new.txt").read_text() == "new\n"
    script = ws / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o751)
    write(w, script, "#!/bin/sh\necho hi\n")
    assert script.read_text() == "#!/bin/sh\necho hi\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o751
    assert sorted(p.name for p in ws.iterdir()) == ["a", "inside.txt", "run.sh"]  # no temp


def test_write_cap_and_text_that_is_not_unicode(ws: Path) -> None:
    w = Workspace(ws)
    with pytest.raises(FileTooLarge) as caught:
        write(w, ws / "inside.txt", "x" * 101, max_bytes=100)
    assert caught.value.limit == 100
    with pytest.raises(InvalidText, match="surrogate"):
        write(w, ws / "inside.txt", "lone \ud800 surrogate")
    assert (ws / "inside.txt").read_text() == "inside\n"


def test_a_failed_write_leaves_the_old_content(ws: Path, resolver: str) -> None:
    """The disk fills up half way (RLIMIT_FSIZE): the old file is intact, no temp is left."""
    w = Workspace(ws, resolver=resolver)  # type: ignore[arg-type]
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (MiB, hard))
    try:
        with pytest.raises(WorkspaceError) as caught:
            write(w, ws / "inside.txt", "y" * (2 * MiB))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)
    assert type(caught.value) is WorkspaceError
    assert caught.value.reason == os.strerror(errno.EFBIG)
    assert (ws / "inside.txt").read_text() == "inside\n"
    assert sorted(p.name for p in ws.iterdir()) == ["inside.txt"]


# ------------------------------------------------------------------------------ private files


@pytest.mark.parametrize("mask", [0o000, 0o022, 0o277])
def test_private_files_are_0600_in_0700_folders_whatever_the_umask(
    tmp_path: Path, umask: Callable[[int], None], mask: int
) -> None:
    umask(mask)
    make_private_dirs(tmp_path / "a" / "b")
    fd = open_private(tmp_path / "a" / "b" / "f", os.O_WRONLY)
    os.close(fd)
    w = Workspace(tmp_path)
    saved = w.save_private([".acpfsm", "attachments", "s1", "note.txt"], b"data")
    umask(0o022)
    assert saved == str(tmp_path / ".acpfsm" / "attachments" / "s1" / "note.txt")
    assert Path(saved).read_bytes() == b"data"
    for folder in ("a", "a/b", ".acpfsm", ".acpfsm/attachments", ".acpfsm/attachments/s1"):
        assert stat.S_IMODE((tmp_path / folder).stat().st_mode) == 0o700, folder
    for file in ("a/b/f", ".acpfsm/attachments/s1/note.txt"):
        assert stat.S_IMODE((tmp_path / file).stat().st_mode) == 0o600, file


def test_private_folders_are_made_even_where_no_folder_can_be_looked_at(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A look that fails everywhere (a sandbox refusing stat, so even ``/`` seems no folder):
    the search for the missing folders stops at ``/`` and the folders are made all the same
    (an existing one answers EEXIST); it does not go round ``/`` for ever."""
    looks: list[str] = []

    def isdir(path: str) -> bool:
        looks.append(path)
        assert len(looks) < 100, "looking for the missing folders for ever"
        return False

    monkeypatch.setattr(workspace_module.os.path, "isdir", isdir)
    make_private_dirs(tmp_path / "a" / "b")
    monkeypatch.undo()
    assert looks[-1] == "/"
    assert stat.S_IMODE((tmp_path / "a" / "b").stat().st_mode) == 0o700


def test_a_folder_made_by_another_process_meanwhile_is_used_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A private save creates its missing folders 0700; a folder someone else creates between
    the look and the mkdir is used like one that was already there: its mode is not ours to
    change."""
    w = Workspace(tmp_path)
    real_mkdir = os.mkdir

    def raced(name: str, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        if os.path.basename(name) == "attachments":  # the other process wins this one
            real_mkdir(name, 0o755, dir_fd=dir_fd)
            os.chmod(name, 0o755, dir_fd=dir_fd)
            raise FileExistsError(errno.EEXIST, "File exists")
        real_mkdir(name, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "mkdir", raced)
    w.save_private([".acpfsm", "attachments", "s1", "note.txt"], b"data")
    make_private_dirs(tmp_path / "app" / "attachments" / "deeper")  # the same, by path
    monkeypatch.undo()
    assert stat.S_IMODE((tmp_path / "app" / "attachments").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "app" / "attachments" / "deeper").stat().st_mode) == 0o700
    modes = {
        folder: stat.S_IMODE((tmp_path / folder).stat().st_mode)
        for folder in (".acpfsm", ".acpfsm/attachments", ".acpfsm/attachments/s1")
    }
    assert modes == {
        ".acpfsm": 0o700,
        ".acpfsm/attachments": 0o755,
        ".acpfsm/attachments/s1": 0o700,
    }
    assert (tmp_path / ".acpfsm/attachments/s1/note.txt").read_bytes() == b"data"


@pytest.mark.parametrize(
    "planted", [".acpfsm", ".acpfsm/attachments/s1", ".acpfsm/attachments/s1/note.txt"]
)
def test_private_saves_follow_no_link(tmp_path: Path, resolver: str, planted: str) -> None:
    ws = tmp_path / "ws"
    outside = tmp_path / "outside"
    outside.mkdir()
    inside = ws / ".acpfsm" / "attachments" / "s1"
    inside.mkdir(parents=True)
    if planted.endswith("note.txt"):
        (inside / "note.txt").symlink_to(outside / "note.txt")
    else:
        target = ws / planted
        for child in sorted(target.rglob("*"), reverse=True):
            child.rmdir()
        target.rmdir()
        target.symlink_to(outside)
    w = Workspace(ws, resolver=resolver)  # type: ignore[arg-type]
    with pytest.raises(SymlinkRefused) as caught:
        w.save_private([".acpfsm", "attachments", "s1", "note.txt"], b"data")
    assert caught.value.link == str(ws / planted)
    assert list(outside.iterdir()) == []


def test_safe_component() -> None:
    assert safe_component("../../etc", "x") == ".._.._etc"
    assert safe_component("a\\b", "x") == "a_b"
    for bad in ("", ".", "..", "a\x00b", "\ud800"):
        assert safe_component(bad, "default") == "default"
    assert len(safe_component("é" * 300, "x").encode()) <= 200


# ------------------------------------------------------------------------------ threads


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_a_blocked_worker_is_abandoned_on_cancel_and_on_its_bound(backend: str) -> None:
    release = threading.Event()
    seen: list[threading.Event] = []

    def blocked(cancelled: threading.Event) -> str:
        seen.append(cancelled)
        release.wait(30)
        return "late"

    async def main() -> None:
        with anyio.move_on_after(0.2) as scope:
            await run_in_thread(blocked, bound=60)
        assert scope.cancelled_caught
        with pytest.raises(WorkspaceError, match=r"timed out after 0\.2s"):
            await run_in_thread(blocked, bound=0.2, what="reading")

    try:
        anyio.run(main, backend=backend)
    finally:
        release.set()
    assert len(seen) == 2 and all(event.is_set() for event in seen)


# ------------------------------------------------------------------------------ edges


def test_forcing_the_walk_needs_no_openat2(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workspace_module, "_OPENAT2", None)
    assert Workspace(ws, resolver="walk").resolver == "walk"


def test_a_path_that_is_not_valid_text_is_refused(ws: Path, resolver: str) -> None:
    w = Workspace(ws, resolver=resolver)  # type: ignore[arg-type]
    path = f"{ws}/lone-\ud800.txt"
    with pytest.raises(PathRefused) as caught:
        read(w, path)
    assert caught.value.reason == "path is not valid text"


def test_a_workspace_removed_under_it_is_a_workspace_error(tmp_path: Path, resolver: str) -> None:
    root = tmp_path / "gone"
    root.mkdir()
    w = Workspace(root, resolver=resolver)  # type: ignore[arg-type]
    root.rmdir()
    with pytest.raises(WorkspaceError) as caught:
        read(w, root / "f.txt")
    assert type(caught.value) is WorkspaceError
    assert caught.value.reason.startswith(f"workspace {root} cannot be opened")


def test_names_that_sort_before_dot_dot_are_plain_names(
    ws: Path, resolver: str, umask: Callable[[int], None]
) -> None:
    """``-x``, ``!x``, ``+x`` … sort before ``..`` and are ordinary names; new folders take
    the umask's mode (0777 masked), as ``mkdir`` does."""
    umask(0o022)
    w = Workspace(ws, resolver=resolver)  # type: ignore[arg-type]
    write(w, ws / "-new" / "!sub" / "+f.txt", "odd names\n")
    assert read(w, ws / "-new" / "!sub" / "+f.txt") == "odd names\n"
    assert (ws / "-new" / "!sub" / "+f.txt").read_text() == "odd names\n"
    for folder in ("-new", "-new/!sub"):
        assert stat.S_IMODE((ws / folder).stat().st_mode) == 0o755, folder


def test_a_write_into_new_top_level_folders_leaves_no_descriptor_open(
    ws: Path, resolver: str
) -> None:
    w = Workspace(ws, resolver=resolver)  # type: ignore[arg-type]
    before = set(os.listdir("/proc/self/fd"))
    write(w, ws / "n1" / "n2" / "f.txt", "x\n")
    with pytest.raises(PathRefused):
        write(w, f"{ws}/n3/../../outside.txt", "x\n")
    assert set(os.listdir("/proc/self/fd")) == before


@needs_openat2
def test_a_link_to_a_missing_folder_is_refused_not_created(ws: Path) -> None:
    """openat2 follows links inside the workspace; one naming a folder that does not exist is
    not a reason to create it (the write is refused, nothing is made, no descriptor left)."""
    (ws / "dangling").symlink_to("missing")
    (ws / "to-missing").symlink_to("missing/f.txt")
    (ws / "dot").symlink_to(".")
    w = Workspace(ws, resolver="openat2")
    before = set(os.listdir("/proc/self/fd"))
    with pytest.raises(SymlinkRefused) as crossed:
        write(w, ws / "dangling" / "f.txt", "x\n")
    assert crossed.value.link == str(ws / "dangling")
    with pytest.raises(MissingFile):
        write(w, ws / "to-missing", "x\n")
    with pytest.raises(NotRegularFile):
        write(w, ws / "dot", "x\n")
    assert set(os.listdir("/proc/self/fd")) == before
    assert not (ws / "missing").exists()


def test_open_private_opens_an_existing_file_keeping_its_mode(tmp_path: Path) -> None:
    existing = tmp_path / "f"
    existing.write_text("old\n")
    existing.chmod(0o640)
    fd = open_private(existing, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"new\n")
    finally:
        os.close(fd)
    assert existing.read_text() == "old\nnew\n"
    assert stat.S_IMODE(existing.stat().st_mode) == 0o640


def test_a_limit_counts_a_line_that_opens_the_chunk(ws: Path) -> None:
    (ws / "f.txt").write_text("\nsecond\nthird\n")
    w = Workspace(ws)
    assert read(w, ws / "f.txt", limit=1) == "\n"
    assert read(w, ws / "f.txt", line=2, limit=1) == "second\n"


def test_a_link_gone_before_it_is_named_still_gives_a_typed_error(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk's kernel refusal is explained by looking for the link; if the tree changes
    meanwhile (the look fails), the answer is still one of our errors, never a raw OSError."""
    (ws / "real").mkdir()
    (ws / "link").symlink_to("real")
    w = Workspace(ws, resolver="walk")

    def gone(*args: object, **kw: object) -> os.stat_result:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory")

    monkeypatch.setattr(os, "stat", gone)
    with pytest.raises(WorkspaceError) as caught:
        read(w, ws / "link" / "f.txt")
    assert not isinstance(caught.value, SymlinkRefused)


@needs_openat2
def test_a_link_that_cannot_be_read_is_a_workspace_error_with_its_text(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "link").symlink_to("inside.txt")
    w = Workspace(ws, resolver="openat2")

    def unreadable(*args: object, **kw: object) -> str:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "readlink", unreadable)
    with pytest.raises(WorkspaceError) as caught:
        write(w, ws / "link", "x\n")
    assert type(caught.value) is WorkspaceError
    assert caught.value.reason == "Input/output error"
