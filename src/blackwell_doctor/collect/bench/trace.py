"""A request trace read for ``bench --trace FILE``: when each request was sent, its lengths,
and (Mooncake) the prompt blocks it shares with others.

Formats, each read from its source:

- **Mooncake** (kvcache-ai/Mooncake, ``FAST25-release/README.md`` and the traces beside it,
  commit 3b5a594): JSON Lines, one request a line, ``timestamp`` (ms since the trace's
  start), ``input_length`` and ``output_length`` (tokens), ``hash_ids`` (the prompt's
  blocks of 512 tokens: "Identical hash IDs indicate reusable prefix KV cache blocks").
  A request's ``input_length`` lies within its last block: (n - 1) x 512 < input_length <=
  n x 512 for n hash ids (every line of the three released traces does; aiperf's
  ``PromptGenerator._generate_cached_prompt`` refuses a line that does not). Other keys
  are ignored.
- **BurstGPT** (HPMLL/BurstGPT ``README.md``, "Schema"): CSV with a header row; the
  columns read are ``Timestamp`` (seconds since the first day's 0:00), ``Request tokens``
  and ``Response tokens`` (``Model``, ``Total tokens``, ``Log Type`` and the newer
  ``Session ID``, ``Elapsed time`` are not needed). A row with ``Response tokens`` 0 is a
  request that failed in the traced service (the README: "some failure that Response
  tokens are 0s"; vLLM's ``BurstGPTDataset`` drops them too): it is skipped and counted.

The whole file is checked before anything is sent: a malformed line, a negative, decreasing
or absurd timestamp, or an absurd length is one :class:`TraceError` naming the file and the
line (exit 2). It is read line by line (``collect.inputfile.iter_input_lines``) and kept in
columns of numbers (report/column.py: the first 16,384 values of each in memory, the rest
in one unnamed temporary file), so memory stays flat however long the file and however many
of its requests are replayed.
"""

from __future__ import annotations

import csv
import math
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from blackwell_doctor.collect.inputfile import MAX_TRACE_LINE, TRACE, iter_input_lines
from blackwell_doctor.facts.errors import UserError
from blackwell_doctor.report.column import Column, Spill, floats, ints

MOONCAKE = "mooncake"
BURSTGPT = "burstgpt"
FORMATS = (MOONCAKE, BURSTGPT)
AUTO = "auto"
# Mooncake FAST25-release/README.md: "The block size is 512 tokens."
MOONCAKE_BLOCK_TOKENS = 512
# The lengths one request may ask for (the limits of a shape: ruledata/shapes.py).
MAX_INPUT_TOKENS = 10_000_000
MAX_OUTPUT_TOKENS = 1_000_000
# What a replay may hold: requests, and every output token's arrival time (as shapes).
MAX_REQUESTS = 1_000_000
MAX_TOKENS_KEPT = 20_000_000
# A timestamp past this many seconds (31 years) is no trace's.
MAX_TIMESTAMP_S = 1e9
# BurstGPT's columns read (its README's schema).
_BURST_TIME = "Timestamp"
_BURST_IN = "Request tokens"
_BURST_OUT = "Response tokens"


class TraceError(UserError):
    """A trace file that cannot be replayed: one line naming the file (and the line)."""


class _MooncakeLine(msgspec.Struct):
    timestamp: int | float
    input_length: int
    output_length: int
    hash_ids: list[int] = msgspec.field(default_factory=list)


_decode_mooncake = msgspec.json.Decoder(_MooncakeLine).decode


@dataclass(frozen=True)
class Trace:
    """The requests of a trace to replay, in order. Request ``i`` is sent ``offsets_s[i]``
    seconds after the first (the trace's own times, before any ``--time-scale``), asks for
    ``input_tokens[i]`` prompt tokens and ``output_tokens[i]`` answer tokens, and its
    prompt is made of the blocks ``hash_ids[hash_starts[i]:hash_starts[i + 1]]`` (none for
    BurstGPT: each prompt its own)."""

    path: str
    format: str
    block_tokens: int | None  # tokens per hash id (Mooncake); None: no blocks
    offsets_s: Column[float]
    input_tokens: Column[int]
    output_tokens: Column[int]
    hash_starts: Column[int]  # len(self) + 1 entries
    hash_ids: Column[int]
    rows: int  # requests in the file (valid rows, BurstGPT's failed ones included)
    skipped: int  # rows without an answer, not replayed (BurstGPT: Response tokens 0)
    cut: int  # rows after --requests or past --duration, not replayed

    def __len__(self) -> int:
        return len(self.offsets_s)

    def hashes(self, index: int) -> Sequence[int]:
        return self.hash_ids.read(self.hash_starts[index], self.hash_starts[index + 1])


