"""The child process of :func:`blackwell_doctor.collect.gpu.collect_gpu`.

Prints one :class:`~blackwell_doctor.collect.gpu.GpuDocument` as JSON on stdout and exits 0.
A bug in one half costs that half (an ``internal-error:`` reason, traceback on stderr), not
the other.
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Callable
from typing import TypeVar

import msgspec

from blackwell_doctor.collect.cuda import CudaApi, RealCuda, collect_cuda
from blackwell_doctor.collect.gpu import GpuDocument
from blackwell_doctor.collect.nvml import (
    NvmlHealthApi,
    RealNvml,
    collect_nvml,
    collect_nvml_and_health,
)
from blackwell_doctor.facts.document import GpuHealth, NvmlFacts, Unavailable

_T = TypeVar("_T")


def _guarded(collect: Callable[[], _T]) -> _T | Unavailable:
    try:
        return collect()
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        return Unavailable(f"internal-error:{type(exc).__name__}")


NvmlHalf = tuple[NvmlFacts | Unavailable, list[GpuHealth] | Unavailable | None]


def gpu_document(
    *,
    health: bool = False,
    nvml: NvmlHealthApi | None = None,
    cuda: CudaApi | None = None,
    first_on_nvml: Callable[[], None] | None = None,
) -> GpuDocument:
    """Both halves, read here (the probe child reads them too when it is the first GPU
    child of a ``check``: :func:`blackwell_doctor.collect.probe.runner.collect_gpu_and_probes`);
    with ``health``, every GPU's health too, in the same NVML session (issue 39).

    NVML is read on a thread of its own while this one initialises CUDA: cuInit (~200 ms on
    an H200) and NVML's init and reads (40-130 ms) both wait in native code that lets go of
    the interpreter (ctypes for NVML, cuda-bindings' ``nogil`` calls), so the document costs
    the longer of the two, not their sum (issue 36). ``first_on_nvml`` runs first on that
    thread (the probe child opens its clock sampler there); what it raises is raised here,
    once both halves are read. ``nvml``/``cuda``: the APIs (default: the real ones)."""
    nvml_api = nvml if nvml is not None else RealNvml()
    read: list[NvmlHalf] = []
    failed: list[BaseException] = []

    def read_nvml() -> None:
        try:
            if first_on_nvml is not None:
                first_on_nvml()
        except BaseException as exc:  # re-raised on the main thread, after the halves
            failed.append(exc)
        read.append(_nvml_half(nvml_api, health))

    thread = threading.Thread(target=read_nvml, name="nvml", daemon=True)
    thread.start()
    cuda_half = _guarded(lambda: collect_cuda(cuda if cuda is not None else RealCuda()))
    thread.join()
    if failed:
        raise failed[0]
    nvml_facts, gpu_health = read[0]
    return GpuDocument(nvml=nvml_facts, cuda=cuda_half, health=gpu_health)


def _nvml_half(api: NvmlHealthApi, health: bool) -> NvmlHalf:
    """The NVML facts, and with ``health`` every GPU's health (None without)."""
    if not health:
        return _guarded(lambda: collect_nvml(api)), None
    both = _guarded(lambda: collect_nvml_and_health(api))
    if isinstance(both, Unavailable):
        return both, both
    return both


def write_document(document: GpuDocument) -> None:
    """One line on stdout, flushed."""
    sys.stdout.buffer.write(msgspec.json.encode(document) + b"\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    write_document(gpu_document(health="--health" in argv))
    return 0


if __name__ == "__main__":
    from blackwell_doctor.collect.childexit import leave

    # Its answer written, it ends at once: no CUDA/NVML/NCCL teardown (childexit).
    leave(main(sys.argv[1:]))
