"""The SASS and PTX targets of a shared object's embedded fatbins, read from headers only.

The ELF header and section table are read here with ``struct`` (read_elf), every count and
offset checked against the file's size before it is followed: a file a package installed
is untrusted input. pyelftools, which read them before, follows what the file says: an
``e_shnum`` of 0 sends it to section 0's ``sh_size`` for the count (the gABI's extension
past 65,280 sections), so a crafted 2**40 there made it walk section headers for as long
as the file seemed to have them (90 s for a 64 MiB file; without end for a sparse one),
and each section's name was read up to the next NUL wherever that was. LIEF (C++, 20+ MB
wheels) parses the whole binary up front. The fatbin containers in ``.nv_fatbin`` are
walked through their headers with ``struct`` over a memory map: no payload is read or
decompressed, so a gigabyte of kernels costs a few pages.
(``__nv_relfatbin``, relocatable device code for a later device link, is not loaded by the
runtime and is skipped: see FATBIN_SECTIONS.)

Some libraries keep most of their kernels outside ``.nv_fatbin``, as fatbin containers in
their own data and load them themselves (``cuModuleLoadData``): libcufft.so.12 (cuFFT 12.0,
CUDA 13) has one container in ``.nv_fatbin`` (sm_75) and 23,983 in ``.ldata``, SASS for
sm_75..sm_120, PTX and LTO-IR. cuobjdump lists only ``.nv_fatbin``. Those are read too, as
``loaded`` (see DATA_SECTIONS), and only when every entry of a container parses to its
exact end, so that bytes that merely look like a magic number are not taken for code.

Container layout (CUDA's fatbinary format, as cuobjdump reads it; public descriptions:
n-eiling/cuda-fatbin-decompression, GrigoryEvko/nvopen-tools
fatbin/FORMAT_SPECIFICATION.md), little-endian:

- header, 16 bytes: magic 0xBA55ED50, version u16 (1), header size u16 (16), payload size u64;
- entries, back to back: kind u16 (1 PTX, 2 ELF cubin, 8 LTO-IR for nvJitLink), u16, entry
  header size u32 (64, 80, 112 or 128), payload size u64 (the entry's data, 8-aligned,
  follows its header), ..., version minor u16 and major u16 at 24 (PTX: the PTX ISA, 9.0;
  ELF: the cubin ABI), the architecture u32 at 28 (90, 120, 121), flags u64 at 40 (0x2000 LZ4,
  0x8000 zstd: the payload is compressed) and, for a compressed payload, its uncompressed
  size u64 at 56.

The flags' architecture variants were read off fatbins nvcc 13.0 wrote for sm_90a, sm_100f,
sm_120a, compute_121a (tests/test_audit_real.py checks them against cuobjdump): 0x100000
marks an ``a`` (architecture-specific) target, 0x200000 an ``f`` (family) target.

A standalone cubin (``.cubin``, as flashinfer-cubin ships them; ``e_machine`` EM_CUDA) is
one unit of one SASS target, read from its ELF header as LLVM reads it
(``ELFObjectFileBase::getNVPTXCPUName``, llvm/BinaryFormat/ELF.h): under the CUDA ELF ABI
version 7 the SM is ``e_flags & 0xff`` (EF_CUDA_SM) and 0x800 marks ``a``
(EF_CUDA_ACCELERATORS_V1); from version 8 (CUDA 12.8+, Blackwell) it is
``(e_flags & 0xff00) >> 8`` (EF_CUDA_SM_MASK, EF_CUDA_SM_OFFSET) and 0x8 marks ``a``.
ptxas 12.8 sets that bit (sm_90a: 0x5a0d5a, sm_120a: 0x600780a) but ptxas 13.0 leaves it
clear (sm_120a: 0x6007802, as sm_120), so an ``a`` is also taken from the ptxas command
line a cubin records in ``.note.nv.tkinfo`` (``-arch sm_120a``), when that names the
header's SM (cuobjdump 13.5 names both kinds ``sm_120a``). An ``f`` cubin is named without its
``f``, as cuobjdump names it: the same compatibility rule (its family, minor >= its own).
"""

from __future__ import annotations

import mmap
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from blackwell_doctor.collect.regularfile import open_regular

