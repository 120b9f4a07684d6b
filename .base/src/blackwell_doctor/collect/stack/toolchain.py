"""What a JIT build at first start would use: the nvcc FlashInfer's JIT finds (CUDA_HOME,
then PATH, then /usr/local/cuda: flashinfer/jit/cpp_ext.py), MAX_JOBS, this host's CPUs and
memory. ``nvcc --version`` runs isolated (collect.childproc.run_isolated: a fresh temporary
directory, PATH and LD_LIBRARY_PATH alone, a deadline, its output capped)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

from blackwell_doctor.collect.childproc import run_isolated
from blackwell_doctor.facts.stack import NvccFacts, NvccSource

DEFAULT_TIMEOUT_S = 10.0
_RELEASE = re.compile(rb"release (\d+\.\d+)")
# `nvcc --version` prints five lines: past this, killed.
MAX_OUTPUT_BYTES = 1 << 20


def find_nvcc(environ: Mapping[str, str], timeout_s: float = DEFAULT_TIMEOUT_S) -> NvccFacts | None:
    candidates: list[tuple[Path, NvccSource]] = []
    if environ.get("CUDA_HOME"):
        candidates.append((Path(environ["CUDA_HOME"]) / "bin" / "nvcc", "CUDA_HOME"))
    on_path = shutil.which("nvcc", path=environ.get("PATH", ""))
    if on_path:
        candidates.append((Path(on_path), "PATH"))
    candidates.append((Path("/usr/local/cuda/bin/nvcc"), "/usr/local/cuda"))
    for path, source in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            r = run_isolated(
                [str(path), "--version"],
                timeout_s,
                max_stdout_bytes=MAX_OUTPUT_BYTES,
                environ=environ,
            )
            m = _RELEASE.search(r.stdout) if r.ending == "exited" else None
            return NvccFacts(
                path=str(path), source=source, version=m.group(1).decode() if m else None
            )
    return None


def host_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None
