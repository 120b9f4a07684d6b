"""The runtimes' wordings as their source code prints them (issue 22), through every way a
log arrives: a plain file, Docker's json-file, journald's ``-o json`` (MESSAGE a string or
an array of byte values) and ``-o export`` (text and binary MESSAGE fields), a directory
and standard input; and with each matching engine.

Every line in WORDINGS is RENDERED FROM SOURCE: the format string of the file named beside
it, filled with plausible values inside the runtime's own log prefix. None is a real field
log (those are under tests/fixtures/logs, README there)."""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from blackwell_doctor.collect.logs import sources
from blackwell_doctor.collect.logs.scan import scan_sources
from blackwell_doctor.facts.document import LogFacts
from blackwell_doctor.rules.logs import judge_findings

# (signature, judged severity, the rendered line, "rendered from" repo file@commit)
WORDINGS: list[tuple[str, str, str, str]] = [
    (
        "vllm.custom_allreduce_no_p2p", "warn",
        "(VllmWorker rank=1 pid=1410768) WARNING 05-02 07:54:19 [custom_all_reduce.py:136] "
        "Custom allreduce is disabled because your platform lacks GPU P2P capability or P2P "
        "test failed. To silence this warning, specify disable_custom_all_reduce=True explicitly.",
        "vllm-project/vllm vllm/distributed/device_communicators/custom_all_reduce.py@0ad80649d366",
    ),
    (
        "vllm.custom_allreduce_no_p2p", "warn",
        "[2026-03-03 11:06:07 TP0] Custom allreduce is disabled because your platform lacks GPU "
        "P2P capability or P2P test failed. To silence this warning, specify "
        "disable_custom_all_reduce=True explicitly.",
        "sgl-project/sglang python/sglang/srt/distributed/device_communicators/"
        "custom_all_reduce.py@263bc85d64ba",
    ),
    (
        "vllm.custom_allreduce_no_p2p", "warn",
        "[2026-03-03 11:06:07 TP1] CustomAllReduceV2 is disabled because your platform lacks GPU "
        "P2P capability or P2P test failed. To silence this warning, specify "
        "disable_custom_all_reduce=True explicitly.",
        "sgl-project/sglang python/sglang/srt/distributed/device_communicators/"
        "custom_all_reduce_utils.py@0cd72ba41d48 "
        "(cls_name from custom_all_reduce_v2.py@50e143a67729)",
    ),
    (
        "vllm.custom_allreduce_pcie_gt2", "info",
        "(VllmWorkerProcess pid=180) WARNING 03-19 08:09:03 custom_all_reduce.py:134] Custom "
        "allreduce is disabled because it's not supported on more than two PCIe-only GPUs. To "
        "silence this warning, specify disable_custom_all_reduce=True explicitly.",
        "vllm-project/vllm vllm/distributed/device_communicators/custom_all_reduce.py@0ad80649d366",
    ),
    (
        "vllm.custom_allreduce_pcie_gt2", "info",
        "[2026-03-03 11:06:07 TP2] CustomAllReduceV2 is disabled because it's not supported on "
        "more than two PCIe-only GPUs. To silence this warning, specify "
        "disable_custom_all_reduce=True explicitly.",
        "sgl-project/sglang python/sglang/srt/distributed/device_communicators/"
        "custom_all_reduce_utils.py@0cd72ba41d48",
    ),
    (
        "trtllm.peer_access_unavailable", "warn",
        "[TensorRT-LLM][INFO] cudaDeviceCanAccessPeer failed for device: 0 peerDevice: 1",
        "NVIDIA/TensorRT-LLM cpp/tensorrt_llm/runtime/ipcUtils.cpp@03961722f652 (TLLM_LOG_INFO)",
    ),
    # LMDeploy TurboMind (its logger's "[TM][LEVEL] " prefix)
    (
        "trtllm.peer_access_unavailable", "warn",
        "[TM][WARNING] Device 0 peer access Device 1 is not available.",
        "InternLM/lmdeploy src/turbomind/utils/allocator.h@a5e238317ddd (v0.5.2.post1, "
        "TM_LOG_WARNING)",
    ),
    (
        "trtllm.peer_access_unavailable", "warn",
        "[TM][WARNING] Devicle 1 peer access Device 0 is not available.",
        "InternLM/lmdeploy src/turbomind/utils/allocator.h@64eb6d3825b0 (v0.8.0, TM_LOG_WARNING)",
    ),
    (
        "turbomind.gemm_no_kernel", "fail",
        "No feasible kernel found for the problem.",
        "InternLM/lmdeploy src/turbomind/kernels/gemm/gemm.cu@962e76070b5a (v0.6.2, fprintf)",
    ),
    (
        "turbomind.gemm_no_kernel", "fail",
        "[TM][FATAL] turbomind/kernels/gemm/gemm.cu(327): Check failed: 0 No feasible kernel found "
        "for the problem: sm120_bf16_u4g128_bf16_tnn ",
        "InternLM/lmdeploy src/turbomind/kernels/gemm/gemm.cu@693c5b9448c9 (v0.10.0, TM_CHECK)",
    ),
    (
        "turbomind.gemm_no_kernel", "fail",
        "[TM][FATAL][0821.18:50:11.402113][gemm.cu:341] No feasible kernel found for the problem: "
        "sm120_bf16_e4m3g128_bf16_tnn",
        "InternLM/lmdeploy src/turbomind/kernels/gemm/gemm.cu@1263d5cd889b (TM_LOG_FATAL, "
        "prefix from src/turbomind/core/logger.cc)",
    ),
    # NCCL (src/include/debug.h / src/debug.cc: "host:pid:tid [dev] NCCL INFO|WARN ...";
    # from v2.30 a WARN also names "file:line (function)")
    (
        "nccl.p2p_disabled", "warn",
        "node1:3120:3120 [0] NCCL INFO P2P is disabled between connected GPUs 1 and 0. You can "
        "repress this message with NCCL_IGNORE_DISABLED_P2P=1.",
        "NVIDIA/nccl src/graph/paths.cc@5067397c2676 (ncclTopoCheckP2p, INFO)",
    ),
    (
        "nccl.p2p_disabled", "warn",
        "node1:3120:3120 [1] NCCL INFO Could not enable P2P between dev 1(=41000) and dev 0(=1000)",
        "NVIDIA/nccl src/transport/p2p.cc@5067397c2676 (p2pCanConnect, INFO)",
    ),
    (
        "nccl.p2p_disabled", "warn",
        "node1:3120:3120 [1] NCCL INFO peer query failed between dev 1(=41000) and dev 0(=1000)",
        "NVIDIA/nccl src/transport/p2p.cc@5067397c2676 (p2pCanConnect, INFO)",
    ),
    (
        "nccl.p2p_disabled", "warn",
        "node1:3120:3120 [0] NCCL INFO P2P not supported between GPU0 and GPU1",
        "NVIDIA/nccl src/allocator.cc@5067397c2676 (ncclCuMemAlloc, INFO(NCCL_ALLOC))",
    ),
    (
        "nccl.p2p_disabled_nvlink", "fail",
        "node1:3120:3120 [0] graph/paths.cc:396 (ncclTopoCheckP2p) NCCL WARN P2P is disabled "
        "between NVLINK connected GPUs 0 and 1. This should not be the case given their "
        "connectivity, and is probably due to a hardware issue. If you still want to proceed, you "
        "can set NCCL_IGNORE_DISABLED_P2P=1.",
        "NVIDIA/nccl src/graph/paths.cc@5067397c2676 (WARN, v2.30 prefix from src/debug.cc)",
    ),
    (
        "nccl.peer_access_failed", "fail",
        "node1:3120:3120 [0] NCCL WARN failed to peer with device 1(=41000): 711 peer mapping "
        "resources exhausted",
        "NVIDIA/nccl src/transport/p2p.cc@56a0c2299d0f (p2pMap, WARN)",
    ),
    (
        "cuda.peer_access_unsupported", "fail",
        "node1:3120:3120 [0] NCCL WARN failed to peer with device 1(=41000): 217 peer access is "
        "not supported between these two devices",
        "NVIDIA/nccl src/transport/p2p.cc@56a0c2299d0f (p2pMap, WARN; the CUDA refusal's own "
        "entry)",
    ),
    (
        "nccl.max_shared_mem_exceeds", "fail",
        "node1:3120:3120 [0] NCCL INFO ncclMaxSharedMem 106496 exceeds device/fn maxSharedMem "
        "101376",
        "NVIDIA/nccl src/enqueue.cc@80f6bda4378b (v2.25.1-1, INFO)",
    ),
    (
        "nccl.max_shared_mem_exceeds", "fail",
        "node1:3120:3120 [0] NCCL WARN cudaArch 1200 ncclMaxSharedMem 106496 exceeds device/fn "
        "maxSharedMem 101376",
        "NVIDIA/nccl src/enqueue.cc@72d2432094d6 (v2.27.3-1, WARN)",
    ),
    (
        "nccl.max_shared_mem_exceeds", "fail",
        "node1:3120:3120 [0] enqueue.cc:81 (ncclInitKernelsForDevice) NCCL WARN cudaArch 1200 "
        "dynamic smem 106496 exceeds device/fn maxSharedMem 101376",
        "NVIDIA/nccl src/enqueue.cc@5067397c2676 (WARN, v2.30 prefix from src/debug.cc)",
    ),
    (
        "trtllm.unsupported_architecture", "fail",
        "[TensorRT-LLM][ERROR] Assertion failed: Unsupported architecture "
        "(/src/tensorrt_llm/cpp/tensorrt_llm/kernels/contextFusedMultiHeadAttention/"
        "fmhaRunner.cpp:85)",
        "NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/contextFusedMultiHeadAttention/"
        "fmhaRunner.cpp@a98a9061d72f (TLLM_CHECK_WITH_INFO)",
    ),
    (
        "trtllm.unsupported_architecture", "fail",
        "RuntimeError: [TensorRT LLM Error][CutlassFp4GemmRunner][GEMM Dispatch] Arch "
        "unsupported for CUTLASS FP4 GEMM",
        "NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/cutlass_kernels/fp4_gemm/"
        "fp4_gemm_template.h@024997657505 (dispatchToArch)",
    ),
    (
        "llamacpp.no_device_code", "fail",
        "/app/ggml/src/ggml-cuda/mmq.cuh:3884: ERROR: CUDA kernel mul_mat_q has no device code "
        "compatible with CUDA arch 890. ggml-cuda.cu was compiled for: 890",
        "ggml-org/llama.cpp ggml/src/ggml-cuda/common.cuh (no_device_code, since PR #5088)",
    ),
    (
        "vllm.default_moe_config", "warn",
        "[2025-11-01 10:00:00 TP0] Using default MoE kernel config. Performance might be "
        "sub-optimal! Config file not found at /sgl-workspace/sglang/python/sglang/srt/layers/moe/"
        "fused_moe_triton/configs/triton_3_4_0/E=128,N=768,device_name=NVIDIA_GeForce_RTX_5090.json",
        "sgl-project/sglang python/sglang/srt/layers/moe/fused_moe_triton/"
        "fused_moe_triton_config.py",
    ),
    # Ollama (Go log/slog text handler: time=... level=... source=file:line msg=... key=value)
    (
        "runtime.engine_died", "fail",
        'time=2025-05-30T22:18:02.114+08:00 level=ERROR source=sched.go:489 msg="error loading '
        'llama server" error="llama runner process has terminated: exit status 2"',
        "ollama/ollama llm/server.go@5f57b0ef4268 (v0.9.0, fmt.Errorf) logged by "
        "server/sched.go@5f57b0ef4268 (slog.Error)",
    ),
    (
        "runtime.engine_died", "fail",
        'time=2026-08-21T18:50:11.402-07:00 level=ERROR source=sched.go:734 msg="error loading '
        'llama server" error="llama-server process has terminated: exit status 1: '
        'ggml_cuda_init: failed to initialize CUDA: invalid device ordinal"',
        "ollama/ollama llm/llama_server.go@fb30760996871 (fmt.Errorf) logged by "
        "server/sched.go@fb30760996871 (slog.Error)",
    ),
    (
        "ollama.gpu_not_used", "warn",
        'time=2025-05-30T22:17:28.371+08:00 level=INFO source=gpu.go:377 msg="no compatible '
        'GPUs were discovered"',
        "ollama/ollama discover/gpu.go@5f57b0ef4268 (v0.9.0, slog.Info)",
    ),
    (
        "ollama.gpu_not_used", "warn",
        'time=2025-05-30T22:17:28.371+08:00 level=INFO source=gpu.go:303 msg="[0] CUDA GPU is too '
        'old. Compute Capability detected: 3.0"',
        "ollama/ollama discover/gpu.go@5f57b0ef4268 (v0.9.0, slog.Info(fmt.Sprintf))",
    ),
    (
        "ollama.gpu_not_used", "warn",
        "time=2026-08-21T18:50:09.120-07:00 level=INFO source=llama_server.go:299 "
        'msg="skipping CUDA device \u2014 compute capability not in compiled architectures" '
        'device="NVIDIA GeForce RTX 5090" cc=1200 archs="[750 800 860 890 900]" '
        "libDirs=[/usr/lib/ollama/cuda_v12]",
        "ollama/ollama discover/llama_server.go@fb30760996871 (slog.Info)",
    ),
    (
        "ollama.gpu_not_used", "warn",
        "time=2026-08-21T18:50:09.120-07:00 level=WARN source=cuda_compat.go:70 "
        'msg="NVIDIA driver too old" device="NVIDIA GeForce RTX 5090" compute=12.0 driver=565 '
        'required_driver="570 or newer"',
        "ollama/ollama discover/cuda_compat.go@fb30760996871 (slog.Warn)",
    ),
    (
        "ollama.cuda_driver_unusable", "warn",
        "time=2025-05-30T22:17:28.371+08:00 level=INFO source=gpu.go:602 msg=\"no nvidia devices "
        'detected by library /usr/lib/x86_64-linux-gnu/libcuda.so.570.133.07"',
        "ollama/ollama discover/gpu.go@5f57b0ef4268 (v0.9.0, loadNVCUDAMgmt, slog.Info)",
    ),
    (
        "ollama.cuda_driver_unusable", "warn",
        "time=2024-09-17T15:04:08.215Z level=WARN source=gpu.go:556 msg=\"version mismatch between "
        'driver and cuda driver library - reboot or upgrade may be required" '
        "library=/usr/lib/x86_64-linux-gnu/libcuda.so.550.107.02 error=\"cuda driver library init "
        'failure: 803"',
        "ollama/ollama gpu/gpu.go@06d4fba851b9 (v0.3.10, LoadNVCUDAMgmt, slog.Warn)",
    ),
    # vLLM's CUTLASS W8A8 (FP8) GEMM entry points, raised as NotImplementedError
    # FlashInfer's and TensorRT-LLM's dense FP4 / MXFP8 / FP8 GEMM runners (RuntimeError from
    # std::runtime_error), and FlashInfer's backend requirement (BackendSupportedError)
    (
        "gemm.block_scaled_init_failed", "fail",
        "(EngineCore_DP0 pid=312) RuntimeError: [FP4 gemm Runner StreamK] FP4 Gemm cutlass kernel "
        "will fail for params. Error: Error Internal",
        "flashinfer-ai/flashinfer include/flashinfer/gemm/fp4_gemm_template_sm120.h@fb28d7242b35 "
        "(runGemm, scheduler_name \" StreamK\")",
    ),
    (
        "gemm.block_scaled_init_failed", "fail",
        "RuntimeError: [MXFP8 SM120 gemm Runner] Failed to run cutlass MXFP8 gemm on sm120. Error: "
        "Error Internal",
        "flashinfer-ai/flashinfer include/flashinfer/gemm/mxfp8_gemm_template_sm120.h@fb28d7242b35",
    ),
    (
        "gemm.block_scaled_init_failed", "fail",
        "RuntimeError: [TensorRT LLM Error][FP4 gemm Runner] SMEM size exceeds maximum allowed. "
        "Required 110592, got 101376",
        "NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/cutlass_kernels/fp4_gemm/"
        "nvfp4_nvfp4_gemm_template_sm120.h@0e8c4b0acc60",
    ),
    (
        "gemm.fp8_init_failed", "fail",
        "[rank0]: RuntimeError: [Fp8 Gemm Runner] cutlass kernel not implemented given the params",
        "flashinfer-ai/flashinfer include/flashinfer/gemm/fp8_gemm_template_sm100.h@fb28d7242b35",
    ),
    (
        "gemm.fp8_init_failed", "fail",
        "RuntimeError: [Fp8 Gemm Runner] failed to initialize",
        "flashinfer-ai/flashinfer include/flashinfer/gemm/fp8_gemm_template_sm100.h@fb28d7242b35",
    ),
    (
        "gemm.fp8_init_failed", "fail",
        "RuntimeError: [TensorRT-LLM Error][fp8RowwiseGemm Runner] Failed to initialize. Error: "
        "Error Internal",
        "NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/cutlass_kernels/fp8_rowwise_gemm/"
        "fp8_rowwise_gemm_template.h@0193dbd41892 (typedFp8RowwiseGemmKernelLauncher)",
    ),
    (
        "gemm.fp8_init_failed", "fail",
        "RuntimeError: [TensorRT-LLM Error][fp8RowwiseGemm Runner] fp8RowwiseGemm cutlass kernel "
        "not implemented given the params. Error: Error Internal",
        "NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/cutlass_kernels/fp8_rowwise_gemm/"
        "fp8_rowwise_gemm_template.h@0193dbd41892 (can_implement)",
    ),
    (
        "trtllm.unsupported_architecture", "fail",
        "RuntimeError: [TensorRT-LLM Error][CutlassFp8RowwiseGemmRunner][GEMM Dispatch] Arch "
        "unsupported for CUTLASS Fp8 Rowwise GEMM",
        "NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/cutlass_kernels/fp8_rowwise_gemm/"
        "fp8_rowwise_gemm_template.h@0193dbd41892 (dispatchToArch)",
    ),
    (
        "flashinfer.backend_unsupported_capability", "fail",
        "(EngineCore_DP0 pid=312) flashinfer.utils.BackendSupportedError: mm_fp4 does not support "
        "backend 'trtllm' with capability 120",
        "flashinfer-ai/flashinfer flashinfer/utils.py@fb28d7242b35 (backend_requirement)",
    ),
    (
        "flashinfer.backend_unsupported_capability", "fail",
        "BackendSupportedError: mm_mxfp8 does not support compute capability 89",
        "flashinfer-ai/flashinfer flashinfer/utils.py@fb28d7242b35 (backend_requirement, one "
        "implicit backend)",
    ),
    (
        "vllm.cutlass_scaled_mm_unsupported_arch", "fail",
        "(EngineCore_DP0 pid=312) NotImplementedError: No compiled cutlass_scaled_mm for CUDA "
        "device capability: 120. Required capability: 90 or 100",
        "vllm-project/vllm csrc/quantization/w8a8/cutlass/scaled_mm_entry.cu@0f120751344c "
        "(cutlass_moe_mm, TORCH_CHECK_NOT_IMPLEMENTED)",
    ),
    (
        "vllm.cutlass_scaled_mm_unsupported_arch", "fail",
        "NotImplementedError: No compiled cutlass_scaled_mm for a compute capability less than "
        "CUDA device capability: 120",
        "vllm-project/vllm csrc/quantization/w8a8/cutlass/scaled_mm_entry.cu@0f120751344c "
        "(cutlass_scaled_mm, TORCH_CHECK_NOT_IMPLEMENTED)",
    ),
    (
        "vllm.cutlass_scaled_mm_unsupported_arch", "fail",
        "[rank0]: NotImplementedError: No compiled get_cutlass_moe_mm_data: no cutlass_scaled_mm "
        "kernel for CUDA device capability: 121. Required capability: 90, 100, or 120",
        "vllm-project/vllm csrc/quantization/w8a8/cutlass/scaled_mm_entry.cu@0f120751344c "
        "(get_cutlass_moe_mm_data, TORCH_CHECK_NOT_IMPLEMENTED)",
    ),
]  # fmt: skip

