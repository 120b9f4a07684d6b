"""Malformed checkpoints a user may point `model`, `check --model-dir` and `recommend
--model-dir` at: bytes that are not UTF-8 in config.json or in a tensor name, a tensor named
twice in a header, counts no model has (10^18 experts), heads that do not split among the KV
heads. Each is a problem in the report (or, with neither a usable config nor a shard, one
line and exit 2), never a crash (exit 4) and never silently accepted."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import tracemalloc
from pathlib import Path

import msgspec
import pytest

from blackwell_doctor.collect.model import header, scan
from blackwell_doctor.collect.model.scan import read_model_dir
from tests.cli import run
from tests.conftest import FACTS_FIXTURES
from tests.modeldirs import base_config, make_model

TR = str(FACTS_FIXTURES / "rtxpro6000x4-threadripper-iommu.json")


def raw_shard(path: Path, header: bytes, data_bytes: int) -> None:
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * data_bytes)


def config_bytes(**changes: object) -> bytes:
    cfg = base_config(moe=True)
    cfg.update(changes)
    return json.dumps(cfg).encode()


# --------------------------------------------------------------------------- not UTF-8


def test_a_config_that_is_not_utf8_is_a_config_problem(tmp_path: Path) -> None:
    root = make_model(tmp_path / "m", moe=True)
    (root / "config.json").write_bytes(config_bytes().replace(b"Qwen3", b"Qwen\xff", 1))
    facts = read_model_dir(root)
    (problem,) = [p for p in facts.problems if p.kind == "config"]
    assert problem.detail.startswith("not valid JSON: not UTF-8 (byte 0xff at offset ")
    assert facts.parameters is not None  # the tensors still count
    assert facts.parameters.source == "tensors"


def test_a_tensor_name_that_is_not_utf8_is_a_header_problem(tmp_path: Path) -> None:
    root = make_model(tmp_path / "m", moe=False)
    raw_shard(
        root / "model.safetensors",
        b'{"a\xff.weight": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}',
        8,
    )
    facts = read_model_dir(root)
    (problem,) = facts.problems
    assert (problem.kind, problem.path) == ("header", "model.safetensors")
    assert problem.detail == "header is not valid JSON: not UTF-8 (byte 0xff at offset 3)"


@pytest.mark.parametrize("where", ["config", "header", "metadata"])
@pytest.mark.parametrize(
    "argv",
    [
        ["model", "{root}", "--facts", TR],
        ["model", "{root}", "--facts", TR, "-f", "json"],
        ["check", "--facts", TR, "--model-dir", "{root}"],
        ["recommend", "--facts", TR, "--model-dir", "{root}"],
    ],
    ids=["model", "model json", "check --model-dir", "recommend --model-dir"],
)
def test_not_utf8_through_every_command_is_no_crash(
    where: str, argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_model(tmp_path / "m", moe=False)
    if where == "config":
        (root / "config.json").write_bytes(b'{"architectures": ["\xff"], "hidden_size": 64}')
    elif where == "metadata":  # issue 19 (audit): a __metadata__ value crashed, exit 4
        raw_shard(
            root / "model.safetensors",
            b'{"__metadata__": {"k": "\xc3\x28"}, '
            b'"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}',
            8,
        )
    else:
        raw_shard(
            root / "model.safetensors",
            b'{"\xff": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}',
            8,
        )
    code, out, err = run([a.format(root=root) for a in argv], capsys)
    assert code in (0, 1, 3), err  # a report, with the problem in it
    assert "Traceback" not in err
    assert "internal error" not in err
    assert "not UTF-8" in out or argv[0] != "model"


# --------------------------------------------------------------------------- duplicates


def test_a_tensor_named_twice_is_a_header_problem(tmp_path: Path) -> None:
    root = make_model(tmp_path / "m", moe=False)
    first = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    second = {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}
    header = f'{{"a.weight": {json.dumps(first)}, "a.weight": {json.dumps(second)}}}'
    raw_shard(root / "model.safetensors", header.encode(), 16)
    facts = read_model_dir(root)
    (problem,) = facts.problems
    assert (problem.kind, problem.path) == ("header", "model.safetensors")
    assert problem.detail.startswith("'a.weight' is named twice in the header: malformed")
    assert facts.tensors == 0  # before: 1 tensor, 8 bytes of 16, and no word about it


def test_data_offsets_as_a_metadata_value_is_no_duplicate(tmp_path: Path) -> None:
    root = make_model(tmp_path / "m", moe=False)
    header = (
        '{"__metadata__": {"note": "data_offsets"}, '
        '"a.weight": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}'
    )
    raw_shard(root / "model.safetensors", header.encode(), 8)
    facts = read_model_dir(root)
    assert [p for p in facts.problems if p.kind == "header"] == []
    assert facts.tensors == 1


def test_a_shard_name_with_a_trailing_newline_in_the_index_is_not_read(tmp_path: Path) -> None:
    """Issue 32: the shard-name check ("$" matches before a final newline) let
    "model.safetensors\n" through, to be reported as a missing shard."""
    root = make_model(tmp_path / "m", moe=False)
    index = {"weight_map": {"a.weight": "model.safetensors\n"}}
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    facts = read_model_dir(root)
    assert [p.kind for p in facts.problems] == ["index", "index"]  # before: missing-shard
    assert facts.problems[0].detail == (
        "weight_map names 'model.safetensors\\n', not a shard file in this directory: not read"
    )


# --------------------------------------------------------------------------- counts


@pytest.mark.parametrize(
    ("changes", "detail"),
    [
        ({"num_experts": 10**18}, "num_experts = 1000000000000000000, above the 65,536"),
        ({"num_attention_heads": 64, "num_key_value_heads": 3}, "64 attention heads and 3 KV"),
        ({"num_attention_heads": 4, "num_key_value_heads": 8}, "4 attention heads and 8 KV"),
        ({"num_experts_per_tok": 9}, "routes each token to 9 experts of 8"),
        ({"num_hidden_layers": 10**9}, "num_hidden_layers = 1000000000, above"),
        ({"hidden_size": 10**12}, "hidden_size = 1000000000000, above"),
        ({"vocab_size": 10**15}, "vocab_size = 1000000000000000, above"),
        ({"num_attention_heads": 1 << 20}, "num_attention_heads = 1048576, above"),
        ({"n_shared_experts": 10**18}, "n_shared_experts = 1000000000000000000, above"),
        # Issue 19 (audit): these were skipped, with no word (dense; KV heads = heads).
        ({"num_experts": 1e18}, "num_experts = 1e+18: not a count"),
        ({"num_experts": -8}, "num_experts = -8: not a count"),
        ({"num_experts": "8"}, "num_experts = '8': not a count"),
        ({"num_key_value_heads": True}, "num_key_value_heads = True: not a count"),
        ({"num_key_value_heads": 0}, "0 KV heads"),
    ],
)
def test_counts_no_model_has_are_a_config_problem(
    tmp_path: Path, changes: dict[str, object], detail: str
) -> None:
    root = make_model(tmp_path / "m", moe=True)
    (root / "config.json").write_bytes(config_bytes(**changes))
    facts = read_model_dir(root)
    assert facts.arch is None
    (problem,) = [p for p in facts.problems if p.kind == "config"]
    assert detail in problem.detail


def test_the_model_command_says_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_model(tmp_path / "m", moe=True)
    (root / "config.json").write_bytes(config_bytes(num_experts=10**18))
    code, out, err = run(["model", str(root), "--facts", TR], capsys)
    assert code in (0, 1), err
    assert "problem (config) config.json: config.json has num_experts = " in out


# --------------------------------------------------------------------------- entry counts
# Issue 32: a 99 MB header (under the 100 MB limit) of millions of empty entries was decoded
# into millions of objects: 1.3 GB and 24 s a shard, and exit 4 under a 1 GB memory limit.

EMPTY_TENSOR = b'{"dtype":"F32","shape":[0],"data_offsets":[0,0]}'


def many_entries(n: int, value: bytes, *, name: bytes = b"t%d") -> bytes:
    """A header of ``n`` entries ``"t0": value, "t1": value, ...`` (one name every time if
    ``name`` has no %d)."""
    if b"%d" not in name:
        return b"{" + b",".join([b'"' + name + b'":' + value] * n) + b"}"
    return b"{" + b",".join(b'"' + name % i + b'":' + value for i in range(n)) + b"}"


@pytest.mark.parametrize("value", [b"{}", EMPTY_TENSOR], ids=["{}", "empty tensor"])
def test_more_entries_than_a_shard_holds_is_a_header_problem_found_before_decoding(
    value: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_model(tmp_path / "m", moe=False)
    count = header.MAX_TENSORS + 2  # one more than the tensors and a __metadata__
    raw_shard(root / "model.safetensors", many_entries(count, value), 0)

    class NotDecoded:
        def decode(self, raw: bytes) -> None:
            raise AssertionError(f"{len(raw)} bytes decoded entry by entry")

    monkeypatch.setattr(header, "_ENTRIES", NotDecoded())
    facts = read_model_dir(root)
    (problem,) = facts.problems
    assert (problem.kind, problem.path) == ("header", "model.safetensors")
    assert problem.detail == (
        f"header lists {count} entries, above the limit of {header.MAX_TENSORS} tensors a "
        "shard (corrupt, or not a safetensors file)"
    )
    assert facts.tensors == 0
    assert facts.parameters is not None  # config.json still counts
    assert facts.parameters.source == "config"


def test_a_shard_at_the_limit_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(header, "MAX_TENSORS", 100)
    root = make_model(tmp_path / "m", moe=False)
    entries = many_entries(100, EMPTY_TENSOR)
    raw_shard(root / "model.safetensors", b'{"__metadata__":{"a":"b"},' + entries[1:], 0)
    facts = read_model_dir(root)
    assert facts.problems == []
    assert facts.tensors == 100
    raw_shard(root / "model.safetensors", many_entries(102, EMPTY_TENSOR), 0)
    (problem,) = read_model_dir(root).problems
    assert problem.detail.startswith("header lists 102 entries, above the limit of 100 tensors")


def test_more_entries_that_are_no_objects_than_a_shard_holds_are_not_decoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    raw = many_entries(header.MAX_TENSORS + 2, b"1")

    def generic(*args: object, **kwargs: object) -> None:
        raise AssertionError("the whole header decoded into objects")

    monkeypatch.setattr(msgspec.json, "decode", generic)
    with pytest.raises(header.HeaderError) as caught:
        header.parse_header(raw, data_bytes=0)
    assert str(caught.value) == (
        f"header does not match the safetensors layout ({header.MAX_TENSORS + 2} keys: too "
        f"many to look for the entry that breaks it, above the limit of {header.MAX_TENSORS} "
        "tensors a shard)"
    )


def test_a_few_entries_that_are_no_objects_are_still_named() -> None:
    with pytest.raises(header.HeaderError, match=r"^tensor 't0': entry is not an object$"):
        header.parse_header(many_entries(1000, b"1"), data_bytes=0)


def test_a_name_given_many_times_is_found_without_holding_every_entry() -> None:
    raw = many_entries(50_000, EMPTY_TENSOR, name=b"t")
    tracemalloc.start()
    try:
        with pytest.raises(header.HeaderError, match=r"^'t' is named twice in the header"):
            header.parse_header(raw, data_bytes=0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Before: every entry a dict with two lists (~400 bytes, 20 MB here) held until the
    # outer object's keys were checked; now the text as str and a (name, None) pair each
    # (2.2x the header).
    assert peak < 4 * len(raw), (peak, len(raw))


def test_names_with_no_suffix_are_not_all_remembered_from_shard_to_shard() -> None:
    """Each dotless name is its own suffix; the decisions cached by (suffix, dtype) kept every
    name of a shard alive while the next was read (three 99 MB shards of 500,000 such
    tensors: 600 MB, one shard 371 MB)."""
    n = scan._MAX_DECISIONS + 1000
    entries = header.parse_header(many_entries(n, EMPTY_TENSOR), data_bytes=0).entries
    tally = scan._Tally()
    scan._fold(tally, entries, 0, "unquantized", None)
    assert tally.tensors == n
    assert len(tally.decisions) == scan._MAX_DECISIONS
    assert tally.total == 0  # no parameter suffix: nothing counted, with or without the cache


# The CLI in this process, then its own peak resident memory (VmHWM: this program's memory
# alone). Not the child's rusage: Linux keeps ru_maxrss across exec, so a child of this test
# process started with the parent's peak (CI under load: 735 MB, the pytest process's, for
# a command whose own peak is ~120 MB).
_PEAK_OF_THE_CLI = """
import runpy, sys
sys.argv = ["blackwell-doctor", *sys.argv[1:]]
try:
    runpy.run_module("blackwell_doctor", run_name="__main__")
