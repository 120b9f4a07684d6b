"""Dump the CUDA driver's own error names and strings (cuGetErrorName, cuGetErrorString).

    python3 tools/logvocab/driver_strings.py > tools/logvocab/cuda-driver-<version>.json

cuGetErrorString lives only in libcuda.so, which comes with the NVIDIA display driver (no
wheel carries it), so its texts cannot be read on a machine without a driver. This script
runs on one that has it (standard library only, no GPU context needed: neither call needs
cuInit) and writes what that driver answers, with the driver's version, as the pinned source
that tools/logvocab/fatal.py reads for the `cuda_driver` message terms.
"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path
from typing import Any

# CUresult values are below 1000 (cuda.h: CUDA_ERROR_UNKNOWN = 999); an unknown value makes
# both calls return CUDA_ERROR_INVALID_VALUE (1).
_MAX_CODE = 1000
_CUDA_SUCCESS = 0


def _driver_version() -> str:
    # The kernel module's own line: "NVRM version: NVIDIA UNIX ... Kernel Module  580.95.05 ..."
    try:
        text = Path("/proc/driver/nvidia/version").read_text(encoding="utf-8")
    except OSError:
        return "unknown"
    for word in text.split():
        parts = word.split(".")
        if len(parts) >= 2 and all(p.isdigit() for p in parts):
            return word
    return "unknown"


def dump() -> dict[str, Any]:
    lib = ctypes.CDLL("libcuda.so.1")
    get_name = lib.cuGetErrorName
    get_string = lib.cuGetErrorString
    for fn in (get_name, get_string):
        fn.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        fn.restype = ctypes.c_int
    api = ctypes.c_int(0)
    lib.cuDriverGetVersion(ctypes.byref(api))
    errors: dict[str, dict[str, Any]] = {}
    for code in range(_MAX_CODE):
        name = ctypes.c_char_p()
        text = ctypes.c_char_p()
        if get_name(code, ctypes.byref(name)) != _CUDA_SUCCESS or name.value is None:
            continue
        if get_string(code, ctypes.byref(text)) != _CUDA_SUCCESS or text.value is None:
            continue
        errors[name.value.decode()] = {"value": code, "string": text.value.decode()}
    return {
        "library": "libcuda.so.1",
        "driver_version": _driver_version(),
        "cuda_driver_api_version": api.value,
        "errors": errors,
    }


if __name__ == "__main__":
    json.dump(dump(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
