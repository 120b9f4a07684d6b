#!/bin/sh
# blackwell-doctor recommend: vllm-upstream (docker.io/vllm/vllm-openai:latest, unpinned)
# tensor_parallel_size=1: the largest tensor-parallel size at which GptOssForCausalLM fits on 1x NVIDIA GB10 (model.fit: TP 1): 0.9 x 119.21 GiB unified memory (shared with the OS, which keeps 8.00 GiB) = 107.29 GiB usable - 60.71 GiB weights (60.71 GiB / 1) - 4.00 GiB runtime overhead = 42.58 GiB for the KV cache; KV 2 x 8 KV heads x 64 x 2 B x 18 layers = 36,864 B/token (+ 18 sliding layers, 128 tokens): 1,239,962 tokens, capped at max_position_embeddings 131,072; 9 sequence(s) of 131,072 tokens fit at once (4,836,556,800 B each: KV + state)
# note: docker.io/vllm/vllm-openai:latest is unpinned: pin the digest you reviewed in the catalogue
# note: vllm-upstream: not verified by blackwell-doctor (contents and digest unchecked)
#
# Host actions, in this order, before the launch below. They need root and some a
# reboot: this script never runs them. Verify each as shown, then re-run
# `blackwell-doctor check`.
# 1. Upgrade the NVIDIA driver (595 or newer, CUDA 13.2) (driver.version, driver.cuda_version)
#      sudo apt update && sudo apt full-upgrade
#      sudo reboot
#      nvidia-smi --query-gpu=driver_version --format=csv,noheader    # expect 595 or newer
#      verify: blackwell-doctor check --select driver.version --select driver.cuda_version
#
set -eu
# CUDA cannot be re-initialised in a forked worker; vLLM's multiprocessing workers must be spawned
export VLLM_WORKER_MULTIPROC_METHOD=spawn
# hardware work queues per device (CUDA's maximum), used with the SM 12.x runtime images (REFERENCE §5)
export CUDA_DEVICE_MAX_CONNECTIONS=32
# lets PyTorch's allocator grow segments instead of fragmenting (REFERENCE §5)
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
# 20 logical CPUs / tensor-parallel size 1
export OMP_NUM_THREADS=20
# from the runtime catalogue
export VLLM_FLASHINFER_MOE_BACKEND=throughput
docker run --detach --name blackwell-doctor-vllm --gpus all --ipc host --restart unless-stopped --publish 127.0.0.1:8000:8000 --mount type=bind,source=<examples>/models/gpt-oss-120b,target=/model,readonly --mount type=volume,source=blackwell-doctor-jit-vllm-upstream,target=/root/.cache --env VLLM_WORKER_MULTIPROC_METHOD --env CUDA_DEVICE_MAX_CONNECTIONS --env PYTORCH_CUDA_ALLOC_CONF --env OMP_NUM_THREADS --env VLLM_FLASHINFER_MOE_BACKEND --label io.github.blackwell-doctor.managed=true --label io.github.blackwell-doctor.runtime=vllm-upstream --label io.github.blackwell-doctor.spec=<hash> docker.io/vllm/vllm-openai:latest --model /model --served-model-name gpt-oss-120b --tensor-parallel-size 1 --moe-backend auto --max-model-len 131072 --gpu-memory-utilization 0.9 --host 0.0.0.0 --port 8000
# <examples> is the folder `blackwell-doctor examples` prints
rc=0
