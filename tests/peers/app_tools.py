"""Python tools an app declares, shared by the MCP tests (served to the reference agent)."""

from __future__ import annotations

from acpfsm.runtime import tool

#: The reference agent's flags for these tests: its MCP servers (a Python process started for
#: the test, the SDK imported in it) may take longer than the default 20 s to connect on a
#: loaded two-core machine running the suite on two workers.
SLOW_MACHINE = ("--mcp-connect-seconds", "90")


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def shout(text: str) -> str:
    """The text in capitals."""
    return text.upper()
