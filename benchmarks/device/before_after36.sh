#!/usr/bin/env bash
# Issue 36 on one GPU host, this tree against a base tree, in one run: `check --format json`
# on GPU 0 (tile probes on) alternating base/new 11 times after a warm-up of each (the
# medians), then the fleet of varied nodes (benchmarks/fleet_varied.py measure, 1,000 and
# 10,000 nodes, 3 interleaved rounds, both trees). Run from the repository root:
#   mkdir -p .base && git archive BASE_COMMIT src checks examples kernels_probe | tar -x -C .base
#   OUT=$OUT bash benchmarks/device/before_after36.sh          (carry .whl and .base)
set -u
OUT=${OUT:-before-after36-out}
mkdir -p $OUT/d2
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $OUT/d2/pip.log 2>&1
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j 0 src .base/src /tmp/site >/dev/null 2>&1
export XDG_CACHE_HOME=$(mktemp -d) NO_COLOR=1
# check on GPU 0 with probes: base and new alternating, 11 runs each after a warm-up
for t in base new; do PYTHONPATH=/tmp/site:$( [ $t = base ] && echo $PWD/.base/src || echo $PWD/src ) CUDA_VISIBLE_DEVICES=0 python3 -m blackwell_doctor check --format json >/dev/null 2>&1; done
for i in $(seq 11); do for t in base new; do
  s=$(date +%s.%N); PYTHONPATH=/tmp/site:$( [ $t = base ] && echo $PWD/.base/src || echo $PWD/src ) CUDA_VISIBLE_DEVICES=0 python3 -m blackwell_doctor check --format json >/dev/null 2>&1; e=$(date +%s.%N)
  echo "$t $(awk "BEGIN{printf \"%.3f\", $e-$s}")" >> $OUT/d2/check1.txt; done; done
for t in base new; do echo "check1 $t median $(grep "^$t " $OUT/d2/check1.txt | cut -d' ' -f2 | sort -n | sed -n 6p)"; done
PYTHONPATH=/tmp/site:$PWD/src timeout 480 python3 benchmarks/fleet_varied.py measure --nodes 1000 10000 --rounds 3 --tree base=.base/src --tree new=src --cache /tmp/fleet-varied --json $OUT/d2/fleet.json > $OUT/d2/fleet.txt 2>&1
tail -30 $OUT/d2/fleet.txt
