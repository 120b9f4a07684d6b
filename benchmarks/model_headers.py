"""`model DIR` on a checkpoint of hundreds of shards against the floor of reading just those
headers with the safetensors library, in the same run; peak memory against the number of
shards.

It writes (with the safetensors library) a Qwen3-MoE-like checkpoint of ``--tensors`` tensors
spread over ``--shards`` files with a ``model.safetensors.index.json`` naming each tensor,
then alternates, ``--repeat`` times each:

- floor: the index decoded (with msgspec, the fastest JSON decoder at hand, so the floor is
  as low as it gets) for its shard names, then ``safe_open(shard, "numpy")`` for every
  shard and each tensor's dtype and shape (``get_slice``), nothing else: what any reader
  of a sharded checkpoint's headers has to do;
- ours: ``inspect_model`` as the command runs it (index, config, every header, the
  quantization evidence, parameter counts, the fit on a 4x RTX PRO 6000 facts fixture) plus
  rendering the JSON document.

Both read the same files from the page cache. It prints the medians and the minimums and
their ratios (target: median ratio <= 1.5; the minimum, the least disturbed run of each, is
printed too because the CI and developer machines are shared and their load moves the
medians). Memory: the same number of tensors split over few and many shards, peak
traced allocations (tracemalloc) of ``read_model_dir``: flat in the shard count (target: the
largest within 1.25x of the smallest), since each header is folded into running totals and
dropped before the next is read. Exit 1 when a target is missed.

    .venv/bin/python benchmarks/model_headers.py [--shards 400] [--tensors 24000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import msgspec
import safetensors._safetensors_rust as st  # type: ignore[import-not-found]
from safetensors import safe_open

from blackwell_doctor.app.model import inspect_model
from blackwell_doctor.collect.model.scan import read_model_dir
from blackwell_doctor.facts.document import decode_facts
from blackwell_doctor.render.formats import ModelFormat
from blackwell_doctor.render.model import render_model

ROOT = Path(__file__).resolve().parents[1]
FACTS = ROOT / "tests" / "fixtures" / "facts" / "rtxpro6000x4-threadripper-iommu.json"
H, EXPERTS, INTER = 64, 128, 16


def _names(count: int) -> list[tuple[str, list[int]]]:
    out: list[tuple[str, list[int]]] = []
    layer = 0
    while len(out) < count:
        p = f"model.layers.{layer}"
        out += [(f"{p}.self_attn.{x}_proj.weight", [H, H]) for x in "qkvo"]
        out.append((f"{p}.mlp.gate.weight", [EXPERTS, H]))
        for e in range(EXPERTS):
            out += [
                (f"{p}.mlp.experts.{e}.gate_proj.weight", [INTER, H]),
                (f"{p}.mlp.experts.{e}.up_proj.weight", [INTER, H]),
                (f"{p}.mlp.experts.{e}.down_proj.weight", [H, INTER]),
            ]
        layer += 1
    return out[:count]


def make_checkpoint(root: Path, shards: int, tensors: int) -> int:
    root.mkdir(parents=True, exist_ok=True)
    names = _names(tensors)
    layers = int(names[-1][0].split(".")[2]) + 1
    (root / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["Qwen3MoeForCausalLM"],
                "model_type": "qwen3_moe",
                "hidden_size": H,
                "num_hidden_layers": layers,
                "num_attention_heads": 4,
                "num_key_value_heads": 4,
                "head_dim": H // 4,
                "intermediate_size": 4 * H,
                "vocab_size": 1024,
                "num_experts": EXPERTS,
                "num_experts_per_tok": 8,
                "moe_intermediate_size": INTER,
                "max_position_embeddings": 32768,
                "torch_dtype": "bfloat16",
            }
        )
    )
    weight_map: dict[str, str] = {}
    total = 0
    for i in range(shards):
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = names[i::shards]
        keep = []
        specs = {}
        for name, shape in part:
            n = shape[0] * shape[1] * 2
            buf = ctypes.create_string_buffer(n)
            keep.append(buf)
            specs[name] = st.TensorSpec(
                dtype="bfloat16", shape=shape, data_ptr=ctypes.addressof(buf), data_len=n
            )
            weight_map[name] = fname
            total += n
        st.serialize_file(specs, str(root / fname), {"format": "pt"})
    (root / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2)
    )
    return layers


def floor(root: Path) -> int:
    index = msgspec.json.decode((root / "model.safetensors.index.json").read_bytes())
    n = 0
    for name in sorted(set(index["weight_map"].values())):
        with safe_open(str(root / name), "numpy") as f:
            for k in f.keys():  # noqa: SIM118 - safe_open is not iterable
                s = f.get_slice(k)
                s.get_shape()
                s.get_dtype()
                n += 1
    return n


def ours(root: Path, facts: Any) -> int:
    report = inspect_model(root, facts)
    render_model(report, ModelFormat.JSON)
    return report.tensors


def _time(fn: Any, *args: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def peak_bytes(root: Path) -> int:
    gc.collect()
    tracemalloc.start()
    read_model_dir(root)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=400)
    ap.add_argument("--tensors", type=int, default=24000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--memory-shards", type=int, nargs="+", default=[25, 100, 400, 1600])
    args = ap.parse_args()
    facts = decode_facts(FACTS.read_bytes())
    ok = True
    with tempfile.TemporaryDirectory(prefix="bd-model-bench-") as tmp:
        root = Path(tmp) / "speed"
        make_checkpoint(root, args.shards, args.tensors)
        index_bytes = (root / "model.safetensors.index.json").stat().st_size
        floor(root), ours(root, facts)  # warm the page cache and imports
        f_times, o_times = [], []
        for _ in range(args.repeat):
            t, n_floor = _time(floor, root)
            f_times.append(t)
            t, n_ours = _time(ours, root, facts)
            o_times.append(t)
        if n_floor != n_ours:
            print(f"MISMATCH: floor read {n_floor} tensors, model read {n_ours}")
            ok = False
        f_med, o_med = statistics.median(f_times), statistics.median(o_times)
        ratio = o_med / f_med
        f_min, o_min = min(f_times), min(o_times)
        print(
            f"{args.shards} shards, {args.tensors} tensors, index {index_bytes / 1e6:.1f} MB, "
            f"{args.repeat} runs each (median):"
        )
        print(f"  floor  index + safe_open + get_slice per tensor:     {f_med * 1000:8.1f} ms")
        print(f"  model  inspect_model + JSON (index, config, fit):    {o_med * 1000:8.1f} ms")
        print(f"  ratio  {ratio:.2f} (target <= 1.5)")
        print(
            f"  minimums: floor {f_min * 1000:.1f} ms, model {o_min * 1000:.1f} ms, "
            f"ratio {o_min / f_min:.2f}"
        )
        ok &= ratio <= 1.5
        print(f"peak traced memory of read_model_dir, {args.tensors} tensors:")
        peaks = []
        for shards in args.memory_shards:
            mroot = Path(tmp) / f"mem-{shards}"
            make_checkpoint(mroot, shards, args.tensors)
            peak = peak_bytes(mroot)
            peaks.append(peak)
            print(f"  {shards:5d} shards: {peak / 1e6:8.2f} MB")
        spread = max(peaks) / min(peaks)
        print(f"  largest / smallest: {spread:.2f} (target <= 1.25)")
        ok &= spread <= 1.25
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