# The generic detector must not add its own finding where a known signature names the line.
GENERIC = {"runtime.unrecognised_error", "runtime.unrecognised_fatal_error"}


def _docker(lines: list[str]) -> bytes:
    recs = [{"log": t + "\n", "stream": "stderr", "time": "2026-03-03T11:06:07.1Z"} for t in lines]
    return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in recs).encode()


def _journal_json(lines: list[str], *, as_bytes: bool = False) -> bytes:
    out: list[dict[str, object]] = []
    for n, t in enumerate(lines):
        message: object = list(t.encode()) if as_bytes else t
        entry = {"__CURSOR": f"s=0;i={n}", "__REALTIME_TIMESTAMP": "1772535967000000"}
        entry |= {"_BOOT_ID": "b", "SYSLOG_IDENTIFIER": "vllm", "PRIORITY": "4"}
        out.append({**entry, "MESSAGE": message})
    return "".join(json.dumps(r) + "\n" for r in out).encode()


def _journal_export(lines: list[str], *, binary: bool = False) -> bytes:
    out = b""
    for n, t in enumerate(lines):
        out += f"__CURSOR=s=0;i={n}\n__REALTIME_TIMESTAMP=1772535967000000\n".encode()
        data = t.encode()
        if binary or b"\n" in data:  # journalctl writes a value with a newline as binary
            out += b"MESSAGE\n" + struct.pack("<Q", len(data)) + data + b"\n"
        else:
            out += b"MESSAGE=" + data + b"\n"
        out += b"SYSLOG_IDENTIFIER=vllm\n_PID=42\n\n"
    return out


