"""Find catalogue signatures in a byte stream, at grep speed, in constant memory.

How it works: the stream is read in large chunks (8 MiB). Every signature names exact
*literals*; one multi-literal search runs over the whole chunk, and only around a hit is a
line cut out, decoded, stripped of ANSI colour codes and checked against the signature's
regex. Line numbers come from counting newlines between hits (``bytes.count``, memchr
speed). A line is never held whole: a line longer than the chunk is searched in pieces
with a small overlap, and only a window of a few KiB around a hit is ever decoded.

Why this approach (measured by ``benchmarks/scan_logs.py`` and its predecessor on a
256 MiB vLLM-like log, 40 literals, 153 hits, 2-core x86_64 VM, CPython 3.11;
GNU grep 3.8 ``grep -E -n -f`` took 0.96-1.08 s there):

=====================================================  ===========
multi-literal search over 8 MiB chunks                  time
=====================================================  ===========
read + newline count only (the floor)                   0.27 s
``hyperscan`` 0.9.1 database of literals                 0.46 s
``google-re2`` alternation of escaped literals           0.77 s
stdlib ``bytes.find`` per literal (40 passes)            2.74 s
``pyahocorasick`` (str only: each chunk decoded)         7.07 s
stdlib ``re`` alternation of escaped literals           12.91 s
=====================================================  ===========

``google-re2`` is used: under grep's time with room for the per-hit work, one API, and the
same release (1.1) has wheels for CPython 3.11 and 3.12 on manylinux x86_64 and aarch64.
``hyperscan`` is faster but its aarch64 wheels lag (0.7.x against 0.9.x on x86_64) and
it is an x86-first engine. Without ``re2`` installed the scanner falls back to the stdlib
``bytes.find`` loop: the same results, about 2.7x grep's time.

A literal that starts inside another literal's match at the same place is not seen by the
RE2 alternation (leftmost, non-overlapping); the catalogue's literals do not overlap that
way, and each signature counts once per line anyway.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from blackwell_doctor.facts import LogFinding
from blackwell_doctor.logs import context
from blackwell_doctor.logs.catalogue import Catalogue
from blackwell_doctor.redact import redact_text

CHUNK_BYTES = 8 << 20
# A line without a newline is searched in pieces once it is this long.
LONG_LINE_BYTES = 8 << 20
# Bytes kept either side of a hit: enough for a vLLM prefix and the autotuner's wrapper.
WINDOW_BYTES = 4096
EXCERPT_CHARS = 400

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")

Hits = list[tuple[int, int]]
# finder(buf, start, end): (position, literal index) of every hit in buf[start:end], in order.
Finder = Callable[[bytes, int, int], Hits]


def _re2_finder(literals: list[bytes]) -> Finder | None:
    try:
        import re2  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        return None
    index = {lit: n for n, lit in enumerate(literals)}
    pattern: Any = re2.compile(b"|".join(re.escape(lit) for lit in literals))

    def hits(buf: bytes, start: int, end: int) -> Hits:
        return [(m.start(), index[m.group()]) for m in pattern.finditer(buf, start, end)]

    return hits


def _find_finder(literals: list[bytes]) -> Finder:
    def hits(buf: bytes, start: int, end: int) -> Hits:
        out: Hits = []
        find = buf.find
        for n, lit in enumerate(literals):
            pos = find(lit, start, end)
            while pos != -1:
                out.append((pos, n))
                pos = find(lit, pos + 1, end)
        out.sort()
        return out

    return hits


def make_finder(literals: list[bytes], *, engine: str = "auto") -> Finder:
    """``engine``: ``auto`` (re2 when installed), ``re2`` or ``find`` (stdlib)."""
    if engine in ("auto", "re2"):
        finder = _re2_finder(literals)
        if finder is not None:
            return finder
        if engine == "re2":
            raise RuntimeError("google-re2 is not installed")
    return _find_finder(literals)


def strip_codes(text: str) -> str:
    return _CONTROL.sub("", _ANSI.sub("", text))


def clean_line(raw: bytes) -> str:
    """A line as a person should see it: decoded, colour codes and control bytes gone."""
    return strip_codes(raw.decode("utf-8", errors="replace")).strip()


def line_head(raw: bytes) -> str:
    """The start of a line as text for prefix tests: colour codes and control bytes gone,
    nothing stripped (an indented line stays indented)."""
    return strip_codes(raw[: context.HEAD_BYTES].decode("utf-8", errors="replace"))


def make_excerpt(text: str, anchor: str = "") -> str:
    """At most :data:`EXCERPT_CHARS` characters of a line, secrets redacted. A longer line
    keeps its start when ``anchor`` (the matched text) lies within it; else the excerpt is
    centred on the anchor, with an ellipsis on each cut side."""
    text = redact_text(text)
    if len(text) <= EXCERPT_CHARS:
        return text
    at = text.find(anchor) if anchor else -1
    if at == -1 or at + len(anchor) <= EXCERPT_CHARS - 1:
        return text[: EXCERPT_CHARS - 1] + "…"
    width = EXCERPT_CHARS - 2
    left = max(1, at + len(anchor) // 2 - width // 2)
    if left + width >= len(text):
        return "…" + text[-(EXCERPT_CHARS - 1) :]
    return "…" + text[left : left + width] + "…"


@dataclass
class Occurrences:
    """Everything seen of one signature in one source."""

    first_line: int = 0
    last_line: int = 0
    count: int = 0
    excerpt: str = ""
    n_sum: int = 0  # autotuner-summary: the sum of N


@dataclass
class SourceScanner:
    """Feed it bytes (any chunking), then :meth:`finish` for the findings."""

    catalogue: Catalogue
    name: str
    engine: str = "auto"
    lines: int = 0
    size: int = 0  # bytes read
    occurrences: dict[int, Occurrences] = field(default_factory=dict)
    markers: set[str] = field(default_factory=set)
    # Called with (signature id, line) for every occurrence counted (benchmarks, tests).
    on_occurrence: Callable[[str, int], None] | None = None
    # The autotuner record being followed (context.py): the Skipping line, the transport its
    # lines carry, the last line known to continue it, the next line to classify, and
    # whether more lines may still continue it.
    run_line: int = 0
    run_key: str = ""
    run_last: int = 0
    run_next: int = 0
    run_open: bool = False
    _carry: bytes = b""
    _carry_searched: int = 0
    _finder: Finder | None = None
    _mid_line: bool = False  # the region being scanned starts inside a line

    def __post_init__(self) -> None:
        self._finder = make_finder(self.catalogue.literals, engine=self.engine)

    def feed(self, data: bytes) -> None:
        if not data:
            return
        self.size += len(data)
        start = 0
        if self._carry:
            # Complete the pending line with a small copy, not a copy of the whole chunk.
            nl = data.find(b"\n")
            if nl == -1:
                self._partial(self._carry + data, self._carry_searched)
                return
            head = self._carry + data[: nl + 1]
            self._scan(head, 0, len(head), self._carry_searched)
            self.lines += 1
            self._carry, self._carry_searched = b"", 0
            start = nl + 1
        last_nl = data.rfind(b"\n", start)
        if last_nl == -1:
            self._partial(data[start:] if start else data, 0)
            return
        end = last_nl + 1
        self._scan(data, start, end, start)
        self.lines += data.count(b"\n", start, end)
        self._carry = data[end:]
        self._carry_searched = 0

    def _partial(self, buf: bytes, searched: int) -> None:
        """``buf`` holds no newline: keep it, or search a very long line in pieces, keeping
        only an overlap for literals (and context) that straddle the cut; the line number
        does not change."""
        if len(buf) > LONG_LINE_BYTES:
            self._scan(buf, 0, len(buf), searched)
            keep = self.catalogue.max_literal - 1 + WINDOW_BYTES
            self._carry = buf[-keep:]
            self._carry_searched = len(self._carry)
        else:
            self._carry = buf
            self._carry_searched = searched

    def finish(self) -> list[LogFinding]:
        if self._carry:
            self._scan(self._carry, 0, len(self._carry), self._carry_searched)
            self.lines += 1
            self._carry = b""
        return context.findings(self)

    # ---------------------------------------------------------------- internals

    def _scan(self, buf: bytes, start: int, end: int, searched: int) -> None:
        """Hits in ``buf[start:end]`` (whole lines, or a piece of one long line) not already
        seen: a hit ending inside the first ``searched`` bytes was found by an earlier call."""
        assert self._finder is not None
        literals = self.catalogue.literals
        cursor = start
        line = self.lines + 1
        self._mid_line = searched > start
        if self.run_open:
            self._resume_run(buf, start, end, line)
        for pos, lit in self._finder(buf, start, end):
            if pos + len(literals[lit]) <= searched:
                continue
            line += buf.count(b"\n", cursor, pos)
            cursor = pos
            self._hit(buf, start, end, pos, lit, line)

    def _hit(self, buf: bytes, lo: int, hi: int, pos: int, lit: int, line: int) -> None:
        floor = max(lo, pos - WINDOW_BYTES)
        start = buf.rfind(b"\n", floor, pos) + 1 or floor
        stop = buf.find(b"\n", pos, min(hi, pos + WINDOW_BYTES))
        if stop == -1:
            stop = min(hi, pos + WINDOW_BYTES)
        cat = self.catalogue
        text: str | None = None
        for kind, n in cat.owners[lit]:
            if text is None:
                text = clean_line(buf[start:stop])
            if kind == "marker":
                if cat.marker_regex[n].search(text):
                    self.markers.add(cat.markers[n].id)
                continue
            if cat.signatures[n].id == context.AUTOTUNER_SKIPPED:
                at_line_start = start > floor or (start == lo and not self._mid_line)
                self._open_run(buf, start if at_line_start else -1, pos, hi, line)
            self._signature(n, text, line, cat.literals[lit].decode("utf-8", "replace"))

    # ------------------------------------------------- autotuner records (context.py)

    def _open_run(self, buf: bytes, start: int, pos: int, hi: int, line: int) -> None:
        """A Skipping record starts at ``line``: follow the lines that continue it."""
        if self.run_line == line:
            return  # a second Skipping text on the same line
        self.run_line = self.run_last = line
        self.run_next = line + 1
        self.run_open = True
        # Where the line's start is not in view (a line of many KiB), no transport is known.
        self.run_key = context.transport(line_head(buf[start:pos])) if start >= 0 else ""
        nl = buf.find(b"\n", pos, hi)
        if nl != -1:
            self._walk(buf, nl + 1, hi, line + 1)

    def _resume_run(self, buf: bytes, start: int, end: int, first: int) -> None:
        """A new region: classify its lines that may continue the open record."""
        if not self._mid_line and self.run_next == first:
            self._walk(buf, start, end, first)
        elif self._mid_line and self.run_next == first + 1:
            nl = buf.find(b"\n", start, end)
            if nl != -1:
                self._walk(buf, nl + 1, end, first + 1)

    def _walk(self, buf: bytes, pos: int, end: int, line: int) -> None:
        """Classify the lines starting at ``pos`` (line ``line``) until one does not continue
        the record, the cap is reached or the region ends. Every line start classified has
        its whole line, or megabytes of it, in the region: the result does not depend on
        how the stream was chunked."""
        cap = self.run_line + context.AUTOTUNER_CONTINUATION_LINES
        while pos < end:
            if line > cap:
                self.run_open = False
                return
            nl = buf.find(b"\n", pos, min(end, pos + context.HEAD_BYTES))
            head = line_head(buf[pos : nl if nl != -1 else min(end, pos + context.HEAD_BYTES)])
            if not context.continues(head, self.run_key):
                self.run_open = False
                return
            self.run_last = line
            line += 1
            self.run_next = line
            nl = buf.find(b"\n", pos, end)
            if nl == -1:
                return
            pos = nl + 1

    def _signature(self, n: int, text: str, line: int, anchor: str = "") -> None:
        cat = self.catalogue
        sig = cat.signatures[n]
        regex, unless = cat.regex[n], cat.unless[n]
        match = regex.search(text) if regex is not None else None
        if regex is not None and match is None:
            return
        if unless is not None and unless.search(text):
            return
        if sig.rule == "autotuner-wrapped" and (
            context.AUTOTUNER_WRAPPER in text or self.run_line < line <= self.run_last
        ):
            return
        occ = self.occurrences.get(n)
        if occ is None:
            excerpt = make_excerpt(text, anchor)
            occ = self.occurrences[n] = Occurrences(first_line=line, excerpt=excerpt)
        elif occ.last_line == line:
            return  # once per line
        occ.last_line = line
        occ.count += 1
        if self.on_occurrence is not None:
            self.on_occurrence(sig.id, line)
        if sig.rule == "autotuner-summary" and match is not None:
            occ.n_sum += int(match.group("n"))
