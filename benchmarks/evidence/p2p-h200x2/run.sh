#!/usr/bin/env bash
# Evidence for the P2P transfer test on a multi-GPU host. Run from the repository root with
# the package importable (PYTHONPATH=src, or installed); writes into $OUT (default ./p2p-out).
set -u
OUT=${OUT:-p2p-out}
mkdir -p "$OUT"
# Never use NVLink multicast on shared machines (the device tool's rule).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 NO_COLOR=1
export BLACKWELL_DOCTOR_CACHE_DIR=$(mktemp -d)  # cold NVRTC cache: the first pair compiles

{
  echo "# date: $(date -u +%FT%TZ)"
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,compute_cap,pci.bus_id --format=csv
  nvidia-smi topo -m
  nvidia-smi topo -p2p r
  python3 --version
  python3 -m pip list 2>/dev/null | grep -iE '^(cuda-bindings|torch|msgspec|pytest) '
  python3 -c 'import torch; print("torch sees", torch.cuda.device_count(), "GPUs")'
} >"$OUT/env.txt" 2>&1

# Ours next to the PyTorch reference, alternating, 3 runs.
timeout 300 python3 benchmarks/p2p_bandwidth.py --repeat 3 --json "$OUT/p2p-bandwidth.json" \
  >"$OUT/p2p-bandwidth.txt" 2>&1
echo "p2p_bandwidth rc=$?" >>"$OUT/p2p-bandwidth.txt"

# The P2P tests: the GPU ones (real hang in the driver, real crash, the check kernel) and the
# CPU ones (fake driver, fake children) on this machine too.
timeout 240 python3 -m pytest -p no:cacheprovider -v -rs --durations=8 tests/test_p2p_gpu.py \
  tests/test_p2p_child.py tests/test_p2p_runner.py tests/test_p2p_verdict.py \
  >"$OUT/pytest-p2p.log" 2>&1
echo "pytest rc=$?" >>"$OUT/pytest-p2p.log"

# The command a user runs (the CLI wiring is the lead's; recorded as found).
{
  /usr/bin/time -f "probe --p2p wall: %e s" timeout 120 python3 -m blackwell_doctor probe --p2p
  echo "(exit $?)"
} >"$OUT/probe-p2p.txt" 2>&1
timeout 120 python3 -m blackwell_doctor probe --p2p --format json >"$OUT/probe-p2p.json" 2>&1

tail -25 "$OUT/p2p-bandwidth.txt"
tail -8 "$OUT/pytest-p2p.log"
cat "$OUT/probe-p2p.txt"
