"""The `model` command's document (JSON, versioned, with a shipped schema) and its text and
Markdown renderings, which show the fit arithmetic line by line."""

from __future__ import annotations

import msgspec

from blackwell_doctor.facts.model import (
    MlaFacts,
    ModelFacts,
    ModelProblem,
    MoeFacts,
    ParamFacts,
    QuantFacts,
)
from blackwell_doctor.rules.fit import GIB, FitEntry, FitResult

MODEL_SCHEMA_VERSION = 1


class ModelSummary(msgspec.Struct, frozen=True, kw_only=True):
    architecture: str | None
    model_type: str | None
    quantization: QuantFacts
    moe: MoeFacts | None
    mla: MlaFacts | None
    num_layers: int | None
    hidden_size: int | None
    num_attention_heads: int | None
    num_kv_heads: int | None
    head_dim: int | None
    max_position_embeddings: int | None
    dtype: str | None


class ModelReport(msgspec.Struct, frozen=True, kw_only=True):
    schema_version: int
    path: str
    model: ModelSummary
    parameters: ParamFacts | None
    weights_bytes: int | None  # read from the headers; None before the weights are there
    bytes_by_dtype: dict[str, int]
    shards: int
    tensors: int
    problems: list[ModelProblem]
    fit: list[FitEntry]  # one verdict per tensor-parallel size
    sizing: FitResult | None  # the GPUs and stated data behind ``fit``
    fit_note: str | None = None  # why there is no fit (no GPU in the facts, no config)
    exit_code: int = 0


def build_report(model: ModelFacts, result: FitResult | None, note: str | None) -> ModelReport:
    a = model.arch
    fits_any = result is not None and any(e.fits for e in result.entries)
    return ModelReport(
        schema_version=MODEL_SCHEMA_VERSION,
        path=model.path,
        model=ModelSummary(
            architecture=a.architecture if a else None,
            model_type=a.model_type if a else None,
            quantization=model.quantization,
            moe=a.moe if a else None,
            mla=a.mla if a else None,
            num_layers=a.num_layers if a else None,
            hidden_size=a.hidden_size if a else None,
            num_attention_heads=a.num_attention_heads if a else None,
            num_kv_heads=a.num_kv_heads if a else None,
            head_dim=a.head_dim if a else None,
            max_position_embeddings=a.max_position_embeddings if a else None,
            dtype=a.dtype if a else None,
        ),
        parameters=model.parameters,
        weights_bytes=model.weights_bytes,
        bytes_by_dtype=model.bytes_by_dtype,
        shards=model.shards,
        tensors=model.tensors,
        problems=model.problems,
        fit=list(result.entries) if result is not None else [],
        sizing=result,
        fit_note=note,
        exit_code=1 if result is not None and result.entries and not fits_any else 0,
    )


def render_json(report: ModelReport) -> str:
    from blackwell_doctor.render.common import json_safe, scrub

    report = scrub(report, json_safe)  # config.json and file names are untrusted text
    return (msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n").decode()


def _b(n: int | None) -> str:
    if n is None:
        return "unknown"
    return f"{n / 1e9:,.2f} GB ({n / GIB:,.2f} GiB)"


def _params(p: ParamFacts) -> list[str]:
    how = "read from tensor shapes" if p.source == "tensors" else "computed from config.json"
    lines = [f"parameters ({how}): total {p.total:,} ({p.total / 1e9:.2f}B)"]
    if p.active is not None:
        lines.append(
            f"  active per token {p.active:,} ({p.active / 1e9:.2f}B); without the input "
            f"embedding {p.active - p.embedding:,} ({(p.active - p.embedding) / 1e9:.2f}B)"
        )
    if p.routed_experts:
        lines.append(f"  routed-expert parameters {p.routed_experts:,}")
    if p.mtp:
        lines.append(f"  multi-token-prediction layers {p.mtp:,} (not counted in total)")
    return lines


def render_text(report: ModelReport, *, markdown: bool = False) -> str:
    from blackwell_doctor.render.common import sanitize_line, scrub

    # Names from config.json, tensor names and paths come from whoever made the checkpoint:
    # controls, bidi overrides and newlines are shown escaped, never sent to the terminal.
    report = scrub(report, sanitize_line)
    m = report.model
    out: list[str] = []
    h = "## " if markdown else ""
    out.append(f"{h}{report.path}: {m.architecture or 'unknown architecture'}")
    if m.num_layers is not None:
        out.append(
            f"{m.num_layers} layers, hidden {m.hidden_size}, {m.num_attention_heads} attention "
            f"heads, {m.num_kv_heads} KV heads x {m.head_dim}, dtype {m.dtype or 'unknown'}, "
            f"max position {m.max_position_embeddings or 'unknown'}"
        )
    if m.moe is not None:
        layers = m.moe.moe_layers
        span = f"layers {layers[0]}-{layers[-1]}" if layers else "no layers"
        out.append(
            f"MoE: {m.moe.experts} experts, {m.moe.experts_per_token} per token, "
            f"{m.moe.shared_experts} shared; {len(layers)} MoE layers ({span})"
        )
    else:
        out.append("dense (no experts)")
    if m.mla is not None:
        out.append(f"MLA: kv_lora_rank {m.mla.kv_lora_rank}, rope dim {m.mla.qk_rope_head_dim}")
    q = m.quantization
    out.append(
        f"quantization: {q.method} ({q.format}"
        + (f", group {q.group_size}" if q.group_size else "")
        + (f", KV cache {q.kv_cache_dtype}" if q.kv_cache_dtype else "")
        + ")"
    )
    out.extend(f"  evidence: {e}" for e in q.evidence)
    if report.parameters is not None:
        out.extend(_params(report.parameters))
    if report.weights_bytes is not None:
        out.append(
            f"weights: {_b(report.weights_bytes)} in {report.shards} shard(s), "
            f"{report.tensors:,} tensors"
        )
    elif report.shards == 0 and not report.problems:
        out.append("weights: no safetensors in the directory (sizes computed from config.json)")
    else:
        out.append(
            f"weights: incomplete ({report.shards} shard(s) read; see the problems below): "
            "sizes computed from config.json"
        )
    if report.bytes_by_dtype:
        out.append(
            "  by dtype: "
            + ", ".join(f"{k} {v / 1e9:,.2f} GB" for k, v in report.bytes_by_dtype.items())
        )
    for p in report.problems:
        out.append(f"problem ({p.kind}) {p.path}: {p.detail}")
    s = report.sizing
    if s is None:
        out.append(f"fit: not evaluated: {report.fit_note or 'unknown'}")
    else:
        out.append("")
        out.append(
            f"{h}fit on {s.gpus}, {_b(s.memory_per_gpu_bytes)} each ({s.memory_source}), "
            f"--gpu-memory-utilization {s.gpu_memory_utilization:g}"
        )
        out.append(f"weights: {_b(s.weights_bytes)} ({s.weights_source})")
        out.append(f"overhead: {s.overhead_source}")
        if not s.entries:
            out.append("no tensor-parallel size divides the attention heads on these GPUs")
        for e in s.entries:
            verdict = f"fits, max context {e.max_context:,} tokens" if e.fits else "does NOT fit"
            ep = (
                ""
                if e.expert_parallel is None
                else (", expert parallel possible" if e.expert_parallel else "")
            )
            bullet = "- " if markdown else "  "
            out.append(f"{bullet}TP {e.tensor_parallel}: {verdict}{ep}")
            out.append(f"{'  ' if markdown else '    '}{e.reason}")
    return "\n".join(out) + "\n"
