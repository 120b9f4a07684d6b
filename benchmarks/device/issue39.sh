#!/usr/bin/env bash
# Issue 39 on a real GPU host (made for nvidia-h200, one GPU; more GPUs work too): hardware
# health without DCGM. Reads only: nothing here sets a power limit, clock, ECC mode or any
# other GPU setting. Steps:
#   1. nvidia-smi's own view (temperature, power, ECC, row remapper, clocks event reasons)
#      and the AER files of sysfs, to set beside what blackwell-doctor reads;
#   2. the gpu-marked tests of this issue, then the other GPU tests within the time left;
#   3. a live `collect --redact` (with probes: the clock event reasons are read while the
#      probe kernels run) and `check` on it in text and JSON (the node verdict);
#   4. what the health facts add to `check`, interleaved (benchmarks/health_overhead.py:
#      with and without `--ignore health`, probes and --no-probe; budget 100 ms);
#   5. a short table of the values read, last.
# Seven files land in $OUT (the device tool returns at most 8): env.txt (nvidia-smi's view and
# the AER files), pytest-gpu.log, facts-redacted.json, check.txt, check.json,
# health-overhead.json, summary.txt (the table, the overhead, the Prometheus node gauge);
# the rest stays in a scratch folder. Budget: under 5 minutes. Run from the repository root:
#   OUT=$OUT bash benchmarks/device/issue39.sh          (carry .whl/ when the image lacks wheels)
set -u
OUT=${OUT:-issue39-out}
mkdir -p "$OUT"
W=$(mktemp -d)  # scratch: what does not come back
export NO_COLOR=1 PYTHONUNBUFFERED=1
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >"$W/pip.log" 2>&1
  export PYTHONPATH=/tmp/site:$PWD/src
else
  export PYTHONPATH=$PWD/src
fi
export BLACKWELL_DOCTOR_CACHE_DIR=$(mktemp -d)
BD=(timeout 120 python3 -m blackwell_doctor)
T0=$(date +%s)

# 1. What nvidia-smi and sysfs say (read only), to compare with the facts.
{
  echo "# date: $(date -u +%FT%TZ)"
  nvidia-smi -L | sed -E 's/UUID: GPU-[0-9a-f-]+/UUID: GPU-redacted/'
  nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id,temperature.gpu,power.limit,power.default_limit,power.max_limit,ecc.mode.current,ecc.mode.pending,pcie.link.gen.max,pcie.link.width.max --format=csv
  nvidia-smi --query-gpu=index,clocks_event_reasons.active --format=csv 2>/dev/null \
    || nvidia-smi --query-gpu=index,clocks_throttle_reasons.active --format=csv
  nvidia-smi -q -d TEMPERATURE,POWER,ECC,ROW_REMAPPER,PAGE_RETIREMENT,PERFORMANCE 2>&1 \
    | sed -E 's/GPU-[0-9a-f-]{36}/GPU-redacted/'
  head -1 /proc/driver/nvidia/version
  uname -r
  python3 --version
  python3 -m pip list 2>/dev/null | grep -iE '^(nvidia-ml-py|cuda-bindings|msgspec|typer|pytest) '
} >"$OUT/env.txt" 2>&1
for bus in $(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader 2>/dev/null); do
  bdf=$(echo "$bus" | tr 'A-F' 'a-f' | sed -E 's/^0000([0-9a-f]{4}):/\1:/')
  dev=/sys/bus/pci/devices/$bdf
  port=$(basename "$(dirname "$(readlink -f "$dev")")")
  for d in "$dev" "/sys/bus/pci/devices/$port"; do
    echo "== $d"
    grep -H . "$d"/aer_dev_correctable "$d"/aer_dev_nonfatal "$d"/aer_dev_fatal 2>&1
  done
done >"$W/aer-sysfs.txt" 2>&1
{ echo; echo "# AER files of each GPU and the port above it (read only)"; cat "$W/aer-sysfs.txt"; } >>"$OUT/env.txt"

# 2. The gpu-marked tests: this issue's first, then the rest within what is left.
timeout 150 python3 -m pytest -p no:cacheprovider -v -rs -m gpu tests/test_health_gpu.py \
  >"$W/pytest-gpu-health.log" 2>&1; gpu_rc=$?
LEFT=$(( 280 - ($(date +%s) - T0) - 110 ))
if [ "$LEFT" -gt 30 ]; then
  timeout "$LEFT" python3 -m pytest -p no:cacheprovider -q -rs -m gpu tests/test_gpu_real.py \
    tests/test_probe_gpu.py tests/test_gpu_cli.py >"$W/pytest-gpu-rest.log" 2>&1; rest_rc=$?
else
  echo "skipped: no time left" >"$W/pytest-gpu-rest.log"; rest_rc=skipped
fi
cat "$W/pytest-gpu-health.log" "$W/pytest-gpu-rest.log" >"$OUT/pytest-gpu.log"

# 3. A live collection (probes on: readings under load), and check on it.
"${BD[@]}" collect --redact -o "$OUT/facts-redacted.json" >"$W/collect.log" 2>&1; collect_rc=$?
"${BD[@]}" check --facts "$OUT/facts-redacted.json" >"$OUT/check.txt" 2>&1; check_rc=$?
"${BD[@]}" check --facts "$OUT/facts-redacted.json" --format json -o "$OUT/check.json" >/dev/null 2>&1
"${BD[@]}" check --facts "$OUT/facts-redacted.json" --format prometheus -o "$W/check.prom" >/dev/null 2>&1

