"""The safetensors header, read by its documented layout and nothing more.

A safetensors file is an unsigned 64-bit little-endian header length N, N bytes of UTF-8
JSON (``{"name": {"dtype": ..., "shape": [...], "data_offsets": [begin, end]}, ...,
"__metadata__": {str: str}}``, possibly padded with spaces), then the tensor data, whose
offsets are relative to the first byte after the header.

Why not the ``safetensors`` library: ``safe_open`` needs the whole file present and
consistent (a shard still downloading is an exception, not a "truncated shard" finding), maps
the file, and returns tensors through a framework (torch/numpy) this tool does not install.
Reading 8 bytes plus a bounded header and decoding it with msgspec needs nothing new, bounds
every read before it happens, and lets each inconsistency be named. The library remains the
oracle in the tests (files it writes, it reads, we read) and the floor in
``benchmarks/model_headers.py``.

Never reads past the header: the data region is only measured (``fstat``) so offsets that
point past the end of the file are reported.
"""

from __future__ import annotations

import itertools
import math
import operator
import os
from dataclasses import dataclass, field
from typing import Annotated, Any, NoReturn

import msgspec

from blackwell_doctor.collect.regularfile import NotRegularFile, open_regular, read_upto

# The safetensors library refuses headers above 100 MB (MAX_HEADER_SIZE in its Rust
# source); a real header is about 150 bytes per tensor, so even 100k tensors are ~15 MB.
MAX_HEADER_BYTES = 100_000_000
MAX_DIMS = 16
# Tensors one shard may list. The largest published checkpoints hold a few thousand per
# shard and ~100k-300k in all (from their config.json, tests/fixtures/models: DeepSeek-V3/R1
# 58 MoE layers x 256 experts x 3 projections x 2 (FP8 weight, scale_inv) ~ 91k tensors in
# 163 shards, ~560 a shard; Kimi-K2 60 x 384 x 3 x 2 ~ 140k in 61 shards, ~2,300 a shard;
# Kimi-K2 in ModelOpt NVFP4, 4 tensors a projection, ~280k in ~550 GB: ~25k in a 50 GB
# shard, the Hugging Face Hub's largest file). 250,000 is 10x that and 100x a real shard;
# far below what 100 MB of header can list (8M entries of ``"t0":{}``), which the decoder
# would otherwise turn into objects at ~130-330 bytes each (issue 32: 1.3 GB and 24 s a
# shard). At the cap, a header of 98 MB (250k entries with 390-byte names) peaks at 303 MB
# and 1.7 s (`model DIR`, 2026-11-28); at 500k entries (94 MB) it was 384 MB.
MAX_TENSORS = 250_000

# Bits per element of every dtype the safetensors format names (its Rust ``Dtype`` enum).
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}


class HeaderError(Exception):
    """A safetensors file whose header cannot be used; the message is one line."""


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


_Dim = Annotated[int, msgspec.Meta(ge=0)]


class _Entry(msgspec.Struct, frozen=True, gc=False):
    """One header entry as decoded; every field optional so that ``__metadata__`` (a map
    of strings) decodes too and is then taken apart from the tensors."""

    dtype: str | None = None
    shape: list[_Dim] | None = None
    data_offsets: tuple[_Dim, _Dim] | None = None


_NULL = msgspec.Raw(b"null")


class _Meta(msgspec.Struct, frozen=True):
    # Its bytes, bounded (MAX_METADATA_VALUES) before they are decoded into a dict.
    metadata: msgspec.Raw = msgspec.field(default_factory=lambda: _NULL, name="__metadata__")


_ENTRIES = msgspec.json.Decoder(dict[str, _Entry])
_METADATA = msgspec.json.Decoder(_Meta)
_METADATA_MAP = msgspec.json.Decoder(dict[str, str] | None)
# __metadata__ holds a few strings ({"format": "pt"}); 2M keys of '"k0":""' (27 MB) made a
# 300 MB dict (issue 32's review), which the tensor count (braces) does not see.
MAX_METADATA_VALUES = 10_000
# Values in the whole header (its commas): a real tensor has ~5 (4 for a matrix, 1 between
# entries), so 8 a tensor at the cap; a header of lists or numbers past it
# ('{"t0":[[],[],...]}') would otherwise be built whole by the slow path's generic decode.
MAX_VALUES = 8 * MAX_TENSORS