Kind = Literal["sass", "ptx", "lto"]

FATBIN_MAGIC = 0xBA55ED50
# Only .nv_fatbin holds what the CUDA runtime registers and loads. __nv_relfatbin carries
# relocatable device code kept for a later device link (-rdc); in libnccl.so.2 it is 127
# containers beside .nv_fatbin's 16, and cuobjdump --list-elf does not list it either.
FATBIN_SECTIONS = (".nv_fatbin",)
# Where a library keeps fatbins it loads itself (libcufft.so.12: .ldata, the large-model
# data section).
DATA_SECTIONS = (".rodata", ".lrodata", ".data", ".ldata", ".data.rel.ro")
_HEADER = struct.Struct("<IHHQ")
# kind, _, header size, size, minor, major, arch, flags, uncompressed size
_ENTRY = struct.Struct("<HHIQ8xHHI8xQ8xQ")
_ENTRY_MIN = 64
_KINDS: dict[int, Kind] = {1: "ptx", 2: "sass", 8: "lto"}
_COMPRESSED = 0x2000 | 0x8000  # LZ4, zstd (payload at 56: its uncompressed size)
_ARCH_SPECIFIC = 0x100000
_FAMILY = 0x200000
ELF_MAGIC = b"\x7fELF"


@dataclass(frozen=True, order=True)
class Target:
    """One entry of a fatbin: SASS (a cubin), PTX or LTO-IR for an architecture, ``suffix``
    "a" (that compute capability only), "f" (its family) or ""."""

    kind: Kind
    arch: int  # 90, 120, 121
    suffix: Literal["", "a", "f"]
    # PTX: the PTX ISA version of the text ((9, 0)); SASS: the cubin's ABI version.
    version: tuple[int, int]
    size: int = 0  # the payload's bytes, uncompressed

    @property
    def name(self) -> str:
        """``sm_120a`` for SASS, ``compute_120a`` for PTX, ``lto_75`` for LTO-IR (nvcc's
        words)."""
        prefix = {"sass": "sm", "ptx": "compute", "lto": "lto"}[self.kind]
        return f"{prefix}_{self.arch}{self.suffix}"

    @property
    def cuobjdump_name(self) -> str:
        """The name ``cuobjdump --list-elf/--list-ptx`` prints (13.5 prints family cubins
        without their ``f``: ``sm_100``)."""
        return f"sm_{self.arch}{'' if self.suffix == 'f' else self.suffix}"


@dataclass(frozen=True)
class FatbinScan:
    """The fatbin containers of one file, each as the targets it holds, in file order:
    ``units`` from .nv_fatbin (the runtime registers them), ``loaded`` from the data
    sections (the library loads them itself)."""

    units: tuple[tuple[Target, ...], ...]
    loaded: tuple[tuple[Target, ...], ...] = ()

    @property
    def targets(self) -> list[Target]:
        """The .nv_fatbin targets (what cuobjdump lists)."""
        return [t for unit in self.units for t in unit]


class NotElf(Exception):
    """The file is not an ELF object (a script, a linker script named .so): no ELF magic."""


class Malformed(Exception):
    """An ELF file whose headers do not hold together (a count or an offset past the end of
    the file, a section name table that is not one), or a fatbin container that would not
    let the scan go forward: the reason in words. Damaged or hostile, it is reported as a
    file that could not be read, and nothing more of it is read."""


def _entries(buf: mmap.mmap | bytes, start: int, end: int) -> Iterator[Target]:
    off = start
    while off + _ENTRY_MIN <= end:
        kind, _, header_size, size, minor, major, arch, flags, full = _ENTRY.unpack_from(buf, off)
        if header_size < _ENTRY_MIN:
            return
        if kind in _KINDS:
            suffix: Literal["", "a", "f"] = (
                "a" if flags & _ARCH_SPECIFIC else "f" if flags & _FAMILY else ""
            )
            payload = full if flags & _COMPRESSED and full else size
            yield Target(_KINDS[kind], arch, suffix, (major, minor), payload)
        off += header_size + size


