"""blackwell-doctor: is this GPU inference host on the fast path for NVFP4 MoE serving?"""

try:
    # Written by the build (hatch-vcs, from the git tag: pyproject.toml [tool.hatch.version]).
    # (mypy: the file is absent from a source tree never built; present, it is checked.)
    from blackwell_doctor._version import (  # type: ignore[import-not-found, unused-ignore]
        __version__ as __version__,
    )
except ModuleNotFoundError:  # a source tree never built (PYTHONPATH=src): no version known
    __version__ = "0.0"

TOOL_NAME = "blackwell-doctor"
