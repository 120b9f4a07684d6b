"""Plain-text rendering of the P2P transfer test (``probe --p2p``): a table of GPU pairs,
then what to do about each verdict that needs something done."""

from __future__ import annotations

import textwrap

from blackwell_doctor.facts import P2PProbeFacts, P2PTransfer, Unavailable
from blackwell_doctor.rules.data import load_rule_data
from blackwell_doctor.rules.p2p import P2PVerdict, PairVerdict, pair_verdict

WIDTH = 96
HEADERS = (
    "pair",
    "driver says",
    "copy",
    "peer write",
    "uni GB/s",
    "bidi GB/s",
    "host-staged GB/s",
    "verdict",
)


def remedy(verdict: P2PVerdict) -> str | None:
    """What to do about a verdict (None: nothing): the p2p.transfer check's words for that
    case in checks/catalogue.toml, the same ones `check` prints."""
    case = load_rule_data().checks["p2p.transfer"].cases.get(verdict)
    return case.summary if case is not None else None


def render_p2p_text(facts: P2PProbeFacts | Unavailable) -> str:
    """The pair table, each pair's detail, and the remedy for each verdict present."""
    if isinstance(facts, Unavailable):
        reason = facts.reason
        if reason.startswith("skipped:"):
            return f"GPU peer-to-peer: not applicable ({reason.removeprefix('skipped:')})\n"
        return f"GPU peer-to-peer: the test did not run ({reason})\n"
    lines = [f"GPU peer-to-peer transfers ({len(facts.pairs)} pair(s), {facts.wall_s:.1f} s)", ""]
    if not facts.pairs:
        lines.append("no GPU pair was tested")
        return "\n".join(lines) + "\n"
    judged = [(pair, pair_verdict(pair)) for pair in facts.pairs]
    rows = [list(HEADERS), *(_row(pair, v) for pair, v in judged)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADERS))]
    numeric = {4, 5, 6}
    for index, row in enumerate(rows):
        cells = [
            cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    details = [(p, v) for p, v in judged if v.detail]
    if details:
        lines.append("")
        for pair, v in details:
            lines.append(f"{_pair(pair)}: {v.detail}")
    seen: list[P2PVerdict] = []
    for _, v in judged:
        if v.verdict not in seen and remedy(v.verdict):
            seen.append(v.verdict)
    for verdict in seen:
        pairs = ", ".join(_pair(p) for p, v in judged if v.verdict == verdict)
        words = textwrap.fill(
            remedy(verdict) or "", width=WIDTH, initial_indent="  ", subsequent_indent="  "
        )
        lines += ["", f"{verdict} ({pairs}):", words]
    return "\n".join(lines) + "\n"


def _pair(pair: P2PTransfer) -> str:
    return f"GPU{pair.gpu_a}<->GPU{pair.gpu_b}"


def _row(pair: P2PTransfer, judged: PairVerdict) -> list[str]:
    return [
        _pair(pair),
        _access(pair.can_access_peer),
        _check(pair.peer_copy_verified),
        _check(pair.peer_write_verified),
        _gbps(pair.unidirectional_gbps),
        _gbps(pair.bidirectional_gbps),
        _gbps(pair.host_staged_gbps),
        judged.verdict,
    ]


def _access(value: bool | Unavailable) -> str:
    if isinstance(value, Unavailable):
        return "unknown"
    return "allowed" if value else "not allowed"


def _check(value: bool | None) -> str:
    if value is None:
        return "-"
    return "verified" if value else "MISMATCH"


def _gbps(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
