"""Compile the probe kernels with NVRTC (cuda-python), with an on-disk cache.

The only module besides the probe's child process that imports ``cuda.bindings.nvrtc``, and
only inside :class:`RealNvrtc`. NVRTC needs no GPU: it compiles for the device's
architecture as a CUBIN (``sm_90 cubin``), or, when this NVRTC does not know that
architecture, as PTX for the newest one it knows below it, which the driver then compiles
at load time (``compute_120 PTX (driver JIT)``).

Cache: ``$BLACKWELL_DOCTOR_CACHE_DIR``, else ``$XDG_CACHE_HOME/blackwell-doctor/nvrtc``,
else ``~/.cache/blackwell-doctor/nvrtc``. One file per key, the key being the sha256 of the
sources, options, name expressions, target and NVRTC version. Each entry carries its
image's sha256 and length; an entry that does not verify is rebuilt (state ``rebuilt``),
never loaded. Entries are written to a temporary file and renamed into place.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import msgspec

from blackwell_doctor.collect.cuda_driver import c_string
from blackwell_doctor.facts.document import Unavailable
from blackwell_doctor.ruledata.resources import data_dir

CacheState = Literal["hit", "miss", "rebuilt"]
ImageKind = Literal["cubin", "ptx"]

# The probe sources, in compile order (concatenated into one program, one module).
SOURCES = ("smem_probe.cu", "blockscaled_mainloop.cu")
OPTIONS = ("--std=c++17",)
_CACHE_FORMAT = 1
_MAGIC = b"BWDNVRTC"


class NvrtcError(Exception):
    """An NVRTC call failed; ``reason`` is the token to record as :class:`Unavailable`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Target:
    """What to compile for: a CUBIN for ``sm_<arch>`` or PTX for ``compute_<arch>``."""

    arch: int  # e.g. 90, 120
    kind: ImageKind

    @property
    def option(self) -> str:
        prefix = "sm" if self.kind == "cubin" else "compute"
        return f"--gpu-architecture={prefix}_{self.arch}"

    @property
    def compiled_as(self) -> str:
        if self.kind == "cubin":
            return f"sm_{self.arch} cubin"
        return f"compute_{self.arch} PTX (driver JIT)"


@dataclass(frozen=True)
class CompiledProbes:
    image: bytes  # CUBIN, or PTX ending with a NUL (as cuModuleLoadData wants it)
    target: Target
    lowered_names: dict[str, str]  # name expression -> mangled kernel name
    cache: CacheState
    nvrtc_version: str

    @property
    def compiled_as(self) -> str:
        return self.target.compiled_as


class NvrtcApi(Protocol):
    """What :func:`compile_probes` asks of NVRTC; every method may raise NvrtcError."""

    def version(self) -> tuple[int, int]: ...
    def supported_archs(self) -> list[int]: ...
    def compile(
        self,
        source: bytes,
        name: str,
        options: Sequence[str],
        name_expressions: Sequence[str],
        kind: ImageKind,
    ) -> tuple[bytes, dict[str, str]]: ...


def choose_target(device_arch: int, supported: Sequence[int]) -> Target | Unavailable:
    """A CUBIN when NVRTC knows the device's architecture, else PTX for the newest one it
    knows that the device can run (PTX JIT-compiles forward, never backward)."""
    if device_arch in supported:
        return Target(arch=device_arch, kind="cubin")
    older = [arch for arch in supported if arch < device_arch]
    if not older:
        return Unavailable(f"nvrtc-arch-unsupported:sm_{device_arch}")
    return Target(arch=max(older), kind="ptx")


def default_cache_dir() -> Path:
    override = os.environ.get("BLACKWELL_DOCTOR_CACHE_DIR")
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "blackwell-doctor" / "nvrtc"


def probe_source() -> bytes:
    """The shipped probe sources as one program, each after a #line naming its file."""
    folder = data_dir("kernels_probe")
    parts = []
    for name in SOURCES:
        parts.append(f'#line 1 "{name}"\n'.encode())
        parts.append((folder / name).read_bytes())
        parts.append(b"\n")
    return b"".join(parts)


def cache_key(
    source: bytes,
    options: Sequence[str],
    name_expressions: Sequence[str],
    target: Target,
    nvrtc_version: str,
) -> str:
    digest = hashlib.sha256()
    for part in (
        f"format={_CACHE_FORMAT}".encode(),
        source,
        "\0".join(options).encode(),
        "\0".join(name_expressions).encode(),
        target.option.encode(),
        target.kind.encode(),
        f"nvrtc={nvrtc_version}".encode(),
    ):
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()


class _EntryHeader(msgspec.Struct, frozen=True, kw_only=True):
    key: str
    kind: str
    image_sha256: str
    image_len: int
    lowered_names: dict[str, str]


