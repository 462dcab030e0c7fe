"""Python tools an app declares, shared by the MCP tests (served to the reference agent)."""

from __future__ import annotations

from acpfsm.runtime import tool


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def shout(text: str) -> str:
    """The text in capitals."""
    return text.upper()
