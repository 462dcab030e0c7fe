"""Credentials passthrough: an agent gets the variables its profile names (copied from the
caller's environment when set) and the profile's own ``env``, nothing else of the caller's
environment; ``acpfsm conform`` follows the same rule unless given ``--inherit-env``."""

from __future__ import annotations

import json
import sys
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest

from acpfsm.adapters.acp.process import DEFAULT_INHERITED_ENV
from acpfsm.adapters.executor import AgentLaunch
from acpfsm.adapters.memory import MemoryTransport
from acpfsm.adapters.transport import AgentTransport
from acpfsm.runtime import AgentProfile, LaunchSpec, Runtime, WorkspaceRef
from acpfsm.runtime.runtime import AGENT_ENV, BUILTIN_PROFILES
from acpfsm.testing.memory import MemoryExecutor
from acpfsm.tools import conform

ENV_AGENT = Path(__file__).resolve().parents[1] / "peers" / "env_dump_agent.py"
LISTED = "ACPFSM_TEST_LISTED_SECRET"
UNLISTED = "ACPFSM_TEST_UNLISTED_SECRET"


@pytest.fixture
def secrets_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LISTED, "listed-value")
    monkeypatch.setenv(UNLISTED, "unlisted-value")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.delenv("ACPFSM_TEST_ABSENT", raising=False)


def test_launch_env_copies_the_listed_names_then_the_profile_env() -> None:
    profile = AgentProfile(
        id="p", command=("x",), inherit_env=("A", "B", "ABSENT"), env={"B": "profile"}
    )
    assert profile.launch_env({"A": "1", "B": "2", "C": "3"}) == {"A": "1", "B": "profile"}
    assert AgentProfile(id="q", command=("x",)).launch_env({"A": "1"}) == {}


def test_builtin_profiles_list_what_their_agent_reads() -> None:
    by_id = {p.id: p for p in BUILTIN_PROFILES}
    for claude in ("claude-code-acp", "claude-agent-acp"):
        names = by_id[claude].inherit_env
        assert {"ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "IS_SANDBOX"} <= set(names)
    assert {"OPENAI_API_KEY", "CODEX_API_KEY"} <= set(by_id["codex-acp"].inherit_env)
    gemini = set(by_id["gemini"].inherit_env)
    assert {"GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_CLOUD_PROJECT"} <= gemini
    assert "ANTHROPIC_API_KEY" not in by_id["codex-acp"].inherit_env  # each its own
    assert by_id["reference"].inherit_env == ()
    assert "HTTPS_PROXY" in by_id["gemini"].inherit_env
    assert set(AGENT_ENV) == {n for p in BUILTIN_PROFILES for n in p.inherit_env}


async def test_the_runtime_builds_the_launch_env_from_the_profile(secrets_env: None) -> None:
    launches: list[AgentLaunch] = []

    class Recording(MemoryExecutor):
        def open(self, launch: AgentLaunch) -> AbstractAsyncContextManager[AgentTransport]:
            launches.append(launch)
            return super().open(launch)

    profile = AgentProfile(
        id="mem", command=("unused",), inherit_env=(LISTED, "ACPFSM_TEST_ABSENT"),
        env={"PROFILE_OWN": "yes"},
    )  # fmt: skip
    executor = Recording(lambda: MemoryTransport(auto_complete=True))
    async with Runtime(profiles=[profile], executors={"memory": executor}) as rt:
        ref = await rt.launch(
            LaunchSpec(agent_profile_id="mem", executor_id="memory",
                       workspace=WorkspaceRef(path="/tmp"))
        )  # fmt: skip
        await rt.stop(ref.id, "done")
    assert launches[0].env == {LISTED: "listed-value", "PROFILE_OWN": "yes"}


@pytest.mark.integration
async def test_a_real_agent_sees_only_the_listed_variables(
    secrets_env: None, tmp_path: Path
) -> None:
    """Through the built-in stdio executor, to a real process."""
    dump = tmp_path / "env.json"
    profile = AgentProfile(
        id="env", command=(sys.executable, str(ENV_AGENT), str(dump)), inherit_env=(LISTED,)
    )
    async with Runtime(profiles=[profile]) as rt:
        ref = await rt.launch(
            LaunchSpec(agent_profile_id="env", workspace=WorkspaceRef(path=str(tmp_path)))
        )
        result = await rt.prompt(ref.id, "hello")
        assert result.stop_reason == "end_turn"
        await rt.stop(ref.id, "done")
    seen = json.loads(dump.read_text())
    assert seen[LISTED] == "listed-value"
    assert UNLISTED not in seen
    assert "ANTHROPIC_API_KEY" not in seen  # set, but not this profile's
    # beside them only the execution's id, which a restarted app finds its agents by
    assert seen["ACPFSM_EXECUTION_ID"] == ref.id
    allowed = {LISTED, *DEFAULT_INHERITED_ENV, "ACPFSM_EXECUTION_ID", "PWD", "LC_CTYPE"}
    assert set(seen) <= {*allowed, "SHLVL", "_"}


@pytest.mark.integration
@pytest.mark.parametrize("inherit_all", [False, True])
def test_conform_follows_the_same_rule_unless_told_to_inherit_everything(
    secrets_env: None, tmp_path: Path, inherit_all: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = tmp_path / "env.json"
    flags = ["--inherit-env"] if inherit_all else []
    code = conform.main(
        ["--json", "--timeout", "10", *flags, "--", sys.executable, str(ENV_AGENT), str(dump)]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0, data
    seen = json.loads(dump.read_text())
    assert seen["ANTHROPIC_API_KEY"] == "sk-ant-test"  # a built-in profile passes it
    if inherit_all:
        assert seen[UNLISTED] == "unlisted-value"
    else:
        assert UNLISTED not in seen and LISTED not in seen
        assert set(seen) <= {*conform.conform_env_names(), "PWD", "LC_CTYPE", "SHLVL", "_"}


def test_conform_env_names_are_the_stdio_base_and_the_profiles_lists() -> None:
    names = conform.conform_env_names()
    assert names[:3] == DEFAULT_INHERITED_ENV
    assert set(names) == {*DEFAULT_INHERITED_ENV, *AGENT_ENV}
