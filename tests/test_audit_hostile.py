"""``audit`` on an environment that lies (issue 32): the files a package installed are
untrusted input. A fatbin that would not let the scan go forward, an ELF whose section count
or offsets run past the file, a FIFO named like a library: each is a file the audit could
not read, with its reason, never a hang.

The files are made here, byte by byte, in the documented layouts (the gABI's ELF header and
section header; the fatbin container and entry headers of collect.stack.fatbin). What could
hang (a reader that never ends) is run in a child process under a deadline, so that a
regression fails instead of stopping the suite. The ELF reader's agreement with the real
thing is checked too: the sections read equal pyelftools' for every shared object
installed here."""

from __future__ import annotations

import importlib.metadata
import os
import struct
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest

from blackwell_doctor.collect.stack.fatbin import (
    FATBIN_MAGIC,
    Malformed,
    NotElf,
    read_elf,
    scan_file,
)
from blackwell_doctor.collect.stack.inventory import (
    SHARED_OBJECT,
)
from blackwell_doctor.facts.stack import GpuPackage

# A child that reads an environment must answer within this (it takes well under a second;
# the old readers never answered).
CHILD_DEADLINE_S = 120


@pytest.fixture(autouse=True)
def _own_scan_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


# -- files in their documented layouts ------------------------------------------------------

EM_X86_64, EM_CUDA = 62, 190
_EHDR = struct.Struct("<HHIQQQIHHHHHH")  # ELF64 after e_ident
_SHDR = struct.Struct("<IIQQQQIIQQ")


def _elf(
    sections: Sequence[tuple[str, bytes]],
    *,
    machine: int = EM_X86_64,
    shnum: int | None = None,
    shstrndx: int | None = None,
    shentsize: int = _SHDR.size,
    section0_size: int = 0,
    moved: dict[str, int] | None = None,
    name_at: dict[str, int] | None = None,
) -> bytes:
    """A little-endian ELF64 shared object: the header, each section's bytes, the section
    name table, then the section headers (the null section first, the name table last).
    The keywords put a lie in it: ``shnum`` for e_shnum, ``section0_size`` for section 0's
    sh_size (the count when e_shnum is 0), ``moved`` a section's sh_offset, ``name_at`` a
    section's sh_name."""
    moved, name_at = moved or {}, name_at or {}
    body = bytearray(64)
    placed = []
    for name, data in sections:
        body += bytes(-len(body) % 16)
        placed.append((name, moved.get(name, len(body)), len(data)))
        body += data
    names = bytearray(b"\0")
    name_offsets = {}
    for name, _ in [*sections, (".shstrtab", b"")]:
        name_offsets[name] = name_at.get(name, len(names))
        names += name.encode() + b"\0"
    names_at = len(body)
    body += names
    body += bytes(-len(body) % 8)
    shoff = len(body)
    body += _SHDR.pack(0, 0, 0, 0, 0, section0_size, 0, 0, 0, 0)
    for name, offset, size in placed:
        body += _SHDR.pack(name_offsets[name], 1, 2, 0, offset, size, 0, 0, 16, 0)
    body += _SHDR.pack(name_offsets[".shstrtab"], 3, 0, 0, names_at, len(names), 0, 0, 1, 0)
    count = len(placed) + 2
    body[:16] = b"\x7fELF\x02\x01\x01" + bytes(9)
    body[16:64] = _EHDR.pack(
        3,  # ET_DYN
        machine,
        1,
        0,
        0,
        shoff,
        0,
        64,
        56,
        0,
        shentsize,
        count if shnum is None else shnum,
        count - 1 if shstrndx is None else shstrndx,
    )
    return bytes(body)


def _container(arch: int = 120, header_size: int = 16) -> bytes:
    """One fatbin container holding one ELF (SASS) entry for sm_``arch``, payload empty."""
    entry = struct.pack("<HHIQ8xHHI8xQ8xQ", 2, 0, 64, 0, 8, 1, arch, 0, 0)
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, header_size, len(entry)) + entry


def _stalled_container() -> bytes:
    """A container whose header size and payload size are both 0: the next container
    would be looked for where this one starts."""
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 0, 0)


def _install(
    site: Path,
    name: str,
    version: str,
    files: Mapping[str, bytes | None],
    *,
    metadata: bytes | None = None,
    record: bytes | None = None,
) -> Path:
    """A distribution as pip leaves it: its files (None: a FIFO there), METADATA and a
    RECORD listing them."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_bytes(
        metadata or f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    )
    for rel, data in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        if data is None:
            os.mkfifo(site / rel)
        else:
            (site / rel).write_bytes(data)
    if record is None:
        rows = [f"{rel},," for rel in files] + [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]
        record = ("\n".join(rows) + "\n").encode()
    (info / "RECORD").write_bytes(record)
    return info


_CHILD = """
import sys
import msgspec
from blackwell_doctor.collect.stack.interpreter import Interpreter
from blackwell_doctor.collect.stack.inventory import read_stack
from blackwell_doctor.ruledata.stack import load_stack_data
stack = read_stack(Interpreter(sys.executable, "3", (sys.argv[1],)), load_stack_data(),
                   ptxas_targets=[], environ={}, cache_path=None)
sys.stdout.buffer.write(msgspec.json.encode(stack.packages))
"""


def _read_in_child(site: Path) -> dict[str, GpuPackage]:
    """:func:`_read` in a child process under CHILD_DEADLINE_S (for readers that never
    ended before their fix)."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, str(site)],
            capture_output=True,
            timeout=CHILD_DEADLINE_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading {site} did not end within {CHILD_DEADLINE_S} s")
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    packages = msgspec.json.decode(done.stdout, type=list[GpuPackage])
    return {p.name: p for p in packages}


