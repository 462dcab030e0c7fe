"""The base of every ACP payload struct, and the protocol constants. Part of
:mod:`acpfsm.adapters.acp.messages` (import them from there)."""

from __future__ import annotations

from typing import Any, Final, TypeAlias

from msgspec import Struct, field

PROTOCOL_VERSION: Final = 1
CLIENT_INFO_NAME: Final = "acpfsm"

RequestId: TypeAlias = int | str


class _Wire(Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """Base of every ACP payload: camelCase names, tolerant of unknown fields, ``_meta``."""

    meta: dict[str, Any] | None = field(default=None, name="_meta")
