"""The real agentctl binary as a test peer: a thin user of :mod:`acpfsm.adapters.agentctl.local`.

:func:`ensure_agentctl_binary` fetches the pinned binary once into ``<repo>/.cache/agentctl/``
(:func:`~acpfsm.adapters.agentctl.local.ensure_agentctl`); without npm or the registry it
raises :class:`AgentctlUnavailable` with the reason (the tests then *fail*, they never skip).

:class:`AgentctlServer` is a :class:`~acpfsm.adapters.agentctl.local.LocalAgentctl` with
``HOME`` and ``TMPDIR`` in the test's tmp dir, this process's whole environment otherwise, a
debug log, and three test conveniences: :meth:`~AgentctlServer.token` (the handshake),
:meth:`~AgentctlServer.adopt_token` and :meth:`~AgentctlServer.instances`.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx

from acpfsm.adapters.agentctl.local import (
    AgentctlUnavailable,
    LocalAgentctl,
    ensure_agentctl,
)

__all__ = ["AgentctlServer", "AgentctlUnavailable", "ensure_agentctl_binary"]

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "agentctl"
INSTANCE_PORTS = 32
"""How many agent instances one test agentctl serves at once (its block of instance ports,
``AGENTCTL_INSTANCE_PORT_BASE`` .. ``AGENTCTL_INSTANCE_PORT_MAX``): room for the take-over
test's 20 executions."""


def ensure_agentctl_binary() -> Path:
    """The pinned agentctl binary, fetched on first use into the repo's ``.cache/``."""
    return ensure_agentctl(CACHE)


class AgentctlServer(LocalAgentctl):
    """One agentctl on loopback for a test (see the module docstring)."""

    def __init__(self, binary: Path, root: Path, *, instance_ports: int = INSTANCE_PORTS) -> None:
        home, temp = root / "home", root / "tmp"
        for folder in (home, temp):
            folder.mkdir(parents=True, exist_ok=True)
        super().__init__(
            binary,
            root,
            instance_ports=instance_ports,
            inherit_env=tuple(os.environ),
            env={"HOME": str(home), "TMPDIR": str(temp)},
            log_level="debug",
        )
        self.home, self.temp = home, temp
        self._token = ""

    def token(self) -> str:
        """Trade the nonce for the token (once; a second handshake is refused)."""
        if not self._token:
            response = httpx.post(
                self.url + "/auth/handshake", json={"nonce": self.nonce}, timeout=10.0
            )
            response.raise_for_status()
            self._token = str(response.json()["token"])
        return self._token

    def adopt_token(self, token: str) -> None:
        """Record a token someone else obtained with our nonce (an executor's handshake)."""
        self._token = token

    def instances(self) -> list[dict[str, object]]:
        response = httpx.get(
            self.url + "/api/v1/instances",
            headers={"Authorization": f"Bearer {self.token()}"},
            timeout=10.0,
        )
        response.raise_for_status()
        data = response.json()  # v0.95.1: {"instances": [...]}; HEAD: a bare list
        items = data.get("instances") if isinstance(data, dict) else data
        return [dict(i) for i in items or [] if isinstance(i, dict)]
