"""Agents call back into the app over MCP: app-declared Python tools served to any agent, the
MCP servers offered to its sessions, and kandev's ``mcp.*`` requests answered.

:mod:`.tools` (declarations) and :mod:`.execution` (one execution's MCP side) import nothing
of the MCP SDK; :mod:`.server` (the tool server) does, and is imported only when an execution
with tools starts (the ``acpfsm[mcp]`` extra).
"""

from .tools import DEFAULT_MAX_RESULT_BYTES as DEFAULT_MAX_RESULT_BYTES
from .tools import Tool as Tool
from .tools import ToolDeclarationError as ToolDeclarationError
from .tools import ToolSet as ToolSet
from .tools import tool as tool

__all__ = ["DEFAULT_MAX_RESULT_BYTES", "Tool", "ToolDeclarationError", "ToolSet", "tool"]
