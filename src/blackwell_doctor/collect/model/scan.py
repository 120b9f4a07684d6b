"""Read a model directory into ``ModelFacts``: config.json, the quantization description,
the safetensors index and each shard's header. Never a weight byte.

Memory stays flat in the number of shards: each header is folded into running totals and
dropped before the next is read.

The files come from a :class:`ModelFiles`: a directory (:class:`DirectoryFiles`, also a
snapshot of the Hugging Face cache) or a Hub repository over HTTP (``collect.model.hub``),
so that every form of ``model`` is read by the one scan below.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import msgspec

from blackwell_doctor.collect.model import quant
from blackwell_doctor.collect.model.config import (
    ConfigError,
    NotModelled,
    arch_from_config,
    params_from_config,
    text_config,
)
from blackwell_doctor.collect.model.header import (
    DTYPE_BITS,
    MAX_DIMS,
    Header,
    HeaderError,
    _open_regular,
    bad_entry,
    check_overlaps,
    read_header,
)
from blackwell_doctor.collect.model.jsondoc import decode_json
from blackwell_doctor.collect.regularfile import read_upto
from blackwell_doctor.facts.model import (
    ArchFacts,
    IndexFacts,
    ModelFacts,
    ModelProblem,
    ModelSource,
    ParamFacts,
    QuantFacts,
)
from blackwell_doctor.ruledata.families import load_families
from blackwell_doctor.ruledata.rules import load_rule_data

MAX_JSON_BYTES = 64 << 20  # config.json and index files; the largest real index is ~10 MB
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_EMBEDDING_SUFFIXES = (
    "embed_tokens.weight",
    "wte.weight",
    "tok_embeddings.weight",
    "word_embeddings.weight",
    "backbone.embeddings.weight",  # Nemotron-H, Mamba
)
# No separator, no control character (a NUL made the open a ValueError, exit 4: issue 32).
_SHARD_NAME = re.compile(r"^[^/\\\x00-\x1f]+\.safetensors$")


class ModelDirError(Exception):
    """The directory itself cannot be read; one line."""


def _read_json(path: Path) -> Any:
    fd, size = _open_regular(path)
    try:
        if size > MAX_JSON_BYTES:
            raise HeaderError(f"{size} bytes, above the {MAX_JSON_BYTES}-byte limit")
        data = read_upto(fd, size)
    finally:
        os.close(fd)
    return decode_json(data)


class ModelFiles(Protocol):
    """The files of one model, wherever they are. Names are relative to the model's root
    (no separator: the index may name only files beside it)."""

    def has(self, name: str) -> bool:
        """Whether ``name`` is there (a file, or a link to one; a dangling link counts)."""
        ...

    def names(self, suffix: str) -> list[str]:
        """The names at the root ending with ``suffix``, sorted."""
        ...

    def read_json(self, name: str) -> Any:
        """The decoded JSON of ``name`` (bounded: MAX_JSON_BYTES); HeaderError otherwise."""
        ...

    def headers(self, names: list[str]) -> Iterator[tuple[str, Header | HeaderError]]:
        """Each shard's header, in the order given, or the HeaderError that says why not;
        one at a time, so that a header can be dropped before the next is held."""
        ...

    def link_problem(self, name: str) -> ModelProblem | None:
        """A problem when ``name`` is a link that leaves the model's files."""
        ...


class DirectoryFiles:
    """A model directory. ``confine``: the folder its links may point into (the directory
    itself; for a Hugging Face cache snapshot, the repository's folder with its blobs)."""

    def __init__(self, root: Path, *, confine: Path | None = None) -> None:
        self.root = root
        self._confine = os.path.realpath(confine if confine is not None else root)

    def has(self, name: str) -> bool:
        return (self.root / name).is_symlink() or (self.root / name).exists()

    def names(self, suffix: str) -> list[str]:
        return sorted(p.name for p in self.root.glob("*" + suffix))

    def read_json(self, name: str) -> Any:
        return _read_json(self.root / name)

    def headers(self, names: list[str]) -> Iterator[tuple[str, Header | HeaderError]]:
        for name in names:
            try:
                yield name, read_header(self.root / name, check_entries=False)
            except HeaderError as exc:
                yield name, exc

    def link_problem(self, name: str) -> ModelProblem | None:
        return _symlink_problem(self._confine, self.root, name)


