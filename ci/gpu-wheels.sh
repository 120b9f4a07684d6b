#!/bin/sh
# REAL GPU wheels from the package registry for the `audit` tests (tests/test_audit_real.py):
# their shared objects are what `blackwell-doctor audit` reads, and cuobjdump (NVIDIA's own
# wheel) is the oracle of the SASS/PTX target lists. No GPU needed.
#
#   sh ci/gpu-wheels.sh install     # once per machine, cached (below); prints nothing else
#   sh ci/gpu-wheels.sh home        # the cache directory (the tests read it from
#                                   # BLACKWELL_DOCTOR_TEST_GPU_WHEELS)
#
# Each wheel is fetched with `pip download --no-deps` (exact versions, so the cache key is
# stable) and unpacked as a site-packages tree under $HOME_DIR/site: the same layout an
# installed environment has, .dist-info included, so the audit's inventory reads it as it
# would read a venv. The cache survives between CI runs ($BD_GPU_WHEELS_HOME, default
# ${XDG_CACHE_HOME:-$HOME/.cache}/blackwell-doctor-ci/gpu-wheels-<key>), is guarded by flock
# (several checkouts may run CI at once) and marked complete only at its end.
set -eu
# nvidia-nccl-cu12: libnccl carries SASS for sm_50..sm_120 and PTX; triton: its bundled
# ptxas (CUDA 12.8 in 3.3.1: it targets sm_120a but refuses sm_121a) and libtriton;
# nvidia-cuda-cuobjdump: the oracle; flashinfer-python without its -cubin/-jit-cache (a JIT
# at first start); nvidia-cufft (CUDA 13's cuFFT 12.0: 214 MB, its kernels in fatbins it
# keeps in .ldata and loads itself, which cuobjdump does not list) and nvidia-cufile (five
# small kernels as SASS for sm_75..sm_86 and PTX: a brief JIT on later GPUs), both as the
# torch 2.11.0+cu130 environment installs them.
WHEELS="nvidia-nccl-cu12==2.27.7 triton==3.3.1 nvidia-cuda-cuobjdump==13.5.37 \
flashinfer-python==0.6.11 nvidia-cufft==12.0.0.61 nvidia-cufile==1.15.1.6"
KEY=3
HOME_DIR=${BD_GPU_WHEELS_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/blackwell-doctor-ci/gpu-wheels-$KEY}

install() {
    mkdir -p "$(dirname "$HOME_DIR")"
    exec 9>"$HOME_DIR.lock"
    flock 9
    if [ -f "$HOME_DIR/.complete" ]; then
        echo "gpu wheels: cached in $HOME_DIR"
        return 0
    fi
    rm -rf "$HOME_DIR"
    mkdir -p "$HOME_DIR/wheels" "$HOME_DIR/site"
    # shellcheck disable=SC2086
    python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
        --python-version 3.11 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
        -d "$HOME_DIR/wheels" $WHEELS
    for w in "$HOME_DIR"/wheels/*.whl; do
        python3 -m zipfile -e "$w" "$HOME_DIR/site"
    done
    chmod +x "$HOME_DIR"/site/triton/backends/nvidia/bin/* "$HOME_DIR"/site/nvidia/*/bin/* 2>/dev/null || true
    touch "$HOME_DIR/.complete"
    echo "gpu wheels: installed in $HOME_DIR"
}

case ${1:-} in
install) install ;;
home) echo "$HOME_DIR" ;;
*) echo "usage: $0 install|home" >&2; exit 2 ;;
esac
