"""Pure declarations of acpfsm's lifecycle statecharts: no I/O, no await, no clock."""

from .vocab import FALLBACK_AUTHORIZING as FALLBACK_AUTHORIZING
from .vocab import ErrorClass as ErrorClass

__all__ = ["FALLBACK_AUTHORIZING", "ErrorClass"]
