"""Family memory: the unified-memory budget vLLM's start-up check allows (GB10 / DGX Spark;
issue 26).

On unified memory NVML reports no memory figure. vLLM then takes as free memory what the
OS says is available (``psutil.virtual_memory().available``: MemAvailable) and refuses to
start when it is below ``total x --gpu-memory-utilization`` (vllm/utils/mem_utils.py
MemorySnapshot.measure; vllm/v1/worker/gpu_worker.py init_device: "Free memory on device
... on startup is less than desired GPU memory utilization"), where total is what
cudaMemGetInfo reports: the system's memory (MemTotal). So the highest setting it accepts is
MemAvailable / MemTotal, less a margin (checks/preflight.toml [memory]).
"""

from __future__ import annotations

import math

import msgspec

from blackwell_doctor.facts.document import Facts, MemInfo, Unavailable
from blackwell_doctor.report.results import (
    Evidence,
    Outcome,
    Status,
    not_evaluated,
    passed,
    skipped,
)
from blackwell_doctor.ruledata.preflight import MemoryData, load_preflight
from blackwell_doctor.ruledata.rules import RuleData
from blackwell_doctor.rules import view
from blackwell_doctor.rules.registry import check

_GIB = 1 << 30


class UnifiedBudget(msgspec.Struct, frozen=True):
    """What vLLM's start-up check will compare on this host, and the highest
    --gpu-memory-utilization it accepts."""

    gpus: list[str]
    total_bytes: int
    available_bytes: int
    cached_bytes: int | None
    highest_utilization: float


def unified_gpus(facts: Facts, data: MemoryData) -> list[str]:
    """GPUs whose memory is the system's, as vLLM tells them: NVML has no memory figure and
    the compute capability is in vLLM's unified list."""
    n = view.nvml(facts)
    if n is None:
        return []
    views = {g.label.split(" ", 1)[0]: g for g in view.gpus(facts)}
    out = []
    for g in n.gpus:
        v = views.get(f"GPU{g.index}")
        unified = v is not None and data.is_unified(v.cc)
        if isinstance(g.memory_total_bytes, Unavailable) and v is not None and unified:
            out.append(v.label)
    return out


def unified_budget(facts: Facts, data: MemoryData | None = None) -> UnifiedBudget | str | None:
    """The budget; a reason (str) when it applies but cannot be computed; None when no GPU
    here has unified memory. (``recommend`` and the model fit use it too.)"""
    data = data or load_preflight().memory
    gpus = unified_gpus(facts, data)
    if not gpus:
        return None
    mem = facts.platform.meminfo
    if mem is None:
        return "/proc/meminfo not in these facts (collected before it was read)"
    if isinstance(mem, Unavailable):
        return f"/proc/meminfo unreadable: {mem.reason}"
    assert isinstance(mem, MemInfo)
    if mem.available_bytes is None or mem.total_bytes <= 0:
        return "/proc/meminfo has no MemAvailable"
    share = mem.available_bytes / mem.total_bytes - data.margin
    highest = max(0.0, math.floor(share * 100) / 100)
    return UnifiedBudget(
        gpus=gpus,
        total_bytes=mem.total_bytes,
        available_bytes=mem.available_bytes,
        cached_bytes=mem.cached_bytes,
        highest_utilization=highest,
    )


@check("memory.unified_budget", reads=("platform", "nvml", "cuda"))
def memory_unified_budget(facts: Facts, rules: RuleData) -> Outcome:
    budget = unified_budget(facts, rules.preflight.memory)
    if facts.platform.meminfo is None and budget is not None:
        return skipped("/proc/meminfo not in these facts (collected before it was read)")
    if budget is None:
        n = view.nvml(facts)
        if n is None:
            return not_evaluated(f"NVML unavailable: {view.reason(facts.nvml)}")
        return skipped("no unified-memory GPU: NVML reports each GPU's own memory")
    if isinstance(budget, str):
        return not_evaluated(budget)
    from blackwell_doctor.ruledata.fit import load_fit_data  # only for a unified-memory host

    default = load_fit_data().fit.gpu_memory_utilization
    data = rules.preflight.memory
    value = f"{budget.highest_utilization:.2f}"
    available = f"{budget.available_bytes / _GIB:.2f} GiB"
    total = f"{budget.total_bytes / _GIB:.2f} GiB"
    evidence: Evidence = {
        "gpus": budget.gpus,
        "MemTotal": total,
        "MemAvailable": available,
        "Cached": f"{budget.cached_bytes / _GIB:.2f} GiB"
        if budget.cached_bytes is not None
        else None,
        "highest_gpu_memory_utilization": value,
        "vllm_default": f"{default:g}",
    }
    values = {"value": value, "default": f"{default:g}", "available": available, "total": total}
    if budget.highest_utilization < data.min_utilization:
        return Outcome(
            status=Status.FAIL,
            summary=(
                f"only {available} of {total} available: vLLM's "
                f"start-up check accepts at most --gpu-memory-utilization {value}"
            ),
            evidence=evidence,
            case="too_little",
            remedy_vars=values,
        )
    if budget.highest_utilization < default:
        return Outcome(
            status=Status.WARN,
            summary=(
                f"vLLM's default --gpu-memory-utilization {default:g} fails its start-up check "
                f"here ({available} available of {total}); "
                f"the highest it accepts is {value}"
            ),
            evidence=evidence,
            case="lower_utilization",
            remedy_vars=values,
        )
    return passed(
        f"vLLM's start-up check accepts --gpu-memory-utilization up to {value} "
        f"(default {default:g})",
        **evidence,
    )
