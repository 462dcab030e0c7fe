"""Adapters: ACP over stdio, agentctl over HTTP/WebSocket, error mapping, the reference agent."""
