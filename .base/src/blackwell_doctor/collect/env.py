"""The environment variables that change how inference runtimes use the GPU."""

from __future__ import annotations

from collections.abc import Mapping

from blackwell_doctor.facts.redact import redact_value

PREFIXES = ("NCCL_", "CUDA_", "VLLM_", "NVIDIA_", "TORCH_", "FLASHINFER_", "SGLANG_", "HF_")
NAMES = frozenset(
    {
        "PYTORCH_CUDA_ALLOC_CONF",
        "PYTORCH_ALLOC_CONF",
        "OMP_NUM_THREADS",
        "LD_LIBRARY_PATH",
        "WSL_DISTRO_NAME",
        "WSL_INTEROP",
    }
)


def collect_env(environ: Mapping[str, str]) -> dict[str, str]:
    """Matching variables, sorted, with secret-looking values redacted (always)."""
    return {
        _text(name): redact_value(name, _text(value))
        for name, value in sorted(environ.items())
        if name in NAMES or name.startswith(PREFIXES)
    }


def _text(value: str) -> str:
    """Bytes that are not UTF-8 (Python keeps them as lone surrogates) shown as ``\\xNN``:
    a facts document is UTF-8 JSON."""
    return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
