#!/usr/bin/env bash
# Issue 36's device rows, this tree against a base tree (the previous main), interleaved on
# the same machine in one run: each case is run from BASE_SRC and from ./src in turn, RUNS
# times each after one warm-up of each, and the wall times, their medians and the ratio are
# written (summary.txt last). First, issue 36's start-up rows (STARTUP_RUNS rounds, 31 by
# default, of benchmarks/interleaved.py: CPU and wall against `python3 -c "import typer"`,
# both trees in the same rounds; startup36.json and startup36.txt):
#   check-facts `check --facts tests/fixtures/facts/b200-x8.json --format json`
#   scan        `scan-logs LOG --format json` of the composed fixture (591 bytes)
#   scan1m      the same of a 1 MiB vLLM log (benchmarks/scan_logs.py's, seed 1)
#   fleet       `fleet tests/fixtures/facts --format json`
# Then the GPU cases, as benchmarks/device/profile36.sh profiles them:
#   check1      `check --format json` on GPU 0 (tile probes on)
#   noprobe1    `check --no-probe --format json` on GPU 0
#   audit       `audit --python python3 --format json` on GPU 0 (warm scan cache)
#   preflight2  `check --select link,bar1,module,collective,memory --format json`, 2 GPUs
#   collective  run_collective(2) alone (the wall time it measures itself; every run's
#               failure, if any, is printed beside it)
# audit's JSON output of both trees is compared byte for byte (check's carries the probes'
# measurements, which differ from run to run). Run from the repository root:
#   mkdir -p .base && git archive BASE_COMMIT src checks examples kernels_probe | tar -x -C .base   (carry .base, .whl;
#   without kernels_probe/ the base tree's probe child exits 1 and its check skips the probes)
#   OUT=$OUT BASE_SRC=.base/src bash benchmarks/device/interleave36.sh
set -u
OUT=${OUT:-interleave36-out}
RUNS=${RUNS:-7}
BASE_SRC=${BASE_SRC:?set BASE_SRC to the src folder of the base tree}
mkdir -p "$OUT"
export NO_COLOR=1 PYTHONUNBUFFERED=1
SITE=
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >"$OUT/pip.log" 2>&1
  SITE=/tmp/site:
fi
# As installed: bytecode compiled once (PYTHONDONTWRITEBYTECODE would recompile each run).
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j 0 src "$BASE_SRC" /tmp/site >/dev/null 2>&1
# One cache for both trees (NVRTC's, the catalogues', audit's scans): both runs warm.
export BLACKWELL_DOCTOR_CACHE_DIR=$(mktemp -d) XDG_CACHE_HOME=$(mktemp -d)
declare -A TREE=([base]="$(cd "$BASE_SRC" && pwd)" [new]="$PWD/src")
{
  echo "# date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=index,name,driver_version,compute_cap --format=csv
  python3 --version; nproc; cat /proc/loadavg
  echo "base: ${TREE[base]}  new: ${TREE[new]}  runs: $RUNS"
} >"$OUT/env.txt" 2>&1

COLLECTIVE='import time
from blackwell_doctor.collect.probe.collective import run_collective
t = time.monotonic()
f = run_collective(2, run_timeout_s=60, timeout_s=240)
wall = time.monotonic() - t
bad = [r.failure for r in getattr(f, "runs", [])] if not hasattr(f, "reason") else [f.reason]
print(f"{wall:.3f}", *[b for b in bad if b])'

once() {  # tree, name, env assignments..., -- , args...: one run; prints its seconds
  local tree=$1 name=$2; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local s e
  if [ "$name" = collective ]; then
    env "${envs[@]}" PYTHONPATH="${SITE}${TREE[$tree]}" timeout 300 python3 -c "$COLLECTIVE" \
      2>>"$OUT/$name.$tree.err" | tee -a "$OUT/$name.$tree.out" | cut -d' ' -f1
    return
  fi
  s=$(date +%s.%N)
  env "${envs[@]}" PYTHONPATH="${SITE}${TREE[$tree]}" timeout 120 python3 -m blackwell_doctor \
    "$@" >"$OUT/$name.$tree.out" 2>"$OUT/$name.$tree.err"
  echo "rc=$?" >>"$OUT/$name.$tree.rc"
  e=$(date +%s.%N)
  awk "BEGIN{printf \"%.3f\n\", $e - $s}"
}

