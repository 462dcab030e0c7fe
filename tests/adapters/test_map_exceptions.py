"""``map_exceptions``: the one place each adapter boundary translates foreign exceptions."""

from __future__ import annotations

import anyio
import pytest

from acpfsm.adapters.errors import (
    AcpfsmError,
    ExceptionMapping,
    LocalProtocolError,
    TransportClosed,
    TransportError,
    map_exceptions,
)


def test_a_mapped_exception_becomes_ours_with_the_cause_chained() -> None:
    original = ConnectionResetError(104, "Connection reset by peer")
    gone: ExceptionMapping = {OSError: lambda exc: TransportClosed(f"gone: {exc.strerror}")}
    with pytest.raises(TransportClosed) as raised, map_exceptions(gone):
        raise original
    assert str(raised.value) == "gone: Connection reset by peer"
    assert raised.value.__cause__ is original


def test_an_error_class_is_called_with_the_text() -> None:
    with (
        pytest.raises(LocalProtocolError, match=r"^bad value$") as raised,
        map_exceptions({ValueError: LocalProtocolError}),
    ):
        raise ValueError("bad value")
    assert isinstance(raised.value.__cause__, ValueError)


def test_the_first_matching_key_wins_and_tuples_are_keys() -> None:
    mapping: ExceptionMapping = {
        (KeyError, IndexError): lambda exc: LocalProtocolError("lookup"),
        OSError: lambda exc: TransportError("os"),
        FileNotFoundError: lambda exc: TransportClosed("never: OSError comes first"),
    }
    for raised_type, expected in (
        (IndexError, "lookup"),
        (KeyError, "lookup"),
        (FileNotFoundError, "os"),
    ):
        with pytest.raises(AcpfsmError) as raised, map_exceptions(mapping):
            raise raised_type()
        assert str(raised.value) == expected
        assert type(raised.value) is not TransportClosed


def test_an_unmapped_exception_passes_through_unchanged() -> None:
    original = ZeroDivisionError("division by zero")
    with pytest.raises(ZeroDivisionError) as raised, map_exceptions({OSError: TransportError}):
        raise original
    assert raised.value is original and raised.value.__cause__ is None
    with map_exceptions({OSError: TransportError}):
        pass  # nothing raised: nothing happens


@pytest.mark.both_backends
async def test_cancellation_passes_through() -> None:
    with anyio.CancelScope() as scope:
        with map_exceptions({Exception: TransportError}):
            scope.cancel()
            await anyio.sleep(1)
    assert scope.cancelled_caught
