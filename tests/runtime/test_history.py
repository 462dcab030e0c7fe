"""The per-session JSONL history and the resume-context prompt (kandev
lifecycle/session_history.go).

Scenarios covered here (tests/runtime/README.md): s20 (rendering), s22 (truncation), s23
(presence and file paths).
"""

from __future__ import annotations

import json
import pathlib
import threading
from datetime import UTC, datetime

import anyio
import msgspec
import pytest

from acpfsm.adapters.errors import AcpfsmError
from acpfsm.runtime.history import (
    RESUME_TEMPLATE,
    TOOL_RESULT_LIMIT,
    TRUNCATION_SUFFIX,
    USER_TEXT_LIMIT,
    AssistantEntry,
    Entry,
    HistoryError,
    HistoryReadError,
    HistoryStore,
    HistoryWriteError,
    ToolCallEntry,
    ToolResultEntry,
    UserEntry,
    render_entry,
    render_resume_context,
    safe_file_name,
    truncate_for_context,
)

T0 = datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)

INSTRUCTIONS = (
    "=== INSTRUCTIONS ===\n"
    "You are continuing work on the above task. This is a continuation of a previous session.\n"
    "Please continue from where the previous execution left off, taking into account all the "
    "context provided above.\n"
    "Do not repeat work that was already completed. Build on the existing progress.\n"
)


@pytest.fixture
def store(tmp_path: pathlib.Path) -> HistoryStore:
    return HistoryStore(tmp_path / "sessions", clock=lambda: T0)


def expected_context(history: str, prompt: str) -> str:
    return (
        "RESUME CONTEXT FOR CONTINUING TASK\n"
        "\n"
        "=== EXECUTION HISTORY ===\n"
        "The following is a summary of the previous conversation in this session:\n"
        f"{history}\n"
        "\n"
        "=== CURRENT REQUEST ===\n"
        f"{prompt}\n"
        "\n" + INSTRUCTIONS
    )


def lines_of(path: pathlib.Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


# --- scenarios -------------------------------------------------------------------------------


def test_s20_resume_context_renders_every_entry_kind(store: HistoryStore) -> None:
    s = "task-session-1"
    store.append_user(s, "please refactor the parser")
    store.append_assistant(s, "I will start with the lexer")
    store.append_tool_call(s, "edit_file", "tc-1", input={"path": "lexer.py"})
    store.append_tool_result(s, "edit_file", "tc-1", "3 lines changed")
    with store.path_for(s).open("a") as f:
        f.write('{"type":"plan","timestamp":"2025-01-02T03:04:05Z","content":"SECRET PLAN"}\n')

    out, err = store.generate_resume_context(s, "now add tests")

    assert err is None
    assert "[USER]: please refactor the parser" in out
    assert "[ASSISTANT]: I will start with the lexer" in out
    assert "[TOOL CALL: edit_file]" in out
    assert "[TOOL RESULT: edit_file] 3 lines changed" in out
    assert "SECRET PLAN" not in out
    assert "=== CURRENT REQUEST ===\nnow add tests" in out
    assert out.index("[TOOL RESULT: edit_file]") < out.index("=== CURRENT REQUEST ===")
    history = (
        "\n[USER]: please refactor the parser\n"
        "\n[ASSISTANT]: I will start with the lexer\n"
        "\n[TOOL CALL: edit_file]\n"
        "\n[TOOL RESULT: edit_file] 3 lines changed\n"
    )
    assert out == expected_context(history, "now add tests")


def test_s22_truncation_of_long_user_text_and_tool_result(store: HistoryStore) -> None:
    s = "long"
    store.append_user(s, "u" * 5000)
    store.append_tool_result(s, "bash", "tc", "r" * 5000)

    out, err = store.generate_resume_context(s, "go on")

    assert err is None
    assert f"\n[USER]: {'u' * 2000}... [truncated]\n" in out
    assert "u" * 2001 not in out
    assert f"\n[TOOL RESULT: bash] {'r' * 500}... [truncated]\n" in out
    assert "r" * 501 not in out
    assert truncate_for_context("0123456789abc", 10) == "0123456789... [truncated]"


def test_s23_history_presence_and_file_paths(store: HistoryStore) -> None:
    assert store.has_history("") is False
    store.root.mkdir(parents=True)
    store.path_for("s1").write_bytes(b"")
    assert store.has_history("s1") is False  # zero-byte file

    store.append_user("s1", "hello")
    assert store.has_history("s1") is True

    path = store.path_for("../../etc/passwd")
    assert path == store.root / ".._.._etc_passwd.jsonl"
    assert path.parent == store.root
    store.append_user("../../etc/passwd", "x")
    assert path.is_file()
    assert store.has_history("../../etc/passwd") is True


# --- rendering rules -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "block"),
    [
        (UserEntry(timestamp=T0, text="hi"), "\n[USER]: hi\n"),
        (AssistantEntry(timestamp=T0, text="hello"), "\n[ASSISTANT]: hello\n"),
        (
            ToolCallEntry(timestamp=T0, name="read_file", tool_call_id="t", input={"p": 1}),
            "\n[TOOL CALL: read_file]\n",
        ),
        (
            ToolResultEntry(timestamp=T0, name="read_file", tool_call_id="t", output="abc"),
            "\n[TOOL RESULT: read_file] abc\n",
        ),
        (UserEntry(timestamp=T0), "\n[USER]: \n"),
        (ToolCallEntry(timestamp=T0), "\n[TOOL CALL: ]\n"),
        (ToolResultEntry(timestamp=T0, name="x"), "\n[TOOL RESULT: x] \n"),
    ],
)
def test_render_entry_per_type(entry: Entry, block: str) -> None:
    assert render_entry(entry) == block


