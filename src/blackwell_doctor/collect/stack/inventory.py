"""Read the GPU stack of one Python environment: its GPU distributions from package metadata
(the ``.dist-info``/``.egg-info`` folders on the interpreter's sys.path, found as
``importlib.metadata`` finds them: nothing is imported), the fatbin targets of every shared
object they installed (collect.stack.fatbin, cached by file identity), and Triton's ptxas
compiling for the targets asked.

The metadata is read here rather than through ``importlib.metadata``, which trusts it: it
reads every distribution's METADATA to learn its name (a non-UTF-8 one anywhere on the path
was a UnicodeDecodeError), opens files blocking (a FIFO named RECORD waits forever), lets
ELOOP through, and makes an object of every RECORD row (a million rows: 438 MB). Here a
folder's own name (PEP 427: ``name-version.dist-info``) says whether it is a GPU
distribution before anything in it is opened; only regular files are opened, without
blocking (collect.regularfile); METADATA's header fields are read from its first MiB; a
RECORD is streamed, row by row, to a cap. What cannot be read is a reason in the package's
``unreadable`` list, and the audit goes on.
"""

from __future__ import annotations

import csv
import errno
import operator
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from email.message import Message
from email.parser import HeaderParser
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Protocol

from blackwell_doctor.collect.regularfile import NotRegularFile, open_regular, read_regular
from blackwell_doctor.collect.stack.cache import CachedScan, load_cache, save_cache
from blackwell_doctor.collect.stack.fatbin import Malformed, NotElf, Target, scan_file
from blackwell_doctor.collect.stack.interpreter import Interpreter
from blackwell_doctor.collect.stack.ptxas import compile_probe
from blackwell_doctor.collect.stack.toolchain import find_nvcc, host_memory_bytes
from blackwell_doctor.facts.stack import (
    GpuPackage,
    KernelFile,
    KernelUnit,
    PtxasTarget,
    StackFacts,
)
from blackwell_doctor.ruledata.stack import StackData, normalise

# Shared objects, and standalone cubins (flashinfer-cubin ships its kernels as .cubin files).
SHARED_OBJECT = re.compile(r"(\.so(\.\d+)*|\.cubin)$")
_TORCH_CUDA = re.compile(r"^cuda\s*(?::[^=]*)?=\s*(?:'([^']*)'|\"([^\"]*)\"|None)", re.M)
MAX_UNREADABLE = 20
# A distribution's metadata is untrusted input too. Its header fields (Name, Version) come
# first in METADATA; a RECORD is read row by row up to a cap: torch's is ~2 MB and ~16,000
# rows (the largest in the test environment, kubernetes-validate's, 2.6 MB and 16,960).
MAX_METADATA_BYTES = 1 << 20
MAX_RECORD_BYTES = 64 << 20
MAX_RECORD_ROWS = 250_000
MAX_VERSION_PY = 64 << 10


def _arch_key(name: str) -> tuple[int, str]:
    digits = re.sub(r"\D", "", name)
    return (int(digits), name)


Triples = list[list[tuple[str, str, int]]]
# A kind of container: its SASS, PTX and LTO-IR targets, each sorted by architecture.
_Key = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]
_name = operator.itemgetter(0)


def _kind(names: set[str], prefix: str) -> tuple[str, ...]:
    return tuple(sorted((n for n in names if n.startswith(prefix)), key=_arch_key))


def _shape(names: tuple[str, ...]) -> tuple[_Key, tuple[int, ...], tuple[int, ...]]:
    """What a container's target names alone decide: its key, and where its PTX and its
    LTO-IR entries are."""
    distinct = set(names)
    key = (_kind(distinct, "sm_"), _kind(distinct, "compute_"), _kind(distinct, "lto_"))
    ptx = tuple(i for i, n in enumerate(names) if n.startswith("compute_"))
    lto = tuple(i for i, n in enumerate(names) if n.startswith("lto_"))
    return key, ptx, lto