median() { sort -n | awk '{a[NR]=$1} END {printf "%.3f", a[int((NR+1)/2)]}'; }

run_case() {  # name, env assignments..., -- , args...
  local name=$1; shift
  : >"$OUT/$name.base.times"; : >"$OUT/$name.new.times"
  once base "$name" "$@" >/dev/null; once new "$name" "$@" >/dev/null  # warm-up
  for i in $(seq "$RUNS"); do
    # Alternate which tree goes first, so that neither always follows the other.
    if [ $((i % 2)) = 1 ]; then order="base new"; else order="new base"; fi
    for tree in $order; do once "$tree" "$name" "$@" >>"$OUT/$name.$tree.times"; done
  done
  local b n
  b=$(median <"$OUT/$name.base.times"); n=$(median <"$OUT/$name.new.times")
  {
    echo "== $name: base median $b s, new median $n s, new/base $(awk "BEGIN{printf \"%.2f\", $n / $b}")"
    echo "   base: $(tr '\n' ' ' <"$OUT/$name.base.times")"
    echo "   new:  $(tr '\n' ' ' <"$OUT/$name.new.times")"
  } >>"$OUT/summary.txt"
}

: >"$OUT/summary.txt"
# Start-up (issue 36): the caches warmed by interleaved.py's own first run of each command.
STARTUP_RUNS=${STARTUP_RUNS:-31}
PYTHONPATH="${SITE}$PWD/src" python3 benchmarks/scan_logs.py --first-mib /tmp/scan1m.log \
  >"$OUT/startup36.gen.log" 2>&1
LOG=tests/fixtures/logs/composed-vllm-marlin-auto.log
startup=()
for tree in base new; do
  run="env PYTHONPATH=${SITE}${TREE[$tree]} python3 -m blackwell_doctor"
  startup+=("check-facts-$tree=$run check --facts tests/fixtures/facts/b200-x8.json --format json")
  startup+=("scan-$tree=$run scan-logs $LOG --format json")
  startup+=("scan1m-$tree=$run scan-logs /tmp/scan1m.log --format json")
  startup+=("fleet-$tree=$run fleet tests/fixtures/facts --format json")
done
python3 benchmarks/interleaved.py --runs "$STARTUP_RUNS" --json "$OUT/startup36.json" \
  --floor "python3 -c 'import typer'" "${startup[@]}" >"$OUT/startup36.txt" 2>&1
{
  echo "== start-up (issue 36), $STARTUP_RUNS rounds:"
  tail -n 12 "$OUT/startup36.txt"
} >>"$OUT/summary.txt"
run_case check1 CUDA_VISIBLE_DEVICES=0 -- check --format json
run_case noprobe1 CUDA_VISIBLE_DEVICES=0 -- check --no-probe --format json
run_case audit CUDA_VISIBLE_DEVICES=0 -- audit --python python3 --format json
if cmp -s "$OUT/audit.base.out" "$OUT/audit.new.out"; then
  echo "   audit JSON: identical" >>"$OUT/summary.txt"
else
  echo "   audit JSON: DIFFERS (diff in audit.diff)" >>"$OUT/summary.txt"
  diff "$OUT/audit.base.out" "$OUT/audit.new.out" >"$OUT/audit.diff"
fi
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  run_case preflight2 CUDA_VISIBLE_DEVICES=0,1 -- check --select link,bar1,module,collective,memory --format json
  run_case collective CUDA_VISIBLE_DEVICES=0,1 -- collective
  echo "   collective failures (base): $(cut -s -d' ' -f2- "$OUT/collective.base.out" | sort | uniq -c | tr '\n' ';')" >>"$OUT/summary.txt"
  echo "   collective failures (new):  $(cut -s -d' ' -f2- "$OUT/collective.new.out" | sort | uniq -c | tr '\n' ';')" >>"$OUT/summary.txt"
fi
cat "$OUT/summary.txt"
