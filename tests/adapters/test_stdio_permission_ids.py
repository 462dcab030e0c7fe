"""The agent's JSON-RPC request ids as the app sees them (``PermissionRequest.request_id``):
one string per distinct id, so that ``1`` and ``"1"`` are two questions, each answered under
exactly its own id; a reused id is the same string (the runtime's broker refuses it); an id
too long to keep, or one JSON-RPC does not allow, gets a clear refusal and is reported."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from hypothesis import given, settings
from hypothesis import strategies as st

from acpfsm.adapters.acp.stdio import (
    MAX_PERMISSION_ID_CHARS,
    StdioTransport,
    connect_stdio_transport,
    permission_request_id,
)
from acpfsm.adapters.events import PermissionRequest, ProtocolErrorEvent

from .pipes import HandPeer, hand_peer

Question = tuple[PermissionRequest, anyio.Event, list[str]]


class App:
    """A permission policy the test answers by hand: each question arrives on ``asked``; the
    choice put in its list once its event is set goes back for that very question."""

    def __init__(self) -> None:
        self.ask: MemoryObjectSendStream[Question]
        self.asked: MemoryObjectReceiveStream[Question]
        self.ask, self.asked = anyio.create_memory_object_stream[Question](math.inf)

    async def __call__(self, request: PermissionRequest) -> str | None:
        answered, choice = anyio.Event(), list[str]()
        await self.ask.send((request, answered, choice))
        await answered.wait()
        return choice[0]

    async def next(self) -> Question:
        return await self.asked.receive()


def options(tag: str) -> list[dict[str, Any]]:
    return [
        {"optionId": f"allow-{tag}", "name": "Allow", "kind": "allow_once"},
        {"optionId": f"reject-{tag}", "name": "Reject", "kind": "reject_once"},
    ]


def params(tag: str) -> dict[str, Any]:
    return {
        "sessionId": "mem-steer",
        "toolCall": {"toolCallId": f"t-{tag}", "title": f"Run {tag}"},
        "options": options(tag),
    }


@contextlib.asynccontextmanager
async def session(workspace: Path, app: App) -> AsyncIterator[tuple[StdioTransport, HandPeer]]:
    with anyio.fail_after(30), app.ask, app.asked:
        async with (
            hand_peer() as peer,
            connect_stdio_transport(
                peer.reader, peer.writer, workspace=workspace, permission_policy=app
            ) as t,
        ):
            await t.initialize()
            await t.new_session(str(workspace))
            yield t, peer


async def drain(t: StdioTransport) -> list[Any]:
    """Every event of a closed transport."""
    with anyio.fail_after(10):
        return [event async for event in t.events()]


async def answered_once(peer: HandPeer) -> None:
    """No reply beyond those read: nothing was answered twice."""
    await anyio.wait_all_tasks_blocked()
    assert peer.replies.statistics().current_buffer_used == 0


def outcome(reply: dict[str, Any]) -> str:
    result: dict[str, Any] = reply["result"]["outcome"]
    return str(result.get("optionId", result["outcome"]))


@pytest.mark.both_backends
async def test_ids_one_and_quoted_one_are_two_requests(tmp_path: Path) -> None:
    """The agent asks under id 1 and, while that waits, under id "1": the app gets two
    questions with two ids, and each answer goes back under exactly its own id (the number
    a number, the string a string)."""
    app = App()
    async with session(tmp_path, app) as (_, peer):
        await peer.request(1, "session/request_permission", params("number"))
        number, number_answered, number_choice = await app.next()
        await peer.request("1", "session/request_permission", params("string"))
        string, string_answered, string_choice = await app.next()
        assert (number.request_id, number.tool_call_id) == ("1", "t-number")
        assert (string.request_id, string.tool_call_id) == ('"1"', "t-string")
        string_choice.append("allow-string")
        string_answered.set()
        reply = await peer.next_reply()
        assert type(reply["id"]) is str and reply["id"] == "1"
        assert outcome(reply) == "allow-string"
        number_choice.append("reject-number")
        number_answered.set()
        reply = await peer.next_reply()
        assert type(reply["id"]) is int and reply["id"] == 1
        assert outcome(reply) == "reject-number"
        await answered_once(peer)


# every id a hostile agent might pick, at once, each to get its own answer
HOSTILE_IDS: list[tuple[Any, str]] = [
    (1, "1"),
    ("1", '"1"'),
    ('"1"', json.dumps('"1"')),
    (json.dumps('"1"'), json.dumps(json.dumps('"1"'))),
    (-1, "-1"),
    ("-1", '"-1"'),
    (0, "0"),
    ("0", '"0"'),
    ("01", '"01"'),
    ("", '""'),
    ("-", "-"),
    ("1.0", "1.0"),
    ("true", "true"),
    ("null", "null"),
    ("perm-7", "perm-7"),
    ("١", "١"),  # a digit, but not one a number is written with
    (" 1", " 1"),
    (2**64, str(2**64)),
    (-(2**70), str(-(2**70))),
    (str(2**64), json.dumps(str(2**64))),
    (10 ** (MAX_PERMISSION_ID_CHARS - 1), "1" + "0" * (MAX_PERMISSION_ID_CHARS - 1)),
    ("x" * MAX_PERMISSION_ID_CHARS, "x" * MAX_PERMISSION_ID_CHARS),
]


def test_the_app_facing_id_of_each_hostile_id() -> None:
    assert [permission_request_id(wire) for wire, _ in HOSTILE_IDS] == [
        app for _, app in HOSTILE_IDS
    ]
    assert len({app for _, app in HOSTILE_IDS}) == len(HOSTILE_IDS)


TEXT = st.text(st.characters(exclude_categories=["Cs"]))  # what a JSON string decodes to
WIRE_IDS = st.one_of(
    st.integers(),
    TEXT,
    st.integers().map(str),  # strings that read as a number
    TEXT.map(lambda text: '"' + text),  # or as another string's JSON text
    st.integers().map(json.dumps).map(json.dumps),
)


@settings(max_examples=500, deadline=None)
@given(st.lists(WIRE_IDS, unique_by=lambda wire: (type(wire), wire), max_size=8))
def test_distinct_ids_have_distinct_app_ids(wires: list[int | str]) -> None:
    app_ids = [permission_request_id(wire) for wire in wires]
    assert len(set(app_ids)) == len(wires)
    assert all(permission_request_id(wire) == str(wire) for wire in wires if type(wire) is int)


@pytest.mark.both_backends
async def test_every_distinct_id_is_its_own_request_with_its_own_answer(tmp_path: Path) -> None:
    """All the ids at once, all waiting together: the app sees each under its own id, and
    each reply carries exactly the id it answers (value and JSON type) and its own answer."""
    app = App()
    async with session(tmp_path, app) as (_, peer):
        for n, (wire, _) in enumerate(HOSTILE_IDS):
            await peer.request(wire, "session/request_permission", params(str(n)))
        asked = [await app.next() for _ in HOSTILE_IDS]
        by_tool = {request.tool_call_id: request.request_id for request, _, _ in asked}
        assert by_tool == {f"t-{n}": app_id for n, (_, app_id) in enumerate(HOSTILE_IDS)}
        for request, answered, choice in reversed(asked):  # answered in the other order
            choice.append(f"allow-{request.tool_call_id[2:]}")
            answered.set()
        replies = [await peer.next_reply() for _ in HOSTILE_IDS]
        got = sorted((json.dumps(r["id"]), outcome(r)) for r in replies)
        want = sorted((json.dumps(wire), f"allow-{n}") for n, (wire, _) in enumerate(HOSTILE_IDS))
        assert got == want
        await answered_once(peer)


@pytest.mark.both_backends
async def test_a_reused_id_reaches_the_app_under_the_same_id(tmp_path: Path) -> None:
    """The same JSON-RPC id twice while the first waits is one id to the app (the runtime's
    broker refuses the second as the agent's protocol error); each still gets one answer."""
    app = App()
    async with session(tmp_path, app) as (_, peer):
        await peer.request(5, "session/request_permission", params("a"))
        await peer.request(5, "session/request_permission", params("b"))
        first, second = await app.next(), await app.next()
        assert [(q.request_id, q.tool_call_id) for q, _, _ in (first, second)] == [
            ("5", "t-a"),
            ("5", "t-b"),
        ]
        for (_, answered, choice), answer in ((first, "allow-a"), (second, "reject-b")):
            choice.append(answer)
            answered.set()
        replies = [await peer.next_reply() for _ in range(2)]
        assert sorted((r["id"], outcome(r)) for r in replies) == [(5, "allow-a"), (5, "reject-b")]
        await answered_once(peer)


@pytest.mark.both_backends
@pytest.mark.parametrize(
    "wire",
    [
        "x" * (MAX_PERMISSION_ID_CHARS + 1),
        "9" * MAX_PERMISSION_ID_CHARS,
        10**MAX_PERMISSION_ID_CHARS,
    ],
    ids=["long-string", "long-digit-string", "huge-number"],
)
async def test_an_id_too_long_to_keep_is_refused_and_reported(tmp_path: Path, wire: Any) -> None:
    """An id whose app-facing form is longer than MAX_PERMISSION_ID_CHARS never reaches the
    app: the agent gets -32600 under its own id, the app a protocol error; the next request
    is served."""
    app = App()
    async with session(tmp_path, app) as (t, peer):
        await peer.request(wire, "session/request_permission", params("long"))
        reply = await peer.next_reply()
        assert reply["id"] == wire and type(reply["id"]) is type(wire)
        assert reply["error"]["code"] == -32600
        assert reply["error"]["data"]["details"] == (
            f"permission request id longer than {MAX_PERMISSION_ID_CHARS} characters"
            f" ({len(permission_request_id(wire))}): refused"
        )
        await peer.request(2, "session/request_permission", params("next"))
        request, answered, choice = await app.next()
        assert request.request_id == "2"
        choice.append("allow-next")
        answered.set()
        reply = await peer.next_reply()
        assert (reply["id"], outcome(reply)) == (2, "allow-next")
    told = [e.error for e in await drain(t) if isinstance(e, ProtocolErrorEvent)]
    assert len(told) == 1
    assert told[0].startswith(
        f"permission request id longer than {MAX_PERMISSION_ID_CHARS} characters"
    )
    assert app.asked.statistics().current_buffer_used == 0  # the long one was never asked


@pytest.mark.both_backends
@pytest.mark.parametrize(
    "bad_id",
    [b"1.0", b"true", b"null", b"[1]", b'{"id": 1}', b"9" * 5000],
    ids=["1.0", "true", "null", "array", "object", "beyond-any-integer"],
)
async def test_an_id_that_is_no_id_is_refused_while_1_waits(tmp_path: Path, bad_id: bytes) -> None:
    """While id 1 waits, a request under an id JSON-RPC does not allow (or an integer too
    large to read) is answered -32600 under id null and reported; the app is not asked it,
    and 1 still gets its own answer."""
    app = App()
    async with session(tmp_path, app) as (t, peer):
        await peer.request(1, "session/request_permission", params("one"))
        request, answered, choice = await app.next()
        method = b'"method":"session/request_permission","params":'
        bad = (
            b'{"jsonrpc":"2.0","id":' + bad_id + b"," + method + json.dumps(params("bad")).encode()
        )
        await peer.answers.send(bad + b"}\n")
        reply = await peer.next_reply()
        assert (reply["id"], reply["error"]["code"]) == (None, -32600)
        choice.append("allow-one")
        answered.set()
        reply = await peer.next_reply()
        assert (reply["id"], outcome(reply)) == (1, "allow-one")
        assert request.request_id == "1"
        await answered_once(peer)
    told = [e.error for e in await drain(t) if isinstance(e, ProtocolErrorEvent)]
    assert len(told) == 1 and told[0].startswith("request with "), told
    assert app.asked.statistics().current_buffer_used == 0  # the bad one was never asked
