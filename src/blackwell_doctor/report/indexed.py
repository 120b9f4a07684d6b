"""A read-only sequence whose items are computed from their index: a sorted chunk read back
from a file, an order statistic found by a search, a table's row read as a sample."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import TypeVar, overload

T = TypeVar("T")


class Indexed(Sequence[T]):
    """A subclass gives ``__len__`` and ``_at`` (for ``0 <= index < len``); this gives the
    sequence's indexing: a slice as a list of its items, a negative index counted from the
    end, and IndexError (saying ``out_of_range``) past either end."""

    out_of_range = "index out of range"

    @abstractmethod
    def _at(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            return [self._at(i) for i in range(*index.indices(len(self)))]
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(self.out_of_range)
        return self._at(index)