# Entry headers the strict walks of one file's data sections may read (scan_loaded). A
# magic number that is not a container is walked until its chain breaks, and a crafted
# section of overlapping would-be containers made that quadratic (issue 32's third audit:
# 64-byte records each a valid entry and a container "to the end": 4 MiB ~20 minutes).
# Real libraries keep a few containers of a few thousand entries as data.
MAX_LOADED_STEPS = 1 << 20


class _Steps:
    """What is left of :data:`MAX_LOADED_STEPS` for one file."""

    def __init__(self) -> None:
        self.left = MAX_LOADED_STEPS

    def take(self, at: int) -> None:
        self.left -= 1
        if self.left < 0:
            raise Malformed(
                f"fatbin magic at {at:#x}: more than {MAX_LOADED_STEPS} entry headers "
                "walked looking for containers"
            )


def _strict_container(
    buf: mmap.mmap | bytes, off: int, end: int, steps: _Steps
) -> tuple[Target, ...] | None:
    """The container at ``off`` if it is one beyond doubt: version 1, a 16-byte header,
    known entry kinds with plausible headers and architectures, chained to its exact end."""
    found, version, header_size, size = _HEADER.unpack_from(buf, off)
    first = off + header_size
    stop = first + size
    if (found, version, header_size) != (FATBIN_MAGIC, 1, _HEADER.size) or not (
        size >= _ENTRY_MIN and stop <= end
    ):
        return None
    at = first
    while at < stop:
        if at + _ENTRY_MIN > stop:
            return None
        steps.take(off)
        kind, _, entry_header, payload, _, _, arch, _, _ = _ENTRY.unpack_from(buf, at)
        if kind not in _KINDS or not (_ENTRY_MIN <= entry_header <= 256 and 20 <= arch < 1000):
            return None
        at += entry_header + payload
    return tuple(_entries(buf, first, stop)) if at == stop else None


def scan_loaded(
    buf: mmap.mmap | bytes, start: int, end: int, steps: _Steps | None = None
) -> list[tuple[Target, ...]]:
    """Fatbin containers stored as data between ``start`` and ``end`` (a data section):
    each magic number that starts a container beyond doubt (_strict_container). Malformed
    past :data:`MAX_LOADED_STEPS` entry headers walked (``steps``: the file's, shared by its
    sections)."""
    steps = steps if steps is not None else _Steps()
    units: list[tuple[Target, ...]] = []
    magic = struct.pack("<I", FATBIN_MAGIC)
    off = buf.find(magic, start, end)
    while off >= 0 and off + _HEADER.size <= end:
        unit = _strict_container(buf, off, end, steps)
        if unit is None:
            off = buf.find(magic, off + 1, end)
            continue
        units.append(unit)
        off = buf.find(magic, off + _HEADER.size + _HEADER.unpack_from(buf, off)[3], end)
    return units


def scan_containers(buf: mmap.mmap | bytes, start: int, end: int) -> list[tuple[Target, ...]]:
    """The containers between ``start`` and ``end`` of ``buf``. Containers follow one another,
    padded to 8 or 16 bytes (the linker aligns each); anything else between them is skipped
    by looking for the next magic."""
    units: list[tuple[Target, ...]] = []
    magic = struct.pack("<I", FATBIN_MAGIC)
    off = start
    while off + _HEADER.size <= end:
        found, _version, header_size, size = _HEADER.unpack_from(buf, off)
        if found != FATBIN_MAGIC:
            nxt = buf.find(magic, off + 1, end)
            if nxt < 0:
                break
            off = nxt
            continue
        if header_size < _HEADER.size:
            # A header that does not cover itself: the next container would be looked for
            # where this one starts (0 and 0: the same offset, forever).
            raise Malformed(f"fatbin container at {off:#x}: header size {header_size}")
        first = off + header_size
        stop = min(first + size, end)
        units.append(tuple(_entries(buf, first, stop)))
        off = first + size
    return units


