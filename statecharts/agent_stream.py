"""AgentStream: the transport connection to one agent, and its redial.

Theory of operation
-------------------
Both carriers report here: the agentctl WebSocket (kandev agentctl/client agent.go, and the
prompt's retry after a reconnect, lifecycle/session.go ``retryPromptAfterReconnect``) and the
stdio pipes of a local agent process (connected once spawned; EOF or a broken pipe is a loss
that cannot be redialled). The transport reports facts (lost, cleanly or not; a dial failed,
fatally or not; a dial succeeded); this chart decides what they mean: whether a loss is
announced, whether and when to redial, when to give up.

* ``connecting`` is bounded by the 10 s stream-connect wait; its expiry is the
  ``connect_timed_out`` event the runtime's clock sends.
* A loss (``connection_lost``) of a carrier that can be redialled (``redialable``: the
  agentctl WebSocket) goes to ``reconnecting``, whose entry arms the reconnect budget
  (``arm_reconnect_budget``: the runtime's timer sends ``reconnect_timed_out`` when it runs
  out) and asks for the first dial (``redial`` with ``failures=0``: the runtime waits the
  transport's backoff for that many failed dials, then dials once).
* An abnormal loss is announced (``announce_loss``: the generations waiting on the stream
  are released, the execution hears of it; ``reconnecting.announced``). A clean close
  (WebSocket 1000/1001, ``clean``) is redialled silently (``reconnecting.silent``): kandev H9,
  a normal close released no waiter, and the turn in flight may still end after the redial.
* Each dial's result comes back: ``redial_succeeded`` (connected again; a redial after an
  announced loss is published, ``publish_reconnected``) or ``redial_failed``. A retryable
  failure asks for the next dial (``redial`` with the failures so far); a ``fatal`` one (a
  refused upgrade: wrong token, instance gone) or the budget's expiry gives up:
  ``giving_up`` stops redialling and tells the transport (``give_up``), which fails the turns
  still owed an end and reports the final loss; that loss is announced and rests in
  ``disconnected``.
* A loss that cannot be redialled (stdio EOF, the agent's exit) is final and announced:
  ``disconnected``. A carrier lost before the stream wait saw it up is not redialled.
* ``closed`` is final: we closed it on purpose (stop, shutdown); a redial in flight stops.

Two questions, asked without firing (``statecharts.peek``), so the runtime reads no state
name: ``carrier_awaited`` (is the carrier up, on its way, or not coming back) and
``event_stream_ended`` (is an event stream that ended without saying why a loss).
"""

from __future__ import annotations

from typing import ClassVar

from statemachine import State

from ._base import Chart
from ._compile import Effects, effect

__all__ = ["AgentStream"]

_STOP = ("stop_redialling", "disarm_reconnect_budget")
# the loss is announced; ``final``: the carrier is gone for good (nothing redials it)
_LOST = effect("announce_loss", final=False)
_LOST_FOR_GOOD = effect("announce_loss", final=True)


