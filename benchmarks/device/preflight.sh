#!/usr/bin/env bash
# Issue 26 on a real multi-GPU host (made for nvidia-h100-x2): the PCIe link (NVML idle and
# under load, sysfs), BAR1, the kernel module's flavour, the NCCL all-reduce over every pair
# and all GPUs (bus bandwidth, time) through the libnccl.so.2 found on the host (the
# nvidia-nccl-cu12 wheel torch installs), a forced failure (a real NCCL hang, then a wrong
# sum) caught and mapped to NCCL_P2P_DISABLE=1, symmetric memory's peer path per pair
# (cuMemCreate with a POSIX fd handle passed by SCM_RIGHTS; no multicast object is ever
# created) with a forced wrong landing and a forced hang mapped to
# VLLM_ALLREDUCE_USE_SYMM_MEM=0, the gpu-marked tests, and the collective
# test's cost (benchmarks/collective_cost.py). Everything lands in $OUT; a summary is
# printed last. Budget: under 5 minutes. Run from the repository root:
#   bash benchmarks/device/preflight.sh          (carry .whl/ when the image lacks wheels)
set -u
OUT=${OUT:-preflight-out}
mkdir -p "$OUT"
export NO_COLOR=1 PYTHONUNBUFFERED=1
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >"$OUT/pip.log" 2>&1
  export PYTHONPATH=/tmp/site:$PWD/src
else
  export PYTHONPATH=$PWD/src
fi
export BLACKWELL_DOCTOR_CACHE_DIR=$(mktemp -d)
BD=(timeout 120 python3 -m blackwell_doctor)
T0=$(date +%s)

{
  echo "# date: $(date -u +%FT%TZ)"
  nvidia-smi -L | sed -E 's/UUID: GPU-[0-9a-f-]+/UUID: GPU-redacted/'
  nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max --format=csv
  nvidia-smi -q -d MEMORY | grep -A3 -E 'BAR1|FB Memory'
  nvidia-smi topo -m
  head -1 /proc/driver/nvidia/version; echo "taint: $(cat /sys/module/nvidia/taint 2>&1)"
  modinfo -F license nvidia 2>&1 | head -1
  python3 --version
  python3 - <<'PY'
import importlib.util, pathlib
spec = importlib.util.find_spec("nvidia.nccl")
for loc in (spec.submodule_search_locations or []) if spec else []:
    print("nvidia-nccl wheel:", loc, sorted(p.name for p in (pathlib.Path(loc) / "lib").glob("*")))
from blackwell_doctor.collect.nccl import find_nccl_library
print("NCCL library used:", find_nccl_library())
PY
  python3 -m pip list 2>/dev/null | grep -iE '^(nvidia-nccl|torch|nvidia-ml-py|cuda-bindings|cupy) '
} >"$OUT/env.txt" 2>&1

# 1. Link, BAR1, module, the collective path and the forced failures, measured directly.
timeout 200 python3 - "$OUT" >"$OUT/measure.txt" 2>&1 <<'PY'
import json, sys, time
from pathlib import Path
import msgspec
from blackwell_doctor.collect.hostfs import HostFS
from blackwell_doctor.collect.nvml import RealNvml, collect_nvml
from blackwell_doctor.collect.pci import collect_pci
from blackwell_doctor.collect.platform import collect_platform
from blackwell_doctor.collect.probe.collective import run_collective, run_link_load
from blackwell_doctor.collect.probe.collective_protocol import TEST_FAULT_ENV
from blackwell_doctor.facts.document import decode_facts
from blackwell_doctor.ruledata.rules import load_rule_data
from blackwell_doctor.rules.collective import collective_allreduce

out = Path(sys.argv[1])
nvml = collect_nvml(RealNvml())
platform = collect_platform(HostFS(Path("/")), {})
pci = collect_pci(HostFS(Path("/")), platform.kernel_cmdline)
n = len(nvml.gpus)
started = time.monotonic(); load = run_link_load(n); load_s = time.monotonic() - started
started = time.monotonic(); coll = run_collective(n, run_timeout_s=30, timeout_s=120)
coll_s = time.monotonic() - started
forced = {}
for fault, deadline in (("hang", 10.0), ("wrong-sum", 30.0)):
    started = time.monotonic()
    f = run_collective(2, run_timeout_s=deadline, timeout_s=90, env={TEST_FAULT_ENV: fault}, ipc=False)
    forced[fault] = (f, time.monotonic() - started)
# Symmetric memory's peer path (cuMemCreate + POSIX fd over SCM_RIGHTS; never multicast),
# forced to land wrong, then to hang after the import (killed at its deadline).
for fault, deadline in (("symm-wrong", 30.0), ("symm-hang", 8.0)):
    started = time.monotonic()
    f = run_collective(2, run_timeout_s=deadline, timeout_s=90, env={TEST_FAULT_ENV: fault}, ipc=True, symm=True)
    forced[fault] = (f, time.monotonic() - started)
