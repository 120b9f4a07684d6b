"""The child process of :func:`blackwell_doctor.collect.gpu.collect_gpu`.

Prints one :class:`~blackwell_doctor.collect.gpu.GpuDocument` as JSON on stdout and exits 0.
A bug in one half costs that half (an ``internal-error:`` reason, traceback on stderr), not
the other.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from typing import TypeVar

import msgspec

from blackwell_doctor.collect.cuda import RealCuda, collect_cuda
from blackwell_doctor.collect.gpu import GpuDocument
from blackwell_doctor.collect.nvml import RealNvml, collect_nvml, collect_nvml_and_health
from blackwell_doctor.facts.document import Unavailable

_T = TypeVar("_T")


def _guarded(collect: Callable[[], _T]) -> _T | Unavailable:
    try:
        return collect()
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        return Unavailable(f"internal-error:{type(exc).__name__}")


def gpu_document(*, health: bool = False) -> GpuDocument:
    """Both halves, read here (the probe child reads them too when it is the first GPU
    child of a ``check``: :func:`blackwell_doctor.collect.probe.runner.collect_gpu_and_probes`);
    with ``health``, every GPU's health too, in the same NVML session (issue 39)."""
    if not health:
        return GpuDocument(
            nvml=_guarded(lambda: collect_nvml(RealNvml())),
            cuda=_guarded(lambda: collect_cuda(RealCuda())),
        )
    both = _guarded(lambda: collect_nvml_and_health(RealNvml()))
    cuda = _guarded(lambda: collect_cuda(RealCuda()))
    if isinstance(both, Unavailable):
        return GpuDocument(nvml=both, cuda=cuda, health=both)
    return GpuDocument(nvml=both[0], cuda=cuda, health=both[1])


def write_document(document: GpuDocument) -> None:
    """One line on stdout, flushed."""
    sys.stdout.buffer.write(msgspec.json.encode(document) + b"\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    write_document(gpu_document(health="--health" in argv))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
