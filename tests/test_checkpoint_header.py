"""The safetensors header reader: agrees with the safetensors library on every file the
library writes, and turns every malformed, truncated or lying file into one HeaderError."""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import struct
from pathlib import Path

import pytest

from blackwell_doctor.collect.model.header import DTYPE_BITS, HeaderError, parse_header, read_header
from tests.conftest import skip_without

try:
    import safetensors._safetensors_rust as st  # type: ignore[import-not-found]
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as s
    from safetensors import safe_open
except ModuleNotFoundError as exc:
    skip_without(exc)

# Library dtype name -> bytes per stored element (F4 packs two values in one byte).
LIB_DTYPES = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "float16": 2,
    "float32": 4,
    "float64": 8,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2": 1,
    "float8_e5m2fnuz": 1,
    "float8_e8m0fnu": 1,
    "complex64": 8,
}

_settings = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

tensor_specs = s.dictionaries(
    s.text(s.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=40).filter(
        lambda n: n != "__metadata__"
    ),
    s.tuples(s.sampled_from(sorted(LIB_DTYPES)), s.lists(s.integers(0, 6), max_size=4)),
    max_size=12,
)


def _write(
    path: Path, specs: dict[str, tuple[str, list[int]]], meta: dict[str, str] | None
) -> None:
    keep = []
    out = {}
    for name, (dtype, shape) in specs.items():
        n = math.prod(shape) * LIB_DTYPES[dtype]
        buf = ctypes.create_string_buffer(max(n, 1))
        keep.append(buf)
        out[name] = st.TensorSpec(
            dtype=dtype, shape=shape, data_ptr=ctypes.addressof(buf), data_len=n
        )
    st.serialize_file(out, str(path), meta)


@_settings
@given(
    specs=tensor_specs,
    meta=s.none() | s.dictionaries(s.text(max_size=8), s.text(max_size=20), max_size=3),
)
def test_reads_what_the_safetensors_library_writes(
    tmp_path: Path, specs: dict[str, tuple[str, list[int]]], meta: dict[str, str] | None
) -> None:
    path = tmp_path / "x.safetensors"
    _write(path, specs, meta)
    try:
        with safe_open(str(path), "numpy") as f:
            names = f.keys()  # safe_open is not iterable
            theirs = {k: (f.get_slice(k).get_dtype(), f.get_slice(k).get_shape()) for k in names}
            their_meta = f.metadata() or {}
    except st.SafetensorError:
        # The library can write a file it cannot read back (0.8.0: no tensors and an empty
        # metadata dict give '{},"__metadata__":{}}'); then we refuse it as well.
        with pytest.raises(HeaderError):
            read_header(path)
        return
    ours = read_header(path)
    assert {t.name: (t.dtype, list(t.shape)) for t in ours.tensors} == theirs
    assert ours.metadata == their_meta
    # Every byte of the file is either the 8-byte length, the header or a tensor's data.
    assert 8 + ours.header_bytes + sum(t.nbytes for t in ours.tensors) == path.stat().st_size


def test_f4_counts_two_values_per_byte(tmp_path: Path) -> None:
    buf = ctypes.create_string_buffer(4)
    spec = st.TensorSpec(
        dtype="float4_e2m1fn_x2", shape=[4], data_ptr=ctypes.addressof(buf), data_len=4
    )
    st.serialize_file({"w": spec}, str(tmp_path / "f4.safetensors"), None)
    (t,) = read_header(tmp_path / "f4.safetensors").tensors
    assert (t.dtype, t.shape, t.nbytes, DTYPE_BITS["F4"]) == ("F4", (8,), 4, 4)