@dataclass(frozen=True, slots=True)
class Header:
    """One file's header: its tensors (name -> entry), metadata and the sizes checked."""

    entries: dict[str, _Entry]
    metadata: dict[str, str] = field(default_factory=dict)
    data_bytes: int = 0
    header_bytes: int = 0
    file_bytes: int = 0

    @property
    def tensors(self) -> list[TensorInfo]:
        out = []
        for name, e in self.entries.items():
            assert e.dtype is not None
            assert e.shape is not None
            assert e.data_offsets is not None
            begin, end = e.data_offsets
            out.append(TensorInfo(name, e.dtype, tuple(e.shape), begin, end))
        return out


def _open_regular(path: str | os.PathLike[str]) -> tuple[int, int]:
    """An fd and size of ``path`` (symlinks followed) if it is a regular file
    (collect.regularfile: a FIFO planted under a shard's name does not block the open)."""
    try:
        fd, st = open_regular(path)
    except NotRegularFile:
        raise HeaderError("not a regular file") from None
    except FileNotFoundError:
        raise HeaderError("missing (or a dangling symlink)") from None
    except OSError as exc:
        raise HeaderError(f"cannot open: {exc.strerror or exc}") from None
    except ValueError:  # a NUL byte in the name
        raise HeaderError("cannot open: a NUL byte in its name") from None
    return fd, st.st_size


def read_header(
    path: str | os.PathLike[str],
    *,
    max_header_bytes: int = MAX_HEADER_BYTES,
    check_entries: bool = True,
) -> Header:
    """Read and validate the header of the safetensors file ``path``.

    ``check_entries=False`` leaves the per-tensor checks (:func:`check_entries_fast`) to a
    caller that walks the tensors anyway (the directory scan does both in one pass)."""
    fd, size = _open_regular(path)
    try:
        if size < 8:
            raise HeaderError(f"truncated: {size} bytes, shorter than the 8-byte length")
        prefix = read_upto(fd, 8)
        if len(prefix) < 8:
            raise HeaderError("truncated while reading the 8-byte length")
        n = int.from_bytes(prefix, "little")
        if n > max_header_bytes:
            raise HeaderError(
                f"header length {n} bytes exceeds the {max_header_bytes}-byte limit "
                "(corrupt, or not a safetensors file)"
            )
        if 8 + n > size:
            raise HeaderError(
                f"header length {n} bytes runs past the end of the {size}-byte file "
                "(truncated download, or a length that lies)"
            )
        raw = read_upto(fd, n)
        if len(raw) < n:
            raise HeaderError(f"file shrank while reading: {len(raw)} of {n} header bytes")
    finally:
        os.close(fd)
    return parse_header(raw, data_bytes=size - 8 - n, file_bytes=size, check_entries=check_entries)


