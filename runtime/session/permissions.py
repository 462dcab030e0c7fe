"""The permission requests of one execution: the policy its transport asks, the app's answers.

The transport puts each of the agent's permission requests to :meth:`PermissionBroker.decide`
(the execution's ``AgentLaunch.permission_policy``), in a task of its own. The broker
publishes the request (``permission.requested``) and answers it by the execution's policy
(:data:`~acpfsm.runtime.types.PermissionPolicyName`): ``reject`` and ``allow_once`` at once;
``ask`` when the app calls :meth:`PermissionBroker.respond` (``Runtime.respond_permission``),
refusing it after ``Timeouts.permission_wait`` and cancelling it when its turn ends. Every
answer is published (``permission.resolved``: the option or ``cancelled``, who decided, why).

Bounds against a hostile agent: at most :data:`MAX_PENDING` requests wait for the app at a
time (more are refused at once), a request whose turn is already over is cancelled at once,
and the ids of the last :data:`REMEMBERED` resolved requests are kept, so that a late or
second answer is told it came too late (:class:`PermissionAlreadyResolved`) rather than that
the request never existed.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable

import anyio
import msgspec

from acpfsm.adapters import events as ev
from acpfsm.adapters.transport import allow_once_option, reject_option

from .. import events as le
from ..errors import (
    PermissionAlreadyResolved,
    PermissionOptionNotOffered,
    PermissionRequestNotFound,
)
from ..types import PermissionPolicyName
from .context import ExecutionContext

__all__ = ["MAX_PENDING", "REMEMBERED", "PermissionBroker"]

log = logging.getLogger("acpfsm.runtime")

MAX_PENDING = 64
"""How many ``ask`` requests of one execution may wait for the app at a time."""

REMEMBERED = 256
"""How many resolved request ids an execution remembers (for a late answer's error)."""


class _Pending(msgspec.Struct):
    request: ev.PermissionRequest
    answered: anyio.Event = msgspec.field(default_factory=anyio.Event)
    choice: str | None = None


class PermissionBroker:
    """One execution's permission requests (see the module docstring). ``turn_over(g)``
    says whether prompt generation ``g`` has ended (its chart's answer)."""

    def __init__(
        self,
        ctx: ExecutionContext,
        policy: PermissionPolicyName,
        turn_over: Callable[[int], bool],
    ) -> None:
        self.ctx = ctx
        self.policy = policy
        self._turn_over = turn_over
        self._pending: dict[str, _Pending] = {}
        self._resolved: collections.OrderedDict[str, str] = collections.OrderedDict()

    @property
    def pending(self) -> list[str]:
        """The ids of the requests waiting for the app, oldest first."""
        return list(self._pending)

    # --- the transport's side -----------------------------------------------------------

    async def decide(self, request: ev.PermissionRequest) -> str | None:
        """The execution's answer to ``request``: an option id, or ``None`` (``cancelled``)."""
        ask = self.policy == "ask"
        rid = request.request_id
        if ask and rid in self._pending:
            # refused, and told as the agent's protocol error: announced as a request, it
            # would show the app a second request, then a resolution, under the id of the one
            # the app still has to answer
            error = f"permission request {rid!r} reuses the id of one still waiting: refused"
            log.warning("%s: %s", self.ctx.id, error)
            self.ctx.publish(ev.ProtocolErrorEvent(session_id=request.session_id, error=error))
            return reject_option(request.options)
        bound = self.ctx.timeouts.permission_wait
        self.ctx.publish(
            le.PermissionRequested(
                execution_id=self.ctx.id,
                session_id=self.ctx.acp_session_id,
                request_id=request.request_id,
                prompt_generation=request.prompt_generation,
                tool_call=le.PermissionToolCall(
                    tool_call_id=request.tool_call_id,
                    title=request.permission_title,
                    kind=request.tool_kind,
                    raw_input=request.raw_input,
                ),
                options=list(request.options),
                policy=self.policy,
                expires_in=bound if ask else 0.0,
            )
        )
        if self.policy == "allow_once":
            choice = allow_once_option(request.options)
            if choice is None:
                return self._refuse(request, "policy", "allow_once, but no allow_once option")
            return self._settle(request, choice, "policy", "the execution's policy: allow_once")
        if not ask:
            return self._refuse(request, "policy", "the execution's policy: reject")
        if len(self._pending) >= MAX_PENDING:
            return self._refuse(request, "limit", f"{MAX_PENDING} requests already wait")
        if request.prompt_generation and self._turn_over(request.prompt_generation):
            return self._settle(request, None, "turn_ended", "its turn had already ended")
        pending = self._pending[rid] = _Pending(request)
        try:
            with anyio.move_on_after(bound):
                await pending.answered.wait()
            if not pending.answered.is_set():
                pending.choice = self._refuse(request, "timeout", f"no answer within {bound:g}s")
                pending.answered.set()
            return pending.choice
        finally:
            if self._pending.get(rid) is pending:
                del self._pending[rid]
            if not pending.answered.is_set():  # the transport withdrew it (cancelled)
                pending.answered.set()
                self._settle(request, None, "withdrawn", "withdrawn by the transport")

    def turn_ended(self, generation: int) -> None:
        """Prompt generation ``generation`` ended: its requests still waiting are cancelled."""
        for pending in list(self._pending.values()):
            if pending.request.prompt_generation == generation:
                self._answer(pending, None, "turn_ended", f"turn {generation} ended first")

    def close(self, reason: str) -> None:
        """The execution ends: every request still waiting is cancelled."""
        for pending in list(self._pending.values()):
            self._answer(pending, None, "withdrawn", reason)

    # --- the app's side -------------------------------------------------------------------

    def respond(self, request_id: str, option_id: str) -> None:
        """The app's answer: ``option_id`` must be one the request offers."""
        pending = self._pending.get(request_id)
        if pending is None:
            resolution = self._resolved.get(request_id)
            if resolution is not None:
                raise PermissionAlreadyResolved(
                    execution_id=self.ctx.id, request_id=request_id, resolution=resolution
                )
            raise PermissionRequestNotFound(execution_id=self.ctx.id, request_id=request_id)
        offered = [o.option_id for o in pending.request.options]
        if not isinstance(option_id, str) or option_id not in offered:
            raise PermissionOptionNotOffered(
                execution_id=self.ctx.id,
                request_id=request_id,
                option_id=repr(option_id) if not isinstance(option_id, str) else option_id,
                offered=offered,
            )
        self._answer(pending, option_id, "app", "answered by the app")

    # --- answers ----------------------------------------------------------------------------

    def _answer(self, pending: _Pending, choice: str | None, decided_by: str, reason: str) -> None:
        del self._pending[pending.request.request_id]
        pending.choice = self._settle(pending.request, choice, decided_by, reason)
        pending.answered.set()

    def _refuse(self, request: ev.PermissionRequest, decided_by: str, reason: str) -> str | None:
        """Refuse: the reject option (``reject_once``, else ``reject_always``), else
        ``cancelled``."""
        return self._settle(request, reject_option(request.options), decided_by, reason)

    def _settle(
        self, request: ev.PermissionRequest, choice: str | None, decided_by: str, reason: str
    ) -> str | None:
        kind = next((o.kind for o in request.options if o.option_id == choice), "")
        outcome = "cancelled" if choice is None else "selected"
        self._resolved[request.request_id] = f"{decided_by}: {reason}; {outcome}" + (
            f" {choice}" if choice is not None else ""
        )
        while len(self._resolved) > REMEMBERED:
            self._resolved.popitem(last=False)
        if decided_by != "app":
            log.info(
                "permission request %s of %s answered %s (%s: %s)",
                request.request_id,
                self.ctx.id,
                choice or "cancelled",
                decided_by,
                reason,
            )
        self.ctx.publish(
            le.PermissionResolved(
                execution_id=self.ctx.id,
                request_id=request.request_id,
                outcome=outcome,
                decided_by=decided_by,
                option_id=choice or "",
                option_kind=kind,
                reason=reason,
            )
        )
        return choice