@dataclass
class _Tally:
    total: int = 0
    routed: int = 0
    embedding: int = 0
    mtp: int = 0
    weights_bytes: int = 0
    tensors: int = 0
    bytes_by_dtype: Counter[str] = field(default_factory=Counter)
    # Quantization evidence from the tensors: counts per kind and a first example of each.
    kinds: Counter[int] = field(default_factory=Counter)
    examples: dict[int, str] = field(default_factory=dict)
    # Block sizes seen: packed FP4 columns x 2 / scale columns, per module (matched per
    # shard, in any order).
    scale_groups: Counter[int] = field(default_factory=Counter)
    # (name suffix, dtype) -> (values per stored element, 0 for scales; evidence kind); at
    # most _MAX_DECISIONS of them.
    decisions: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)


# What a (name suffix, dtype) says about the quantization. A real checkpoint has a few
# dozen pairs (weight, weight_scale, bias, ... by dtype); names with no dot are each their
# own suffix, so the cache is bounded: past it a pair is worked out again, and the names
# of one shard are not kept alive (with the tally) while the next is read.
_MAX_DECISIONS = 4096
_PACKED_FP4, _FP4_SCALE, _FP8, _INT4, _HIGH = 1, 2, 3, 4, 5


def _kind(last: str, dtype: str) -> int:
    if dtype == "U8" and last in ("weight", "weight_packed"):
        return _PACKED_FP4
    if dtype == "F8_E4M3" and last == "weight_scale":
        return _FP4_SCALE
    if dtype.startswith("F8_") and last == "weight":
        return _FP8
    if dtype == "I32" and last in ("qweight", "weight_packed"):
        return _INT4
    if dtype in ("BF16", "F16", "F32") and last == "weight":
        return _HIGH
    return 0


@dataclass(frozen=True)
class _MtpLayer:
    r"""Names of decoder layers past num_hidden_layers (DeepSeek's MTP layer 61): ``name``
    decides for one name; ``maybe`` starts with a literal, which ``re`` finds by a fast
    scan, so a shard's names joined are ruled out in ~5 us (``name``'s leading ``(?:^|\.)``
    made that search ~60 us a shard: 22 ms of `model DIR` on 400 shards, issue 34)."""

    name: re.Pattern[str]
    maybe: re.Pattern[str]


def _mtp_pattern(num_layers: int | None) -> _MtpLayer | None:
    if num_layers is None:
        return None
    numbers = "|".join(str(num_layers + i) for i in range(16))
    return _MtpLayer(
        name=re.compile(rf"(?:^|\.)layers\.(?:{numbers})\."),
        maybe=re.compile(rf"layers\.(?:{numbers})\."),
    )


