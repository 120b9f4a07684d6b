"""Family platform: where the GPU is driven from (native Linux, WSL2, WSL1)."""

from __future__ import annotations

from blackwell_doctor.facts.document import Facts, Unavailable
from blackwell_doctor.report.results import Evidence, Outcome, Status, not_evaluated, passed
from blackwell_doctor.ruledata.rules import RuleData
from blackwell_doctor.rules.registry import check


@check("platform.wsl", reads=("platform",))
def platform_wsl(facts: Facts, rules: RuleData) -> Outcome:
    wsl = facts.platform.wsl
    evidence: Evidence = {
        "kind": wsl.kind,
        "signals": list(wsl.signals),
    }
    if wsl.kind == "unknown":
        return not_evaluated(
            "the kernel's version strings could not be read ("
            + "; ".join(
                r.reason
                for r in (facts.platform.kernel_version, facts.platform.kernel_release)
                if isinstance(r, Unavailable)
            )
            + ")",
            **evidence,
        )
    if wsl.kind == "wsl1":
        return Outcome(
            status=Status.FAIL,
            summary="WSL1: no GPU access at all (CUDA needs WSL2)",
            evidence=evidence,
            case="wsl1",
        )
    if wsl.kind == "wsl2":
        return Outcome(
            status=Status.WARN,
            summary=(
                "WSL2: the GPU is reached through the Windows driver (/dev/dxg); no GPU "
                "peer-to-peer, no pinned memory in vLLM, and one field report measured 55 tok/s "
                "under WSL2 against 119 tok/s native on the same machine"
            ),
            evidence=evidence,
            case="wsl2",
        )
    return passed("native Linux (no WSL signal)", **evidence)
