"""Read a model directory into ``ModelFacts``: config.json, the quantization description,
the safetensors index and each shard's header. Never a weight byte.

Memory stays flat in the number of shards: each header is folded into running totals and
dropped before the next is read.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from blackwell_doctor.checkpoint import quant
from blackwell_doctor.checkpoint.config import ConfigError, arch_from_config, params_from_config
from blackwell_doctor.checkpoint.header import HeaderError, _open_regular, _read_exact, read_header
from blackwell_doctor.facts_model import ArchFacts, ModelFacts, ModelProblem, ParamFacts, QuantFacts

MAX_JSON_BYTES = 64 << 20  # config.json and index files; the largest real index is ~10 MB
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_EMBEDDING_SUFFIXES = (
    "embed_tokens.weight",
    "wte.weight",
    "tok_embeddings.weight",
    "word_embeddings.weight",
)
_SHARD_NAME = re.compile(r"^[^/\\]+\.safetensors$")


class ModelDirError(Exception):
    """The directory itself cannot be read; one line."""


def _read_json(path: Path) -> Any:
    fd, size = _open_regular(path)
    try:
        if size > MAX_JSON_BYTES:
            raise HeaderError(f"{size} bytes, above the {MAX_JSON_BYTES}-byte limit")
        data = _read_exact(fd, size)
    finally:
        os.close(fd)
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise HeaderError(f"not valid JSON: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise HeaderError("nested too deeply") from None


def _is_routed_expert(name: str) -> bool:
    return ".experts." in name and "shared_expert" not in name


@dataclass
class _Tally:
    total: int = 0
    routed: int = 0
    embedding: int = 0
    mtp: int = 0
    weights_bytes: int = 0
    tensors: int = 0
    bytes_by_dtype: Counter[str] = field(default_factory=Counter)
    # Quantization evidence from the tensors.
    packed_fp4: int = 0
    fp8_weights: int = 0
    int4_packed: int = 0
    high_precision_weights: int = 0
    fp4_example: str | None = None
    fp8_example: str | None = None
    int4_example: str | None = None
    # A few packed weights and their scales (pairs are matched per shard, in any order).
    packed_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    scale_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    scale_groups: Counter[int] = field(default_factory=Counter)


def _fold(tally: _Tally, header_tensors: Any, method: str, num_layers: int | None) -> None:
    for t in header_tensors:
        tally.tensors += 1
        tally.weights_bytes += t.nbytes
        tally.bytes_by_dtype[t.dtype] += t.nbytes
        name: str = t.name
        last = name.rsplit(".", 1)[-1]
        prefix = name.rsplit(".", 1)[0]
        if t.dtype == "U8" and last in ("weight", "weight_packed"):
            tally.packed_fp4 += 1
            tally.fp4_example = tally.fp4_example or f"{name} U8{list(t.shape)}"
            if len(tally.packed_shapes) < 256 and t.shape:
                tally.packed_shapes[prefix] = t.shape
        elif t.dtype == "F8_E4M3" and last == "weight_scale" and t.shape:
            if len(tally.scale_shapes) < 256:
                tally.scale_shapes[prefix] = t.shape
        elif t.dtype.startswith("F8_") and last == "weight":
            tally.fp8_weights += 1
            tally.fp8_example = tally.fp8_example or f"{name} {t.dtype}{list(t.shape)}"
        elif t.dtype == "I32" and last in ("qweight", "weight_packed"):
            tally.int4_packed += 1
            tally.int4_example = tally.int4_example or f"{name} I32{list(t.shape)}"
        elif t.dtype in ("BF16", "F16", "F32") and last == "weight" and len(t.shape) == 2:
            tally.high_precision_weights += 1
        if not quant.is_parameter(name):
            continue
        n = t.numel * quant.values_per_element(name, t.dtype, method)
        m = _LAYER.search(name)
        if num_layers is not None and m is not None and int(m.group(1)) >= num_layers:
            tally.mtp += n
            continue
        tally.total += n
        if _is_routed_expert(name):
            tally.routed += n
        if name.endswith(_EMBEDDING_SUFFIXES):
            tally.embedding += n


def _match_scales(tally: _Tally) -> None:
    """Block size of NVFP4 pairs seen in one shard: packed columns x 2 / scale columns."""
    for prefix, scale in tally.scale_shapes.items():
        packed = tally.packed_shapes.get(prefix)
        if packed and scale[-1]:
            tally.scale_groups[packed[-1] * 2 // scale[-1]] += 1
    tally.packed_shapes.clear()
    tally.scale_shapes.clear()


def _shard_names(root: Path, problems: list[ModelProblem]) -> tuple[list[str], int | None]:
    """Shard file names (from the index when there is one) and the index's tensor count."""
    indexes = sorted(p.name for p in root.glob("*.safetensors.index.json"))
    if not indexes:
        return sorted(p.name for p in root.glob("*.safetensors")), None
    name = indexes[0]
    try:
        doc = _read_json(root / name)
    except HeaderError as exc:
        problems.append(ModelProblem(kind="index", path=name, detail=str(exc)))
        return sorted(p.name for p in root.glob("*.safetensors")), None
    wmap = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(wmap, dict):
        problems.append(ModelProblem(kind="index", path=name, detail="no weight_map object"))
        return sorted(p.name for p in root.glob("*.safetensors")), None
    files: set[str] = set()
    for value in wmap.values():
        if not isinstance(value, str) or not _SHARD_NAME.match(value) or value.startswith("."):
            problems.append(
                ModelProblem(
                    kind="index",
                    path=name,
                    detail=f"weight_map names {str(value)[:80]!r}, not a shard file in this "
                    "directory: not read",
                )
            )
            continue
        files.add(value)
    return sorted(files), len(wmap)