def _fold(
    tally: _Tally,
    entries: dict[str, Any],
    data_bytes: int,
    method: str,
    mtp_layer: _MtpLayer | None,
) -> None:
    """Check one shard's tensors and add them to the running totals in the same pass.

    The checks are header.parse_header's (dtype known, size = elements x bits, inside the
    file), inlined here so the tensors are walked once; a failure raises HeaderError before
    anything is added. Per-name decisions (scale or parameter, packing, evidence kind) are
    cached by (suffix, dtype)."""
    by_dtype: Counter[str] = Counter()
    seen: Counter[int] = Counter()
    cache = tally.decisions
    bits_of = DTYPE_BITS.get
    total = routed = embedding = mtp = weights = 0
    # Layers past num_hidden_layers are rare (one MTP layer in a few shards): one search
    # over the shard's names decides whether any name needs the per-tensor test.
    mtp_search = None
    if mtp_layer is not None and mtp_layer.maybe.search("\n".join(entries)):
        mtp_search = mtp_layer.name.search
    prod = math.prod
    packed: dict[str, int] = {}
    scales: dict[str, int] = {}
    for name, e in entries.items():
        dtype, shape, offsets = e.dtype, e.shape, e.data_offsets
        bits = bits_of(dtype)
        if bits is None or shape is None or offsets is None or len(shape) > MAX_DIMS:
            bad_entry(name, e, data_bytes)
        numel = prod(shape)
        nbytes = offsets[1] - offsets[0]
        if nbytes != (numel * bits + 7) >> 3 or offsets[1] > data_bytes:
            bad_entry(name, e, data_bytes)
        weights += nbytes
        by_dtype[dtype] += nbytes
        prefix, _, last = name.rpartition(".")
        key = (last, dtype)
        decision = cache.get(key)
        if decision is None:
            mult = (
                quant.values_per_element(last, dtype, method)
                if quant.is_parameter_suffix(last)
                else 0
            )
            decision = (mult, _kind(last, dtype))
            if len(cache) < _MAX_DECISIONS:
                cache[key] = decision
            tally.examples.setdefault(decision[1], f"{name} {dtype}{list(shape)}")
        mult, kind = decision
        if kind:
            seen[kind] += 1
            if kind <= _FP4_SCALE and shape and len(packed) + len(scales) < 512:
                (packed if kind == _PACKED_FP4 else scales)[prefix] = shape[-1]
        if not mult:
            continue
        n = numel * mult
        if mtp_search is not None and mtp_search(name):
            mtp += n
            continue
        total += n
        if (
            ".experts." in name
            or ".block_sparse_moe.input_linear." in name
            or ".block_sparse_moe.output_linear." in name
        ) and "shared_expert" not in name:
            routed += n  # per-expert tensors, or Granite MoE's fused [experts, ...] ones
        if last == "weight" and name.endswith(_EMBEDDING_SUFFIXES):
            embedding += n
    check_overlaps(entries)
    tally.total += total
    tally.routed += routed
    tally.embedding += embedding
    tally.mtp += mtp
    tally.weights_bytes += weights
    tally.tensors += len(entries)
    tally.bytes_by_dtype.update(by_dtype)
    tally.kinds.update(seen)
    for p, scale in scales.items():
        cols = packed.get(p)
        if cols and scale:
            tally.scale_groups[cols * 2 // scale] += 1


@dataclass
class _Index:
    name: str
    weight_map: dict[str, Any]
    total_size: int | None


def _shard_names(
    files: ModelFiles, problems: list[ModelProblem]
) -> tuple[list[str], _Index | None]:
    """Shard file names (from the index when there is one) and the index read."""
    indexes = files.names(".safetensors.index.json")
    if not indexes:
        return files.names(".safetensors"), None
    name = indexes[0]
    try:
        doc = files.read_json(name)
    except HeaderError as exc:
        problems.append(ModelProblem(kind="index", path=name, detail=str(exc)))
        return files.names(".safetensors"), None
    wmap = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(wmap, dict):
        problems.append(ModelProblem(kind="index", path=name, detail="no weight_map object"))
        return files.names(".safetensors"), None
    files_named: set[str] = set()
    try:  # a few hundred shard names for tens of thousands of tensors: checked once each
        values: Any = set(wmap.values())
    except TypeError:  # a value that is a list or an object: each is named below
        values = wmap.values()
    for value in values:
        if not isinstance(value, str) or not _SHARD_NAME.fullmatch(value) or value.startswith("."):
            problems.append(
                ModelProblem(
                    kind="index",
                    path=name,
                    detail=f"weight_map names {str(value)[:80]!r}, not a shard file in this "
                    "directory: not read",
                )
            )
            continue
        files_named.add(value)
    meta = doc.get("metadata")
    total = meta.get("total_size") if isinstance(meta, dict) else None
    if isinstance(total, float) and total.is_integer():
        total = int(total)  # some writers store it as a float (e.g. 1.6e10 written by numpy)
    if total is not None and not (type(total) is int and 0 <= total < 1 << 60):
        problems.append(
            ModelProblem(
                kind="index",
                path=name,
                detail=f"metadata.total_size is {str(total)[:40]!r}: not a byte count",
            )
        )
        total = None
    return sorted(files_named), _Index(name, wmap, total)


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
        detail=load_rule_data().word("model", "symlink_outside", target=target),
    )


