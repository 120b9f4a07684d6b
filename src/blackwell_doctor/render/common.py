"""Pieces every renderer shares: status words, grouping, value and count phrasing, sanitising."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import msgspec

from blackwell_doctor.report.check import HostLine, NodeVerdict, Report, Summary, gate_words
from blackwell_doctor.report.results import EvidenceValue, Result, Status

if TYPE_CHECKING:
    from blackwell_doctor.report.bench import Comparison, ShapeResult
    from blackwell_doctor.report.sample_table import SampleTable

# The sanitising primitives live with the documents (a verdict's one-line message needs
# them too); the renderers take them from here.
from blackwell_doctor.report.sanitize import json_safe as json_safe
from blackwell_doctor.report.sanitize import sanitize as sanitize
from blackwell_doctor.report.sanitize import sanitize_line as sanitize_line
from blackwell_doctor.report.sanitize import scrub as scrub

# Characters JSON may carry raw but a terminal or an editor acts on (DEL and C1 controls
# such as CSI U+009B, bidirectional overrides and isolates, line and paragraph separators):
# written as \uXXXX escapes, which decode to the same strings. They occur only inside JSON
# strings (its syntax is ASCII), and msgspec already escapes the C0 controls.
# Compiled when a document has a character past ASCII or a DEL (start-up: a report of
# ASCII text needs no pattern).
_RAW_IN_JSON = "[\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"


def json_document(document: object) -> str:
    """Every document's JSON (``document`` already through :func:`scrub` with
    :func:`json_safe`): fields in declaration order (schema_version first, so diffs of saved
    documents are stable), indented, a trailing newline; exact (it decodes to the same
    strings) and safe to print to a terminal."""
    return "".join(json_chunks(document))


# A SampleTable's samples encoded this many at a time (report/sample_table.py).
_SAMPLE_BATCH = 1024


def json_chunks(document: object) -> Iterator[str]:
    """:func:`json_document` in pieces, written one after the other: the same text, but a
    SampleTable (a measured shape's samples) is encoded a batch of samples at a time, so a
    document of a million requests is never held whole, as objects or as text. While the
    rest is encoded, each table stands as a string no document holds: a NUL (msgspec
    writes \\u0000), a nonce of this call (a server's text cannot forge it), its number."""
    tables: list[SampleTable] = []
    nonce: list[str] = []  # made at the first table (a run's; check's documents have none)

    def stand_in(value: object) -> str:
        from blackwell_doctor.report.sample_table import SampleTable

        if not isinstance(value, SampleTable):
            raise TypeError(f"cannot encode {type(value).__name__}")
        if not nonce:
            import secrets

            nonce.append(secrets.token_hex(8))
        tables.append(value)
        return f"\x00sample-table:{nonce[0]}:{len(tables) - 1}\x00"

    data = msgspec.json.format(msgspec.json.encode(document, enc_hook=stand_in), indent=2)
    text = data.decode("utf-8") + "\n"
    done = 0
    marks = re.finditer(rf'"\\u0000sample-table:{nonce[0]}:(\d+)\\u0000"', text) if tables else ()
    for mark in marks:
        indent = line = text.rfind("\n", 0, mark.start()) + 1
        while text[indent] == " ":
            indent += 1
        yield _terminal_safe(text[done : mark.start()])
        yield from _table_json(tables[int(mark.group(1))], indent - line)
        done = mark.end()
    yield _terminal_safe(text[done:])


def _table_json(table: SampleTable, indent: int) -> Iterator[str]:
    """``table``'s samples as msgspec.json.format writes a list nested ``indent`` spaces deep."""
    if not len(table):
        yield "[]"
        return
    yield "["
    pad = " " * indent
    for start in range(0, len(table), _SAMPLE_BATCH):
        batch = table[start : start + _SAMPLE_BATCH]
        inner = msgspec.json.format(msgspec.json.encode(batch), indent=2).decode("utf-8")
        lines = inner.split("\n")[1:-1]  # without the list's own brackets
        yield ("\n" if start == 0 else ",\n") + _terminal_safe(
            "\n".join(pad + line for line in lines)
        )
    yield "\n" + pad + "]"


def _terminal_safe(data: str) -> str:
    if data.isascii() and "\x7f" not in data:
        return data
    return re.sub(_RAW_IN_JSON, _escaped, data)


def _escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


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


# The one name of Status.ERROR wherever a person reads it (issue 40: check's rows said
# "[error]", its summary and fleet "not evaluated"): a check that could not be judged, with
# the reason (DESIGN.md, "Result statuses"). JSON keeps the status's value, "error".
NOT_EVALUATED = "not evaluated"


def counts_phrase(summary: Summary) -> str:
    """ "2 failed, 1 warning, 7 passed, 1 skipped, 1 not evaluated" (zero counts left out)."""
    parts = [
        (summary.fail, "failed", "failed"),
        (summary.warn, "warning", "warnings"),
        (summary.pass_, "passed", "passed"),
        (summary.skip, "skipped", "skipped"),
        (summary.error, NOT_EVALUATED, NOT_EVALUATED),
    ]
    words = [f"{n} {one if n == 1 else many}" for n, one, many in parts if n]
    return ", ".join(words) if words else "no checks ran"


def gate_phrase(report: Report) -> str:
    """ "exit 1 (non-zero on a failure)": what a CI job will see and why."""
    return f"exit {report.exit_code} ({gate_words(report)})"


def node_phrase(node: NodeVerdict) -> str:
    """ "needs-reset", or "healthy (2 checks not evaluated)": the node verdict in one line
    (its step, which names the findings that set it, is said beside it)."""
    if not node.findings and node.not_evaluated:
        n = len(node.not_evaluated)
        return f"{node.verdict} ({n} check{'s' if n != 1 else ''} not evaluated)"
    return node.verdict


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

# A check's title is the condition it expects (checks/catalogue.toml: "Native Linux, not
# WSL"); on a warning or a failure it is labelled so, and the summary beside it says what
# was found (issue 40: "[warn] platform.wsl  Native Linux, not WSL" read as the finding).
EXPECTED = "expected: "


def title_as_shown(status: Status, title: str) -> str:
    """``title`` as a row of ``status`` shows it: labelled the expectation on a finding."""
    return f"{EXPECTED}{title}" if status in FINDING_STATUSES else title


def _as_is(text: str) -> str:
    return text


def counts_text(counts: Mapping[str, int], w: Callable[[str], str] = _as_is) -> str:
    """``timeout 2, http_500 1``: each key (placed by ``w``) and its count, in key order."""
    return ", ".join(f"{w(k)} {v}" for k, v in sorted(counts.items()))


def shape_head(shape: ShapeResult, w: Callable[[str], str] = _as_is) -> str:
    """A bench shape's first line in every format: its name, the requests that succeeded,
    the errors by kind, and whether it ran to the end."""
    head = f"{w(shape.name)}: {shape.completed}/{shape.requests} requests ok"
    if shape.errors:
        head += " — errors: " + counts_text(shape.errors, w)
    if not shape.complete:
        head += " (partial)"
    return head


def change_cells(c: Comparison) -> tuple[str, str]:
    """A comparison's change and its interval as every compare table shows them:
    ``+3.1%`` and ``[+1.0%, +5.2%]``, "-" where not measured."""
    change = "-" if c.change_pct is None else f"{c.change_pct:+.1f}%"
    ci = (
        "-"
        if c.ci_low_pct is None or c.ci_high_pct is None
        else f"[{c.ci_low_pct:+.1f}%, {c.ci_high_pct:+.1f}%]"
    )
    return change, ci


def rollup_reasons(scorecard: object, reasons: dict[str, str]) -> list[tuple[str, str]]:
    """(label, reason) of each "not comparable" roll-up of a compare's scorecard: the label
    its key and verdict ("latency: not comparable"), or the key alone where it names no
    roll-up (a document decoded from elsewhere: its keys are anything)."""
    out = []
    for key, reason in reasons.items():
        verdict = getattr(scorecard, key, None) if key.isidentifier() else None
        out.append((key if not isinstance(verdict, str) else f"{key}: {verdict}", reason))
    return out
