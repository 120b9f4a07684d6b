"""Pieces every renderer shares: status words, grouping, value and count phrasing, sanitising."""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import msgspec

from blackwell_doctor.report.check import HostLine, Report, Summary, gate_words
from blackwell_doctor.report.results import EvidenceValue, Result, Status

# What must not reach a reader as it is: control characters other than newline and tab
# (C0, DEL, C1: an escape sequence must not recolour or rewrite the operator's terminal,
# CWE-150), bidirectional overrides and isolates (they reorder what is shown, CVE-2021-42574),
# lone surrogates (undecodable bytes of a file name or variable, kept by Python's
# surrogateescape: not encodable as UTF-8) and U+FFFE/U+FFFF (XML 1.0 forbids them, as it
# does the C0 controls). Results quote log lines, file names and other hosts' facts.
_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]"
)
_SURROGATE = re.compile("[\ud800-\udfff]")


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the undecodable byte itself
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def sanitize(text: str) -> str:
    """``text`` fit for a terminal, Markdown or XML: every unsafe character (above) shown
    as ``\\xNN`` or ``\\uNNNN``; newline and tab kept."""
    return _UNSAFE.sub(_shown, text)


def sanitize_line(text: str) -> str:
    """:func:`sanitize`, and a newline shown as ``\\n``: for values that are one line (a
    host name, a file name, an id), where a newline would forge a line of the report."""
    return sanitize(text).replace("\n", "\\n")


def json_safe(text: str) -> str:
    """``text`` that JSON encoders accept: lone surrogates shown as :func:`sanitize` shows
    them (JSON escapes everything else itself)."""
    return _SURROGATE.sub(_shown, text)


# Glyphs of the reports and their ASCII stand-ins, for an output that cannot encode them
# (PYTHONIOENCODING=ascii, a C locale): words stay readable instead of a crash.
_ASCII = str.maketrans(
    {
        "—": "-",
        "–": "-",
        "·": "|",
        "✓": "ok",
        "✗": "x",
        "≥": ">=",
        "≤": "<=",
        "≈": "~",
        "→": "->",
        "←": "<-",
        "…": "...",
        "×": "x",
        "µ": "u",
        "’": "'",
        "‘": "'",
        "“": '"',
        "”": '"',
        "\u00a0": " ",
    }
)


def encodable(text: str, encoding: str) -> str:
    """``text`` as it can be written in ``encoding``: unchanged when it can, else with the
    glyphs above in ASCII and anything else left shown as a ``\\u`` escape."""
    try:
        text.encode(encoding)
    except UnicodeEncodeError:
        text = text.translate(_ASCII)
        return text.encode(encoding, "backslashreplace").decode(encoding)
    except LookupError:
        return text
    return text


T = TypeVar("T")


def scrub(document: T, clean: Callable[[str], str]) -> T:
    """``document`` (msgspec structs, lists, tuples, dicts) with ``clean`` applied to every
    string in it, keys included: the one sanitising step at a renderer's boundary, so that
    no field can be forgotten. Enum members are the tool's own words and stay as they are;
    parts that need no change are shared, not copied."""
    if isinstance(document, str):
        if isinstance(document, enum.Enum):
            return document
        return cast(T, clean(document))
    if isinstance(document, msgspec.Struct):
        changes: dict[str, Any] = {}
        for name in document.__struct_fields__:
            value = getattr(document, name)
            new = scrub(value, clean)
            if new is not value:
                changes[name] = new
        return msgspec.structs.replace(document, **changes) if changes else document
    if isinstance(document, list | tuple):
        items = [scrub(x, clean) for x in document]
        if all(a is b for a, b in zip(items, document, strict=True)):
            return document
        return cast(T, items if isinstance(document, list) else tuple(items))
    if isinstance(document, dict):
        pairs = {scrub(k, clean): scrub(v, clean) for k, v in document.items()}
        if all(k in document and document[k] is v for k, v in pairs.items()):
            return document
        return cast(T, pairs)
    return document


def group_by_family(results: Sequence[Result]) -> list[tuple[str, list[Result]]]:
    """Results grouped by family, families in order of first appearance (report order)."""
    groups: dict[str, list[Result]] = {}
    for result in results:
        groups.setdefault(result.family, []).append(result)
    return list(groups.items())


def evidence_text(value: EvidenceValue) -> str:
    """One evidence value as a human reads it (JSON keeps the typed value)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ", ".join(value) if value else "(empty)"
    return str(value)


def counts_phrase(summary: Summary) -> str:
    """ "2 failed, 1 warning, 7 passed, 1 skipped, 1 not evaluated" (zero counts left out)."""
    parts = [
        (summary.fail, "failed", "failed"),
        (summary.warn, "warning", "warnings"),
        (summary.pass_, "passed", "passed"),
        (summary.skip, "skipped", "skipped"),
        (summary.error, "not evaluated", "not evaluated"),
    ]
    words = [f"{n} {one if n == 1 else many}" for n, one, many in parts if n]
    return ", ".join(words) if words else "no checks ran"


def gate_phrase(report: Report) -> str:
    """ "exit 1 (gate: fail)": what a CI job will see and why."""
    return f"exit {report.exit_code} ({gate_words(report)})"


def gpus_phrase(host: HostLine) -> str:
    """ "2 x NVIDIA RTX PRO 6000, NVIDIA RTX 5090": identical GPUs counted, order kept."""
    if not host.gpus:
        return "none found"
    counts: dict[str, int] = {}
    for name in host.gpus:
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(name if n == 1 else f"{n} x {name}" for name, n in counts.items())


def longest_run(text: str, char: str) -> int:
    """The length of the longest run of ``char`` in ``text`` (0 when there is none)."""
    return max((len(m) for m in re.findall(f"{re.escape(char)}+", text)), default=0)


# Statuses that are findings: they show their remedy and land in "What to fix".
FINDING_STATUSES = frozenset({Status.WARN, Status.FAIL})
