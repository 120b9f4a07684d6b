#!/bin/sh
# blackwell-doctor recommend: vllm-upstream (docker.io/vllm/vllm-openai:latest, unpinned)
# tensor_parallel_size=4: the largest tensor-parallel size at which Qwen3_5MoeForConditionalGeneration fits on 4x NVIDIA RTX PRO 6000 Blackwell Workstation Edition (model.fit: TP 4): 0.9 x 95.59 GiB = 86.03 GiB usable - 52.59 GiB weights (210.36 GiB / 4) - 4.00 GiB runtime overhead - 0.02 GiB linear-attention state = 29.42 GiB for the KV cache; KV 2 x 1 KV heads x 256 x 2 B x 15 layers = 15,360 B/token: 2,056,713 tokens, capped at max_position_embeddings 262,144; 7 sequence(s) of 262,144 tokens fit at once (4,050,954,240 B each: KV + state)
# note: docker.io/vllm/vllm-openai:latest is unpinned: pin the digest you reviewed in the catalogue
# note: vllm-upstream: not verified by blackwell-doctor (contents and digest unchecked)
#
# Host actions, in this order, before the launch below. They need root and some a
# reboot: this script never runs them. Verify each as shown, then re-run
# `blackwell-doctor check`.
# 1. Serve this model where it fits, on the kernel path it needs (model.kernel_path)
#      verify: blackwell-doctor check --select model.kernel_path
#      verify: blackwell-doctor model <the model directory>    # the fit per tensor-parallel size, with its arithmetic
#
set -eu
# CUDA cannot be re-initialised in a forked worker; vLLM's multiprocessing workers must be spawned
export VLLM_WORKER_MULTIPROC_METHOD=spawn
# hardware work queues per device (CUDA's maximum), used with the SM 12.x runtime images (REFERENCE §5)
export CUDA_DEVICE_MAX_CONNECTIONS=32
# lets PyTorch's allocator grow segments instead of fragmenting (REFERENCE §5)
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
# 48 logical CPUs / tensor-parallel size 4
export OMP_NUM_THREADS=12
# from the runtime catalogue
export VLLM_FLASHINFER_MOE_BACKEND=throughput
docker run --detach --name blackwell-doctor-vllm --gpus all --ipc host --restart unless-stopped --publish 127.0.0.1:8000:8000 --mount type=bind,source=<examples>/models/qwen3.5-397b-a17b-nvfp4,target=/model,readonly --mount type=volume,source=blackwell-doctor-jit-vllm-upstream,target=/root/.cache --env VLLM_WORKER_MULTIPROC_METHOD --env CUDA_DEVICE_MAX_CONNECTIONS --env PYTORCH_CUDA_ALLOC_CONF --env OMP_NUM_THREADS --env VLLM_FLASHINFER_MOE_BACKEND --label io.github.blackwell-doctor.managed=true --label io.github.blackwell-doctor.runtime=vllm-upstream --label io.github.blackwell-doctor.spec=<hash> docker.io/vllm/vllm-openai:latest --model /model --served-model-name qwen3.5-397b-a17b-nvfp4 --tensor-parallel-size 4 --moe-backend flashinfer_cutlass --max-model-len 262144 --gpu-memory-utilization 0.9 --host 0.0.0.0 --port 8000
# <examples> is the folder `blackwell-doctor examples` prints
rc=0
