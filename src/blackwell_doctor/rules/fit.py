"""Does the model fit on these GPUs, at which tensor-parallel sizes, with how much context?

Per tensor-parallel size t (t divides the attention heads; the KV heads divide t or t
divides them), per GPU:

    usable   = gpu_memory_utilization x GPU memory        (unified memory: see below)
    weights  = checkpoint bytes / t                        (vLLM shards every linear layer,
                                                             the embedding and the LM head)
    overhead = stated in checks/model_fit.toml [overhead]
    kv/token = 2 x ceil(kv_heads / t) x head_dim x kv_bytes x full-attention layers
               (MLA: (kv_lora_rank + qk_rope_head_dim) x kv_bytes x layers, on every rank)
    max context = (usable - weights - overhead) / kv/token, capped at max_position_embeddings

Sliding-window layers hold at most ``sliding_window`` tokens; linear-attention layers hold
a fixed state per sequence. Unified memory (GB10) has no NVML figure: the pool comes from
the data file, less what the OS keeps.

Hybrid models (Mamba + attention): only the attention layers keep a KV cache. Each Mamba
layer keeps one state per sequence, sized as vLLM's hybrid allocator reserves it
(vllm/model_executor/layers/mamba/mamba_utils.py ``MambaStateShapeCalculator``,
vllm/model_executor/models/config.py ``HybridAttentionMambaModelConfig``):

    Mamba-2 conv  = (conv_kernel - 1) x (d_inner + 2 x groups x state_size) / t x model bytes
                    (groups rounded up to t when t does not divide them)
    Mamba-2 SSM   = heads / t x head_dim x state_size x ssm bytes
    Mamba-1       = (conv_kernel - 1) x d_inner / t + d_inner / t x state_size
    attention block = 16 x ceil(state / (16 x attention bytes per token and layer)) tokens
    state per layer = attention block x attention bytes per token and layer (the state
                    padded to one attention page: the two share one block pool)

times ``mamba_states_per_sequence`` (checks/model_fit.toml: 1, vLLM's
``--mamba-cache-mode none``). The KV of a sequence is whole attention blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from blackwell_doctor.facts.document import Facts, NvmlFacts
from blackwell_doctor.facts.model import ModelFacts

# The fit's verdicts are parts of the model document (report/): defined there, used here.
from blackwell_doctor.report.model import FitEntry as FitEntry
from blackwell_doctor.report.model import FitResult as FitResult
from blackwell_doctor.ruledata.fit import GIB as GIB
from blackwell_doctor.ruledata.fit import FitData, load_fit_data
from blackwell_doctor.rules.memory import UnifiedBudget, unified_budget


@dataclass(frozen=True)
class GpuPool:
    """The GPUs a launch can use: how many, and the memory of each."""

    count: int
    name: str
    memory_bytes: int  # per GPU
    unified: bool
    source: str  # "NVML" or the data file's source for unified memory
    os_reserve_bytes: int = 0


class PoolError(Exception):
    """The facts cannot say how much memory the GPUs have; one line."""


def gpu_pool(facts: Facts, data: FitData | None = None) -> GpuPool:
    data = data or load_fit_data()
    nvml = facts.nvml if isinstance(facts.nvml, NvmlFacts) else None
    if nvml is None or not nvml.gpus:
        raise PoolError("the facts show no GPU that NVML answers for")
    names = [g.name if isinstance(g.name, str) else "(unknown GPU)" for g in nvml.gpus]
    sizes: list[int] = []
    for g, name in zip(nvml.gpus, names, strict=True):
        if isinstance(g.memory_total_bytes, int):
            sizes.append(g.memory_total_bytes)
            continue
        budget = unified_budget(facts)
        if isinstance(budget, UnifiedBudget):
            # What vLLM compares on unified memory: total_memory x utilization against
            # MemAvailable (rules/memory.py); the utilization carries what the OS keeps.
            return GpuPool(
                count=len(nvml.gpus),
                name=name,
                memory_bytes=budget.total_bytes,
                unified=True,
                source="/proc/meminfo MemTotal (vLLM's total on unified memory)",
            )
        unified = next((u for u in data.unified if u.match in name), None)
        if unified is None:
            raise PoolError(
                f"GPU{g.index} {name}: NVML reports no memory ({g.memory_total_bytes.reason}) "
                "and checks/model_fit.toml names no unified-memory figure for it"
            )
        return GpuPool(
            count=len(nvml.gpus),
            name=name,
            memory_bytes=unified.memory_bytes,
            unified=True,
            source=unified.source,
            os_reserve_bytes=int(unified.os_reserve_gib * GIB),
        )
    label = names[0] if len(set(names)) == 1 else f"{len(set(names))} GPU models (smallest used)"
    return GpuPool(
        count=len(sizes),
        name=label,
        memory_bytes=min(sizes),
        unified=False,
        source="NVML memory total",
    )


_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float": 4, "half": 2}


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def estimate_weights(model: ModelFacts) -> tuple[int, str] | None:
    """Checkpoint bytes: from the headers, else the index's metadata.total_size, else from
    the computed parameters at the bytes per parameter of the quantization (stated in the
    returned text)."""
    if model.weights_bytes is not None:
        return model.weights_bytes, "safetensors headers"
    index = model.index
    if index is not None and index.total_size is not None:
        # The shards are not (all) here: the index's own sum of their tensor bytes (issue 34).
        return index.total_size, (
            f"{index.path} metadata.total_size (the shards' tensor bytes as the index states "
            f"them; {index.shards_present} of {index.shards} shards here)"
        )
    p, arch = model.parameters, model.arch
    if p is None or arch is None:
        return None
    dtype = _BYTES.get((arch.dtype or "bfloat16").lower(), 2)
    head = 0 if arch.tie_word_embeddings else p.embedding
    edge = p.embedding + head  # embedding and LM head stay at the model dtype
    body = p.total - edge
    method = model.quantization.method
    if method == "nvfp4":
        per, how = 0.5 + 1 / 16, "4.5 bits (E2M1 + one E4M3 scale per 16)"
    elif method == "fp8":
        per, how = 1.0, "1 byte (FP8)"
    elif method == "w4a16":
        g = model.quantization.group_size or 128
        per, how = 0.5 + 2.5 / g, f"4 bits + FP16 scale and zero per {g}"
    elif method == "mxfp4":
        routed = p.routed_experts
        total = int(routed * (0.5 + 1 / 32) + (p.total - routed) * dtype)
        return total, (
            f"estimated: {p.routed_experts:,} expert parameters at 4.25 bits (MXFP4) + "
            f"{p.total - routed:,} others at {dtype} bytes (computed from config.json)"
        )
    else:
        return p.total * dtype, f"estimated: {p.total:,} parameters x {dtype} bytes (config.json)"
    return int(body * per + edge * dtype), (
        f"estimated: {body:,} parameters at {how} + {edge:,} embedding/LM-head parameters "
        f"at {dtype} bytes (computed from config.json)"
    )


def kv_bytes_per_token(model: ModelFacts, tp: int, data: FitData) -> tuple[int, int, str]:
    """(full-context bytes/token, sliding-window bytes/token, how) on one GPU at TP ``tp``."""
    arch = model.arch
    assert arch is not None
    kvb = 1 if model.quantization.kv_cache_dtype == "fp8" else data.fit.default_kv_bytes
    if arch.mla is not None:
        width = arch.mla.kv_lora_rank + arch.mla.qk_rope_head_dim
        full = width * kvb * arch.full_attention_layers
        return (
            full,
            0,
            (
                f"MLA: ({arch.mla.kv_lora_rank} + {arch.mla.qk_rope_head_dim}) x {kvb} B x "
                f"{arch.full_attention_layers} layers = {full:,} B/token, on every rank"
            ),
        )
    heads = math.ceil(arch.num_kv_heads / tp)
    per_layer = 2 * heads * arch.head_dim * kvb
    full = per_layer * arch.full_attention_layers
    sliding = per_layer * arch.sliding_window_layers
    how = (
        f"2 x {heads} KV heads x {arch.head_dim} x {kvb} B x {arch.full_attention_layers} "
        f"layers = {full:,} B/token"
    )
    if sliding:
        how += f" (+ {arch.sliding_window_layers} sliding layers, {arch.sliding_window} tokens)"
    others = arch.num_layers - arch.full_attention_layers - arch.sliding_window_layers
    if arch.mamba is not None and others > 0:
        how += f" (attention layers only: the other {others} keep no KV cache)"
    return full, sliding, how


@dataclass(frozen=True)
class MambaState:
    """One sequence's state in one Mamba layer on one rank, as vLLM allocates it."""

    conv_bytes: int
    ssm_bytes: int
    padded_bytes: int  # the attention page it occupies
    block_tokens: int | None  # the attention block size the padding sets; None: no attention

    @property
    def raw_bytes(self) -> int:
        return self.conv_bytes + self.ssm_bytes


