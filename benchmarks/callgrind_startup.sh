#!/usr/bin/env bash
# Start-up in instructions (valgrind's callgrind), which a loaded machine does not move:
# issue 36's start-up rows for each source tree given, against `python -c "import typer"`.
# Each command runs twice first (caches written, byte-code compiled), then once under
# callgrind with PYTHONHASHSEED=0; each tree has a cache folder of its own.
#   bash benchmarks/callgrind_startup.sh main=/tmp/main/src this=src
# Prints one line per tree and command: instructions and the ratio to the floor's.
set -euo pipefail
unset PYTHONDONTWRITEBYTECODE
PY=${PYTHON:-python3}
REPO=$(cd "$(dirname "$0")/.." && pwd)
LOG=$REPO/tests/fixtures/logs/composed-vllm-marlin-auto.log
LOG1M=${LOG1M:-/tmp/scan1m.log}
if [ ! -s "$LOG1M" ]; then
  PYTHONPATH=$REPO/src "$PY" "$REPO/benchmarks/scan_logs.py" --first-mib "$LOG1M"
fi
count() {  # instructions of one run of "$@" (after two warm-up runs)
  "$@" >/dev/null 2>&1 || true; "$@" >/dev/null 2>&1 || true
  local out; out=$(mktemp)
  PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file="$out" "$@" 2>&1 >/dev/null \
    | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
  rm -f "$out"
}
cd "$REPO"
floor=$(count "$PY" -c "import typer")
echo "floor python -c 'import typer': $floor instructions"
printf '%-8s %-12s %14s %7s\n' tree command instructions ratio
for spec in "$@"; do
  label=${spec%%=*}; src=$(cd "${spec#*=}" && pwd)
  export XDG_CACHE_HOME; XDG_CACHE_HOME=$(mktemp -d)
  export PYTHONPATH=$src  # not through env(1): callgrind would count env, not Python
  run=("$PY" -m blackwell_doctor)
  for name in check-facts scan scan1m fleet; do
    case $name in
      check-facts) args=(check --facts tests/fixtures/facts/b200-x8.json --format json) ;;
      scan) args=(scan-logs "$LOG" --format json) ;;
      scan1m) args=(scan-logs "$LOG1M" --format json) ;;
      fleet) args=(fleet tests/fixtures/facts --format json) ;;
    esac
    n=$(count "${run[@]}" "${args[@]}")
    printf '%-8s %-12s %14s %6.2fx\n' "$label" "$name" "$n" "$(awk "BEGIN{print $n / $floor}")"
  done
  rm -rf "$XDG_CACHE_HOME"
  unset PYTHONPATH
done