@pytest.mark.parametrize(
    ("length", "truncated"),
    [(1999, False), (2000, False), (2001, True), (5000, True)],
)
def test_user_and_assistant_truncate_at_2000(length: int, truncated: bool) -> None:
    text = "a" * (length - 1) + "Z"
    for entry, label in (
        (UserEntry(timestamp=T0, text=text), "USER"),
        (AssistantEntry(timestamp=T0, text=text), "ASSISTANT"),
    ):
        kept = text[:2000] + TRUNCATION_SUFFIX if truncated else text
        assert render_entry(entry) == f"\n[{label}]: {kept}\n"
    assert USER_TEXT_LIMIT == 2000


@pytest.mark.parametrize(
    ("length", "truncated"),
    [(499, False), (500, False), (501, True), (5000, True)],
)
def test_tool_result_truncates_at_500(length: int, truncated: bool) -> None:
    output = "b" * (length - 1) + "Z"
    kept = output[:500] + TRUNCATION_SUFFIX if truncated else output
    entry = ToolResultEntry(timestamp=T0, name="t", output=output)
    assert render_entry(entry) == f"\n[TOOL RESULT: t] {kept}\n"
    assert TOOL_RESULT_LIMIT == 500


def test_truncate_for_context_boundaries() -> None:
    assert truncate_for_context("", 0) == ""
    assert truncate_for_context("abc", 3) == "abc"
    assert truncate_for_context("abcd", 3) == "abc... [truncated]"
    # Limits count characters (code points), never splitting one.
    assert truncate_for_context("é" * 3, 2) == "éé... [truncated]"
    assert truncate_for_context("é" * 2, 2) == "éé"


def test_tool_call_name_is_not_truncated() -> None:
    name = "n" * 3000
    assert render_entry(ToolCallEntry(timestamp=T0, name=name)) == f"\n[TOOL CALL: {name}]\n"


def test_template_structure() -> None:
    entries: list[Entry] = [
        UserEntry(timestamp=T0, text="one"),
        AssistantEntry(timestamp=T0, text="two"),
    ]
    out = render_resume_context(entries, "three")
    assert out.startswith("RESUME CONTEXT FOR CONTINUING TASK\n\n=== EXECUTION HISTORY ===\n")
    headers = [
        "RESUME CONTEXT FOR CONTINUING TASK",
        "=== EXECUTION HISTORY ===",
        "=== CURRENT REQUEST ===",
        "=== INSTRUCTIONS ===",
    ]
    positions = [out.index(h) for h in headers]
    assert positions == sorted(positions)
    assert all(out.count(h) == 1 for h in headers)
    assert out.endswith(INSTRUCTIONS)
    assert (
        "session:\n\n[USER]: one\n\n[ASSISTANT]: two\n\n\n=== CURRENT REQUEST ===\nthree\n\n"
        "=== INSTRUCTIONS ===\n"
    ) in out
    assert out == expected_context("\n[USER]: one\n\n[ASSISTANT]: two\n", "three")
    assert "{history}" in RESUME_TEMPLATE
    assert "{prompt}" in RESUME_TEMPLATE


def test_braces_in_prompt_and_history_are_literal() -> None:
    entries: list[Entry] = [UserEntry(timestamp=T0, text="{prompt} and {history} and {0}")]
    out = render_resume_context(entries, "use {history} literally {}")
    assert out == expected_context(
        "\n[USER]: {prompt} and {history} and {0}\n", "use {history} literally {}"
    )