def _plain(lines: list[str]) -> bytes:
    return "".join(t + "\n" for t in lines).encode()


def _journal_json_bytes(lines: list[str]) -> bytes:
    return _journal_json(lines, as_bytes=True)


def _journal_export_binary(lines: list[str]) -> bytes:
    return _journal_export(lines, binary=True)


TRANSPORTS: dict[str, Callable[[list[str]], bytes]] = {
    "plain": _plain,
    "docker-json-file": _docker,
    "journald-json": _journal_json,
    "journald-json-bytes": _journal_json_bytes,
    "journald-export": _journal_export,
    "journald-export-binary": _journal_export_binary,
}


def _scan(paths: list[str], **kw: object) -> LogFacts:
    args: dict[str, object] = {
        "containers": [], "journal": False, "kernel_log": False, "host_root": Path("/"),
    }  # fmt: skip
    args.update(kw)
    return scan_sources(paths=paths, **args)  # type: ignore[arg-type]


def _judged(facts: LogFacts) -> dict[str, tuple[str, int]]:
    assert all(s.error is None for s in facts.sources), facts.sources
    return {f.signature: (f.severity, f.line) for f in judge_findings(facts)}


@pytest.mark.parametrize("engine", ["hyperscan", "re2", "find"])
@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
@pytest.mark.parametrize(
    ("signature", "severity", "line", "rendered_from"), WORDINGS, ids=[w[3] for w in WORDINGS]
)
def test_rendered_wording_is_its_finding(
    tmp_path: Path, engine: str, transport: str, signature: str, severity: str, line: str,
    rendered_from: str,
) -> None:  # fmt: skip
    path = tmp_path / "engine.log"
    # A neutral line first, so that the finding's line number shows the unwrapping.
    path.write_bytes(TRANSPORTS[transport](["INFO 05-02 07:54:18 [loader.py:1] starting", line]))
    got = _judged(_scan([str(path)], engine=engine))
    assert got == {signature: (severity, 2)}, rendered_from


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_every_wording_together_through_a_directory(tmp_path: Path, transport: str) -> None:
    (tmp_path / "logs").mkdir()
    lines = [w[2] for w in WORDINGS]
    (tmp_path / "logs" / "all.log").write_bytes(TRANSPORTS[transport](lines))
    got = {f.signature for f in judge_findings(_scan([str(tmp_path / "logs")]))}
    assert got == {w[0] for w in WORDINGS}


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_every_wording_through_stdin(transport: str) -> None:
    lines = [w[2] for w in WORDINGS]
    facts = _scan(["-"], stdin=io.BytesIO(TRANSPORTS[transport](lines)))
    assert facts.sources[0].kind == "stdin"
    assert {f.signature for f in judge_findings(facts)} == {w[0] for w in WORDINGS}


