"""The battery through an agentctl instance running the agent, and
:func:`run_agentctl_battery`."""

from __future__ import annotations

import functools
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from acpfsm.adapters.errors import (
    AcpfsmError,
)

if TYPE_CHECKING:
    from acpfsm.adapters.agentctl import AgentctlConfig

from .carrier import (
    _Caps,
)
from .checks import (
    _Suite,
)
from .report import (
    _TITLES,
    AGENTCTL_NOT_OBSERVABLE,
    CHECKS,
    DEFAULT_LONG_PROMPT,
    DEFAULT_PROMPT,
    DEFAULT_TIMEOUT,
    NOT_OBSERVABLE_THROUGH_AGENTCTL,
    CheckResult,
    ConformReport,
    ConformUsageError,
    Status,
    _fail,
    _pass,
    _Verdict,
)
from .stdio import (
    _environ_of,
    _resolve_program,
)
from .transport import (
    _Permissions,
    _TransportCarrier,
)

# --------------------------------------------------------------------------- through agentctl


class _AgentctlBattery(_Suite):
    """The shared checks through an agentctl instance running the agent; the stdio-only
    checks are n/a. The instance is created, started and deleted by
    :class:`~acpfsm.adapters.agentctl.executor.AgentctlExecutor`."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        url: str,
        nonce: str,
        token: str,
        config: AgentctlConfig,
        env: dict[str, str],
        **kwargs: Any,
    ) -> None:
        super().__init__(argv, **kwargs)
        self.url = url
        self.nonce = nonce
        self.token = token
        self.config = config
        self.env = env
        self.permissions = _Permissions()
        self.report.agentctl = url

    async def run(self) -> ConformReport:
        from acpfsm.adapters.agentctl.executor import AgentctlExecutor
        from acpfsm.adapters.executor import AgentLaunch

        started = time.monotonic()
        executor = AgentctlExecutor(
            url=self.url,
            nonce=self.nonce,
            token=self.token,
            config=self.config,
            auto_redial=True,  # no Runtime here to decide a redial
        )
        execution_id = f"acpfsm-conform-{uuid.uuid4().hex[:12]}"
        launch = AgentLaunch(
            execution_id=execution_id,
            session_id=execution_id,
            agent_id="acpfsm-conform",
            command=tuple(self.argv),
            workspace=str(self.workspace),
            env=self.env,
            permission_policy=self.permissions.answer,
        )
        try:
            async with (
                executor.open(launch) as transport,
                anyio.create_task_group() as tg,
            ):
                carrier = _TransportCarrier(transport, self.permissions)
                self.carrier = carrier
                await tg.start(carrier.pump)
                await self._main_checks(carrier)
                tg.cancel_scope.cancel()
        except AcpfsmError as exc:  # no instance, or the agent could not be started in it
            if self.report.checks:
                raise
            self.skip(
                "initialize",
                _TITLES["initialize"],
                Status.FAIL,
                f"could not start the agent in an agentctl instance at {self.url}: {exc}",
            )
            self._skip_rest("the agent could not be started")
        finally:
            self.report.seconds = round(time.monotonic() - started, 3)
            if self.nonce and executor.token:
                self.report.agentctl_token = executor.token
        return self.report

    def _skip_rest(self, reason: str) -> None:
        for check_id, title in CHECKS[1:]:
            if check_id in AGENTCTL_NOT_OBSERVABLE:
                self.skip(check_id, title, Status.NA, self._not_observable(check_id))
            else:
                self.skip(check_id, title, Status.NA, reason)

    @staticmethod
    def _not_observable(check_id: str) -> str:
        return f"{NOT_OBSERVABLE_THROUGH_AGENTCTL}: {AGENTCTL_NOT_OBSERVABLE[check_id]}"

    async def _main_checks(self, carrier: _TransportCarrier) -> None:
        initialize = functools.partial(self._initialize, carrier)
        result = await self.check("initialize", _TITLES["initialize"], initialize)
        if result.status is not Status.PASS:
            self._skip_rest("initialize failed")
            return
        shared = self._shared()
        for check_id, title in CHECKS[1:]:
            if check_id in shared:
                await self.check(check_id, title, shared[check_id])
            else:
                self.skip(check_id, title, Status.NA, self._not_observable(check_id))

    async def _initialize(self, carrier: _TransportCarrier) -> _Verdict:
        started = carrier.now()
        result, answer = await carrier.initialize()
        if result is None:
            return _fail(f"agentctl's initialize failed: {answer.text}")
        self.caps = _Caps(
            load_session=None,  # agentctl does not report it
            media=[
                name
                for name, flag in (
                    ("image", result.supports_image),
                    ("audio", result.supports_audio),
                    ("embeddedContext", result.supports_embedded_context),
                )
                if flag
            ],
            prompt_queueing=result.prompt_queueing,
            auth_ids=[str(a.get("id")) for a in result.auth_methods if isinstance(a, dict)],
            session_caps=[],
        )
        self.report.agent = f"{result.agent.name} {result.agent.version}".strip()
        self.report.unmodelled = dict(result.unmodelled)
        return _pass(
            f"agentctl's ACP handshake (protocolVersion {result.protocol_version}) in "
            f"{answer.at - started:.2f} s, agent {self.report.agent}"
        )


_HTTP_FLOOR = 30.0


def _agentctl_config(check_timeout: float) -> AgentctlConfig:
    """agentctl client bounds above the check bound (so a check times out, not a request).
    Each HTTP call of the instance's setup and teardown is bounded by ``check_timeout`` but
    never by less than :data:`_HTTP_FLOOR`: deleting an instance whose agent ignores its
    stdin takes agentctl 15 s (its graceful wait before it signals the process group)."""
    from acpfsm.adapters.agentctl import AgentctlConfig

    bound = max(check_timeout, 1.0)
    return AgentctlConfig(
        http_timeout=max(bound, _HTTP_FLOOR),
        ready_timeout=bound,
        request_timeout=bound + 5.0,
        prompt_ack_timeout=bound,
        cancel_timeout=bound + 5.0,
        capabilities_wait=min(2.0, bound),
        reconnect_budget=min(bound, 30.0),
    )


async def run_agentctl_battery(
    argv: Sequence[str],
    *,
    url: str,
    nonce: str = "",
    token: str = "",
    check_timeout: float = DEFAULT_TIMEOUT,
    prompt: str = DEFAULT_PROMPT,
    long_prompt: str = DEFAULT_LONG_PROMPT,
    workspace: str | Path | None = None,
    echo: Callable[[CheckResult], None] | None = None,
    config: AgentctlConfig | None = None,
    inherit_env: Sequence[str] | None = None,
) -> ConformReport:
    """Run the battery against the agent ``argv`` in an instance of the agentctl at ``url``
    (control port), authenticated by its bootstrap ``nonce`` (traded for the token) or its
    bearer ``token``. ``workspace`` is the instance's workspace, a directory on agentctl's
    machine (default when agentctl is on this machine: a new temporary directory, removed
    after; required otherwise). The instance is deleted at the end, whatever happened. The
    checks that need the agent's raw stdio are n/a, "not observable through agentctl".
    ``config`` overrides the agentctl client bounds derived from ``check_timeout``. The agent
    runs in agentctl's environment plus the variables ``inherit_env`` names (default: what
    the built-in profiles pass through), copied from ours. ``report.agentctl_token`` holds
    the token the nonce was traded for."""
    from acpfsm.adapters.agentctl.executor import AgentctlExecutor
    from acpfsm.runtime.runtime import AGENT_ENV

    if not argv:
        raise ConformUsageError("no agent command")
    if bool(nonce) == bool(token):
        raise ConformUsageError("give agentctl's bootstrap nonce or its token (exactly one)")
    local = AgentctlExecutor(url=url).check_workspace  # agentctl runs on this machine
    if workspace is None and not local:
        raise ConformUsageError(
            f"agentctl at {url} is not on this machine: give the workspace, a directory on "
            f"agentctl's machine"
        )
    argv = _resolve_program(argv) if local else list(argv)
    own = workspace is None
    path = Path(tempfile.mkdtemp(prefix="acpfsm-conform-")) if own else Path(str(workspace))
    try:
        battery = _AgentctlBattery(
            argv,
            url=url,
            nonce=nonce,
            token=token,
            config=config or _agentctl_config(check_timeout),
            env=_environ_of(AGENT_ENV if inherit_env is None else inherit_env),
            timeout=check_timeout,
            prompt=prompt,
            long_prompt=long_prompt,
            workspace=path.resolve() if local else path,
            echo=echo,
        )
        return await battery.run()
    finally:
        if own:
            shutil.rmtree(path, ignore_errors=True)