def test_empty_history_returns_prompt_unchanged(store: HistoryStore) -> None:
    assert store.generate_resume_context("never-written", "hello") == ("hello", None)
    store.root.mkdir(parents=True)
    store.path_for("empty").write_bytes(b"")
    assert store.generate_resume_context("empty", "hello") == ("hello", None)
    assert render_resume_context([], "p") == "p"


def test_only_unknown_or_garbage_entries_return_prompt_unchanged(store: HistoryStore) -> None:
    store.root.mkdir(parents=True)
    store.path_for("s").write_text(
        '{"type":"plan","timestamp":"2025-01-02T03:04:05Z"}\n'
        '{"type":"session_status","timestamp":"2025-01-02T03:04:05Z"}\n'
        "not json\n\n   \n"
    )
    assert store.has_history("s") is True
    assert store.read("s") == []
    assert store.generate_resume_context("s", "prompt text") == ("prompt text", None)


def test_read_error_returns_prompt_and_error(store: HistoryStore) -> None:
    # A directory where the file should be cannot be read.
    store.path_for("s").mkdir(parents=True)
    out, err = store.generate_resume_context("s", "the prompt")
    assert out == "the prompt"
    assert isinstance(err, HistoryReadError)
    assert isinstance(err, AcpfsmError)
    assert err.session_id == "s"
    assert isinstance(err.__cause__, OSError)
    with pytest.raises(HistoryReadError, match="failed to read history file"):
        store.read("s")


def test_read_error_for_unusable_session_id(store: HistoryStore) -> None:
    out, err = store.generate_resume_context("", "p")
    assert out == "p"
    assert isinstance(err, HistoryReadError)
    assert "session ID is required" in str(err)
    with pytest.raises(HistoryReadError):
        store.read("a\x00b")


def test_first_user_entry_after_resume_contains_whole_context(store: HistoryStore) -> None:
    """A surprising detail of kandev's: the runtime records the effective (already wrapped)
    initial prompt, so the next resume replays the old context as one truncated user block."""
    s = "resumed"
    store.append_user(s, "first task")
    effective, err = store.generate_resume_context(s, "continue")
    assert err is None
    store.append_user(s, effective)  # what the runtime records for the initial prompt
    entries = store.read(s)
    assert entries[-1] == UserEntry(timestamp=T0, text=effective)

    again, err = store.generate_resume_context(s, "next")
    assert err is None
    assert again.count("RESUME CONTEXT FOR CONTINUING TASK") == 2
    assert f"\n[USER]: {truncate_for_context(effective, 2000)}\n" in again


# --- reading ---------------------------------------------------------------------------------


def test_round_trip_preserves_entries_and_order(store: HistoryStore) -> None:
    s = "rt"
    written = [
        store.append_user(s, "q"),
        store.append_assistant(s, "a"),
        store.append_tool_call(s, "grep", "c1", input={"pattern": "x", "n": [1, 2]}),
        store.append_tool_result(s, "grep", "c1", "found", status="completed"),
    ]
    assert store.read(s) == written
    assert all(e.timestamp == T0 for e in written)


def test_on_disk_format_matches_kandev_history_entry(store: HistoryStore) -> None:
    s = "fmt"
    store.append_assistant(s, "partial prior response")
    store.append_user(s, "next prompt")
    store.append_tool_call(s, "edit_file", "c1")
    store.append_tool_result(s, "edit_file", "c1", "ok", status="completed")
    rows = lines_of(store.path_for(s))
    assert [r["type"] for r in rows] == [
        "agent_message",
        "user_message",
        "tool_call",
        "tool_result",
    ]
    assert rows[0] == {
        "type": "agent_message",
        "timestamp": "2025-01-02T03:04:05.678000Z",
        "content": "partial prior response",
    }
    assert rows[2] == {
        "type": "tool_call",
        "timestamp": "2025-01-02T03:04:05.678000Z",
        "tool_name": "edit_file",
        "tool_call_id": "c1",
    }
    assert rows[3]["content"] == "ok"
    assert rows[3]["tool_status"] == "completed"