# A layer of the language model as vLLM and transformers name its tensors:
# ``model.layers.N.``, ``model.language_model.layers.N.``, ``backbone.layers.N.`` (Nemotron-H);
# the first ``layers.N.`` of the name, after a dot or at its start (``mtp_layers.N`` is not
# one). Towers beside the language model are left out by a word of their prefix
# (``vision_tower.vision_model.encoder.layers.N``, ``visual.``, ``audio_tower.layers.N``,
# Qwen3-Next's ``mtp.layers.N``).
_INDEX_LAYER = re.compile(r"(?:(.*?)\.)?layers\.(\d+)\.(.*)")
_TOWER = re.compile(r"vision|visual|audio|image|speech|encoder|mtp|vit|siglip")
_INDEX_EXPERT = re.compile(r"(?:^|\.)experts\.(\d+)\.")
# How far a count read from the index's names may be from config.json's before it is shown
# (issue 34: more than 3%).
INDEX_TOLERANCE = 0.03


def _index_facts(
    index: _Index,
    files: ModelFiles,
    names: list[str],
    raw: dict[str, Any] | None,
    arch: ArchFacts | None,
    problems: list[ModelProblem],
) -> IndexFacts:
    """The index's own statements when its shards were not read: the bytes, the layers and
    experts its names give, and each count that disagrees with config.json."""
    layers: set[int] = set()
    moe_layers: set[int] = set()
    experts: set[int] = set()
    match_layer, tower, find_expert = _INDEX_LAYER.fullmatch, _TOWER.search, _INDEX_EXPERT.search
    for name in index.weight_map:
        m = match_layer(name)
        if m is None:
            continue
        prefix = m.group(1)
        if prefix and tower(prefix):
            continue
        n = int(m.group(2))
        layers.add(n)
        e = find_expert(m.group(3))
        if e is not None:
            moe_layers.add(n)
            experts.add(int(e.group(1)))
    facts = IndexFacts(
        path=index.name,
        total_size=index.total_size,
        tensors=len(index.weight_map),
        shards=len(names),
        shards_present=sum(1 for n in names if files.has(n)),
        layers=len(layers) or None,
        moe_layers=len(moe_layers) or None,
        experts=len(experts) or None,
    )
    if arch is None:
        return facts
    # Layers past num_hidden_layers that config.json declares as multi-token prediction
    # (DeepSeek-V3's and GLM-4.5's num_nextn_predict_layers: layer 61 of 61) are not a
    # disagreement; any more are.
    cfg = text_config(raw)[0] if raw is not None else {}
    nextn = cfg.get("num_nextn_predict_layers")
    allowed = nextn if type(nextn) is int and 0 <= nextn <= 16 else 0

    def counted(indices: set[int]) -> int:
        past = sum(1 for i in indices if i >= arch.num_layers)
        return len(indices) - past + max(0, past - allowed)

    said: list[tuple[str, int, int]] = []
    if layers:
        said.append(("decoder layers", counted(layers), arch.num_layers))
    moe = arch.moe
    if moe is not None and experts:
        said.append(("experts", len(experts), moe.experts))
        said.append(("MoE layers", counted(moe_layers), len(moe.moe_layers)))
    elif moe is None and experts:
        said.append(("experts", len(experts), 0))
    for what, seen, config in said:
        if abs(seen - config) > INDEX_TOLERANCE * config:
            apart = f"{abs(seen - config) / config:.0%} apart" if config else "config.json: none"
            problems.append(
                ModelProblem(
                    kind="index",
                    path=index.name,
                    detail=f"the weight_map's names give {seen} {what}, config.json {config} "
                    f"({apart}): the checkpoint and its config.json disagree",
                )
            )
    return facts


def read_model_dir(path: Path) -> ModelFacts:
    """Everything the directory says about the model; problems are facts, not exceptions.

    Raises ModelDirError only when ``path`` is not a readable directory."""
    if not path.is_dir():
        raise ModelDirError(f"{path} is not a directory")
    return read_model(DirectoryFiles(path), label=str(path))


