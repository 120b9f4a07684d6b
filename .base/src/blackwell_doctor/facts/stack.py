"""The ``stack`` section of the facts document: the Python GPU stack a runtime will load,
as read from package metadata and from the headers of its shared objects (``audit``).

Facts only: which targets each file carries, what ptxas answered. Whether they run on a
GPU is decided by ``rules.stack`` against the facts' GPUs (or another host's).
"""

# Annotations are evaluated here, not kept as strings (no `from __future__ import
# annotations`): msgspec would otherwise eval every struct's strings when a decoder is
# built, ~4 ms of each command that reads facts.
from typing import Annotated, Literal

import msgspec

# A target as nvcc names it: sm_90, sm_120a, sm_100f (SASS); compute_120 (PTX).
TargetName = Annotated[str, msgspec.Meta(pattern=r"^(sm|compute)_[0-9]{2,3}[af]?$(?!\n)")]
# LTO-IR for nvJitLink (lto_75): linked and compiled at run time, not loaded as it is.
LtoName = Annotated[str, msgspec.Meta(pattern=r"^lto_[0-9]{2,3}[af]?$(?!\n)")]
# A PTX ISA version ("9.0").
IsaVersion = Annotated[str, msgspec.Meta(pattern=r"^[0-9]{1,2}\.[0-9]{1,2}$(?!\n)")]
Short = Annotated[str, msgspec.Meta(max_length=4096)]


class KernelUnit(msgspec.Struct, frozen=True, kw_only=True):
    """One kind of fatbin container in a file (a compilation unit's code) and how many of
    the file's containers carry exactly these targets."""

    sass: list[TargetName] = msgspec.field(default_factory=list)
    ptx: list[TargetName] = msgspec.field(default_factory=list)
    lto: list[LtoName] = msgspec.field(default_factory=list)
    count: Annotated[int, msgspec.Meta(ge=1)] = 1
    # The PTX a JIT would compile for these containers: the largest PTX entry of each,
    # summed (uncompressed bytes).
    ptx_bytes: Annotated[int, msgspec.Meta(ge=0)] = 0
    # The LTO-IR nvJitLink would link for these containers: the largest LTO-IR entry of
    # each, summed (uncompressed bytes).
    lto_bytes: Annotated[int, msgspec.Meta(ge=0)] = 0


class KernelFile(msgspec.Struct, frozen=True, kw_only=True):
    """A shared object of a package that carries GPU code, with what it carries."""

    path: Short  # relative to the site directory
    size: Annotated[int, msgspec.Meta(ge=0)]
    units: list[KernelUnit]  # .nv_fatbin: what the CUDA runtime registers
    # Fatbin containers kept in the file's data sections, which the library loads itself
    # (cuModuleLoadData): most of libcufft.so.12's kernels.
    loaded: list[KernelUnit] = msgspec.field(default_factory=list)
    # The newest PTX ISA among its PTX entries (the driver must know it to JIT them).
    ptx_isa: IsaVersion | None = None


class GpuPackage(msgspec.Struct, frozen=True, kw_only=True):
    name: Short  # the distribution's normalised name (torch, nvidia-nccl-cu12)
    version: Short
    # The CUDA version the package was built for, where it says (torch/version.py's cuda;
    # None in a CPU build).
    cuda: Short | None = None
    shared_objects: Annotated[int, msgspec.Meta(ge=0)] = 0  # files read
    files: list[KernelFile] = msgspec.field(default_factory=list)  # those with GPU code
    unreadable: list[Short] = msgspec.field(default_factory=list)  # "path: reason"


PtxasSource = Literal["TRITON_PTXAS_PATH", "TRITON_PTXAS_BLACKWELL_PATH", "bundled"]


class PtxasTarget(msgspec.Struct, frozen=True, kw_only=True):
    """ptxas asked to compile a trivial kernel for one target."""

    target: TargetName  # sm_120a
    path: Short
    source: PtxasSource
    version: Short | None  # "12.8" from --version
    ok: bool
    detail: Short = ""  # ptxas's first error line, or the reason it did not run
    # "compiled": ptxas ran on the trivial kernel; "release": judged from the CUDA release
    # written in its binary against checks/stack.toml [cold_start.min_cuda] (audit --image:
    # nothing of an image is run).
    by: Literal["compiled", "release"] = "compiled"


NvccSource = Literal["CUDA_HOME", "PATH", "/usr/local/cuda"]


class NvccFacts(msgspec.Struct, frozen=True, kw_only=True):
    """The nvcc a JIT build (FlashInfer's, Triton's none) would find, and its release."""

    path: Short
    source: NvccSource
    version: Short | None  # "12.8" from --version


class ImageSource(msgspec.Struct, frozen=True, kw_only=True):
    """The container image whose files were read (``audit --image``): never started."""

    ref: Short  # as the user named it
    id: Short  # the engine's image id (sha256:...)
    # How the interpreter was chosen: "entrypoint vllm: #!/opt/venv/bin/python3", "PATH".
    interpreter_from: Short = ""


class StackFacts(msgspec.Struct, frozen=True, kw_only=True, tag_field="status", tag="ok"):
    python: Short  # the interpreter whose environment was read
    python_version: Short
    site_dirs: list[Short]
    packages: list[GpuPackage] = msgspec.field(default_factory=list)
    # Triton's ptxas per target; empty when Triton is not installed.
    ptxas: list[PtxasTarget] = msgspec.field(default_factory=list)
    # What a JIT build at first start would use: nvcc (None: none found), MAX_JOBS as set
    # (None: unset, ninja then runs one job per CPU), the CPUs and memory of this host.
    nvcc: NvccFacts | None = None
    max_jobs: Short | None = None
    cpus: Annotated[int, msgspec.Meta(ge=1)] | None = None
    memory_bytes: Annotated[int, msgspec.Meta(ge=0)] | None = None
    # How many files came from the audit cache (unchanged path, size, mtime, inode).
    cached_files: Annotated[int, msgspec.Meta(ge=0)] = 0
    # The variables that force a runtime's backend, as set where the audit ran
    # (checks/backends.toml [environment]): VLLM_ATTENTION_BACKEND, ...
    environment: dict[Short, Short] = msgspec.field(default_factory=dict)
    # audit --image: the image read (its files, through the Docker API; nothing of it run).
    image: ImageSource | None = None
    # Why Triton's ptxas was not asked (an image is never started, so its ptxas cannot run).
    ptxas_not_run: Short | None = None