finally:
    with open("/proc/self/status") as status:
        sys.stderr.write([line for line in status if line.startswith("VmHWM:")][0])
"""


def test_a_99_mb_header_of_empty_tensors_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    """The issue's file through the installed command: 975 MB and 35 s before (this form;
    8M "{}" entries: 1.3 GB), a finding now. The bound is memory, not time."""
    root = make_model(tmp_path / "m", moe=False)
    count = 99_000_000 // len(b'"t1234567":,' + EMPTY_TENSOR)  # names of up to 7 digits
    raw_shard(root / "model.safetensors", many_entries(count, EMPTY_TENSOR), 0)
    assert (root / "model.safetensors").stat().st_size < 100_000_000
    out = tmp_path / "out.json"
    argv = ["model", str(root), "--facts", TR, "-f", "json"]
    with out.open("wb") as sink:
        child = subprocess.run(
            [sys.executable, "-c", _PEAK_OF_THE_CLI, *argv],
            stdout=sink,
            stderr=subprocess.PIPE,
            timeout=600,
            check=False,
        )
    assert child.returncode == 0, child.stderr
    doc = json.loads(out.read_bytes())
    (problem,) = [p for p in doc["problems"] if p["kind"] == "header"]
    assert problem["detail"].startswith(f"header lists {count} entries, above the limit")
    peak_kb = int(child.stderr.split(b"VmHWM:")[1].split()[0])
    assert peak_kb < 600_000, f"{peak_kb} kB"


# --------------------------------------------------------------------------- issue 32's review


def test_a_shard_name_with_a_nul_byte_in_the_index_is_not_read(tmp_path: Path) -> None:
    # The open raised ValueError (embedded null byte): exit 4 with a crash log.
    root = make_model(tmp_path / "m", moe=False)
    index = {"weight_map": {"a.weight": "x\0y.safetensors"}}
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    facts = read_model_dir(root)
    assert facts.problems[0].kind == "index"
    assert facts.problems[0].detail.startswith("weight_map names 'x\\x00y.safetensors'")


def test_metadata_of_many_values_is_refused_before_it_is_built() -> None:
    # One brace, so the tensor count never saw it: 2M keys of '"k0":""' built a 300 MB dict.
    entries = b'"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}'
    keys = b",".join(b'"k%d":""' % i for i in range(header.MAX_METADATA_VALUES + 1))
    raw = b'{"__metadata__":{' + keys + b"}," + entries + b"}"
    with pytest.raises(header.HeaderError, match="__metadata__ lists more than 10000 values"):
        header.parse_header(raw, data_bytes=4)
    few = b'{"__metadata__":{"format":"pt","k":"v"},' + entries + b"}"
    assert header.parse_header(few, data_bytes=4).metadata == {"format": "pt", "k": "v"}


def test_a_header_of_more_values_than_tensors_can_hold_is_refused_before_decoding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # '{"t0":[[],[],...]}': one brace, so under the tensor count, and the slow path that
    # names the bad entry decoded every list (21x the header).
    raw = b'{"t0":[' + b",".join([b"[]"] * (header.MAX_VALUES + 2)) + b"]}"

    def no_decode(*_: object) -> None:
        raise AssertionError("decoded")

    monkeypatch.setattr(header, "_explain", no_decode)
    with pytest.raises(header.HeaderError, match="values, above the limit of 2000000"):
        header.parse_header(raw, data_bytes=0)