def test_reads_kandev_written_lines(store: HistoryStore) -> None:
    """Go writes nanosecond RFC 3339 times, ``role``/``session_id`` fields and omits empties."""
    store.root.mkdir(parents=True)
    store.path_for("k").write_text(
        '{"timestamp":"2025-01-02T03:04:05.123456789Z","type":"user_message","role":"user",'
        '"content":"hi","session_id":"k"}\n'
        '{"timestamp":"2025-01-02T03:04:06+02:00","type":"agent_message","role":"assistant",'
        '"session_id":"k"}\n'
        '{"timestamp":"2025-01-02T03:04:07Z","type":"tool_result","tool_call_id":"t",'
        '"tool_name":"bash","tool_status":"complete","session_id":"k"}\n'
    )
    entries = store.read("k")
    assert [type(e) for e in entries] == [UserEntry, AssistantEntry, ToolResultEntry]
    assert entries[0] == UserEntry(
        timestamp=datetime(2025, 1, 2, 3, 4, 5, 123457, tzinfo=UTC), text="hi"
    )
    assert entries[1].timestamp.utcoffset() is not None
    assert isinstance(entries[1], AssistantEntry)
    assert entries[1].text == ""
    assert entries[2] == ToolResultEntry(
        timestamp=datetime(2025, 1, 2, 3, 4, 7, tzinfo=UTC),
        name="bash",
        tool_call_id="t",
        status="complete",
    )
    out, _ = store.generate_resume_context("k", "p")
    assert "\n[USER]: hi\n\n[ASSISTANT]: \n\n[TOOL RESULT: bash] \n" in out


def test_torn_last_line_is_skipped(store: HistoryStore) -> None:
    s = "torn"
    store.append_user(s, "complete entry")
    with store.path_for(s).open("ab") as f:
        f.write(b'{"type":"agent_message","timestamp":"2025-01-02T03:04:05Z","content":"hal')
    assert store.read(s) == [UserEntry(timestamp=T0, text="complete entry")]
    out, err = store.generate_resume_context(s, "p")
    assert err is None
    assert "hal" not in out
    assert out == expected_context("\n[USER]: complete entry\n", "p")


def test_append_after_torn_line_starts_a_new_line(store: HistoryStore) -> None:
    s = "torn2"
    store.append_user(s, "one")
    with store.path_for(s).open("ab") as f:
        f.write(b'{"type":"user_mess')
    store.append_user(s, "two")
    assert [e.text for e in store.read(s) if isinstance(e, UserEntry)] == ["one", "two"]
    assert store.path_for(s).read_bytes().endswith(b"\n")


@pytest.mark.parametrize(
    "line",
    [
        b'{"type":"plan","timestamp":"2025-01-02T03:04:05Z"}',  # unknown type
        b'{"timestamp":"2025-01-02T03:04:05Z","content":"no type"}',  # no tag
        b'{"type":"user_message","content":"no timestamp"}',  # missing required field
        b'{"type":"user_message","timestamp":"2025-01-02T03:04:05Z","content":7}',  # bad type
        b"[1, 2, 3]",
        b"42",
        b"\xff\xfe not utf-8",
        b"{not json",
    ],
)
def test_undecodable_lines_are_skipped_anywhere(store: HistoryStore, line: bytes) -> None:
    store.append_user("s", "before")
    with store.path_for("s").open("ab") as f:
        f.write(line + b"\n")
    store.append_user("s", "after")
    assert [e.text for e in store.read("s") if isinstance(e, UserEntry)] == ["before", "after"]


def test_crlf_line_endings_are_tolerated(store: HistoryStore) -> None:
    store.root.mkdir(parents=True)
    store.path_for("w").write_bytes(
        b'{"type":"user_message","timestamp":"2025-01-02T03:04:05Z","content":"x"}\r\n'
    )
    assert store.read("w") == [
        UserEntry(timestamp=datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC), text="x")
    ]


def test_read_of_missing_file_or_root_is_empty(tmp_path: pathlib.Path) -> None:
    store = HistoryStore(tmp_path / "does" / "not" / "exist")
    assert store.read("s") == []
    assert store.has_history("s") is False
    assert not (tmp_path / "does").exists()  # reading never creates anything


def test_text_with_newlines_and_unicode_round_trips(store: HistoryStore) -> None:
    text = 'line1\nline2\r\n"quoted"\t\u2028 \U0001f600 \x00 end'
    store.append_user("u", text)
    assert store.read("u") == [UserEntry(timestamp=T0, text=text)]
    assert len(store.path_for("u").read_bytes().split(b"\n")) == 2  # one line + trailing ""


# --- has_history ---------------------------------------------------------------------------


