"""Launch settings derived from the facts and the report, never copied from an example.

REFERENCE §5 lists the environment used with the K=64 image (OMP_NUM_THREADS = cores / TP,
CUDA_DEVICE_MAX_CONNECTIONS=32, ...); here each value is computed for the host at hand and
carries the reason it has that value.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from blackwell_doctor.facts.document import CpuFacts, Facts, PciFacts, Unavailable
from blackwell_doctor.report.check import Report
from blackwell_doctor.report.results import Status
from blackwell_doctor.ruledata.rules import load_rule_data
from blackwell_doctor.ruledata.validate import ValidationError
from blackwell_doctor.rules import view
from blackwell_doctor.rules.checkpoint import memory_utilization
from blackwell_doctor.rules.memory import UnifiedBudget, unified_budget
from blackwell_doctor.rules.p2p import judged_pairs
from blackwell_doctor.rules.pci import iommu_passthrough_requested

# Findings that say GPU peer-to-peer is broken or refused on this host.
P2P_FINDING_PREFIXES = ("p2p.",)
_FINDING = frozenset({Status.WARN, Status.FAIL})
_TRANSLATING = frozenset({"DMA", "DMA-FQ"})


def tensor_parallel_size(gpu_count: int) -> int:
    """The largest power of two not above the GPU count (attention heads split evenly)."""
    if gpu_count < 1:
        raise ValueError("tensor parallelism needs at least one GPU")
    return 1 << (gpu_count.bit_length() - 1)


def omp_num_threads(logical_cpus: int, tp: int) -> int:
    """CPU threads per tensor-parallel worker: the logical CPUs shared out, at least 1."""
    if tp < 1:
        raise ValueError("tensor-parallel size must be at least 1")
    return max(1, logical_cpus // tp)


def gpu_count(facts: Facts) -> int:
    """GPUs the driver answers for; the PCI inventory when the driver does not."""
    gpus = view.gpus(facts)
    return len(gpus) if gpus else len(view.pci_gpus(facts))


def is_sm12x_host(facts: Facts) -> bool:
    return any(view.is_sm12x(g.cc) for g in view.gpus(facts))


def logical_cpus(facts: Facts) -> int | None:
    cpu = facts.platform.cpu
    if isinstance(cpu, CpuFacts) and cpu.logical_cpus and cpu.logical_cpus > 0:
        return cpu.logical_cpus
    return None


def _cmdline_options(facts: Facts) -> dict[str, str] | None:
    if isinstance(facts.pci, PciFacts):
        return facts.pci.iommu.cmdline_options
    cmdline = facts.platform.kernel_cmdline
    if isinstance(cmdline, Unavailable):
        return None
    options: dict[str, str] = {}
    for word in cmdline.split():
        key, sep, value = word.partition("=")
        if sep and key in ("iommu", "iommu.passthrough", "amd_iommu", "intel_iommu"):
            options[key] = value
    return options


def iommu_passthrough_in_effect(facts: Facts) -> bool | None:
    """True when iommu=pt is asked for and no GPU's IOMMU domain translates; None: unknown."""
    options = _cmdline_options(facts)
    if options is None:
        return None
    if not iommu_passthrough_requested(options):
        return False
    if isinstance(facts.pci, PciFacts):
        return not any(g.iommu_domain_type in _TRANSLATING for g in facts.pci.gpus)
    return True


def p2p_findings(report: Report) -> list[str]:
    return [
        r.id
        for r in report.results
        if r.status in _FINDING and r.id.startswith(P2P_FINDING_PREFIXES)
    ]


# Verdicts of `probe --p2p` that come from moving data (an "error" pair was not measured).
_MEASURED = frozenset({"works", "granted-but-broken", "slower-than-host", "not-supported"})


def _p2p_note(case: str, **values: str) -> str:
    """recommend's words about NCCL_P2P_DISABLE: the p2p action's [action.notes] in
    checks/catalogue.toml."""
    [action] = [a for a in load_rule_data().actions if a.key == "p2p"]
    return action.note(case, **values)


@dataclass(frozen=True)
class P2PDecision:
    """Whether NCCL should keep off peer-to-peer, and on what evidence."""

    disable: bool
    measured: bool  # decided from measured transfers (p2p.transfer), not the driver's answer
    why: str


