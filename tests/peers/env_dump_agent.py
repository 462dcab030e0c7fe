"""The reference agent, after writing the environment it was started with to a JSON file.

``python env_dump_agent.py OUT.json [REFERENCE AGENT ARGS...]``: what the tests of the
credentials passthrough read to see which variables reached the agent.
"""

from __future__ import annotations

import json
import os
import runpy
import sys

if __name__ == "__main__":
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        json.dump(dict(os.environ), out)
    sys.argv = [sys.argv[0], *sys.argv[2:]]
    runpy.run_module("acpfsm.adapters.reference_agent", run_name="__main__", alter_sys=True)
