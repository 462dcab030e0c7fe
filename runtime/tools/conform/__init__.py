"""``acpfsm conform``: a conformance battery for any ACP agent, over stdio or through agentctl.

Theory of operation
-------------------
**Over stdio** (``acpfsm conform -- AGENT_COMMAND [ARGS…]``) the battery spawns the agent
(its own process group, in a fresh temporary working directory that is also the session
``cwd``) and speaks newline-delimited JSON-RPC to it through a small recording client of its
own, so that every check can quote the exact lines exchanged as evidence and can send what a
well-behaved client never would (an unknown method, a line that is not JSON). Shapes are
validated with the same msgspec structs acpfsm's ACP client uses
(:mod:`acpfsm.adapters.acp.messages`), and every message against the official ACP schema (see
"The official schema" below).

**Through agentctl** (``acpfsm conform --agentctl URL (--nonce N | --token T) -- AGENT…``)
the battery creates an agentctl instance running the agent (as
:class:`~acpfsm.adapters.agentctl.executor.AgentctlExecutor` does for the runtime: create,
health, configure, start, the agent WebSocket), drives it through the
:class:`~acpfsm.adapters.transport.AgentTransport` seam, and deletes the instance at the end,
whatever happened. The evidence is then the operations and the events agentctl reported.

**One set of checks.** Every check that means the same on both carriers is written once
(:class:`_Suite`) against a small carrier interface (:class:`_Carrier`): the recording stdio
client (:class:`_WireCarrier`) or any ``AgentTransport`` (:class:`_TransportCarrier`, used
with agentctl's). session/load errors are classified by :mod:`acpfsm.adapters.classify` and
the consequence is read off the SessionInit chart, as the runtime would decide it for that
carrier: over stdio the error is structured, over agentctl it is message-only, so there a
trailing ``{"code":-32002,…}`` object is inconclusive (kandev's rule) where stdio's structured
-32002 falls back to session/new. The checks
that need the raw pipe exist only over stdio; through agentctl they are reported n/a "not
observable through agentctl".

Each check ends ``pass``, ``fail`` (with evidence) or ``n/a`` (not applicable, with the
reason, e.g. the agent needs credentials to open a session, or does not advertise the
capability). Every check is bounded by ``--timeout`` seconds; an agent that does not answer
in time fails that check ("timed out") and the battery goes on. The client advertises no
``fs``/``terminal`` capability and answers such requests ``-32601``; a permission request
is answered with a reject option (``cancelled`` once a cancel was sent). The agent's
environment follows the runtime's rule (:func:`conform_env_names`): over stdio ``PATH``,
``HOME``, ``LANG`` and every variable a built-in agent profile passes through (credentials,
provider settings, proxies), copied from ours; through agentctl, agentctl's environment plus
those variables. ``--inherit-env`` gives the agent our whole environment. To run offline
pass a throw-away ``HOME`` and an unreachable proxy. ``--agentctl auto`` starts an agentctl
on this machine for the run (:mod:`acpfsm.tools.agentctl`); a run given agentctl's
one-shot nonce saves the token it got to a private file (``--token-file``) for the next run and
says where, on stderr; the token itself never reaches the terminal or a report.

The checks, in order (over stdio: one agent process, then a second one for version
negotiation; "agentctl" says what the check observes there):

==================  ===========================================================================
id                  what passes
==================  ===========================================================================
initialize          ``initialize`` v1 is answered ``protocolVersion: 1`` in the v1 shape
                    (agentctl: its own ACP handshake with the agent succeeded)
capabilities        the advertised capabilities decode (listed in the detail; agentctl does not
                    report ``loadSession`` nor the session capabilities)
session_new         session/new answers a ``sessionId`` (n/a: authentication required)
unknown_method      an unknown method is answered ``-32601`` (stdio only)
load_unknown        session/load of an unknown id is an error; its classification and the
                    lifecycle's decision (fall back to session/new, or fail keeping the id)
prompt_turn         a prompt turn ends with a valid ``stopReason``; every update decodes
load_known          session/load of the session just used answers and replays its history
                    (agentctl does not forward the replay: the answer alone is checked)
cancel              session/cancel during a turn ends it with ``stopReason: cancelled``;
                    another stopReason fails when the agent demonstrably had the cancel (see
                    "Races" below); a turn whose answer was already on its way is n/a
steer               with ``promptQueueing`` advertised, a second prompt during a turn is
                    accepted and both are answered, the first first (agentctl: a steer into the
                    running turn is accepted and the turn then ends once); n/a otherwise, or
                    when every turn ended before the agent took the second prompt in
set_mode            session/set_mode to another advertised mode
config_mode         session/set_config_option on the ``mode`` category option
config_model        session/set_config_option on the ``model`` category option
legacy_set_model    session/set_model to another advertised legacy model (n/a when none;
                    agentctl's set_model picks set_config_option or set_model itself)
malformed_input     a non-JSON line and a non-JSON-RPC object do not kill the agent (stdio only)
stdout_clean        nothing but JSON was written on stdout (stdio only)
stdin_close         the agent exits when its stdin is closed (stdio only)
version_negotiation a fresh agent asked for protocol 999 answers a version it supports, not
                    999 (no such version exists) nor a later one (stdio only: agentctl always
                    asks for 1)
schema              every JSON-RPC message of the run, both ways, is valid against the official
                    ACP schema of the protocol version negotiated; each distinct violation is
                    a failed check of its own, ``schema:<sender>:<method>:<pointer>`` (stdio
                    only: agentctl forwards events, not messages)
==================  ===========================================================================

The official schema
-------------------
Every message the recording client saw, agent → client and client → agent, in both agent
processes, is validated (:mod:`.judge`, :mod:`.schema`) against the official ACP JSON Schema of
the protocol version that process negotiated (the agent's ``protocolVersion`` answer; the
bundled v1 and v2 of ``@agentclientprotocol/sdk``, vendored in ``acp_schema/``). A violation
names the method (a response: that of the request it answers), the direction, the JSON pointer
of the member, what the schema expects and the value found, quoted safely and bounded. What the
battery sends outside ACP on purpose (its unknown-method probe, the legacy session/set_model,
the initialize asking for version 999) is counted, not judged; a process that negotiated a
version with no official schema is not judged either (the negotiation check already says why).
``--schema-version N`` judges against the bundled schema of version N, ``--schema FILE``
against a schema file of the same layout, ``--no-schema`` turns the check off.

An agent's answer that names a known cause is reported as such (``ConformReport.causes``,
printed above the table): a Claude Code adapter run as root refuses session/new unless
``IS_SANDBOX=1``; the checks that met the refusal fail naming it, none passes on it.

Races
-----
The cancel and steer checks race the agent: they start a turn with a prompt that asks for a
long answer (``--long-prompt``), wait for its first update, then send session/cancel or the
second prompt. An agent whose turns are instant can answer before that arrives; no verdict
comes from a race the battery lost. Over stdio the battery sends, right after the cancel (or
right before the second prompt), a request every agent answers at once (an unknown method):
the agent reads its stdin in order, so when that answer comes before the turn's, the agent had
read the cancel before it ended the turn, and a stopReason other than ``cancelled`` fails;
when the turn's answer comes first, it may have been on its way before the cancel arrived.
A turn that goes on more than 0.5 s after the cancel fails too (the only evidence through
agentctl). Otherwise the turn ended before the cancel could act: the battery tries another
turn, and after three the check is n/a with the evidence. Likewise a steer whose first turn
answered before the agent read the request sent ahead of the second prompt queued nothing.
Through agentctl, a config option's new value that agentctl does not report within 1 s is
not observed (n/a), not a failure.
"""

