#!/bin/sh
# blackwell-doctor recommend: vllm-upstream (docker.io/vllm/vllm-openai:latest, unpinned)
# tensor_parallel_size=2: the largest tensor-parallel size at which Qwen3MoeForCausalLM fits on 2x NVIDIA H200 (model.fit: TP 2): 0.9 x 140.40 GiB = 126.36 GiB usable - 62.41 GiB weights (124.82 GiB / 2) - 4.00 GiB runtime overhead = 59.95 GiB for the KV cache; KV 2 x 2 KV heads x 128 x 2 B x 94 layers = 96,256 B/token: 668,734 tokens, capped at max_position_embeddings 40,960; 16 sequence(s) of 40,960 tokens fit at once (3,942,645,760 B each: KV + state)
# note: docker.io/vllm/vllm-openai:latest is unpinned: pin the digest you reviewed in the catalogue
# note: vllm-upstream: not verified by blackwell-doctor (contents and digest unchecked)
set -eu
# CUDA cannot be re-initialised in a forked worker; vLLM's multiprocessing workers must be spawned
export VLLM_WORKER_MULTIPROC_METHOD=spawn
# hardware work queues per device (CUDA's maximum), used with the SM 12.x runtime images (REFERENCE §5)
export CUDA_DEVICE_MAX_CONNECTIONS=32
# lets PyTorch's allocator grow segments instead of fragmenting (REFERENCE §5)
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
# 32 logical CPUs / tensor-parallel size 2
export OMP_NUM_THREADS=16
# from the runtime catalogue
export VLLM_FLASHINFER_MOE_BACKEND=throughput
docker run --detach --name blackwell-doctor-vllm --gpus all --ipc host --restart unless-stopped --publish 127.0.0.1:8000:8000 --mount type=bind,source=<examples>/models/qwen3-235b-a22b-fp4,target=/model,readonly --mount type=volume,source=blackwell-doctor-jit-vllm-upstream,target=/root/.cache --env VLLM_WORKER_MULTIPROC_METHOD --env CUDA_DEVICE_MAX_CONNECTIONS --env PYTORCH_CUDA_ALLOC_CONF --env OMP_NUM_THREADS --env VLLM_FLASHINFER_MOE_BACKEND --label io.github.blackwell-doctor.managed=true --label io.github.blackwell-doctor.runtime=vllm-upstream --label io.github.blackwell-doctor.spec=<hash> docker.io/vllm/vllm-openai:latest --model /model --served-model-name qwen3-235b-a22b-fp4 --tensor-parallel-size 2 --moe-backend auto --max-model-len 40960 --gpu-memory-utilization 0.9 --host 0.0.0.0 --port 8000
# <examples> is the folder `blackwell-doctor examples` prints
rc=0
