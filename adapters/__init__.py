"""Adapters: ACP over stdio, agentctl over HTTP/WebSocket, error mapping, the reference agent."""

import logging as _logging

# a library logs but never prints: the application decides where records go
_logging.getLogger("acpfsm").addHandler(_logging.NullHandler())
