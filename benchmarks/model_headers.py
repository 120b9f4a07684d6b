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
their ratios (target: median ratio <= 1.5; the minimum, the least disturbed run of each, and
the medians of CPU time are printed too because the CI and developer machines are shared
and their load moves the medians). Memory: the same number of tensors split over few and
many shards, peak traced allocations (tracemalloc) of ``read_model_dir``: flat in the shard
count (target: the largest within 1.25x of the smallest), since each header is folded into
running totals and dropped before the next is read. Exit 1 when a target is missed.

    .venv/bin/python benchmarks/model_headers.py [--shards 400] [--tensors 24000] [--repeat 7]

``--against OTHER/src`` compares two trees on the same checkpoint (before/after): each of
``--rounds`` rounds runs one process per tree (in an order that alternates), each timing
``--repeat`` floor/model pairs after a warm-up, wall and CPU (``process_time``) seconds; the
ratios are of the medians over every pair of a tree, each tree to the floor timed in its
own processes. ``--json FILE`` writes them (docs/performance.md's table reads it).

    .venv/bin/python benchmarks/model_headers.py --against MAIN/src --rounds 6 --repeat 3
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import statistics
import subprocess
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


def child(root: Path, repeat: int) -> int:
    """One process of ``--against`` (``--child DIR``): a warm-up, then ``repeat`` pairs."""
    facts = decode_facts(FACTS.read_bytes())
    floor(root), ours(root, facts)
    times: dict[str, list[float]] = {"floor": [], "model": [], "floor_cpu": [], "model_cpu": []}
    for _ in range(repeat):
        for label, fn, fn_args in (("floor", floor, (root,)), ("model", ours, (root, facts))):
            t, c = time.perf_counter(), time.process_time()
            fn(*fn_args)
            times[label].append(time.perf_counter() - t)
            times[label + "_cpu"].append(time.process_time() - c)
    print(json.dumps(times))
    return 0


def against(other_src: Path, args: argparse.Namespace) -> int:
    """Interleaved processes of the other tree and this one on one checkpoint (see above)."""
    trees = {"main": other_src.resolve(), "this": ROOT / "src"}
    runs: dict[str, dict[str, list[float]]] = {k: {} for k in trees}
    loads = []
    with tempfile.TemporaryDirectory(prefix="bd-model-bench-") as tmp:
        root = Path(tmp) / "speed"
        make_checkpoint(root, args.shards, args.tensors)
        for r in range(args.rounds):
            loads.append(os.getloadavg()[0])
            for label in list(trees) if r % 2 == 0 else list(reversed(trees)):
                out = subprocess.run(
                    [sys.executable, __file__, "--child", str(root), "--repeat", str(args.repeat)],
                    capture_output=True,
                    text=True,
                    env={**os.environ, "PYTHONPATH": str(trees[label])},
                    timeout=600,
                    check=True,
                ).stdout
                for key, values in json.loads(out.splitlines()[-1]).items():
                    runs[label].setdefault(key, []).extend(values)
    med = statistics.median
    print(
        f"{args.shards} shards, {args.tensors} tensors; {args.rounds} interleaved rounds x "
        f"{args.repeat} pairs a tree (medians); load {min(loads):.1f}-{max(loads):.1f}"
    )
    print(f"{'tree':>5} {'floor ms':>9} {'model ms':>9} {'wall':>6} {'CPU':>6} {'min':>6}")
    rows = []
    for label, src in trees.items():
        t = runs[label]
        wall = med(t["model"]) / med(t["floor"])
        cpu = med(t["model_cpu"]) / med(t["floor_cpu"])
        least = min(t["model"]) / min(t["floor"])
        print(
            f"{label:>5} {med(t['floor']) * 1000:9.1f} {med(t['model']) * 1000:9.1f} "
            f"{wall:6.2f} {cpu:6.2f} {least:6.2f}"
        )
        commit = subprocess.run(
            ["git", "-C", str(src), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        rows.append(
            {
                "label": f"{label}: model DIR",
                "commit": commit,
                "floor_s": round(med(t["floor"]), 4),
                "model_s": round(med(t["model"]), 4),
                "floor_cpu_s": round(med(t["floor_cpu"]), 4),
                "model_cpu_s": round(med(t["model_cpu"]), 4),
                "wall_ratio": round(wall, 2),
                "cpu_ratio": round(cpu, 2),
                "min_ratio": round(least, 2),
                "pairs": len(t["model"]),
            }
        )
    if args.json is not None:
        doc = {
            "source": f"benchmarks/model_headers.py --against MAIN/src --rounds {args.rounds} "
            f"--repeat {args.repeat}",
            "floor": "msgspec decode of the index, safe_open + get_slice of every tensor",
            "shards": args.shards,
            "tensors": args.tensors,
            "load": [round(min(loads), 1), round(max(loads), 1)],
            "rows": rows,
        }
        args.json.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=400)
    ap.add_argument("--tensors", type=int, default=24000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--memory-shards", type=int, nargs="+", default=[25, 100, 400, 1600])
    ap.add_argument("--against", type=Path, help="another tree's src: before/after")
    ap.add_argument("--rounds", type=int, default=6, help="with --against")
    ap.add_argument("--json", type=Path, help="with --against: write the figures here")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        return child(args.child, args.repeat)
    if args.against is not None:
        return against(args.against, args)
    facts = decode_facts(FACTS.read_bytes())
    ok = True
    with tempfile.TemporaryDirectory(prefix="bd-model-bench-") as tmp:
        root = Path(tmp) / "speed"
        make_checkpoint(root, args.shards, args.tensors)
        index_bytes = (root / "model.safetensors.index.json").stat().st_size
        floor(root), ours(root, facts)  # warm the page cache and imports
        f_times, o_times, f_cpu, o_cpu = [], [], [], []
        for _ in range(args.repeat):
            c = time.process_time()
            t, n_floor = _time(floor, root)
            f_times.append(t)
            f_cpu.append(time.process_time() - c)
            c = time.process_time()
            t, n_ours = _time(ours, root, facts)
            o_times.append(t)
            o_cpu.append(time.process_time() - c)
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
        f_c, o_c = statistics.median(f_cpu), statistics.median(o_cpu)
        print(
            f"  CPU (median; waiting for a core does not count): floor {f_c * 1000:.1f} ms, "
            f"model {o_c * 1000:.1f} ms, ratio {o_c / f_c:.2f}"
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
