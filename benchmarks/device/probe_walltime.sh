#!/usr/bin/env bash
# Issue 24's probe figures on a GPU host: `check` with and without probes, `probe` alone,
# each against `python -c "import typer"` in the same process tree (interleaved, median of
# $RUNS), the probe benchmark (cold and warm NVRTC cache; check's GPU reads in one child
# against two), how many children `check` starts, where a child's time goes (interpreter,
# imports, CUDA initialisation), and the gpu-marked tests.
#
# Run from the repository root with the package importable, e.g. on the device machine:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#       --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD/src
#   OUT=$OUT bash benchmarks/device/probe_walltime.sh
# BEFORE=DIR (optional): a `src` folder of the code to compare against (e.g. main before a
# change, from `git archive COMMIT src checks kernels_probe | tar -x -C build/before`: without
# kernels_probe/ its probe child exits 1 and its rows time a crash); its `check` and `probe`
# rows are timed in the same interleaved rounds, labelled "(before)".
# The timing rows use GPU 0 alone (CUDA_VISIBLE_DEVICES=0): on a host of several GPUs
# `check` would also run the P2P pairs and the collective test, each its own figure. The
# gpu tests see every GPU.
# Writes one tar, $OUT/probe-walltime.tar.gz (OUT default ./probe-walltime-out), of:
#   env.txt            GPUs (UUIDs redacted), driver, packages
#   interleaved.txt    check / check --no-probe / probe (and the BEFORE rows) vs import typer
#   interleaved.json   the same figures, machine-readable (docs/performance.md's table)
#   probe_walltime.txt benchmarks/probe_walltime.py --warm-runs 5
#   children.txt       the processes one `check` starts (and BEFORE's), from an audit hook
#   phases.txt         one child's start-up parts: interpreter, imports, cuInit, NVML init
#   pytest-gpu.log     pytest -m gpu
#   summary.txt        what this prints at the end
set -u
OUT=${OUT:-probe-walltime-out}
RUNS=${RUNS:-7}
mkdir -p "$OUT"
DIR=$(mktemp -d)/probe-walltime
mkdir -p "$DIR"
export NO_COLOR=1 PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE
PY=${PYTHON:-python3}
"$PY" -c "import blackwell_doctor, typer" || { echo "blackwell_doctor is not importable: set PYTHONPATH (see above)"; exit 2; }
AFTER_PATH=${PYTHONPATH:-}
BEFORE_PATH=""
if [ -n "${BEFORE:-}" ]; then
  BEFORE=$(cd "$BEFORE" && pwd)
  # The BEFORE tree first on the path, the installed wheels after it.
  BEFORE_PATH="$BEFORE$(printf '%s' "$AFTER_PATH" | tr ':' '\n' | grep -v "^$PWD/src\$" | sed 's/^/:/' | tr -d '\n')"
  PYTHONPATH=$BEFORE_PATH "$PY" -c "import blackwell_doctor, sys; assert blackwell_doctor.__file__.startswith('$BEFORE'), blackwell_doctor.__file__" \
    || { echo "BEFORE=$BEFORE does not hold the package"; exit 2; }
fi

{
  echo "# date: $(date -u +%FT%TZ)"
  nvidia-smi -L | sed -E 's/UUID: GPU-[0-9a-f-]+/UUID: GPU-<redacted>/'
  nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv
  "$PY" --version
  "$PY" -m pip list 2>/dev/null | grep -iE '^(nvidia-ml-py|cuda-bindings|cuda-python|typer|msgspec|hyperscan) '
  echo "before: ${BEFORE:-none}"
  echo "load: $(cat /proc/loadavg)"
} >"$DIR/env.txt" 2>&1

# The gpu tests first, on every GPU. The device image lacks two dev-only packages
# (kubernetes-validate, grimp): their modules, which hold no gpu test, are left out.
timeout 300 "$PY" -m pytest -p no:cacheprovider -v -m gpu --ignore=tests/test_kubernetes.py \
    --ignore=tests/test_layers.py >"$DIR/pytest-gpu.log" 2>&1
gpu_rc=$?

export CUDA_VISIBLE_DEVICES=0
# Warm the NVRTC cache once, so that every timed probe run is warm.
export BLACKWELL_DOCTOR_CACHE_DIR=$(mktemp -d)
"$PY" -m blackwell_doctor probe --format json >/dev/null 2>&1
[ -n "$BEFORE_PATH" ] && PYTHONPATH=$BEFORE_PATH "$PY" -m blackwell_doctor probe --format json >/dev/null 2>&1