def parse_header(
    raw: bytes, *, data_bytes: int, file_bytes: int | None = None, check_entries: bool = True
) -> Header:
    """Validate the JSON header ``raw`` against a data region of ``data_bytes``."""
    if not (raw.startswith(b"{") or raw.lstrip(b" ").startswith(b"{")):
        raise HeaderError("header is not a JSON object")
    # Counted in the bytes before anything is decoded: every entry the typed decoder turns
    # into an object opens with '{' (the root's is the first; braces inside names or
    # metadata only make the count larger), and an entry that is no object stops that
    # decoder where it stands. __metadata__ is one more object. A header shorter than
    # either limit cannot pass it, and is not counted (a real one is ~150 bytes a tensor).
    objects = raw.count(b"{") - 1 if len(raw) > MAX_TENSORS + 2 else 0
    if objects > MAX_TENSORS + 1:
        raise HeaderError(
            f"header lists {objects} entries, above the limit of {MAX_TENSORS} tensors a "
            "shard (corrupt, or not a safetensors file)"
        )
    values = raw.count(b",") if len(raw) > MAX_VALUES else 0
    if values > MAX_VALUES:
        raise HeaderError(
            f"header lists {values} values, above the limit of {MAX_VALUES} ({MAX_TENSORS} "
            "tensors a shard; corrupt, or not a safetensors file)"
        )
    try:
        entries = _ENTRIES.decode(raw)
    except msgspec.ValidationError:
        _explain(raw, data_bytes)  # the slow path names the entry; always raises
        raise HeaderError("header does not match the safetensors layout") from None
    except msgspec.DecodeError as exc:
        raise HeaderError(f"header is not valid JSON: {' '.join(str(exc).split())}") from None
    except UnicodeDecodeError as exc:  # msgspec raises it for a name that is not UTF-8
        raise HeaderError(f"header is not valid JSON: {not_utf8(raw, exc)}") from None
    except RecursionError:
        raise HeaderError("header is nested too deeply") from None
    if raw.count(b'"data_offsets"') > len(entries) - ("__metadata__" in entries):
        # More entries in the text than in the dict: a name given twice (JSON decoders keep
        # the last and count it once). Rare, so only then the slow look for which.
        _duplicate(raw)
    metadata: dict[str, str] = {}
    if entries.pop("__metadata__", None) is not None:
        try:
            kept = _METADATA.decode(raw).metadata
            if bytes(kept).count(b",") >= MAX_METADATA_VALUES:
                raise HeaderError(
                    f"__metadata__ lists more than {MAX_METADATA_VALUES} values "
                    "(corrupt, or not a safetensors file)"
                )
            metadata = _METADATA_MAP.decode(kept) or {}
        except msgspec.ValidationError:
            raise HeaderError("__metadata__ must map strings to strings") from None
        except UnicodeDecodeError as exc:  # a value that is not UTF-8 (entries skip it)
            raise HeaderError(f"header is not valid JSON: {not_utf8(raw, exc)}") from None
    if check_entries:
        bits_of = DTYPE_BITS.get
        prod = math.prod
        for name, e in entries.items():
            shape, offsets = e.shape, e.data_offsets
            bits = bits_of(e.dtype)  # type: ignore[arg-type]  # None -> None
            if (
                bits is None
                or shape is None
                or offsets is None
                or len(shape) > MAX_DIMS
                or offsets[1] - offsets[0] != (prod(shape) * bits + 7) >> 3
                or offsets[1] > data_bytes
            ):
                bad_entry(name, e, data_bytes)
        check_overlaps(entries)
    return Header(
        entries=entries,
        metadata=metadata,
        data_bytes=data_bytes,
        header_bytes=len(raw),
        file_bytes=file_bytes if file_bytes is not None else 8 + len(raw) + data_bytes,
    )


def _duplicate(raw: bytes) -> None:
    """Raise the HeaderError naming a key the header gives twice (a tensor's name, or a
    field of an entry); return when there is none (``"data_offsets"`` was also a value)."""
    import json

    def pairs(items: list[tuple[str, Any]]) -> None:
        # Nothing is kept: an entry's object goes as soon as its keys are checked, so the
        # document is never held whole as Python objects.
        seen: set[str] = set()
        for key, _ in items:
            if key in seen:
                shown = key if len(key) <= 120 else key[:117] + "..."
                raise HeaderError(
                    f"{shown!r} is named twice in the header: malformed (a reader keeps one "
                    "and loses the other)"
                )
            seen.add(key)

    try:
        json.loads(raw, object_pairs_hook=pairs)
    except (ValueError, RecursionError):
        return  # msgspec decoded it: nothing else to say


