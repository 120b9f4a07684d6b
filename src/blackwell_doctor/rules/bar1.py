"""Family bar1: the BAR1 window of each GPU against its memory (issue 26).

BAR1 is the window through which the CPU and peers reach GPU memory. With Resizable BAR
(and Above 4G decoding) off in the firmware it stays at the legacy 256 MiB, and P2P or the
driver itself fails (NVIDIA/open-gpu-kernel-modules#862, #872, #935).
"""

from __future__ import annotations

from blackwell_doctor.facts.document import Facts, Unavailable
from blackwell_doctor.report.results import (
    Evidence,
    Outcome,
    Status,
    not_evaluated,
    passed,
    skipped,
)
from blackwell_doctor.ruledata.rules import RuleData
from blackwell_doctor.rules import view
from blackwell_doctor.rules.registry import check

_MIB = 1 << 20
_PREDATES = "BAR1 size not in these facts (collected before BAR1 facts existed)"
_UNSUPPORTED = "NVML has no BAR1 for these GPUs (integrated, as GB10: unified memory)"


def _mib(n: int) -> str:
    return f"{n // _MIB:,} MiB"


@check("bar1.size", reads=("platform", "nvml"))
def bar1_size(facts: Facts, rules: RuleData) -> Outcome:
    if view.is_wsl(facts):
        return skipped(f"{facts.platform.wsl.kind}: BAR1 is the Windows host's, not visible here")
    n = view.nvml_reporting(facts, lambda g: g.bar1_total_bytes, _PREDATES, _UNSUPPORTED)
    if isinstance(n, Outcome):
        return n
    legacy = rules.preflight.bar1.legacy_bytes
    multi = len(n.gpus) > 1
    evidence: Evidence = {}
    small: list[str] = []
    short: list[str] = []
    unreadable: list[str] = []
    for g in n.gpus:
        bar1 = g.bar1_total_bytes
        if not isinstance(bar1, int):
            unreadable.append(f"GPU{g.index}: {view.reason(bar1)}")
            continue
        memory = g.memory_total_bytes
        evidence[f"GPU{g.index}"] = f"BAR1 {_mib(bar1)}" + (
            f", memory {_mib(memory)}" if isinstance(memory, int) else ", memory not reported"
        )
        if bar1 <= legacy:
            small.append(f"GPU{g.index} ({_mib(bar1)})")
        elif isinstance(memory, int) and bar1 < memory:
            short.append(f"GPU{g.index} ({_mib(bar1)} < {_mib(memory)})")
    if small:
        return Outcome(
            status=Status.FAIL if multi else Status.WARN,
            summary=(
                f"BAR1 is the legacy {_mib(legacy)} window on {', '.join(small)}: Resizable BAR "
                "is off"
                + (" and peer-to-peer between the GPUs cannot map their memory" if multi else "")
            ),
            evidence=evidence,
            case="legacy_window",
            remedy_vars={"gpus": ", ".join(small)},
        )
    if short and multi:
        return Outcome(
            status=Status.WARN,
            summary=f"BAR1 smaller than the GPU's memory on {', '.join(short)}",
            evidence=evidence,
            case="smaller_than_memory",
            remedy_vars={"gpus": ", ".join(short)},
        )
    if unreadable:
        if isinstance(facts.nvml, Unavailable):
            return not_evaluated(facts.nvml.reason, **evidence)
        return not_evaluated("; ".join(unreadable), **evidence)
    return passed("BAR1 covers every GPU's memory (Resizable BAR on)", **evidence)
