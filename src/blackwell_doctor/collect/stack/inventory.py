"""Read the GPU stack of one Python environment: its GPU distributions from package metadata
(``importlib.metadata`` over the interpreter's sys.path: nothing is imported), the fatbin
targets of every shared object they installed (collect.stack.fatbin, cached by file
identity), and Triton's ptxas compiling for the targets asked."""

from __future__ import annotations

import importlib.metadata as metadata
import os
import re
import stat
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from blackwell_doctor.collect.regularfile import NotRegularFile
from blackwell_doctor.collect.stack.cache import CachedScan, load_cache, save_cache
from blackwell_doctor.collect.stack.fatbin import Malformed, NotElf, Target, scan_file
from blackwell_doctor.collect.stack.interpreter import Interpreter
from blackwell_doctor.collect.stack.ptxas import compile_probe
from blackwell_doctor.collect.stack.toolchain import find_nvcc, host_memory_bytes
from blackwell_doctor.facts.stack import GpuPackage, KernelFile, KernelUnit, StackFacts
from blackwell_doctor.ruledata.stack import StackData, normalise

# Shared objects, and standalone cubins (flashinfer-cubin ships its kernels as .cubin files).
SHARED_OBJECT = re.compile(r"(\.so(\.\d+)*|\.cubin)$")
_TORCH_CUDA = re.compile(r"^cuda\s*(?::[^=]*)?=\s*(?:'([^']*)'|\"([^\"]*)\"|None)", re.M)
MAX_UNREADABLE = 20


def _arch_key(name: str) -> tuple[int, str]:
    digits = re.sub(r"\D", "", name)
    return (int(digits), name)


Triples = list[list[tuple[str, str, int]]]


def _kind(names: set[str], prefix: str) -> tuple[str, ...]:
    return tuple(sorted((n for n in names if n.startswith(prefix)), key=_arch_key))