@dataclass
class _Builder:
    path: str
    format: str
    block_tokens: int | None
    requests: int | None
    duration_s: float | None
    offsets: Column[float]
    inputs: Column[int]
    outputs: Column[int]
    starts: Column[int]
    ids: Column[int]
    first: float | None = None
    last: float = -math.inf
    rows: int = 0
    skipped: int = 0
    cut: int = 0
    tokens_kept: int = 0

    def error(self, line: int, why: str) -> TraceError:
        return TraceError(f"trace {self.path}, line {line}: {why}")

    def add(self, line: int, when_s: float, inputs: int, outputs: int, hashes: list[int]) -> None:
        if not math.isfinite(when_s) or when_s < 0:
            raise self.error(line, f"timestamp {when_s:g} is not a time since the trace's start")
        if when_s > MAX_TIMESTAMP_S:
            raise self.error(line, f"timestamp {when_s:g} s is past {MAX_TIMESTAMP_S:g} s")
        if when_s < self.last:
            raise self.error(
                line,
                f"timestamp {when_s:g} s comes before the previous line's {self.last:g} s "
                "(a trace is in the order its requests were sent)",
            )
        self.last = when_s
        if not 0 <= inputs <= MAX_INPUT_TOKENS:
            raise self.error(line, f"input length {inputs} is outside 0..{MAX_INPUT_TOKENS:,}")
        if not 0 <= outputs <= MAX_OUTPUT_TOKENS:
            raise self.error(line, f"output length {outputs} is outside 0..{MAX_OUTPUT_TOKENS:,}")
        if self.block_tokens is not None and hashes:
            n, b = len(hashes), self.block_tokens
            if not (n - 1) * b < inputs <= n * b:
                raise self.error(
                    line,
                    f"input_length {inputs} does not end in the last of its {n} hash ids of "
                    f"{b} tokens ({(n - 1) * b + 1:,} to {n * b:,} tokens; --trace-block-tokens "
                    "sets the block size)",
                )
        self.rows += 1
        if outputs == 0:
            # No answer to ask for (BurstGPT: a request that failed in the traced service).
            self.skipped += 1
            return
        if self.first is None:
            self.first = when_s
        offset = when_s - self.first
        if (self.requests is not None and len(self.offsets) >= self.requests) or (
            self.duration_s is not None and offset > self.duration_s
        ):
            self.cut += 1
            return
        if len(self.offsets) >= MAX_REQUESTS:
            raise self.error(
                line,
                f"more than {MAX_REQUESTS:,} requests to replay: replay part of the trace "
                "with --requests N or --duration S",
            )
        self.tokens_kept += outputs
        if self.tokens_kept > MAX_TOKENS_KEPT:
            raise self.error(
                line,
                f"the requests up to here ask for more than {MAX_TOKENS_KEPT:,} output tokens "
                "(the time of every token is kept): replay part of the trace with "
                "--requests N or --duration S",
            )
        self.offsets.append(offset)
        self.inputs.append(inputs)
        self.outputs.append(outputs)
        self.ids.extend(hashes)
        self.starts.append(len(self.ids))

    def done(self) -> Trace:
        if not self.offsets:
            what = "no request" if not self.rows else "no request with an answer to replay"
            raise TraceError(f"trace {self.path}: {what}")
        return Trace(
            path=self.path,
            format=self.format,
            block_tokens=self.block_tokens,
            offsets_s=self.offsets,
            input_tokens=self.inputs,
            output_tokens=self.outputs,
            hash_starts=self.starts,
            hash_ids=self.ids,
            rows=self.rows,
            skipped=self.skipped,
            cut=self.cut,
        )


