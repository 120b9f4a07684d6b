"""``--format rich``: the doctor-style report for a person at a terminal.

Modelled on flutter doctor (a mark per check, details under it, a summary line) and brew
doctor (remedies are commands to paste). One layout feeds two writers: plain ASCII for pipes,
``NO_COLOR`` and golden files, and ``rich`` styles for a colour terminal. Text from results is
data, never markup: the rich writer builds ``Text`` objects, which rich does not parse.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from io import StringIO
from typing import TYPE_CHECKING, NamedTuple

from blackwell_doctor.render.common import (
    FINDING_STATUSES,
    counts_phrase,
    evidence_text,
    gate_phrase,
    gpus_phrase,
    group_by_family,
    node_phrase,
    sanitize,
    sanitize_line,
)
from blackwell_doctor.report.check import PresetReport, Report, Section
from blackwell_doctor.report.results import Result, Status

if TYPE_CHECKING:
    from rich.console import Console


class _Glyphs(NamedTuple):
    marks: dict[Status, str]
    sep: str
    dash: str


_PLAIN = _Glyphs(
    marks={
        Status.PASS: "[ok]",
        Status.WARN: "[warn]",
        Status.FAIL: "[FAIL]",
        Status.SKIP: "[skip]",
        Status.ERROR: "[error]",
    },
    sep=" | ",
    dash="-",
)
_UNICODE = _Glyphs(
    marks={
        Status.PASS: "[✓]",
        Status.WARN: "[!]",
        Status.FAIL: "[✗]",
        Status.SKIP: "[–]",
        Status.ERROR: "[?]",
    },
    sep=" · ",
    dash="—",
)

# rich style per layout style (a Status value styles that status's mark); plain ignores them.
_RICH_STYLES: dict[str, str] = {
    "plain": "",
    "heading": "bold underline",
    "id": "bold",
    "dim": "dim",
    "label": "bold",
    "command": "cyan",
    "link": "blue underline",
    "ok": "bold green",
    "bad": "bold red",
    Status.PASS: "green",
    Status.WARN: "bold yellow",
    Status.FAIL: "bold red",
    Status.SKIP: "dim",
    Status.ERROR: "bold magenta",
}


class _Line(NamedTuple):
    """One logical line: styled spans at an indent. ``wrap=False`` for commands and links,
    which must survive copy and paste whole however narrow the terminal. (Named tuples,
    not dataclasses: ``dataclasses`` is not imported on the way to a report.)"""

    indent: int
    spans: tuple[tuple[str, str], ...]
    wrap: bool = True
    # Printed before the spans on the first line only; wrapped lines hang under the spans.
    lead: tuple[tuple[str, str], ...] = ()


def render_text(
    report: Report,
    *,
    color: bool,
    verbose: bool = False,
    width: int = 100,
    details: Sequence[Section] = (),
) -> str:
    """``details``: the preset's detail sections, shown under the results."""
    lines = _layout(report, _UNICODE if color else _PLAIN, verbose=verbose, details=details)
    if color:
        return _write_rich(lines, width)
    return _write_plain(lines, width)


# --------------------------------------------------------------------------- layout


def _layout(
    report: Report, glyphs: _Glyphs, *, verbose: bool, details: Sequence[Section]
) -> list[_Line]:
    lines = _header(report, glyphs)
    mark_width = max(len(m) for m in glyphs.marks.values())
    id_width = max((len(sanitize_line(r.id)) for r in report.results), default=0)
    for family, results in group_by_family(report.results):
        lines += [_Line(0, ()), _Line(0, ((sanitize_line(family), "heading"),))]
        for result in results:
            lines += _check_lines(result, glyphs, mark_width, id_width, verbose=verbose)
    if not report.results and not details:
        lines += [_Line(0, ()), _Line(0, (("No checks ran.", "dim"),))]
    for section in details:
        lines += _section_lines(section)
    verdict = "bad" if report.exit_code else "ok"
    lines += [
        _Line(0, ()),
        _Line(
            0,
            (
                ("Summary: ", "label"),
                (counts_phrase(report.summary), "plain"),
                (f" {glyphs.dash} ", "plain"),
                (sanitize_line(gate_phrase(report)), verdict),
            ),
        ),
    ]
    if report.node is not None:
        node = report.node
        style = "ok" if node.verdict == "healthy" else "bad"
        lines.append(
            _Line(
                0,
                (
                    ("Node: ", "label"),
                    (sanitize_line(node_phrase(node)), style),
                    (f" {glyphs.dash} ", "plain"),
                    (sanitize_line(node.step), "plain"),
                ),
            )
        )
    return lines


def _header(report: Report, glyphs: _Glyphs) -> list[_Line]:
    host = report.host
    tool = (sanitize_line(f"{report.tool.name} {report.tool.version}"), "id")
    if isinstance(report, PresetReport):
        # A preset names itself and what it judged; the host only where it was read.
        first = [tool, (f"{glyphs.sep}{sanitize_line(report.preset)}", "plain")]
        if host.hostname:
            first.append((f"{glyphs.sep}host {sanitize_line(host.hostname)}", "plain"))
        if host.driver_version:
            first.append((f"{glyphs.sep}driver {sanitize_line(host.driver_version)}", "plain"))
        lines = [_Line(0, tuple(first))]
        if host.gpus:
            lines.append(
                _Line(0, (("GPUs: ", "label"), (sanitize_line(gpus_phrase(host)), "plain")))
            )
        return [*lines, _Line(0, (("Judged: ", "label"), (sanitize_line(report.subject), "plain")))]
    source = "collected live on this host" if host.source == "live" else host.source
    return [
        _Line(
            0,
            (
                tool,
                (f"{glyphs.sep}host {sanitize_line(host.hostname or 'unknown')}", "plain"),
                (f"{glyphs.sep}driver {sanitize_line(host.driver_version or 'unknown')}", "plain"),
            ),
        ),
        _Line(0, (("GPUs: ", "label"), (sanitize_line(gpus_phrase(host)), "plain"))),
        # A path is one unbreakable token: on its own line it wraps as a whole, if at all.
        _Line(0, (("Facts: ", "label"), (sanitize_line(source), "plain"))),
    ]


