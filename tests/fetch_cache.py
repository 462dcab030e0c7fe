"""Fetching a pinned test peer once into ``<repo>/.cache/`` (the agentctl binary, the official
ACP SDK's sdist): a digest, one download at a time across test processes, two attempts."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextlib.contextmanager
def locked(cache: Path) -> Iterator[None]:
    """Hold ``cache/.lock``: one download even with parallel test processes."""
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def two_attempts(
    cache: Path,
    fetch: Callable[[Path], None],
    expected: tuple[type[BaseException], ...],
    too_slow: str,
) -> list[str]:
    """Run ``fetch`` in a fresh directory below ``cache`` until it returns, at most twice:
    ``[]`` when it did, else why each attempt failed (``expected`` errors, or ``too_slow``
    when its subprocess timed out)."""
    errors: list[str] = []
    for attempt in (1, 2):
        with tempfile.TemporaryDirectory(dir=cache, prefix="fetch-") as tmp:
            try:
                fetch(Path(tmp))
                return []
            except expected as exc:
                errors.append(f"attempt {attempt}: {exc}")
            except subprocess.TimeoutExpired:
                errors.append(f"attempt {attempt}: {too_slow}")
    return errors