def read_trace(
    path: Path | str,
    *,
    format: str = AUTO,
    block_tokens: int = MOONCAKE_BLOCK_TOKENS,
    requests: int | None = None,
    duration_s: float | None = None,
) -> Trace:
    """The trace at ``path`` in ``format`` (``auto``: told from its first line), checked
    whole; only its first ``requests`` requests, or those within ``duration_s`` seconds of
    the first (trace time), are kept. :class:`TraceError` (or an InputError for a file
    that cannot be read) on anything that cannot be replayed."""
    name = str(path)
    lines = _nonblank(iter_input_lines(path, TRACE, max_line=MAX_TRACE_LINE))
    first = next(lines, None)
    if first is None:
        raise TraceError(f"trace {name}: empty file")
    if format == AUTO:
        format = _detect(name, first[1])
    spill = Spill(tempfile.TemporaryFile)
    builder = _Builder(
        path=name,
        format=format,
        block_tokens=block_tokens if format == MOONCAKE else None,
        requests=requests,
        duration_s=duration_s,
        offsets=floats(spill),
        inputs=ints(spill),
        outputs=ints(spill),
        starts=ints(spill, [0]),
        ids=ints(spill),
    )
    if format == MOONCAKE:
        _read_mooncake(builder, first, lines)
    elif format == BURSTGPT:
        _read_burstgpt(builder, first, lines)
    else:
        raise TraceError(f"unknown trace format {format!r}: one of {', '.join(FORMATS)}")
    return builder.done()


def _nonblank(lines: Iterator[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    return ((n, text) for n, text in lines if text.strip())


def _detect(name: str, first: str) -> str:
    text = first.lstrip("\ufeff").lstrip()
    if text.startswith("{"):
        return MOONCAKE
    if _BURST_TIME in text and _BURST_IN in text:
        return BURSTGPT
    raise TraceError(
        f"trace {name}: line 1 is neither a JSON object (Mooncake) nor BurstGPT's CSV header "
        f"({_BURST_TIME},...,{_BURST_IN},{_BURST_OUT},...): give --trace-format"
    )


def _read_mooncake(
    builder: _Builder, first: tuple[int, str], lines: Iterator[tuple[int, str]]
) -> None:
    for number, text in _chain((first[0], first[1].lstrip("\ufeff")), lines):
        try:
            row = _decode_mooncake(text)
        except msgspec.ValidationError as exc:
            raise builder.error(number, f"not a Mooncake request: {exc}") from None
        except msgspec.DecodeError as exc:
            raise builder.error(number, f"not JSON: {exc}") from None
        if isinstance(row.timestamp, float) and not math.isfinite(row.timestamp):
            raise builder.error(number, "timestamp is not a number")
        if any(not -(2**63) <= h < 2**63 for h in row.hash_ids):
            raise builder.error(number, "a hash id outside the 64-bit integers")
        builder.add(
            number, row.timestamp / 1000.0, row.input_length, row.output_length, row.hash_ids
        )


def _chain(first: tuple[int, str], rest: Iterator[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    yield first
    yield from rest


def _read_burstgpt(
    builder: _Builder, header: tuple[int, str], lines: Iterator[tuple[int, str]]
) -> None:
    columns = next(csv.reader([header[1].lstrip("\ufeff")]))
    names = [c.strip() for c in columns]
    missing = [c for c in (_BURST_TIME, _BURST_IN, _BURST_OUT) if c not in names]
    if missing:
        raise builder.error(
            header[0], f"a BurstGPT header without {', '.join(repr(m) for m in missing)}"
        )
    at_time, at_in, at_out = (names.index(c) for c in (_BURST_TIME, _BURST_IN, _BURST_OUT))
    for number, text in lines:
        try:
            row = next(csv.reader([text]))
        except csv.Error as exc:
            raise builder.error(number, f"not a CSV row: {exc}") from None
        if len(row) != len(names):
            raise builder.error(number, f"{len(row)} columns where the header has {len(names)}")
        try:
            when = float(row[at_time])
        except ValueError:
            raise builder.error(
                number, f"Timestamp {row[at_time][:40]!r} is not a number"
            ) from None
        lengths = []
        for at, column in ((at_in, _BURST_IN), (at_out, _BURST_OUT)):
            value = row[at].strip()
            digits = value.removeprefix("-")
            if not (digits.isascii() and digits.isdigit()) or len(value) > 12:
                raise builder.error(number, f"{column} {value[:40]!r} is not a whole number")
            lengths.append(int(value))
        builder.add(number, when, lengths[0], lengths[1], [])