@_settings
@given(data=s.binary(max_size=300))
def test_arbitrary_bytes_are_a_header_error_or_a_valid_header(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "junk.safetensors"
    path.write_bytes(data)
    try:
        header = read_header(path)
    except HeaderError as exc:
        message = str(exc)
    else:
        assert 8 + header.header_bytes <= len(data)
        return
    assert message
    assert "\n" not in message


@_settings
@given(
    specs=tensor_specs.filter(lambda d: any(math.prod(shape) > 0 for _, shape in d.values())),
    cut=s.integers(1, 10_000),
)
def test_any_truncation_is_named(
    tmp_path: Path, specs: dict[str, tuple[str, list[int]]], cut: int
) -> None:
    path = tmp_path / "t.safetensors"
    _write(path, specs, None)
    data = path.read_bytes()
    path.write_bytes(data[: max(0, len(data) - cut)])
    with pytest.raises(HeaderError):
        read_header(path)


@_settings
@given(
    raw=s.recursive(
        s.none() | s.booleans() | s.integers() | s.text(max_size=5),
        lambda inner: (
            s.lists(inner, max_size=3) | s.dictionaries(s.text(max_size=5), inner, max_size=3)
        ),
        max_leaves=20,
    )
)
def test_any_json_value_is_judged_without_a_crash(raw: object) -> None:
    with contextlib.suppress(HeaderError):
        parse_header(json.dumps(raw).encode(), data_bytes=1 << 20)


def _file(path: Path, header: bytes, data: bytes = b"", length: int | None = None) -> Path:
    n = len(header) if length is None else length
    path.write_bytes(struct.pack("<Q", n) + header + data)
    return path


def test_a_length_past_the_end_of_the_file_is_a_lie(tmp_path: Path) -> None:
    path = _file(tmp_path / "x.safetensors", b"{}", length=4096)
    with pytest.raises(HeaderError, match="runs past the end of the 10-byte file"):
        read_header(path)


def test_a_huge_length_is_refused_before_any_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _file(tmp_path / "x.safetensors", b"{}", length=(1 << 63))
    reads: list[int] = []
    real = os.read

    def counting(fd: int, n: int) -> bytes:
        reads.append(n)
        return real(fd, n)

    monkeypatch.setattr(os, "read", counting)
    with pytest.raises(HeaderError, match="exceeds the 100000000-byte limit"):
        read_header(path)
    assert reads == [8]


def test_the_limit_is_configurable_and_checked_against_the_length(tmp_path: Path) -> None:
    header = json.dumps({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}}).encode()
    path = _file(tmp_path / "x.safetensors", header, b"\0\0")
    assert read_header(path).tensors[0].shape == (2,)
    with pytest.raises(HeaderError, match="exceeds the 16-byte limit"):
        read_header(path, max_header_bytes=16)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"dtype": "Q4", "shape": [2], "data_offsets": [0, 2]}, "unknown dtype 'Q4'"),
        ({"dtype": "U8", "shape": [-2], "data_offsets": [0, 2]}, "non-negative integers"),
        ({"dtype": "U8", "shape": [2], "data_offsets": [2, 0]}, "0 <= begin <= end"),
        (
            {"dtype": "F32", "shape": [2], "data_offsets": [0, 2]},
            "needs 8 bytes but its offsets span 2",
        ),
        ({"dtype": "U8", "shape": [2], "data_offsets": [0, 2000]}, "needs 2 bytes"),
        ({"dtype": "U8", "shape": [2000], "data_offsets": [0, 2000]}, "holds only 4 bytes"),
        ("not an object", "entry is not an object"),
    ],
)
def test_inconsistent_entries_are_named(tmp_path: Path, entry: object, message: str) -> None:
    header = json.dumps({"w": entry}).encode()
    path = _file(tmp_path / "x.safetensors", header, b"\0" * 4)
    with pytest.raises(HeaderError, match=message):
        read_header(path)


def test_overlapping_tensors_are_named(tmp_path: Path) -> None:
    header = json.dumps(
        {
            "a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
            "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]},
        }
    ).encode()
    with pytest.raises(HeaderError, match="overlap"):
        read_header(_file(tmp_path / "x.safetensors", header, b"\0" * 6))


def test_not_json_and_bad_metadata(tmp_path: Path) -> None:
    with pytest.raises(HeaderError, match="not a JSON object"):
        read_header(_file(tmp_path / "a.safetensors", b"[1, 2]"))
    with pytest.raises(HeaderError, match="not valid JSON"):
        read_header(_file(tmp_path / "b.safetensors", b'{"a": '))
    with pytest.raises(HeaderError, match="__metadata__"):
        read_header(_file(tmp_path / "c.safetensors", b'{"__metadata__": {"a": 1}}'))
    with pytest.raises(HeaderError, match=r"nested too deeply|not valid JSON"):
        read_header(
            _file(tmp_path / "d.safetensors", b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}")
        )


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "model.safetensors"
    os.mkfifo(fifo)
    with pytest.raises(HeaderError, match="not a regular file"):
        read_header(fifo)


def test_a_dangling_symlink_is_missing(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").symlink_to(tmp_path / "gone")
    with pytest.raises(HeaderError, match="missing"):
        read_header(tmp_path / "model.safetensors")


def test_a_huge_sparse_shard_is_read_by_its_header_alone(tmp_path: Path) -> None:
    """64 GiB of (sparse) data: the reader touches 8 + header bytes, so it is instant."""
    size = 64 << 30
    header = json.dumps({"w": {"dtype": "BF16", "shape": [size // 2], "data_offsets": [0, size]}})
    path = _file(tmp_path / "big.safetensors", header.encode())
    with open(path, "r+b") as fh:
        fh.truncate(8 + len(header) + size)
    (t,) = read_header(path).tensors
    assert t.nbytes == size