# 4. What the health facts add to a live check, interleaved (budget 100 ms).
timeout 120 python3 benchmarks/health_overhead.py --rounds 5 --json "$OUT/health-overhead.json" \
  >"$W/health-overhead.txt" 2>&1; cost_rc=$?

# 5. The values read, in one table.
python3 - "$OUT" >"$W/values.txt" 2>&1 <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
facts = json.loads((out / "facts-redacted.json").read_text())
report = json.loads((out / "check.json").read_text())
names = {g["index"]: g["name"] for g in facts["nvml"].get("gpus", [])} if facts["nvml"].get("status") == "ok" else {}
REASONS = {0x1: "GpuIdle", 0x2: "AppClocks", 0x4: "SwPowerCap", 0x8: "HwSlowdown", 0x10: "SyncBoost",
           0x20: "SwThermal", 0x40: "HwThermal", 0x80: "HwPowerBrake", 0x100: "DisplayClock"}
def v(x):
    return f"n/a({x['reason']})" if isinstance(x, dict) and x.get("status") == "unavailable" else x
health = facts.get("health") or {}
print("health section:", health.get("status", "absent"), health.get("reason", ""))
for g in (health.get("gpus") if isinstance(health.get("gpus"), list) else []):
    i = g["index"]
    watts = lambda k: (f"{g[k] / 1000:.0f} W" if isinstance(g[k], int) else v(g[k]))
    print(f"GPU{i} {names.get(i, '')}")
    print(f"  temperature {v(g['temperature_c'])} C; slowdown {v(g['slowdown_c'])} C, shutdown {v(g['shutdown_c'])} C, "
          f"gpu max {v(g['gpu_max_c'])} C, margin {v(g['margin_c'])} C; fans {v(g['fans_percent'])}")
    print(f"  power limit {watts('power_limit_mw')} (default {watts('power_default_mw')}, min {watts('power_min_mw')}, "
          f"max {watts('power_max_mw')}), drawing {watts('power_usage_mw')}")
    print(f"  at collection: clock reasons {v(g['clock_event_reasons'])}, SM {v(g['sm_clock_mhz'])}/{v(g['sm_clock_max_mhz'])} MHz")
    print(f"  ECC enabled {v(g['ecc_enabled'])} (pending {v(g['ecc_pending_enabled'])}); errors {v(g['ecc_errors'])}")
    print(f"  remapped rows {v(g['remapped_rows'])}; retired pages {v(g['retired_pages'])}")
    print(f"  PCIe replays {v(g['pcie_replays'])}; recovery action {v(g['recovery_action'])}")
load = health.get("under_load")
if isinstance(load, list):
    for gpu in load:
        samples = gpu["samples"]
        counts = {}
        for s in samples:
            for bit, name in REASONS.items():
                if s[0] is not None and s[0] & bit:
                    counts[name] = counts.get(name, 0) + 1
        clocks = [s[1] for s in samples if s[1] is not None]
        temps = [s[2] for s in samples if s[2] is not None]
        power = [s[3] for s in samples if s[3] is not None]
        replays = [s[4] for s in samples if len(s) > 4 and s[4] is not None]
        print(f"under load {gpu['pci_bus_id']}: {len(samples)} readings; reasons {counts or 'none'}; "
              f"SM {min(clocks, default='-')}-{max(clocks, default='-')} MHz; up to {max(temps, default='-')} C; "
              f"up to {max(power, default=0) / 1000:.0f} W; replays {replays[:1]}..{replays[-1:]}; error {gpu['error']}")
else:
    print("under load:", v(load))
aer = health.get("aer")
for d in (aer if isinstance(aer, list) else []):
    print(f"AER {d['role']} {d['bdf']}: before {v(d['before'])}; after {v(d.get('after'))}")
if not isinstance(aer, list):
    print("AER:", v(aer))
for r in report["results"]:
    if r["family"] == "health" or r["id"] == "logs.kernel_events":
        print(f"{r['status']:5} {r['id']}: {r['summary'][:150]}")
node = report.get("node") or {}
print(f"node verdict: {node.get('verdict')} ({', '.join(node.get('because', [])) or 'nothing'}); "
      f"not evaluated: {node.get('not_evaluated')}")
print("step:", node.get("step"))
PY
values_rc=$?

{
  echo "== summary ($(( $(date +%s) - T0 )) s)"
  printf '%-34s %s\n' "pytest -m gpu health" "rc=$gpu_rc: $(tail -1 "$W/pytest-gpu-health.log")" \
    "pytest -m gpu rest" "rc=$rest_rc: $(tail -1 "$W/pytest-gpu-rest.log")" \
    "collect --redact (rc)" "$collect_rc: $(tail -1 "$W/collect.log")" "check (rc)" "$check_rc" \
    "health overhead (rc)" "$cost_rc" "values table (rc)" "$values_rc"
  sed 's/^/  /' "$W/health-overhead.txt"
  grep '^blackwell_doctor_node_verdict{' "$W/check.prom" | sed 's/^/  /'
  sed 's/^/  /' "$W/values.txt"
} | tee "$OUT/summary.txt"