doc = {
    "nvml_gpus": [msgspec.to_builtins(g) for g in nvml.gpus],
    "module_flavour": msgspec.to_builtins(platform.nvidia_module_flavour),
    "pci_links": msgspec.to_builtins(pci) if not hasattr(pci, "reason") else pci.reason,
    "link_load": msgspec.to_builtins(load), "link_load_s": round(load_s, 3),
    "collective": msgspec.to_builtins(coll), "collective_s": round(coll_s, 3),
    "forced": {k: {"facts": msgspec.to_builtins(v[0]), "wall_s": round(v[1], 3)} for k, v in forced.items()},
}
(out / "preflight-measure.json").write_text(json.dumps(doc, indent=2))
print(f"GPUs: {n}")
for g in nvml.gpus:
    print(f"GPU{g.index} {g.name}: NVML link at collection {msgspec.to_builtins(g.pcie)}; BAR1 {g.bar1_total_bytes} B; memory {g.memory_total_bytes} B")
print("module flavour:", msgspec.to_builtins(platform.nvidia_module_flavour))
print(f"link under load ({load_s:.2f} s):", msgspec.to_builtins(load))
print(f"collective ({coll_s:.2f} s): NCCL {getattr(coll, 'nccl_version', coll)} from {getattr(coll, 'library', '')}")
for r in getattr(coll, "runs", []):
    print(f"  {r.path} GPUs {r.gpus} env={r.env}: correct={r.correct} failure={r.failure} time={r.time_s} s algbw={r.algbw_gbps} busbw={r.busbw_gbps} GB/s multicast={r.multicast}")
rules = load_rule_data()
host = decode_facts(Path("tests/fixtures/facts/h200x2-captured.json").read_bytes())
for fault, (f, wall) in forced.items():
    print(f"forced {fault} ({wall:.2f} s):")
    for r in getattr(f, "runs", []):
        print(f"  {r.path} GPUs {r.gpus} env={r.env}: correct={r.correct} failure={r.failure} busbw={r.busbw_gbps}")
    o = collective_allreduce(msgspec.structs.replace(host, collective=f), rules)
    cmds = rules.checks["collective.allreduce"].cases.get(o.case or "", None)
    print(f"  -> collective.allreduce {o.status.value}, case {o.case}: {cmds.commands[:3] if cmds else []}")
PY
measure_rc=$?

# 2. The CLI: check (the new families) and a forced hang seen end to end through check.
"${BD[@]}" collect --redact -o "$OUT/facts-redacted.json" >"$OUT/collect.log" 2>&1; collect_rc=$?
"${BD[@]}" check --facts "$OUT/facts-redacted.json" --select link,bar1,module,collective,memory >"$OUT/check.txt" 2>&1; check_rc=$?
"${BD[@]}" check --facts "$OUT/facts-redacted.json" --select link,bar1,module,collective,memory --format json >"$OUT/check.json" 2>/dev/null
BLACKWELL_DOCTOR_COLLECTIVE_TEST_FAULT=hang timeout 150 python3 -m blackwell_doctor check --select collective >"$OUT/check-forced-hang.txt" 2>&1; forced_check_rc=$?

# 3. The gpu-marked tests: this issue's first, then the rest within what is left.
timeout 150 python3 -m pytest -p no:cacheprovider -v -m gpu tests/test_preflight_gpu.py >"$OUT/pytest-gpu-preflight.log" 2>&1; gpu_rc=$?
LEFT=$(( 270 - ($(date +%s) - T0) - 40 ))
if [ "$LEFT" -gt 30 ]; then
  timeout "$LEFT" python3 -m pytest -p no:cacheprovider -q -m gpu --deselect tests/test_preflight_gpu.py >"$OUT/pytest-gpu-rest.log" 2>&1; rest_rc=$?
else
  echo "skipped: no time left" >"$OUT/pytest-gpu-rest.log"; rest_rc=skipped
fi

# 4. The collective test's cost on 2 GPUs (goal: under 3 s warm).
timeout 60 python3 benchmarks/collective_cost.py --gpus 2 --repeat 3 --json "$OUT/collective-cost.json" >"$OUT/collective-cost.txt" 2>&1; cost_rc=$?

echo "== summary ($(( $(date +%s) - T0 )) s)"
printf '%-32s %s\n' "measure (rc)" "$measure_rc" "collect --redact (rc)" "$collect_rc" \
  "check new families (rc)" "$check_rc" "check, forced hang (rc)" "$forced_check_rc" \
  "pytest -m gpu preflight" "rc=$gpu_rc: $(tail -1 "$OUT/pytest-gpu-preflight.log")" \
  "pytest -m gpu rest" "rc=$rest_rc: $(tail -1 "$OUT/pytest-gpu-rest.log")" \
  "collective cost (rc)" "$cost_rc"
sed 's/^/  /' "$OUT/measure.txt" | head -60
grep -E '^\s+\[(ok|warn|FAIL|skip|error)\]' "$OUT/check.txt" | sed 's/^/  check: /'
grep -E 'collective.allreduce|NCCL_P2P_DISABLE' "$OUT/check-forced-hang.txt" | head -4 | sed 's/^/  forced: /'
sed 's/^/  /' "$OUT/collective-cost.txt"
