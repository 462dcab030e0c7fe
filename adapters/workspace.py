"""Workspace confinement: files read and written on an agent's behalf, and private files.

Theory of operation
-------------------
The agent is untrusted, and so is the workspace it works in: it may plant symbolic links, or
swap a directory for a link to ``/`` between any check we make and the use of the path. So no
path is ever checked and then opened by name. Every operation opens the workspace directory
once and resolves the rest of the path *beneath that descriptor*:

- **openat2** (Linux ≥ 5.6, called through ``ctypes``: Python has no binding) with
  ``RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS``. The kernel resolves every component, ``..``
  and symbolic links included, and refuses (``EXDEV``) anything that would leave the
  workspace at any moment of the walk. A relative link whose target stays inside the
  workspace works, as real repositories need; an escape, and any link with an absolute target
  (it would restart the walk at ``/``), is :class:`~.errors.PathRefused`.
- **walk**, where ``openat2`` is missing (another OS, an old kernel: ``ENOSYS``; a seccomp
  filter: ``EPERM``) or forced (``resolver="walk"``): one ``openat`` per component with
  ``O_NOFOLLOW | O_DIRECTORY`` from the directory opened before. No symbolic link is ever
  followed; meeting one is :class:`~.errors.SymlinkRefused` naming it.

What is opened must be a **regular file**: it is opened ``O_NONBLOCK | O_NOCTTY`` and checked
with ``fstat``, so a FIFO, a device or a socket is refused at once (:class:`~.errors.
NotRegularFile`) and can never block the worker.

**Reads** stream the file in chunks, skip to ``line`` and stop after ``limit`` lines (lines
end with ``\\n``), so a 200 MB file read with ``limit=1`` reads one chunk. More than
``max_bytes`` of returned text is :class:`~.errors.FileTooLarge`. Bytes that are not UTF-8
are decoded with replacement (each becomes U+FFFD), as a text editor shows them; the read
does not fail on them.

**Writes** are bounded (``max_bytes`` of UTF-8) and atomic: the text goes to a temporary file
created (``O_EXCL | O_NOFOLLOW``) in the target's directory through its descriptor, is
``fsync``'d and renamed over the target with ``renameat`` through the same descriptor; on any
failure the temporary file is removed and the old content stays. An existing file keeps its
permission bits; a final (relative) symbolic link is followed (openat2 resolver only) to the
file it names inside the workspace, which is then replaced. Missing parent directories are created.
Text holding a lone surrogate is :class:`~.errors.InvalidText`.

**Private files** (:meth:`Workspace.save_private`, :func:`open_private`,
:func:`make_private_dirs`): what acpfsm writes for itself (saved attachments, history,
traces) is created mode ``0600`` in directories created ``0700``, set explicitly whatever the
umask. Saved attachments follow no symbolic link at all, with either resolver.

Every blocking call runs in a worker thread that the caller may abandon
(:func:`run_in_thread`): a cancelled caller returns at once, and the worker sees the
cancellation between chunks and stops. Every error is a :class:`~.errors.WorkspaceError`.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Callable, Sequence
from typing import Final, Literal

from ._fileops import (
    _OPENAT2,
    _RESOLVE_BENEATH,
    _RESOLVE_NO_MAGICLINKS,
    _RESOLVE_NO_SYMLINKS,
    CHUNK_BYTES,
    _chmod_dir,
    _failed,
    _read_lines,
    _replace,
    make_private_dirs,
    open_private,
    openat2_available,
    run_in_thread,
    safe_component,
)
from .errors import (
    ExceptionMapping,
    FileTooLarge,
    InvalidText,
    MissingFile,
    NotRegularFile,
    PathRefused,
    SymlinkRefused,
    WorkspaceError,
    map_exceptions,
)

__all__ = [
    "CHUNK_BYTES",
    "Resolver",
    "Workspace",
    "make_private_dirs",
    "open_private",
    "openat2_available",
    "run_in_thread",
    "safe_component",
]

Resolver = Literal["auto", "openat2", "walk"]
"""How paths are resolved beneath the workspace: ``auto`` (openat2 where the kernel offers it,
else walk), or one of them forced."""

PATH_MAX: Final = 4096
"""Longest path accepted, in bytes (Linux's PATH_MAX, terminator included)."""
_MAX_LINK_HOPS: Final = 40


# -- the workspace ---------------------------------------------------------------------------

_DIR_FLAGS: Final = os.O_DIRECTORY | os.O_CLOEXEC | getattr(os, "O_PATH", os.O_RDONLY)
_READ_FLAGS: Final = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def _components(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


class Workspace:
    """File operations confined to the directory ``root`` (see the module docstring).

    The methods are synchronous and may block: call them through :func:`run_in_thread`.
    ``cancelled`` (an event set by the caller) stops a long read or write between chunks."""

    def __init__(self, root: str | os.PathLike[str], *, resolver: Resolver = "auto") -> None:
        given = os.path.abspath(os.fspath(root))
        self.root: Final = os.path.realpath(given)
        if resolver == "openat2" and _OPENAT2 is None:
            raise WorkspaceError("openat2 is not available on this system")
        self.resolver: Final[Literal["openat2", "walk"]] = (
            "openat2" if resolver != "walk" and _OPENAT2 is not None else "walk"
        )
        # The workspace may be named through a symbolic link (/tmp → /private/tmp): a path
        # under either spelling is accepted; the rest of it is resolved beneath the root.
        self._prefixes = [_components(self.root)]
        if _components(given) != self._prefixes[0]:
            self._prefixes.append(_components(given))

    # -- paths ----------------------------------------------------------------------------

    def relative_parts(self, path: str) -> list[str]:
        """The components of ``path`` below the workspace root (``..`` kept: the resolver
        judges it). Raises :class:`PathRefused` for a malformed path or one outside."""
        if "\x00" in path:
            raise PathRefused("path contains a NUL byte", path=path)
        if not path.startswith("/"):
            raise PathRefused("path must be absolute", path=path)
        with map_exceptions(
            {UnicodeError: lambda exc: PathRefused("path is not valid text", path=path)}
        ):
            encoded = os.fsencode(path)
        if len(encoded) >= PATH_MAX:
            raise PathRefused(f"path is too long (over {PATH_MAX - 1} bytes)", path=path)
        parts = _components(path)
        for prefix in self._prefixes:
            if parts[: len(prefix)] == prefix:
                return parts[len(prefix) :]
        raise PathRefused("path is outside the workspace", path=path)

    def _absolute(self, parts: Sequence[str]) -> str:
        return os.path.join(self.root, *parts)

    def _open_root(self, path: str) -> int:
        unopenable: ExceptionMapping = {
            OSError: lambda exc: WorkspaceError(
                f"workspace {self.root} cannot be opened: {exc.strerror}", path=path
            )
        }
        with map_exceptions(unopenable):
            return os.open(self.root, _DIR_FLAGS)

    def _resolving(
        self, path: str, root: int, parts: Sequence[str], *, followed: bool
    ) -> ExceptionMapping:
        """The kernel's refusal to resolve ``parts`` beneath ``root``, typed (:meth:`_translate`)."""
        return {OSError: lambda exc: self._translate(exc, path, root, parts, followed=followed)}

    # -- errors ---------------------------------------------------------------------------

    def _translate(
        self, exc: OSError, path: str, root: int, parts: Sequence[str], *, followed: bool
    ) -> WorkspaceError:
        """The typed error for ``exc`` from resolving ``parts`` beneath ``root``; ``followed``:
        symbolic links were allowed (else ELOOP/ENOTDIR may come from one: it is named)."""
        code = exc.errno
        if code == errno.EXDEV:
            return PathRefused("path is outside the workspace", path=path)
        if code in (errno.ELOOP, errno.ENOTDIR) and not followed:
            link = self._first_symlink(root, parts)
            if link is not None:
                return SymlinkRefused(
                    f"path crosses a symbolic link ({link})", path=path, link=link
                )
        if code == errno.ELOOP:
            return PathRefused("too many levels of symbolic links", path=path)
        if code in (errno.ENOENT, errno.ENOTDIR):
            return MissingFile("no such file", path=path)
        if code == errno.ENAMETOOLONG:
            return PathRefused("path is too long (a name over 255 bytes)", path=path)
        if code in (errno.ENXIO, errno.ENODEV, errno.EISDIR):
            return NotRegularFile("not a regular file", path=path)
        return WorkspaceError(exc.strerror or str(exc), path=path)

    def _first_symlink(self, root: int, parts: Sequence[str]) -> str | None:
        """The absolute path of the first symbolic link among ``parts`` (plain names; no link
        is followed), or None. It only names the culprit: the kernel already refused."""
        fds: list[int] = []
        try:
            current = root
            for index, name in enumerate(parts):
                try:
                    info = os.stat(name, dir_fd=current, follow_symlinks=False)
                    if stat.S_ISLNK(info.st_mode):
                        return self._absolute(parts[: index + 1])
                    if not stat.S_ISDIR(info.st_mode):
                        return None
                    current = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=current)
                except OSError:
                    return None
                fds.append(current)
            return None
        finally:
            for fd in fds:
                os.close(fd)

    # -- resolution -----------------------------------------------------------------------

    def _plain(self, parts: Sequence[str], path: str) -> list[str]:
        """``parts`` for the resolver: the walk follows no link, so ``..`` is the lexical
        parent there (refused above the root); openat2 leaves ``..`` to the kernel."""
        if self.resolver == "openat2":
            return list(parts)
        out: list[str] = []
        for name in parts:
            if name != "..":
                out.append(name)
            elif out:
                out.pop()
            else:
                raise PathRefused("path is outside the workspace", path=path)
        return out

    def _resolve(
        self, root: int, parts: Sequence[str], flags: int, *, follow: bool, mode: int = 0
    ) -> int:
        """Open ``parts`` beneath ``root`` with ``flags`` (``OSError`` from the kernel)."""
        if self.resolver == "openat2":
            assert _OPENAT2 is not None
            resolve = _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS
            if not follow:
                resolve |= _RESOLVE_NO_SYMLINKS
            relative = os.fsencode("/".join(parts) or ".")
            return _OPENAT2(root, relative, flags, mode, resolve)
        stack: list[int] = []
        try:
            for name in parts[:-1]:
                current = stack[-1] if stack else root
                stack.append(os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=current))
            current = stack[-1] if stack else root
            return os.open(parts[-1] if parts else ".", flags | os.O_NOFOLLOW, mode, dir_fd=current)
        finally:
            for fd in stack:
                os.close(fd)

    def _followed(self, follow: bool) -> bool:
        return follow and self.resolver == "openat2"

    def _open_dir(
        self, root: int, parts: Sequence[str], path: str, *, create: bool, private: bool
    ) -> int:
        """A descriptor of the directory ``parts`` beneath ``root``; missing directories are
        created (``0700`` when ``private``) if ``create``. ``private`` follows no link."""
        follow = not private
        try:
            return self._resolve(root, parts, _DIR_FLAGS, follow=follow)
        except OSError as exc:
            if not (create and exc.errno == errno.ENOENT):
                raise self._translate(
                    exc, path, root, parts, followed=self._followed(follow)
                ) from None
        # Find the deepest directory that exists, then create the rest one by one, each
        # opened from its parent's descriptor with no link followed.
        depth = len(parts) - 1
        while depth > 0:
            try:
                current = self._resolve(root, parts[:depth], _DIR_FLAGS, follow=follow)
                break
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    raise self._translate(
                        exc, path, root, parts[:depth], followed=self._followed(follow)
                    ) from None
                depth -= 1
        else:  # no folder of the path exists below the root
            current = os.dup(root)
        try:
            for index in range(depth, len(parts)):
                name = parts[index]
                if name == "..":
                    raise PathRefused("path is outside the workspace", path=path)
                created = True
                try:
                    os.mkdir(name, 0o700 if private else 0o777, dir_fd=current)
                except FileExistsError:
                    created = False
                except OSError as exc:
                    raise WorkspaceError(exc.strerror or str(exc), path=path) from None
                with map_exceptions(self._resolving(path, current, [name], followed=False)):
                    if created and private:
                        _chmod_dir(current, name)
                    child = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=current)
                os.close(current)
                current = child
            result, current = current, -1
            return result
        finally:
            if current >= 0:
                os.close(current)

    # -- reading --------------------------------------------------------------------------

    def read_text(
        self,
        path: str,
        *,
        line: int | None = None,
        limit: int | None = None,
        max_bytes: int,
        cancelled: threading.Event | None = None,
        read: Callable[[int, int], bytes] = os.read,
    ) -> str:
        """The text of the regular file ``path`` from line ``line`` (1-based; default 1) for
        ``limit`` lines (default: to the end). ``read`` is the chunk reader (tests count)."""
        parts = self._plain(self.relative_parts(path), path)
        root = self._open_root(path)
        try:
            with map_exceptions(self._resolving(path, root, parts, followed=self._followed(True))):
                fd = self._resolve(root, parts, _READ_FLAGS, follow=True)
        finally:
            os.close(root)
        try:
            with map_exceptions(_failed(path)):
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise NotRegularFile("not a regular file", path=path)
                data = _read_lines(fd, line, limit, max_bytes, cancelled, read, path)
        finally:
            os.close(fd)
        return data.decode("utf-8", "replace")

    # -- writing --------------------------------------------------------------------------

    def write_text(
        self,
        path: str,
        content: str,
        *,
        max_bytes: int,
        cancelled: threading.Event | None = None,
    ) -> None:
        """Replace (or create) the regular file ``path`` with ``content``, atomically."""
        parts = self._plain(self.relative_parts(path), path)
        invalid: ExceptionMapping = {
            UnicodeEncodeError: lambda exc: InvalidText(
                f"content is not valid Unicode text ({exc.reason} at {exc.start})", path=path
            )
        }
        with map_exceptions(invalid):
            data = content.encode("utf-8")
        if len(data) > max_bytes:
            raise FileTooLarge(
                f"content is {len(data)} bytes, over the {max_bytes}-byte write limit",
                path=path,
                limit=max_bytes,
            )
        self._write(parts, data, path, private=False, cancelled=cancelled)

    def save_private(
        self, parts: Sequence[str], data: bytes, *, cancelled: threading.Event | None = None
    ) -> str:
        """Write ``data`` to the file ``parts`` (plain names: see :func:`safe_component`)
        beneath the workspace, mode ``0600``, creating missing directories ``0700``; no
        symbolic link is followed. Returns the file's absolute path."""
        parts = list(parts)
        path = self._absolute(parts)
        self._write(parts, data, path, private=True, cancelled=cancelled)
        return path

    def _write(
        self,
        parts: list[str],
        data: bytes,
        path: str,
        *,
        private: bool,
        cancelled: threading.Event | None,
    ) -> None:
        if not parts or parts[-1] == "..":
            raise PathRefused("path does not name a file", path=path)
        root = self._open_root(path)
        try:
            directory, name, mode = self._write_target(root, parts, path, private=private)
        finally:
            os.close(root)
        try:
            _replace(directory, name, data, mode, path, cancelled)
        finally:
            os.close(directory)

    def _write_target(
        self, root: int, parts: list[str], path: str, *, private: bool
    ) -> tuple[int, str, int | None]:
        """The directory descriptor and name to write, and the mode to keep (None: a new
        file). A final symbolic link is followed (openat2 resolver, not ``private``) to the
        file it names inside the workspace."""
        create = True
        for _ in range(_MAX_LINK_HOPS):
            directory = self._open_dir(root, parts[:-1], path, create=create, private=private)
            name = parts[-1]
            try:
                info = os.stat(name, dir_fd=directory, follow_symlinks=False)
            except FileNotFoundError:
                return directory, name, 0o600 if private else None
            except OSError as exc:
                os.close(directory)
                raise self._translate(exc, path, root, parts, followed=True) from None
            if stat.S_ISREG(info.st_mode):
                return directory, name, 0o600 if private else stat.S_IMODE(info.st_mode)
            if not stat.S_ISLNK(info.st_mode):
                os.close(directory)
                raise NotRegularFile("not a regular file", path=path)
            link = self._absolute(parts)
            if private or self.resolver == "walk":
                os.close(directory)
                raise SymlinkRefused(f"path crosses a symbolic link ({link})", path=path, link=link)
            try:
                with map_exceptions(_failed(path)):
                    target = os.readlink(name, dir_fd=directory)
            finally:
                os.close(directory)
            if target.startswith("/"):  # as the kernel judges it for a read: an escape
                raise PathRefused("path is outside the workspace", path=path)
            parts = [*parts[:-1], *_components(target)]
            if not parts or parts[-1] == "..":
                raise NotRegularFile("not a regular file", path=path)
            create = False  # a link to a missing directory is not a reason to create it
        raise PathRefused("too many levels of symbolic links", path=path)
