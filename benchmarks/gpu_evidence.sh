#!/usr/bin/env bash
# Evidence on a real GPU host: the test suite (GPU tests included), `check` in every
# format, and a redacted `collect`. Writes into $OUT (or ./evidence-out) and prints a
# short table last. Run from the repository root with the package importable, e.g.
#   PYTHONPATH=src bash benchmarks/gpu_evidence.sh
# (On the device machine the wheels missing there are installed first; see
# benchmarks/evidence/README.md for the exact command.)
set -u
OUT=${OUT:-evidence-out}
mkdir -p "$OUT"
export NO_COLOR=1 PYTHONUNBUFFERED=1
BD=(python3 -m blackwell_doctor)

{
  echo "# date: $(date -u +%FT%TZ)"
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,compute_cap,pci.bus_id --format=csv
  nvidia-smi topo -m
  python3 --version
  python3 -m pip list 2>/dev/null | grep -iE '^(nvidia-ml-py|cuda-bindings|cuda-pathfinder|typer|rich|msgspec|packaging|pytest|hypothesis) '
} >"$OUT/env.txt" 2>&1

python3 -m pytest -p no:cacheprovider -q -rs 2>&1 | tail -25 >"$OUT/pytest-all.log"
python3 -m pytest -p no:cacheprovider -v -m gpu >"$OUT/pytest-gpu.log" 2>&1
gpu_rc=$?

# Cold probe cache first, so `check` below pays the NVRTC compile and later runs do not.
export BLACKWELL_DOCTOR_CACHE_DIR=$(mktemp -d)
{
  python3 benchmarks/probe_walltime.py --warm-runs 5
  for i in 1 2 3; do
    /usr/bin/time -f "check --format json (probes warm): %e s" "${BD[@]}" check --format json >/dev/null
  done
  for i in 1 2 3; do
    /usr/bin/time -f "check --no-probe --format json: %e s" "${BD[@]}" check --no-probe --format json >/dev/null
  done
} >"$OUT/walltime.txt" 2>&1

"${BD[@]}" check >"$OUT/check.txt" 2>&1; check_rc=$?
"${BD[@]}" check --format json >"$OUT/check.json"
"${BD[@]}" collect --redact -o "$OUT/facts-redacted.json"; collect_rc=$?
{
  "${BD[@]}" probe; echo "(exit $?)"; echo
  "${BD[@]}" probe --plan --smem-limit 101376; echo "(exit $?)"
} >"$OUT/probe.txt" 2>&1
"${BD[@]}" probe --format json >"$OUT/probe.json"; probe_rc=$?

echo
echo "== summary"
printf '%-34s %s\n' "GPU tests (pytest -m gpu)" "rc=$gpu_rc: $(tail -1 "$OUT/pytest-gpu.log")"
printf '%-34s %s\n' "full suite" "$(tail -1 "$OUT/pytest-all.log")"
printf '%-34s %s\n' "check exit code" "$check_rc"
printf '%-34s %s\n' "collect --redact exit code" "$collect_rc"
printf '%-34s %s\n' "probe exit code" "$probe_rc"
grep -E '^\s+\[(ok|warn|FAIL|skip|error)\]' "$OUT/check.txt" | awk '{printf "  %-8s %s\n", $1, $2}'
python3 - "$OUT/facts-redacted.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
c = d["cuda"]
for dev in c.get("devices", []):
    print(f"  cuda dev {dev['ordinal']}: cc={dev['compute_capability']} optin={dev['smem_per_block_optin']} "
          f"per_sm={dev['smem_per_sm']} reserved={dev['reserved_smem_per_block']} sms={dev['sm_count']}")
for p in d["nvml"].get("p2p", []):
    print(f"  p2p GPU{p['gpu_a']}-GPU{p['gpu_b']}: read={p['read']} write={p['write']} nvlink={p['nvlink']} atomics={p['atomics']}")
print("  driver", d["nvml"].get("driver_version"), "cuda", d["nvml"].get("cuda_driver_version"))
PY
grep -E "cold|warm median|K=64|check --" "$OUT/walltime.txt" | sed 's/^/  /'
grep -E "largest launch|opt-in shared" "$OUT/probe.txt" | sed 's/^/  /'