def _symlink_problem(root_real: str, root: Path, name: str) -> ModelProblem | None:
    path = root / name
    if not path.is_symlink():
        return None
    target = os.path.realpath(path)
    if os.path.commonpath([root_real, target]) == root_real:
        return None
    return ModelProblem(
        kind="symlink",
        path=name,
        detail=f"a symlink to {target}, outside the model directory: read here, but it "
        "dangles in a container that mounts only the directory (mount the target's "
        "directory too, or copy the files in)",
    )


def read_model_dir(path: Path) -> ModelFacts:
    """Everything the directory says about the model; problems are facts, not exceptions.

    Raises ModelDirError only when ``path`` is not a readable directory."""
    if not path.is_dir():
        raise ModelDirError(f"{path} is not a directory")
    root = path
    root_real = os.path.realpath(root)
    problems: list[ModelProblem] = []
    raw: dict[str, Any] | None = None
    arch: ArchFacts | None = None
    try:
        doc = _read_json(root / "config.json")
        if not isinstance(doc, dict):
            raise HeaderError("not a JSON object")
        raw = doc
        arch = arch_from_config(doc)
    except (HeaderError, ConfigError) as exc:
        problems.append(ModelProblem(kind="config", path="config.json", detail=str(exc)))
    hf_quant: dict[str, Any] | None = None
    if (root / "hf_quant_config.json").exists():
        try:
            doc = _read_json(root / "hf_quant_config.json")
            hf_quant = doc if isinstance(doc, dict) else None
        except HeaderError as exc:
            problems.append(
                ModelProblem(kind="quantization", path="hf_quant_config.json", detail=str(exc))
            )
    cq = raw.get("quantization_config") if raw is not None else None
    if raw is not None and not isinstance(cq, dict):
        inner = raw.get("text_config")
        cq = inner.get("quantization_config") if isinstance(inner, dict) else None
    qf, qproblem = quant.describe(cq if isinstance(cq, dict) else None, hf_quant)
    if qproblem:
        problems.append(ModelProblem(kind="quantization", path="config.json", detail=qproblem))

    names, index_count = _shard_names(root, problems)
    tally = _Tally()
    read_ok = 0
    for name in names:
        link = _symlink_problem(root_real, root, name)
        if link is not None:
            problems.append(link)
        try:
            header = read_header(root / name)
        except HeaderError as exc:
            kind = "missing-shard" if str(exc).startswith("missing") else "header"
            problems.append(ModelProblem(kind=kind, path=name, detail=str(exc)))
            continue
        read_ok += 1
        _fold(tally, header.tensors, qf.method, arch.num_layers if arch else None)
        _match_scales(tally)
        del header
    if index_count is not None and read_ok == len(names) and tally.tensors < index_count:
        problems.append(
            ModelProblem(
                kind="index",
                path="model.safetensors.index.json",
                detail=f"the index maps {index_count} tensors but the shards hold {tally.tensors}",
            )
        )
    qf = _confirm(qf, tally, problems)
    complete = bool(names) and read_ok == len(names)
    params: ParamFacts | None = None
    if complete and tally.total > 0:
        active: int | None = tally.total
        if arch is not None and arch.moe is not None:
            moe = arch.moe
            active = tally.total - tally.routed * (moe.experts - moe.experts_per_token) // max(
                moe.experts, 1
            )
        elif tally.routed:
            active = None  # experts in the tensors but no routing in config.json
        params = ParamFacts(
            source="tensors",
            total=tally.total,
            active=active,
            embedding=tally.embedding,
            routed_experts=tally.routed,
            mtp=tally.mtp,
        )
    elif raw is not None and arch is not None:
        params = params_from_config(raw, arch)
    return ModelFacts(
        path=str(path),
        arch=arch,
        quantization=qf,
        parameters=params,
        weights_bytes=tally.weights_bytes if complete else None,
        bytes_by_dtype=dict(sorted(tally.bytes_by_dtype.items())),
        shards=read_ok,
        tensors=tally.tensors,
        problems=problems,
    )


