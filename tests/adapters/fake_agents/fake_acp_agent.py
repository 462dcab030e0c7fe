"""A small scripted ACP agent for the stdio transport tests (stdlib only, one thread per turn).

It speaks newline-delimited JSON-RPC on stdin/stdout and is written independently of
acpfsm's own message types on purpose. Flags: ``--queueing`` (advertise
``_meta.claudeCode.promptQueueing``), ``--no-load`` (``loadSession: false``),
``--legacy-models`` (``models`` + ``session/set_model`` instead of a model config option),
``--no-models`` (no model surface at all), ``--auth-required`` (session/new answers -32000
until ``authenticate``), ``--protocol N``, ``--sequential`` (a turn runs on the thread that
reads stdin, so nothing sent during it is read before it ends, and the default script pauses
0.05 s after its first update; for the scripts that ask the client nothing), ``--audio``
(advertise audio prompts too), ``--record FILE`` (append every line read and written to FILE
as ``{"in": line}`` / ``{"out": line}`` JSON lines),
``--refuse-root`` (session/new and session/load answer the error Claude Code's adapters give
when run as root without ``IS_SANDBOX``).

The first word of the prompt's text picks the script of the turn:

  (anything else)  thought + two message chunks echoing the text; end_turn
  blocks           one chunk naming the prompt's content block types
  whoami           one chunk with the initialize params as JSON
  updates          one update of every kind (and one unknown kind), end_turn
  tool-open        a tool call that never finishes, end_turn
  permission       session/request_permission; a chunk with the outcome; end_turn
  permission-hang  session/request_permission; after the answer, waits for session/cancel
  permission-flood N  N session/request_permission at once; a chunk counting the answers by
                   outcome ("permission-flood: 100 answered, cancelled 36, reject 64");
                   end_turn
  permission-ids ID…  one session/request_permission per ID (JSON: 1, "1" …; tool call t-N
                   for the Nth) at once; a chunk with the answers under each id (by the id
                   each answer came back with, in the order sent: 'permission-ids: 1 reject;
                   "1" allow'); end_turn
  hang             waits for session/cancel, then stopReason cancelled
  ignore-cancel    ignores session/cancel; ends (end_turn) only when another prompt arrives
  crash            writes to stderr and exits with code 3 mid-turn
  error            answers the prompt with a JSON-RPC error (-32603, details "model exploded")
  garbage          a non-JSON line, a response to an unknown id, an error without id; end_turn
  oversize N       an N-byte session/update line, then a chunk "after oversize"; end_turn
  slow             chunk "slow start"; waits for a second prompt (a steer); answers end_turn
                   early; then a late chunk "slow end."
  sleep S          sleeps S seconds, one chunk "slept S", end_turn
  read PATH        fs/read_text_file; a chunk with the content or the error
  write PATH TEXT  fs/write_text_file; a chunk "written" or the error
  terminal [all]   terminal/create; a chunk with the result or the error; with ``all`` then
                   terminal/output, wait_for_exit, kill and release on it
  usage            end_turn with a usage object
  close-stdout     closes stdout and keeps running until stdin closes
  flood N          N message chunks as fast as possible, end_turn
  malformed        a text chunk without ``text``, one whose text holds a terminal escape and
                   a lone surrogate escape, a tool call of an unknown kind; end_turn
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

ARGS = sys.argv[1:]
QUEUEING = "--queueing" in ARGS
LOAD = "--no-load" not in ARGS
LEGACY_MODELS = "--legacy-models" in ARGS
NO_MODELS = "--no-models" in ARGS
AUTH_REQUIRED = "--auth-required" in ARGS
PROTOCOL = int(ARGS[ARGS.index("--protocol") + 1]) if "--protocol" in ARGS else 1
SEQUENTIAL = "--sequential" in ARGS
AUDIO = "--audio" in ARGS
RECORD = ARGS[ARGS.index("--record") + 1] if "--record" in ARGS else None
REFUSE_ROOT = "--refuse-root" in ARGS
ROOT_REFUSAL = (
    "Claude Code process exited with code 1: --dangerously-skip-permissions cannot be used "
    "with root/sudo privileges for security reasons"
)

_write_lock = threading.Lock()
_state_lock = threading.Condition()
_pending: dict[str, list[dict]] = {}  # the answers awaited, by the id's JSON text
_next_id = [1000]
_cancelled: dict[str, threading.Event] = {}
_prompt_count: dict[str, int] = {}
_authenticated = [not AUTH_REQUIRED]
_init_params: list[dict] = [{}]
_sessions: set[str] = {"sess-known"}
_counter = [0]
MODELS = [{"value": "fake-small", "name": "Small"}, {"value": "fake-large", "name": "Large"}]
_model = ["fake-small"]
_mode = ["default"]


def send(obj: dict) -> None:
    write_line(json.dumps(obj))


_record = open(RECORD, "a", encoding="utf-8") if RECORD else None  # noqa: SIM115


def record(direction: str, line: str) -> None:
    if _record is not None:
        with _write_lock:
            _record.write(json.dumps({direction: line.rstrip("\n")}) + "\n")
            _record.flush()


def write_line(text: str) -> None:
    record("out", text)
    with _write_lock:
        try:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass


def respond(msg_id, result) -> None:
    send({"jsonrpc": "2.0", "id": msg_id, "result": result})


def fail(msg_id, code: int, message: str, data=None) -> None:
    error = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    send({"jsonrpc": "2.0", "id": msg_id, "error": error})


def update(sid: str, upd: dict) -> None:
    send(
        {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "update": upd}}
    )


def chunk(sid: str, text: str, kind: str = "agent_message_chunk") -> None:
    update(sid, {"sessionUpdate": kind, "content": {"type": "text", "text": text}})


def ask(method: str, params: dict) -> dict:
    """Send an agent→client request and wait for its response message."""
    with _state_lock:
        _next_id[0] += 1
        msg_id = _next_id[0]
        _pending[json.dumps(msg_id)] = []
    send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
    with _state_lock:
        while not _pending[json.dumps(msg_id)]:
            _state_lock.wait()
        return _pending.pop(json.dumps(msg_id))[0]


def ask_many(method: str, params: list[dict]) -> list[dict]:
    """Send agent→client requests all at once, then wait for every response."""
    ids = []
    for p in params:
        with _state_lock:
            _next_id[0] += 1
            ids.append(_next_id[0])
            _pending[json.dumps(ids[-1])] = []
        send({"jsonrpc": "2.0", "id": ids[-1], "method": method, "params": p})
    return answers_to([json.dumps(i) for i in ids])


def answers_to(keys: list[str]) -> list[dict]:
    """Wait for an answer per key (an id's JSON text; a repeated id awaits one per time it
    was sent): each id's answers in arrival order, the ids in ``keys`` order, once each."""
    with _state_lock:
        while not all(len(_pending[k]) >= keys.count(k) for k in keys):
            _state_lock.wait()
        return [a for k in dict.fromkeys(keys) for a in _pending.pop(k)]


