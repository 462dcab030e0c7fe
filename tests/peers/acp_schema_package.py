"""The npm package the vendored ACP schemas come from, fetched to check them against.

``acpfsm conform`` ships the stable ACP schemas of ``@agentclientprotocol/sdk`` (see
``runtime/tools/conform/acp_schema/README.md``). :func:`ensure_schema_package` fetches the
pinned package once with ``npm pack`` (no install, no package scripts; the user's npm
settings apply) into ``<repo>/.cache/acp-sdk-npm/``, checks the tarball against its pinned
SHA-256, and extracts only ``schema/v*/schema.json`` and ``LICENSE`` into
``.cache/acp-sdk-npm/<version>/``. Without npm or the registry it raises
:class:`SchemaPackageUnavailable` with the reason (the test then *fails*, it never skips).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path, PurePosixPath

from acpfsm.tools.conform.schema import (
    SCHEMA_PACKAGE,
    SCHEMA_PACKAGE_VERSION,
    SCHEMA_TARBALL_SHA256,
)
from tests.fetch_cache import locked, sha256, two_attempts

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "acp-sdk-npm"
ROOT = CACHE / SCHEMA_PACKAGE_VERSION
NPM_TIMEOUT = 150.0
WANTED = ("package/LICENSE", "package/schema/v1/schema.json", "package/schema/v2/schema.json")


class SchemaPackageUnavailable(RuntimeError):
    """The npm package could not be obtained (the reason says why)."""


def _fetch_once(workdir: Path) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise SchemaPackageUnavailable("npm is not installed")
    spec = f"{SCHEMA_PACKAGE}@{SCHEMA_PACKAGE_VERSION}"
    result = subprocess.run(
        [npm, "pack", spec, "--pack-destination", str(workdir), "--cache",
         str(workdir / "npm-cache"), "--no-audit", "--no-fund"],
        capture_output=True, text=True, timeout=NPM_TIMEOUT, check=False, cwd=workdir,
    )  # fmt: skip
    tarballs = sorted(workdir.glob("*.tgz"))
    if result.returncode != 0 or not tarballs:
        raise SchemaPackageUnavailable(
            f"`npm pack {spec}` failed (exit {result.returncode}): "
            f"{(result.stderr or result.stdout).strip()[-800:]}"
        )
    digest = sha256(tarballs[0])
    if digest != SCHEMA_TARBALL_SHA256:
        raise SchemaPackageUnavailable(
            f"{tarballs[0].name} has SHA-256 {digest}, expected {SCHEMA_TARBALL_SHA256}"
        )
    staged = workdir / "package"
    with tarfile.open(tarballs[0], "r:gz") as archive:
        for name in WANTED:
            source = archive.extractfile(archive.getmember(name))
            if source is None:
                raise SchemaPackageUnavailable(f"{name} is not a file")
            target = staged.joinpath(*PurePosixPath(name).parts[1:])
            target.parent.mkdir(parents=True, exist_ok=True)
            with source, target.open("wb") as sink:
                shutil.copyfileobj(source, sink)
    os.replace(staged, ROOT)


def ensure_schema_package() -> Path:
    """The pinned package's ``LICENSE`` and ``schema/`` (fetched on first use)."""
    with locked(CACHE):
        if ROOT.is_dir():
            return ROOT
        errors = two_attempts(
            CACHE,
            _fetch_once,
            (SchemaPackageUnavailable, OSError, tarfile.TarError, KeyError),
            f"npm pack took more than {NPM_TIMEOUT:g}s",
        )
        if not errors:
            return ROOT
        raise SchemaPackageUnavailable(
            f"could not fetch {SCHEMA_PACKAGE}@{SCHEMA_PACKAGE_VERSION}: " + " | ".join(errors)
        )
