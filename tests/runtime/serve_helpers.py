"""An ``acpfsm serve`` process for tests: started on a throwaway NATS server with a SQLite
store and the embedded reference agent, ready once it prints its ``serving`` line."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from acpfsm.testing.natsserver import NatsServer


class ServeProcess:
    def __init__(
        self,
        server: NatsServer,
        folder: Path,
        *,
        backend: str = "trio",
        name: str = "serve",
        store: str = "",
        extra: tuple[str, ...] = (),
        config_data: dict[str, object] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        config = folder / f"{name}.json"
        config.write_text(json.dumps(config_data or {"reference_agent": ["--delay", "0.001"]}))
        self.argv = [
            sys.executable, "-m", "acpfsm.tools.cli", "serve", "--nats", server.url,
            "--store", store or str(folder / f"{name}.db"), "--config", str(config),
            "--backend", backend, "--insecure-local", *extra,
        ]  # fmt: skip
        self.stderr = (folder / f"{name}.stderr").open("w+b")
        self.process = subprocess.Popen(
            self.argv, stdout=subprocess.PIPE, stderr=self.stderr, env={**os.environ, **(env or {})}
        )
        self.ready = self._read_line(60.0)

    def _read_line(self, bound: float) -> dict[str, object]:
        assert self.process.stdout is not None
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.process.stdout], [], [], 0.1)
            if ready:
                line = self.process.stdout.readline()
                if line:
                    return dict(json.loads(line))
            if self.process.poll() is not None:
                break
        self.stderr.seek(0)
        raise AssertionError(f"acpfsm serve did not start: {self.stderr.read().decode()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL: the process dies mid-whatever."""
        self.process.kill()
        self.process.wait(10)
        self.stderr.close()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if not self.stderr.closed:
            self.stderr.close()
        if self.process.stdout is not None:
            self.process.stdout.close()
        return self.process.returncode
