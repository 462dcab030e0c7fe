"""A small app on acpfsm's public API, killed with ``kill -9`` by the durable-execution tests.

``python durable_app.py CONFIG.json`` where the config says the store (``sqlite``: ``path``;
``postgres``: ``dsn`` and ``namespace``), the executor (``stdio``, or ``agentctl`` with its
``url`` and ``token``), the reference agent's flags, the workspace, the backend, and:

* ``recover``: report every stored execution as this start recovered it (one JSON line
  ``{"recovered": {...}}``: status, error, ACP session id, and for each the events logged
  after ``after[id]``), then ``relaunch`` the lost ones and prompt every one that runs
  (``{"prompted": {...}}``);
* ``launch``: launch ``executions`` new executions and prompt each once;
* ``turn``: ``between`` (nothing in flight) or ``mid`` (one more prompt each, slow, in
  flight);
* ``then``: ``wait`` (print ``READY``, once the store holds everything, and wait to be
  killed), ``stop`` (stop every execution and exit) or ``exit`` (leave ``async with``).

Every event the app's durable subscribers see is appended to ``seen`` (JSON lines ``[id, seq,
type]``), flushed line by line: what the app saw before it was killed.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import anyio

from acpfsm.adapters.acp.process import ShutdownPolicy
from acpfsm.runtime import (
    AgentctlExecutor,
    ExecutionLost,
    LaunchSpec,
    Runtime,
    StdioExecutor,
    WorkspaceRef,
    reference_profile,
)
from acpfsm.runtime.store import ExecutionStore, PostgresStore, SqliteStore


def _store(config: dict[str, Any]) -> ExecutionStore:
    if config["store"] == "sqlite":
        return SqliteStore(config["path"])
    return PostgresStore(config["dsn"], namespace=config["namespace"])


def _runtime(config: dict[str, Any]) -> Runtime:
    profile = reference_profile(
        *config.get("agent_args", ()), env={"ACPFSM_DURABLE_TEST": config["marker"]}
    )
    # agents that ignore stdin EOF are signalled soon (the default waits 2 s for each)
    quick = ShutdownPolicy(stdin_close_wait=0.2, term_wait=1.0, kill_wait=1.0)
    executors: dict[str, Any] = {"stdio": StdioExecutor(shutdown=quick)}
    if config["executor"] == "agentctl":
        executors["agentctl"] = AgentctlExecutor(url=config["url"], token=config["token"])
    return Runtime(profiles=[profile], executors=executors, store=_store(config))


def _out(**line: Any) -> None:
    print(json.dumps(line), flush=True)


async def _follow(rt: Runtime, execution_id: str, after: int, seen: Path) -> None:
    async for item in rt.subscribe(execution_id, after=after):
        with seen.open("a") as f:
            f.write(json.dumps([execution_id, item.seq, type(item.event).__name__]) + "\n")


async def _stored(rt: Runtime, execution_id: str, after: int) -> list[list[Any]]:
    """The execution's log as this start found it: to its end (a lost one's ends), or, a
    reattached one's going on, past an ``agent.recovered`` and its ``agent.boot_ready`` until
    nothing more comes for a while (the stored events come at once; an execution reattached
    at an earlier start has such a pair for each start, and a cancelled turn may follow)."""
    items: list[list[Any]] = []
    subscription = rt.subscribe(execution_id, after=after)
    recovered = booted = False
    while True:
        with anyio.move_on_after(0.5 if booted else math.inf):
            try:
                item = await subscription.__anext__()
            except StopAsyncIteration:
                return items
            kind = type(item.event).__name__
            items.append([item.seq, kind])
            recovered = recovered or kind == "AgentRecovered"
            booted = booted or (recovered and kind == "AgentBootReady")
            continue
        return items


async def main(config: dict[str, Any]) -> None:
    seen = Path(config["seen"])
    async with _runtime(config) as rt, anyio.create_task_group() as tg:
        recovered: dict[str, Any] = {}
        after: dict[str, int] = config.get("after", {})
        for e in rt.list_executions():
            items = await _stored(rt, e.id, after.get(e.id, 0))
            recovered[e.id] = {
                "status": e.status,
                "error": e.error_message,
                "acp_session_id": e.acp_session_id,
                "events": items,
            }
        _out(recovered=recovered)
        if config.get("recover"):
            prompted: dict[str, Any] = {}
            for execution_id, info in recovered.items():
                if info["status"] == "FAILED":
                    try:
                        await rt.relaunch(execution_id)
                    except ExecutionLost as exc:
                        prompted[execution_id] = {"relaunch_failed": str(exc)}
                        continue
                result = await rt.prompt(execution_id, "after the restart")
                snapshot = rt.get_execution(execution_id)
                prompted[execution_id] = {
                    "stop_reason": result.stop_reason,
                    "generation": result.generation,
                    "acp_session_id": snapshot.acp_session_id,
                    "status": snapshot.status,
                }
            _out(prompted=prompted)
        ids = []
        for _ in range(int(config.get("launch", 0))):
            spec = LaunchSpec(
                agent_profile_id="reference",
                executor_id=config["executor"],
                workspace=WorkspaceRef(path=config["workspace"]),
            )
            ref = await rt.launch(spec)
            ids.append(ref.id)
            tg.start_soon(_follow, rt, ref.id, 0, seen)
            await rt.prompt(ref.id, "hello")
        for execution_id in recovered:
            tg.start_soon(_follow, rt, execution_id, 0, seen)
        if config.get("turn") == "mid":
            for e in rt.list_executions():
                if e.status == "READY":  # the ones that run
                    tg.start_soon(rt.prompt, e.id, "a long one [[delay:60]]")
            with anyio.fail_after(60):
                while (
                    not all(rt.get_execution(i).status == "RUNNING" for i in ids)
                    or not rt.store_health
                    or rt.store_health.pending
                ):
                    await anyio.sleep(0.01)
        with anyio.fail_after(60):
            while rt.store_health is None or rt.store_health.pending:
                await anyio.sleep(0.01)
        snapshots = {e.id: e.acp_session_id for e in rt.list_executions()}
        if config["then"] == "wait":
            _out(ready=ids, sessions=snapshots)
            await anyio.sleep_forever()
        if config["then"] == "stop":
            async with anyio.create_task_group() as stops:
                for e in rt.list_executions():
                    stops.start_soon(rt.stop, e.id, "test over")
        _out(done=ids, sessions=snapshots)
        tg.cancel_scope.cancel()


if __name__ == "__main__":
    settings = json.loads(Path(sys.argv[1]).read_text())
    anyio.run(main, settings, backend=settings.get("backend", "trio"))
