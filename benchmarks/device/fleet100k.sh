#!/usr/bin/env bash
# Issue 36: `fleet` of 1,000 / 10,000 / 100,000 nodes whose every node differs
# (benchmarks/fleet_varied.py), on the device's 16 CPUs (quiet, unlike the shared 2-core VM):
# per node in-process and the whole command against the msgspec decode floor, the peak RSS,
# linear or not. Run from the repository root (carry .whl: msgspec, typer, hyperscan...):
#   OUT=$OUT bash benchmarks/device/fleet100k.sh
set -u
OUT=${OUT:-fleet100k-out}
ROUNDS=${ROUNDS:-3}
mkdir -p "$OUT"
export NO_COLOR=1 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >"$OUT/pip.log" 2>&1
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j 0 src /tmp/site >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/src XDG_CACHE_HOME=$(mktemp -d)
{
  echo "# date: $(date -u +%FT%TZ) commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  python3 --version; nproc; cat /proc/loadavg; free -g | head -2
} >"$OUT/env.txt" 2>&1
python3 benchmarks/fleet_varied.py measure --nodes 1000 10000 100000 --rounds "$ROUNDS" \
  --full-rounds-up-to 10000 --tree main=src --cache /tmp/fleet-varied \
  --json "$OUT/fleet100k.json" 2>&1 | tee "$OUT/fleet100k.txt"
du -sh /tmp/fleet-varied/seed36/* >>"$OUT/fleet100k.txt" 2>&1