# Every row through `env PYTHONPATH=...`, so that the BEFORE rows pay nothing extra.
ROWS=(
  "check=env PYTHONPATH=$AFTER_PATH $PY -m blackwell_doctor check --format json"
  "check --no-probe=env PYTHONPATH=$AFTER_PATH $PY -m blackwell_doctor check --no-probe --format json"
  "probe=env PYTHONPATH=$AFTER_PATH $PY -m blackwell_doctor probe --format json"
)
if [ -n "$BEFORE_PATH" ]; then
  ROWS+=(
    "check (before)=env PYTHONPATH=$BEFORE_PATH $PY -m blackwell_doctor check --format json"
    "check --no-probe (before)=env PYTHONPATH=$BEFORE_PATH $PY -m blackwell_doctor check --no-probe --format json"
    "probe (before)=env PYTHONPATH=$BEFORE_PATH $PY -m blackwell_doctor probe --format json"
  )
fi
"$PY" benchmarks/interleaved.py --runs "$RUNS" --json "$DIR/interleaved.json" \
  --floor "$PY -c 'import typer'" "${ROWS[@]}" >"$DIR/interleaved.txt" 2>&1

BLACKWELL_DOCTOR_CACHE_DIR=$(mktemp -d) "$PY" benchmarks/probe_walltime.py --warm-runs 5 \
  >"$DIR/probe_walltime.txt" 2>&1

# The processes one `check` starts: an audit hook in the CLI's own process.
CHILDREN='
import runpy, sys
started = []
def hook(event, args):
    if event == "subprocess.Popen":
        started.append(" ".join(str(a) for a in list(args[1])[:4])[:100])
sys.addaudithook(hook)
sys.argv = ["blackwell_doctor", "check", "--format", "json"]
try:
    runpy.run_module("blackwell_doctor", run_name="__main__")
except SystemExit:
    pass
print(f"{len(started)} processes:", file=sys.stderr)
for line in started:
    print("  " + line, file=sys.stderr)
'
{
  echo "== check"
  "$PY" -c "$CHILDREN" 2>&1 >/dev/null
  if [ -n "$BEFORE_PATH" ]; then
    echo "== check (before)"
    PYTHONPATH=$BEFORE_PATH "$PY" -c "$CHILDREN" 2>&1 >/dev/null
  fi
} >"$DIR/children.txt"

# Where a child's time goes: each figure the median of 5 fresh processes.
"$PY" - >"$DIR/phases.txt" 2>&1 <<'PY'
import statistics, subprocess, sys
SNIPPETS = {
    "interpreter": "pass",
    "import blackwell_doctor.cli": "import blackwell_doctor.cli",
    "import probe child": "import blackwell_doctor.collect.probe._child",
    "import gpu child": "import blackwell_doctor.collect._gpu_child",
    "cuInit": "from cuda.bindings import driver; driver.cuInit(0)",
    "cuInit + context": (
        "from cuda.bindings import driver; driver.cuInit(0); "
        "e, d = driver.cuDeviceGet(0); e, c = driver.cuDevicePrimaryCtxRetain(d); "
        "driver.cuCtxSetCurrent(c)"
    ),
    "nvmlInit": "import pynvml; pynvml.nvmlInit()",
}
TIMER = "import time; t = time.perf_counter(); {code}; print(time.perf_counter() - t)"
for name, code in SNIPPETS.items():
    runs = []
    for _ in range(5):
        proc = subprocess.run([sys.executable, "-c", TIMER.format(code=code)],
                              capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            runs = None
            print(f"{name:<22} failed: {proc.stderr.strip().splitlines()[-1:]}")
            break
        runs.append(float(proc.stdout.split()[-1]))
    if runs:
        print(f"{name:<22} {statistics.median(runs) * 1000:8.1f} ms (in-process, median of 5)")
PY

{
  echo "== summary"
  cat "$DIR/interleaved.txt"
  grep -E "cold|warm median|children|child \(|same devices" "$DIR/probe_walltime.txt"
  cat "$DIR/children.txt"
  cat "$DIR/phases.txt"
  echo "gpu tests: rc=$gpu_rc: $(tail -1 "$DIR/pytest-gpu.log")"
} >"$DIR/summary.txt"
cat "$DIR/summary.txt"
tar -czf "$OUT/probe-walltime.tar.gz" -C "$(dirname "$DIR")" probe-walltime
echo "wrote $OUT/probe-walltime.tar.gz"
