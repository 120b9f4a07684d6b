"""Family model: the model directory given with --model-dir, judged against these GPUs.

(Named ``checkpoint`` beside ``rules.model``, which holds the results' types.) The reading is
in ``blackwell_doctor.collect.model``; the verdicts are here: whether the model fits at some
tensor-parallel size, whether the SM 12.x tile problem applies to it, and whether Marlin in
the runtime's log is expected (W4A16) or a slow path (NVFP4).
"""

from __future__ import annotations

from blackwell_doctor.facts.document import Facts, Unavailable
from blackwell_doctor.facts.model import ModelFacts
from blackwell_doctor.report.results import (
    Evidence,
    Outcome,
    Status,
    not_evaluated,
    passed,
)
from blackwell_doctor.ruledata.fit import load_fit_data
from blackwell_doctor.ruledata.rules import RuleData
from blackwell_doctor.rules import view
from blackwell_doctor.rules.absent import NO_MODEL
from blackwell_doctor.rules.fit import GIB, FitResult, PoolError, fit, gpu_pool
from blackwell_doctor.rules.memory import UnifiedBudget, unified_budget
from blackwell_doctor.rules.registry import check, requires

# Problems that make the reading incomplete or break a container launch.
_SERIOUS = ("header", "missing-shard", "index", "symlink")


def _model(facts: Facts) -> ModelFacts | Outcome:
    m = view.section(facts.model, NO_MODEL, "the model directory could not be read: {reason}")
    if isinstance(m, Outcome):
        return m
    if m.arch is None:
        modelled = next((p.detail for p in m.problems if p.kind == "not-modelled"), None)
        if modelled is not None:
            return not_evaluated(modelled, path=m.path)
        detail = next((p.detail for p in m.problems if p.kind == "config"), "missing")
        return not_evaluated(f"config.json is unusable ({detail})", path=m.path)
    return m


def memory_utilization(facts: Facts) -> float | None:
    """On unified memory, the --gpu-memory-utilization vLLM's start-up check accepts (when
    below the runtime's default); None elsewhere: the fit's own default applies."""
    budget = unified_budget(facts)
    if not isinstance(budget, UnifiedBudget):
        return None
    return min(load_fit_data().fit.gpu_memory_utilization, budget.highest_utilization)


def model_fit_result(facts: Facts, *, utilization: float | None = None) -> FitResult | str:
    """The fit of the facts' model on the facts' GPUs, or why there is none: the one fit
    verdict (``check --model-dir``'s model.fit, ``model DIR``, ``recommend``)."""
    m = facts.model
    if isinstance(m, ModelFacts) and m.arch is None:
        modelled = next((p.detail for p in m.problems if p.kind == "not-modelled"), None)
        if modelled is not None:
            return modelled
    if m is None or isinstance(m, Unavailable) or m.arch is None:
        return NO_MODEL if m is None else "config.json is missing or unusable"
    try:
        pool = gpu_pool(facts)
    except PoolError as exc:
        return str(exc)
    if utilization is None:
        utilization = memory_utilization(facts)
    result = fit(m, pool, utilization=utilization)
    return (
        result
        if result is not None
        else "neither the weights nor config.json give the model's size"
    )


def _gb(n: int) -> str:
    return f"{n / 1e9:,.1f} GB ({n / GIB:,.1f} GiB)"