from __future__ import annotations

from .carrier import AgentGone, _Answer, _Cancelled, _TurnEnd
from .checks import _judge_cancel
from .cli import add_arguments, main, run, token_file
from .render import render_junit, render_markdown, render_table
from .report import (
    AGENTCTL_NOT_OBSERVABLE,
    CHECKS,
    DEFAULT_LONG_PROMPT,
    DEFAULT_PROMPT,
    DEFAULT_TIMEOUT,
    DESCRIPTION,
    NONEXISTENT_VERSION,
    NOT_OBSERVABLE_THROUGH_AGENTCTL,
    CheckResult,
    ConformReport,
    ConformUsageError,
    Status,
)
from .stdio import conform_env_names, run_battery
from .through_agentctl import run_agentctl_battery
from .wire import _Wire

__all__ = [
    "AGENTCTL_NOT_OBSERVABLE",
    "CHECKS",
    "DEFAULT_LONG_PROMPT",
    "DEFAULT_PROMPT",
    "DEFAULT_TIMEOUT",
    "DESCRIPTION",
    "NONEXISTENT_VERSION",
    "NOT_OBSERVABLE_THROUGH_AGENTCTL",
    "AgentGone",
    "CheckResult",
    "ConformReport",
    "ConformUsageError",
    "Status",
    "_Answer",
    "_Cancelled",
    "_TurnEnd",
    "_Wire",
    "_judge_cancel",
    "add_arguments",
    "conform_env_names",
    "main",
    "render_junit",
    "render_markdown",
    "render_table",
    "run",
    "run_agentctl_battery",
    "run_battery",
    "token_file",
]
