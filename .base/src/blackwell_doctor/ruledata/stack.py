"""The data of the ``stack.*`` checks (checks/stack.toml): which distributions the audit
reads, the PTX ISA each CUDA driver JIT-compiles, the targets Triton's ptxas is asked for,
and the fix rows with their sources; and the backend forecast's rows (checks/backends.toml).
Validated at load (checkdata.py)."""

from __future__ import annotations

import functools
import re
from typing import Annotated, Literal

import msgspec

from blackwell_doctor.ruledata.checkdata import CatalogueError, load_shipped

Version = Annotated[str, msgspec.Meta(pattern=r"^[0-9]{1,2}\.[0-9]{1,2}$")]
SmTarget = Annotated[str, msgspec.Meta(pattern=r"^sm_[0-9]{2,3}a$")]


class Inventory(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    names: list[str]
    prefixes: list[str]

    def wanted(self, name: str) -> bool:
        """Whether the distribution ``name`` (any spelling) is a GPU package to read."""
        n = normalise(name)
        return n in self.names or any(n.startswith(p) for p in self.prefixes)


class PtxasData(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    probe: list[SmTarget]
    isa: dict[SmTarget, Version]


class Fix(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    package: str
    summary: str
    sources: list[str]


class ColdStart(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    gib_per_job: Annotated[float, msgspec.Meta(gt=0)]
    min_cuda: dict[SmTarget, Version]


class Jit(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    warn_bytes: Annotated[int, msgspec.Meta(gt=0)]


class CudaLibrary(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The compute capabilities one CUDA major release documents for NVIDIA's libraries."""

    cuda: str
    markers: list[str]
    min_cc: Version
    max_cc: Version
    sources: list[str]

    def covers(self, cc: tuple[int, int]) -> bool:
        low, high = _pair(self.min_cc), _pair(self.max_cc)
        return low is not None and high is not None and low <= cc <= high


class ImageWords(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What ``audit --image`` says when it cannot do a part of the audit (checks/stack.toml
    [image])."""

    ptxas_not_run: str
    ptxas_too_old: str
    not_found: str
    no_python: str
    no_site: str
    deadline: str


ForecastLayer = Literal["moe", "attention"]
ForecastVerdict = Literal["native", "fallback", "fails"]


class ForecastRow(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One row of checks/backends.toml: what ``runtime`` at ``versions`` selects for a
    layer of a checkpoint on ``cc``, read in its source at that release."""

    id: str
    runtime: str
    versions: str
    layer: ForecastLayer
    quantization: list[str] = msgspec.field(default_factory=list)
    # The checkpoint's quantization format must start with one of these ("modelopt"):
    # a runtime may treat ModelOpt and compressed-tensors NVFP4 apart. Empty: any.
    quant_formats: list[str] = msgspec.field(default_factory=list)
    # The model's architecture (config.json architectures[0]) must be one of these, where
    # the runtime selects per architecture (SGLang's model overrides). Empty: any.
    architectures: list[str] = msgspec.field(default_factory=list)
    mla: bool | None = None
    cc: list[Version]
    with_package: str | None = None
    without_package: str | None = None
    torch_cuda: str | None = None
    env: dict[str, list[str]] = msgspec.field(default_factory=dict)
    backend: str
    verdict: ForecastVerdict
    why: str
    fix: str
    moe_backend: str | None = None
    sources: Annotated[list[str], msgspec.Meta(min_length=1)]

    def holds(
        self,
        *,
        runtime: str,
        version: str,
        layer: str,
        quantization: str,
        quant_format: str = "",
        architecture: str | None = None,
        mla: bool,
        cc: tuple[int, int],
        packages: set[str],
        torch_cuda: str | None,
        environment: dict[str, str],
    ) -> bool:
        """Whether the row is the forecast for these facts (``version``: the runtime's)."""
        if runtime != self.runtime or layer != self.layer:
            return False
        if not _in(version, self.versions) or f"{cc[0]}.{cc[1]}" not in self.cc:
            return False
        if self.quantization and quantization not in self.quantization:
            return False
        if self.quant_formats and not quant_format.startswith(tuple(self.quant_formats)):
            return False
        if self.architectures and architecture not in self.architectures:
            return False
        if self.mla is not None and mla is not self.mla:
            return False
        if self.with_package is not None and self.with_package not in packages:
            return False
        if self.without_package is not None and self.without_package in packages:
            return False
        if self.torch_cuda is not None and (
            torch_cuda is None or not _in(torch_cuda, self.torch_cuda)
        ):
            return False
        return all(environment.get(name) in values for name, values in self.env.items())


class ForecastEnvironment(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    names: list[str]


class BackendData(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    environment: ForecastEnvironment
    forecast: list[ForecastRow]


def _in(version: str, specifier: str) -> bool:
    """``version`` ("0.13.0+cu128", "12.8") matches the PEP 440 ``specifier``; an
    unreadable version matches nothing."""
    # packaging is imported when a version is compared (start-up: docs/performance.md).
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import Version as PackageVersion

    try:
        return PackageVersion(version) in SpecifierSet(specifier)
    except (ValueError, InvalidSpecifier):  # InvalidVersion, or past int()'s 4,300 digits
        return False


class StackData(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    inventory: Inventory
    ptx_isa: dict[Version, Version]
    ptxas: PtxasData
    fix: list[Fix]
    cold_start: ColdStart
    jit: Jit
    cuda_library: list[CudaLibrary]
    image: ImageWords
    # checks/backends.toml, filled by load_stack_data.
    backends: BackendData = msgspec.field(
        default_factory=lambda: BackendData(environment=ForecastEnvironment(names=[]), forecast=[])
    )

    def cuda_library_for(self, name: str, paths: list[str]) -> CudaLibrary | None:
        """The row of NVIDIA's CUDA library wheel ``name`` (files at ``paths``), by a name
        suffix or a folder among its markers; None for any other package."""
        if not name.startswith("nvidia-"):
            return None
        for row in self.cuda_library:
            for m in row.markers:
                if name.endswith(m) or any(p.startswith(m) for p in paths):
                    return row
        return None

    def fix_for(self, package: str) -> Fix:
        return next(
            (f for f in self.fix if f.package == package),
            next(f for f in self.fix if f.package == "*"),
        )

    def driver_ptx_isa(self, cuda_version: str) -> tuple[int, int] | None:
        """The newest PTX ISA the driver of CUDA ``cuda_version`` ("12.8") JIT-compiles; for
        a version newer than the table, the table's newest (a newer driver knows at least
        that much); None for one older than the table or unreadable."""
        v = _pair(cuda_version)
        if v is None:
            return None
        known = sorted((_pair(k), _pair(i)) for k, i in self.ptx_isa.items())
        best = None
        for cuda, isa in known:
            if cuda is not None and cuda <= v:
                best = isa
        return best


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def version_pair(text: str) -> tuple[int, int] | None:
    """(12, 8) from "12.8" (or "12.8.61"); None when it does not start with one."""
    return _pair(text)


def _pair(text: str) -> tuple[int, int] | None:
    m = re.match(r"^(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


@functools.cache
def load_stack_data() -> StackData:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    data = load_shipped("stack.toml", StackData)
    if not any(f.package == "*" for f in data.fix):
        raise CatalogueError('checks/stack.toml: no [[fix]] with package = "*"')
    for target in data.ptxas.probe:
        if target not in data.ptxas.isa:
            raise CatalogueError(f"checks/stack.toml: [ptxas] probe {target} has no isa")
    backends = load_shipped("backends.toml", BackendData)
    seen: set[str] = set()
    for row in backends.forecast:
        if row.id in seen:
            raise CatalogueError(f"checks/backends.toml: forecast {row.id} twice")
        seen.add(row.id)
        for spec in [row.versions, row.torch_cuda]:
            try:
                SpecifierSet(spec or "")
            except InvalidSpecifier:
                raise CatalogueError(
                    f"checks/backends.toml: forecast {row.id}: bad specifier {spec!r}"
                ) from None
    return msgspec.structs.replace(data, backends=backends)
