"""Find catalogue signatures in a byte stream, faster than grep, in constant memory.

How it works: the stream is read in chunks of 1 MiB. Every signature names exact
*literals*; one multi-literal search runs over the whole chunk, and only around a hit is a
line cut out, decoded, stripped of ANSI colour codes and checked against the signature's
regex (the confirmation: a few hundred lines per GiB). Line numbers come from counting
newlines (``bytes.count``) between one hit and the next, each byte once. A line is never
held whole: a line longer than :data:`LONG_LINE_BYTES` is searched in pieces with a small
overlap, and only a window of a few KiB around a hit is ever decoded.

Engines, measured on this catalogue's 41 literals over a 256 MiB vLLM-like log in 8 MiB
chunks from the page cache (2-core x86_64 VM, CPython 3.11.7, load ~1; the component
timings of ``benchmarks/scan_logs.py``'s log, best of 3):

=====================================================  ===========
one pass over 256 MiB                                   time
=====================================================  ===========
``read()`` of the chunks alone                           0.03 s
``read()`` + newline count (``bytes.count``)             0.12 s
``hyperscan`` 0.9.1 literal database, ``read()``         0.18 s
``hyperscan`` over an ``mmap`` (no copy)                 0.16 s
``google-re2`` 1.1 alternation of escaped literals       0.47 s
``pyahocorasick`` 2.3 (str only: latin-1 decode)         3.67 s
  (the latin-1 decode alone                              0.19 s)
=====================================================  ===========

``hyperscan`` is the engine where its wheel installs (CPython 3.11-3.13, manylinux
x86_64 and aarch64: 0.9.1). The chunk size is set by the CPU cache, not by the number of
calls: a 1 MiB chunk that ``read()`` has just written is still in the core's L2 cache when
the newline count and Hyperscan read it, where an 8 MiB one is read back from memory twice.
CPU time of the scan of a 64 MiB log (149 literals by then, in-process, best of 7, same
VM): 8 MiB chunks 75-105 ms, 4 MiB 61-65, 2 MiB 64-74, 1 MiB 56, 512 KiB 55, 256 KiB 56
(the newline count ~24 ms, Hyperscan ~16 ms, ``read()`` ~8-11 ms of it); 256 KiB is
where the per-call costs start to show. The scan runs in the calling thread: Hyperscan in
a thread beside the newline count (which this module did up to 2026-11) cost more CPU time
(67 against 55 ms over 8 MiB chunks: two cores each pulling the chunk in, a thread per
chunk) and saved no wall time on the 2-core VM; the bindings hold one global lock around
every Hyperscan call, so more scan threads gain nothing either. ``mmap`` would save the
copy of ``read()`` but not the count's pass over the bytes (an ``mmap`` has no ``count``),
and would fork the one chunked path that stdin, gzip, journald and Docker share;
``read()`` keeps anonymous memory at one chunk plus the carried line.

Where ``hyperscan`` is missing the scanner falls back to ``google-re2`` (one thread: RE2
holds the GIL), then to the stdlib ``bytes.find`` loop: the same findings, slower (the
end-to-end figures, ratio to ``grep -E -c -f``, are in ``benchmarks/scan_logs.py``'s
output and in the pyproject comment). Hyperscan reports every literal, overlapping ones
too; the RE2 alternation finds one leftmost match at a time, so the RE2 engine takes a
match only as the place where some literal starts, tries every literal of the same first
two bytes there and searches again one byte on (the vocabulary's messages start with the
catalogue's literals: "CUDA error: out of memory" and "CUDA error").

Wrapped records (issue 33): docker compose (``vllm-1  | ``), ``kubectl logs --prefix``
(``[pod/name/container] ``) and ``docker logs --timestamps`` write a prefix before every
line, so a record the terminal or the runtime broke over two lines reads as two (``...
CUDA error: an illegal memory`` / ``vllm-1  | access was encountered``): a vocabulary term
broken there is on neither line whole, and the prefilter cannot see it. It is found at the
*seam*, without a second pass over the bytes: every term also gives the prefilter its last
:data:`~blackwell_doctor.ruledata.logs.SEAM_TAIL_CHARS` characters (owner ``seam``), which a
break anywhere before them leaves whole on the second line. At such a hit the line is
checked to continue the record above (:func:`context.wraps`: the same transport, no record
prefix of its own), and the term is searched in the line above (at most
:data:`WRAP_BYTES` of its end; the last line of the previous region is kept for the first
line of the next, so the chunking changes nothing) and this line's message (its transport
gone) joined with a space (a break at a space) and without one (a break inside a word).
Only an occurrence that spans the seam counts, so a term whole on either line is never
counted twice; it counts on the record's first line, in place of that line's generic hit,
its excerpt the joined record. A tail hit costs a few C calls before any decoding: the
message up to it (after the last transport end, ``| ``, ``] ``, ``) ``, ``Z ``) must be a
part of a term's end, which a tail inside healthy text ("... encountered ...") is not
(a 32 MiB log with such a word on every other line: ~2.4 s against 0.09 s without the
tails, about what a line of ``ERROR`` costs; healthy lines without one: unchanged).
Memory stays flat (two bounded lines) and a 10 MB line linear (the line above is looked up
once per line). Not seen: a break inside a term's last characters, a term over three lines
or more, a transport prefix in colour (compose on a terminal), and a record whose second
line holds none of its terms keeps its first line as the excerpt (its error is judged all
the same: the log-end walk passes over such a second line, context.error_tail).
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Callable
from typing import Any

from blackwell_doctor.collect.logs import context
from blackwell_doctor.facts import regexcache
from blackwell_doctor.facts.document import LogFinding
from blackwell_doctor.facts.redact import redact_text
from blackwell_doctor.ruledata import records
from blackwell_doctor.ruledata.logs import GENERIC_RULES, Catalogue

# What the sources read and decompress at a time: the size the CPU cache sets (above).
CHUNK_BYTES = 1 << 20
# A line without a newline is searched in pieces once it is this long.
LONG_LINE_BYTES = 8 << 20
# Bytes kept either side of a hit: enough for a vLLM prefix and the autotuner's wrapper.
WINDOW_BYTES = 4096
EXCERPT_CHARS = 400
# Rules whose signature may count more than once on one line (the counting key holds more
# than the signature: _count).
_PER_HIT_RULES = frozenset({"xid", "autotuner-wrapped"})
# RE2's memory budget for the literal alternation (the fallback engine: see _re2_finder).
RE2_MAX_MEM = 64 << 20
# Wrapped records (a seam: module docstring): at most this much of the line above is joined
# to a continuation line, and a seam joins two lines (a term broken over three is not seen).
WRAP_BYTES = 1024
# A vocabulary term's label (term, family, meaning) before the excerpt, at most this long.
NOTE_CHARS = 160

_ANSI = regexcache.lazy(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_CONTROL = regexcache.lazy(r"[\x00-\x08\x0b-\x1f\x7f]")

Hits = list[tuple[int, int]]
# finder(buf, start, end): (position, literal index) of every hit in buf[start:end], in order.
Finder = Callable[[bytes, int, int], Hits]


ENGINES = ("auto", "hyperscan", "re2", "find")


def _hyperscan_finder(literals: list[bytes]) -> Finder | None:
    """One Hyperscan block-mode database of the literals (its pure-literal compiler), loaded
    from the per-catalogue cache where a trusted copy is there (:mod:`.hsdb`)."""
    try:
        import hyperscan  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        return None
    from blackwell_doctor.collect.logs.hsdb import literal_database

    db: Any = literal_database(hyperscan, literals)
    lengths = [len(lit) for lit in literals]

    def hits(buf: bytes, start: int, end: int) -> Hits:
        out: Hits = []

        def on_match(n: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            # Hyperscan reports where a match ends; a literal's start follows from it.
            out.append((start + to - lengths[n], n))

        with memoryview(buf) as view, view[start:end] as region:
            db.scan(region, match_event_handler=on_match)
        out.sort()
        return out

    return hits


def _re2_finder(literals: list[bytes]) -> Finder | None:
    try:
        import re2  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        return None
    # RE2 reports one leftmost match and resumes after it: a literal that starts where
    # another matched ("CUDA error" and the vocabulary's "CUDA error: out of memory") or
    # inside it ("Error" in "ncclRemoteError") would be lost. So the match only says where a
    # literal starts; every literal is tried there (by its first two bytes), and the search
    # resumes one byte on: every literal is reported, as Hyperscan and find report them.
    by_head: dict[bytes, list[tuple[int, bytes]]] = {}
    for n, lit in enumerate(literals):
        by_head.setdefault(lit[:2], []).append((n, lit))
    # ~1,000 literals (the vocabularies of issue 33) are an 86,000-character alternation:
    # RE2's default 8 MiB budget ran its DFA out of memory on every search (it then fell back
    # to its slower NFA and printed "DFA out of memory" to stderr). 64 MiB holds it.
    options: Any = re2.Options()
    options.max_mem = RE2_MAX_MEM
    pattern: Any = re2.compile(b"|".join(re.escape(lit) for lit in literals), options)

    def hits(buf: bytes, start: int, end: int) -> Hits:
        out: Hits = []
        pos = start
        while True:
            match = pattern.search(buf, pos, end)
            if match is None:
                return out
            at = match.start()
            # (a one-byte literal is filed under its one byte)
            for n, lit in (*by_head.get(buf[at : at + 2], ()), *by_head.get(buf[at : at + 1], ())):
                if at + len(lit) <= end and buf.startswith(lit, at):
                    out.append((at, n))
            pos = at + 1

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


@functools.cache
def _finder(literals: tuple[bytes, ...], engine: str) -> tuple[str, Finder]:
    chain = ("hyperscan", "re2", "find") if engine == "auto" else (engine,)
    makers = {"hyperscan": _hyperscan_finder, "re2": _re2_finder}
    for name in chain:
        if name == "find":
            return name, _find_finder(list(literals))
        if name not in makers:
            raise ValueError(f"unknown matching engine {engine!r}")
        made = makers[name](list(literals))
        if made is not None:
            return name, made
    raise RuntimeError(f"the {engine} matching engine is not installed")


def make_finder(literals: list[bytes], *, engine: str = "auto") -> Finder:
    """``engine``: ``auto`` (the first installed of hyperscan, re2, find), or one by name;
    a named engine that is not installed is a RuntimeError. Built once per literal set."""
    return _finder(tuple(literals), engine)[1]


def engine_name(literals: list[bytes], engine: str = "auto") -> str:
    """The engine that ``engine`` resolves to here (benchmarks report it)."""
    return _finder(tuple(literals), engine)[0]


def strip_codes(text: str) -> str:
    return _CONTROL().sub("", _ANSI().sub("", text))


def clean_line(raw: bytes) -> str:
    """A line as a person should see it: decoded, colour codes and control bytes gone."""
    return strip_codes(raw.decode("utf-8", errors="replace")).strip()


def line_head(raw: bytes) -> str:
    """The start of a line as text for prefix tests: colour codes and control bytes gone,
    nothing stripped (an indented line stays indented)."""
    return strip_codes(raw[: context.HEAD_BYTES].decode("utf-8", errors="replace"))


def line_head_full(raw: bytes) -> str:
    """A whole line as text for structure tests: colour codes and control bytes gone,
    nothing stripped (an indented line stays indented)."""
    return strip_codes(raw.decode("utf-8", errors="replace"))


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


# What ends a transport prefix (compose "| ", kubectl "] ", vLLM ") ", docker's "Z ").
_TRANSPORT_ENDS = (b"| ", b"] ", b") ", b"Z ")


def _seam_rest(buf: bytes, start: int, end: int) -> bytes:
    """The message of the line starting at ``start`` up to ``end`` (a term's tail ends
    there), taken after the last transport end before it; ``b""`` where none is near (no
    transport, or the tail deep in a message: healthy text). A few C calls a hit, however
    many terms share the tail."""
    floor = max(start, end - context.HEAD_BYTES)
    at = max(buf.rfind(sep, floor, end) for sep in _TRANSPORT_ENDS)
    if at == -1:
        return b""
    return buf[at + 2 : end].lstrip(b" ")


class Occurrences:
    """Everything seen of one signature in one source. (Plain classes here, not
    dataclasses: importing ``dataclasses`` and building two cost ~3 ms of a scan's
    start-up: docs/performance.md.)"""

    __slots__ = ("count", "excerpt", "first_line", "frame", "last_line", "n_sum")

    def __init__(self, *, first_line: int = 0, excerpt: str = "") -> None:
        self.first_line = first_line
        self.last_line = 0
        self.count = 0
        self.excerpt = excerpt
        self.n_sum = 0  # autotuner-summary: the sum of N
        self.frame = ""  # generic errors: the last frame of the first traceback seen with them


class SourceScanner:
    """Feed it bytes (any chunking), then :meth:`finish` for the findings."""

    def __init__(
        self,
        catalogue: Catalogue,
        name: str,
        engine: str = "auto",
        *,
        on_occurrence: Callable[[str, int], None] | None = None,
    ) -> None:
        self.catalogue = catalogue
        self.name = name
        self.engine = engine
        self.lines = 0
        self.size = 0  # bytes read
        # Per signature and per context (the autotuner markers a hit was seen with,
        # context.py), and per Xid number for a signature of rule xid (its regex's xid
        # group): each number's first line is kept, for the rules to read in the Xid table.
        self.occurrences: dict[tuple[int, tuple[str, ...], str], Occurrences] = {}
        self.markers: set[str] = set()
        # Called with (signature id, line) for every occurrence counted (benchmarks, tests).
        self.on_occurrence = on_occurrence
        # The autotuner record being followed (context.py): the Skipping line, the transport
        # its lines carry, the last line known to continue it, the next line to classify,
        # and whether more lines may still continue it.
        self.run_line = 0
        self.run_key = ""
        self.run_last = 0
        self.run_next = 0
        self.run_open = False
        self._carry = bytearray()  # the line not ended yet
        self._carry_searched = 0
        self._mid_line = False  # the region being scanned starts inside a line
        # Occurrences not yet counted: (signature, line, text, matched literal, regex match,
        # context markers, the vocabulary term's label or "").
        self._pending: list[
            tuple[int, int, str, str, re.Match[str] | None, tuple[str, ...], str]
        ] = []
        # The line whose hits are being examined, and per literal where the window of its
        # last examined hit there stops (positions in the buffer scanned; _hit).
        self._hits_line = 0
        self._hits_stop: dict[int, int] = {}
        # Signatures already pending or counted on the line being examined (a signature counts
        # once per line): a line of a thousand hits examines each signature once, not each hit
        # (a 10 MB line of hits was 4.5x the same bytes in lines: every hit's window searched
        # for prose, every pending list rebuilt).
        self._on_line: tuple[int, set[int]] = (0, set())
        # Generic error hits (rule unrecognised-*): the traceback frame just above, per line.
        self._frames: dict[int, str] = {}
        self._last_frame: tuple[int, str] = (0, "")  # the last traceback frame: (line, text)
        # The last bytes fed (at most context.TAIL_BYTES once trimmed): the log-end rule's
        # lines.
        self._tail = bytearray()
        # The line the grammar table last classified for the generic detector, its class.
        self._classified: tuple[int, str, str | None] = (0, "", None)
        # Wrapped records: the last complete line of the region scanned before (its wrap key
        # and cleaned text, at most WRAP_BYTES of its end), and the line above the line last
        # examined at a seam: (line, key, text).
        self._prev: tuple[str, str] = ("", "")
        self._term_bytes = [t.text.encode("utf-8") for t in catalogue.terms]
        self._above: tuple[int, str, str] = (0, "", "")
        self._engine, self._finder = _finder(tuple(catalogue.literals), engine)

    def feed(self, data: bytes) -> None:
        if not data:
            return
        self.size += len(data)
        if len(data) >= context.TAIL_BYTES:
            self._tail[:] = data[-context.TAIL_BYTES :]
        else:
            self._tail += data
            if len(self._tail) > 2 * context.TAIL_BYTES:
                del self._tail[: -context.TAIL_BYTES]
        start = 0
        if self._carry:
            # Complete the pending line with a small copy, not a copy of the whole chunk.
            nl = data.find(b"\n")
            if nl == -1:
                self._carry += data
                self._partial()
                return
            self._carry += memoryview(data)[: nl + 1]
            head = bytes(self._carry)
            self._scan(head, 0, len(head), self._carry_searched)
            self.lines += 1
            self._carry.clear()
            self._carry_searched = 0
            start = nl + 1
        last_nl = data.rfind(b"\n", start)
        if last_nl == -1:
            self._carry += memoryview(data)[start:]
            self._partial()
            return
        end = last_nl + 1
        self.lines += self._scan(data, start, end, start)
        self._carry += memoryview(data)[end:]

    def _partial(self) -> None:
        """The carried bytes hold no newline: keep them, or search a very long line in
        pieces, keeping only an overlap for literals (and context) that straddle the cut;
        the line number does not change. The carry grows in place: a line fed in many small
        chunks costs its length, not the square of it."""
        if len(self._carry) > LONG_LINE_BYTES:
            buf = bytes(self._carry)
            self._scan(buf, 0, len(buf), self._carry_searched)
            keep = self.catalogue.max_literal - 1 + WINDOW_BYTES
            del self._carry[:-keep]
            self._carry_searched = len(self._carry)
            # The line goes on in the bytes kept: where its examined windows stop, there.
            cut = len(buf) - len(self._carry)
            for lit, stop in self._hits_stop.items():
                self._hits_stop[lit] = stop - cut

    def finish(self) -> list[LogFinding]:
        if self._carry:
            buf = bytes(self._carry)
            self._scan(buf, 0, len(buf), self._carry_searched)
            self.lines += 1
            self._carry.clear()
        self._commit()
        return self._findings() + self._log_end()

    def _findings(self) -> list[LogFinding]:
        """What this source showed once it has been read to the end: each signature's
        occurrences per context (a summary signature's count is the sum of its N). Their
        severity, whether a marker makes them info and whether their context makes them no
        finding, is the rules' (:mod:`blackwell_doctor.rules.logs`)."""
        out: list[LogFinding] = []
        signatures = self.catalogue.signatures
        for (n, seen, _each), occ in sorted(
            self.occurrences.items(), key=lambda kv: kv[1].first_line
        ):
            sig = signatures[n]
            out.append(
                LogFinding(
                    signature=sig.id,
                    path=self.name,
                    line=occ.first_line,
                    last_line=occ.last_line,
                    count=occ.n_sum if sig.rule == "autotuner-summary" else occ.count,
                    excerpt=f"{occ.excerpt} | last frame: {occ.frame}"
                    if occ.frame
                    else occ.excerpt,
                    context=list(seen),
                )
            )
        return out

    def _log_end(self) -> list[LogFinding]:
        """The log-end rule (context.py): the error run the source ends with, as the
        finding of the catalogue's rule log-end entry (none without that entry or run)."""
        entry = next((s for s in self.catalogue.signatures if s.rule == "log-end"), None)
        tail = bytes(self._tail[-context.TAIL_BYTES :])
        if entry is None or not tail:
            return []
        pieces = tail.split(b"\n")
        if pieces[-1] == b"":
            pieces.pop()
        if self.size > len(tail):
            pieces = pieces[1:]  # the first piece may be the end of a longer line
        last = self.lines
        lines = [(last - len(pieces) + 1 + k, line_head_full(p)) for k, p in enumerate(pieces)]
        with_terms = self._term_lines(pieces)
        found = context.error_tail(
            lines,
            lambda text: text in with_terms or context.is_error_line(self.catalogue, text),
            lambda number: self.run_line < number <= self.run_last,
        )
        if found is None:
            return []
        first, final, count, text = found
        return [
            LogFinding(
                signature=entry.id,
                path=self.name,
                line=first,
                last_line=final,
                count=count,
                excerpt=make_excerpt(text),
            )
        ]

    def _term_lines(self, pieces: list[bytes]) -> set[str]:
        """The lines among ``pieces`` (cleaned, stripped) that hold a vocabulary term that is
        not quoted in prose: error lines for the log-end rule. One search over the pieces."""
        cat = self.catalogue
        if not cat.terms:
            return set()
        joined = b"\n".join(pieces)
        starts = [0]
        for p in pieces[:-1]:
            starts.append(starts[-1] + len(p) + 1)
        out: set[str] = set()
        for pos, lit in self._finder(joined, 0, len(joined)):
            owners = [n for kind, n in cat.owners[lit] if kind == "term"]
            if not owners:
                continue
            k = bisect.bisect_right(starts, pos) - 1
            text = clean_line(pieces[k])
            if not context.is_prose(text, cat.terms[owners[0]].text, lead_words=False):
                out.add(text)
        return out

    # ---------------------------------------------------------------- internals

    def _scan(self, buf: bytes, start: int, end: int, searched: int) -> int:
        """Hits in ``buf[start:end]`` (whole lines, or a piece of one long line) not already
        seen: a hit ending inside the first ``searched`` bytes was found by an earlier call.
        Returns the number of newlines in ``buf[start:end]``, each byte counted once."""
        literals = self.catalogue.literals
        first = self.lines + 1
        self._mid_line = searched > start
        if self.run_open:
            self._resume_run(buf, start, end, first)
        cursor, line = start, first
        # The finder's list of hits is made a CHUNK_BYTES slice at a time (a literal that
        # starts in a slice is found there, whole), so that a region of megabytes of hits (a
        # long line searched in pieces) is not listed whole: ~90 bytes a hit.
        over = self.catalogue.max_literal - 1
        for at in range(start, end, CHUNK_BYTES):
            until = min(end, at + CHUNK_BYTES)
            for pos, lit in self._finder(buf, at, min(end, until + over)):
                if pos >= until:
                    break  # the next slice's
                if pos + len(literals[lit]) <= searched:
                    continue
                line += buf.count(b"\n", cursor, pos)
                cursor = pos
                self._hit(buf, start, end, pos, lit, line)
        self._remember_last_line(buf, start, end)
        return line - first + buf.count(b"\n", cursor, end)

    def _hit(self, buf: bytes, lo: int, hi: int, pos: int, lit: int, line: int) -> None:
        """Examine the hit of literal ``lit`` at ``pos``: the window of up to
        :data:`WINDOW_BYTES` either side of it, within its line, is cleaned and judged.

        A hit that lies inside the window of the same literal's last examined hit on the same
        line is not examined when that window also held what follows it: the rest of the line,
        or at least half a window of it. A signature counts once a line. On a line shorter
        than the window every hit of a literal has the same text, so nothing is lost; on a
        longer one a literal is examined once every half :data:`WINDOW_BYTES` at most, so a
        line of hits costs its length, not its hits times the window (issue 32: a 2 MB
        line of ``ERROR `` took 15 s, cleaning ~8 KiB again for each of its 333,000 hits)."""
        cat = self.catalogue
        if line != self._hits_line:
            self._hits_line = line
            self._hits_stop.clear()
        elif pos + len(cat.literals[lit]) <= self._hits_stop.get(lit, -1):
            return
        floor = max(lo, pos - WINDOW_BYTES)
        start = buf.rfind(b"\n", floor, pos) + 1 or floor
        stop = buf.find(b"\n", pos, min(hi, pos + WINDOW_BYTES))
        if stop == -1:
            # The window ends inside the line: a later hit is passed over only with half a
            # window of its own line after it examined here, so the words that follow it
            # ("... failed to initialize") were in this window (issue 32's review: a hit
            # 4,050 bytes on, its message cut by this window's end, went unseen).
            stop = min(hi, pos + WINDOW_BYTES)
            self._hits_stop[lit] = stop - WINDOW_BYTES // 2
        else:
            self._hits_stop[lit] = stop  # the line ends here: the later hits' text is in it
        text: str | None = None
        rest: bytes | None = None  # a seam's: the message up to the tail's end, or b""
        for kind, n in cat.owners[lit]:
            if kind == "seam":
                if rest is None:
                    in_view = start > floor or (start == lo and not self._mid_line)
                    end = pos + len(cat.literals[lit])
                    rest = _seam_rest(buf, start, end) if in_view else b""
                if rest and self._at_seam(buf, start, rest, n):
                    self._seam(n, clean_line(buf[start:stop]), line, buf, lo, start)
                continue
            if text is None:
                text = clean_line(buf[start:stop])
            if kind == "marker":
                if cat.marker_regex[n].search(text):
                    self.markers.add(cat.markers[n].id)
                continue
            if kind == "frame":
                frame = context.frame_of(text)
                if frame:
                    self._last_frame = (line, frame)
                continue
            if kind == "record" or (kind == "sig" and cat.signatures[n].rule in GENERIC_RULES):
                self._generic(text, line, cat.literals[lit].decode("utf-8", "replace"))
                continue
            if kind == "term":
                self._term(n, text, line)
                continue
            if kind == "dismissal":
                if context.dismisses_above(text):
                    floor_line = line - context.PROSE_LOOKBACK_LINES
                    self._pending = [p for p in self._pending if not floor_line <= p[1] < line]
                    for gone in [k for k in self._frames if floor_line <= k < line]:
                        del self._frames[gone]
                continue
            if cat.signatures[n].id == context.AUTOTUNER_SKIPPED:
                at_line_start = start > floor or (start == lo and not self._mid_line)
                self._open_run(buf, start if at_line_start else -1, pos, hi, line)
            self._signature(n, text, line, cat.literals[lit].decode("utf-8", "replace"))

    def _term(self, k: int, text: str, line: int, *, record: bool = False) -> None:
        """A vocabulary term's hit, wherever it stands in the line (glued to model output
        too): counted under the generic fatal signature (a fatal term) or the generic
        error one, its excerpt led by the term, its family and meaning."""
        term = self.catalogue.terms[k]
        rule = "unrecognised-fatal" if term.fatal else "unrecognised-error"
        n = self.catalogue.generic_by_rule.get(rule)
        if n is None or (not record and self._done_on_line(n, line)):
            return
        if context.is_prose(text, term.text, lead_words=False):
            return
        frame = context.frame_above(self._last_frame, line, text)
        self._signature(
            n,
            text,
            line,
            term.text,
            frame,
            note=term.label()[:NOTE_CHARS],
            prose_checked=True,
            record=record,
        )

    # ------------------------------------------------------ wrapped records (seams)

    def _line_at(self, buf: bytes, ls: int, le: int) -> tuple[str, str]:
        """(wrap key, cleaned text) of the line ``buf[ls:le]``: at most :data:`WRAP_BYTES`
        of its end (a longer one: its start, an ellipsis, its end)."""
        key = context.wrap_key(line_head(buf[ls : ls + context.HEAD_BYTES]))[0]
        if not key:
            return "", ""
        if le - ls <= WRAP_BYTES:
            return key, clean_line(buf[ls:le])
        head = clean_line(buf[ls : ls + context.HEAD_BYTES])
        return key, f"{head} … {clean_line(buf[le - WRAP_BYTES : le])}"

    def _remember_last_line(self, buf: bytes, start: int, end: int) -> None:
        """The region's last complete line, for a seam with the next region's first line."""
        if end <= start or buf[end - 1] != 0x0A:
            return  # a piece of a long line: the line above the next one is unchanged
        nl = buf.rfind(b"\n", start, end - 1)
        if nl == -1 and self._mid_line:
            self._prev = ("", "")  # its start was not in view: no key known
            return
        self._prev = self._line_at(buf, nl + 1 if nl != -1 else start, end - 1)

    def _at_seam(self, buf: bytes, start: int, rest: bytes, k: int) -> bool:
        """Whether the line starting at ``start``, its message up to the tail's end ``rest``
        (:func:`_seam_rest`), may hold the rest of term ``k`` broken at a seam: the message
        is a part of the term's end, after a transport."""
        whole = self._term_bytes[k]
        if len(rest) >= len(whole) or not whole.endswith(rest):
            return False
        head = line_head(buf[start : start + context.HEAD_BYTES])
        key, at = context.wrap_key(head)
        return bool(key) and head[at:].lstrip().encode("utf-8").startswith(rest)

    def _seam(self, k: int, text: str, line: int, buf: bytes, lo: int, start: int) -> None:
        """A vocabulary term's tail on ``line`` (its start at ``start``, in view): where the
        line continues the record above (the same transport, no record prefix of its own:
        :func:`context.wraps`), the term is looked for across the seam, in the line above and
        this line's message joined with a space (a break at a space) and without (a break
        inside a word); an occurrence that spans the seam is counted on this line, its
        excerpt the joined record. One found whole on either line does not span it."""
        if self._above[0] != line:
            if start == lo:
                above = ("", "") if self._mid_line else self._prev
            else:
                nl = buf.rfind(b"\n", lo, start - 1)
                if nl == -1 and self._mid_line:
                    above = ("", "")
                else:
                    above = self._line_at(buf, nl + 1 if nl != -1 else lo, start - 1)
            self._above = (line, *above)
        _line, key, upper = self._above
        at = context.wraps(text, key) if upper else -1
        if at < 0:
            return
        message = text[at:].strip()
        term = self.catalogue.terms[k].text
        for gap in (" ", ""):
            joined = f"{upper}{gap}{message}"
            cut = len(upper)
            i = joined.find(term, max(0, cut - len(term) + 1), cut + len(gap) + len(term))
            if i != -1 and i < cut and i + len(term) > cut + len(gap):
                self._term(k, joined, line - 1, record=True)
                return

    def _generic(self, text: str, line: int, anchor: str) -> None:
        """A generic literal's hit: the grammar table classifies the line (once per line and
        text), and a fatal line counts under the rule unrecognised-fatal signature, an
        error-level record (NCCL's WARN too) under the unrecognised-error one."""
        seen_line, seen_text, cls = self._classified
        if seen_line != line or seen_text != text:
            cls = records.classify(text)
            self._classified = (line, text, cls)
        elif cls is not None:
            return  # counted for this line already
        if cls is None:
            return
        rule = "unrecognised-fatal" if cls == "fatal" else "unrecognised-error"
        n = self.catalogue.generic_by_rule.get(rule)
        if n is None:
            return
        frame = context.frame_above(self._last_frame, line, text)
        self._signature(n, text, line, anchor, frame)

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

    def _signature(
        self,
        n: int,
        text: str,
        line: int,
        anchor: str = "",
        frame: str = "",
        note: str = "",
        *,
        prose_checked: bool = False,
        record: bool = False,
    ) -> None:
        cat = self.catalogue
        # Once per line, except where one line holds several occurrences: an Xid line's
        # number, the autotuner markers a hit was seen with.
        once = not record and cat.signatures[n].rule not in _PER_HIT_RULES
        if once and self._done_on_line(n, line):
            return
        regex, unless = cat.regex[n], cat.unless[n]
        match = regex.search(text) if regex is not None else None
        if regex is not None and match is None:
            return
        if unless is not None and unless.search(text):
            return
        if not prose_checked and context.is_prose(text, anchor):
            return
        # Where the hit stands, not what that means: the rules decide (rules/logs.py).
        seen = context.hit_context(text, in_record=self.run_line < line <= self.run_last)
        if frame:
            self._frames[line] = frame
        # Counted once no dismissal can follow it any more (the prose rule's lookback).
        entry = (n, line, text, anchor, match, seen, note)
        if record:
            # A term across a seam, counted on the record's first line (the line above the
            # hit): it stands for that line's generic hit (the term, its meaning and the
            # joined record say more), and goes in line order among the pending ones.
            self._pending = [p for p in self._pending if p[:2] != (n, line) or p[6]]
            at = bisect.bisect_right([p[1] for p in self._pending], line)
            self._pending.insert(at, entry)
        else:
            self._pending.append(entry)
        if once:
            self._on_line[1].add(n)
        self._commit(line - context.PROSE_LOOKBACK_LINES)

    def _done_on_line(self, n: int, line: int) -> bool:
        """Whether signature ``n`` is already pending or counted on ``line``."""
        if self._on_line[0] != line:
            self._on_line = (line, set())
        return n in self._on_line[1]

    def _commit(self, before: int | None = None) -> None:
        """Count the pending occurrences on lines before ``before`` (all: None)."""
        keep = 0
        sigs = self.catalogue.signatures
        # A line a catalogue signature names is that signature's: the generic detector's
        # hit on it is not counted (the literal matched says more than the line's level).
        known = {p[1] for p in self._pending if sigs[p[0]].rule not in GENERIC_RULES}
        for n, line, text, anchor, match, seen, note in self._pending:
            if before is not None and line >= before:
                break
            keep += 1
            if line in known and sigs[n].rule in GENERIC_RULES:
                continue
            self._count(n, line, text, anchor, match, seen, note)
        for _n, line, *_ in self._pending[:keep]:
            self._frames.pop(line, None)
        del self._pending[:keep]

    def _count(
        self,
        n: int,
        line: int,
        text: str,
        anchor: str,
        match: re.Match[str] | None,
        seen: tuple[str, ...],
        note: str = "",
    ) -> None:
        sig = self.catalogue.signatures[n]
        frame = self._frames.get(line, "") if sig.rule in GENERIC_RULES else ""
        each = match.group("xid") if sig.rule == "xid" and match is not None else ""
        occ = self.occurrences.get((n, seen, each))
        if occ is None:
            excerpt = make_excerpt(text, anchor)
            if note:
                excerpt = f"{note} | line: {excerpt}"
            occ = Occurrences(first_line=line, excerpt=excerpt)
            self.occurrences[n, seen, each] = occ
        elif occ.last_line == line:
            return  # once per line
        if frame and not occ.frame:
            occ.frame = make_excerpt(frame)[: EXCERPT_CHARS // 2]
        occ.last_line = line
        occ.count += 1
        if self.on_occurrence is not None:
            self.on_occurrence(sig.id, line)
        if sig.rule == "autotuner-summary" and match is not None:
            occ.n_sum += int(match.group("n"))
