"""The reference agent in a :class:`~acpfsm.runtime.Runtime`, for tests (the ``acpfsm_reference``
fixture), and :func:`assert_trace_conforms`.

Nothing from acpfsm is imported at module level: the pytest plugin imports this module when
pytest starts, before any coverage measurement begins.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from acpfsm.adapters.reference_agent import FaultSpec
    from acpfsm.runtime import AgentProfile, LaunchSpec, Runtime, Timeouts, Trace
    from acpfsm.runtime.trace import TraceRecord
    from acpfsm.tools.check_trace import CheckResult

__all__ = ["ReferenceAgent", "TraceViolationError", "assert_trace_conforms", "format_violations"]

PROFILE_ID = "reference"


class ReferenceAgent:
    """Launch the embedded reference agent (``python -m acpfsm.adapters.reference_agent``)
    through a :class:`Runtime` with the stdio executor.

    ::

        async def test_cancel_escalates(acpfsm_reference):
            async with acpfsm_reference.runtime() as rt:
                ref = await rt.launch(acpfsm_reference.spec())
                ...  # rt.prompt(ref.id, "[[fault:hang]] think") then rt.cancel(ref.id)

    ``runtime(*faults)`` and ``profile(*faults)`` take run faults of the reference agent's
    fault vocabulary (:attr:`faults`, e.g. ``"no_load"``, ``"crash=3"``); turn faults are
    also chosen per prompt with a ``[[fault:NAME]]`` directive. Unknown names raise
    ``ValueError`` at once. Timeouts and shutdown waits are short by default, so a test
    about a misbehaving agent finishes in seconds.
    """

    def __init__(self, workspace: str | Path, *, delay: float = 0.001) -> None:
        self.workspace = Path(workspace)
        self.delay = delay

    @property
    def faults(self) -> dict[str, FaultSpec]:
        """The fault vocabulary: name → :class:`~acpfsm.adapters.reference_agent.FaultSpec`."""
        from acpfsm.adapters.reference_agent import FAULTS

        return dict(FAULTS)

    def command(self, *faults: str, delay: float | None = None) -> list[str]:
        """The agent's argv (for tools that spawn it themselves, e.g. ``acpfsm conform``)."""
        from acpfsm.adapters.reference_agent import FaultError, parse_fault

        args = [sys.executable, "-m", "acpfsm.adapters.reference_agent"]
        for fault in faults:
            try:
                parse_fault(fault)
            except FaultError as exc:
                raise ValueError(f"reference agent fault {fault!r}: {exc}") from None
            args += ["--fault", fault]
        args += ["--delay", str(self.delay if delay is None else delay)]
        return args

    def profile(
        self, *faults: str, delay: float | None = None, id: str = PROFILE_ID, **overrides: Any
    ) -> AgentProfile:
        from acpfsm.runtime import reference_profile

        args = self.command(*faults, delay=delay)[3:]
        return reference_profile(*args, id=id, **overrides)

    def runtime(
        self,
        *faults: str,
        delay: float | None = None,
        timeouts: Timeouts | None = None,
        profiles: Iterable[AgentProfile] = (),
        cancel_timeout: float = 0.5,
        **runtime_options: Any,
    ) -> Runtime:
        """A Runtime (enter it with ``async with``) whose ``reference`` profile runs the
        agent with ``faults``; ``runtime_options`` go to :class:`Runtime` (``trace_path`` …)."""
        from acpfsm.adapters.acp.process import ShutdownPolicy
        from acpfsm.adapters.acp.stdio import StdioConfig
        from acpfsm.runtime import Runtime, StdioExecutor, Timeouts

        self.workspace.mkdir(parents=True, exist_ok=True)
        executor = StdioExecutor(
            config=StdioConfig(cancel_timeout=cancel_timeout),
            shutdown=ShutdownPolicy(stdin_close_wait=1.0, term_wait=1.0, kill_wait=1.0),
        )
        return Runtime(
            profiles=[self.profile(*faults, delay=delay), *profiles],
            executors={"stdio": executor},
            timeouts=timeouts or Timeouts(cancel_wait=2.0, cancel_escalation=0.5, request=30.0),
            **runtime_options,
        )

    def spec(
        self,
        prompt: str = "",
        *,
        prior_acp_session: str = "",
        agent_profile_id: str = PROFILE_ID,
        **fields: Any,
    ) -> LaunchSpec:
        """A launch spec for the reference profile in :attr:`workspace`."""
        from acpfsm.runtime import LaunchSpec, WorkspaceRef

        self.workspace.mkdir(parents=True, exist_ok=True)
        return LaunchSpec(
            agent_profile_id=agent_profile_id,
            executor_id="stdio",
            workspace=WorkspaceRef(path=str(self.workspace)),
            prompt=prompt,
            prior_acp_session=prior_acp_session,
            **fields,
        )


class TraceViolationError(AssertionError):
    """A trace does not follow the charts (raised by :func:`assert_trace_conforms`): a test
    failure, so an ``AssertionError`` and not an ``AcpfsmError``."""


def format_violations(
    result: CheckResult, records: Sequence[TraceRecord], *, title: str = "trace"
) -> str:
    """The violations of ``result`` with the offending records (``line`` = record number)."""
    lines = [f"{title}: {len(result.violations)} violation(s) in {result.records} records"]
    for v in result.violations:
        lines.append(f"  record {v.line}: {v.kind}: {v.message}")
        if 1 <= v.line <= len(records) and v.kind != "end_state":
            r = records[v.line - 1]
            gen = f"#{r.generation}" if r.generation else ""
            lines.append(
                f"      seq {r.seq} {r.chart}{gen} {r.source} --{r.event}--> {r.target}"
                f" (execution {r.execution_id})"
            )
    return "\n".join(lines)


def assert_trace_conforms(trace: Trace | Sequence[TraceRecord], *, partial: bool = False) -> None:
    """Raise :class:`TraceViolationError` listing every violation when the records of
    ``trace`` (a :class:`~acpfsm.runtime.Trace` or its records) do not follow the charts.
    ``partial``: the trace is cut out of a running one (see ``acpfsm check-trace --partial``).
    A Trace whose ring of records already dropped its oldest cannot be checked whole: that
    raises ``ValueError`` (check its file, or keep more records)."""
    from acpfsm.tools.check_trace import check_records

    if not isinstance(trace, Sequence) and trace.dropped:
        raise ValueError(
            f"the trace's memory ring dropped its {trace.dropped} oldest records: check the "
            "trace file, or keep more records (Retention.trace_records)"
        )
    records: list[TraceRecord] = list(trace if isinstance(trace, Sequence) else trace.records)
    result = check_records(records, partial=partial)
    if not result.ok:
        raise TraceViolationError(format_violations(result, records))
