"""Family p2p: what the driver says about peer-to-peer for each GPU pair.

NVML's OK is a grant, not proof that transfers work (REFERENCE.md §4: patched drivers
report OK while transfers hang), so a pass here says only what the driver claims.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal, cast, get_args

import msgspec

from blackwell_doctor.facts.document import Facts, P2PTransfer, Unavailable
from blackwell_doctor.report.results import (
    Evidence,
    Outcome,
    Result,
    Status,
    not_evaluated,
    passed,
    skipped,
)
from blackwell_doctor.ruledata.rules import P2PThresholds, RuleData, load_rule_data
from blackwell_doctor.rules import view
from blackwell_doctor.rules.registry import check

# Short names used in the field (nvidia-smi topo -p2p r legend).
SHORT = {
    "OK": "OK",
    "CHIPSET_NOT_SUPPORTED": "CNS",
    "GPU_NOT_SUPPORTED": "GNS",
    "TOPOLOGY_NOT_SUPPORTED": "TNS",
    "DISABLED_BY_REGKEY": "DR",
    "NOT_SUPPORTED": "NS",
    "UNKNOWN": "U",
}


_ABSENT_SHOWN = 8


@check("p2p.nvml_status", reads=("nvml",))
def p2p_nvml_status(facts: Facts, rules: RuleData) -> Outcome:
    n = view.nvml(facts)
    if n is None:
        return not_evaluated(f"NVML unavailable: {view.reason(facts.nvml)}")
    if len(n.gpus) < 2:
        return skipped("one GPU: no GPU pair" if n.gpus else "no GPU: no GPU pair")
    if isinstance(n.p2p, Unavailable):
        return not_evaluated(f"NVML P2P status unavailable: {n.p2p.reason}")
    if not n.p2p:
        return not_evaluated("NVML returned no P2P status for any pair")
    matrix: Evidence = {}
    refused: list[str] = []
    unreadable: list[str] = []
    for pair in n.p2p:
        name = f"GPU{pair.gpu_a}-GPU{pair.gpu_b}"
        cells: list[str] = []
        for kind, value in (
            ("read", pair.read),
            ("write", pair.write),
            ("nvlink", pair.nvlink),
            ("atomics", pair.atomics),
        ):
            shown = value if isinstance(value, str) else f"unavailable:{value.reason}"
            cells.append(f"{kind}={SHORT.get(shown, shown)}")
            if kind in ("read", "write"):
                if isinstance(value, Unavailable):
                    unreadable.append(f"{name} {kind}: {value.reason}")
                elif value != "OK":
                    refused.append(f"{name} {kind} {value} ({SHORT.get(value, value)})")
        matrix[name] = " ".join(cells)
    expected = len(n.gpus) * (len(n.gpus) - 1) // 2
    listed = {(p.gpu_a, p.gpu_b) for p in n.p2p}
    absent = [
        f"GPU{a.index}-GPU{b.index}"
        for i, a in enumerate(n.gpus)
        for b in n.gpus[i + 1 :]
        if (a.index, b.index) not in listed
    ]
    if absent:
        # Named up to a few, then counted: the text stays readable and bounded.
        shown = ", ".join(absent[:_ABSENT_SHOWN])
        more = f" and {len(absent) - _ABSENT_SHOWN} more" if len(absent) > _ABSENT_SHOWN else ""
        unreadable.append(f"no status for {shown}{more} ({len(listed)} of {expected} pairs)")
    geforce = all(isinstance(g.name, str) and "GeForce" in g.name for g in n.gpus)
    if refused and geforce:
        # Not a fault to fix: NVIDIA's stock drivers give GeForce cards no P2P at all.
        return skipped(
            "GeForce cards have no peer-to-peer on NVIDIA's stock drivers; NCCL and vLLM copy "
            "through host memory by themselves (expect slower tensor-parallel all-reduce)",
            **matrix,
        )
    if refused:
        return Outcome(
            status=Status.WARN,
            summary="NVML refuses P2P for " + "; ".join(refused),
            evidence=matrix,
            case="refused",
        )
    if unreadable:
        return not_evaluated("; ".join(unreadable), **matrix)
    return passed(
        f"NVML grants read and write P2P for {view.plural(len(n.p2p), 'GPU pair')} "
        "(a grant, not proof that transfers work)",
        **matrix,
    )


P2PVerdict = Literal[
    "works",  # peer access enabled, copies and peer writes verified, not slower than host
    "granted-but-broken",  # the driver allows it but data is wrong, a fault, or a hang
    "slower-than-host",  # verified, but slower than staging through host memory (ACS/IOMMU)
    "not-supported",  # the driver does not allow peer access for this pair
    "error",  # the test itself could not run (reason in detail)
]


class PairVerdict(msgspec.Struct, frozen=True):
    verdict: P2PVerdict
    detail: str | None = None


def pair_verdict(t: P2PTransfer, thresholds: P2PThresholds | None = None) -> PairVerdict:
    """One tested pair's verdict from its measurements (the only place it is decided:
    p2p.transfer, ``probe --p2p``, recommend and apply all ask here)."""
    if thresholds is None:
        thresholds = load_rule_data().thresholds.p2p
    can = t.can_access_peer
    if isinstance(can, Unavailable):
        return PairVerdict("error", can.reason)
    if not can:
        asymmetric = f"asymmetric: only {t.access_only} allowed" if t.access_only else None
        return PairVerdict("not-supported", asymmetric)
    if t.mismatch is not None:
        return PairVerdict("granted-but-broken", t.mismatch)
    if t.fault is not None:
        return PairVerdict("granted-but-broken", t.fault)
    if t.error is not None:
        return PairVerdict("error", t.error)
    verified = (t.peer_copy_verified, t.peer_write_verified, t.after_load_verified)
    uni, host = t.unidirectional_gbps, t.host_staged_gbps
    if not all(verified) or uni is None or host is None:
        return PairVerdict(
            "error", "p2p-incomplete:" + (",".join(t.not_measured) or "done-not-seen")
        )
    ratio = thresholds.min_peer_vs_host
    if uni < host * ratio:
        arrow = t.direction or "peer"
        control = "host-staged" if ratio == 1.0 else f"{ratio:g}x host-staged"
        return PairVerdict(
            "slower-than-host", f"{arrow} peer copy {uni:.1f} GB/s < {control} {host:.1f} GB/s"
        )
    return PairVerdict("works")


_PAIR = re.compile(r"GPU\d+-GPU\d+")


def judged_pairs(results: Sequence[Result]) -> list[tuple[str, P2PVerdict]]:
    """Each tested pair's verdict as ``p2p.transfer`` gave it in a report (its evidence, one
    ``GPUa-GPUb: <verdict>: ...`` per pair, in the order measured): what readers of the
    report (recommend) act on. Empty when the check judged no pair."""
    out: list[tuple[str, P2PVerdict]] = []
    for r in results:
        if r.id != "p2p.transfer":
            continue
        for name, text in r.evidence.items():
            verdict = text.split(":", 1)[0] if isinstance(text, str) else ""
            if _PAIR.fullmatch(name) and verdict in get_args(P2PVerdict):
                out.append((name, cast(P2PVerdict, verdict)))
    return out


@check("p2p.transfer", reads=("nvml", "p2p_transfers"))
def p2p_transfer(facts: Facts, rules: RuleData) -> Outcome:
    t = view.probed(
        facts.p2p_transfers,
        absent=rules.word("reasons", "p2p_not_tested"),
        not_run="peer transfers not tested: {why}",
        failed="the peer-transfer test did not run: {reason}",
        measured=lambda t: t.pairs,
        nothing="the peer-transfer test measured no pair",
    )
    if isinstance(t, Outcome):
        return t
    evidence: Evidence = {}
    n = view.nvml(facts)
    gpu_count = len(n.gpus) if n is not None else None
    measured = {(p.gpu_a, p.gpu_b) for p in t.pairs}
    if gpu_count is not None and len(measured) < gpu_count * (gpu_count - 1) // 2:
        expected = gpu_count * (gpu_count - 1) // 2
        evidence["pairs measured"] = f"{len(measured)} of {expected}"
    by_verdict: dict[str, list[str]] = {}
    for p in t.pairs:
        judged = pair_verdict(p, rules.thresholds.p2p)
        name = f"GPU{p.gpu_a}-GPU{p.gpu_b}"
        bw = (
            f"{p.unidirectional_gbps:.1f} GB/s uni"
            if p.unidirectional_gbps is not None
            else "no bandwidth"
        )
        if p.host_staged_gbps is not None:
            bw += f", host-staged {p.host_staged_gbps:.1f} GB/s"
        detail = f" ({judged.detail})" if judged.detail else ""
        evidence[name] = f"{judged.verdict}: {bw}{detail}"
        by_verdict.setdefault(judged.verdict, []).append(name + detail)
    if "granted-but-broken" in by_verdict:
        return Outcome(
            status=Status.FAIL,
            summary="peer access is granted but transfers fail for "
            + "; ".join(by_verdict["granted-but-broken"]),
            evidence=evidence,
            case="granted-but-broken",
        )
    if "slower-than-host" in by_verdict:
        return Outcome(
            status=Status.WARN,
            summary="peer transfers are slower than staging through host memory for "
            + ", ".join(by_verdict["slower-than-host"]),
            evidence=evidence,
            case="slower-than-host",
        )
    if "error" in by_verdict:
        return not_evaluated("the test failed for " + "; ".join(by_verdict["error"]), **evidence)
    if "pairs measured" in evidence:
        return not_evaluated(
            f"only {evidence['pairs measured']} GPU pairs were tested; the rest are unknown",
            **evidence,
        )
    works = by_verdict.get("works", [])
    unsupported = by_verdict.get("not-supported", [])
    if not works:
        return skipped(rules.word("reasons", "p2p_no_peer_access"), **evidence)
    summary = f"verified peer copies and writes for {view.plural(len(works), 'GPU pair')}"
    if unsupported:
        summary += f"; no peer access for {', '.join(unsupported)}"
    return passed(summary, **evidence)