def test_has_history_missing_empty_nonempty(store: HistoryStore) -> None:
    assert store.has_history("s") is False  # root missing
    store.root.mkdir(parents=True)
    assert store.has_history("s") is False  # file missing
    store.path_for("s").write_bytes(b"")
    assert store.has_history("s") is False  # empty
    store.path_for("s").write_bytes(b"\n")
    assert store.has_history("s") is True  # any byte counts (size > 0)
    store.path_for("d").mkdir()
    assert store.has_history("d") is False  # a directory is not a history file
    assert store.has_history("a\x00b") is False
    assert store.has_history("x" * 4096) is False  # name too long: stat fails, no raise


def test_delete(store: HistoryStore) -> None:
    store.append_user("s", "x")
    store.delete("s")
    assert store.has_history("s") is False
    store.delete("s")  # absent: no-op
    with pytest.raises(HistoryWriteError):
        store.delete("")


# --- session id sanitization -------------------------------------------------------------


@pytest.mark.parametrize(
    ("session_id", "file_name"),
    [
        ("abc-123", "abc-123.jsonl"),
        ("a/b", "a_b.jsonl"),
        ("a\\b", "a_b.jsonl"),
        ("../../etc/passwd", ".._.._etc_passwd.jsonl"),
        ("..\\..\\windows", ".._.._windows.jsonl"),
        ("..", "...jsonl"),
        (".", "..jsonl"),
        ("/abs/path", "_abs_path.jsonl"),
    ],
)
def test_session_id_sanitization(store: HistoryStore, session_id: str, file_name: str) -> None:
    assert safe_file_name(session_id) == file_name
    path = store.path_for(session_id)
    assert path == store.root / file_name
    store.append_user(session_id, "x")
    assert [p.name for p in store.root.iterdir()] == [file_name]
    assert store.read(session_id) == [UserEntry(timestamp=T0, text="x")]
    assert store.has_history(session_id) is True


@pytest.mark.parametrize("session_id", ["", "a\x00b"])
def test_unusable_session_ids_are_refused(store: HistoryStore, session_id: str) -> None:
    with pytest.raises(HistoryError):
        safe_file_name(session_id)
    with pytest.raises(HistoryError):
        store.path_for(session_id)
    with pytest.raises(HistoryWriteError):
        store.append_user(session_id, "x")
    with pytest.raises(HistoryReadError):
        store.read(session_id)
    assert not store.root.exists()


def test_write_error_is_typed(tmp_path: pathlib.Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    store = HistoryStore(blocker / "sessions")
    with pytest.raises(HistoryWriteError, match="failed to write history entry") as info:
        store.append_user("s", "x")
    assert isinstance(info.value, AcpfsmError)
    assert isinstance(info.value.__cause__, OSError)
    with pytest.raises(HistoryWriteError):
        store.append_user("x" * 4096, "name too long")


def test_unencodable_tool_input_is_not_written(store: HistoryStore) -> None:
    with pytest.raises(HistoryWriteError, match="failed to encode"):
        store.append_tool_call("s", "t", "c", input=object())
    assert store.has_history("s") is False


def test_default_clock_is_utc_now(tmp_path: pathlib.Path) -> None:
    store = HistoryStore(tmp_path)
    before = datetime.now(UTC)
    entry = store.append_user("s", "x")
    after = datetime.now(UTC)
    assert before <= entry.timestamp <= after
    assert entry.timestamp.tzinfo is not None
    assert store.read("s")[0].timestamp == entry.timestamp


# --- concurrency: the runtime calls the store from worker threads ----------------------------


def test_concurrent_appends_from_threads_never_interleave(store: HistoryStore) -> None:
    def writer(n: int) -> None:
        for i in range(50):
            store.append_assistant("c", f"{n}:{i}:" + "x" * 300)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    entries = store.read("c")
    assert len(entries) == 400
    for n in range(8):
        mine = [
            e.text for e in entries if isinstance(e, AssistantEntry) and e.text.startswith(f"{n}:")
        ]
        assert [t.split(":")[1] for t in mine] == [str(i) for i in range(50)]


@pytest.mark.both_backends
async def test_usable_through_to_thread_run_sync(store: HistoryStore) -> None:
    await anyio.to_thread.run_sync(store.append_user, "a", "hello")
    present = await anyio.to_thread.run_sync(store.has_history, "a")
    out, err = await anyio.to_thread.run_sync(store.generate_resume_context, "a", "p")
    assert present is True
    assert err is None
    assert "[USER]: hello" in out


def test_entries_are_frozen() -> None:
    entry = UserEntry(timestamp=T0, text="x")
    with pytest.raises(AttributeError):
        entry.text = "y"  # type: ignore[misc]
    assert msgspec.structs.asdict(entry) == {"timestamp": T0, "text": "x"}