def scan_file(path: str) -> FatbinScan:
    """The fatbin containers of the ELF file at ``path`` (none: no GPU code). Raises NotElf
    for a file that is not ELF, Malformed for an ELF file or a fatbin whose headers do not
    hold together, NotRegularFile for a FIFO, a device or a directory (never opened
    blocking) and OSError for a file that cannot be read."""
    fd, st = open_regular(path)
    try:
        elf = read_elf(fd, st.st_size)
        if elf.machine == EM_CUDA:
            note = elf.section(TKINFO)
            text = os.pread(fd, note.size, note.offset) if note and note.size < 65536 else None
            return FatbinScan(((cubin_target(elf, text),),))
        spans = [s for s in elf.sections if s.name in FATBIN_SECTIONS or s.name in DATA_SECTIONS]
        if not spans:
            return FatbinScan(())
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as buf:
            units: list[tuple[Target, ...]] = []
            loaded: list[tuple[Target, ...]] = []
            steps = _Steps()
            # Bytes of the file each scanned once: section headers may name the same bytes
            # again (65,536 headers over one 1 MiB span: hours); a real file's don't overlap.
            seen: list[tuple[int, int]] = []
            for section in sorted(spans, key=lambda sec: (sec.offset, -sec.size)):
                start, stop = section.offset, min(section.offset + section.size, len(buf))
                if seen and start < seen[-1][1]:
                    start = seen[-1][1]
                if start >= stop:
                    continue
                seen.append((start, stop))
                try:
                    if section.name in FATBIN_SECTIONS:
                        units.extend(scan_containers(buf, start, stop))
                    else:
                        loaded.extend(scan_loaded(buf, start, stop, steps))
                except Malformed as exc:
                    raise Malformed(f"{section.name}: {exc}") from None
    finally:
        os.close(fd)
    return FatbinScan(tuple(units), tuple(loaded))


EM_CUDA = 190
_CUDA_ABI_V1 = 7
_SM_V1, _ACCELERATORS_V1 = 0xFF, 0x800
_SM_MASK, _SM_OFFSET, _ACCELERATORS = 0xFF00, 8, 0x8
_TKINFO_ARCH = re.compile(rb"-arch[ =]sm_(\d+)([af]?)\b")
TKINFO = ".note.nv.tkinfo"


def cubin_target(elf: Elf, tkinfo: bytes | None) -> Target:
    """The SASS target of a standalone cubin (an EM_CUDA ELF), ``tkinfo`` the contents of
    its .note.nv.tkinfo: see the module docstring."""
    if elf.abi <= _CUDA_ABI_V1:
        sm, accelerated = elf.flags & _SM_V1, bool(elf.flags & _ACCELERATORS_V1)
    else:
        sm, accelerated = (elf.flags & _SM_MASK) >> _SM_OFFSET, bool(elf.flags & _ACCELERATORS)
    if not accelerated and tkinfo is not None:
        m = _TKINFO_ARCH.search(tkinfo)
        accelerated = m is not None and int(m.group(1)) == sm and m.group(2) == b"a"
    return Target("sass", sm, "a" if accelerated else "", (elf.abi, 0))


# The ELF header (after e_ident) and a section header, ELF64 and ELF32 (the gABI,
# https://refspecs.linuxfoundation.org/elf/gabi4+/ch4.eheader.html): e_type, e_machine,
# e_version, e_entry, e_phoff, e_shoff, e_flags, e_ehsize, e_phentsize, e_phnum,
# e_shentsize, e_shnum, e_shstrndx; sh_name, sh_type, sh_flags, sh_addr, sh_offset,
# sh_size, sh_link, sh_info, sh_addralign, sh_entsize.
_ELF_HEADER = {2: "HHIQQQIHHHHHH", 1: "HHIIIIIHHHHHH"}
_SECTION_HEADER = {2: "IIQQQQIIQQ", 1: "IIIIIIIIII"}
_SHT_NOBITS = 8
_SHN_XINDEX = 0xFFFF
# Far above any real shared object (the GPU wheels': at most 49 sections and a 520-byte name
# table); each section header is 64 bytes, so the table read is at most 4 MiB.
MAX_SECTIONS = 1 << 16
MAX_SECTION_NAMES = 1 << 20
_READ = frozenset((*FATBIN_SECTIONS, *DATA_SECTIONS, TKINFO))


@dataclass(frozen=True)
class Section:
    name: str
    offset: int
    size: int


@dataclass(frozen=True)
class Elf:
    """What the reader needs of an ELF file: the machine, the flags and ABI version (a
    cubin's target), and the sections it reads, each within the file."""

    machine: int
    flags: int
    abi: int
    sections: tuple[Section, ...]

    def section(self, name: str) -> Section | None:
        return next((s for s in self.sections if s.name == name), None)


