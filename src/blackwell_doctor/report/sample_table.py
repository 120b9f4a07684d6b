"""A shape's measured requests held as columns: what a run keeps of each request while it
measures, flat in memory whatever the number of requests.

A :class:`~blackwell_doctor.report.bench.RequestSample` object with its list of token gaps
costs ~2.7 KB per request of 16 tokens in CPython (the objects, their floats, the list).
:class:`SampleTable` keeps the same values in typed arrays: 8 bytes per float (the start,
TTFT, E2E and every token gap), 8 per count, one byte for ``ok``; the strings of a failure
(its kind and detail) only for failed requests, and each distinct degenerate verdict once.
It is a ``Sequence[RequestSample]``: ``table[i]`` builds request i's sample with exactly the
values it was given (a ``start_ms`` is always written, as every measured request's is:
msgspec omits only the default object itself), so every reader of ``ShapeResult.samples``
reads it as it read the list, and the JSON writer (render/common.py's json_chunks) writes it
a batch at a time.

What a percentile needs it keeps as numbers: the token gaps of every request, pooled, are
the ITL percentiles' samples (report/bench_metrics.py reads them from :meth:`gaps_ms`
without making an object of each).

Given a file to spill to (``SampleTable(spill=tempfile.TemporaryFile)``, from app/), every
column is a :class:`~blackwell_doctor.report.column.Column`: its first 16,384 values in
memory, the rest in that one unnamed file, so the table is flat in memory however many
requests it holds; the series its readers derive (report/bench_metrics.py) are columns of
the same file (:meth:`floats`, :meth:`ints`).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import IO

from blackwell_doctor.report.bench import RequestSample
from blackwell_doctor.report.column import Column, Spill, flags
from blackwell_doctor.report.indexed import Indexed

_NONE = -1  # a count the request does not have (None)
_NAN = math.nan  # a time the request does not have (None): no measured time is NaN


class SampleTable(Indexed[RequestSample]):
    """Requests appended in the order they ended, read back as RequestSample objects."""

    out_of_range = "sample index out of range"

    def __init__(self, spill: Callable[[], IO[bytes]] | None = None) -> None:
        # The file past each column's first values (none: every value in memory).
        self._spill = None if spill is None else Spill(spill)
        self.ok = flags(self._spill)
        self.start_ms = self.floats()
        self.ttft_ms = self.floats()
        self.e2e_ms = self.floats()
        self.prompt_tokens = self.ints()
        self.output_tokens = self.ints()
        self.reasoning_tokens = self.ints()
        # Token gaps of every request, one after the other; request i's end at gaps_end[i].
        self.gaps = self.floats()
        self.gaps_end = self.ints()
        # Kind and detail of each failed request (by position); turns of --multi-turn.
        self.failures: dict[int, tuple[str | None, str | None]] = {}
        self.turns: Column[int] | None = None
        # Degenerate verdicts: each distinct one once, each request its code (0: none).
        self.verdicts: list[str] = []
        self._verdict_codes: dict[str, int] = {}
        self.degenerate = self.ints()
        self._order: Sequence[int] | None = None  # a view's rows (ordered)

    def floats(self, values: Iterable[float] = ()) -> Column[float]:
        """A column of floats in this table's file (``values`` appended)."""
        return Column("d", self._spill, values)

    def ints(self, values: Iterable[int] = ()) -> Column[int]:
        """A column of integers in this table's file (``values`` appended)."""
        return Column("q", self._spill, values)

    def append(self, sample: RequestSample) -> None:
        """Keep ``sample`` (its values, not the object)."""
        self.ok.append(1 if sample.ok else 0)
        self.start_ms.append(sample.start_ms)
        self.ttft_ms.append(_NAN if sample.ttft_ms is None else sample.ttft_ms)
        self.e2e_ms.append(_NAN if sample.e2e_ms is None else sample.e2e_ms)
        self.prompt_tokens.append(_NONE if sample.prompt_tokens is None else sample.prompt_tokens)
        self.output_tokens.append(_NONE if sample.output_tokens is None else sample.output_tokens)
        self.reasoning_tokens.append(
            _NONE if sample.reasoning_tokens is None else sample.reasoning_tokens
        )
        self.gaps.extend(sample.itl_ms)
        self.gaps_end.append(len(self.gaps))
        if sample.error is not None or sample.detail is not None:
            self.failures[len(self.ok) - 1] = (sample.error, sample.detail)
        if sample.turn is not None or self.turns is not None:
            if self.turns is None:
                self.turns = self.ints(array("q", bytes(8 * (len(self.ok) - 1))))
            self.turns.append(0 if sample.turn is None else sample.turn)
        code = 0
        if sample.degenerate is not None:
            code = self._verdict_codes.get(sample.degenerate, 0)
            if not code:
                self.verdicts.append(sample.degenerate)
                code = self._verdict_codes[sample.degenerate] = len(self.verdicts)
        self.degenerate.append(code)

    def ordered(self, order: Sequence[int]) -> SampleTable:
        """The same requests read in ``order`` (positions of this table; it shares the
        columns, it copies none; a Column ``order`` is kept as it is)."""
        view = SampleTable.__new__(SampleTable)
        view.__dict__.update(self.__dict__)
        view._order = order if isinstance(order, Column) else array("q", order)
        return view

    def scrubbed(self, clean: Callable[[str], str]) -> SampleTable:
        """This table with ``clean`` applied to each of its strings (render's one sanitising
        step, report/sanitize.py), sharing the columns."""
        view = SampleTable.__new__(SampleTable)
        view.__dict__.update(self.__dict__)
        view.failures = {
            k: (None if e is None else clean(e), None if d is None else clean(d))
            for k, (e, d) in self.failures.items()
        }
        view.verdicts = [clean(v) for v in self.verdicts]
        return view

    def strings(self) -> Iterator[str]:
        """Every string the samples hold (the sanitiser's check)."""
        for error, detail in self.failures.values():
            if error is not None:
                yield error
            if detail is not None:
                yield detail
        yield from self.verdicts

    def completed(self) -> int:
        """How many requests succeeded."""
        return sum(self.ok)

    def error_counts(self) -> dict[str, int]:
        """Failed requests by error kind, kinds in the order first met (as a walk counts
        them)."""
        counts: dict[str, int] = {}
        for row in sorted(self.failures) if self._order is None else self.rows():
            error = self.failures.get(row, (None, None))[0]
            if error:
                counts[error] = counts.get(error, 0) + 1
        return counts

    def __len__(self) -> int:
        return len(self.ok) if self._order is None else len(self._order)

    def _at(self, index: int) -> RequestSample:
        return self._sample(self._row(index))

    def __iter__(self) -> Iterator[RequestSample]:
        for k in range(len(self)):
            yield self._sample(self._row(k))

    def _row(self, k: int) -> int:
        return k if self._order is None else self._order[k]

    def rows(self) -> Sequence[int]:
        """The rows of the columns, in reading order."""
        return range(len(self.ok)) if self._order is None else self._order

    def gaps_ms(self, row: int) -> array[float]:
        """Row ``row``'s token gaps (a copy)."""
        return self.gaps.read(self.gaps_end[row - 1] if row else 0, self.gaps_end[row])

    def _sample(self, row: int) -> RequestSample:
        error, detail = self.failures.get(row, (None, None))
        ttft, e2e = self.ttft_ms[row], self.e2e_ms[row]
        prompt, output = self.prompt_tokens[row], self.output_tokens[row]
        reasoning, code = self.reasoning_tokens[row], self.degenerate[row]
        turn = self.turns[row] if self.turns is not None else 0
        return RequestSample(
            turn=turn or None,
            ok=bool(self.ok[row]),
            error=error,
            detail=detail,
            start_ms=self.start_ms[row],
            ttft_ms=None if math.isnan(ttft) else ttft,
            e2e_ms=None if math.isnan(e2e) else e2e,
            itl_ms=self.gaps_ms(row).tolist(),
            prompt_tokens=None if prompt == _NONE else prompt,
            output_tokens=None if output == _NONE else output,
            reasoning_tokens=None if reasoning == _NONE else reasoning,
            degenerate=self.verdicts[code - 1] if code else None,
        )
