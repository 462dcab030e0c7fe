"""An ACP client written on the official Python SDK that drives acpfsm's reference agent.

Run as its own asyncio process (the SDK is asyncio-only)::

    python tests/peers/sdk_client.py WORKSPACE [--backend trio|asyncio]

It spawns ``python -m acpfsm.adapters.reference_agent`` through ``acp.spawn_agent_process``
(sessions stored under ``WORKSPACE/.sessions``), then: initialize → session/new → a prompt
with a permission request → set_mode / set_config_option → a prompt that writes a file
through the client → a stalled prompt cancelled with session/cancel → session/load of the
session (history replayed) → session/load of an unknown id. It prints one JSON summary on
stdout and exits 0; anything the SDK logged at WARNING or above (for example a message from
the agent its schema rejected) is listed under ``sdkLog``. The whole run is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from acp import RequestError, spawn_agent_process, text_block
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    FileSystemCapabilities,
    Implementation,
    ReadTextFileResponse,
    RequestPermissionResponse,
    WriteTextFileResponse,
)

RUN_BOUND = 30.0


class LogCollector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.getMessage())


class RecordingClient:
    """The client side: records every session/update; answers permission and fs requests."""

    def __init__(self, workspace: str) -> None:
        self.workspace = os.path.realpath(workspace)
        self.updates: list[tuple[str, Any]] = []  # (sessionUpdate kind, update model)
        self.permissions: list[dict[str, Any]] = []
        self.first_chunk = asyncio.Event()

    def mark(self) -> int:
        return len(self.updates)

    def kinds(self, since: int = 0) -> list[str]:
        out: list[str] = []
        for kind, _ in self.updates[since:]:
            if kind not in out:
                out.append(kind)
        return out

    def text(self, since: int = 0, kind: str = "agent_message_chunk") -> str:
        return "".join(
            getattr(update.content, "text", "") for k, update in self.updates[since:] if k == kind
        )

    async def session_update(self, session_id: str, update: Any, **kw: Any) -> None:
        self.updates.append((update.session_update, update))
        if update.session_update == "agent_message_chunk":
            self.first_chunk.set()

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kw: Any
    ) -> RequestPermissionResponse:
        self.permissions.append(
            {"title": tool_call.title, "options": [o.option_id for o in options]}
        )
        for option in options:
            if option.kind == "allow_once":
                return RequestPermissionResponse(
                    outcome=AllowedOutcome(outcome="selected", option_id=option.option_id)
                )
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    def _inside(self, path: str) -> str:
        real = os.path.realpath(path)
        if not real.startswith(self.workspace + os.sep):
            raise RequestError.invalid_params({"path": path})
        return real

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kw: Any
    ) -> WriteTextFileResponse:
        await asyncio.to_thread(Path(self._inside(path)).write_text, content, encoding="utf-8")
        return WriteTextFileResponse()

    async def read_text_file(self, session_id: str, path: str, **kw: Any) -> ReadTextFileResponse:
        text = await asyncio.to_thread(Path(self._inside(path)).read_text, encoding="utf-8")
        return ReadTextFileResponse(content=text)

    def on_connect(self, conn: Any) -> None:
        pass


async def run(workspace: str, backend: str) -> dict[str, Any]:
    client = RecordingClient(workspace)
    summary: dict[str, Any] = {"turns": []}
    argv = [
        "-m",
        "acpfsm.adapters.reference_agent",
        "--backend",
        backend,
        "--log-level",
        "warning",
        "--sessions-dir",
        os.path.join(workspace, ".sessions"),
    ]
    async with spawn_agent_process(client, sys.executable, *argv, cwd=workspace) as (conn, proc):
        summary["agentPid"] = proc.pid
        init = await conn.initialize(
            protocol_version=1,
            client_capabilities=ClientCapabilities(
                fs=FileSystemCapabilities(read_text_file=True, write_text_file=True)
            ),
            client_info=Implementation(name="sdk-client", version="1"),
        )
        summary["protocolVersion"] = init.protocol_version
        summary["agent"] = init.agent_info.name if init.agent_info else None
        summary["loadSession"] = init.agent_capabilities.load_session
        new = await conn.new_session(cwd=workspace)
        sid = new.session_id
        summary["modes"] = [m.id for m in new.modes.available_modes] if new.modes else []
        summary["configOptions"] = [o.id for o in new.config_options or []]

        async def turn(text: str) -> dict[str, Any]:
            since = client.mark()
            response = await conn.prompt(session_id=sid, prompt=[text_block(text)])
            result = {
                "stopReason": response.stop_reason,
                "kinds": client.kinds(since),
                "text": client.text(since),
            }
            summary["turns"].append(result)
            return result

        await turn("hello from the sdk [[permission]]")
        summary["permissions"] = client.permissions

        await conn.set_session_mode(session_id=sid, mode_id="accept_edits")
        options = await conn.set_config_option(config_id="model", session_id=sid, value="ref-smart")
        summary["modelAfter"] = {o.id: o.current_value for o in options.config_options}["model"]
        await turn("[[write:sdk.txt]] written by the sdk")

        client.first_chunk.clear()
        since = client.mark()
        stalled = asyncio.ensure_future(
            conn.prompt(session_id=sid, prompt=[text_block("[[fault:stall]] wait")])
        )
        await client.first_chunk.wait()
        await conn.cancel(session_id=sid)
        response = await stalled
        summary["turns"].append({"stopReason": response.stop_reason, "kinds": client.kinds(since)})

        since = client.mark()
        loaded = await conn.load_session(cwd=workspace, session_id=sid)
        summary["replay"] = {
            "kinds": client.kinds(since),
            "userText": client.text(since, "user_message_chunk"),
            "mode": loaded.modes.current_mode_id if loaded.modes else None,
        }
        try:
            await conn.load_session(cwd=workspace, session_id="no-such-session")
            summary["loadUnknown"] = None
        except RequestError as exc:
            summary["loadUnknown"] = {"code": exc.code, "message": str(exc), "data": exc.data}
    summary["agentExit"] = proc.returncode
    return summary


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("workspace")
    parser.add_argument("--backend", default="trio", choices=("trio", "asyncio"))
    args = parser.parse_args()
    collector = LogCollector()
    logging.getLogger().addHandler(collector)
    summary = asyncio.run(asyncio.wait_for(run(args.workspace, args.backend), RUN_BOUND))
    summary["sdkLog"] = collector.records
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