def _unwrap(raw: bytes, step: int) -> bytes:
    # The format is told by the first chunk (a read of up to CHUNK_BYTES); the rest in steps.
    head, rest = raw[:4096], raw[4096:]
    chunks = [head] + [rest[i : i + step] for i in range(0, len(rest), step)]
    _, out = sources._sniff(iter(chunks), "x", plain="file")
    return b"".join(out)


@pytest.mark.parametrize("step", [1, 3, 7, 64, 1 << 16])
@pytest.mark.parametrize("transport", [t for t in TRANSPORTS if t.startswith("journald")])
def test_journal_unwrapping_does_not_depend_on_chunking(transport: str, step: int) -> None:
    lines = ["first", 'Traceback (most recent call last):\n  File "x.py", line 1', "é last"]
    lines += [f"line {n} " + "x" * (n % 300) for n in range(200)]  # past the first chunk
    assert _unwrap(TRANSPORTS[transport](lines), step) == "".join(t + "\n" for t in lines).encode()


def test_journal_fields_other_than_message_are_not_scanned(tmp_path: Path) -> None:
    """A journal entry's other fields (a unit's description, a binary core dump field) are
    not log text: a warning's words there are no finding."""
    noisy = WORDINGS[0][2].encode()
    raw = (
        b"__CURSOR=s=0;i=1\nUNIT_DESCRIPTION=" + noisy + b"\nCOREDUMP\n"
        + struct.pack("<Q", len(noisy)) + noisy + b"\nMESSAGE=started\n\n"
    )  # fmt: skip
    assert _unwrap(raw, 5) == b"started\n"
    path = tmp_path / "export.log"
    path.write_bytes(raw)
    assert _judged(_scan([str(path)])) == {}


def test_a_journal_json_message_too_large_for_journalctl_is_no_line() -> None:
    """journalctl writes null for a field it will not print: nothing, not the word null."""
    raw = json.dumps({"__CURSOR": "c", "_BOOT_ID": "b", "MESSAGE": None}).encode() + b"\n"
    assert _unwrap(raw, 4) == b""


def test_nccl_2_30_warn_prefix_is_an_error_record(tmp_path: Path) -> None:
    """NCCL from v2.30 names file:line (function) before NCCL WARN (src/debug.cc@5067397c2676):
    an uncatalogued WARN in that form (CUCHECK's, src/include/cudawrap.h) is still an error."""
    line = (
        "node1:3120:3120 [0] transport/net.cc:512 (sendProxyConnect) NCCL WARN Cuda failure 1 "
        "'invalid argument'"
    )
    path = tmp_path / "nccl.log"
    path.write_bytes(_plain(["INFO 05-02 07:54:18 [loader.py:1] starting", line]))
    assert _judged(_scan([str(path)])) == {"runtime.unrecognised_error": ("warn", 2)}
