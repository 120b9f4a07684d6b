#!/usr/bin/env bash
# `blackwell-doctor audit` on the device image: its real torch and cupy (and whatever GPU
# packages it has) judged against its own GPU (H100/H200, sm_90: expected native), then the
# same environment against reconstructed SM 12.0 and SM 12.1 facts (tests/fixtures/facts:
# sm120-driver580.json, dgx-spark-gb10.json); the speed benchmark (cold and warm scan, the
# CLI, cuobjdump --list-elf/--list-ptx over the same files) with the cuobjdump agreement
# count. Writes under $OUT (default ./audit-out). Run from the repository root:
#
#   bash benchmarks/device/audit.sh
#
# Wheels the image lacks (msgspec, typer, pyelftools, ...) are installed from .whl/ when it
# is there, into /tmp/bd-site (PYTHONPATH). The audited interpreter is the image's own
# python3, run by the audit as a child with -I, so /tmp/bd-site is never part of what is
# audited.
set -u
OUT=${OUT:-audit-out}
mkdir -p "$OUT"
export NO_COLOR=1 PYTHONUNBUFFERED=1
PY=${PYTHON:-$(command -v python3)}
if ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/bd-site .whl/*.whl
    export PYTHONPATH=/tmp/bd-site:$PWD/src
else
    export PYTHONPATH=$PWD/src
fi
BD=("$PY" -m blackwell_doctor)
CUOBJDUMP=${CUOBJDUMP:-$(command -v cuobjdump || true)}
if [ -z "$CUOBJDUMP" ]; then
    for c in /usr/local/cuda/bin/cuobjdump \
        "$("$PY" -I -c 'import importlib.util as u, os; s = u.find_spec("triton"); print(os.path.join(os.path.dirname(s.origin), "backends/nvidia/bin/cuobjdump") if s else "")' 2>/dev/null)"; do
        [ -n "$c" ] && [ -x "$c" ] && CUOBJDUMP=$c && break
    done
fi

{
    echo "# date: $(date -u +%FT%TZ)"
    nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv
    "$PY" --version
    echo "cuobjdump: ${CUOBJDUMP:-none} $("${CUOBJDUMP:-true}" --version 2>/dev/null | tail -1)"
    "$PY" -m pip list 2>/dev/null | grep -iE '^(torch|cupy|triton|vllm|flashinfer|nvidia-|xformers|flash.attn|sgl)'
} >"$OUT/env.txt" 2>&1

# First, while the image's files are not yet in the page cache: the benchmark.
if [ -n "$CUOBJDUMP" ]; then
    "$PY" benchmarks/audit_speed.py --python "$PY" --cuobjdump "$CUOBJDUMP" \
        --json "$OUT/audit-speed.json" >"$OUT/audit-speed.log" 2>&1
else
    "$PY" benchmarks/audit_speed.py --python "$PY" --no-oracle \
        --json "$OUT/audit-speed.json" >"$OUT/audit-speed.log" 2>&1
fi
speed_rc=$?

"${BD[@]}" audit --python "$PY" -v >"$OUT/audit-live.txt" 2>&1
live_rc=$?
"${BD[@]}" audit --python "$PY" -f json --embed-facts -o "$OUT/audit-live.json" 2>/dev/null
for fx in sm120-driver580 dgx-spark-gb10; do
    "${BD[@]}" audit --python "$PY" --facts "tests/fixtures/facts/$fx.json" -v \
        >"$OUT/audit-$fx.txt" 2>&1
    echo "exit $?" >>"$OUT/audit-$fx.txt"
    "${BD[@]}" audit --python "$PY" --facts "tests/fixtures/facts/$fx.json" -f json \
        -o "$OUT/audit-$fx.json" 2>/dev/null
done
"${BD[@]}" collect --stack --python "$PY" --no-probe --redact -o "$OUT/facts-stack.json" 2>/dev/null
"${BD[@]}" recommend --facts "$OUT/facts-stack.json" >"$OUT/recommend-live.md" 2>&1

echo "== audit on the device (exit codes: live $live_rc, benchmark $speed_rc)"
cat "$OUT/audit-speed.json" 2>/dev/null || tail -5 "$OUT/audit-speed.log"
for f in "$OUT"/audit-live.json "$OUT"/audit-sm120-driver580.json "$OUT"/audit-dgx-spark-gb10.json; do
    "$PY" - "$f" <<'PYEOF'
import json, sys
doc = json.load(open(sys.argv[1]))
print(sys.argv[1].rsplit("/", 1)[-1], "exit", doc.get("exit_code"))
for r in doc["results"]:
    print(f"  {r['status']:5} {r['id']}: {r['summary'][:220]}")
PYEOF
done
