"""Text for a terminal, laid out once and fitted to its width by one writer (issue 40).

A renderer lays its text out as items: a :class:`Line` (styled spans at an indent), a
:class:`Table`, or a plain ``str`` (a line of prose; its leading spaces are its indent). The
writers fit the items to the terminal's width, plain (:func:`write_plain`: pipes, files,
``NO_COLOR``, golden files) or styled with rich (:func:`write_styled`), and both break the
same lines at the same places:

- prose wraps at spaces only, never inside a word: a path, a URL, a version or a check id
  stays whole (rich's own wrapping folds a long word across lines, so it is not used);
  wrapped lines hang deeper than their first, never at the margin where a heading starts;
- a command, a link or a table row is printed whole, so it can be copied and pasted. One
  that does not fit at its indent moves left until it fits (never nearer the margin than
  HANG); a label before it (``See:``) goes on a line of its own; a shell comment after a
  command goes on the line above it, wrapped, each line a comment;
- a table wider than the terminal is split into parts of whole columns, each part led by
  the table's key columns (the shape, the metric...), one under the other.

Only a single word or command that cannot fit HANG columns in is left longer than the
width. With
``width=None`` nothing is fitted: every item is written as laid out (the documents' golden
files and the HTML pages' text, which a browser wraps).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from io import StringIO
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from rich.console import Console

# (text, style): the style is a name the styled writer looks up (or a rich style itself);
# the plain writer ignores it.
Span = tuple[str, str]

# Wrapped lines hang at least this far in: a long value cannot pass for a line of the
# report, whose marks and headings start at the margin.
HANG = 4


class Line(NamedTuple):
    """One logical line: styled spans at an indent. (Named tuples, not dataclasses:
    ``dataclasses`` is not imported on the way to a report.)"""

    indent: int
    spans: tuple[Span, ...]
    # False for what must survive copy and paste whole: a command, a link, a table row.
    wrap: bool = True
    # Printed before the spans on the first line only; wrapped lines hang under the spans.
    lead: tuple[Span, ...] = ()
    # A shell command (``$ ...``): when it does not fit, its trailing comment goes above it.
    command: bool = False
    # Where wrapped lines start (default: under the spans, at least HANG in).
    hang: int | None = None


class Table(NamedTuple):
    """Rows of cells, the first the header, in columns two spaces apart."""

    rows: Sequence[Sequence[str]]
    indent: int = 0
    # Columns aligned right (figures); the others left.
    right: frozenset[int] = frozenset()
    # The header's cells aligned left over every column (else as their column).
    header_left: bool = False
    # The leading columns that name a row: they lead every part of a split table.
    keys: int = 1
    style: str = ""
    header_style: str = ""


Item = Line | Table | str


def command(indent: int, text: str, *, style: str = "", lead: tuple[Span, ...] = ()) -> Line:
    """``$ text`` at ``indent``: a shell command, never broken."""
    return Line(indent, ((f"$ {text}", style),), wrap=False, lead=lead, command=True)


def whole(indent: int, text: str, *, style: str = "", lead: tuple[Span, ...] = ()) -> Line:
    """``text`` never broken (a link, a path, a command line that is not for a shell)."""
    return Line(indent, ((text, style),), wrap=False, lead=lead)


def write_plain(items: Sequence[Item], width: int | None) -> str:
    """``items`` as plain text fitted to ``width`` (``None``: as laid out)."""
    out: list[str] = []
    for item in items:
        if width is None and isinstance(item, str):
            out.append(item)  # exactly as laid out: the golden files
            continue
        for indent, spans in _physical(item, width):
            out.append((" " * indent + "".join(t for t, _ in spans)).rstrip())
    return "\n".join(out) + "\n"


def write_styled(
    items: Sequence[Item], width: int | None, styles: Mapping[str, str] | None = None
) -> str:
    """``items`` in colour (rich styles: a span's style is looked up in ``styles``, else
    used as it is), broken where :func:`write_plain` breaks them."""
    from rich.text import Text

    buffer = StringIO()
    console = _console(buffer, width or 10_000)
    table = styles or {}
    for item in items:
        for indent, spans in _physical(item, width):
            text = Text(" " * indent)
            for t, s in spans:
                text.append(t, table.get(s, s))
            text.rstrip()
            # soft_wrap: rich inserts no line break of its own.
            console.print(text, soft_wrap=True)
    return buffer.getvalue()


def _line_of(item: Item) -> Line:
    """A ``str`` item as the line it stands for: its leading spaces are its indent, and
    its wrapped lines hang 4 deeper."""
    if isinstance(item, str):
        text = item.lstrip(" ")
        indent = len(item) - len(text)
        return Line(indent, ((text, ""),), hang=indent + HANG)
    if isinstance(item, Line):
        return item
    raise TypeError(item)


# --------------------------------------------------------------------------- layout


# One physical line: its indent and its spans.
_Physical = tuple[int, tuple[Span, ...]]


def _physical(item: Item, width: int | None) -> Iterator[_Physical]:
    if isinstance(item, Table):
        for line in table_lines(item, width):
            yield from _physical(line, width)
        return
    if isinstance(item, str) and "\n" in item:
        for part in item.split("\n"):
            yield from _physical(part, width)
        return
    line = _line_of(item)
    lead_len = sum(len(t) for t, _ in line.lead)
    hang = line.hang if line.hang is not None else max(line.indent + lead_len, HANG)
    offset = 0
    for i, para in enumerate("".join(t for t, _ in line.spans).split("\n")):
        spans = _slice(line.spans, offset, offset + len(para))
        offset += len(para) + 1
        indent, lead = (line.indent, line.lead) if i == 0 else (hang, ())
        if line.wrap and para:
            yield from _wrapped(indent, lead, spans, hang, width)
        else:
            # Continuation lines of a multi-line command sit under its first word.
            extra = 2 if i and not line.wrap else 0
            yield from _whole(indent + extra, lead, spans, hang, width, command=line.command)


def _wrapped(
    indent: int, lead: tuple[Span, ...], spans: tuple[Span, ...], hang: int, width: int | None
) -> Iterator[_Physical]:
    text = "".join(t for t, _ in spans)
    lead_len = sum(len(t) for t, _ in lead)
    if width is None:
        yield indent, (*lead, *spans)
        return
    first = width - indent - lead_len
    rest = max(width - hang, 20)
    ranges = _breaks(text, first, rest, move_first=bool(lead) or indent + lead_len > hang)
    for n, (start, end) in enumerate(ranges):
        body = _slice(spans, start, end)
        if n == 0:
            yield indent, (*lead, *body)
        else:
            yield _fit_word(hang, body, width)


def _whole(
    indent: int,
    lead: tuple[Span, ...],
    spans: tuple[Span, ...],
    hang: int,
    width: int | None,
    *,
    command: bool,
) -> Iterator[_Physical]:
    text = "".join(t for t, _ in spans)
    lead_len = sum(len(t) for t, _ in lead)
    if width is None or indent + lead_len + len(text.rstrip()) <= width:
        yield indent, (*lead, *spans)
        return
    if command:
        cut = _comment_start(text)
        if cut is not None:
            # `$ cmd    # why`: the why above the command, both still valid shell.
            # A comment wider than the terminal wraps, each of its lines a comment.
            comment = text[cut:].lstrip("#").strip()
            lead_len = sum(len(t) for t, _ in lead)
            for start, end in _breaks(
                comment, width - indent - lead_len - 2, width - indent - 2, move_first=False
            ):
                yield indent, (*lead, (f"# {comment[start:end]}", "dim"))
                lead = tuple((" " * len(t), s) for t, s in lead)
            body = _slice(spans, 0, len(text[:cut].rstrip()))
            yield from _whole(indent, (), body, hang, width, command=False)
            return
    if lead:
        # The label on its own line, what it labels whole under it.
        yield indent, _rstripped(lead)
        yield from _whole(indent + 2, (), spans, hang, width, command=command)
        return
    yield _fit_word(indent, spans, width)


def _fit_word(indent: int, spans: tuple[Span, ...], width: int) -> _Physical:
    """A line that is one word or one command: moved left as far as it needs to fit, but
    never nearer the margin than HANG (a value from a facts file or a log must not start
    where the report's own lines start); left where it is when it cannot fit."""
    length = len("".join(t for t, _ in spans).rstrip())
    if indent + length > width and length <= width - min(indent, HANG):
        return width - length, spans
    return indent, spans


def _rstripped(spans: tuple[Span, ...]) -> tuple[Span, ...]:
    if not spans:
        return spans
    *head, (text, style) = spans
    return (*head, (text.rstrip(), style))


def _slice(spans: Sequence[Span], start: int, end: int) -> tuple[Span, ...]:
    """The characters ``start:end`` of the spans' joined text, styles kept."""
    out: list[Span] = []
    at = 0
    for text, style in spans:
        lo, hi = max(start, at), min(end, at + len(text))
        if lo < hi:
            out.append((text[lo - at : hi - at], style))
        at += len(text)
    return tuple(out)


_WORD = re.compile(r"\S+")


def _breaks(text: str, first: int, rest: int, *, move_first: bool) -> list[tuple[int, int]]:
    """Where ``text`` breaks into lines of at most ``first``, then ``rest``, characters, at
    spaces only (as ``textwrap`` with ``break_long_words`` and ``break_on_hyphens`` off):
    the (start, end) of each line, the spaces around it left out, except those that begin
    the text. A word longer than its line stays whole, on a line of its own; a first word
    that does not fit after the first line's lead goes to the next line when
    ``move_first`` (the lead then stands alone)."""
    words = [(m.start(), m.end()) for m in _WORD.finditer(text)]
    if not words:
        return []
    lines: list[tuple[int, int]] = []
    start, end = 0, words[0][1]
    limit = first
    if end - start > first and move_first and words[0][1] - words[0][0] <= rest:
        lines.append((0, 0))
        start, limit = words[0][0], rest
    for word_start, word_end in words[1:]:
        if word_end - start <= limit:
            end = word_end
            continue
        lines.append((start, end))
        start, end, limit = word_start, word_end, rest
    lines.append((start, end))
    return lines


def _comment_start(text: str) -> int | None:
    """Where a shell comment starts in ``text`` (a ``#`` that begins a word outside
    quotes, POSIX shell 2.3), or None. A quote never closed is taken as a character (a
    placeholder such as ``<the runtime's log>`` is no shell yet)."""
    literal: set[int] = set()
    while True:
        quote, opened, escaped = "", -1, False
        for i, c in enumerate(text):
            if escaped:
                escaped = False
            elif c == "\\" and quote != "'":
                escaped = True
            elif quote:
                if c == quote:
                    quote = ""
            elif c in "'\"" and i not in literal:
                quote, opened = c, i
            elif c == "#" and i and text[i - 1] in " \t":
                return i
        if not quote:
            return None
        literal.add(opened)


# --------------------------------------------------------------------------- tables


def table_lines(table: Table, width: int | None) -> list[Line]:
    """``table`` as whole lines: in one piece when it fits ``width`` (or ``width`` is
    None), else in parts of whole columns under one another, each led by the key
    columns and its own header, a blank line between parts."""
    rows = [list(r) for r in table.rows]
    if not rows:
        return []
    n = len(rows[0])
    widths = [max(len(r[i]) for r in rows) for i in range(n)]
    keys = list(range(min(table.keys, n)))
    parts: list[list[int]] = []
    if width is None or table.indent + sum(widths) + 2 * (n - 1) <= width:
        parts.append(list(range(n)))
    else:
        used = table.indent + sum(widths[i] for i in keys) + 2 * (len(keys) - 1)
        current: list[int] = []
        size = used
        for i in range(len(keys), n):
            if current and size + 2 + widths[i] > width:
                parts.append(keys + current)
                current, size = [], used
            current.append(i)
            size += 2 + widths[i]
        parts.append(keys + current)
        if any(used + 2 + widths[p[-1]] > width for p in parts if len(p) == len(keys) + 1):
            return _records(table, rows, keys)
    out: list[Line] = []
    for p, columns in enumerate(parts):
        if p:
            out.append(Line(0, ()))
        for index, row in enumerate(rows):
            header = index == 0
            cells = [
                row[i].rjust(widths[i])
                if i in table.right and not (header and table.header_left)
                else row[i].ljust(widths[i])
                for i in columns
            ]
            style = table.header_style if header else table.style
            out.append(Line(table.indent, (("  ".join(cells).rstrip(), style),), wrap=False))
    return out


def _records(table: Table, rows: list[list[str]], keys: list[int]) -> list[Line]:
    """A table too wide even for its keys and one column: each row as a record, its key
    cells whole on one line, then ``column: value`` for the others, wrapped under it."""
    header = rows[0]
    out: list[Line] = []
    for row in rows[1:]:
        name = "  ".join(row[i] for i in keys)
        rest = "; ".join(f"{header[i]}: {row[i]}" for i in range(len(keys), len(row)))
        out.append(Line(table.indent, ((name, table.header_style),), wrap=False))
        if rest:
            out.append(Line(table.indent + 2, ((rest, table.style),), hang=table.indent + 4))
    return out


def _console(file: StringIO, width: int) -> Console:
    from rich.console import Console

    # The caller decided on colour (TTY, NO_COLOR, --color); the environment must not
    # overrule it here, so rich gets an empty one (no NO_COLOR, TERM=dumb or COLUMNS).
    # "standard" colours are enough for these styles and make the output reproducible.
    return Console(
        file=file,
        force_terminal=True,
        color_system="standard",
        no_color=False,
        width=width,
        highlight=False,
        markup=False,
        emoji=False,
        legacy_windows=False,
        _environ={},
    )