@check("model.fit", reads=("platform", "nvml", "cuda", "model"))
@requires(_model)
def model_fit(facts: Facts, rules: RuleData, m: ModelFacts) -> Outcome:
    result = model_fit_result(facts)
    if isinstance(result, str):
        return not_evaluated(result, path=m.path)
    arch = m.arch
    assert arch is not None
    evidence: Evidence = {
        "model": f"{arch.architecture} at {m.path}",
        "gpus": f"{result.gpus}, {_gb(result.memory_per_gpu_bytes)} each ({result.memory_source})",
        "weights": f"{_gb(result.weights_bytes)} ({result.weights_source})",
        "gpu_memory_utilization": result.gpu_memory_utilization,
    }
    for e in result.entries:
        evidence[f"TP {e.tensor_parallel}"] = e.reason
    problems = [f"{p.path}: {p.detail}" for p in m.problems if p.kind in _SERIOUS]
    if problems:
        evidence["problems"] = problems
    fitting = [e for e in result.entries if e.fits]
    if not result.entries:
        return not_evaluated(
            f"no tensor-parallel size up to {result.gpu_count} divides the "
            f"{arch.num_attention_heads} attention heads",
            **evidence,
        )
    if not fitting:
        widest = result.entries[-1]
        return Outcome(
            status=Status.FAIL,
            summary=f"{arch.architecture} ({_gb(result.weights_bytes)} of weights) does not fit "
            f"on {result.gpus} at any tensor-parallel size; at TP {widest.tensor_parallel}: "
            f"{widest.reason}",
            evidence=evidence,
            case="does-not-fit",
            remedy_vars={"path": m.path},
        )
    best = fitting[-1]
    summary = (
        f"fits at tensor-parallel size {', '.join(str(e.tensor_parallel) for e in fitting)}; "
        f"at TP {best.tensor_parallel} the longest context is {best.max_context:,} tokens"
    )
    if problems:
        return Outcome(
            status=Status.WARN,
            summary=summary + "; but the directory has problems: " + "; ".join(problems),
            evidence=evidence,
            case="directory-problems",
        )
    return passed(summary, **evidence)


def _is_moe_nvfp4(m: ModelFacts) -> bool:
    return m.arch is not None and m.arch.moe is not None and m.quantization.method == "nvfp4"


@check("model.kernel_path", reads=("nvml", "cuda", "model"))
@requires(_model)
def model_kernel_path(facts: Facts, rules: RuleData, m: ModelFacts) -> Outcome:
    arch = m.arch
    assert arch is not None
    gpus = view.gpus(facts)
    if not gpus or any(g.cc is None for g in gpus):
        return not_evaluated("the GPUs' compute capability is unknown")
    sm12x = any(view.is_sm12x(g.cc) for g in gpus)
    q = m.quantization
    kind = f"{'MoE' if arch.moe else 'dense'} {q.method}" + (
        f" ({arch.moe.experts} experts, {arch.moe.experts_per_token} per token)" if arch.moe else ""
    )
    evidence: Evidence = {
        "model": kind,
        "quantization": q.format,
        "compute_capability": sorted({view.cc_str(g.cc) for g in gpus}),
    }
    if _is_moe_nvfp4(m) and sm12x:
        return Outcome(
            status=Status.WARN,
            summary=f"{kind} on SM 12.x: the MoE layers run block-scaled FP4 grouped GEMMs "
            "whose stock tiles are sized for 227 KB of shared memory per block; with 99 KB the "
            "runtime must ship SM 12.x tiles or it falls back (Marlin, Triton) or fails. The "
            "runtime advice of `recommend` applies to this model",
            evidence=evidence,
            case="tile-problem-applies",
        )
    if not sm12x:
        why = "these GPUs are not SM 12.x: their 227 KB of shared memory holds the stock tiles"
    elif arch.moe is None:
        why = "a dense model runs ordinary (non-grouped) GEMMs, whose tiles fit 99 KB"
    else:
        why = (
            f"{q.method} MoE GEMMs do not use the block-scaled FP4 grouped tiles that overflow "
            "99 KB"
        )
    return passed(
        f"{kind}: the standard kernel path is right ({why}); no patched runtime is needed",
        **evidence,
    )


@check("model.w4a16", reads=("model",))
@requires(_model)
def model_w4a16(facts: Facts, rules: RuleData, m: ModelFacts) -> Outcome:
    q = m.quantization
    evidence: Evidence = {"quantization": f"{q.method} ({q.format})", "evidence": q.evidence}
    if q.method == "w4a16":
        return passed(
            "W4A16 checkpoint: Marlin (weight-only 4-bit GEMM) is the expected kernel; Marlin "
            "lines in the runtime's log are not a fallback (logs.moe_kernels treats them as "
            "info)",
            **evidence,
        )
    if q.method == "nvfp4":
        return passed(
            "NVFP4 checkpoint (W4A4): Marlin in the runtime's log means the native FP4 path "
            "was not taken, a slow fallback (logs.moe_kernels warns)",
            **evidence,
        )
    return passed(f"{q.method} checkpoint: Marlin is not expected for it", **evidence)
