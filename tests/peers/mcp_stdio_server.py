"""A small MCP server over stdio on the official SDK (a peer for the reference agent's MCP
client): one tool, ``whoami``, answering with ``PEER_NAME`` from its environment."""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("peer")


@server.tool()
def whoami() -> str:
    """Say who this server is."""
    return f"I am {os.environ.get('PEER_NAME', 'nobody')}"


if __name__ == "__main__":
    server.run()