# -- 1. a fatbin container that does not go forward -----------------------------------------


def test_a_fatbin_container_that_does_not_go_forward_ends_the_scan_as_malformed(
    tmp_path: Path,
) -> None:
    site = tmp_path / "site"
    good = _elf([(".nv_fatbin", _container(120))])
    # Header size 0 and payload size 0, after a good container: the scan stopped forever
    # at the second, its list of units growing.
    bad = _elf([(".nv_fatbin", _container(120) + _stalled_container())])
    _install(site, "nvidia-demo-cu12", "1.0", {"lib/libgood.so": good, "lib/libbad.so": bad})
    (p,) = _read_in_child(site).values()
    assert p.unreadable == [
        "lib/libbad.so: malformed: .nv_fatbin: fatbin container at 0x90: header size 0"
    ]
    # The other file of the package is read as ever.
    assert [(f.path, f.units[0].sass) for f in p.files] == [("lib/libgood.so", ["sm_120"])]
    assert p.shared_objects == 2


# -- 2. an ELF whose counts and offsets run past the file -----------------------------------


@pytest.mark.parametrize(
    ("lie", "reason"),
    [
        # e_shnum 0: the count is section 0's sh_size (the gABI's extension), here 2**40.
        ({"shnum": 0, "section0_size": 1 << 40}, "1099511627776 sections, more than 65536"),
        ({"shnum": 1000}, r"1000 section headers at 0x\w+ run past the end of the file"),
        ({"shstrndx": 7}, "section name table 7 of 3 sections"),
        ({"shentsize": 32}, "section header size 32, not 64"),
        (
            {"moved": {".nv_fatbin": 1 << 30}},
            r"\.nv_fatbin: 80 bytes at 0x40000000, past the end of the file",
        ),
        (
            {"name_at": {".nv_fatbin": 4000}},
            r"a section name at 4000, past the name table \(22 bytes\)",
        ),
    ],
)
def test_an_elf_whose_headers_run_past_the_file_is_malformed(
    tmp_path: Path, lie: dict[str, Any], reason: str
) -> None:
    path = tmp_path / "libx.so"
    path.write_bytes(_elf([(".nv_fatbin", _container(120))], **lie))
    with pytest.raises(Malformed, match=reason):
        scan_file(str(path))


def test_a_sparse_elf_claiming_2_to_the_40_sections_is_not_walked(tmp_path: Path) -> None:
    """The file seems to hold all the section headers it claims (a sparse file of 64 GiB,
    4 KiB of it on disk): pyelftools walked them, zeros, for as long as there seemed to be
    more (a real 64 MiB file took 90 s)."""
    site = tmp_path / "site"
    _install(site, "nvidia-sparse-cu12", "1.0", {"lib/libsparse.so": b""})
    lib = site / "lib" / "libsparse.so"
    lib.write_bytes(_elf([(".nv_fatbin", _container(120))], shnum=0, section0_size=1 << 40))
    try:
        os.truncate(lib, 64 << 30)
    except OSError as exc:
        pytest.skip(f"no sparse 64 GiB file here: {exc}")
    (p,) = _read_in_child(site).values()
    assert p.unreadable == ["lib/libsparse.so: malformed: 1099511627776 sections, more than 65536"]


def test_the_sections_read_equal_pyelftools_for_every_shared_object_here() -> None:
    """The oracle: pyelftools (which read them before) on the shared objects installed in
    this interpreter's environment, each section the audit reads."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.enums import ENUM_E_MACHINE

    wanted = {".nv_fatbin", ".rodata", ".lrodata", ".data", ".ldata", ".data.rel.ro"}
    compared = 0
    for path in _installed_shared_objects():
        fd = os.open(path, os.O_RDONLY)
        try:
            try:
                mine = read_elf(fd, os.fstat(fd).st_size)
            except NotElf:
                continue
        finally:
            os.close(fd)
        with path.open("rb") as f:
            elf = ELFFile(f)
            theirs = [
                (s.name, s["sh_offset"], s["sh_size"])
                for s in elf.iter_sections()
                if s.name in wanted and s["sh_type"] != "SHT_NOBITS"
            ]
            header = (ENUM_E_MACHINE[elf["e_machine"]], elf["e_flags"])
            assert (mine.machine, mine.flags) == header, path
        assert [(s.name, s.offset, s.size) for s in mine.sections] == theirs, path
        compared += 1
    assert compared >= 20


def _installed_shared_objects() -> Iterator[Path]:
    seen = 0
    for dist in importlib.metadata.distributions():
        for f in dist.files or ():
            if SHARED_OBJECT.search(f.name):
                path = Path(str(dist.locate_file(f)))
                if path.is_file():
                    yield path
                    seen += 1
                    if seen >= 400:
                        return


# -- 3. a FIFO where a library or a cubin should be -----------------------------------------


def test_a_fifo_named_like_a_library_or_a_cubin_is_not_a_regular_file(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _install(
        site,
        "flashinfer-cubin",
        "0.6.11",
        {"flashinfer_cubin/lib/libx.so": None, "flashinfer_cubin/cubins/k.cubin": None},
    )
    packages = _read_in_child(site)
    assert packages["flashinfer-cubin"].unreadable == [
        "flashinfer_cubin/lib/libx.so: not a regular file",
        "flashinfer_cubin/cubins/k.cubin: not a regular file",
    ]


# -- the readers against the real thing ----------------------------------------------------
