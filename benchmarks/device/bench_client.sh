#!/bin/sh
# Issue 35 item 6 on a many-core host (a 16-core H200 VM: the GPU is not used): bench's own
# client against benchmarks/bench_client.py's instant local server. No vLLM there (its CPU
# build is over the device tool's 64 MiB), so `vllm bench serve` is not run: the VM runs
# both side by side (docs/bench.md, "The client is never the bottleneck").
#
#   OUT=/tmp/out sh benchmarks/device/bench_client.sh      # ~5 minutes on 16 cores
#   PARTS="memory" OUT=/tmp/out sh benchmarks/device/bench_client.sh   # one part of them
#
# Writes under $OUT (PARTS: lateness memory streams, default all):
#   env.txt              CPUs, Python, load average
#   lateness-1000.txt    --trace at 1,000 requests/s, client processes auto, then one
#   memory.txt           bench's peak RSS replaying 10,000, 40,000 and 160,000 requests
#   streams.txt          --streams 1024 4096 (4 server processes; client processes auto)
# Needs bench's dependencies (aiohttp, msgspec, typer, rich, prometheus-client, ...):
# PYTHON names an interpreter that has them (default python3).
set -eu
OUT=${OUT:-bench-client-out}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export NO_COLOR=1 PYTHONUNBUFFERED=1
B="$PY benchmarks/bench_client.py --vllm-home /nonexistent"
{
    echo "cpus $(nproc); $($PY -V); load average $(cut -d' ' -f1-3 /proc/loadavg)"
    $PY -c 'import aiohttp, msgspec; print("aiohttp", aiohttp.__version__, "msgspec", msgspec.__version__)'
} >"$OUT/env.txt"
PARTS=${PARTS:-lateness memory streams}
case " $PARTS " in *" lateness "*)
    {
        $B --lateness 1000 --seconds 10
        echo
        $B --lateness 1000 --seconds 10 --client-processes 1
    } >"$OUT/lateness-1000.txt" 2>&1
esac
case " $PARTS " in *" memory "*)
    {
        $B --lateness 2000 --seconds 2 --memory 10000 40000 160000 --client-processes 4
        echo
        $B --lateness 1000 --seconds 2 --memory 10000 40000 160000 --client-processes 1
    } >"$OUT/memory.txt" 2>&1
esac
case " $PARTS " in *" streams "*)
    $B --streams 1024 4096 --repeat 3 --server-processes 4 >"$OUT/streams.txt" 2>&1
esac
cat "$OUT"/*.txt
