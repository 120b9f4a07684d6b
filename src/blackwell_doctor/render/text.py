"""``--format rich``: the doctor-style report for a person at a terminal.

Modelled on flutter doctor (a mark per check, details under it, a summary line) and brew
doctor (remedies are commands to paste). One layout feeds two writers: plain ASCII for pipes,
``NO_COLOR`` and golden files, and ``rich`` styles for a colour terminal. Text from results is
data, never markup: the rich writer builds ``Text`` objects, which rich does not parse.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

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
from blackwell_doctor.render.terminal import Item, Line, Table, command, write_plain, write_styled
from blackwell_doctor.report.check import PresetReport, Report, Section
from blackwell_doctor.report.results import Result, Status


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
        return write_styled(lines, width, _RICH_STYLES)
    return write_plain(lines, width)


# --------------------------------------------------------------------------- layout


def _layout(
    report: Report, glyphs: _Glyphs, *, verbose: bool, details: Sequence[Section]
) -> list[Item]:
    lines = _header(report, glyphs)
    mark_width = max(len(m) for m in glyphs.marks.values())
    id_width = max((len(sanitize_line(r.id)) for r in report.results), default=0)
    for family, results in group_by_family(report.results):
        lines += [Line(0, ()), Line(0, ((sanitize_line(family), "heading"),))]
        for result in results:
            lines += _check_lines(result, glyphs, mark_width, id_width, verbose=verbose)
    if not report.results and not details:
        lines += [Line(0, ()), Line(0, (("No checks ran.", "dim"),))]
    for section in details:
        lines += _section_lines(section)
    verdict = "bad" if report.exit_code else "ok"
    lines += [
        Line(0, ()),
        Line(
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
            Line(
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


def _header(report: Report, glyphs: _Glyphs) -> list[Item]:
    host = report.host
    tool = (sanitize_line(f"{report.tool.name} {report.tool.version}"), "id")
    if isinstance(report, PresetReport):
        # A preset names itself and what it judged; the host only where it was read.
        first = [tool, (f"{glyphs.sep}{sanitize_line(report.preset)}", "plain")]
        if host.hostname:
            first.append((f"{glyphs.sep}host {sanitize_line(host.hostname)}", "plain"))
        if host.driver_version:
            first.append((f"{glyphs.sep}driver {sanitize_line(host.driver_version)}", "plain"))
        lines = [Line(0, tuple(first))]
        if host.gpus:
            lines.append(
                Line(0, (("GPUs: ", "label"), (sanitize_line(gpus_phrase(host)), "plain")))
            )
        return [*lines, Line(0, (("Judged: ", "label"), (sanitize_line(report.subject), "plain")))]
    source = "collected live on this host" if host.source == "live" else host.source
    return [
        Line(
            0,
            (
                tool,
                (f"{glyphs.sep}host {sanitize_line(host.hostname or 'unknown')}", "plain"),
                (f"{glyphs.sep}driver {sanitize_line(host.driver_version or 'unknown')}", "plain"),
            ),
        ),
        Line(0, (("GPUs: ", "label"), (sanitize_line(gpus_phrase(host)), "plain"))),
        # A path is one unbreakable token: on its own line it wraps as a whole, if at all.
        Line(0, (("Facts: ", "label"), (sanitize_line(source), "plain"))),
    ]


def _section_lines(section: Section) -> list[Item]:
    """A detail section: its title as a heading, its head and lines (log lines, limits:
    their leading spaces kept as indent) and notes wrapped at spaces, its table whole
    (split into parts of whole columns where it is wider than the terminal)."""
    out: list[Item] = [Line(0, ()), Line(0, ((sanitize_line(section.title), "heading"),))]
    out += [_indented(2, sanitize_line(text)) for text in section.head]
    if section.columns:
        out.append(
            Table(
                [[sanitize_line(c) for c in row] for row in [section.columns, *section.rows]],
                indent=2,
                right=section.numeric,
                header_left=True,
                style="plain",
                header_style="label",
            )
        )
    out += [_indented(2, sanitize_line(text)) for text in section.lines]
    out += [Line(2, ((sanitize_line(text), "dim"),)) for text in section.notes]
    return out


def _indented(indent: int, text: str) -> Line:
    """A line of a section at ``indent`` plus its own leading spaces; wrapped lines hang 4
    deeper (a log line's excerpt under its marker, a limit under its label)."""
    body = text.lstrip(" ")
    at = indent + len(text) - len(body)
    return Line(at, ((body, "plain"),), hang=at + 4)


def _check_lines(
    result: Result, glyphs: _Glyphs, mark_width: int, id_width: int, *, verbose: bool
) -> list[Item]:
    status = result.status
    check_id = sanitize_line(result.id)
    lines: list[Item] = [
        Line(
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
        Line(at, ((sanitize(result.summary), "dim" if status is Status.SKIP else "plain"),))
    )
    finding = status in FINDING_STATUSES
    if verbose:
        lines.append(Line(at, ((f"severity: {result.severity}", "dim"),)))
    if finding or verbose:
        lines += [
            Line(at, ((f"{sanitize_line(key)}: {sanitize_line(evidence_text(value))}", "dim"),))
            for key, value in result.evidence.items()
        ]
    # A "not evaluated" has a remedy only where it names what is missing (a container's
    # host mount: rules/mounts.py).
    if (finding or status is Status.ERROR) and result.remedy is not None:
        remedy = result.remedy
        lines.append(Line(at, (("Fix: ", "label"), (sanitize(remedy.summary), "plain"))))
        lines += [command(at + 2, sanitize(text), style="command") for text in remedy.commands]
        lines += [
            Line(at, ((sanitize_line(link), "link"),), wrap=False, lead=(("See: ", "label"),))
            for link in remedy.links
        ]
    return lines
