"""AgentStream: the transport connection to one agent.

Theory of operation
-------------------
Both carriers report here: the agentctl WebSocket (dial, drop, redial; kandev
agentctl/client agent.go, lifecycle/session.go ``retryPromptAfterReconnect``) and the stdio pipes of a local agent process (connected once spawned; EOF or a
broken pipe is a loss that cannot be redialled). The runtime sends facts; the chart says
whether to redial.

* ``connecting`` is bounded by the 10 s stream-connect wait; its expiry is the
  ``connect_timed_out`` event the runtime's clock sends.
* A loss (``connection_lost``) goes to ``reconnecting`` when the carrier can redial
  (``reconnectable`` event data: agentctl yes, stdio no), else to ``disconnected``.
* A clean close (WebSocket 1000/1001) is still a loss for whoever waits (kandev H9: a normal
  close released no waiter; here it is the same ``connection_lost`` fact with ``clean=True``).
* ``closed`` is final: we closed it on purpose (stop, shutdown).
"""

from __future__ import annotations

from typing import ClassVar

from statemachine import State

from ._base import Chart

__all__ = ["AgentStream"]


class AgentStream(Chart):
    """disconnected → connecting → connected ⇄ reconnecting → closed."""

    chart_name: ClassVar[str] = "agent_stream"

    disconnected = State("disconnected", initial=True)
    connecting = State("connecting")
    connected = State("connected")
    reconnecting = State("reconnecting")
    closed = State("closed", final=True)

    connect_started = disconnected.to(connecting)
    connect_succeeded = connecting.to(connected) | reconnecting.to(connected)
    connect_failed = connecting.to(disconnected)
    connect_timed_out = connecting.to(disconnected) | reconnecting.to(disconnected)
    connection_lost = (
        connected.to(reconnecting, cond="reconnectable")
        | connected.to(disconnected)
        | connecting.to(disconnected)
        | reconnecting.to(None, cond="reconnectable")  # another drop while redialling
        | reconnecting.to(disconnected)  # the carrier gave up redialling
        | disconnected.to(None)
    )
    reconnect_requested = disconnected.to(reconnecting, cond="reconnectable")
    close_requested = (
        disconnected.to(closed)
        | connecting.to(closed)
        | connected.to(closed)
        | reconnecting.to(closed)
    )

    def reconnectable(self, reconnectable: bool = False) -> bool:
        return reconnectable
