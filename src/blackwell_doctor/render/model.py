"""The ``model`` document in each format: rich (the terminal's text) and Markdown, which
show the fit arithmetic line by line, and JSON (schema: schemas/model.schema.json)."""

from __future__ import annotations

from typing import assert_never

from blackwell_doctor.facts.model import ParamFacts
from blackwell_doctor.render.common import json_document
from blackwell_doctor.render.formats import ModelFormat
from blackwell_doctor.report.model import ModelReport
from blackwell_doctor.report.sanitize import json_safe, sanitize_line, scrub
from blackwell_doctor.ruledata.fit import GIB


def render_model(report: ModelReport, fmt: ModelFormat, *, width: int | None = None) -> str:
    """``report`` in ``fmt``, through the one sanitising step first: names from config.json,
    tensor names and paths come from whoever made the checkpoint, so controls, bidi
    overrides and newlines are shown escaped, never sent to the terminal (JSON: lone
    surrogates shown escaped, the rest escaped by JSON itself). ``width``: the terminal's,
    which the rich text is fitted to (None: not fitted)."""
    match fmt:
        case ModelFormat.JSON:
            return _json(scrub(report, json_safe))
        case ModelFormat.RICH:
            from blackwell_doctor.render.terminal import write_plain

            return write_plain(_text(scrub(report, sanitize_line)), width)
        case ModelFormat.MARKDOWN:
            return "\n".join(_text(scrub(report, sanitize_line), markdown=True)) + "\n"
        case _:
            assert_never(fmt)


def _json(report: ModelReport) -> str:
    return json_document(report)


def _b(n: int | None) -> str:
    if n is None:
        return "unknown"
    return f"{n / 1e9:,.2f} GB ({n / GIB:,.2f} GiB)"


_CONVENTION = {
    "with-embedding": "with the input embedding",
    "without-embedding": "without the input embedding",
    "both": "both ways",
    "unknown": "not said",
}


def _params(p: ParamFacts, estimated: str | None) -> list[str]:
    how = "read from tensor shapes" if p.source == "tensors" else "computed from config.json"
    if estimated is not None and p.source == "config":
        how += f", {estimated}"
    lines = [f"parameters ({how}): total {p.total:,} ({p.total / 1e9:.2f}B)"]
    if p.active is not None:
        lines.append(
            f"  active per token {p.active:,} ({p.active / 1e9:.2f}B); without the input "
            f"embedding {p.active - p.embedding:,} ({(p.active - p.embedding) / 1e9:.2f}B)"
        )
        if p.publisher_active is not None:
            lines.append(
                f"  the publisher counts active: "
                f"{_CONVENTION.get(p.publisher_active, p.publisher_active)} "
                f"({p.publisher_active_source})"
            )
    if p.routed_experts:
        lines.append(f"  routed-expert parameters {p.routed_experts:,}")
    if p.mtp:
        lines.append(f"  multi-token-prediction layers {p.mtp:,} (not counted in total)")
    return lines


def _text(report: ModelReport, *, markdown: bool = False) -> list[str]:
    m = report.model
    out: list[str] = []
    h = "## " if markdown else ""
    out.append(f"{h}{report.path}: {m.architecture or 'unknown architecture'}")
    src = report.source
    if src is not None:
        where = (
            f"the Hugging Face cache, snapshot {src.location}"
            if src.kind == "hf-cache"
            else f"the Hub at {src.location} (config, index and headers by range requests)"
        )
        out.append(f"read from {where}: {src.repo} revision {src.revision} = commit {src.commit}")
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
    if m.layer_pattern is not None:
        out.append(f"hybrid layers: {m.layer_pattern}")
    if m.mamba is not None:
        mb = m.mamba
        heads = (
            f"{mb.num_heads} heads x {mb.head_dim}, {mb.n_groups} groups, "
            if mb.kind == "mamba2"
            else ""
        )
        out.append(
            f"{'Mamba-2' if mb.kind == 'mamba2' else 'Mamba'} layers: {mb.layers}, inner "
            f"{mb.d_inner}, {heads}state {mb.state_size}, conv {mb.conv_kernel}"
            + (f", SSM cache {mb.ssm_cache_dtype}" if mb.ssm_cache_dtype else "")
        )
    if m.family is not None:
        out.append(f"family: {m.family} (checks/model_families.toml)")
    if m.estimate is not None:
        est = m.estimate
        out.append(
            f"family: none in checks/model_families.toml for model_type {m.model_type!r}: "
            f"{est.label}" + ("; the count may be low" if est.may_be_low else "")
        )
        out.append(f"  keys used: {', '.join(est.keys_used) or 'none'}")
        out.append(f"  keys ignored: {', '.join(est.keys_ignored) or 'none'}")
        out.extend(f"  assumed: {a}" for a in est.assumptions)
    q = m.quantization
    out.append(
        f"quantization: {q.method} ({q.format}"
        + (f", group {q.group_size}" if q.group_size else "")
        + (f", KV cache {q.kv_cache_dtype}" if q.kv_cache_dtype else "")
        + ")"
    )
    out.extend(f"  evidence: {e}" for e in q.evidence)
    if report.parameters is not None:
        out.extend(_params(report.parameters, m.estimate.label if m.estimate else None))
    if report.weights_bytes is not None:
        out.append(
            f"weights: {_b(report.weights_bytes)} in {report.shards} shard(s), "
            f"{report.tensors:,} tensors"
        )
    elif report.index is not None and report.index.shards_present == 0:
        ix = report.index
        out.append(
            f"weights: not here: {ix.path} names {ix.shards} shard(s), {ix.tensors:,} tensors; "
            + (
                f"{_b(ix.total_size)} by its metadata.total_size"
                if ix.total_size is not None
                else "no metadata.total_size (bytes estimated from config.json)"
            )
        )
    elif report.shards == 0 and not report.problems:
        out.append("weights: no safetensors in the directory (sizes computed from config.json)")
    else:
        from_index = report.index is not None and report.index.total_size is not None
        out.append(
            f"weights: incomplete ({report.shards} shard(s) read; see the problems below): "
            + (
                "bytes from the index's metadata.total_size, parameters computed from config.json"
                if from_index
                else "sizes computed from config.json"
            )
        )
    if report.index is not None:
        ix = report.index
        counts = [
            f"{n} {what}"
            for n, what in (
                (ix.layers, "decoder layers"),
                (ix.moe_layers, "MoE layers"),
                (ix.experts, "experts"),
            )
            if n is not None
        ]
        if counts:
            out.append(f"  the index's names give {', '.join(counts)}")
        if ix.shards_present and ix.total_size is not None:
            out.append(f"  the index's metadata.total_size: {_b(ix.total_size)}")
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
    return out
