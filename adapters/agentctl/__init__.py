"""The agentctl carrier: kandev's sidecar (``agentctl``) runs the ACP agent, acpfsm talks to
it over HTTP (httpx) and one WebSocket (httpx-ws), as kandev's own Go client does (kandev
internal/agent/runtime/agentctl/: client.go, control.go, agent.go).

* :class:`ControlClient` — the control port: nonce → token handshake (``POST
  /auth/handshake``), ``POST/GET/DELETE /api/v1/instances``, ``GET /health``.
* :class:`InstanceClient` — one instance's port, ``Authorization: Bearer`` and
  ``X-Instance-ID`` on every request: ``configure``, ``start``, ``stop``, ``status``,
  ``wait_ready`` (health every 0.5 s, bounded), ``materialize`` (multipart attachment upload).
* :class:`AgentctlTransport` (:func:`open_agentctl_transport`) — the
  :class:`~acpfsm.adapters.transport.AgentTransport` over ``/api/v1/agent/stream``:
  request/answer by id, events, ``mcp.*`` requests, reconnect; see its module docstring.
* :class:`AgentctlConfig` — every bound.

Verified against the prebuilt agentctl v0.95.1 (``@kdlbs/runtime-linux-x64``); both its event
format and kandev HEAD's are understood (:mod:`._wire`).
:class:`AgentctlExecutor` (:mod:`.executor`) runs each execution's agent in its own instance.
"""

from ._wire import error_from_text
from .control import (
    MAX_ATTACHMENT_BYTES,
    AgentctlConfig,
    ControlClient,
    InstanceClient,
    InstanceInfo,
)
from .executor import AgentctlExecutor
from .transport import AgentctlTransport, McpHandler, open_agentctl_transport

__all__ = [
    "MAX_ATTACHMENT_BYTES",
    "AgentctlConfig",
    "AgentctlExecutor",
    "AgentctlTransport",
    "ControlClient",
    "InstanceClient",
    "InstanceInfo",
    "McpHandler",
    "error_from_text",
    "open_agentctl_transport",
]