def not_utf8(data: bytes, exc: UnicodeDecodeError) -> str:
    """Where ``data`` stops being UTF-8, in words. msgspec's positions are within the string
    it was decoding, so the first bad byte of the whole document is looked up here."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as whole:
        return f"not UTF-8 (byte 0x{data[whole.start]:02x} at offset {whole.start})"
    return f"not UTF-8 ({exc.reason})"


def bad_entry(name: str, e: _Entry, data_bytes: int) -> NoReturn:
    """Raise the HeaderError naming what is wrong with an entry that failed a fast check."""
    _tensor(
        name,
        {"dtype": e.dtype, "shape": e.shape, "data_offsets": list(e.data_offsets or [])},
        data_bytes,
    )
    raise HeaderError(f"tensor {name[:120]!r}: inconsistent entry")


def _explain(raw: bytes, data_bytes: int) -> None:
    """Raise the HeaderError that names what is wrong in a header the typed decoder
    refused (generic decode, entry by entry).

    The generic decode makes an object of every entry, which need not open with '{' (the
    limit counted in parse_header) but has a name before a ':': a header with more ':'
    than MAX_TENSORS is said without looking for the entry (a real shard has some 10,000)."""
    keys = raw.count(b":")
    if keys > MAX_TENSORS + 1:
        raise HeaderError(
            f"header does not match the safetensors layout ({keys} keys: too many to look "
            f"for the entry that breaks it, above the limit of {MAX_TENSORS} tensors a shard)"
        )
    try:
        doc: Any = msgspec.json.decode(raw)
    except RecursionError:
        raise HeaderError("header is nested too deeply") from None
    if not isinstance(doc, dict):
        raise HeaderError("header is not a JSON object")
    for name, entry in doc.items():
        if name == "__metadata__":
            if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
                raise HeaderError("__metadata__ must map strings to strings")
            continue
        _tensor(name, entry, data_bytes)


def _tensor(name: str, entry: Any, data_bytes: int) -> TensorInfo:
    """The entry as a TensorInfo, or the HeaderError that names what is wrong with it."""
    shown = name if len(name) <= 120 else name[:117] + "..."
    if not isinstance(entry, dict):
        raise HeaderError(f"tensor {shown!r}: entry is not an object")
    dtype = entry.get("dtype")
    shape = entry.get("shape")
    offsets = entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise HeaderError(f"tensor {shown!r}: unknown dtype {str(dtype)[:20]!r}")
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_DIMS
        or not all(type(d) is int and d >= 0 for d in shape)
    ):
        raise HeaderError(f"tensor {shown!r}: shape must be a list of non-negative integers")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(type(o) is int for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        raise HeaderError(f"tensor {shown!r}: data_offsets must be [begin, end], 0 <= begin <= end")
    begin, end = offsets
    info = TensorInfo(name=name, dtype=dtype, shape=tuple(shape), begin=begin, end=end)
    bits = info.numel * DTYPE_BITS[dtype]
    expected = (bits + 7) // 8
    if end - begin != expected:
        raise HeaderError(
            f"tensor {shown!r}: {dtype}{list(shape)} needs {expected} bytes but its offsets "
            f"span {end - begin}"
        )
    if end > data_bytes:
        raise HeaderError(
            f"tensor {shown!r} ends at byte {end} of the data but the file holds only "
            f"{data_bytes} bytes of data (truncated download?)"
        )
    return info


def check_overlaps(entries: dict[str, _Entry]) -> None:
    """No two tensors share a byte of the data (each entry's offsets checked, begin <= end).
    A writer lays the data out in the header's order (the safetensors library does), so the
    offsets in that order, flattened, already run upwards: one pass in C says so. Otherwise
    the spans sorted and compared in C; a pair that looks like an overlap is examined in
    Python (an empty tensor inside another is not one)."""
    if len(entries) < 2:
        return
    # Every entry's offsets are a pair by now (read_header's and the scan's checks first).
    offsets: list[Any] = [e.data_offsets for e in entries.values()]
    flat = list(itertools.chain.from_iterable(offsets))
    if flat == sorted(flat):
        return
    spans: list[tuple[int, int]] = sorted(offsets)
    begins = [b for b, _ in spans[1:]]
    ends = [e for _, e in spans[:-1]]
    if not any(map(operator.lt, begins, ends)):
        return
    real = [(b, e) for b, e in spans if e > b]
    for (b1, e1), (b2, e2) in itertools.pairwise(real):
        if b2 < e1:
            names = [n for n, e in entries.items() if e.data_offsets in ((b1, e1), (b2, e2))]
            raise HeaderError(f"tensors {names[0]!r} and {names[-1]!r} overlap in the data")
