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


# What starts a block when it begins a line (CommonMark 4-5): a heading, a quote, a list
# item, a thematic break or setext underline, a table row.
_BLOCK_START = re.compile(r"^(?:>|[#+=-]+(?=[ \t]|$)|\d{1,9}[.)](?=[ \t]|$))")

# A character reference (CommonMark 2.5): `&amp;`, `&#35;`, `&#x22;` would show as the
# character it names, not as typed.
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{0,31});")
_BACKTICKS = re.compile(r"`+")
# What a `<` begins that Markdown would not show as typed: raw HTML (CommonMark 6.6: an
# open or closing tag, a comment, a processing instruction, a declaration, CDATA) or an
# autolink (6.5: a URI or an e-mail address). `< 5`, `a<b` or `<the runtime's log>` are
# none of them, and print as they are.
_ATTRIBUTE = r"""\s+[A-Za-z_:][\w.:-]*(?:\s*=\s*(?:[^\s"'=<>`]+|'[^']*'|"[^"]*"))?"""
_HTML_OR_AUTOLINK = re.compile(
    rf"<(?:[A-Za-z][A-Za-z0-9-]*(?:{_ATTRIBUTE})*\s*/?>"
    r"|/[A-Za-z][A-Za-z0-9-]*\s*>"
    r"|[!?]"
    r"|[A-Za-z][A-Za-z0-9+.-]{1,31}:[^\s<>]*>"
    r"|[\w.!#$%&'*+/=?^`{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*>)"
)
_PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def prose(text: str) -> str:
    """Data as Markdown text that renders as the text itself (CommonMark 0.31, GFM 0.29),
    escaping only what Markdown would act on, so the source reads as plainly as it renders
    (issue 40: no ``&lt;redacted>``, no ``NOT\\_SUPPORTED``):

    - no raw HTML or autolink (6.6, 6.5): a ``<`` that would begin one is escaped (a
      ``<tag>`` in a log line would vanish in the ticket); ``a < b`` stays as it is;
    - no link, image or link reference definition: ``[`` at the start and ``]`` before
      ``(``, ``[`` or ``:`` (6.3, 4.7): a GPU name like ``[click](https://x)`` prints as text;
    - no emphasis nor strikethrough: every ``*`` and ``~``, and a ``_`` that is not inside a
      word (6.2: an intraword ``_`` as in ``NOT_SUPPORTED`` opens and closes nothing);
    - no character reference (``&amp;``), no backslash escape or hard break of our own
      (``\\`` before punctuation or at the end);
    - no block: one line, and what would start a heading, a quote or a list is escaped;
    - code stays code: text between matching backtick runs (6.1, as the catalogue writes
      commands, ``blackwell-doctor probe --p2p``) is kept as a code span, untouched; a
      backtick with no match is escaped.
    """
    text = " ".join(sanitize(text).split("\n")).strip(" \t")
    out: list[str] = []
    at = 0
    for start, end in _code_spans(text):
        out.append(_escape_text(text, at, start))
        out.append(text[start:end])
        at = end
    out.append(_escape_text(text, at, len(text)))
    return _BLOCK_START.sub(_escape_block_start, "".join(out))


def _code_spans(text: str) -> list[tuple[int, int]]:
    """The code spans of ``text`` as CommonMark finds them (6.1): a backtick run opens
    one, the next run of the same length closes it; a run with no such match is text."""
    runs = [(m.start(), m.end()) for m in _BACKTICKS.finditer(text)]
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(runs):
        start, end = runs[i]
        close = next(
            (j for j in range(i + 1, len(runs)) if runs[j][1] - runs[j][0] == end - start), None
        )
        if close is None:
            i += 1
            continue
        spans.append((start, runs[close][1]))
        i = close + 1
    return spans


def _escape_text(text: str, start: int, end: int) -> str:
    """``text[start:end]``, text outside code spans, with what Markdown acts on escaped
    (see :func:`prose`); its neighbours in ``text`` decide what a ``_`` or ``\\`` is."""
    out: list[str] = []
    for i in range(start, end):
        c = text[i]
        after = text[i + 1] if i + 1 < len(text) else ""
        before = text[i - 1] if i else ""
        if (
            c in "*~`"
            or (c == "_" and not (before.isalnum() and after.isalnum()))
            or (c == "\\" and (not after or after in _PUNCTUATION))
            or (c == "<" and _HTML_OR_AUTOLINK.match(text, i))
            or (c == "[" and i == 0)
            or (c == "]" and after in ("(", "[", ":"))
            or (c == "&" and _ENTITY.match(text, i))
        ):
            out.append("\\")
        out.append(c)
    return "".join(out)


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


def hostname(name: str | None, unknown: str) -> str:
    """A host's name as code: a name (or ``collect --redact``'s ``<redacted>``) shows as
    typed, with nothing escaped; ``unknown`` when there is none."""
    return code(name) if name else unknown


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
        f"# {prose(report.tool.name)} {prose(title)}: {hostname(host.hostname, 'unknown host')}",
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
        f"| Hostname | {cell(hostname(host.hostname, 'unknown'))} |",
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
