#!/usr/bin/env bash
# Issue 36's device rows, profiled before they are optimised: where the wall time of
#   (a) `check --format json` on GPU 0 alone (tile probes on),
#   (b) `check --no-probe --format json` on GPU 0,
#   (c) `audit --python python3 --format json` (warm scan cache),
#   (d) the collective pre-flight `check --select link,bar1,module,collective,memory` on 2 GPUs,
#   (e) `run_collective(2)` alone (benchmarks/collective_cost.py)
# goes: warm wall times (median of $RUNS after one warm-up), a process timeline of one run
# (benchmarks/timeline: every Python process's start, spawns and exit, in ms), and the top
# of a cProfile of the parent. Writes under $OUT; prints a summary last. Run from the repo root:
#   OUT=$OUT bash benchmarks/device/profile36.sh     (carry .whl/)
set -u
OUT=${OUT:-profile36-out}
RUNS=${RUNS:-5}
mkdir -p "$OUT"
export NO_COLOR=1 PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >"$OUT/pip.log" 2>&1
  SITE=/tmp/site:
else
  SITE=
fi
export PYTHONPATH=${SITE}$PWD/src
# As installed: bytecode compiled once (the image sets PYTHONDONTWRITEBYTECODE, which would
# make every run compile the package's sources again: 100-200 ms a process).
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j 0 src /tmp/site >/dev/null 2>&1
export BLACKWELL_DOCTOR_CACHE_DIR=$(mktemp -d)
TL=$PWD/benchmarks/timeline
{
  echo "# date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=index,name,driver_version,compute_cap --format=csv
  python3 --version; nproc; cat /proc/loadavg
} >"$OUT/env.txt" 2>&1

run_case() {  # name, env assignments..., -- , args...
  local name=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" python3 -m blackwell_doctor "$@" >/dev/null 2>&1   # warm-up (fills caches)
  : >"$OUT/$name.times"
  for i in $(seq "$RUNS"); do
    s=$(date +%s.%N)
    env "${envs[@]}" timeout 120 python3 -m blackwell_doctor "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
    rc=$?
    e=$(date +%s.%N)
    echo "$(awk "BEGIN{printf \"%.3f\", $e - $s}") rc=$rc" >>"$OUT/$name.times"
  done
  rm -rf "$OUT/$name.tl" "$OUT/$name.procs"; mkdir -p "$OUT/$name.procs"
  env "${envs[@]}" BD_TIMELINE="$OUT/$name.tl" BD_CPROFILE_DIR="$OUT/$name.procs" PYTHONPATH="$TL:$PYTHONPATH" \
    timeout 120 python3 -m blackwell_doctor "$@" >/dev/null 2>&1
  python3 "$TL/show.py" "$OUT/$name.tl" >"$OUT/$name.timeline.txt"
  for prof in "$OUT/$name.procs"/*.prof; do
    python3 - "$prof" >"${prof%.prof}.txt" <<'PY'
import pstats, sys
s = pstats.Stats(sys.argv[1])
s.sort_stats("cumulative").print_stats(60)
s.sort_stats("tottime").print_stats(30)
PY
  done
  python3 -X importtime -m blackwell_doctor "$@" 2>"$OUT/$name.importtime" >/dev/null || true
}

[ -n "${ONLY:-}" ] && { run_case "$ONLY" X=1 -- --version; exit; }
run_case check1 CUDA_VISIBLE_DEVICES=0 -- check --format json
run_case noprobe1 CUDA_VISIBLE_DEVICES=0 -- check --no-probe --format json
run_case audit CUDA_VISIBLE_DEVICES=0 -- audit --python python3 --format json
run_case preflight2 CUDA_VISIBLE_DEVICES=0,1 -- check --select link,bar1,module,collective,memory --format json
run_case typer X=1 -- --version
timeout 200 python3 benchmarks/collective_cost.py --gpus 2 --repeat 3 --json "$OUT/collective.json" >"$OUT/collective.txt" 2>&1
# the GPU child's parts
for n in check1 audit preflight2; do
  echo "== $n" >>"$OUT/summary.txt"
  sort -n "$OUT/$n.times" | awk '{a[NR]=$1} END {printf "median %.3f s  min %.3f  max %.3f\n", a[int((NR+1)/2)], a[1], a[NR]}' >>"$OUT/summary.txt"
  head -40 "$OUT/$n.timeline.txt" >>"$OUT/summary.txt"
done
for n in noprobe1 typer; do
  echo "== $n" >>"$OUT/summary.txt"
  sort -n "$OUT/$n.times" | awk '{a[NR]=$1} END {printf "median %.3f s  min %.3f  max %.3f\n", a[int((NR+1)/2)], a[1], a[NR]}' >>"$OUT/summary.txt"
done
tail -12 "$OUT/collective.txt" >>"$OUT/summary.txt"
cat "$OUT/summary.txt"
tar -C "$OUT" -czf /tmp/profile36.tar.gz . && rm -rf "${OUT:?}"/* && mv /tmp/profile36.tar.gz "$OUT/"