def read_entry(path: Path, key: str) -> tuple[bytes, dict[str, str]] | None:
    """The entry's image and lowered names if it is there and verifies, else None."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if not data.startswith(_MAGIC + b"\n"):
        return None
    header_line, sep, image = data[len(_MAGIC) + 1 :].partition(b"\n")
    if not sep:
        return None
    try:
        header = msgspec.json.decode(header_line, type=_EntryHeader)
    except msgspec.DecodeError:
        return None
    if (
        header.key != key
        or header.image_len != len(image)
        or hashlib.sha256(image).hexdigest() != header.image_sha256
    ):
        return None
    return image, dict(header.lowered_names)


def write_entry(
    path: Path, key: str, kind: ImageKind, image: bytes, lowered: dict[str, str]
) -> None:
    """Write atomically: a temporary file in the same folder, fsync, rename."""
    header = _EntryHeader(
        key=key,
        kind=kind,
        image_sha256=hashlib.sha256(image).hexdigest(),
        image_len=len(image),
        lowered_names=lowered,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(_MAGIC + b"\n" + msgspec.json.encode(header) + b"\n" + image)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise


def format_version(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def nvrtc_version(api: NvrtcApi | None = None) -> str | Unavailable:
    try:
        return format_version((api or RealNvrtc()).version())
    except NvrtcError as exc:
        return Unavailable(exc.reason)


def compile_probes(
    device_arch: int,
    name_expressions: Sequence[str],
    *,
    api: NvrtcApi | None = None,
    cache_dir: Path | None = None,
    source: bytes | None = None,
) -> CompiledProbes | Unavailable:
    """The probe module for a device of compute capability ``device_arch`` (e.g. 90), with
    the kernels named by ``name_expressions`` instantiated; from the cache when it can."""
    nvrtc = api or RealNvrtc()
    try:
        version = format_version(nvrtc.version())
        target = choose_target(device_arch, nvrtc.supported_archs())
    except NvrtcError as exc:
        return Unavailable(exc.reason)
    if isinstance(target, Unavailable):
        return target
    if source is None:
        source = probe_source()
    expressions = list(name_expressions)
    options = [*OPTIONS, target.option]
    key = cache_key(source, options, expressions, target, version)
    folder = cache_dir if cache_dir is not None else default_cache_dir()
    path = folder / f"{key}.{target.kind}"
    cached = read_entry(path, key)
    if cached is not None and all(expr in cached[1] for expr in expressions):
        image, lowered = cached
        return CompiledProbes(
            image=image, target=target, lowered_names=lowered, cache="hit", nvrtc_version=version
        )
    state: CacheState = "rebuilt" if path.exists() else "miss"
    try:
        image, lowered = nvrtc.compile(source, "probes.cu", options, expressions, target.kind)
    except NvrtcError as exc:
        return Unavailable(exc.reason)
    # A read-only or full cache costs the next run a compile, not this one its result.
    with contextlib.suppress(OSError):
        write_entry(path, key, target.kind, image, lowered)
    return CompiledProbes(
        image=image, target=target, lowered_names=lowered, cache=state, nvrtc_version=version
    )


# --------------------------------------------------------------------------- the real one


class _NeverRaised(Exception):
    pass


def first_log_line(log: str) -> str:
    """The first line of a compile log that says something (an error, ideally)."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in lines:
        if "error" in line:
            return line
    return lines[0] if lines else "no log"


class RealNvrtc:
    """:class:`NvrtcApi` over cuda-bindings. ``Any`` from the untyped binding stays here."""

    def __init__(self) -> None:
        self._nvrtc: Any = None
        self._lib_not_found: type[Exception] = _NeverRaised

    def _binding(self) -> Any:
        if self._nvrtc is None:
            try:
                from cuda.bindings import nvrtc  # noqa: TID251 -- the NVRTC adapter
            except ImportError:
                raise NvrtcError("cuda-binding-not-installed") from None
            try:
                from cuda.pathfinder import DynamicLibNotFoundError  # noqa: TID251
            except ImportError:  # cuda-bindings before pathfinder
                pass
            else:
                self._lib_not_found = DynamicLibNotFoundError
            self._nvrtc = nvrtc
        return self._nvrtc

    def _call(self, function: str, *args: Any) -> Any:
        nvrtc = self._binding()
        try:
            result, *values = getattr(nvrtc, function)(*args)
        except self._lib_not_found:
            raise NvrtcError("nvrtc-library-not-found") from None
        except (OSError, RuntimeError) as exc:
            if "nvrtc" in str(exc).lower():
                raise NvrtcError("nvrtc-library-not-found") from None
            raise
        if int(result) != 0:
            name = getattr(result, "name", None) or f"{int(result)}"
            raise NvrtcError(f"nvrtc-error:{name}")
        if not values:
            return None
        return values[0] if len(values) == 1 else tuple(values)

    def version(self) -> tuple[int, int]:
        major, minor = self._call("nvrtcVersion")
        return int(major), int(minor)

    def supported_archs(self) -> list[int]:
        return [int(arch) for arch in self._call("nvrtcGetSupportedArchs")]

    def compile(
        self,
        source: bytes,
        name: str,
        options: Sequence[str],
        name_expressions: Sequence[str],
        kind: ImageKind,
    ) -> tuple[bytes, dict[str, str]]:
        program = self._call("nvrtcCreateProgram", source, name.encode(), 0, [], [])
        try:
            for expression in name_expressions:
                self._call("nvrtcAddNameExpression", program, expression.encode())
            encoded = [option.encode() for option in options]
            nvrtc = self._binding()
            (result,) = nvrtc.nvrtcCompileProgram(program, len(encoded), encoded)
            if int(result) != 0:
                raise NvrtcError(f"nvrtc-compile-failed:{first_log_line(self._log(program))}")
            if kind == "cubin":
                size = int(self._call("nvrtcGetCUBINSize", program))
                buffer = b" " * size
                self._call("nvrtcGetCUBIN", program, buffer)
                image = bytes(buffer)
            else:
                size = int(self._call("nvrtcGetPTXSize", program))
                buffer = b" " * size
                self._call("nvrtcGetPTX", program, buffer)
                image = bytes(buffer)  # NUL-terminated already (size counts it)
            lowered = {
                expression: c_string(
                    self._call("nvrtcGetLoweredName", program, expression.encode())
                )
                for expression in name_expressions
            }
            return image, lowered
        finally:
            with contextlib.suppress(NvrtcError):
                self._call("nvrtcDestroyProgram", program)

    def _log(self, program: Any) -> str:
        size = int(self._call("nvrtcGetProgramLogSize", program))
        buffer = b" " * size
        self._call("nvrtcGetProgramLog", program, buffer)
        return c_string(buffer)
