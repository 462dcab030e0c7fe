"""The battery over the agent's stdio: the shared checks plus those that need the raw pipe, and
:func:`run_battery`."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from acpfsm.adapters.acp import messages as acp
from acpfsm.adapters.acp.process import AgentProcess, ShutdownPolicy, open_agent_process
from acpfsm.adapters.errors import (
    AcpfsmError,
)

from .carrier import (
    _Caps,
)
from .checks import (
    _Body,
    _Suite,
)
from .judge import SCHEMA_CHECK, Batch, SchemaJudge, SchemaOptions
from .report import (
    _EVIDENCE_LINES,
    _TITLES,
    CHECKS,
    DEFAULT_LONG_PROMPT,
    DEFAULT_PROMPT,
    DEFAULT_TIMEOUT,
    NONEXISTENT_VERSION,
    UNKNOWN_METHOD,
    CheckResult,
    ConformReport,
    ConformUsageError,
    Status,
    _fail,
    _pass,
    _short,
    _Verdict,
)
from .wire import (
    _decode,
    _Wire,
    _WireCarrier,
)

# --------------------------------------------------------------------------- over stdio


class _StdioBattery(_Suite):
    """The whole battery over the agent's stdio: the shared checks plus those that need the
    raw pipe (an unknown method, malformed input, stdout, stdin close, a second process for
    version negotiation)."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        inherit_env: Sequence[str],
        judge: SchemaJudge,
        **kwargs: Any,
    ) -> None:
        super().__init__(argv, **kwargs)
        self.inherit_env = tuple(inherit_env)
        self.wire: _Wire | None = None
        self.init: dict[str, Any] | None = None
        self.judge = judge
        self.batches: list[Batch] = []

    def _wire(self) -> _Wire:
        assert self.wire is not None
        return self.wire

    def _attach(self, process: AgentProcess, label: str) -> _Wire:
        self.wire = _Wire(process)
        self.carrier = _WireCarrier(self.wire)
        self.batches.append(Batch(label, self.wire.messages, self.wire.transcript))
        return self.wire

    # -- the run
    async def run(self) -> ConformReport:
        started = time.monotonic()
        try:
            await self._main_process()
            await self._negotiation_process()
            for result in self.judge.judge(self.batches):
                self._record(result)
        finally:
            self.report.seconds = round(time.monotonic() - started, 3)
        return self.report

    def _open(self) -> Any:
        return open_agent_process(
            self.argv,
            cwd=self.workspace,
            inherit_env=self.inherit_env,
            shutdown=ShutdownPolicy(stdin_close_wait=1.0, term_wait=2.0, kill_wait=2.0),
        )

    async def _main_process(self) -> None:
        try:
            async with self._open() as process, anyio.create_task_group() as tg:
                await tg.start(self._attach(process, "the main process").serve)
                await self._main_checks()
                tg.cancel_scope.cancel()
        except AcpfsmError as exc:  # the agent could not be started
            if self.report.checks:
                raise
            self.skip("initialize", _TITLES["initialize"], Status.FAIL, str(exc))
            for check_id, title, _ in self._rest():
                self.skip(check_id, title, Status.NA, "the agent could not be started")

    def _rest(self) -> list[tuple[str, str, _Body]]:
        bodies = {
            **self._shared(),
            "unknown_method": self._unknown_method,
            "malformed_input": self._malformed_input,
            "stdout_clean": self._stdout_clean,
            "stdin_close": self._stdin_close,
        }
        return [
            (check_id, title, bodies[check_id])
            for check_id, title in CHECKS
            if check_id not in ("initialize", "version_negotiation", SCHEMA_CHECK)
        ]

    async def _main_checks(self) -> None:
        result = await self.check("initialize", _TITLES["initialize"], self._initialize)
        rest = self._rest()
        if result.status is not Status.PASS:
            for check_id, title, _ in rest:
                if check_id == "stdin_close":
                    await self.check(check_id, title, self._stdin_close)
                else:
                    self.skip(check_id, title, Status.NA, "initialize failed")
            return
        for check_id, title, body in rest:
            await self.check(check_id, title, body)

    # -- checks that need the raw pipe
    def _initialize_params(self, version: int) -> dict[str, Any]:
        return {
            "protocolVersion": version,
            "clientCapabilities": {
                "fs": {"readTextFile": False, "writeTextFile": False},
                "terminal": False,
            },
            "clientInfo": {"name": "acpfsm-conform", "version": "1"},
        }

    async def _initialize(self) -> _Verdict:
        wire = self._wire()
        reply = await wire.request("initialize", self._initialize_params(acp.PROTOCOL_VERSION))
        if reply.error is not None:
            return _fail(f"initialize answered an error: {reply.describe_error()}")
        result = reply.result
        if not isinstance(result, dict):
            return _fail(f"initialize result is not an object: {_short(result, 120)}")
        version = result.get("protocolVersion")
        if version != acp.PROTOCOL_VERSION:
            return _fail(f"asked for protocolVersion 1, the agent answered {version!r}")
        problem = _decode("initialize", result)
        if problem:
            return _fail(f"the initialize result does not fit ACP v1: {problem}")
        self.init = result
        self.caps = self._caps_of(result)
        self.report.unmodelled = acp.unmodelled(acp.InitializeResponse, result)
        info = result.get("agentInfo") if isinstance(result.get("agentInfo"), dict) else {}
        assert isinstance(info, dict)
        name = str(info.get("name", "")) or "(no agentInfo)"
        version_text = str(info.get("version", ""))
        self.report.agent = f"{name} {version_text}".strip()
        return _pass(f"protocolVersion 1 in {reply.at:.2f} s, agent {self.report.agent}")

    @staticmethod
    def _caps_of(result: dict[str, Any]) -> _Caps:
        caps = result.get("agentCapabilities")
        caps = caps if isinstance(caps, dict) else {}
        prompt = caps.get("promptCapabilities")
        prompt = prompt if isinstance(prompt, dict) else {}
        meta = caps.get("_meta")
        claude = meta.get("claudeCode") if isinstance(meta, dict) else None
        auth = result.get("authMethods") or []
        session_caps = caps.get("sessionCapabilities")
        return _Caps(
            load_session=bool(caps.get("loadSession")),
            media=[k for k in ("image", "audio", "embeddedContext") if prompt.get(k)],
            prompt_queueing=isinstance(claude, dict) and claude.get("promptQueueing") is True,
            auth_ids=[str(a.get("id")) for a in auth if isinstance(a, dict)],
            session_caps=sorted(session_caps) if isinstance(session_caps, dict) else [],
        )

    async def _unknown_method(self) -> _Verdict:
        reply = await self._wire().request(UNKNOWN_METHOD, {})
        if reply.code == -32601:
            return _pass(f"answered {reply.describe_error()}")
        if reply.error is not None:
            return _fail(f"expected -32601, got {reply.describe_error()}")
        return _fail(f"expected -32601, got a result: {_short(reply.result, 200)}")

    async def _malformed_input(self) -> _Verdict:
        wire = self._wire()
        before = len(wire.orphans)
        await wire.send_raw(b"this line is not JSON\n")
        await wire.send_raw(b'{"acpfsm": "an object that is not JSON-RPC"}\n')
        reply = await wire.request(UNKNOWN_METHOD, {})
        if reply.error is None and reply.result is None:
            return _fail("the agent stopped answering after malformed input")
        orphans = wire.orphans[before:]
        answered = [_short(o.decode(errors="replace"), 160) for o in orphans]
        how = f"answered {'; '.join(answered)}" if answered else "ignored them"
        if any(b'"id"' not in o for o in orphans):
            how += " (an error response without `id` is not JSON-RPC 2.0; acpfsm ignores it)"
        return _pass(f"still answering; {how}")

    async def _stdout_clean(self) -> _Verdict:
        garbage = self._wire().garbage
        if garbage:
            lines = [_short(g.decode(errors="replace"), 200) for g in garbage[:_EVIDENCE_LINES]]
            return _fail(f"{len(garbage)} line(s) on stdout are not JSON-RPC", lines)
        return _pass("every line on stdout was JSON")

    async def _stdin_close(self) -> _Verdict:
        wire = self._wire()
        process = wire.process
        started = time.monotonic()
        await wire.close_stdin()
        with anyio.move_on_after(min(self.timeout * 0.9, 10.0)):
            await process.wait()
        code = process.returncode
        if code is None:
            return _fail(
                f"still running {time.monotonic() - started:.1f} s after stdin was closed "
                f"(acpfsm then signals its process group)",
                [*wire.transcript[-4:]],
            )
        return _pass(
            f"exited with code {code} {time.monotonic() - started:.2f} s after stdin closed"
        )

    # -- a second process
    async def _negotiation_process(self) -> None:
        title = _TITLES["version_negotiation"]
        try:
            async with self._open() as process, anyio.create_task_group() as tg:
                await tg.start(self._attach(process, "the negotiation process").serve)
                await self.check("version_negotiation", title, self._negotiation)
                tg.cancel_scope.cancel()
        except AcpfsmError as exc:
            self.skip("version_negotiation", title, Status.FAIL, str(exc))

    async def _negotiation(self) -> _Verdict:
        asked = NONEXISTENT_VERSION
        params = self._initialize_params(asked)  # a version that does not exist, on purpose
        reply = await self._wire().request("initialize", params, deliberate=True)
        if reply.error is not None:
            return _fail(
                f"initialize with protocolVersion {asked} answered an error instead of the "
                f"agent's latest version: {reply.describe_error()}"
            )
        version = reply.result.get("protocolVersion") if isinstance(reply.result, dict) else None
        if not isinstance(version, int) or isinstance(version, bool):
            return _fail(f"protocolVersion {version!r} is not an integer")
        if version > asked:
            return _fail(f"asked for {asked}, the agent answered a later version {version}")
        if version == asked:
            return _fail(
                f"asked for {asked}, a protocol version that does not exist (acpfsm speaks "
                f"{acp.PROTOCOL_VERSION}), the agent answered {asked}: it claims to speak it; ACP "
                f"wants the requested version only if supported, else the agent's latest"
            )
        v1 = " (acpfsm speaks it)" if version == acp.PROTOCOL_VERSION else ""
        return _pass(f"asked for {asked}: answered its latest, {version}{v1}")


