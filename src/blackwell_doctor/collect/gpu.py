"""NVML and CUDA facts, read in a child process under a hard deadline.

A wedged GPU or driver can block an NVML or CUDA call forever, even in uninterruptible
sleep; a CI gate must not hang with it. So the collection runs in
``python -m blackwell_doctor.collect._gpu_child``, which prints one JSON document
(:class:`GpuDocument`). Timeout, crash and garbage each become an :class:`Unavailable`
reason, never an exception. On a host without an NVIDIA driver neither library can be
loaded, and the answer comes at once, without importing pynvml or cuda-python
(``import cuda.bindings.driver`` alone costs about 0.16 s).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec

from blackwell_doctor.collect.childproc import ChildResult, run_child
from blackwell_doctor.collect.childproc import can_dlopen as _can_dlopen
from blackwell_doctor.facts.document import (
    ClockSample,
    CudaFacts,
    GpuHealth,
    NvmlFacts,
    ProbeFacts,
    Unavailable,
)

NVML_LIBRARY = "libnvidia-ml.so.1"
CUDA_LIBRARY = "libcuda.so.1"
CHILD_MODULE = "blackwell_doctor.collect._gpu_child"


class GpuDocument(msgspec.Struct, frozen=True, kw_only=True):
    """What the child prints: both halves, each possibly unavailable."""

    nvml: NvmlFacts | Unavailable
    cuda: CudaFacts | Unavailable
    # Every GPU's health as NVML answers it (issue 39), read in the same NVML session when
    # asked for (``--health``); None: not asked for.
    health: list[GpuHealth] | Unavailable | None = None


@dataclass(frozen=True)
class GpuRun:
    """What :func:`collect_gpu_run` read: the GPU facts, the probes, and (with ``health``)
    every GPU's health and NVML's readings while the probe kernels ran (by PCI bus id)."""

    nvml: NvmlFacts | Unavailable
    cuda: CudaFacts | Unavailable
    probes: ProbeFacts | Unavailable
    health: list[GpuHealth] | Unavailable | None = None
    samples: dict[str, list[ClockSample]] | Unavailable = field(default_factory=dict)
    sampling_errors: dict[str, str] = field(default_factory=dict)


def collect_gpu(
    timeout_s: float = 20.0, *, child_argv: Sequence[str] | None = None
) -> tuple[NvmlFacts | Unavailable, CudaFacts | Unavailable]:
    """NVML and CUDA facts, or why not, within ``timeout_s`` seconds.

    ``child_argv`` replaces the child's command line (tests: a child that hangs or prints
    garbage); with it the no-driver fast path is skipped, so the given child always runs.
    """
    document = collect_gpu_document(timeout_s, child_argv=child_argv)
    return document.nvml, document.cuda


def collect_gpu_document(
    timeout_s: float = 20.0, *, health: bool = False, child_argv: Sequence[str] | None = None
) -> GpuDocument:
    """:func:`collect_gpu`'s facts, with every GPU's health when ``health`` (issue 39)."""
    if child_argv is None:
        if not drivers_load():
            missing = Unavailable("nvml-library-not-found")
            return GpuDocument(
                nvml=missing,
                cuda=Unavailable("libcuda-not-found"),
                health=missing if health else None,
            )
        child_argv = [sys.executable, "-m", CHILD_MODULE, *(["--health"] if health else [])]
    outcome = _run_child(list(child_argv), timeout_s)
    if isinstance(outcome, Unavailable):
        return GpuDocument(nvml=outcome, cuda=outcome, health=outcome if health else None)
    return outcome


def drivers_load() -> bool:
    """Whether NVML or libcuda loads: without either, no GPU child need start."""
    return _can_dlopen(NVML_LIBRARY) or _can_dlopen(CUDA_LIBRARY)


def skipped_for(cuda: CudaFacts | Unavailable) -> Unavailable | None:
    """Why these CUDA facts leave nothing to probe, or None where there is a device."""
    if isinstance(cuda, Unavailable):
        return Unavailable(f"skipped:no CUDA device ({cuda.reason})")
    if not cuda.devices:
        return Unavailable("skipped:no CUDA device")
    return None


def _run_child(argv: list[str], timeout_s: float) -> GpuDocument | Unavailable:
    result = run_child(argv, timeout_s)
    failure = child_failure(result, timeout_s)
    if failure is not None:
        return failure
    return decode_document(result.stdout)


def child_failure(result: ChildResult, timeout_s: float) -> Unavailable | None:
    """Why a GPU facts child gave no document (it did not start, timed out, crashed), or
    None where it exited 0."""
    if result.ending == "start-failed":
        return Unavailable(f"gpu-collector-start-failed:{result.start_error}")
    if result.ending != "exited" or result.returncode is None:
        return Unavailable(f"gpu-collector-timeout:{timeout_s:g}s")
    crash = result.crash()
    return Unavailable(f"gpu-collector-crashed:{crash}") if crash else None


def decode_document(raw: bytes) -> GpuDocument | Unavailable:
    try:
        return msgspec.json.decode(raw, type=GpuDocument)
    except msgspec.DecodeError:
        return Unavailable("gpu-collector-bad-output")
