#!/usr/bin/env bash
# `bench` once on a real GPU (issue 21): a tiny random MoE (ci/make_tiny_moe.py: Qwen3-MoE,
# 8 experts top-2, a locally trained tokenizer; no hub, no network, no pip) served on
# 127.0.0.1 by benchmarks/device/tiny_moe_server.py (an OpenAI-compatible streaming server
# on transformers, one request at a time), then
#   1. bench --repeat 3 (two small shapes: the runs, their noise floor, the pinned
#      environment: server version and config hash, model, GPU, driver, CUDA, env vars),
#   2. bench --compare of run 1 against runs 2-3 of that document (an A/A compare: its
#      verdict is reported, not gated on: with one run on a side it is held to the default
#      noise floor, which a busy host can exceed),
#   3. bench --soak (60 s, 5 s intervals; NVML used memory of each GPU sampled per
#      interval, KV cache unavailable: the server has no vLLM gauges),
# writing the documents and their text under "$OUT" (7 files: env.txt, bench-repeat3.json
# and .txt, compare-aa.txt, soak.json and .txt, bench.log) and a short table last. About 3 minutes
# expected; the deadlines (server 100 s, repeat 150 s, soak 95 s) keep it under 6; every
# child is killed on exit (the server's whole process group).
#
#   PYTHONPATH=src OUT=/tmp/out bash benchmarks/device/bench_gpu.sh
#
# Needs torch (CUDA) and transformers on the machine, and the tool's own dependencies
# (msgspec, typer, aiohttp, prometheus_client, nvidia-ml-py; see benchmarks/evidence/README.md
# for carrying the wheels a machine lacks). DEVICE=cpu SMALL=1 runs it on a CPU (the test).
set -u
OUT=${OUT:-bench-gpu-out}
DEVICE=${DEVICE:-cuda}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export NO_COLOR=1 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
WORK=$(mktemp -d)
SERVER_PID=
cleanup() {
    if [ -n "$SERVER_PID" ]; then
        kill -TERM -- "-$SERVER_PID" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL -- "-$SERVER_PID" 2>/dev/null
        wait "$SERVER_PID" 2>/dev/null
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
BD=("$PY" -m blackwell_doctor)
T0=$(date +%s)

if [ "${SMALL:-0}" = 1 ]; then
    OUT_TOKENS=8 REQ_SHORT=3 REQ_CONC=6 CONC=3 SOAK=16s SOAK_IV=4s
else
    OUT_TOKENS=64 REQ_SHORT=8 REQ_CONC=24 CONC=8 SOAK=60s SOAK_IV=5s
fi
cat >"$WORK/shapes.toml" <<EOF
[shape.short]
description = "one user, ~128 tokens in, $OUT_TOKENS out"
input_tokens = 128
output_tokens = $OUT_TOKENS
ignore_eos = true
requests = $REQ_SHORT
[shape.concurrent]
description = "$CONC users at once (the server queues them: no batching)"
input_tokens = 128
output_tokens = $OUT_TOKENS
ignore_eos = true
concurrency = $CONC
requests = $REQ_CONC
warmup = 2
EOF

# 0. What this machine has (no secrets: versions and the GPU's name).
"$PY" - "$DEVICE" >"$OUT/env.txt" 2>&1 <<'PYEOF'
import importlib, sys
missing = []
for name in ("torch", "transformers", "aiohttp", "msgspec", "typer", "prometheus_client", "pynvml"):
    try:
        mod = importlib.import_module(name)
        print(f"{name} {getattr(mod, '__version__', '?')}")
    except ImportError as exc:
        missing.append(f"{name} ({exc})")
print(f"python {sys.version.split()[0]}")
if "torch" not in " ".join(missing):
    import torch
    print(f"cuda available: {torch.cuda.is_available()}; torch cuda {torch.version.cuda}")
    if torch.cuda.is_available():
        print(f"gpu: {torch.cuda.get_device_name(0)}")
    elif sys.argv[1] == "cuda":
        missing.append("a CUDA GPU for torch")
if missing:
    print("MISSING: " + "; ".join(missing))
    sys.exit(1)
PYEOF
if [ $? -ne 0 ]; then
    cat "$OUT/env.txt"
    echo "bench_gpu: this machine lacks what the run needs (above)" >&2
    exit 1
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >>"$OUT/env.txt" 2>&1

# 1. The server, in its own process group (killed whole on exit); READY <port> once it listens.
: >"$WORK/server.log"
setsid "$PY" benchmarks/device/tiny_moe_server.py --model-dir "$WORK/tinymoe" --device "$DEVICE" \
    --port 0 >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
PORT=
for _ in $(seq 500); do # 100 s: the model is written, then loaded
    PORT=$(awk '/^READY /{print $2; exit}' "$WORK/server.log")
    [ -n "$PORT" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.2
done
if [ -z "$PORT" ]; then
    echo "bench_gpu: the server did not start; its log:" >&2
    tail -n 30 "$WORK/server.log" >&2
    exit 1
fi
URL=http://127.0.0.1:$PORT
echo "server ready on $URL after $(($(date +%s) - T0)) s" >>"$OUT/env.txt"

# 2. bench --repeat 3: three runs of one configuration, their noise floor, the pinned environment.
timeout -s INT -k 10 150 "${BD[@]}" bench --url "$URL" --shapes "$WORK/shapes.toml" \
    --shape short --shape concurrent --repeat 3 -o "$OUT/bench-repeat3.json" \
    >"$OUT/bench-repeat3.txt" 2>>"$OUT/bench.log"
repeat_rc=$?
# The A/A compare: run 1 against runs 2-3 of the same server (one document split in two).
"$PY" - "$OUT/bench-repeat3.json" "$WORK/a.json" "$WORK/b.json" <<'PYEOF'
import json, sys
doc = json.load(open(sys.argv[1]))
runs = [doc["shapes"]] + [r["shapes"] for r in doc.get("repeats", [])]
a = dict(doc, repeats=[], calibration=None)
b = dict(doc, shapes=runs[1], repeats=[
    {"index": i + 2, "started_at": doc["started_at"], "complete": True, "shapes": s}
    for i, s in enumerate(runs[2:])
], calibration=None)
json.dump(a, open(sys.argv[2], "w"))
json.dump(b, open(sys.argv[3], "w"))
PYEOF
"${BD[@]}" bench --compare "$WORK/a.json" "$WORK/b.json" >"$OUT/compare-aa.txt" 2>&1
compare_rc=$?

# 3. A short soak: per-interval figures and NVML used memory of each GPU.
timeout -s INT -k 10 95 "${BD[@]}" bench --url "$URL" --shapes "$WORK/shapes.toml" \
    --shape concurrent --soak "$SOAK" --soak-interval "$SOAK_IV" -o "$OUT/soak.json" \
    >"$OUT/soak.txt" 2>>"$OUT/bench.log"
soak_rc=$?
{ echo "== the server's log, last lines"; tail -n 5 "$WORK/server.log"; } >>"$OUT/bench.log"

# 4. The short table, last.
echo
echo "== bench on $(awk -F': ' '/^gpu:/{print $2}' "$OUT/env.txt") ($DEVICE), $(($(date +%s) - T0)) s in all"
printf '%-28s %s\n' "bench --repeat 3" "exit $repeat_rc" "A/A compare (no gate)" "exit $compare_rc" "bench --soak $SOAK" "exit $soak_rc"
"$PY" - "$OUT/bench-repeat3.json" "$OUT/soak.json" "$OUT/compare-aa.txt" <<'PYEOF'
import json, statistics, sys
try:
    doc = json.load(open(sys.argv[1]))
except (OSError, ValueError) as exc:
    print(f"no run document: {exc}")
    doc = None
if doc:
    env = doc.get("environment") or {}
    host = env.get("host") or {}
    print(f"pinned: server {env.get('server_version')}, config hash {env.get('config_hash')}, "
          f"GPUs {host.get('gpus')}, driver {host.get('driver_version')}, CUDA {host.get('cuda_driver_version')}")
    runs = [doc["shapes"]] + [r["shapes"] for r in doc.get("repeats", [])]
    floors = {(f["shape"], f["metric"]): f["floor_pct"] for f in (doc.get("calibration") or {}).get("floors", [])}
    print(f"{'shape':<12}{'out tok/s per run':<30}{'TTFT p50 ms':<14}{'ITL p50 ms':<12}{'floor tok/s':<12}")
    for s in doc["shapes"]:
        per = [next((x for x in r if x["name"] == s["name"]), None) for r in runs]
        tps = " ".join(f"{p['metrics']['output_tokens_per_s']:.1f}" if p and p['metrics']['output_tokens_per_s'] else "-" for p in per)
        ttft = [p["metrics"]["ttft_ms"]["p50"] for p in per if p and p["metrics"]["ttft_ms"]["p50"]]
        itl = [p["metrics"]["itl_ms"]["p50"] for p in per if p and p["metrics"]["itl_ms"]["p50"]]
        floor = floors.get((s["name"], "output_tokens_per_s"))
        print(f"{s['name']:<12}{tps:<30}{statistics.median(ttft) if ttft else float('nan'):<14.2f}"
              f"{statistics.median(itl) if itl else float('nan'):<12.2f}{'-' if floor is None else f'{floor:.1f}%':<12}")
try:
    overall = [l for l in open(sys.argv[3]) if l.startswith("overall")]
    print("A/A compare: " + (overall[0].split(None, 1)[1].strip() if overall else "no scorecard"))
except OSError:
    pass
try:
    soak = json.load(open(sys.argv[2]))["soak"]
except (OSError, ValueError, KeyError, TypeError) as exc:
    print(f"no soak document: {exc}")
else:
    ivs = soak["intervals"]
    mem = [iv["gpu_memory_used_mib"] for iv in ivs if iv.get("gpu_memory_used_mib")]
    print(f"soak: {len(ivs)} intervals, {soak['completed']}/{soak['requests']} ok, "
          f"{soak['output_tokens_per_s'] or 0:.1f} tok/s; GPU memory {soak['gpu_memory']}"
          + (f", GPU0 {mem[0][0]} -> {mem[-1][0]} MiB" if mem and mem[0] and mem[-1] else ""))
    for t in soak["trends"]:
        print(f"  trend {t['quantity']}: {t['verdict']}")
PYEOF
