#!/usr/bin/env bash
# Issue 24's probe figures on a GPU host: `check` with and without probes, `probe` alone,
# each against `python -c "import typer"` in the same process tree (interleaved, median of
# $RUNS), the probe benchmark (cold and warm NVRTC cache), where a probe run's time goes
# (interpreter, imports, CUDA initialisation per child), and the gpu-marked tests.
#
# Run from the repository root with the package importable, e.g. on the device machine:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#       --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD/src
#   OUT=$OUT bash benchmarks/device/probe_walltime.sh
# Writes into $OUT (default ./probe-walltime-out):
#   env.txt            GPUs (UUIDs redacted), driver, packages
#   interleaved.txt    check (probes) / check --no-probe / probe vs import typer: wall, CPU
#   interleaved.json   the same figures, machine-readable (docs/performance.md's table)
#   probe_walltime.txt benchmarks/probe_walltime.py --warm-runs 5 (cold, warm, per tile)
#   phases.txt         one child's start-up parts: interpreter, imports, cuInit, NVML init
#   pytest-gpu.log     pytest -m gpu
# "before" is main's approach (one child per kind of probe, each initialising CUDA); this
# branch did not change it (see the report of issue 24), so both are the same code here.
set -u
OUT=${OUT:-probe-walltime-out}
RUNS=${RUNS:-7}
mkdir -p "$OUT"
export NO_COLOR=1 PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE
PY=${PYTHON:-python3}
"$PY" -c "import blackwell_doctor, typer" || { echo "blackwell_doctor is not importable: set PYTHONPATH (see above)"; exit 2; }

{
  echo "# date: $(date -u +%FT%TZ)"
  nvidia-smi -L | sed -E 's/UUID: GPU-[0-9a-f-]+/UUID: GPU-<redacted>/'
  nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv
  "$PY" --version
  "$PY" -m pip list 2>/dev/null | grep -iE '^(nvidia-ml-py|cuda-bindings|cuda-python|typer|msgspec|hyperscan) '
  echo "load: $(cat /proc/loadavg)"
} >"$OUT/env.txt" 2>&1

# Warm the NVRTC cache once, so that every timed probe run is warm.
export BLACKWELL_DOCTOR_CACHE_DIR=$(mktemp -d)
"$PY" -m blackwell_doctor probe --format json >/dev/null 2>&1

"$PY" benchmarks/interleaved.py --runs "$RUNS" --json "$OUT/interleaved.json" \
  --floor "$PY -c 'import typer'" \
  "check=$PY -m blackwell_doctor check --format json" \
  "check --no-probe=$PY -m blackwell_doctor check --no-probe --format json" \
  "probe=$PY -m blackwell_doctor probe --format json" \
  >"$OUT/interleaved.txt" 2>&1

BLACKWELL_DOCTOR_CACHE_DIR=$(mktemp -d) "$PY" benchmarks/probe_walltime.py --warm-runs 5 \
  >"$OUT/probe_walltime.txt" 2>&1

# Where a child's time goes: each figure the median of 5 fresh processes.
"$PY" - >"$OUT/phases.txt" 2>&1 <<'PY'
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

# The device image lacks two dev-only packages (kubernetes-validate, grimp): their modules,
# which hold no gpu test, are left out rather than failing the collection.
"$PY" -m pytest -p no:cacheprovider -v -m gpu --ignore=tests/test_kubernetes.py \
    --ignore=tests/test_layers.py >"$OUT/pytest-gpu.log" 2>&1
gpu_rc=$?

echo "== summary"
cat "$OUT/interleaved.txt"
grep -E "cold|warm median" "$OUT/probe_walltime.txt"
cat "$OUT/phases.txt"
echo "gpu tests: rc=$gpu_rc: $(tail -1 "$OUT/pytest-gpu.log")"