def mamba_state(model: ModelFacts, tp: int, data: FitData) -> MambaState | None:
    arch = model.arch
    assert arch is not None
    m = arch.mamba
    if m is None:
        return None
    model_bytes = _BYTES.get((arch.dtype or "bfloat16").lower(), 2)
    ssm_b = _BYTES.get((m.ssm_cache_dtype or "").lower(), model_bytes)
    if m.kind == "mamba2":
        groups = m.n_groups + (0 if m.n_groups % tp == 0 else tp - m.n_groups)
        conv = (m.conv_kernel - 1) * ((m.d_inner + 2 * groups * m.state_size) // tp) * model_bytes
        ssm = (m.num_heads // tp) * m.head_dim * m.state_size * ssm_b
    else:
        conv = (m.conv_kernel - 1) * (m.d_inner // tp) * model_bytes
        ssm = (m.d_inner // tp) * m.state_size * ssm_b
    if arch.full_attention_layers == 0 or arch.mla is not None:
        return MambaState(conv, ssm, conv + ssm, None)
    kvb = 1 if model.quantization.kv_cache_dtype == "fp8" else data.fit.default_kv_bytes
    per_token = 2 * math.ceil(arch.num_kv_heads / tp) * arch.head_dim * kvb
    block = 16 * math.ceil((conv + ssm) / (16 * per_token))
    return MambaState(conv, ssm, block * per_token, block)


def _tp_sizes(model: ModelFacts, gpus: int) -> list[int]:
    arch = model.arch
    assert arch is not None
    out = []
    for t in range(1, gpus + 1):
        if arch.num_attention_heads % t:
            continue
        m = arch.mamba
        if m is not None and (m.d_inner % t or (m.kind == "mamba2" and m.num_heads % t)):
            continue  # vLLM divides the Mamba heads and inner width over the ranks
        if arch.mla is None and arch.num_kv_heads % t and t % arch.num_kv_heads:
            continue
        out.append(t)
    return out


def fit(
    model: ModelFacts,
    pool: GpuPool,
    *,
    utilization: float | None = None,
    data: FitData | None = None,
) -> FitResult | None:
    """The verdict per tensor-parallel size; None when the model cannot be sized (no
    config.json, no parameters)."""
    data = data or load_fit_data()
    arch = model.arch
    weights = estimate_weights(model)
    if arch is None or weights is None:
        return None
    util = data.fit.gpu_memory_utilization if utilization is None else utilization
    wbytes, wsource = weights
    if arch.estimate is not None and model.weights_bytes is None:
        wsource += f" ({arch.estimate.label})"
    overhead = data.overhead.bytes
    entries: list[FitEntry] = []
    for t in _tp_sizes(model, pool.count):
        entries.append(_entry(model, pool, t, util, wbytes, overhead, data))
    return FitResult(
        gpus=f"{pool.count}x {pool.name}",
        gpu_count=pool.count,
        memory_per_gpu_bytes=pool.memory_bytes,
        memory_source=pool.source,
        unified_memory=pool.unified,
        gpu_memory_utilization=util,
        weights_bytes=wbytes,
        weights_source=wsource,
        overhead_source=data.overhead.source,
        entries=entries,
    )


def _entry(
    model: ModelFacts,
    pool: GpuPool,
    t: int,
    util: float,
    wbytes: int,
    overhead: int,
    data: FitData,
) -> FitEntry:
    arch = model.arch
    assert arch is not None
    usable = int(util * pool.memory_bytes)
    usable_text = f"{util:g} x {_gib(pool.memory_bytes)} = {_gib(usable)} usable"
    if pool.unified:
        ceiling = pool.memory_bytes - pool.os_reserve_bytes
        if ceiling < usable:
            usable = ceiling
            usable_text = (
                f"unified memory {_gib(pool.memory_bytes)} - {_gib(pool.os_reserve_bytes)} "
                f"kept for the OS = {_gib(usable)} usable (less than {util:g} x the pool)"
            )
        elif pool.os_reserve_bytes:
            usable_text = (
                f"{util:g} x {_gib(pool.memory_bytes)} unified memory (shared with the OS, "
                f"which keeps {_gib(pool.os_reserve_bytes)}) = {_gib(usable)} usable"
            )
        else:
            usable_text = (
                f"{util:g} x {_gib(pool.memory_bytes)} unified memory (MemTotal; what the OS "
                f"has available limits the share) = {_gib(usable)} usable"
            )
    per_gpu = math.ceil(wbytes / t)
    full, sliding, kv_how = kv_bytes_per_token(model, t, data)
    linear_state = math.ceil(arch.linear_attention_layers * arch.linear_state_bytes_per_layer / t)
    ms = mamba_state(model, t, data)
    mamba_total = (
        ms.padded_bytes * arch.mamba.layers * data.fit.mamba_states_per_sequence
        if ms is not None and arch.mamba
        else 0
    )
    state = linear_state + mamba_total  # per sequence
    budget = usable - per_gpu - overhead - state
    ep = None if arch.moe is None else (t > 1 and arch.moe.experts % t == 0)
    head = (
        f"{usable_text} - {_gib(per_gpu)} weights ({_gib(wbytes)} / {t}) - "
        f"{_gib(overhead)} runtime overhead"
        + (f" - {_gib(linear_state)} linear-attention state" if linear_state else "")
        + (f" - {mamba_total / 2**20:,.1f} MiB Mamba state of one sequence" if mamba_total else "")
        + f" = {_gib(budget)} for the KV cache"
    )
    limit = arch.max_position_embeddings

    def entry(
        fits: bool, max_context: int | None, reason: str, sequences: int | None = None
    ) -> FitEntry:
        return FitEntry(
            tensor_parallel=t,
            expert_parallel=ep,
            fits=fits,
            max_context=max_context,
            reason=reason,
            usable_bytes=usable,
            weights_per_gpu_bytes=per_gpu,
            overhead_bytes=overhead,
            kv_budget_bytes=budget,
            kv_bytes_per_token=full + sliding,
            state_bytes_per_sequence=state,
            sequences_at_max_context=sequences,
        )

    if budget <= 0:
        return entry(False, None, head + ": the weights do not fit")
    window = arch.sliding_window or 0
    if full == 0:
        unbounded = limit if limit is not None else 1 << 40
        tokens = unbounded if budget >= sliding * window else budget // max(sliding, 1)
    elif sliding and budget >= (full + sliding) * window:
        tokens = (budget - sliding * window) // full
    else:
        tokens = budget // (full + sliding)
    block = ms.block_tokens if ms is not None else None
    if block and full:
        tokens = tokens // block * block  # the KV of a sequence is whole attention blocks
    capped = limit is not None and tokens > limit
    ctx = min(tokens, limit) if limit is not None else tokens
    needed = min(data.fit.min_context_tokens, limit or data.fit.min_context_tokens)
    fits = ctx >= needed
    reason = f"{head}; KV {kv_how}"
    if arch.estimate is not None:  # no family covers the model_type
        reason += f" ({arch.estimate.label})"
    if ms is not None and arch.mamba is not None:
        m = arch.mamba
        kind = "Mamba-2" if m.kind == "mamba2" else "Mamba"
        copies = data.fit.mamba_states_per_sequence
        reason += (
            f"; {kind} state per sequence {m.layers} layers"
            + (f" x {copies} states (checks/model_fit.toml)" if copies != 1 else "")
            + f" x {ms.padded_bytes:,} B "
            f"({ms.conv_bytes:,} B conv + {ms.ssm_bytes:,} B SSM"
            + (
                f", padded to one {block}-token attention page as vLLM's hybrid allocator does"
                if block
                else ""
            )
            + f") = {mamba_total:,} B"
        )
    reason += f": {tokens:,} tokens"
    if capped:
        reason += f", capped at max_position_embeddings {limit:,}"
    if not fits:
        reason += f": below the {needed:,}-token minimum (checks/model_fit.toml)"
    sequences = None
    if fits:
        kv_ctx = math.ceil(ctx / block) * block if block else ctx
        per_seq = full * kv_ctx + sliding * min(kv_ctx, window or kv_ctx) + state
        sequences = (budget + state) // per_seq if per_seq else None
        if sequences is not None:
            reason += (
                f"; {sequences:,} sequence(s) of {ctx:,} tokens fit at once "
                f"({per_seq:,} B each: KV + state)"
            )
    return entry(fits, ctx if fits else None, reason, sequences)