def _section_lines(section: Section) -> list[_Line]:
    """A detail section: its title as a heading, lines and table as they are (one line each,
    never wrapped: a table row or a log line must stay whole), notes wrapped."""
    out = [_Line(0, ()), _Line(0, ((sanitize_line(section.title), "heading"),), wrap=False)]
    out += [_Line(2, ((sanitize_line(text), "plain"),), wrap=False) for text in section.head]
    if section.columns:
        table = [[sanitize_line(c) for c in row] for row in [section.columns, *section.rows]]
        widths = [max(len(row[i]) for row in table) for i in range(len(section.columns))]
        for index, row in enumerate(table):
            cells = [
                c.rjust(widths[i]) if i in section.numeric and index else c.ljust(widths[i])
                for i, c in enumerate(row)
            ]
            style = "label" if index == 0 else "plain"
            out.append(_Line(2, (("  ".join(cells).rstrip(), style),), wrap=False))
    out += [_Line(2, ((sanitize_line(text), "plain"),), wrap=False) for text in section.lines]
    out += [_Line(2, ((sanitize_line(text), "dim"),)) for text in section.notes]
    return out


def _check_lines(
    result: Result, glyphs: _Glyphs, mark_width: int, id_width: int, *, verbose: bool
) -> list[_Line]:
    status = result.status
    check_id = sanitize_line(result.id)
    lines = [
        _Line(
            2,
            ((sanitize_line(result.title), "plain"),),
            lead=(
                (glyphs.marks[status].ljust(mark_width), status),
                (" ", "plain"),
                (check_id, "id"),
                (" " * (id_width - len(check_id) + 2), "plain"),
            ),
        )
    ]
    # Details line up under the check id.
    at = 2 + mark_width + 1
    lines.append(
        _Line(at, ((sanitize(result.summary), "dim" if status is Status.SKIP else "plain"),))
    )
    finding = status in FINDING_STATUSES
    if verbose:
        lines.append(_Line(at, ((f"severity: {result.severity}", "dim"),)))
    if finding or verbose:
        lines += [
            _Line(at, ((f"{sanitize_line(key)}: {sanitize_line(evidence_text(value))}", "dim"),))
            for key, value in result.evidence.items()
        ]
    if finding and result.remedy is not None:
        remedy = result.remedy
        lines.append(_Line(at, (("Fix: ", "label"), (sanitize(remedy.summary), "plain"))))
        lines += [
            _Line(at + 2, ((f"$ {sanitize(command)}", "command"),), wrap=False)
            for command in remedy.commands
        ]
        lines += [
            _Line(at, (("See: ", "label"), (sanitize_line(link), "link")), wrap=False)
            for link in remedy.links
        ]
    return lines


# --------------------------------------------------------------------------- writers


_HANG = 4


def _write_plain(lines: list[_Line], width: int) -> str:
    out: list[str] = []
    for line in lines:
        text = "".join(t for t, _ in line.spans)
        lead = "".join(t for t, _ in line.lead)
        pad = " " * line.indent
        # Wrapped lines hang under the text, never at the margin where a heading or a
        # check's mark starts: a long value cannot pass for a line of the report.
        hang = " " * max(line.indent + len(lead), _HANG)
        for i, para in enumerate(text.split("\n")):
            first = pad + lead if i == 0 else hang
            if line.wrap and para:
                out += textwrap.wrap(
                    para,
                    width=width,
                    initial_indent=first,
                    subsequent_indent=hang,
                    # Paths, versions and tokens stay whole: a broken path cannot be pasted.
                    break_long_words=False,
                    break_on_hyphens=False,
                )
            else:
                # Continuation lines of a multi-line command sit under its first word.
                extra = "  " if i and not line.wrap else ""
                out.append((first + extra + para).rstrip())
    return "\n".join(out) + "\n"


def _write_rich(lines: list[_Line], width: int) -> str:
    from rich.text import Text

    buffer = StringIO()
    console = _console(buffer, width)
    for line in lines:
        text = Text.assemble(*[(t, _RICH_STYLES[s]) for t, s in line.spans])
        lead = Text.assemble(*[(t, _RICH_STYLES[s]) for t, s in line.lead])
        hang = " " * max(line.indent + lead.cell_len, _HANG)
        if line.wrap:
            parts = list(text.wrap(console, max(width - len(hang), 20)))
        else:
            parts = list(text.split("\n"))
            parts[1:] = [Text("  ") + p for p in parts[1:]]
        for i, part in enumerate(parts or [Text()]):
            part.rstrip()
            first = Text(" " * line.indent) + lead if i == 0 else Text(hang)
            # soft_wrap: rich inserts no line breaks of its own, so a command stays one line.
            console.print(first + part, soft_wrap=True)
    return buffer.getvalue()


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