def _units(scan: Triples) -> tuple[list[KernelUnit], tuple[int, int] | None]:
    """The kinds of container in ``scan`` with their counts and bytes, and the newest PTX
    ISA of any. What depends on a container's names alone is worked out once per list of
    names: a library's containers repeat a few (24,014 in the GPU wheels of
    ci/gpu-wheels.sh, 19 lists of names), and sorting the names of each again was ~490 ms of
    a warm audit on an H200 host (issue 36)."""
    # names -> (its key's totals [count, PTX bytes, LTO-IR bytes], PTX and LTO-IR indices)
    shapes: dict[tuple[str, ...], tuple[list[int], tuple[int, ...], tuple[int, ...]]] = {}
    totals: dict[_Key, list[int]] = {}
    versions: set[str] = set()  # of the PTX entries
    for unit in scan:
        names = tuple(map(_name, unit))
        shape = shapes.get(names)
        if shape is None:
            key, ptx_at, lto_at = _shape(names)
            shape = shapes[names] = (totals.setdefault(key, [0, 0, 0]), ptx_at, lto_at)
        total, ptx, lto = shape
        total[0] += 1
        if len(ptx) == 1:  # the common case, without a generator
            _, version, size = unit[ptx[0]]
            total[1] += size
            versions.add(version)
        elif ptx:
            total[1] += max(unit[i][2] for i in ptx)
            versions.update(unit[i][1] for i in ptx)
        if lto:
            total[2] += max(unit[i][2] for i in lto)
    isa: tuple[int, int] | None = None
    for version in versions:
        major, minor = (int(x) for x in version.split("."))
        isa = max(isa or (major, minor), (major, minor))
    units = [
        KernelUnit(sass=list(s), ptx=list(p), lto=list(lt), count=c, ptx_bytes=pb, lto_bytes=lb)
        for (s, p, lt), (c, pb, lb) in sorted(totals.items())
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
    """Fatbin scans through the cache: a file with the same identity is not read again,
    nor a path read twice in one audit (a RECORD that lists it twice)."""

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
        identity = (st.st_size, st.st_mtime_ns, st.st_ino)
        for known, counts in ((self.new, False), (self.old, True)):
            hit = known.get(key)
            if hit is not None and (hit.size, hit.mtime_ns, hit.inode) == identity:
                self.hits += counts
                self.new[key] = hit
                return st.st_size, None if hit.units is None else (hit.units, hit.loaded)
        found = scan_triples(key)
        if found is None:
            self.new[key] = CachedScan(*identity, None)
            return st.st_size, None
        units, loaded = found
        self.new[key] = CachedScan(*identity, units, loaded)
        return st.st_size, found

    def save(self) -> None:
        if self.cache_path is not None and self.new != self.old:
            save_cache(self.cache_path, {**self.old, **self.new})


@dataclass(frozen=True)
class Distribution:
    """An installed distribution: its metadata folder on a path (``torch-2.8.0.dist-info``,
    a ``.egg-info``, an egg's ``EGG-INFO``), its normalised name and version (METADATA's;
    the folder's when METADATA cannot be read) and, "FILE: reason", what of its metadata
    could not be read."""

    info: Path
    name: str
    version: str
    problems: tuple[str, ...] = ()

    def locate_file(self, path: str | PurePosixPath) -> Path:
        """Where a path of its RECORD is (relative to the folder that holds ``info``)."""
        return self.info.parent / path


def _metadata_folders(paths: Sequence[str]) -> Iterator[tuple[Path, str, str]]:
    """Each metadata folder on ``paths``, in path order, with the name and version its own
    name gives (``nvidia_nccl_cu12-2.27.7.dist-info``: nvidia-nccl-cu12, 2.27.7), found as
    importlib.metadata finds them (its Lookup): a child named ``*.dist-info`` or
    ``*.egg-info`` (any case), or the ``EGG-INFO`` of a path that is an ``.egg``."""
    for root in paths:
        try:
            children = os.listdir(root or ".")
        except OSError:
            continue
        base = os.path.basename(root).lower()
        for child in children:
            low = child.lower()
            if low.endswith((".dist-info", ".egg-info")):
                stem = child.rpartition(".")[0]
            elif base.endswith(".egg") and low == "egg-info":
                stem = os.path.basename(root).rpartition(".")[0]
            else:
                continue
            name, _, rest = stem.partition("-")
            yield Path(root, child), normalise(name), rest.partition("-")[0]


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def _bad_byte(exc: UnicodeDecodeError) -> str:
    return f"byte 0x{exc.object[exc.start]:02x} at offset {exc.start}"


def _headers(info: Path) -> tuple[Message | None, str | None]:
    """The header fields of a distribution's METADATA (PKG-INFO; an old ``.egg-info``
    file is itself one), and what stopped them being read ("torch-2.8.0.dist-info/METADATA:
    reason"). (None, None): there is none, so it is not an installed distribution
    (importlib.metadata gives it no name). Only the fields are decoded: a description that
    is not UTF-8 is not read."""
    for name in ("METADATA", "PKG-INFO", ""):
        path, what = (info / name, f"{info.name}/{name}") if name else (info, info.name)
        try:
            data = read_regular(path, MAX_METADATA_BYTES)[0]
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            if not name and isinstance(exc, NotRegularFile) and info.is_dir():
                return None, None
            return None, f"{what}: {_reason(exc)}"
        if not data:
            continue
        end = re.search(rb"\r?\n\r?\n", data)
        try:
            text = data[: end.start() if end else len(data)].decode("utf-8")
        except UnicodeDecodeError as exc:
            return None, f"{what}: not UTF-8 ({_bad_byte(exc)})"
        return HeaderParser().parsestr(text), None
    return None, None


def distributions(paths: Sequence[str], wanted: Callable[[str], bool]) -> dict[str, Distribution]:
    """The distributions installed on ``paths`` (a sys.path) whose name is ``wanted``, by
    normalised name, the first on the path of each name (the one ``import`` finds).

    A folder whose own name is not wanted is not opened (its METADATA is not read: names
    are taken from folder names first, as importlib.metadata's own lookup by name does;
    PEP 427 names a wheel's ``.dist-info`` by its escaped name and version). METADATA that
    cannot be read leaves the folder's name and version and a problem, never an error."""
    seen: dict[str, Distribution] = {}
    for info, folder_name, folder_version in _metadata_folders(paths):
        if not wanted(folder_name) or folder_name in seen:
            continue
        fields, problem = _headers(info)
        if problem is not None:
            dist = Distribution(info, folder_name, folder_version or "unknown", (problem,))
        elif fields is None:
            continue
        else:
            name = normalise(fields["Name"] or "")
            if not name or not wanted(name) or name in seen:
                continue
            dist = Distribution(info, name, fields["Version"] or "")
        seen.setdefault(dist.name, dist)
    return seen


def _lines(f: BinaryIO, what: str, notes: list[str]) -> Iterator[str]:
    """The lines of ``f`` as text, at most MAX_RECORD_ROWS of them and MAX_RECORD_BYTES,
    one at a time (a RECORD may be hostile: a million rows cost 438 MB as
    importlib.metadata's objects); a line that is not UTF-8 skipped; what was left out
    said in ``notes``."""
    left, rows, bad, first = MAX_RECORD_BYTES, 0, 0, ""
    while line := f.readline(left + 1):
        left -= len(line)
        if left < 0:
            notes.append(f"{what}: larger than {MAX_RECORD_BYTES >> 20} MiB: not read past it")
            break
        rows += 1
        if rows > MAX_RECORD_ROWS:
            notes.append(f"{what}: more than {MAX_RECORD_ROWS} rows: not read past them")
            break
        try:
            yield line.decode("utf-8")
        except UnicodeDecodeError as exc:
            if not bad:
                first = f"row {rows}, {_bad_byte(exc)}"
            bad += 1
    if bad:
        notes.append(f"{what}: {bad} row(s) not UTF-8, left out (the first: {first})")


def _files(info: Path, notes: list[str]) -> Iterator[str]:
    """The paths a distribution installed, from its RECORD (an egg-info's SOURCES.txt, one
    path a line), as streamed: none when it has neither (importlib.metadata's ``files``)."""
    for name in ("RECORD", "SOURCES.txt"):
        what = f"{info.name}/{name}"
        try:
            fd = open_regular(info / name)[0]
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            notes.append(f"{what}: {_reason(exc)}")
            return
        with os.fdopen(fd, "rb") as f:
            lines = _lines(f, what, notes)
            if name == "SOURCES.txt":
                yield from (line.rstrip("\r\n") for line in lines)
                return
            try:
                for row in csv.reader(lines):
                    if row:
                        yield row[0]
            except csv.Error as exc:
                notes.append(f"{what}: not CSV ({exc}): not read past it")
        return


def _torch_cuda(dist: Distribution) -> str | None:
    try:
        data = read_regular(dist.locate_file("torch/version.py"), MAX_VERSION_PY)[0]
    except OSError:
        return None
    m = _TORCH_CUDA.search(data.decode("utf-8", "replace"))
    return (m.group(1) or m.group(2)) if m else None


def _package(dist: Distribution, scanner: FileScans) -> GpuPackage:
    files: list[KernelFile] = []
    notes: list[str] = list(dist.problems)
    unreadable: list[str] = []
    more = 0
    count = 0
    listed: set[str] = set()
    for raw in _files(dist.info, notes):
        if not SHARED_OBJECT.search(raw.rstrip("/")):
            continue
        rel = PurePosixPath(raw)
        if not SHARED_OBJECT.search(rel.name):
            continue
        count += 1
        # One file however RECORD spells it (a/../a/lib.so, ./lib.so): each is scanned once.
        key = os.path.normpath(str(rel))
        if key in listed:
            continue
        listed.add(key)
        try:
            if "\0" in raw:  # csv takes a NUL; the path calls would raise ValueError
                raise OSError(errno.EINVAL, "a NUL byte in its name")
            size, scan = scanner.scan(dist.locate_file(rel))
        except (OSError, Malformed) as exc:
            if len(unreadable) < MAX_UNREADABLE:
                why = _reason(exc) if isinstance(exc, OSError) else f"malformed: {exc}"
                unreadable.append(f"{rel}: {why}")
            else:
                more += 1
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
    if more:
        unreadable.append(f"and {more} more file(s) that could not be read")
    return GpuPackage(
        name=dist.name,
        version=dist.version,
        cuda=_torch_cuda(dist) if dist.name == "torch" else None,
        shared_objects=count,
        files=files,
        unreadable=notes + unreadable,
    )


def shared_objects(dist: Distribution) -> list[Path]:
    """The shared objects ``dist`` installed (its RECORD), as paths on disk."""
    rows = _files(dist.info, [])
    return [dist.locate_file(r) for r in rows if SHARED_OBJECT.search(PurePosixPath(r).name)]


def gpu_distributions(paths: Sequence[str], data: StackData) -> dict[str, Distribution]:
    """The GPU distributions installed on ``paths`` (a sys.path), by normalised name."""
    return distributions(paths, data.inventory.wanted)


def inventory(
    paths: Sequence[str], data: StackData, scanner: FileScans
) -> tuple[dict[str, Distribution], list[GpuPackage]]:
    """The GPU distributions on ``paths`` and each one's package facts, its files read
    through ``scanner``."""
    seen = gpu_distributions(paths, data)
    return seen, [_package(seen[n], scanner) for n in sorted(seen)]


def read_stack(
    interpreter: Interpreter,
    data: StackData,
    *,
    ptxas_targets: Sequence[str],
    environ: Mapping[str, str],
    cache_path: Path | None,
    more_targets: Callable[[], Sequence[str]] | None = None,
) -> StackFacts:
    """The GPU stack of ``interpreter``'s environment (see the module's docstring).
    ``more_targets``: asked once ptxas has compiled for ``ptxas_targets``, for the targets
    to compile for after them (the GPUs' own, known when their facts are in: ``audit``
    reads the stack while the GPU child runs)."""
    paths = [p for p in interpreter.paths if os.path.isdir(p)]
    scanner = _Scanner(cache_path)
    seen, packages = inventory(paths, data, scanner)
    scanner.save()
    ptxas = []
    triton = seen.get("triton")
    if triton is not None:
        bin_dir = Path(str(triton.locate_file("triton/backends/nvidia/bin")))
        versions: dict[Path, str | None] = {}

        def compiled(targets: Sequence[str]) -> list[PtxasTarget]:
            wanted = [(t, data.ptxas.isa[t]) for t in targets if t in data.ptxas.isa]
            return compile_probe(bin_dir, wanted, environ, versions=versions) if wanted else []

        ptxas = compiled(ptxas_targets)
        if more_targets is not None:
            ptxas += compiled([t for t in more_targets() if t not in ptxas_targets])
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
