"""The two permission events speak one vocabulary: the agent's ``PermissionRequest`` and the
lifecycle's ``PermissionRequested`` both name the offered answers ``options`` and carry the
ACP ``session_id``. ``permission_options``, the request's former name, still works for a
release, with a DeprecationWarning."""

from __future__ import annotations

import re

import msgspec
import pytest

from acpfsm.adapters.events import (
    PermissionOption,
    PermissionRequest,
    decode_event,
    encode_event,
)
from acpfsm.runtime import events as le

ALLOW = PermissionOption(option_id="ok", name="Allow", kind="allow_once")


def test_both_events_name_the_answers_options() -> None:
    request = PermissionRequest(request_id="1", session_id="s-1", options=[ALLOW])
    assert request.options == [ALLOW]
    fields = set(PermissionRequest.__struct_fields__)
    published = set(le.PermissionRequested.__struct_fields__)
    assert {"options", "session_id", "request_id"} <= fields & published
    assert "permission_options" not in fields | published
    encoded = msgspec.json.decode(encode_event(request))
    assert encoded["options"] == [{"option_id": "ok", "name": "Allow", "kind": "allow_once"}]
    assert decode_event(encode_event(request)) == request


def test_the_former_name_works_with_a_deprecation_warning() -> None:
    with pytest.warns(
        DeprecationWarning, match=re.escape("PermissionRequest(permission_options=…) is deprecated")
    ):
        request = PermissionRequest(request_id="1", permission_options=[ALLOW])
    assert request.options == [ALLOW]
    with pytest.warns(DeprecationWarning, match="permission_options is deprecated: use options"):
        assert request.permission_options == [ALLOW]
