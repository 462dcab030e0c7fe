"""FirstActivity: the one ``agent.running`` an execution announces on its first activity.

Theory of operation
-------------------
kandev's ``firstActivityOnce`` (lifecycle/manager_events.go ``recordActivity`` and
``claimPromptCompletion``): the first time the agent shows activity while the execution is not
READY, ``agent.running`` is published, once per execution; a claimed generation-bearing
success that finds it not yet published publishes it before its ``agent.ready``. Whether the
execution is READY is the Execution chart's answer: its ``activity_recorded`` transitions from
the other statuses, and its generation-bearing ``turn_completed`` ones, carry the effect that
sends ``activity_seen`` here. (A wakeup's own ``agent.running``, READY → RUNNING, is the
Execution chart's and is not this one.)
"""

from __future__ import annotations

from typing import ClassVar

from statemachine import State

from ._base import Chart
from ._compile import Effects

__all__ = ["FirstActivity"]


class FirstActivity(Chart):
    """quiet → announced, once."""

    chart_name: ClassVar[str] = "first_activity"

    quiet = State("quiet", initial=True)
    announced = State("announced", final=True)

    activity_seen = quiet.to(announced)

    effects: ClassVar[Effects] = Effects(
        transitions={"activity_seen: quiet -> announced": ["publish_agent_running"]}
    )