def p2p_decision(facts: Facts, report: Report) -> P2PDecision | None:
    """NCCL_P2P_DISABLE for this host; None when nothing says anything about P2P.

    Measured transfers (``probe --p2p``) outrank the driver: NVML's answer is a grant or a
    refusal, not a test (REFERENCE §4: patched drivers answer OK while transfers hang, and a
    refusal in NVML does not stop a pair from copying correctly and fast). So when pairs were
    measured, only their verdicts decide and NVML's refusal alone never sets the variable.
    """
    # The verdicts are the p2p.transfer check's, as the report carries them.
    verdicts = judged_pairs(report.results)
    measured = [(name, v) for name, v in verdicts if v in _MEASURED]
    if measured:
        broken = [name for name, v in measured if v == "granted-but-broken"]
        slower = [name for name, v in measured if v == "slower-than-host"]
        unmeasured = len(verdicts) - len(measured)
        tail = _p2p_note("untested", n=str(unmeasured)) if unmeasured else ""
        if broken:
            # Data wrong, a fault or a hang: correctness first, whatever the IOMMU mode.
            return P2PDecision(
                disable=True,
                measured=True,
                why=_p2p_note("measured_broken", pairs=", ".join(broken), untested=tail),
            )
        if slower:
            # Slower than the host-staged control copy: P2P here is the slow path (peer
            # traffic routed up through the root complex by ACS, or translated by the
            # IOMMU), so NCCL's host-memory path is measured to be faster. Disabling P2P
            # helps whether or not iommu=pt is in effect; it is not only a hang workaround.
            return P2PDecision(
                disable=True,
                measured=True,
                why=_p2p_note("measured_slower", pairs=", ".join(slower), untested=tail),
            )
        refused = [i for i in p2p_findings(report) if i != "p2p.transfer"]
        if refused:
            return P2PDecision(
                disable=False,
                measured=True,
                why=_p2p_note("measured_fine", checks=", ".join(refused), untested=tail),
            )
        return None
    broken_ids = p2p_findings(report)
    if not broken_ids:
        return None
    pt = iommu_passthrough_in_effect(facts)
    values = {"checks": ", ".join(broken_ids), "basis": _p2p_note("driver_only")}
    if pt is not True:
        pt_state = _p2p_note("pt_unknown" if pt is None else "pt_off")
        return P2PDecision(
            disable=True,
            measured=False,
            why=_p2p_note("driver_disable", pt_state=pt_state, **values),
        )
    return P2PDecision(disable=False, measured=False, why=_p2p_note("driver_keep", **values))


@dataclass(frozen=True)
class Derived:
    """Settings for one host, each with the reason it has its value."""

    gpu_count: int
    tensor_parallel_size: int
    sm12x: bool
    env: dict[str, str] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # From the model (--model-dir), when it was sized: the longest context the KV budget
    # holds at the chosen TP, the utilization that arithmetic assumed, and the MoE backend
    # its quantization calls for (None: the runtime catalogue's choice).
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.9
    moe_backend: str | None = None
    # The utilization comes from the unified-memory budget (memory.unified_budget), so it
    # is a setting even when no model was sized.
    memory_budget: bool = False


class ModelDoesNotFit(ValidationError):
    """The model cannot be launched on these GPUs at any tensor-parallel size (one line)."""


@dataclass(frozen=True)
class ModelSizing:
    tensor_parallel_size: int
    max_model_len: int
    gpu_memory_utilization: float
    moe_backend: str | None
    why: dict[str, str]


