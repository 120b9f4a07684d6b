"""Pieces every renderer shares: status words, grouping, value and count phrasing, sanitising."""

from __future__ import annotations

import re
from collections.abc import Sequence

from blackwell_doctor.report import HostLine, Summary
from blackwell_doctor.rules.model import EvidenceValue, Result, Status

# Control characters other than newline and tab. Results quote log lines and file contents,
# and an escape sequence in them must not recolour or rewrite the operator's terminal
# (CWE-150), nor make a JUnit file invalid XML (XML 1.0 forbids most C0 characters).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def sanitize(text: str) -> str:
    """``text`` with every control character except newline and tab shown as ``\\xNN``."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


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


def gate_phrase(exit_code: int, fail_on: str, strict: bool) -> str:
    """ "exit 1 (gate: fail)": what a CI job will see and why."""
    gate = f"gate: {fail_on}, strict" if strict else f"gate: {fail_on}"
    return f"exit {exit_code} ({gate})"


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
