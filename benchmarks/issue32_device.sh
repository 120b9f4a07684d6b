#!/usr/bin/env bash
# Issue 32 on a real GPU host (2 GPUs for the pre-flight selection): GPU tests, the
# selection's wall time against the full check, the whole audit command on the host's own
# Python (torch, triton: its ptxas runs isolated), and a redacted facts capture. Writes
# into $OUT; prints a short table last. From the repository root, package importable:
#   PYTHONPATH=/tmp/site:$PWD/src bash benchmarks/issue32_device.sh
set -u
OUT=${OUT:-evidence-out}
mkdir -p "$OUT"
export NO_COLOR=1 PYTHONUNBUFFERED=1
BD=(python3 -m blackwell_doctor)
t0=$(date +%s)
{
  echo "# date: $(date -u +%FT%TZ)"
  nvidia-smi -L | sed -E 's/UUID: [^)]*/UUID: <redacted>/'
  nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv
  python3 --version
  python3 -m pip list 2>/dev/null | grep -iE '^(nvidia-ml-py|cuda-bindings|typer|msgspec|packaging|pytest|torch|triton) '
} >"$OUT/env.txt" 2>&1
python3 -m pytest -p no:cacheprovider -v -rs -m gpu tests >"$OUT/pytest-gpu.log" 2>&1
gpu_rc=$?
python3 benchmarks/check_select.py --rounds 5 --json "$OUT/check-select.json" >"$OUT/check-select.txt" 2>&1
sel_rc=$?
{
  HF_TOKEN=hf_devicesecretdevicesecret1234 "${BD[@]}" audit --python "$(command -v python3)" --format json -o /tmp/audit.json; echo "audit rc=$?"
  for i in 1 2 3 4; do /usr/bin/time -f "audit --python python3 (whole command, run $i): %e s" "${BD[@]}" audit --python "$(command -v python3)" --format json >/dev/null; done
  python3 - <<'PY'
import json
d = json.load(open("/tmp/audit.json"))
for r in d["results"]:
    print(r["id"], r["status"], r["summary"][:150])
PY
} >"$OUT/audit.txt" 2>&1
"${BD[@]}" collect --redact -o "$OUT/facts-redacted.json" >/dev/null 2>"$OUT/collect.log"; col_rc=$?
{
  echo "== summary ($(( $(date +%s) - t0 )) s)"
  echo "pytest -m gpu: rc=$gpu_rc: $(tail -1 "$OUT/pytest-gpu.log")"
  echo "check_select: rc=$sel_rc"; tail -12 "$OUT/check-select.txt"
  grep -E "rc=|whole command" "$OUT/audit.txt"
  echo "collect --redact rc=$col_rc"
} | tee "$OUT/summary.txt"