def read_elf(fd: int, size: int) -> Elf:
    """The ELF header and section table of the file open at ``fd`` (``size`` bytes), every
    count and offset checked against the file before it is followed: NotElf without the
    magic, Malformed when they do not hold together. Only the sections named in FATBIN_SECTIONS,
    DATA_SECTIONS and TKINFO are kept (with contents: SHT_NOBITS has none)."""
    ident = os.pread(fd, 64, 0)
    if ident[:4] != ELF_MAGIC:
        raise NotElf()
    word, order = ident[4], ident[5]
    if word not in (1, 2) or order not in (1, 2):
        raise Malformed(f"ELF class {word}, data encoding {order}: neither 32/64-bit nor LSB/MSB")
    end = "<" if order == 1 else ">"
    header = struct.Struct(end + _ELF_HEADER[word])
    if len(ident) < 16 + header.size:
        raise Malformed(f"truncated: {size} bytes, shorter than the ELF header")
    fields = header.unpack_from(ident, 16)
    machine, flags, shoff, shentsize, shnum, shstrndx = (fields[i] for i in (1, 6, 5, 10, 11, 12))
    abi = ident[8]
    if shoff == 0:
        return Elf(machine, flags, abi, ())
    entry = struct.Struct(end + _SECTION_HEADER[word])
    if shentsize != entry.size:
        raise Malformed(f"section header size {shentsize}, not {entry.size}")
    if shoff + entry.size > size:
        raise Malformed(f"section headers at {shoff:#x}, past the end of the file ({size} bytes)")
    first = _unpack(entry, os.pread(fd, entry.size, shoff))
    # gABI: past SHN_LORESERVE sections e_shnum is 0 and the count is section 0's sh_size;
    # an e_shstrndx of SHN_XINDEX is section 0's sh_link.
    count = shnum or first[5]
    if shstrndx == _SHN_XINDEX:
        shstrndx = first[6]
    if count > MAX_SECTIONS:
        raise Malformed(f"{count} sections, more than {MAX_SECTIONS}")
    if shoff + count * entry.size > size:
        raise Malformed(
            f"{count} section headers at {shoff:#x} run past the end of the file ({size} bytes)"
        )
    if shstrndx == 0:  # SHN_UNDEF: no section has a name
        return Elf(machine, flags, abi, ())
    if shstrndx >= count:
        raise Malformed(f"section name table {shstrndx} of {count} sections")
    table = os.pread(fd, count * entry.size, shoff)
    if len(table) < count * entry.size:
        raise Malformed("the file ended while its section headers were read")
    names_at, names_size = entry.unpack_from(table, shstrndx * entry.size)[4:6]
    if names_size > MAX_SECTION_NAMES or names_at + names_size > size:
        raise Malformed(
            f"section name table of {names_size} bytes at {names_at:#x} "
            f"(the file has {size} bytes; at most {MAX_SECTION_NAMES} are read)"
        )
    names = os.pread(fd, names_size, names_at)
    kept = []
    for name_at, kind, _, _, offset, length, *_ in entry.iter_unpack(table):
        if name_at and name_at >= len(names):
            raise Malformed(
                f"a section name at {name_at}, past the name table ({len(names)} bytes)"
            )
        # The names read are short (.note.nv.tkinfo, 15 bytes): one that does not end within
        # 32 bytes is none of them, and a name is never looked for to the end of the file.
        stop = names.find(b"\0", name_at, name_at + 32)
        name = names[name_at:stop].decode("ascii", "replace") if stop >= 0 else ""
        if name not in _READ or kind == _SHT_NOBITS:
            continue
        if offset + length > size:
            raise Malformed(
                f"{name}: {length} bytes at {offset:#x}, past the end of the file ({size} bytes)"
            )
        kept.append(Section(name, offset, length))
    return Elf(machine, flags, abi, tuple(kept))


def _unpack(layout: struct.Struct, data: bytes) -> tuple[int, ...]:
    if len(data) < layout.size:
        raise Malformed("the file ended while its section headers were read")
    return layout.unpack_from(data)