def _confirm(qf: QuantFacts, tally: _Tally, problems: list[ModelProblem]) -> QuantFacts:
    """Add what the tensors show to the evidence; a disagreement is a problem."""
    if tally.tensors == 0:
        return qf
    ev = list(qf.evidence)
    if tally.packed_fp4:
        groups = ", ".join(f"1 per {g}" for g, _ in tally.scale_groups.most_common(2))
        ev.append(
            f"tensors: {tally.packed_fp4} U8 weights (two FP4 values a byte), e.g. "
            f"{tally.fp4_example}" + (f"; F8_E4M3 block scales {groups} weights" if groups else "")
        )
    if tally.fp8_weights:
        ev.append(f"tensors: {tally.fp8_weights} FP8 weights, e.g. {tally.fp8_example}")
    if tally.int4_packed:
        ev.append(
            f"tensors: {tally.int4_packed} I32 packed 4-bit weights, e.g. {tally.int4_example}"
        )
    if tally.high_precision_weights:
        ev.append(f"tensors: {tally.high_precision_weights} BF16/F16/F32 weight matrices")
    seen = {
        "nvfp4": tally.packed_fp4 > 0,
        "mxfp4": True,  # gpt-oss keeps its MXFP4 experts as *_blocks U8 (not .weight)
        "fp8": tally.fp8_weights > 0,
        "w4a16": tally.int4_packed > 0,
        "unquantized": not (tally.packed_fp4 or tally.fp8_weights or tally.int4_packed),
        "unknown": True,
    }[qf.method]
    if not seen:
        problems.append(
            ModelProblem(
                kind="quantization",
                path=".",
                detail=f"the description says {qf.method} but no tensor in the headers has "
                "that layout",
            )
        )
    group = tally.scale_groups.most_common(1)[0][0] if tally.scale_groups else None
    if qf.method == "nvfp4" and group is not None and qf.group_size not in (None, group):
        problems.append(
            ModelProblem(
                kind="quantization",
                path=".",
                detail=f"the description says group size {qf.group_size} but the scales "
                f"hold one value per {group} weights",
            )
        )
    return msgspec.structs.replace(
        qf, evidence=ev, group_size=qf.group_size if qf.group_size is not None else group
    )