# --------------------------------------------------------------------------- entry points


def _resolve_program(argv: Sequence[str]) -> list[str]:
    """A relative program path (``./agent``) is relative to our directory, not the agent's."""
    out = list(argv)
    if os.sep in out[0] and not os.path.isabs(out[0]):
        out[0] = os.path.abspath(out[0])
    return out


async def run_battery(
    argv: Sequence[str],
    *,
    check_timeout: float = DEFAULT_TIMEOUT,
    prompt: str = DEFAULT_PROMPT,
    long_prompt: str = DEFAULT_LONG_PROMPT,
    workspace: str | Path | None = None,
    echo: Callable[[CheckResult], None] | None = None,
    inherit_env: Sequence[str] | None = None,
    schema: SchemaOptions | None = None,
) -> ConformReport:
    """Run every check against the agent ``argv`` over its stdio; ``echo`` sees each result
    as it is made. Every message both ways is then judged against the official ACP schema of
    the protocol version negotiated (``schema`` picks another, or turns it off; a schema that
    cannot be loaded is a :class:`ConformUsageError`, raised before the agent starts). The agent works in ``workspace`` (default: a new temporary directory,
    removed after); a relative program path is taken from the current directory. Each check
    is bounded by ``check_timeout`` seconds. The agent's environment holds the variables
    ``inherit_env`` names (default :func:`conform_env_names`: ``PATH``, ``HOME``, ``LANG`` and
    what the built-in profiles pass through), copied from ours."""
    if not argv:
        raise ConformUsageError("no agent command")
    judge = SchemaJudge(schema or SchemaOptions())
    judge.preload()
    argv = _resolve_program(argv)
    own = workspace is None
    path = Path(tempfile.mkdtemp(prefix="acpfsm-conform-")) if own else Path(str(workspace))
    try:
        battery = _StdioBattery(
            argv,
            inherit_env=conform_env_names() if inherit_env is None else inherit_env,
            judge=judge,
            timeout=check_timeout,
            prompt=prompt,
            long_prompt=long_prompt,
            workspace=path.resolve(),
            echo=echo,
        )
        return await battery.run()
    finally:
        if own:
            shutil.rmtree(path, ignore_errors=True)


def conform_env_names() -> tuple[str, ...]:
    """What an agent checked over stdio gets of our environment by default: the stdio
    executor's base (``PATH``, ``HOME``, ``LANG``) and every variable a built-in agent
    profile passes through (credentials, provider settings, proxies), as the runtime would
    give them; ``--inherit-env`` gives it everything."""
    from acpfsm.adapters.acp.process import DEFAULT_INHERITED_ENV
    from acpfsm.runtime.runtime import AGENT_ENV

    return tuple(dict.fromkeys((*DEFAULT_INHERITED_ENV, *AGENT_ENV)))


def _environ_of(names: Sequence[str]) -> dict[str, str]:
    return {name: os.environ[name] for name in names if name in os.environ}
