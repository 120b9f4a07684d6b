#!/usr/bin/env bash
# Where a start-up's time goes on the device (issue 36): for the floor (`import typer`) and
# the start-up rows (check-facts, scan, scan1m, fleet), ROUNDS interleaved rounds of
#   whole   the command as users run it (python3 -m blackwell_doctor ...)
#   imports a process that imports exactly the modules the command imported (the names
#           -X importtime printed, in that order, the collector paused as __main__ pauses it)
# so that whole - imports is the run itself (the caches warm). CPU seconds (user + system of
# the child, wait4) and wall seconds; medians. Then the 40 largest self import times of a
# scan-logs run (the median of 11 -X importtime runs), the floor with msgspec and with
# Hyperscan beside it, and `perf stat` of the floor and of
# scan where perf counts instructions on this machine. Run from the repository root:
#   OUT=$OUT bash benchmarks/device/startup_anatomy.sh        (carry .whl)
set -u
OUT=${OUT:-anatomy-out}
ROUNDS=${ROUNDS:-15}
mkdir -p "$OUT"
export NO_COLOR=1 PYTHONUNBUFFERED=1
if [ -z "${SKIP_WHL:-}" ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >"$OUT/pip.log" 2>&1
fi
export PYTHONPATH=/tmp/site:$PWD/src
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j 0 src /tmp/site >/dev/null 2>&1
export XDG_CACHE_HOME; XDG_CACHE_HOME=$(mktemp -d)
{ echo "# date: $(date -u +%FT%TZ)"; python3 --version; nproc; cat /proc/loadavg; } >"$OUT/env.txt"
LOG=tests/fixtures/logs/composed-vllm-marlin-auto.log
LOG1M=/tmp/scan1m.log
python3 benchmarks/scan_logs.py --first-mib "$LOG1M"
declare -A ARGS=(
  [check-facts]="check --facts tests/fixtures/facts/b200-x8.json --format json"
  [scan]="scan-logs $LOG --format json"
  [scan1m]="scan-logs $LOG1M --format json"
  [fleet]="fleet tests/fixtures/facts --format json"
)
NAMES="check-facts scan scan1m fleet"
for name in $NAMES; do  # warm the caches, then record what the command imports
  # shellcheck disable=SC2086
  python3 -m blackwell_doctor ${ARGS[$name]} >/dev/null 2>&1
  # shellcheck disable=SC2086
  python3 -X importtime -m blackwell_doctor ${ARGS[$name]} 2>"$OUT/it-$name.txt" >/dev/null
  python3 - "$OUT/it-$name.txt" "$OUT/imports-$name.py" <<'PYIMP'
import sys
names = [line.split("|")[2].strip() for line in open(sys.argv[1]) if line.startswith("import time:") and "self [us]" not in line]
body = "import gc\ngc.disable()\nimport importlib\nfor m in %r:\n    try:\n        importlib.import_module(m)\n    except Exception:\n        pass\n" % names
open(sys.argv[2], "w").write(body)
PYIMP
done
python3 - "$OUT" "$ROUNDS" "$LOG" "$LOG1M" <<'PYRUN'
import json, os, statistics, subprocess, sys, time
out, rounds, log, log1m = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
args = {
    "check-facts": ["check", "--facts", "tests/fixtures/facts/b200-x8.json", "--format", "json"],
    "scan": ["scan-logs", log, "--format", "json"],
    "scan1m": ["scan-logs", log1m, "--format", "json"],
    "fleet": ["fleet", "tests/fixtures/facts", "--format", "json"],
}
cases = {
    "floor": [sys.executable, "-c", "import typer"],
    "floor + msgspec": [sys.executable, "-c", "import typer, msgspec"],
    "floor + hyperscan": [sys.executable, "-c", "import typer, hyperscan"],
}
for name, a in args.items():
    cases[f"{name} whole"] = [sys.executable, "-m", "blackwell_doctor", *a]
    cases[f"{name} imports"] = [sys.executable, f"{out}/imports-{name}.py"]

def once(argv):
    t = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(proc.pid, 0)
    return ru.ru_utime + ru.ru_stime, time.perf_counter() - t

for argv in cases.values():
    once(argv)
cpu = {k: [] for k in cases}
wall = {k: [] for k in cases}
names = list(cases)
for r in range(rounds):
    for k in (names if r % 2 == 0 else names[::-1]):
        c, w = once(cases[k])
        cpu[k].append(c)
        wall[k].append(w)
floor = statistics.median(cpu["floor"])
rows = []
lines = [f"{rounds} interleaved rounds; load {open('/proc/loadavg').read().split()[:3]}",
         f"{'case':<22} {'cpu ms':>8} {'ratio':>6} {'wall ms':>8}"]
for k in names:
    c, w = statistics.median(cpu[k]), statistics.median(wall[k])
    rows.append({"case": k, "cpu_s": c, "wall_s": w, "ratio": c / floor})
    lines.append(f"{k:<22} {c*1e3:8.1f} {c/floor:6.2f} {w*1e3:8.1f}")
for name in args:
    run = statistics.median(cpu[f"{name} whole"]) - statistics.median(cpu[f"{name} imports"])
    lines.append(f"{name}: the run itself ~{run*1e3:.1f} ms CPU (whole - imports)")
open(f"{out}/anatomy.json", "w").write(json.dumps(rows, indent=1))
open(f"{out}/anatomy.txt", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PYRUN
# The largest self import times of scan-logs (median of 11 runs)
for i in $(seq 1 11); do
  python3 -X importtime -m blackwell_doctor scan-logs "$LOG" --format json 2>>"$OUT/it-scan-11.txt" >/dev/null
done
python3 - "$OUT/it-scan-11.txt" >"$OUT/self-scan.txt" <<'PYSELF'
import statistics, sys, collections
by = collections.defaultdict(list)
for line in open(sys.argv[1]):
    if line.startswith("import time:") and "self [us]" not in line:
        parts = line.split("|")
        by[parts[2].strip()].append(int(parts[0].split(":")[1]))
rows = sorted(((statistics.median(v), k) for k, v in by.items()), reverse=True)
print(f"total self us (median per module, summed): {sum(v for v, _ in rows):.0f}")
for v, k in rows[:40]:
    print(f"{v:8.0f} {k}")
PYSELF
if perf stat -e instructions true >/dev/null 2>&1; then
  for c in "python3 -c 'import typer'" "python3 -m blackwell_doctor scan-logs $LOG --format json"; do
    echo "== $c" >>"$OUT/perf.txt"
    bash -c "perf stat -r 5 -e instructions,cycles,page-faults $c" >/dev/null 2>>"$OUT/perf.txt"
  done
else
  echo "perf cannot count instructions here" >"$OUT/perf.txt"
fi
tail -n 45 "$OUT/self-scan.txt" | head -25
cat "$OUT/perf.txt" | grep -E "==|instructions|cycles|faults|elapsed"