def read_model(files: ModelFiles, *, label: str, source: ModelSource | None = None) -> ModelFacts:
    """Everything ``files`` say about the model (``label``: how the report names it)."""
    problems: list[ModelProblem] = []
    raw: dict[str, Any] | None = None
    arch: ArchFacts | None = None
    try:
        doc = files.read_json("config.json")
        if not isinstance(doc, dict):
            raise HeaderError("not a JSON object")
        raw = doc
        arch = arch_from_config(doc)
    except NotModelled as exc:
        problems.append(ModelProblem(kind="not-modelled", path="config.json", detail=str(exc)))
    except (HeaderError, ConfigError) as exc:
        problems.append(ModelProblem(kind="config", path="config.json", detail=str(exc)))
    hf_quant: dict[str, Any] | None = None
    if files.has("hf_quant_config.json"):
        try:
            doc = files.read_json("hf_quant_config.json")
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

    names, index = _shard_names(files, problems)
    # An index with none of its shards here (config and index downloaded first, or read
    # from the Hub without the shards): one problem, not one a shard.
    to_read = names
    if index is not None and names and not any(files.has(n) for n in names):
        to_read = []
    tally = _Tally()
    mtp_layer = _mtp_pattern(arch.num_layers if arch else None)
    read_ok = 0
    for name, header in files.headers(to_read):
        link = files.link_problem(name)
        if link is not None:
            problems.append(link)
        if isinstance(header, HeaderError):
            kind = "missing-shard" if str(header).startswith("missing") else "header"
            problems.append(ModelProblem(kind=kind, path=name, detail=str(header)))
            continue
        try:
            _fold(tally, header.entries, header.data_bytes, qf.method, mtp_layer)
        except HeaderError as exc:
            problems.append(ModelProblem(kind="header", path=name, detail=str(exc)))
            continue
        read_ok += 1
        del header
    index_count = len(index.weight_map) if index is not None else None
    if index_count is not None and read_ok == len(names) and tally.tensors < index_count:
        problems.append(
            ModelProblem(
                kind="index",
                path=index.name if index is not None else "model.safetensors.index.json",
                detail=f"the index maps {index_count} tensors but the shards hold {tally.tensors}",
            )
        )
    qf = _confirm(qf, tally, problems)
    complete = bool(names) and read_ok == len(names)
    index_facts: IndexFacts | None = None
    if index is not None and not complete:
        index_facts = _index_facts(index, files, names, raw, arch, problems)
        if names and not to_read:
            problems.append(
                ModelProblem(
                    kind="missing-shard",
                    path=index.name,
                    detail=f"none of the {len(names)} shard(s) it names is here: "
                    + (
                        "the bytes are its metadata.total_size, the parameters computed "
                        "from config.json"
                        if index.total_size is not None
                        else "sizes computed from config.json"
                    ),
                )
            )
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
    if params is not None and arch is not None and arch.family is not None:
        family = load_families().by_name(arch.family)
        if family is not None:
            params = msgspec.structs.replace(
                params, publisher_active=family.active, publisher_active_source=family.active_source
            )
    return ModelFacts(
        path=label,
        arch=arch,
        quantization=qf,
        parameters=params,
        weights_bytes=tally.weights_bytes if complete else None,
        bytes_by_dtype=dict(sorted(tally.bytes_by_dtype.items())),
        shards=read_ok,
        tensors=tally.tensors,
        problems=problems,
        index=index_facts,
        source=source,
    )


def _confirm(qf: QuantFacts, tally: _Tally, problems: list[ModelProblem]) -> QuantFacts:
    """Add what the tensors show to the evidence; a disagreement is a problem."""
    if tally.tensors == 0:
        return qf
    packed_fp4, fp8, int4, high = (tally.kinds[k] for k in (_PACKED_FP4, _FP8, _INT4, _HIGH))
    ex = tally.examples
    ev = list(qf.evidence)
    if packed_fp4:
        groups = ", ".join(f"1 per {g}" for g, _ in tally.scale_groups.most_common(2))
        ev.append(
            f"tensors: {packed_fp4} U8 weights (two FP4 values a byte), e.g. "
            f"{ex[_PACKED_FP4]}" + (f"; F8_E4M3 block scales {groups} weights" if groups else "")
        )
    if fp8:
        ev.append(f"tensors: {fp8} FP8 weights, e.g. {ex[_FP8]}")
    if int4:
        ev.append(f"tensors: {int4} I32 packed 4-bit weights, e.g. {ex[_INT4]}")
    if high:
        ev.append(f"tensors: {high} BF16/F16/F32 weights")
    seen = {
        "nvfp4": packed_fp4 > 0,
        "mxfp4": True,  # gpt-oss keeps its MXFP4 experts as *_blocks U8 (not .weight)
        "fp8": fp8 > 0,
        "w4a16": int4 > 0,
        "unquantized": not (packed_fp4 or fp8 or int4),
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
