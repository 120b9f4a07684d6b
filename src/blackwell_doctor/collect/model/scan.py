"""Read a model directory into ``ModelFacts``: config.json, the quantization description,
the safetensors index and each shard's header. Never a weight byte.

Memory stays flat in the number of shards: each header is folded into running totals and
dropped before the next is read.

The files come from a :class:`ModelFiles`: a directory (:class:`DirectoryFiles`, also a
snapshot of the Hugging Face cache) or a Hub repository over HTTP (``collect.model.hub``),
so that every form of ``model`` is read by the one scan below.
"""

from __future__ import annotations

import itertools
import math
import operator
import os
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, Protocol

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
# Words one of which every suffix holds: a shard's names joined are searched for them (2
# searches, not 5) before any name is tested.
_EMBEDDING_HINTS = ("embed", "wte")
# _fold_chunk counts on both.
assert all(s.endswith(".weight") for s in _EMBEDDING_SUFFIXES)
assert all(any(h in s for h in _EMBEDDING_HINTS) for s in _EMBEDDING_SUFFIXES)
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
        self._dir = os.fspath(root)  # joined as text: a Path a shard cost ~2% of the scan
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
                yield name, read_header(os.path.join(self._dir, name), check_entries=False)
            except HeaderError as exc:
                yield name, exc

    def link_problem(self, name: str) -> ModelProblem | None:
        return _symlink_problem(self._confine, self._dir, name)


@dataclass
class _Params:
    """Parameters counted: all of them, those of routed experts, of the embedding table and
    of multi-token-prediction layers."""

    total: int = 0
    routed: int = 0
    embedding: int = 0
    mtp: int = 0

    def add(self, other: _Params) -> None:
        self.total += other.total
        self.routed += other.routed
        self.embedding += other.embedding
        self.mtp += other.mtp


@dataclass
class _Tally(_Params):
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


# Tensors a shard's pass takes at a time: its lists (one item a tensor, names' suffixes
# among them) stay this small whatever a shard lists (MAX_TENSORS: 250,000), and a real
# shard (a few hundred to ~2,300 tensors) is one chunk.
_CHUNK = 4096
_FIRST, _SECOND, _LAST = map(operator.itemgetter, (0, 1, 2))
_DTYPE = operator.attrgetter("dtype")
_SHAPE = operator.attrgetter("shape")
_SPAN = operator.attrgetter("data_offsets")
# The names of routed experts' tensors (per-expert ones, or Granite MoE's fused
# [experts, ...] ones), not a shared expert's.
_ROUTED_PARTS = (".experts.", ".block_sparse_moe.input_linear.", ".block_sparse_moe.output_linear.")
_ROUTED = re.compile("|".join(map(re.escape, _ROUTED_PARTS)))


@dataclass
class _Shard(_Params):
    """One shard's sums, added to the tally once all of its tensors passed the checks."""

    weights: int = 0
    # Plain dicts: a Counter's construction and update cost ~10 us a shard.
    by_dtype: dict[str, int] = field(default_factory=dict)
    seen: dict[int, int] = field(default_factory=dict)
    packed: dict[str, int] = field(default_factory=dict)
    scales: dict[str, int] = field(default_factory=dict)


