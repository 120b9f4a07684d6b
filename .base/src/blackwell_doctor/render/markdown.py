"""``--format markdown``: a report to paste into a ticket (GitHub/GitLab-flavoured Markdown).

No emoji: ticket systems and mail clients render them inconsistently, and words survive
being quoted, grepped and read aloud.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import quote

from blackwell_doctor.render.common import (
    FINDING_STATUSES,
    counts_phrase,
    evidence_text,
    gate_phrase,
    gpus_phrase,
    longest_run,
    node_phrase,
    sanitize,
    sanitize_line,
)
from blackwell_doctor.report.check import PresetReport, Report, Section
from blackwell_doctor.report.results import Result, Status

_STATUS_WORD: dict[Status, str] = {
    Status.FAIL: "**FAIL**",
    Status.WARN: "**WARN**",
    Status.PASS: "pass",
    Status.SKIP: "skip",
    Status.ERROR: "error",
}


# Inline syntax that text from a facts file could use to forge links, images or emphasis in
# a ticket (CommonMark 2.4: any ASCII punctuation may be backslash-escaped).
_INLINE = str.maketrans({c: "\\" + c for c in "\\`*_[]!~"})


# What starts a block when it begins a line (CommonMark 4-5): a heading, a quote, a list
# item, a thematic break or setext underline, a table row.
_BLOCK_START = re.compile(r"^(?:>|[#+=-]+(?=[ \t]|$)|\d{1,9}[.)](?=[ \t]|$))")


def prose(text: str) -> str:
    """Data as Markdown text: no control characters, no raw HTML (a ``<tag>`` in a log line
    would vanish or render in the ticket instead of being shown), no inline syntax (a GPU
    name like ``[click](https://x)`` must print as text, not become a link), and one line
    that starts no block: a hostname ``a\\n# Heading`` must not add a heading."""
    text = " ".join(sanitize(text).split("\n")).strip(" \t")
    text = text.translate(_INLINE).replace("<", "&lt;")
    return _BLOCK_START.sub(_escape_block_start, text)


def _escape_block_start(match: re.Match[str]) -> str:
    start = match.group()
    if start[0].isdigit():  # "1." starts a list, "1\." does not; "\1." would
        return start[:-1] + "\\" + start[-1]
    return "\\" + start


def link(url: str) -> str:
    """An autolink, its characters that could end it, or turn it into raw HTML or another
    link, percent-encoded; something that is not an absolute URL is shown as code."""
    url = sanitize_line(url)
    if not _SCHEME.match(url):
        return code(url)
    return "<" + quote(url, safe=_URL_SAFE) + ">"


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]{1,31}:[^\s<>]")
_URL_SAFE = "/:?#@!$&'*+,;=%~-._"


def cell(text: str) -> str:
    """``text`` safe inside a GFM table cell: a bare ``|`` would start a new column and a
    newline would end the row (GFM spec, tables: ``\\|`` is a literal pipe, in code spans
    too)."""
    return text.replace("|", "\\|").replace("\n", "<br>")


def code(text: str) -> str:
    """``text`` as an inline code span, whatever backticks it contains (CommonMark 6.1)."""
    text = sanitize(text).replace("\n", " ")
    ticks = "`" * (longest_run(text, "`") + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def fence(text: str) -> str:
    """A code fence longer than any backtick run inside ``text`` (CommonMark 4.5)."""
    return "`" * max(3, longest_run(text, "`") + 1)


def render_markdown(report: Report, details: Sequence[Section] = ()) -> str:
    """``details``: the preset's detail sections, under "Details"."""
    host = report.host
    title = report.preset if isinstance(report, PresetReport) else "report"
    out = [
        f"# {prose(report.tool.name)} {prose(title)}: {prose(host.hostname or 'unknown host')}",
        "",
        f"**{counts_phrase(report.summary)}** — {prose(gate_phrase(report))}",
        "",
        *(
            [f"**Node: {prose(node_phrase(report.node))}** — {prose(report.node.step)}", ""]
            if report.node is not None
            else []
        ),
        "| Host | |",
        "|---|---|",
        f"| Hostname | {cell(prose(host.hostname or 'unknown'))} |",
        f"| GPUs | {cell(prose(gpus_phrase(host)))} |",
        f"| Driver | {cell(prose(host.driver_version or 'unknown'))} |",
        f"| Source | {cell(code(host.source))} |",
        *(
            [f"| Judged | {cell(prose(report.subject))} |"]
            if isinstance(report, PresetReport)
            else []
        ),
        f"| Tool | {cell(prose(f'{report.tool.name} {report.tool.version}'))} |",
        "",
        "## Results",
        "",
    ]
    if report.results:
        out += ["| Status | Check | Title | Summary |", "|---|---|---|---|"]
        out += [
            f"| {_STATUS_WORD[r.status]} | {cell(code(r.id))} | {cell(prose(r.title))} "
            f"| {cell(prose(r.summary))} |"
            for r in report.results
        ]
    else:
        out.append("No checks ran.")
    findings = [r for r in report.results if r.status in FINDING_STATUSES]
    out += ["", "## What to fix", ""]
    if not findings:
        out.append("Nothing: no check failed or warned.")
    # Failures first, then warnings, each in report order: the order to work in.
    findings.sort(key=lambda r: r.status is not Status.FAIL)
    for result in findings:
        out += _finding(result)
    if details:
        out += ["", "## Details", ""]
    for section in details:
        out += _section(section)
    return "\n".join(out).rstrip("\n") + "\n"


def _section(section: Section) -> list[str]:
    """A detail section: preformatted lines in code fences (log lines, limits), the table
    as a GFM table, notes as paragraphs; every text one line."""
    out = [f"### {prose(section.title)}", ""]
    for block in (section.head, None, section.lines):
        if block is None:
            if section.columns:
                out += [
                    "| " + " | ".join(cell(prose(c)) for c in section.columns) + " |",
                    "|"
                    + "|".join(
                        "---:" if i in section.numeric else "---"
                        for i in range(len(section.columns))
                    )
                    + "|",
                ]
                out += [
                    "| " + " | ".join(cell(prose(c)) for c in row) + " |" for row in section.rows
                ]
                out.append("")
            continue
        if block:
            text = "\n".join(sanitize_line(line) for line in block)
            marker = fence(text)
            out += [marker, text, marker, ""]
    out += [prose(note) + "\n" for note in section.notes]
    return out


def _finding(result: Result) -> list[str]:
    out = [
        f"### {_STATUS_WORD[result.status]} {code(result.id)}: {prose(result.title)}",
        "",
        prose(result.summary),
        "",
    ]
    if result.evidence:
        out += [f"- {prose(k)}: {code(evidence_text(v))}" for k, v in result.evidence.items()]
        out.append("")
    remedy = result.remedy
    if remedy is None:
        return out
    out += [f"**Fix:** {prose(remedy.summary)}", ""]
    if remedy.commands:
        # Inside a fence nothing is interpreted, so commands are only freed of control bytes.
        script = "\n".join(sanitize(c) for c in remedy.commands)
        marker = fence(script)
        out += [f"{marker}sh", script, marker, ""]
    if remedy.links:
        out += [f"- {link(url)}" for url in remedy.links]
        out.append("")
    return out
