#!/bin/sh
# Regenerate checks/log_vocabulary.toml from its pinned sources (tools/logvocab/fatal.py).
#   sh tools/logvocab/regenerate.sh [WORKDIR]     # needs PyPI and GitHub; ~2.6 GB of wheels
# The versions below are the pins recorded in the data file; change them here to move a pin.
set -eu
cd "$(dirname "$0")/../.."
W=${1:-${TMPDIR:-/tmp}/logvocab-sources}
PY=${PYTHON:-python3}
mkdir -p "$W"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d "$W" \
    nvidia-nccl-cu12==2.27.7 triton==3.3.1 nvidia-cublas-cu12==12.9.3.13 \
    nvidia-cudnn-cu12==9.28.0.42 nvidia-cusparse-cu12==12.5.10.65 nvidia-cufft-cu12==11.4.1.4 \
    nvidia-curand-cu12==10.3.10.19 nvidia-cusolver-cu12==11.7.5.82
[ -d "$W/nccl" ] || git clone -q --filter=blob:none https://github.com/NVIDIA/nccl "$W/nccl"
[ -d "$W/cudnn-frontend" ] || git clone -q --filter=blob:none https://github.com/NVIDIA/cudnn-frontend "$W/cudnn-frontend"
# cuda-bindings (cudaError_t, CUresult, nvrtcResult) is the installed one: its version is
# recorded, and must equal the pin (pyproject's cuda-python; the dev venv has 13.4.4).
PYTHONPATH=src:. "$PY" tools/logvocab/fatal.py \
    --command "sh tools/logvocab/regenerate.sh   (pip download + git clone of the pins, then fatal.py; cuda-bindings==13.4.4 installed)" \
    --libcuda-json tools/logvocab/sources/libcuda-580.159.04.json \
    --nccl-wheel "$W"/nvidia_nccl_cu12-2.27.7-*.whl --nccl-repo "$W/nccl" --nccl-ref v2.30.7-1 \
    --cublas-wheel "$W"/nvidia_cublas_cu12-12.9.3.13-*.whl \
    --cudnn-wheel "$W"/nvidia_cudnn_cu12-9.28.0.42-*.whl \
    --cusparse-wheel "$W"/nvidia_cusparse_cu12-12.5.10.65-*.whl \
    --cufft-wheel "$W"/nvidia_cufft_cu12-11.4.1.4-*.whl \
    --curand-wheel "$W"/nvidia_curand_cu12-10.3.10.19-*.whl \
    --cusolver-wheel "$W"/nvidia_cusolver_cu12-11.7.5.82-*.whl \
    --cudnn-frontend-repo "$W/cudnn-frontend" --cudnn-frontend-refs v1.4.0,v1.23.0 \
    --triton-wheel "$W"/triton-3.3.1-*.whl \
    --xid-csv tools/logvocab/sources/NVSentinel-6f8b0fcfa8e5-xiderrorsmapping.csv \
    --xid-pinned "NVIDIA/NVSentinel@6f8b0fcfa8e502bdda78fabf96facef729a9285b:distros/kubernetes/nvsentinel/charts/gpu-health-monitor/xiderrorsmapping.csv" \
    --out checks/log_vocabulary.toml
