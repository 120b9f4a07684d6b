"""Plain-text rendering of the P2P transfer test (``probe --p2p``): a table of GPU pairs,
then what to do about each verdict that needs something done."""

from __future__ import annotations

import textwrap

from blackwell_doctor.facts import P2PProbeFacts, P2PTransfer, Unavailable
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

# What to do, per verdict (None: nothing). Check ids are those `blackwell-doctor check` reports.
REMEDIES: dict[P2PVerdict, str | None] = {
    "works": None,
    "granted-but-broken": (
        "The driver allows peer access but transfers fail, corrupt data or hang: a "
        "tensor-parallel runtime using P2P will hang or compute garbage. The usual cause is "
        "a translating IOMMU (see the pci.iommu finding: boot with iommu=pt on the "
        "kernel command line) or ACS redirect on a "
        "bridge between the GPUs (see pci.acs); also check the BIOS (Above 4G decoding, "
        "Resizable BAR). Re-test with `blackwell-doctor probe --p2p`. Last resort until "
        "fixed: NCCL_P2P_DISABLE=1 (and vLLM --disable-custom-all-reduce)."
    ),
    "slower-than-host": (
        "Peer copies work but are slower than staging through host memory: the signature "
        "of peer traffic sent up to the root complex by ACS redirect (see pci.acs: clear "
        "ReqRedir/CmpltRedir on the bridges between the GPUs) or translated by the IOMMU "
        "(see pci.iommu: iommu=pt). Last resort: NCCL_P2P_DISABLE=1, so NCCL stages "
        "through host memory, which is faster on this host."
    ),
    "not-supported": (
        "The driver does not allow peer access for this pair (GeForce cards on stock "
        "drivers, GPUs under different CPU sockets or root complexes, a blocking topology). "
        "Runtimes copy through host memory by themselves; nothing to fix unless P2P was "
        "expected (then see pci.acs, pci.iommu and `nvidia-smi topo -p2p r`)."
    ),
    "error": (
        "The test itself could not run for this pair (see the detail). Run "
        "`blackwell-doctor probe --p2p` again; if it persists, report it with "
        "`blackwell-doctor collect --redact -o facts.json` attached."
    ),
}


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
        if v.verdict not in seen and REMEDIES.get(v.verdict):
            seen.append(v.verdict)
    for verdict in seen:
        pairs = ", ".join(_pair(p) for p, v in judged if v.verdict == verdict)
        remedy = textwrap.fill(
            REMEDIES[verdict] or "", width=WIDTH, initial_indent="  ", subsequent_indent="  "
        )
        lines += ["", f"{verdict} ({pairs}):", remedy]
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
