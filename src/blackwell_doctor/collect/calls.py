"""The error a native library's adapter raises for a failed call, and how a collector
records one: a reason token as :class:`Unavailable` (collect/cuda.py, collect/nvml.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from blackwell_doctor.facts.document import Unavailable

_T = TypeVar("_T")


class CallError(Exception):
    """A native library call failed; ``reason`` is the token to record as Unavailable."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def attempt(call: Callable[[], _T]) -> _T | Unavailable:
    """``call()``, or Unavailable with the reason of the CallError it raised."""
    try:
        return call()
    except CallError as exc:
        return Unavailable(exc.reason)
