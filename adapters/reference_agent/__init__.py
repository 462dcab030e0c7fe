"""The reference agent: a complete ACP v1 agent over stdio that needs no model or credentials.

Run it with ``python -m acpfsm.adapters.reference_agent`` and speak newline-delimited
JSON-RPC 2.0 on its stdin/stdout (logs go to stderr only). It is deterministic for tests and
pleasant in a demo (``--delay 0.05``). It is an independent peer: it shares no code with the
ACP client in ``acpfsm.adapters.acp``.

What it does
------------
- ``initialize``: answers ``protocolVersion`` 1 whatever the client asks; ``agentInfo``
  ``{name: "acpfsm-reference-agent", title, version}``; ``agentCapabilities`` ``{loadSession:
  true, promptCapabilities {image, embeddedContext}, mcpCapabilities {http: true}, _meta
  {claudeCode {promptQueueing: true}}}``; ``authMethods: []``; ``_meta.acpfsmReference {pid,
  faults, childPid?}``.
- ``session/new`` (absolute ``cwd`` required, else -32602): a uuid ``sessionId``, ``modes``
  (default, plan, accept_edits), legacy ``models`` (ref-fast, ref-smart) and ``configOptions``
  ``mode`` (category mode), ``model`` (category model) and ``thinking`` (category
  thought_level: off/low/high); then an ``available_commands_update``.
- ``session/set_mode``, ``session/set_config_option`` and the legacy ``session/set_model``
  change the state, emit ``current_mode_update`` (mode changes) and ``config_option_update``,
  then answer (``{}``, or ``{configOptions}`` for set_config_option). Bad values answer
  -32602 in claude-agent-acp's words (``Invalid params: Invalid Mode: X``).
- ``session/prompt`` streams, paced by ``--delay``: ``agent_thought_chunk`` (per the thinking
  level), ``plan`` (updated as steps finish), a ``tool_call`` "Read the prompt" with
  ``tool_call_update`` in_progress/completed, then the reply as ``agent_message_chunk`` chunks
  of three words (``reply_for(text)`` and ``chunk_text``), a final ``plan``, a
  ``session_info_update`` title after the first turn, and the answer ``{stopReason:
  "end_turn"}``. Plan mode runs no tools. Prompt directives add tools: ``[[permission]]`` (an
  execute tool behind ``session/request_permission``), ``[[write:PATH]]`` (an edit tool that
  always asks, except in accept_edits mode, then calls ``fs/write_text_file`` if the client
  offers it), ``[[read:PATH]]`` (``fs/read_text_file``), ``[[delay:SECONDS]]``. Permission
  answers are honoured: allow/reject once or always; ``cancelled`` ends the turn cancelled.
- MCP: once ``session/new`` or ``session/load`` is answered, the agent connects (in the
  background, with the official MCP SDK's client, imported only then) to each server of its
  ``mcpServers`` (stdio and http; headers are never logged) and lists its tools. ``[[tools]]``
  lists them again (a sentence of the reply: ``MCP tools: NAME (KIND): tool, …; …``);
  ``[[tool:NAME {"arg": 1}]]`` calls the tool ``NAME`` on the first server that has it,
  streamed as a tool call ``Call NAME`` whose update carries the result (``rawOutput {server,
  isError, text}``), and the reply says ``Tool NAME returned: TEXT.`` or ``Tool NAME failed:
  ERROR.`` A server that cannot be reached is reported, never waited on for more than 20 s.
- ``session/cancel`` ends the session's live turns with ``stopReason: "cancelled"`` (an
  in-progress tool call first gets a ``failed`` update). ``$/cancel_request`` for a running
  prompt answers it with -32800 ``Request cancelled``.
- Prompt queueing (steer): a second ``session/prompt`` on a busy session is accepted at once;
  the running turn stops and is answered ``end_turn``, then the new turn streams and is
  answered. Both RPCs get answers, the predecessor's first.
- Persistence: every session is a JSON-lines file ``<sessions dir>/<sessionId>.jsonl``
  (default ``./.acpfsm-reference/sessions``). ``session/load`` after a restart replays the
  stored history as ``session/update`` notifications (``user_message_chunk`` for each prompt
  block, then the turn's updates as sent) before answering ``{modes, models, configOptions}``.
  An unknown id answers -32002 ``Resource not found`` with ``data.sessionId``.
- Unknown methods answer ``{"code":-32601,"message":"Method not found","data":{"method":M}}``;
  unknown notifications are ignored; a line that is not JSON answers -32700 ``Parse error``
  with ``id: null``; JSON that is not a message answers -32600; the agent keeps running.
  stdin EOF ends the process with status 0.

Command line and environment
----------------------------
==========================  ==================================  ==========================
flag                        environment                         meaning
==========================  ==================================  ==========================
``--fault NAME[=ARG]``      ``ACPFSM_REFERENCE_FAULTS=a,b=1``   inject faults (repeatable;
                                                                both sources are merged)
``--delay SECONDS``         ``ACPFSM_REFERENCE_DELAY``          pause before each streamed
                                                                update (default 0.002)
``--sessions-dir DIR``      ``ACPFSM_REFERENCE_SESSIONS_DIR``   session files (default
                                                                ./.acpfsm-reference/sessions)
``--backend trio|asyncio``  ``ACPFSM_REFERENCE_BACKEND``        event loop (default trio)
``--log-level LEVEL``       ``ACPFSM_REFERENCE_LOG``            stderr log level (info)
==========================  ==================================  ==========================

Fault vocabulary
----------------
Turn faults take effect right after the turn's first ``agent_message_chunk``; given as a
flag they apply to every turn, given as a ``[[fault:NAME]]`` / ``[[fault:NAME=ARG]]``
directive to that prompt only. Run faults are flags/env only.

The ``fs_*`` faults play a hostile agent against the client's ``fs/*`` methods: each plants
what it needs (files outside the workspace go to a fresh temporary directory; links, FIFOs
and sparse files to hidden ``.acpfsm-*`` names in the workspace), removes it afterwards, and
reports what it saw as the ``rawOutput`` of a tool call ``Probe the client (NAME)``
(``{fault, requests, answered, escaped, errors: {"<code> <message>": count}, …}``) and as a
sentence of the reply (``NAME: 6 requests, 0 answered, 6 refused (…), 0 escaped.``).

========================  =====  =====================================  ==========================================
name                      scope  directive                              observable effect
========================  =====  =====================================  ==========================================
``crash[=CODE]``          turn   ``[[fault:crash]]``                    process exits with CODE (3); no answer
``hang``                  turn   ``[[fault:hang]]``                     prompt never answered; cancel, steer and
                                                                        ``$/cancel_request`` ignored
``stall``                 turn   ``[[fault:stall]]``                    turn waits; session/cancel → cancelled,
                                                                        a steer → end_turn
``ignore_cancel``         turn   ``[[fault:ignore_cancel]]``            session/cancel ignored; turn ends end_turn
``prompt_error``          turn   ``[[fault:prompt_error]]``             answer is error -32603 "Internal error"
                                                                        ``data.details`` "reference agent fault:
                                                                        prompt_error"
``garbage``               turn   ``[[fault:garbage]]``                  one non-JSON line on stdout; turn completes
``oversized[=BYTES]``     turn   ``[[fault:oversized=1048576]]``        one valid session/update line of BYTES+1
                                                                        bytes (default 17 MiB); turn completes
``flood[=N]``             turn   ``[[fault:flood=20000]]``              N agent_thought_chunk notifications
                                                                        (default 5000); turn completes
``close_stdout``          turn   ``[[fault:close_stdout]]``             stdout reaches EOF; process lives until
                                                                        stdin EOF, then exits 0
``close_stdin``           turn   ``[[fault:close_stdin]]``              stdin closed (the client's writes fail:
                                                                        broken pipe); the turn never ends
``non_utf8``              turn   ``[[fault:non_utf8]]``                 one session/update line with bytes that
                                                                        are not UTF-8; turn completes
``permission_reject_first`` (turn, ``[[fault:permission_reject_first]]``): permission options
                                                                        listed reject first (reject_once,
                                                                        reject_always, allow_once, allow_always)
``permission_other_session`` (turn, ``[[fault:permission_other_session]]``): the permission
                                                                        request names another session
``fs_traversal``          turn   ``[[fault:fs_traversal]]``             fs/* asked for paths outside the
                                                                        workspace (``..``, absolute, the sibling
                                                                        ``<cwd>-evil``, planted links); reported
``fs_symlink_race[=S]``   turn   ``[[fault:fs_symlink_race=2]]``        a directory swapped with a link to outside
                                                                        while read and written through for S
                                                                        seconds (1); reported
``fs_fifo``               turn   ``[[fault:fs_fifo]]``                  a planted FIFO read and written; reported
``fs_huge_read[=MIB]``    turn   ``[[fault:fs_huge_read=50]]``          a sparse MIB MiB file (200) read with
                                                                        ``limit: 1``, then whole; reported
``fs_bad_paths``          turn   ``[[fault:fs_bad_paths]]``             a NUL byte, a relative path, a path over
                                                                        4096 bytes, read and written; reported
``undecodable_requests``  turn   ``[[fault:undecodable_requests]]``     two fs requests whose params do not
                                                                        decode (a lone surrogate, deep nesting);
                                                                        their answers reported
``exit_at_startup[=CODE]`` run   —                                      one stderr line, exit CODE (1) before
                                                                        reading stdin
``no_initialize``         run    —                                      initialize is never answered
``leak_env``              run    —                                      NAME=VALUE of secret-looking variables
                                                                        (KEY, TOKEN, SECRET …) to stderr
``slow_start[=SECONDS]``  run    —                                      nothing read or written for SECONDS (2)
``auth_required``         run    —                                      authMethods [reference-login];
                                                                        session/new, load and prompt answer
                                                                        ``{"code":-32000,"message":"Authentication
                                                                        required"}`` until authenticate
``no_load``               run    —                                      loadSession:false; session/load -32601
``load_method_not_found`` run    —                                      session/load ``{"code":-32601,"message":
                                                                        "Method not found","data":{"method":
                                                                        "session/load"}}``
``load_not_found``        run    —                                      session/load ``{"code":-32002,"message":
                                                                        "Resource not found","data":{"sessionId":
                                                                        ID}}``
``load_rollout_missing``  run    —                                      session/load ``{"code":-32603,"message":
                                                                        "Internal error","data":{"details":"no
                                                                        rollout found for thread id ID"}}``
``load_rollout_other``    run    —                                      the same naming another id (uuid5 of ID)
``load_internal``         run    —                                      session/load ``{"code":-32603,"message":
                                                                        "Internal error","data":{"details":
                                                                        "Session not found"}}``
``load_auth``             run    —                                      session/load ``{"code":-32000,"message":
                                                                        "Authentication required"}``
``no_mcp_http``            run    —                                      mcpCapabilities.http not advertised (only
                                                                        stdio MCP servers are taken)
``no_queueing``           run    —                                      promptQueueing not advertised; a second
                                                                        prompt waits; each turn ends end_turn
``ignore_eof``            run    —                                      stdin EOF ignored; needs SIGTERM
``spawn_child``           run    —                                      a sleeping child in the process group
                                                                        (``_meta.acpfsmReference.childPid``)
========================  =====  =====================================  ==========================================

``FAULTS`` holds the same table as data (``FaultSpec.effect``); ``--help`` prints it.
"""

from ._agent import AgentConfig as AgentConfig
from ._agent import ReferenceAgent as ReferenceAgent
from ._agent import serve as serve
from ._cli import main as main
from ._faults import FAULTS as FAULTS
from ._faults import FaultError as FaultError
from ._faults import Faults as Faults
from ._faults import FaultScope as FaultScope
from ._faults import FaultSpec as FaultSpec
from ._faults import other_rollout_id as other_rollout_id
from ._faults import parse_fault as parse_fault
from ._script import HELP_TEXT as HELP_TEXT
from ._script import chunk_text as chunk_text
from ._script import reply_for as reply_for
from ._wire import AGENT_NAME as AGENT_NAME

__all__ = [
    "AGENT_NAME",
    "FAULTS",
    "HELP_TEXT",
    "AgentConfig",
    "FaultError",
    "FaultScope",
    "FaultSpec",
    "Faults",
    "ReferenceAgent",
    "chunk_text",
    "main",
    "other_rollout_id",
    "parse_fault",
    "reply_for",
    "serve",
]