def config_options() -> list[dict]:
    return [
        {
            "id": "model",
            "name": "Model",
            "category": "model",
            "type": "select",
            "currentValue": _model[0],
            "options": MODELS,
        },
        {"id": "fast", "name": "Fast", "type": "boolean", "currentValue": False, "options": []},
    ]


def session_state() -> dict:
    state: dict = {
        "modes": {
            "currentModeId": _mode[0],
            "availableModes": [
                {"id": "default", "name": "Default"},
                {"id": "plan", "name": "Plan", "description": "plan only"},
            ],
        }
    }
    if NO_MODELS:
        pass
    elif LEGACY_MODELS:
        state["models"] = {
            "currentModelId": _model[0],
            "availableModels": [{"modelId": m["value"], "name": m["name"]} for m in MODELS],
        }
    else:
        state["configOptions"] = config_options()
    return state


def run_turn(msg_id, sid: str, prompt: list[dict]) -> None:
    texts = [b.get("text", "") for b in prompt if b.get("type") == "text"]
    text = texts[0] if texts else ""
    words = text.split()
    word = words[0] if words else ""
    cancel = _cancelled.setdefault(sid, threading.Event())
    with _state_lock:
        seen = _prompt_count.get(sid, 0)

    def end(reason: str = "end_turn", **extra) -> None:
        respond(msg_id, {"stopReason": reason, **extra})

    if word == "blocks":
        chunk(sid, "blocks: " + ",".join(b.get("type", "?") for b in prompt))
        end()
    elif word == "whoami":
        chunk(sid, json.dumps(_init_params[0], sort_keys=True))
        end()
    elif word == "updates":
        chunk(sid, "echo of the user", "user_message_chunk")
        update(
            sid,
            {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "image", "data": "aGk=", "mimeType": "image/png"},
                "messageId": "m-1",
            },
        )
        update(
            sid,
            {
                "sessionUpdate": "tool_call",
                "toolCallId": "t1",
                "title": "Read file",
                "kind": "read",
                "status": "pending",
                "rawInput": {"path": "/x"},
                "content": [{"type": "diff", "path": "/x", "oldText": "a", "newText": "b"}],
            },
        )
        update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "title": "Reading"})
        update(
            sid,
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "t1",
                "status": "completed",
                "rawOutput": {"ok": True},
            },
        )
        update(
            sid,
            {
                "sessionUpdate": "plan",
                "entries": [
                    {"content": "step one", "priority": "high", "status": "completed"},
                    {"content": "step two", "priority": "low", "status": "pending"},
                ],
            },
        )
        update(
            sid,
            {
                "sessionUpdate": "available_commands_update",
                "availableCommands": [
                    {"name": "review", "description": "Review code", "input": {"hint": "path"}},
                    {"name": "review", "description": "Review code (dup)"},
                ],
            },
        )
        update(sid, {"sessionUpdate": "current_mode_update", "currentModeId": "plan"})
        update(sid, {"sessionUpdate": "config_option_update", "configOptions": config_options()})
        update(sid, {"sessionUpdate": "session_info_update", "title": "A title", "updatedAt": "t"})
        update(sid, {"sessionUpdate": "usage_update", "used": 10, "size": 1000})
        update(sid, {"sessionUpdate": "usage_update", "used": 20, "size": 500})
        update(sid, {"sessionUpdate": "future_kind", "whatever": [1, 2]})
        chunk(sid, "pondering", "agent_thought_chunk")
        end()
    elif word == "malformed":
        update(sid, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text"}})
        # a terminal escape and a lone surrogate, written as the JSON escapes an agent sends
        text = '"\\u001b[2J\\ud800 hidden"'
        head = '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":' + json.dumps(sid)
        write_line(
            head + ',"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text",'
            '"text":' + text + "}}}}"
        )
        update(sid, {"sessionUpdate": "tool_call", "toolCallId": "m1", "title": "x", "kind": "?"})
        end()
    elif word == "tool-open":
        update(sid, {"sessionUpdate": "tool_call", "toolCallId": "open-1", "title": "Long"})
        end()
    elif word in ("permission", "permission-hang"):
        answer = ask(
            "session/request_permission",
            {
                "sessionId": sid,
                "toolCall": {"toolCallId": "t-perm", "title": "Write file"},
                "options": [
                    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
                    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                ],
            },
        )
        outcome = answer.get("result", {}).get("outcome", {})
        label = outcome.get("outcome", "?")
        if label == "selected":
            label += ":" + outcome.get("optionId", "")
        chunk(sid, "permission: " + label)
        if word == "permission-hang":
            cancel.wait()
            end("cancelled")
        else:
            end()
    elif word == "permission-flood":
        count = int(text.split()[1])
        answers = ask_many(
            "session/request_permission",
            [
                {
                    "sessionId": sid,
                    "toolCall": {"toolCallId": f"t-{n}", "title": f"Run {n}", "kind": "execute"},
                    "options": [
                        {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                        {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
                    ],
                }
                for n in range(count)
            ],
        )
        tally: dict[str, int] = {}
        for answer in answers:
            outcome = answer.get("result", {}).get("outcome", {})
            label = outcome.get("optionId") or outcome.get("outcome", "error")
            tally[label] = tally.get(label, 0) + 1
        counts = ", ".join(f"{k} {v}" for k, v in sorted(tally.items()))
        chunk(sid, f"permission-flood: {len(answers)} answered, {counts}")
        end()
    elif word == "permission-ids":
        keys = [json.dumps(json.loads(token)) for token in words[1:]]
        with _state_lock:
            for key in keys:
                _pending[key] = []
        for n, key in enumerate(keys):
            params = {
                "sessionId": sid,
                "toolCall": {"toolCallId": f"t-{n}", "title": f"Run {n}", "kind": "execute"},
                "options": [
                    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
                ],
            }
            send(
                {
                    "jsonrpc": "2.0",
                    "id": json.loads(key),
                    "method": "session/request_permission",
                    "params": params,
                }
            )
        by_id: dict[str, list[str]] = {}
        for answer in answers_to(keys):
            outcome = answer.get("result", {}).get("outcome", {})
            label = outcome.get("optionId") or outcome.get("outcome", "error")
            by_id.setdefault(json.dumps(answer.get("id")), []).append(label)
        told = "; ".join(f"{key} {','.join(labels)}" for key, labels in by_id.items())
        chunk(sid, f"permission-ids: {told}")
        end()
    elif word == "hang":
        chunk(sid, "hanging")
        cancel.wait()
        end("cancelled")
    elif word == "ignore-cancel":
        chunk(sid, "ignoring cancel")
        with _state_lock:
            while _prompt_count.get(sid, 0) == seen:
                _state_lock.wait()
        end()
    elif word == "crash":
        chunk(sid, "about to crash")
        sys.stderr.write("fatal: boom\nsecond line\n")
        sys.stderr.flush()
        os._exit(3)
    elif word == "error":
        fail(msg_id, -32603, "Internal error", {"details": "model exploded"})
    elif word == "garbage":
        write_line("this is not json {")
        send({"jsonrpc": "2.0", "id": 999999, "result": {}})
        send({"jsonrpc": "2.0", "error": {"code": -32602, "message": "Invalid params"}})
        chunk(sid, "after garbage")
        end()
    elif word == "oversize":
        size = int(words[1])
        update(
            sid,
            {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": "x" * size},
            },
        )
        chunk(sid, "after oversize")
        end()
    elif word == "slow":
        chunk(sid, "slow start")
        with _state_lock:
            while _prompt_count.get(sid, 0) == seen:
                _state_lock.wait()
        end()
        time.sleep(0.05)
        chunk(sid, "slow end.")
    elif word == "sleep":
        time.sleep(float(words[1]))
        chunk(sid, "slept " + words[1])
        end()
    elif word == "read":
        answer = ask("fs/read_text_file", {"sessionId": sid, "path": words[1]})
        if "result" in answer:
            chunk(sid, "content: " + answer["result"]["content"])
        else:
            chunk(sid, "error: {code} {message}".format(**answer["error"]))
        end()
    elif word == "write":
        answer = ask(
            "fs/write_text_file", {"sessionId": sid, "path": words[1], "content": words[2]}
        )
        chunk(sid, "written" if "result" in answer else f"error: {answer['error']['code']}")
        end()
    elif word == "terminal":
        answer = ask("terminal/create", {"sessionId": sid, "command": "ls", "args": []})
        if "result" in answer:
            chunk(sid, "terminal: " + json.dumps(answer["result"]))
            if words[1:] == ["all"]:  # every other terminal method on it
                ref = {"sessionId": sid, "terminalId": answer["result"].get("terminalId", "")}
                for method in ("output", "wait_for_exit", "kill", "release"):
                    ask("terminal/" + method, ref)
        else:
            chunk(sid, "error: {code} {message}".format(**answer["error"]))
        end()
    elif word == "usage":
        end(usage={"inputTokens": 3, "outputTokens": 5, "totalTokens": 8})
    elif word == "close-stdout":
        with _write_lock:
            sys.stdout.flush()
            os.close(1)
    elif word == "flood":
        for i in range(int(words[1])):
            chunk(sid, str(i))
        end()
    else:
        chunk(sid, "thinking", "agent_thought_chunk")
        if SEQUENTIAL:
            time.sleep(0.05)
        chunk(sid, "you said: ")
        chunk(sid, text)
        end()


def handle_request(msg_id, method: str, params: dict) -> None:
    if method == "initialize":
        _init_params[0] = params
        caps: dict = {
            "loadSession": LOAD,
            "promptCapabilities": {"image": True, "audio": AUDIO, "embeddedContext": True},
            "sessionCapabilities": {"list": {}, "resume": {"_meta": {"fake": 1}}},
            "auth": {"logout": {}},  # a capability of a newer ACP than acpfsm models
        }
        if QUEUEING:
            caps["_meta"] = {"claudeCode": {"promptQueueing": True}}
        respond(
            msg_id,
            {
                "protocolVersion": PROTOCOL,
                "agentCapabilities": caps,
                "authMethods": [{"id": "fake-login", "name": "Fake login"}],
                "agentInfo": {"name": "fake-acp-agent", "version": "0.0.1"},
                "unknownTopLevelField": {"tolerated": True},
            },
        )
    elif method == "authenticate":
        _authenticated[0] = True
        respond(msg_id, {})
    elif method in ("session/new", "session/load") and REFUSE_ROOT:
        fail(msg_id, -32603, "Internal error", {"details": ROOT_REFUSAL})
    elif method == "session/new":
        if not _authenticated[0]:
            fail(msg_id, -32000, "Authentication required")
            return
        _counter[0] += 1
        sid = f"sess-{_counter[0]}"
        _sessions.add(sid)
        respond(msg_id, {"sessionId": sid, **session_state()})
        update(
            sid,
            {"sessionUpdate": "available_commands_update", "availableCommands": [{"name": "init"}]},
        )
    elif method == "session/load":
        sid = params.get("sessionId", "")
        if sid not in _sessions:
            fail(msg_id, -32002, "Resource not found", {"sessionId": sid})
            return
        chunk(sid, "old question", "user_message_chunk")
        chunk(sid, "old answer")
        update(sid, {"sessionUpdate": "plan", "entries": [{"content": "old plan"}]})
        update(sid, {"sessionUpdate": "available_commands_update", "availableCommands": []})
        respond(msg_id, session_state())
    elif method == "session/prompt":
        sid = params.get("sessionId", "")
        if sid not in _sessions:
            fail(msg_id, -32002, "Resource not found", {"sessionId": sid})
            return
        with _state_lock:
            _prompt_count[sid] = _prompt_count.get(sid, 0) + 1
            _state_lock.notify_all()
        _cancelled[sid] = threading.Event()
        if SEQUENTIAL:
            run_turn(msg_id, sid, params.get("prompt", []))
            return
        threading.Thread(
            target=run_turn, args=(msg_id, sid, params.get("prompt", [])), daemon=True
        ).start()
    elif method == "session/set_mode":
        if params.get("modeId") not in ("default", "plan"):
            fail(msg_id, -32602, "Invalid params: Invalid Mode: " + str(params.get("modeId")))
            return
        _mode[0] = params["modeId"]
        respond(msg_id, {})
    elif method == "session/set_config_option" and not (LEGACY_MODELS or NO_MODELS):
        if params.get("configId") == "model":
            if params.get("value") not in [m["value"] for m in MODELS]:
                fail(msg_id, -32602, "Invalid params: Invalid value for config option model")
                return
            _model[0] = params["value"]
        elif params.get("configId") != "fast":
            fail(msg_id, -32602, "Invalid params", {"details": "no such option"})
            return
        respond(msg_id, {"configOptions": config_options()})
    elif method == "session/set_model" and LEGACY_MODELS:
        _model[0] = params.get("modelId", "")
        respond(msg_id, {})
    else:
        fail(msg_id, -32601, "Method not found", {"method": method})


def main() -> None:
    for line in sys.stdin:
        record("in", line)
        if not line.strip():
            continue
        msg = json.loads(line)
        method = msg.get("method")
        if method is not None and "id" in msg:
            handle_request(msg["id"], method, msg.get("params") or {})
        elif method == "session/cancel":
            sid = (msg.get("params") or {}).get("sessionId", "")
            _cancelled.setdefault(sid, threading.Event()).set()
        elif method is not None:
            pass  # other notifications ($/cancel_request …)
        else:
            with _state_lock:
                key = json.dumps(msg.get("id"))
                if key in _pending:
                    _pending[key].append(msg)
                    _state_lock.notify_all()
    os._exit(0)


if __name__ == "__main__":
    main()
