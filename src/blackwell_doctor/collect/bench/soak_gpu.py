"""Each GPU's used memory for ``bench --soak``, read by NVML in a child process under a
deadline, as ``collect`` reads NVML (:mod:`blackwell_doctor.collect.gpu`): a wedged driver
can block an NVML call forever, and a soak must not hang with it. Nothing here raises for
the host's state: without a driver the answer is an ``unavailable`` reason token at once
(no child is started), and a child that hangs, crashes or prints garbage is one too.

One child per sample costs an interpreter start and ``nvmlInit`` (tens to hundreds of
milliseconds) once per soak interval (5 s at the least), off the event loop in a thread.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import msgspec

from blackwell_doctor.collect.childproc import can_dlopen, run_child
from blackwell_doctor.collect.gpu import NVML_LIBRARY

CHILD_MODULE = "blackwell_doctor.collect.bench._soak_gpu_child"
MIB = 1024 * 1024


class GpuMemory(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What the child prints: bytes per GPU by NVML index (None: that GPU's read failed),
    or the reason token of a failure that left nothing to read."""

    used_bytes: list[int | None] = msgspec.field(default_factory=list)
    total_bytes: list[int | None] = msgspec.field(default_factory=list)
    error: str | None = None


class Sample(msgspec.Struct, frozen=True, kw_only=True):
    used_mib: list[float | None]
    total_mib: list[float | None]


def sample_gpu_memory(
    timeout_s: float = 10.0, *, child_argv: Sequence[str] | None = None
) -> Sample | str:
    """Used and total MiB of every GPU, or the reason token why not.

    ``child_argv`` replaces the child's command line (tests: a child that hangs or prints
    garbage); with it the no-driver fast path is skipped, so the given child always runs.
    """
    if child_argv is None:
        if not can_dlopen(NVML_LIBRARY):
            return "nvml-library-not-found"
        child_argv = [sys.executable, "-m", CHILD_MODULE]
    result = run_child(list(child_argv), timeout_s)
    if result.ending == "start-failed":
        return f"gpu-memory-reader-start-failed:{result.start_error}"
    if result.ending != "exited" or result.returncode is None:
        return f"gpu-memory-reader-timeout:{timeout_s:g}s"
    if crash := result.crash():
        return f"gpu-memory-reader-crashed:{crash}"
    try:
        doc = msgspec.json.decode(result.stdout, type=GpuMemory)
    except msgspec.DecodeError:
        return "gpu-memory-reader-bad-output"
    if doc.error is not None:
        return doc.error
    if not doc.used_bytes:
        return "nvml-sees-no-gpu"

    def mib(values: list[int | None]) -> list[float | None]:
        return [None if v is None else v / MIB for v in values]

    return Sample(used_mib=mib(doc.used_bytes), total_mib=mib(doc.total_bytes))