def _units(scan: Triples) -> tuple[list[KernelUnit], tuple[int, int] | None]:
    counts: Counter[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = Counter()
    ptx_bytes: Counter[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = Counter()
    lto_bytes: Counter[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = Counter()
    isa: tuple[int, int] | None = None
    for unit in scan:
        names = {n for n, _, _ in unit}
        key = (_kind(names, "sm_"), _kind(names, "compute_"), _kind(names, "lto_"))
        for n, v, _ in unit:
            if n.startswith("compute_"):
                major, minor = (int(x) for x in v.split("."))
                isa = max(isa or (major, minor), (major, minor))
        counts[key] += 1
        ptx_bytes[key] += max((b for n, _, b in unit if n.startswith("compute_")), default=0)
        lto_bytes[key] += max((b for n, _, b in unit if n.startswith("lto_")), default=0)
    units = [
        KernelUnit(
            sass=list(s),
            ptx=list(p),
            lto=list(lt),
            count=c,
            ptx_bytes=ptx_bytes[(s, p, lt)],
            lto_bytes=lto_bytes[(s, p, lt)],
        )
        for (s, p, lt), c in sorted(counts.items())
    ]
    return units, isa


def _as_triples(units: Sequence[tuple[Target, ...]]) -> Triples:
    return [[(t.name, f"{t.version[0]}.{t.version[1]}", t.size) for t in unit] for unit in units]


Scan = tuple[Triples, Triples] | None


def scan_triples(path: str) -> Scan:
    """The fatbin units of the file at ``path`` (.nv_fatbin, then the ones the library
    loads itself), as the cache keeps them; None for a file that is not ELF. Malformed
    (fatbin) and OSError for one that cannot be read."""
    try:
        found = scan_file(path)
    except NotElf:
        return None
    return _as_triples(found.units), _as_triples(found.loaded)


class FileScans(Protocol):
    """Where a package's files are read: this host's disk (through the cache), or the
    files streamed out of a container image (collect.stack.image)."""

    def scan(self, path: Path) -> tuple[int, Scan]:
        """The size and scan of the file a distribution's RECORD locates at ``path``;
        OSError (NotRegularFile for a FIFO, a device, a directory) or Malformed when it
        cannot be read."""
        ...


class _Scanner:
    """Fatbin scans through the cache: a file with the same identity is not read again."""

    def __init__(self, cache_path: Path | None) -> None:
        self.cache_path = cache_path
        self.old = load_cache(cache_path) if cache_path is not None else {}
        self.new: dict[str, CachedScan] = {}
        self.hits = 0

    def scan(self, path: Path) -> tuple[int, Scan]:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            # Looked at before scan_file opens it (which refuses it too): the cache and the
            # size are of regular files only.
            raise NotRegularFile(str(path))
        key = str(path)
        hit = self.old.get(key)
        if hit is not None and (hit.size, hit.mtime_ns, hit.inode) == (
            st.st_size,
            st.st_mtime_ns,
            st.st_ino,
        ):
            self.hits += 1
            self.new[key] = hit
            return st.st_size, None if hit.units is None else (hit.units, hit.loaded)
        found = scan_triples(key)
        if found is None:
            self.new[key] = CachedScan(st.st_size, st.st_mtime_ns, st.st_ino, None)
            return st.st_size, None
        units, loaded = found
        self.new[key] = CachedScan(st.st_size, st.st_mtime_ns, st.st_ino, units, loaded)
        return st.st_size, found

    def save(self) -> None:
        if self.cache_path is not None and self.new != self.old:
            save_cache(self.cache_path, {**self.old, **self.new})


def _torch_cuda(dist: metadata.Distribution) -> str | None:
    try:
        text = dist.read_text("torch/version.py") or ""
    except OSError:
        text = ""
    if not text:
        loc = Path(str(dist.locate_file("torch/version.py")))
        try:
            text = loc.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
    m = _TORCH_CUDA.search(text)
    return (m.group(1) or m.group(2)) if m else None


def _package(dist: metadata.Distribution, scanner: FileScans) -> GpuPackage:
    name = normalise(dist.metadata["Name"] or "")
    files: list[KernelFile] = []
    unreadable: list[str] = []
    count = 0
    for rel in dist.files or ():
        if not SHARED_OBJECT.search(rel.name):
            continue
        path = Path(str(dist.locate_file(rel)))
        count += 1
        try:
            size, scan = scanner.scan(path)
        except (OSError, Malformed) as exc:
            if len(unreadable) < MAX_UNREADABLE:
                why = (
                    exc.strerror or type(exc).__name__
                    if isinstance(exc, OSError)
                    else f"malformed: {exc}"
                )
                unreadable.append(f"{rel}: {why}")
            continue
        if scan is not None and (scan[0] or scan[1]):
            units, isa = _units(scan[0])
            loaded, loaded_isa = _units(scan[1])
            newest = max((i for i in (isa, loaded_isa) if i is not None), default=None)
            files.append(
                KernelFile(
                    path=str(rel),
                    size=size,
                    units=units,
                    loaded=loaded,
                    ptx_isa=None if newest is None else f"{newest[0]}.{newest[1]}",
                )
            )
    return GpuPackage(
        name=name,
        version=dist.version,
        cuda=_torch_cuda(dist) if name == "torch" else None,
        shared_objects=count,
        files=files,
        unreadable=unreadable,
    )


def gpu_distributions(paths: Sequence[str], data: StackData) -> dict[str, metadata.Distribution]:
    """The GPU distributions installed on ``paths`` (a sys.path), by normalised name."""
    seen: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions(path=list(paths)):
        name = normalise(dist.metadata["Name"] or "")
        # The first one on sys.path is the one `import` finds.
        if name and name not in seen and data.inventory.wanted(name):
            seen[name] = dist
    return seen


def inventory(
    paths: Sequence[str], data: StackData, scanner: FileScans
) -> tuple[dict[str, metadata.Distribution], list[GpuPackage]]:
    """The GPU distributions on ``paths`` and each one's package facts, its files read
    through ``scanner``."""
    seen = gpu_distributions(paths, data)
    return seen, [_package(seen[n], scanner) for n in sorted(seen)]


def shared_objects(dist: metadata.Distribution) -> list[Path]:
    """The shared objects ``dist`` installed (its RECORD), as paths on disk."""
    return [
        Path(str(dist.locate_file(rel)))
        for rel in dist.files or ()
        if SHARED_OBJECT.search(rel.name)
    ]


def read_stack(
    interpreter: Interpreter,
    data: StackData,
    *,
    ptxas_targets: Sequence[str],
    environ: Mapping[str, str],
    cache_path: Path | None,
) -> StackFacts:
    """The GPU stack of ``interpreter``'s environment (see the module's docstring)."""
    paths = [p for p in interpreter.paths if os.path.isdir(p)]
    scanner = _Scanner(cache_path)
    seen, packages = inventory(paths, data, scanner)
    scanner.save()
    ptxas = []
    triton = seen.get("triton")
    if triton is not None:
        bin_dir = Path(str(triton.locate_file("triton/backends/nvidia/bin")))
        wanted = [(t, data.ptxas.isa[t]) for t in ptxas_targets if t in data.ptxas.isa]
        ptxas = compile_probe(bin_dir, wanted, environ)
    return StackFacts(
        python=interpreter.executable,
        python_version=interpreter.version,
        site_dirs=paths,
        packages=packages,
        ptxas=ptxas,
        nvcc=find_nvcc(environ) if "flashinfer-python" in seen else None,
        max_jobs=environ.get("MAX_JOBS"),
        cpus=os.cpu_count(),
        memory_bytes=host_memory_bytes(),
        cached_files=scanner.hits,
        environment={n: environ[n][:256] for n in data.backends.environment.names if n in environ},
    )