class AgentStream(Chart):
    """disconnected → connecting → connected ⇄ reconnecting → giving_up → disconnected."""

    chart_name: ClassVar[str] = "agent_stream"

    disconnected = State("disconnected", initial=True)
    connecting = State("connecting")
    connected = State("connected")

    class reconnecting(State.Compound):
        announced = State("announced", initial=True)
        silent = State("silent")

    giving_up = State("giving_up")
    closed = State("closed", final=True)

    # --- the first connection --------------------------------------------------------------
    connect_started = disconnected.to(connecting)
    connect_succeeded = connecting.to(connected)
    connect_failed = connecting.to(disconnected)
    connect_timed_out = (
        connecting.to(disconnected)
        | disconnected.to(None)  # lost while the stream wait ran: nothing more to end
    )

    # --- losses (the transport's facts) ---------------------------------------------------
    connection_lost = (
        connected.to(reconnecting.silent, cond=["redialable", "clean"])  # kandev H9
        | connected.to(reconnecting.announced, cond="redialable")
        | connected.to(disconnected)
        | connecting.to(disconnected)
        | reconnecting.to(None, cond="redialable")  # the same outage reported again
        | reconnecting.to(disconnected)  # the carrier ended while we redialled
        | giving_up.to(disconnected)  # the carrier's final loss after our give-up
        | disconnected.to(None)
    )

    # --- the redial (the runtime's dials and timer) ---------------------------------------
    redial_succeeded = (
        reconnecting.announced.to(connected)
        | reconnecting.silent.to(connected)
        | giving_up.to(None)  # a dial that won the race with the give-up
        | disconnected.to(None)  # … or with the carrier's own end
    )
    redial_failed = (
        reconnecting.to(giving_up, cond="fatal")
        | reconnecting.to(None)  # retryable: the next dial
        | giving_up.to(None)
        | disconnected.to(None)  # a dial result that raced the carrier's end
    )
    reconnect_timed_out = reconnecting.to(giving_up) | giving_up.to(None)

    # --- questions, asked without firing (statecharts.peek) ---------------------------------
    # a wait for the carrier (a prompt's retry after a reconnect, a stream recovery) asks
    # whether it is up (``report_connected``), still on its way (nothing: a redial is under
    # way) or never will be without another fact (``report_not_connected``; closed has
    # ended the chart, which says the same)
    carrier_awaited = (
        connected.to(None)
        | reconnecting.to(None)
        | disconnected.to(None)
        | connecting.to(None)
        | giving_up.to(None)
    )
    # the carrier's event stream ended without saying why: a loss (``report_loss``) unless
    # the stream already rests (disconnected; closed has ended the chart)
    event_stream_ended = (
        connecting.to(None)
        | connected.to(None)
        | reconnecting.to(None)
        | giving_up.to(None)
        | disconnected.to(None)
    )

    close_requested = (
        disconnected.to(closed)
        | connecting.to(closed)
        | connected.to(closed)
        | reconnecting.to(closed)
        | giving_up.to(closed)
    )

    effects: ClassVar[Effects] = Effects(
        transitions={
            "connection_lost: connected -> announced": [_LOST],
            "connection_lost: connected -> disconnected": [_LOST_FOR_GOOD],
            "connection_lost: connecting -> disconnected": [_LOST_FOR_GOOD],
            "connection_lost: reconnecting -> disconnected": [*_STOP, _LOST_FOR_GOOD],
            "connection_lost: giving_up -> disconnected": [_LOST_FOR_GOOD],
            "redial_succeeded: announced -> connected": [
                "disarm_reconnect_budget",
                effect("publish_reconnected", "session_id", "attempts"),
            ],
            "redial_succeeded: silent -> connected": ["disarm_reconnect_budget"],
            "redial_failed: reconnecting": [effect("redial", "failures")],
            "close_requested: reconnecting -> closed": [*_STOP],
            "carrier_awaited: connected": ["report_connected"],
            "carrier_awaited: disconnected": ["report_not_connected"],
            "carrier_awaited: connecting": ["report_not_connected"],
            "carrier_awaited: giving_up": ["report_not_connected"],
            "event_stream_ended: connecting": ["report_loss"],
            "event_stream_ended: connected": ["report_loss"],
            "event_stream_ended: reconnecting": ["report_loss"],
            "event_stream_ended: giving_up": ["report_loss"],
        },
        on_enter={
            "reconnecting": ["arm_reconnect_budget", effect("redial", failures=0)],
            "giving_up": [*_STOP, effect("give_up", "error")],
        },
    )

    # --- guards: pure functions of the event's data ----------------------------------------

    def redialable(self, redialable: bool = False) -> bool:
        return redialable

    def clean(self, clean: bool = False) -> bool:
        return clean

    def fatal(self, fatal: bool = False) -> bool:
        return fatal
