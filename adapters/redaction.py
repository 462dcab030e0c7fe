"""Credentials kept out of what acpfsm records: the values of an agent's secret-looking
environment variables (and agentctl's nonce and token) are replaced by ``***`` in the agent
output we keep (the stderr tail quoted in errors, events and logs).

A variable is secret-looking when its name contains ``KEY``, ``TOKEN``, ``SECRET``,
``PASSWORD``, ``PASSWD``, ``PASSPHRASE``, ``CREDENTIAL``, ``AUTH``, ``COOKIE`` or ``NONCE``
(any case); values shorter than :data:`MIN_SECRET_LENGTH` are left alone (they would mask
ordinary words).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

__all__ = ["MASK", "MIN_SECRET_LENGTH", "NO_REDACTION", "Redactor", "secret_values"]

MASK: Final = "***"
MIN_SECRET_LENGTH: Final = 6

_SECRET_NAME: Final = re.compile(
    r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|AUTH|COOKIE|NONCE", re.IGNORECASE
)


def secret_values(env: Mapping[str, str]) -> list[str]:
    """The values of the secret-looking variables of ``env``."""
    return [value for name, value in env.items() if _SECRET_NAME.search(name)]


class Redactor:
    """Replaces each of ``secrets`` (values of at least :data:`MIN_SECRET_LENGTH`) with
    :data:`MASK`; the longest first, so a secret containing another is masked whole."""

    __slots__ = ("_secrets",)

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        unique = {s for s in secrets if len(s) >= MIN_SECRET_LENGTH}
        self._secrets: tuple[str, ...] = tuple(sorted(unique, key=len, reverse=True))

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text


NO_REDACTION: Final = Redactor()
"""Masks nothing."""