def _fold(
    tally: _Tally,
    entries: dict[str, Any],
    data_bytes: int,
    method: str,
    mtp_layer: _MtpLayer | None,
) -> None:
    """Check one shard's tensors and add them to the running totals in the same pass.

    The checks are header.parse_header's (dtype known, size = elements x bits, inside the
    file); a failure raises HeaderError before anything is added. Each step runs over the
    whole chunk in C (``map``, ``sum``, ``compress`` over one list a field), not one Python
    statement a tensor: on 24,000 tensors in 400 shards this pass took 44 ms of the
    command's ~95 ms CPU (issue 34). Per-name decisions (scale or parameter, packing,
    evidence kind) are cached by (suffix, dtype)."""
    shard = _Shard()
    if len(entries) <= _CHUNK:
        _fold_chunk(
            tally, shard, list(entries), list(entries.values()), data_bytes, method, mtp_layer
        )
    else:
        items = iter(entries.items())
        while chunk := list(itertools.islice(items, _CHUNK)):
            names, values = list(map(_FIRST, chunk)), list(map(_SECOND, chunk))
            del chunk
            _fold_chunk(tally, shard, names, values, data_bytes, method, mtp_layer)
    check_overlaps(entries)
    tally.add(shard)
    tally.weights_bytes += shard.weights
    tally.tensors += len(entries)
    for dtype, nbytes in shard.by_dtype.items():
        tally.bytes_by_dtype[dtype] += nbytes
    for kind, count in shard.seen.items():
        if kind:  # 0: no evidence either way
            tally.kinds[kind] += count
    for p, scale in shard.scales.items():
        cols = shard.packed.get(p)
        if cols and scale:
            tally.scale_groups[cols * 2 // scale] += 1


def _fold_chunk(
    tally: _Tally,
    shard: _Shard,
    names: list[str],
    values: list[Any],
    data_bytes: int,
    method: str,
    mtp_layer: _MtpLayer | None,
) -> None:
    if not names:
        return
    dtypes: list[str] = [e.dtype for e in values]
    one_dtype = dtypes.count(dtypes[0]) == len(dtypes)
    shapes: list[list[int]] = [e.shape for e in values]
    sizes = _sizes(dtypes, one_dtype, shapes, [e.data_offsets for e in values], data_bytes)
    if sizes is None:
        _bad_chunk(tally, names, values, data_bytes, method)
    numels, nbytes = sizes
    weights = sum(nbytes)
    shard.weights += weights
    if one_dtype:
        shard.by_dtype[dtypes[0]] = shard.by_dtype.get(dtypes[0], 0) + weights
    else:
        for dtype in dict.fromkeys(dtypes):
            shard.by_dtype[dtype] = shard.by_dtype.get(dtype, 0) + sum(
                [b for b, d in zip(nbytes, dtypes, strict=True) if d == dtype]
            )
    joined = "\n".join(names)  # a part found in it is in a name: no part holds a newline
    # Each name's suffix (after its last dot), each distinct (suffix, dtype) decided once.
    # Most are "weight": then two counts over the names joined say so for all of them
    # (when no name holds a newline, each newline ends one name).
    last_index = len(names) - 1
    if (
        joined.endswith(".weight")
        and joined.count(".weight\n") == last_index
        and joined.count("\n") == last_index
    ):
        lasts = ["weight"] * len(names)
    else:
        lasts = [n.rpartition(".")[2] for n in names]
    keys: list[Any] = lasts if one_dtype else list(zip(lasts, dtypes, strict=True))
    table = _decisions(tally, keys, names, shapes, dtypes[0] if one_dtype else None, method)
    if len(table) == 1:
        ((mult, kind),) = table.values()
        shard.seen[kind] = shard.seen.get(kind, 0) + len(keys)
        per, factor = numels, mult  # each tensor's parameters are mult x its elements
    else:
        for key, count in Counter(keys).items():
            kind = table[key][1]
            shard.seen[kind] = shard.seen.get(kind, 0) + count
        per, factor = [m * table[k][0] for m, k in zip(numels, keys, strict=True)], 1
    if any(kind in (_PACKED_FP4, _FP4_SCALE) for _, kind in table.values()):
        packed, scales = shard.packed, shard.scales
        for name, shape, key in zip(names, shapes, keys, strict=True):
            kind = table[key][1]
            if kind in (_PACKED_FP4, _FP4_SCALE) and shape and len(packed) + len(scales) < 512:
                (packed if kind == _PACKED_FP4 else scales)[name.rpartition(".")[0]] = shape[-1]
    if not factor:
        return
    # Layers past num_hidden_layers are rare (one MTP layer in a few shards): one search
    # over the names decides whether any name needs the per-tensor test.
    if mtp_layer is not None and mtp_layer.maybe.search(joined):
        search = mtp_layer.name.search
        shard.mtp += factor * sum([p for p, n in zip(per, names, strict=True) if search(n)])
        per = [0 if search(n) else p for p, n in zip(per, names, strict=True)]
    shard.total += factor * sum(per)
    parts = [part for part in _ROUTED_PARTS if part in joined]
    if parts:
        zipped = zip(per, names, strict=True)
        if len(parts) == 1 and "shared_expert" not in joined:  # one test a name
            part = parts[0]
            routed = [p for p, n in zipped if part in n]
        else:
            routed = [
                p
                for p, n in zipped
                if (
                    ".experts." in n
                    or ".block_sparse_moe.input_linear." in n
                    or ".block_sparse_moe.output_linear." in n
                )
                and "shared_expert" not in n
            ]
        shard.routed += factor * sum(routed)
    if any(hint in joined for hint in _EMBEDDING_HINTS):
        # Every suffix ends in ".weight" (asserted at _EMBEDDING_SUFFIXES): the last part
        # is "weight".
        shard.embedding += factor * sum(
            [p for p, n in zip(per, names, strict=True) if n.endswith(_EMBEDDING_SUFFIXES)]
        )


def _decisions(
    tally: _Tally,
    keys: list[Any],
    names: list[str],
    shapes: list[list[int]],
    dtype: str | None,
    method: str,
) -> dict[Any, tuple[int, int]]:
    """Each distinct key's decision (``keys``: the suffixes when the chunk has one
    ``dtype``, else (suffix, dtype) pairs), pairs not cached yet decided in the order
    they first come (the cache fills, and each kind's example is taken, as tensor by
    tensor)."""
    cache = tally.decisions
    table: dict[Any, tuple[int, int]] = {}
    first: dict[Any, int] | None = None
    for key in dict.fromkeys(keys):
        pair = (key, dtype) if dtype is not None else key
        decision = cache.get(pair)
        if decision is None:
            if first is None:  # each key's first index: the last one written, backwards
                first = dict(zip(reversed(keys), range(len(keys) - 1, -1, -1), strict=True))
            i = first[key]
            decision = _decide(tally, pair, names[i], shapes[i], method)
        table[key] = decision
    return table


def _sizes(
    dtypes: list[str],
    one_dtype: bool,
    shapes: list[list[int]],
    spans: list[tuple[int, int]],
    data_bytes: int,
) -> tuple[list[int], list[int]] | None:
    """Each tensor's elements and bytes, or None when one fails header.parse_header's checks
    (dtype known, at most MAX_DIMS dimensions, bytes = elements x bits, inside the data)."""
    try:
        # A field that is missing (None) is a TypeError in the first step that uses it, a
        # dtype not in DTYPE_BITS a KeyError or (its bits None) a TypeError.
        if max(map(len, shapes)) > MAX_DIMS:  # before the products: no huge ones
            return None
        numels = list(map(math.prod, shapes))
        nbytes = [e - b for b, e in spans]
        if max([e for _, e in spans]) > data_bytes:
            return None
        if one_dtype:
            bits = DTYPE_BITS[dtypes[0]]
            if bits & 7:
                expected = [(m * bits + 7) >> 3 for m in numels]
            else:
                size = bits >> 3
                expected = [m * size for m in numels]
        else:
            bits_of = DTYPE_BITS.get
            expected = [
                (m * bits_of(d) + 7) >> 3  # type: ignore[operator]  # None: TypeError
                for m, d in zip(numels, dtypes, strict=True)
            ]
        if expected == nbytes:
            return numels, nbytes
    except (TypeError, KeyError):
        pass
    return None


def _decide(
    tally: _Tally, key: tuple[str, str], name: str, shape: list[int], method: str
) -> tuple[int, int]:
    """What (suffix, dtype) ``key`` says: (values per stored element, 0 for scales; the
    evidence kind), cached while the cache has room; the first tensor of each kind is its
    example."""
    decision = tally.decisions.get(key)
    if decision is not None:
        return decision
    last, dtype = key
    mult = quant.values_per_element(last, dtype, method) if quant.is_parameter_suffix(last) else 0
    decision = (mult, _kind(last, dtype))
    if len(tally.decisions) < _MAX_DECISIONS:
        tally.decisions[key] = decision
    tally.examples.setdefault(decision[1], f"{name} {dtype}{list(shape)}")
    return decision


def _bad_chunk(
    tally: _Tally, names: list[str], values: list[Any], data_bytes: int, method: str
) -> NoReturn:
    """Raise the HeaderError of the first entry that fails a check, tensor by tensor; the
    tensors before it give their decisions and examples as they pass (one shard's bad entry
    does not take the examples of its good ones from the evidence)."""
    bits_of = DTYPE_BITS.get
    for name, e in zip(names, values, strict=True):
        dtype, shape, offsets = e.dtype, e.shape, e.data_offsets
        bits = bits_of(dtype)
        if (
            bits is None
            or shape is None
            or offsets is None
            or len(shape) > MAX_DIMS
            or offsets[1] - offsets[0] != (math.prod(shape) * bits + 7) >> 3
            or offsets[1] > data_bytes
        ):
            bad_entry(name, e, data_bytes)
        _decide(tally, (name.rpartition(".")[2], dtype), name, shape, method)
    raise AssertionError("a chunk that failed the checks has no bad entry")


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


def _symlink_problem(root_real: str, root: str, name: str) -> ModelProblem | None:
    path = os.path.join(root, name)
    if not os.path.islink(path):
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
