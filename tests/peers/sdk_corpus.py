"""The official ACP Python SDK's own corpus as test material: its golden messages and examples.

The sdist of ``agent-client-protocol`` (the version constraints.txt pins as a test peer) ships
``tests/golden/*.json`` (canonical ACP messages) and ``examples/*.py`` (agents and clients
written on the SDK). :func:`ensure_sdk_corpus` fetches that sdist once with
``pip download`` (so the user's index and proxy settings apply) into
``<repo>/.cache/agent-client-protocol/``, checks it against its pinned SHA-256, and extracts
only those two folders (and the licence) into ``.cache/agent-client-protocol/<version>/``.
Nothing of it is committed. Without pip or the index it raises :class:`SdkCorpusUnavailable`
with the reason (the tests then *fail*, they never skip).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tests.fetch_cache import locked, sha256, two_attempts

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "agent-client-protocol"
PACKAGE = "agent-client-protocol"
VERSION = "0.12.1"
SDIST = f"agent_client_protocol-{VERSION}.tar.gz"
SHA256 = "9963ccb590ed96d7dc542c9c023e90676fc76b1c6562e21a9ee112f4fbcb0095"
"""Of the sdist on PyPI (its index lists the same digest)."""
ROOT = CACHE / VERSION
PIP_TIMEOUT = 150.0


class SdkCorpusUnavailable(RuntimeError):
    """The SDK's sdist could not be obtained (the reason says why)."""


@dataclass(frozen=True)
class SdkCorpus:
    root: Path

    @property
    def golden(self) -> Path:
        return self.root / "tests" / "golden"

    @property
    def examples(self) -> Path:
        return self.root / "examples"


def _wanted(relative: PurePosixPath) -> bool:
    parts = relative.parts
    if relative.is_absolute() or ".." in parts or not parts:
        return False
    if parts == ("LICENSE",):
        return True
    if parts[:2] == ("tests", "golden") and len(parts) == 3:
        return relative.suffix == ".json"
    return parts[0] == "examples" and len(parts) == 2 and relative.suffix == ".py"


def _extract(sdist: Path, target: Path) -> None:
    """Only the regular files :func:`_wanted` picks, below ``target`` (no link, no escape)."""
    prefix = f"agent_client_protocol-{VERSION}"
    with tarfile.open(sdist, "r:gz") as archive:
        for member in archive.getmembers():
            name = PurePosixPath(member.name)
            if not member.isfile() or name.parts[:1] != (prefix,):
                continue
            relative = PurePosixPath(*name.parts[1:])
            if not _wanted(relative):
                continue
            source = archive.extractfile(member)
            if source is None:  # pragma: no cover - a regular member always has data
                continue
            path = target.joinpath(*relative.parts)
            path.parent.mkdir(parents=True, exist_ok=True)
            with source, path.open("wb") as sink:
                shutil.copyfileobj(source, sink)


def _fetch_once(workdir: Path) -> None:
    """``pip download`` the sdist into ``workdir``, check it, extract it into the cache."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-binary",
            ":all:",
            "--no-deps",
            "--disable-pip-version-check",
            "--no-input",
            "--dest",
            str(workdir),
            f"{PACKAGE}=={VERSION}",
        ],
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT,
        check=False,
        cwd=workdir,
    )
    sdist = workdir / SDIST
    if result.returncode != 0 or not sdist.is_file():
        raise SdkCorpusUnavailable(
            f"`pip download {PACKAGE}=={VERSION}` failed (exit {result.returncode}): "
            f"{(result.stderr or result.stdout).strip()[-800:]}"
        )
    digest = sha256(sdist)
    if digest != SHA256:
        raise SdkCorpusUnavailable(f"{SDIST} has SHA-256 {digest}, expected {SHA256}")
    staged = workdir / "corpus"
    _extract(sdist, staged)
    os.replace(staged, ROOT)


def ensure_sdk_corpus() -> SdkCorpus:
    """The pinned SDK's golden messages and examples, fetched on first use (retried once,
    bounded in time)."""
    with locked(CACHE):
        if ROOT.is_dir():
            return SdkCorpus(ROOT)
        errors = two_attempts(
            CACHE,
            _fetch_once,
            (SdkCorpusUnavailable, OSError, tarfile.TarError),
            f"pip download took more than {PIP_TIMEOUT:g}s",
        )
        if not errors:
            return SdkCorpus(ROOT)
        raise SdkCorpusUnavailable(
            f"could not fetch the sdist of {PACKAGE}=={VERSION}: " + " | ".join(errors)
        )