def _round_context(tokens: int, limit: int | None) -> int:
    """The context to launch with: the model's own limit when the budget reaches it, else
    the budget rounded down to a multiple of 1024 tokens (never below 1024 when it fits)."""
    if limit is not None and tokens >= limit:
        return limit
    return max(1024, tokens // 1024 * 1024) if tokens >= 1024 else tokens


def size_model(facts: Facts, gpu_count: int) -> ModelSizing | str | None:
    """The launch the model's fit calls for; None without a model; a string when it cannot
    be sized (the reason, shown as a note). Raises ModelDoesNotFit."""
    from blackwell_doctor.rules.checkpoint import model_fit_result

    m = facts.model
    if m is None:
        return None
    words = load_rule_data().launch
    result = model_fit_result(facts)
    if isinstance(result, str):
        return words.reason("model_not_sized", reason=result)
    assert not isinstance(m, Unavailable)
    arch = m.arch
    assert arch is not None
    fitting = [e for e in result.entries if e.fits and e.tensor_parallel <= gpu_count]
    if not fitting:
        widest = result.entries[-1] if result.entries else None
        detail = f"; at TP {widest.tensor_parallel}: {widest.reason}" if widest else ""
        raise ModelDoesNotFit(
            f"refusing to launch {arch.architecture} from {m.path}: it does not fit on "
            f"{result.gpus} at any tensor-parallel size{detail}"
        )
    best = fitting[-1]
    assert best.max_context is not None
    length = _round_context(best.max_context, arch.max_position_embeddings)
    q = m.quantization
    backend: str | None = None
    why = {
        "tensor_parallel_size": words.reason(
            "fit_tensor_parallel_size",
            architecture=arch.architecture,
            gpus=result.gpus,
            sizes=", ".join(str(e.tensor_parallel) for e in fitting),
            reason=best.reason,
        ),
        "max_model_len": words.reason(
            "max_model_len",
            tp=str(best.tensor_parallel),
            tokens=f"{best.max_context:,}",
            limit=(
                words.reason("max_model_len_model_limit", limit=f"{arch.max_position_embeddings:,}")
                if length == arch.max_position_embeddings
                else words.reason("max_model_len_rounded")
            ),
        ),
        "gpu_memory_utilization": _utilization_why(facts, result.gpu_memory_utilization),
    }
    if arch.moe is not None and q.method == "w4a16":
        backend = "marlin"
        why["moe_backend"] = words.reason("moe_marlin")
    elif arch.moe is not None and q.method == "mxfp4":
        # `--moe-backend flashinfer_cutlass` selects FLASHINFER_CUTLASS_MXFP4_BF16 for an
        # MXFP4 checkpoint in vLLM 0.32-0.33, which only compute capability 9.0 accepts
        # (checks/backends.toml, vllm-0.32-mxfp4-moe): the runtime's own choice starts.
        backend = "auto"
        why["moe_backend"] = words.reason("moe_auto_mxfp4")
    elif arch.moe is not None and q.method != "nvfp4":
        backend = "auto"
        why["moe_backend"] = words.reason("moe_auto", method=q.method)
    return ModelSizing(
        tensor_parallel_size=best.tensor_parallel,
        max_model_len=length,
        gpu_memory_utilization=result.gpu_memory_utilization,
        moe_backend=backend,
        why=why,
    )


def _utilization_why(facts: Facts, utilization: float) -> str:
    words = load_rule_data().launch
    budget = unified_budget(facts)
    if isinstance(budget, UnifiedBudget) and utilization == budget.highest_utilization:
        return words.reason(
            "unified_budget",
            utilization=f"{utilization:g}",
            available=f"{budget.available_bytes / (1 << 30):.2f} GiB",
            total=f"{budget.total_bytes / (1 << 30):.2f} GiB",
        )
    return words.reason("gpu_memory_utilization", utilization=f"{utilization:g}")


def forecast_moe_backend(facts: Facts) -> tuple[str, str] | None:
    """The ``--moe-backend`` value the backend forecast (stack.backends) names for the
    facts' stack, model and first GPU, with why; None without a stack, a model, a runtime
    release of the forecast's, or a row that names one."""
    from blackwell_doctor.facts.stack import StackFacts
    from blackwell_doctor.rules.stack import forecast

    s, m = facts.stack, facts.model
    if not isinstance(s, StackFacts) or m is None or isinstance(m, Unavailable):
        return None
    ccs = sorted({g.cc for g in view.gpus(facts) if g.cc is not None})
    rules = load_rule_data()
    for f in forecast(s, m, ccs[:1], rules.stack):
        if f.layer == "moe" and f.row is not None and f.row.moe_backend is not None:
            why = rules.launch.reason(
                "moe_forecast",
                runtime=f.runtime,
                version=f.version,
                method=m.quantization.method,
                cc=view.cc_str(f.cc),
                backend=f.backend,
                verdict=f.row.verdict,
                row=f.row.id,
            )
            return f.row.moe_backend, why
    return None


def derive(facts: Facts, report: Report) -> Derived | None:
    """None when the facts show no GPU: there is nothing to launch."""
    count = gpu_count(facts)
    if count < 1:
        return None
    tp = tensor_parallel_size(count)
    words = load_rule_data().launch
    env: dict[str, str] = {}
    why: dict[str, str] = {
        "tensor_parallel_size": words.reason("tensor_parallel_size", count=str(count))
        + ("" if tp == count else words.reason("gpus_idle", idle=str(count - tp))),
    }
    notes: list[str] = []
    sizing = size_model(facts, count)
    if isinstance(sizing, str):
        notes.append(sizing)
        sizing = None
    if sizing is not None:
        tp = sizing.tensor_parallel_size
        why.update(sizing.why)
    budgeted = memory_utilization(facts)
    utilization = sizing.gpu_memory_utilization if sizing else (budgeted or 0.9)
    if sizing is None and budgeted is not None:
        why["gpu_memory_utilization"] = _utilization_why(facts, budgeted)
    for name, fixed in words.env.items():
        env[name] = fixed.value
        why[name] = fixed.why
    cpus = logical_cpus(facts)
    if cpus is None:
        notes.append(words.reason("omp_unknown"))
    else:
        threads = omp_num_threads(cpus, tp)
        env["OMP_NUM_THREADS"] = str(threads)
        why["OMP_NUM_THREADS"] = words.reason("omp_num_threads", cpus=str(cpus), tp=str(tp))
    moe_backend = sizing.moe_backend if sizing else None
    forecast = forecast_moe_backend(facts)
    if forecast is not None:
        moe_backend, why["moe_backend"] = forecast
    decision = p2p_decision(facts, report)
    if decision is not None and decision.disable:
        env["NCCL_P2P_DISABLE"] = "1"
        why["NCCL_P2P_DISABLE"] = decision.why
    elif decision is not None:
        notes.append(decision.why)
    return Derived(
        gpu_count=count,
        tensor_parallel_size=tp,
        sm12x=is_sm12x_host(facts),
        env=env,
        why=why,
        notes=notes,
        max_model_len=sizing.max_model_len if sizing else None,
        gpu_memory_utilization=utilization,
        moe_backend=moe_backend,
        memory_budget=budgeted is not None,
    )
